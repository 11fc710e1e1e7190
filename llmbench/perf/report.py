"""Reports of a sweep result: CSV, markdown and PNG plots (matplotlib, no display needed).

- ``points.csv``: one row per point, its parameters and the headline metrics.
- ``report.md``: the same table in markdown plus the power-law fits and knees.
- ``throughput_vs_batch.png``: output tokens/s against batch (log-log) with the fitted power law
  and its 95% band, the knee marked; ``latency_vs_batch.png``: TTFT and TPOT (median and the
  highest percentile) against batch; ``latency_percentiles.png``: TTFT/TPOT/ITL/E2E at every
  percentile for each point; ``ttft_vs_context.png``: TTFT against input length when the sweep has
  several input lengths.
"""

from __future__ import annotations

import csv
import os
from typing import Any

import numpy as np

from .. import fit
from .stats import percentile_key

_METRICS = ("output_throughput", "total_token_throughput", "request_throughput")
_LATENCY = ("ttft", "tpot", "itl", "e2el")


def _tail_key(result: dict) -> str:
    return percentile_key(max(result["config"]["percentiles"]))


def rows(result: dict) -> tuple[list[str], list[list]]:
    """Header and rows of the per-point table."""
    axes = list(result["sweep"]["axes"])
    tail = _tail_key(result)
    head = [*axes, *_METRICS]
    for lat in _LATENCY:
        head += [f"median_{lat}_ms", f"{tail}_{lat}_ms"]
    head += ["decode_gbps", "bandwidth_fraction", "failed"]
    out = []
    for r in result["sweep"]["points"]:
        m, bw = r.get("metrics") or {}, r.get("bandwidth") or {}
        row = [r["params"][a] for a in axes] + [m.get(k) for k in _METRICS]
        for k in _LATENCY:
            row += [m.get(f"median_{k}_ms"), m.get(f"{tail}_{k}_ms")]
        row += [bw.get("achieved_gbps"), bw.get("fraction"), m.get("failed")]
        out.append(row)
    return head, out


def _ok(result: dict) -> list[dict]:
    return [r for r in result["sweep"]["points"] if "error" not in r]


def failed_lines(result: dict) -> list[str]:
    """One line per failed point: its process died, or more of its measured requests failed than
    the sweep's max_failed allows (the reasons grouped, most frequent first)."""
    from .config import failure_report

    out = []
    for r in result["sweep"]["points"]:
        why = r["error"] if "error" in r else failure_report(r.get("requests", []),
                                                             result["config"].get("max_failed", "0"))
        if why:
            head, *reasons = why.splitlines()
            out.append(f"{', '.join(f'{k} {v}' for k, v in r['params'].items())}: FAILED: {head} "
                       + "; ".join(x.strip() for x in reasons))
    return out


def write_csv(result: dict, path: str) -> None:
    """Write the sweep's per-point table (`rows`) to ``path`` as CSV."""
    head, body = rows(result)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(body)


def fmt(v) -> str:
    """A table cell: a dash for None, a float to 3 significant digits (whole from 100 up), else str()."""
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def fit_lines(result: dict) -> list[str]:
    """One sentence per batch fit: the law with intervals, R², and the knee."""
    lines = []
    for f in result["sweep"]["fits"]:
        group = ", ".join(f"{k} {v}" for k, v in f["group"].items()) or "all points"
        if f["power_law"]:
            p, ci = f["power_law"]["params"], f["power_law"]["ci95"]
            law = (f"output tok/s = {p['a']:.4g} · batch^{p['k']:.3f} (95% CI a [{ci['a'][0]:.4g}, {ci['a'][1]:.4g}], "
                   f"k [{ci['k'][0]:.3f}, {ci['k'][1]:.3f}]; R² {f['power_law']['r2']:.3f})")
        else:
            law = f"no power-law fit ({f['error']})"
        knee = f["knee"]
        if knee is None:
            kn = ""
        elif knee["x"] is None:
            kn = f"; no knee: every doubling still gains at least {knee['threshold']:.0%}"
        else:
            kn = f"; knee at batch {knee['x']:g} (the next doubling gains < {knee['threshold']:.0%})"
        lines.append(f"{group}: {law}{kn}")
    return lines


def write_markdown(result: dict, path: str, plots: list[str]) -> None:
    """Write the sweep's report to ``path`` as Markdown: the setup, the per-point table, failed points, the
    throughput fits and links to ``plots``."""
    head, body = rows(result)
    env = result["environment"]
    out = [f"# llmbench sweep ({result['created']})", "",
           f"llmbench {result['llmbench_version']} (commit {result['commit']}), backend {env['backend']}, "
           f"CPU {env.get('cpu_model')}, {result['config']['repetitions']} repetitions after "
           f"{result['config']['warmup']} warmup, output length {result['config']['output_len']} (EOS ignored).", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in body]
    failed = failed_lines(result)
    if failed:
        out += ["", "## Failed points", ""] + [f"- {line}" for line in failed]
    fits = fit_lines(result)
    if fits:
        out += ["", "## Throughput against batch", ""] + [f"- {line}" for line in fits]
    if result["sweep"].get("max_timing_overhead") is not None:
        out += ["", f"The engine's own timing cost at most {result['sweep']['max_timing_overhead']:.3%} of a decode step."]
    if plots:
        out += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def _series(result: dict, axis: str) -> dict[str, list[dict]]:
    """Points grouped by every axis but ``axis``, each group sorted along ``axis``."""
    groups: dict[str, list[dict]] = {}
    for r in _ok(result):
        label = ", ".join(f"{k} {v}" for k, v in r["params"].items() if k != axis) or "all"
        groups.setdefault(label, []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: r["params"][axis])
    return groups


def plot_throughput(result: dict, path: str) -> None:
    """Plot output throughput against batch to ``path``: each group's points, power-law fit with its 95% band,
    and knee."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(7, 4.5))
    fits = {", ".join(f"{k} {v}" for k, v in f["group"].items()) or "all": f for f in result["sweep"]["fits"]}
    for label, pts in _series(result, "batch").items():
        x = np.array([r["params"]["batch"] for r in pts], dtype=float)
        y = np.array([r["metrics"]["output_throughput"] for r in pts])
        err = np.array([np.std(r["output_throughput_runs"], ddof=1) if len(r["output_throughput_runs"]) > 1 else 0
                        for r in pts])
        line = ax.errorbar(x, y, yerr=err, fmt="o", capsize=3, label=f"{label} measured")[0]
        f = fits.get(label)
        if f and f["power_law"]:
            xs = np.geomspace(x.min(), x.max(), 100)
            a, k = f["power_law"]["params"]["a"], f["power_law"]["params"]["k"]
            ax.plot(xs, a * xs ** k, "-", color=line.get_color(), label=f"fit {a:.4g}·b^{k:.3f}")
            if f["power_law"].get("cov"):
                lo, hi = fit.FitResult(**f["power_law"]).band(xs)
                ax.fill_between(xs, np.maximum(lo, 1e-9), hi, color=line.get_color(), alpha=0.15, lw=0)
        if f and f["knee"] and f["knee"]["x"] is not None:
            kx = f["knee"]["x"]
            ax.axvline(kx, color=line.get_color(), ls=":", lw=1)
            ax.annotate(f"knee {kx:g}", (kx, y[list(x).index(kx)]), textcoords="offset points", xytext=(5, -12))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("batch (concurrent requests)")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Output throughput against batch: power-law fit, 95% confidence band")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency_vs(result: dict, axis: str, path: str, metrics: tuple[str, ...], xlabel: str) -> None:
    """Plot the median and tail of each of ``metrics`` against the sweep axis ``axis`` to ``path``."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    tail = _tail_key(result)
    fig, axs = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 4), squeeze=False)
    for ax, m in zip(axs[0], metrics):
        for label, pts in _series(result, axis).items():
            x = [r["params"][axis] for r in pts]
            med = [r["metrics"].get(f"median_{m}_ms") for r in pts]
            hi = [r["metrics"].get(f"{tail}_{m}_ms") for r in pts]
            line = ax.plot(x, med, "o-", label=f"{label} median")[0]
            ax.plot(x, hi, "s--", color=line.get_color(), label=f"{label} {tail}")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{m.upper()} (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_percentiles(result: dict, path: str) -> None:
    """Plot the latency percentiles of each point, one panel per latency metric, to ``path``."""
    import matplotlib.pyplot as plt

    ps = [percentile_key(p) for p in result["config"]["percentiles"]]
    pts = _ok(result)
    fig, axs = plt.subplots(1, len(_LATENCY), figsize=(4.2 * len(_LATENCY), 4), squeeze=False)
    width = 0.8 / max(len(pts), 1)
    for ax, m in zip(axs[0], _LATENCY):
        for i, r in enumerate(pts):
            vals = [r["metrics"].get(f"{p}_{m}_ms") or 0 for p in ps]
            ax.bar(np.arange(len(ps)) + i * width, vals, width,
                   label=", ".join(f"{k} {v}" for k, v in r["params"].items()))
        ax.set_xticks(np.arange(len(ps)) + 0.4 - width / 2, ps)
        ax.set_yscale("log")
        ax.set_title(f"{m.upper()} percentiles (ms)")
        ax.grid(True, axis="y", which="both", alpha=0.3)
    axs[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_all(result: dict, directory: str) -> dict[str, str]:
    """Write the CSV, the plots and the markdown report next to the sweep log; returns their names."""
    import matplotlib

    matplotlib.use("Agg")   # files only; no display
    files: dict[str, Any] = {"csv": "points.csv"}
    write_csv(result, os.path.join(directory, files["csv"]))
    axes = result["sweep"]["axes"]
    plots = []
    if len(axes.get("batch", [])) > 1:
        plot_throughput(result, os.path.join(directory, "throughput_vs_batch.png"))
        plot_latency_vs(result, "batch", os.path.join(directory, "latency_vs_batch.png"), ("ttft", "tpot"), "batch")
        plots += ["throughput_vs_batch.png", "latency_vs_batch.png"]
    if len(axes.get("input_len", [])) > 1:
        plot_latency_vs(result, "input_len", os.path.join(directory, "ttft_vs_context.png"), ("ttft",),
                        "input (context) length, tokens")
        plots.append("ttft_vs_context.png")
    plot_percentiles(result, os.path.join(directory, "latency_percentiles.png"))
    plots.append("latency_percentiles.png")
    files["markdown"] = "report.md"
    write_markdown(result, os.path.join(directory, files["markdown"]), plots)
    files["plots"] = plots
    return files


# ---- the table of one benchmark (llmbench bench) ----

def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def bench_tables(result: dict) -> list:
    """The rich tables ``llmbench bench`` prints for one result: the headline figures, then the operation
    profile where the result has one (``--profile``)."""
    from rich.table import Table

    env = result["environment"]
    if env["backend"] == "openai":
        title = f"llmbench bench: {env['model']['name']} at {env['base_url']}"
    elif env["backend"] == "cuda":
        title = (f"llmbench bench: {env['model']['name']} ({', '.join(env['model']['weight_types'])}) on "
                 f"{env['gpu_name']}, KV {env['kv_dtype']}, CUDA Graphs {'on' if env['cuda_graphs'] else 'off'}")
    else:
        title = (f"llmbench bench: {env['model']['name']} ({', '.join(env['model']['weight_types'])}), "
                 f"{env['threads']} threads, KV {env['kv_dtype']}, SIMD {env['simd']}"
                 + (f", activations {env['activations']}" if env.get("activations", "q8") != "q8" else ""))
    t = Table(title=title)
    t.add_column("metric", style="bold cyan")
    t.add_column("value", justify="right")
    for test in result.get("llama_bench", []):
        t.add_row(f"{test['test']} tokens/s", f"{test['avg_ts']:.1f} ± {test['stddev_ts']:.1f}")
    m = result.get("metrics")
    if m:
        p = result["config"]["percentiles"][-1]
        pk = f"p{p:g}"
        for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2E", "e2el")):
            mean, tail = m.get(f"mean_{key}_ms"), m.get(f"{pk}_{key}_ms")
            if mean is not None:
                t.add_row(f"{name} ms (mean / {pk})", f"{mean:.2f} / {tail:.2f}")
        t.add_row("output tokens/s (latency run)", f"{m['output_throughput']:.1f}")
        t.add_row("requests completed / failed", f"{m['completed']} / {m['failed']}")
    bw = result.get("bandwidth")
    if bw:
        t.add_row("decode bandwidth", f"{bw['achieved_gbps']:.1f} GB/s = {bw['fraction']:.0%} of "
                                      f"{bw['measured_gbps']:.1f} GB/s measured")
        if bw.get("fits_in_cache"):
            from .metrics import cache_note

            t.add_row("", cache_note(bw["bytes_per_step"], bw["cache_bytes"]))
    cp = result.get("compute")
    if cp:
        t.add_row(f"pp{cp['n_prompt']} compute", f"{cp['achieved_gops']:.0f} GOP/s = {cp['fraction']:.0%} of peak ("
                  + ", ".join(f"{k} {v:.0f}" for k, v in cp["peaks_gops"].items()) + ")")
    ov = result.get("timing_overhead")
    if ov:
        t.add_row("timing overhead per decode step",
                  f"{ov['per_step_ns']:.0f} ns = {ov['fraction_of_decode_step']:.4%}")
    for ph in result.get("cuda", {}).get("phases", []):
        t.add_row(f"{ph['test']}: GPU / wall s (prefill, decode, sample)",
                  ", ".join(f"{ph[k + '_device_s']:.3f} / {ph[k + '_wall_s']:.3f}"
                            for k in ("prefill", "decode", "sample")))
    solo = result.get("environment", {}).get("solo_steps")
    if solo:
        t.add_row("contended", f"{solo} engine steps ran on one thread: other processes wanted the cores, so these "
                  "figures are not this machine's best")
    g = result.get("cuda", {}).get("graphs")
    if g:
        t.add_row("CUDA Graphs: captures / replays / kernels per decode step",
                  f"{g['captures']} / {g['replays']} / {g['kernels_per_step']}")
    if result.get("memory", {}).get("gpu_total_bytes"):
        m = result["memory"]
        t.add_row("GPU memory: total / free / weights / KV / workspace / peak",
                  " / ".join(_gib(m[k]) for k in ("gpu_total_bytes", "gpu_free_bytes", "weights_bytes",
                                                   "kv_cache_bytes", "scratch_bytes", "gpu_peak_bytes")))
    if "memory" in result:
        t.add_row("memory: weights / KV / peak RSS",
                  f"{_gib(result['memory']['weights_bytes'])} / {_gib(result['memory']['kv_cache_bytes'])} / "
                  f"{_gib(result['memory']['peak_rss_bytes'])}")
    tables = [t]
    if "profile" in result:
        from .profile import table_rows

        pr = result["profile"]
        tp = Table(title=f"Profile: share of the forward time (pp{pr['pp']} prefill, tg{pr['tg']} decode)")
        for c in ("operation", "prefill", "decode"):
            tp.add_column(c, justify="left" if c == "operation" else "right")
        for row in table_rows(pr):
            tp.add_row(*row)
        tables.append(tp)
    return tables
