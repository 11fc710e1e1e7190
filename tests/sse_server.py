"""A real OpenAI-compatible streaming server for the tests (standard library only, 127.0.0.1).

POST /v1/completions and /v1/chat/completions answer with chunked Server-Sent Events. The first
word of the prompt (or of the last chat message) picks the behaviour:

  ok          wait ttft_s, then max_tokens text events itl_s apart, a usage event, [DONE]
  role_first  an empty/role-only event at once, then as ok (the first token is the first text)
  nousage     as ok, without the usage event
  multi       as ok, two tokens per event; usage counts tokens (2 * events)
  split       as ok, but each event is written in two halves 20 ms apart
  drop        3 text events, then the socket is closed mid-body
  malformed   1 text event, then an event whose data is not JSON
  error_event 1 text event, then {"error": {...}} (as vLLM reports a failure mid-stream)
  http500     HTTP 500 with a JSON error body
  hang        no response at all until the server stops (or hang_s passes)
  stall       2 text events, then silence until the server stops (or hang_s passes)
  slow        as ok, its first token held until ``gather`` requests (default 3) are held or 3 s
              pass, for concurrency counting (a fixed 100 ms, later 400 ms, once ended on a loaded
              host before the third of three concurrent requests arrived)

Usage reports prompt_tokens = 1000 + number of prompt words (nothing a client could guess) and
completion_tokens = tokens sent. The server counts requests in flight (max_inflight) and keeps each
request's JSON body and headers (requests).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SCENARIOS = {"ok", "role_first", "nousage", "multi", "split", "drop", "malformed", "error_event",
             "http500", "hang", "stall", "slow"}


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive, no Nagle delay (events leave when written), no request log: the base of
    the test servers' handlers."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args: object) -> None:
        pass


class _Handler(QuietHandler):
    server: SSEServer

    # ---- framing ----
    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _event(self, obj: object) -> None:
        self._chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")

    def _choice(self, chat: bool, text: str, finish: str | None, role: bool = False) -> dict:
        if chat:
            delta = {"role": "assistant", "content": text} if role else {"content": text}
            c = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            c = {"index": 0, "text": text, "finish_reason": finish}
        return {"id": "cmpl-test", "object": "chunk", "model": "test", "choices": [c]}

    def _json(self, status: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # ---- requests ----
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        chat = self.path.endswith("/v1/chat/completions")
        if not chat and not self.path.endswith("/v1/completions"):
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        prompt = body["messages"][-1]["content"] if chat else body["prompt"]
        words = str(prompt).split()
        scenario = words[0] if words and words[0] in SCENARIOS else "ok"
        srv = self.server
        with srv.lock:
            srv.requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
            phase = srv.enter()
        try:
            self._serve(scenario, chat, body, len(words))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with srv.lock:
                srv.leave(phase)

    def _serve(self, scenario: str, chat: bool, body: dict, n_words: int) -> None:
        srv = self.server
        if scenario == "http500":
            self._json(500, {"error": {"message": "boom: internal test failure", "type": "InternalServerError"}})
            return
        if scenario == "hang":
            srv.stop.wait(srv.hang_s)
            self.close_connection = True
            return
        n = int(body.get("max_tokens", 8))
        per_event = 2 if scenario == "multi" else 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        if scenario == "role_first":
            self._event(self._choice(chat, "", None, role=True))
        if scenario == "slow":
            srv.wait_for_company(srv.gather, 3.0)
        else:
            srv.stop.wait(srv.ttft_s)
        limit = {"drop": 3, "malformed": 1, "error_event": 1, "stall": 2}.get(scenario, n)
        for i in range(min(n, limit)):
            if i:
                time.sleep(srv.itl_s)
            text = "".join(f"t{i}.{k} " for k in range(per_event))
            ev = self._choice(chat, text, "length" if i == n - 1 else None)
            if scenario == "split":
                raw = b"data: " + json.dumps(ev).encode() + b"\n\n"
                self._chunk(raw[:17])
                time.sleep(0.02)
                self._chunk(raw[17:])
            else:
                self._event(ev)
        if scenario == "drop":
            self.close_connection = True        # no terminating chunk: the body is cut short
            return
        if scenario == "stall":
            srv.stop.wait(srv.hang_s)
            self.close_connection = True
            return
        if scenario == "malformed":
            self._chunk(b'data: {"choices": [{"text": "broken\n\n')
        elif scenario == "error_event":
            self._event({"error": {"message": "engine died (test)", "code": 500}})
        elif scenario != "nousage" and body.get("stream_options", {}).get("include_usage"):
            usage = {"prompt_tokens": 1000 + n_words, "completion_tokens": n * per_event,
                     "total_tokens": 1000 + n_words + n * per_event}
            self._event({"id": "cmpl-test", "object": "chunk", "model": "test", "choices": [], "usage": usage})
        if scenario not in ("malformed", "error_event"):
            self._event(b"[DONE]")
        self._chunk(b"")                        # 0-length chunk: end of body


class ThreadedServer(ThreadingHTTPServer):
    """A test server that serves from a daemon thread inside ``with``; ``stop`` is set on the way out
    (handlers that hang watch it)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.arrived = threading.Condition(self.lock)
        self.inflight = self.max_inflight = self._phase = 0
        self._wave = self._held = 0
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> ThreadedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        with self.lock:
            self.arrived.notify_all()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)

    def enter(self) -> int:
        """A request arrives (call under ``lock``): counted in flight; returns the count's phase."""
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        return self._phase

    def leave(self, phase: int) -> None:
        """A request that arrived in ``phase`` is done (call under ``lock``)."""
        if phase == self._phase:
            self.inflight -= 1

    def restart_count(self) -> None:
        """Count requests in flight from zero (call under ``lock``). Requests of the earlier count leave
        without touching this one: a client can read a response's last byte before its handler has left,
        and a handler leaving after a reset had left the count at -1 (a test then saw 7 of 8 in flight)."""
        self._phase += 1
        self.inflight = self.max_inflight = 0

    def wait_for_company(self, n: int, timeout: float) -> None:
        """Hold this request until n are held, then release the n together (or until ``timeout`` s
        pass, or the server stops). A client allowed n at a time thus reaches n in flight however slowly
        a loaded host sends them, and one allowed fewer shows it, where a fixed delay could end before
        a slow third request arrived."""
        with self.lock:
            wave = self._wave
            self._held += 1
            if self._held >= n:
                self._wave, self._held = wave + 1, 0
                self.arrived.notify_all()
            elif not self.arrived.wait_for(lambda: self._wave != wave or self.stop.is_set(), timeout):
                self._held -= 1

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class SSEServer(ThreadedServer):
    daemon_threads = True
    request_queue_size = 128    # socketserver's default listen backlog of 5 drops SYNs under a burst,
                                # and the kernel's 1 s retransmit then shows up as a 1 s TTFT

    def __init__(self, ttft_s: float = 0.05, itl_s: float = 0.01, hang_s: float = 10.0) -> None:
        super().__init__(_Handler)
        self.ttft_s, self.itl_s, self.hang_s = ttft_s, itl_s, hang_s
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.requests: list[dict] = []
            self.restart_count()
            self.gather = 3

