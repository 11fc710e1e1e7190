"""Sweeps: points saved as they finish, resume after an interruption (also after a line cut off
mid-write), the power-law fit and knee, CSV/markdown/PNG reports, a schema-valid result; dataset
prompts and depth tests of `llmbench bench`."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import SHARED

from llmbench.perf.bench import BenchConfig
from llmbench.perf.dataset import load_prompts
from llmbench.perf.schema import validate
from llmbench.perf.sweep import LOG_NAME, Sweep, SweepLog, parse_list, run_sweep

DATA = SHARED / "data"


def _base(**kw) -> BenchConfig:
    return BenchConfig(**{"model": "tiny:Q8_0", "threads": 1, "input_len": 8, "output_len": 6, "warmup": 0,
                          "repetitions": 2, **kw})


def _bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`llmbench bench ARGS` in a subprocess; it must succeed."""
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", *args], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r


def _lines(d) -> list[str]:
    return (d / LOG_NAME).read_text().splitlines()


def test_parse_list():
    assert parse_list("1..64") == [1, 2, 4, 8, 16, 32, 64]
    assert parse_list("3..20") == [3, 6, 12, 20]
    assert parse_list("512,2048") == [512, 2048]
    assert parse_list("a,b", str) == ["a", "b"]
    with pytest.raises(ValueError, match="not a comma-separated list"):
        parse_list("1,x")
    with pytest.raises(ValueError, match="low <= high"):
        parse_list("8..2")
    with pytest.raises(ValueError, match=r"^--batch '1\.\.x': a range is two whole numbers"):
        parse_list("1..x", int, "--batch")
    with pytest.raises(ValueError, match="^--model: no value given"):
        parse_list("", str, "--model")
    with pytest.raises(ValueError, match="^--batch ',': no value given|^--batch: no value given"):
        parse_list(",", int, "--batch")


def test_sweep_rejects_bad_axes():
    with pytest.raises(ValueError, match="cannot sweep"):
        Sweep(_base(), {"temperature": [0, 1]})
    with pytest.raises(ValueError, match="repeats"):
        Sweep(_base(), {"batch": [1, 1]})
    with pytest.raises(ValueError, match="batch >= 1"):
        Sweep(_base(), {"batch": [0, 2]})


def test_interrupted_sweep_resumes_with_only_the_missing_points(tmp_path):
    sweep = Sweep(_base(), {"batch": [1, 2, 4]})
    seen: list[str] = []

    def stop_at_batch_2(msg: str) -> None:
        seen.append(msg)
        if msg.startswith("batch 2:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, str(tmp_path), progress=stop_at_batch_2)
    lines = _lines(tmp_path)
    assert len(lines) == 2 and json.loads(lines[1])["params"] == {"batch": 1}   # batch 1 kept
    first = lines[1]
    # the process dies while writing the batch 2 point: a line without its newline
    with open(tmp_path / LOG_NAME, "a") as f:
        f.write('{"kind":"point","params":{"batch":2},"metr')
    with pytest.raises(FileExistsError, match="--resume"):
        run_sweep(sweep, str(tmp_path))        # a new sweep never overwrites a saved one
    seen.clear()
    result = run_sweep(None, str(tmp_path), resume=True, progress=seen.append)
    assert not any(m.startswith("batch 1:") for m in seen)           # not run again
    assert any(m.startswith("batch 2:") for m in seen) and any(m.startswith("batch 4:") for m in seen)
    lines = _lines(tmp_path)
    assert len(lines) == 4 and lines[1] == first                       # the cut line is gone
    assert [json.loads(x)["params"]["batch"] for x in lines[1:]] == [1, 2, 4]
    validate(result)
    assert json.loads((tmp_path / "result.json").read_text()) == result
    assert [p["params"]["batch"] for p in result["sweep"]["points"]] == [1, 2, 4]
    # everything already there: resume only rebuilds the summary
    seen.clear()
    run_sweep(None, str(tmp_path), resume=True, progress=seen.append)
    assert not any(":" in m for m in seen)


def test_damaged_log_is_named(tmp_path):
    sweep = Sweep(_base(), {"batch": [1, 2]})
    run_sweep(sweep, str(tmp_path))
    lines = _lines(tmp_path)
    (tmp_path / LOG_NAME).write_text("\n".join([lines[0], "not json", lines[2]]) + "\n")
    with pytest.raises(ValueError, match=f"{LOG_NAME}:2: not a sweep point"):
        SweepLog(str(tmp_path)).read()
    (tmp_path / LOG_NAME).write_text('{"kind": "other"}\n')
    with pytest.raises(ValueError, match="not an llmbench sweep log"):
        SweepLog(str(tmp_path)).read()
    with pytest.raises(FileNotFoundError, match="no sweep to resume"):
        SweepLog(str(tmp_path / "nothing")).read()


def test_batch_sweep_command_writes_result_fit_reports_and_plots(tmp_path):
    out = tmp_path / "sweep"
    args = ["--model", "tiny:Q8_0", "--threads", "1", "--batch", "1..8", "--input-len", "8,16", "--output-len", "6",
            "--reps", "2", "--warmup", "0", "--out-dir", str(out)]
    r = _bench(*args, timeout=600)
    res = json.loads((out / "result.json").read_text())
    validate(res)
    pts = res["sweep"]["points"]
    assert [(p["params"]["input_len"], p["params"]["batch"]) for p in pts] == \
        [(i, b) for i in (8, 16) for b in (1, 2, 4, 8)]
    for p in pts:
        m = p["metrics"]
        assert m["completed"] == 2 * p["params"]["batch"] and m["total_output_tokens"] == 6 * m["completed"]
        assert m["total_input_tokens"] == p["params"]["input_len"] * m["completed"]
        assert len(p["output_throughput_runs"]) == 2 and p["bandwidth"]["steps"] >= 2
    fits = res["sweep"]["fits"]
    assert [f["group"] for f in fits] == [{"input_len": 8}, {"input_len": 16}]
    for f in fits:
        assert f["power_law"]["n"] == 4 and f["error"] is None
        assert f["batch"] == [1, 2, 4, 8] and len(f["knee"]["gains"]) == 3
    assert 0 < res["sweep"]["max_timing_overhead"] < 0.05
    assert "input_len 8: output tok/s = " in r.stdout
    with open(out / "points.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 8 and float(table[0]["output_throughput"]) == pts[0]["metrics"]["output_throughput"]
    md = (out / "report.md").read_text()
    assert "| input_len | batch | output_throughput |" in md and "knee" in md
    for png in ("throughput_vs_batch.png", "latency_vs_batch.png", "latency_percentiles.png", "ttft_vs_context.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png in md
    # a second sweep into the same folder is refused; --resume finishes at once
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "--resume" in r.stderr
    r = _bench("--resume", str(out), "--json", "--batch", "32")
    assert json.loads(r.stdout)["sweep"]["points"] == pts and "ignoring --batch" in r.stderr


def test_depth_tests_fork_a_held_context(tmp_path):
    out = tmp_path / "r.json"
    _bench("--model", "tiny:F32", "--threads", "1", "--pp", "16", "--tg", "4", "--depth", "0,40", "--batch", "0",
           "--reps", "2", "-o", str(out))
    res = json.loads(out.read_text())
    validate(res)
    assert [(t["test"], t["n_depth"]) for t in res["llama_bench"]] == \
        [("pp16", 0), ("tg4", 0), ("pp16 @ d40", 40), ("tg4 @ d40", 40)]
    assert res["environment"]["prefix_cache"] is True
    ov = res["timing_overhead"]
    assert ov["decode_step_ns"] == pytest.approx(res["bandwidth"]["step_s"] * 1e9)   # the measured decode step
    # a tg step: 4 clock reads and one event (one sequence), as a share of that step
    assert ov["clock_ns"] > 0 and ov["event_ns"] > 0
    assert ov["per_step_ns"] == pytest.approx(4 * ov["clock_ns"] + ov["event_ns"])
    assert ov["fraction_of_decode_step"] == pytest.approx(ov["per_step_ns"] / ov["decode_step_ns"])


# ---- dataset prompts ----

def test_dataset_shapes(tmp_path):
    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello!"}]},
        {"id": "b", "conversations": [{"from": "system", "value": "be brief"}, {"from": "human", "value": "Why?"}]},
    ]))
    got = load_prompts(share)
    assert [(p.text, p.reply) for p in got] == [("Hi there", "Hello!"), ("Why?", None)]
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}\n\n'
                    '{"prompt": "Tell me a story"}\n')
    assert [(p.text, p.reply) for p in load_prompts(chat)] == [("2+2?", "4"), ("Tell me a story", None)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not a JSON line"):
        load_prompts(bad)
    bad.write_text('{"title": "no prompt"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1: no prompt found"):
        load_prompts(bad)


def test_real_datasets_load():
    if not DATA.exists():
        pytest.skip(f"{DATA} not found: the real data sets live in ../shared/data")
    mt = load_prompts(DATA / "mt_bench" / "question.jsonl")
    assert len(mt) == 80 and all(p.text for p in mt)
    gsm = load_prompts(DATA / "gsm8k" / "test.jsonl")
    assert len(gsm) == 1319 and gsm[0].reply.rstrip().split("#### ")[-1].strip().isdigit()


def test_bench_with_dataset_prompts(tmp_path):
    if not DATA.exists():
        pytest.skip(f"{DATA} not found: the real data sets live in ../shared/data")
    out = tmp_path / "r.json"
    data = DATA / "mt_bench" / "question.jsonl"
    _bench("--model", "tiny:Q8_0", "--threads", "1", "--pp", "0", "--tg", "0", "--batch", "4", "--dataset", str(data),
           "--output-len", "5", "--reps", "2", "-o", str(out))
    res = json.loads(out.read_text())
    validate(res)
    from llmbench import LLM
    from llmbench.perf.dataset import sample

    tok = LLM("tiny:Q8_0", threads=1, ctx=64, max_seqs=1)
    rng = np.random.default_rng([0, 1])
    prompts = load_prompts(data)
    want = [len(tok.tokenize(p.text)) for _ in range(1 + 2) for p in sample(prompts, 4, rng)][4:]  # after warmup
    assert [q["prompt_tokens"] for q in res["requests"]] == want
    assert res["config"]["dataset"] == str(data)


def test_sweep_against_a_local_openai_server(tmp_path):
    """Batch and request-rate sweeps against a real local SSE server; token counts from its usage."""
    from sse_server import SSEServer

    out = tmp_path / "s"
    with SSEServer(ttft_s=0.01, itl_s=0.001) as srv:
        _bench("--backend", "openai", "--base-url", srv.base_url, "--model", "test-model", "--batch", "1,2,4",
               "--request-rate", "50,1000", "--input-len", "3", "--output-len", "4", "--reps", "2", "--warmup", "0",
               "--out-dir", str(out))
    res = json.loads((out / "result.json").read_text())
    validate(res)
    pts = res["sweep"]["points"]
    assert [(p["params"]["request_rate"], p["params"]["batch"]) for p in pts] == \
        [(r_, b) for r_ in (50.0, 1000.0) for b in (1, 2, 4)]
    for p in pts:
        n = 2 * p["params"]["batch"]
        assert p["metrics"]["completed"] == n and p["metrics"]["total_input_tokens"] == n * (1000 + 3)
        assert p["bandwidth"] is None and p["environment"]["backend"] == "openai"
    assert [f["group"] for f in res["sweep"]["fits"]] == [{"request_rate": 50.0}, {"request_rate": 1000.0}]
    assert all(f["power_law"] is not None for f in res["sweep"]["fits"])
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--backend", "openai", "--base-url",
                        "http://127.0.0.1:9/v1", "--threads", "1,2", "--out-dir", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "server's settings" in r.stderr


def test_context_sweep_up_to_the_model_maximum():
    from llmbench.cli import _bench_config, build_parser

    args = build_parser().parse_args(["bench", "--model", "tiny:Q8_0", "--input-len", "512..max", "--output-len", "8"])
    cfg, axes = _bench_config(args)
    assert axes == {"input_len": [512, 1024, 2048 - 8 - 8]} and cfg.input_len == 512   # tiny: 2048 context


def test_a_point_whose_process_dies_is_recorded_and_the_sweep_goes_on(tmp_path, stories_path):
    """Each model load runs in its own process: a model that cannot load fails its points with the
    reason, and the other model's points, fits and reports are still produced."""
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(stories_path.read_bytes()[:5000])
    out = tmp_path / "s"
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--model", f"tiny:Q8_0,{bad}", "--threads", "1",
                        "--batch", "1,2,4", "--input-len", "8", "--output-len", "4", "--reps", "1", "--warmup", "0",
                        "--out-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stderr   # a failed point fails the sweep
    res = json.loads((out / "result.json").read_text())
    validate(res)
    pts = res["sweep"]["points"]
    assert [("error" in p) for p in pts] == [False] * 3 + [True] * 3 and res["sweep"]["failed"] == 3
    assert all("GGUFError" in p["error"] and "truncated.gguf" in p["error"] for p in pts[3:])
    assert [f["group"]["model"] for f in res["sweep"]["fits"]] == ["tiny:Q8_0"]
    assert "FAILED" in r.stderr and "Failed points" in (out / "report.md").read_text()
    assert len((out / "points.csv").read_text().splitlines()) == 1 + 6


def test_sweep_takes_relative_paths_from_the_callers_folder(tmp_path):
    """The points run in child processes with another working directory: a model and a dataset named
    relative to the caller's folder still load there, and the sweep records them as absolute paths."""
    import shutil

    from llmbench import dummy_model

    (tmp_path / "out").mkdir()
    shutil.copy(dummy_model("tiny", "Q8_0"), tmp_path / "out" / "m.gguf")
    (tmp_path / "prompts.jsonl").write_text('{"prompt": "Once upon a time"}\n{"prompt": "The cat sat"}\n')
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--model", "out/m.gguf", "--dataset",
                        "prompts.jsonl", "--threads", "1", "--batch", "1,2", "--output-len", "3", "--reps", "1",
                        "--warmup", "0", "--out-dir", "sw"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "sw" / "result.json").read_text())
    assert res["sweep"]["failed"] == 0 and [p["metrics"]["completed"] for p in res["sweep"]["points"]] == [1, 2]
    assert res["config"]["model"] == str(tmp_path / "out" / "m.gguf")
    assert res["config"]["dataset"] == str(tmp_path / "prompts.jsonl")


def test_sweep_marks_points_whose_requests_failed(tmp_path):
    """A point whose measured requests failed (the server answers 500) is marked FAILED with its
    reasons, and the sweep's exit status is 1."""
    from sse_server import SSEServer

    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "http500 please"}\n{"prompt": "ok fine"}\n')
    out = tmp_path / "s"
    with SSEServer(ttft_s=0.01, itl_s=0.001) as srv:
        r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--backend", "openai", "--base-url",
                            srv.base_url, "--model", "m", "--dataset", str(data), "--batch", "1,2",
                            "--output-len", "3", "--reps", "1", "--warmup", "0", "--out-dir", str(out)],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "batch 2: FAILED: 1 of 2 measured requests failed (--max-failed 0 allows 0): 1 x HTTP 500" in r.stderr
    assert "Failed points" in (out / "report.md").read_text()
    pts = json.loads((out / "result.json").read_text())["sweep"]["points"]
    assert [p["metrics"]["failed"] for p in pts][1] == 1


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except FileNotFoundError:
        return False


def _start_sweep(out, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "llmbench", "bench", "--model", "tiny:Q8_0", "--threads", "1",
                             "--batch", "1..16", "--input-len", "8", "--output-len", "48", "--reps", "3",
                             "--warmup", "0", "--out-dir", str(out), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(cond, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_second_writer_is_refused_and_workers_die_with_their_parent(tmp_path):
    """While a sweep runs, --resume of its folder is refused in one line; kill -9 of the sweep ends
    its worker too, so no point is appended after it; --resume then finishes the sweep."""
    import os
    import signal

    out = tmp_path / "s"
    first = _start_sweep(out)
    _wait_for(lambda: _children(first.pid) and (out / LOG_NAME).exists())
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--resume", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and f"is being written by another llmbench (process {first.pid})" in r.stderr, r.stderr
    worker = _children(first.pid)[0]
    _wait_for(lambda: len(_lines(out)) >= 2)   # a point is in: the worker is measuring
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    _wait_for(lambda: not _alive(worker), timeout=10)
    n = len(_lines(out))
    assert n < 1 + 5, "the sweep finished before it was killed: make it longer"
    import time

    time.sleep(1)
    assert len(_lines(out)) == n   # nothing appended after the sweep died
    r = _bench("--resume", str(out), "--json")   # the lock died with its holder
    assert [p["params"]["batch"] for p in json.loads(r.stdout)["sweep"]["points"]] == [1, 2, 4, 8, 16]
