"""MT-Bench (Zheng et al., 2023) as FastChat's llm_judge defines it: two-turn answers generated through
the model's chat template, graded one answer at a time by a judge model (FastChat's "single" mode).

Answers (FastChat's gen_model_answer.py): for each of the 80 questions, turn 1 is the first user message
alone; turn 2 is [user turn 1, the model's answer, user turn 2]. Each answer is generated through the
model's chat template (the engine renders the GGUF file's template; a server its own) with at most 1024
new tokens, at the question category's temperature (FastChat's ``temperature_config``: writing and
roleplay 0.7, stem and humanities 0.1, extraction, math, coding and reasoning 0, i.e. greedy; sampled
requests get seed = the question id, so a run repeats). The answer is stripped of surrounding
whitespace, as FastChat strips it. (FastChat samples with Hugging Face's generate defaults beside the
temperature; here only the temperature is set: top-p 1, no top-k.)

Grading (FastChat's gen_judgment.py, ``--mode single``): one request to the judge per turn, its system
prompt and the user prompt filled from judge_prompts.jsonl, temperature 0, at most 2048 new tokens
(FastChat's for an OpenAI judge; a judge on the engine gets at most half its context):

- turn 1: ``single-v1`` (question, answer), or ``single-math-v1`` (question, ref_answer_1, answer)
  for the categories with reference answers (math, reasoning, coding; the references are GPT-4's,
  reference_answer/gpt-4.jsonl);
- turn 2: ``single-v1-multi-turn`` (question_1, answer_1, question_2, answer_2), or
  ``single-math-v1-multi-turn`` with ref_answer_1 and ref_answer_2.

The rating is the number in the first ``[[n]]`` of the judgment, else in the first ``[n]`` (FastChat's
one_score_pattern and its backup); a judgment with neither is unparseable (FastChat's -1): counted
(``unparseable``, per turn) and left out of the means. Numbers are read as FastChat's regex matches them
(``\\d+\\.?\\d*``), outside 1..10 included, as FastChat keeps them.

Metrics per question: ``score_turn1``, ``score_turn2`` (the ratings), ``score`` (the mean of the
question's parseable ratings: over questions it is FastChat's average when every rating parses),
``unparseable`` (the share of the question's two judgments without a rating), and ``consistency``: 1 when the
turn-2 rating is at least the turn-1 rating, 0 when it is lower, none when either is unparseable. It is
the share of dialogues whose second answer, which must keep to the first turn's content and
constraints while following a new instruction, is judged no worse than the first: the multi-turn
consistency figure of the seed studies. Per category (subject) and overall, each with a 95% interval
(Wilson for the shares, normal for the mean ratings).

The judge is any adapter (``--judge``: a GGUF file for the engine, or ``NAME@URL`` / ``URL`` of an
OpenAI-compatible server); its prompts are chat messages [system, user], so they go through the judge's
chat template. A judge as small as the model under test only exercises the pipeline: its ratings say
nothing about the answers.

Data: FastChat's ``fastchat/llm_judge/data/mt_bench`` files in a folder ``mt_bench/``: question.jsonl,
reference_answer/gpt-4.jsonl, and judge_prompts.jsonl (there or in the folder above, as in FastChat).

The model's two answers are kept apart from the judgments, as FastChat keeps gen_model_answer's from
gen_judgment's: each turn goes to ``DIR/partial_mt_bench.jsonl`` as it is answered (llmbench.eval.runner),
so a run killed in the judge round, or a judge that failed every retry, resumes by judging only.

Tested in tests/test_eval_mt_bench.py: the judge prompts filled byte for byte for real questions, the
rating parser and the consistency figure on crafted judgments, the task end to end on stories260K
judged by stories260K, through an OpenAI-compatible test server, and resume (after a kill in the judge
round and after a judge that failed: the model asked nothing).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ... import LLMBenchError
from .. import data
from ..api import Answer, Doc, ForJudge, GenerateUntil, Request, Scored, Task

MAX_TOKENS = 1024                   # gen_model_answer.py --max-new-token
JUDGE_MAX_TOKENS = 2048             # chat_completion_openai(..., max_tokens=2048) for the judge
NEED_REF_CATS = ("math", "reasoning", "coding")
TEMPERATURE = {"writing": 0.7, "roleplay": 0.7, "extraction": 0.0, "math": 0.0, "coding": 0.0,
               "reasoning": 0.0, "stem": 0.1, "humanities": 0.1}
DEFAULT_TEMPERATURE = 0.7           # a category not in temperature_config
ONE_SCORE = re.compile(r"\[\[(\d+\.?\d*)\]\]")
ONE_SCORE_BACKUP = re.compile(r"\[(\d+\.?\d*)\]")
CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


# FastChat's "zero_shot" conversation (ADD_COLON_SINGLE, sep "\n### "), the format a model without a chat
# template of its own is given: "{system}\n### Human: {q}\n### Assistant: {a}\n### Human: ...\n### Assistant:".
ZERO_SHOT_TEMPLATE = (
    r"""{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% else %}{{ "A chat between a """
    r"""curious human and an artificial intelligence assistant. The assistant gives helpful, detailed, and """
    r"""polite answers to the human's questions." }}{% endif %}{% for m in messages %}{% if m['role'] != """
    r"""'system' %}{{ '\n### ' + ('Human' if m['role'] == 'user' else 'Assistant') + ': ' + m['content'] }}"""
    r"""{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '\n### Assistant:' }}{% endif %}""")


def give_chat_template(adapter: Any) -> bool:
    """Give an engine model without a chat template FastChat's zero_shot format (what FastChat uses for
    a model it has no template for, without the one-shot example); True when it did. (FastChat also
    stops such a model at "###"; here it runs to EOS or the token limit.)"""
    tok = getattr(getattr(adapter, "llm", None), "tokenizer", None)
    if tok is None or tok.chat_template:
        return False
    tok.chat_template = ZERO_SHOT_TEMPLATE
    return True


def parse_rating(judgment: str) -> float | None:
    """FastChat's rating: the first ``[[n]]``, else the first ``[n]``; None where there is neither."""
    m = ONE_SCORE.search(judgment) or ONE_SCORE_BACKUP.search(judgment)
    return float(m.group(1)) if m else None


def consistency(turn1: float | None, turn2: float | None) -> float | None:
    """1.0 when the second answer is rated at least as high as the first, 0.0 when lower, None when
    either rating is missing."""
    if turn1 is None or turn2 is None:
        return None
    return float(turn2 >= turn1)


def judge_messages(template: dict[str, Any], question: dict[str, Any], answers: Sequence[str],
                   ref: Sequence[str] | None, turn: int) -> tuple[dict[str, str], ...]:
    """[system, user] for judging ``turn`` (1 or 2) of ``answers``, as FastChat's run_judge_single fills
    ``template`` (a judge_prompts.jsonl entry)."""
    kwargs: dict[str, str] = {}
    if ref is not None:
        kwargs["ref_answer_1"] = ref[0]
        if turn == 2:
            kwargs["ref_answer_2"] = ref[1]
    if turn == 2:
        user = template["prompt_template"].format(question_1=question["turns"][0], question_2=question["turns"][1],
                                                  answer_1=answers[0], answer_2=answers[1], **kwargs)
    else:
        user = template["prompt_template"].format(question=question["turns"][0], answer=answers[0], **kwargs)
    return ({"role": "system", "content": template["system_prompt"]}, {"role": "user", "content": user})


def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for i, row in data.read_jsonl(path):
        if not isinstance(row, dict):
            raise LLMBenchError(f"{path}:{i}: expected a JSON object, got {json.dumps(row)[:200]}")
        rows.append(row)
    return rows


def load(root: Path) -> tuple[list[dict[str, Any]], dict[int, list[str]], dict[str, dict[str, Any]]]:
    """(questions in file order, question id -> GPT-4's reference turns, judge prompts by name)."""
    qpath = root / "question.jsonl"
    if not qpath.exists():
        raise data.DataNotFoundError(f"{root}: no question.jsonl (FastChat's fastchat/llm_judge/data/mt_bench)")
    questions = _jsonl(qpath)
    for q in questions:
        if not (isinstance(q.get("question_id"), int) and isinstance(q.get("category"), str)
                and isinstance(q.get("turns"), list) and len(q["turns"]) == 2
                and all(isinstance(t, str) for t in q["turns"])):
            raise LLMBenchError(f"{qpath}: expected question_id, category and two turns, got {json.dumps(q)[:200]}")
    ppath = next((p for p in (root / "judge_prompts.jsonl", root.parent / "judge_prompts.jsonl") if p.exists()), None)
    if ppath is None:
        raise data.DataNotFoundError(f"{root}: no judge_prompts.jsonl (FastChat's fastchat/llm_judge/data/"
                                     "judge_prompts.jsonl, beside question.jsonl or in the folder above)")
    prompts = {p["name"]: p for p in _jsonl(ppath) if isinstance(p.get("name"), str)}
    for name in ("single-v1", "single-math-v1", "single-v1-multi-turn", "single-math-v1-multi-turn"):
        if name not in prompts or not all(isinstance(prompts[name].get(k), str)
                                          for k in ("system_prompt", "prompt_template")):
            raise LLMBenchError(f"{ppath}: no judge prompt {name!r} with system_prompt and prompt_template")
    refs: dict[int, list[str]] = {}
    rpath = root / "reference_answer" / "gpt-4.jsonl"
    if rpath.exists():
        for r in _jsonl(rpath):
            try:
                refs[int(r["question_id"])] = [str(t) for t in r["choices"][0]["turns"]]
            except (KeyError, IndexError, TypeError, ValueError) as e:
                raise LLMBenchError(f"{rpath}: a reference answer without question_id/choices[0].turns ({e})") from e
    missing = [q["question_id"] for q in questions if q["category"] in NEED_REF_CATS and q["question_id"] not in refs]
    if missing:
        raise data.DataNotFoundError(f"{rpath}: no GPT-4 reference answers for questions {missing[:10]} (math, "
                                     "reasoning and coding are judged against them)")
    return questions, refs, prompts


class MTBench(Task):
    """FastChat's MT-Bench, single-answer grading. Subjects are the eight categories; ``limit`` is
    questions per category, in file order. Needs a judge (the runner's ``judge`` adapter)."""

    name = "mt_bench"
    version = "fastchat-single-v1"
    metrics = {"score": True, "score_turn1": True, "score_turn2": True, "consistency": True, "unparseable": False}
    chunk_by_subject = False      # the categories share no prompt prefix: batch them together
    mean_metrics = ("score", "score_turn1", "score_turn2")

    def __init__(self, shots: int = 0, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, *, judge_max_tokens: int = JUDGE_MAX_TOKENS):
        if shots:
            raise ValueError(f"mt_bench is zero-shot, got --shots {shots}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        if judge_max_tokens < 1:
            raise ValueError(f"judge_max_tokens must be >= 1, got {judge_max_tokens}")
        questions, self.refs, self.prompts = load(data.find("mt_bench", data_dir))
        cats = list(dict.fromkeys(q["category"] for q in questions))
        if subjects:
            unknown = [s for s in subjects if s not in cats]
            if unknown:
                raise ValueError(f"mt_bench has no category {unknown[0]!r} (categories: {', '.join(cats)})")
            cats = [c for c in cats if c in subjects]
        self.questions = []
        for c in cats:
            qs = [q for q in questions if q["category"] == c]
            self.questions += qs if limit is None else qs[:limit]
        self.limit, self.judge_max_tokens = limit, judge_max_tokens

    def docs(self) -> list[Doc]:
        return [Doc(q["question_id"], q["category"], q) for q in self.questions]

    def prompt(self, doc: Doc) -> str:
        return doc.data["turns"][0]

    def _answer(self, doc: Doc, messages: list[dict[str, str]]) -> GenerateUntil:
        t = TEMPERATURE.get(doc.subject, DEFAULT_TEMPERATURE)
        return GenerateUntil(tuple(messages), (), max_tokens=MAX_TOKENS, temperature=t,
                             seed=doc.data["question_id"] if t > 0 else None)

    def requests(self, doc: Doc) -> list[Request]:
        return [self._answer(doc, [{"role": "user", "content": doc.data["turns"][0]}])]

    def judge_requests(self, doc: Doc, answers: Sequence[str]) -> list[ForJudge]:
        """The two judge requests (turn 1, turn 2) for the model's ``answers``."""
        ref = self.refs.get(doc.data["question_id"]) if doc.subject in NEED_REF_CATS else None
        names = ("single-math-v1", "single-math-v1-multi-turn") if ref else ("single-v1", "single-v1-multi-turn")
        return [ForJudge(GenerateUntil(judge_messages(self.prompts[n], doc.data, answers, ref, turn), (),
                                       max_tokens=self.judge_max_tokens, temperature=0.0))
                for turn, n in ((1, names[0]), (2, names[1]))]

    def followup(self, doc: Doc, answers: Sequence[Answer]) -> list[Request]:
        said = [a.text.strip() for a in answers]  # type: ignore[union-attr]
        if len(answers) == 1:       # turn 2 sees turn 1 and the model's answer to it
            q = doc.data["turns"]
            return [self._answer(doc, [{"role": "user", "content": q[0]}, {"role": "assistant", "content": said[0]},
                                       {"role": "user", "content": q[1]}])]
        if len(answers) == 2:
            return list(self.judge_requests(doc, said))
        return []

    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        said = [a.text.strip() for a in answers[:2]]  # type: ignore[union-attr]
        judgments = [a.text for a in answers[2:4]]  # type: ignore[union-attr]
        r1, r2 = (parse_rating(j) for j in judgments)
        rated = [r for r in (r1, r2) if r is not None]
        return Scored({"score": sum(rated) / len(rated) if rated else None, "score_turn1": r1, "score_turn2": r2,
                       "consistency": consistency(r1, r2), "unparseable": (2 - len(rated)) / 2},
                      target=None, pred=[r1, r2],
                      extra={"question_id": doc.data["question_id"], "turns": said, "judgments": judgments,
                             "ratings": [r1, r2],
                             "judge_prompts": [n for n in (("single-math-v1", "single-math-v1-multi-turn")
                                                           if doc.subject in NEED_REF_CATS
                                                           else ("single-v1", "single-v1-multi-turn"))]})

    def settings(self) -> dict[str, Any]:
        return {"shots": 0, "limit": self.limit, "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE,
                "judge_max_tokens": self.judge_max_tokens, "judge_temperature": 0.0,
                "reference_categories": list(NEED_REF_CATS), "reference_answers": "gpt-4",
                "rating_patterns": [ONE_SCORE.pattern, ONE_SCORE_BACKUP.pattern],
                "consistency": "share of questions with turn-2 rating >= turn-1 rating (both parseable)"}
