"""MMLU (Hendrycks et al.) as lm-evaluation-harness's ``mmlu`` task (default template, version 1.0).

Prompt: "The following are multiple choice questions (with answers) about {subject with spaces}.\n\n",
then the first ``shots`` dev questions with their answers, then the test question::

    {question.strip()}
    A. {choices[0]}
    B. {choices[1]}
    C. {choices[2]}
    D. {choices[3]}
    Answer:

scored by the log-likelihood of " A" .. " D" (``acc``). Subjects aggregate into lm-eval's four groups
(``GROUPS``: stem, humanities, social sciences, other; note lm-eval puts anatomy in stem, unlike the
authors' categories.py) and the groups into ``mmlu``, each weighted by question count.

Data: the authors' CSV layout (``mmlu/dev/{subject}_dev.csv``, ``mmlu/test/{subject}_test.csv``, no
header: question, A, B, C, D, answer letter) or the Hugging Face ``cais/mmlu`` layout
(``mmlu/{subject}/dev-*.parquet``, ``test-*.parquet``: question, choices, answer index).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .. import data
from .choice import (
    LETTERS,
    LetterChoiceTask,
    Question,
    Subject,
    parse_subjects,
    question_from,
    read_split,
)

# lm-eval's lm_eval/tasks/mmlu/default/mmlu_{subject}.yaml tags: subject -> group.
GROUPS = {
    # stem
    "abstract_algebra": "stem", "anatomy": "stem", "astronomy": "stem", "college_biology": "stem",
    "college_chemistry": "stem", "college_computer_science": "stem", "college_mathematics": "stem",
    "college_physics": "stem", "computer_security": "stem", "conceptual_physics": "stem",
    "electrical_engineering": "stem", "elementary_mathematics": "stem", "high_school_biology": "stem",
    "high_school_chemistry": "stem", "high_school_computer_science": "stem", "high_school_mathematics": "stem",
    "high_school_physics": "stem", "high_school_statistics": "stem", "machine_learning": "stem",
    # humanities
    "formal_logic": "humanities", "high_school_european_history": "humanities",
    "high_school_us_history": "humanities", "high_school_world_history": "humanities",
    "international_law": "humanities", "jurisprudence": "humanities", "logical_fallacies": "humanities",
    "moral_disputes": "humanities", "moral_scenarios": "humanities", "philosophy": "humanities",
    "prehistory": "humanities", "professional_law": "humanities", "world_religions": "humanities",
    # social_sciences
    "econometrics": "social_sciences", "high_school_geography": "social_sciences",
    "high_school_government_and_politics": "social_sciences", "high_school_macroeconomics": "social_sciences",
    "high_school_microeconomics": "social_sciences", "high_school_psychology": "social_sciences",
    "human_sexuality": "social_sciences", "professional_psychology": "social_sciences",
    "public_relations": "social_sciences", "security_studies": "social_sciences", "sociology": "social_sciences",
    "us_foreign_policy": "social_sciences",
    # other
    "business_ethics": "other", "clinical_knowledge": "other", "college_medicine": "other", "global_facts": "other",
    "human_aging": "other", "management": "other", "marketing": "other", "medical_genetics": "other",
    "miscellaneous": "other", "nutrition": "other", "professional_accounting": "other",
    "professional_medicine": "other", "virology": "other",
}

GROUP_NAMES = {"stem": "stem", "humanities": "humanities", "social_sciences": "social sciences", "other": "other"}


def _csv_question(row: list[str], where: str) -> Question:
    if len(row) != 6:
        raise data.LLMBenchError(f"{where}: expected rows of question,A,B,C,D,answer letter; got {row!r:.200}")
    return question_from(dict(zip(("question", *LETTERS, "answer"), row)), where)


def _hf_question(row: dict, where: str) -> Question:
    return Question(row["question"], [str(c) for c in row["choices"]], int(row["answer"]))


def load_subject(root: Path, subject: str) -> Subject:
    """An MMLU subject's dev (few-shot) and test questions from ``root``.

    Raises:
        DataNotFoundError: neither the CSV nor the parquet layout is there.
    """
    splits = [read_split(root / split / f"{subject}_{split}.csv", sorted((root / subject).glob(f"{split}-*.parquet")),
                         _csv_question if (root / split / f"{subject}_{split}.csv").exists() else _hf_question,
                         header=False) for split in ("dev", "test")]
    if splits[0] is None or splits[1] is None:
        raise data.DataNotFoundError(f"{root}: no MMLU files for {subject} (expected dev/{subject}_dev.csv and "
                                     f"test/{subject}_test.csv, or {subject}/dev-*.parquet and test-*.parquet)")
    return Subject(subject, splits[0], splits[1])


class MMLU(LetterChoiceTask):
    """MMLU as lm-evaluation-harness defines it: multiple choice scored by the log-likelihood of the answer letters."""

    name = "mmlu"
    version = "1.0"

    def __init__(self, shots: int = 5, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None):
        root = data.find("mmlu", data_dir)
        super().__init__([load_subject(root, s) for s in parse_subjects(subjects, GROUPS, "mmlu")], shots, limit)
        self.root = root

    def description(self, subject: str) -> str:
        return f"The following are multiple choice questions (with answers) about {' '.join(subject.split('_'))}.\n\n"

    def groups(self) -> dict[str, str]:
        return {s: GROUP_NAMES[GROUPS[s]] for s in self.subjects}
