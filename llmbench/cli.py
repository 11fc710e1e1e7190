"""The llmbench command line: `llmbench <command> --help` shows each command with an example."""

from __future__ import annotations

import argparse
import json
import sys

from . import LLMBenchError


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def cmd_info(args: argparse.Namespace) -> int:
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
        ("SIMD", f"{info['simd']['active']} (detected {info['simd']['detected']}; cpu: {info['simd']['cpu_features']})"),
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmbench", description="Benchmark large language models: speed and quality.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    info = sub.add_parser("info", help="show this build, CPU, SIMD level, threads and backends",
                          description="Show version, build flags, SIMD level, threads, CPU, memory and "
                                      "which backends are available (and why not).",
                          epilog="example: llmbench info --json > env.json",
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")
    info.set_defaults(func=cmd_info)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except LLMBenchError as e:
        print(f"llmbench {args.command}: error: {e}", file=sys.stderr)
        return 1
    except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
        print(f"llmbench {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
