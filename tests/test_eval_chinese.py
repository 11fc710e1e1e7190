"""C-Eval and CMMLU as lm-evaluation-harness's ``ceval-valid`` and ``cmmlu`` tasks, on the real data in
../shared/data: prompts byte for byte against strings written out by hand from the CSV rows as lm-eval's
templates render them, subject and document counts (../shared/data/*/COUNTS.tsv), groups, --subjects,
where a missing data set was looked for, the Hugging Face parquet layout, and the stories260K engine
answering two documents end to end. Tests skip when ../shared/data is absent."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import SHARED

from llmbench import LLM
from llmbench.eval import data
from llmbench.eval.api import LLAnswer
from llmbench.eval.tasks.ceval import CEval
from llmbench.eval.tasks.cmmlu import CMMLU

DATA = SHARED / "data"


@pytest.fixture(scope="module")
def data_dir() -> Path:
    for name in ("ceval", "cmmlu"):
        if not (DATA / name).is_dir():
            pytest.skip(f"{DATA / name} not found: the C-Eval and CMMLU data live in ../shared/data")
    return DATA


def doc_of(task, subject: str, i: int):
    return next(d for d in task.docs() if d.subject == subject and d.id == i)


def counts(name: str) -> dict[str, list[str]]:
    with open(DATA / name / "COUNTS.tsv", encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return {r[0]: r[1:] for r in rows if r[0] != "TOTAL"}


# ---- prompts, by hand ----
# C-Eval basic_medicine: dev/basic_medicine_dev.csv row id 0 (answer A) as the shot, val row id 0
# (answer D) as the document. ceval-valid_basic_medicine.yaml's description, _default_ceval_yaml's
# doc_to_text "{{question.strip()}}\nA. {{A}}\nB. {{B}}\nC. {{C}}\nD. {{D}}\n答案：", target delimiter " ",
# few-shot delimiter "\n\n".

CEVAL_DESC = "以下是中国关于基础医学的单项选择题，请选出其中的正确答案。\n\n"
CEVAL_SHOT = ("下列选项中，符合原癌基因概念的是____\n"
              "A. 是正常基因\n"
              "B. 是细胞癌基因\n"
              "C. 是肿瘤抑制基因\n"
              "D. 凋亡调节基因\n"
              "答案： A\n\n")
CEVAL_DOC = ("不属于第二信使的物质是____\n"
             "A. cAMP\n"
             "B. cGMP\n"
             "C. $IP_3$\n"
             "D. 胰岛素\n"
             "答案：")


def test_ceval_prompt_one_shot_by_hand(data_dir):
    t = CEval(shots=1, subjects=["basic_medicine"], data_dir=data_dir)
    d = doc_of(t, "basic_medicine", 0)
    want = CEVAL_DESC + CEVAL_SHOT + CEVAL_DOC
    assert want.endswith("\u7b54\u6848\uff1a")  # 答案 + FULLWIDTH COLON, as in _default_ceval_yaml
    assert t.prompt(d).encode() == want.encode()
    reqs = t.requests(d)
    assert [r.context for r in reqs] == [want] * 4
    assert [r.continuation for r in reqs] == [" A", " B", " C", " D"]
    s = t.score(d, [LLAnswer(-4.0, False), LLAnswer(-3.0, False), LLAnswer(-2.0, False), LLAnswer(-1.0, True)])
    assert (s.target, s.pred, s.metrics) == ("D", "D", {"acc": 1.0, "acc_norm": 1.0})


def test_ceval_prompt_zero_shot_by_hand(data_dir):
    t = CEval(shots=0, subjects=["basic_medicine"], data_dir=data_dir)
    assert t.prompt(doc_of(t, "basic_medicine", 0)).encode() == (CEVAL_DESC + CEVAL_DOC).encode()


def test_ceval_choices_keep_their_spaces(data_dir):
    # val/high_school_biology_val.csv id 15: choices "  1/2" .. "  1/4"; lm-eval renders {{A}} unstripped
    t = CEval(shots=0, subjects=["high_school_biology"], data_dir=data_dir)
    want = ("以下是中国关于高中生物的单项选择题，请选出其中的正确答案。\n\n"
            "已知21四体的胚胎不能成活。现有一对夫妇均为21三体综合征患者，假设他们在产生配子时，第21号的三体染色体"
            "一条移向细胞的一极，两条移向另一极,则他们生出患病女孩的概率是____\n"
            "A.   1/2\nB.   1/3\nC.   2/3\nD.   1/4\n答案：")
    d = doc_of(t, "high_school_biology", 15)
    assert t.prompt(d) == want
    assert t.score(d, [LLAnswer(-1.0, False)] * 4).target == "B"


# CMMLU chinese_food_culture: dev/chinese_food_culture.csv row 0 (answer A) as the shot, test row 72
# (answer D), whose Question ends in a space that {{Question.strip()}} drops. cmmlu_chinese_food_culture
# .yaml's description, _default_template_yaml's doc_to_text.

CMMLU_DESC = "以下是关于中国饮食文化的单项选择题，请直接给出正确答案的选项。\n\n"
CMMLU_SHOT = ("孔府菜的代表名菜有\n"
              "A. 诗礼银杏\n"
              "B. 扒大乌参\n"
              "C. 黄焖鱼翅\n"
              "D. 清汤燕窝\n"
              "答案： A\n\n")
CMMLU_DOC = ("“ 猫耳朵 ” 是哪里的特色小吃\n"
             "A. 贵州\n"
             "B. 江苏\n"
             "C. 北京\n"
             "D. 浙江\n"
             "答案：")


def test_cmmlu_prompt_one_shot_by_hand(data_dir):
    t = CMMLU(shots=1, subjects=["chinese_food_culture"], data_dir=data_dir)
    d = doc_of(t, "chinese_food_culture", 72)
    assert d.data["question"].question.endswith("小吃 ")  # the raw CSV field, before .strip()
    want = CMMLU_DESC + CMMLU_SHOT + CMMLU_DOC
    assert t.prompt(d).encode() == want.encode()
    reqs = t.requests(d)
    assert [r.continuation for r in reqs] == [" A", " B", " C", " D"]
    s = t.score(d, [LLAnswer(-1.0, True), LLAnswer(-2.0, False), LLAnswer(-3.0, False), LLAnswer(-4.0, False)])
    assert (s.target, s.pred, s.metrics) == ("D", "A", {"acc": 0.0, "acc_norm": 0.0})


def test_cmmlu_prompt_zero_shot_by_hand(data_dir):
    t = CMMLU(shots=0, subjects=["chinese_food_culture"], data_dir=data_dir)
    assert t.prompt(doc_of(t, "chinese_food_culture", 72)).encode() == (CMMLU_DESC + CMMLU_DOC).encode()


@pytest.mark.parametrize("cls, subject, answers", [
    (CEval, "basic_medicine", "ADCDA"),
    (CMMLU, "chinese_food_culture", "ADDBD"),
])
def test_five_shots_are_the_first_five_dev_rows_in_order(data_dir, cls, subject, answers):
    t = cls(shots=5, subjects=[subject], data_dir=data_dir)
    header = t.header(subject)
    assert header.startswith(t.description(subject))
    assert [part[-1] for part in header.split("\n\n")[1:-1]] == list(answers)  # "...答案： X" per shot
    assert all(r.context.startswith(header) for d in t.docs() for r in t.requests(d))


# ---- counts, groups, --subjects ----

def test_ceval_counts(data_dir):
    t = CEval(data_dir=data_dir)
    assert (t.name, t.version, t.split, t.fewshot_split) == ("ceval", "2.0", "val", "dev")
    assert len(t.subjects) == 52
    docs = t.docs()
    assert len(docs) == 1346
    want = counts("ceval")
    assert set(t.subjects) == set(want)
    for name, s in t.subjects.items():
        assert (len(s.fewshot), len(s.docs)) == (int(want[name][0]), int(want[name][1])), name
    assert len(CEval(limit=3, data_dir=data_dir).docs()) == 52 * 3


def test_cmmlu_counts(data_dir):
    t = CMMLU(data_dir=data_dir)
    assert (t.name, t.version, t.split, t.fewshot_split) == ("cmmlu", "1.0", "test", "dev")
    assert len(t.subjects) == 67
    assert len(t.docs()) == 11582
    want = counts("cmmlu")
    assert set(t.subjects) == set(want)
    for name, s in t.subjects.items():
        assert (len(s.fewshot), len(s.docs)) == (int(want[name][0]), int(want[name][1])), name


def test_ceval_groups_are_the_subject_mapping_categories(data_dir):
    groups = CEval(shots=0, limit=1, data_dir=data_dir).groups()
    mapping = json.loads((data_dir / "ceval" / "subject_mapping.json").read_text(encoding="utf-8"))
    assert groups == {s: v[2] for s, v in mapping.items()}
    sizes = {g: list(groups.values()).count(g) for g in set(groups.values())}
    assert sizes == {"STEM": 20, "Social Science": 10, "Humanities": 11, "Other": 11}


def test_cmmlu_has_no_groups_below_the_task(data_dir):
    assert CMMLU(shots=0, limit=1, data_dir=data_dir).groups() == {}


def test_subjects_by_name_and_by_group(data_dir):
    t = CEval(shots=0, subjects=["law", "humanities", "stem"], data_dir=data_dir)
    assert list(t.subjects)[:3] == ["law", "modern_chinese_history", "ideological_and_moral_cultivation"]
    assert len(t.subjects) == 11 + 20  # law is one of the humanities, listed once
    assert set(t.groups().values()) == {"Humanities", "STEM"}
    assert list(CMMLU(shots=0, subjects=["world_religions", "agronomy"], data_dir=data_dir).subjects) == [
        "world_religions", "agronomy"]
    assert len(CMMLU(shots=0, subjects=["cmmlu"], data_dir=data_dir).subjects) == 67
    for cls in (CEval, CMMLU):
        with pytest.raises(ValueError, match="unknown subject 'astrology'"):
            cls(subjects=["astrology"], data_dir=data_dir)


# ---- where data is looked for ----

@pytest.mark.parametrize("cls, name", [(CEval, "ceval"), (CMMLU, "cmmlu")])
def test_missing_data_says_where_it_looked(tmp_path, monkeypatch, cls, name):
    monkeypatch.delenv("LLMBENCH_DATA", raising=False)
    monkeypatch.setattr(data, "_CHECKOUT", tmp_path / "checkout")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    with pytest.raises(data.DataNotFoundError) as e:
        cls(data_dir=tmp_path / "given")            # a folder given is the only place looked in
    msg = str(e.value)
    assert str(tmp_path / "given" / name) in msg and str(tmp_path / "shared" / "data" / name) not in msg
    assert "--data-dir" in msg
    with pytest.raises(data.DataNotFoundError) as e:
        cls()
    assert str(tmp_path / "shared" / "data" / name) in str(e.value)


@pytest.mark.parametrize("cls, name, subject, missing", [
    (CEval, "ceval", "law", "val/law_val.csv"), (CMMLU, "cmmlu", "arts", "test/arts.csv")])
def test_missing_subject_files_name_the_file(tmp_path, cls, name, subject, missing):
    (tmp_path / name).mkdir()
    with pytest.raises(data.DataNotFoundError, match=missing):
        cls(subjects=[subject], data_dir=tmp_path)


@pytest.mark.parametrize("cls, name, subject, files", [
    (CEval, "ceval", "basic_medicine", {"dev": "dev/basic_medicine_dev.csv", "val": "val/basic_medicine_val.csv"}),
    (CMMLU, "cmmlu", "chinese_food_culture", {"dev": "dev/chinese_food_culture.csv",
                                              "test": "test/chinese_food_culture.csv"}),
])
def test_hugging_face_parquet_layout(data_dir, tmp_path, monkeypatch, cls, name, subject, files):
    # {subject}/{split}-00000-of-00001.parquet with the CSV's columns; the parquet reader is stood in for
    # by the CSV rows, so this checks the layout and columns without pandas/pyarrow
    folder = tmp_path / name / subject
    folder.mkdir(parents=True)
    rows = {}
    for split, rel in files.items():
        p = folder / f"{split}-00000-of-00001.parquet"
        p.touch()
        rows[p.name] = data.read_csv(data_dir / name / rel, header=True)
    monkeypatch.setattr(data, "read_parquet", lambda path: rows[Path(path).name])
    hf = cls(shots=1, subjects=[subject], data_dir=tmp_path)
    ref = cls(shots=1, subjects=[subject], data_dir=data_dir)
    assert [hf.prompt(d) for d in hf.docs()] == [ref.prompt(d) for d in ref.docs()]
    assert [hf.score(d, [LLAnswer(0.0, False)] * 4).target for d in hf.docs()] == [
        ref.score(d, [LLAnswer(0.0, False)] * 4).target for d in ref.docs()]


# ---- end to end on the engine ----

@pytest.mark.parametrize("cls, subject", [(CEval, "basic_medicine"), (CMMLU, "chinese_food_culture")])
def test_stories260k_answers_two_docs(data_dir, stories_path, cls, subject):
    # stories260K's 512-token vocabulary spells Chinese mostly as byte tokens: 1-shot prompts of these
    # subjects stay within the 512 positions it was trained on; the point is the pipeline, not accuracy
    t = cls(shots=1, limit=2, subjects=[subject], data_dir=data_dir)
    docs = t.docs()
    assert len(docs) == 2
    reqs = [r for d in docs for r in t.requests(d)]
    llm = LLM(stories_path, threads=2)
    assert max(len(llm.tokenize(r.context + r.continuation)) for r in reqs) <= 512
    out = llm.loglikelihood([(r.context, r.continuation) for r in reqs])
    answers = [LLAnswer(lp, greedy) for lp, greedy in out]
    for k, d in enumerate(docs):
        s = t.score(d, answers[4 * k: 4 * k + 4])
        lls = [a.logprob for a in answers[4 * k: 4 * k + 4]]
        assert len(lls) == 4 and all(math.isfinite(x) and x < 0 for x in lls)
        assert s.pred == "ABCD"[lls.index(max(lls))]
        assert s.metrics["acc"] in (0.0, 1.0) and s.metrics["acc_norm"] == s.metrics["acc"]
        assert s.target == "ABCD"[d.data["question"].answer]
