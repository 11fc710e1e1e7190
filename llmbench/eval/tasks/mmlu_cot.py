"""MMLU with chain of thought, as lm-evaluation-harness's Flan CoT variants: ``mmlu_cot`` is its
``mmlu_flan_cot_fewshot`` (version 2.0), ``mmlu_cot_zeroshot`` its ``mmlu_flan_cot_zeroshot`` (version 3.0).

Both are generative: one greedy `GenerateUntil` per question (256 new tokens at most, lm-eval's
``max_gen_toks``); the whole reasoning text is kept in the per-sample record, the answer pulled out of
it by lm-eval's filters and scored by exact match with ``ignore_case`` and ``ignore_punctuation``
(lm-eval's ``exact_match``: lower case, then every character of Python's ``string.punctuation``
deleted, then string equality), so "(C)" matches the target "(C)" and so does "C." or "c)". The
target is the gold letter in parentheses, "(A)".."(D)".

A question reads (lm-eval's ``doc_to_text``, the same in both)::

    Q: {question.strip()}
    (A) {choices[0]} (B) {choices[1]} (C) {choices[2]} (D) {choices[3]}
    A: Let's think step by step.

``mmlu_cot`` (few-shot; default 4 shots, lm-eval's ``num_fewshot``): the subject's description from
lm-eval's per-subject YAML, "The following are multiple choice questions (with answers) about
{subject}." (without the blank line of the default MMLU template: lm-eval joins the description to
the first shot directly, so the prompt reads "...about abstract algebra.Q: Statement 1 | ...", and so
does this task), then the first ``shots`` of the subject's fixed chain-of-thought exemplars (the Flan
exemplars that lm-eval's YAML lists under ``fewshot_config.samples``, shipped here as
``data/mmlu_flan_cot_fewshot.json``, MIT), each ``"Q: {question.strip()}\\nA: {target}\\n\\n"`` (the
exemplar's question already holds its choices; its target starts "Let's think step by step."), then
the test question. Scored on the test split. Stop string "</s>" only, as lm-eval has it (so a model
that does not stop on its own writes the next "Q:" up to 256 tokens; the filter reads the first
answer). Filter ``get-answer``: the first match of ``(?<=answer is )(.*)(?=.)`` (the rest of that line
less its last character), stripped.

``mmlu_cot_zeroshot`` (lm-eval's default 0 shots): description "The following are multiple choice
questions (with answers) about {subject}.\\n\\n", then the question. Stop strings "</s>", "Q:",
"<|im_end|>". Scored on MMLU's validation split as lm-eval does (this YAML names no test split), read
from ``val/{subject}_val.csv`` (the authors' release) or ``{subject}/validation-*.parquet`` (cais/mmlu);
where the data has no validation split (../shared/data's MMLU has dev and test only) the test split is
scored instead, and the task's settings say which split ran. Filters:

- ``strict-match``: the first match of ``((?<=The answer is )(.*)(?=.)|(?<=answer is )(.*)(?=.)|
  (?<=The answer: )(.*)(?=.)|(?<=The final answer: )(.*)(?=.))``, stripped;
- ``flexible-extract`` (lm-eval's ``MultiChoiceRegexFilter``, ``group_select: -1``): the last "(X)" of
  the text; else the last of the choice texts found in the text, both lower-cased and with Unicode
  punctuation deleted, mapped to its "(X)"; else the last ":" followed by a bare letter A-D, as "(X)";
  else "[invalid]".

Subjects aggregate into lm-eval's groups (stem, humanities, social sciences, other) as ``mmlu`` does.
Every answer also carries chain-of-thought decay data (llmbench.eval.cot: reasoning steps, entropy per
step from the top-20 log-probabilities), gathered in results.json's ``cot_decay`` per subject.

Tested in tests/test_eval_mmlu_cot.py: prompts byte for byte for real questions, the filters and exact
match on crafted outputs, both variants end to end on stories260K and through the OpenAI-compatible
test server.
"""

from __future__ import annotations

import json
import os
import re
import string
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import cot, data
from ..api import Answer, Doc, GenerateUntil, Generation, Request, Scored, Task
from .choice import Question, parse_subjects, read_split
from .gsm8k import INVALID, regex_filter
from .mmlu import GROUP_NAMES, GROUPS, _csv_question, _hf_question, load_subject

MAX_TOKENS = 256
EXEMPLARS_FILE = Path(__file__).resolve().parent / "data" / "mmlu_flan_cot_fewshot.json"
LETTERS = ("A", "B", "C", "D")
GET_ANSWER = r"(?<=answer is )(.*)(?=.)"
STRICT = (r"((?<=The answer is )(.*)(?=.)|(?<=answer is )(.*)(?=.)|(?<=The answer: )(.*)(?=.)|"
          r"(?<=The final answer: )(.*)(?=.))")
FLEXIBLE = r"(\([A-Z]\))"
# Where the final answer begins, for the step count (llmbench.eval.cot): the strict patterns' cues.
ANSWER_CUE = re.compile(r"answer is |The answer: |The final answer: ")
_PUNCT_ASCII = str.maketrans("", "", string.punctuation)
_PUNCT_UNICODE = dict.fromkeys(i for i in range(sys.maxunicode) if unicodedata.category(chr(i)).startswith("P"))


def exact_match(pred: str, ref: str) -> float:
    """lm-eval's exact_match with ignore_case and ignore_punctuation (ASCII punctuation)."""
    return float(pred.lower().translate(_PUNCT_ASCII) == ref.lower().translate(_PUNCT_ASCII))


def multi_choice_filter(text: str, choices: Sequence[str], pattern: str = FLEXIBLE, group_select: int = -1,
                        ignore_case: bool = True, ignore_punctuation: bool = True) -> str:
    """lm-eval's ``MultiChoiceRegexFilter`` (mmlu/flan_cot_zeroshot/utils.py) on one response."""
    def find(regex: re.Pattern[str], resp: str, convert: dict[str, str] | None = None) -> Any:
        match: Any = regex.findall(resp)
        if match:
            match = match[group_select]
            if isinstance(match, tuple):
                match = [m for m in match if m][0]
            match = match.strip()
            if match and convert and match in convert:
                match = convert[match]
        return match

    def ignores(s: str) -> str:
        if ignore_case:
            s = s.lower()
        if ignore_punctuation:
            s = s.translate(_PUNCT_UNICODE)
        return s

    fallback, to_letter, alpha = [], {}, "A"
    plain = []
    for c in choices:
        m = ignores(c.strip())
        fallback.append(re.escape(m))
        to_letter[m] = f"({alpha})"
        plain.append(alpha)
        alpha = chr(ord(alpha) + 1)
    match = find(re.compile(pattern), text)
    if not match:
        match = find(re.compile("|".join(fallback)), ignores(text), to_letter)
        if not match:
            match = find(re.compile(rf":[\s]*({'|'.join(plain)})"), text, {a: f"({a})" for a in plain})
    return match if match else INVALID


def _val_split(root: Path, subject: str) -> list[Question] | None:
    csv_path = root / "val" / f"{subject}_val.csv"
    return read_split(csv_path, sorted((root / subject).glob("validation-*.parquet")),
                      _csv_question if csv_path.exists() else _hf_question, header=False)


class MMLUCoT(Task):
    """lm-eval's ``mmlu_flan_cot_fewshot``: the Flan CoT exemplars, "get-answer" filter, test split."""

    name = "mmlu_cot"
    version = "2.0"
    metrics = {"exact_match,get-answer": True}
    until: tuple[str, ...] = ("</s>",)
    default_shots = 4

    def __init__(self, shots: int = 4, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, top_logprobs: int = cot.TOP_LOGPROBS):
        self.top_logprobs = cot.check_top_logprobs(top_logprobs)
        if shots < 0:
            raise ValueError(f"shots must be >= 0, got {shots}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self.root = data.find("mmlu", data_dir)
        self.shots, self.limit = shots, limit
        self.subject_names = parse_subjects(subjects, GROUPS, self.name)
        self.split = "test"
        self.questions = {s: self._load(s) for s in self.subject_names}
        self._headers: dict[str, str] = {}
        self._exemplars = self._load_exemplars()

    def _load(self, subject: str) -> list[Question]:
        return load_subject(self.root, subject).docs

    def _load_exemplars(self) -> dict[str, Any]:
        if self.shots == 0:
            return {}
        ex = json.loads(EXEMPLARS_FILE.read_text(encoding="utf-8"))["subjects"]
        for s in self.subject_names:
            if self.shots > len(ex[s]["samples"]):
                raise ValueError(f"{self.name}: {s} has {len(ex[s]['samples'])} chain-of-thought exemplars in "
                                 f"lm-eval's YAML, fewer than --shots {self.shots}")
        return ex

    # ---- prompts ----

    @staticmethod
    def doc_to_text(q: Question) -> str:
        opts = " ".join(f"({L}) {c}" for L, c in zip(LETTERS, q.choices))
        return f"Q: {q.question.strip()}\n{opts}\nA: Let's think step by step."

    def description(self, subject: str) -> str:
        return f"The following are multiple choice questions (with answers) about {' '.join(subject.split('_'))}."

    def header(self, subject: str) -> str:
        if subject not in self._headers:
            desc = self._exemplars[subject]["description"] if self.shots else self.description(subject)
            shots = "".join(f"Q: {q.strip()}\nA: {t}\n\n" for q, t in
                            (self._exemplars[subject]["samples"][: self.shots] if self.shots else []))
            self._headers[subject] = desc + shots
        return self._headers[subject]

    def docs(self) -> list[Doc]:
        out = []
        for s in self.subject_names:
            qs = self.questions[s] if self.limit is None else self.questions[s][: self.limit]
            out += [Doc(i, s, {"question": q}) for i, q in enumerate(qs)]
        return out

    def prompt(self, doc: Doc) -> str:
        return self.header(doc.subject) + self.doc_to_text(doc.data["question"])

    def requests(self, doc: Doc) -> list[Request]:
        return [GenerateUntil(self.prompt(doc), self.until, max_tokens=MAX_TOKENS, temperature=0.0,
                              logprobs=self.top_logprobs)]

    # ---- scoring ----

    def target(self, doc: Doc) -> str:
        return f"({LETTERS[doc.data['question'].answer]})"

    def extract(self, text: str, choices: Sequence[str]) -> dict[str, str]:
        return {"get-answer": regex_filter(text, GET_ANSWER)}

    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        g: Generation = answers[0]  # type: ignore[assignment]
        ref = self.target(doc)
        pred = self.extract(g.text, doc.data["question"].choices)
        return Scored({f"exact_match,{k}": exact_match(v, ref) for k, v in pred.items()}, target=ref, pred=pred,
                      extra={"cot": cot.analyse(g.text, ANSWER_CUE, g.tokens, g.top_logprobs)})

    def answer_record(self, a: Answer) -> dict[str, Any]:
        return cot.answer_record(a)

    def extra_results(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"cot_decay": cot.decay_table(records, list(self.metrics), self.groups(), self.top_logprobs)}

    def groups(self) -> dict[str, str]:
        return {s: GROUP_NAMES[GROUPS[s]] for s in self.subject_names}

    def settings(self) -> dict[str, Any]:
        return {"shots": self.shots, "limit": self.limit, "split": self.split, "subjects": self.subject_names,
                "fewshot": "lm-eval's flan_cot_fewshot exemplars, first_n" if self.shots else None,
                "until": list(self.until), "max_tokens": MAX_TOKENS, "temperature": 0.0,
                "filters": self._filters(), "ignore_case": True, "ignore_punctuation": True,
                "top_logprobs": self.top_logprobs}

    def _filters(self) -> dict[str, str]:
        return {"get-answer": GET_ANSWER}


class MMLUCoTZeroShot(MMLUCoT):
    """lm-eval's ``mmlu_flan_cot_zeroshot``: strict and flexible filters, validation split where present."""

    name = "mmlu_cot_zeroshot"
    version = "3.0"
    metrics = {"exact_match,strict-match": True, "exact_match,flexible-extract": True}
    until = ("</s>", "Q:", "<|im_end|>")
    default_shots = 0

    def __init__(self, shots: int = 0, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, top_logprobs: int = cot.TOP_LOGPROBS):
        # zero-shot by definition: a --shots meant for the other tasks of a run is ignored here (for
        # exemplars, run mmlu_cot)
        super().__init__(0, limit, subjects, data_dir, top_logprobs)

    def _load(self, subject: str) -> list[Question]:
        val = _val_split(self.root, subject)
        if val is not None:
            self.split = "validation" if self.split in ("test", "validation") else self.split
            return val
        self.split = "test (the data has no validation split; lm-eval scores validation)"
        return load_subject(self.root, subject).docs

    def description(self, subject: str) -> str:
        return super().description(subject) + "\n\n"

    def extract(self, text: str, choices: Sequence[str]) -> dict[str, str]:
        return {"strict-match": regex_filter(text, STRICT), "flexible-extract": multi_choice_filter(text, choices)}

    def _filters(self) -> dict[str, str]:
        return {"strict-match": STRICT, "flexible-extract": f"MultiChoiceRegexFilter {FLEXIBLE}, group_select -1"}


