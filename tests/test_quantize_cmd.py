"""`llmbench quantize`: llama.cpp's per-tensor type rules, metadata kept, results readable by both GGUF
readers and close to the source, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llmbench import cli
from llmbench.models.gguf import GGUFFile
from llmbench.models.gguf_writer import write_gguf
from llmbench.models.quantize import MIXES, Shape, quantize_file, should_quantize, tensor_type, use_more_bits

gguf = pytest.importorskip("gguf")

STORIES = Path(__file__).resolve().parents[2] / "shared" / "models" / "stories260K" / "stories260K.gguf"
needs_stories = pytest.mark.skipif(not STORIES.exists(), reason=f"{STORIES} not found (shared test model)")
LISTED = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K_S", "Q4_K_M", "Q5_K_M", "Q6_K"]

# Layers whose attn_v and ffn_down get Q6_K in Q4_K_M, worked out by hand from llama.cpp's rule
# i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
MORE_BITS = {
    16: {0, 1, 4, 7, 10, 13, 14, 15},
    22: {0, 1, 4, 7, 10, 13, 16, 19, 20, 21},
    32: {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31},
}


# ---- the type rules ----

@pytest.mark.parametrize("n", sorted(MORE_BITS))
def test_q4_k_m_layers(n):
    assert {i for i in range(n) if use_more_bits(i, n)} == MORE_BITS[n]
    for i in range(n):
        want = "Q6_K" if i in MORE_BITS[n] else "Q4_K"
        assert tensor_type("Q4_K_M", f"blk.{i}.attn_v.weight", 4096, n, True) == want
        assert tensor_type("Q4_K_M", f"blk.{i}.ffn_down.weight", 14336, n, True) == want
        for other in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            assert tensor_type("Q4_K_M", f"blk.{i}.{other}.weight", 4096, n, True) == "Q4_K"


def test_output_and_tied_embedding():
    for mix, out in [("Q4_K_M", "Q6_K"), ("Q4_K_S", "Q6_K"), ("Q5_K_M", "Q6_K"), ("Q6_K", "Q6_K"),
                     ("Q4_0", "Q6_K"), ("Q4_1", "Q6_K"), ("Q5_0", "Q6_K"), ("Q5_1", "Q6_K"), ("Q8_0", "Q8_0"),
                     ("F16", "F16"), ("BF16", "BF16")]:
        assert tensor_type(mix, "output.weight", 4096, 32, True) == out
        assert tensor_type(mix, "token_embd.weight", 2048, 16, False) == out     # tied: treated as the output
        assert tensor_type(mix, "token_embd.weight", 4096, 32, True) == MIXES[mix].default


def test_other_mixes():
    n = 32
    for i in range(n):
        v, d = f"blk.{i}.attn_v.weight", f"blk.{i}.ffn_down.weight"
        assert tensor_type("Q4_K_S", v, 4096, n, True) == ("Q5_K" if i < 4 else "Q4_K")
        assert tensor_type("Q4_K_S", d, 14336, n, True) == ("Q5_K" if i < 4 else "Q4_K")
        assert tensor_type("Q5_K_M", v, 4096, n, True) == ("Q6_K" if i in MORE_BITS[n] else "Q5_K")
        assert tensor_type("Q6_K", d, 14336, n, True) == "Q6_K"
        assert tensor_type("Q8_0", d, 14336, n, True) == "Q8_0"
        for legacy in ("Q4_0", "Q4_1", "Q5_0", "Q5_1"):   # uniform without an importance matrix
            assert tensor_type(legacy, v, 4096, n, True) == tensor_type(legacy, d, 14336, n, True) == legacy


# The low-bit mixes for a 17-block model, written out by hand from llama.cpp's llama_tensor_get_type
# (src/llama-quant.cpp): n/8 = 2, n/16 = 1. Per tensor kind: the type of layers 0, 1 and the rest.
# gqa: query heads per key/value head (Q2_K and IQ4_* give attn_v more bits from 4 on).
LOWBIT_17 = {
    # mix, gqa, imatrix: {kind: (layer 0, layer 1, other layers)}
    ("Q2_K", 4, False): {"attn_v": ("Q4_K",) * 3, "ffn_down": ("Q3_K",) * 3, "attn_output": ("Q3_K",) * 3,
                         "attn_q": ("Q2_K",) * 3, "ffn_up": ("Q2_K",) * 3},
    ("Q2_K", 2, False): {"attn_v": ("Q3_K",) * 3, "ffn_down": ("Q3_K",) * 3, "attn_output": ("Q3_K",) * 3,
                         "attn_k": ("Q2_K",) * 3, "ffn_gate": ("Q2_K",) * 3},
    ("Q3_K_S", 4, False): {"attn_v": ("Q3_K",) * 3, "ffn_down": ("Q3_K",) * 3, "attn_output": ("Q3_K",) * 3},
    ("Q3_K_M", 4, False): {"attn_v": ("Q5_K", "Q5_K", "Q4_K"), "ffn_down": ("Q5_K", "Q4_K", "Q4_K"),
                           "attn_output": ("Q4_K",) * 3, "attn_q": ("Q3_K",) * 3, "ffn_up": ("Q3_K",) * 3},
    ("Q3_K_L", 4, False): {"attn_v": ("Q5_K",) * 3, "ffn_down": ("Q5_K",) * 3, "attn_output": ("Q5_K",) * 3,
                           "ffn_gate": ("Q3_K",) * 3},
    ("Q5_K_S", 4, False): {"attn_v": ("Q5_K",) * 3, "ffn_down": ("Q5_K",) * 3, "attn_output": ("Q5_K",) * 3},
    ("IQ4_NL", 4, False): {"attn_v": ("Q5_K",) * 3, "ffn_down": ("Q5_K", "Q5_K", "IQ4_NL"),
                           "attn_output": ("IQ4_NL",) * 3},
    ("IQ4_NL", 2, False): {"attn_v": ("IQ4_NL",) * 3, "ffn_down": ("Q5_K", "Q5_K", "IQ4_NL")},
    ("IQ4_NL", 2, True): {"attn_v": ("IQ4_NL",) * 3, "ffn_down": ("IQ4_NL",) * 3},
    ("IQ4_XS", 4, False): {"attn_v": ("Q5_K",) * 3, "ffn_down": ("Q5_K", "Q5_K", "IQ4_XS"), "ffn_up": ("IQ4_XS",) * 3},
    ("IQ4_XS", 4, True): {"attn_v": ("Q5_K",) * 3, "ffn_down": ("IQ4_XS",) * 3},
    ("Q4_0", 4, True): {"ffn_down": ("Q4_1", "Q4_1", "Q4_0"), "attn_v": ("Q4_0",) * 3},
    ("Q5_0", 4, True): {"ffn_down": ("Q5_1", "Q5_1", "Q5_0")},
    ("Q4_1", 4, True): {"ffn_down": ("Q4_1",) * 3},
    ("Q5_0", 4, False): {"ffn_down": ("Q5_0",) * 3},
}


@pytest.mark.parametrize("key", sorted(LOWBIT_17), ids=lambda k: f"{k[0]}-gqa{k[1]}{'-imatrix' if k[2] else ''}")
def test_lowbit_mixes(key):
    mix, gqa, imatrix = key
    shape = Shape(17, True, n_gqa=gqa, has_imatrix=imatrix)
    for kind, (t0, t1, rest) in LOWBIT_17[key].items():
        for i in range(17):
            want = (t0, t1)[i] if i < 2 else rest
            assert tensor_type(mix, f"blk.{i}.{kind}.weight", 4096, shape) == want, (mix, kind, i)
    assert tensor_type(mix, "output.weight", 4096, shape) == "Q6_K"
    assert tensor_type(mix, "token_embd.weight", 4096, shape) == MIXES[mix].default


def test_lowbit_fallbacks():
    # 576 (SmolLM2-135M) holds 18 blocks of 32 but no whole 256: Q2_K and Q3_K go to Q4_0, IQ4_XS to IQ4_NL
    shape = Shape(30, False, n_gqa=3)
    assert tensor_type("Q2_K", "blk.3.attn_q.weight", 576, shape) == "Q4_0"
    assert tensor_type("Q2_K", "blk.3.ffn_down.weight", 576, shape) == "Q4_0"      # Q3_K -> Q4_0
    assert tensor_type("Q3_K_M", "blk.3.attn_output.weight", 576, shape) == "Q5_0"  # Q4_K -> Q5_0
    assert tensor_type("Q3_K_L", "blk.3.attn_output.weight", 576, shape) == "Q5_1"  # Q5_K -> Q5_1
    assert tensor_type("IQ4_XS", "blk.3.attn_k.weight", 576, shape) == "IQ4_NL"
    assert tensor_type("IQ4_XS", "blk.0.ffn_down.weight", 1536, shape) == "Q5_K"
    # tied embedding: the output rule, whose block test uses the mix's own type (32 for IQ4_NL)
    assert tensor_type("IQ4_NL", "token_embd.weight", 576, shape) == "Q8_0"   # Q6_K cannot hold 576
    assert tensor_type("Q2_K", "token_embd.weight", 576, shape) == "Q8_0"
    for mix in ("Q2_K", "Q3_K_S", "IQ4_NL", "IQ4_XS", "Q5_K_S"):
        assert tensor_type(mix, "blk.0.ffn_down.weight", 172, shape) == "F16"


def test_attn_v_counts_in_layer_order():
    # Q3_K_M gives Q5_K to the first two attn_v-like tensors llama.cpp meets, whatever their layer numbers
    shape = Shape(4, True, n_attn_v=4)
    assert tensor_type("Q3_K_M", "blk.7.attn_v.weight", 256, shape, i_attn_v=1) == "Q5_K"
    assert tensor_type("Q3_K_M", "blk.1.attn_v.weight", 256, shape, i_attn_v=2) == "Q4_K"
    assert tensor_type("Q3_K_M", "blk.0.attn_qkv.weight", 256, shape, i_attn_v=0) == "Q5_K"


def test_fallbacks_for_rows_that_are_not_whole_blocks():
    # 896 (Qwen2.5-0.5B's width) is 3.5 super-blocks: llama.cpp's table Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0.
    assert tensor_type("Q4_K_M", "blk.5.attn_q.weight", 896, 24, False) == "Q5_0"
    assert tensor_type("Q4_K_M", "blk.0.attn_v.weight", 896, 24, False) == "Q8_0"
    assert tensor_type("Q5_K_M", "blk.5.attn_q.weight", 896, 24, False) == "Q5_1"
    assert tensor_type("Q4_K_M", "token_embd.weight", 896, 24, False) == "Q8_0"
    # 172 is not even a multiple of 32: F16, as llama.cpp's llama-quantize does.
    for mix in ("Q4_K_M", "Q6_K", "Q4_0", "Q8_0"):
        assert tensor_type(mix, "blk.0.ffn_down.weight", 172, 5, True) == "F16"


def test_which_tensors_are_converted():
    assert should_quantize("blk.0.attn_q.weight", 2) and should_quantize("token_embd.weight", 2)
    assert not should_quantize("blk.0.attn_norm.weight", 1)
    assert not should_quantize("blk.0.attn_q.bias", 1)
    assert not should_quantize("rope_freqs.weight", 1)
    assert not should_quantize("blk.0.ffn_gate_inp.weight", 2)


# ---- the command ----

def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["quantize", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _nmse(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean((x - y) ** 2) / max(np.mean(x ** 2), 1e-30))


# normalized MSE a type may add to N(0, 1)-like weights
TOLERANCE = {"F32": 0.0, "F16": 1e-6, "BF16": 2e-5, "Q8_0": 1e-4, "Q6_K": 1e-3, "Q5_0": 4e-3, "Q5_1": 4e-3,
             "Q5_K": 4e-3, "Q4_0": 2e-2, "Q4_1": 2e-2, "Q4_K": 2e-2}


@needs_stories
@pytest.mark.parametrize("mix", LISTED)
def test_stories_into_every_type(tmp_path, capsys, mix):
    out = tmp_path / f"stories-{mix}.gguf"
    rc, stdout, err = _run(capsys, str(STORIES), str(out), "--type", mix.lower(), "--json")
    assert rc == 0, err
    report = json.loads(stdout)
    assert report["mix"] == mix and 0 < report["bits_per_weight"] < 33
    with GGUFFile(STORIES) as src, GGUFFile(out) as dst:
        # metadata: same keys, values and types, plus llama.cpp's file type and quantization version
        assert dst.metadata_types == {**src.metadata_types, "general.file_type": "uint32",
                                      "general.quantization_version": "uint32"}
        assert dst.metadata["general.file_type"] == MIXES[mix].ftype
        for k, v in src.metadata.items():
            assert np.array_equal(dst.metadata[k], v) if isinstance(v, np.ndarray) else dst.metadata[k] == v, k
        assert list(dst.tensors) == list(src.tensors)
        reader = gguf.GGUFReader(out)
        types_seen = set()
        for rt in reader.tensors:
            t, s = dst.tensors[rt.name], src.tensors[rt.name]
            types_seen.add(t.type)
            assert t.shape == s.shape and rt.tensor_type.name == t.type
            assert np.asarray(rt.data).tobytes() == dst.raw(t.name).tobytes()
            x = src.raw(s.name).view(np.float32).reshape(s.shape)
            if len(s.shape) == 1:
                assert t.type == "F32" and np.array_equal(dst.raw(t.name).view(np.float32), x)
                continue
            # decoded by the gguf package's own NumPy dequantizer: an independent check of the layout
            y = gguf.quants.dequantize(np.asarray(rt.data), rt.tensor_type).reshape(s.shape)
            assert _nmse(x, y) <= TOLERANCE[t.type], (t.name, t.type, _nmse(x, y))
        assert "F16" in types_seen or mix == "BF16"      # the 172-wide ffn_down fell back


@needs_stories
def test_requantize_from_f16_and_q8_0(tmp_path, capsys):
    f16, q8, q4 = tmp_path / "f16.gguf", tmp_path / "q8.gguf", tmp_path / "q4.gguf"
    assert _run(capsys, str(STORIES), str(f16), "--type", "F16")[0] == 0
    assert _run(capsys, str(f16), str(q8), "--type", "Q8_0")[0] == 0
    rc, out, err = _run(capsys, str(q8), str(q4), "--type", "Q4_K_M")
    assert rc == 0, err
    assert "Q4_K_M" in out and "bits per weight" in out
    with GGUFFile(STORIES) as src, GGUFFile(q4) as dst:
        x = src.raw("blk.0.attn_q.weight").view(np.float32).reshape(64, 64)
        t = dst.tensors["blk.0.attn_q.weight"]
        assert t.type == "Q5_0"
        y = gguf.quants.dequantize(dst.raw(t.name), gguf.GGMLQuantizationType.Q5_0).reshape(64, 64)
        assert _nmse(x, y) < 5e-3


@needs_stories
def test_refuses_existing_destination(tmp_path, capsys):
    out = tmp_path / "out.gguf"
    out.write_bytes(b"precious")
    rc, _, err = _run(capsys, str(STORIES), str(out), "--type", "Q8_0")
    assert rc == 2 and "exists; pass --force" in err and out.read_bytes() == b"precious"
    rc, _, err = _run(capsys, str(STORIES), str(out), "--type", "Q8_0", "--force")
    assert rc == 0, err
    with GGUFFile(out) as f:
        assert f.metadata["general.file_type"] == 7


def test_unsupported_source_type(tmp_path, capsys):
    """every weight type dequantizes, so an integer matrix (I8) stands for a source llmbench cannot convert"""
    src = tmp_path / "i8.gguf"
    rows = np.random.default_rng(0).integers(0, 256, (4, 256), dtype=np.uint8)   # 4 rows of 256 int8 values
    write_gguf(src, {"general.architecture": "llama"}, {"blk.0.attn_q.weight": ("I8", rows)})
    rc, _, err = _run(capsys, str(src), str(tmp_path / "out.gguf"), "--type", "Q4_K_M")
    assert rc == 2
    assert "'blk.0.attn_q.weight' is I8" in err and "cannot convert" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["i8.gguf"]


def test_requantizes_an_i_quant_source(tmp_path, capsys):
    """a downloaded I-quant file converts like any other: its rows dequantized, then quantized to the target"""
    import gguf

    rows = np.random.default_rng(0).integers(0, 256, (4, 2 * 66), dtype=np.uint8)   # 4 rows of 2 IQ2_XXS blocks
    rows[:, [0, 66]] = 0   # fp16 d = 0x0800 = 2^-13: finite, modest
    rows[:, [1, 67]] = 8
    src = tmp_path / "iq2.gguf"
    write_gguf(src, {"general.architecture": "llama"}, {"blk.0.attn_q.weight": ("IQ2_XXS", rows)})
    rc, _, err = _run(capsys, str(src), str(tmp_path / "out.gguf"), "--type", "Q8_0")
    assert rc == 0, err
    want = gguf.quants.dequantize(rows, gguf.GGMLQuantizationType.IQ2_XXS)
    with GGUFFile(tmp_path / "out.gguf") as f:
        assert f.tensors["blk.0.attn_q.weight"].type == "Q8_0"
        got = f.dequantize("blk.0.attn_q.weight")
    assert got.shape == want.shape and np.abs(got - want).max() <= np.abs(want).max() / 127   # Q8_0's rounding


def test_user_errors(tmp_path, capsys):
    rc, _, err = _run(capsys, str(tmp_path / "missing.gguf"), str(tmp_path / "o.gguf"), "--type", "Q8_0")
    assert rc == 2 and "missing.gguf" in err
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    rc, _, err = _run(capsys, str(bad), str(tmp_path / "o.gguf"), "--type", "Q8_0")
    assert rc == 2 and "error" in err
    if STORIES.exists():
        rc, _, err = _run(capsys, str(STORIES), str(tmp_path / "o.gguf"), "--type", "IQ2_XXS")
        assert rc == 2 and "unknown quantization type 'IQ2_XXS'" in err and "Q4_K_M" in err
    assert not (tmp_path / "o.gguf").exists()


@needs_stories
def test_interrupted_quantize_leaves_nothing(tmp_path):
    def interrupt(name: str, n: int) -> None:
        if name.startswith("blk.2"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        quantize_file(STORIES, tmp_path / "out.gguf", "Q8_0", on_progress=interrupt)
    assert list(tmp_path.iterdir()) == []
