"""The evaluation core: MMLU prompts byte for byte as lm-eval builds them, the engine adapter (prefix
sharing changes nothing, rolling windows), lm-eval's aggregation, results.json against its schema,
resume after a kill, and `llmbench eval` on the real stories260K model and MMLU data."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import jsonschema
import numpy as np
import pytest
from conftest import ROOT, SHARED

from llmbench import LLM
from llmbench.eval import evaluate, make_task
from llmbench.eval.adapters import EngineAdapter, rolling_windows
from llmbench.eval.api import Loglikelihood, LoglikelihoodRolling
from llmbench.eval.data import DataNotFoundError
from llmbench.eval.metrics import aggregate, mean_stderr, paired_difference_ci, pooled_sample_stderr, wilson
from llmbench.eval.results import SCHEMA, schema_json
from llmbench.eval.runner import read_samples

DATA = SHARED / "data"


@pytest.fixture(scope="module")
def mmlu_data():
    if not (DATA / "mmlu").is_dir():
        pytest.skip(f"{DATA / 'mmlu'} not found: the MMLU data lives in ../shared/data")
    return DATA


@pytest.fixture(scope="module")
def llm(stories_path):
    return LLM(stories_path, threads=2, ctx=512)


# ---- prompts ----

GEO_Q = ("The main factor preventing subsistence economies from advancing economically is the lack of\n"
         "A. a currency.\nB. a well-connected transportation infrastructure.\nC. government activity.\n"
         "D. a banking service.\nAnswer:")
GEO_SHOT = ("The rate of natural increase of a population is found by subtracting the\n"
            "A. crude death rate from the crude birth date.\nB. crude birth rate from the crude death rate.\n"
            "C. doubling time from the crude birth rate.\nD. fertility rate from the crude death rate.\nAnswer: A")
GEO_HEAD = "The following are multiple choice questions (with answers) about high school geography.\n\n"


def test_mmlu_prompt_bytes(mmlu_data):
    t0 = make_task("mmlu", shots=0, limit=1, subjects=["high_school_geography"], data_dir=mmlu_data)
    t1 = make_task("mmlu", shots=1, limit=1, subjects=["high_school_geography"], data_dir=mmlu_data)
    d = t0.docs()[0]
    assert t0.prompt(d) == GEO_HEAD + GEO_Q
    assert t1.prompt(t1.docs()[0]) == GEO_HEAD + GEO_SHOT + "\n\n" + GEO_Q
    reqs = t1.requests(t1.docs()[0])
    assert [r.continuation for r in reqs] == [" A", " B", " C", " D"]
    assert all(r.context == GEO_HEAD + GEO_SHOT + "\n\n" + GEO_Q for r in reqs)
    assert d.data["question"].answer == 1


def test_mmlu_subjects_and_groups(mmlu_data):
    t = make_task("mmlu", shots=5, subjects=["stem"], data_dir=mmlu_data)
    assert len(t.subjects) == 19 and "anatomy" in t.subjects   # lm-eval puts anatomy in stem
    full = make_task("mmlu", data_dir=mmlu_data)
    assert len(full.subjects) == 57 and len(full.docs()) == 14042
    assert set(full.groups().values()) == {"stem", "humanities", "social sciences", "other"}
    assert full.prompt(full.docs()[0]).count("\nAnswer: ") == 5
    with pytest.raises(ValueError, match="unknown subject 'astrology'"):
        make_task("mmlu", subjects=["astrology"], data_dir=mmlu_data)
    with pytest.raises(ValueError, match="few-shot examples"):
        make_task("mmlu", shots=6, subjects=["anatomy"], data_dir=mmlu_data)


def test_missing_data_says_where(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_DATA", str(tmp_path / "nowhere"))
    monkeypatch.chdir(tmp_path)
    from llmbench.eval import data

    monkeypatch.setattr(data, "_CHECKOUT", tmp_path / "checkout")
    with pytest.raises(DataNotFoundError, match=r"looked in .*given/mmlu.*--data-dir"):
        make_task("mmlu", data_dir=tmp_path / "given")


# ---- aggregation ----

def test_schema_doc_is_current():
    doc = ROOT / "docs" / "eval-results.schema.json"
    assert doc.read_text() == schema_json(), "regenerate: python -m llmbench.eval.results > docs/eval-results.schema.json"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_stderr_formulas():
    x = [1.0, 0.0, 1.0, 1.0, 0.0]
    assert mean_stderr(x) == pytest.approx(np.std(x, ddof=1) / math.sqrt(5))
    assert mean_stderr([1.0]) is None
    # lm-eval's pooled_sample_stderr, written out for two members
    se, n = [0.1, 0.2], [10, 30]
    want = math.sqrt(((9 * 0.01 * 10) + (29 * 0.04 * 30)) / 38 / 40)
    assert pooled_sample_stderr(se, n) == pytest.approx(want)
    lo, hi = wilson(0, 10)
    assert lo == 0 and 0.27 < hi < 0.28          # 0/10: [0, 0.278]
    lo, hi = wilson(5, 10)
    assert lo == pytest.approx(1 - hi)


def test_paired_difference_interval_by_hand():
    # Agresti-Min: b' = b + 1/2, c' = c + 1/2, n' = n + 2, d = (b' - c') / n',
    # se = sqrt(b' + c' - (b' - c')^2 / n') / n'
    lo, hi = paired_difference_ci(0, 0, 100)   # no question changed: d 0, se 1 / 102
    assert lo == pytest.approx(-1.959963984540054 / 102) and hi == pytest.approx(1.959963984540054 / 102)
    lo, hi = paired_difference_ci(3, 1, 100)   # d = 2 / 102, se = sqrt(5 - 4 / 102) / 102
    se = (5 - 4 / 102) ** 0.5 / 102
    assert (lo, hi) == pytest.approx((2 / 102 - 1.959963984540054 * se, 2 / 102 + 1.959963984540054 * se))
    assert paired_difference_ci(50, 0, 50)[1] == 1.0 and paired_difference_ci(0, 0, 0) is None


def test_wilson_ends_are_exact():
    """An all-wrong or all-right run's interval contains its estimate (rounding once put 0/3's lower
    bound at 5.6e-17)."""
    for n in range(1, 50):
        assert wilson(0, n)[0] == 0.0 and wilson(n, n)[1] == 1.0
        assert 0.0 < wilson(0, n)[1] < 1.0 and 0.0 < wilson(n, n)[0] < 1.0


def test_aggregate_weights_by_size():
    recs = ([{"subject": "a", "metrics": {"acc": v}} for v in (1, 1, 0, 0)] +
            [{"subject": "b", "metrics": {"acc": v}} for v in (1, 0, 0, 0, 0, 0, 0, 0)] +
            [{"subject": "c", "metrics": {"acc": v}} for v in (1, 1)])
    agg = aggregate(recs, ["acc"], {"a": "g1", "b": "g1", "c": "g2"}, "t")
    assert agg["subjects"]["a"]["acc"]["value"] == 0.5
    g1 = agg["groups"]["g1"]["acc"]
    assert g1["value"] == pytest.approx(3 / 12) and g1["n"] == 12 and g1["macro"] == pytest.approx((0.5 + 0.125) / 2)
    top = agg["metrics"]["acc"]
    assert top["value"] == pytest.approx(5 / 14)               # micro: every document counts once
    assert top["macro"] == pytest.approx((0.5 + 0.125 + 1) / 3)
    assert top["stderr"] == pytest.approx(pooled_sample_stderr([g1["stderr"], agg["groups"]["g2"]["acc"]["stderr"]],
                                                               [12, 2]))


# ---- the engine adapter ----

def test_prefix_sharing_changes_nothing(llm, mmlu_data):
    t = make_task("mmlu", shots=1, limit=3, subjects=["high_school_geography", "virology"], data_dir=mmlu_data)
    reqs = [r for d in t.docs() for r in t.requests(d)]
    shared = EngineAdapter(llm).answer(reqs)
    alone = EngineAdapter(llm, share_prefix=False)
    whole = alone.answer(reqs)
    assert [(a.logprob, a.greedy) for a in shared] == [(a.logprob, a.greedy) for a in whole]
    # sharing computed the header once: far fewer tokens than the unshared run
    a = EngineAdapter(llm)
    a.answer(reqs)
    assert a.stats["prompt_tokens"] == alone.stats["prompt_tokens"]
    assert a.stats["computed_tokens"] * 3 < alone.stats["computed_tokens"]


def test_rolling_windows_cover_once():
    toks = list(range(100, 123))
    ws = rolling_windows(toks, 1, 8)
    scored = [t for ids, n in ws for t in ids[n:]]
    assert scored == toks
    assert ws[0][0][0] == 1 and all(len(ids) <= 9 for ids, _ in ws)
    assert ws[1][0][0] == toks[7]                 # a later window starts from the token before it
    assert rolling_windows([], 1, 8) == []


def test_loglikelihood_rolling_matches_logits(llm):
    text = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."
    ids = llm.tokenize(text, add_bos=False)
    ad = EngineAdapter(llm)
    got = ad.answer([LoglikelihoodRolling(text)])[0]
    full = [llm.tokenizer.bos_id, *ids]
    lg = llm.logits(full).astype(np.float64)
    lp = lg - np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1, keepdims=True)) - lg.max(1, keepdims=True)
    want = sum(lp[i, full[i + 1]] for i in range(len(ids)))
    assert got.n_tokens == len(ids)
    assert got.logprob == pytest.approx(want, rel=1e-5, abs=1e-4)
    # windows of 16 tokens: each window scored from its own logits (the token before it, then its 16)
    small = EngineAdapter(LLM(llm.path, threads=2, ctx=16))
    got = small.answer([LoglikelihoodRolling(text)])[0]
    want = 0.0
    for w, n in rolling_windows(ids, llm.tokenizer.bos_id, 16):
        lg = llm.logits(w).astype(np.float64)
        lp = lg - lg.max(1, keepdims=True)
        lp -= np.log(np.exp(lp).sum(1, keepdims=True))
        want += sum(lp[i - 1, w[i]] for i in range(n, len(w)))
    assert got.n_tokens == len(ids) and len(ids) > 16                 # two windows at least
    assert got.logprob == pytest.approx(want, rel=1e-5, abs=1e-4)


def test_loglikelihood_answers_in_order(llm):
    reqs = [Loglikelihood("Once upon a time", " there"), Loglikelihood("Lily", " was"),
            Loglikelihood("Once upon a time", " Lily")]
    out = EngineAdapter(llm).answer(reqs)
    want = llm.loglikelihood([(r.context, r.continuation) for r in reqs])
    assert [(a.logprob, a.greedy) for a in out] == want


# ---- the runner, results and resume ----

def test_evaluate_mmlu_end_to_end(stories_path, mmlu_data, tmp_path):
    subjects = ["abstract_algebra", "high_school_geography", "philosophy", "virology"]
    res = evaluate(stories_path, "mmlu", shots=2, limit=4, subjects=subjects, data_dir=mmlu_data, threads=2,
                   out=tmp_path, precision_check=3)
    doc = json.loads((tmp_path / "results.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    m = doc["tasks"]["mmlu"]
    assert set(m["subjects"]) == set(subjects)
    assert set(m["groups"]) == {"stem", "social sciences", "humanities", "other"}
    recs = read_samples(tmp_path / "samples_mmlu.jsonl")
    assert len(recs) == 16
    accs = [r["metrics"]["acc"] for r in recs]
    assert m["metrics"]["acc"]["value"] == pytest.approx(np.mean(accs))
    assert m["metrics"]["acc"]["n"] == 16
    for r in recs:   # the record's prediction is the argmax of its four answers
        lls = [a["logprob"] for a in r["answers"]]
        assert r["pred"] == "ABCD"[int(np.argmax(lls))]
        assert r["metrics"]["acc"] == float(r["pred"] == r["target"])
        assert r["prompt"].endswith("\nAnswer:") and all("context" not in q for q in r["requests"])
    env = doc["environment"]
    assert env["model"]["sha256"] and env["backend"] == "cpu" and env["activations"] == "q8"
    assert doc["precision_check"]["mmlu"]["docs"] == 3
    assert res["mmlu"].metric("acc") == m["metrics"]["acc"]["value"]
    df = res.to_dataframe()
    assert set(df["level"]) == {"task", "group", "subject"} and len(df[df.level == "subject"]) == 4
    assert "| mmlu |" in res.markdown()


def _eval_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmbench", "eval", *args]


def test_resume_after_kill(stories_path, mmlu_data, tmp_path):
    """A run killed mid-way, with its last line cut, resumes to the same numbers as one whole run."""
    args = ["mmlu", "--model", str(stories_path), "--subjects", "abstract_algebra,virology,philosophy",
            "--limit", "6", "--shots", "1", "--threads", "2", "--data-dir", str(mmlu_data)]
    whole = evaluate(stories_path, "mmlu", shots=1, limit=6, subjects=["abstract_algebra", "virology", "philosophy"],
                     data_dir=mmlu_data, threads=2, chunk=2)
    out = tmp_path / "run"
    env = dict(os.environ)
    p = subprocess.Popen(_eval_cmd(*args, "--chunk", "2", "--out", str(out)), env=env, cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = out / "samples_mmlu.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not samples.exists() or samples.read_bytes().count(b"\n") < 2):
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    n_before = samples.read_bytes().count(b"\n")
    assert 2 <= n_before < 18, "the run should have been killed part way"
    with open(samples, "ab") as f:                         # a record cut by the kill
        f.write(b'{"task": "mmlu", "subject": "virol')
    r = subprocess.run(_eval_cmd("--resume", str(out), "--chunk", "2", "--json"), env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    t = doc["tasks"]["mmlu"]
    assert t["timing"]["docs_resumed"] == n_before and t["timing"]["docs_computed"] == 18 - n_before
    want = json.loads(json.dumps(whole["mmlu"].to_json()))
    assert t["metrics"] == want["metrics"] and t["subjects"] == want["subjects"]
    recs = read_samples(samples)
    assert len(recs) == 18 and len({(x["subject"], x["doc_id"]) for x in recs}) == 18
    by_key = {(x["subject"], x["doc_id"]): x for x in whole["mmlu"].records}
    for x in recs:
        assert x["answers"] == by_key[(x["subject"], x["doc_id"])]["answers"]


def test_resume_refuses_other_settings(stories_path, mmlu_data, tmp_path):
    evaluate(stories_path, "mmlu", shots=1, limit=1, subjects=["virology"], data_dir=mmlu_data, threads=2, out=tmp_path)
    with pytest.raises(Exception, match=r"other settings.*shots"):
        evaluate(stories_path, "mmlu", shots=0, limit=1, subjects=["virology"], data_dir=mmlu_data, threads=2,
                 out=tmp_path, resume=True)


def test_cli_eval_and_errors(stories_path, mmlu_data, tmp_path):
    r = subprocess.run(_eval_cmd("mmlu", "--model", str(stories_path), "--subjects", "virology", "--limit", "2",
                                 "--shots", "0", "--threads", "2", "--data-dir", str(mmlu_data), "--markdown",
                                 "--out", str(tmp_path / "o")), cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "| mmlu |" in r.stdout and "questions in" in r.stdout
    assert (tmp_path / "o" / "results.json").exists()
    bad = [(["mmlux", "--model", str(stories_path)], "unknown task 'mmlux'"),
           (["mmlu"], "--model is required"),
           (["mmlu", "--model", str(stories_path), "--data-dir", str(tmp_path / "none")], "data not found"),
           (["mmlu", "--model", str(stories_path), "--backend", "openai"], "needs --base-url"),
           (["--resume", str(tmp_path / "nothing")], "run.json not found")]
    for args, msg in bad:
        r = subprocess.run(_eval_cmd(*args), cwd=ROOT, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "LLMBENCH_DATA": str(tmp_path / "none")})
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


# ---- the same task through a server ----

def test_mmlu_through_an_openai_server(mmlu_data, tmp_path):
    """The runner and MMLU do not know which adapter answers: through the test server (whose table
    gives every answer letter -1.0, so each question ties and picks A) the records hold the server's
    sums, and the CLI reports a server without prompt log-probabilities in one line."""
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    with EvalServer() as srv:
        res = evaluate(MODEL, "mmlu", backend="openai", base_url=srv.base_url, shots=1, limit=2,
                       subjects=["virology"], data_dir=mmlu_data, out=tmp_path)
        recs = res["mmlu"].records
        assert len(recs) == 2 and all(r["precision"] == "server" for r in recs)
        assert all(a["logprob"] == -1.0 for r in recs for a in r["answers"])   # " A" .. " D": one token each
        assert all(r["pred"] == "A" for r in recs)                           # a tie goes to the first letter
        assert res.environment["backend"] == "openai" and res.environment["requests"] >= 8
        srv.echo = "reject"
        r = subprocess.run(_eval_cmd("mmlu", "--backend", "openai", "--base-url", srv.base_url, "--model", MODEL,
                                     "--subjects", "virology", "--limit", "1", "--data-dir", str(mmlu_data)),
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "prompt log-probabilities" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_generate_until_on_the_engine(llm):
    from llmbench import SamplingParams
    from llmbench.eval.api import GenerateUntil

    ad = EngineAdapter(llm)
    out = ad.answer([GenerateUntil("Once upon a time", ("park",), max_tokens=40),
                     GenerateUntil("Lily", (), max_tokens=5, logprobs=2)])
    whole = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=40))[0].text
    assert "park" in whole, whole                  # the model's greedy story reaches the park
    assert out[0].text == whole[: whole.index("park")] and out[0].finish_reason == "stop"
    assert out[1].finish_reason == "length" and out[1].n_tokens == 5 and len(out[1].token_logprobs) == 5
    assert all(len(d) == 2 and max(d.values()) <= 0 for d in out[1].top_logprobs)


def test_cli_perplexity_and_kld(stories_path, tmp_path):
    text = tmp_path / "story.txt"
    story = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
             "One day, she saw a big red ball under a tree. ")
    text.write_text(story * 12)
    r = subprocess.run(_eval_cmd("perplexity,kld", "--model", str(stories_path), "--base-model", str(stories_path),
                                 "--text", str(text), "--ctx", "64", "--threads", "2", "--out", str(tmp_path / "o")),
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "perplexity of stories260K.gguf: PPL = " in r.stdout and "mean KLD 0.000000" in r.stdout
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert doc["perplexity"]["ctx"] == 64 and doc["kld"]["same_top"] == 1.0
    assert doc["perplexity"]["ppl"] == pytest.approx(doc["kld"]["ppl"])
    r = subprocess.run(_eval_cmd("kld", "--model", str(stories_path), "--text", str(text)), cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "needs base_model" in r.stderr
