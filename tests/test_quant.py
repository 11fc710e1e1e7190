"""llmbench.models.weight_types against the gguf package's NumPy code (version 0.19) and real GGUF files.

- Dequantization of every type is bit-identical to ``gguf.quants.dequantize`` on random blocks
  (random bytes, finite scales; F16/BF16 fully random, NaN payloads included), the dequantize-only
  types Q2_K, Q3_K, IQ4_NL, IQ4_XS and the I-quants IQ1_S .. IQ3_S included. Q8_K, which gguf
  lacks, is checked against its one-line definition.
- Quantization is byte-identical to ``gguf.quants.quantize`` for every type gguf can quantize
  (F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), and to llama.cpp's own quantize_row_*_ref for every
  block type, K types included (SHA-256 digests recorded from llama.cpp, LLAMA_CPP_SHA256); all
  types meet the round-trip error table below.
- The scalar reference and every SIMD level this CPU has give identical bytes.
- Real models: stories260K (F32), SmolLM2-135M Q4_1 and Gemma 3 270M Q4_K_M (tests/models.py):
  every tensor decodes as gguf's reader does (large tensors on a sample of rows).
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GT
from models import gemma3_gguf, smollm2_gguf
from reference.forward import dequantize as reference_dequantize

import llmbench
from llmbench import _core
from llmbench.models.gguf import GGUFFile
from llmbench.models.weight_types import (
    QUANTIZE_TYPES,
    SUPPORTED_TYPES,
    block_size,
    dequantize,
    quantize,
    random_blocks,
    row_bytes,
    type_size,
)

GGUF_QUANTIZES = ("F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")

# SHA-256 of llama.cpp's quantize_row_<type>_ref output for hashed_rows(48, 1024), recorded by
# calling the ggml CPU library of the llama-cpp-cffi 0.4.42 wheel through ctypes (after ggml_init,
# which fills ggml's fp16 table). Our bytes were identical for all nine types, and also on 64 rows
# of 4096 N(0, 1) values and on gaussian_rows(64, 4096, 1).
LLAMA_CPP_SHA256 = {
    "Q4_0": "28a9fece3784e144ea5c27e4f2d3089c57c5f0c6d0e4007a1e3abdd871740ede",
    "Q4_1": "079e08ac75883d0b55867ee4e73a0154269f2ba1f4d4212fff01135441286426",
    "Q5_0": "547091ebd6699184426589cac3dcc17404845ff02053eb4720fac3db42c6d5a4",
    "Q5_1": "1443ef52b062d63a516dac5983856533312a5bb64c5ebac06e114e8221cb6c5a",
    "Q8_0": "4e3b17fd9e8ef3d026a0374aaf1cd26001d6be13eb93861ecac0d31f2a6888e9",
    "Q4_K": "88197c7e5d8e0000a9c23814cc0571d781d8c293c00d02e61c2e406afd9cbf8b",
    "Q5_K": "801f4e0673923317d1efd0d04380205864d20de70898ee014d48d581aded1e8c",
    "Q6_K": "c9ce2c56e76c081da19ec70d5a1b95d341073847a18d2fab11ee0cda3ae2d588",
    "Q8_K": "2134b2d04f2148d84a428bf720a489f6a7005f876bed4c6ff6e1d3112b88e6ba",
}

# Relative RMS error sqrt(mean((x - y)^2) / mean(x^2)) of quantize -> dequantize on 256 rows of 4096
# N(0, 1) values (seed 0), measured with this code; the test allows 2% either way, and where gguf
# can quantize, its error must be within 2% too (it is the same number: the bytes are identical).
RMSE_TABLE = {
    "F32": 0.0,
    "F16": 0.0002078,
    "BF16": 0.001661,
    "Q8_0": 0.005348,
    "Q8_K": 0.006945,
    "Q6_K": 0.01774,
    "IQ4_NL": 0.07609,    # Q2_K .. IQ4_XS: llama.cpp's quantizer gives the same bytes (quantize_vs_llamacpp.py)
    "IQ4_XS": 0.07667,
    "Q3_K": 0.1507,
    "Q2_K": 0.2966,
    "Q5_K": 0.03612,
    "Q5_1": 0.03783,
    "Q5_0": 0.04266,
    "Q4_K": 0.07137,
    "Q4_1": 0.07825,
    "Q4_0": 0.08586,
}


def bits(a: np.ndarray) -> np.ndarray:
    """float32 values as their bit patterns, so NaN payloads and signed zeros compare too"""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def gaussian_rows(nrows: int, ncols: int, seed: int) -> np.ndarray:
    """rows whose 32-element groups have different scales and some an offset, like real weights"""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((nrows, ncols), dtype=np.float32)
    groups = x.reshape(nrows, -1, 32)
    groups *= np.exp2(rng.integers(-8, 8, groups.shape[:2] + (1,))).astype(np.float32)
    groups += np.where(rng.random(groups.shape[:2] + (1,)) < 0.2, 2.0, 0.0).astype(np.float32) * np.abs(groups).max()
    return x


def hashed_rows(nrows: int, ncols: int) -> np.ndarray:
    """rows from an integer hash with exact float arithmetic only, so they are the same on every
    machine and NumPy version: uniform values, 32-groups scaled by 2^-8..2^7, every fifth group
    shifted up, a few groups all zero"""
    i = np.arange(nrows * ncols, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(12345)) % np.uint64(2**32)
    x = (h >> np.uint64(8)).astype(np.float32) / np.float32(2**24) - np.float32(0.5)
    g = x.reshape(-1, 32)
    gh = (np.arange(g.shape[0], dtype=np.uint64) * np.uint64(40503)) % np.uint64(65536)
    scale = np.exp2((gh % np.uint64(16)).astype(np.float32) - 8)
    g *= scale[:, None]
    g += np.where(gh % np.uint64(5) == 0, np.float32(0.75), np.float32(0))[:, None] * scale[:, None]
    g[gh % np.uint64(97) == 0] = 0
    return x.reshape(nrows, ncols)


@pytest.fixture
def simd_level():
    """yields a function that forces a SIMD level, restoring the original one afterwards"""
    before = _core.simd_info()["active"]
    yield _core.simd_set
    _core.simd_set(before)


def simd_levels() -> list[str]:
    detected = _core.simd_info()["detected"]
    return ["scalar"] + (["avx2"] if detected == "avx512" else []) + ([detected] if detected != "scalar" else [])


# ---- dequantization ----

@pytest.mark.parametrize("type_name", SUPPORTED_TYPES)
def test_dequantize_matches_gguf(type_name):
    rng = np.random.default_rng(1234)
    bs = block_size(type_name)
    nrows, blocks_per_row = 37, (3 if bs > 1 else 203)
    raw = random_blocks(type_name, nrows * blocks_per_row, rng).reshape(nrows, -1)
    ours = dequantize(raw, type_name, (nrows, blocks_per_row * bs))
    if type_name == "Q8_K":   # not in gguf: x = d * q
        blocks = raw.reshape(-1, type_size("Q8_K"))
        ref = blocks[:, :4].copy().view(np.float32) * blocks[:, 4:260].view(np.int8).astype(np.float32)
    else:
        ref = reference_dequantize(raw, GT[type_name])   # gguf's; Q1_0, which gguf lacks, by its definition
    np.testing.assert_array_equal(bits(ours), bits(ref.reshape(ours.shape)))


def test_iq_grids_are_generated_from_gguf():
    """csrc/iq_grids.c is what csrc/gen_iq_grids.py writes from the installed gguf package's lattices"""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location("gen_iq_grids", root / "csrc" / "gen_iq_grids.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (root / "csrc" / "iq_grids.c").read_text() == gen.source()


def test_dequantize_shapes_and_inputs():
    rng = np.random.default_rng(5)
    raw = random_blocks("Q4_0", 3 * 5 * 2, rng)
    ref = dequantize(raw, "Q4_0", (3, 5, 64))
    assert ref.shape == (3, 5, 64) and ref.dtype == np.float32
    np.testing.assert_array_equal(bits(dequantize(raw.tobytes(), 2, (15, 64))), bits(ref.reshape(15, 64)))
    misaligned = np.empty(raw.size + 1, np.uint8)[1:]
    misaligned[:] = raw.reshape(-1)
    np.testing.assert_array_equal(bits(dequantize(misaligned, "q4_0", [3, 5, 64])), bits(ref))
    halves = rng.standard_normal(7, dtype=np.float32).astype(np.float16)
    np.testing.assert_array_equal(dequantize(halves, "F16", 7), halves.astype(np.float32))
    assert dequantize(b"", "Q8_0", (0, 32)).shape == (0, 32)


# ---- quantization ----

@pytest.mark.parametrize("type_name", GGUF_QUANTIZES)
def test_quantize_matches_gguf(type_name):
    x = gaussian_rows(23, 160, seed=7)
    x[3, :32] = 0.0                                          # an all-zero block
    x[4, :32] = np.arange(32, dtype=np.float32) - 15.5       # ties in Q8_0's rounding
    x[4, 0] = 127.0
    ours = quantize(x, type_name)
    ref = gguf.quants.quantize(x, GT[type_name])
    assert ours.shape == (23, row_bytes(type_name, 160))
    np.testing.assert_array_equal(ours, np.ascontiguousarray(ref).view(np.uint8).reshape(ours.shape))


@pytest.mark.parametrize("type_name", sorted(LLAMA_CPP_SHA256))
def test_quantize_matches_llama_cpp(type_name):
    digest = hashlib.sha256(quantize(hashed_rows(48, 1024), type_name).tobytes()).hexdigest()
    assert digest == LLAMA_CPP_SHA256[type_name]


def test_fp16_and_bf16_rounding_of_every_kind_of_float():
    """every 251st float32 bit pattern (NaNs, infinities, subnormals, ties, overflow) converts as
    NumPy (F16) and the gguf package (BF16) do"""
    x = np.arange(0, 2**32, 251, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        np.testing.assert_array_equal(quantize(x, "F16").view(np.uint16), x.astype(np.float16).view(np.uint16))
        np.testing.assert_array_equal(quantize(x, "BF16"), gguf.quants.quantize(x, GT.BF16).view(np.uint8))


def test_fp16_decoding_of_every_half():
    h = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    np.testing.assert_array_equal(bits(dequantize(h, "F16", h.size)), bits(h.view(np.float16).astype(np.float32)))


@pytest.mark.parametrize("type_name", QUANTIZE_TYPES)
def test_round_trip_error(type_name):
    x = np.random.default_rng(0).standard_normal((256, 4096), dtype=np.float32)
    y = dequantize(quantize(x, type_name), type_name, x.shape)
    rel = float(np.sqrt(np.mean((x.astype(np.float64) - y) ** 2) / np.mean(x.astype(np.float64) ** 2)))
    assert rel == pytest.approx(RMSE_TABLE[type_name], rel=0.02, abs=1e-7), f"{type_name}: relative RMSE {rel:.6f}"
    if type_name in GGUF_QUANTIZES:
        yr = gguf.quants.dequantize(gguf.quants.quantize(x, GT[type_name]), GT[type_name])
        rel_gguf = float(np.sqrt(np.mean((x.astype(np.float64) - yr) ** 2) / np.mean(x.astype(np.float64) ** 2)))
        assert rel == pytest.approx(rel_gguf, rel=0.02)


def test_quantize_shapes_dtypes_and_odd_rows():
    x64 = gaussian_rows(9, 256, seed=3).astype(np.float64).reshape(3, 3, 256)
    q = quantize(x64, "Q6_K")
    assert q.shape == (3, 3, 210) and q.dtype == np.uint8
    np.testing.assert_array_equal(q, quantize(x64.astype(np.float32), "Q6_K"))
    np.testing.assert_array_equal(quantize(x64[:, :, ::-1], "Q4_K"), quantize(np.ascontiguousarray(x64[:, :, ::-1]), 12))
    assert quantize(np.zeros((0, 32), np.float32), "Q8_0").shape == (0, 34)
    ones = quantize(np.ones((1, 256), np.float32), "Q8_K").reshape(-1)   # ggml's scale is -max/127
    assert ones[:4].view(np.float32)[0] == np.float32(-1 / 127)
    assert ones[4:260].view(np.int8).tolist() == [-127] * 256
    assert ones[260:].view(np.int16).tolist() == [-127 * 16] * 16   # bsums


def test_threads_give_the_same_bytes():
    x = gaussian_rows(257, 1024, seed=11)
    for t in ("Q4_K", "Q8_0", "F16"):
        q1 = quantize(x, t, nthreads=1)
        np.testing.assert_array_equal(q1, quantize(x, t, nthreads=3))
        np.testing.assert_array_equal(bits(dequantize(q1, t, x.shape, nthreads=1)), bits(dequantize(q1, t, x.shape)))


@pytest.mark.parametrize("level", simd_levels())
def test_simd_levels_agree_with_scalar(simd_level, level):
    rng = np.random.default_rng(99)
    x = gaussian_rows(9, 512, seed=9)
    raws = {t: random_blocks(t, 9 * 512 // block_size(t), rng) for t in SUPPORTED_TYPES}
    simd_level("scalar")
    want = {t: bits(dequantize(raws[t], t, (9, 512))) for t in SUPPORTED_TYPES}
    want_q = {t: quantize(x, t) for t in QUANTIZE_TYPES}
    simd_level(level)
    for t in SUPPORTED_TYPES:
        np.testing.assert_array_equal(bits(dequantize(raws[t], t, (9, 512))), want[t], err_msg=f"{level} {t}")
    for t in QUANTIZE_TYPES:
        np.testing.assert_array_equal(quantize(x, t), want_q[t], err_msg=f"{level} {t}")


# ---- arguments ----

def test_bad_arguments_explain_themselves():
    x = np.ones((2, 256), np.float32)
    with pytest.raises(ValueError, match=r"unknown tensor type 'Q4K' \(did you mean Q4_K.*supported: F32"):
        quantize(x, "Q4K")
    with pytest.raises(ValueError, match="unknown ggml type id 5"):
        dequantize(b"", 5, (0, 32))
    with pytest.raises(llmbench.UnsupportedError, match="cannot dequantize I32; supported: .*Q4_K"):
        dequantize(b"", "I32", (0, 256))
    with pytest.raises(llmbench.UnsupportedError, match="cannot quantize to IQ2_XXS; supported: .*Q4_K"):
        quantize(x, "IQ2_XXS")
    with pytest.raises(ValueError, match="whole blocks of 256 elements, but the last dimension is 100; pad it to 256"):
        quantize(np.ones((2, 100)), "Q4_K")
    with pytest.raises(ValueError, match="whole blocks of 32"):
        dequantize(np.zeros(34, np.uint8), "Q8_0", (1, 33))
    with pytest.raises(ValueError, match="raw has 33 bytes, but a Q8_0 tensor of shape \\(1, 32\\) takes 34"):
        dequantize(np.zeros(33, np.uint8), "Q8_0", (1, 32))
    with pytest.raises(ValueError, match="C-contiguous"):
        dequantize(np.zeros((34, 2), np.uint8)[:, 0], "Q8_0", (1, 32))
    with pytest.raises(TypeError, match="dtype complex64"):
        quantize(np.ones(32, np.complex64), "Q8_0")
    with pytest.raises(ValueError, match="at least one dimension"):
        quantize(np.float32(1), "F16")
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf, which Q4_K cannot represent"):
        quantize(x, "Q4_K")
    assert np.isnan(dequantize(quantize(x, "BF16"), "BF16", x.shape)[1, 7])
    with pytest.raises(ValueError, match="float32"):
        _core.quantize(np.ones(32), 8, np.empty(34, np.uint8))


# ---- real files ----

def test_stories260k_f32(stories_path):
    reader = gguf.GGUFReader(stories_path)
    with GGUFFile(stories_path) as f:
        for t in reader.tensors:
            np.testing.assert_array_equal(bits(f.dequantize(t.name)), bits(t.data.reshape(f.tensors[t.name].shape)))


def compare_with_gguf_reader(path, max_full=1 << 22, sample_rows=64) -> set[str]:
    """every tensor of a supported type as gguf's reader decodes it; tensors above max_full
    elements on sample_rows rows spread over the tensor. Returns the types seen."""
    reader = gguf.GGUFReader(path)
    seen = set()
    with GGUFFile(path) as f:
        for t in reader.tensors:
            info = f.tensors[t.name]
            if info.type not in SUPPORTED_TYPES:
                continue
            seen.add(info.type)
            data = t.data.reshape(-1, t.data.shape[-1])   # rows (of bytes, or of floats for F32/F16)
            if info.n_elements <= max_full:
                ours = f.dequantize(t.name).reshape(-1, info.shape[-1])
                rows = np.arange(data.shape[0])
            else:
                rows = np.unique(np.linspace(0, data.shape[0] - 1, sample_rows).astype(np.int64))
                raw = f.raw(t.name).reshape(data.shape[0], -1)[rows]
                ours = dequantize(raw, info.type, (rows.size, info.shape[-1]))
            ref = gguf.quants.dequantize(np.ascontiguousarray(data[rows]), t.tensor_type)
            np.testing.assert_array_equal(bits(ours[: rows.size]), bits(ref), err_msg=t.name)
    return seen


def test_smollm2_q4_1_file():
    assert compare_with_gguf_reader(smollm2_gguf()) == {"F32", "Q4_1", "Q8_0"}


def test_gemma3_q4_k_m_file():
    assert compare_with_gguf_reader(gemma3_gguf()) == {"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}
