"""The server adapter: any OpenAI-compatible server (vLLM, SGLang, llama-cpp-python's server, llama.cpp's
llama-server, Ollama) answers evaluation requests over HTTP, with lm-evaluation-harness's methods.

``loglikelihood`` is lm-eval's ``local-completions`` method. One POST /v1/completions per request with
``prompt = context + continuation``, ``echo: true``, ``logprobs: 1``, ``temperature: 0`` and
``max_tokens: 0`` (1 where the server refuses 0, or where 0 means "no limit", as in llama-cpp-python):
the server scores the prompt's own tokens. Trailing whitespace of the context is moved to the front of
the continuation first, as lm-eval does, so " Paris" is one token after "is" and not split off a
context that ends in a space. The continuation's tokens are the echoed prompt tokens that end past the
context (for tokens that do not span the boundary: those whose text offset is >= len(context); a token
that spans it carries continuation text and counts with the continuation). Their log-probabilities are
summed; greedy means each was the top-1 entry of its top_logprobs (lm-eval compares the values).

The positions come from the echoed token texts, which must spell the prompt (a BOS text such as "<s>"
before it is allowed); that is what text_offset counts in vLLM and llama-cpp-python. Where they do not
(a server that decodes each token alone and loses a SentencePiece word's leading space, or shows a
split UTF-8 character as U+FFFD), the continuation's tokens are counted instead, as lm-eval does:
len(tokens(context + continuation)) - len(tokens(context)), with ``tokenizer`` (the model's) when given,
else with the server's own count (usage.prompt_tokens of the context alone, one extra request per
distinct context, cached).

``loglikelihood_rolling`` sends the whole text the same way and sums every prompt token's
log-probability; ``n_tokens`` is how many were scored. Unlike the engine (lm-eval's windows of the
model's context, every text token scored after BOS or EOS) there are no windows: a text longer than
the server's context is refused (HTTP 400). And the text's first token is scored only where the server
echoes a BOS token before it with its own null (vLLM on Llama-family models); llama-cpp-python's
server leaves BOS out of the echo and nulls the first text token, and models without BOS (Qwen,
GPT-2-style) have nothing before it: there the first token's term is missing and ``n_tokens`` is one
fewer than the engine's (stories260K on llama-cpp-python: 11 tokens, -1.093, against the engine's 12,
-1.336).

``generate_until`` is one streamed POST /v1/completions (a prompt string) or /v1/chat/completions (a
tuple of messages, through the server's chat template), its Server-Sent Events parsed by the benchmark
client's `SSEParser` (`OpenAIClient.stream`); ``stream=False`` sends it non-streaming, with the same text,
finish reason, token count and log-probabilities. The streamed text is the events' pieces joined, the
log-probabilities their lists joined, the token count the final usage chunk's (``stream_options.
include_usage``; a server that sends none has its tokens counted: ``stats["counted_usage"]``). OpenAI's
API takes at most 4 stop strings: the first 4 go to the server and the text is cut client-side at the
first of all of them. Top log-probabilities (``logprobs`` of a request: chain-of-thought entropies ask
for 20) are checked against ``max_top_logprobs``: by default OpenAI's own limits at api.openai.com (20
on chat, 5 on completions; platform.openai.com's API reference), none elsewhere (vLLM takes up to its
--max-logprobs, 20 by default; llmbench serve 20); a server's refusal says which option to lower.

Requests run ``concurrency`` at a time (an asyncio semaphore). A 5xx, 429, dropped connection (before
the answer or mid-stream) or timeout is sent again up to ``retries`` times, ``backoff`` seconds apart,
doubling (a 429/503's Retry-After is honoured up to 60 s). Then a log-likelihood request raises
`AdapterError` saying what failed and what to do; a generation is answered with finish_reason "error"
(``Generation.error`` says why), which the runner leaves out of the records (``--resume`` asks again),
so one request never ends a run. Any other 4xx fails at once with the server's message.
``stats`` counts requests sent, retries and failures. Generations are handed to ``on_answer`` as each
finishes (the runner writes its per-sample record then).

Servers with prompt log-probabilities (echo + logprobs): vLLM, SGLang, llama-cpp-python's server (its
default logits_all=True). llama.cpp's llama-server refuses echo ("Only no echo is supported"; PRs
#15189, #17935 not merged) and Ollama returns none: they serve generative tasks only, and a
log-likelihood task on them raises `AdapterError` saying so, never a silent 0.0.

Tested in tests/test_eval_openai.py against a real HTTP server on 127.0.0.1 (tests/eval_server.py)
whose hand-written log-probabilities give the expected sums, and which plays each server behaviour
above (BOS echo, tokens that do not spell the prompt, max_tokens 0 refused or unlimited, no echo, 5xx,
429, dropped connections, hangs). Checked by hand against llama-cpp-python 0.3.36's server on
stories260K (``python -m llama_cpp.server --model stories260K.gguf``): its echo leaves BOS out and its
token texts carry SentencePiece's leading space (" Once" for a prompt "Once"), which the spelled-text
positions absorb; it reads max_tokens 0 as no limit (the adapter moved to 1); five log-likelihoods
agreed with the engine's (activations f32) within 2e-4 relative, greedy flags the same.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from ..backends.openai import OpenAIClient, ServerError, _api_base
from .api import (
    Adapter,
    AdapterError,
    GenerateUntil,
    Generation,
    LLAnswer,
    Loglikelihood,
    LoglikelihoodRolling,
    RollingAnswer,
)

__all__ = ["OpenAIAdapter"]

T = TypeVar("T")
Item = TypeVar("Item")

MAX_STOP = 4                    # OpenAI's API caps the stop list at 4 strings
# OpenAI's own API: chat's top_logprobs is 0..20, the legacy completions' logprobs at most 5 (API reference)
OPENAI_TOP_LOGPROBS = {"chat": 20, "completions": 5}
MAX_RETRY_AFTER_S = 60.0        # a server asking for a longer wait is waited on for this long
MODELS_TIMEOUT_S = 10.0         # GET /v1/models for environment(): a lookup, not a request to wait on
CONTEXT_CACHE = 4096            # server-counted contexts kept (a task's requests come context by context)

_SERVERS_WITH_ECHO = ("Servers that return them: vLLM, SGLang, llama-cpp-python's server (logits_all on, its "
                      "default). llama.cpp's llama-server and Ollama do not; they serve generative tasks "
                      "only. Or run the model on llmbench's engine (backend 'engine').")


class Encodes(Protocol):
    """A tokenizer: llmbench's `Tokenizer`, a Hugging Face ``tokenizers.Tokenizer`` (``.ids``) or
    ``transformers`` tokenizer."""

    def encode(self, text: str) -> Any: ...


@dataclass
class _Echo:
    """The prompt part of an echoed answer: token texts, log-probabilities (None for the first),
    top_logprobs, and usage.prompt_tokens when the server sent it."""

    tokens: list[str]
    logprobs: list[float | None]
    top: list[dict[str, float] | None]
    prompt_tokens: int | None


def _field(obj: dict[str, Any], key: str, kind: type[T]) -> T:
    """``obj[key]`` when it is a ``kind`` (dict or list), else an empty one: a server's JSON, read leniently."""
    v = obj.get(key)
    return v if isinstance(v, kind) else kind()


def move_spaces(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's ``_encode_pair``: the context's trailing whitespace goes to the continuation's front."""
    n = len(context) - len(context.rstrip())
    if n:
        return context[:-n], context[-n:] + continuation
    return context, continuation


def span_by_text(tokens: Sequence[str], prompt: str, context_len: int) -> list[int] | None:
    """Indices of the tokens that end past the context, when the token texts spell ``prompt`` (after
    any prefix such as a BOS text); None when they do not."""
    joined = "".join(tokens)
    if not joined.endswith(prompt):
        return None
    boundary = len(joined) - len(prompt) + context_len
    out, end = [], 0
    for i, t in enumerate(tokens):
        end += len(t)
        if end > boundary:
            out.append(i)
    return out


def cut_at_stops(text: str, stops: Sequence[str]) -> int:
    """Where the first stop string starts in ``text``, or -1."""
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else -1


class OpenAIAdapter(Adapter):
    """Answers evaluation requests through an OpenAI-compatible server.

    >>> a = OpenAIAdapter("http://127.0.0.1:8000/v1", "Qwen/Qwen2.5-0.5B")        # doctest: +SKIP
    >>> a.loglikelihood([Loglikelihood("The capital of France is", " Paris")])    # doctest: +SKIP
    [LLAnswer(logprob=-0.41, greedy=True)]

    ``base_url``: the server, with or without /v1. ``model``: the name it serves the model under.
    ``api_key``: default $OPENAI_API_KEY. ``concurrency``: requests in flight. ``retries``: times a
    5xx/429/dropped/timed-out request is sent again, ``backoff`` seconds apart at first, doubling.
    ``timeout``: seconds one request may take, connect to last byte. ``tokenizer``: the model's, to
    count the continuation's tokens when the server's token texts do not spell the prompt (without it
    the server counts them, one extra request per distinct context). ``stream``: generate with
    streaming (default) or not. ``max_top_logprobs``: the most top log-probabilities a generation may
    ask for (an int, or a dict {"chat": n, "completions": m}); default OpenAI's limits at api.openai.com,
    none elsewhere.
    """

    name = "openai"
    precision = "server"
    answers_as_they_finish = ("generate_until",)

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, concurrency: int = 8,
                 retries: int = 3, timeout: float = 600.0, tokenizer: Encodes | None = None,
                 backoff: float = 0.5, stream: bool = True,
                 max_top_logprobs: int | dict[str, int] | None = None) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (got {base_url!r}), "
                             "e.g. http://127.0.0.1:8000/v1")
        if not model:
            raise ValueError("model must name the model the server serves (GET /v1/models lists them)")
        if not (isinstance(concurrency, int) and concurrency >= 1):
            raise ValueError(f"concurrency must be an int >= 1 (got {concurrency!r})")
        if not (isinstance(retries, int) and retries >= 0):
            raise ValueError(f"retries must be an int >= 0 (got {retries!r})")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds (got {timeout!r})")
        if not backoff >= 0:
            raise ValueError(f"backoff must be >= 0 seconds (got {backoff!r})")
        self.base_url = _api_base(base_url)
        self.model = model
        self.api_key = api_key
        self.concurrency, self.retries = concurrency, retries
        self.timeout, self.backoff = float(timeout), float(backoff)
        self.tokenizer = tokenizer
        self.stream = bool(stream)
        if max_top_logprobs is None and re.match(r"https?://api\.openai\.com(:\d+)?/", self.base_url + "/"):
            max_top_logprobs = dict(OPENAI_TOP_LOGPROBS)
        if isinstance(max_top_logprobs, int):
            max_top_logprobs = {"chat": max_top_logprobs, "completions": max_top_logprobs}
        if max_top_logprobs is not None and not (
                isinstance(max_top_logprobs, dict) and set(max_top_logprobs) <= {"chat", "completions"}
                and all(isinstance(v, int) and v >= 0 for v in max_top_logprobs.values())):
            raise ValueError("max_top_logprobs must be an int >= 0 or {'chat': n, 'completions': m} "
                             f"(got {max_top_logprobs!r})")
        self.max_top_logprobs: dict[str, int] = dict(max_top_logprobs or {})
        #: requests sent (retries included), retries among them, requests given up on
        self.stats: dict[str, int] = {"requests": 0, "retries": 0, "failures": 0}
        # max_tokens for echo requests: None until the first one shows whether the server takes 0
        self.echo_max_tokens: int | None = None
        self._ctx_tokens: dict[str, int] = {}       # server-counted context tokens, per context
        self._server: dict[str, Any] | None = None  # what /v1/models said about the model

    # ---- the three request kinds ----

    def loglikelihood(self, reqs: Sequence[Loglikelihood]) -> list[LLAnswer]:
        if not reqs:
            return []
        pairs = [move_spaces(r.context, r.continuation) for r in reqs]
        counting: dict[str, asyncio.Task[int]] = {}     # contexts being counted by the server, this call

        async def one(client: OpenAIClient, pair: tuple[str, str]) -> LLAnswer:
            context, continuation = pair
            prompt = context + continuation
            echo = await self._echo(client, prompt)
            span = span_by_text(echo.tokens, prompt, len(context))
            if span is None:
                n = await self._count_continuation(client, context, prompt, echo, counting)
                span = list(range(len(echo.tokens) - n, len(echo.tokens)))
            return self._score(echo, span, continuation)

        return self._run(lambda c: self._each(c, pairs, one, probe=True))

    def loglikelihood_rolling(self, reqs: Sequence[LoglikelihoodRolling]) -> list[RollingAnswer]:
        if not reqs:
            return []

        async def one(client: OpenAIClient, text: str) -> RollingAnswer:
            if not text:
                return RollingAnswer(0.0, 0)
            echo = await self._echo(client, text, rolling=True)
            scored = [lp for lp in echo.logprobs if lp is not None]
            return RollingAnswer(float(sum(scored)), len(scored))

        return self._run(lambda c: self._each(c, [r.text for r in reqs], one, probe=True))

    def generate_until(self, reqs: Sequence[GenerateUntil],
                       on_answer: Callable[[int, Generation], None] | None = None) -> list[Generation]:
        if not reqs:
            return []
        for r in reqs:          # before any request goes out: one refusal would be every request's
            if r.logprobs is not None:
                self.check_top_logprobs(r.logprobs, chat=not isinstance(r.context, str))
        return self._run(lambda c: self._each(c, list(reqs), self._generate, probe=False, on_answer=on_answer))

    def top_logprobs_limit(self, chat: bool = False) -> int | None:
        """The most top log-probabilities a generation may ask for, None where no limit is known."""
        return self.max_top_logprobs.get("chat" if chat else "completions")

    def check_top_logprobs(self, n: int, chat: bool = False) -> None:
        """Raise `AdapterError` when ``n`` top log-probabilities are more than this server gives."""
        limit = self.top_logprobs_limit(chat)
        if limit is not None and n > limit:
            api = "chat" if chat else "completions"
            raise AdapterError(
                f"{n} top log-probabilities per token asked for, but {self.base_url}'s {api} API gives at most "
                f"{limit} (OpenAI's: 20 on chat, 5 on completions): run with --top-logprobs {limit} (top_logprobs="
                f"{limit}), or tell the adapter the server's own limit (max_top_logprobs=)")

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {"backend": "openai", "base_url": self.base_url, "model": {"name": self.model}}
        if self._server is None:
            try:
                self._server = self._run(self._models_entry, timeout=min(self.timeout, MODELS_TIMEOUT_S))
            except ServerError as e:
                env["server_error"] = str(e)
        env["server"] = self._server
        env.update(self.stats)
        env.update({"concurrency": self.concurrency, "retries_allowed": self.retries, "timeout_s": self.timeout,
                    "echo_max_tokens": self.echo_max_tokens})
        return env

    # ---- log-likelihood ----

    async def _echo(self, client: OpenAIClient, prompt: str, rolling: bool = False) -> _Echo:
        """Send ``prompt`` with echo and return its own tokens' log-probabilities."""
        mt = 0 if self.echo_max_tokens is None else self.echo_max_tokens
        body = {"model": self.model, "prompt": prompt, "max_tokens": mt, "echo": True, "logprobs": 1,
                "temperature": 0.0}
        try:
            obj = await self._post(client, body)
        except ServerError as e:
            if not (mt == 0 and e.status in (400, 422)):
                raise self._refused(e, echo=True, rolling=rolling) from None
            body["max_tokens"] = mt = 1                 # a server that wants max_tokens >= 1
            try:
                obj = await self._post(client, body)
            except ServerError as e1:
                raise self._refused(e1, echo=True, rolling=rolling) from None
            self.echo_max_tokens = 1
        usage = _field(obj, "usage", dict)
        n_gen = usage.get("completion_tokens")
        if not isinstance(n_gen, int):
            n_gen = mt
        if mt == 0 and self.echo_max_tokens is None:
            # llama-cpp-python reads max_tokens 0 as "no limit": ask for one token from now on
            self.echo_max_tokens = 1 if n_gen > 0 else 0
        return self._prompt_part(obj, prompt, n_gen, usage.get("prompt_tokens"))

    def _no_prompt_logprobs(self, why: str) -> AdapterError:
        self.stats["failures"] += 1
        return AdapterError(
            f"the server at {self.base_url} does not return prompt log-probabilities (echo + logprobs on "
            f"/v1/completions), which log-likelihood tasks (multiple choice such as MMLU, rolling "
            f"log-likelihood) need: {why}. {_SERVERS_WITH_ECHO}")

    def _prompt_part(self, obj: dict[str, Any], prompt: str, n_gen: int, prompt_tokens: Any) -> _Echo:
        """The prompt's tokens in an echoed answer: all but the ``n_gen`` generated ones at the end."""
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._no_prompt_logprobs(f"its answer has no choices ({str(obj)[:200]})")
        lp = choices[0].get("logprobs")
        if not isinstance(lp, dict):
            raise self._no_prompt_logprobs("its answer's logprobs is null")
        tokens, lps, offsets = lp.get("tokens"), lp.get("token_logprobs"), lp.get("text_offset")
        if "content" in lp and tokens is None:
            raise self._no_prompt_logprobs("its answer has chat-style logprobs.content, which covers the "
                                           "generated tokens only")
        if not (isinstance(tokens, list) and isinstance(lps, list) and len(tokens) == len(lps)):
            raise self._no_prompt_logprobs("its answer's logprobs has no tokens / token_logprobs lists")
        if not isinstance(offsets, list):
            raise self._no_prompt_logprobs("its answer's logprobs has no text_offset")
        top = lp.get("top_logprobs")
        top = top if isinstance(top, list) and len(top) == len(tokens) else [None] * len(tokens)
        n = len(tokens) - min(max(n_gen, 0), len(tokens))
        spelled = "".join(map(str, tokens))
        if n < len(tokens) and spelled.endswith(prompt) and not "".join(map(str, tokens[:n])).endswith(prompt):
            n = len(tokens)         # the tokens spell the prompt alone: the generated ones were left out
        if n == 0:
            raise self._no_prompt_logprobs(f"its logprobs cover {len(tokens)} token(s), the generated one(s) only")
        if isinstance(prompt_tokens, int) and n < prompt_tokens - 1:     # llama-cpp-python leaves out BOS
            raise self._no_prompt_logprobs(f"its logprobs cover {n} of the prompt's {prompt_tokens} tokens")
        if sum(x is None for x in lps[:n]) > 1:
            raise self._no_prompt_logprobs("the echoed prompt tokens' log-probabilities are null")
        return _Echo([str(t) for t in tokens[:n]], lps[:n], top[:n],
                     prompt_tokens if isinstance(prompt_tokens, int) else None)

    async def _count_continuation(self, client: OpenAIClient, context: str, prompt: str, echo: _Echo,
                                  counting: dict[str, asyncio.Task[int]]) -> int:
        """How many of the prompt's tokens the continuation is, by token counts (lm-eval's way)."""
        if self.tokenizer is not None:
            n = self._encode_len(prompt) - self._encode_len(context)
        else:
            if echo.prompt_tokens is None:
                raise self._fail(
                    f"the server at {self.base_url} echoes token texts that do not spell the prompt (so the "
                    "continuation cannot be found by text offset), and sends no usage.prompt_tokens to count "
                    "tokens with: pass tokenizer= (the model's tokenizer) to OpenAIAdapter")
            if context not in self._ctx_tokens:
                if context not in counting:             # one request per context, however many wait on it
                    counting[context] = asyncio.ensure_future(self._server_count(client, context))
                self._ctx_tokens[context] = await counting[context]
                if len(self._ctx_tokens) > CONTEXT_CACHE:
                    self._ctx_tokens.pop(next(iter(self._ctx_tokens)))
            n = echo.prompt_tokens - self._ctx_tokens[context]
        if not 0 <= n <= len(echo.tokens):
            raise self._fail(f"the continuation counts {n} tokens, but the server echoed {len(echo.tokens)} "
                             "prompt tokens: the tokenizer given is not the server's model's")
        return n

    async def _server_count(self, client: OpenAIClient, text: str) -> int:
        """The server's token count of ``text`` (usage.prompt_tokens of a one-token completion)."""
        body = {"model": self.model, "prompt": text, "max_tokens": self.echo_max_tokens or 1, "temperature": 0.0}
        try:
            obj = await self._post(client, body)
        except ServerError as e:
            raise self._refused(e) from None
        usage = obj.get("usage")
        count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        if not isinstance(count, int):
            raise self._fail(f"the server at {self.base_url} sent no usage.prompt_tokens for a context, so the "
                             "continuation's tokens cannot be counted: pass tokenizer=")
        return count

    def _encode_len(self, text: str) -> int:
        ids = self.tokenizer.encode(text)  # type: ignore[union-attr]
        return len(getattr(ids, "ids", ids))

    def _score(self, echo: _Echo, span: list[int], continuation: str) -> LLAnswer:
        total, greedy = 0.0, True
        for i in span:
            lp = echo.logprobs[i]
            if lp is None:
                raise self._fail(
                    f"the continuation {continuation!r} begins the prompt, and the prompt's first token has no "
                    f"log-probability (the model at {self.base_url} puts no BOS token first): give the request "
                    "a non-empty context")
            top = echo.top[i]
            values = [v for v in top.values() if isinstance(v, (int, float))] if isinstance(top, dict) else []
            if not values:
                raise self._no_prompt_logprobs("its answer has no top_logprobs for prompt tokens, so whether the "
                                               "continuation is greedy cannot be told")
            total += float(lp)
            greedy = greedy and float(lp) >= max(values)
        return LLAnswer(total, greedy)

    # ---- generation ----

    def _generation_body(self, r: GenerateUntil) -> tuple[dict[str, Any], bool, list[str]]:
        """The request body of a generation, whether it goes to chat, and all its stop strings."""
        chat = not isinstance(r.context, str)
        body: dict[str, Any] = {"model": self.model}
        if not isinstance(r.context, str):
            body["messages"] = [dict(m) for m in r.context]
        else:
            body["prompt"] = r.context
        body.update({"max_tokens": r.max_tokens, "temperature": r.temperature, "top_p": r.top_p})
        if r.top_k > 0:
            body["top_k"] = r.top_k
        if r.min_p > 0:
            body["min_p"] = r.min_p
        if r.seed is not None:
            body["seed"] = r.seed
        stops = [s for s in r.until if s]
        if stops:
            body["stop"] = stops[:MAX_STOP]
        if r.logprobs is not None:
            self.check_top_logprobs(r.logprobs, chat)
            if chat:
                body.update({"logprobs": True, "top_logprobs": r.logprobs})
            else:
                body["logprobs"] = r.logprobs
        return body, chat, stops

    async def _generate(self, client: OpenAIClient, r: GenerateUntil) -> Generation:
        """One generation, streamed (or not, with ``stream=False``). Once every retry of a 5xx, 429,
        dropped stream or timeout failed, the answer is a `Generation` with finish_reason "error" (the
        runner records no sample for it, and ``--resume`` asks again): one request never ends the run.
        A 4xx is a mistake in the request that every other one shares, and raises."""
        body, chat, stops = self._generation_body(r)
        api = "chat" if chat else "completions"
        try:
            if self.stream:
                text, finish, lp, usage = await self._retrying(lambda: self._streamed(client, body, api, chat))
            else:
                obj = await self._retrying(lambda: client.complete(body, api=api))  # type: ignore[arg-type]
                text, finish, lp, usage = self._whole(obj, chat)
        except ServerError as e:
            if e.status == 200:
                raise self._fail(f"the server at {self.base_url} sent a malformed stream: {e.message}. What to do: "
                                 "generate without streaming (OpenAIAdapter(stream=False))") from None
            if e.status is not None and e.status < 500 and e.status != 429:
                raise self._refused(e, top_logprobs=r.logprobs) from None
            return Generation("", "error", error=self._gave_up(e, self.retries + 1))
        tokens, lps, tops = self._output_logprobs(lp) if r.logprobs is not None else (None, None, None)
        cut = cut_at_stops(text, stops)
        if cut >= 0:                                # a stop string the server was not sent (or ignored)
            text, finish = text[:cut], "stop"
            if tokens is not None:                  # keep the tokens that gave the kept text a character
                keep, start = 0, 0
                while keep < len(tokens) and start < cut:
                    start += len(tokens[keep])
                    keep += 1
                tokens, lps, tops = tokens[:keep], lps[:keep], tops[:keep]  # type: ignore[index]
        n_tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
        return Generation(text, finish if finish in ("length", "abort") else "stop",
                          n_tokens if isinstance(n_tokens, int) else None, lps, tops, tokens)

    def _whole(self, obj: dict[str, Any], chat: bool) -> tuple[str, Any, Any, Any]:
        """(text, finish_reason, logprobs object, usage) of a non-streamed answer."""
        choices = obj.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise self._fail(f"the server at {self.base_url} answered without choices: {str(obj)[:200]}")
        choice = choices[0]
        if chat:
            message = _field(choice, "message", dict)
            text = message.get("content") or ""
        else:
            text = choice.get("text") or ""
        return text, choice.get("finish_reason"), choice.get("logprobs"), obj.get("usage")

    async def _streamed(self, client: OpenAIClient, body: dict[str, Any], api: str, chat: bool
                        ) -> tuple[str, Any, Any, Any]:
        """(text, finish_reason, logprobs object, usage) of a streamed answer: the events' text
        pieces, their log-probability lists joined (chat's ``content``, completions' ``tokens``...),
        the last finish_reason, and the usage block the server sends last (``include_usage``). Without
        one, completion_tokens is counted: the tokens of the log-probabilities when asked for, else the
        events that carried text (one token each on vLLM, llama.cpp's server and llmbench serve)."""
        text: list[str] = []
        finish, usage, events = None, None, 0
        content: list[Any] = []
        legacy: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
        has_lp = False
        async for obj in client.stream(body, api=api):  # type: ignore[arg-type]
            if isinstance(obj.get("usage"), dict):
                usage = obj["usage"]
            for c in obj.get("choices") or ():
                if not isinstance(c, dict) or c.get("index", 0) != 0:
                    continue
                piece = ((c.get("delta") or {}).get("content") if chat else c.get("text")) or ""
                if piece:
                    text.append(piece)
                    events += 1
                finish = c.get("finish_reason") or finish
                lp = c.get("logprobs")
                if isinstance(lp, dict):
                    has_lp = True
                    if isinstance(lp.get("content"), list):
                        content += lp["content"]
                    elif isinstance(lp.get("tokens"), list):
                        for k in legacy:
                            v = lp.get(k)
                            legacy[k] += v if isinstance(v, list) else [None] * len(lp["tokens"])
        lp_obj: Any = None
        if has_lp:
            lp_obj = {"content": content} if content else legacy
        if not (isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int)):
            n = len(content) if content else len(legacy["tokens"]) if has_lp else events
            usage = {**(usage or {}), "completion_tokens": n}
            self.stats["counted_usage"] = self.stats.get("counted_usage", 0) + 1
        return "".join(text), finish, lp_obj, usage

    @staticmethod
    def _output_logprobs(lp: Any) -> tuple[list[str] | None, list[float] | None,
                                                         list[dict[str, float]] | None]:
        """(token texts, log-probabilities, top_logprobs) of the generated tokens, None when absent."""
        if not isinstance(lp, dict):
            return None, None, None
        if isinstance(lp.get("content"), list):     # chat, and newer completions servers
            items = [c for c in lp["content"] if isinstance(c, dict)]
            return ([str(c.get("token", "")) for c in items], [float(c.get("logprob", math.nan)) for c in items],
                    [{str(t.get("token")): float(t.get("logprob", math.nan)) for t in c.get("top_logprobs") or ()
                      if isinstance(t, dict)} for c in items])
        tokens, lps, tops = lp.get("tokens"), lp.get("token_logprobs"), lp.get("top_logprobs")
        if not (isinstance(tokens, list) and isinstance(lps, list)):
            return None, None, None
        tops = tops if isinstance(tops, list) else [None] * len(tokens)
        return ([str(t) for t in tokens], [float(x) if x is not None else math.nan for x in lps],
                [dict(t) if isinstance(t, dict) else {} for t in tops])

    # ---- HTTP: retries, errors ----

    async def _post(self, client: OpenAIClient, body: dict[str, Any], api: str = "completions") -> dict[str, Any]:
        """POST with retries. Raises `ServerError` for a request the server refused (4xx other than
        429: the caller words it), `AdapterError` once every retry of a 5xx/429/drop/timeout failed."""
        try:
            return await self._retrying(lambda: client.complete(body, api=api))  # type: ignore[arg-type]
        except ServerError as e:
            if not e.retryable:
                raise
            raise AdapterError(self._gave_up(e, self.retries + 1)) from None   # (counted by _retrying)

    async def _retrying(self, send: Callable[[], Awaitable[T]]) -> T:
        """``send()`` again after a 5xx, 429, dropped connection or timeout, up to ``retries`` times,
        ``backoff`` seconds apart, doubling (a Retry-After honoured up to 60 s); counts requests and
        retries. Raises the last `ServerError` (counted as a failure when it was worth retrying)."""
        delay = self.backoff
        for attempt in range(self.retries + 1):
            self.stats["requests"] += 1
            try:
                return await send()
            except ServerError as e:
                if not e.retryable:
                    raise
                if attempt == self.retries:
                    self.stats["failures"] += 1
                    raise
                wait = delay if e.retry_after is None else max(delay, min(e.retry_after, MAX_RETRY_AFTER_S))
            self.stats["retries"] += 1
            await asyncio.sleep(wait)
            delay *= 2
        raise AssertionError("unreachable")

    def _fail(self, message: str) -> AdapterError:
        self.stats["failures"] += 1
        return AdapterError(message)

    def _gave_up(self, e: ServerError, attempts: int) -> str:
        head = f"HTTP {e.status} {e.reason}".rstrip() if e.status is not None else "no answer"
        if e.status is None and "timed out" in e.message:
            what = (f"each attempt took longer than timeout={self.timeout:g} s: raise timeout=, lower "
                    f"concurrency= (now {self.concurrency}), or check that the server is not stuck")
        elif e.status is None:
            what = (f"check that the server is running at {self.base_url} and stays up (its log says why "
                    f"connections dropped); lower concurrency= (now {self.concurrency}) if it runs out of memory")
        elif e.status == 429:
            what = f"the server is rate-limiting: lower concurrency= (now {self.concurrency}) or raise retries="
        else:
            what = (f"the server is failing: its log says why (out of memory? lower concurrency=, now "
                    f"{self.concurrency}); raise retries= to ride out a restart")
        return (f"POST {e.url} failed {attempts} times ({self.retries} retries): {head}: {e.message}. "
                f"What to do: {what}")

    def _refused(self, e: ServerError, echo: bool = False, rolling: bool = False,
                 top_logprobs: int | None = None) -> AdapterError:
        """An AdapterError for a request the server refused (4xx), with what to do."""
        if echo and re.search(r"echo|logprob", e.message, re.IGNORECASE):
            return self._no_prompt_logprobs(f"it refused them (HTTP {e.status}: {e.message})")
        if top_logprobs and re.search(r"logprob", e.message, re.IGNORECASE):
            what = (f"the request asked for {top_logprobs} top log-probabilities per token: run with a smaller "
                    "--top-logprobs N (top_logprobs=N; 5 for OpenAI's completions API), or raise the server's "
                    "limit (vLLM: --max-logprobs)")
        elif e.status in (401, 403):
            what = "check api_key= (default $OPENAI_API_KEY)"
        elif e.status == 404:
            what = (f"check base_url (the API root, e.g. http://127.0.0.1:8000/v1) and the model name "
                    f"{self.model!r} (GET {self.base_url}/models lists the served ones)")
        elif rolling:
            what = ("the text may be longer than the server's context: the server scores a rolling request "
                    "whole, without the engine's windows; split the text, or use backend 'engine'")
        else:
            what = "the server's message says which parameter it refused"
        head = f"HTTP {e.status} {e.reason}".rstrip()
        return self._fail(f"{e.url} refused the request: {head}: {e.message}. What to do: {what}")

    # ---- running ----

    def _run(self, fn: Callable[[OpenAIClient], Awaitable[T]], timeout: float | None = None) -> T:
        """Run ``fn(client)`` to completion from synchronous code, on a fresh event loop (beside a
        running one, as in a notebook, in a thread). One client, so one connection pool, per call."""
        async def main() -> T:
            async with OpenAIClient(self.base_url, self.model, api_key=self.api_key,
                                    timeout=timeout or self.timeout) as client:
                return await fn(client)

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(main())
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, main()).result()

    async def _each(self, client: OpenAIClient, items: Sequence[Item],
                    fn: Callable[[OpenAIClient, Item], Awaitable[T]], probe: bool,
                    on_answer: Callable[[int, T], None] | None = None) -> list[T]:
        """``fn`` over ``items``, ``concurrency`` at a time, answers in order (and to ``on_answer`` as
        each finishes); the first error cancels the rest and is raised. With ``probe``, while the
        server's answer to max_tokens 0 is unknown the first item goes alone (so a server that reads 0
        as "no limit" runs one such request)."""
        out: list[Any] = [None] * len(items)
        first = 0
        while probe and first < len(items) and self.echo_max_tokens is None:
            out[first] = await fn(client, items[first])     # (an empty text sends nothing: try the next)
            if on_answer is not None:
                on_answer(first, out[first])
            first += 1
        sem = asyncio.Semaphore(self.concurrency)

        async def run(i: int) -> None:
            async with sem:
                out[i] = await fn(client, items[i])
            if on_answer is not None:
                on_answer(i, out[i])

        tasks = [asyncio.ensure_future(run(i)) for i in range(first, len(items))]
        if tasks:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for t in tasks:                         # the first failure in request order
                if not t.cancelled() and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        return out

    async def _models_entry(self, client: OpenAIClient) -> dict[str, Any]:
        obj = await client.get_json("/models")
        data = _field(obj, "data", list)
        for m in data:
            if isinstance(m, dict) and m.get("id") == self.model:
                return {k: v for k, v in m.items() if k not in ("permission", "permissions")}
        return {"listed": False, "models": [m.get("id") for m in data if isinstance(m, dict)][:50]}
