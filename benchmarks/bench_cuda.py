"""CUDA kernel benchmark: decode matrix-vector bandwidth against the device's measured copy bandwidth,
cuBLAS GEMM throughput at prompt-processing shapes, the crossover token count between the two paths,
and paged decode attention, for the llama-1b and llama-8b preset shapes.

Every time is from CUDA events around `reps` back-to-back launches after warmups; each point keeps
its raw samples (ms per call) and reports the median. Results are one JSON document.

    python benchmarks/bench_cuda.py --out results.json            # full run (about two minutes on an H200)
    python benchmarks/bench_cuda.py --quick --out /tmp/quick.json  # smaller shapes, a smoke test
    python benchmarks/bench_cuda.py --types Q4_1,IQ4_XS,Q2_K --out types.json   # other weight types
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import time

import numpy as np

from llmbench.backends import cuda
from llmbench.models.weight_types import quantize, row_bytes, type_id

# (name, rows, cols) of each matrix of one layer, plus the output matrix
SHAPES = {
    "llama-1b": {"q": (2048, 2048), "kv": (512, 2048), "gate_up": (8192, 2048), "down": (2048, 8192),
                 "output": (128256, 2048)},
    "llama-8b": {"q": (4096, 4096), "kv": (1024, 4096), "gate_up": (14336, 4096), "down": (4096, 14336),
                 "output": (128256, 4096)},
}
QUICK = {"llama-1b": {"q": (2048, 2048), "down": (2048, 8192)}}
TYPES = ["Q4_K", "Q8_0", "F16"]   # the default --types
PHASE = 0


def upload_rows(t: str, rows: int, cols: int, seed: int = 0) -> cuda.DeviceBuffer:
    """rows x cols of type t on the device: 64 quantized random rows repeated (speed does not depend on values)."""
    rng = np.random.default_rng(seed)
    base = quantize(rng.standard_normal((64, cols), dtype=np.float32), t).reshape(64, -1)
    full = np.tile(base, (-(-rows // 64), 1))[:rows]
    buf = cuda.DeviceBuffer(full.nbytes)
    buf.upload(full)
    return buf


def timed(ctx: cuda.Context, fn, reps: int, samples: int, warmup: int = 3) -> list[float]:
    """ms per launch: fn(n) queues n launches; `samples` times `reps` launches between CUDA events."""
    fn(warmup)
    ctx.sync()
    out = []
    for _ in range(samples):
        ctx.phase_begin(PHASE)
        fn(reps)
        ctx.phase_end(PHASE)
        out.append(ctx.phase_ms(PHASE) / reps)
    return out


def bench_matmul(ctx, model: str, shapes: dict, args) -> list[dict]:
    rows_out = []
    max_tok = max(args.tokens + [args.pp])
    for t in args.types:
        for name, (rows, cols) in shapes.items():
            w = upload_rows(t, rows, cols)
            x = cuda.DeviceBuffer(max_tok * cols * 4)
            x.upload(np.random.default_rng(1).standard_normal((max_tok, cols), dtype=np.float32))
            y = cuda.DeviceBuffer(max_tok * rows * 4)
            wbytes = rows * row_bytes(t, cols)
            for ntok in sorted(set(args.tokens + [args.pp])):
                for path in ("matvec", "gemm"):
                    if path == "matvec" and ntok > 16:
                        continue
                    # the launches loop in C: Python's call overhead would hide the small matrices' kernels
                    fn = functools.partial(ctx.matmul_dev, path, type_id(t), w.ptr, rows, cols, x.ptr, cols, ntok,
                                           y.ptr, rows)
                    ms = timed(ctx, lambda r, fn=fn: fn(reps=r), args.reps, args.samples)
                    med = statistics.median(ms)
                    rows_out.append({
                        "model": model, "matrix": name, "type": t, "rows": rows, "cols": cols, "tokens": ntok,
                        "path": path, "ms_median": med, "ms_samples": ms,
                        "weight_GBps": wbytes / (med * 1e-3) / 1e9,
                        "TFLOPs": 2.0 * rows * cols * ntok / (med * 1e-3) / 1e12,
                    })
                    print(f"{model:9s} {name:8s} {t:5s} {path:6s} ntok={ntok:4d} {med * 1e3:9.1f} us "
                          f"{rows_out[-1]['weight_GBps']:8.1f} GB/s {rows_out[-1]['TFLOPs']:7.2f} TFLOP/s",
                          flush=True)
            for b in (w, x, y):
                b.free()
    return rows_out


def crossover(points: list[dict]) -> list[dict]:
    """Per (model, matrix, type): the smallest token count at which gemm beats matvec."""
    out = []
    keys = sorted({(p["model"], p["matrix"], p["type"]) for p in points})
    for k in keys:
        mv = {p["tokens"]: p["ms_median"] for p in points if (p["model"], p["matrix"], p["type"]) == k and p["path"] == "matvec"}
        gm = {p["tokens"]: p["ms_median"] for p in points if (p["model"], p["matrix"], p["type"]) == k and p["path"] == "gemm"}
        wins = [n for n in sorted(mv) if n in gm and gm[n] < mv[n]]
        out.append({"model": k[0], "matrix": k[1], "type": k[2], "gemm_faster_from_tokens": wins[0] if wins else None,
                    "matvec_ms": mv, "gemm_ms": gm})
    return out


def bench_attention(ctx, args) -> list[dict]:
    """Paged decode attention, llama-8b heads (32 query, 8 KV, 128), F16 and Q8_0 caches."""
    out = []
    n_head, n_kv, hd, bs = 32, 8, 128, 16
    for kv in ("f16", "q8_0"):
        rb = n_kv * hd * 2 if kv == "f16" else n_kv * hd // 32 * 34
        for batch, ctx_len in ((1, 4096), (16, 4096), (64, 1024), (1, 32768)):
            nblk = batch * (-(-ctx_len // bs))
            kc, vc = cuda.DeviceBuffer(nblk * bs * rb), cuda.DeviceBuffer(nblk * bs * rb)
            kc.upload(np.random.default_rng(2).integers(0, 60, size=nblk * bs * rb, dtype=np.uint8))
            vc.upload(np.random.default_rng(3).integers(0, 60, size=nblk * bs * rb, dtype=np.uint8))
            tables = np.arange(nblk, dtype=np.int32).reshape(batch, -1)
            bt, sl = cuda.DeviceBuffer(tables.nbytes), cuda.DeviceBuffer(batch * 4)
            bt.upload(tables)
            sl.upload(np.full(batch, ctx_len, np.int32))
            q, o = cuda.DeviceBuffer(batch * n_head * hd * 4), cuda.DeviceBuffer(batch * n_head * hd * 4)
            q.upload(np.random.default_rng(4).standard_normal((batch, n_head * hd), dtype=np.float32))
            kw = {"q": q.ptr, "out": o.ptr, "ldq": n_head * hd, "ldo": n_head * hd, "k_cache": kc.ptr,
                  "v_cache": vc.ptr, "kv_type": {"f16": 1, "q8_0": 8}[kv], "block_size": bs, "n_head": n_head,
                  "n_head_kv": n_kv, "head_dim": hd, "scale": hd ** -0.5, "block_tables": bt.ptr,
                  "max_blocks": tables.shape[1], "n_seq": batch, "seq_lens": sl.ptr, "split_keys": 0,
                  "max_seq_len": ctx_len}

            def fn(r: int, kw=kw) -> None:
                for _ in range(r):
                    cuda._core.cuda_attention(ctx._ctx, False, **kw)

            ms = timed(ctx, fn, args.reps, args.samples)
            med = statistics.median(ms)
            kv_bytes = 2 * batch * ctx_len * rb
            out.append({"kv_type": kv, "batch": batch, "context": ctx_len, "ms_median": med, "ms_samples": ms,
                        "kv_GBps": kv_bytes / (med * 1e-3) / 1e9})
            print(f"attention {kv:5s} batch={batch:3d} ctx={ctx_len:6d} {med * 1e3:9.1f} us "
                  f"{out[-1]['kv_GBps']:8.1f} GB/s of KV", flush=True)
            for b in (kc, vc, bt, sl, q, o):
                b.free()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--quick", action="store_true", help="one model, two matrices, fewer repetitions")
    ap.add_argument("--reps", type=int, default=20, help="launches per timed sample (default 20)")
    ap.add_argument("--samples", type=int, default=5, help="timed samples per point (default 5)")
    ap.add_argument("--pp", type=int, default=512, help="prompt tokens of the GEMM point (default 512)")
    ap.add_argument("--types", default=",".join(TYPES),
                    help=f"comma-separated weight types (default {','.join(TYPES)}; of {', '.join(cuda.WEIGHT_TYPES)})")
    args = ap.parse_args(argv)
    args.types = [t.strip().upper() for t in args.types.split(",") if t.strip()]
    bad = [t for t in args.types if t not in cuda.WEIGHT_TYPES]
    if bad or not args.types:
        ap.error(f"--types: {', '.join(bad) or 'none given'}; choose from {', '.join(cuda.WEIGHT_TYPES)}")
    args.tokens = [1, 2, 4, 8, 16, 32, 64]
    if args.quick:
        args.reps, args.samples = 5, 3
    ok, why = cuda.available()
    if not ok:
        print(f"no usable CUDA device: {why}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    dev = cuda.devices()[0]
    ctx = cuda.Context()
    copy = [cuda.copy_bandwidth(1 << 30, reps=10) for _ in range(3)]
    print(f"{dev.name}: device-to-device copy {statistics.median(copy):.0f} GB/s (read + write)", flush=True)
    points = []
    for model, shapes in (QUICK if args.quick else SHAPES).items():
        points += bench_matmul(ctx, model, shapes, args)
    att = bench_attention(ctx, args)
    copy_bw = statistics.median(copy)
    for p in points:
        p["fraction_of_copy_bw"] = p["weight_GBps"] / copy_bw
    result = {
        "benchmark": "bench_cuda", "device": dev.name, "compute_capability": list(dev.compute_capability),
        "multiprocessors": dev.multiprocessors, "total_memory": dev.total_memory, "versions": cuda.versions(),
        "host": platform.node(), "copy_GBps_samples": copy, "copy_GBps": copy_bw, "reps": args.reps,
        "samples": args.samples, "matmul": points, "crossover": crossover(points), "attention": att,
        "workspace_bytes": ctx.workspace_bytes(), "seconds": time.monotonic() - t0,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
