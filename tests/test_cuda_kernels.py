"""The CUDA backend's kernels (kernels/*.cu) against NumPy references on random data and odd sizes.

Each kernel runs through llmbench.backends.cuda.Context (NumPy in, NumPy out). References:
weights decoded by the CPU's scalar-defined dequantizers (llmbench.models.weight_types) and products in float64;
RMSNorm, RoPE, SwiGLU, attention and the sampler restated from csrc/ops.c and csrc/engine.c.
Tolerances are stated per test and scale with the values (atol + rtol * |ref|, or with |W| |x|
for products). CUDA Graphs: a captured decode step replayed after its inputs change gives the
same bits as the same ops launched directly, and what a capture cannot hold fails clearly.

On a GPU these run on it. Without one they skip here, and tests/test_cuda_emulated.py runs this
same file against the emulated library (the same kernel sources compiled for the CPU with
kernels/tests/simt_host.h and cuda_emu.cpp), where attention contexts are shorter (the
emulation's threads are slow) and decoded weights must match the CPU bit for bit (no FMA)."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llmbench
from llmbench import _core
from llmbench.backends import cuda
from llmbench.models.weight_types import block_size, dequantize, quantize, random_blocks, row_bytes, type_id

HAVE_GPU, WHY = cuda.available()
gpu = pytest.mark.skipif(not HAVE_GPU, reason=f"no usable CUDA device: {WHY}")
LIB = cuda.library_path()

WTYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
          "IQ4_XS"]
# block size of each block type (the rest are float types)
BLOCK = {t: block_size(t) for t in WTYPES if block_size(t) > 1}


# ---- the library's table (runs without a device) ----

# Read in a child that leaves with os._exit: loading the library registers its kernels with the
# static CUDA runtime, whose teardown at exit can crash where there is no driver (see
# csrc/cuda_loader.c, which for that reason never loads it there).
TABLE_PROBE = """
import ctypes, json, os, sys
lib = ctypes.CDLL(sys.argv[1])
get = lib.llmb_cuda_get_api
get.restype = ctypes.c_void_p
base = get()
ptr = ctypes.sizeof(ctypes.c_void_p)
version = ctypes.c_int.from_address(base).value
size = ctypes.c_size_t.from_address(base + ptr).value
slots = [ctypes.c_void_p.from_address(base + 2 * ptr + i * ptr).value for i in range((size - 2 * ptr) // ptr)]
print(json.dumps({"version": version, "size": size, "null": [i for i, v in enumerate(slots) if not v]}), flush=True)
os._exit(0)
"""


@pytest.mark.skipif(LIB is None, reason="llmbench was built without the CUDA backend (no nvcc)")
def test_library_exports_current_abi_and_a_complete_table():
    r = subprocess.run([sys.executable, "-c", TABLE_PROBE, LIB], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)
    assert t["version"] == cuda.abi_version() == 3
    ptr = ctypes.sizeof(ctypes.c_void_p)
    # abi_version (padded) and table_size precede the function pointers: 31 entries in ABI version 2,
    # 6 more in 3 (graph_begin, graph_end, graph_launch, graph_destroy, copy, sample_dev)
    assert (t["size"] - 2 * ptr) // ptr == 37 and (t["size"] - 2 * ptr) % ptr == 0
    assert not t["null"], f"table entries {t['null']} are NULL"


@pytest.mark.skipif(HAVE_GPU, reason="a CUDA device is present")
def test_kernels_unavailable_without_device():
    with pytest.raises(llmbench.BackendUnavailableError):
        cuda.Context()


# ---- helpers ----

EMULATED = HAVE_GPU and cuda.devices()[0].name == "llmbench host emulation"


@pytest.fixture(scope="module")
def ctx():
    if not HAVE_GPU:
        pytest.skip(f"no usable CUDA device: {WHY}")
    return cuda.Context()


def weights(t: str, rows: int, cols: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(raw rows of type t, their float64 values as the CPU decodes them); scales vary by block."""
    scale = np.exp2(rng.integers(-4, 2, size=(rows, (cols + 31) // 32, 1))).astype(np.float32)
    w = (rng.standard_normal((rows, (cols + 31) // 32, 32), dtype=np.float32) * scale).reshape(rows, -1)[:, :cols]
    raw = quantize(np.ascontiguousarray(w), t).reshape(rows, -1)
    return raw, dequantize(raw, t, (rows, cols)).astype(np.float64)


def activations(ntok: int, cols: int, rng) -> np.ndarray:
    return (rng.standard_normal((ntok, cols)) * np.exp2(rng.integers(-2, 3, size=(ntok, 1)))).astype(np.float32)


def close_products(y, w64, x, rel):
    """|y - W x| <= rel * (|W| |x|) + tiny: the error bound of a sum of rounded products."""
    ref = x.astype(np.float64) @ w64.T
    bound = rel * (np.abs(x.astype(np.float64)) @ np.abs(w64).T) + 1e-30
    err = np.abs(y - ref)
    assert np.all(err <= bound), f"max err/bound {np.max(err / bound):.3g}"


# ---- matrix products ----

MV_SHAPES = [(1, 1), (7, 3), (37, 5), (130, 2)]  # (rows, blocks of the type; float types: columns / 32 + odd tail)


@pytest.mark.parametrize("t", WTYPES)
@pytest.mark.parametrize("rows,nb", MV_SHAPES)
@pytest.mark.parametrize("ntok", [1, 2, 3, 8, 16])
def test_matvec(ctx, t, rows, nb, ntok):
    rng = np.random.default_rng(rows * 1000 + nb * 10 + ntok)
    cols = nb * BLOCK[t] if t in BLOCK else nb * 32 + (5 if nb % 2 else 0)  # odd widths take the scalar path
    raw, w64 = weights(t, rows, cols, rng)
    x = activations(ntok, cols, rng)
    y = ctx.matmul(type_id(t), raw, x, path="matvec")
    close_products(y, w64, x, 1e-5)  # FP32 accumulation of exactly decoded weights


@pytest.mark.parametrize("t", WTYPES)
@pytest.mark.parametrize("rows,nb,ntok", [(1, 1, 1), (37, 3, 17), (300, 2, 70), (64, 8, 512)])
def test_gemm(ctx, t, rows, nb, ntok):
    rng = np.random.default_rng(rows + nb + ntok)
    cols = nb * BLOCK.get(t, 64)
    raw, w64 = weights(t, rows, cols, rng)
    x = activations(ntok, cols, rng)
    y = ctx.matmul(type_id(t), raw, x, path="gemm")
    # weights and activations rounded to FP16 (2^-11 each) or BF16 (x only, 2^-8); FP32 sums; F32 is SGEMM
    rel = {"F32": 1e-5, "BF16": 1e-2}.get(t, 2e-3)
    close_products(y, w64, x, rel)



@pytest.mark.parametrize("t", WTYPES)
def test_gemm_rows_do_not_depend_on_the_token_count(ctx, t):
    """cuBLAS picks its kernel by the problem's shape, so gemm runs fixed-width token chunks: a token's
    row has the same bits alone, in a few, or among 300 at any position (the engine's batch invariance)."""
    rng = np.random.default_rng(11)
    cols = 4 * BLOCK.get(t, 64)
    raw, _ = weights(t, 96, cols, rng)
    x = activations(300, cols, rng)
    full = ctx.matmul(type_id(t), raw, x, path="gemm")
    for lo, hi in [(0, 1), (5, 22), (127, 129), (100, 240), (250, 300)]:
        np.testing.assert_array_equal(ctx.matmul(type_id(t), raw, x[lo:hi], path="gemm"), full[lo:hi])

def test_matmul_switches_paths_at_the_crossover(ctx):
    rng = np.random.default_rng(5)
    raw, w64 = weights("Q4_K", 40, 512, rng)
    x = activations(12, 512, rng)
    ctx.set_gemm_min_tokens(8)
    y_auto = ctx.matmul(type_id("Q4_K"), raw, x)  # 12 >= 8: gemm
    close_products(y_auto, w64, x, 2e-3)
    ctx.set_gemm_min_tokens(16)
    close_products(ctx.matmul(type_id("Q4_K"), raw, x), w64, x, 1e-5)  # now matvec
    with pytest.raises(ValueError, match="at most 16"):
        ctx.matmul(type_id("Q4_K"), raw, activations(17, 512, rng), path="matvec")
    with pytest.raises(llmbench.UnsupportedError, match="no CUDA kernel"):   # a type the device still lacks
        ctx.matmul(type_id("TQ2_0"), np.zeros((2, row_bytes("TQ2_0", 256)), np.uint8), x[:, :256], path="matvec")


@pytest.mark.parametrize("t", WTYPES)
def test_dequantize_and_row_lookup(ctx, t):
    rng = np.random.default_rng(7)
    cols = 3 * BLOCK.get(t, 32) + (0 if t in BLOCK else 3)
    raw, w64 = weights(t, 11, cols, rng)
    out = ctx.dequantize(type_id(t), raw, cols)
    if EMULATED:  # the host does not fuse multiply-adds: the CPU's exact values
        np.testing.assert_array_equal(out, w64.astype(np.float32))
    # the same values (a fused multiply-add may round once instead of twice)
    np.testing.assert_allclose(out, w64, rtol=2e-7, atol=2e-7 * np.abs(w64).max())
    ids = np.array([3, 0, 10, -1, 11, 3], np.int32)
    got = ctx.dequantize(type_id(t), raw, cols, ids=ids, dtype=np.float16)
    ref = np.where((ids >= 0) & (ids < 11), 1, 0)[:, None] * w64[np.clip(ids, 0, 10)]
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())
    assert not got[3].any() and not got[4].any()  # ids outside the table: zeros


@pytest.mark.parametrize("t", list(BLOCK))
@pytest.mark.parametrize("rows,nb", [(1, 1), (5, 3), (13, 9), (3, 17)])
def test_random_blocks_decode_as_on_the_cpu(ctx, t, rows, nb):
    """Random block bytes decode to the CPU's values (in emulation bit for bit), in dequantize and in
    matvec; row lengths of 1, 3, 9 and 17 blocks end chunks of 256 elements whole and part-way."""
    rng = np.random.default_rng(rows * 100 + nb)
    cols = nb * BLOCK[t]
    raw = random_blocks(t, rows * nb, rng).reshape(rows, -1)   # finite scales of every size
    w64 = dequantize(raw, t, (rows, cols)).astype(np.float64)
    out = ctx.dequantize(type_id(t), raw, cols)
    if EMULATED:
        np.testing.assert_array_equal(out, w64.astype(np.float32))
    np.testing.assert_allclose(out, w64, rtol=2e-7, atol=2e-7 * np.abs(w64).max())
    x = activations(3, cols, rng)
    close_products(ctx.matmul(type_id(t), raw, x, path="matvec"), w64, x, 1e-5)


# ---- elementwise ----

@pytest.mark.parametrize("n", [1, 37, 4099])
def test_rmsnorm_with_and_without_residual(ctx, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((3, n)).astype(np.float32) * 3
    r = rng.standard_normal((3, n)).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    for res in (None, r):
        xs = x.astype(np.float64) + (0 if res is None else r)
        ref = xs / np.sqrt((xs**2).mean(axis=1, keepdims=True) + 1e-5) * w
        out, x_after = ctx.rmsnorm(x, w, 1e-5, residual=res)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(x_after, xs, rtol=1e-6, atol=1e-7)


def rope_ref(v, n_heads, hd, pos, base, scale, ff, neox):
    out = v.astype(np.float64).copy()
    i = np.arange(hd // 2)
    for t, p in enumerate(pos):
        theta = p * scale * base ** (-2.0 * i / hd)
        if ff is not None:
            theta = theta / ff
        c, s = np.cos(theta).astype(np.float32), np.sin(theta).astype(np.float32)
        for h in range(n_heads):
            x = out[t, h * hd:(h + 1) * hd]
            a, b = (i, i + hd // 2) if neox else (2 * i, 2 * i + 1)
            x0, x1 = x[a].copy(), x[b].copy()
            x[a], x[b] = x0 * c - x1 * s, x0 * s + x1 * c
    return out


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("llama3", [False, True])
def test_rope(ctx, neox, llama3):
    rng = np.random.default_rng(int(neox) * 2 + int(llama3))
    n_heads, hd = 5, 24
    pos = np.array([0, 1, 17, 4095, 100_003], np.int32)
    v = rng.standard_normal((len(pos), n_heads * hd)).astype(np.float32)
    ff = (1.0 + rng.random(hd // 2) * 7).astype(np.float32) if llama3 else None
    got = ctx.rope(v, n_heads, hd, pos, 500000.0, 0.5, freq_factors=ff, neox=neox)
    np.testing.assert_allclose(got, rope_ref(v, n_heads, hd, pos, 500000.0, 0.5, ff, neox), rtol=1e-5, atol=1e-5)


def test_swiglu_and_add(ctx):
    rng = np.random.default_rng(3)
    g, u = (rng.standard_normal(10_007).astype(np.float32) * 4 for _ in range(2))
    g64 = g.astype(np.float64)
    np.testing.assert_allclose(ctx.swiglu(g, u), g64 / (1 + np.exp(-g64)) * u, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ctx.add(g, u), g + u)


# ---- KV cache and attention ----

KV_ROW = {"f32": lambda d: 4 * d, "f16": lambda d: 2 * d, "q8_0": lambda d: d // 32 * 34}


def encode_kv(kv_type, rows):
    if kv_type == "f32":
        return rows.astype(np.float32).view(np.uint8)
    if kv_type == "f16":
        return rows.astype(np.float16).view(np.uint8)
    return quantize(rows.astype(np.float32), "Q8_0")


def decode_kv(kv_type, raw, kv_dim):
    if kv_type == "f32":
        return raw.view(np.float32).astype(np.float64)
    if kv_type == "f16":
        return raw.view(np.float16).astype(np.float64)
    return dequantize(raw, "Q8_0", (raw.shape[0], kv_dim)).astype(np.float64)


def paged_cache(kv_type, n_blocks, bs, kv_dim, rng):
    k = rng.standard_normal((n_blocks * bs, kv_dim)).astype(np.float32)
    v = rng.standard_normal((n_blocks * bs, kv_dim)).astype(np.float32)
    kr, vr = encode_kv(kv_type, k), encode_kv(kv_type, v)
    return kr, vr, decode_kv(kv_type, kr, kv_dim), decode_kv(kv_type, vr, kv_dim)


def attend_ref(q, kf, vf, table, bs, n_keys, n_head, n_head_kv, hd):
    """softmax(q k / sqrt(hd)) v over keys 0..n_keys-1 of the sequence whose block table is `table`."""
    rows = np.array([table[p // bs] * bs + p % bs for p in range(n_keys)])
    out = np.zeros(n_head * hd)
    g = n_head // n_head_kv
    for h in range(n_head):
        kh = kf[rows, (h // g) * hd:(h // g + 1) * hd]
        vh = vf[rows, (h // g) * hd:(h // g + 1) * hd]
        s = kh @ q[h * hd:(h + 1) * hd].astype(np.float64) / np.sqrt(hd)
        p = np.exp(s - s.max())
        out[h * hd:(h + 1) * hd] = p @ vh / p.sum()
    return out


@pytest.mark.parametrize("kv_type", ["f32", "f16", "q8_0"])
def test_kv_store_matches_the_cpu_encoding(ctx, kv_type):
    rng = np.random.default_rng(11)
    kv_dim, bs, n_blocks = 96, 5, 7
    rb = KV_ROW[kv_type](kv_dim)
    kc = np.zeros((n_blocks * bs, rb), np.uint8)
    vc = np.zeros_like(kc)
    k = rng.standard_normal((6, kv_dim)).astype(np.float32)
    v = rng.standard_normal((6, kv_dim)).astype(np.float32)
    slots = np.array([0, 7, 34, 12, -1, 3], np.int32)  # -1: padding, skipped
    kg, vg = ctx.kv_store(kv_type, kc, vc, k, v, slots)
    for t, s in enumerate(slots):
        if s >= 0:
            np.testing.assert_array_equal(kg[s], encode_kv(kv_type, k[t:t + 1]).reshape(-1))
            np.testing.assert_array_equal(vg[s], encode_kv(kv_type, v[t:t + 1]).reshape(-1))
    assert not kg[1].any()


@pytest.mark.parametrize("kv_type", ["f32", "f16", "q8_0"])
@pytest.mark.parametrize("hd,n_head,n_head_kv", [(64, 8, 2), (128, 4, 4), (32, 6, 1)])
@pytest.mark.parametrize("split_keys", [0, 7, 64])
def test_attention_decode(ctx, kv_type, hd, n_head, n_head_kv, split_keys):
    rng = np.random.default_rng(hd + n_head + split_keys)
    bs, n_blocks = 16, 80
    lens = np.array([1, 17, 130] if EMULATED else [1, 17, 300, 1000], np.int32)
    kv_dim = n_head_kv * hd
    kr, vr, kf, vf = paged_cache(kv_type, n_blocks, bs, kv_dim, rng)
    max_blocks = 64
    tables = np.stack([rng.permutation(n_blocks)[:max_blocks] for _ in lens]).astype(np.int32)
    q = rng.standard_normal((len(lens), n_head * hd)).astype(np.float32)
    out = ctx.attention(q, kr, vr, kv_type, bs, n_head, n_head_kv, hd, tables, seq_lens=lens, split_keys=split_keys)
    for s, n in enumerate(lens):
        ref = attend_ref(q[s], kf, vf, tables[s], bs, n, n_head, n_head_kv, hd)
        np.testing.assert_allclose(out[s], ref, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("kv_type", ["f16", "q8_0"])
@pytest.mark.parametrize("hd,n_head,n_head_kv", [(64, 8, 2), (128, 2, 1), (256, 2, 2)])
def test_attention_prefill_causal(ctx, kv_type, hd, n_head, n_head_kv):
    rng = np.random.default_rng(hd * 3 + n_head)
    bs, n_blocks = 5, 120
    kv_dim = n_head_kv * hd
    kr, vr, kf, vf = paged_cache(kv_type, n_blocks, bs, kv_dim, rng)
    # (cached prefix, new queries): a whole prompt, a chunk after a cached prefix, one token
    seqs = [(0, 37), (100, 20), (7, 1)]
    max_blocks = 40
    tables = np.stack([rng.permutation(n_blocks)[:max_blocks] for _ in seqs]).astype(np.int32)
    q_len = np.array([n for _, n in seqs], np.int32)
    q_start = np.concatenate([[0], np.cumsum(q_len)[:-1]]).astype(np.int32)
    pos0 = np.array([p for p, _ in seqs], np.int32)
    q = rng.standard_normal((int(q_len.sum()), n_head * hd)).astype(np.float32)
    out = ctx.attention(q, kr, vr, kv_type, bs, n_head, n_head_kv, hd, tables, q_start=q_start, q_len=q_len, pos0=pos0)
    for s, (p0, n) in enumerate(seqs):
        for i in range(n):
            ref = attend_ref(q[q_start[s] + i], kf, vf, tables[s], bs, p0 + i + 1, n_head, n_head_kv, hd)
            np.testing.assert_allclose(out[q_start[s] + i], ref, rtol=1e-4, atol=2e-5)


# ---- sampling ----

def sample_ref(logits, temperature, top_k, top_p, min_p, u):
    """csrc/engine.c's sample_row without penalties, in NumPy."""
    if temperature <= 0:
        return int(np.argmax(logits))
    w = logits.astype(np.float32) * (np.float32(1) / np.float32(temperature))
    mx = w.max()
    cand = np.nonzero((w - mx) > np.float32(-27.6))[0]
    order = cand[np.lexsort((cand, -w[cand]))]
    if 0 < top_k < len(order):
        order = order[:top_k]
    e = np.exp(w[order].astype(np.float64) - np.float64(mx))
    s = e.sum()
    keep = len(order)
    if top_p < 1:
        hit = np.nonzero(np.cumsum(e / s) >= top_p)[0]
        keep = int(hit[0]) + 1 if len(hit) else keep
    if min_p > 0:
        k = 1
        while k < keep and e[k] / s >= min_p * (e[0] / s):
            k += 1
        keep = k
    cum = np.cumsum(e[:keep])
    hit = np.nonzero(u * cum[-1] < cum)[0]
    return int(order[hit[0] if len(hit) else keep - 1])


def test_sampling_matches_the_cpu_rule(ctx):
    rng = np.random.default_rng(17)
    vocab = 5003
    params = []
    for r in range(48):
        t = [0.0, 0.7, 1.0, 1.5][r % 4]
        params.append((t, [0, 1, 40, 5003][r // 4 % 4], [1.0, 0.9, 0.5][r % 3], [0.0, 0.05][r // 12 % 2],
                       float(rng.random())))
    logits = (rng.standard_normal((len(params), vocab)) * 3).astype(np.float32)
    logits[0, [10, 20]] = logits[0].max() + 1  # greedy ties: the first maximum
    ids, lps = ctx.sample(logits, params, logprobs=True)
    ref = [sample_ref(logits[r], *p) for r, p in enumerate(params)]
    assert ids.tolist() == ref
    assert ids[0] == 10
    lse = np.log(np.exp(logits.astype(np.float64) - logits.max(1, keepdims=True)).sum(1)) + logits.max(1)
    np.testing.assert_allclose(lps, logits[np.arange(len(ids)), ids] - lse, rtol=1e-5, atol=1e-5)


def test_sampling_rejects_bad_parameters(ctx):
    with pytest.raises(ValueError, match="u"):
        ctx.sample(np.zeros((1, 8), np.float32), [(1.0, 0, 1.0, 0.0, 1.0)])


# ---- timing and memory ----

def test_phase_timing_and_memory(ctx):
    free, total = cuda.mem_info()
    assert 0 < free <= total
    rng = np.random.default_rng(1)
    raw, _ = weights("Q8_0", 64, 256, rng)
    ctx.phase_begin(3)
    ctx.matmul(type_id("Q8_0"), raw, activations(4, 256, rng), path="gemm")
    ctx.phase_end(3)
    assert ctx.phase_ms(3) >= 0.0
    assert ctx.workspace_bytes() > 0  # the gemm's tiles and 16-bit activations
    with pytest.raises(ValueError, match="phase id"):
        ctx.phase_begin(99)


# ---- a forward pass composed of the kernels ----

def kernel_forward(ctx, ref, wtype: str, tokens: list[int], chunks: list[int], kv_type: str = "f16") -> np.ndarray:
    """Logits of every position of `tokens` from the kernels alone, the prompt in prefill chunks of
    the given sizes, then the rest one token at a time (decode attention), through a paged KV cache
    whose blocks are scattered. `ref` (tests/reference) supplies the configuration and weights."""
    tid = type_id(wtype)
    raw = {name: quantize(np.ascontiguousarray(a, np.float32), wtype).reshape(a.shape[0], -1)
           for name, a in ref.w.items() if a.ndim == 2}
    vec = {name: a.astype(np.float32) for name, a in ref.w.items() if a.ndim == 1}
    hd, nh, nkv, bs = ref.hd, ref.n_head, ref.n_kv, 4
    kv_dim = nkv * hd
    n_blocks = -(-len(tokens) // bs) + 3
    table = np.random.default_rng(0).permutation(n_blocks)[None, :].astype(np.int32)
    rb = KV_ROW[kv_type](kv_dim)
    caches = [[np.zeros((n_blocks * bs, rb), np.uint8) for _ in range(2)] for _ in range(ref.n_layer)]
    steps, p = [], 0
    for c in chunks:
        steps.append((p, c, True))
        p += c
    steps += [(q, 1, False) for q in range(p, len(tokens))]
    out = []
    for p0, n, prefill in steps:
        pos = np.arange(p0, p0 + n, dtype=np.int32)
        slots = table[0, pos // bs] * bs + pos % bs
        x = ctx.dequantize(tid, raw["token_embd.weight"], ref.dim, ids=np.array(tokens[p0:p0 + n], np.int32))
        h, _ = ctx.rmsnorm(x, vec["blk.0.attn_norm.weight"], ref.eps)
        for layer in range(ref.n_layer):
            b = f"blk.{layer}."
            q = ctx.rope(ctx.matmul(tid, raw[b + "attn_q.weight"], h), nh, hd, pos, ref.base, neox=ref.neox)
            k = ctx.rope(ctx.matmul(tid, raw[b + "attn_k.weight"], h), nkv, hd, pos, ref.base, neox=ref.neox)
            v = ctx.matmul(tid, raw[b + "attn_v.weight"], h)
            caches[layer] = list(ctx.kv_store(kv_type, *caches[layer], k, v, slots))
            if prefill:
                att = ctx.attention(q, *caches[layer], kv_type, bs, nh, nkv, hd, table, q_start=[0], q_len=[n],
                                    pos0=[p0])
            else:
                att = ctx.attention(q, *caches[layer], kv_type, bs, nh, nkv, hd, table, seq_lens=[p0 + 1])
            # x += attention output and h = RMSNorm(x) in one pass (the fused residual)
            h, x = ctx.rmsnorm(x, vec[b + "ffn_norm.weight"], ref.eps,
                               residual=ctx.matmul(tid, raw[b + "attn_output.weight"], att))
            g = ctx.swiglu(ctx.matmul(tid, raw[b + "ffn_gate.weight"], h), ctx.matmul(tid, raw[b + "ffn_up.weight"], h))
            nxt = f"blk.{layer + 1}.attn_norm.weight" if layer + 1 < ref.n_layer else "output_norm.weight"
            h, x = ctx.rmsnorm(x, vec[nxt], ref.eps, residual=ctx.matmul(tid, raw[b + "ffn_down.weight"], g))
        out.append(ctx.matmul(tid, raw["output.weight"], h))
    return np.concatenate(out)


# measured in emulation, max |logit - reference| / max |reference|: F32/f32 1.1e-6, F32/f16 1.3e-3, F16/f32 6.9e-4
@pytest.mark.parametrize("wtype,kv_type,bound", [("F32", "f32", 1e-5), ("F32", "f16", 5e-3), ("F16", "f32", 5e-3)])
def test_kernel_forward_matches_the_reference_model(ctx, stories_path, wtype, kv_type, bound):
    """stories260K: chunked prefill (5 + 11 tokens, the second chunk over the first's cache) then
    4 decode steps, every position's logits against the float64 reference forward pass; greedy
    sampling on the device picks the reference's top token wherever it leads by a clear margin."""
    if EMULATED and (wtype, kv_type) != ("F32", "f32"):
        pytest.skip("one case in emulation (its threads are slow); the others' paths have their own tests")
    pytest.importorskip("gguf", reason="the reference forward pass reads the model with the gguf package")
    sys.path.insert(0, str(Path(__file__).parent))
    from reference.forward import Reference

    ref = Reference(stories_path)
    tokens = [1, 403, 407, 261, 378, 285, 342, 265, 426, 283, 296, 504, 450, 260, 313, 404, 349, 288, 271, 425]
    logits = kernel_forward(ctx, ref, wtype, tokens, [5, 11], kv_type)
    want = ref.logits(tokens)
    err = np.abs(logits - want).max() / np.abs(want).max()
    assert err < bound, f"max |logit - reference| / max |reference| = {err:.3g}"
    ids, _ = ctx.sample(logits, [(0.0, 0, 1.0, 0.0, 0.0)] * len(tokens))
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 0.05 * np.abs(want).max()
    assert np.array_equal(ids[clear], want.argmax(1)[clear])


# ---- CUDA Graphs ----

class DecodeStep:
    """One layer's decode step for a bucket of `n` rows on fixed device buffers: embedding lookup,
    RMSNorm, Q/K/V products, RoPE, KV store, paged decode attention (several splits, sized for the
    whole context, lengths read from device memory), output product with the fused residual norm,
    logits and greedy device sampling; what a captured decode step launches. Inputs (tokens,
    positions, slots, block tables, lengths) are set with ``set_inputs`` before a direct run or a replay."""

    KERNELS = 14  # dequantize, rmsnorm, 3 matvec, 2 rope, kv_store, attention + combine, matvec, rmsnorm, matvec, sample

    def __init__(self, ctx, n, rng, wtype="Q4_K", out_path="matvec"):
        self.ctx, self.n, self.out_path = ctx, n, out_path
        self.dim, self.nh, self.nkv, self.hd, self.vocab, self.bs, self.ctx_len = 256, 8, 2, 32, 300, 4, 64
        self.kv_dim = self.nkv * self.hd
        self.max_blocks = self.ctx_len // self.bs
        self.n_blocks = n * self.max_blocks
        self.tid = type_id(wtype)
        self.keep = []
        dim, qd = self.dim, self.nh * self.hd

        def dev(a):
            a = np.ascontiguousarray(a)
            b = cuda.DeviceBuffer(a.nbytes)
            b.upload(a)
            self.keep.append(b)
            return b.ptr

        def buf(nbytes):
            b = cuda.DeviceBuffer(nbytes)
            self.keep.append(b)
            return b.ptr

        self.w = {name: dev(weights(wtype, rows, dim, rng)[0]) for name, rows in
                  [("emb", self.vocab), ("q", qd), ("k", self.kv_dim), ("v", self.kv_dim), ("out", self.vocab)]}
        self.w["o"] = dev(weights(wtype, dim, qd, rng)[0])
        self.norm = [dev(1 + 0.1 * rng.standard_normal(dim).astype(np.float32)) for _ in range(2)]
        rb = KV_ROW["f16"](self.kv_dim)
        self.cache0 = [encode_kv("f16", rng.standard_normal((self.n_blocks * self.bs, self.kv_dim))) for _ in range(2)]
        self.cache = [buf(self.cache0[0].nbytes), buf(self.cache0[1].nbytes)]
        assert self.cache0[0].shape[1] == rb
        self.inp = {k: buf(4 * size) for k, size in [("tokens", n), ("pos", n), ("slots", n), ("lens", n),
                                                     ("tables", n * self.max_blocks)]}
        self.params = dev(cuda.sampling_params([(0.0, 0, 1.0, 0.0, 0.0)] * n))
        f = 4 * n
        self.x, self.h, self.q, self.k, self.v, self.att, self.o = (buf(f * d) for d in (dim, dim, qd, self.kv_dim,
                                                                                        self.kv_dim, qd, dim))
        self.logits, self.ids = buf(f * self.vocab), buf(f)

    def set_inputs(self, tokens, pos, slots, lens, tables):
        """Per-step inputs into the fixed buffers (stream-ordered copies) and a fresh copy of the cache."""
        c = self.ctx
        for name, a in [("tokens", tokens), ("pos", pos), ("slots", slots), ("lens", lens), ("tables", tables)]:
            c.copy_to_device(self.inp[name], np.asarray(a, np.int32))
        for p, a in zip(self.cache, self.cache0):
            c.copy_to_device(p, a)

    def ops(self):
        c, n, dim, hd, tid = self.ctx, self.n, self.dim, self.hd, self.tid
        qd = self.nh * hd
        c.dequantize_dev(tid, self.w["emb"], self.vocab, dim, self.inp["tokens"], n, self.x)
        c.rmsnorm_dev(self.h, self.x, None, self.norm[0], dim, n, 1e-5)
        for name, y, rows in [("q", self.q, qd), ("k", self.k, self.kv_dim), ("v", self.v, self.kv_dim)]:
            c.matmul_dev("matvec", tid, self.w[name], rows, dim, self.h, dim, n, y, rows)
        c.rope_dev(self.q, n, self.nh, hd, qd, self.inp["pos"], 10000.0)
        c.rope_dev(self.k, n, self.nkv, hd, self.kv_dim, self.inp["pos"], 10000.0)
        c.kv_store_dev("f16", *self.cache, self.k, self.v, self.kv_dim, n, self.kv_dim, self.inp["slots"])
        c.attention_dev(False, q=self.q, out=self.att, ldq=qd, ldo=qd, k_cache=self.cache[0], v_cache=self.cache[1],
                        kv_type="f16", block_size=self.bs, n_head=self.nh, n_head_kv=self.nkv, head_dim=hd,
                        scale=float(1 / np.sqrt(hd)), block_tables=self.inp["tables"], max_blocks=self.max_blocks,
                        n_seq=n, seq_lens=self.inp["lens"], split_keys=8, max_seq_len=self.ctx_len)
        c.matmul_dev("matvec", tid, self.w["o"], dim, qd, self.att, qd, n, self.o, dim)
        c.rmsnorm_dev(self.h, self.x, self.o, self.norm[1], dim, n, 1e-5)
        c.matmul_dev(self.out_path, tid, self.w["out"], self.vocab, dim, self.h, dim, n, self.logits, self.vocab)
        c.sample_dev(self.logits, n, self.vocab, self.params, self.ids)

    def results(self):
        c, n = self.ctx, self.n
        c.sync()
        return {"logits": c.copy_to_host(self.logits, (n, self.vocab), np.float32),
                "ids": c.copy_to_host(self.ids, (n,), np.int32), "x": c.copy_to_host(self.x, (n, self.dim), np.float32),
                "k_cache": c.copy_to_host(self.cache[0], self.cache0[0].shape, np.uint8),
                "v_cache": c.copy_to_host(self.cache[1], self.cache0[1].shape, np.uint8)}

    def step_inputs(self, rng, lens):
        """A decode step of len(lens) sequences (lens[s] keys after this token; the rest of the bucket padding)."""
        n, mb, bs = self.n, self.max_blocks, self.bs
        tables = rng.permutation(self.n_blocks)[: n * mb].reshape(n, mb)
        lens = np.array(list(lens) + [0] * (n - len(lens)), np.int32)
        pos = np.maximum(lens - 1, 0)
        slots = np.where(lens > 0, tables[np.arange(n), pos // bs] * bs + pos % bs, -1)  # padding: no store
        return rng.integers(0, self.vocab, n), pos, slots, lens, tables

    def free(self):
        for b in self.keep:
            b.free()


def same_bits(a: dict, b: dict) -> None:
    for key, value in a.items():
        np.testing.assert_array_equal(value.view(np.uint8), b[key].view(np.uint8), err_msg=key)


def test_graph_replays_a_decode_step_bit_for_bit(ctx):
    rng = np.random.default_rng(21)
    st = DecodeStep(ctx, 4, rng)
    try:
        a, b = st.step_inputs(rng, [5, 64, 17]), st.step_inputs(rng, [1, 30, 2, 63])
        st.set_inputs(*a)
        st.ops()  # direct launches (also: workspaces reach their sizes before the capture)
        direct_a = st.results()
        for p in (st.logits, st.ids):
            ctx.copy_to_device(p, np.full(st.n * st.vocab if p == st.logits else st.n, -7, np.int32))
        st.set_inputs(*b)
        graph = ctx.capture(st.ops)
        assert graph.n_kernels == DecodeStep.KERNELS and graph.n_nodes >= graph.n_kernels and graph.capture_ms >= 0
        untouched = st.results()  # capturing ran nothing
        assert (untouched["ids"] == -7).all() and (untouched["logits"].view(np.int32) == -7).all()
        np.testing.assert_array_equal(untouched["k_cache"], st.cache0[0])
        graph.launch()
        replay_b = st.results()
        st.set_inputs(*b)
        st.ops()
        direct_b = st.results()
        same_bits(replay_b, direct_b)
        assert not np.array_equal(direct_a["logits"], direct_b["logits"])  # the inputs mattered
        # the token of each live row is the argmax of its logits; padding rows attend nothing
        live = b[3] > 0
        assert np.array_equal(direct_b["ids"][live], direct_b["logits"][live].argmax(1))
        st.set_inputs(*a)  # back to the first inputs: the same graph again
        graph.launch(reps=2)  # twice: the second replay stores the same rows into the same slots
        same_bits(st.results(), direct_a)
        graph.close()
    finally:
        st.free()


def test_graph_captures_cublas(ctx):
    """The output product through cuBLAS (cublasGemmEx on the context's own workspace) inside a capture."""
    rng = np.random.default_rng(22)
    st = DecodeStep(ctx, 2, rng, wtype="Q8_0", out_path="gemm")
    try:
        inputs = st.step_inputs(rng, [9, 40])
        st.set_inputs(*inputs)
        st.ops()
        direct = st.results()
        graph = ctx.capture(st.ops)
        # round_rows + a dequantized tile + the GEMM's own kernels (one or more) replace one matvec
        assert graph.n_kernels >= DecodeStep.KERNELS + 2
        st.set_inputs(*inputs)
        graph.launch()
        same_bits(st.results(), direct)
    finally:
        st.free()


def test_what_a_capture_cannot_hold_fails_clearly(ctx):
    ctx = cuda.Context()  # its own workspaces, sized by this test's direct run alone
    rng = np.random.default_rng(23)
    st = DecodeStep(ctx, 1, rng)
    try:
        st.set_inputs(*st.step_inputs(rng, [3]))
        st.ops()
        st.results()
        # a sync inside a capture: CUDA refuses it and spoils the capture; graph_end says which op failed
        ctx.graph_begin()
        st.ops()
        with pytest.raises(llmbench.DeviceError, match=r"cudaStreamSynchronize.*runtime\.cu:\d+.*"
                                                       r"cudaErrorStreamCaptureUnsupported.*cannot hold"):
            ctx.sync()
        with pytest.raises(llmbench.DeviceError, match="capture is invalid.*cudaStreamSynchronize"):
            ctx.graph_end()
        # an allocation inside a capture
        ctx.graph_begin()
        with pytest.raises(llmbench.DeviceError, match="cudaMalloc.*cudaErrorStreamCaptureUnsupported"):
            cuda.DeviceBuffer(64)
        with pytest.raises(llmbench.DeviceError, match="capture is invalid"):
            ctx.graph_end()
        # ops that would copy to or from host memory, wait, record events, or grow a workspace
        qd = st.nh * st.hd
        refusals = [(lambda: ctx.copy_to_device(st.inp["pos"], np.zeros(1, np.int32)), "host memory"),
                    (lambda: _core.cuda_sample(ctx._ctx, st.logits, 1, st.vocab, [(0.0, 0, 1.0, 0.0, 0.0)], False),
                     "sample_dev"),
                    (lambda: ctx.phase_begin(0), "phase events"),
                    (lambda: ctx.attention_dev(False, q=st.q, out=st.att, ldq=qd, ldo=qd, k_cache=st.cache[0],
                                               v_cache=st.cache[1], kv_type="f16", block_size=st.bs, n_head=st.nh,
                                               n_head_kv=st.nkv, head_dim=st.hd, scale=0.1, block_tables=st.inp["tables"],
                                               max_blocks=st.max_blocks, n_seq=1, seq_lens=st.inp["lens"], split_keys=1,
                                               max_seq_len=st.ctx_len), "attention workspace must grow")]
        for op, why in refusals:
            with pytest.raises((ValueError, llmbench.DeviceError), match=why):
                ctx.capture(op)
        with pytest.raises(ValueError, match="not capturing"):
            ctx.graph_end()
        # the context is still usable: direct ops, then a capture that replays correctly
        st.set_inputs(*st.step_inputs(rng, [7]))
        st.ops()
        direct = st.results()
        graph = ctx.capture(st.ops)
        graph.launch()
        same_bits(st.results(), direct)
    finally:
        st.free()
