"""`llmbench quantize` against llama.cpp's own quantizer (llama-cpp-python's `llama_model_quantize`) on the
same source file: for each mix, the tensor types, and block for block the bytes of every tensor; where blocks
differ, how many, and how far the two dequantizations are apart (largest |difference| over the tensor's
largest |value|, and the mean squared error each adds to the source).

    pip install llama-cpp-python==0.3.36        # builds llama.cpp from source (several minutes)
    LLAMA_PY=/path/to/venv/bin/python python benchmarks/quantize_vs_llamacpp.py model-f16.gguf \
        --mixes Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K_M

Prints one markdown table row per (mix, tensor type): tensors, blocks, identical blocks, and the error figures
of the differing ones. Exit status 1 when any tensor's type differs from llama.cpp's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

import numpy as np

LLAMACPP = r"""
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.nthread = int(sys.argv[3]), int(sys.argv[4])
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p)
sys.exit(1 if rc else 0)
"""


def blocks(raw: np.ndarray, type_name: str) -> np.ndarray:
    """The tensor's bytes as one row per block."""
    from llmbench.writer import TYPE_TRAITS

    _, _, size = TYPE_TRAITS[type_name]
    return raw.reshape(-1, size)


def compare(src_path: str, ours_path: str, theirs_path: str) -> dict[str, dict]:
    from llmbench.gguf import GGUFFile
    from llmbench.quantize import decode_rows

    rows: dict[str, dict] = defaultdict(lambda: {"tensors": 0, "blocks": 0, "same": 0, "max_rel": 0.0,
                                                  "mse_ours": 0.0, "mse_theirs": 0.0, "n": 0, "type_mismatch": []})
    with GGUFFile(src_path) as s, GGUFFile(ours_path) as a, GGUFFile(theirs_path) as b:
        for name, ta in a.tensors.items():
            tb = b.tensors[name]
            if ta.type != tb.type:
                rows[f"{ta.type} vs {tb.type}"]["type_mismatch"].append(name)
                continue
            ra, rb = a.raw(name), b.raw(name)
            r = rows[ta.type]
            r["tensors"] += 1
            ba, bb = blocks(ra, ta.type), blocks(rb, ta.type)   # (float types: one value a "block")
            same = np.all(ba == bb, axis=1)
            r["blocks"] += len(same)
            r["same"] += int(same.sum())
            if not same.all():
                n, rows = ta.shape[-1], ta.n_elements // ta.shape[-1]
                x = decode_rows(s.raw(name).reshape(rows, -1), s.tensors[name].type, n)
                ya, yb = decode_rows(ra.reshape(rows, -1), ta.type, n), decode_rows(rb.reshape(rows, -1), tb.type, n)
                r["max_rel"] = max(r["max_rel"], float(np.max(np.abs(ya - yb)) / max(np.max(np.abs(x)), 1e-30)))
                r["mse_ours"] += float(np.sum((ya - x) ** 2.0))
                r["mse_theirs"] += float(np.sum((yb - x) ** 2.0))
                r["n"] += x.size
    return dict(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="source GGUF (F32 or F16)")
    ap.add_argument("--mixes", nargs="+", default=["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_M"])
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    from llmbench.quantize import MIXES, quantize_file

    for m in a.mixes:
        if m.upper() not in MIXES:
            ap.error(f"unknown mix {m!r}; choose from {', '.join(MIXES)}")
    if not os.path.isfile(a.model):
        ap.error(f"{a.model} is not a file")
    llama_py = os.environ.get("LLAMA_PY", sys.executable)
    bad = 0
    print("| mix | type | tensors | blocks | identical blocks | max \\|ours - llama.cpp\\| / max \\|x\\| "
          "| MSE added ours / llama.cpp (differing tensors) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.mixes:
            mix = MIXES[m.upper()]
            ours, theirs = os.path.join(tmp, f"{m}-ours.gguf"), os.path.join(tmp, f"{m}-llamacpp.gguf")
            quantize_file(a.model, ours, mix.name, threads=a.threads)
            r = subprocess.run([llama_py, "-c", LLAMACPP, a.model, theirs, str(mix.ftype), str(a.threads)],
                               capture_output=True, text=True, timeout=3600, check=False)
            if r.returncode:
                print(f"llama.cpp failed on {m}: {r.stderr[-1500:]}", file=sys.stderr)
                return 2
            for t, s in sorted(compare(a.model, ours, theirs).items()):
                if s["type_mismatch"]:
                    bad = 1
                    print(f"| {mix.name} | {t} | {len(s['type_mismatch'])} tensors typed differently: "
                          f"{', '.join(s['type_mismatch'][:4])} | | | | |")
                    continue
                mse = (f"{s['mse_ours'] / s['n']:.3g} / {s['mse_theirs'] / s['n']:.3g}" if s["n"] else "-")
                print(f"| {mix.name} | {t} | {s['tensors']} | {s['blocks']} | {s['same']} "
                      f"({s['same'] / s['blocks']:.4%}) | {s['max_rel']:.3g} | {mse} |", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
