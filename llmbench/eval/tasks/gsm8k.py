"""GSM8K (Cobbe et al., 2021) as lm-evaluation-harness's ``gsm8k`` and ``gsm8k_cot`` tasks (version 3.0).

Both are generative: one greedy `GenerateUntil` per test question (256 new tokens at most, lm-eval's
``max_gen_toks``), the answer pulled out of the text by two filters, each scored by exact match.

``gsm8k`` (lm-eval's gsm8k.yaml), 5-shot. A shot is ``"Question: {question}\\nAnswer: {answer}\\n\\n"``
with the whole reference solution as the answer (its "<<48/2=24>>" calculator notes and the final
"#### 72" line included); the test question is ``"Question: {question}\\nAnswer:"``. The shots are drawn
from the train split by lm-eval's default sampler: one ``random.Random(1234)`` (its fewshot seed) shared
by the whole run, ``sample(train, shots)`` once per test question in document order, so question i gets
the (i+1)-th draw whatever ``limit`` is. Stop strings "Question:", "</s>", "<|im_end|>". Filters:

- ``strict-match``: the first match of ``#### (\\-?[0-9\\.\\,]+)``, its group;
- ``flexible-extract``: the last match of ``(-?[$0-9.,]{2,})|(-?[0-9]+)``, its first non-empty group.

``gsm8k_cot`` (lm-eval's gsm8k-cot.yaml), 8-shot: the 8 chain-of-thought exemplars of Wei et al. fixed in
that file (``COT_EXEMPLARS``, first ``shots`` of them), each ``"Q: {question}\\nA: {target}\\n\\n"``, then
``"Q: {question}\\nA:"``. (The YAML writes the template as a quoted scalar over three lines with a blank one
between; YAML folds that to a single newline.) The reference is the number after "####". Stop strings
"Q:", "</s>", "<|im_end|>". ``strict-match`` is the first match of ``The answer is (\\-?[0-9\\.\\,]+).``
(the final "." is any character, as in lm-eval's pattern); ``flexible-extract`` as above.
Each gsm8k_cot answer also carries chain-of-thought decay data (llmbench.eval.cot: its reasoning steps,
the sentences before "The answer is", and their entropy from the top-20 log-probabilities, which the
requests ask for; lm-eval asks for none, which changes no token of a greedy answer), gathered in
results.json's ``cot_decay``.

A filter that finds nothing gives "[invalid]". Exact match (lm-eval's ``exact_match`` with the task's
``regexes_to_ignore``, ``ignore_case: true``, ``ignore_punctuation: false``) deletes, in this order and
from both the extracted answer and the reference, every ",", every "$", everything up to and including
the last "#### ", and a "." at the end (or before a final newline, as ``re``'s ``$`` matches), then
lower-cases both and compares the strings: "$1,000." matches "1000", "18.00" does not match "18".

Data: openai/grade-school-math's ``gsm8k/test.jsonl`` and ``gsm8k/train.jsonl`` ({"question", "answer"}
per line), or Hugging Face's openai/gsm8k layout (``gsm8k/main/test-*.parquet``, ``train-*.parquet``).
``gsm8k`` with shots needs the train split; ``gsm8k_cot`` and ``--shots 0`` need only the test split.

Tested in tests/test_eval_gsm8k.py: prompts byte for byte for a real question, the filters and the
normalisation on crafted outputs, both tasks end to end on stories260K and through an OpenAI-compatible
test server.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import cot, data
from ..api import Answer, Doc, GenerateUntil, Request, Scored, Task

INVALID = "[invalid]"                       # lm-eval's RegexFilter fallback
ANSWER_CUE = "The answer is"                # gsm8k_cot's final answer, for the step count (llmbench.eval.cot)
FEWSHOT_SEED = 1234                         # lm-eval's default --fewshot_random_seed
MAX_TOKENS = 256                            # lm-eval's default max_gen_toks
FLEXIBLE = r"(-?[$0-9.,]{2,})|(-?[0-9]+)"   # flexible-extract, last match
# exact_match's regexes_to_ignore, applied in this order to prediction and reference alike
IGNORE = (",", r"\$", r"(?s).*#### ", r"\.$")

# gsm8k-cot.yaml's fewshot_config.samples: (question, target)
COT_EXEMPLARS = (
    ("There are 15 trees in the grove. Grove workers will plant trees in the grove today. After they are done, "
     "there will be 21 trees. How many trees did the grove workers plant today?",
     "There are 15 trees originally. Then there were 21 trees after some more were planted. So there must have "
     "been 21 - 15 = 6. The answer is 6."),
    ("If there are 3 cars in the parking lot and 2 more cars arrive, how many cars are in the parking lot?",
     "There are originally 3 cars. 2 more cars arrive. 3 + 2 = 5. The answer is 5."),
    ("Leah had 32 chocolates and her sister had 42. If they ate 35, how many pieces do they have left in total?",
     "Originally, Leah had 32 chocolates. Her sister had 42. So in total they had 32 + 42 = 74. After eating 35, "
     "they had 74 - 35 = 39. The answer is 39."),
    ("Jason had 20 lollipops. He gave Denny some lollipops. Now Jason has 12 lollipops. How many lollipops did "
     "Jason give to Denny?",
     "Jason started with 20 lollipops. Then he had 12 after giving some to Denny. So he gave Denny 20 - 12 = 8. "
     "The answer is 8."),
    ("Shawn has five toys. For Christmas, he got two toys each from his mom and dad. How many toys does he have "
     "now?",
     "Shawn started with 5 toys. If he got 2 toys each from his mom and dad, then that is 4 more toys. "
     "5 + 4 = 9. The answer is 9."),
    ("There were nine computers in the server room. Five more computers were installed each day, from monday to "
     "thursday. How many computers are now in the server room?",
     "There were originally 9 computers. For each of 4 days, 5 more computers were added. So 5 * 4 = 20 "
     "computers were added. 9 + 20 is 29. The answer is 29."),
    ("Michael had 58 golf balls. On tuesday, he lost 23 golf balls. On wednesday, he lost 2 more. How many golf "
     "balls did he have at the end of wednesday?",
     "Michael started with 58 golf balls. After losing 23 on tuesday, he had 58 - 23 = 35. After losing 2 more, "
     "he had 35 - 2 = 33 golf balls. The answer is 33."),
    ("Olivia has $23. She bought five bagels for $3 each. How much money does she have left?",
     "Olivia had 23 dollars. 5 bagels for 3 dollars each will be 5 x 3 = 15 dollars. So she has 23 - 15 "
     "dollars left. 23 - 15 is 8. The answer is 8."),
)

# ---- filters and exact match ----


def regex_filter(text: str, pattern: str, group_select: int = 0, fallback: str = INVALID) -> str:
    """lm-eval's ``regex`` filter on one response: the ``group_select``-th match of ``pattern`` (0 the
    first, -1 the last); for a pattern with several groups, the first non-empty one; stripped. ``fallback``
    when nothing matches."""
    found = re.findall(pattern, text)
    if not found:
        return fallback
    m = found[group_select]
    if isinstance(m, tuple):
        m = next((g for g in m if g), fallback)
    return m.strip()


def normalize(s: str) -> str:
    """exact_match's normalisation for GSM8K: the ``regexes_to_ignore`` deleted in order, then lower case."""
    for pattern in IGNORE:
        s = re.sub(pattern, "", s)
    return s.lower()


def exact_match(pred: str, ref: str) -> float:
    """1.0 if the two answers are equal after `normalize`, else 0.0."""
    return float(normalize(pred) == normalize(ref))


# ---- data ----


def read_split(root: Path, split: str) -> list[dict[str, str]] | None:
    """A split's {question, answer} rows in file order: ``{split}.jsonl`` or the Hugging Face layout's
    ``main/{split}-*.parquet`` (or ``{split}-*.parquet``); None when there is neither."""
    path = root / f"{split}.jsonl"
    if path.exists():
        rows = []
        for i, row in data.read_jsonl(path):
            if not isinstance(row, dict) or not isinstance(row.get("question"), str) \
                    or not isinstance(row.get("answer"), str):
                raise data.LLMBenchError(f"{path}:{i}: expected {{\"question\": ..., \"answer\": ...}}, "
                                         f"got {json.dumps(row)[:200]}")
            rows.append({"question": row["question"], "answer": row["answer"]})
        return rows
    parquet = sorted((root / "main").glob(f"{split}-*.parquet")) or sorted(root.glob(f"{split}-*.parquet"))
    if parquet:
        return [{"question": str(r["question"]), "answer": str(r["answer"])}
                for f in parquet for r in data.read_parquet(f)]
    return None


# ---- the tasks ----


class GSM8K(Task):
    """lm-eval's ``gsm8k``: 5-shot from train, "Question: ...\\nAnswer:", the "#### N" strict filter."""

    name = "gsm8k"
    version = "3.0"
    metrics = {"exact_match,strict-match": True, "exact_match,flexible-extract": True}
    until: tuple[str, ...] = ("Question:", "</s>", "<|im_end|>")
    strict = r"#### (\-?[0-9\.\,]+)"

    def __init__(self, shots: int = 5, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None):
        # subjects: GSM8K has none; the option is for the tasks that do, so a run of several tasks ignores it here.
        if shots < 0:
            raise ValueError(f"shots must be >= 0, got {shots}")
        if limit is not None and limit < 0:
            raise ValueError(f"limit must be >= 0, got {limit}")
        self.root = data.find("gsm8k", data_dir)
        test = read_split(self.root, "test")
        if test is None:
            raise data.DataNotFoundError(f"{self.root}: no GSM8K test split (expected test.jsonl, or "
                                         "main/test-*.parquet from the Hugging Face set openai/gsm8k)")
        self.test = test if limit is None else test[:limit]
        self.shots, self.limit = shots, limit
        self.fewshot = self._load_fewshot()

    def _load_fewshot(self) -> list[list[tuple[str, str]]]:
        """The (question, answer) shots of each test question: lm-eval's default sampler over train."""
        if self.shots == 0:
            return [[] for _ in self.test]
        train = read_split(self.root, "train")
        if train is None:
            raise data.DataNotFoundError(
                f"{self.root}: gsm8k's {self.shots}-shot examples come from the train split (lm-eval draws "
                f"{self.shots} train questions per test question, seed {FEWSHOT_SEED}), and there is no "
                "train.jsonl there. Put openai/grade-school-math's grade_school_math/data/train.jsonl (or "
                "openai/gsm8k's main/train-*.parquet) beside test.jsonl, or run --shots 0, or the task gsm8k_cot "
                "(fixed exemplars, test split only)")
        if self.shots > len(train):
            raise ValueError(f"gsm8k: --shots {self.shots} is more than the {len(train)} train questions")
        rnd = random.Random(FEWSHOT_SEED)
        return [[(q["question"], q["answer"]) for q in rnd.sample(train, self.shots)] for _ in self.test]

    def doc_to_text(self, question: str) -> str:
        return f"Question: {question}\nAnswer:"

    def target(self, doc: Doc) -> str:
        return doc.data["answer"]

    def docs(self) -> list[Doc]:
        return [Doc(i, "", dict(q)) for i, q in enumerate(self.test)]

    def prompt(self, doc: Doc) -> str:
        """The shots, each ``doc_to_text + " " + target + "\\n\\n"``, then the question's ``doc_to_text``."""
        shots = "".join(f"{self.doc_to_text(q)} {a}\n\n" for q, a in self.fewshot[doc.id])
        return shots + self.doc_to_text(doc.data["question"])

    def requests(self, doc: Doc) -> list[Request]:
        return [GenerateUntil(self.prompt(doc), self.until, max_tokens=MAX_TOKENS, temperature=0.0)]

    def extract(self, text: str) -> dict[str, str]:
        """Both filters' answers: {"strict-match": ..., "flexible-extract": ...}."""
        return {"strict-match": regex_filter(text, self.strict),
                "flexible-extract": regex_filter(text, FLEXIBLE, group_select=-1)}

    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        text = answers[0].text  # type: ignore[union-attr]
        ref = self.target(doc)
        pred = self.extract(text)
        return Scored({f"exact_match,{k}": exact_match(v, ref) for k, v in pred.items()}, target=ref, pred=pred)

    def settings(self) -> dict[str, Any]:
        return {"shots": self.shots, "limit": self.limit, "split": "test", "fewshot_split": "train",
                "fewshot_sampler": f"random, seed {FEWSHOT_SEED}, drawn per question in order",
                **self._generation_settings()}

    def _generation_settings(self) -> dict[str, Any]:
        return {"until": list(self.until), "max_tokens": MAX_TOKENS, "temperature": 0.0,
                "filters": {"strict-match": self.strict, "flexible-extract": FLEXIBLE},
                "regexes_to_ignore": list(IGNORE), "ignore_case": True, "ignore_punctuation": False}


class GSM8KCoT(GSM8K):
    """lm-eval's ``gsm8k_cot``: the 8 fixed chain-of-thought exemplars, "Q: ...\\nA:", "The answer is N."."""

    name = "gsm8k_cot"
    until = ("Q:", "</s>", "<|im_end|>")
    strict = r"The answer is (\-?[0-9\.\,]+)."

    def __init__(self, shots: int = 8, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, top_logprobs: int = cot.TOP_LOGPROBS):
        self.top_logprobs = cot.check_top_logprobs(top_logprobs)
        super().__init__(shots, limit, subjects, data_dir)

    def _load_fewshot(self) -> list[list[tuple[str, str]]]:
        if self.shots > len(COT_EXEMPLARS):
            raise ValueError(f"gsm8k_cot has {len(COT_EXEMPLARS)} chain-of-thought exemplars, fewer than "
                             f"--shots {self.shots}")
        return [list(COT_EXEMPLARS[: self.shots])] * len(self.test)

    def doc_to_text(self, question: str) -> str:
        return f"Q: {question}\nA:"

    def target(self, doc: Doc) -> str:
        return doc.data["answer"].split("####")[-1].strip()

    def requests(self, doc: Doc) -> list[Request]:
        return [GenerateUntil(self.prompt(doc), self.until, max_tokens=MAX_TOKENS, temperature=0.0,
                              logprobs=self.top_logprobs)]

    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        s = super().score(doc, answers)
        g = answers[0]
        s.extra["cot"] = cot.analyse(g.text, ANSWER_CUE, g.tokens, g.top_logprobs)  # type: ignore[union-attr]
        return s

    def answer_record(self, a: Answer) -> dict[str, Any]:
        return cot.answer_record(a)

    def extra_results(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {"cot_decay": cot.decay_table(records, list(self.metrics), top_logprobs=self.top_logprobs)}

    def settings(self) -> dict[str, Any]:
        return {"shots": self.shots, "limit": self.limit, "split": "test",
                "fewshot_split": "gsm8k-cot.yaml's exemplars", "fewshot_sampler": "first_n",
                **self._generation_settings(), "top_logprobs": self.top_logprobs}
