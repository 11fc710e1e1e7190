"""The arithmetic-peak probe (csrc/peak.c): positive, finite figures from the instruction of each SIMD
level, the peak a weight type is compared with, and checked arguments (no timing claims)."""

import math

import pytest

import llmbench
from llmbench import _core
from llmbench.perf import peak

# what each level measures: the FP32 and the 8-bit instruction (AVX-512 without VNNI uses the AVX2 dots)
EXPECT = {"scalar": ("scalar mul+add", "scalar int32 mul+add"), "avx2": ("vfmadd231ps ymm", "vpmaddubsw+vpmaddwd ymm"),
          "neon": ("fmla v.4s", ("sdot v.4s", "smull+sadalp"))}


def levels() -> list[str]:
    order = ["scalar", "neon", "avx2", "avx512"]
    detected = _core.simd_info()["detected"]
    return [lvl for lvl in order[:order.index(detected) + 1] if lvl != "neon" or detected == "neon"]


@pytest.mark.parametrize("level", levels())
def test_peak_each_level(level: str):
    before = _core.simd_info()["active"]
    try:
        _core.simd_set(level)
        f, i = peak.measure("f32", threads=1, rounds=20_000, reps=2), peak.measure("int8", threads=2, rounds=20_000, reps=2)
    finally:
        _core.simd_set(before)
    for r in (f, i):
        assert math.isfinite(r["gops"]) and r["gops"] > 0
    if level == "avx512":
        assert f["instruction"] == "vfmadd231ps zmm"
        vnni = "avx512vnni" in _core.simd_info()["cpu_features"].split()
        assert i["instruction"] == ("vpdpbusd zmm" if vnni else EXPECT["avx2"][1])
    else:
        want_f, want_i = EXPECT[level]
        assert f["instruction"] == want_f
        assert i["instruction"] in ((want_i,) if isinstance(want_i, str) else want_i)
    assert (f["threads"], i["threads"], f["kind"], i["kind"]) == (1, 2, "f32", "int8")


@pytest.mark.parametrize("level", levels())
def test_bf16_peak_only_where_the_instruction_is(level: str):
    """vdpbf16ps at the AVX-512 level of a CPU with AVX-512 BF16 (the BF16 pair kernels' instruction);
    elsewhere those kernels run the scalar reference and there is no peak to measure."""
    before = _core.simd_info()["active"]
    has = level == "avx512" and "avx512bf16" in _core.simd_info()["cpu_features"].split()
    try:
        _core.simd_set(level)
        if has:
            r = peak.measure("bf16", threads=1, rounds=20_000, reps=2)
            assert r["instruction"] == "vdpbf16ps zmm" and math.isfinite(r["gops"]) and r["gops"] > 0
        else:
            with pytest.raises(llmbench.UnsupportedError, match="no BF16 pair instruction"):
                peak.measure("bf16", threads=1, rounds=20_000, reps=2)
    finally:
        _core.simd_set(before)


def test_kind_for_weight_types():
    assert [peak.kind_for(t) for t in ("F32", "f16", "BF16")] == ["f32"] * 3
    assert [peak.kind_for(t) for t in ("Q4_K", "Q8_0", "Q6_K", "IQ4_XS")] == ["int8"] * 4


def test_peak_rejects_bad_arguments():
    with pytest.raises(ValueError, match="one of f32, int8, bf16"):
        peak.measure("f64")
    with pytest.raises(ValueError, match="rounds >= 1"):
        peak.measure("f32", rounds=0)
    with pytest.raises(ValueError, match="kind must be"):
        _core.compute_peak(7, 10, 1, 1)
    with pytest.raises(ValueError, match="1 thread"):
        _core.compute_peak(0, 10, 1, 0)


def test_best_keeps_the_higher_of_now_and_seen():
    now = peak.best(1, ("f32", "int8"), rounds=20_000)
    assert set(now) == {"f32", "int8"} and all(now[k]["kind"] == k and now[k]["gops"] > 0 for k in now)
    # an earlier figure above anything measurable is kept; one below is replaced by the new measurement
    high = {"f32": {**now["f32"], "gops": 1e12}}
    low = {"int8": {**now["int8"], "gops": 1e-12}}
    again = peak.best(1, ("f32", "int8"), {**high, **low}, rounds=20_000)
    assert again["f32"] is high["f32"]
    assert again["int8"] is not low["int8"] and again["int8"]["gops"] > 1e-12
    assert set(peak.best(1, ("f32",), rounds=20_000)) == {"f32"}
