"""`llmbench report quant` on stories260K: every column measured, the quality figures against the
source consistent with each other, and the per-tensor errors equal to a direct NumPy computation."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from llmbench.models import weight_types as quant
from llmbench.models.gguf import GGUFFile
from llmbench.study.quantreport import quant_report, tensor_errors


def test_quant_report_on_stories(tmp_path, stories_path):
    rep = quant_report(stories_path, ["Q8_0"], tmp_path, threads=1, pp=32, tg=8, reps=1, ctx=128, chunks=2,
                       mmlu_limit=1, mmlu_subjects=["anatomy"])
    rows = {r["type"]: r for r in rep["types"]}
    src, q8 = rows["source"], rows["Q8_0"]
    assert src["kld"] == 0 and src["same_top"] == 1 and src["speedup_tg"] == 1
    assert 0 < q8["kld"] < 0.01 and 0.9 < q8["same_top"] <= 1 and q8["ppl"] > 1
    assert q8["bits_per_weight"] < src["bits_per_weight"] and q8["size_bytes"] < src["size_bytes"]
    for r in (src, q8):
        assert r["pp_tps"] > 0 and r["tg_tps"] > 0 and r["load_s"] > 0 and r["peak_rss_bytes"] > 0
        assert r["mmlu_n"] == 1 and r["mmlu_acc"] in (0, 1)
    assert q8["speedup_tg"] == pytest.approx(q8["tg_tps"] / src["tg_tps"])
    saved = json.loads((tmp_path / "quant_report.json").read_text())
    assert saved["types"] == json.loads(json.dumps(rep["types"]))
    assert "| Q8_0 |" in (tmp_path / "quant_report.md").read_text()
    assert (tmp_path / "tensor_errors_Q8_0.png").exists() and (tmp_path / "quality_vs_speed.png").exists()
    errs = {e["tensor"]: e for e in rep["tensor_errors"]["Q8_0"]}
    assert errs["blk.0.attn_q.weight"]["layer"] == 0 and errs["blk.0.attn_q.weight"]["kind"] == "attn_q"


def test_tensor_errors_match_numpy(tmp_path, stories_path):
    from llmbench.models.quantize import quantize_file

    dst = tmp_path / "q4.gguf"
    quantize_file(stories_path, dst, "Q4_0")
    errs = {e["tensor"]: e for e in tensor_errors(stories_path, dst)}
    with GGUFFile(stories_path) as src, GGUFFile(dst) as q:
        for name in ("blk.1.attn_v.weight", "blk.3.ffn_up.weight"):
            w = src.dequantize(name).astype(np.float64)
            raw = quant.quantize(src.dequantize(name), q.tensors[name].type)
            wq = quant.dequantize(raw, q.tensors[name].type, w.shape).astype(np.float64)
            assert errs[name]["rel_rmse"] == pytest.approx(np.linalg.norm(wq - w) / np.linalg.norm(w), rel=1e-9)
            assert errs[name]["type"] == "Q4_0" and errs[name]["source_type"] == src.tensors[name].type
    assert all(e["rel_rmse"] > 0 for e in errs.values())
    assert "token_embd.weight" not in errs or errs["token_embd.weight"]["layer"] is None


def test_report_quant_cli_errors(tmp_path):
    r = subprocess.run([sys.executable, "-m", "llmbench", "report", "quant", str(tmp_path / "none.gguf"), "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no such model file" in r.stderr
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    r = subprocess.run([sys.executable, "-m", "llmbench", "report", "quant", str(tmp_path / "m.gguf"),
                        "--types", "Q3_X", "--out", str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "unknown type(s) Q3_X" in r.stderr
