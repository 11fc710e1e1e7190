"""Lettered multiple choice scored by log-likelihood, as lm-evaluation-harness's ``multiple_choice``
output type does it for MMLU, C-Eval and CMMLU.

The prompt of a document is ``description + shot_1 + ... + shot_k + doc_to_text(doc)``, each shot
being ``doc_to_text(shot) + " " + letter + "\\n\\n"`` (lm-eval's target and few-shot delimiters),
the shots the first k documents of the few-shot split in file order (its ``first_n`` sampler). Each
letter is one request, ``Loglikelihood(prompt, " " + letter)``; the prediction is the letter with the
largest summed log-probability, the first one on a tie (``np.argmax``), and ``acc`` is 1 when it is the
gold letter.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..api import Answer, Doc, Loglikelihood, Request, Scored, Task

LETTERS = ("A", "B", "C", "D")


@dataclass
class Question:
    question: str
    choices: list[str]          # one per letter
    answer: int                 # index of the gold letter


@dataclass
class Subject:
    name: str
    fewshot: list[Question]     # the few-shot split, in file order
    docs: list[Question]        # the split scored


class LetterChoiceTask(Task):
    """A multiple-choice task over subjects. Subclasses give ``description(subject)`` and
    ``answer_cue`` (what ends ``doc_to_text``: "Answer:" or "答案：") and load the subjects."""

    answer_cue = "Answer:"
    split = "test"
    fewshot_split = "dev"

    def __init__(self, subjects: Sequence[Subject], shots: int = 5, limit: int | None = None):
        if shots < 0:
            raise ValueError(f"shots must be >= 0, got {shots}")
        for s in subjects:
            if shots > len(s.fewshot):
                raise ValueError(f"{self.name}: {s.name} has {len(s.fewshot)} few-shot examples in its "
                                 f"{self.fewshot_split} split, fewer than --shots {shots}")
        self.subjects = {s.name: s for s in subjects}
        self.shots, self.limit = shots, limit
        self._headers: dict[str, str] = {}

    def description(self, subject: str) -> str:
        raise NotImplementedError

    def doc_to_text(self, q: Question) -> str:
        lines = [q.question.strip()] + [f"{L}. {c}" for L, c in zip(LETTERS, q.choices)]
        return "\n".join(lines) + "\n" + self.answer_cue

    def header(self, subject: str) -> str:
        """The description and the few-shot block: the prefix every question of a subject shares."""
        if subject not in self._headers:
            s = self.subjects[subject]
            shots = "".join(f"{self.doc_to_text(q)} {LETTERS[q.answer]}\n\n" for q in s.fewshot[: self.shots])
            self._headers[subject] = self.description(subject) + shots
        return self._headers[subject]

    def docs(self) -> list[Doc]:
        out = []
        for name, s in self.subjects.items():
            qs = s.docs if self.limit is None else s.docs[: self.limit]
            out += [Doc(i, name, {"question": q}) for i, q in enumerate(qs)]
        return out

    def context(self, doc: Doc) -> str:
        return self.header(doc.subject) + self.doc_to_text(doc.data["question"])

    def requests(self, doc: Doc) -> list[Request]:
        ctx = self.context(doc)
        return [Loglikelihood(ctx, " " + L) for L in LETTERS[: len(doc.data["question"].choices)]]

    def prompt(self, doc: Doc) -> str:
        return self.context(doc)

    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        lls = [a.logprob for a in answers]  # type: ignore[union-attr]
        pred = int(np.argmax(lls))
        gold = doc.data["question"].answer
        return Scored({"acc": float(pred == gold)}, target=LETTERS[gold], pred=LETTERS[pred])

    def settings(self) -> dict[str, Any]:
        return {"shots": self.shots, "limit": self.limit, "split": self.split,
                "fewshot_split": self.fewshot_split, "subjects": list(self.subjects)}
