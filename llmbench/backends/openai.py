"""Streaming client for OpenAI-compatible servers (vLLM, SGLang, llama.cpp's server, Ollama, ...).

One request = one POST to /v1/completions or /v1/chat/completions with ``stream: true`` and
``stream_options: {"include_usage": true}``; the Server-Sent Events are parsed here, timed with
``time.monotonic_ns()`` at the network read that delivered them, and turned into a `RequestResult`:

- arrival_ns      just before the request is sent (after any client-side concurrency wait; the
                  runner's planned send time is kept in ``scheduled_ns``)
- first_token_ns  the first event whose choice carries non-empty text (completions ``text``, chat
                  ``delta.content`` or a reasoning delta): a role-only or empty chunk is not a token
- token_ns        every event that carries text, the first included (so ITL = diff(token_ns)); an
                  event can hold several tokens, so ITL is per chunk, as in vLLM's benchmark
- finish_ns       when the stream ended (``[DONE]``, or the end of the body after a finish_reason)
- prompt_tokens / output_tokens   from the server's ``usage`` block only; None when the server sent
                  none (``usage_reported`` is False) -- never re-tokenized guesses

Nothing a server does (HTTP error, dropped connection, malformed event, error event, timeout) raises:
it lands in ``error`` with a message, and the timings gathered so far are kept.

``OpenAIClient.stream`` (one streamed request, its events' JSON objects from the same `SSEParser`),
``complete`` (one non-streaming request, its JSON answer) and ``get_json`` (GET /v1/models) serve the
evaluation adapter (llmbench/eval/openai_adapter.py): they raise `ServerError`, which says whether
sending the request again may help (5xx, 429, no response, a stream dropped midway) or not (any other 4xx).

Tested against a real local HTTP server in tests/test_openai_backend.py (tests/sse_server.py); the
non-streaming calls in tests/test_eval_openai.py (tests/eval_server.py).
"""

from __future__ import annotations

import asyncio
import codecs
import json
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import httpx

__all__ = ["OpenAIClient", "RequestResult", "SSEParser", "ServerError"]


@dataclass
class RequestResult:
    """Timings (monotonic ns) and server-reported token counts of one streamed request.

    The first seven fields are `llmbench.perf.metrics.RequestTiming`'s, in its order.
    """

    arrival_ns: int
    first_token_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)    # every text-carrying event, first included
    finish_ns: int | None = None
    prompt_tokens: int | None = None                       # usage.prompt_tokens, None if not reported
    output_tokens: int | None = None                       # usage.completion_tokens, None if not reported
    error: str | None = None
    text: str = ""
    index: int = 0                                         # position in the run's input
    scheduled_ns: int | None = None                        # when the runner planned to send it
    usage_reported: bool = False                           # False: the server sent no usage block
    finish_reason: str | None = None
    http_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---- Server-Sent Events ----

_EOL = re.compile(r"\r\n|\r|\n")


class SSEParser:
    """Incremental SSE decoder (WHATWG event-stream rules): feed bytes, get completed events.

    Handles \\n, \\r\\n and \\r line ends split across reads, multi-line ``data:``, comments (``:``
    pings) and a UTF-8 character split across reads. Returns (event type, data) pairs.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._data: list[str] = []
        self._event = ""

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        buf = self._buf + self._decoder.decode(chunk)
        out: list[tuple[str, str]] = []
        start = 0
        for m in _EOL.finditer(buf):            # line ends found by the regex engine, not per character
            if m.end() == len(buf) and m.group() == "\r":
                break                           # might be the first half of \r\n: wait for more
            self._line(buf[start:m.start()], out)
            start = m.end()
        self._buf = buf[start:]
        return out

    def close(self) -> list[tuple[str, str]]:
        """End of stream: an unterminated last line or event is delivered rather than dropped
        (servers that close right after their last event without a blank line exist)."""
        out: list[tuple[str, str]] = []
        self._buf += self._decoder.decode(b"", final=True)
        if self._buf.rstrip("\r"):
            self._line(self._buf.rstrip("\r"), out)
        self._buf = ""
        self._line("", out)
        return out

    def _line(self, line: str, out: list[tuple[str, str]]) -> None:
        if not line:                            # blank line: dispatch
            if self._data:
                out.append((self._event or "message", "\n".join(self._data)))
            self._data, self._event = [], ""
            return
        if line.startswith(":"):                # comment / keep-alive ping
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value


# ---- client ----

def _api_base(base_url: str) -> str:
    """The server's API root, ending in /v1, from a URL with or without /v1 or an endpoint path."""
    url = base_url.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        url = url.removesuffix(suffix)
    if not url.endswith("/v1"):
        url += "/v1"
    return url


def _endpoint(base_url: str, api: str) -> str:
    return _api_base(base_url) + ("/chat/completions" if api == "chat" else "/completions")


def _error_message(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        if isinstance(err, dict):
            return str(err.get("message") or err.get("detail") or err)
        return str(err)
    except ValueError:
        return text[:500]


class _Stalled(Exception):
    """A streamed request passed its first-chunk or idle timeout (the message says which)."""


class ServerError(Exception):
    """A non-streaming request got no usable answer. ``status`` is the HTTP status, None when no
    response came (dropped connection, timeout, refused connection); ``message`` the server's own
    words where it gave any; ``retry_after`` the seconds a 429/503 asked to wait, if it said."""

    def __init__(self, url: str, message: str, status: int | None = None, reason: str = "",
                 retry_after: float | None = None) -> None:
        self.url, self.message, self.status, self.reason = url, message, status, reason
        self.retry_after = retry_after
        head = f"HTTP {status} {reason}".rstrip() if status is not None else "no response"
        super().__init__(f"{url}: {head}: {message}")

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later: 5xx, 429 or no response at all."""
        return self.status is None or self.status == 429 or self.status >= 500


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:                          # an HTTP date: not worth parsing for a short backoff
        return None


class OpenAIClient:
    """Streams completions from one OpenAI-compatible server and times them.

    >>> async with OpenAIClient("http://127.0.0.1:8000", "my-model", max_tokens=128,
    ...                         ignore_eos=True) as client:             # doctest: +SKIP
    ...     r = await client.send("Once upon a time")
    ...     ttft_ms = (r.first_token_ns - r.arrival_ns) / 1e6

    ``base_url`` may end in ``/v1`` or not. ``api`` is "completions" (prompt text) or "chat" (a
    string becomes one user message; a list of {"role", "content"} dicts is sent as is).
    ``sampling`` is passed through into the request body (top_p, top_k, seed, min_tokens, ...),
    as are per-call ``**overrides``. ``ignore_eos`` is a vLLM/SGLang/llama.cpp extra, sent only when
    True. The API key defaults to $OPENAI_API_KEY. Timeouts, in seconds: ``timeout`` bounds each whole
    request (connect to last byte; None: no bound), ``connect_timeout`` the TCP connection,
    ``first_chunk_timeout`` a streamed request from sending to its first text-carrying event, and
    ``idle_timeout`` each silence after that (a stalled stream); None leaves a limit out.
    ``trust_env=False`` ignores proxy variables, which would add their own latency to every timing.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api: Literal["completions", "chat"] = "completions",
        max_tokens: int = 128,
        temperature: float = 0.0,
        ignore_eos: bool = False,
        sampling: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        api_key: str | None = None,
        timeout: float | None = 600.0,
        connect_timeout: float | None = 10.0,
        first_chunk_timeout: float | None = None,
        idle_timeout: float | None = None,
        trust_env: bool = False,
    ) -> None:
        if api not in ("completions", "chat"):
            raise ValueError(f"api must be 'completions' or 'chat', not {api!r}")
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https:// (got {base_url!r}), "
                             "e.g. http://127.0.0.1:8000/v1")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 (got {max_tokens})")
        for name, v in (("timeout", timeout), ("connect_timeout", connect_timeout),
                        ("first_chunk_timeout", first_chunk_timeout), ("idle_timeout", idle_timeout)):
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0 seconds or None (got {v})")
        if sampling and sampling.get("n", 1) != 1:
            raise ValueError("only n=1 is supported: one stream is one request")
        self.url = _endpoint(base_url, api)
        self.model, self.api = model, api
        self.max_tokens, self.temperature, self.ignore_eos = max_tokens, temperature, ignore_eos
        self.sampling = dict(sampling or {})
        self.timeout = None if timeout is None else float(timeout)
        self.first_chunk_timeout, self.idle_timeout = first_chunk_timeout, idle_timeout
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.headers = {"Accept": "text/event-stream",
                        "Accept-Encoding": "identity"}   # a compressing proxy/server would batch events
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        self.headers.update(headers or {})
        # No pool limit: the runner's semaphore is the concurrency limit, and a request must never
        # wait for a connection after its arrival was stamped.
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
            trust_env=trust_env,
        )

    async def __aenter__(self) -> OpenAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    def payload(self, prompt: str | list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if self.api == "chat":
            body["messages"] = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
                                else list(prompt))
        else:
            if not isinstance(prompt, str):
                raise TypeError("the completions API takes a prompt string; use api='chat' for messages")
            body["prompt"] = prompt
        # max_tokens (not chat's newer max_completion_tokens): every server named above reads it.
        body["max_tokens"] = self.max_tokens
        body["temperature"] = self.temperature
        if self.ignore_eos:
            body["ignore_eos"] = True
        body.update(self.sampling)
        body.update(overrides)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return body

    @property
    def api_base(self) -> str:
        """The server's API root (``.../v1``)."""
        return self.url.removesuffix("/chat/completions").removesuffix("/completions")

    async def complete(self, body: dict[str, Any], *, api: Literal["completions", "chat"] | None = None
                       ) -> dict[str, Any]:
        """POST ``body`` as is (non-streaming) to /v1/completions or /v1/chat/completions (``api``,
        default the client's) and return the answer's JSON. Raises `ServerError` for an HTTP error,
        an error object in the answer, a body that is not JSON, a dropped connection or a timeout
        (``timeout`` bounds the whole request)."""
        url = _endpoint(self.api_base, api or self.api)
        return await self._request("POST", url, {**body, "stream": False})

    async def stream(self, body: dict[str, Any], *, api: Literal["completions", "chat"] | None = None
                     ) -> AsyncIterator[dict[str, Any]]:
        """POST ``body`` with ``stream: true`` (and ``stream_options.include_usage``) and yield each
        event's JSON object, parsed by `SSEParser`, until ``[DONE]``. Raises `ServerError` as `complete`
        does, and also for a stream that drops or ends before ``[DONE]`` and a finish_reason (no status:
        worth sending again), an error event (its code where an HTTP status, else 500: the server failed
        after accepting the request) and an event that is not a JSON object (status 200: not worth
        sending again). ``timeout`` bounds the whole request."""
        url = _endpoint(self.api_base, api or self.api)
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
        deadline = None if self.timeout is None else time.monotonic() + self.timeout

        def left() -> float | None:
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        async def read(step: Any) -> Any:
            try:
                return await asyncio.wait_for(step, left())
            except (asyncio.TimeoutError, httpx.TimeoutException) as e:
                raise ServerError(url, f"timed out after {self.timeout:g} s ({type(e).__name__})") from None
            except httpx.ConnectError as e:
                raise ServerError(url, f"cannot connect ({e}); is the server running?") from None
            except httpx.TransportError as e:
                raise ServerError(url, f"connection dropped mid-stream ({type(e).__name__}: {e})") from None

        request = self._client.build_request("POST", url, json=body, headers=self.headers)
        resp = await read(self._client.send(request, stream=True))
        try:
            if resp.status_code != 200:
                raw = await read(resp.aread())
                raise ServerError(url, _error_message(raw), resp.status_code, resp.reason_phrase,
                                  _retry_after(resp.headers.get("retry-after")))
            parser, finished, chunks = SSEParser(), False, resp.aiter_bytes()
            while True:
                try:
                    chunk = await read(anext(chunks))
                    events = parser.feed(chunk)
                except StopAsyncIteration:
                    events, chunk = parser.close(), None
                for event, data in events:
                    if data.strip() == "[DONE]":
                        return
                    try:
                        obj = json.loads(data)
                    except ValueError:
                        obj = None
                    if not isinstance(obj, dict):
                        raise ServerError(url, f"malformed stream: an event is not a JSON object: {data[:200]!r}",
                                          200, "OK")
                    if event == "error" or obj.get("error"):
                        err = obj.get("error", obj)
                        code = err.get("code") if isinstance(err, dict) else None
                        msg = err.get("message", err) if isinstance(err, dict) else err
                        status = code if isinstance(code, int) and 400 <= code < 600 else 500
                        raise ServerError(url, f"error event mid-stream: {msg}", status, "(in stream)")
                    finished = finished or any(isinstance(c, dict) and c.get("finish_reason")
                                               for c in obj.get("choices") or ())
                    yield obj
                if chunk is None:
                    break
            if not finished:
                raise ServerError(url, "connection dropped mid-stream (the stream ended without [DONE] or a "
                                       "finish_reason)")
        finally:
            await resp.aclose()

    async def get_json(self, path: str) -> dict[str, Any]:
        """GET ``path`` under the API root (``"/models"``) and return its JSON; raises `ServerError`."""
        return await self._request("GET", self.api_base + "/" + path.lstrip("/"), None)

    async def _request(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        headers = {**self.headers, "Accept": "application/json"}
        try:
            resp = await asyncio.wait_for(self._client.request(method, url, json=body, headers=headers),
                                          self.timeout)
        except (asyncio.TimeoutError, httpx.TimeoutException) as e:
            raise ServerError(url, f"timed out after {self.timeout:g} s ({type(e).__name__})") from None
        except httpx.ConnectError as e:
            raise ServerError(url, f"cannot connect ({e}); is the server running?") from None
        except httpx.TransportError as e:      # dropped mid-answer, reset, protocol error
            raise ServerError(url, f"connection dropped before a complete answer ({type(e).__name__}: {e})") from None
        if resp.status_code != 200:
            raise ServerError(url, _error_message(resp.content), resp.status_code, resp.reason_phrase,
                              _retry_after(resp.headers.get("retry-after")))
        try:
            obj = resp.json()
        except ValueError:
            raise ServerError(url, f"the answer is not JSON: {resp.text[:200]!r}", 200, "OK") from None
        if not isinstance(obj, dict):
            raise ServerError(url, f"the answer is not a JSON object: {resp.text[:200]!r}", 200, "OK")
        err = obj.get("error")
        if err and "choices" not in obj and "data" not in obj:
            # some servers answer 200 with an error object: its code, when an HTTP status, decides
            # retries; any other is taken as final (status 200 is not retryable)
            code = err.get("code") if isinstance(err, dict) else None
            status = code if isinstance(code, int) and 400 <= code < 600 else 200
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise ServerError(url, f"error in a 200 answer: {msg}", status, "(in body)")
        return obj

    async def send(
        self,
        prompt: str | list[dict[str, Any]],
        *,
        index: int = 0,
        scheduled_ns: int | None = None,
        **overrides: Any,
    ) -> RequestResult:
        """Send one streaming request and return its timings. Never raises for server behaviour."""
        body = self.payload(prompt, **overrides)
        result = RequestResult(arrival_ns=time.monotonic_ns(), index=index, scheduled_ns=scheduled_ns)
        try:
            await asyncio.wait_for(self._stream(body, result), self.timeout)
        except _Stalled as e:
            result.error = str(e)
        except asyncio.TimeoutError:
            result.error = (f"timed out after {self.timeout:g} s "
                            f"({len(result.token_ns)} text chunks received)")
        except httpx.TimeoutException as e:
            result.error = (f"timed out after {self.timeout:g} s "
                            f"({len(result.token_ns)} text chunks received): {type(e).__name__}")
        except httpx.ConnectError as e:
            result.error = f"cannot connect to {self.url}: {e}; is the server running?"
        except (httpx.RemoteProtocolError, httpx.ReadError) as e:
            where = "mid-stream" if result.http_status == 200 else "before a response"
            result.error = (f"connection dropped {where} after {len(result.token_ns)} text chunks: "
                            f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 -- one bad request must never end a benchmark run
            result.error = f"{type(e).__name__}: {e}"
        if result.error is not None and result.finish_ns is None:
            result.finish_ns = time.monotonic_ns()
        return result

    def _read_limit(self, r: RequestResult) -> float | None:
        """Seconds the next read may wait: what is left of the first-chunk timeout until the first
        text arrives, the idle timeout after it."""
        if r.first_token_ns is not None:
            return self.idle_timeout
        if self.first_chunk_timeout is None:
            return None
        return max(0.0, self.first_chunk_timeout - (time.monotonic_ns() - r.arrival_ns) / 1e9)

    async def _read(self, step: Any, r: RequestResult) -> Any:
        """Await one read of the response (its headers, or its next body chunk) within _read_limit."""
        limit = self._read_limit(r)
        try:
            return await asyncio.wait_for(step, limit)
        except asyncio.TimeoutError:
            if r.first_token_ns is None:
                raise _Stalled(f"no text within {self.first_chunk_timeout:g} s of sending (first-chunk timeout; "
                               f"HTTP status {r.http_status or 'not received'})") from None
            raise _Stalled(f"the stream stalled: nothing for {self.idle_timeout:g} s after {len(r.token_ns)} "
                           "text chunks (idle timeout)") from None

    async def _stream(self, body: dict[str, Any], r: RequestResult) -> None:
        request = self._client.build_request("POST", self.url, json=body, headers=self.headers)
        resp = await self._read(self._client.send(request, stream=True), r)
        try:
            await self._stream_body(resp, r)
        finally:
            await resp.aclose()

    async def _stream_body(self, resp: httpx.Response, r: RequestResult) -> None:
        r.http_status = resp.status_code
        if resp.status_code != 200:
            raw = b""
            parts = resp.aiter_bytes()
            while len(raw) <= 4096:
                try:
                    raw += await self._read(anext(parts), r)
                except StopAsyncIteration:
                    break
            r.error = f"HTTP {resp.status_code} {resp.reason_phrase}: {_error_message(raw)}"
            return
        parser = SSEParser()
        done = False
        chunks = resp.aiter_bytes()
        while True:
            try:
                chunk = await self._read(anext(chunks), r)
            except StopAsyncIteration:
                break
            t = time.monotonic_ns()         # when these bytes reached us: the events' time
            for event, data in parser.feed(chunk):
                done = self._event(event, data, t, r)
                if done or r.error:
                    break
            if done or r.error:
                break
        if not done and not r.error:
            t = time.monotonic_ns()
            for event, data in parser.close():
                done = self._event(event, data, t, r)
                if done or r.error:
                    break
        if r.finish_ns is None:
            r.finish_ns = time.monotonic_ns()
        if r.error:
            return
        if not done and r.finish_reason is None:
            r.error = (f"stream ended without [DONE] or a finish_reason after {len(r.token_ns)} "
                       "text chunks (connection closed early?)")
        elif r.first_token_ns is None:
            r.error = (f"no event carried text, so there is no first token to time "
                       f"(finish_reason={r.finish_reason!r}, output_tokens={r.output_tokens!r})")

    def _event(self, event: str, data: str, t: int, r: RequestResult) -> bool:
        """Apply one SSE event to the result; True at [DONE]."""
        if data.strip() == "[DONE]":
            r.finish_ns = t
            return True
        try:
            obj = json.loads(data)
        except ValueError:
            r.error = f"malformed SSE event (data is not JSON): {data[:200]!r}"
            return False
        if not isinstance(obj, dict):
            r.error = f"malformed SSE event (expected a JSON object): {data[:200]!r}"
            return False
        if event == "error" or obj.get("error"):
            err = obj.get("error", obj)
            msg = err.get("message", err) if isinstance(err, dict) else err
            r.error = f"server sent an error mid-stream after {len(r.token_ns)} text chunks: {msg}"
            return False
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if self.api == "chat":
                delta = choice.get("delta") or {}
                content = delta.get("content") or ""
                piece = content or delta.get("reasoning_content") or delta.get("reasoning") or ""
            else:
                content = piece = choice.get("text") or ""
            if piece:
                if r.first_token_ns is None:
                    r.first_token_ns = t
                r.token_ns.append(t)
                r.text += content
            if choice.get("finish_reason"):
                r.finish_reason = choice["finish_reason"]
        usage = obj.get("usage")
        if isinstance(usage, dict):             # the last block wins (some servers send one per chunk)
            r.usage_reported = True
            r.prompt_tokens = usage.get("prompt_tokens")
            r.output_tokens = usage.get("completion_tokens")
        return False
