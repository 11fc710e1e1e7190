"""A real OpenAI-compatible server for the evaluation adapter's tests (standard library only, 127.0.0.1).

POST /v1/completions and /v1/chat/completions (streamed with ``stream: true``: one Server-Sent Event per
generated token, text and log-probabilities cut as the whole answer's are, then with
``stream_options.include_usage`` a usage event, then [DONE]), and GET /v1/models. Its "model" splits text
into words with their leading whitespace (`split_tokens`: "Q: is it?" -> "Q:", " is", " it?") and gives
each token a hand-written log-probability (`LOGPROBS`, else -1.0); a token in `NOT_GREEDY` has a better
alternative ("~alt", 0.5 higher) in its top_logprobs. The first prompt token has none, as in OpenAI's
API. With echo the answer is shaped like vLLM's: the prompt's tokens (after ``bos`` when set, whose text
"<s>" is not part of the prompt), then the generated ones, text_offset the running sum of token lengths.
What it "generates" is ``gen_text``, cut at max_tokens or at the first stop string.

Settings a test changes (``reset`` restores them):

  bos          "<s>" or None       a BOS token echoed before the prompt (vLLM on Llama models does)
  echo         "full"              prompt log-probabilities returned
               "generated_only"    echo ignored: logprobs for generated tokens only (llama-server, some builds)
               "null"              logprobs null
               "content"           chat-style logprobs.content for generated tokens only
               "reject"            HTTP 400 "Only no echo is supported" (llama-server)
               "null_prompt"       the prompt echoed with null log-probabilities
               "prompt_only"       the prompt echoed, the generated tokens left out of logprobs (but
                                   counted in usage.completion_tokens)
  zero         "ok"                max_tokens 0 generates nothing (vLLM)
               "reject"            HTTP 400 for max_tokens < 1
               "unlimited"         max_tokens 0 means no limit (llama-cpp-python): 3 tokens generated
  strip_space  token texts lose their leading space, so they no longer spell the prompt (vLLM decoding a
               SentencePiece token alone, in some versions)
  usage        send the usage block (streamed: the final usage event, when include_usage asks for it)
  faults       popped one per POST: "503", "500", "429" (Retry-After: 0), "400", "drop" (close without
               answering), "hang" (answer nothing for hang_s); streamed requests also "drop_mid" (two
               token events, then the connection closes), "error_mid" (one token event, then an error
               event, as vLLM reports a failure mid-stream), "malformed" (an event that is not JSON)
  delay_s      wait before each answer
  gather       with delay_s: answers are held until this many are held, then released together (each
               held delay_s at most), for concurrency counting (ThreadedServer.wait_for_company)
  max_logprobs more top log-probabilities than this are refused with HTTP 400, as vLLM refuses more than
               its --max-logprobs

A request may carry at most 4 stop strings, as OpenAI's API allows (more: HTTP 400). The server keeps each
POST's path and body (``requests``) and counts requests in flight (``max_inflight``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from sse_server import QuietHandler, ThreadedServer

LOGPROBS = {" Paris": -0.25, " France": -0.5, " London": -2.5, "one": -0.125, " two": -0.375}
NOT_GREEDY = {" London"}
DEFAULT_LP = -1.0
ALT = "~alt"
MODEL = "test-model"


def split_tokens(text: str) -> list[str]:
    """The test model's tokenizer: words with their leading whitespace; trailing whitespace alone."""
    return re.findall(r"\s*\S+|\s+", text)


def token_logprob(tok: str) -> float:
    return LOGPROBS.get(tok, DEFAULT_LP)


def top_of(tok: str, shown: str, n: int = 1) -> dict[str, float]:
    lp = token_logprob(tok)
    top = {ALT: lp + 0.5, shown: lp} if tok in NOT_GREEDY else {shown: lp}
    for k in range(1, n):                       # more alternatives, all worse, when more are asked for
        top.setdefault(f"~alt{k}", lp - k)
    return top


class _Handler(QuietHandler):
    server: EvalServer

    def _json(self, status: int, obj: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        self._json(status, {"error": {"message": message, "code": status}}, headers)

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": self.server.models})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.body = body
        srv = self.server
        with srv.lock:
            srv.requests.append({"path": self.path, "body": body})
            fault = srv.faults.pop(0) if srv.faults else None
            phase = srv.enter()
        self.fault = fault
        try:
            if srv.delay_s and srv.gather:
                srv.wait_for_company(srv.gather, srv.delay_s)
            elif srv.delay_s:
                srv.stop.wait(srv.delay_s)
            if fault == "drop":
                self.close_connection = True    # no answer at all: the client sees the connection close
                return
            if fault == "hang":
                srv.stop.wait(srv.hang_s)
                self.close_connection = True
                return
            if fault in ("500", "503"):
                self._error(int(fault), f"engine overloaded (test fault {fault})")
                return
            if fault == "429":
                self._error(429, "too many requests (test)", {"Retry-After": "0"})
                return
            if fault == "400":
                self._error(400, "bad parameter (test fault 400)")
                return
            n_top = body.get("top_logprobs") if self.path.endswith("/chat/completions") else body.get("logprobs")
            if isinstance(n_top, int) and n_top > srv.max_logprobs:
                self._error(400, f"Requested sample logprobs of {n_top}, which is greater than max allowed: "
                                 f"{srv.max_logprobs}")
                return
            if self.path == "/v1/completions":
                self._completions(body)
            elif self.path == "/v1/chat/completions":
                self._chat(body)
            else:
                self._error(404, f"no route {self.path}")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with srv.lock:
                srv.leave(phase)

    # ---- generation ----

    def _generate(self, body: dict[str, Any], max_tokens: int) -> tuple[list[str], str, str] | None:
        """(generated tokens, their text, finish_reason), or None after answering an error."""
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        if len(stops) > 4:
            self._error(400, f"stop takes at most 4 sequences, got {len(stops)}")
            return None
        gen = split_tokens(self.server.gen_text)
        toks = gen[:max_tokens]
        finish = "length" if len(gen) > max_tokens else "stop"
        text = "".join(toks)
        hits = [text.find(s) for s in stops if s and s in text]
        if hits:
            text, finish = text[:min(hits)], "stop"
            kept, pos = [], 0
            for t in toks:                      # tokens generated up to the one that completed the stop
                kept.append(t)
                pos += len(t)
                if pos > len(text):
                    break
            toks = kept
        return toks, text, finish

    def _completions(self, body: dict[str, Any]) -> None:
        srv = self.server
        prompt = body["prompt"]
        echo = bool(body.get("echo"))
        m = int(body.get("max_tokens", 16))
        if srv.zero == "reject" and m < 1:
            self._error(400, "max_tokens must be at least 1, got 0")
            return
        if echo and srv.echo == "reject":
            self._error(400, "Only no echo is supported")
            return
        if m == 0:
            m = 3 if srv.zero == "unlimited" else (1 if echo and srv.echo == "generated_only" else 0)
        out = self._generate(body, m)
        if out is None:
            return
        gen, gen_text, finish = out
        ptoks = ([srv.bos] if srv.bos else []) + split_tokens(prompt)
        n_top = int(body.get("logprobs") or 0)

        def shown(t: str) -> str:
            return t.lstrip(" ") if srv.strip_space else t

        logprobs: Any = None
        if body.get("logprobs") is not None:
            toks = (ptoks if echo and srv.echo != "generated_only" else []) + \
                ([] if echo and srv.echo == "prompt_only" else gen)
            n_prompt = len(ptoks) if echo and srv.echo != "generated_only" else 0
            lps: list[float | None] = [token_logprob(t) for t in toks]
            tops: list[dict[str, float] | None] = [top_of(t, shown(t), max(n_top, 1)) for t in toks]
            if n_prompt:
                lps[0] = tops[0] = None
            if srv.echo == "null_prompt":
                lps[:n_prompt] = tops[:n_prompt] = [None] * n_prompt
            shown_toks = [shown(t) for t in toks]
            offsets, pos = [], 0
            for t in shown_toks:
                offsets.append(pos)
                pos += len(t)
            logprobs = {"tokens": shown_toks, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}
            if srv.echo == "null" and echo:
                logprobs = None
            elif srv.echo == "content" and echo:
                logprobs = {"content": [{"token": t, "logprob": token_logprob(t), "top_logprobs": []} for t in gen]}
        choice = {"index": 0, "text": (prompt if echo else "") + gen_text, "logprobs": logprobs,
                  "finish_reason": finish}
        self._answer("text_completion", choice, len(ptoks), len(gen))

    def _chat(self, body: dict[str, Any]) -> None:
        out = self._generate(body, int(body.get("max_tokens", 16)))
        if out is None:
            return
        gen, text, finish = out
        n_prompt = sum(len(split_tokens(m["content"])) for m in body["messages"])
        logprobs = None
        if body.get("logprobs"):
            n = int(body.get("top_logprobs") or 0)
            top = [[{"token": k, "logprob": v} for k, v in top_of(t, t, n).items()][:n] for t in gen]
            logprobs = {"content": [{"token": t, "logprob": token_logprob(t), "top_logprobs": tt}
                                    for t, tt in zip(gen, top)]}
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                  "finish_reason": finish}
        self._answer("chat.completion", choice, n_prompt, len(gen))

    def _answer(self, kind: str, choice: dict[str, Any], n_prompt: int, n_gen: int) -> None:
        obj: dict[str, Any] = {"id": "cmpl-test", "object": kind, "model": MODEL, "choices": [choice]}
        usage = {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen}
        if self.body.get("stream"):
            self._stream(kind, choice, usage)
            return
        if self.server.usage:
            obj["usage"] = usage
        self._json(200, obj)

    # ---- streaming ----

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, kind: str, choice: dict[str, Any], usage: dict[str, int]) -> None:
        """The answer ``choice`` as OpenAI streams it: a token a event, the text cut where the whole
        answer's was (the last token's piece may be shorter than the token), each event's logprobs
        its token's, finish_reason on the last one."""
        chat = kind == "chat.completion"
        text = choice["message"]["content"] if chat else choice["text"]
        lp = choice.get("logprobs")
        if chat:
            toks = [c["token"] for c in lp["content"]] if lp else split_tokens(self.server.gen_text)
        else:
            toks = lp["tokens"] if lp else split_tokens(self.server.gen_text)
        events, pos = [], 0
        for i, t in enumerate(toks):
            piece = text[pos: pos + len(t)]
            pos += len(t)
            if chat:
                c: dict[str, Any] = {"index": 0, "delta": {"content": piece}, "finish_reason": None}
                if lp:
                    c["logprobs"] = {"content": [lp["content"][i]]}
            else:
                c = {"index": 0, "text": piece, "finish_reason": None}
                if lp:
                    c["logprobs"] = {k: [v[i]] for k, v in lp.items()}
            events.append(c)
            if pos >= len(text):
                break
        if not events:
            events.append({"index": 0, **({"delta": {"content": ""}} if chat else {"text": ""}), "finish_reason": None})
        events[-1]["finish_reason"] = choice["finish_reason"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        head = {"id": "cmpl-test", "object": "chat.completion.chunk" if chat else "text_completion", "model": MODEL}
        if chat:
            self._chunk(b"data: " + json.dumps({**head, "choices": [
                {"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}).encode() + b"\n\n")
        fault = getattr(self, "fault", None)
        for k, c in enumerate(events):
            if (fault == "drop_mid" and k == 2) or (fault in ("error_mid", "malformed") and k == 1):
                if fault == "error_mid":
                    self._chunk(b'data: {"error": {"message": "engine died (test)", "code": 500}}\n\n')
                elif fault == "malformed":
                    self._chunk(b"data: {not json\n\n")
                    self._chunk(b"")
                self.close_connection = True        # no terminating chunk: the body ends early
                return
            self._chunk(b"data: " + json.dumps({**head, "choices": [c]}).encode() + b"\n\n")
        so = self.body.get("stream_options") or {}
        if self.server.usage and so.get("include_usage"):
            self._chunk(b"data: " + json.dumps({**head, "choices": [], "usage": usage}).encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


class EvalServer(ThreadedServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, hang_s: float = 5.0) -> None:
        super().__init__(_Handler)
        self.hang_s = hang_s
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.bos: str | None = "<s>"
            self.echo = "full"
            self.zero = "ok"
            self.strip_space = False
            self.usage = True
            self.faults: list[str] = []
            self.delay_s = 0.0
            self.gather = 0
            self.max_logprobs = 20
            self.gen_text = "one two three four"
            self.models: list[dict[str, Any]] = [
                {"id": MODEL, "object": "model", "owned_by": "llmbench-tests", "max_model_len": 4096,
                 "permission": [{"id": "modelperm-test"}]}]
            self.requests: list[dict[str, Any]] = []
            self.restart_count()

    def bodies(self, path: str = "/v1/completions") -> list[dict[str, Any]]:
        with self.lock:
            return [r["body"] for r in self.requests if r["path"] == path]

