"""GSM8K as lm-eval's gsm8k and gsm8k_cot: prompts byte for byte for real questions, the few-shot draws of
lm-eval's default sampler, the strict and flexible filters and exact match's normalisation on crafted
outputs, both tasks end to end on the real stories260K model (records, resume, results) and through the
OpenAI-compatible test server (tests/eval_server.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jsonschema
import pytest
from conftest import ROOT, SHARED

from llmbench import LLM, SamplingParams
from llmbench.eval import evaluate, make_task
from llmbench.eval.data import DataNotFoundError
from llmbench.eval.results import SCHEMA
from llmbench.eval.runner import read_samples
from llmbench.eval.tasks.gsm8k import FLEXIBLE, GSM8K, GSM8KCoT, exact_match, normalize, regex_filter

DATA = SHARED / "data"
STRICT = "exact_match,strict-match"
FLEX = "exact_match,flexible-extract"


@pytest.fixture(scope="module")
def gsm8k_data():
    if not (DATA / "gsm8k" / "test.jsonl").exists():
        pytest.skip(f"{DATA / 'gsm8k'} not found: the GSM8K data lives in ../shared/data")
    return DATA


# ---- prompts ----

JANET = ("Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for "
         "her friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh "
         "duck egg. How much in dollars does she make every day at the farmers' market?")
ROBE = "A robe takes 2 bolts of blue fiber and half that much white fiber.  How many bolts in total does it take?"

# lm-eval's gsm8k_cot prompt of test question 0, written out from gsm8k-cot.yaml by hand.
COT_PROMPT_0 = (
    "Q: There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, "
    "there will be 21 trees. How many trees did the grove workers plant today?\n"
    "A: There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have "
    "been 21 - 15 = 6. The answer is 6.\n\n"
    "Q: If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?\n"
    "A: There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The answer is 5.\n\n"
    "Q: Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?\n"
    "A: Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After eating "
    "35, they had 74 - 35 = 39. The answer is 39.\n\n"
    "Q: Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did "
    "Jason give to Denny?\n"
    "A: Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny 20 - 12 = 8. "
    "The answer is 8.\n\n"
    "Q: Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have "
    "now?\n"
    "A: Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. "
    "5 + 4 = 9. The answer is 9.\n\n"
    "Q: There were nine computers in the server room. Five more computers were installed each day, from monday "
    "to thursday. How many computers are now in the server room?\n"
    "A: There were originally 9 computers. For each of 4 days, 5 more computers were added. So 5 * 4 = 20 "
    "computers were added. 9 + 20 is 29. The answer is 29.\n\n"
    "Q: Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. How many "
    "golf balls did he have at the end of wednesday?\n"
    "A: Michael started with 58 golf balls. After losing 23 on tuesday, he had 58 - 23 = 35. After losing 2 "
    "more, he had 35 - 2 = 33 golf balls. The answer is 33.\n\n"
    "Q: Olivia has $23. She bought five bagels for $3 each. How much money does she have left?\n"
    "A: Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 "
    "dollars left. 23 - 15 is 8. The answer is 8.\n\n"
    "Q: " + JANET + "\nA:")


def test_gsm8k_cot_prompt_bytes(gsm8k_data):
    t = make_task("gsm8k_cot", limit=2, data_dir=gsm8k_data)
    docs = t.docs()
    assert t.shots == 8 and len(docs) == 2
    assert t.prompt(docs[0]) == COT_PROMPT_0
    req = t.requests(docs[0])[0]
    assert req.context == COT_PROMPT_0 and req.until == ("Q:", "</s>", "<|im_end|>")
    assert req.max_tokens == 256 and req.temperature == 0.0
    two = make_task("gsm8k_cot", shots=2, limit=2, data_dir=gsm8k_data)
    assert two.prompt(two.docs()[1]) == COT_PROMPT_0[: COT_PROMPT_0.index("Q: Leah")] + "Q: " + ROBE + "\nA:"
    with pytest.raises(ValueError, match="8 chain-of-thought exemplars"):
        make_task("gsm8k_cot", shots=9, data_dir=gsm8k_data)


def test_gsm8k_zero_shot_prompt_bytes(gsm8k_data):
    t = make_task("gsm8k", shots=0, limit=3, data_dir=gsm8k_data)
    docs = t.docs()
    assert len(docs) == 3
    assert t.prompt(docs[1]) == "Question: " + ROBE + "\nAnswer:"      # the question's double space kept
    req = t.requests(docs[0])[0]
    assert req.context == "Question: " + JANET + "\nAnswer:"
    assert req.until == ("Question:", "</s>", "<|im_end|>") and req.max_tokens == 256 and req.temperature == 0.0


def _data_with_train(tmp_path, n_train: int = 7473):
    """The real test split beside a train split of GSM8K's size whose questions name their line."""
    d = tmp_path / "gsm8k"
    d.mkdir()
    (d / "test.jsonl").symlink_to(DATA / "gsm8k" / "test.jsonl")
    with open(d / "train.jsonl", "w") as f:
        for i in range(n_train):
            f.write(json.dumps({"question": f"Train question {i}?", "answer": f"Step {i}.\n#### {i}"}) + "\n")
    return tmp_path


def test_gsm8k_fewshot_draws_as_lm_eval(gsm8k_data, tmp_path):
    """lm-eval's default sampler: one Random(1234) for the run, 5 train questions drawn per test question
    in document order (its draws over 7,473 train questions: 6374, 3610, 957, 61, 742; then 7462, ...)."""
    root = _data_with_train(tmp_path)

    def shot(i: int) -> str:
        return f"Question: Train question {i}?\nAnswer: Step {i}.\n#### {i}\n\n"

    t = make_task("gsm8k", limit=2, data_dir=root)
    docs = t.docs()
    assert t.prompt(docs[0]) == "".join(shot(i) for i in (6374, 3610, 957, 61, 742)) + \
        "Question: " + JANET + "\nAnswer:"
    assert t.prompt(docs[1]) == "".join(shot(i) for i in (7462, 6610, 4769, 286, 5501)) + \
        "Question: " + ROBE + "\nAnswer:"
    one = make_task("gsm8k", limit=1, data_dir=root)            # a question's shots do not depend on limit
    assert one.prompt(one.docs()[0]) == t.prompt(docs[0])
    assert t.settings()["fewshot_split"] == "train"


def test_gsm8k_without_train_says_what_to_do(tmp_path):
    d = tmp_path / "gsm8k"
    d.mkdir()
    (d / "test.jsonl").write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    with pytest.raises(DataNotFoundError, match=r"train split.*no train.jsonl.*--shots 0.*gsm8k_cot"):
        make_task("gsm8k", data_dir=tmp_path)
    t = make_task("gsm8k", shots=0, data_dir=tmp_path)
    assert t.prompt(t.docs()[0]) == "Question: 1+1?\nAnswer:"
    (d / "test.jsonl").write_text('{"question": "1+1?"}\n')
    with pytest.raises(Exception, match=r"test.jsonl:1: expected"):
        make_task("gsm8k", shots=0, data_dir=tmp_path)
    (d / "test.jsonl").write_text('\n{"question": "1+1?", "answer": "#### 2"}\n{"question": \n')
    with pytest.raises(Exception, match=r"test.jsonl:3: not a JSON line"):
        make_task("gsm8k", shots=0, data_dir=tmp_path)


# ---- filters and exact match ----

GOLD_18 = "She makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18"


@pytest.mark.parametrize("text, strict, flexible", [
    ("She makes 9 * 2 = $18.\n#### 18", "18", "18"),
    ("#### 5\nThen 7 more apples", "5", "7"),                    # strict takes the first, flexible the last
    ("The answer is 1,234.", "[invalid]", "1,234."),             # no "####": only flexible finds it
    ("#### $1,000", "[invalid]", "$1,000"),                      # "$" is not in strict's class
    ("#### -3 apples", "-3", "-3"),
    ("I do not know.", "[invalid]", "[invalid]"),                # nothing to extract
    ("", "[invalid]", "[invalid]"),
    ("Take 7 then 2", "[invalid]", "2"),                         # one digit: the second group
])
def test_gsm8k_filters(text, strict, flexible):
    got = GSM8K.extract(GSM8K.__new__(GSM8K), text)
    assert got == {"strict-match": strict, "flexible-extract": flexible}


@pytest.mark.parametrize("text, strict", [
    ("So 5 + 4 = 9. The answer is 9.\n\n", "9"),
    ("The answer is 1,234.5. Done", "1,234.5."),                 # the pattern's last "." took the space
    ("The answer is 1,234.5.", "1,234.5"),                       # ... or gave the group's last char back
    ("The answer is 12.", "12"),
    ("The answer is 9", "[invalid]"),                            # no character after the number: no match
    ("The answer is $12.", "[invalid]"),
    ("The answer is -4, or The answer is 6.", "-4,"),            # the first; "," is in the group's class
])
def test_gsm8k_cot_strict_filter(text, strict):
    assert GSM8KCoT.extract(GSM8KCoT.__new__(GSM8KCoT), text)["strict-match"] == strict


def test_regex_filter_groups():
    assert regex_filter("a 12 b 3", FLEXIBLE, group_select=-1) == "3"       # a tuple: its non-empty group
    assert regex_filter("a 12 b 3", FLEXIBLE) == "12"
    assert regex_filter("none", r"(\d+)", fallback="X") == "X"


def test_normalize_and_exact_match():
    assert normalize("$1,000.") == "1000"
    assert normalize(GOLD_18) == "18"                     # everything through the last "#### " goes
    assert normalize("a #### b #### 7") == "7"
    assert normalize("ABC") == "abc"
    assert normalize("5.\n") == "5\n"                       # "$" matches before a final newline
    assert exact_match("$18.", GOLD_18) == 1.0
    assert exact_match("1,234.", "1234") == 1.0
    assert exact_match("18.00", "18") == 0.0                # no numeric comparison
    assert exact_match("18!", "18") == 0.0                  # punctuation other than , $ and a final . counts
    assert exact_match("-18", "18") == 0.0
    assert exact_match("[invalid]", GOLD_18) == 0.0


def test_score_disagreeing_filters(gsm8k_data):
    """Scores per filter: the same text can be right for one and wrong for the other."""
    from llmbench.eval.api import Generation

    t = make_task("gsm8k", shots=0, limit=1, data_dir=gsm8k_data)
    doc = t.docs()[0]
    s = t.score(doc, [Generation("She makes $18 a day.", "stop")])
    assert s.metrics == {STRICT: 0.0, FLEX: 1.0} and s.pred == {"strict-match": "[invalid]", "flexible-extract": "$18"}
    assert s.target == doc.data["answer"]
    s = t.score(doc, [Generation("#### 18\nQuestion 2 has 3 eggs", "stop")])
    assert s.metrics == {STRICT: 1.0, FLEX: 0.0}
    c = make_task("gsm8k_cot", shots=0, limit=1, data_dir=gsm8k_data)
    s = c.score(c.docs()[0], [Generation(" 16 - 3 - 4 = 9. 9 * 2 = 18. The answer is $18.", "stop")])
    assert c.score(c.docs()[0], [Generation("x", "stop")]).target == "18"
    assert s.metrics == {STRICT: 0.0, FLEX: 1.0}


# ---- end to end on stories260K ----

def _eval_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "llmbench", "eval", *args]


def test_gsm8k_end_to_end_with_resume(stories_path, gsm8k_data, tmp_path):
    """`llmbench eval gsm8k_cot,gsm8k` on the real model: every record holds the whole greedy text (the
    engine's own generation cut at the first stop string) and both filters' answers; a run whose samples
    file lost its last records (one cut mid-line) resumes to the same records and numbers."""
    out = tmp_path / "run"
    args = ["gsm8k_cot,gsm8k", "--model", str(stories_path), "--limit", "3", "--shots", "1", "--threads", "2",
            "--chunk", "1", "--data-dir", str(gsm8k_data), "--out", str(out), "--json"]
    # gsm8k with shots needs the train split, which ../shared/data lacks: --shots 1 would fail there
    env = {**os.environ, "LLMBENCH_DATA": str(tmp_path / "none")}
    r = subprocess.run(_eval_cmd(*args), cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "train.jsonl" in r.stderr and "Traceback" not in r.stderr, r.stderr
    args[args.index("--shots") + 1] = "0"
    r = subprocess.run(_eval_cmd(*args), cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    whole = json.loads(r.stdout)
    jsonschema.validate(whole, SCHEMA)
    llm = LLM(stories_path, threads=2)
    for name in ("gsm8k", "gsm8k_cot"):
        t = whole["tasks"][name]
        assert t["version"] == "3.0" and t["settings"]["shots"] == 0 and t["timing"]["docs_computed"] == 3
        recs = read_samples(out / f"samples_{name}.jsonl")
        assert [x["doc_id"] for x in recs] == [0, 1, 2]
        task = make_task(name, shots=0, limit=3, data_dir=gsm8k_data)
        for x, doc in zip(recs, task.docs()):
            assert x["prompt"] == task.prompt(doc)
            text = x["answers"][0]["text"]
            want = llm.generate(x["prompt"], SamplingParams(temperature=0, max_tokens=256,
                                                            stop=list(task.until)))[0].text
            assert text == want and len(text) > 0
            assert x["pred"] == task.extract(text) and x["target"] == task.target(doc)
            assert x["metrics"] == {STRICT: exact_match(x["pred"]["strict-match"], x["target"]),
                                    FLEX: exact_match(x["pred"]["flexible-extract"], x["target"])}
        for m in (STRICT, FLEX):
            e = t["metrics"][m]
            vals = [x["metrics"][m] for x in recs]
            assert e["n"] == 3 and e["value"] == pytest.approx(sum(vals) / 3)
            assert e["stderr"] is not None and len(e["ci95"]) == 2 and e["ci95"][0] <= e["value"] <= e["ci95"][1]

    # cut the run back: gsm8k keeps one record and half of the next; gsm8k_cot keeps all
    samples = out / "samples_gsm8k.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    samples.write_bytes(lines[0] + lines[1][: len(lines[1]) // 2])
    r = subprocess.run(_eval_cmd("--resume", str(out), "--chunk", "1", "--json"), cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    assert again["tasks"]["gsm8k"]["timing"]["docs_resumed"] == 1
    assert again["tasks"]["gsm8k"]["timing"]["docs_computed"] == 2
    assert again["tasks"]["gsm8k_cot"]["timing"]["docs_computed"] == 0
    for name in ("gsm8k", "gsm8k_cot"):
        assert again["tasks"][name]["metrics"] == whole["tasks"][name]["metrics"]
    assert samples.read_bytes() == b"".join(lines)


def test_gsm8k_cot_eight_shot_on_the_engine(stories_path, gsm8k_data, tmp_path):
    """The default 8-shot prompt (about 1,500 stories260K tokens) runs through evaluate()."""
    res = evaluate(stories_path, "gsm8k_cot", limit=1, data_dir=gsm8k_data, threads=2, out=tmp_path)
    rec = res["gsm8k_cot"].records[0]
    assert rec["prompt"] == COT_PROMPT_0 and res["gsm8k_cot"].settings["shots"] == 8
    assert rec["answers"][0]["finish_reason"] in ("stop", "length") and rec["answers"][0]["n_tokens"] > 0
    assert set(rec["pred"]) == {"strict-match", "flexible-extract"}
    # the chain-of-thought decay data (llmbench.eval.cot): steps, entropies from the top-20 logprobs
    c = rec["cot"]
    assert c["top_logprobs"] == 20 and len(c["step_entropy"]) == c["steps"] == len(c["step_spans"])
    assert len(c["token_entropy"]) <= rec["answers"][0]["n_tokens"] and rec["answers"][0]["top_logprobs"] is None
    decay = res["gsm8k_cot"].extra["cot_decay"]
    assert decay["all"][str(c["steps"])]["n"] == 1 and decay["subjects"] == {"": decay["all"]}


# ---- through an OpenAI-compatible server ----

def test_gsm8k_through_an_openai_server(gsm8k_data, tmp_path):
    """The test server "generates" a fixed text; the stop string cuts it, the filters read what is left.
    Question 0's answer is 18 and question 1's is 3, so each filter scores 1 then 0."""
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    with EvalServer() as srv:
        srv.gen_text = " She makes 9 * 2 = $18 every day.\n#### 18\n\nQuestion: 5 more?\nAnswer: #### 5"
        res = evaluate(MODEL, "gsm8k", backend="openai", base_url=srv.base_url, shots=0, limit=2,
                       data_dir=gsm8k_data, out=tmp_path)
        task = make_task("gsm8k", shots=0, limit=2, data_dir=gsm8k_data)
        bodies = srv.bodies()
        assert sorted(b["prompt"] for b in bodies) == sorted(task.prompt(d) for d in task.docs())
        for b in bodies:
            assert b["stop"] == ["Question:", "</s>", "<|im_end|>"] and b["max_tokens"] == 256
            assert b["temperature"] == 0.0 and "echo" not in b
        recs = res["gsm8k"].records
        assert all(r["answers"][0]["text"] == " She makes 9 * 2 = $18 every day.\n#### 18\n\n" for r in recs)
        assert [r["metrics"] for r in recs] == [{STRICT: 1.0, FLEX: 1.0}, {STRICT: 0.0, FLEX: 0.0}]
        assert res["gsm8k"].metric(STRICT) == 0.5 and res["gsm8k"].metric(FLEX) == 0.5
        assert res.environment["backend"] == "openai"

        srv.requests.clear()
        srv.gen_text = " 16 - 3 - 4 = 9 eggs. 9 * 2 = 18. The answer is 18.\n\nQ: next"
        srv.faults = ["503"]                                    # retried, not fatal
        res = evaluate(MODEL, "gsm8k_cot", backend="openai", base_url=srv.base_url, limit=1, data_dir=gsm8k_data)
        rec = res["gsm8k_cot"].records[0]
        assert rec["prompt"] == COT_PROMPT_0 and srv.bodies()[-1]["stop"] == ["Q:", "</s>", "<|im_end|>"]
        assert srv.bodies()[-1]["logprobs"] == 20 and rec["cot"]["steps"] == 2 and rec["cot"]["answered"]
        assert rec["pred"] == {"strict-match": "18", "flexible-extract": "18."}
        assert rec["metrics"] == {STRICT: 1.0, FLEX: 1.0}
        assert res.adapter_stats["retries"] == 1

