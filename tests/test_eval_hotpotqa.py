"""hotpotqa (distractor setting): the prompt byte for byte, HotpotQA's official EM and F1 against
hand-computed values, end to end on stories260K with resume, and through the OpenAI-compatible test server."""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest
from conftest import ROOT, SHARED

from llmbench.eval import evaluate, make_task
from llmbench.eval.api import Generation
from llmbench.eval.data import DataNotFoundError
from llmbench.eval.metrics import mean_stderr, pooled_sample_stderr, wilson
from llmbench.eval.results import SCHEMA
from llmbench.eval.runner import read_samples
from llmbench.eval.tasks.hotpotqa import exact_match, f1, first_line, normalize_answer

DATA = SHARED / "data"
INSTR = "Answer the question based on the given passages. Only give me the answer and do not output any other words."


@pytest.fixture(scope="module")
def hotpot_data():
    if not (DATA / "hotpotqa").is_dir():
        pytest.skip(f"{DATA / 'hotpotqa'} not found: the HotpotQA data lives in ../shared/data")
    return DATA


# ---- metrics, by hand ----

def test_normalize_answer():
    assert normalize_answer("The Eiffel Tower!") == "eiffel tower"
    assert normalize_answer("  A  man,  a plan ") == "man plan"
    assert normalize_answer("Theatre") == "theatre"            # "the" only as a word
    assert normalize_answer("U.S.A.") == "usa"


@pytest.mark.parametrize("pred, gold, em, f", [
    ("the Beatles", "Beatles", 1.0, 1.0),
    ("New York City", "new york", 0.0, 0.8),                     # p 2/3, r 1: 2 * (2/3) / (5/3)
    ("Ed Wood", "Edward Wood", 0.0, 0.5),                        # p 1/2, r 1/2
    ("paris paris london", "paris london london", 0.0, 2 / 3),   # common words counted with multiplicity
    ("yes", "yes", 1.0, 1.0),
    ("Yes.", "yes", 1.0, 1.0),
    ("yes", "no", 0.0, 0.0),
    ("yes it is", "yes", 0.0, 0.0),                              # the gold is yes/no and they differ: 0
    ("no", "no way out", 0.0, 0.0),                              # the prediction is yes/no and they differ: 0
    ("noanswer", "x", 0.0, 0.0),
    ("", "Paris", 0.0, 0.0),
    ("London", "Paris", 0.0, 0.0),
])
def test_em_f1(pred, gold, em, f):
    assert exact_match(pred, gold) == em
    assert f1(pred, gold) == pytest.approx(f, abs=1e-12)


def test_first_line():
    assert first_line(" Paris\nQuestion: x") == "Paris"
    assert first_line("\n\n  London  \nmore") == "London"
    assert first_line("") == first_line(" \n ") == ""


# ---- prompts ----

def _tiny(tmp_path):
    d = tmp_path / "hotpotqa"
    d.mkdir()
    rows = [{"_id": "a1", "question": "Who?", "answer": "Bob", "type": "bridge", "level": "hard",
             "context": [["T1", ["One.", " Two."]], ["T2", ["Three."]]], "supporting_facts": [["T1", 0]]},
            {"_id": "b2", "question": "Same?", "answer": "no", "type": "comparison", "level": "hard",
             "context": [["X", ["x."]]], "supporting_facts": []},
            {"_id": "c3", "question": "Where?", "answer": "Rome", "type": "bridge", "level": "hard",
             "context": [["R", ["r."]]], "supporting_facts": []},
            {"_id": "d4", "question": "Which?", "answer": "Bob Smith", "type": "comparison", "level": "hard",
             "context": [["B", ["b."]]], "supporting_facts": []}]
    (d / "hotpot_dev_distractor_v1.json").write_text(json.dumps(rows))
    return tmp_path


def test_prompt_bytes(tmp_path, hotpot_data):
    t = make_task("hotpotqa", data_dir=_tiny(tmp_path))
    docs = t.docs()
    assert [(d.subject, d.id) for d in docs] == [("bridge", 0), ("bridge", 2), ("comparison", 1), ("comparison", 3)]
    assert t.prompt(docs[0]) == (INSTR + "\n\nThe following are given passages.\nPassage 1:\nT1\nOne. Two.\n"
                                 "Passage 2:\nT2\nThree.\n\n" + INSTR + "\n\nQuestion: Who?\nAnswer:")
    r = t.requests(docs[0])[0]
    assert r.until == ("\n\n", "Question:", "</s>", "<|im_end|>") and r.max_tokens == 32 and r.temperature == 0.0
    real = make_task("hotpotqa", limit=1, data_dir=hotpot_data)
    p = real.prompt(real.docs()[0])
    assert p.startswith(INSTR + "\n\nThe following are given passages.\nPassage 1:\nEd Wood (film)\nEd Wood is a "
                        "1994 American biographical period comedy-drama film directed and produced by Tim Burton, "
                        "and starring Johnny Depp as cult filmmaker Ed Wood. The film concerns the period in Wood's "
                        "life when he made his best-known films as well as his relationship with actor Bela Lugosi")
    assert "\nPassage 2:\nScott Derrickson\nScott Derrickson (born July 16, 1966) is an American director" in p
    assert p.count("\nPassage ") == 10 and "\nPassage 10:\n" in p
    assert p.endswith("\n\n" + INSTR + "\n\nQuestion: Were Scott Derrickson and Ed Wood of the same nationality?"
                      "\nAnswer:")
    s = real.score(real.docs()[0], [Generation(" Yes, both American.\n", "stop")])
    assert s.pred == "Yes, both American." and s.metrics == {"em": 0.0, "f1": 0.0} and s.target == "yes"
    assert real.score(real.docs()[0], [Generation(" yes", "stop")]).metrics == {"em": 1.0, "f1": 1.0}
    with pytest.raises(DataNotFoundError, match="hotpot_dev_distractor_v1.json"):
        (tmp_path / "e" / "hotpotqa").mkdir(parents=True)
        make_task("hotpotqa", data_dir=tmp_path / "e")


# ---- end to end ----

def test_hotpotqa_end_to_end_with_resume(stories_path, hotpot_data, tmp_path):
    out = tmp_path / "run"
    args = ["hotpotqa", "--model", str(stories_path), "--limit", "4", "--threads", "2", "--chunk", "2",
            "--data-dir", str(hotpot_data), "--out", str(out), "--json"]
    r = subprocess.run([sys.executable, "-m", "llmbench", "eval", *args], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    whole = json.loads(r.stdout)
    jsonschema.validate(whole, SCHEMA)
    t = whole["tasks"]["hotpotqa"]
    recs = read_samples(out / "samples_hotpotqa.jsonl")
    assert len(recs) == 4 and {x["subject"] for x in recs} <= {"bridge", "comparison"}
    for x in recs:
        assert x["pred"] == first_line(x["answers"][0]["text"])
        assert x["metrics"] == {"em": exact_match(x["pred"], x["target"]), "f1": f1(x["pred"], x["target"])}
    assert t["metrics"]["em"]["n"] == 4 and t["metrics"]["em"]["ci95"] is not None
    assert whole["adapter_stats"]["truncated"] == 4      # ten paragraphs outgrow stories260K's 2,048 tokens
    samples = out / "samples_hotpotqa.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    samples.write_bytes(lines[0] + lines[1][:40])
    r = subprocess.run([sys.executable, "-m", "llmbench", "eval", "--resume", str(out), "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    assert again["tasks"]["hotpotqa"]["timing"]["docs_resumed"] == 1
    assert again["tasks"]["hotpotqa"]["metrics"] == t["metrics"]
    assert samples.read_bytes() == b"".join(lines)


def test_hotpotqa_through_an_openai_server(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    root = _tiny(tmp_path)
    with EvalServer() as srv:
        srv.gen_text = " Bob Smith\n\nQuestion: more"
        srv.faults = ["drop"]                                   # a dropped connection is retried
        res = evaluate(MODEL, "hotpotqa", backend="openai", base_url=srv.base_url, data_dir=root, out=tmp_path / "o")
        task = make_task("hotpotqa", data_dir=root)
        bodies = srv.bodies()
        assert len(bodies) == 5                                  # one sent twice
        assert sorted({b["prompt"] for b in bodies}) == sorted(task.prompt(d) for d in task.docs())
        assert all(b["stop"] == ["\n\n", "Question:", "</s>", "<|im_end|>"] and b["max_tokens"] == 32 for b in bodies)
        recs = {r["doc_id"]: r for r in res["hotpotqa"].records}
        assert recs[0]["pred"] == "Bob Smith" and recs[0]["metrics"] == {"em": 0.0, "f1": pytest.approx(2 / 3)}
        assert recs[1]["metrics"] == {"em": 0.0, "f1": 0.0}    # gold "no"
        assert recs[3]["metrics"] == {"em": 1.0, "f1": 1.0}
        m = res["hotpotqa"].aggregate["metrics"]
        assert m["em"]["value"] == 0.25 and m["em"]["ci95"] == pytest.approx(list(wilson(1, 4)))
        f = m["f1"]
        se = pooled_sample_stderr([mean_stderr([2 / 3, 0]), mean_stderr([0, 1])], [2, 2])   # bridge, comparison
        assert f["value"] == pytest.approx(5 / 12) and f["stderr"] == pytest.approx(se)
        assert f["ci95"] == pytest.approx([f["value"] - 1.959963984540054 * f["stderr"],
                                           f["value"] + 1.959963984540054 * f["stderr"]])
        assert res.adapter_stats["retries"] == 1
