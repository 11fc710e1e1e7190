"""llmbench's engine against llama.cpp (llama-cpp-python) on files holding Q2_K, Q3_K, IQ4_NL and IQ4_XS: a
source GGUF (best F16 or F32) is quantized by llama.cpp's own quantizer (`llama_model_quantize`) to each file
type, then both engines compute the logits of the same prompt tokens from the same file; prints the tensor
types of each file and the largest |logit difference| (absolute, and over the largest |logit|), and whether
the greedy next token agrees at every position.

    LLAMA_PY=/root/llama-venv/bin/python python benchmarks/lowbit_vs_llamacpp.py model-f16.gguf \
        --ftypes Q3_K_M Q2_K IQ4_NL IQ4_XS [--keep DIR]

--keep DIR writes the quantized files there (named <source stem>.<FTYPE>.gguf) and reuses them when present,
so the same files can feed benchmarks/compare_llamacpp.py --models. --as-is FILE... compares files as they are
too (a baseline: how far apart the engines are on types llmbench ran before).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

# llama.cpp's LLAMA_FTYPE_MOSTLY_* ids (llama_cpp.LLAMA_FTYPE_MOSTLY_Q3_K_M == 12, ...); Q4_0, Q8_0 and Q4_K_M
# as baselines (types llmbench ran before)
FTYPES = {"Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "IQ4_NL": 25, "IQ4_XS": 30}

QUANTIZE = r"""
import sys, llama_cpp
p = llama_cpp.llama_model_quantize_default_params()
p.ftype, p.nthread = int(sys.argv[3]), int(sys.argv[4])
sys.exit(1 if llama_cpp.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), p) else 0)
"""

LOGITS = r"""
import json, sys, numpy as np, llama_cpp
llm = llama_cpp.Llama(sys.argv[1], n_ctx=512, n_threads=int(sys.argv[3]), n_batch=512, logits_all=True, verbose=False)
toks = json.loads(sys.argv[2])
llm.eval(toks)
np.save(sys.stdout.buffer, np.asarray(llm.scores[:len(toks)], np.float32))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--ftypes", nargs="*", default=["Q3_K_M", "Q2_K", "IQ4_NL", "IQ4_XS"], choices=sorted(FTYPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="prompt tokens (random ids, seed 0)")
    ap.add_argument("--keep", help="directory for the quantized files (reused when present)")
    ap.add_argument("--as-is", nargs="*", default=[], help="GGUF files compared without quantizing")
    a = ap.parse_args(argv)
    llama_py = os.environ.get("LLAMA_PY", sys.executable)

    import io

    from llmbench import LLM
    from llmbench.models.gguf import GGUFFile

    out_dir = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="lowbit-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = Path(a.model).name.removesuffix(".gguf").removesuffix(".F16").removesuffix(".F32")
    print("| file type | tensor types | max abs diff | / max abs logit | same argmax |")
    print("|---|---|---|---|---|")
    for ft, path in [(ft, out_dir / f"{stem}.{ft}.gguf") for ft in a.ftypes] + [(Path(p).name, Path(p)) for p in a.as_is]:
        if ft in FTYPES and not path.exists():
            subprocess.run([llama_py, "-c", QUANTIZE, a.model, str(path), str(FTYPES[ft]), str(a.threads)], check=True,
                           capture_output=True)
        with GGUFFile(path) as f:
            types = Counter(t.type for t in f.tensors.values())
        llm = LLM(path, threads=a.threads)
        toks = np.random.default_rng(0).integers(3, llm.info["vocab"], a.tokens).tolist()
        ours = llm.logits(toks)
        del llm
        r = subprocess.run([llama_py, "-c", LOGITS, str(path), json.dumps(toks), str(a.threads)], check=True,
                           capture_output=True)
        theirs = np.load(io.BytesIO(r.stdout))
        diff = float(np.abs(ours - theirs).max())
        same = float((ours.argmax(1) == theirs.argmax(1)).mean())
        mix = ", ".join(f"{k} {v}" for k, v in types.most_common())
        print(f"| {ft} | {mix} | {diff:.4f} | {diff / float(np.abs(theirs).max()):.2e} | {same:.0%} |", flush=True)
    if not a.keep:
        print(f"(files in {out_dir})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
