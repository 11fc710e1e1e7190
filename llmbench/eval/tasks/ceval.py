"""C-Eval (Huang et al.) as lm-evaluation-harness's ``ceval-valid`` task (version 2.0), tested in
tests/test_eval_chinese.py against prompts written out by hand from the data files.

Prompt: "以下是中国关于{Chinese subject name}的单项选择题，请选出其中的正确答案。\n\n" (lm-eval's
ceval-valid_{subject}.yaml description), then the first ``shots`` dev questions with their answers, then
the val question (_default_ceval_yaml's doc_to_text; the cue ends in a full-width colon, U+FF1A)::

    {question.strip()}
    A. {A}
    B. {B}
    C. {C}
    D. {D}
    答案：

scored by the log-likelihood of " A" .. " D" (``acc``; lm-eval's ``acc_norm`` divides by the length of
the one-letter choices, so it always equals ``acc``). The val split is scored: the test split's answers
are not public. lm-eval aggregates the 52 subjects into ``ceval-valid`` only, weighted by question count;
``GROUPS`` adds C-Eval's own four categories (subject_mapping.json: STEM, Social Science, Humanities,
Other) for the per-group table and for ``--subjects stem``.

Data: the official CSV layout (``ceval/dev/{subject}_dev.csv``, ``ceval/val/{subject}_val.csv``, header
id,question,A,B,C,D,answer[,explanation]) or the Hugging Face ``ceval/ceval-exam`` layout
(``ceval/{subject}/dev-*.parquet``, ``val-*.parquet``, the same columns).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .. import data
from .choice import LetterChoiceTask, Subject, parse_subjects, question_from, read_split

# lm-eval's lm_eval/tasks/ceval/_generate_configs.py SUBJECTS (the order of _ceval-valid.yaml): subject ->
# the Chinese name its ceval-valid_{subject}.yaml description uses (the same as subject_mapping.json's).
SUBJECTS = {
    "computer_network": "计算机网络", "operating_system": "操作系统", "computer_architecture": "计算机组成",
    "college_programming": "大学编程", "college_physics": "大学物理", "college_chemistry": "大学化学",
    "advanced_mathematics": "高等数学", "probability_and_statistics": "概率统计", "discrete_mathematics": "离散数学",
    "electrical_engineer": "注册电气工程师", "metrology_engineer": "注册计量师", "high_school_mathematics": "高中数学",
    "high_school_physics": "高中物理", "high_school_chemistry": "高中化学", "high_school_biology": "高中生物",
    "middle_school_mathematics": "初中数学", "middle_school_biology": "初中生物", "middle_school_physics": "初中物理",
    "middle_school_chemistry": "初中化学", "veterinary_medicine": "兽医学", "college_economics": "大学经济学",
    "business_administration": "工商管理", "marxism": "马克思主义基本原理",
    "mao_zedong_thought": "毛泽东思想和中国特色社会主义理论体系概论", "education_science": "教育学",
    "teacher_qualification": "教师资格", "high_school_politics": "高中政治", "high_school_geography": "高中地理",
    "middle_school_politics": "初中政治", "middle_school_geography": "初中地理", "modern_chinese_history": "近代史纲要",
    "ideological_and_moral_cultivation": "思想道德修养与法律基础", "logic": "逻辑学", "law": "法学",
    "chinese_language_and_literature": "中国语言文学", "art_studies": "艺术学", "professional_tour_guide": "导游资格",
    "legal_professional": "法律职业资格", "high_school_chinese": "高中语文", "high_school_history": "高中历史",
    "middle_school_history": "初中历史", "civil_servant": "公务员", "sports_science": "体育学",
    "plant_protection": "植物保护", "basic_medicine": "基础医学", "clinical_medicine": "临床医学",
    "urban_and_rural_planner": "注册城乡规划师", "accountant": "注册会计师", "fire_engineer": "注册消防工程师",
    "environmental_impact_assessment_engineer": "环境影响评价工程师", "tax_accountant": "税务师",
    "physician": "医师资格",
}

# C-Eval's subject_mapping.json categories (lm-eval has no C-Eval groups below ceval-valid): subject -> group.
_MEMBERS = {
    "stem": "computer_network operating_system computer_architecture college_programming college_physics "
            "college_chemistry advanced_mathematics probability_and_statistics discrete_mathematics "
            "electrical_engineer metrology_engineer high_school_mathematics high_school_physics "
            "high_school_chemistry high_school_biology middle_school_mathematics middle_school_biology "
            "middle_school_physics middle_school_chemistry veterinary_medicine",
    "social_science": "college_economics business_administration marxism mao_zedong_thought education_science "
                      "teacher_qualification high_school_politics high_school_geography middle_school_politics "
                      "middle_school_geography",
    "humanities": "modern_chinese_history ideological_and_moral_cultivation logic law chinese_language_and_literature "
                  "art_studies professional_tour_guide legal_professional high_school_chinese high_school_history "
                  "middle_school_history",
    "other": "civil_servant sports_science plant_protection basic_medicine clinical_medicine urban_and_rural_planner "
             "accountant fire_engineer environmental_impact_assessment_engineer tax_accountant physician",
}
GROUPS = {s: g for s in SUBJECTS for g, members in _MEMBERS.items() if s in members.split()}

GROUP_NAMES = {"stem": "STEM", "social_science": "Social Science", "humanities": "Humanities", "other": "Other"}


def load_subject(root: Path, subject: str, split: str = "val") -> Subject:
    """A C-Eval subject's few-shot (dev) and scored (``split``) questions from ``root``.

    Raises:
        DataNotFoundError: neither the CSV nor the parquet layout is there.
    """
    dev, docs = (read_split(root / sp / f"{subject}_{sp}.csv", sorted((root / subject).glob(f"{sp}-*.parquet")),
                            question_from) for sp in ("dev", split))
    if dev is None or docs is None:
        raise data.DataNotFoundError(
            f"{root}: no C-Eval files for {subject} (expected dev/{subject}_dev.csv and {split}/{subject}_{split}.csv, "
            f"or {subject}/dev-*.parquet and {subject}/{split}-*.parquet)")
    return Subject(subject, dev, docs)


class CEval(LetterChoiceTask):
    """C-Eval as lm-evaluation-harness defines it: multiple choice, scored by the answer letters' log-likelihood."""

    name = "ceval"
    version = "2.0"
    metrics = {"acc": True, "acc_norm": True}
    answer_cue = "答案："
    split = "val"
    fewshot_split = "dev"

    def __init__(self, shots: int = 5, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None):
        root = data.find("ceval", data_dir)
        super().__init__([load_subject(root, s, self.split) for s in parse_subjects(subjects, GROUPS, "ceval")],
                         shots, limit)
        self.root = root

    def description(self, subject: str) -> str:
        return f"以下是中国关于{SUBJECTS[subject]}的单项选择题，请选出其中的正确答案。\n\n"

    def groups(self) -> dict[str, str]:
        return {s: GROUP_NAMES[GROUPS[s]] for s in self.subjects}
