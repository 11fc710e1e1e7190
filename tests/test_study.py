"""Studies: grid expansion and validation, the text metrics on hand-checked texts, points measured on
stories260K (perplexity against the engine's own log-probabilities), resume after kill -9, failed
points recorded, and the Ray executor giving the local executor's records."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from llmbench import LLM, SamplingParams
from llmbench.study import Study, distinct_n, load, repetition_rate, run_study, self_bleu
from llmbench.study.point import run_point

PROMPTS = ["Once upon a time", "Lily went to the park", "The dog", "Tom had a"]


def quality(records: list[dict]) -> list[str]:
    """The records without their timings and hosts, in a fixed order: what every executor must agree on."""
    return sorted(json.dumps({k: v for k, v in r.items() if k not in ("timing", "environment")}, sort_keys=True)
                  for r in records)


def test_text_metrics_by_hand():
    texts = ["a b a b", "A c"]
    assert distinct_n(texts, 1) == 3 / 6                       # a b a b a c: a, b, c distinct
    assert distinct_n(texts, 2) == 3 / 4                       # ab ba ab ac
    assert repetition_rate(texts, 2) == pytest.approx((1 / 3 + 0) / 2)   # ab repeats once of 3; ac alone
    assert distinct_n([], 2) == 0 and repetition_rate(["a"], 2) is None and self_bleu(["a b"]) is None
    assert self_bleu(["the cat sat on the mat"] * 3) == pytest.approx(1.0)
    # disjoint texts of 4 words: every precision is 0 and smoothed to 0.1 / count; no brevity penalty
    want = math.exp(sum(math.log(0.1 / (5 - k)) for k in range(1, 5)) / 4)
    assert self_bleu(["a b c d", "e f g h"]) == pytest.approx(want)
    # clipped counts and the brevity penalty: hyp "a a b" against "a b c d": 1-grams a(clip 1) b = 2/3,
    # 2-grams aa ab: ab = 1/2; BLEU-2 = exp(1 - 4/3) * sqrt(2/3 * 1/2)
    bleu2 = self_bleu(["a a b", "a b c d"], n=2)
    h1 = math.exp(1 - 4 / 3) * math.sqrt(2 / 3 * 1 / 2)
    h2 = math.exp(1 - 3 / 4) * 0 + 1.0 * math.sqrt(2 / 4 * 1 / 3)   # "a b c d" vs "a a b": closest 3 < 4, no bp
    assert bleu2 == pytest.approx((h1 + h2) / 2)


def test_grid_points_and_validation(tmp_path):
    s = Study(model=["llama-125m", "tiny-llama3"], workload={"prompts": PROMPTS},
              engine={"threads": 1, "kv_dtype": ["f16", "q8_0"]},
              sampling={"temperature": [0.3, 1.0], "max_tokens": 8}, repetitions=2)
    pts = s.points()
    assert len(pts) == 2 * 2 * 2 * 2
    assert list(s.axes()) == ["model", "kv_dtype", "temperature"]       # model loads change slowest
    assert [p["model"] for p in pts[:8]] == ["llama-125m"] * 8 and pts[0]["kv_dtype"] == pts[3]["kv_dtype"]
    assert pts[0] == {"threads": 1, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "max_tokens": 8, "seed": 0,
                      "model": "llama-125m", "kv_dtype": "f16", "temperature": 0.3, "rep": 0}
    assert Study.from_json(json.loads(json.dumps(s.to_json()))).points() == pts
    bad = [({"engine": {"thread": 2}}, "unknown engine setting"),
           ({"workload": {"prompts": PROMPTS, "task": "gsm8k"}}, "either prompts"),
           ({"workload": {"task": "gsm8k"}, "sampling": {"temperature": 0.5}}, "task's own settings"),
           ({"workload": {"prompts": str(tmp_path / "none.txt")}}, "cannot read the prompts file"),
           ({"sampling": {"temperature": "hot"}}, "must be a number"),
           ({"repetitions": 0}, "repetitions")]
    for change, msg in bad:
        with pytest.raises(ValueError, match=msg):
            Study(**{"model": "llama-125m", "workload": {"prompts": PROMPTS}, **change})
    grid = tmp_path / "g.yaml"
    (tmp_path / "p.txt").write_text("Once upon a time\n\nThe dog\n")
    grid.write_text("model: llama-125m\nworkload: {prompts: p.txt}\nsampling: {top_p: [0.5, 1.0]}\n")
    s = load(str(grid))
    assert s.prompt_list() == ["Once upon a time", "The dog"] and len(s.points()) == 2
    grid.write_text("model: llama-125m\nworkload: {prompts: p.txt}\nsampler: {}\n")
    with pytest.raises(ValueError, match="unknown key"):
        load(str(grid))


def test_point_measures_outputs(stories_path):
    stories = str(stories_path)
    # one point in this process: its perplexity is that of the engine's own log-probabilities of the
    # sampled tokens (the model's distribution at temperature 1), and it reproduces
    s = Study(model=stories, workload={"prompts": PROMPTS}, engine={"threads": 1},
              sampling={"temperature": 0.8, "top_p": 0.9, "max_tokens": 24, "seed": 3})
    point = s.points()[0]
    rec = run_point(s.to_json(), point)
    llm = LLM(stories, threads=1)
    outs = llm.generate(PROMPTS, [SamplingParams(temperature=0.8, top_p=0.9, max_tokens=24, seed=3 * 1_000_003 + i)
                                  for i in range(len(PROMPTS))])
    assert rec["texts"] == [o.text for o in outs]
    lps = [lp for o in outs for lp in o.logprobs]
    m = rec["metrics"]
    assert m["perplexity"] == pytest.approx(math.exp(-sum(lps) / len(lps)), rel=1e-6)
    assert m["mean_output_tokens"] == sum(len(o.token_ids) for o in outs) / 4
    assert m["cut_share"] == sum(o.finish_reason == "length" for o in outs) / 4
    assert m["distinct_2"] == distinct_n(rec["texts"], 2) and m["outputs"] == 4
    assert rec["timing"]["output_tokens_per_s"] > 0
    assert run_point(s.to_json(), point)["texts"] == rec["texts"]


def test_local_study_records_failures_and_resumes(tmp_path, stories_path):
    stories = str(stories_path)
    s = Study(model=[stories, str(tmp_path / "missing.gguf")], workload={"prompts": PROMPTS[:2]},
              engine={"threads": 1}, sampling={"temperature": [0.5, 1.0], "max_tokens": 12})
    out = tmp_path / "run"
    seen = []
    r = run_study(s, str(out), progress=lambda rec, done, total: seen.append((done, total)))
    assert seen[-1] == (4, 4) and r["failed"] == 2
    bad = [p for p in r["points"] if "error" in p]
    assert {p["params"]["model"] for p in bad} == {str(tmp_path / "missing.gguf")}
    assert all("missing.gguf" in p["error"] for p in bad)
    assert json.loads((out / "result.json").read_text())["failed"] == 2
    with pytest.raises(FileExistsError, match="--resume"):
        run_study(s, str(out))
    # resuming a finished study runs nothing and gives the same records
    assert quality(run_study(None, str(out), resume=True)["points"]) == quality(r["points"])


def test_study_cli_resumes_after_kill(tmp_path, stories_path):
    stories = str(stories_path)
    out = tmp_path / "run"
    prompts = tmp_path / "p.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    cmd = [sys.executable, "-m", "llmbench", "study", "--model", stories, "--prompts", str(prompts), "--threads", "1",
           "--temperature", "0.2,0.4,0.6,0.8,1.0", "--top-p", "0.5,1.0", "--max-tokens", "48"]
    p = subprocess.Popen(cmd + ["--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    log = out / "points.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None:
        if log.exists() and len(log.read_text().splitlines()) >= 3:   # the grid and two points
            break
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = len(log.read_text().splitlines()) - 1
    assert 2 <= before
    r = subprocess.run([sys.executable, "-m", "llmbench", "study", "--resume", str(out), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert len(res["points"]) == 10 and res["failed"] == 0
    keys = [json.dumps(json.loads(line)["params"], sort_keys=True) for line in log.read_text().splitlines()[1:]]
    assert len(keys) == len(set(keys)) == 10                       # nothing measured twice
    r = subprocess.run([sys.executable, "-m", "llmbench", "study", "--resume", str(out), "--out", str(out)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "give no grid and no --out" in r.stderr
    r = subprocess.run([sys.executable, "-m", "llmbench", "study", "--prompts", str(prompts),
                        "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs a model" in r.stderr


def test_ray_executor_gives_the_local_records(tmp_path, stories_path):
    stories = str(stories_path)
    ray = pytest.importorskip("ray")
    s = Study(model=stories, workload={"prompts": PROMPTS}, engine={"threads": 1},
              sampling={"temperature": [0.3, 1.0], "top_p": [0.5, 1.0], "max_tokens": 16}, repetitions=2)
    local = run_study(s, str(tmp_path / "local"))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_study(s, str(tmp_path / "ray"), executor="ray")
    finally:
        ray.shutdown()
    assert on_ray["failed"] == 0 and len(on_ray["points"]) == 8
    assert quality(on_ray["points"]) == quality(local["points"])


def test_task_point(stories_path):
    s = Study(model=str(stories_path), workload={"task": "mmlu", "limit": 3, "subjects": ["anatomy"]},
              engine={"threads": 1, "kv_dtype": ["f16", "f32"]})
    assert [p["kv_dtype"] for p in s.points()] == ["f16", "f32"]
    rec = run_point(s.to_json(), s.points()[1])
    assert 0 <= rec["metrics"]["mmlu/acc"] <= 1 and rec["tasks"]["mmlu"]["acc"]["value"] == rec["metrics"]["mmlu/acc"]


def test_chat_prompts_go_through_the_template():
    # an instruct model: each prompt is a user turn of its chat template; the outputs are what LLM.chat gives
    from models import smollm2_gguf

    model = str(smollm2_gguf())
    s = Study(model=model, workload={"prompts": ["Name a color.", "Say hello."], "chat": True},
              engine={"threads": 2}, sampling={"temperature": 0.0, "max_tokens": 8})
    rec = run_point(s.to_json(), s.points()[0])
    llm = LLM(model, threads=2)
    want = [c.text for c in llm.chat([[{"role": "user", "content": p}] for p in ("Name a color.", "Say hello.")],
                                     SamplingParams(temperature=0.0, max_tokens=8))]
    assert rec["texts"] == want and rec["metrics"]["perplexity"] > 1
