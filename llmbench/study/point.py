"""One point of a study: load (or reuse) the model, run the workload, measure.

``run_point`` is what every executor calls, in a worker process: the local executor's process or a
Ray worker. A worker keeps its last model load (and reference model) while consecutive points share
it (grid.load_key), so a grid pays one load per engine setting, not one per point.

A prompts workload records, per point (all outputs of the point's prompts together):
``outputs``, ``mean_output_tokens``, ``cut_share`` (ended by max_tokens), ``distinct_1``,
``distinct_2``, ``self_bleu`` (BLEU-4), ``repetition_rate`` (4-grams) from textmetrics, and
``perplexity``: exp of the mean negative log-likelihood per generated token under the reference
model, at temperature 1 (the model's own distribution, whatever the point sampled with); then the
speed, ``output_tokens_per_s`` (generated tokens over the wall time of the batch) and the medians of
``ttft_s`` and ``tpot_s`` (the engine's per-request timestamps). The texts themselves are kept
(``texts``), so any other metric can be computed later. A task workload records the task's metrics
as `llmbench.evaluate` aggregates them (value, standard error, interval).

Each record carries the ``environment`` of the worker that ran it (CPU, SIMD level, build, model file
hash: perf.bench.engine_environment), so points run on different hosts of a cluster say so. Everything but
``timing`` and ``environment`` is a function of the point's settings alone: the same grid gives the same
records on any executor.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from . import textmetrics
from .grid import ENGINE_KEYS, load_key

_cache: dict[str, Any] = {}   # this worker's current model load: {"key": ..., "llm": ..., "ref": ..., "ref_llm": ...}


def _llm(point: dict[str, Any]):
    from ..llm import LLM

    key = load_key(point)
    if _cache.get("key") != key:
        _cache.clear()
        kwargs = {k: point[k] for k in ENGINE_KEYS if point.get(k) is not None}
        _cache["llm"] = LLM(point["model"], **kwargs)
        _cache["key"] = key
    return _cache["llm"]


def _reference(point: dict[str, Any], reference: str | None, llm):
    if not reference or reference == point["model"]:
        return llm
    if _cache.get("ref") != reference:
        from ..llm import LLM

        _cache["ref_llm"] = LLM(reference, threads=point.get("threads"), ctx=point.get("ctx"))
        _cache["ref"] = reference
    return _cache["ref_llm"]


def run_point(config: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """The record of one point: ``{"params": point, "metrics": {...}, "timing": {...}}``. ``config``
    is the study's ``to_json()``. Errors propagate; the executor records them."""
    from ..perf.bench import engine_environment

    llm = _llm(point)
    work = config["workload"]
    if "task" in work:
        rec = _task_point(llm, point, work)
    else:
        rec = _prompts_point(llm, point, work["prompts"], config.get("reference"), bool(work.get("chat")))
    rec["environment"] = engine_environment(llm, point["model"], False)   # the host that ran it
    return rec


def _task_point(llm, point: dict[str, Any], work: dict[str, Any]) -> dict[str, Any]:
    from ..eval import evaluate

    t0 = time.perf_counter()
    res = evaluate(llm, work["task"], limit=work.get("limit"), shots=work.get("shots"),
                   subjects=work.get("subjects"), seed=point.get("rep", 0))
    wall = time.perf_counter() - t0
    tasks = {name: t.aggregate["metrics"] for name, t in res.tasks.items()}
    metrics = {f"{name}/{m}": v.get("value") for name, ms in tasks.items() for m, v in ms.items()}
    return {"params": point, "metrics": metrics, "tasks": tasks, "timing": {"wall_s": wall}}


def _prompts_point(llm, point: dict[str, Any], prompts: list[str], reference: str | None,
                   chat: bool = False) -> dict[str, Any]:
    from ..llm import SamplingParams

    if chat:   # each prompt a user turn through the model's chat template, as token ids
        tok = llm._tok()
        prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}], True)) for p in prompts]

    sp = SamplingParams(temperature=float(point["temperature"]), top_p=float(point["top_p"]),
                        top_k=int(point["top_k"]), min_p=float(point["min_p"]),
                        max_tokens=int(point["max_tokens"]))
    seed = int(point["seed"]) + int(point.get("rep", 0))
    params = [SamplingParams(**{**sp.__dict__, "seed": seed * 1_000_003 + i}) for i in range(len(prompts))]
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall = time.perf_counter() - t0
    texts = [o.text for o in outs]
    n_tok = [len(o.token_ids) for o in outs]
    # the outputs' own tokens under the point's model; another reference reads their text with its tokenizer
    ref = _reference(point, reference, llm)
    if ref is llm:
        reqs = [(o.prompt_token_ids + o.token_ids, len(o.prompt_token_ids)) for o in outs if o.token_ids]
    else:   # another model reads the prompt as text (chat: the template's text for this model)
        text_prompts = [llm.detokenize(p, skip_special=False) if chat else p for p in prompts]
        reqs = ref.loglikelihood_tokens([(p, t) for p, t in zip(text_prompts, texts) if t])
    scores = ref.score_tokens(reqs) if reqs else []
    nll = -sum(lp for lp, _ in scores)
    tok = sum(len(ids) - n for ids, n in reqs)
    metrics = {
        "outputs": len(outs),
        "mean_output_tokens": float(np.mean(n_tok)),
        "cut_share": sum(o.finish_reason == "length" for o in outs) / len(outs),
        "distinct_1": textmetrics.distinct_n(texts, 1),
        "distinct_2": textmetrics.distinct_n(texts, 2),
        "self_bleu": textmetrics.self_bleu(texts, 4),
        "repetition_rate": textmetrics.repetition_rate(texts, 4),
        "perplexity": math.exp(nll / tok) if tok else None,
    }
    ttft = [o.ttft_s for o in outs if o.ttft_s is not None]
    tpot = [(o.e2e_s - o.ttft_s) / (len(o.token_ids) - 1) for o in outs if len(o.token_ids) > 1]
    timing = {"wall_s": wall, "output_tokens_per_s": sum(n_tok) / wall if wall > 0 else None,
              "ttft_s_median": float(np.median(ttft)) if ttft else None,
              "tpot_s_median": float(np.median(tpot)) if tpot else None}
    return {"params": point, "metrics": metrics, "timing": timing, "texts": texts}
