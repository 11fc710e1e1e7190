"""The HTTP side of `llmbench serve`: a Starlette application on uvicorn.

Handlers check the request (protocol.py), tokenize, hand the sequences to the engine thread
(worker.py) and read their items from the job's asyncio queue: a JSON answer when every choice is
done, or server-sent events as tokens arrive. A client that disconnects (noticed while its request
waits, runs or streams) has its sequences aborted and their KV blocks freed at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .. import UnsupportedError
from ..llm import LLM, Completion
from . import protocol as P
from .metrics import render as render_metrics
from .worker import EngineDown, EngineWorker, Job, PromptScores, SeqSpec, ServerBusy, TokenInfo, prompt_token_texts

RETRY_AFTER_S = 1   # what a 429 asks the client to wait


@dataclass
class ServerConfig:
    """How `llmbench serve` runs (the CLI's options)."""

    model_name: str                      # the name /v1/models lists and requests may give
    max_batch: int = 64                  # sequences running at once
    max_waiting: int = 256               # sequences waiting beyond those
    batching: str = "continuous"         # or "static"
    batch_timeout: float = 1.0           # static batching: longest wait for a full batch (s)
    api_key: str | None = None
    chat_template: str | None = None     # overrides the model's
    step_delay: float = 0.0              # tests: seconds slept after each engine step


class _ClientGone(Exception):
    pass


class Server:
    """The application: ``Server(llm, config).app`` is the ASGI app to give uvicorn."""

    def __init__(self, llm: LLM, config: ServerConfig):
        self.llm, self.cfg = llm, config
        self.worker = EngineWorker(llm, config.max_batch, config.max_waiting, config.batching, config.batch_timeout,
                                   config.step_delay)
        self.created = int(time.time())
        routes = [
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics, methods=["GET"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]
        handlers = {P.APIError: self._api_error, HTTPException: self._http_error, Exception: self._internal_error}
        self.app = _Auth(Starlette(routes=routes, exception_handlers=handlers, lifespan=self._lifespan),
                         config.api_key)

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        self.worker.start()
        try:
            yield
        finally:   # uvicorn has let every open response finish (the drain)
            await asyncio.get_running_loop().run_in_executor(None, self.worker.stop)

    # ---- errors ----

    @staticmethod
    async def _api_error(request: Request, e: Exception) -> Response:
        assert isinstance(e, P.APIError)
        return JSONResponse(e.body(), e.status, headers=e.headers)

    @staticmethod
    async def _http_error(request: Request, e: Exception) -> Response:
        assert isinstance(e, HTTPException)
        msg = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        err = P.APIError(e.status_code, msg.get(e.status_code, str(e.detail)))
        return JSONResponse(err.body(), e.status_code, headers=dict(e.headers or {}))

    @staticmethod
    async def _internal_error(request: Request, e: Exception) -> Response:
        err = P.APIError(500, f"internal error: {type(e).__name__}: {e}")
        return JSONResponse(err.body(), 500)

    # ---- small routes ----

    async def health(self, request: Request) -> Response:
        if self.worker.error is not None:
            return JSONResponse({"status": "error", "error": str(self.worker.error)}, 503)
        return JSONResponse({"status": "ok"})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{
            "id": self.cfg.model_name, "object": "model", "created": self.created, "owned_by": "llmbench",
            "root": str(self.llm.path), "max_model_len": self.llm.ctx}]})

    async def metrics(self, request: Request) -> Response:
        return PlainTextResponse(render_metrics(self.worker.snapshot(), self.cfg.model_name),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    # ---- shared request handling ----

    async def _body(self, request: Request) -> dict:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise P.APIError(400, f"the request body is not valid JSON: {e}") from None
        if not isinstance(body, dict):
            raise P.APIError(400, "the request body must be a JSON object")
        model = body.get("model")
        if model is not None and model != self.cfg.model_name:
            raise P.APIError(404, f"The model `{model}` does not exist; this server serves `{self.cfg.model_name}`",
                             param="model", code="model_not_found")
        return body

    def _ids(self, prompt: str | list[int], param: str) -> list[int]:
        if isinstance(prompt, str) and self.llm.tokenizer is None:
            raise P.bad(param, "this model has no usable tokenizer: send token ids")
        if not isinstance(prompt, str):
            vocab = self.llm.info["vocab"]
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise P.bad(param, f"token id {bad} is outside the vocabulary (0 .. {vocab - 1})")
        try:
            return self.llm._prompt_ids(prompt)
        except ValueError as e:
            raise P.bad(param, str(e)) from None

    def _check_fits(self, ids: list[int], max_tokens: int, score_only: bool, param: str) -> None:
        ctx = self.llm.ctx
        need = len(ids) + max_tokens - (1 if score_only else 0)
        if need > ctx:
            raise P.bad(param, f"this model's maximum context length is {ctx} tokens; the request needs {need} "
                               f"({len(ids)} in the prompt, {max_tokens} for the completion): shorten the prompt or "
                               "lower max_tokens")
        blocks = -(-need // self.llm.block_size)
        if blocks > self.llm.kv_blocks:
            raise P.bad(param, f"the request needs {blocks} KV blocks and the server's cache holds "
                               f"{self.llm.kv_blocks}: shorten it, or restart the server with a larger --kv-budget")

    def _submit(self, specs: list[SeqSpec], stream: bool) -> Job:
        try:
            return self.worker.submit(specs, stream)
        except ServerBusy as e:
            raise P.APIError(429, f"the server is full: {e}; retry later",
                             headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except EngineDown as e:
            raise P.APIError(503, str(e)) from None

    async def _collect(self, job: Job, request: Request) -> dict[int, tuple]:
        """Every choice's final item, or _ClientGone when the client disconnects first (then aborted)."""
        async def gather() -> dict[int, tuple]:
            finals: dict[int, tuple] = {}
            scores: dict[int, PromptScores] = {}
            while len(finals) < len(job.specs):
                item = await job.queue.get()
                if item[0] == "error":
                    raise P.APIError(item[1], item[2])
                if item[0] == "prompt":
                    scores[item[1]] = item[2]
                elif item[0] == "finish":
                    finals[item[1]] = (item[2], item[3], scores.get(item[1]))
            return finals

        waiter = asyncio.ensure_future(gather())
        gone = asyncio.ensure_future(_disconnect(request))
        try:
            await asyncio.wait({waiter, gone}, return_when=asyncio.FIRST_COMPLETED)
            if waiter.done():
                return waiter.result()
            self.worker.cancel(job)
            raise _ClientGone
        finally:
            for t in (waiter, gone):
                if not t.done():
                    t.cancel()

    def _ids_text(self, ids: list[int], given: str | list[int]) -> str:
        if isinstance(given, str):
            return given
        return self.llm.detokenize(ids) if self.llm.tokenizer is not None else ""

    # ---- /v1/completions ----

    async def completions(self, request: Request) -> Response:
        body = await self._body(request)
        req = P.completion_request(body)
        score = req.echo and req.logprobs is not None
        base = P.sampling(body, req.max_tokens, req.logprobs)
        prompts = []
        for k, p in enumerate(req.prompts):
            param = "prompt" if len(req.prompts) == 1 else f"prompt[{k}]"
            ids = self._ids(p, param)
            self._check_fits(ids, req.max_tokens, score and req.max_tokens == 0, param)
            prompts.append(ids)
        specs = [SeqSpec(ids, dataclasses.replace(base, seed=P.choice_seed(base.seed, j)), score)
                 for ids in prompts for j in range(req.n)]
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        texts = [self._ids_text(ids, p) for ids, p in zip(prompts, req.prompts)]
        if req.max_tokens == 0 and not score:   # nothing for the engine to do
            choices: list[dict[str, Any]] = [
                {"index": i, "text": texts[i // req.n] if req.echo else "", "logprobs": None,
                 "finish_reason": "length", "stop_reason": None} for i in range(len(specs))]
            obj = {"id": rid, "object": "text_completion", "created": created, "model": self.cfg.model_name,
                   "choices": choices, "usage": P.usage(sum(map(len, prompts)), 0)}
            if req.stream:
                return _SSE(self._replay(obj, req.include_usage), lambda: None)
            return JSONResponse(obj)
        job = self._submit(specs, req.stream)
        if req.stream:
            return _SSE(self._stream_completion(job, req, prompts, texts, rid, created), lambda: self.worker.cancel(job))
        try:
            done = await self._collect(job, request)
        except _ClientGone:
            return Response(status_code=499)
        choices, n_out = [], 0
        for i, spec in enumerate(specs):
            out, infos, scores = done[i]
            n_out += len(out.token_ids)
            text = (texts[i // req.n] if req.echo else "") + out.text
            lp = None
            if req.logprobs is not None:
                lp = self._legacy_logprobs(spec.prompt if req.echo else None, scores, infos or [], 0)
            choices.append({"index": i, "text": text, "logprobs": lp, "finish_reason": out.finish_reason,
                            "stop_reason": out.stop_reason})
        return JSONResponse({"id": rid, "object": "text_completion", "created": created, "model": self.cfg.model_name,
                             "choices": choices, "usage": P.usage(sum(map(len, prompts)), n_out)})

    def _legacy_logprobs(self, prompt: list[int] | None, scores: PromptScores | None, infos: list[TokenInfo],
                         offset: int) -> dict[str, Any]:
        """OpenAI's completions logprobs object: the echoed prompt's tokens (when ``prompt``; the first
        has no logprob), then the generated tokens'."""
        tokens: list[str] = []
        lps: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        if prompt is not None:
            tokens = prompt_token_texts(self.llm.tokenizer, prompt)
            lps = [None] * len(tokens)
            tops = [None] * len(tokens)
            if scores is not None:
                for k in range(1, len(tokens)):
                    lps[k] = scores.logprobs[k - 1]
                    tops[k] = P.top_dict((tokens[k], scores.logprobs[k - 1]), [scores.top[k - 1]])
        for info in infos:
            tokens.append(info.text)
            lps.append(info.logprob)
            tops.append(P.top_dict((info.text, info.logprob), info.top))
        offsets = []
        for t in tokens:
            offsets.append(offset)
            offset += len(t)
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}

    async def _replay(self, obj: dict, include_usage: bool) -> AsyncIterator[bytes]:
        for c in obj["choices"]:
            yield _event({**obj, "choices": [c], **({"usage": None} if include_usage else {})})
        if include_usage:
            yield _event({**obj, "choices": []})
        yield b"data: [DONE]\n\n"

    async def _stream_completion(self, job: Job, req: P.CompletionRequest, prompts: list[list[int]],
                                 texts: list[str], rid: str, created: int) -> AsyncIterator[bytes]:
        head = {"id": rid, "object": "text_completion", "created": created, "model": self.cfg.model_name}
        extra = {"usage": None} if req.include_usage else {}

        def chunk(i: int, text: str, lp: dict | None = None, finish: Completion | None = None) -> bytes:
            c = {"index": i, "text": text, "logprobs": lp, "finish_reason": finish.finish_reason if finish else None}
            if finish is not None:
                c["stop_reason"] = finish.stop_reason
            return _event({**head, "choices": [c], **extra})

        offsets = [0] * len(job.specs)
        if req.echo and req.logprobs is None:
            for i in range(len(job.specs)):
                yield chunk(i, texts[i // req.n])
        async for kind, i, piece, item in self._pieces(job):
            if kind == "prompt":
                lp = self._legacy_logprobs(job.specs[i].prompt, item, [], 0)
                offsets[i] = sum(len(t) for t in lp["tokens"])
                yield chunk(i, texts[i // req.n], lp)
            elif kind == "token" or kind == "finish":
                lp = None
                if req.logprobs is not None and kind == "token" and item is not None:
                    lp = self._legacy_logprobs(None, None, [item], offsets[i])
                    offsets[i] += len(item.text)
                if piece or lp or kind == "finish":
                    yield chunk(i, piece, lp, item if kind == "finish" else None)
            else:
                yield _event(P.APIError(item[0], item[1]).body())
                break
        if req.include_usage:
            yield _event({**head, "choices": [], "usage": P.usage(sum(map(len, prompts)), self._n_out(job))})
        yield b"data: [DONE]\n\n"

    @staticmethod
    def _n_out(job: Job) -> int:
        return sum(len(r.tokens) for r in job.runs if r is not None)

    async def _pieces(self, job: Job) -> AsyncIterator[tuple[str, int, str, Any]]:
        """A streaming job's items as (kind, choice, new text, item): "token" (item: TokenInfo or None),
        "prompt" (PromptScores), "finish" (Completion), "error" ((status, message)). Text a stop string
        might still take back (up to its length - 1 characters) is held until the next token."""
        hold = max((len(s) for s in job.specs[0].params.stop), default=1) - 1
        sent = [0] * len(job.specs)
        left = len(job.specs)
        while left:
            item = await job.queue.get()
            kind = item[0]
            if kind == "token":
                _, i, text, info = item
                end = max(sent[i], len(text) - hold)
                piece, sent[i] = text[sent[i]:end], end
                yield "token", i, piece, info
            elif kind == "prompt":
                yield "prompt", item[1], "", item[2]
            elif kind == "finish":
                _, i, out, _infos = item
                yield "finish", i, out.text[sent[i]:], out
                left -= 1
            else:
                yield "error", -1, "", (item[1], item[2])
                return

    # ---- /v1/chat/completions ----

    async def chat(self, request: Request) -> Response:
        body = await self._body(request)
        req = P.chat_request(body)
        tk = self.llm.tokenizer
        if tk is None:
            raise P.APIError(400, f"{self.llm.path.name} has no usable tokenizer, so it cannot chat")
        try:
            rendered = tk.apply_chat_template(req.messages, True, self.cfg.chat_template)
        except UnsupportedError:
            raise P.APIError(400, f"{self.llm.path.name} has no chat template: start the server with --chat-template "
                                  "FILE, or use /v1/completions", param="messages") from None
        except Exception as e:   # jinja2: the template refused the conversation (roles must alternate, ...)
            raise P.bad("messages", f"the chat template failed: {type(e).__name__}: {e}") from None
        ids = tk.encode(rendered)
        max_tokens = req.max_tokens if req.max_tokens is not None else max(self.llm.ctx - len(ids), 0)
        if max_tokens == 0 and req.max_tokens is None:
            raise P.bad("messages", f"the conversation takes {len(ids)} tokens, the whole context of {self.llm.ctx}")
        self._check_fits(ids, max_tokens, False, "messages")
        base = P.sampling(body, max_tokens, req.logprobs)
        specs = [SeqSpec(ids, dataclasses.replace(base, seed=P.choice_seed(base.seed, j))) for j in range(req.n)]
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        job = self._submit(specs, req.stream)
        if req.stream:
            return _SSE(self._stream_chat(job, req, len(ids), rid, created), lambda: self.worker.cancel(job))
        try:
            done = await self._collect(job, request)
        except _ClientGone:
            return Response(status_code=499)
        choices, n_out = [], 0
        for i in range(len(specs)):
            out, infos, _ = done[i]
            n_out += len(out.token_ids)
            lp = None
            if req.logprobs is not None:
                lp = {"content": [P.chat_logprob(x.text, x.logprob, x.top) for x in infos or []]}
            choices.append({"index": i, "message": {"role": "assistant", "content": out.text}, "logprobs": lp,
                            "finish_reason": out.finish_reason, "stop_reason": out.stop_reason})
        return JSONResponse({"id": rid, "object": "chat.completion", "created": created, "model": self.cfg.model_name,
                             "choices": choices, "usage": P.usage(len(ids), n_out)})

    async def _stream_chat(self, job: Job, req: P.ChatRequest, n_prompt: int, rid: str,
                           created: int) -> AsyncIterator[bytes]:
        head = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.cfg.model_name}
        extra = {"usage": None} if req.include_usage else {}

        def chunk(i: int, delta: dict, lp: dict | None = None, finish: Completion | None = None) -> bytes:
            c = {"index": i, "delta": delta, "logprobs": lp, "finish_reason": finish.finish_reason if finish else None}
            if finish is not None:
                c["stop_reason"] = finish.stop_reason
            return _event({**head, "choices": [c], **extra})

        for i in range(len(job.specs)):
            yield chunk(i, {"role": "assistant", "content": ""})
        async for kind, i, piece, item in self._pieces(job):
            if kind == "token":
                lp = None
                if req.logprobs is not None and item is not None:
                    lp = {"content": [P.chat_logprob(item.text, item.logprob, item.top)]}
                if piece or lp:
                    yield chunk(i, {"content": piece}, lp)
            elif kind == "finish":
                yield chunk(i, {"content": piece} if piece else {}, None, item)
            elif kind == "error":
                yield _event(P.APIError(item[0], item[1]).body())
                break
        if req.include_usage:
            yield _event({**head, "choices": [], "usage": P.usage(n_prompt, self._n_out(job))})
        yield b"data: [DONE]\n\n"


# ---- ASGI pieces ----

def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def _disconnect(request: Request) -> None:
    """Returns when the client has disconnected (the body was read already, so the next message is that)."""
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


class _SSE(Response):
    """Server-sent events from an async iterator, while listening for the client's disconnect: when it
    comes first, the stream stops and ``on_close`` runs (it aborts the request), before the next token."""

    media_type = "text/event-stream"

    def __init__(self, events: AsyncIterator[bytes], on_close: Callable[[], None]):
        self.status_code, self.background = 200, None
        self.init_headers({"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})   # no body: no Content-Length
        self.events, self.on_close = events, on_close

    async def __call__(self, scope, receive, send) -> None:
        async def stream() -> None:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            async for chunk in self.events:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        async def listen() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        out, gone = asyncio.ensure_future(stream()), asyncio.ensure_future(listen())
        try:
            await asyncio.wait({out, gone}, return_when=asyncio.FIRST_COMPLETED)
            if out.done():
                out.result()   # raises what the stream raised
        except OSError:        # the client went away while being written to
            pass
        finally:
            for t in (out, gone):
                if not t.done():
                    t.cancel()
            await asyncio.gather(out, gone, return_exceptions=True)
            if hasattr(self.events, "aclose"):
                await self.events.aclose()
            self.on_close()


class _Auth:
    """ASGI middleware: with an API key, every route but /health needs ``Authorization: Bearer KEY``."""

    def __init__(self, app, key: str | None):
        self.app, self.key = app, key

    async def __call__(self, scope, receive, send) -> None:
        if self.key and scope["type"] == "http" and scope["path"] != "/health":
            given = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            scheme, _, token = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), self.key.encode()):
                err = P.APIError(401, "missing or wrong API key: send the header 'Authorization: Bearer KEY' "
                                      "(the key the server was started with, --api-key or LLMBENCH_API_KEY)",
                                 code="invalid_api_key")
                await JSONResponse(err.body(), 401, headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)
                return
        await self.app(scope, receive, send)
