"""Log-likelihood scoring of (context, continuation) requests by llama.cpp, through llama-cpp-python: the
anchor for the speed and the numbers of llmbench's `LLM.loglikelihood` on MMLU-style evaluations.

Run it with a Python that has llama-cpp-python (LLAMA_PY, as benchmarks/compare_llamacpp.py does); it
needs only the standard library, NumPy and llama_cpp, not llmbench:

    /root/llama-venv/bin/pip install llama-cpp-python==0.3.36 numpy     # builds llama.cpp (minutes)
    $LLAMA_PY benchmarks/llamacpp_scorer.py --model SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 \\
        --ctx 2048 --input requests.jsonl --output scores.json

--input: JSON lines {"context": str, "continuation": str}. --output: one JSON object,
    {"results": [{"logprob", "greedy", "n_ctx_tokens", "n_cont_tokens"} per request, in input order],
     "wall_s": seconds of the scoring (tokenization and evaluation, not the model load or the warmup),
     "eval_tokens": tokens llama.cpp computed, "requests", "model", "threads", "ctx", "reuse",
     "llama_cpp_version"}; with --with-tokens each result also has "tokens", the scored sequence's ids.
From llmbench's Python, `score_in_subprocess(pairs, model, threads, ctx)` writes the input, runs this
script under LLAMA_PY and returns that object.

Semantics are lm-evaluation-harness's, as LLM.loglikelihood's: trailing spaces of the context move to
the continuation; the context tokens are tokenize(context) with BOS as the model's metadata says
(llama.cpp's default, add_special); the continuation tokens are tokenize(context + continuation) past
that many, so a merge across the boundary is scored as the harness scores it; an empty context is the
BOS token (EOS where there is none) and the continuation is tokenized alone. A sequence longer than
--ctx + 1 tokens keeps its last --ctx + 1 (the last token is only scored, never fed), and
n_ctx_tokens then counts the context tokens kept. logprob is the float64 sum of log-softmax(logits)
over the continuation's positions; greedy says whether every continuation token is its position's
argmax.

What is reused (the KV cache of llama.cpp's single sequence, as a careful user of llama-cpp-python
would, and as Llama.generate itself does with its prompt-prefix match):
  --reuse context (default): when a request's context tokens equal the previous request's, they are
      not evaluated again: `llm.n_tokens = len(context)`, then only the continuation is evaluated, so
      the 4 answers of an MMLU question evaluate the question once. Nothing else is reused: a few-shot
      header shared by consecutive questions is evaluated again with each question. Requests are scored
      in input order, so only consecutive repeats of a context benefit.
  --reuse prefix: the longest common prefix of the tokens in the cache and the request's is kept, the
      rest evaluated (llama-cpp-python's own prompt-prefix reuse in Llama.generate); this also keeps a
      few-shot header across consecutive questions, as llmbench's score_tokens does.
  --reuse none: every request is evaluated whole, from an empty cache.
A reused position's logits are the ones computed when it was evaluated (the same tokens before it),
read back from llm.scores. Not avoided: the model is built with logits_all=True (llama-cpp-python's
only way to return every position's logits from Llama.eval), so llama.cpp computes the output
projection for every evaluated token, context included, while llmbench computes it for the scored
positions only: on SmolLM2-135M (a 576 x 49152 output matrix, 28M parameters beside the layers' 106M)
that is about 27% more matrix work per context token for llama.cpp. The last token of each request
is never fed (only scored), as in the harness.
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

REUSE = ("context", "prefix", "none")


# ---- requests: lm-evaluation-harness's tokenization ----

def harness_tokens(llm, context: str, continuation: str, n_ctx: int) -> tuple[list[int], int]:
    """(token ids, n_context) for one request, as the harness builds them (see the module docstring);
    at most n_ctx + 1 tokens, cut on the left."""
    n_sp = len(context) - len(context.rstrip())
    if n_sp:
        context, continuation = context[:-n_sp], context[-n_sp:] + continuation
    if context == "":
        bos = llm.token_bos()
        ctx = [bos if bos >= 0 else llm.token_eos()]
        cont = llm.tokenize(continuation.encode(), add_bos=False)
    else:
        ctx = llm.tokenize(context.encode(), add_bos=True)    # add_special: BOS as the metadata says
        cont = llm.tokenize((context + continuation).encode(), add_bos=True)[len(ctx):]
    if not cont:
        raise ValueError(f"continuation {continuation!r} encodes to no tokens")
    ids = (ctx + cont)[-(n_ctx + 1):]
    return ids, len(ids) - len(cont)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# ---- scoring ----

class Scorer:
    """A llama.cpp model and the tokens its KV cache holds; `score` evaluates what the cache lacks."""

    def __init__(self, model: str, threads: int, ctx: int, reuse: str = "context"):
        from llama_cpp import Llama

        if reuse not in REUSE:
            raise ValueError(f"reuse must be one of {', '.join(REUSE)}, got {reuse!r}")
        self.llm = Llama(model_path=model, n_ctx=ctx, n_threads=threads, n_threads_batch=threads,
                         logits_all=True, verbose=False)
        self.ctx, self.reuse = self.llm.n_ctx(), reuse
        self.prev_ctx: list[int] = []       # the previous request's context tokens (--reuse context)
        self.eval_tokens = 0

    def tokens(self, context: str, continuation: str) -> tuple[list[int], int]:
        return harness_tokens(self.llm, context, continuation, self.ctx)

    def score(self, ids: list[int], n_ctx: int) -> tuple[float, bool]:
        """(float64 sum of log p(ids[i] | ids[:i]) for i >= n_ctx, whether each ids[i] is the argmax)."""
        import numpy as np

        llm, fed = self.llm, ids[:-1]                            # the last token is only scored
        cached = llm.input_ids[: llm.n_tokens].tolist()
        if self.reuse == "prefix":
            keep = common_prefix(cached, fed)
        elif self.reuse == "context" and ids[:n_ctx] == self.prev_ctx and cached[:n_ctx] == self.prev_ctx:
            keep = n_ctx
        else:
            keep = 0
        self.prev_ctx = ids[:n_ctx]
        llm.n_tokens = keep                                      # eval drops the cache from here on
        llm.eval(fed[keep:])
        self.eval_tokens += len(fed) - keep
        rows = llm.scores[n_ctx - 1: len(ids) - 1].astype(np.float64)   # row i-1 predicts ids[i]
        target = np.asarray(ids[n_ctx:])
        mx = rows.max(axis=1)
        logp = rows[np.arange(len(rows)), target] - mx - np.log(np.exp(rows - mx[:, None]).sum(axis=1))
        return float(logp.sum()), bool((rows.argmax(axis=1) == target).all())

    def warmup(self, ids: list[int]) -> None:
        """Evaluate one sequence untimed (llama.cpp's first decode sets up its buffers), then empty the cache."""
        self.llm.reset()
        self.llm.eval(ids[:-1])
        self.llm.reset()
        self.llm.eval([])                                        # drops the warmup's KV cache
        self.prev_ctx = []


def score_requests(scorer: Scorer, pairs: Sequence[tuple[str, str]], warmup: bool = True,
                   with_tokens: bool = False) -> dict:
    """Score the pairs in order; the result object of --output (less the run's settings)."""
    if warmup and pairs:
        scorer.warmup(scorer.tokens(*pairs[0])[0])
    scorer.eval_tokens = 0
    results = []
    t0 = time.perf_counter()
    for context, continuation in pairs:
        ids, n_ctx = scorer.tokens(context, continuation)
        lp, greedy = scorer.score(ids, n_ctx)
        results.append({"logprob": lp, "greedy": greedy, "n_ctx_tokens": n_ctx, "n_cont_tokens": len(ids) - n_ctx})
        if with_tokens:
            results[-1]["tokens"] = ids
    wall = time.perf_counter() - t0
    return {"results": results, "wall_s": wall, "eval_tokens": scorer.eval_tokens, "requests": len(results)}


def read_pairs(path: str) -> list[tuple[str, str]]:
    pairs = []
    with open(path, encoding="utf-8") as f:
        for k, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                pairs.append((r["context"], r["continuation"]))
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{k}: expected a JSON line {{\"context\": str, \"continuation\": str}} "
                                 f"({e})") from None
            if not isinstance(pairs[-1][0], str) or not isinstance(pairs[-1][1], str):
                raise ValueError(f"{path}:{k}: context and continuation must be strings")
    return pairs


# ---- from llmbench's side: run this script under LLAMA_PY ----

def score_in_subprocess(pairs: Sequence[tuple[str, str]], model: str, threads: int, ctx: int,
                        reuse: str = "context", llama_py: str | None = None, with_tokens: bool = False,
                        timeout: float = 3600) -> dict:
    """Score ``pairs`` with llama.cpp in a fresh process of ``llama_py`` (default: $LLAMA_PY, else this
    Python) and return the --output object."""
    python = llama_py or os.environ.get("LLAMA_PY", sys.executable)
    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "in.jsonl"), os.path.join(d, "out.json")
        with open(src, "w", encoding="utf-8") as f:
            for c, x in pairs:
                f.write(json.dumps({"context": c, "continuation": x}) + "\n")
        cmd = [python, os.path.abspath(__file__), "--model", str(model), "--threads", str(threads),
               "--ctx", str(ctx), "--reuse", reuse, "--input", src, "--output", dst]
        if with_tokens:
            cmd.append("--with-tokens")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if r.returncode != 0:
            if "No module named 'llama_cpp'" in r.stderr:
                raise RuntimeError(f"{python} cannot import llama_cpp: pip install llama-cpp-python==0.3.36 numpy "
                                   "(it builds llama.cpp, several minutes), or set LLAMA_PY to a Python that has it")
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        with open(dst, encoding="utf-8") as f:
            return json.load(f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--threads", type=int, required=True, help="llama.cpp threads (n_threads and n_threads_batch)")
    ap.add_argument("--ctx", type=int, default=2048, help="context length (n_ctx); longer requests keep their end")
    ap.add_argument("--input", required=True, help='JSON lines {"context": str, "continuation": str}')
    ap.add_argument("--output", required=True, help="JSON file to write (see above)")
    ap.add_argument("--reuse", choices=REUSE, default="context", help="what of the KV cache is kept between "
                    "consecutive requests (see above; default: %(default)s)")
    ap.add_argument("--no-warmup", action="store_true", help="do not evaluate the first request once untimed")
    ap.add_argument("--with-tokens", action="store_true", help="add each request's token ids to its result")
    a = ap.parse_args(argv)
    if a.threads < 1 or a.ctx < 2:
        ap.error("--threads must be >= 1 and --ctx >= 2")
    if not os.path.exists(a.model):
        ap.error(f"{a.model}: no such GGUF file")
    try:
        pairs = read_pairs(a.input)
    except (OSError, ValueError) as e:
        ap.error(str(e))
    try:
        import llama_cpp
    except ImportError:
        ap.error(f"{sys.executable} cannot import llama_cpp: pip install llama-cpp-python==0.3.36 numpy, "
                 "or run this script with a Python that has it (LLAMA_PY)")
    scorer = Scorer(a.model, a.threads, a.ctx, a.reuse)
    out = score_requests(scorer, pairs, warmup=not a.no_warmup, with_tokens=a.with_tokens)
    out.update(model=os.path.abspath(a.model), threads=a.threads, ctx=scorer.ctx, reuse=a.reuse,
               llama_cpp_version=llama_cpp.__version__)
    with open(a.output, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(f"{len(pairs)} requests in {out['wall_s']:.3f} s ({out['eval_tokens']} tokens evaluated, "
          f"reuse {a.reuse}) -> {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
