"""`llmbench quantize` against llama.cpp's own quantizer (llama-cpp-python's `llama_model_quantize`) on the
same source file: for each mix, the tensor types, and block for block the bytes of every tensor; where blocks
differ, how many, and how far the two dequantizations are apart (largest |difference| over the tensor's
largest |value|, and the mean squared error each adds to the source).

    pip install llama-cpp-python==0.3.36        # builds llama.cpp from source (several minutes)
    LLAMA_PY=/path/to/venv/bin/python python benchmarks/quantize_vs_llamacpp.py model-f16.gguf \
        --mixes Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K_M Q2_K Q3_K_S Q3_K_M Q3_K_L Q5_K_S IQ4_NL IQ4_XS \
        [--imatrix imatrix.gguf]

With --imatrix both quantizers get the same importance matrix (llama.cpp's through llama_model_quantize_params
.imatrix, read by llmbench.models.imatrix as llama-quantize reads it). --write-imatrix OUT first writes a synthetic
one for the model (GGUF, per matrix in_sum2 = counts x Gamma(0.5) draws, seeded) for when no llama-imatrix
output is at hand: the quantizers take the weights as given, so any positive weights test the same code.

--rows compares the quantizers alone: llama.cpp's ggml_quantize_chunk (loaded from llama-cpp-python's
libggml-base) against llmbench.models.weight_types.quantize on seeded random rows of several distributions, with and
without importance weights, every type.

Prints one markdown table row per (mix, tensor type): tensors, blocks, identical blocks, and the error figures
of the differing ones. Exit status 1 when any tensor's type or any --rows block differs from llama.cpp's.
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
import ctypes, sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.nthread = int(sys.argv[3]), int(sys.argv[4])
if len(sys.argv) > 5:   # importance weights: an .npz of {tensor name: float32 values}
    import numpy as np
    z = np.load(sys.argv[5])
    keep = {k: np.ascontiguousarray(z[k], dtype=np.float32) for k in z.files}
    arr = (llama_cpp.llama_model_imatrix_data * (len(keep) + 1))()
    for i, (k, v) in enumerate(keep.items()):
        arr[i].name, arr[i].size = k.encode(), v.size
        arr[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
    arr[len(keep)].name = None
    p.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
rc = llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p)
sys.exit(1 if rc else 0)
"""

LLAMA_PY_FIND_LIB = r"""
import glob, os, llama_cpp
print(glob.glob(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so*"))[0])
"""


def blocks(raw: np.ndarray, type_name: str) -> np.ndarray:
    """The tensor's bytes as one row per block."""
    from llmbench.models.gguf_writer import TYPE_TRAITS

    _, _, size = TYPE_TRAITS[type_name]
    return raw.reshape(-1, size)


def compare(src_path: str, ours_path: str, theirs_path: str) -> dict[str, dict]:
    from llmbench.models.gguf import GGUFFile
    from llmbench.models.quantize import decode_rows

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


def write_synthetic_imatrix(model: str, out: str, seed: int = 0) -> None:
    """A GGUF importance matrix in llama-imatrix's layout for every quantizable matrix of ``model``."""
    from llmbench.models.gguf import GGUFFile
    from llmbench.models.gguf_writer import write_gguf
    from llmbench.models.quantize import should_quantize

    rng = np.random.default_rng(seed)
    tensors = {}
    with GGUFFile(model) as f:
        for t in f.tensors.values():
            if not should_quantize(t.name, len(t.shape)):
                continue
            n_mat = t.shape[-3] if len(t.shape) >= 3 else 1
            counts = rng.integers(1, 5000, (n_mat, 1)).astype(np.float32)
            tensors[f"{t.name}.in_sum2"] = ("F32", (rng.gamma(0.5, 1.0, (n_mat, t.shape[-1])) * counts).astype(np.float32))
            tensors[f"{t.name}.counts"] = ("F32", counts)
    write_gguf(out, {"general.type": "imatrix", "imatrix.datasets": ["synthetic"], "imatrix.chunk_count": 1,
                     "imatrix.chunk_size": 512}, tensors)


def compare_rows(llama_py: str, seed: int = 0) -> int:
    """ggml_quantize_chunk against llmbench.models.weight_types.quantize on random rows; prints a table, returns 1 on a difference."""
    import ctypes

    from llmbench.models import weight_types as quant

    lib_path = subprocess.run([llama_py, "-c", LLAMA_PY_FIND_LIB], capture_output=True, text=True,
                              check=True).stdout.strip()
    lib = ctypes.CDLL(lib_path)
    f = lib.ggml_quantize_chunk
    f.restype = ctypes.c_size_t
    f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                  ctypes.c_void_p]
    rng = np.random.default_rng(seed)
    n_rows, n_cols = 48, 768
    dists = {
        "normal": lambda: rng.standard_normal((n_rows, n_cols)),
        "student-t(2)": lambda: rng.standard_t(2, (n_rows, n_cols)) * 0.02,
        "zeros and 1e-20": lambda: np.where(rng.random((n_rows, n_cols)) < 0.4, 0.0, 1e-20) * (rng.random() + 1),
        "positive": lambda: np.abs(rng.standard_normal((n_rows, n_cols))) + 0.5,
    }
    bad = 0
    print("| rows | importance weights | type | blocks | identical |")
    print("|---|---|---|---|---|")
    for dname, make in dists.items():
        x = np.ascontiguousarray(make(), dtype=np.float32)
        w = (rng.gamma(0.5, 1.0, n_cols) * (rng.random(n_cols) > 0.05)).astype(np.float32)
        for with_w in (False, True):
            for t in quant.QUANTIZE_TYPES:
                if quant.block_size(t) == 1 or t == "Q8_K":
                    continue
                ours = quant.quantize(x, t, imatrix=w if with_w else None)
                theirs = np.zeros_like(ours)
                f(quant.type_id(t), x.ctypes.data, theirs.ctypes.data, 0, n_rows, n_cols, w.ctypes.data if with_w else None)
                same = np.all(ours.reshape(-1, quant.type_size(t)) == theirs.reshape(-1, quant.type_size(t)), axis=1)
                bad |= int(not same.all())
                print(f"| {dname} | {'yes' if with_w else 'no'} | {t} | {same.size} | {int(same.sum())} |")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="source GGUF (F32 or F16)")
    ap.add_argument("--mixes", nargs="+", default=["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K_M"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--imatrix", help="importance matrix (GGUF or legacy .dat) given to both quantizers")
    ap.add_argument("--write-imatrix", metavar="OUT", help="first write a synthetic GGUF importance matrix for the "
                    "model to OUT, and use it")
    ap.add_argument("--rows", action="store_true", help="compare the quantizers on random rows instead of a file")
    a = ap.parse_args(argv)
    from llmbench.models.quantize import MIXES, quantize_file

    llama_py = os.environ.get("LLAMA_PY", sys.executable)
    if a.rows:
        return compare_rows(llama_py)
    if not a.model:
        ap.error("give a model file, or --rows")
    if a.write_imatrix:
        write_synthetic_imatrix(a.model, a.write_imatrix)
        a.imatrix = a.write_imatrix

    for m in a.mixes:
        if m.upper() not in MIXES:
            ap.error(f"unknown mix {m!r}; choose from {', '.join(MIXES)}")
    if not os.path.isfile(a.model):
        ap.error(f"{a.model} is not a file")
    bad = 0
    print("| mix | type | tensors | blocks | identical blocks | max \\|ours - llama.cpp\\| / max \\|x\\| "
          "| MSE added ours / llama.cpp (differing tensors) |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        extra = []
        if a.imatrix:
            from llmbench.models.imatrix import load_imatrix

            extra = [os.path.join(tmp, "imatrix.npz")]
            np.savez(extra[0], **load_imatrix(a.imatrix))
        for m in a.mixes:
            mix = MIXES[m.upper()]
            ours, theirs = os.path.join(tmp, f"{m}-ours.gguf"), os.path.join(tmp, f"{m}-llamacpp.gguf")
            quantize_file(a.model, ours, mix.name, threads=a.threads, imatrix=a.imatrix)
            r = subprocess.run([llama_py, "-c", LLAMACPP, a.model, theirs, str(mix.ftype), str(a.threads), *extra],
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
