"""``llmbench eval``: the command line of the evaluation layer (see `llmbench.eval.evaluate`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..llm import ACTIVATIONS

EXAMPLES = """examples:
  llmbench eval mmlu --model SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 --out mmlu-smol
  llmbench eval mmlu --model m.gguf --subjects stem,philosophy --limit 20 --shots 0
  llmbench eval mmlu --resume mmlu-smol                  # continue an interrupted run
  llmbench eval mmlu --model m.gguf --precision-check 200  # how often 8-bit activations flip an answer
  llmbench eval ceval,cmmlu --model m.gguf --limit 10
  llmbench eval gsm8k_cot,gsm8k --model m.gguf --limit 50 --out gsm8k-smol   # generative, greedy
  llmbench eval mmlu_cot --model m.gguf --subjects stem --limit 10  # chain of thought, decay-curve data
  llmbench eval hotpotqa --model m.gguf --limit 50                  # distractor paragraphs, EM and F1
  llmbench eval humaneval --model m.gguf --limit 20 --allow-code-execution   # runs generated code (sandboxed)
  llmbench eval mt_bench --model m.gguf --judge gpt-4o@https://api.openai.com/v1 --limit 2
  llmbench eval --resume mt-run --rejudge --judge judge.gguf        # the same answers, graded again
  llmbench eval perplexity --model m-Q4_K_M.gguf --ctx 512                 # WikiText-2
  llmbench eval kld --model m-Q4_K_M.gguf --base-model m-F16.gguf --max-chunks 100
  llmbench eval mmlu --backend openai --base-url http://127.0.0.1:8000/v1 --model NAME --limit 5"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add ``llmbench eval`` and its options to the command-line parser."""
    from . import task_names

    e = sub.add_parser(
        "eval", help="evaluate a model: MMLU, C-Eval, CMMLU, GSM8K (lm-eval's definitions), perplexity, KL divergence",
        description="Evaluate a GGUF model on llmbench's engine, or a model an OpenAI-compatible server serves, "
                    "with lm-evaluation-harness's prompts and metrics (MMLU, C-Eval, CMMLU: log-likelihood of "
                    "the answer letters, per subject, group and overall, with standard errors; GSM8K: greedy "
                    "generation, exact match of the strict and flexible extractions; HumanEval: pass@k of the "
                    "generated code, run sandboxed with --allow-code-execution), FastChat's MT-Bench graded by a "
                    "--judge model, and llama-perplexity's perplexity and KL divergence. Per-sample records go to "
                    "DIR/samples_TASK.jsonl as they finish, results to DIR/results.json; --resume DIR continues "
                    "an interrupted run. Data is read from --data-dir, $LLMBENCH_DATA or ../shared/data.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("tasks", nargs="?", help=f"comma-separated tasks: {', '.join(task_names())}")
    e.add_argument("--model", help="GGUF file or dummy preset; with --backend openai the server's model name")
    e.add_argument("--shots", type=int, default=None,
                   help="few-shot examples (default: the task's, 5 for MMLU and gsm8k, 8 for gsm8k_cot, 4 for mmlu_cot)")
    e.add_argument("--limit", type=int, default=None, help="documents per subject (default: all)")
    e.add_argument("--subjects", default=None, help="comma-separated subjects or groups (e.g. stem,philosophy)")
    e.add_argument("--threads", type=int, default=None, help="engine threads (default: all CPUs)")
    e.add_argument("--ctx", type=int, default=None,
                   help="perplexity/kld: tokens per chunk (default 512); other tasks: the engine's context")
    e.add_argument("--activations", default="q8", choices=ACTIVATIONS,
                   help="q8: 8-bit activations against quantized weights, as llama.cpp (default); f32: float "
                        "products, free of activation rounding (1.9x slower on SmolLM2 Q4_1, AVX2)")
    e.add_argument("--precision-check", type=int, default=None, metavar="N",
                   help="re-score N random questions with f32 activations and report how often the answer flips "
                        "(default: 100 where 8-bit activations meet quantized weights, else 0)")
    e.add_argument("--no-prefix-sharing", action="store_true",
                   help="compute every request whole (same numbers, slower; for measuring what sharing buys)")
    e.add_argument("--chunk", type=int, default=256, metavar="N",
                   help="documents whose requests go to the model together (default 256; results do not depend on it)")
    e.add_argument("--out", metavar="DIR", help="folder for samples_TASK.jsonl, run.json and results.json")
    e.add_argument("--resume", metavar="DIR", help="continue the run in DIR (its settings are reused)")
    e.add_argument("--data-dir", help="folder holding mmlu/, ceval/, cmmlu/, gsm8k/, hotpotqa/, wikitext2/ (default: "
                                      "$LLMBENCH_DATA, ../shared/data)")
    e.add_argument("--text", help="perplexity/kld: a text file (default: WikiText-2 raw test)")
    e.add_argument("--base-model", help="kld: the base model (e.g. the F16 file) the KL divergence is measured against")
    e.add_argument("--max-chunks", type=int, default=None, help="perplexity/kld: at most this many chunks")
    e.add_argument("--backend", choices=("cpu", "cuda", "openai"), default="cpu",
                   help="cpu: llmbench's engine; cuda: its GPU backend; openai: an OpenAI-compatible server")
    e.add_argument("--base-url", help="server URL for --backend openai, e.g. http://127.0.0.1:8000/v1")
    e.add_argument("--api-key", default=None, help="--backend openai: API key (default $OPENAI_API_KEY)")
    e.add_argument("--judge", default=None,
                   help="mt_bench's judge: a GGUF file (the engine), or NAME@URL / URL of an OpenAI-compatible "
                        "server (e.g. gpt-4o@https://api.openai.com/v1; a bare URL takes its first listed model)")
    e.add_argument("--rejudge", action="store_true",
                   help="with --resume DIR: grade the answers recorded there again, with --judge (may be another "
                        "judge); where every answer is in DIR/partial_TASK.jsonl the model is not even loaded "
                        "(its file or server may be gone), else it loads to answer the missing ones first")
    e.add_argument("--allow-code-execution", action="store_true",
                   help="humaneval: run the model's code (each sample in a sandboxed subprocess; see "
                        "docs/evaluations.md for what the sandbox does and does not stop)")
    e.add_argument("--samples", type=int, default=None, metavar="N",
                   help="humaneval: completions per problem (default 1, greedy; N > 1 samples at temperature "
                        "0.2 and reports pass@k for k <= N)")
    e.add_argument("--top-logprobs", type=int, default=None, metavar="N",
                   help="gsm8k_cot, mmlu_cot: top log-probabilities per output token for the entropy bound of the "
                        "decay-curve data (default 20, capped to what the backend gives: OpenAI's completions API "
                        "5; vLLM up to its --max-logprobs; 0 for none)")
    e.add_argument("--subject-table", action="store_true", help="show every subject in the table")
    e.add_argument("--markdown", action="store_true", help="print a markdown table instead of the terminal table")
    e.add_argument("--json", action="store_true", help="print results.json instead of the table")
    e.set_defaults(func=cmd_eval)


def _resume_args(args: argparse.Namespace) -> None:
    """Fill the options from DIR/run.json (what the interrupted run was started with)."""
    path = Path(args.resume) / "run.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: --resume takes the --out folder of an earlier llmbench eval run")
    run = json.loads(path.read_text())
    s, opts = run["settings"], run.get("options", {})
    args.tasks = ",".join(s["tasks"])
    args.model = args.model or run.get("model")
    args.shots, args.limit = s.get("shots"), s.get("limit")
    args.subjects = ",".join(s["subjects"]) if s.get("subjects") else None
    args.no_prefix_sharing = not s.get("share_prefix", True)
    args.precision_check = s.get("precision_check")
    args.activations = opts.get("activations", args.activations)
    args.backend = {"engine": "cpu"}.get(s.get("backend"), s.get("backend") or args.backend)
    args.base_url = s.get("base_url")
    args.samples = s.get("samples")
    args.top_logprobs = s.get("top_logprobs") if s.get("top_logprobs_capped") is None else None
    args.judge = args.judge or s.get("judge")
    for k in ("ctx", "base_model", "max_chunks", "text"):
        if s.get(k) is not None and k != "text":
            setattr(args, k, s[k])
    if s.get("text") not in (None, "wikitext2"):
        args.text = s["text"]
    args.out = args.resume


def _text_task_line(name: str, x: dict) -> str:
    """One line for perplexity / kld results (all of them are in results.json)."""
    where = f"{x['n_chunks']} chunks of {x['ctx']} tokens, {x['n_scored']} scored, {x['seconds']:.1f} s"
    if name == "perplexity":
        return f"perplexity of {x['model']}: PPL = {x['ppl']:.4f} +/- {x['ppl_err']:.4f} ({where})"
    q = x["kld_quantiles"]
    return (f"kld of {x['model']} against {x['base']}: mean KLD {x['kld']:.6f} +/- {x['kld_err']:.6f} (median "
            f"{q['median']:.6f}, 99% {q['99.0%']:.6f}, max {q['max']:.4f}), same top token {x['same_top']:.2%} "
            f"+/- {x['same_top_err']:.2%}, RMS dp {x['dp_rms']:.4%}, PPL {x['ppl']:.4f} vs base {x['ppl_base']:.4f} "
            f"(ratio {x['ppl_ratio']:.5f} +/- {x['ppl_ratio_err']:.5f}) ({where})")


def cmd_eval(args: argparse.Namespace) -> int:
    """Run ``llmbench eval`` with parsed arguments; the exit status."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from . import evaluate

    if args.rejudge and not args.resume:
        raise ValueError("--rejudge grades the answers of an earlier run again: use it with --resume DIR")
    if args.resume:
        _resume_args(args)
    if not args.tasks:
        raise ValueError("name the tasks to run, e.g. llmbench eval mmlu --model m.gguf (llmbench eval --help)")
    if not args.model:
        raise ValueError("--model is required (a GGUF file, a dummy preset, or with --backend openai the "
                         "server's model name)")
    if args.backend == "openai" and not args.base_url:
        raise ValueError("--backend openai needs --base-url, e.g. http://127.0.0.1:8000/v1")
    if args.judge and "mt_bench" not in args.tasks.split(","):
        print("llmbench eval: --judge is for judged tasks (mt_bench); the tasks given score by log-likelihood, "
              "exact match or execution, so it is not used", file=sys.stderr)
    console = Console(stderr=True)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TimeRemainingColumn())
    try:
        with Progress(*columns, console=console, transient=True) as bar:
            ids: dict[str, TaskID] = {}

            def progress(task: str, done: int, total: int) -> None:
                if task not in ids:
                    ids[task] = bar.add_task(task, total=total)
                bar.update(ids[task], completed=done)

            res = evaluate(args.model, args.tasks, shots=args.shots, limit=args.limit,
                           subjects=args.subjects.split(",") if args.subjects else None, data_dir=args.data_dir,
                           out=args.out, resume=bool(args.resume), backend=args.backend, base_url=args.base_url,
                           api_key=args.api_key, threads=args.threads, ctx=args.ctx, activations=args.activations,
                           share_prefix=not args.no_prefix_sharing, chunk=args.chunk,
                           precision_check=args.precision_check,
                           base_model=args.base_model, text=args.text, max_chunks=args.max_chunks,
                           allow_code_execution=args.allow_code_execution, samples=args.samples,
                           judge=args.judge, top_logprobs=args.top_logprobs, rejudge=args.rejudge,
                           progress=progress)
    except KeyboardInterrupt:
        if args.out:
            print(f"llmbench eval: interrupted; finished samples are in {args.out}: continue with  "
                  f"llmbench eval --resume {args.out}", file=sys.stderr)
        return 130
    if res.settings.get("top_logprobs_capped"):
        print(f"llmbench eval: {res.settings['top_logprobs_capped']}", file=sys.stderr)
    for name, t in res.tasks.items():          # rounds resumed otherwise than asked, answers rejudging lacked
        for note in t.timing.get("notes") or ():
            print(f"llmbench eval: {name}: {note}", file=sys.stderr)
    if args.json:
        print(json.dumps(res.to_json(), indent=1, ensure_ascii=False, default=str))
        return 0
    if res.tasks:
        if args.markdown:
            print(res.markdown(args.subject_table))
        else:
            Console().print(res.table(args.subject_table))
    for name, t in res.tasks.items():
        tm = t.timing
        rate = f", {tm['docs_per_s']:.1f} questions/s" if tm.get("docs_per_s") else ""
        print(f"{name}: {tm['docs_computed']} questions in {tm['wall_s']:.1f} s{rate}"
              + (f" ({tm['docs_resumed']} resumed)" if tm["docs_resumed"] else ""))
        if tm.get("docs_failed"):
            again = f"llmbench eval --resume {args.out}" if args.out else "a run with --out DIR, then --resume DIR"
            print(f"{name}: {tm['docs_failed']} questions failed (every retry) and are left out of the numbers; "
                  f"ask them again with  {again}. First error: {tm['errors'][0]}", file=sys.stderr)
    st = res.adapter_stats
    if st.get("prompt_tokens"):
        print(f"prefix sharing: the engine computed {st['computed_tokens']} of the {st['prompt_tokens']} prompt tokens "
              f"({st['prompt_tokens'] / max(st['computed_tokens'], 1):.1f}x fewer)")
    for name, pc in res.precision_check.items():
        if pc:
            lo, hi = pc["acc_change_ci95"]
            print(f"{name} precision check ({pc['docs']} questions re-scored with f32 activations): answers flipped "
                  f"{pc['flip_rate']:.1%}, accuracy change {pc['acc_change']:+.3f} (95% CI {lo:+.3f}..{hi:+.3f}), "
                  f"log-likelihoods moved up to {pc['max_abs_logprob_diff']:.4f} "
                  f"(mean {pc['mean_abs_logprob_diff']:.4f})")
    for name, x in res.extra.items():
        print(_text_task_line(name, x))
    if args.out:
        print(f"results: {Path(args.out) / 'results.json'}; samples: {Path(args.out)}/samples_*.jsonl")
    return 0
