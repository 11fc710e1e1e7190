"""The engine thread of `llmbench serve`: it alone touches the engine.

HTTP handlers call `EngineWorker.submit` (a `Job`: one HTTP request, one engine sequence per choice)
and `cancel`; both only put the job in an inbox and wake the thread. The thread loops: take the
inbox (new sequences go to the engine at once, so they join the running batch at the next step:
continuous batching; or, with ``batching="static"``, wait until ``max_batch`` sequences are pending
or the oldest has waited ``batch_timeout`` seconds, and nothing more is admitted until that batch is
done), one engine step (the GIL released inside), then the step's events: each becomes an item on
its job's asyncio queue, handed to the event loop once per step (``call_soon_threadsafe``).

Items on a job's queue, in order per choice:
- ``("token", index, text, token_item)`` when the job streams: ``text`` is the choice's text so
  far (stop strings already cut; it can shrink by a partial stop string the stream held back), and
  ``token_item`` a `TokenInfo` when the job asked for logprobs, else None
- ``("prompt", index, PromptScores)`` once the prompt is computed, when the job asked for echo
  log-probabilities
- ``("finish", index, Completion)``: the choice is done (``finish_reason`` "length", "stop" or "abort")
- ``("error", status, message)``: the job failed (then nothing more comes)

Token handling (incremental detokenization, stop strings, stop tokens) is `llmbench.llm._Run`'s, so
a choice's text and tokens are what `LLM.generate` gives for the same prompt and sampling.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..llm import EV_ADMIT, EV_FINISH, EV_TOKEN, LLM, Completion, SamplingParams, _Run

# Histogram buckets (seconds), vLLM's where it has them, with finer steps below 10 ms for small models.
TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TPOT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
                2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
DECODE_WINDOW = 6   # tokens of left context when a token's text is read off the difference of two decodes


class Histogram:
    """A Prometheus histogram: cumulative bucket counts, sum and count."""

    def __init__(self, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum, self.count = 0.0, 0

    def observe(self, v: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, v)] += 1
        self.sum += v
        self.count += 1


@dataclass
class Stats:
    """What /metrics shows; written by the engine thread, read by handlers (a snapshot under the lock)."""

    running: int = 0                # sequences admitted and not finished
    waiting: int = 0                # sequences submitted and not admitted (inbox, static batch, engine queue)
    kv_blocks: int = 0
    kv_free: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: collections.Counter = field(default_factory=collections.Counter)   # by finish reason
    rejected: int = 0               # 429s
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    tpot: Histogram = field(default_factory=lambda: Histogram(TPOT_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))


@dataclass
class TokenInfo:
    """A generated token's text in context, its log-probability and the top alternatives'."""

    text: str
    logprob: float
    top: list[tuple[str, float]]     # (text, logprob) of the top-n tokens, most likely first


@dataclass
class PromptScores:
    """Echo log-probabilities: for prompt tokens 1.. (the first has none), each token's logprob and
    the most likely token at its position (text in context, logprob)."""

    logprobs: list[float]
    top: list[tuple[str, float]]


@dataclass
class SeqSpec:
    """One choice to generate: prompt ids and sampling; ``prompt_scores`` asks for echo logprobs."""

    prompt: list[int]
    params: SamplingParams
    prompt_scores: bool = False


class ServerBusy(Exception):
    """More sequences than the server holds (running + ``max_waiting``): answered 429."""


class EngineDown(Exception):
    """The engine thread has stopped after a failure: requests are answered 503."""


class Job:
    """One HTTP request inside the worker: its sequences and the asyncio queue its handler reads."""

    _ids = itertools.count()

    def __init__(self, specs: list[SeqSpec], stream: bool, loop: asyncio.AbstractEventLoop):
        self.id = next(self._ids)
        self.specs, self.stream = specs, stream
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self.arrival_ns = time.monotonic_ns()
        self.runs: list[_Run | None] = [None] * len(specs)
        self.cancelled = False
        self.open = len(specs)           # choices not finished


class EngineWorker:
    """Owns ``llm.engine``: one thread steps it and turns its events into job queue items."""

    def __init__(self, llm: LLM, max_batch: int, max_waiting: int, batching: str = "continuous",
                 batch_timeout: float = 1.0, step_delay: float = 0.0):
        if batching not in ("continuous", "static"):
            raise ValueError(f"batching must be 'continuous' or 'static', got {batching!r}")
        self.llm, self.max_batch, self.max_waiting = llm, max_batch, max_waiting
        self.static, self.batch_timeout = batching == "static", batch_timeout
        self.step_delay = step_delay   # seconds slept after each step: tests use it to watch requests in flight
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.inbox: list[tuple[str, Job]] = []
        self.pending: collections.deque[Job] = collections.deque()   # static batching: jobs not yet in the engine
        self.by_seq: dict[int, tuple[Job, int]] = {}                  # engine sequence -> (job, choice)
        self.in_flight = 0                                            # sequences submitted and not finished
        self.stats = Stats(kv_blocks=llm.kv_blocks, kv_free=llm.kv_blocks)
        self.stopping = False
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name="llmbench-engine", daemon=True)
        self._out: list[tuple[Job, tuple]] = []

    # ---- called from the event loop ----

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Finish what is in flight, then end the thread."""
        with self.lock:
            self.stopping = True
            self.wake.notify()
        self.thread.join(timeout)

    def submit(self, specs: list[SeqSpec], stream: bool) -> Job:
        job = Job(specs, stream, asyncio.get_running_loop())
        with self.lock:
            if self.error is not None or not self.thread.is_alive():
                raise EngineDown(f"the engine has stopped: {self.error or 'not running'}")
            if self.stopping:
                raise ServerBusy("the server is shutting down")
            if self.in_flight + len(specs) > self.max_batch + self.max_waiting:
                self.stats.rejected += 1
                raise ServerBusy(f"{self.in_flight} sequences are running or waiting, and this server holds at most "
                                 f"{self.max_batch} running (--max-batch) + {self.max_waiting} waiting "
                                 f"(--max-waiting); this request has {len(specs)}")
            self.in_flight += len(specs)
            self.stats.waiting += len(specs)
            self.inbox.append(("add", job))
            self.wake.notify()
        return job

    def cancel(self, job: Job) -> None:
        """The client is gone: abort the job's sequences and free their KV blocks now."""
        with self.lock:
            if job.cancelled or job.open == 0:
                return
            job.cancelled = True
            self.inbox.append(("cancel", job))
            self.wake.notify()

    def snapshot(self) -> Stats:
        import copy

        with self.lock:
            return copy.deepcopy(self.stats)

    # ---- the engine thread ----

    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as e:   # an engine failure ends the server's generation: say so to every job
            self.error = e
            with self.lock:
                jobs = {j.id: j for j, _ in self.by_seq.values()}
                jobs.update({j.id: j for _, j in self.inbox})
                jobs.update({j.id: j for j in self.pending})
            for j in jobs.values():
                self._emit(j, ("error", 500, f"the engine failed: {type(e).__name__}: {e}"))
            self._flush()

    def _loop(self) -> None:
        eng = self.llm.engine
        while True:
            with self.lock:
                while not self.inbox and not self.by_seq and not self._launchable():
                    if self.stopping and not self.pending:
                        return
                    self.wake.wait(self._wait_for())
                inbox, self.inbox = self.inbox, []
            for what, job in inbox:
                if what == "add":
                    if self.static:
                        self.pending.append(job)
                    else:
                        self._add(job)
                else:
                    self._cancel(job)
            if self.static and self._launchable():
                self._launch()
            if self.by_seq:
                busy = eng.step()
                self._dispatch()
                if busy and self.step_delay:
                    time.sleep(self.step_delay)
            else:
                self._dispatch()
            self._flush()

    def _wait_for(self) -> float | None:
        if self.static and self.pending:
            return max(0.0, self.batch_timeout - (time.monotonic_ns() - self.pending[0].arrival_ns) / 1e9) + 1e-3
        return None

    def _launchable(self) -> bool:
        """Static batching: the engine is idle and a full batch waits, or the oldest request waited long enough."""
        if not (self.static and self.pending and not self.by_seq):
            return False
        n = sum(len(j.specs) for j in self.pending if not j.cancelled)
        waited = (time.monotonic_ns() - self.pending[0].arrival_ns) / 1e9
        return n >= self.max_batch or waited >= self.batch_timeout or self.stopping

    def _launch(self) -> None:
        n = 0
        while self.pending:
            job = self.pending[0]
            if job.cancelled:
                self.pending.popleft()
                self._cancel(job)
                continue
            if n and n + len(job.specs) > self.max_batch:
                break
            self.pending.popleft()
            n += len(job.specs)
            self._add(job)

    def _add(self, job: Job) -> None:
        eng = self.llm.engine
        if job.cancelled:
            self._cancel(job)
            return
        added = []
        try:
            for i, spec in enumerate(job.specs):
                run = _Run(self.llm, spec.prompt, spec.params)
                run.index = i
                run.seq = eng.add(spec.prompt, **run.engine_args(), prompt_logprobs_from=0 if spec.prompt_scores else -1)
                job.runs[i] = run
                added.append(run.seq)
                self.by_seq[run.seq] = (job, i)
        except (ValueError, RuntimeError) as e:   # the engine refused the request (checked before, so rare)
            for s in added:
                eng.release(s)
                del self.by_seq[s]
            with self.lock:
                self.in_flight -= len(job.specs)
                self.stats.waiting -= len(job.specs)
            job.open = 0
            self._emit(job, ("error", 400, str(e)))

    def _cancel(self, job: Job) -> None:
        eng = self.llm.engine
        started = [r for r in job.runs if r is not None]
        for r in started:
            if r.seq in self.by_seq:
                eng.abort(r.seq)   # its FINISH event (abort) frees the blocks at the next poll
        if not started and job.open:   # never reached the engine (static batching)
            with self.lock:
                self.in_flight -= job.open
                self.stats.waiting -= job.open
                self.stats.finished["abort"] += job.open
            job.open = 0

    def _dispatch(self) -> None:
        eng = self.llm.engine
        topn = max((j.specs[i].params.logprobs or 0 for j, i in self.by_seq.values()), default=0)
        kv_changed = False
        for seq, kind, tok, lp, t, top_ids, top_lps in eng.poll(topn):
            for k, (sq, kd, tk, p, tt) in enumerate(zip(seq.tolist(), kind.tolist(), tok.tolist(), lp.tolist(),
                                                        t.tolist())):
                entry = self.by_seq.get(sq)
                if entry is None:
                    continue
                job, i = entry
                run = job.runs[i]
                assert run is not None   # by_seq holds started runs only
                n_before = len(run.tokens)
                run.event(kd, tk, p, tt, top_ids[k], top_lps[k], _no_text if job.stream else None)
                if kd == EV_ADMIT:
                    kv_changed = True
                    with self.lock:
                        self.stats.running += 1
                        self.stats.waiting -= 1
                        self.stats.queue.observe(max(0, tt - job.arrival_ns) / 1e9)
                elif kd == EV_TOKEN and len(run.tokens) > n_before:
                    if n_before == 0:
                        self._prompt_scores(job, i)
                        with self.lock:
                            self.stats.ttft.observe(max(0, tt - job.arrival_ns) / 1e9)
                    if job.stream:
                        info = self._token_info(run) if run.sp.logprobs is not None else None
                        self._emit(job, ("token", i, self._text(run), info))
                elif kd == EV_FINISH:
                    if not run.tokens:
                        self._prompt_scores(job, i)
                    eng.release(sq)
                    del self.by_seq[sq]
                    kv_changed = True
                    self._finish(job, i, run, admitted_before=run.admit > 0)
        if kv_changed:
            free = eng.memory()["free_blocks"]
            with self.lock:
                self.stats.kv_free = free

    @staticmethod
    def _text(run: _Run) -> str:
        return run.text

    def _finish(self, job: Job, i: int, run: _Run, admitted_before: bool) -> None:
        out = run.result()
        job.open -= 1
        n = len(out.token_ids)
        with self.lock:
            self.in_flight -= 1
            if admitted_before:
                self.stats.running -= 1
            else:
                self.stats.waiting -= 1
            self.stats.prompt_tokens += len(out.prompt_token_ids) - out.cached_tokens if admitted_before else 0
            self.stats.generation_tokens += n
            self.stats.finished[out.finish_reason] += 1
            self.stats.e2e.observe(max(0, (int(out.token_ns[-1]) if n else out.finish_ns) - job.arrival_ns) / 1e9)
            if n > 1:
                self.stats.tpot.observe((int(out.token_ns[-1]) - int(out.token_ns[0])) / 1e9 / (n - 1))
        self._emit(job, ("finish", i, out, self._token_infos(run) if run.sp.logprobs is not None else None))

    def _prompt_scores(self, job: Job, i: int) -> None:
        spec, run = job.specs[i], job.runs[i]
        assert run is not None   # called for started runs only
        if not spec.prompt_scores or run.admit == 0:
            return
        n = len(spec.prompt) - 1
        try:
            lps, _ = self.llm.engine.prompt_logprobs(run.seq, n)
            top_ids, top_lps = self.llm.engine.prompt_top(run.seq, n)
        except (ValueError, RuntimeError):   # aborted before its prompt was computed
            return
        tk = self.llm.tokenizer
        top = [(token_text(tk, spec.prompt, j + 1, int(t)), float(v)) for j, (t, v) in
               enumerate(zip(top_ids.tolist(), top_lps.tolist()))]
        self._emit(job, ("prompt", i, PromptScores([float(x) for x in lps.tolist()], top)))

    def _token_info(self, run: _Run, k: int = -1) -> TokenInfo:
        k = k % len(run.tokens)
        ids = run.prompt + run.tokens[: k + 1]
        at = len(run.prompt) + k
        tk = self.llm.tokenizer
        top = []
        if run.sp.logprobs:
            top = [(token_text(tk, ids, at, t), v) for t, v in run.top[k].items()]
        return TokenInfo(token_text(tk, ids, at), run.lps[k], top)

    def _token_infos(self, run: _Run) -> list[TokenInfo]:
        return [self._token_info(run, k) for k in range(len(run.tokens))]

    def _emit(self, job: Job, item: tuple) -> None:
        self._out.append((job, item))

    def _flush(self) -> None:
        """Hand the step's items to the event loops, one call per loop."""
        if not self._out:
            return
        out, self._out = self._out, []
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        for job, item in out:
            by_loop.setdefault(job.loop, []).append((job.queue, item))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:   # the loop is closed: its handlers are gone
                pass


def _no_text(index: int, tok: int, delta: str) -> None:
    """An on_token callback that asks _Run to keep the text up to date (streams show it); the
    deltas are not used, as a stop string found later can take back text already added."""


def _deliver(items: list[tuple[asyncio.Queue, tuple]]) -> None:
    for q, item in items:
        q.put_nowait(item)


def token_text(tk, ids: Sequence[int], at: int, token: int | None = None) -> str:
    """The text token ``token`` (default ``ids[at]``) adds after ``ids[:at]``: the difference of two
    decodes over a few tokens of left context, so a SentencePiece word keeps its leading space."""
    if tk is None:
        return ""
    left = list(ids[max(0, at - DECODE_WINDOW): at])
    tok = ids[at] if token is None else token
    base = tk.decode(left)
    full = tk.decode(left + [int(tok)])
    return full[len(base):] if full.startswith(base) else full


def prompt_token_texts(tk, ids: Sequence[int]) -> list[str]:
    """Each prompt token's text (as the tokenizer renders it in context)."""
    return [token_text(tk, ids, i) for i in range(len(ids))]


__all__ = ["EngineWorker", "Job", "SeqSpec", "ServerBusy", "Stats", "TokenInfo", "PromptScores", "token_text",
           "prompt_token_texts", "Completion"]
