"""Chain-of-thought decay data (llmbench.eval.cot): the step rule on crafted texts, the entropy bound on
hand-made log-probability lists (checked against exact entropies of random distributions), per-step
entropies of a crafted answer, and the accuracy-by-step-count table with its Wilson intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmbench.eval import cot
from llmbench.eval.metrics import wilson
from llmbench.eval.tasks.gsm8k import ANSWER_CUE as GSM_CUE
from llmbench.eval.tasks.mmlu_cot import ANSWER_CUE as MMLU_CUE


def steps_of(text, cue=GSM_CUE):
    steps, answer = cot.split_steps(text, cue)
    return [text[a:b] for a, b in steps], (text[answer[0]: answer[1]] if answer else None)


@pytest.mark.parametrize("text, steps, answer", [
    ("Leah had 32. Her sister had 42. 32 + 42 = 74. The answer is 74.",
     ["Leah had 32.", "Her sister had 42.", "32 + 42 = 74."], "The answer is 74."),
    (" There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have "
     "been 21 - 15 = 6. The answer is 6.\n\n",
     ["There are 15 trees originally.", "Then there were 21 trees after some more were planted.",
      "So there must have been 21 - 15 = 6."], "The answer is 6."),
    ("The price is 3.5 dollars. So 2 x 3.5 = 7.00 dollars. The answer is 7.",       # decimal points do not split
     ["The price is 3.5 dollars.", "So 2 x 3.5 = 7.00 dollars."], "The answer is 7."),
    ('He said "stop." Then he left! Was it 3? The answer is 3.',                    # quotes, ! and ?
     ['He said "stop."', "Then he left!", "Was it 3?"], "The answer is 3."),
    ("The answer is 5.", [], "The answer is 5."),                                  # no reasoning at all
    ("I think it is 5\nor maybe 6", ["I think it is 5", "or maybe 6"], None),       # no cue: all steps, unanswered
    ("", [], None),
    ("---\n\n* \nFirst we add.\n\n", ["First we add."], None),                      # pieces without a word do not count
])
def test_steps_gsm8k(text, steps, answer):
    assert steps_of(text) == (steps, answer)


@pytest.mark.parametrize("text, steps, answer", [
    ("Step 1: add.\nStep 2: subtract.\nThe answer is (B).", ["Step 1: add.", "Step 2: subtract."], "The answer is (B)."),
    (" Mammals, e.g. dogs and cats, have fur. Dr. Smith agrees. So the answer is (A).\n\nQ: next",  # abbreviations
     ["Mammals, e.g. dogs and cats, have fur.", "Dr. Smith agrees."], "So the answer is (A)."),
    ("A is wrong. The final answer: (C)", ["A is wrong."], "The final answer: (C)"),
    ("The answer is (D). Because of X. The answer is (A).", [], "The answer is (D)."),   # the first cue decides
    ("It is (A) since x = 2. Then (B).", ["It is (A) since x = 2.", "Then (B)."], None),
])
def test_steps_mmlu(text, steps, answer):
    assert steps_of(text, MMLU_CUE) == (steps, answer)


def test_token_entropy_by_hand():
    # exact: the top entries hold all the mass; H = 0.5 ln 2 + 2 * 0.25 ln 4 = 1.5 ln 2
    h, tail = cot.token_entropy({"a": math.log(0.5), "b": math.log(0.25), "c": math.log(0.25)})
    assert h == pytest.approx(1.5 * math.log(2), abs=1e-12) and tail == pytest.approx(0.0, abs=1e-12)
    # top-2 of [0.5, 0.3, 0.1, 0.1]: tail 0.2, bound -(0.5 ln .5 + .3 ln .3) + 0.2 * -ln 0.3
    top = [math.log(0.5), math.log(0.3)]
    h, tail = cot.token_entropy(top)
    assert tail == pytest.approx(0.2, abs=1e-12)
    assert h == pytest.approx(0.5 * math.log(2) - 0.3 * math.log(0.3) - 0.2 * math.log(0.3), abs=1e-12)  # 0.94856
    true = -sum(p * math.log(p) for p in (0.5, 0.3, 0.1, 0.1))                                       # 1.16828
    assert h < true and cot.entropy_upper(top, 4) == pytest.approx(true, abs=1e-12)   # the tail spread evenly
    assert cot.entropy_upper(top, 3) == pytest.approx(-sum(p * math.log(p) for p in (0.5, 0.3, 0.2)), abs=1e-12)
    assert cot.token_entropy(None) is None and cot.token_entropy({}) is None
    assert cot.token_entropy([0.0]) == (0.0, 0.0)                                       # certain


def test_entropy_bounds_hold_on_random_distributions():
    rng = np.random.default_rng(0)
    for _ in range(200):
        v = int(rng.integers(2, 300))
        p = rng.dirichlet(np.full(v, float(rng.choice([0.05, 0.5, 5.0]))))
        p = p[p > 0]
        true = float(-(p * np.log(p)).sum())
        k = int(rng.integers(1, 21))
        top = np.log(np.sort(p)[::-1][:k])
        lo, tail = cot.token_entropy(list(top))
        assert lo <= true + 1e-9 and tail == pytest.approx(max(0.0, 1 - np.exp(top).sum()), abs=1e-9)
        if k < len(p):
            assert true <= cot.entropy_upper(list(top), len(p)) + 1e-9


def test_analyse_assigns_tokens_to_steps():
    text = "We add. Then 5. The answer is 5.\n\nQ: more"
    tokens = ["We", " add", ".", " Then", " 5", ".", " The", " answer", " is", " 5", ".", "\n\n", "Q", ":", " more"]
    assert "".join(tokens) == text
    certain, even = [0.0], [math.log(0.5), math.log(0.5)]
    tops = [certain, even, certain, even, even, certain] + [certain] * 3 + [even, certain] + [even] * 4
    a = cot.analyse(text, GSM_CUE, tokens, tops)
    assert a["steps"] == 2 and a["answered"] and a["step_spans"] == [[0, 7], [8, 15]]
    ln2 = math.log(2)
    assert a["step_tokens"] == [3, 3]
    assert a["step_entropy"] == pytest.approx([ln2 / 3, 2 * ln2 / 3], abs=1e-6)
    assert a["step_tail"] == [0.0, 0.0]
    assert a["answer_entropy"] == pytest.approx(ln2 / 5, abs=1e-6)    # " The answer is 5." only, not what follows
    assert a["top_logprobs"] == 2 and len(a["token_entropy"]) == len(tokens)
    # without log-probabilities: the steps alone
    b = cot.analyse(text, GSM_CUE)
    assert b["steps"] == 2 and "step_entropy" not in b and b["top_logprobs"] is None
    # tokens past the text (a stop string cut it) are not counted
    c = cot.analyse("We add. Then", GSM_CUE, tokens, tops)
    assert c["steps"] == 2 and not c["answered"] and len(c["token_entropy"]) == 4 and c["step_tokens"] == [3, 1]


def test_decay_table_counts_and_wilson():
    def rec(subject, steps, ok, ent=None):
        return {"subject": subject, "metrics": {"em": float(ok), "other": 1.0},
                "cot": {"steps": steps, "answered": steps < 4, "step_entropy": ent, "answer_entropy": 0.5 if ent else None}}

    recs = [rec("s1", 2, 1, [0.1, 0.3]), rec("s1", 2, 0, [0.3, 0.5]), rec("s1", 3, 1), rec("s2", 2, 1),
            rec("s2", 4, 0, [0.2, 0.2, 0.2, 0.2]), {"subject": "s2", "metrics": {"em": 1.0}}]   # the last: no cot
    t = cot.decay_table(recs, ["em"], {"s1": "g", "s2": "g"})
    s1 = t["subjects"]["s1"]
    assert list(s1) == ["2", "3"] and s1["2"]["n"] == 2 and s1["2"]["answered"] == 2
    assert s1["2"]["em"] == {"correct": 1.0, "acc": 0.5, "ci95": list(wilson(1, 2))}
    assert s1["2"]["mean_entropy"] == pytest.approx([0.2, 0.4]) and s1["2"]["mean_answer_entropy"] == 0.5
    assert s1["3"]["mean_entropy"] is None and s1["3"]["em"]["ci95"] == list(wilson(1, 1))
    assert t["all"]["2"]["n"] == 3 and t["all"]["2"]["em"]["correct"] == 2.0
    assert t["all"]["4"]["answered"] == 0 and t["groups"]["g"] == t["all"]
    assert sum(r["n"] for r in t["all"].values()) == 5 and t["top_logprobs"] == cot.TOP_LOGPROBS


# ---- how many top log-probabilities: an option, said in the results ----

def test_entropy_note_says_how_many_entries_it_used():
    recs = [{"subject": "", "metrics": {"em": 1.0}, "cot": {"steps": 1, "answered": True, "top_logprobs": k,
                                                           "step_entropy": [0.1], "answer_entropy": 0.2}}
            for k in (5, 5)]
    t = cot.decay_table(recs, ["em"], top_logprobs=5)
    assert t["top_logprobs"] == 5 and t["top_logprobs_used"] == [5, 5]
    assert "lower bound from its top 5 log-probabilities:" in t["entropy"] and "the 5 entries miss" in t["entropy"]
    fewer = cot.decay_table(recs, ["em"], top_logprobs=20)["entropy"]
    assert "top 5 log-probabilities (20 were asked for: the server sent fewer)" in fewer
    none = cot.decay_table([{**recs[0], "cot": {"steps": 1, "answered": True, "top_logprobs": None}}], ["em"],
                           top_logprobs=0)
    assert none["top_logprobs_used"] is None and none["entropy"].startswith("no entropies") and "0 were asked" in none["entropy"]


@pytest.mark.parametrize("bad", [-1, "20", True, 2.0])
def test_top_logprobs_is_checked(bad):
    with pytest.raises(ValueError, match="top_logprobs must be an int >= 0"):
        cot.check_top_logprobs(bad)
