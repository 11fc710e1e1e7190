"""The model of a recorded run, standing in for it where ``--rejudge`` needs none of its answers.

``llmbench eval --resume DIR --rejudge --judge OTHER`` grades answers DIR already holds
(llmbench.eval.runner's partial records). Where every answer the judge is to see is recorded
(`runner.unrecorded_answers` finds none), `evaluate` runs the tasks with a `RecordedModel` instead of
loading the model: no GGUF file is read, no server contacted, so a run whose model file was moved or
whose server is gone can still be graded again. The model's identity comes from the run itself:
``results.json``'s environment block where the run finished (its final counters), else ``run.json``'s;
results.json says ``"model_loaded": false`` beside it. Asked for an answer anyway (a task that asks the
model again after its judge round), it refuses, saying so: nothing is guessed.

Tested in tests/test_eval_mt_bench.py (a rejudge with the model's GGUF file deleted, and with the
model's server gone).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import LLMBenchError
from .api import Adapter, GenerateUntil, Generation, LLAnswer, Loglikelihood, LoglikelihoodRolling, RollingAnswer


class RecordedModel(Adapter):
    """The model that made the run in ``out_dir`` (its ``run.json``), as far as results need it: its
    backend's name, precision, environment block and settings. It answers nothing."""

    answers_as_they_finish = ()

    def __init__(self, out_dir: str | Path):
        self.out_dir = Path(out_dir)
        run = json.loads((self.out_dir / "run.json").read_text())
        self.settings: dict[str, Any] = run["settings"]
        env = run.get("environment") or {}
        self.results: dict[str, Any] = {}
        res = self.out_dir / "results.json"
        if res.exists():
            try:
                self.results = json.loads(res.read_text())
            except ValueError:              # cut by a kill while written: run.json's block stands
                self.results = {}
        env = self.results.get("environment") or env
        self._env = {k: v for k, v in env.items() if k != "judge"}
        self.name = str(self.settings.get("backend") or "?")
        # what the records carry as "precision": the engine's activations, a server's "server"
        if self.name == "openai":
            from .openai_adapter import OpenAIAdapter

            self.precision = OpenAIAdapter.precision
        else:
            self.precision = str(env.get("activations") or "?")
        self.stats: dict[str, Any] = {}

    def _refuse(self, n: int) -> Any:
        raise LLMBenchError(f"--rejudge: the task asked the model for {n} more answers, which {self.out_dir} does not "
                            "record, and the model was not loaded (every answer up to the judge's round was "
                            f"recorded); run  llmbench eval --resume {self.out_dir}  without --rejudge to let the "
                            "model answer")

    def loglikelihood(self, reqs: Sequence[Loglikelihood]) -> list[LLAnswer]:
        return self._refuse(len(reqs))

    def loglikelihood_rolling(self, reqs: Sequence[LoglikelihoodRolling]) -> list[RollingAnswer]:
        return self._refuse(len(reqs))

    def generate_until(self, reqs: Sequence[GenerateUntil]) -> list[Generation]:
        return self._refuse(len(reqs))

    def environment(self) -> dict[str, Any]:
        return {**self._env, "model_loaded": False}

    def top_logprobs_limit(self, chat: bool = False) -> int | None:
        """The run's own cap, where its backend capped the top log-probabilities."""
        return self.settings.get("top_logprobs") if self.settings.get("top_logprobs_capped") else None
