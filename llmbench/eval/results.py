"""What an evaluation returns: per task, subject and group, each metric with its standard error;
converts to JSON (``results.json``), a pandas DataFrame, a rich table and markdown.

results.json:
    schema_version, llmbench_version, commit, created
    environment   what produced the numbers (the benchmarks' block: model file, sha256, weight types,
                  backend, threads, activations, ... or the server's URL and model)
    settings      the run's options (tasks, shots, limit, subjects, chunk, ...)
    tasks         {task: {version, settings, timing, subjects, groups, metrics}}, each metric as
                  {value, stderr, n} (groups and the task also macro, and a 95% Wilson interval);
                  chain-of-thought tasks add cot_decay (accuracy by step count: llmbench.eval.cot);
                  timing: wall_s, docs_computed, docs_resumed, docs_per_s, docs_failed, errors,
                  requests, and for a resumed task asked in rounds rounds_resumed, rounds_recomputed,
                  notes (llmbench.eval.runner: partial records); each field typed and described in SCHEMA
    perplexity, kld   the text tasks' figures, where they ran
    precision_check   {task: flip rate, accuracy change with its interval, log-likelihood moves}
    adapter_stats     the adapter's counters (engine: prompt tokens held vs computed; server: retries)
Validated against `SCHEMA` in tests; docs/eval-results.schema.json is written from it
(``python -m llmbench.eval.results > docs/eval-results.schema.json``) and checked to match.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

_ENTRY = {"type": "object", "required": ["value", "stderr", "n"],
          "properties": {"value": {"type": ["number", "null"]}, "stderr": {"type": ["number", "null"]},
                         "n": {"type": "integer", "minimum": 0}, "macro": {"type": ["number", "null"]},
                         "ci95": {"type": ["array", "null"], "items": {"type": "number"}}}}
_METRICS = {"type": "object", "additionalProperties": _ENTRY}
_COUNT = {"type": "integer", "minimum": 0}
_TEXTS = {"type": "array", "items": {"type": "string"}}
_TIMING = {
    "type": "object", "required": ["wall_s", "docs_computed", "docs_resumed"],
    "description": "how the task's documents ran in this run (llmbench.eval.runner.run_task)",
    "properties": {
        "wall_s": {"type": "number", "minimum": 0, "description": "seconds this run spent on the task's documents"},
        "docs_computed": {**_COUNT, "description": "documents answered, scored and recorded in this run"},
        "docs_resumed": {**_COUNT, "description": "documents whose records an earlier run left in DIR (--resume)"},
        "docs_per_s": {"type": ["number", "null"], "minimum": 0,
                       "description": "docs_computed / wall_s; null where none was computed"},
        "docs_failed": {**_COUNT, "description": "documents left without a record: a generation failed every "
                                                 "retry; out of the metrics, asked again by --resume"},
        "errors": {**_TEXTS, "description": "the first failed documents' errors, as `SUBJECT #ID: error` "
                                            "(at most 5; docs_failed counts them all)"},
        "requests": {**_COUNT, "description": "requests the task's records hold (resumed ones too)"},
        "rounds_resumed": {**_COUNT, "description": "tasks asked in rounds (mt_bench), where DIR held partial "
                                                    "records: rounds reused from DIR/partial_TASK.jsonl, the "
                                                    "model not asked again"},
        "rounds_recomputed": {**_COUNT, "description": "recorded rounds that no longer matched what the task asks "
                                                       "(other data or task version) and were asked again"},
        "answers_resumed": {**_COUNT, "description": "answers reused from pieces of rounds a kill or a failure "
                                                     "cut short (one judgment of two, ...), beside whole rounds"},
        "notes": {**_TEXTS, "description": "why rounds were recomputed, as `SUBJECT #ID: reason; recomputed "
                                           "from round K`, or asked of the model in a rejudge (at most 5)"},
    }}
_SETTINGS = {
    "type": "object", "required": ["tasks"],
    "description": "the run's options (also in DIR/run.json; --resume refuses a folder whose options differ)",
    "properties": {
        "tasks": {**_TEXTS, "description": "the tasks, in the order they ran"},
        "shots": {"type": ["integer", "null"], "description": "few-shot examples; null: each task's default"},
        "limit": {"type": ["integer", "null"], "description": "documents per subject; null: all"},
        "subjects": {"type": ["array", "null"], "items": {"type": "string"},
                     "description": "subjects or groups asked for; null: all"},
        "backend": {"type": "string", "description": "the adapter: engine, openai"},
        "base_url": {"type": ["string", "null"], "description": "the server's URL (backend openai)"},
        "share_prefix": {"type": "boolean", "description": "shared prompt prefixes computed once (engine)"},
        "chunk": {"type": "integer", "minimum": 1, "description": "documents whose requests go together"},
        "precision_check": {"type": ["integer", "null"], "minimum": 0,
                            "description": "documents re-scored with f32 activations per log-likelihood task"},
        "seed": {"type": "integer", "description": "seed of the precision check's sample"},
        "threads": {"type": ["integer", "null"], "description": "engine threads; null: all CPUs"},
        "samples": {"type": ["integer", "null"], "description": "humaneval: completions per problem"},
        "top_logprobs": {"type": ["integer", "null"], "minimum": 0,
                         "description": "chain-of-thought tasks: top log-probabilities per output token"},
        "top_logprobs_capped": {"type": "string",
                                "description": "why top_logprobs is below the default (the backend's limit)"},
        "judge": {"type": "string", "description": "mt_bench: the judge as named (--judge)"},
        "zero_shot_chat_template": {"type": "array", "items": {"enum": ["model", "judge"]},
                                    "description": "mt_bench: who had no chat template of its own and was given "
                                                   "FastChat's zero_shot one"},
        "ctx": {"type": ["integer", "null"], "description": "perplexity, kld: tokens per chunk"},
        "text": {"type": ["string", "null"], "description": "perplexity, kld: the text file, or wikitext2"},
        "base_model": {"type": ["string", "null"], "description": "kld: the model it is measured against"},
        "max_chunks": {"type": ["integer", "null"], "description": "perplexity, kld: at most this many chunks"},
    }}
_TEXT_RESULT = {"type": "object", "required": ["metric", "model", "ctx", "n_chunks", "n_scored", "ppl", "ppl_err"],
                "properties": {"metric": {"enum": ["perplexity", "kl_divergence"]}}}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "llmbench eval results",
    "type": "object",
    "required": ["schema_version", "llmbench_version", "created", "environment", "settings", "tasks"],
    "properties": {
        "schema_version": {"const": 1},
        "llmbench_version": {"type": "string"},
        "commit": {"type": ["string", "null"]},
        "created": {"type": "string"},
        "environment": {"type": "object", "required": ["backend", "model"],
                        "description": "what produced the numbers: the model (file, sha256, weight types, ...) "
                                       "on the engine, or the server's URL and model",
                        "properties": {
                            "backend": {"type": "string", "description": "cpu, cuda (the engine) or openai"},
                            "model": {"type": "object", "required": ["name"],
                                      "description": "the model as named, with its file's identity on the engine"},
                            "judge": {"type": "object", "required": ["backend", "model"],
                                      "description": "mt_bench: the judge's block, with the same keys"},
                            "model_loaded": {"const": False,
                                             "description": "--rejudge graded recorded answers without loading "
                                                            "the model: the block is the recorded run's "
                                                            "(llmbench.eval.recorded); absent where it loaded"}}},
        "settings": _SETTINGS,
        "tasks": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["version", "settings", "timing", "subjects", "groups", "metrics"],
            "properties": {"version": {"type": "string"}, "settings": {"type": "object"},
                           "timing": _TIMING,
                           "subjects": {"type": "object", "additionalProperties": _METRICS},
                           "groups": {"type": "object", "additionalProperties": _METRICS},
                           "metrics": _METRICS,
                           "cot_decay": {"type": "object", "required": ["rule", "metrics", "subjects", "groups", "all"],
                                         "description": "chain-of-thought tasks: accuracy by reasoning step count "
                                                        "(llmbench.eval.cot.decay_table)"}}}},
        "precision_check": {"type": "object", "additionalProperties": {"type": ["object", "null"]},
                            "description": "per log-likelihood task: answers flipped and accuracy moved when "
                                           "re-scored with f32 activations (llmbench.eval.runner.precision_check)"},
        "adapter_stats": {"type": "object",
                          "description": "the adapter's counters (engine: prompt tokens held and computed; "
                                         "server: requests, retries), the judge's under judge",
                          "properties": {"judge": {"type": "object", "description": "mt_bench: the judge's counters"}}},
        "perplexity": {**_TEXT_RESULT, "description": "llama-perplexity's figures (llmbench.eval.perplexity)"},
        "kld": {**_TEXT_RESULT, "description": "KL divergence against base_model, llama-perplexity's statistics "
                                               "(llmbench.eval.perplexity)"},
    },
}


def schema_json() -> str:
    """The JSON schema of ``results.json``, as indented text."""
    return json.dumps(SCHEMA, indent=2) + "\n"


@dataclass
class TaskResult:
    """One task's results: its settings, aggregated metrics, per-sample records and timing."""

    name: str
    version: str
    settings: dict[str, Any]
    aggregate: dict[str, Any]          # metrics.aggregate's output
    records: list[dict[str, Any]] = field(repr=False)
    timing: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)    # Task.extra_results: cot_decay, ...

    def metric(self, name: str = "acc") -> float | None:
        return self.aggregate["metrics"][name]["value"]

    def to_json(self) -> dict[str, Any]:
        a = self.aggregate
        return {"version": self.version, "settings": self.settings, "timing": self.timing,
                "subjects": a["subjects"], "groups": a["groups"], "metrics": a["metrics"], **self.extra}


@dataclass
class EvalResults:
    """Returned by `llmbench.evaluate`: ``results["mmlu"].metric("acc")``, ``results.to_dataframe()``."""

    header: dict[str, Any]
    environment: dict[str, Any]
    settings: dict[str, Any]
    tasks: dict[str, TaskResult]
    precision_check: dict[str, Any] = field(default_factory=dict)
    adapter_stats: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)    # perplexity / KLD results, by name

    def __getitem__(self, task: str) -> TaskResult:
        return self.tasks[task]

    def to_json(self) -> dict[str, Any]:
        """The results as ``results.json`` holds them (per-sample records are in their own files)."""
        out = {**self.header, "environment": self.environment, "settings": self.settings,
               "tasks": {k: t.to_json() for k, t in self.tasks.items()}}
        if self.precision_check:
            out["precision_check"] = self.precision_check
        if self.adapter_stats:
            out["adapter_stats"] = self.adapter_stats
        out.update(self.extra)
        return out

    def rows(self) -> list[dict[str, Any]]:
        """One row per (task, level, name, metric): level is "task", "group" or "subject"."""
        out = []
        for tname, t in self.tasks.items():
            a = t.aggregate
            levels = [("task", {tname: a["metrics"]}), ("group", a["groups"]), ("subject", a["subjects"])]
            for level, entries in levels:
                for name, metrics in entries.items():
                    for m, e in metrics.items():
                        out.append({"task": tname, "level": level, "name": name, "metric": m, "value": e["value"],
                                    "stderr": e["stderr"], "n": e["n"], "macro": e.get("macro")})
        return out

    def to_dataframe(self):
        """A pandas DataFrame of `rows` (pandas is imported here, only when asked for)."""
        import pandas as pd

        return pd.DataFrame(self.rows())

    def markdown(self, subjects: bool = False) -> str:
        """The metrics as a Markdown table: one row per task and group metric, with its standard error and n;
        ``subjects=True`` adds a row per subject.
        """
        lines = ["| task | group / subject | metric | value | ± stderr | n |", "|---|---|---|---|---|---|"]
        for r in self.rows():
            if r["level"] == "subject" and not subjects:
                continue
            name = "" if r["level"] == "task" else ("  " if r["level"] == "subject" else "") + r["name"]
            se = f"{r['stderr']:.4f}" if r["stderr"] is not None else "-"
            val = f"{r['value']:.4f}" if r["value"] is not None else "-"
            lines.append(f"| {r['task']} | {name} | {r['metric']} | {val} | {se} | {r['n']} |")
        return "\n".join(lines)

    def table(self, subjects: bool = False):
        """A rich Table of the results (groups always, subjects when asked)."""
        from rich.table import Table

        t = Table(title="llmbench eval", show_lines=False)
        for c in ("task", "group / subject", "metric", "value", "± stderr", "n"):
            t.add_column(c, justify="right" if c in ("value", "± stderr", "n") else "left")
        for r in self.rows():
            if r["level"] == "subject" and not subjects:
                continue
            name = "" if r["level"] == "task" else ("  " if r["level"] == "subject" else " ") + r["name"]
            t.add_row(r["task"] if r["level"] == "task" else "", name, r["metric"],
                      f"{r['value']:.4f}" if r["value"] is not None else "-",
                      f"{r['stderr']:.4f}" if r["stderr"] is not None else "-", str(r["n"]))
        return t


if __name__ == "__main__":
    sys.stdout.write(schema_json())
