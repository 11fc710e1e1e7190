"""Importance matrices: reading llama.cpp's GGUF and legacy .dat files (llmbench.models.imatrix), quantizing with
them (llmbench.models.weight_types.quantize(..., imatrix=), `llmbench quantize --imatrix`), and the errors.

Byte equality with llama.cpp's quantizer given the same weights is checked by
benchmarks/quantize_vs_llamacpp.py (--rows and --imatrix); here: the weights are llama.cpp's (sums over
counts), they lower the weighted error they are meant to lower, and the mix rules and files follow."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from llmbench import cli
from llmbench.models.gguf import GGUFFile
from llmbench.models.gguf_writer import write_gguf
from llmbench.models.imatrix import ImatrixError, load_imatrix
from llmbench.models.weight_types import IMATRIX_TYPES, dequantize, quantize

IMATRIX_META = {"general.type": "imatrix", "imatrix.datasets": ["test"], "imatrix.chunk_count": 3,
                "imatrix.chunk_size": 512}


def _write_imatrix(path, entries: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    tensors = {}
    for name, (sums, counts) in entries.items():
        tensors[f"{name}.in_sum2"] = ("F32", np.asarray(sums, np.float32))
        tensors[f"{name}.counts"] = ("F32", np.asarray(counts, np.float32).reshape(-1, 1))
    write_gguf(path, IMATRIX_META, tensors)


def _write_legacy(path, entries: dict[str, tuple[int, np.ndarray]], trailer: bool = True) -> None:
    b = struct.pack("<i", len(entries))
    for name, (ncall, values) in entries.items():
        raw = name.encode()
        b += struct.pack("<i", len(raw)) + raw + struct.pack("<ii", ncall, values.size)
        b += np.asarray(values, "<f4").tobytes()
    if trailer:   # last call and dataset name, as llama-imatrix writes them
        b += struct.pack("<i", 7) + struct.pack("<i", 4) + b"wiki"
    path.write_bytes(b)


# ---- reading ----

def test_gguf_weights_are_sums_over_counts(tmp_path):
    rng = np.random.default_rng(0)
    sums = rng.gamma(1.0, 1.0, (1, 64)).astype(np.float32) * 100
    experts = rng.gamma(1.0, 1.0, (3, 32)).astype(np.float32)
    _write_imatrix(tmp_path / "m.gguf", {"blk.0.attn_q.weight": (sums, [25]),
                                         "blk.0.ffn_up_exps.weight": (experts, [4, 0, 8])})
    w = load_imatrix(tmp_path / "m.gguf")
    assert set(w) == {"blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight"}
    np.testing.assert_array_equal(w["blk.0.attn_q.weight"], sums[0] / np.float32(25))
    e = w["blk.0.ffn_up_exps.weight"].reshape(3, 32)
    np.testing.assert_array_equal(e[0], experts[0] / np.float32(4))
    np.testing.assert_array_equal(e[1], np.ones(32, np.float32))    # an expert that saw no token: weight 1
    np.testing.assert_array_equal(e[2], experts[2] / np.float32(8))


def test_legacy_dat_weights_are_values_over_calls(tmp_path):
    v = np.arange(1, 33, dtype=np.float32)
    _write_legacy(tmp_path / "m.dat", {"blk.0.attn_k.weight": (4, v), "output.weight": (0, v)})
    w = load_imatrix(tmp_path / "m.dat")
    np.testing.assert_array_equal(w["blk.0.attn_k.weight"], v / np.float32(4))
    np.testing.assert_array_equal(w["output.weight"], v)
    _write_legacy(tmp_path / "bare.dat", {"x.weight": (2, v)}, trailer=False)
    np.testing.assert_array_equal(load_imatrix(tmp_path / "bare.dat")["x.weight"], v / 2)


def test_unreadable_files_are_refused(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"this is not an importance matrix at all")
    with pytest.raises(ImatrixError, match="neither a GGUF importance matrix nor llama.cpp's legacy"):
        load_imatrix(bad)
    v = np.ones(32, np.float32)
    _write_legacy(tmp_path / "cut.dat", {"blk.0.attn_k.weight": (4, v)}, trailer=False)
    (tmp_path / "cut.dat").write_bytes((tmp_path / "cut.dat").read_bytes()[:-8])
    with pytest.raises(ImatrixError, match="32 values"):
        load_imatrix(tmp_path / "cut.dat")
    write_gguf(tmp_path / "model.gguf", {"general.architecture": "llama"}, {"a.weight": ("F32", np.ones((2, 32), np.float32))})
    with pytest.raises(ImatrixError, match="without <tensor>.in_sum2"):
        load_imatrix(tmp_path / "model.gguf")
    write_gguf(tmp_path / "half.gguf", IMATRIX_META, {"a.weight.in_sum2": ("F32", np.ones((1, 32), np.float32))})
    with pytest.raises(ImatrixError, match="no a.weight.counts"):
        load_imatrix(tmp_path / "half.gguf")
    (tmp_path / "trunc.gguf").write_bytes((tmp_path / "half.gguf").read_bytes()[:40])
    with pytest.raises(ImatrixError, match="not a readable GGUF importance matrix"):
        load_imatrix(tmp_path / "trunc.gguf")


# ---- quantizing with weights ----

@pytest.mark.parametrize("type_name", IMATRIX_TYPES)
def test_weights_lower_the_weighted_error(type_name):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((64, 1024)).astype(np.float32)
    w = rng.gamma(0.3, 1.0, 1024).astype(np.float32)     # a few columns matter much more than the rest

    def weighted_error(q: np.ndarray) -> float:
        return float(np.sum(w * (dequantize(q, type_name, x.shape) - x) ** 2))

    plain, guided = quantize(x, type_name), quantize(x, type_name, imatrix=w)
    # measured 0.46 (Q2_K) to 0.75 (IQ4_XS) of the error without weights
    assert weighted_error(guided) < 0.85 * weighted_error(plain)
    np.testing.assert_array_equal(guided, quantize(x, type_name, imatrix=w, nthreads=1))
    np.testing.assert_array_equal(guided, quantize(x, type_name, imatrix=w, nthreads=3))


def test_types_without_weighted_quantizer_ignore_them():
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    w = np.random.default_rng(2).random(256).astype(np.float32)
    for t in ("Q8_0", "F16", "BF16"):
        np.testing.assert_array_equal(quantize(x, t, imatrix=w), quantize(x, t))


def test_bad_weights():
    x = np.ones((2, 256), np.float32)
    with pytest.raises(ValueError, match=r"one weight per column: shape \(256,\)"):
        quantize(x, "Q4_K", imatrix=np.ones(255, np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        quantize(x, "Q4_K", imatrix=np.full(256, np.nan, np.float32))


# ---- the command ----

N_LAYER = 16


def _model(path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    w = {"token_embd.weight": rng.standard_normal((64, 256), dtype=np.float32),
         "output.weight": rng.standard_normal((64, 256), dtype=np.float32)}
    for i in range(N_LAYER):
        w[f"blk.{i}.attn_v.weight"] = rng.standard_normal((64, 256), dtype=np.float32)
        w[f"blk.{i}.ffn_down.weight"] = rng.standard_normal((32, 512), dtype=np.float32)
    meta = {"general.architecture": "llama", "llama.block_count": N_LAYER, "llama.attention.head_count": 8,
            "llama.attention.head_count_kv": 8}
    write_gguf(path, meta, {n: ("F32", a) for n, a in w.items()})
    return w


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["quantize", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_quantize_with_imatrix(tmp_path, capsys):
    weights = _model(tmp_path / "m.gguf")
    rng = np.random.default_rng(3)
    entries = {n: (rng.gamma(0.5, 1.0, (1, a.shape[1])) * 10, [10]) for n, a in weights.items()
               if n != "blk.3.attn_v.weight"}            # one matrix llama-imatrix did not see
    entries["token_embd.weight"] = (np.ones((1, 7)), [1])   # a wrong size there is ignored, as llama.cpp does
    _write_imatrix(tmp_path / "imatrix.gguf", entries)
    imatrix = load_imatrix(tmp_path / "imatrix.gguf")
    for mix, down in (("IQ4_XS", "IQ4_XS"), ("Q4_0", "Q4_1"), ("Q2_K", "Q3_K")):
        out = tmp_path / f"{mix}.gguf"
        rc, stdout, err = _run(capsys, str(tmp_path / "m.gguf"), str(out), "--type", mix, "--imatrix",
                               str(tmp_path / "imatrix.gguf"), "--json")
        assert rc == 0, err
        report = {t["name"]: t for t in json.loads(stdout)["tensors"]}
        # with an importance matrix llama.cpp keeps IQ4_XS in the first ffn_downs, and gives Q4_0's Q4_1
        assert report["blk.0.ffn_down.weight"]["type"] == down
        assert report["blk.2.ffn_down.weight"]["type"] == ("Q4_0" if mix == "Q4_0" else down)
        assert not report["blk.3.attn_v.weight"]["imatrix"] and not report["token_embd.weight"]["imatrix"]
        assert report["blk.4.attn_v.weight"]["imatrix"] and report["output.weight"]["imatrix"]
        with GGUFFile(out) as f:
            for name in ("blk.0.ffn_down.weight", "blk.4.attn_v.weight", "blk.3.attn_v.weight", "output.weight"):
                t = f.tensors[name]
                w = imatrix.get(name) if report[name]["imatrix"] else None
                want = quantize(weights[name], t.type, imatrix=w)
                np.testing.assert_array_equal(f.raw(name).reshape(want.shape), want, err_msg=name)
    # without --imatrix the same mix gives the first eighth of ffn_down Q5_K
    rc, stdout, err = _run(capsys, str(tmp_path / "m.gguf"), str(tmp_path / "plain.gguf"), "--type", "IQ4_XS", "--json")
    assert rc == 0 and {t["name"]: t["type"] for t in json.loads(stdout)["tensors"]}["blk.1.ffn_down.weight"] == "Q5_K"


def test_imatrix_errors(tmp_path, capsys):
    _model(tmp_path / "m.gguf")
    _write_imatrix(tmp_path / "other.gguf", {"blk.0.attn_v.weight": (np.ones((1, 128)), [1])})
    rc, _, err = _run(capsys, str(tmp_path / "m.gguf"), str(tmp_path / "o.gguf"), "--type", "Q4_K_M", "--imatrix",
                      str(tmp_path / "other.gguf"))
    assert rc == 2 and "holds 128 values for blk.0.attn_v.weight, which needs 256" in err
    _write_imatrix(tmp_path / "nan.gguf", {"blk.0.attn_v.weight": (np.full((1, 256), np.nan), [1])})
    rc, _, err = _run(capsys, str(tmp_path / "m.gguf"), str(tmp_path / "o.gguf"), "--type", "Q4_K_M", "--imatrix",
                      str(tmp_path / "nan.gguf"))
    assert rc == 2 and "NaN or Inf" in err
    rc, _, err = _run(capsys, str(tmp_path / "m.gguf"), str(tmp_path / "o.gguf"), "--type", "Q4_K_M", "--imatrix",
                      str(tmp_path / "m.gguf"))
    assert rc == 2 and "not an importance matrix" in err
    rc, _, err = _run(capsys, str(tmp_path / "m.gguf"), str(tmp_path / "o.gguf"), "--type", "Q4_K_M", "--imatrix",
                      str(tmp_path / "missing.gguf"))
    assert rc == 2 and "missing.gguf" in err
    assert not (tmp_path / "o.gguf").exists()
