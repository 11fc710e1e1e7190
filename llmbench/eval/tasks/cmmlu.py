"""CMMLU (Li et al.) as lm-evaluation-harness's ``cmmlu`` task (version 1.0), tested in
tests/test_eval_chinese.py against prompts written out by hand from the data files.

Prompt: "以下是关于{Chinese subject name}的单项选择题，请直接给出正确答案的选项。\n\n" (lm-eval's
cmmlu_{subject}.yaml description), then the first ``shots`` dev questions with their answers, then the
test question (_default_template_yaml's doc_to_text; the cue ends in a full-width colon, U+FF1A)::

    {Question.strip()}
    A. {A}
    B. {B}
    C. {C}
    D. {D}
    答案：

scored by the log-likelihood of " A" .. " D" (``acc``; lm-eval's ``acc_norm`` divides by the length of
the one-letter choices, so it always equals ``acc``). lm-eval aggregates the 67 subjects straight into
``cmmlu`` (_cmmlu.yaml, weighted by question count) with no groups in between, and its
_generate_configs.py carries no category map, so ``groups()`` is empty; ``--subjects cmmlu`` names all.

Data: the authors' CSV layout (``cmmlu/dev/{subject}.csv``, ``cmmlu/test/{subject}.csv``, header
,Question,A,B,C,D,Answer) or a parquet layout of the Hugging Face ``haonan-li/cmmlu`` set
(``cmmlu/{subject}/test-*.parquet`` or ``cmmlu/{subject}/test/*.parquet``, the same columns).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import data
from .choice import (
    LetterChoiceTask,
    Question,
    Subject,
    parse_subjects,
    question_from,
    read_split,
)

# lm-eval's lm_eval/tasks/cmmlu/_generate_configs.py SUBJECTS (the order of _cmmlu.yaml): subject -> the
# Chinese name its cmmlu_{subject}.yaml description uses.
SUBJECTS = {
    "agronomy": "农学", "anatomy": "解剖学", "ancient_chinese": "古汉语", "arts": "艺术学", "astronomy": "天文学",
    "business_ethics": "商业伦理", "chinese_civil_service_exam": "中国公务员考试", "chinese_driving_rule": "中国驾驶规则",
    "chinese_food_culture": "中国饮食文化", "chinese_foreign_policy": "中国外交政策", "chinese_history": "中国历史",
    "chinese_literature": "中国文学", "chinese_teacher_qualification": "中国教师资格", "clinical_knowledge": "临床知识",
    "college_actuarial_science": "大学精算学", "college_education": "大学教育学",
    "college_engineering_hydrology": "大学工程水文学", "college_law": "大学法律", "college_mathematics": "大学数学",
    "college_medical_statistics": "大学医学统计", "college_medicine": "大学医学", "computer_science": "计算机科学",
    "computer_security": "计算机安全", "conceptual_physics": "概念物理学",
    "construction_project_management": "建设工程管理", "economics": "经济学", "education": "教育学",
    "electrical_engineering": "电气工程", "elementary_chinese": "小学语文", "elementary_commonsense": "小学常识",
    "elementary_information_and_technology": "小学信息技术", "elementary_mathematics": "初等数学",
    "ethnology": "民族学", "food_science": "食品科学", "genetics": "遗传学", "global_facts": "全球事实",
    "high_school_biology": "高中生物", "high_school_chemistry": "高中化学", "high_school_geography": "高中地理",
    "high_school_mathematics": "高中数学", "high_school_physics": "高中物理学", "high_school_politics": "高中政治",
    "human_sexuality": "人类性行为", "international_law": "国际法学", "journalism": "新闻学",
    "jurisprudence": "法理学", "legal_and_moral_basis": "法律与道德基础", "logical": "逻辑学",
    "machine_learning": "机器学习", "management": "管理学", "marketing": "市场营销", "marxist_theory": "马克思主义理论",
    "modern_chinese": "现代汉语", "nutrition": "营养学", "philosophy": "哲学", "professional_accounting": "专业会计",
    "professional_law": "专业法学", "professional_medicine": "专业医学", "professional_psychology": "专业心理学",
    "public_relations": "公共关系", "security_study": "安全研究", "sociology": "社会学", "sports_science": "体育学",
    "traditional_chinese_medicine": "中医中药", "virology": "病毒学", "world_history": "世界历史",
    "world_religions": "世界宗教",
}


def _question(row: dict[str, Any], where: str) -> Question:
    return question_from(row, where, "Question", "Answer")


def _parquet(root: Path, subject: str, split: str) -> list[Path]:
    return sorted((root / subject).glob(f"{split}-*.parquet")) or sorted((root / subject / split).glob("*.parquet"))


def load_subject(root: Path, subject: str) -> Subject:
    """A CMMLU subject's dev (few-shot) and test questions from ``root``.

    Raises:
        DataNotFoundError: neither the CSV nor the parquet layout is there.
    """
    dev, test = (read_split(root / sp / f"{subject}.csv", _parquet(root, subject, sp), _question)
                 for sp in ("dev", "test"))
    if dev is None or test is None:
        raise data.DataNotFoundError(
            f"{root}: no CMMLU files for {subject} (expected dev/{subject}.csv and test/{subject}.csv, "
            f"or {subject}/dev-*.parquet and {subject}/test-*.parquet)")
    return Subject(subject, dev, test)


class CMMLU(LetterChoiceTask):
    """CMMLU as lm-evaluation-harness defines it: multiple choice scored by the log-likelihood of the answer letters."""

    name = "cmmlu"
    version = "1.0"
    metrics = {"acc": True, "acc_norm": True}
    answer_cue = "答案："
    split = "test"
    fewshot_split = "dev"

    def __init__(self, shots: int = 5, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None):
        root = data.find("cmmlu", data_dir)
        known = {s: "cmmlu" for s in SUBJECTS}  # lm-eval's one group holds every subject
        super().__init__([load_subject(root, s) for s in parse_subjects(subjects, known, "cmmlu")], shots, limit)
        self.root = root

    def description(self, subject: str) -> str:
        return f"以下是关于{SUBJECTS[subject]}的单项选择题，请直接给出正确答案的选项。\n\n"
