"""A study's grid: which models and engine settings, which generation parameters, which workload.

A grid is a mapping (a YAML or JSON file, or built from flags)::

    name: sampling_sensitivity
    model: SmolLM2-135M-Instruct.Q4_1.gguf        # or a list: an axis
    engine: {threads: 2, kv_dtype: [f16, q8_0]}    # model loads: threads, ctx, kv_dtype, activations,
                                                   # max_batch_tokens, max_seqs
    sampling: {temperature: [0.3, 0.7, 1.0], top_p: [0.5, 0.7, 0.9, 1.0], max_tokens: [32, 64, 128],
               top_k: 0, min_p: 0.0, seed: 0}
    repetitions: 1
    workload: {prompts: prompts.txt, chat: true}   # a file (one prompt a line, or JSONL with "prompt"),
                                                   # or a list; chat: each prompt a user turn through the
                                                   # model's chat template (instruct models; default false);
                                                   # or {task: gsm8k, limit: 20, shots: 8}
    reference: null                                # perplexity of the outputs under this model
                                                   # (default: each point's own model)

Every value given as a list is an axis; the grid is their product, repeated ``repetitions`` times
(``rep`` 0, 1, ...): prompt i of repetition r samples with seed (seed + r) * 1000003 + i, so prompts and
repetitions draw differently and every point reproduces.
Points run model by model: axes of the model load change slowest, so consecutive points share a load.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import asdict, dataclass, field
from typing import Any

ENGINE_KEYS = ("threads", "ctx", "kv_dtype", "activations", "max_batch_tokens", "max_seqs", "backend")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed")
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "max_tokens": 64, "seed": 0}
WORKLOAD_KEYS = ("prompts", "prompts_file", "chat", "task", "limit", "shots", "subjects")


def _axis(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


@dataclass
class Study:
    """A study's grid: models, engine settings and sampling parameters (a list value is an axis), the
    workload, repetitions and the reference model (see the module's description of the file).
    """

    model: Any                                    # a path, a dummy preset, or a list of them
    workload: dict[str, Any]
    engine: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    repetitions: int = 1
    reference: str | None = None
    name: str = "study"

    def __post_init__(self) -> None:
        self.model = [_absolute(m) for m in _axis(self.model)] if isinstance(self.model, (list, tuple)) \
            else _absolute(self.model)
        for key, allowed, what in ((self.engine, ENGINE_KEYS, "engine"), (self.sampling, SAMPLING_KEYS, "sampling"),
                                   (self.workload, WORKLOAD_KEYS, "workload")):
            unknown = sorted(set(key) - set(allowed))
            if unknown:
                raise ValueError(f"study: unknown {what} setting(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(allowed)}")
        if not self.model or (isinstance(self.model, list) and not all(self.model)):
            raise ValueError("study: name a model (a GGUF path or a dummy preset)")
        if ("prompts" in self.workload) == ("task" in self.workload):
            raise ValueError("study: the workload is either prompts (a file or a list) or a task (with limit)")
        if "task" in self.workload and self.sampling:
            raise ValueError("study: a task workload generates with the task's own settings (lm-eval's); "
                             "sweep sampling parameters over a prompts workload")
        if not isinstance(self.repetitions, int) or self.repetitions < 1:
            raise ValueError(f"study: repetitions must be an integer >= 1, got {self.repetitions!r}")
        for k, v in self.sampling.items():
            for x in _axis(v):
                if not isinstance(x, (int, float)) or isinstance(x, bool):
                    raise ValueError(f"study: sampling.{k} must be a number or a list of numbers, got {x!r}")
        if self.reference:
            self.reference = _absolute(self.reference)
        if "prompts" in self.workload and not isinstance(self.workload["prompts"], (list, tuple)):
            # read once, now: a missing file is an error before any model loads, and the grid keeps the
            # prompts themselves, so a resumed study runs the same ones whatever became of the file
            self.workload = {**self.workload, "prompts_file": str(self.workload["prompts"]),
                             "prompts": self.prompt_list()}
        elif "prompts" in self.workload:
            self.prompt_list()

    def axes(self) -> dict[str, list]:
        """The swept settings, model-load axes first, in the order points run."""
        out: dict[str, list] = {}
        if isinstance(self.model, list):
            out["model"] = self.model
        for k in ENGINE_KEYS:
            if isinstance(self.engine.get(k), (list, tuple)):
                out[k] = list(self.engine[k])
        for k in SAMPLING_KEYS:
            if isinstance(self.sampling.get(k), (list, tuple)):
                out[k] = list(self.sampling[k])
        return out

    def points(self) -> list[dict[str, Any]]:
        """Every point's full settings: model, engine settings, sampling settings and ``rep``."""
        axes = self.axes()
        fixed = {"model": self.model} if not isinstance(self.model, list) else {}
        fixed.update({k: v for k, v in self.engine.items() if k not in axes})
        if "prompts" in self.workload:
            fixed.update({k: self.sampling.get(k, SAMPLING_DEFAULTS[k]) for k in SAMPLING_KEYS if k not in axes})
        out = []
        for values in itertools.product(*axes.values()):
            for rep in range(self.repetitions):
                out.append({**fixed, **dict(zip(axes, values)), "rep": rep})
        return out

    def prompt_list(self) -> list[str]:
        """The workload's prompts: its list, or the lines (JSONL: the "prompt" fields) of its file.

        Raises:
            ValueError: the file cannot be read or parsed, or there are no prompts.
        """
        p = self.workload["prompts"]
        if isinstance(p, (list, tuple)):
            prompts = [str(x) for x in p]
        else:
            try:
                with open(p, encoding="utf-8") as f:
                    text = f.read()
            except OSError as e:
                raise ValueError(f"study: cannot read the prompts file {p}: {e.strerror}") from None
            if p.endswith(".jsonl"):
                try:
                    prompts = [json.loads(line)["prompt"] for line in text.splitlines() if line.strip()]
                except (ValueError, KeyError, TypeError):
                    raise ValueError(f"study: {p}: every line must be a JSON object with a \"prompt\"") from None
            else:
                prompts = [line for line in text.splitlines() if line.strip()]
        if not prompts:
            raise ValueError("study: the workload has no prompts")
        return prompts

    def to_json(self) -> dict:
        """The grid as a JSON-serializable dict (with ``kind: study``)."""
        d = asdict(self)
        d["kind"] = "study"
        return d

    @classmethod
    def from_json(cls, d: dict) -> Study:
        """A grid from a mapping (a parsed YAML or JSON file).

        Raises:
            ValueError: the mapping is not a valid grid; the message names the key.
        """
        if not isinstance(d, dict):
            raise ValueError("a study grid must be a mapping")
        d = {k: v for k, v in d.items() if k != "kind"}
        unknown = sorted(set(d) - {"model", "workload", "engine", "sampling", "repetitions", "reference", "name"})
        if unknown:
            raise ValueError(f"study: unknown key(s) {', '.join(unknown)}")
        if "model" not in d or "workload" not in d:
            raise ValueError("study: a grid needs a model and a workload")
        return cls(**d)


def load(path: str) -> Study:
    """A study grid from a YAML (.yaml/.yml) or JSON file; relative paths in it (model, prompts,
    reference) are read relative to the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"cannot read the study grid {path}: {e.strerror}") from None
    if path.endswith((".yaml", ".yml")):
        import yaml

        try:
            d = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValueError(f"{path}: not valid YAML ({e})") from None
    else:
        try:
            d = json.loads(text)
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{path}: a study grid must be a mapping")
    here = os.path.dirname(os.path.abspath(path))

    def rel(p: Any) -> Any:
        if isinstance(p, list):
            return [rel(x) for x in p]
        if isinstance(p, str) and not os.path.isabs(p) and os.path.exists(os.path.join(here, p)):
            return os.path.join(here, p)
        return p

    for k in ("model", "reference"):
        if k in d:
            d[k] = rel(d[k])
    if isinstance(d.get("workload"), dict) and isinstance(d["workload"].get("prompts"), str):
        d["workload"] = {**d["workload"], "prompts": rel(d["workload"]["prompts"])}
    return Study.from_json(d)


def _absolute(model: Any) -> Any:
    """A model that names an existing file, as an absolute path; a dummy preset as it is."""
    from ..perf.sweep import _absolute as absolute

    if not isinstance(model, str):
        raise ValueError(f"study: a model is a path or a preset name, got {model!r}")
    return absolute(model)


def load_key(point: dict[str, Any]) -> str:
    """What a model load depends on: points with the same key share one."""
    return json.dumps({k: point.get(k) for k in ("model",) + ENGINE_KEYS}, sort_keys=True)


def point_key(point: dict[str, Any]) -> str:
    """A study point as a canonical string (sorted JSON): the key it is logged and resumed by."""
    return json.dumps(point, sort_keys=True)
