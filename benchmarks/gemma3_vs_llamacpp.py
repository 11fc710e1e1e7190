"""llmbench's engine against llama.cpp (llama-cpp-python) on a Gemma 3 GGUF file: the logits of the same prompt
tokens from both, in one prefill each, on real text (the first tokens of WikiText-2's test split), past the
sliding window of the local layers (512 tokens on Gemma 3 270M) so that the window, the global layers' RoPE base
and the attention scale all count. Prints max |logit difference| over max |logit| (per position, worst and
median, before and past the window) and how often the greedy next token agrees.

    LLAMA_PY=/root/llama-venv/bin/python python benchmarks/gemma3_vs_llamacpp.py \
        ~/.cache/llmbench/models/gemma-3-270m-q4_k_m.gguf --tokens 768

--activations f32 runs llmbench with float activations (no 8-bit activation rounding); llama.cpp quantizes
activations to 8 bits as the default "q8" does.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TEXT = ROOT.parent / "shared" / "data" / "wikitext2" / "wikitext-2-raw-test.txt"

LOGITS = r"""
import json, sys, numpy as np, llama_cpp
toks = json.loads(sys.argv[2])
llm = llama_cpp.Llama(sys.argv[1], n_ctx=len(toks) + 16, n_threads=int(sys.argv[3]), n_batch=len(toks),
                      n_ubatch=len(toks), logits_all=True, verbose=False)
llm.eval(toks)
np.save(sys.stdout.buffer, np.asarray(llm.scores[:len(toks)], np.float32))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=768, help="prompt tokens (default 768)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--activations", default="q8", choices=["q8", "f32"])
    ap.add_argument("--text", default=str(TEXT), help="the prompt's text file (default: WikiText-2 test)")
    a = ap.parse_args(argv)
    llama_py = os.environ.get("LLAMA_PY", sys.executable)

    from llmbench import LLM

    llm = LLM(a.model, threads=a.threads, ctx=a.tokens + 16, activations=a.activations)
    text = Path(a.text).read_text(encoding="utf-8")[: 40 * a.tokens]
    toks = llm.tokenizer.encode(text)[: a.tokens]
    if len(toks) < a.tokens:
        raise SystemExit(f"{a.text}: only {len(toks)} tokens")
    ours = llm.logits(toks)
    window = int(llm.file.metadata.get(f"{llm.info['arch']}.attention.sliding_window", 0) or 0)
    del llm
    r = subprocess.run([llama_py, "-c", LOGITS, a.model, json.dumps(toks), str(a.threads)], check=True,
                       capture_output=True)
    theirs = np.load(io.BytesIO(r.stdout))
    rel = np.abs(ours - theirs).max(1) / np.abs(theirs).max(1)
    same = ours.argmax(1) == theirs.argmax(1)
    print(f"{Path(a.model).name}: {a.tokens} tokens of {Path(a.text).name}, llmbench activations {a.activations}, "
          f"{a.threads} threads; sliding window {window}")
    print("| positions | max abs diff / max abs logit (worst) | (median) | same greedy token |")
    print("|---|---|---|---|")
    parts = [("all", slice(0, a.tokens))]
    if 0 < window < a.tokens:
        parts += [(f"0..{window - 1}", slice(0, window)), (f"{window}..{a.tokens - 1}", slice(window, a.tokens))]
    for name, s in parts:
        print(f"| {name} | {rel[s].max():.2e} | {np.median(rel[s]):.2e} | {same[s].mean():.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
