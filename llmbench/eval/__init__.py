"""llmbench's evaluations: tasks (MMLU, C-Eval, CMMLU, GSM8K, perplexity, KL divergence) run on the embedded
engine or any OpenAI-compatible server, with lm-evaluation-harness's and llama-perplexity's definitions.

>>> res = llmbench.evaluate("SmolLM2-135M-Instruct.Q4_1.gguf", "mmlu", limit=10, threads=2)   # doctest: +SKIP
>>> res["mmlu"].metric("acc"), res.to_dataframe()                                         # doctest: +SKIP

The layers: `api` (requests, answers, the Task and Adapter protocols), `tasks/` (one module per task
family), `adapters` (the engine) and `openai_adapter` (servers), `runner` (chunks, per-sample records,
resume), `metrics` (lm-eval's aggregation and standard errors), `results`.
"""

from __future__ import annotations

import datetime
import importlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .. import LLMBenchError
from .api import Adapter, Task
from .recorded import RecordedModel
from .results import EvalResults

# name -> (module, class); each class takes (shots, limit, subjects, data_dir)
TASKS: dict[str, tuple[str, str]] = {
    "mmlu": ("llmbench.eval.tasks.mmlu", "MMLU"),
    "ceval": ("llmbench.eval.tasks.ceval", "CEval"),
    "cmmlu": ("llmbench.eval.tasks.cmmlu", "CMMLU"),
    "gsm8k": ("llmbench.eval.tasks.gsm8k", "GSM8K"),
    "gsm8k_cot": ("llmbench.eval.tasks.gsm8k", "GSM8KCoT"),
    "mmlu_cot": ("llmbench.eval.tasks.mmlu_cot", "MMLUCoT"),
    "mmlu_cot_zeroshot": ("llmbench.eval.tasks.mmlu_cot", "MMLUCoTZeroShot"),
    "hotpotqa": ("llmbench.eval.tasks.hotpotqa", "HotpotQA"),
    "humaneval": ("llmbench.eval.tasks.humaneval", "HumanEval"),
    "mt_bench": ("llmbench.eval.tasks.mt_bench", "MTBench"),
}
# Options only some tasks take (evaluate's keyword -> the tasks that take it).
TASK_OPTIONS = {"allow_code_execution": ("humaneval",), "samples": ("humaneval",), "judge_max_tokens": ("mt_bench",),
                "top_logprobs": ("gsm8k_cot", "mmlu_cot", "mmlu_cot_zeroshot")}
# Tasks on the engine's logits rather than requests (llama-perplexity's method).
TEXT_TASKS = ("perplexity", "kld")
DEFAULT_SHOTS = {"mmlu": 5, "ceval": 5, "cmmlu": 5, "gsm8k": 5, "gsm8k_cot": 8, "mmlu_cot": 4}

__all__ = ["TASKS", "TEXT_TASKS", "EvalResults", "evaluate", "make_adapter", "make_task"]


def task_names() -> list[str]:
    """Every task ``evaluate`` accepts: the document tasks (`TASKS`), then the text tasks (`TEXT_TASKS`)."""
    return list(TASKS) + list(TEXT_TASKS)


def make_task(name: str, *, shots: int | None = None, limit: int | None = None,
              subjects: Sequence[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
              **options: Any) -> Task:
    """Task ``name``; ``options`` (`TASK_OPTIONS`) go to the tasks that take them, None ones nowhere."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r} (tasks: {', '.join(task_names())})")
    for k in options:
        if k not in TASK_OPTIONS:
            raise TypeError(f"make_task: unknown option {k!r}")
    mine = {k: v for k, v in options.items() if v is not None and name in TASK_OPTIONS[k]}
    mod, cls = TASKS[name]
    return getattr(importlib.import_module(mod), cls)(shots=DEFAULT_SHOTS.get(name, 0) if shots is None else shots,
                                                      limit=limit, subjects=subjects, data_dir=data_dir, **mine)


def make_adapter(model: Any, *, backend: str = "engine", base_url: str | None = None, api_key: str | None = None,
                 share_prefix: bool = True, **llm_options: Any) -> Adapter:
    """An adapter for ``model``: an `Adapter` is returned as is; with ``backend="openai"`` ``model`` is the
    server's model name; else a GGUF path, dummy preset or `LLM` for the engine."""
    if isinstance(model, Adapter):
        return model
    if backend == "openai":
        if not base_url:
            raise ValueError("backend 'openai' needs base_url (e.g. http://127.0.0.1:8000/v1)")
        from .openai_adapter import OpenAIAdapter

        return OpenAIAdapter(base_url, str(model), api_key=api_key)
    if backend not in ("engine", "cpu", "cuda"):
        raise ValueError(f"backend must be 'engine' (cpu), 'cuda' or 'openai', got {backend!r}")
    from .adapters import EngineAdapter

    if backend == "cuda":
        llm_options["backend"] = "cuda"
    return EngineAdapter(model, share_prefix=share_prefix, **llm_options)


_SAME_MODEL: Any = object()      # make_judge's answer when the judge is the model under test (one adapter)


def make_judge(judge: Any, model: Any = None, *, threads: int | None = None, activations: str = "q8") -> Any:
    """The judge's adapter: an `Adapter` as is; ``"NAME@URL"`` or an http(s) ``"URL"`` (the server's first
    listed model) through the OpenAI adapter; else a GGUF path or `LLM` on the engine."""
    if isinstance(judge, Adapter):
        return judge
    if isinstance(judge, str) and ("://" in judge):
        name, _, url = judge.partition("@") if "@" in judge.split("://")[0] else ("", "", judge)
        from .openai_adapter import OpenAIAdapter

        if not name:
            probe = OpenAIAdapter(url, "?")
            listed = (probe.environment().get("server") or {}).get("models") or []
            if not listed:
                raise LLMBenchError(f"--judge {judge}: the server lists no model (GET /v1/models); name it as "
                                    "NAME@URL")
            name = listed[0]
        return OpenAIAdapter(url, name)
    if isinstance(judge, (str, os.PathLike)) and isinstance(model, (str, os.PathLike)) and \
            Path(judge).resolve() == Path(model).resolve():
        return _SAME_MODEL
    from .adapters import EngineAdapter

    opts: dict[str, Any] = {"activations": activations}
    if threads is not None:
        opts["threads"] = threads
    return EngineAdapter(judge, **opts)


def _judge_name(judge: Any) -> str:
    return getattr(judge, "model_name", None) or getattr(judge, "model", None) or str(judge)


def _judge_max_tokens(judge: Any) -> int | None:
    """FastChat's 2048 new tokens for the judge, at most half of an engine judge's context."""
    llm = getattr(judge, "llm", None)
    return None if llm is None else min(2048, llm.ctx // 2)


def _comparable(settings: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """The settings and model identity that decide the numbers (threads and chunking do not)."""
    keep = {k: v for k, v in settings.items() if k not in ("chunk", "threads", "out", "progress")}
    model = env.get("model", {})
    keep["model_sha256"] = model.get("sha256") if isinstance(model, dict) else None
    keep["model_name"] = model.get("name") if isinstance(model, dict) else model
    keep["activations"] = env.get("activations")
    if any(t in TASK_OPTIONS["top_logprobs"] for t in keep.get("tasks") or ()):
        from .cot import TOP_LOGPROBS

        keep.setdefault("top_logprobs", TOP_LOGPROBS)   # a run.json from before the option asked for 20
    return keep


def _check_resume(out: Path, settings: dict[str, Any], env: dict[str, Any], rejudge: bool = False) -> None:
    path = out / "run.json"
    if not path.exists():
        return
    before = json.loads(path.read_text())
    a, b = _comparable(before["settings"], before["environment"]), _comparable(settings, env)
    if rejudge:                                   # grading again, perhaps with another judge
        for x in (a, b):
            x.pop("judge", None)
            if "zero_shot_chat_template" in x:        # the judge's part goes with the judge
                x["zero_shot_chat_template"] = [w for w in x["zero_shot_chat_template"] if w != "judge"] or None
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if diff:
        what = "; ".join(f"{k}: {a.get(k)!r} there, {b.get(k)!r} now" for k in diff)
        raise LLMBenchError(f"{out} holds a run with other settings ({what}); resume with the same options, "
                            "or use a new --out DIR")


def evaluate(model: Any, tasks: str | Sequence[str], *, shots: int | None = None, limit: int | None = None,
             subjects: Sequence[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
             out: str | os.PathLike[str] | None = None, resume: bool = False, backend: str = "engine",
             base_url: str | None = None, api_key: str | None = None, threads: int | None = None,
             ctx: int | None = None, activations: str = "q8", share_prefix: bool = True,
             precision_check: int | None = None, chunk: int = 256, seed: int = 0,
             base_model: str | None = None, text: str | os.PathLike[str] | None = None, max_chunks: int | None = None,
             allow_code_execution: bool = False, samples: int | None = None, judge: Any = None,
             top_logprobs: int | None = None, rejudge: bool = False,
             progress: Callable[[str, int, int], None] | None = None) -> EvalResults:
    """Run ``tasks`` (a name, comma-separated names or a list) on ``model`` and return the results.

    ``model``: a GGUF path or dummy preset (the engine, with ``threads``, ``ctx``, ``activations``), an
    `LLM`, an `Adapter`, or with ``backend="openai"`` the model name a server at ``base_url`` serves.
    ``shots`` (default: each task's, 5 for MMLU, C-Eval, CMMLU and gsm8k, 8 for gsm8k_cot, 4 for mmlu_cot), ``limit``
    documents per subject, ``subjects`` names or groups. ``out``: a folder for per-sample records and results.json;
    ``resume=True`` continues the run in ``out``. ``precision_check=N`` re-scores N random documents of
    each log-likelihood task with f32 activations (engine only); by default (None) 100 when the engine
    runs a model with quantized matrices on 8-bit activations, where the rounding can flip answers.
    ``share_prefix=False`` computes every
    request whole (for measuring what sharing buys). ``perplexity``/``kld`` take ``text`` (default
    WikiText-2), ``ctx`` (default 512) and, for ``kld``, ``base_model``.
    ``humaneval`` runs the generated code only with ``allow_code_execution=True`` (in a sandbox:
    llmbench.eval.sandbox), ``samples`` completions per problem (pass@k). ``mt_bench`` needs ``judge``:
    a GGUF path or `LLM` (the engine), ``"NAME@URL"`` or ``"URL"`` (an OpenAI-compatible server; its
    first listed model), or an `Adapter`. ``top_logprobs``: the top log-probabilities per output token
    the chain-of-thought tasks (gsm8k_cot, mmlu_cot, mmlu_cot_zeroshot) ask for, whose entropy bound uses
    them (llmbench.eval.cot); default 20, capped to what the adapter gives (OpenAI's completions API: 5);
    0 for none. ``rejudge=True`` (with ``resume``) grades the answers recorded in ``out`` again with
    ``judge``, which may differ from the run's: the judged records are replaced, the model's answers
    (llmbench.eval.runner's partial records) reused; where every answer is recorded the model is not
    loaded (`llmbench.eval.recorded.RecordedModel` stands for it), else it loads to answer the missing
    ones first. ``progress(task, done, total)`` is called as documents finish."""
    from .runner import precision_check as run_check
    from .runner import run_task, unrecorded_answers

    names = [t.strip() for t in (tasks.split(",") if isinstance(tasks, str) else tasks) if t.strip()]
    if not names:
        raise ValueError("no task given (tasks: " + ", ".join(task_names()) + ")")
    for n in names:
        if n not in TASKS and n not in TEXT_TASKS:
            raise ValueError(f"unknown task {n!r} (tasks: {', '.join(task_names())})")
    if precision_check is not None and precision_check < 0:
        raise ValueError(f"precision_check must be >= 0, got {precision_check}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if resume and out is None:
        raise ValueError("resume needs out (the folder of the run to continue)")
    if rejudge and not resume:
        raise ValueError("rejudge grades the answers of an earlier run again: it needs resume and out (--resume DIR)")
    if "kld" in names and base_model is None:
        raise ValueError("the kld task needs base_model (--base-model: the model the KL divergence is measured against, "
                         "e.g. the F16 file)")
    if "mt_bench" in names and judge is None:
        raise ValueError("mt_bench is graded by a judge model: name one with --judge (judge=): a GGUF file for the "
                         "engine, or NAME@URL of an OpenAI-compatible server (e.g. gpt-4o@https://api.openai.com/v1)")
    if "humaneval" in names and not allow_code_execution:
        make_task("humaneval")                         # refuses, saying why, before a model loads
    out_dir = Path(out) if out is not None else None
    # --rejudge where the run's folder says what the model was: it is loaded only if some answer is missing
    recorded: RecordedModel | None = None
    if rejudge and out_dir is not None and (out_dir / "run.json").exists() and not isinstance(model, Adapter) \
            and not any(n in TEXT_TASKS for n in names):
        recorded = RecordedModel(out_dir)
    judge_adapter = make_judge(judge, None if recorded else model, threads=threads, activations=activations) \
        if judge is not None and "mt_bench" in names else None
    llm_options: dict[str, Any] = {"activations": activations}
    if threads is not None:
        llm_options["threads"] = threads
    if ctx is not None and not any(n in TEXT_TASKS for n in names):
        llm_options["ctx"] = ctx

    def load() -> Adapter:
        return make_adapter(model, backend=backend, base_url=base_url, api_key=api_key, share_prefix=share_prefix,
                            **llm_options)

    adapter = recorded or load()
    if judge_adapter is _SAME_MODEL:
        judge_adapter = adapter
    top_note = None
    if recorded is not None and "top_logprobs" in recorded.settings and \
            top_logprobs in (None, recorded.settings["top_logprobs"]):
        top_logprobs, top_note = recorded.settings["top_logprobs"], recorded.settings.get("top_logprobs_capped")
    elif any(n in TASK_OPTIONS["top_logprobs"] for n in names):
        top_logprobs, top_note = _top_logprobs(top_logprobs, adapter)
    task_objs = [make_task(n, shots=shots, limit=limit, subjects=subjects, data_dir=data_dir,
                           allow_code_execution=allow_code_execution, samples=samples,
                           judge_max_tokens=_judge_max_tokens(judge_adapter), top_logprobs=top_logprobs)
                 for n in names if n in TASKS]
    if recorded is not None and out_dir is not None:
        missing = [f"{t.name} {m}" for t in task_objs for m in unrecorded_answers(t, out_dir)]
        if missing:                               # the model answers those first, as a resume would
            adapter = _load_for(missing, load, out_dir)
            recorded = None
    fallback = []
    if "mt_bench" in names:
        from .tasks.mt_bench import give_chat_template

        fallback = [who for who, a in (("model", adapter), ("judge", judge_adapter)) if give_chat_template(a)]
        if judge_adapter is adapter and fallback == ["model"]:
            fallback.append("judge")
        if recorded is not None and "model" in (recorded.settings.get("zero_shot_chat_template") or ()):
            fallback.insert(0, "model")           # as the run gave it (the model is not loaded now)
    if precision_check is None:
        precision_check = recorded.settings.get("precision_check", 0) if recorded is not None else \
            AUTO_CHECK if _rounds_activations(adapter) else 0
    from ..perf.bench import header

    settings = {"tasks": names, "shots": shots, "limit": limit, "subjects": list(subjects) if subjects else None,
                "backend": adapter.name, "base_url": base_url, "share_prefix": share_prefix, "chunk": chunk,
                "precision_check": precision_check, "seed": seed, "threads": threads}
    if samples is not None:
        settings["samples"] = samples
    if any(n in TASK_OPTIONS["top_logprobs"] for n in names):
        settings["top_logprobs"] = top_logprobs
        if top_note:
            settings["top_logprobs_capped"] = top_note
    if judge_adapter is not None:
        settings["judge"] = _judge_name(judge)
    if fallback:
        settings["zero_shot_chat_template"] = fallback   # models without a chat template of their own
    if any(n in TEXT_TASKS for n in names):
        settings.update({"ctx": ctx or 512, "text": str(text) if text else "wikitext2", "base_model": base_model,
                         "max_chunks": max_chunks})
    env = adapter.environment()
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            _check_resume(out_dir, settings, env, rejudge)
        (out_dir / "run.json").write_text(json.dumps({"settings": settings, "environment": env,
                                                      "model": str(model) if not isinstance(model, Adapter) else None,
                                                      "options": {k: v for k, v in llm_options.items()}},
                                                     indent=1, default=str))
    results = EvalResults(header(), env, settings, {})
    for t in task_objs:
        total, done = len(t.docs()), [0]

        def on_docs(k: int, name: str = t.name, total: int = total, done: list[int] = done) -> None:
            done[0] += k
            if progress:
                progress(name, done[0], total)

        results.tasks[t.name] = run_task(t, adapter, out_dir, chunk=chunk, resume=resume, on_docs=on_docs,
                                         judge=judge_adapter, rejudge=rejudge)
        if precision_check and getattr(adapter, "llm", None) is not None:
            results.precision_check[t.name] = run_check(t, results.tasks[t.name].records,
                                                        _f32_twin(adapter), precision_check, seed)
        elif recorded is not None and t.name in (recorded.results.get("precision_check") or {}):
            results.precision_check[t.name] = recorded.results["precision_check"][t.name]   # the same records
    for n in names:
        if n in TEXT_TASKS:
            results.extra[n] = _text_task(n, adapter, base_model, text, data_dir, ctx or 512, max_chunks, llm_options)
    results.adapter_stats = dict(getattr(adapter, "stats", {}))
    results.environment = adapter.environment()   # again: a server adapter's counters are final now
    if judge_adapter is not None:
        results.environment["judge"] = judge_adapter.environment()
        results.adapter_stats["judge"] = dict(getattr(judge_adapter, "stats", {}))
    results.header["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")
    if out_dir is not None:
        tmp = out_dir / "results.json.tmp"
        tmp.write_text(json.dumps(results.to_json(), indent=1, ensure_ascii=False, default=str))
        tmp.replace(out_dir / "results.json")
    return results


def _load_for(missing: list[str], load: Callable[[], Adapter], out_dir: Path) -> Adapter:
    """The model, loaded for --rejudge because the run in ``out_dir`` lacks some of its answers
    (``missing``: `runner.unrecorded_answers`); a model that does not load is an error naming them."""
    shown = "; ".join(missing[:5]) + (f"; and {len(missing) - 5} more" if len(missing) > 5 else "")
    try:
        return load()
    except (OSError, LLMBenchError, ValueError) as e:
        raise LLMBenchError(
            f"--rejudge: {out_dir} lacks {len(missing)} of the model's answers ({shown}): the run was cut before "
            f"the model finished them, so the model must answer them before the judge grades, and it did not "
            f"load: {e}. Give the model that made the run (--model PATH, or --backend openai --base-url URL "
            "--model NAME)") from e


def _top_logprobs(n: int | None, adapter: Adapter) -> tuple[int, str | None]:
    """The top log-probabilities the chain-of-thought tasks ask for: ``n``, checked against what the
    adapter gives; by default `cot.TOP_LOGPROBS`, capped to it, with a note saying so. (The tasks send
    prompt strings, so the completions limit is the one that counts.)"""
    from .cot import TOP_LOGPROBS, check_top_logprobs

    limit = adapter.top_logprobs_limit(chat=False)
    where = getattr(adapter, "base_url", None) or f"the {adapter.name} backend"
    if n is not None:
        check_top_logprobs(n)
        if limit is not None and n > limit:
            raise ValueError(f"--top-logprobs {n} (top_logprobs=): {where} gives at most {limit} top log-probabilities "
                             f"per token; run with --top-logprobs {limit} or fewer")
        return n, None
    if limit is not None and limit < TOP_LOGPROBS:
        return limit, (f"{TOP_LOGPROBS} top log-probabilities by default, capped to {limit}: the most {where} gives "
                       "on completions; the entropy bound is looser (token_tail says how much)")
    return TOP_LOGPROBS, None


# Documents the precision check re-scores by default: a flip rate of 5% is then known to about +-2%,
# for about 1.5% of a full MMLU run's time (100 questions at f32's 0.83 questions/s against 14,042 at
# q8's 1.56 on SmolLM2-135M Q4_1, AMD EPYC AVX2, benchmarks/bench_eval.py).
AUTO_CHECK = 100
_FLOAT_TYPES = {"F32", "F16", "BF16"}


def _rounds_activations(adapter: Adapter) -> bool:
    """Whether the engine quantizes activations against some matrix of this model (q8 mode and a
    quantized matrix)."""
    llm = getattr(adapter, "llm", None)
    if llm is None or llm.activations != "q8":
        return False
    return any(t.type not in _FLOAT_TYPES and len(t.shape) == 2 for t in llm.file.tensors.values())


_TWINS: dict[int, Adapter] = {}


def _f32_twin(adapter: Adapter) -> Adapter:
    """The same model on the engine with f32 activations (the precision check's reference)."""
    from ..llm import LLM
    from .adapters import EngineAdapter

    llm = adapter.llm  # type: ignore[attr-defined]
    if llm.activations == "f32":
        return adapter
    key = id(adapter)
    if key not in _TWINS:
        _TWINS.clear()
        _TWINS[key] = EngineAdapter(LLM(llm.path, threads=llm.threads, ctx=llm.ctx, kv_dtype=llm.kv_dtype,
                                        activations="f32", max_seqs=16))
    return _TWINS[key]


def _text_task(name: str, adapter: Adapter, base_model: str | None, text: Any, data_dir: Any, ctx: int,
               max_chunks: int | None, llm_options: dict[str, Any]) -> dict[str, Any]:
    from . import perplexity as ppl

    llm = getattr(adapter, "llm", None)
    if llm is None:
        raise LLMBenchError(f"{name} runs on the engine (it reads every logit); not through backend {adapter.name!r}")
    tokens = ppl.load_text(text, data_dir)
    if name == "perplexity":
        return ppl.perplexity(llm, tokens, ctx=ctx, max_chunks=max_chunks).to_json()
    from ..llm import LLM

    assert base_model is not None   # evaluate refuses kld without one
    base = LLM(base_model, **{k: v for k, v in llm_options.items() if k != "ctx"})
    return ppl.kl_divergence(llm, base, tokens, ctx=ctx, max_chunks=max_chunks).to_json()
