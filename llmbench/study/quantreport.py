"""The quantization trade-off report: one model, several weight types, speed and quality side by side.

``quant_report(model, types, out)`` (``llmbench report quant MODEL.gguf``) quantizes the model to each type
with `llmbench quantize` (a file already in ``out`` is reused), then measures every type and the source:

- ``size_bytes`` and ``bits_per_weight`` (tensor data over elements, as llama.cpp counts BPW);
- ``load_s``: the median of three loads in this process (file mapped, matrices repacked);
- ``pp_tps``, ``tg_tps``, ``decode_bw_fraction`` and ``peak_rss_bytes``: ``llmbench bench --pp P --tg T
  --batch 0`` in a process of its own per type, so each peak is that type's alone;
- ``ppl``, ``kld``, ``same_top`` (top-1 agreement) with their standard errors: llama-perplexity's
  ``--kl-divergence`` statistics against the source on WikiText-2 (``chunks`` chunks of ``ctx`` tokens;
  the source evaluated once per chunk for all types);
- ``mmlu_acc`` with its standard error on a fixed subset: the first ``mmlu_limit`` questions of each
  subject in ``mmlu_subjects`` (default all 57), 5-shot as the task defines it;
- ``speedup_pp``, ``speedup_tg``: the source's time over the type's, measured in the same run.

The per-tensor error map: for each type and each tensor the type changed, the relative RMSE of its
decoded weights against the source's, ||W_q - W|| / ||W||, by layer and tensor kind (attn_q, ffn_down,
...; token_embd and output as their own rows). Results go to ``out/quant_report.json``, a markdown table,
a CSV, and two plots (quality loss against speed-up; the error map of each type).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import LLMBenchError

_LAYER = re.compile(r"^blk\.(\d+)\.(.+?)\.weight$")


def tensor_errors(source: str | os.PathLike[str], quantized: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Relative RMSE ||W_q - W|| / ||W|| of each tensor whose type differs between the two files, with
    its layer (None for token_embd, output) and kind (the name without blk.N. and .weight)."""
    from ..models.gguf import GGUFFile

    out = []
    with GGUFFile(source) as src, GGUFFile(quantized) as q:
        for name, info in q.tensors.items():
            s = src.tensors.get(name)
            if s is None or s.type == info.type or len(info.shape) < 2:
                continue
            w = src.dequantize(name).astype(np.float64)
            e = q.dequantize(name).astype(np.float64) - w
            norm = float(np.sqrt(np.sum(w * w)))
            m = _LAYER.match(name)
            out.append({"tensor": name, "layer": int(m.group(1)) if m else None,
                        "kind": m.group(2) if m else name.removesuffix(".weight"), "type": info.type,
                        "source_type": s.type,
                        "rel_rmse": float(np.sqrt(np.sum(e * e))) / norm if norm > 0 else None})
    return out


def _bench(path: str, threads: int | None, pp: int, tg: int, reps: int) -> dict:
    cmd = [sys.executable, "-m", "llmbench", "bench", "--model", path, "--pp", str(pp), "--tg", str(tg),
           "--batch", "0", "--reps", str(reps), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise LLMBenchError(f"llmbench bench on {path} failed: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
    return json.loads(r.stdout)


def _load_s(path: str, threads: int | None) -> float:
    from ..llm import LLM

    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        llm = LLM(path, threads=threads)
        times.append(time.perf_counter() - t0)
        del llm   # its memory goes before the next load
    return statistics.median(times)


def quant_report(model: str | os.PathLike[str], types: Sequence[str], out: str | os.PathLike[str],
                 threads: int | None = None, pp: int = 512, tg: int = 128, reps: int = 3, ctx: int = 512,
                 chunks: int = 20, mmlu_limit: int = 5, mmlu_subjects: Sequence[str] | None = None,
                 text: str | os.PathLike[str] | None = None,
                 progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Quantize ``model`` to each of ``types``, measure all of them and the source, and write the report
    into ``out`` (see the module's docstring). Returns the report as a dict."""
    from ..eval import evaluate
    from ..eval.perplexity import kl_divergences, load_text
    from ..llm import LLM
    from ..models.gguf import GGUFFile
    from ..models.quantize import MIXES, quantize_file
    from ..perf.bench import header

    src = Path(model).resolve()
    if not src.exists():
        raise FileNotFoundError(f"{model}: no such model file (the report quantizes a GGUF file; presets have none)")
    unknown = [t for t in types if t.upper() not in MIXES]
    if unknown:
        raise ValueError(f"unknown type(s) {', '.join(unknown)}; choose from {', '.join(MIXES)}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = {"source": str(src)}
    for t in types:
        dst = out / f"{src.stem}.{t.upper()}.gguf"
        if not dst.exists():
            progress(f"quantizing to {t.upper()}")
            quantize_file(src, dst, t.upper(), threads=threads or 0)
        files[t.upper()] = str(dst)

    rows: dict[str, dict[str, Any]] = {}
    for name, path in files.items():
        progress(f"{name}: load, pp{pp}/tg{tg}")
        b = _bench(path, threads, pp, tg, reps)
        lb = {t["test"]: t["avg_ts"] for t in b.get("llama_bench") or []}
        with GGUFFile(path) as f:
            n = sum(i.n_elements for i in f.tensors.values())
            nbytes = sum(i.nbytes for i in f.tensors.values())
            kinds = sorted({i.type for i in f.tensors.values()})
        rows[name] = {"type": name, "file": os.path.basename(path), "size_bytes": os.path.getsize(path),
                      "bits_per_weight": 8.0 * nbytes / max(1, n), "tensor_types": kinds,
                      "load_s": _load_s(path, threads), "pp_tps": lb.get(f"pp{pp}"), "tg_tps": lb.get(f"tg{tg}"),
                      "decode_bw_fraction": (b.get("bandwidth") or {}).get("fraction"),
                      "peak_rss_bytes": (b.get("memory") or {}).get("peak_rss_bytes")}

    progress(f"perplexity and KL divergence against the source, {chunks} chunks of {ctx}")
    base = LLM(str(src), threads=threads, ctx=ctx)
    quants = {t: LLM(p, threads=threads, ctx=ctx) for t, p in files.items() if t != "source"}
    corpus = load_text(text)
    klds = kl_divergences(list(quants.values()), base, corpus, ctx=ctx, max_chunks=chunks) if quants else []
    for t, k in zip(quants, klds):
        rows[t].update(ppl=k.ppl, ppl_err=k.ppl_err, kld=k.kld, kld_err=k.kld_err, same_top=k.same_top,
                       same_top_err=k.same_top_err)
    if klds:
        rows["source"].update(ppl=klds[0].ppl_base, ppl_err=None, kld=0.0, kld_err=0.0, same_top=1.0,
                              same_top_err=0.0)

    if mmlu_limit:
        for t, llm in [("source", base), *quants.items()]:
            progress(f"{t}: MMLU, {mmlu_limit} per subject")
            res = evaluate(llm, "mmlu", limit=mmlu_limit, subjects=mmlu_subjects, precision_check=0)
            m = res["mmlu"].aggregate["metrics"]["acc"]
            rows[t].update(mmlu_acc=m["value"], mmlu_acc_stderr=m.get("stderr"), mmlu_n=m.get("n"))
    del base, quants   # the models' memory goes before the error map decodes every tensor

    s = rows["source"]
    for r in rows.values():
        r["speedup_pp"] = r["pp_tps"] / s["pp_tps"] if r.get("pp_tps") and s.get("pp_tps") else None
        r["speedup_tg"] = r["tg_tps"] / s["tg_tps"] if r.get("tg_tps") and s.get("tg_tps") else None
        if r.get("mmlu_acc") is not None and s.get("mmlu_acc") is not None:
            r["mmlu_drop"] = s["mmlu_acc"] - r["mmlu_acc"]

    progress("per-tensor error map")
    errors = {t: tensor_errors(src, p) for t, p in files.items() if t != "source"}
    report = {**header(), "kind": "quant_report", "model": str(src),
              "settings": {"types": [t.upper() for t in types], "threads": threads, "pp": pp, "tg": tg, "reps": reps,
                           "ctx": ctx, "chunks": chunks, "mmlu_limit": mmlu_limit,
                           "mmlu_subjects": list(mmlu_subjects) if mmlu_subjects else None,
                           "text": str(text) if text else "WikiText-2 test"},
              "types": list(rows.values()), "tensor_errors": errors}
    report["files"] = _write(report, out)
    with open(out / "quant_report.json", "w") as f:
        json.dump(report, f, indent=1)
    return report


COLUMNS = (("type", "type", "{}"), ("bits_per_weight", "BPW", "{:.2f}"), ("size_bytes", "MiB", "mib"),
           ("load_s", "load s", "{:.2f}"), ("pp_tps", "pp t/s", "{:.0f}"), ("tg_tps", "tg t/s", "{:.1f}"),
           ("speedup_tg", "tg x", "{:.2f}"), ("decode_bw_fraction", "BW frac", "{:.2f}"),
           ("peak_rss_bytes", "peak MiB", "mib"), ("ppl", "PPL", "{:.3f}"), ("kld", "KLD", "{:.5f}"),
           ("same_top", "top-1 %", "pct"), ("mmlu_acc", "MMLU", "{:.3f}"))


def _cell(v: Any, fmt: str) -> str:
    if v is None:
        return ""
    if fmt == "mib":
        return f"{v / 2**20:.1f}"
    if fmt == "pct":
        return f"{100 * v:.2f}"
    return fmt.format(v)


def markdown(report: dict) -> str:
    """The quantization report as a Markdown table, one row per weight type."""
    lines = ["| " + " | ".join(h for _, h, _ in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in report["types"]:
        lines.append("| " + " | ".join(_cell(r.get(k), f) for k, _, f in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def _write(report: dict, out: Path) -> dict[str, str]:
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import pandas as pd

    from .. import plot

    files = {"markdown": str(out / "quant_report.md"), "csv": str(out / "quant_report.csv")}
    df = pd.DataFrame(report["types"])
    (out / "quant_report.md").write_text(f"# Quantization trade-offs: {os.path.basename(report['model'])}\n\n"
                                         + markdown(report))
    df.drop(columns=["tensor_types"]).to_csv(out / "quant_report.csv", index=False)
    if "kld" in df and df["speedup_tg"].notna().any():
        fig = plot.quality_vs_speed(df.dropna(subset=["kld", "speedup_tg"]), "speedup_tg", "kld", "type",
                                    loss_err="kld_err")
        fig.savefig(out / "quality_vs_speed.png", dpi=110)
        plt.close(fig)
        files["quality_vs_speed"] = str(out / "quality_vs_speed.png")
    for t, errs in report["tensor_errors"].items():
        layered = pd.DataFrame([e for e in errs if e["layer"] is not None and e["rel_rmse"] is not None])
        if layered.empty:
            continue
        fig = plot.heatmap(layered, "kind", "layer", "rel_rmse", fmt=".2g", cmap="magma")
        fig.axes[0].set_title(f"{t}: relative RMSE of each tensor against the source", fontsize=9)
        path = out / f"tensor_errors_{t}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files[f"tensor_errors_{t}"] = str(path)
    return files
