"""Per-sample records written as each document finishes, not when its chunk ends: on the engine
(stories260K, GSM8K in one chunk: the file grows record by record while the chunk decodes), through an
OpenAI-compatible server (tests/eval_server.py, 127.0.0.1) killed mid-chunk and resumed to the same
numbers without a duplicate, and a generation that failed every retry left unrecorded, counted, and
asked again by --resume.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, SHARED

from llmbench.eval import evaluate
from llmbench.eval.openai_adapter import OpenAIAdapter
from llmbench.eval.runner import read_samples

sys.path.insert(0, str(Path(__file__).parent))
from eval_server import MODEL, EvalServer  # noqa: E402

DATA = SHARED / "data"
GEN = " She makes 9 * 2 = $18 every day.\n#### 18\n\nQuestion: 5 more?"


@pytest.fixture(scope="module")
def gsm8k_data():
    if not (DATA / "gsm8k" / "test.jsonl").exists():
        pytest.skip(f"{DATA / 'gsm8k'} not found: the GSM8K data lives in ../shared/data")
    return DATA


def test_engine_records_land_as_each_generation_finishes(stories_path, gsm8k_data, tmp_path):
    """One chunk of 6 questions: each progress call (one a document) finds that many records on disk."""
    seen = []

    def progress(task: str, done: int, total: int) -> None:
        seen.append((done, total, (tmp_path / "samples_gsm8k_cot.jsonl").read_bytes().count(b"\n")))

    res = evaluate(stories_path, "gsm8k_cot", shots=1, limit=6, data_dir=gsm8k_data, threads=2, out=tmp_path,
                   progress=progress)
    assert seen == [(k, 6, k) for k in range(1, 7)]        # record k is on disk when document k is done
    recs = read_samples(tmp_path / "samples_gsm8k_cot.jsonl")
    assert sorted(r["doc_id"] for r in recs) == list(range(6)) and res["gsm8k_cot"].timing["docs_failed"] == 0


def test_the_engine_hands_over_each_generation_as_it_finishes(stories_path):
    """Requests that finish in reverse order reach on_answer in reverse order, the same answers as returned."""
    from llmbench import LLM
    from llmbench.eval.adapters import EngineAdapter
    from llmbench.eval.api import GenerateUntil

    ad = EngineAdapter(LLM(stories_path, threads=1))
    seen = []
    reqs = [GenerateUntil("Once upon a time", (), max_tokens=n, logprobs=2) for n in (24, 8, 1)]
    out = ad.generate_until(reqs, on_answer=lambda i, g: seen.append((i, g)))
    assert [i for i, _ in seen] == [2, 1, 0] and all(g == out[i] for i, g in seen)
    assert [g.n_tokens for g in out] == [24, 8, 1] and len(out[0].top_logprobs[0]) == 2


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmbench", "eval", *args]


def test_a_server_run_killed_mid_chunk_resumes_without_duplicates(gsm8k_data, tmp_path):
    out = tmp_path / "run"
    samples = out / "samples_gsm8k.jsonl"
    with EvalServer() as srv:
        srv.gen_text = GEN
        whole = evaluate(MODEL, "gsm8k", backend="openai", base_url=srv.base_url, shots=0, limit=24,
                         data_dir=gsm8k_data)
        srv.delay_s = 0.4                   # 8 requests at a time: three waves of 0.4 s in one chunk
        p = subprocess.Popen(_cmd("gsm8k", "--backend", "openai", "--base-url", srv.base_url, "--model", MODEL,
                                  "--shots", "0", "--limit", "24", "--data-dir", str(gsm8k_data), "--out", str(out)),
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not samples.exists() or samples.read_bytes().count(b"\n") < 2):
            time.sleep(0.01)
        p.send_signal(signal.SIGKILL)
        p.wait()
        n_before = samples.read_bytes().count(b"\n")
        assert 2 <= n_before < 24, "the run should have been killed inside its one chunk"
        srv.delay_s = 0.0
        r = subprocess.run(_cmd("--resume", str(out), "--json"), cwd=ROOT, capture_output=True, text=True,
                           timeout=120, env=dict(os.environ))
    assert r.returncode == 0, r.stderr
    t = json.loads(r.stdout)["tasks"]["gsm8k"]
    assert t["timing"]["docs_resumed"] == n_before and t["timing"]["docs_computed"] == 24 - n_before
    assert t["metrics"] == json.loads(json.dumps(whole["gsm8k"].to_json()))["metrics"]
    recs = read_samples(samples)
    assert sorted(x["doc_id"] for x in recs) == list(range(24))      # each once


def test_a_failed_generation_is_not_recorded_and_resume_asks_again(gsm8k_data, tmp_path):
    with EvalServer() as srv:
        srv.gen_text = GEN
        srv.faults = ["503", "drop_mid"]    # question 0's request and its one retry
        failing = OpenAIAdapter(srv.base_url, MODEL, retries=1, backoff=0.01, concurrency=1)
        res = evaluate(failing, "gsm8k", shots=0, limit=3, data_dir=gsm8k_data, out=tmp_path)
        t = res["gsm8k"]
        assert t.timing["docs_failed"] == 1 and t.timing["docs_computed"] == 2
        assert "gsm8k #0: " in t.timing["errors"][0] and "connection dropped mid-stream" in t.timing["errors"][0]
        assert t.aggregate["metrics"]["exact_match,strict-match"]["n"] == 2       # left out, not scored wrong
        assert t.metric("exact_match,strict-match") == 0.0
        assert [r["doc_id"] for r in read_samples(tmp_path / "samples_gsm8k.jsonl")] == [1, 2]
        assert res.adapter_stats["failures"] == 1
        again = evaluate(OpenAIAdapter(srv.base_url, MODEL, backoff=0.01), "gsm8k", shots=0, limit=3,
                         data_dir=gsm8k_data, out=tmp_path, resume=True)
    t = again["gsm8k"]
    assert (t.timing["docs_resumed"], t.timing["docs_computed"], t.timing["docs_failed"]) == (2, 1, 0)
    assert sorted(r["doc_id"] for r in read_samples(tmp_path / "samples_gsm8k.jsonl")) == [0, 1, 2]
    assert t.metric("exact_match,strict-match") == pytest.approx(1 / 3)       # question 0 (#### 18) is right
    assert t.aggregate["metrics"]["exact_match,strict-match"]["n"] == 3


def test_answers_read_back_as_written():
    """answer_from_json inverts answer_json (through a JSON line) for each kind of answer, and refuses a dict
    that is none of them."""
    from llmbench import LLMBenchError
    from llmbench.eval.api import Generation, LLAnswer, RollingAnswer, answer_from_json, answer_json

    answers = [LLAnswer(-1.25, True), LLAnswer(-0.1 - 0.2, False), RollingAnswer(-123.456789, 17),
               Generation("Hi there", "stop"),
               Generation(" one two", "length", n_tokens=2, token_logprobs=[-0.5, -1 / 3],
                          top_logprobs=[{" one": -0.5, " uno": -1.5}, {" two": -1 / 3}], tokens=[" one", " two"])]
    for a in answers:
        back = answer_from_json(json.loads(json.dumps(answer_json(a))))
        assert back == a and type(back) is type(a)
    for bad in ({"logprob": -1.0}, {"text": "x"}, {"text": "x", "finish_reason": "stop", "colour": 1}, [1, 2]):
        with pytest.raises(LLMBenchError, match="not an answer"):
            answer_from_json(bad)


def test_resumed_rounds_stop_where_the_task_asks_otherwise_or_the_judge():
    """A three-round task (answer, judge, revise): recorded rounds are taken while their requests equal what
    the task asks; with rejudge, only those before the judge's round."""
    from llmbench.eval.api import Doc, ForJudge, GenerateUntil, Generation, Scored, Task
    from llmbench.eval.runner import _partial, resumed_rounds

    class Revise(Task):
        name = "revise"

        def docs(self):
            return [Doc(0, "", {"q": "Q?"})]

        def requests(self, doc):
            return [GenerateUntil(doc.data["q"], max_tokens=8)]

        def followup(self, doc, answers):
            if len(answers) == 1:
                return [ForJudge(GenerateUntil("Judge: " + answers[0].text))]
            return [GenerateUntil(f"Revise {answers[0].text} after {answers[1].text}")] if len(answers) == 2 else []

        def score(self, doc, answers):
            return Scored({"acc": 1.0})

    t = Revise()
    d = t.docs()[0]
    a1, a2 = Generation("A", "stop", n_tokens=1), Generation("[[7]]", "stop")
    rec = {1: _partial(t, d, 1, t.requests(d), [a1]), 2: _partial(t, d, 2, t.followup(d, [a1]), [a2])}
    rec = json.loads(json.dumps(rec, ensure_ascii=False), object_hook=lambda o: {int(k) if k.isdigit() else k: v
                                                                                for k, v in o.items()})
    reqs, got, nxt, n, why = resumed_rounds(t, d, rec)
    assert (got, n, why) == ([a1, a2], 2, None) and nxt == [GenerateUntil("Revise A after [[7]]")]
    assert len(reqs) == 2 and isinstance(reqs[1], ForJudge)
    reqs, got, nxt, n, why = resumed_rounds(t, d, rec, rejudge=True)
    assert (got, n, why) == ([a1], 1, None) and nxt == [ForJudge(GenerateUntil("Judge: A"))]
    rec[2]["requests"][0]["request"]["context"] = "Judge: B"
    reqs, got, nxt, n, why = resumed_rounds(t, d, rec)
    assert (got, n) == ([a1], 1) and why == "round 2's recorded requests differ from what the task asks now"
    rec[1]["answers"] = [{"text": "A"}]
    n, why = resumed_rounds(t, d, rec)[3:]
    assert n == 0 and why.startswith("round 1: not an answer as answer_json writes it (") and "finish_reason" in why
