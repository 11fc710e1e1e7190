"""Decode-speed yardstick of the CPU dot-product kernels (csrc/vecdot*.c): the matrix-vector product of
a rows x cols weight matrix of each type with one token (x quantized to the type's vec_dot_type inside
the call, as the engine does once per token), in rows/s and GB/s of weights read, on 1 and 2 threads,
beside a threaded memcpy and a threaded read of the same bytes in the same run. Decode at batch 1 is
bound by reading the weights, so weight GB/s / read GB/s says how close the kernels come to the memory.
The read is `llmbench membw`'s read kernel, the limit the engine's decode fractions are taken against.

Weights are spread over enough copies of the matrix (--pool-mb, default four times the last-level cache
and at least 256 MB) that each call reads from DRAM, as a real model's layers do; the yardsticks cycle
over the same copies.

Types the engine repacks at load on this CPU (Q4_K, Q6_K and Q8_0 with AVX-512 VNNI: rows interleaved 16 at a time,
llmbench._core.vec_dot_repack) get a second row, "(interleaved)": the same matrix in the layout the
engine's forward pass reads (and, where the pool outweighs the last-level cache, prefetched as the engine
prefetches weights that stream from DRAM: stream=True).

    python benchmarks/bench_vecdot.py                                    # every type, markdown table
    python benchmarks/bench_vecdot.py --types Q4_K Q8_0 --rows 4096 --cols 4096 --json out.json
    LLMBENCH_SIMD=avx2 python benchmarks/bench_vecdot.py --types Q4_K    # force a SIMD level

Each figure is the median of --reps timed calls (each on the next copy) after a warmup pass over all
copies (CLOCK_MONOTONIC via time.perf_counter_ns); --json keeps every sample.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from llmbench import _core
from llmbench.info import llc_bytes
from llmbench.models.weight_types import quantize, type_id
from llmbench.perf.membw import page_aligned

TYPES = ["Q8_0", "Q4_K", "Q6_K", "Q4_0", "F16", "Q5_K", "Q5_0", "Q4_1", "Q5_1", "BF16", "F32"]


def samples(f: Callable[[int], object], ncopies: int, reps: int) -> list[float]:
    """seconds of each of reps calls f(k) (k cycling over the copies), after one warm pass over all"""
    for k in range(ncopies):
        f(k)
    out = []
    for i in range(reps):
        t0 = time.perf_counter_ns()
        f(i % ncopies)
        out.append((time.perf_counter_ns() - t0) * 1e-9)
    return out


def bench_type(t: str, rows: int, cols: int, pool_bytes: int, reps: int, threads: list[int]) -> list[dict]:
    """the plain rows' figures, and the interleaved layout's where this CPU has one for t"""
    rng = np.random.default_rng(0)
    w = quantize(rng.standard_normal((rows, cols), dtype=np.float32), t).reshape(rows, -1)
    tid = type_id(t)
    layouts = [(t, w, 0)]
    group = _core.vec_dot_interleave(tid)
    if group and rows % group == 0:
        layouts.append((f"{t} (interleaved)", *_core.vec_dot_repack(tid, w)))
    ncopies = max(2, -(-pool_bytes // w.nbytes))
    stream = not _core.cache_holds(ncopies * w.nbytes)   # from DRAM, as the engine judges (llmb_weight.stream)
    dst = np.empty_like(w)
    x = rng.standard_normal((1, cols), dtype=np.float32)
    out = []
    for name, wl, group in layouts:
        copies = [page_aligned(wl) for _ in range(ncopies)]   # where the engine's would start
        r: dict = {"type": name, "rows": rows, "cols": cols, "weight_bytes": w.nbytes, "copies": ncopies}
        for n in threads:
            r[f"matvec_{n}"] = samples(lambda k: _core.matvec(tid, copies[k], x, n, interleave=group, stream=stream),
                                       ncopies, reps)
            r[f"memcpy_{n}"] = samples(lambda k: _core.mem_bench(True, copies[k], n, dst), ncopies, reps)
            r[f"read_{n}"] = samples(lambda k: _core.mem_bench(False, copies[k], n, None), ncopies, reps)
        out.append(r)
    return out


def table(results: list[dict], threads: list[int]) -> str:
    head = "| type | MB | " + " | ".join(
        f"rows/s {n}t | GB/s {n}t | memcpy {n}t | read {n}t | ÷memcpy | ÷read" for n in threads) + " |"
    rows = [head, "|---|---:|" + "---:|" * 6 * len(threads)]
    for r in results:
        nb = r["weight_bytes"]
        cells = [f"{nb / 1e6:.1f}"]
        for n in threads:
            mv, cp, rd = (statistics.median(r[f"{k}_{n}"]) for k in ("matvec", "memcpy", "read"))
            cells += [f"{r['rows'] / mv / 1e6:.2f}M", f"{nb / mv / 1e9:.1f}", f"{nb / cp / 1e9:.1f}",
                      f"{nb / rd / 1e9:.1f}", f"{cp / mv:.2f}", f"{rd / mv:.2f}"]
        rows.append(f"| {r['type']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python benchmarks/bench_vecdot.py --types Q4_K Q6_K --reps 31",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", nargs="+", default=TYPES, help="weight types (default: all with a kernel)")
    ap.add_argument("--rows", type=int, default=2048, help="weight rows (outputs), default 2048")
    ap.add_argument("--cols", type=int, default=8192, help="weight columns (a multiple of 256), default 8192")
    ap.add_argument("--pool-mb", type=int, default=max(256, 4 * (llc_bytes() or 0) >> 20),
                    help="total MB of weight copies cycled through (default: 4x the last-level cache, at least 256)")
    ap.add_argument("--reps", type=int, default=21, help="timed calls per figure (default 21)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts (default: 1 2)")
    ap.add_argument("--json", help="also write every sample here")
    args = ap.parse_args()
    if args.cols % 256:
        ap.error("--cols must be a multiple of 256 (the K-quant block)")

    results = []
    for t in args.types:
        results += bench_type(t, args.rows, args.cols, args.pool_mb << 20, args.reps, args.threads)
        print(f"timed {t}", flush=True)
    simd = _core.simd_info()
    print(f"\n{args.rows}x{args.cols} weights x 1 token, median of {args.reps}; SIMD {simd['active']}, decode prefetch {simd['prefetch']} "
          f"({simd['cpu_features']}); ÷memcpy, ÷read: matvec GB/s over the yardstick's GB/s\n")
    print(table(results, args.threads))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"simd": simd, "build": _core.build_info(), "args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
