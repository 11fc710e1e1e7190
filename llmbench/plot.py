"""Plots of llmbench results for notebooks and reports; each function returns its matplotlib Figure.

Inputs are the frames `llmbench.results.load` returns (or any DataFrame with the named columns) and
the fit objects of `llmbench.fit`:

- ``batch_scaling``: a metric against batch on log-log axes, a power-law fit with its 95% band, and the
  knee by the doubling rule and by Kneedle;
- ``pareto``: latency against throughput, every configuration a point, the Pareto front (no other point
  is both faster and quicker to answer) joined;
- ``decay_curves``: accuracy against reasoning steps with Wilson intervals and the best fit with its band,
  one panel per group;
- ``heatmap``: any metric over two parameters (the mean where several rows share a cell);
- ``quality_vs_speed``: quality loss against speed-up, one labelled point per weight type;
- ``breakdown``: stacked shares of the forward time by operation kind (``llmbench bench --profile``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import fit


def _figure(size: tuple[float, float] = (7, 4.5), ncols: int = 1, nrows: int = 1):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False)
    return fig, axes


def _need(df, columns: Sequence[str], what: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: the frame has no column(s) {', '.join(missing)}")


def batch_scaling(df, y: str = "output_throughput", x: str = "batch", by: str | None = None,
                  knee_threshold: float = 0.1):
    """``y`` against ``x`` (log-log), one series per value of ``by``: the medians of repeated points,
    the power law y = a * x**k fitted to every point (noise relative to y) with its 95% band, and
    the knee by the doubling rule (``knee_threshold``, dotted) and by Kneedle on log2 x (dashed)."""
    from matplotlib.ticker import FuncFormatter

    _need(df, [x, y] + ([by] if by else []), "batch_scaling")
    fig, axes = _figure()
    ax = axes[0][0]
    groups = [(None, df)] if by is None else list(df.groupby(by, sort=True))
    for label, g in groups:
        g = g.dropna(subset=[x, y])
        if g.empty:
            continue
        xs, ys = g[x].to_numpy(float), g[y].to_numpy(float)
        med = g.groupby(x)[y].median()
        line = ax.plot(med.index, med.to_numpy(), "o", label=f"{by}={label}" if by else "measured")[0]
        c = line.get_color()
        if np.unique(xs).size >= 3:
            f = fit.power_law(xs, ys, relative=True)
            grid = np.geomspace(xs.min(), xs.max(), 100)
            ax.plot(grid, f.predict(grid), "-", color=c, lw=1,
                    label=f"{f.params['a']:.3g}·{x}^{f.params['k']:.2f} (R² {f.r2:.3f})")
            if f.cov is not None:
                lo, hi = f.band(grid)
                ax.fill_between(grid, np.maximum(lo, 1e-12), hi, color=c, alpha=0.15, lw=0)
            kn = fit.knee(med.index, med.to_numpy(), knee_threshold)
            if kn.x is not None:
                ax.axvline(kn.x, color=c, ls=":", lw=1)
            kd = fit.kneedle(med.index, med.to_numpy(), log_x=True)
            if kd.x is not None:
                ax.axvline(kd.x, color=c, ls="--", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{y} against {x}: power law, 95% band; knees (dotted: doubling rule, dashed: Kneedle)",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def pareto_front(x: Sequence[float], y: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats on both: higher ``x`` (throughput) and lower ``y``
    (latency), sorted by x. A point equal to another on both is kept once (the first)."""
    pts = sorted(range(len(x)), key=lambda i: (-x[i], y[i], i))
    front, best = [], float("inf")
    for i in pts:
        if y[i] < best:
            front.append(i)
            best = y[i]
    return sorted(front, key=lambda i: x[i])


def pareto(df, x: str = "output_throughput", y: str = "p99_tpot_ms", label: str | None = None):
    """Latency ``y`` against throughput ``x``, every row a point (labelled by column ``label``), the
    Pareto front joined."""
    _need(df, [x, y] + ([label] if label else []), "pareto")
    d = df.dropna(subset=[x, y]).reset_index(drop=True)
    fig, axes = _figure()
    ax = axes[0][0]
    ax.plot(d[x], d[y], "o", alpha=0.6, label="configurations")
    front = pareto_front(d[x].tolist(), d[y].tolist())
    ax.plot(d[x].iloc[front], d[y].iloc[front], "-o", color="C3", label="Pareto front")
    if label:
        for i in front:
            ax.annotate(str(d[label].iloc[i]), (d[x].iloc[i], d[y].iloc[i]), textcoords="offset points",
                        xytext=(4, 4), fontsize=7)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title("Latency against throughput: configurations no other beats on both joined", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def decay_curves(curves: Mapping[str, fit.DecayCurve], ncols: int = 3):
    """One panel per decay curve (``fit.decay_curves``'s output): accuracy per step count with its Wilson
    interval and answer count, and the best model by the curves' criterion with its 95% band; a
    group that could not be fitted shows its note instead."""
    names = list(curves)
    if not names:
        raise ValueError("decay_curves: no curves")
    ncols = min(ncols, len(names))
    nrows = -(-len(names) // ncols)
    fig, axes = _figure((4.2 * ncols, 3.2 * nrows), ncols, nrows)
    for i, name in enumerate(names):
        ax = axes[i // ncols][i % ncols]
        c = curves[name]
        if c.steps:
            acc = np.array(c.accuracy)
            lo, hi = np.array(c.ci95).T
            ax.errorbar(c.steps, acc, yerr=[acc - lo, hi - acc], fmt="o", capsize=3, label="accuracy (Wilson 95%)")
            for s, a, n in zip(c.steps, acc, c.n):
                ax.annotate(f"{n}", (s, a), textcoords="offset points", xytext=(4, 4), fontsize=6, color="0.4")
        best = c.best
        if best is not None and c.comparison is not None:   # a best fit comes from the comparison
            grid = np.linspace(min(c.steps), max(c.steps), 100)
            ax.plot(grid, best.predict(grid), "-", label=f"{best.model} (w {c.comparison.weight[best.model]:.2f})")
            if best.cov is not None:
                blo, bhi = best.band(grid)
                ax.fill_between(grid, blo, bhi, alpha=0.15, lw=0)
        elif c.note:
            ax.text(0.5, 0.5, c.note, transform=ax.transAxes, ha="center", va="center", wrap=True, fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("reasoning steps")
        ax.set_ylabel("accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    for j in range(len(names), nrows * ncols):
        axes[j // ncols][j % ncols].set_visible(False)
    fig.tight_layout()
    return fig


def heatmap(df, x: str, y: str, value: str, agg: str = "mean", fmt: str = ".3g", cmap: str = "viridis"):
    """``value`` over the grid of ``x`` (columns) and ``y`` (rows), aggregated by ``agg`` where rows
    share a cell, each cell annotated."""
    _need(df, [x, y, value], "heatmap")
    table = df.pivot_table(index=y, columns=x, values=value, aggfunc=agg).sort_index().sort_index(axis=1)
    fig, axes = _figure((1.2 + 1.0 * table.shape[1], 1.2 + 0.6 * table.shape[0]))
    ax = axes[0][0]
    im = ax.imshow(table.to_numpy(float), cmap=cmap, aspect="auto", origin="lower")
    ax.set_xticks(range(table.shape[1]), [f"{v:g}" if isinstance(v, float) else str(v) for v in table.columns])
    ax.set_yticks(range(table.shape[0]), [f"{v:g}" if isinstance(v, float) else str(v) for v in table.index])
    for (r, c), v in np.ndenumerate(table.to_numpy(float)):
        if np.isfinite(v):
            ax.text(c, r, format(v, fmt), ha="center", va="center", fontsize=7, color="w")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(f"{value} ({agg})", fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig


def quality_vs_speed(df, speedup: str, loss: str, label: str, loss_err: str | None = None):
    """Quality loss (``loss``, e.g. KL divergence or accuracy drop against the F16 base) against
    speed-up (``speedup``), one point per row labelled by ``label``; error bars from ``loss_err``."""
    _need(df, [speedup, loss, label] + ([loss_err] if loss_err else []), "quality_vs_speed")
    fig, axes = _figure()
    ax = axes[0][0]
    ax.errorbar(df[speedup], df[loss], yerr=None if loss_err is None else df[loss_err], fmt="o", capsize=3)
    for s, q, name in zip(df[speedup], df[loss], df[label]):
        ax.annotate(str(name), (s, q), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(0, color="0.6", lw=0.8)
    ax.set_xlabel(speedup)
    ax.set_ylabel(loss)
    ax.set_title("Quality loss against speed-up", fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def breakdown(profile: Mapping[str, Any]):
    """Stacked bars of ``llmbench bench --profile``'s result (``result["profile"]``): for prefill and decode,
    each operation kind's share of the forward time, the products split by weight type, and the loop
    between operations on top."""
    from .perf.profile import KINDS

    phases = ("prefill", "decode")
    types = sorted(set(profile["prefill"]["matmul_by_type_ns"]) | set(profile["decode"]["matmul_by_type_ns"]))
    parts: list[tuple[str, list[float]]] = []
    for k in KINDS:
        if k == "matmul":   # by type, and what of the products no type holds (their setup)
            for t in types:
                parts.append((f"matmul {t}", [profile[ph]["matmul_by_type_ns"].get(t, 0) / profile[ph]["forward_ns"]
                                              for ph in phases]))
            rest = [(profile[ph]["kinds_ns"]["matmul"] - sum(profile[ph]["matmul_by_type_ns"].values()))
                    / profile[ph]["forward_ns"] for ph in phases]
            if any(r > 0.005 for r in rest):
                parts.append(("matmul (other)", [max(r, 0.0) for r in rest]))
        else:
            parts.append((k, [profile[ph]["kinds_ns"][k] / profile[ph]["forward_ns"] for ph in phases]))
    parts.append(("loop between operations", [max(profile[ph]["other_ns"], 0) / profile[ph]["forward_ns"]
                                              for ph in phases]))
    fig, axes = _figure((7, 3.2))
    ax = axes[0][0]
    left = np.zeros(len(phases))
    for i, (name, share) in enumerate(parts):
        ax.barh(phases, share, left=left, label=name, color=f"C{i % 10}")
        left += np.array(share)
    ax.set_xlim(0, max(1.0, float(left.max())))
    ax.set_xlabel("share of the forward time")
    ax.set_title(f"Where the time goes: pp{profile['pp']} prefill, tg{profile['tg']} decode", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


__all__ = ["batch_scaling", "breakdown", "decay_curves", "heatmap", "pareto", "pareto_front", "quality_vs_speed"]
