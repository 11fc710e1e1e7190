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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import data
from ..api import Answer, Doc, Loglikelihood, Request, Scored, Task

LETTERS = ("A", "B", "C", "D")


@dataclass
class Question:
    """A multiple-choice question: its text, one choice per letter, the index of the right one."""

    question: str
    choices: list[str]          # one per letter
    answer: int                 # index of the gold letter


@dataclass
class Subject:
    """One subject's few-shot questions and the questions scored."""

    name: str
    fewshot: list[Question]     # the few-shot split, in file order
    docs: list[Question]        # the split scored


def question_from(row: dict[str, Any], where: str, question: str = "question", answer: str = "answer") -> Question:
    """A question from a row with the question, A..D and the answer letter under these column names."""
    gold = str(row.get(answer, "")).strip()
    if gold not in LETTERS or question not in row:
        raise data.LLMBenchError(f"{where}: expected columns {question},A,B,C,D,{answer} (a letter); got {row!r:.200}")
    return Question(str(row[question]), [str(row[L]) for L in LETTERS], LETTERS.index(gold))


def read_split(csv_path: Path, parquet: Sequence[Path], to_question: Callable[[Any, str], Question],
               header: bool = True) -> list[Question] | None:
    """A split's questions in file order: from ``csv_path`` when it exists (rows as dicts, or as lists
    when the file has no header), else from the ``parquet`` files (the Hugging Face layout); None when
    there is neither."""
    if csv_path.exists():
        rows = data.read_csv(csv_path, header=header)
        return [to_question(r, f"{csv_path}:{i + 1 + header}") for i, r in enumerate(rows)]
    if parquet:
        return [to_question(r, str(f)) for f in parquet for r in data.read_parquet(f)]
    return None


def parse_subjects(subjects: Sequence[str] | None, known: dict[str, str], task: str) -> list[str]:
    """Subjects to run: all of them, or those named (a group name stands for its subjects)."""
    if not subjects:
        return list(known)
    out: list[str] = []
    for s in subjects:
        s = s.strip()
        members = [k for k, g in known.items() if g == s]
        if s in known:
            out.append(s)
        elif members:
            out += members
        else:
            raise ValueError(f"{task}: unknown subject {s!r} (subjects: {', '.join(known)}; "
                             f"groups: {', '.join(sorted(set(known.values())))})")
    return list(dict.fromkeys(out))


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
        metrics = {"acc": float(pred == gold)}
        if "acc_norm" in self.metrics:   # argmax of ll / len(choice): every choice is one letter, so acc again
            metrics["acc_norm"] = metrics["acc"]
        return Scored(metrics, target=LETTERS[gold], pred=LETTERS[pred])

    def settings(self) -> dict[str, Any]:
        return {"shots": self.shots, "limit": self.limit, "split": self.split,
                "fewshot_split": self.fewshot_split, "subjects": list(self.subjects)}
