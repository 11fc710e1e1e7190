"""Serving metrics, summary statistics, llama-bench stats and decode bandwidth on hand-computed logs."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbench.perf.metrics import (
    RequestTiming,
    benchmark_duration_ns,
    decode_bandwidth,
    decode_step_bytes,
    llama_bench_stats,
    parse_slos,
    prefill_compute,
    serving_metrics,
)
from llmbench.perf.stats import percentile_key, summarize

MS = 1_000_000  # ns


def req(arrival, tokens, out=None, prompt=0, finish=None, error=None):
    """A request from times in ms."""
    toks = [t * MS for t in tokens]
    return RequestTiming(arrival_ns=arrival * MS, first_token_ns=toks[0] if toks else None,
                         token_ns=toks, finish_ns=None if finish is None else finish * MS,
                         prompt_tokens=prompt, output_tokens=len(tokens) if out is None else out,
                         error=error)


# The event log every hand computation below refers to (times in ms):
#   r0  arrives   0, tokens 100 120 150 160, 4 out, 10 in   TTFT 100  E2E 160  TPOT 60/3 = 20  ITL 20 30 10
#   r1  arrives  10, token 50,                 1 out,  5 in   TTFT  40  E2E  40  TPOT excluded  ITL none
#   r2  arrives  20, tokens 220 260 300,       3 out,  8 in   TTFT 200  E2E 280  TPOT 80/2 = 40  ITL 40 40
#   r3  arrives  30, fails, seen ending at 1000 ms                         (only in failed and duration)
#   r4  arrives  40, 2 chunks at 90 and 190 carrying 5 tokens, 7 in
#                                                            TTFT  50  E2E 150  TPOT 100/4 = 25  ITL 100
# duration = 1000 - 0 ms = 1 s.
def log():
    return [
        req(0, [100, 120, 150, 160], prompt=10, finish=165),
        req(10, [50], prompt=5, finish=55),
        req(20, [220, 260, 300], prompt=8, finish=310),
        RequestTiming(arrival_ns=30 * MS, first_token_ns=None, finish_ns=1000 * MS, prompt_tokens=9,
                      error="HTTP 500"),
        req(40, [90, 190], out=5, prompt=7, finish=195),
    ]


# ---- summarize ----

def test_summarize_by_hand():
    # sorted 1 2 4 10: mean 17/4, median (2+4)/2 = 3
    # p90: rank 0.9*3 = 2.7 -> 4 + 0.7*(10-4) = 8.2; p50 = 3; p99: 2.97 -> 4 + 0.97*6 = 9.82
    # sample var: deviations -3.25 -2.25 -0.25 5.75 -> squares sum 10.5625+5.0625+0.0625+33.0625 = 48.75, /3
    s = summarize([4, 1, 10, 2])
    assert s["count"] == 4 and s["mean"] == 4.25 and s["median"] == 3
    assert s["p50"] == 3 and s["p90"] == pytest.approx(8.2) and s["p99"] == pytest.approx(9.82)
    assert s["p95"] == pytest.approx(4 + 0.85 * 6)
    assert s["std"] == pytest.approx(math.sqrt(48.75 / 3))
    assert s["min"] == 1 and s["max"] == 10 and s["samples"] == [4, 1, 10, 2]
    assert summarize([4, 1, 10, 2], ddof=0)["std"] == pytest.approx(math.sqrt(48.75 / 4))
    json.dumps(s)


def test_summarize_edge_cases():
    one = summarize([7.5])
    assert one["std"] == 0.0 and one["p99"] == 7.5 and one["median"] == 7.5
    empty = summarize([], percentiles=(50, 99.9))
    assert empty == {"count": 0, "mean": None, "median": None, "std": None, "min": None, "max": None,
                     "p50": None, "p99.9": None, "samples": []}
    json.dumps(empty)
    assert percentile_key(99.9) == "p99.9" and percentile_key(99.0) == "p99"
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, float("nan")])
    with pytest.raises(ValueError, match="outside"):
        summarize([1.0], percentiles=(101,))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30), st.floats(0, 100))
def test_summarize_percentile_is_linear_interpolation(xs, p):
    # vLLM's (and NumPy's default) definition, written out: rank h = (n - 1) p / 100 between order statistics
    s = summarize(xs, percentiles=(p,))
    v = sorted(xs)
    h = (len(v) - 1) * p / 100
    lo = int(np.floor(h))
    want = v[lo] + (h - lo) * (v[min(lo + 1, len(v) - 1)] - v[lo])
    assert s[percentile_key(p)] == pytest.approx(want, rel=1e-9, abs=1e-6)
    assert s["min"] <= s["median"] <= s["max"]


# ---- serving metrics on the hand-computed log ----

def test_counts_and_throughputs():
    m = serving_metrics(log())
    assert m["duration"] == 1.0
    assert m["completed"] == 4 and m["failed"] == 1
    assert m["total_input_tokens"] == 10 + 5 + 8 + 7          # the failed request's 9 not counted
    assert m["total_output_tokens"] == 4 + 1 + 3 + 5          # chunked r4 counts its 5 tokens
    assert m["request_throughput"] == 4.0
    assert m["output_throughput"] == 13.0
    assert m["total_token_throughput"] == 43.0
    assert m["request_goodput"] is None                       # no SLOs given
    # all 10 token events fall in the first second; all 4 completed requests live in it
    assert m["max_output_tokens_per_s"] == 10 and m["max_concurrent_requests"] == 4
    json.dumps(m)


def test_ttft_and_e2el():
    m = serving_metrics(log())
    # TTFT 100 40 200 50 -> sorted 40 50 100 200; mean 97.5; median 75
    # p90: rank 2.7 -> 100 + 0.7*100 = 170; p99: 2.97 -> 197
    # population std: deviations 2.5 -57.5 102.5 -47.5, squares sum 16075, /4 = 4018.75
    assert m["mean_ttft_ms"] == 97.5 and m["median_ttft_ms"] == 75
    assert m["p50_ttft_ms"] == 75
    assert m["p90_ttft_ms"] == pytest.approx(170) and m["p99_ttft_ms"] == pytest.approx(197)
    assert m["p95_ttft_ms"] == pytest.approx(185)
    assert m["std_ttft_ms"] == pytest.approx(math.sqrt(4018.75))
    assert m["min_ttft_ms"] == 40 and m["max_ttft_ms"] == 200
    # E2E 160 40 280 150 -> mean 157.5, median (150+160)/2 = 155
    assert m["mean_e2el_ms"] == 157.5 and m["median_e2el_ms"] == 155 and m["max_e2el_ms"] == 280


def test_tpot_excludes_one_token_outputs():
    m = serving_metrics(log())
    # TPOT 20 (r0), 40 (r2), 25 (r4: (150-50)/(5-1) uses the usage count, not the 2 chunks); r1 excluded
    # sorted 20 25 40: mean 85/3, median 25, p99: rank 1.98 -> 25 + 0.98*15 = 39.7
    assert m["mean_tpot_ms"] == pytest.approx(85 / 3)
    assert m["median_tpot_ms"] == 25
    assert m["p99_tpot_ms"] == pytest.approx(39.7)
    assert m["min_tpot_ms"] == 20
    only_one = serving_metrics([req(0, [5]), req(1, [9])])
    assert only_one["mean_tpot_ms"] is None and only_one["p99_tpot_ms"] is None  # no sample, not 0
    assert only_one["mean_itl_ms"] is None


def test_itl_pools_all_gaps():
    m = serving_metrics(log())
    # ITL pooled: 20 30 10 | 40 40 | 100 -> sorted 10 20 30 40 40 100; mean 240/6 = 40
    # median (30+40)/2 = 35; p90: rank 4.5 -> 40 + 0.5*60 = 70
    assert m["mean_itl_ms"] == 40 and m["median_itl_ms"] == 35
    assert m["p90_itl_ms"] == pytest.approx(70)
    assert m["max_itl_ms"] == 100 and m["min_itl_ms"] == 10


def test_goodput():
    # ttft<=100, tpot<=30: r0 (100, 20) good: the bound is inclusive, as vLLM's `slo >= value`;
    # r1 (40, tpot counts as 0) good; r2 (200) bad; r4 (50, 25) good -> 3 good over 1 s
    assert serving_metrics(log(), slos={"ttft": 100, "tpot": 30})["request_goodput"] == 3.0
    # e2el<=150: r1 (40) and r4 (150) only
    assert serving_metrics(log(), slos={"e2el": 150})["request_goodput"] == 2.0
    # all three SLOs must hold
    assert serving_metrics(log(), slos={"ttft": 100, "tpot": 30, "e2el": 150})["request_goodput"] == 2.0
    assert serving_metrics(log(), slos={"tpot": 19})["request_goodput"] == 1.0  # only r1 (tpot 0)
    assert parse_slos(["ttft:500", "tpot:50"]) == {"ttft": 500.0, "tpot": 50.0}
    with pytest.raises(ValueError, match="keys are"):
        parse_slos(["itl:5"])
    with pytest.raises(ValueError, match="KEY:MILLISECONDS"):
        parse_slos(["ttft=5"])
    with pytest.raises(ValueError, match="keys are"):
        serving_metrics(log(), slos={"latency": 5})


def test_failed_requests_and_duration():
    # without r3's late failure the run ends at r2's finish: 310 ms
    ok = [r for r in log() if r.ok]
    assert benchmark_duration_ns(ok) == 310 * MS
    m = serving_metrics(ok, duration_s=2.0)                   # a wall clock measured outside
    assert m["duration"] == 2.0 and m["request_throughput"] == 2.0 and m["failed"] == 0
    # a failure that produced some tokens is still excluded from every latency
    partial = req(0, [10, 20, 30], prompt=3, error="stream cut")
    m = serving_metrics([partial, req(0, [50, 60], prompt=1)])
    assert m["completed"] == 1 and m["failed"] == 1 and m["mean_ttft_ms"] == 50
    assert m["total_input_tokens"] == 1 and m["duration"] == 0.06
    everything_failed = serving_metrics([RequestTiming(0, None, error="refused")])
    assert everything_failed["completed"] == 0 and everything_failed["mean_e2el_ms"] is None
    assert everything_failed["request_throughput"] is None    # duration 0: no rate
    json.dumps(everything_failed)


def test_request_timing_checks():
    with pytest.raises(ValueError, match="error="):
        RequestTiming(0, None, output_tokens=1)
    with pytest.raises(ValueError, match="token_ns\\[0\\]"):
        RequestTiming(0, 5, token_ns=[6, 7], output_tokens=2)
    with pytest.raises(ValueError, match="non-decreasing"):
        RequestTiming(0, 5, token_ns=[5, 9, 7], output_tokens=3)
    with pytest.raises(ValueError, match="before arrival"):
        RequestTiming(10, 5, output_tokens=1)
    r = RequestTiming(0, 5, token_ns=np.array([5, 9]), output_tokens=2, finish_ns=10)
    assert RequestTiming.from_dict(json.loads(json.dumps(r.to_dict()))) == r
    assert RequestTiming(3, 5, output_tokens=1).e2el_ns == 2   # empty token_ns means [first_token_ns]
    # token counts a server did not report: fine on a failed request, an error on a good one
    failed = RequestTiming(0, 5, [5], 9, None, None, error="no usage")
    assert serving_metrics([failed, req(0, [7], prompt=2)])["total_input_tokens"] == 2
    with pytest.raises(ValueError, match="usage"):
        RequestTiming(0, 5, [5], 9, prompt_tokens=None, output_tokens=1)
    # extra keys (e.g. asdict of the openai backend's RequestResult) are ignored
    assert RequestTiming.from_dict({**r.to_dict(), "text": "hi", "index": 3}) == r


def test_custom_percentiles_keys():
    m = serving_metrics(log(), percentiles=(25, 99.9))
    assert "p99.9_ttft_ms" in m and "p25_itl_ms" in m and "p99_ttft_ms" not in m
    # TTFT sorted 40 50 100 200, p25: rank 0.75 -> 40 + 0.75*10
    assert m["p25_ttft_ms"] == pytest.approx(47.5)


# ---- properties ----

@st.composite
def request_logs(draw):
    rs = []
    for _ in range(draw(st.integers(1, 6))):
        arrival = draw(st.integers(0, 10**9))
        if draw(st.booleans()) and rs:
            rs.append(RequestTiming(arrival, None, finish_ns=arrival + draw(st.integers(0, 10**8)),
                                    error="x"))
            continue
        gaps = draw(st.lists(st.integers(0, 10**8), min_size=1, max_size=8))
        toks = list(np.cumsum(gaps) + arrival)
        out = draw(st.integers(len(toks), len(toks) + 3))
        rs.append(RequestTiming(arrival, toks[0], toks, None, draw(st.integers(0, 100)), out))
    return rs


def _shift(r, d):
    return RequestTiming(r.arrival_ns + d, None if r.first_token_ns is None else r.first_token_ns + d,
                         [t + d for t in r.token_ns], None if r.finish_ns is None else r.finish_ns + d,
                         r.prompt_tokens, r.output_tokens, r.error)


@settings(max_examples=60, deadline=None)
@given(request_logs(), st.integers(-10**12, 10**12))
def test_invariant_to_shifting_all_timestamps(rs, d):
    a = serving_metrics(rs, slos={"ttft": 50, "tpot": 20})
    b = serving_metrics([_shift(r, d) for r in rs], slos={"ttft": 50, "tpot": 20})
    assert a.keys() == b.keys()
    for k in a:
        assert a[k] == b[k] or (a[k] is not None and b[k] == pytest.approx(a[k], rel=1e-9)), k


@settings(max_examples=60, deadline=None)
@given(request_logs())
def test_latency_orderings(rs):
    for r in rs:
        if r.ok:
            assert 0 <= r.ttft_ns <= r.e2el_ns
            if r.tpot_ns is not None:
                assert r.tpot_ns * (r.output_tokens - 1) == pytest.approx(r.e2el_ns - r.ttft_ns)
    m = serving_metrics(rs, slos={"e2el": 30})
    if m["completed"]:
        assert m["mean_ttft_ms"] <= m["mean_e2el_ms"] + 1e-9
        assert m["max_ttft_ms"] <= m["max_e2el_ms"]
        assert m["request_goodput"] is None or m["request_goodput"] <= m["request_throughput"]
    assert m["completed"] + m["failed"] == len(rs)


# ---- llama-bench and bandwidth ----

def test_llama_bench_stats():
    # 128 tokens in 1.0, 0.5, 0.8 s -> 128, 256, 160 t/s; mean 544/3
    # sample std of t/s: deviations -53.33 74.67 -21.33 -> (2844.44 + 5575.11 + 455.11) / 2 = 4437.33
    s = llama_bench_stats(128, [1.0, 0.5, 0.8])
    assert s["samples_ts"] == [128.0, 256.0, 160.0]
    assert s["avg_ts"] == pytest.approx(544 / 3)              # mean of rates, not 128 / mean time
    assert s["stddev_ts"] == pytest.approx(math.sqrt(13312 / 3))
    assert s["samples_ns"] == [1_000_000_000, 500_000_000, 800_000_000]
    assert s["avg_ns"] == pytest.approx(2.3e9 / 3)
    assert llama_bench_stats(8, [0.25])["stddev_ts"] == 0.0
    with pytest.raises(ValueError):
        llama_bench_stats(8, [])
    with pytest.raises(ValueError):
        llama_bench_stats(8, [0.0])
    json.dumps(s)


def test_decode_bandwidth():
    # 400 MB of weights + 2 sequences at 1000 and 3000 tokens * 25 kB of KV per token = 500 MB
    b = decode_step_bytes(400_000_000, 25_000, [1000, 3000])
    assert b == 500_000_000 and decode_step_bytes(10, 2, 3) == 16
    # 500 MB in 10 ms = 50 GB/s; of a measured 80 GB/s: 0.625
    r = decode_bandwidth(b, 0.010, measured_gbps=80.0)
    assert r["achieved_gbps"] == pytest.approx(50.0) and r["fraction"] == pytest.approx(0.625)
    # several steps: total bytes over total time (mean step 12.5 ms -> 40 GB/s)
    r = decode_bandwidth(b, [0.010, 0.015], measured_gbps=80.0)
    assert r["achieved_gbps"] == pytest.approx(40.0) and r["steps"] == 2
    assert decode_bandwidth(b, 0.01)["fraction"] is None
    with pytest.raises(ValueError):
        decode_bandwidth(b, [0.01, 0.0])
    json.dumps(r)
    # against a last-level cache: 500 MB fit in 512 MiB (537 MB), not in 260 MiB
    assert r["fits_in_cache"] is None
    assert decode_bandwidth(b, 0.01, 80.0, cache_bytes=512 << 20)["fits_in_cache"] is True
    assert decode_bandwidth(b, 0.01, 80.0, cache_bytes=260 << 20)["fits_in_cache"] is False
    from llmbench.perf.metrics import cache_note

    assert cache_note(100 << 20, 260 << 20).startswith("a decode step's 100 MiB fit in the 260 MiB last-level cache")
    with pytest.raises(ValueError, match="cache_bytes"):
        decode_bandwidth(b, 0.01, 80.0, cache_bytes=0)


def test_last_level_cache_from_sysfs(tmp_path):
    from llmbench.info import llc_bytes

    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
                                             (3, "Unified", "266240K")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        for name, v in (("level", level), ("type", kind), ("size", size)):
            (d / name).write_text(f"{v}\n")
    assert llc_bytes(str(tmp_path)) == 266240 << 10
    (tmp_path / "index3" / "size").write_text("")       # a level that does not say its size is skipped
    assert llc_bytes(str(tmp_path)) == 2048 << 10
    assert llc_bytes(str(tmp_path / "nothing")) is None


def test_prefill_compute():
    # 2e12 int8 ops at 1000 GOP/s = 2 s, 1e11 flops at 200 GFLOP/s = 0.5 s: 2.5 s at the peaks
    r = prefill_compute({"int8": 2e12, "f32": 1e11}, [4.0, 6.0], {"int8": 1000.0, "f32": 200.0, "bf16": 400.0})
    assert r["seconds"] == 5.0 and r["min_seconds"] == 2.5 and r["fraction"] == 0.5
    assert r["achieved_gops"] == 2.1e12 / 5.0 / 1e9 and r["peaks_gops"] == {"int8": 1000.0, "f32": 200.0}
    assert prefill_compute({"f32": 0.0}, 1.0, {"f32": 1.0})["fraction"] == 0.0
    with pytest.raises(ValueError, match="positive peak for int8"):
        prefill_compute({"int8": 1.0}, 1.0, {"f32": 1.0})
    with pytest.raises(ValueError, match="positive peak for f32"):
        prefill_compute({"f32": 1.0}, 1.0, {"f32": 0.0})
    with pytest.raises(ValueError, match="positive and finite"):
        prefill_compute({"f32": 1.0}, [1.0, 0.0], {"f32": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        prefill_compute({"f32": -1.0}, 1.0, {"f32": 1.0})
