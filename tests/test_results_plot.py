"""llmbench.results.load reads every kind of result into one frame (a real benchmark, sweep, evaluation
and study run here), and llmbench.plot draws what it is given: fits, knees, fronts, cells, intervals."""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")

from llmbench import fit, plot, results  # noqa: E402
from llmbench.perf.bench import BenchConfig, run  # noqa: E402
from llmbench.perf.sweep import Sweep, run_sweep  # noqa: E402
from llmbench.study import Study, run_study  # noqa: E402


def test_load_reads_every_kind_into_one_frame(tmp_path, stories_path):
    cfg = dict(model="tiny:Q8_0", threads=1, input_len=8, output_len=4, warmup=0, repetitions=1)
    bench = run(BenchConfig(**cfg, pp=16, tg=4, batch=2))
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    run_sweep(Sweep(BenchConfig(**cfg, pp=0, tg=0), {"batch": [1, 2]}), str(tmp_path / "sweep"), isolate=False)
    from llmbench.eval import evaluate

    evaluate(str(stories_path), "mmlu", limit=2, subjects=["anatomy", "astronomy"], threads=1, out=tmp_path / "ev")
    run_study(Study(model=str(stories_path), workload={"prompts": ["Once upon a time", "The dog"]},
                    engine={"threads": 1}, sampling={"temperature": [0.5, 1.0], "max_tokens": 8}),
              str(tmp_path / "study"))
    df = results.load([tmp_path / "bench.json", tmp_path / "sweep", tmp_path / "ev", str(tmp_path / "stud*")])
    assert df.groupby("kind").size().to_dict() == {"bench": 1, "sweep": 2, "eval": 4, "study": 2}
    b = df[df.kind == "bench"].iloc[0]
    assert b["pp16_tps"] == bench["llama_bench"][0]["avg_ts"] and b["config.batch"] == 2
    assert b["output_throughput"] == bench["metrics"]["output_throughput"]
    assert sorted(df[df.kind == "sweep"]["batch"]) == [1, 2]
    ev = df[df.kind == "eval"].set_index("name")
    assert list(ev["level"]) == ["task", "group", "subject", "subject"]
    assert ev.loc["mmlu", "acc_n"] == 4 and ev.loc["mmlu", "acc_ci95_low"] <= ev.loc["mmlu", "acc"]
    st = df[df.kind == "study"]
    assert sorted(st["temperature"]) == [0.5, 1.0] and st["distinct_2"].notna().all()
    assert df["env.cpu_model"].notna().all() and df["llmbench_version"].notna().all()
    with pytest.raises(FileNotFoundError, match="no such file"):
        results.load(tmp_path / "none.json")
    (tmp_path / "cut.json").write_text('{"config": ')
    with pytest.raises(ValueError, match="not JSON"):
        results.load(tmp_path / "cut.json")
    with pytest.raises(ValueError, match="not an llmbench result"):
        results.rows({"hello": 1}, "x.json")


def test_pareto_front():
    # throughput up, latency down: (10, 5) beats (8, 6); (12, 9) and (4, 1) are each best at something
    x = [10, 8, 12, 4, 10]
    y = [5, 6, 9, 1, 5]
    assert plot.pareto_front(x, y) == [3, 0, 2]
    fig = plot.pareto(pd.DataFrame({"tput": x, "lat": y, "cfg": list("abcde")}), "tput", "lat", label="cfg")
    front = fig.axes[0].lines[1]
    assert list(front.get_xdata()) == [4, 10, 12] and {t.get_text() for t in fig.axes[0].texts} == {"d", "a", "c"}


def test_batch_scaling_fits_and_knees():
    b = np.array([1, 2, 4, 8, 16, 32, 64, 128], dtype=float)
    df = pd.DataFrame({"batch": np.repeat(b, 2), "output_throughput": np.repeat(100 * b / (1 + b / 8), 2)})
    fig = plot.batch_scaling(df, knee_threshold=0.25)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    k = fit.power_law(df["batch"], df["output_throughput"], relative=True).params["k"]
    assert any(f"batch^{k:.2f}" in s for s in labels)
    vlines = sorted(line.get_xdata()[0] for line in ax.lines if line.get_linestyle() in (":", "--"))
    assert fit.knee(b, 100 * b / (1 + b / 8), 0.25).x == 16 and 16 in vlines
    with pytest.raises(ValueError, match="no column"):
        plot.batch_scaling(df, y="tpot")


def test_heatmap_cells_and_decay_panels():
    df = pd.DataFrame({"T": [0.3, 0.3, 1.0, 1.0, 1.0], "p": [0.5, 1.0, 0.5, 1.0, 1.0], "d2": [0.1, 0.2, 0.3, 0.4, 0.6]})
    fig = plot.heatmap(df, "T", "p", "d2")
    cells = sorted(t.get_text() for t in fig.axes[0].texts)
    assert cells == ["0.1", "0.2", "0.3", "0.5"]                 # (1.0, 1.0) holds the mean of 0.4 and 0.6
    rng = np.random.default_rng(0)
    steps = rng.integers(1, 8, 600)
    correct = rng.random(600) < 0.7 * np.exp(-steps / 3) + 0.2
    curves = fit.decay_curves(steps, correct, np.where(np.arange(600) < 590, "a", "b"))
    fig = plot.decay_curves(curves)
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title() for ax in visible] == ["pooled", "a", "b"]
    assert any("a fit needs 3 or more" in t.get_text() for t in visible[2].texts)
    fig = plot.quality_vs_speed(pd.DataFrame({"speedup": [1.0, 1.8], "kld": [0.0, 0.03], "type": ["F16", "Q4_K_M"]}),
                                "speedup", "kld", "type")
    assert {t.get_text() for t in fig.axes[0].texts} == {"F16", "Q4_K_M"}
