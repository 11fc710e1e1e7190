"""The ``llmbench study`` command: a grid from a YAML/JSON file or from flags, run locally or on Ray."""

from __future__ import annotations

import argparse
import json
import sys

from ..llm import KV_DTYPES


def _numbers(text: str, kind: type, option: str) -> float | list:
    try:
        vals = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{option}: expected comma-separated {kind.__name__} values, "
                                         f"got {text!r}") from None
    if not vals:
        raise argparse.ArgumentTypeError(f"{option}: no values")
    return vals[0] if len(vals) == 1 else vals


def add_parser(sub) -> None:
    """Add ``llmbench study`` and its options to the command-line parser."""
    s = sub.add_parser(
        "study", help="run a grid of generation and engine settings over prompts or a task, locally or on Ray",
        description="Cross generation parameters (temperature, top-p, top-k, min-p, max tokens, seed, repetitions) "
                    "and engine settings (model, KV dtype, context, threads) with a workload: a prompt set (each "
                    "point: distinct-1/2, self-BLEU, repetition rate, perplexity of the outputs under a reference "
                    "model, output length, share cut at max tokens, tokens/s, TTFT, TPOT) or an evaluation task "
                    "(its metrics with intervals). A comma-separated flag value is an axis. Records are appended "
                    "to OUT/points.jsonl as points finish; --resume continues; a failed point is recorded with "
                    "its error. --executor ray runs every point as a Ray task (pip install 'llmbench[ray]').",
        epilog="examples:\n"
               "  llmbench study grid.yaml --out runs/sampling\n"
               "  llmbench study --model m.gguf --prompts prompts.txt --temperature 0.3,0.7,1.0 "
               "--top-p 0.5,0.7,0.9,1.0 --max-tokens 32,64,128 --out runs/grid\n"
               "  llmbench study --model m.gguf --task gsm8k_cot --limit 20 --kv-dtype f16,q8_0 --out runs/kv\n"
               "  llmbench study grid.yaml --out runs/big --executor ray --address auto\n"
               "  llmbench study --resume runs/sampling",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("grid", nargs="?", help="a study grid, YAML or JSON (llmbench.study.grid); flags below add to it")
    s.add_argument("--out", help="folder for points.jsonl and result.json")
    s.add_argument("--resume", metavar="DIR", help="continue the study in DIR (its grid is read back from it)")
    s.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: one worker process here; ray: a Ray task per point (default local)")
    s.add_argument("--address", help="--executor ray: the cluster (auto, ray://host:10001; default: start one here)")
    s.add_argument("--model", type=lambda t: _numbers(t, str, "--model"), help="GGUF files or presets (comma: axis)")
    s.add_argument("--prompts", help="prompts workload: a text file (one prompt a line) or JSONL with \"prompt\"")
    s.add_argument("--chat", action="store_true",
                   help="prompts workload: each prompt a user turn through the model's chat template (instruct models)")
    s.add_argument("--task", help="task workload: an evaluation task name (llmbench eval's)")
    s.add_argument("--limit", type=int, help="task workload: documents per subject")
    s.add_argument("--shots", type=int, help="task workload: few-shot examples")
    s.add_argument("--reference", help="model scoring the outputs' perplexity (default: each point's own)")
    s.add_argument("--repetitions", type=int, help="repetitions of every point (seed + r; default 1)")
    for flag, kind in (("--temperature", float), ("--top-p", float), ("--top-k", int), ("--min-p", float),
                       ("--max-tokens", int), ("--seed", int)):
        s.add_argument(flag, type=lambda t, k=kind, f=flag: _numbers(t, k, f), help=f"sampling: {kind.__name__}(s)")
    s.add_argument("--threads", type=lambda t: _numbers(t, int, "--threads"), help="engine threads (comma: axis)")
    s.add_argument("--ctx", type=lambda t: _numbers(t, int, "--ctx"), help="engine context length (comma: axis)")
    s.add_argument("--kv-dtype", type=lambda t: _numbers(t, str, "--kv-dtype"),
                   help=f"KV cache dtype(s): {', '.join(KV_DTYPES)} (comma: axis)")
    s.add_argument("--json", action="store_true", help="print the result as JSON")
    s.set_defaults(func=cmd_study)


def _grid(args: argparse.Namespace):
    from .grid import Study, load

    base = load(args.grid).to_json() if args.grid else {}
    base.pop("kind", None)
    if args.model is not None:
        base["model"] = args.model
    work = dict(base.get("workload") or {})
    if args.prompts or args.task:
        work = {"prompts": args.prompts} if args.prompts else {"task": args.task}
    if args.chat:
        work["chat"] = True
    for k in ("limit", "shots"):
        if getattr(args, k) is not None:
            work[k] = getattr(args, k)
    base["workload"] = work
    for key, attrs in (("sampling", ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed")),
                       ("engine", ("threads", "ctx", "kv_dtype"))):
        d = dict(base.get(key) or {})
        d.update({a: getattr(args, a) for a in attrs if getattr(args, a) is not None})
        base[key] = d
    if args.repetitions is not None:
        base["repetitions"] = args.repetitions
    if args.reference:
        base["reference"] = args.reference
    if "model" not in base or not work:
        raise ValueError("a study needs a model (--model or the grid's) and a workload (--prompts, --task or "
                         "the grid's)")
    return Study.from_json(base)


def cmd_study(args: argparse.Namespace) -> int:
    """Run ``llmbench study`` with parsed arguments; the exit status."""
    from rich.console import Console

    from .runner import run_study

    if args.resume and (args.grid or args.out):
        raise ValueError("--resume DIR continues a study as it was: give no grid and no --out")
    if not args.resume and not args.out:
        raise ValueError("--out DIR is needed (where the records go)")
    study = None if args.resume else _grid(args)
    err = Console(stderr=True)

    def progress(rec: dict, done: int, total: int) -> None:
        what = ", ".join(f"{k}={v}" for k, v in rec["params"].items() if k != "model")
        err.print(f"[{done}/{total}] {what}" + (f"  [red]failed: {rec['error']}[/red]" if "error" in rec else ""))

    result = run_study(study, args.resume or args.out, executor=args.executor, address=args.address,
                       resume=bool(args.resume), progress=progress)
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
    else:
        _table(result)
    return 1 if result["failed"] else 0


def _table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    axes = list(result["points"][0]["params"]) if result["points"] else []
    varying = [a for a in axes if len({json.dumps(r["params"].get(a)) for r in result["points"]}) > 1]
    metrics = []
    for r in result["points"]:
        for k, v in (r.get("metrics") or {}).items():
            if k not in metrics and not isinstance(v, dict):
                metrics.append(k)
    short = {"outputs": "n", "mean_output_tokens": "len", "cut_share": "cut", "distinct_1": "d-1", "distinct_2": "d-2",
             "self_bleu": "sBLEU", "repetition_rate": "rep", "perplexity": "ppl", "temperature": "T", "top_p": "p",
             "top_k": "k", "min_p": "min_p", "max_tokens": "L"}
    t = Table(title=result["study"].get("name", "study"), caption="n outputs, len mean output tokens, cut share "
              "ended by max tokens, d-1/d-2 distinct-n, sBLEU self-BLEU-4, rep 4-gram repetition, ppl perplexity")
    for c in varying + metrics + ["tok/s"]:
        t.add_column(short.get(c, c), justify="right")
    for r in result["points"]:
        row = [str(r["params"].get(a)) for a in varying]
        if "error" in r:
            row += ["failed: " + r["error"][:60]] + [""] * len(metrics)
        else:
            m = r["metrics"]
            row += [f"{m[k]:.3g}" if isinstance(m.get(k), float) else str(m.get(k)) for k in metrics]
            tps = r.get("timing", {}).get("output_tokens_per_s")
            row.append(f"{tps:.0f}" if tps else "")
        t.add_row(*row)
    Console(width=max(120, Console().width)).print(t)


def add_report_parser(sub) -> None:
    """Add ``llmbench report`` (its ``quant`` report) to the command-line parser."""
    r = sub.add_parser("report", help="reports that combine measurements: quant (weight types side by side)",
                       description="Reports built from several measurements.")
    rs = r.add_subparsers(dest="report", metavar="REPORT", required=True)
    q = rs.add_parser(
        "quant", help="one model in several weight types: size, speed, memory, perplexity, KLD, MMLU",
        description="Quantize MODEL (an F16/F32 GGUF file is the best source) to each --types with llmbench quantize, "
                    "then measure every type and the source: size and bits per weight, load time, pp/tg tokens/s "
                    "and the decode bandwidth fraction (llmbench bench, one process per type), peak memory, "
                    "perplexity, KL divergence and top-1 agreement against the source on WikiText-2, and MMLU on a "
                    "fixed subset; plus the relative RMSE of every quantized tensor as a layer x tensor map. "
                    "Writes quant_report.json/.md/.csv and plots to --out.",
        epilog="example:\n"
               "  llmbench report quant SmolLM2-135M-Instruct.F16.gguf --types Q8_0,Q4_K_M,Q4_0 --out runs/quant",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("model", metavar="MODEL", help="the source GGUF file")
    q.add_argument("--types", default="Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0",
                   help="comma-separated llmbench quantize types (default Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0)")
    q.add_argument("--out", required=True, help="folder for the quantized files and the report")
    q.add_argument("--threads", type=int, help="engine threads (default: all CPUs)")
    q.add_argument("--pp", type=int, default=512, help="prompt tokens of the pp test (default 512)")
    q.add_argument("--tg", type=int, default=128, help="generated tokens of the tg test (default 128)")
    q.add_argument("--reps", type=int, default=3, help="repetitions of pp and tg (default 3)")
    q.add_argument("--ctx", type=int, default=512, help="perplexity/KLD chunk length (default 512)")
    q.add_argument("--chunks", type=int, default=20, help="perplexity/KLD chunks (default 20)")
    q.add_argument("--mmlu-limit", type=int, default=5, help="MMLU questions per subject (0 skips MMLU; default 5)")
    q.add_argument("--mmlu-subjects", help="comma-separated MMLU subjects or groups (default all)")
    q.add_argument("--text", help="perplexity text file (default WikiText-2's test split)")
    q.set_defaults(func=cmd_report_quant)


def cmd_report_quant(args: argparse.Namespace) -> int:
    """Run ``llmbench report quant`` with parsed arguments; the exit status."""
    from rich.console import Console

    from .quantreport import markdown, quant_report

    err = Console(stderr=True)
    report = quant_report(args.model, [t.strip() for t in args.types.split(",") if t.strip()], args.out,
                          threads=args.threads, pp=args.pp, tg=args.tg, reps=args.reps, ctx=args.ctx,
                          chunks=args.chunks, mmlu_limit=args.mmlu_limit,
                          mmlu_subjects=args.mmlu_subjects.split(",") if args.mmlu_subjects else None,
                          text=args.text, progress=lambda m: err.print(m))
    print(markdown(report))
    err.print(f"written: {', '.join(report['files'].values())}")
    return 0
