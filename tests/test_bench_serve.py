"""benchmarks/bench_serve.py against live `llmbench serve` processes on stories260K: prompts from a dataset
file reach both batching policies, which answer every request with the same number of tokens (greedy
answers are batch-invariant, so a policy changes only when tokens come, never which); the table and the
JSON carry what the closing notes quote; a file that holds no prompts is refused before any server starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_serve.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=300)


def test_dataset_prompts_through_both_policies(stories_path, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in
                               ["Once upon a time, there was a little dog", "Tom and Sue went to the park",
                                "The sun was hot", "Lily had a red ball", "One day"]))
    out = tmp_path / "serve.json"
    r = run("--model", str(stories_path), "--threads", "1", "--servers", "llmbench,llmbench-static", "--rates",
            "inf", "--requests", "4", "--warmup", "1", "--max-batch", "2", "--output-len", "24", "--range-ratio", "0.5",
            "--dataset", str(prompts), "--until-eos", "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    runs = {s["server"]: s["rates"]["inf"] for s in doc["results"]}
    assert set(runs) == {"llmbench", "llmbench-static"}
    for m in runs.values():
        assert m["failed"] == 0 and m["completed"] == 4
        assert len(m["output_lengths"]) == 4 and sum(m["output_lengths"]) == m["output_tokens"]
        assert all(12 <= n <= 36 for n in m["output_lengths"])   # each request's cap, drawn in [24 (1 -+ 0.5)]
        assert m["input_tokens"] < 4 * 16   # the file's short prompts, not 64 random words each
    assert runs["llmbench"]["output_lengths"] == runs["llmbench-static"]["output_lengths"]
    assert len(set(runs["llmbench"]["output_lengths"])) > 1   # the caps differ, so the lengths do
    row = next(line for line in r.stdout.splitlines() if line.startswith("| llmbench-static | inf"))
    assert f"| {runs['llmbench-static']['output_tokens'] / 4:.0f} |" in row   # tokens / request


def test_a_file_without_prompts_is_refused(stories_path, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"neither": 1}\n')
    r = run("--model", str(stories_path), "--dataset", str(bad))
    assert r.returncode == 2 and "--dataset" in r.stderr and "no prompt found" in r.stderr
