"""The operation profile (llmbench bench --profile): the kinds cover the forward time, the products split
by weight type, nothing changes in the arithmetic, and the result validates."""

from __future__ import annotations

import json
import subprocess
import sys

import matplotlib
import pytest

matplotlib.use("Agg")

from llmbench import LLM, SamplingParams, plot  # noqa: E402
from llmbench.perf import profile  # noqa: E402
from llmbench.perf.schema import validate  # noqa: E402


def test_kinds_cover_the_forward_time(stories_path):
    # the kinds are timed inside the forward pass: they never exceed it, and the loop between them is
    # small. A loaded machine can take the thread away between two operations now and then (or between a
    # product's own clock and its kind's: 0.78 of decode's matmul typed once, 0.92-0.93 in quiet runs), so a
    # run short on either is measured again, three times at most: an operation left untimed would leave
    # every run short
    def typed(r):
        return sum(r["matmul_by_type_ns"].values())

    for attempt in range(3):
        p = profile.measure(str(stories_path), threads=1, pp=64, tg=8, reps=2, overhead=False)
        if all(p[ph]["coverage"] >= 0.9 and typed(p[ph]) >= 0.8 * p[ph]["kinds_ns"]["matmul"]
               for ph in ("prefill", "decode")):
            break
    for ph, tokens in (("prefill", 128), ("decode", 14)):   # decode: tg - 1 steps after the prefill token
        r = p[ph]
        assert r["tokens"] == tokens and r["forward_ns"] > 0
        assert set(r["kinds_ns"]) == set(profile.KINDS) and all(v >= 0 for v in r["kinds_ns"].values())
        assert 0.9 <= r["coverage"] <= 1.0 and r["other_ns"] == r["forward_ns"] - sum(r["kinds_ns"].values())
        assert r["kinds_ns"]["matmul"] > 0 and r["kinds_ns"]["attention"] > 0
        assert 0.8 * r["kinds_ns"]["matmul"] <= typed(r) <= 1.02 * r["kinds_ns"]["matmul"]
    fig = plot.breakdown(p)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["prefill", "decode"]


def test_products_split_by_weight_type_and_the_bits_stay():
    # tiny:Q4_K_M holds Q4_K and Q6_K matrices; profiling reads clocks only, so the tokens are the same
    sp = SamplingParams(max_tokens=12, temperature=0)
    prof = LLM("tiny:Q4_K_M", threads=1, profile=True)
    plain = LLM("tiny:Q4_K_M", threads=1)
    assert prof.generate("12 34 56", sp)[0].token_ids == plain.generate("12 34 56", sp)[0].token_ids
    st = prof.engine.stats()
    assert {"Q4_K", "Q6_K"} <= {profile._type_name(t) for t in st["prof_type_ns"]["prefill"]}
    off = plain.engine.stats()
    assert all(v == 0 for ph in off["prof_ns"].values() for v in ph.values()) and not off["prof_type_ns"]["decode"]
    with pytest.raises(ValueError, match="CPU backend"):
        LLM("tiny", backend="cuda", profile=True)


def test_bench_profile_result_validates(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--model", "tiny:Q8_0", "--threads", "1",
                        "--pp", "32", "--tg", "8", "--batch", "0", "--reps", "1", "--profile", "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Profile: share of the forward time" in r.stdout and "profiling cost" in r.stdout
    result = json.loads(out.read_text())
    validate(result)
    assert result["profile"]["prefill"]["tokens"] == 32 and set(result["profile"]["overhead"]) == {"prefill", "decode"}
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--model", "tiny", "--batch", "1,2", "--profile"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--profile" in r.stderr
