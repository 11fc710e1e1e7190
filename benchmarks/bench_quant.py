"""Throughput of the quantization kernels per type: dequantize and quantize, in GB/s of output
(float32 bytes for dequantize, quantized bytes for quantize), on one thread and on all threads,
beside np.copyto of the same number of output bytes in the same run (the memory-bandwidth
yardstick). Like np.copyto, the kernels write into arrays allocated beforehand (_core.dequantize and
_core.quantize, which llmbench.models.weight_types wraps), so first-touch page faults are not part of the figures.

    python benchmarks/bench_quant.py                                  # every type, markdown table
    python benchmarks/bench_quant.py --types Q4_K Q8_0 --elements 4194304 --reps 9 --json out.json
    LLMBENCH_SIMD=scalar python benchmarks/bench_quant.py             # the scalar references

Each figure is the median of --reps timed runs after one warmup (CLOCK_MONOTONIC via
time.perf_counter_ns); --json keeps every sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from llmbench import _core
from llmbench.models.weight_types import QUANTIZE_TYPES, SUPPORTED_TYPES, quantize, type_id


def samples(f: Callable[[], object], reps: int) -> list[float]:
    """seconds of each of reps calls of f, after one warmup"""
    f()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        f()
        out.append((time.perf_counter_ns() - t0) * 1e-9)
    return out


def gbps(nbytes: int, secs: list[float]) -> float:
    return nbytes / statistics.median(secs) / 1e9


def bench_type(t: str, x: np.ndarray, reps: int, nthreads: int) -> dict:
    tid, (nrows, ncols) = type_id(t), x.shape
    q = quantize(x, t)
    y = np.ones_like(x)        # written once, so its pages are mapped before timing
    q_out = np.ones_like(q)
    r: dict = {"type": t, "elements": x.size, "quantized_bytes": q.nbytes, "threads": nthreads}
    r["dequantize_1"] = samples(lambda: _core.dequantize(q, tid, nrows, ncols, y, 1), reps)
    r["dequantize_n"] = samples(lambda: _core.dequantize(q, tid, nrows, ncols, y, nthreads), reps)
    r["copy_f32"] = samples(lambda: np.copyto(y, x), reps)
    if t in QUANTIZE_TYPES:
        r["quantize_1"] = samples(lambda: _core.quantize(x, tid, q_out, 1), reps)
        r["quantize_n"] = samples(lambda: _core.quantize(x, tid, q_out, nthreads), reps)
        r["copy_quantized"] = samples(lambda: np.copyto(q_out, q), reps)
    return r


def table(results: list[dict]) -> str:
    n = results[0]["threads"]
    head = (f"| type | dequant 1 thr | dequant {n} thr | copy f32 | quant 1 thr | quant {n} thr | copy quantized |\n"
            "|---|---:|---:|---:|---:|---:|---:|")
    rows = [head]
    for r in results:
        fb, qb = r["elements"] * 4, r["quantized_bytes"]
        cells = [gbps(fb, r["dequantize_1"]), gbps(fb, r["dequantize_n"]), gbps(fb, r["copy_f32"])]
        if "quantize_1" in r:
            cells += [gbps(qb, r["quantize_1"]), gbps(qb, r["quantize_n"]), gbps(qb, r["copy_quantized"])]
        rows.append(f"| {r['type']} | " + " | ".join(f"{c:.3g}" for c in cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python benchmarks/bench_quant.py --types Q4_K Q6_K --reps 9",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", nargs="+", default=list(SUPPORTED_TYPES), help="types to time (default: all)")
    ap.add_argument("--elements", type=int, default=1 << 24,
                    help="elements per tensor, rows of 4096 (default 16M: 64 MB of float32, beyond the caches)")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions per figure (default 5)")
    ap.add_argument("--threads", type=int, default=0, help="threads of the multi-threaded runs (default: all)")
    ap.add_argument("--json", help="also write every sample here")
    args = ap.parse_args()

    nthreads = args.threads or _core.max_threads()
    x = np.empty((max(1, args.elements // 4096), 4096), np.float32)
    _core.fill_normal(x, 1, 1.0, 0.0, 0)
    results = []
    for t in args.types:
        results.append(bench_type(t, x, args.reps, nthreads))
        print(f"timed {t}", flush=True)
    simd = _core.simd_info()
    print(f"\nGB/s of output, median of {args.reps}; {x.size} elements; SIMD {simd['active']} "
          f"({simd['cpu_features']}); {nthreads} threads\n")
    print(table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"simd": simd, "build": _core.build_info(), "reps": args.reps, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
