"""Greedy generation of prompts one by one by llama.cpp, through llama-cpp-python: the anchor for the speed of
llmbench's generative evaluations (GSM8K chain of thought in benchmarks/bench_eval.py --task gsm8k_cot).

Run it with a Python that has llama-cpp-python (LLAMA_PY), as llamacpp_scorer.py; it needs only the standard
library and llama_cpp:

    $LLAMA_PY benchmarks/llamacpp_generate.py --model SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 \\
        --ctx 2048 --input prompts.jsonl --output out.json

--input: JSON lines {"prompt": str, "stop": [str, ...], "max_tokens": int}. --output: one JSON object,
    {"results": [{"text", "completion_tokens", "finish_reason"} per prompt, in input order],
     "wall_s": seconds of the generation loop (tokenization included, not the model load or the warmup),
     "prompt_tokens_evaluated": prompt tokens llama.cpp computed, "model", "threads", "ctx",
     "llama_cpp_version"}.

Each prompt is one `Llama.create_completion(prompt, max_tokens, temperature=0, stop)`: greedy, the text cut
at the first stop string, as llama-cpp-python's server would answer it. Llama.generate keeps the KV cache of
the longest prefix the new prompt shares with the previous one, so a few-shot block shared by consecutive
prompts is computed once, as llmbench's held prefixes are: this is llama-cpp-python at its best on such a
run. What it cannot do is decode several sequences at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence


def generate_all(model: str, threads: int, ctx: int, items: Sequence[dict]) -> dict:
    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
    if items:                                           # warmup: sets up llama.cpp's buffers, untimed
        llm.create_completion(items[0]["prompt"][:200], max_tokens=4, temperature=0.0)
    evaluated = [0]
    results = []
    t0 = time.perf_counter()
    for it in items:
        before = llm.n_tokens
        toks = llm.tokenize(it["prompt"].encode("utf-8"), add_bos=True, special=False)
        keep = 0
        for a, b in zip(llm._input_ids[:before].tolist(), toks):
            if a != b:
                break
            keep += 1
        evaluated[0] += len(toks) - min(keep, len(toks) - 1)
        out = llm.create_completion(it["prompt"], max_tokens=it["max_tokens"], temperature=0.0,
                                    stop=list(it["stop"]) or None)
        c = out["choices"][0]
        results.append({"text": c["text"], "completion_tokens": out["usage"]["completion_tokens"],
                        "finish_reason": c["finish_reason"]})
    wall = time.perf_counter() - t0
    return {"results": results, "wall_s": wall, "prompt_tokens_evaluated": evaluated[0], "model": os.path.abspath(model),
            "threads": threads, "ctx": ctx, "llama_cpp_version": llama_cpp.__version__}


def generate_in_subprocess(items: Sequence[dict], model: str, threads: int, ctx: int, llama_py: str | None = None,
                           timeout: float = 7200) -> dict:
    """Generate ``items`` with llama.cpp in a fresh process of ``llama_py`` (default: $LLAMA_PY, else this
    Python) and return the --output object."""
    python = llama_py or os.environ.get("LLAMA_PY", sys.executable)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.jsonl"), os.path.join(d, "out.json")
        with open(src, "w", encoding="utf-8") as f:
            for it in items:
                f.write(json.dumps(it) + "\n")
        cmd = [python, os.path.abspath(__file__), "--model", str(model), "--threads", str(threads), "--ctx", str(ctx),
               "--input", src, "--output", dst]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if r.returncode != 0:
            if "No module named 'llama_cpp'" in r.stderr:
                raise RuntimeError(f"{python} cannot import llama_cpp: pip install llama-cpp-python==0.3.36, or set "
                                   "LLAMA_PY to a Python that has it")
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        with open(dst, encoding="utf-8") as f:
            return json.load(f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--input", required=True, help='JSON lines {"prompt", "stop", "max_tokens"}')
    ap.add_argument("--output", required=True)
    a = ap.parse_args(argv)
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    items = []
    with open(a.input, encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            if line.strip():
                try:
                    r = json.loads(line)
                    items.append({"prompt": str(r["prompt"]), "stop": list(r.get("stop") or []),
                                  "max_tokens": int(r.get("max_tokens", 256))})
                except (ValueError, KeyError, TypeError) as e:
                    ap.error(f"{a.input}:{k}: expected {{\"prompt\": str, \"stop\": [...], \"max_tokens\": int}} ({e})")
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        ap.error(f"{sys.executable} cannot import llama_cpp (pip install llama-cpp-python==0.3.36; or LLAMA_PY)")
    out = generate_all(a.model, a.threads, a.ctx, items)
    with open(a.output, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(f"{len(items)} prompts in {out['wall_s']:.2f} s -> {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
