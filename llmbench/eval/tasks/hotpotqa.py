"""HotpotQA (Yang et al., 2018), distractor setting, answered generatively: ``hotpotqa``.

Each question comes with its ten paragraphs (the two gold ones and eight distractors, in the order the
data file gives them), all in the prompt. lm-evaluation-harness has no HotpotQA task; the prompt is
LongBench's ``hotpotqa`` template (THUDM/LongBench, ``dataset2prompt``), its context being the
paragraphs as ``"Passage {i}:\\n{title}\\n{sentences joined}"`` separated by newlines::

    Answer the question based on the given passages. Only give me the answer and do not output any other words.

    The following are given passages.
    Passage 1:
    Ed Wood (film)
    Ed Wood is a 1994 American biographical period comedy-drama film ...
    Passage 2:
    ...

    Answer the question based on the given passages. Only give me the answer and do not output any other words.

    Question: Were Scott Derrickson and Ed Wood of the same nationality?
    Answer:

Zero-shot, greedy, 32 new tokens at most (LongBench's ``max_gen`` for hotpotqa), stop strings "\\n\\n",
"Question:", "</s>", "<|im_end|>". The prediction is the first non-empty line of the text, stripped.

Metrics, as HotpotQA's official ``hotpot_evaluate_v1.py`` scores answers (with SQuAD's normalisation:
lower case, ASCII punctuation deleted, the articles "a", "an", "the" deleted as words, white space
collapsed):

- ``em``: the normalised prediction equals the normalised gold answer;
- ``f1``: token F1 of the normalised strings (words in common counted with multiplicity, precision
  over the prediction's words, recall over the gold's), 0 when none is in common; and, as the official
  script has it, 0 whenever either normalised string is "yes", "no" or "noanswer" and the two differ.

Subjects are HotpotQA's question types, ``bridge`` and ``comparison`` (documents run type by type;
``--limit N`` takes the file's first N questions). The task figures are over all questions, with a
Wilson interval for ``em`` and a normal one for ``f1``.

Data: the official ``hotpot_dev_distractor_v1.json`` (a JSON list of {"_id", "question", "answer",
"type", "level", "context": [[title, [sentence, ...]], ...], "supporting_facts"}), or any file
``hotpot_dev_distractor*.json`` in ``hotpotqa/`` (../shared/data holds its first 103 questions), or
the Hugging Face ``hotpot_qa`` layout (``distractor/validation-*.parquet``).

Tested in tests/test_eval_hotpotqa.py: the prompt byte for byte for a real question, EM and F1 against
hand-computed values, end to end on stories260K (with resume) and through the OpenAI-compatible test
server.
"""

from __future__ import annotations

import json
import os
import re
import string
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import data
from ..api import Answer, Doc, GenerateUntil, Generation, Request, Scored, Task

MAX_TOKENS = 32
INSTRUCTION = ("Answer the question based on the given passages. Only give me the answer and do not output any "
               "other words.")
TEMPLATE = (INSTRUCTION + "\n\nThe following are given passages.\n{context}\n\n" + INSTRUCTION +
            "\n\nQuestion: {question}\nAnswer:")
TYPES = ("bridge", "comparison")


# ---- HotpotQA's official answer metrics ----

def normalize_answer(s: str) -> str:
    """SQuAD's normalisation: lower case, punctuation out, articles out, white space collapsed."""
    s = "".join(ch for ch in s.lower() if ch not in string.punctuation)
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def exact_match(pred: str, gold: str) -> float:
    """1.0 if the two answers are equal after `normalize_answer` (SQuAD's normalization), else 0.0."""
    return float(normalize_answer(pred) == normalize_answer(gold))


def f1(pred: str, gold: str) -> float:
    """hotpot_evaluate_v1.py's answer F1 (with its yes/no/noanswer rule)."""
    p, g = normalize_answer(pred), normalize_answer(gold)
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    same = sum((Counter(pt) & Counter(gt)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pt), same / len(gt)
    return 2 * precision * recall / (precision + recall)


def first_line(text: str) -> str:
    """The prediction: the first non-empty line of the generated text, stripped."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


# ---- data ----

def _row(r: dict[str, Any], where: str) -> dict[str, Any]:
    ctx = r.get("context")
    if isinstance(ctx, dict):                           # the Hugging Face layout: {"title": [...], "sentences": [...]}
        ctx = [[t, list(s)] for t, s in zip(ctx.get("title", []), ctx.get("sentences", []))]
    if not (isinstance(r.get("question"), str) and isinstance(r.get("answer"), str) and isinstance(ctx, list)
            and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in ctx)):
        raise data.LLMBenchError(f"{where}: expected HotpotQA's {{question, answer, type, context: [[title, "
                                 f"[sentences]], ...]}}, got {json.dumps(r, default=str)[:200]}")
    return {"id": str(r.get("_id", r.get("id", ""))), "question": r["question"], "answer": r["answer"],
            "type": str(r.get("type", "bridge")), "level": str(r.get("level", "")),
            "context": [[str(t), [str(x) for x in s]] for t, s in ctx]}


def load(root: Path) -> list[dict[str, Any]]:
    """HotpotQA's distractor dev questions from ``root`` (the JSON file or the parquet layout)."""
    files = sorted(root.glob("hotpot_dev_distractor*.json"))
    if files:
        rows = json.loads(files[0].read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise data.LLMBenchError(f"{files[0]}: expected a JSON list of questions")
        return [_row(r, f"{files[0]}[{i}]") for i, r in enumerate(rows)]
    parquet = sorted((root / "distractor").glob("validation-*.parquet"))
    if parquet:
        return [_row(r, str(f)) for f in parquet for r in data.read_parquet(f)]
    raise data.DataNotFoundError(f"{root}: no HotpotQA distractor data (expected hotpot_dev_distractor_v1.json from "
                                 "the HotpotQA site, or distractor/validation-*.parquet of the Hugging Face set "
                                 "hotpot_qa)")


# ---- the task ----

class HotpotQA(Task):
    """HotpotQA (distractor setting), zero-shot generation scored by exact match and token F1."""

    name = "hotpotqa"
    version = "1.0"
    metrics = {"em": True, "f1": True}
    until = ("\n\n", "Question:", "</s>", "<|im_end|>")

    def __init__(self, shots: int = 0, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None):
        # zero-shot (the ten paragraphs fill the prompt): a --shots meant for the other tasks of a run is
        # ignored here, as subjects are
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self.root = data.find("hotpotqa", data_dir)
        rows = load(self.root)
        self.rows = rows if limit is None else rows[:limit]
        self.limit = limit

    def docs(self) -> list[Doc]:
        kinds = list(TYPES) + sorted({r["type"] for r in self.rows} - set(TYPES))
        return [Doc(i, r["type"], r) for k in kinds for i, r in enumerate(self.rows) if r["type"] == k]

    @staticmethod
    def context(row: dict[str, Any]) -> str:
        return "\n".join(f"Passage {i}:\n{title}\n{''.join(sents)}" for i, (title, sents) in
                         enumerate(row["context"], 1))

    def prompt(self, doc: Doc) -> str:
        return TEMPLATE.format(context=self.context(doc.data), question=doc.data["question"])

    def requests(self, doc: Doc) -> list[Request]:
        return [GenerateUntil(self.prompt(doc), self.until, max_tokens=MAX_TOKENS, temperature=0.0)]

    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        g: Generation = answers[0]  # type: ignore[assignment]
        pred, gold = first_line(g.text), doc.data["answer"]
        return Scored({"em": exact_match(pred, gold), "f1": f1(pred, gold)}, target=gold, pred=pred,
                      extra={"id": doc.data["id"]})

    def settings(self) -> dict[str, Any]:
        return {"shots": 0, "limit": self.limit, "setting": "distractor", "prompt": "LongBench hotpotqa",
                "until": list(self.until), "max_tokens": MAX_TOKENS, "temperature": 0.0,
                "prediction": "first non-empty line, stripped", "metrics": "hotpot_evaluate_v1 answer EM/F1"}
