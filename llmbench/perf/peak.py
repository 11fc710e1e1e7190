"""This machine's arithmetic peak with the engine's threads (csrc/peak.c): FP32 fused multiply-adds, which
the float prefill kernels run on, 8-bit multiply-accumulates, which the quantized ones run on, and BF16 pair
products (vdpbf16ps, where the CPU has AVX-512 BF16), which float matrices run on with activations="bf16", at
the SIMD level the engine dispatches to. A prompt phase's achieved GFLOP/s (GOP/s) over it says how close
prefill comes to the compute limit, as membw does for decode and memory."""

from __future__ import annotations

import os

from .. import _core
from ..models.weight_types import block_size

KINDS = {"f32": _core.PEAK_F32, "int8": _core.PEAK_INT8, "bf16": _core.PEAK_BF16}   # compute_peak's kinds


def measure(kind: str = "f32", threads: int | None = None, rounds: int = 2_000_000, reps: int = 5) -> dict:
    """Best-of-``reps`` GFLOP/s (f32: 2 per lane of a fused multiply-add; bf16: 2 per multiply-add of a
    pair product) or GOP/s (int8: 2 per 8-bit multiply-add) of ``threads`` threads each running ``rounds``
    rounds of 12 independent chains. bf16 raises UnsupportedError where the level has no vdpbf16ps."""
    threads = (os.cpu_count() or 1) if threads is None else threads
    if kind not in KINDS:
        raise ValueError(f"peak kind {kind!r}: one of {', '.join(KINDS)}")
    if rounds < 1 or reps < 1 or threads < 1:
        raise ValueError("peak: rounds >= 1, reps >= 1 and threads >= 1 are required")
    r = _core.compute_peak(KINDS[kind], rounds, reps, threads)
    return {"kind": kind, "gops": r["gops"], "instruction": r["instruction"], "threads": threads, "rounds": rounds,
            "reps": reps}


def best(threads: int, kinds=("f32", "int8"), seen: dict[str, dict] | None = None,
         rounds: int = 10_000_000) -> dict[str, dict]:
    """``measure`` each kind now and keep, per kind, the higher of it and ``seen`` (earlier results of
    this function): a peak is a limit of the machine, and on a shared host one measurement can land in a
    busy moment, so callers measure before and after their runs and keep the best."""
    out = {}
    for k in kinds:
        m = measure(k, threads, rounds=rounds)
        out[k] = m if not seen or k not in seen or m["gops"] >= seen[k]["gops"] else seen[k]
    return out


def kind_for(weight_type: str) -> str:
    """The peak a matrix product with weights of ``weight_type`` runs against: unquantized types (one
    value per block: F32, F16, BF16) on FP32 fused multiply-adds (BF16 pair products with
    activations="bf16": llmbench.perf.roofline.prefill_ops), quantized types on 8-bit dot products."""
    return "f32" if block_size(weight_type) == 1 else "int8"
