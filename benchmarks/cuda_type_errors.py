"""How far the CUDA backend's weight decoding and products are from the CPU's, per weight type: the
figures in docs/cuda.md ("Weight types on the device"). On a GPU it measures the device; without one,
point LLMBENCH_CUDA_LIB at the emulated library that tests/test_cuda_emulated.py builds (the kernels
compiled for the CPU), e.g.

    c++ -std=c++17 -O1 -fPIC -shared -fvisibility=hidden -Wno-unknown-pragmas -I/usr/local/cuda/include \\
        -include kernels/tests/simt_host.h -x c++ kernels/*.cu kernels/tests/cuda_emu.cpp -o /tmp/emu.so
    LLMBENCH_CUDA_LIB=/tmp/emu.so python benchmarks/cuda_type_errors.py --types Q4_1,Q2_K --out errors.json

For each type: max |device - CPU| of dequantized rows (quantized random weights, and random block bytes
with finite scales), the largest matvec (1..16 tokens, FP32) and gemm (FP16 tiles) error relative to
|W||x| against float64 products, and for a tiny dummy model in that type (a mix for the K types) the
largest prefill logit difference over the largest CPU logit, the largest decode log-probability
difference and whether greedy tokens agree (CPU engine with activations="f32", F16 KV cache on both).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

import llmbench
from llmbench import LLM, SamplingParams
from llmbench.backends import cuda
from llmbench.models.weight_types import block_size, dequantize, quantize, random_blocks, type_id

# the block types the device decodes, and their block sizes
BLOCK = {t: block_size(t) for t in cuda.WEIGHT_TYPES if t not in ("F32", "F16", "BF16")}   # the quantized ones
MIX = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}   # dummy model file type of a tensor type


def kernel_errors(ctx: cuda.Context, t: str, rng) -> dict:
    cols = 4 * BLOCK[t]
    w = (rng.standard_normal((37, cols)) * np.exp2(rng.integers(-4, 2, (37, 1)))).astype(np.float32)
    raw = quantize(w, t).reshape(37, -1)
    w64 = dequantize(raw, t, (37, cols)).astype(np.float64)
    rb = random_blocks(t, 13 * 9, rng).reshape(13, -1)
    rw = dequantize(rb, t, (13, 9 * BLOCK[t]))
    out = {"dequant_max_abs": float(np.abs(ctx.dequantize(type_id(t), raw, cols) - w64.astype(np.float32)).max()),
           "dequant_random_blocks_max_abs": float(np.abs(ctx.dequantize(type_id(t), rb, 9 * BLOCK[t]) - rw).max())}
    for path, ntok in (("matvec", 16), ("gemm", 130)):
        x = rng.standard_normal((ntok, cols)).astype(np.float32)
        y = ctx.matmul(type_id(t), raw, x, path=path)
        err = np.abs(y - x.astype(np.float64) @ w64.T) / (np.abs(x.astype(np.float64)) @ np.abs(w64).T)
        out[f"{path}_max_rel"] = float(err.max())
    return out


def model_errors(t: str) -> dict:
    path = llmbench.dummy_model("tiny", MIX.get(t, t))
    toks = np.random.default_rng(1).integers(0, 1024, 37).tolist()
    cpu = LLM(path, threads=2, kv_dtype="f16", activations="f32")
    dev = LLM(path, backend="cuda", kv_dtype="f16")
    want, got = cpu.logits(toks), dev.logits(toks)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    a, b = cpu.generate([toks], params)[0], dev.generate([toks], params)[0]
    return {"model": f"tiny {MIX.get(t, t)}", "logits_max_rel": float(np.abs(got - want).max() / np.abs(want).max()),
            "decode_logprob_max_abs": float(np.abs(np.array(a.logprobs) - np.array(b.logprobs)).max()),
            "same_greedy_tokens": a.token_ids == b.token_ids}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python benchmarks/cuda_type_errors.py --types Q4_1,IQ4_XS")
    ap.add_argument("--types", default="Q4_1,Q5_0,Q5_1,IQ4_NL,IQ4_XS,Q2_K,Q3_K",
                    help=f"comma-separated weight types (of {', '.join(BLOCK)})")
    ap.add_argument("--no-model", action="store_true", help="kernels only, no dummy model runs")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    types = [t.strip().upper() for t in args.types.split(",") if t.strip()]
    bad = [t for t in types if t not in BLOCK]
    if bad:
        ap.error(f"unknown or unsupported type(s) {', '.join(bad)}; choose from {', '.join(BLOCK)}")
    ok, why = cuda.available()
    if not ok:
        print(f"error: no usable CUDA device: {why} (set LLMBENCH_CUDA_LIB to the emulated library, see --help)",
              file=sys.stderr)
        return 2
    device = cuda.devices()[0].name
    ctx = cuda.Context()
    rows = []
    for i, t in enumerate(types):
        r = {"type": t, **kernel_errors(ctx, t, np.random.default_rng(i))}
        if not args.no_model:
            r.update(model_errors(t))
        rows.append(r)
        print(" ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"device": device, "results": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
