"""OpenAI's request fields, checked, and its response shapes, for `llmbench serve`.

Every bad field is an `APIError` (HTTP 400, OpenAI's error object) whose message and ``param`` name
the field. Fields OpenAI defines and the engine cannot honour (``logit_bias``, ``suffix``, ``best_of``
other than ``n``, ``tools``) are refused rather than ignored; fields of other servers that the engine
has (vLLM's ``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``, ``min_tokens``,
``stop_token_ids``, ``include_stop_str_in_output``) are read; anything else is ignored, as vLLM does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, overload

from ..llm import SamplingParams

MAX_N = 64              # choices per prompt
MAX_STOP = 16           # stop strings (OpenAI allows 4; vLLM any number)
MAX_LOGPROBS = 20       # the engine's top-n
SEED_MIX = 0x9E3779B97F4A7C15


class APIError(Exception):
    """An error answered in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, status: int, message: str, param: str | None = None, type: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                             429: "rate_limit_error", 503: "service_unavailable"}.get(status, "server_error")
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad(param: str, message: str) -> APIError:
    """An HTTP 400 `APIError` naming the request parameter at fault."""
    return APIError(400, f"{param}: {message}", param=param)


# ---- fields ----

@overload
def _number(body: dict, name: str, default: float, lo: float | None = None, hi: float | None = None,
            lo_open: bool = False) -> float: ...
@overload
def _number(body: dict, name: str, default: None, lo: float | None = None, hi: float | None = None,
            lo_open: bool = False) -> float | None: ...
def _number(body: dict, name: str, default: float | None, lo: float | None = None, hi: float | None = None,
            lo_open: bool = False) -> float | None:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise bad(name, f"must be a number, got {v!r}")
    if lo is not None and (v < lo or (lo_open and v == lo)):
        raise bad(name, f"must be {'>' if lo_open else '>='} {lo:g}, got {v!r}")
    if hi is not None and v > hi:
        raise bad(name, f"must be <= {hi:g}, got {v!r}")
    return float(v)


@overload
def _int(body: dict, name: str, default: int, lo: int | None = None, hi: int | None = None) -> int: ...
@overload
def _int(body: dict, name: str, default: None, lo: int | None = None, hi: int | None = None) -> int | None: ...
def _int(body: dict, name: str, default: int | None, lo: int | None = None, hi: int | None = None) -> int | None:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad(name, f"must be an integer, got {v!r}")
    if lo is not None and v < lo:
        raise bad(name, f"must be >= {lo}, got {v}")
    if hi is not None and v > hi:
        raise bad(name, f"must be <= {hi}, got {v}")
    return v


def _bool(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise bad(name, f"must be true or false, got {v!r}")
    return v


def _stop(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise bad("stop", f"must be a string or a list of strings, got {v!r}")
    if len(v) > MAX_STOP:
        raise bad("stop", f"at most {MAX_STOP} stop strings, got {len(v)}")
    return [s for s in v if s]


def _stream_usage(body: dict, stream: bool) -> bool:
    so = body.get("stream_options")
    if so is None:
        return False
    if not isinstance(so, dict):
        raise bad("stream_options", f"must be an object, got {so!r}")
    if not stream:
        raise bad("stream_options", "is only allowed when stream is true")
    return _bool(so, "include_usage", False) if "include_usage" in so else False


def _refuse_unsupported(body: dict, n: int) -> None:
    if body.get("logit_bias"):
        raise bad("logit_bias", "is not supported by llmbench's engine")
    if body.get("suffix"):
        raise bad("suffix", "is not supported (no fill-in-the-middle)")
    best_of = body.get("best_of")
    if best_of is not None and best_of != n:
        raise bad("best_of", f"is not supported other than equal to n ({n})")
    for name in ("tools", "functions", "response_format"):
        v = body.get(name)
        if v and not (name == "response_format" and isinstance(v, dict) and v.get("type") == "text"):
            raise bad(name, "is not supported by llmbench serve")


def sampling(body: dict, max_tokens: int, logprobs: int | None) -> SamplingParams:
    """The engine's sampling parameters from a request body (``max_tokens`` and ``logprobs`` resolved)."""
    top_k = _int(body, "top_k", 0, lo=-1)
    ids = body.get("stop_token_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise bad("stop_token_ids", f"must be a list of token ids, got {ids!r}")
    seed = _int(body, "seed", None)
    min_tokens = _int(body, "min_tokens", 0, lo=0)
    if min_tokens > max_tokens:
        raise bad("min_tokens", f"must be <= max_tokens ({max_tokens}), got {min_tokens}")
    return SamplingParams(
        temperature=_number(body, "temperature", 1.0, lo=0.0),
        top_k=max(top_k, 0),
        top_p=_number(body, "top_p", 1.0, lo=0.0, hi=1.0, lo_open=True),
        min_p=_number(body, "min_p", 0.0, lo=0.0, hi=1.0),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, lo=0.0, lo_open=True),
        presence_penalty=_number(body, "presence_penalty", 0.0, lo=-2.0, hi=2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, lo=-2.0, hi=2.0),
        seed=None if seed is None else seed % (1 << 64),
        max_tokens=max_tokens, min_tokens=min_tokens, stop=_stop(body), stop_token_ids=list(ids),
        ignore_eos=_bool(body, "ignore_eos", False), logprobs=logprobs,
        include_stop_str_in_output=_bool(body, "include_stop_str_in_output", False))


def choice_seed(seed: int | None, j: int) -> int | None:
    """Choice j's seed: the request's for choice 0, mixed with j for the others (n > 1 differs, reproducibly)."""
    if seed is None or j == 0:
        return seed
    return (seed + SEED_MIX * j) % (1 << 64)


# ---- requests ----

@dataclass
class CompletionRequest:
    """A validated /v1/completions request body."""

    prompts: list[str | list[int]]
    max_tokens: int
    n: int
    echo: bool
    logprobs: int | None
    stream: bool
    include_usage: bool
    body: dict


def completion_request(body: dict) -> CompletionRequest:
    """Validate a /v1/completions body.

    Raises:
        APIError: a parameter is missing, malformed or unsupported (status 400, naming it).
    """
    prompt = body.get("prompt")
    if prompt is None:
        raise bad("prompt", "is required (a string, a list of strings, a list of token ids or a list of lists)")
    if isinstance(prompt, str):
        prompts: list = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = list(prompt)
    elif isinstance(prompt, list) and prompt and all(
            isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p) for p in prompt):
        prompts = list(prompt)
    else:
        raise bad("prompt", "must be a string, a list of strings, a non-empty list of token ids or a list of such lists")
    n = _int(body, "n", 1, lo=1, hi=MAX_N)
    _refuse_unsupported(body, n)
    stream = _bool(body, "stream", False)
    return CompletionRequest(prompts, _int(body, "max_tokens", 16, lo=0), n, _bool(body, "echo", False),
                             _int(body, "logprobs", None, lo=0, hi=MAX_LOGPROBS), stream,
                             _stream_usage(body, stream), body)


@dataclass
class ChatRequest:
    """A validated /v1/chat/completions request body."""

    messages: list[dict[str, str]]
    max_tokens: int | None
    n: int
    logprobs: int | None      # top_logprobs when logprobs is true, else None
    stream: bool
    include_usage: bool
    body: dict


def _content(m: dict, i: int) -> str:
    c = m.get("content")
    if c is None:
        return ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        parts = []
        for part in c:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise bad(f"messages[{i}].content", "only text parts ({\"type\": \"text\", \"text\": ...}) are supported")
            parts.append(part["text"])
        return "".join(parts)
    raise bad(f"messages[{i}].content", f"must be a string or a list of text parts, got {c!r}")


def chat_request(body: dict) -> ChatRequest:
    """Validate a /v1/chat/completions body.

    Raises:
        APIError: a parameter is missing, malformed or unsupported (status 400, naming it).
    """
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("messages", "is required: a non-empty list of {\"role\", \"content\"} objects")
    messages = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}]", "must be an object with a string role")
        messages.append({"role": m["role"], "content": _content(m, i)})
    n = _int(body, "n", 1, lo=1, hi=MAX_N)
    _refuse_unsupported(body, n)
    stream = _bool(body, "stream", False)
    want = _bool(body, "logprobs", False)
    top = _int(body, "top_logprobs", None, lo=0, hi=MAX_LOGPROBS)
    if top is not None and not want:
        raise bad("top_logprobs", "needs logprobs: true")
    max_tokens = _int(body, "max_completion_tokens", None, lo=0)
    if max_tokens is None:
        max_tokens = _int(body, "max_tokens", None, lo=0)
    return ChatRequest(messages, max_tokens, n, (top or 0) if want else None, stream, _stream_usage(body, stream), body)


# ---- responses ----

def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """An OpenAI ``usage`` object."""
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def top_dict(chosen: tuple[str, float], alternatives: list[tuple[str, float]]) -> dict[str, float]:
    """OpenAI's legacy top_logprobs entry: token text -> logprob, the chosen token included; tokens
    that share a text keep the higher logprob (so "greedy" reads as lp >= max of the entry)."""
    d: dict[str, float] = {}
    for text, lp in [chosen, *alternatives]:
        if text not in d or lp > d[text]:
            d[text] = lp
    return d


def chat_logprob(text: str, lp: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    """One token's entry in a chat completion's ``logprobs.content``, with its top alternatives."""
    return {"token": text, "logprob": lp, "bytes": list(text.encode()),
            "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())} for t, v in top]}
