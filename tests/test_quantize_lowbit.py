"""`llmbench quantize` into the low-bit mixes (Q2_K, Q3_K_S/M/L, Q5_K_S, IQ4_NL, IQ4_XS) on a small
grouped-query model written here: every tensor gets the type llama.cpp's rules give it (a table written
out by hand), the file reads back through the gguf package's own dequantizers close to the source, and
the quantizers' bytes are deterministic. Byte-for-byte equality with llama.cpp's quantizer needs
llama-cpp-python and lives in benchmarks/quantize_vs_llamacpp.py."""

from __future__ import annotations

import numpy as np
import pytest

from llmbench.models.gguf import GGUFFile
from llmbench.models.gguf_writer import write_gguf
from llmbench.models.quantize import MIXES, quantize_file
from llmbench.models.weight_types import dequantize, quantize

gguf = pytest.importorskip("gguf")

N_LAYER, DIM, KV, FF, VOCAB = 17, 256, 64, 512, 96   # 8 query heads of 32, 2 key/value heads: gqa 4
KINDS = {"attn_q": (DIM, DIM), "attn_k": (KV, DIM), "attn_v": (KV, DIM), "attn_output": (DIM, DIM),
         "ffn_gate": (FF // 8, DIM), "ffn_up": (FF // 8, DIM), "ffn_down": (DIM // 8, FF)}

# per mix: kind -> (layer 0, layer 1, layers 2..16), from llama.cpp's llama_tensor_get_type for 17 blocks
# (n/8 = 2, n/16 = 1) and gqa 4; kinds not named get the mix's own type
TABLE = {
    "Q2_K": {"attn_v": ("Q4_K",) * 3, "ffn_down": ("Q3_K",) * 3, "attn_output": ("Q3_K",) * 3},
    "Q3_K_S": {},
    "Q3_K_M": {"attn_v": ("Q5_K", "Q5_K", "Q4_K"), "ffn_down": ("Q5_K", "Q4_K", "Q4_K"), "attn_output": ("Q4_K",) * 3},
    "Q3_K_L": {"attn_v": ("Q5_K",) * 3, "ffn_down": ("Q5_K",) * 3, "attn_output": ("Q5_K",) * 3},
    "Q5_K_S": {},
    "IQ4_NL": {"attn_v": ("Q5_K",) * 3, "ffn_down": ("Q5_K", "Q5_K", "IQ4_NL")},
    "IQ4_XS": {"attn_v": ("Q5_K",) * 3, "ffn_down": ("Q5_K", "Q5_K", "IQ4_XS")},
}
# normalized MSE each type may add to Gaussian weights (measured: Q2_K 0.088, Q3_K 0.023, IQ4 0.0058)
NMSE = {"Q2_K": 0.1, "Q3_K": 0.03, "IQ4_NL": 8e-3, "IQ4_XS": 8e-3, "Q4_K": 6e-3, "Q5_K": 2e-3, "Q6_K": 5e-4}


def _model(path, rng: np.random.Generator) -> dict[str, np.ndarray]:
    weights = {"token_embd.weight": rng.standard_normal((VOCAB, DIM), dtype=np.float32),
               "output_norm.weight": np.ones(DIM, np.float32),
               "output.weight": rng.standard_normal((VOCAB, DIM), dtype=np.float32)}
    for i in range(N_LAYER):
        weights[f"blk.{i}.attn_norm.weight"] = np.ones(DIM, np.float32)
        for kind, shape in KINDS.items():
            weights[f"blk.{i}.{kind}.weight"] = rng.standard_normal(shape, dtype=np.float32)
    meta = {"general.architecture": "llama", "llama.block_count": N_LAYER, "llama.embedding_length": DIM,
            "llama.attention.head_count": 8, "llama.attention.head_count_kv": 2}
    write_gguf(path, meta, {n: ("F32", w) for n, w in weights.items()})
    return weights


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("lowbit") / "gqa4-f32.gguf"
    return path, _model(path, np.random.default_rng(7))


def _want(mix: str, name: str) -> str:
    if name.endswith("norm.weight"):
        return "F32"
    if name == "output.weight":
        return "Q6_K"
    kind = name.split(".")[2] if name.startswith("blk.") else ""
    default = MIXES[mix].default
    if kind not in TABLE[mix]:
        return default
    i = int(name.split(".")[1])
    return TABLE[mix][kind][min(i, 2)]


@pytest.mark.parametrize("mix", sorted(TABLE))
def test_lowbit_mix_file(model, tmp_path, mix):
    src, weights = model
    out = tmp_path / f"{mix}.gguf"
    result = quantize_file(src, out, mix, threads=2)
    assert {t.name: t.type for t in result.tensors} == {n: _want(mix, n) for n in weights}
    reader = gguf.GGUFReader(out)
    with GGUFFile(out) as f:
        assert f.metadata["general.file_type"] == MIXES[mix].ftype
        for rt in reader.tensors:
            x = weights[rt.name]
            assert rt.tensor_type.name == f.tensors[rt.name].type == _want(mix, rt.name)
            if x.ndim == 1:
                continue
            y = gguf.quants.dequantize(np.asarray(rt.data), rt.tensor_type).reshape(x.shape)
            nmse = float(np.mean((x - y) ** 2) / np.mean(x ** 2))
            assert nmse <= NMSE[rt.tensor_type.name], (rt.name, rt.tensor_type.name, nmse)
            # the file holds exactly what llmbench.models.weight_types writes for those rows
            np.testing.assert_array_equal(f.raw(rt.name).reshape(x.shape[0], -1), quantize(x, rt.tensor_type.name))


@pytest.mark.parametrize("type_name", ["Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS"])
def test_lowbit_quantizer_properties(type_name):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 512), dtype=np.float32)
    x[1] *= 1e-3                  # scale: a row 1000x smaller is quantized 1000x smaller
    x[2, :256] = 0                # an all-zero block decodes to zeros
    x[3] = np.abs(x[3])           # one-signed rows
    x[4] = -np.abs(x[4])
    x[5, ::7] *= 40               # outliers
    q = quantize(x, type_name)
    np.testing.assert_array_equal(q, quantize(x, type_name, nthreads=1))
    y = dequantize(q, type_name, x.shape)
    assert np.all(y[2, :256] == 0)
    for r in range(8):
        rel = np.sqrt(np.mean((x[r] - y[r]) ** 2) / np.mean(x[r] ** 2))
        assert rel < {"Q2_K": 0.45, "Q3_K": 0.25, "IQ4_NL": 0.12, "IQ4_XS": 0.12}[type_name], (r, rel)
    # the gguf package decodes the same bytes to the same values
    y2 = gguf.quants.dequantize(q, gguf.GGMLQuantizationType[type_name]).reshape(x.shape)
    np.testing.assert_array_equal(y, y2)
