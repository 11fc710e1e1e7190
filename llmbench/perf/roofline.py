"""What a step of the engine reads and computes, and this machine's limits it is measured against:
the bytes of a decode step (weight matrices, KV cache), the operations of a prompt by instruction
kind, the memory bandwidth reference (STREAM read in a child process, or a GPU's copy bandwidth),
the last-level cache, and the prompt phase against the arithmetic peaks (llmbench.perf.peak)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .. import LLM, UnsupportedError
from ..info import llc_bytes
from . import membw, peak
from .metrics import decode_step_bytes, prefill_compute

_MEMBW_CACHE: dict[int, dict] = {}


def membw_elsewhere(threads: int, again: bool = False) -> dict:
    """membw in a child process, so its arrays do not count in this process's peak memory. Measured
    once per thread count in a process; with ``again`` measured now, keeping the better of now and
    before (membw.better). The child runs from the folder that holds
    this llmbench, so a source tree in the working directory cannot shadow it. Threads beyond this
    process's CPUs are the CPUs' count, as in LLM."""
    from ..llm import _cpus

    threads = min(threads, _cpus())
    old = _MEMBW_CACHE.get(threads)
    if old is not None and not again:
        return old
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "llmbench", "membw", "--json", "--reps", "3", "--threads", str(threads)],
                       capture_output=True, text=True, timeout=600, cwd=here, check=False)
    # fall back to measuring here rather than reporting no fraction
    new = json.loads(r.stdout) if r.returncode == 0 else membw.measure(256 << 20, 3, threads)
    _MEMBW_CACHE[threads] = membw.better(old, new)
    return _MEMBW_CACHE[threads]


def reference_bandwidth(llm: LLM, again: bool = False) -> dict:
    """The bandwidth decode is measured against: this machine's STREAM read (CPU, in a child process;
    ``again``: measured now too, the better of the two kept) or the device's copy bandwidth (CUDA, here:
    device memory is not this process's RSS)."""
    if llm.backend != "cuda":
        return membw_elsewhere(llm.threads, again)
    from ..backends import cuda

    assert llm.device is not None   # set for the CUDA backend
    nbytes, reps = 1 << 28, 20
    return {"backend": "cuda", "copy_gbs": cuda.copy_bandwidth(nbytes, reps, device=llm.device), "bytes": nbytes,
            "reps": reps}


def reference_gbps(bw: dict | None) -> float | None:
    """The GB/s a decode bandwidth is a fraction of: the read of a ``reference_bandwidth`` result (CPU),
    or its copy bandwidth (CUDA); None without one."""
    bw = bw or {}
    return bw.get("copy_gbs") if bw.get("backend") == "cuda" else bw.get("read")


def cache_limit(llm: LLM) -> int | None:
    """The last-level cache decode's bytes are compared with (CPU; a GPU's L2 is not counted)."""
    return llc_bytes() if llm.backend != "cuda" else None


def _bf16_pairs(llm: LLM, t) -> bool:
    """Whether the engine runs matrix t as BF16 pairs: activations="bf16", a float type, rows of a
    multiple of 32 values (csrc/backend_cpu.c converts exactly those at load)."""
    return llm.activations == "bf16" and peak.kind_for(t.type) == "f32" and t.shape[-1] % 32 == 0


def matrix_bytes(llm: LLM) -> int:
    """Bytes of the weight matrices one decode step reads (the embedding table only when it is also
    the output projection; a step reads one row of it otherwise). With activations="bf16" the CPU
    engine reads its BF16 copies of float matrices (rows a multiple of 32): 2 bytes a value."""
    return sum(2 * t.n_elements if _bf16_pairs(llm, t) else t.nbytes for name, t in llm.file.tensors.items()
               if len(t.shape) == 2 and (name != "token_embd.weight" or llm.info["tied_output"]))


def tg_step_bytes(llm: LLM, tg: int) -> int:
    """Bytes one decode step of a tg test of ``tg`` tokens reads: the weight matrices and the KV cache
    at the test's mean depth (1 + tg // 2)."""
    return decode_step_bytes(matrix_bytes(llm), llm.memory()["kv_per_token"], 1 + tg // 2)


def prefill_ops(llm: LLM, n_prompt: int) -> dict[str, float]:
    """Operations of one prompt of n_prompt tokens by the peak they run against (llmbench.perf.peak):
    every layer matrix product, 2 per weight per token, on its weight type's instruction (8-bit dot
    products for quantized types, FP32 FMAs for float ones, BF16 pair products for float ones with
    activations="bf16"); the output row of the last token alone;
    causal attention, 4 * heads * head_dim * (position + 1) flops per token and layer, on FP32 FMAs."""
    info, ops = llm.info, {"f32": 0.0, "int8": 0.0, "bf16": 0.0}
    out_name = "token_embd.weight" if info["tied_output"] else "output.weight"
    for name, t in llm.file.tensors.items():
        if len(t.shape) == 2 and (name.startswith("blk.") or name == out_name):
            kind = "bf16" if _bf16_pairs(llm, t) else peak.kind_for(t.type)
            ops[kind] += 2.0 * t.shape[0] * t.shape[1] * (n_prompt if name.startswith("blk.") else 1)
    ops["f32"] += info["n_layer"] * 4.0 * info["n_head"] * info["head_dim"] * n_prompt * (n_prompt + 1) / 2
    return {k: v for k, v in ops.items() if v}


def peak_kinds(activations) -> tuple[str, ...]:
    """The peaks (llmbench.perf.peak kinds) that runs with these LLM activations may need: BF16 pairs
    only where one of them is "bf16" (the probe raises UnsupportedError on CPUs without them)."""
    return ("f32", "int8", "bf16") if "bf16" in activations else ("f32", "int8")


def prefill_roofline(llm: LLM, tests: list[dict], seen: dict[str, dict] | None = None) -> dict | None:
    """The depth-0 pp test against this machine's arithmetic peaks, measured now with the engine's
    threads, each the better of now and ``seen`` (peak.best before the tests); None for CUDA, without
    such a test, or without an instruction to measure (BF16 pairs on a CPU without AVX-512 BF16)."""
    pp = next((t for t in tests if t["n_prompt"] and not t["n_gen"] and not t["n_depth"]), None)
    if pp is None or llm.backend != "cpu":
        return None
    ops = prefill_ops(llm, pp["n_prompt"])
    try:
        peaks = peak.best(llm.threads, tuple(ops), seen)
    except UnsupportedError:   # BF16 pairs where the level has no vdpbf16ps: the scalar reference, no peak
        return None
    res = prefill_compute(ops, [pp["n_prompt"] / ts for ts in pp["samples_ts"]], {k: p["gops"] for k, p in peaks.items()})
    return {"n_prompt": pp["n_prompt"], **res, "instructions": {k: p["instruction"] for k, p in peaks.items()}}

