"""The decode kernels (csrc/vecdot*.c, through _core.vec_dot) against NumPy, for every weight type.

- Tight: the kernels multiply the dequantized weights (gguf.quants.dequantize; llmbench's own
  dequantizer for Q8_K, which gguf lacks) by the dequantized activations (x quantized to the type's
  vec_dot_type by _core.vec_dot_quantize_x), so against a float64 dot of those two the only
  difference is float32 summation order:  |y - ref| <= RTOL_SUM * sum_i |w_i xq_i|, RTOL_SUM = 1e-5.
  Checked for the dispatched kernels (SIMD) and the scalar references (ref=True).
- Loose: against the float activations the error is the activation quantization, bounded by half a
  quantization step per element: |y - w.x| <= sum_i |w_i| * STEP * max|x in i's block| / 127 + tight
  term, STEP = 0.57 for Q8_0 (its scale is rounded to fp16 after quantizing: 0.5 + 127 * 2^-11 steps),
  0.5 for Q8_1 and Q8_K (float scales), 0 for the float types.
- Batch invariance: a token's outputs are bit-identical alone or in a batch, on 1 or 2 threads, also
  in batches of more than one token block (64 tokens) of the prefill panels.
Odd row counts, odd block counts, 1 to 9 tokens (the small-batch kernels of batched decode), 70.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from lowbit import QUANTIZERS
from reference.forward import dequantize as reference_dequantize

from llmbench import _core
from llmbench.models.weight_types import block_size, dequantize, quantize, type_id

RTOL_SUM = 1e-5
IQ_TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
TYPES = ["Q8_0", "Q4_K", "Q6_K", "Q4_0", "F16", "Q5_K", "Q5_0", "Q4_1", "Q5_1", "BF16", "Q8_K", "F32", "Q2_K",
         "Q3_K", "IQ4_NL", "IQ4_XS", *IQ_TYPES]
ACT = {"Q8_0": "Q8_0", "Q4_0": "Q8_0", "Q5_0": "Q8_0", "Q4_1": "Q8_1", "Q5_1": "Q8_1", "Q4_K": "Q8_K",
       "Q5_K": "Q8_K", "Q6_K": "Q8_K", "Q8_K": "Q8_K", "F16": "F32", "BF16": "F32", "F32": "F32", "Q2_K": "Q8_K",
       "Q3_K": "Q8_K", "IQ4_NL": "Q8_0", "IQ4_XS": "Q8_K", **dict.fromkeys(IQ_TYPES, "Q8_K")}
# the ternary and FP4 types (csrc/quants_tq.c), with the activations ggml-cpu pairs them with
TQ_ACT = {"TQ1_0": "Q8_K", "TQ2_0": "Q8_K", "MXFP4": "Q8_0", "NVFP4": "Q8_0", "Q1_0": "Q8_0"}
TYPES += list(TQ_ACT)
ACT.update(TQ_ACT)
STEP = {"Q8_0": 0.57, "Q8_1": 0.5, "Q8_K": 0.5, "F32": 0.0}
ACT_DTYPE = {
    "Q8_0": np.dtype([("d", "<f2"), ("qs", "i1", 32)]),
    "Q8_1": np.dtype([("d", "<f4"), ("s", "<f4"), ("qs", "i1", 32)]),
    "Q8_K": np.dtype([("d", "<f4"), ("qs", "i1", 256), ("bsums", "<i2", 16)]),
}


def dequant_act(act: str, xq: np.ndarray, n: int) -> np.ndarray:
    """the quantized activations (tokens, row_bytes) as float64 (tokens, n)"""
    if act == "F32":
        return xq.view(np.float32).astype(np.float64)
    b = xq.reshape(-1).view(ACT_DTYPE[act])
    return (b["d"].astype(np.float64)[:, None] * b["qs"]).reshape(xq.shape[0], n)


def dequant_w(t: str, w: np.ndarray, rows: int, n: int) -> np.ndarray:
    if t == "Q8_K":
        return dequantize(w, t, (rows, n)).astype(np.float64)
    return reference_dequantize(w, gguf.GGMLQuantizationType[t]).reshape(rows, n).astype(np.float64)


def case(t: str, rows: int, nblocks: int, ntok: int, seed: int):
    rng = np.random.default_rng(seed)
    n = nblocks * max(block_size(t), 32)   # float types: 32 per "block", as the activations' scales
    scale = np.exp2(rng.integers(-6, 3, size=(rows, n // 32, 1))).astype(np.float32)
    # the types llmbench does not quantize to: tests/lowbit.py's plain round-to-nearest writers
    w = (QUANTIZERS[t] if t in QUANTIZERS else lambda a: quantize(a, t))(
        (rng.standard_normal((rows, n // 32, 32), dtype=np.float32) * scale).reshape(rows, n))
    w = w.reshape(rows, -1)
    xs = np.exp2(rng.integers(-4, 4, size=(ntok, n // 32, 1))).astype(np.float32)
    x = (rng.standard_normal((ntok, n // 32, 32), dtype=np.float32) * xs + (rng.random((ntok, n // 32, 1)) < 0.25) * xs)
    return w, x.reshape(ntok, n).astype(np.float32), n


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("rows,nblocks,ntok", [(1, 1, 1), (7, 3, 5), (13, 11, 2), (5, 40, 3)])
def test_against_numpy(t: str, rows: int, nblocks: int, ntok: int):
    w, x, n = case(t, rows, nblocks, ntok, seed=rows * 1000 + nblocks)
    tid, act = type_id(t), ACT[t]
    y = _core.vec_dot(tid, w, x)
    y_ref = _core.vec_dot(tid, w, x, ref=True)
    assert y.shape == (ntok, rows) and y.dtype == np.float32

    wf = dequant_w(t, w, rows, n)
    xq = _core.vec_dot_quantize_x(tid, x)
    xf = dequant_act(act, xq, n)
    exact = xf @ wf.T
    mag = np.abs(xf) @ np.abs(wf).T
    for name, got in (("dispatched", y), ("reference", y_ref)):
        err = np.abs(got - exact)
        assert np.all(err <= RTOL_SUM * mag), f"{t} {name}: max err/sum|wx| {np.max(err / mag):.3g}"

    # against the float activations: at most STEP quantization steps per element
    x64 = x.astype(np.float64)
    ab = 256 if act == "Q8_K" else 32   # elements per activation scale
    step = np.repeat(np.abs(x64).reshape(ntok, -1, ab).max(axis=2) / 127, ab, axis=1)   # per element
    bound = STEP[act] * (step @ np.abs(wf).T) + RTOL_SUM * mag + 1e-30
    err = np.abs(y - x64 @ wf.T)
    assert np.all(err <= bound), f"{t}: float-x error / bound {np.max(err / bound):.3g}"


@pytest.mark.parametrize("t", TYPES)
def test_batch_invariance(t: str):
    w, x, n = case(t, rows=9, nblocks=3, ntok=6, seed=7)
    tid = type_id(t)
    y = _core.vec_dot(tid, w, x)
    assert np.array_equal(y, _core.vec_dot(tid, w, x, nthreads=2))
    for k in range(x.shape[0]):
        assert np.array_equal(y[k], _core.vec_dot(tid, w, x[k:k + 1])[0])
        assert np.array_equal(y[k], _core.matvec(tid, w, np.ascontiguousarray(x[k:k + 1]), 2)[0])


@pytest.mark.parametrize("t", TYPES)
def test_batch_invariance_small_batches(t: str):
    # batched decode, 2..9 tokens (the small-batch kernels run up to 8): 11 rows give ragged row groups
    # of 4 and 2; 5 blocks an odd block count (Q8_0's pairs); against one token at a time, 1 and 2 threads
    w, x, n = case(t, rows=11, nblocks=5, ntok=9, seed=13)
    tid = type_id(t)
    one = np.stack([_core.vec_dot(tid, w, x[k:k + 1])[0] for k in range(x.shape[0])])
    for ntok in range(2, 10):
        for nthreads in (1, 2):
            y = _core.vec_dot(tid, w, np.ascontiguousarray(x[:ntok]), nthreads=nthreads)
            assert np.array_equal(y, one[:ntok]), f"{t}: {ntok} tokens on {nthreads} threads"


@pytest.mark.parametrize("t", TYPES)
def test_batch_invariance_panels(t: str):
    # 262 tokens: two passes of the prefill panels (256 tokens for rows this short), ragged groups of
    # 4 (3 for float weights, 5 or 6 for the K types); 37 rows: row panels of 4, 8 and 16 rows, full and ragged
    w, x, n = case(t, rows=37, nblocks=2, ntok=262, seed=11)
    tid = type_id(t)
    y = _core.vec_dot(tid, w, x, nthreads=2)
    assert np.array_equal(y, _core.vec_dot(tid, w, x))
    for k in (0, 3, 63, 64, 69, 255, 256, 261):
        assert np.array_equal(y[k], _core.vec_dot(tid, w, x[k:k + 1])[0])
    assert np.array_equal(y[5:68], _core.vec_dot(tid, w, x[5:68]))
    assert np.array_equal(y[60:200], _core.vec_dot(tid, w, x[60:200]))


def test_bad_arguments():
    w, x, n = case("Q4_K", rows=2, nblocks=1, ntok=1, seed=1)
    with pytest.raises(ValueError, match="do not fit"):
        _core.vec_dot(type_id("Q4_K"), w, np.zeros((1, 512), np.float32))
    with pytest.raises(ValueError, match="no dot product"):
        _core.vec_dot(24, w, x)   # I8
    with pytest.raises(ValueError, match="float32"):
        _core.vec_dot(type_id("Q4_K"), w, x.astype(np.float64))


@pytest.mark.parametrize("t", TYPES)
def test_interleaved(t: str):
    # the layout the CPU backend repacks weights into at load: back to the same bytes, and its products
    # at every token count (decode, batched decode, token tiles, prefill passes) bit-identical to the
    # plain rows' on 1 and 2 threads; 48 rows are 3 groups of 16 (2 threads take 1 and 2)
    group = _core.vec_dot_interleave(type_id(t))
    if not group:
        pytest.skip(f"{t} has no interleaved layout at this SIMD level ({_core.simd_info()['active']})")
    w, x, n = case(t, rows=3 * group, nblocks=3, ntok=262, seed=17)
    tid = type_id(t)
    wi, g = _core.vec_dot_repack(tid, w)
    assert g == group and wi.shape == w.shape and not np.array_equal(wi, w)
    assert np.array_equal(_core.vec_dot_repack(tid, wi, unpack=True)[0], w)
    # one token runs two groups at a time, from the two halves of a thread's rows (two memory streams):
    # 1 to 7 groups a thread, odd counts leaving one group alone
    w7, x7, _ = case(t, rows=7 * group, nblocks=2, ntok=1, seed=18)
    wi7, _ = _core.vec_dot_repack(tid, w7)
    before = _core.simd_info()["prefetch"]
    try:
        # how one token's kernels prefetch (and whether the weights stream from DRAM, which 'far' prefetches
        # further ahead for): never what they compute
        for prefetch, stream in (("page", False), ("lines", False), ("far", False), ("far", True)):
            _core.prefetch_set(prefetch)
            for ntok in (1, 2, 3, 5, 6, 8, 9, 11, 262):
                xs = np.ascontiguousarray(x[:ntok])
                plain = _core.vec_dot(tid, w, xs)
                for nthreads in (1, 2):
                    y = _core.vec_dot(tid, wi, xs, nthreads=nthreads, interleave=g, stream=stream)
                    assert np.array_equal(y, plain), (prefetch, stream, ntok, nthreads)
            for groups in range(1, 8):
                plain = _core.vec_dot(tid, w7[: groups * group], x7)
                for nthreads in (1, 2, 3):
                    y = _core.vec_dot(tid, wi7[: groups * group], x7, nthreads=nthreads, interleave=g, stream=stream)
                    assert np.array_equal(y, plain), (prefetch, stream, groups, nthreads)
    finally:
        _core.prefetch_set(before)


@pytest.mark.parametrize("t,nblocks", [("IQ4_NL", 1025), ("IQ4_XS", 129), ("Q4_0", 4097), ("Q2_K", 9)])
def test_interleaved_long_rows(t: str, nblocks: int):
    # rows longer than a one-token call's range of blocks (IQ4_NL's |x| table: 1024 blocks of 32, IQ4_XS's: 128
    # super-blocks, the legacy types' table of activation sums: 4096 blocks), so its sums are carried in y from
    # range to range; random blocks, the plain rows' bits at 1, 2 and 5 tokens
    group = _core.vec_dot_interleave(type_id(t))
    if not group:
        pytest.skip(f"{t} has no interleaved layout at this SIMD level ({_core.simd_info()['active']})")
    w, x, n = case(t, rows=group, nblocks=nblocks, ntok=5, seed=nblocks)
    tid = type_id(t)
    wi, g = _core.vec_dot_repack(tid, w)
    for ntok in (1, 2, 5):
        xs = np.ascontiguousarray(x[:ntok])
        assert np.array_equal(_core.vec_dot(tid, wi, xs, interleave=g), _core.vec_dot(tid, w, xs)), ntok


def test_interleaved_bad_arguments():
    w, x, n = case("F16", rows=16, nblocks=8, ntok=1, seed=1)
    assert _core.vec_dot_interleave(type_id("F16")) == 0 and _core.vec_dot_interleave(99) == 0
    with pytest.raises(ValueError, match="no interleaved layout"):
        _core.vec_dot_repack(type_id("F16"), w)
    name = next((t for t in ("Q4_K", "Q4_0") if _core.vec_dot_interleave(type_id(t))), None)
    if not name:
        pytest.skip("no interleaved layout at this SIMD level")
    group = _core.vec_dot_interleave(type_id(name))
    w, x, n = case(name, rows=group + 1, nblocks=1, ntok=1, seed=1)
    with pytest.raises(ValueError, match="not whole groups"):
        _core.vec_dot_repack(type_id(name), w)
    with pytest.raises(ValueError, match="multiple of it"):
        _core.vec_dot(type_id(name), w, x, interleave=group)
    with pytest.raises(ValueError, match="interleave"):
        _core.vec_dot(type_id(name), w[:group], x, interleave=group + 1)


def _avx2_cc():
    import platform
    import shutil

    if platform.machine() != "x86_64" or not shutil.which("cc"):
        return None
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return None
    return shutil.which("cc") if " avx2 " in flags and " f16c " in flags and " fma " in flags else None


@pytest.mark.skipif(_avx2_cc() is None, reason="benchmarks/bench_il8.c needs an x86-64 C compiler and an AVX2 CPU")
def test_bench_il8_builds_and_runs(tmp_path):
    """benchmarks/bench_il8.c (the AVX2 interleaved kernels timed alone) still compiles against csrc and runs
    each of its types; bad arguments get its usage line, not a crash."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    exe = tmp_path / "bench_il8"
    subprocess.run([_avx2_cc(), "-std=c11", "-O1", "-fno-math-errno", "-D_GNU_SOURCE", "-fno-strict-aliasing",
                    f"-I{root / 'csrc'}", str(root / "benchmarks" / "bench_il8.c"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    for t in ("Q4_0", "IQ4_NL", "IQ4_XS", "Q2_K"):
        r = subprocess.run([str(exe), t, "16", "512", "3", "2", "0.01"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith(f"{t} 16x512 x 3 tokens, 2 copies: best "), r.stdout + r.stderr
    r = subprocess.run([str(exe), "Q4_0", "12", "512", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "bad arguments" in r.stderr
