"""Where a forward step's time goes: ``llmbench bench --profile``.

The CPU engine, created with ``profile=True``, reads the clock around every operation of a step on the
thread that runs it (each operation ends at a barrier of its threads): embedding, RMSNorms (with the
residual add before each, done in the same pass), activation quantization, the matrix products (split by
weight type; a product fused over several matrices shares its time out by their rows), RoPE with the KV
stores, attention, and the element-wise rest (biases, the last residual add, SwiGLU). ``measure`` runs a
prefill of ``pp`` tokens and a decode of ``tg`` tokens ``reps`` times each, with the stats reset between
phases, and reports per phase the time of each kind, its share of the backend's forward time, the products
by weight type, and ``coverage``: the kinds' sum over the forward time (what is left is the loop between
operations; the tests hold it within 3%). The host's own phases (sampling, scheduling: the engine's clock)
are given beside it.

The cost: two clock reads per operation, some 20 per layer. ``overhead`` compares the same runs on a
second load of the model without profiling (warmed up the same way), alternated at least five times in
this process: the fastest profiled prefill and decode forward times over the fastest plain ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

KINDS = ("embed", "norm", "quant_x", "matmul", "rope_kv", "attention", "elementwise")


def _type_name(tid: int) -> str:
    from ..models.weight_types import _TRAITS

    return _TRAITS[tid][0] if tid in _TRAITS else f"type{tid}"


def _phase(llm, ids: list[int], max_tokens: int, reps: int, phase: str) -> dict[str, Any]:
    from ..llm import SamplingParams

    llm.engine.reset_stats()
    t0 = time.perf_counter()
    for _ in range(reps):
        llm.generate([ids], SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0))
    wall = time.perf_counter() - t0
    st = llm.engine.stats()
    fwd = st[f"backend_{phase}_ns"]
    kinds = {k: int(st["prof_ns"][phase][k]) for k in KINDS}
    total = sum(kinds.values())
    return {"steps": int(st["steps"]), "tokens": int(st[f"{phase}_tokens"]), "forward_ns": int(fwd), "wall_s": wall,
            "kinds_ns": kinds, "shares": {k: v / fwd if fwd else None for k, v in kinds.items()},
            "matmul_by_type_ns": {_type_name(int(t)): int(v) for t, v in st["prof_type_ns"][phase].items()},
            "other_ns": int(fwd - total), "coverage": total / fwd if fwd else None,
            "host_ns": {"sample": int(st["sample_ns"]), "schedule": int(st["schedule_ns"])}}


def measure(model: str, threads: int | None = None, pp: int = 512, tg: int = 128, reps: int = 3,
            overhead: bool = True, **llm_kwargs: Any) -> dict[str, Any]:
    """The breakdown of a ``pp``-token prefill and a ``tg``-token decode on ``model`` (see the module)."""
    from ..llm import LLM

    if pp < 1 or tg < 2 or reps < 1:
        raise ValueError("profile: pp >= 1, tg >= 2 and reps >= 1 are needed")
    llm = LLM(model, threads=threads, profile=True, max_batch_tokens=max(pp, 512), **llm_kwargs)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, llm.info["vocab"], pp).tolist()
    one = prompt[:1]
    _phase(llm, one, 2, 1, "decode")   # warm-up
    out = {"model": str(model), "threads": llm.threads, "pp": pp, "tg": tg, "reps": reps,
           "prefill": _phase(llm, prompt, 1, reps, "prefill"), "decode": _phase(llm, one, tg, reps, "decode")}
    if overhead:
        plain = LLM(model, threads=threads, profile=False, max_batch_tokens=max(pp, 512), **llm_kwargs)
        _phase(plain, prompt, 2, 1, "decode")   # the same warm-up (a fresh load's first steps touch its pages)
        times: dict[str, list[list[int]]] = {"prefill": [[], []], "decode": [[], []]}   # [plain, profiled]
        for _ in range(max(reps, 5)):   # alternated: a drift of the machine's speed falls on both
            for i, m in enumerate((plain, llm)):
                times["prefill"][i].append(_phase(m, prompt, 1, 1, "prefill")["forward_ns"])
                times["decode"][i].append(_phase(m, one, tg, 1, "decode")["forward_ns"])
        # the fastest of each: a run the OS interrupted is slower by the interruption, which says nothing
        # of the timing's cost (medians of a few short runs swung 20x on a loaded machine)
        out["overhead"] = {ph: float(min(t[1]) / min(t[0])) for ph, t in times.items()}
    return out


def table_rows(prof: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, prefill share, decode share) rows, the products by type after the kinds, for printing."""
    def row(name: str, cell: Callable[[str], str]) -> tuple[str, str, str]:
        return name, cell("prefill"), cell("decode")

    rows = []
    for k in KINDS:
        rows.append(row(k, lambda ph: f"{100 * prof[ph]['shares'][k]:.1f}%" if prof[ph]["shares"][k] is not None
                        else ""))
    types = sorted(set(prof["prefill"]["matmul_by_type_ns"]) | set(prof["decode"]["matmul_by_type_ns"]))
    for t in types:
        rows.append(row(f"  matmul {t}", lambda ph: f"{100 * prof[ph]['matmul_by_type_ns'].get(t, 0) / prof[ph]['forward_ns']:.1f}%"
                        if prof[ph]["forward_ns"] else ""))
    rows.append(row("other (loop)", lambda ph: f"{100 * prof[ph]['other_ns'] / prof[ph]['forward_ns']:.1f}%"
                    if prof[ph]["forward_ns"] else ""))
    return rows
