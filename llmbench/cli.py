"""The llmbench command line: `llmbench <command> --help` shows each command with an example."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import LLMBenchError
from .llm import ACTIVATIONS

if TYPE_CHECKING:
    from .models.quantize import ModelResult
    from .perf.config import BenchConfig


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def cmd_info(args: argparse.Namespace) -> int:
    """Run ``llmbench info``: the version, build, CPU and CUDA facts; the exit status."""
    from .info import collect

    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(title="llmbench info", show_header=False, box=None)
    t.add_column(style="bold cyan")
    t.add_column()
    cuda = info["backends"]["cuda"]
    if cuda["available"]:
        devs = "; ".join(f"{d['name']} ({_gib(d['total_memory'])}, sm_{d['compute_capability'][0]}"
                         f"{d['compute_capability'][1]})" for d in cuda["devices"])
        cuda_line = f"available: {devs}"
    else:
        cuda_line = f"unavailable: {cuda['reason']}"
    if "runtime" in cuda:
        cuda_line += f" [runtime {cuda['runtime']}, driver {cuda['driver']}]"
    rows = [
        ("version", f"{info['llmbench']} (commit {info['commit']})"),
        ("python", f"{info['python']} on {info['platform']}"),
        ("compiler", info["build"]["compiler"]),
        ("flags", info["build"]["cflags"]),
        ("SIMD", f"{info['simd']['active']} (detected {info['simd']['detected']}; decode prefetch "
                 f"{info['simd']['prefetch']}; cpu: {info['simd']['cpu_features']})"),
        ("OpenMP", f"{'on' if info['build']['openmp'] else 'off'}, {info['threads']} threads"),
        ("CPU", f"{info['cpu']['model']} ({info['cpu']['logical_cpus']} logical CPUs)"),
        ("memory", f"{_gib(info['memory']['total'])} total, {_gib(info['memory']['available'])} available"),
        ("backend cpu", "available"),
        ("backend cuda", cuda_line),
    ]
    for k, v in rows:
        t.add_row(k, Text(v))  # Text: values are not rich markup (they contain brackets)
    Console().print(t)
    return 0


# ---- quantize and dummy: build GGUF files ----

def _convert_progress(total: int, run: Callable[[Callable[[str, int], None]], ModelResult]) -> ModelResult:
    """Run ``run(on_progress)`` under a rich progress bar counting weights."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description:<28}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("starting", total=total)
        return run(lambda name, n: bar.update(task, advance=n, description=name))


def _print_model_result(result: ModelResult, show_source: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=result.path, title_justify="left", box=None, pad_edge=False)
    for col in ("tensor", "shape", "type", "size"):
        t.add_column(col, justify="right" if col == "size" else "left")
    for r in result.tensors:
        typ = f"{r.src_type} -> {r.type}" if show_source and r.src_type != r.type else r.type
        size = f"{r.nbytes / 2**20:.1f} MiB" if r.nbytes >= 2**20 else f"{r.nbytes / 2**10:.1f} KiB"
        t.add_row(r.name, "x".join(map(str, r.shape)), typ, size)
    c = Console()
    c.print(t, markup=False, highlight=False)
    c.print(f"{result.mix}: {result.n_elements / 1e6:.1f}M weights, {result.nbytes / 2**20:.1f} MiB of tensors, "
            f"{result.bits_per_weight:.2f} bits per weight; {result.file_size / 2**20:.1f} MiB written in "
            f"{result.seconds:.1f} s ({result.file_size / 1e9 / max(result.seconds, 1e-9):.2f} GB/s)",
            markup=False, highlight=False)


def _report_model_result(result: ModelResult, as_json: bool, show_source: bool) -> int:
    if as_json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        _print_model_result(result, show_source)
    return 0


def cmd_quantize(args: argparse.Namespace) -> int:
    """Run ``llmbench quantize``: convert a GGUF model to another weight type mix; the exit status."""
    from .models.gguf import GGUFFile
    from .models.quantize import quantize_file

    with GGUFFile(args.input) as f:   # errors (a bad file, an existing destination, a full disk): see main
        total = sum(t.n_elements for t in f.tensors.values())
    result = _convert_progress(total, lambda cb: quantize_file(args.input, args.output, args.type,
                                                               threads=args.threads, force=args.force,
                                                               imatrix=args.imatrix, on_progress=cb))
    return _report_model_result(result, args.json, show_source=True)


def cmd_dummy(args: argparse.Namespace) -> int:
    """Run ``llmbench dummy``: list the presets or build (and cache) a dummy model; the exit status."""
    from .models.dummy import PRESETS, build, cached_path, get_preset

    if args.list:
        for p in PRESETS.values():
            print(f"{p.name:14} {p.arch:6} {p.n_params / 1e6:8.1f}M  dim {p.n_embd}, {p.n_layer} layers, "
                  f"{p.n_head}/{p.n_head_kv} heads, ffn {p.n_ff}, vocab {p.n_vocab}  ({p.source})")
        return 0
    preset = get_preset(args.preset)
    out = args.output or str(cached_path(args.preset, args.type, args.seed))
    if os.path.exists(out) and not args.force:
        if not args.output:   # already in the cache: nothing to do
            print(out)
            return 0
        raise FileExistsError(f"{out} exists; pass --force to replace it")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    result = _convert_progress(preset.n_params, lambda cb: build(args.preset, args.type, out, seed=args.seed,
                                                                 threads=args.threads, on_progress=cb))
    return _report_model_result(result, args.json, show_source=False)


def _add_model_commands(sub: argparse._SubParsersAction) -> None:
    from .models.quantize import MIXES

    types = ", ".join(MIXES)
    raw = argparse.RawDescriptionHelpFormatter
    q = sub.add_parser("quantize", help="convert a GGUF model to F16, Q8_0, Q4_K_M, ...",
                       description="Convert a GGUF model to a llama.cpp quantization mix, choosing each "
                                   "tensor's type as llama.cpp's llama-quantize does. Metadata is kept.",
                       epilog="examples:\n  llmbench quantize model-f16.gguf model-q4km.gguf --type Q4_K_M\n"
                              "  llmbench quantize model-f16.gguf model-iq4xs.gguf --type IQ4_XS --imatrix imatrix.gguf",
                       formatter_class=raw)
    q.add_argument("input", help="source GGUF file (F32, F16, BF16 or a type llmbench can dequantize)")
    q.add_argument("output", help="destination GGUF file")
    q.add_argument("--type", required=True, type=str.upper, metavar="TYPE", help=f"one of {types}")
    q.add_argument("--imatrix", metavar="FILE", help="llama.cpp importance matrix (llama-imatrix's GGUF or legacy "
                   ".dat) to guide the Q2_K..Q6_K, Q4_0..Q5_1 and IQ4 quantizers, as llama-quantize --imatrix")
    q.add_argument("--threads", type=int, default=0, help="threads for the quantization kernels (0: all)")
    q.add_argument("--force", action="store_true", help="replace an existing destination")
    q.add_argument("--json", action="store_true", help="print the per-tensor result as JSON")
    q.set_defaults(func=cmd_quantize)

    d = sub.add_parser("dummy", help="build a model of a real shape with seeded random weights",
                       description="Build a dummy GGUF model: a preset's architecture, metadata and "
                                   "vocabulary size with seeded N(0, 0.02) weights, quantized. Without -o "
                                   "it goes to the cache that llmbench.dummy_model() uses.",
                       epilog="examples:\n  llmbench dummy --list\n"
                              "  llmbench dummy --preset llama-1b --type Q4_K_M -o llama-1b-q4km.gguf",
                       formatter_class=raw)
    d.add_argument("--preset", default="tiny", help="model shape (default tiny; --list shows all)")
    d.add_argument("--type", default="Q4_K_M", type=str.upper, metavar="TYPE", help=f"one of {types}")
    d.add_argument("-o", "--output", help="destination GGUF file (default: the dummy model cache)")
    d.add_argument("--seed", type=int, default=0, help="weight seed (default 0)")
    d.add_argument("--threads", type=int, default=0, help="threads for the quantization kernels (0: all)")
    d.add_argument("--force", action="store_true", help="replace an existing destination")
    d.add_argument("--json", action="store_true", help="print the per-tensor result as JSON")
    d.add_argument("--list", action="store_true", help="list the presets and exit")
    d.set_defaults(func=cmd_dummy)


def _bench_config(args: argparse.Namespace) -> tuple[BenchConfig, dict[str, list]]:
    """The base BenchConfig and the swept axes (the options given several values)."""
    from .perf.config import BenchConfig
    from .perf.metrics import parse_slos
    from .perf.sweep import parse_list

    models = parse_list(args.model, str, "--model")
    input_len = args.input_len
    if "max" in input_len:   # the longest prompt every model's training context holds with the output
        from .perf.local import model_context

        longest = min(model_context(m) for m in models) - args.output_len - 8
        input_len = input_len.replace("max", str(longest))
    lists: dict[str, list[Any]]   # option -> its values; more than one makes it a sweep axis
    lists = {"model": models, "kv_dtype": parse_list(args.kv_dtype, str, "--kv-dtype"),
             "threads": parse_list(args.threads, int, "--threads") if args.threads is not None else [None],
             "batch": parse_list(args.batch, int, "--batch"),
             "input_len": parse_list(input_len, int, "--input-len"),
             "request_rate": parse_list(args.request_rate, float, "--request-rate")}
    depth = tuple(parse_list(args.depth, int, "--depth"))
    from .llm import _cpus

    cpus = _cpus()
    if args.backend == "openai":   # threads are the server's setting: Sweep says so
        pass
    elif len(lists["threads"]) == 1 and (lists["threads"][0] or 0) > cpus:
        print(f"llmbench: warning: --threads {lists['threads'][0]} is more than the {cpus} CPUs this process may "
              f"use; using {cpus}", file=sys.stderr)
        lists["threads"] = [cpus]
    elif any((t or 0) > cpus for t in lists["threads"]):
        raise ValueError(f"--threads {args.threads}: this process may use {cpus} CPUs; sweep at most that many")
    for v in lists["kv_dtype"]:
        if v not in ("f16", "f32", "q8_0"):
            raise ValueError(f"--kv-dtype {v!r}: choose f16, f32 or q8_0")
    cfg = BenchConfig(model=lists["model"][0], threads=lists["threads"][0], kv_dtype=lists["kv_dtype"][0],
                      pp=args.pp, tg=args.tg, depth=depth, batch=lists["batch"][0],
                      input_len=lists["input_len"][0], output_len=args.output_len, dataset=args.dataset,
                      warmup=args.warmup, repetitions=args.reps, seed=args.seed,
                      percentiles=tuple(parse_list(args.percentiles, float, "--percentiles")),
                      goodput=parse_slos(args.goodput) if args.goodput else {},
                      cuda_graphs=None if args.cuda_graphs is None else args.cuda_graphs == "on",
                      backend=args.backend, base_url=args.base_url, api=args.api, request_rate=lists["request_rate"][0],
                      burstiness=args.burstiness, max_concurrency=args.max_concurrency, activations=args.activations,
                      max_failed=args.max_failed, connect_timeout=args.connect_timeout,
                      first_chunk_timeout=args.first_chunk_timeout, idle_timeout=args.idle_timeout)
    return cfg, {k: v for k, v in lists.items() if len(v) > 1}


def _run_sweep(args: argparse.Namespace, cfg, axes: dict) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .perf.report import failed_lines, fit_lines, fmt, rows
    from .perf.sweep import Sweep, run_sweep

    directory = args.resume or args.out_dir
    if not directory:
        import datetime

        directory = "llmbench-sweep-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    sweep = None if args.resume else Sweep(cfg, axes or {"batch": [cfg.batch]}, args.knee_threshold)
    console = Console(stderr=True)
    columns = (TextColumn("[bold]points"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    try:
        with Progress(*columns, console=console, transient=True) as bar:
            task = bar.add_task("starting", total=None)
            result = run_sweep(sweep, directory, resume=bool(args.resume),
                               progress=lambda msg: bar.update(task, description=msg),
                               advance=lambda done, total: bar.update(task, completed=done, total=total))
    except KeyboardInterrupt:
        print(f"llmbench bench: interrupted; the finished points are in {directory}/points.jsonl: continue "
              f"with  llmbench bench --resume {directory}", file=sys.stderr)
        return 130
    failed = failed_lines(result)
    if args.json:
        print(json.dumps(result, indent=1))
        for line in failed:
            print(line, file=sys.stderr)
        return 1 if failed else 0
    from rich.table import Table

    head, body = rows(result)
    tail = next(h for h in reversed(head) if h.endswith("_e2el_ms")).split("_")[0]   # the highest percentile, p99
    show = {**{a: a for a in result["sweep"]["axes"]}, "output_throughput": "out tok/s",
            "total_token_throughput": "total tok/s", "median_ttft_ms": "TTFT ms", f"{tail}_ttft_ms": f"{tail} TTFT",
            "median_tpot_ms": "TPOT ms", f"{tail}_tpot_ms": f"{tail} TPOT", "decode_gbps": "decode GB/s",
            "bandwidth_fraction": "of membw", "failed": "failed"}
    t = Table(title=f"llmbench sweep: {len(body)} points in {directory} (latencies: medians and {tail})")
    for h in show.values():
        t.add_column(h, justify="right")
    for row in body:
        cells = dict(zip(head, row))
        t.add_row(*("–" if cells[k] is None else f"{cells[k]:.0%}" if k == "bandwidth_fraction" else
                    fmt(cells[k]) for k in show))
    Console().print(t)
    for line in fit_lines(result):
        print(line)
    files = result["sweep"]["files"]
    print(f"result: {os.path.join(directory, 'result.json')}; also {files['csv']}, {files['markdown']}, "
          f"{', '.join(files['plots'])}")
    for line in failed:
        print(line, file=sys.stderr)
    return 1 if failed else 0   # a sweep with a failed point is not a clean measurement


# BenchConfig fields whose option is not --field-name
_BENCH_FLAGS = {"repetitions": "--reps"}


def cmd_bench(args: argparse.Namespace) -> int:
    """`llmbench bench`; a bad setting is named by its option, not by its BenchConfig field."""
    import re

    from .perf.config import ConfigError

    try:
        return _bench(args)
    except ConfigError as e:
        text = str(e)
        for name in e.fields:
            text = re.sub(rf"\b{name}\b", _BENCH_FLAGS.get(name, "--" + name.replace("_", "-")), text)
        raise ValueError(text) from e


def _bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .perf.config import failure_report
    from .perf.local import BenchInterrupted, run
    from .perf.openai_load import run_openai

    if args.resume:
        given = [a for a in ("model", "batch", "input_len", "kv_dtype", "threads", "output_len", "reps", "dataset")
                 if getattr(args, a) != build_parser().parse_args(["bench"]).__dict__[a]]
        if given:
            print(f"llmbench bench: --resume continues the sweep with the settings saved in {args.resume}; "
                  f"ignoring --{', --'.join(g.replace('_', '-') for g in given)}", file=sys.stderr)
        return _run_sweep(args, None, {})
    cfg, axes = _bench_config(args)
    if cfg.dataset:   # a wrong file is named now, not after a model load
        from .perf.dataset import load_prompts

        load_prompts(cfg.dataset)
    if args.profile and (axes or args.out_dir or cfg.backend != "cpu"):
        raise ValueError("--profile times the CPU engine's operations in one benchmark: not with a sweep, "
                         "--backend cuda or --backend openai")
    if axes or args.out_dir:
        return _run_sweep(args, cfg, axes)
    cfg.check()
    if args.output:
        _check_writable(args.output, "-o")
    console = Console(stderr=True)
    try:
        with console.status("starting") as status:
            result = (run_openai if cfg.backend == "openai" else run)(cfg, lambda msg: status.update(msg))
            if args.profile:
                from .perf.profile import measure

                status.update("profile: the operations of prefill and decode steps")
                result["profile"] = measure(cfg.model, cfg.threads, pp=cfg.pp or 512, tg=cfg.tg or 128,
                                            reps=cfg.repetitions, kv_dtype=cfg.kv_dtype, activations=cfg.activations)
    except BenchInterrupted as stop:   # Ctrl-C after a test finished: keep what was measured
        part = stop.result
        where = _save_result(part, args.output)
        done = [t["test"] for t in part["llama_bench"]]
        print(f"llmbench bench: interrupted; what finished ({', '.join(done)}) is saved in "
              f"{where} (marked \"interrupted\")", file=sys.stderr)
        return 130
    saved = _save_result(result, args.output) if args.output else None
    failures = failure_report(result.get("requests", []), cfg.max_failed)
    if args.json:
        print(json.dumps(result, indent=1))
        rc = _failed(failures)
        return 2 if saved != args.output else rc
    from .perf.report import bench_tables

    for table in bench_tables(result):
        Console().print(table)
    if result.get("profile", {}).get("overhead"):
        ov = result["profile"]["overhead"]
        print(f"profiling cost: prefill x{ov['prefill']:.3f}, decode x{ov['decode']:.3f} of the unprofiled time "
              "(alternated in this run)")
    if saved:
        print(f"result: {saved}")
    rc = _failed(failures)
    return 2 if saved != args.output else rc   # 2: the result is not where it was asked for


def _check_writable(path: str, option: str) -> None:
    """Raise OSError naming ``option`` when ``path`` cannot be written (checked before measuring)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise IsADirectoryError(f"{option} {path}: is a folder; name a file such as {os.path.join(path, 'r.json')}")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{option} {path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK):
        raise PermissionError(f"{option} {path}: the folder {folder} is not writable")


def _save_result(result: dict, path: str | None) -> str:
    """Write the JSON result to ``path``; with no path, or if writing fails after all (a full disk, a folder
    removed meanwhile), to a file in the temporary folder, saying why where it failed. Returns where it went."""
    error: OSError | None = None
    if path:
        try:
            with open(path, "w") as f:
                json.dump(result, f, indent=1)
            return path
        except OSError as e:
            error = e
    import tempfile

    fd, fallback = tempfile.mkstemp(prefix="llmbench-result-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(result, f, indent=1)
    if path:
        print(f"llmbench bench: error: cannot write {path} ({error}); the result is saved in {fallback}",
              file=sys.stderr)
    return fallback


def _failed(failures: str | None) -> int:
    """Exit status 1, saying why, when more measured requests failed than --max-failed allows."""
    if failures is None:
        return 0
    print(f"llmbench bench: {failures}", file=sys.stderr)
    return 1


def cmd_membw(args: argparse.Namespace) -> int:
    """Run ``llmbench membw``: the memory bandwidth of this machine (or a CUDA device); the exit status."""
    from .perf import membw

    if args.backend == "cuda":
        from .backends import cuda

        gbs = cuda.copy_bandwidth(args.size_mib << 20, args.reps)
        print(json.dumps({"backend": "cuda", "copy_gbs": gbs}) if args.json else
              f"CUDA device-to-device copy: {gbs:.1f} GB/s (bytes read + written)")
        return 0
    r = membw.measure(args.size_mib << 20, args.reps, args.threads)
    if args.json:
        print(json.dumps(r))
    else:
        print(f"memory bandwidth with {r['threads']} threads, arrays of {args.size_mib} MiB, best of {r['reps']}: "
              f"read {r['read']:.1f} GB/s, copy {r['copy']:.1f} GB/s, triad {r['triad']:.1f} GB/s")
    return 0


def _listed(values) -> str:
    """A tuple of numbers as an option value that parse_list reads back: (50.0, 90.0) as "50,90"."""
    return ",".join(f"{v:g}" for v in values)


def build_parser() -> argparse.ArgumentParser:
    """The ``llmbench`` command-line parser with every subcommand."""
    p = argparse.ArgumentParser(prog="llmbench", description="Benchmark large language models: speed and quality.",
                                epilog="exit status: 0 done; 1 measured, but requests or sweep points failed; 2 an "
                                       "error (bad options or files, a broken server, out of memory: one line says "
                                       "which); 130 interrupted")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error (anywhere on the line)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser("info", help="show this build, CPU, SIMD level, threads and backends",
                          description="Show version, build flags, SIMD level, threads, CPU, memory and "
                                      "which backends are available (and why not).",
                          epilog="example: llmbench info --json > env.json",
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.set_defaults(func=cmd_info)
    b = sub.add_parser("bench", help="benchmark a model: pp/tg tokens/s, TTFT/TPOT/ITL, decode bandwidth, sweeps",
                       description="Benchmark a GGUF model (default: the llama-125m Q4_K_M dummy, built on first "
                                   "use) on llmbench's engine: llama-bench-style pp and tg tokens/s, a latency "
                                   "run with vLLM's TTFT/TPOT/ITL/E2E, the decode bandwidth as a fraction "
                                   "of this machine's measured bandwidth and the prompt phase as a fraction of its "
                                   "measured arithmetic peak. Writes one JSON result "
                                   "(docs/result.schema.json). Give --model, --kv-dtype, --threads, --batch or "
                                   "--input-len several values (1,2,4 or 1..64 for powers of two) to sweep: each "
                                   "point runs the latency scenario and is saved as it finishes to DIR/points.jsonl; "
                                   "batch sweeps get a power-law fit and a knee; DIR also gets result.json, a CSV, "
                                   "a markdown report and PNG plots.",
                       epilog="examples:\n  llmbench bench\n  llmbench bench --model llama-1b:Q8_0 --threads 2 -o r.json\n"
                              "  llmbench bench --model path/to/model.gguf --pp 512 --tg 128 --depth 0,4096 --batch 8 "
                              "--goodput ttft:500 tpot:50\n"
                              "  llmbench bench --batch 1..64 --out-dir sweep-125m      # batch sweep, fit, plots\n"
                              "  llmbench bench --resume sweep-125m                     # continue an interrupted sweep\n"
                              "  llmbench bench --model llama-125m:Q4_K_M,llama-125m:Q8_0 --input-len 512,2048 "
                              "--batch 1,8\n"
                              "  llmbench bench --dataset prompts.jsonl --batch 16      # ShareGPT/JSONL prompts\n"
                              "  llmbench bench --backend openai --base-url http://localhost:8000/v1 --model NAME "
                              "--batch 64 --request-rate 8\n"
                              "  llmbench bench --backend openai --base-url http://localhost:8000/v1 --model NAME "
                              "--batch 1..64 --out-dir vllm-sweep",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    from .perf.config import BenchConfig

    d = BenchConfig()   # the defaults: one truth, the Python API's
    b.add_argument("--model", default=d.model, help="GGUF file or dummy preset[:type]; a list sweeps")
    b.add_argument("--threads", default=d.threads, help="engine threads (default: all CPUs); a list sweeps")
    b.add_argument("--kv-dtype", default=d.kv_dtype, help="f16, f32 or q8_0; a list sweeps")
    b.add_argument("--activations", default=d.activations, choices=ACTIVATIONS,
                   help="q8 (as llama.cpp), f32 (float products), or bf16: float matrices as BF16 pairs, 8-bit "
                        "mantissa (faster prefill only where vdpbf16ps outruns FMA: 2x on AMD Zen 4, slower on "
                        "Intel Xeons without AMX)")
    b.add_argument("--pp", type=int, default=d.pp, help="prompt tokens of the pp test (0 skips it)")
    b.add_argument("--tg", type=int, default=d.tg, help="generated tokens of the tg test (0 skips it)")
    b.add_argument("--depth", default=_listed(d.depth), help="context depths of the pp/tg tests, e.g. 0,4096 (llama-bench -d)")
    b.add_argument("--batch", default=str(d.batch), help="concurrent requests in the latency run (0 skips it); a list sweeps")
    b.add_argument("--input-len", default=str(d.input_len),
                   help="prompt tokens per request; a list sweeps (512..max: doublings up to the model's context)")
    b.add_argument("--output-len", type=int, default=d.output_len, help="output tokens per request (EOS ignored)")
    b.add_argument("--dataset", default=d.dataset, help="JSONL/JSON prompts for the latency run (prompt/text/question keys, "
                                     "MT-Bench turns, ShareGPT conversations, OpenAI messages)")
    b.add_argument("--warmup", type=int, default=d.warmup)
    b.add_argument("--reps", type=int, default=d.repetitions, help="repetitions of each test")
    b.add_argument("--seed", type=int, default=d.seed)
    b.add_argument("--percentiles", default=_listed(d.percentiles))
    b.add_argument("--goodput", nargs="*", metavar="SLO", help="SLOs in ms, e.g. ttft:500 tpot:50")
    b.add_argument("--out-dir", help="sweep folder (default llmbench-sweep-DATE when sweeping)")
    b.add_argument("--resume", metavar="DIR", help="continue the sweep saved in DIR (its settings are reused)")
    b.add_argument("--knee-threshold", type=float, default=0.1,
                   help="knee: first batch after which doubling gains less than this fraction (default 0.1)")
    b.add_argument("--backend", choices=("cpu", "cuda", "openai"), default=d.backend,
                   help="cpu: llmbench's engine; cuda: its GPU backend; openai: an OpenAI-compatible server "
                        "(vLLM, llama.cpp, Ollama, SGLang)")
    b.add_argument("--cuda-graphs", choices=("on", "off"), default={None: None, True: "on", False: "off"}[d.cuda_graphs], help="--backend cuda: decode with CUDA Graphs")
    b.add_argument("--base-url", default=d.base_url, help="server URL for --backend openai, e.g. http://localhost:8000/v1")
    b.add_argument("--api", choices=("completions", "chat"), default=d.api)
    b.add_argument("--request-rate", default=_listed([d.request_rate]),
                   help=f"requests/s with --backend openai (default {d.request_rate:g}: all at once); a list sweeps")
    b.add_argument("--burstiness", type=float, default=d.burstiness, help="gamma shape of the gaps; 1 = Poisson")
    b.add_argument("--max-concurrency", type=int, default=d.max_concurrency)
    b.add_argument("--connect-timeout", type=float, default=d.connect_timeout, metavar="S",
                   help=f"--backend openai: seconds to connect to the server (default {d.connect_timeout:g})")
    b.add_argument("--first-chunk-timeout", type=float, default=d.first_chunk_timeout, metavar="S",
                   help="--backend openai: seconds from sending a request to its first token "
                        f"(default {d.first_chunk_timeout:g})")
    b.add_argument("--idle-timeout", type=float, default=d.idle_timeout, metavar="S",
                   help="--backend openai: seconds a stream may stay silent after its first token "
                        f"(default {d.idle_timeout:g})")
    b.add_argument("--max-failed", default=d.max_failed, metavar="N|P%",
                   help=f"measured requests that may fail before the exit status is 1 (default {d.max_failed}), "
                        "e.g. 3 or 5%%")
    b.add_argument("-o", "--output", help="write the JSON result here")
    b.add_argument("--profile", action="store_true",
                   help="also time every operation kind of prefill and decode steps (embedding, norms, activation "
                        "quantization, products by weight type, RoPE/KV, attention, element-wise) and its cost "
                        "(CPU engine; llmbench.perf.profile)")
    b.add_argument("--json", action="store_true", help="print the JSON result instead of the table")
    b.set_defaults(func=cmd_bench)
    mb = sub.add_parser("membw", help="measure this machine's memory bandwidth (STREAM-style)",
                        description="STREAM-style read, copy and triad bandwidth with the engine's threads: "
                                    "the denominator of every decode bandwidth fraction llmbench reports.",
                        epilog="examples:\n  llmbench membw\n  llmbench membw --threads 1 --size-mib 512 --json\n"
                               "  llmbench membw --backend cuda",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    mb.add_argument("--threads", type=int, default=None, help="threads (default: all CPUs)")
    mb.add_argument("--size-mib", type=int, default=256, help="size of each of the 3 arrays (default 256)")
    mb.add_argument("--reps", type=int, default=5, help="repetitions; the best is reported (default 5)")
    mb.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    mb.add_argument("--json", action="store_true", help="print JSON")
    mb.set_defaults(func=cmd_membw)
    _add_model_commands(sub)
    from .eval.cli import add_parser as add_eval
    from .serve.cli import add_parser as add_serve
    from .study.cli import add_parser as add_study
    from .study.cli import add_report_parser as add_report

    add_eval(sub)
    add_serve(sub)
    add_study(sub)
    add_report(sub)
    return p


def _one_line(e: BaseException) -> str:
    """An error as one line: its message (several lines joined), or what it is when it has none."""
    text = " ".join(str(e).split())
    if isinstance(e, MemoryError):
        return f"out of memory{': ' + text if text else ''}; choose smaller sizes (--debug shows where)"
    return text or type(e).__name__


def main(argv: list[str] | None = None) -> int:
    """Run one command. llmbench's own errors, OSError, MemoryError and bad values end it with one line
    on stderr and exit status 2 (--debug, anywhere on the line, shows the traceback instead); Ctrl-C
    ends it with status 130. A run that finished with failed requests or points exits 1."""
    import warnings

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    args = parser.parse_args([a for a in argv if a != "--debug"])
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    formatwarning = warnings.formatwarning
    if not debug:   # a warning is one line, as an error is
        warnings.formatwarning = lambda msg, cat, *a, **k: f"llmbench: warning: {msg}\n"
    try:
        return args.func(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"llmbench {args.command}: interrupted" + (
              " before any test finished (a sweep, --out-dir DIR, saves each point as it finishes and "
              "continues with --resume DIR)" if args.command == "bench" else ""), file=sys.stderr)
        return 130
    except (LLMBenchError, OSError, MemoryError, ValueError, OverflowError) as e:
        if debug:
            raise
        print(f"llmbench {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = formatwarning   # main() called in a process that goes on (tests, notebooks)


if __name__ == "__main__":
    sys.exit(main())
