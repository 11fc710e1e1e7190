"""Serving metrics from per-request event logs, with vLLM's definitions and JSON key names.

The quantities and keys follow vLLM's serving benchmark (vllm/benchmarks/serve.py, ``calculate_metrics``
and the result dict of ``benchmark``), so an llmbench result and a ``vllm bench serve`` result can be
compared key by key:

    TTFT  first token - arrival                                   (ttft)
    TPOT  (E2E - TTFT) / (output_tokens - 1), only output_tokens > 1   (tpot)
    ITL   every gap between successive token events, pooled over requests   (itl)
    E2E   last token event - arrival                              (e2el)

``request_throughput = completed / duration``, ``output_throughput = total_output_tokens / duration``,
``total_token_throughput = (total_input_tokens + total_output_tokens) / duration`` and
``request_goodput = good / duration``; token totals count completed requests only. A request is good
when every given SLO holds with ``value <= slo`` (vLLM's inclusive test), a request with at most one
output token having TPOT 0 for that test.

Where we differ from vLLM, on purpose:
- a statistic over no samples (all requests failed, or no request with two tokens for TPOT) is
  ``None``, where vLLM writes 0 (``np.mean([] or 0)``): a 0 ms TPOT would read as a measurement;
- ``duration`` defaults to first arrival -> last finish of any request (failed ones included); vLLM
  times the same span from the client (``perf_counter`` before the first send, after the last
  response). Pass ``duration_s`` to use a wall clock measured outside.
- ``min_*_ms`` and ``max_*_ms`` are added beside vLLM's mean/median/std/percentiles.
``std_*_ms`` is the population standard deviation (``np.std``, ddof=0), exactly as vLLM reports it.

Also here: llama-bench-style tokens/s statistics and decode memory bandwidth. Tested in
tests/test_metrics.py on hand-computed event logs and with hypothesis properties.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .stats import DEFAULT_PERCENTILES, percentile_key, sample_std, summarize

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
SLO_KEYS = ("ttft", "tpot", "e2el")
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")


# ---- per-request record ----

@dataclass
class RequestTiming:
    """Timestamps of one request on a monotonic nanosecond clock (any origin; only differences count).

    ``token_ns`` holds the time of every output token event, the first included, so
    ``token_ns[0] == first_token_ns``; it may be left empty, meaning ``[first_token_ns]``. From an
    external server an event is a streamed chunk, which can carry several tokens: ``output_tokens``
    is then the server's usage count and can exceed ``len(token_ns)`` (as in vLLM).
    A request with ``error`` set failed: it counts in ``failed`` and in no latency or token total,
    and its timestamps may be partial (None). A request without error must have a first token.
    """

    arrival_ns: int
    first_token_ns: int | None
    token_ns: Sequence[int] | np.ndarray = field(default_factory=list)
    finish_ns: int | None = None
    prompt_tokens: int | None = 0     # None allowed on a failed request only
    output_tokens: int | None = 0
    error: str | None = None

    def __post_init__(self) -> None:
        self.token_ns = [int(t) for t in np.asarray(self.token_ns, dtype=np.int64).ravel()]
        if any(n is not None and n < 0 for n in (self.prompt_tokens, self.output_tokens)):
            raise ValueError("RequestTiming: token counts must be >= 0")
        if self.error is not None:
            return
        if self.prompt_tokens is None or self.output_tokens is None:
            raise ValueError("RequestTiming: a request without error needs prompt_tokens and output_tokens "
                             "(from an external server: its usage report; with none, mark the request "
                             "failed or count its tokens another way, e.g. the engine's tokenizer)")
        if self.first_token_ns is None:
            raise ValueError("RequestTiming: a request without error needs first_token_ns; "
                             "set error='...' for a request that produced no token")
        if self.output_tokens < 1:
            raise ValueError("RequestTiming: a request without error needs output_tokens >= 1")
        if self.first_token_ns < self.arrival_ns:
            raise ValueError("RequestTiming: first_token_ns is before arrival_ns")
        if self.token_ns:
            if self.token_ns[0] != self.first_token_ns:
                raise ValueError("RequestTiming: token_ns[0] must equal first_token_ns")
            if any(b < a for a, b in zip(self.token_ns, self.token_ns[1:])):
                raise ValueError("RequestTiming: token_ns must be non-decreasing")
        if self.finish_ns is not None and self.finish_ns < self.last_token_ns:
            raise ValueError("RequestTiming: finish_ns is before the last token")

    @property
    def ok(self) -> bool:
        """Whether the request finished without error."""
        return self.error is None

    @property
    def last_token_ns(self) -> int:
        """When the last token arrived (ns)."""
        return self.token_ns[-1] if self.token_ns else int(self.first_token_ns)  # type: ignore[arg-type]

    @property
    def ttft_ns(self) -> int:
        """Time to first token (ns): first token minus arrival."""
        return int(self.first_token_ns) - self.arrival_ns  # type: ignore[arg-type]

    @property
    def e2el_ns(self) -> int:
        """End-to-end latency (ns): last token minus arrival."""
        return self.last_token_ns - self.arrival_ns

    @property
    def tpot_ns(self) -> float | None:
        """(E2E - TTFT) / (output_tokens - 1); None for one output token (vLLM leaves it out)."""
        n = self.output_tokens or 0   # None only on a failed request
        if n <= 1:
            return None
        return (self.e2el_ns - self.ttft_ns) / (n - 1)

    @property
    def itl_ns(self) -> list[int]:
        """Inter-token latencies (ns): the gaps between consecutive tokens."""
        return [b - a for a, b in zip(self.token_ns, self.token_ns[1:])]

    def to_dict(self) -> dict:
        """The timing as a JSON-serializable dict (`from_dict` reads it back)."""
        return {"arrival_ns": int(self.arrival_ns),
                "first_token_ns": None if self.first_token_ns is None else int(self.first_token_ns),
                "token_ns": list(self.token_ns),
                "finish_ns": None if self.finish_ns is None else int(self.finish_ns),
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "error": self.error}

    @classmethod
    def from_dict(cls, d: Mapping) -> RequestTiming:
        """From ``to_dict()`` output, or any mapping with these keys (extra keys are ignored, so
        ``dataclasses.asdict`` of llmbench.backends.openai.RequestResult works too)."""
        return cls(arrival_ns=d["arrival_ns"], first_token_ns=d.get("first_token_ns"),
                   finish_ns=d.get("finish_ns"), error=d.get("error"), token_ns=d.get("token_ns") or [], prompt_tokens=d.get("prompt_tokens", 0),
                   output_tokens=d.get("output_tokens", 0))


# ---- SLOs ----

def parse_slos(specs: Iterable[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` -> ``{"ttft": 500.0, "tpot": 50.0}`` (milliseconds), as vLLM's
    ``--goodput`` takes them."""
    slos: dict[str, float] = {}
    for spec in specs:
        key, sep, value = spec.partition(":")
        if not sep:
            raise ValueError(f"goodput SLO {spec!r}: write KEY:MILLISECONDS, e.g. ttft:500")
        try:
            slos[key.strip()] = float(value)
        except ValueError:
            raise ValueError(f"goodput SLO {spec!r}: {value!r} is not a number of milliseconds") from None
    _check_slos(slos)
    return slos


def _check_slos(slos: Mapping[str, float]) -> None:
    for key, ms in slos.items():
        if key not in SLO_KEYS:
            raise ValueError(f"goodput SLO {key!r}: the keys are {', '.join(SLO_KEYS)}")
        if not (isinstance(ms, (int, float)) and math.isfinite(ms) and ms >= 0):
            raise ValueError(f"goodput SLO {key}: {ms!r} must be a number of milliseconds >= 0")


# ---- serving metrics ----

def benchmark_duration_ns(requests: Sequence[RequestTiming]) -> int:
    """First arrival to the last moment any request was seen to end (finish, else its last token)."""
    ends = []
    for r in requests:
        if r.finish_ns is not None:
            ends.append(r.finish_ns)
        elif r.ok:
            ends.append(r.last_token_ns)
        elif r.token_ns:
            ends.append(r.token_ns[-1])
        elif r.first_token_ns is not None:
            ends.append(r.first_token_ns)
    if not requests or not ends:
        return 0
    return max(max(ends) - min(r.arrival_ns for r in requests), 0)


def _peak_per_second(done: Sequence[RequestTiming]) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests: one-second buckets from the first
    arrival of a completed request; each token event counts one token; a request is live in every
    bucket from its arrival's to its last token's."""
    if not done:
        return 0.0, 0
    t0 = min(r.arrival_ns for r in done)
    t1 = max(r.last_token_ns for r in done)
    n = math.ceil((t1 - t0) / NS_PER_S) + 1
    tokens = np.zeros(n)
    live = np.zeros(n, dtype=np.int64)
    for r in done:
        for t in (r.token_ns or [r.last_token_ns]):
            tokens[(t - t0) // NS_PER_S] += 1
        live[(r.arrival_ns - t0) // NS_PER_S:(r.last_token_ns - t0) // NS_PER_S + 1] += 1
    return float(tokens.max()), int(live.max())


def serving_metrics(
    requests: Sequence[RequestTiming],
    percentiles: Iterable[float] = DEFAULT_PERCENTILES,
    slos: Mapping[str, float] | None = None,
    duration_s: float | None = None,
) -> dict:
    """vLLM-compatible metrics of one run: a flat, JSON-serializable dict.

    Keys: ``duration`` (s), ``completed``, ``failed``, ``total_input_tokens``, ``total_output_tokens``,
    ``request_throughput``, ``request_goodput`` (None without SLOs), ``output_throughput``,
    ``total_token_throughput``, ``max_output_tokens_per_s``, ``max_concurrent_requests``, and for each
    of ttft, tpot, itl, e2el: ``mean_X_ms``, ``median_X_ms``, ``std_X_ms`` (ddof=0, as vLLM),
    ``pP_X_ms`` per percentile, ``min_X_ms``, ``max_X_ms``.
    ``slos``: {"ttft": ms, "tpot": ms, "e2el": ms}, any subset. ``duration_s`` overrides the duration
    taken from the timestamps (see ``benchmark_duration_ns``). Throughputs are None if the duration
    is 0.
    """
    ps = list(percentiles)
    done = [r for r in requests if r.ok]
    ttft = [r.ttft_ns / NS_PER_MS for r in done]
    e2el = [r.e2el_ns / NS_PER_MS for r in done]
    tpot = [r.tpot_ns / NS_PER_MS for r in done if r.tpot_ns is not None]
    itl = [g / NS_PER_MS for r in done for g in r.itl_ns]

    dur = float(duration_s) if duration_s is not None else benchmark_duration_ns(requests) / NS_PER_S
    if not (math.isfinite(dur) and dur >= 0):
        raise ValueError(f"serving_metrics: duration {dur!r} s must be finite and >= 0")

    def per_s(n: float) -> float | None:
        return n / dur if dur > 0 else None

    total_in = sum(int(r.prompt_tokens or 0) for r in done)   # never None on a request without error
    total_out = sum(int(r.output_tokens or 0) for r in done)
    good = None
    if slos:
        _check_slos(slos)
        good = 0
        for r in done:
            tp = r.tpot_ns / NS_PER_MS if r.tpot_ns is not None else 0.0  # vLLM: tpot 0 if n_out <= 1
            value = {"ttft": r.ttft_ns / NS_PER_MS, "tpot": tp, "e2el": r.e2el_ns / NS_PER_MS}
            good += all(value[k] <= slo for k, slo in slos.items())
    peak_tokens, peak_live = _peak_per_second(done)

    out: dict = {
        "duration": dur,
        "completed": len(done),
        "failed": len(requests) - len(done),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(done)),
        "request_goodput": per_s(good) if good is not None else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_live,
    }
    for name, samples in (("ttft", ttft), ("tpot", tpot), ("itl", itl), ("e2el", e2el)):
        s = summarize(samples, ps, ddof=0)
        for stat in ("mean", "median", "std"):
            out[f"{stat}_{name}_ms"] = s[stat]
        for p in ps:
            out[f"{percentile_key(p)}_{name}_ms"] = s[percentile_key(p)]
        out[f"min_{name}_ms"] = s["min"]
        out[f"max_{name}_ms"] = s["max"]
    return out


# ---- llama-bench style ----

def llama_bench_stats(tokens: int, seconds_list: Sequence[float]) -> dict:
    """Tokens/s of repetitions as llama-bench reports them.

    Each repetition processed ``tokens`` tokens in ``seconds_list[i]`` seconds. As llama-bench does,
    ``avg_ts`` is the mean of the per-repetition rates ``tokens / seconds`` (not tokens over the mean
    time) and ``stddev_ts`` their sample standard deviation (0 for one repetition). The same for
    times in ns. Keys follow llama-bench's JSON output: n_tokens, avg_ns, stddev_ns, avg_ts,
    stddev_ts, samples_ns, samples_ts.
    """
    if tokens < 1:
        raise ValueError("llama_bench_stats: tokens must be >= 1")
    secs = [float(s) for s in seconds_list]
    if not secs:
        raise ValueError("llama_bench_stats: no repetitions")
    if not all(math.isfinite(s) and s > 0 for s in secs):
        raise ValueError("llama_bench_stats: every repetition needs a positive, finite time")
    ns = [round(s * NS_PER_S) for s in secs]
    ts = [tokens / s for s in secs]
    return {"n_tokens": int(tokens),
            "avg_ns": math.fsum(ns) / len(ns), "stddev_ns": sample_std(ns),
            "avg_ts": math.fsum(ts) / len(ts), "stddev_ts": sample_std(ts),
            "samples_ns": ns, "samples_ts": ts}


# ---- memory bandwidth of decode ----

def decode_step_bytes(weight_bytes: int, kv_bytes_per_token: int, context_lens: Sequence[int] | int) -> int:
    """Bytes one decode step must read: every weight once, plus the K and V cache of every token in
    the context of every sequence in the batch (``kv_bytes_per_token`` over all layers)."""
    ctx = [context_lens] if isinstance(context_lens, (int, np.integer)) else list(context_lens)
    if weight_bytes < 0 or kv_bytes_per_token < 0 or any(c < 0 for c in ctx):
        raise ValueError("decode_step_bytes: sizes must be >= 0")
    return int(weight_bytes) + int(kv_bytes_per_token) * int(sum(ctx))


def fits_in_cache(bytes_per_step: float, cache_bytes: int | None) -> bool | None:
    """Whether a decode step's bytes fit in the last-level cache (None: its size unknown): then decode
    may read them from the cache, and a fraction of the memory bandwidth is no limit for it."""
    return None if cache_bytes is None else bytes_per_step <= cache_bytes


def cache_note(bytes_per_step: float, cache_bytes: int) -> str:
    """The sentence every report prints beside such a fraction."""
    return (f"a decode step's {bytes_per_step / 2**20:.0f} MiB fit in the {cache_bytes / 2**20:.0f} MiB last-level "
            "cache: decode can read them from there, so the fraction of the memory bandwidth is no limit")


def decode_bandwidth(
    bytes_per_step: float,
    step_seconds: float | Sequence[float],
    measured_gbps: float | None = None,
    cache_bytes: int | None = None,
) -> dict:
    """Achieved read bandwidth of decode and its fraction of the machine's measured bandwidth.

    ``step_seconds`` is one step time or one per step; with several, the time is their mean, so
    ``achieved_gbps`` is total bytes over total time. GB are 1e9 bytes, as ``llmbench membw`` reports.
    ``fraction`` is achieved / measured (None without a measurement): the distance to the physical
    limit, 1.0 meaning decode reads at the machine's full bandwidth. With ``cache_bytes`` (the last-level
    cache, llmbench.info.llc_bytes), ``fits_in_cache`` says whether a step's bytes fit in it: then
    decode may read them from the cache, and the fraction is no distance to a memory limit.
    """
    steps = np.atleast_1d(np.asarray(step_seconds, dtype=np.float64))
    if steps.size == 0 or not np.all(np.isfinite(steps)) or np.any(steps <= 0):
        raise ValueError("decode_bandwidth: step times must be positive and finite")
    if not (bytes_per_step >= 0):
        raise ValueError("decode_bandwidth: bytes_per_step must be >= 0")
    step_s = float(steps.mean())
    achieved = bytes_per_step / step_s / 1e9
    if measured_gbps is not None and not (measured_gbps > 0):
        raise ValueError("decode_bandwidth: measured_gbps must be > 0")
    if cache_bytes is not None and not (cache_bytes > 0):
        raise ValueError("decode_bandwidth: cache_bytes must be > 0")
    return {"bytes_per_step": float(bytes_per_step), "step_s": step_s, "steps": int(steps.size),
            "achieved_gbps": achieved, "measured_gbps": measured_gbps,
            "fraction": achieved / measured_gbps if measured_gbps else None,
            "cache_bytes": cache_bytes, "fits_in_cache": fits_in_cache(bytes_per_step, cache_bytes)}


def prefill_compute(ops: dict[str, float], seconds: float | Sequence[float], peaks_gops: dict[str, float]) -> dict:
    """A prompt phase against the machine's arithmetic peaks: ``ops[kind]`` operations run on the
    instruction of ``kind`` (``peaks_gops[kind]`` GOP/s, e.g. "f32" FP32 FMAs, "int8" 8-bit dot products),
    taking ``seconds`` (one time or one per repetition: their mean). ``min_seconds`` is the time at the
    peaks (sum of ops / peak), ``fraction`` = min_seconds / seconds: 1.0 is the compute limit."""
    secs = np.atleast_1d(np.asarray(seconds, dtype=np.float64))
    if secs.size == 0 or not np.all(np.isfinite(secs)) or np.any(secs <= 0):
        raise ValueError("prefill_compute: times must be positive and finite")
    if any(not (v >= 0) for v in ops.values()):
        raise ValueError("prefill_compute: operation counts must be >= 0")
    missing = sorted(set(ops) - set(peaks_gops))
    if missing or any(not (peaks_gops[k] > 0) for k in ops):
        raise ValueError(f"prefill_compute: need a positive peak for {', '.join(missing or sorted(ops))}")
    t = float(secs.mean())
    min_s = sum(v / (peaks_gops[k] * 1e9) for k, v in ops.items())
    return {"ops": {k: float(v) for k, v in ops.items()}, "seconds": t, "min_seconds": min_s,
            "achieved_gops": sum(ops.values()) / t / 1e9, "peaks_gops": {k: float(peaks_gops[k]) for k in ops},
            "fraction": min_s / t}
