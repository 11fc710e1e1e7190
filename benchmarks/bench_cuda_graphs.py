"""CUDA Graphs on and off, side by side: decode throughput of the engine on the CUDA backend
(LLM(backend="cuda", cuda_graphs=...)) per batch size, with each bucket's capture time and the
kernels one decode step launches (or replays).

Two engines of the same model, one replaying decode steps from graphs and one launching every
kernel, run the same fixed-length batches (greedy, ignore_eos) in alternation, A B A B ..., `--rounds`
times per batch size; each run's decode time is the engine's own (stats: decode_ns over
decode_tokens), and a point reports the medians, the raw samples and the on/off speedup. Results
are one JSON document.

    python benchmarks/bench_cuda_graphs.py --out graphs.json                    # llama-1b Q4_K_M (dummy)
    python benchmarks/bench_cuda_graphs.py --model stories260K.gguf --batch 1 4 --tokens 16 --out g.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from llmbench import LLM, SamplingParams
from llmbench.backends import cuda


def decode_run(llm: LLM, batch: int, prompt: list[int], tokens: int) -> dict:
    """One batch of `batch` copies of `prompt`, `tokens` greedy tokens each; the engine's counters
    before and after give this run's decode time and the graphs it captured and replayed."""
    before = llm.engine.stats()
    t0 = time.perf_counter()
    llm.generate([prompt] * batch, SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True))
    wall = time.perf_counter() - t0
    after = llm.engine.stats()
    d = {k: after[k] - before[k] for k in ("decode_ns", "decode_tokens", "graph_captures", "graph_replays",
                                           "capture_ns")}
    return {"decode_tok_s": d["decode_tokens"] / (d["decode_ns"] * 1e-9) if d["decode_ns"] else 0.0,
            "ms_per_step": d["decode_ns"] * 1e-6 / max(d["decode_tokens"] / batch, 1), "wall_s": wall,
            "graph_captures": d["graph_captures"], "graph_replays": d["graph_replays"],
            "capture_ms": d["capture_ns"] * 1e-6, "kernels_per_step": after["kernels_per_step"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--model", help="a GGUF file (default: the llama-1b dummy model of --type)")
    ap.add_argument("--type", default="Q4_K_M", help="quantization of the dummy model (default Q4_K_M)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64], help="batch sizes")
    ap.add_argument("--tokens", type=int, default=64, help="decode tokens per sequence (default 64)")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens (default 32)")
    ap.add_argument("--rounds", type=int, default=3, help="alternated on/off runs per batch size (default 3)")
    ap.add_argument("--ctx", type=int, help="context of the engines (default: LLM's; a graph's attention grid "
                                            "is sized for it)")
    args = ap.parse_args(argv)
    ok, why = cuda.available()
    if not ok:
        print(f"no usable CUDA device: {why}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    model = args.model
    if model is None:
        from llmbench.models.dummy import dummy_model

        model = str(dummy_model("llama-1b", args.type))
    max_seqs = max(args.batch)
    llms = {on: LLM(model, backend="cuda", cuda_graphs=on, max_seqs=max_seqs, ctx=args.ctx) for on in (True, False)}
    prompt = [1 + i % 100 for i in range(args.prompt)]
    points = []
    for batch in args.batch:
        # warm up; the graphs engine captures the buckets this batch size's decode steps use
        warm = {on: decode_run(llm, batch, prompt, 2) for on, llm in llms.items()}
        runs: dict[bool, list[dict]] = {True: [], False: []}
        for _ in range(args.rounds):
            for on in (True, False):
                runs[on].append(decode_run(llms[on], batch, prompt, args.tokens))
        med = {on: statistics.median(r["decode_tok_s"] for r in runs[on]) for on in runs}
        point = {"batch": batch, "graphs_on": runs[True], "graphs_off": runs[False],
                 "decode_tok_s_on": med[True], "decode_tok_s_off": med[False],
                 "speedup": med[True] / med[False] if med[False] else None,
                 "kernels_per_step": runs[True][-1]["kernels_per_step"],
                 "kernels_per_step_off": runs[False][-1]["kernels_per_step"],
                 "captures": warm[True]["graph_captures"], "capture_ms": warm[True]["capture_ms"]}
        points.append(point)
        print(f"batch {batch:3d}: graphs on {med[True]:9.1f} tok/s, off {med[False]:9.1f} tok/s, "
              f"x{point['speedup'] or 0:.2f}, {point['kernels_per_step']} kernels per step, "
              f"{point['captures']} captures in {point['capture_ms']:.2f} ms", flush=True)
    dev = cuda.devices()[0]
    st = llms[True].engine.stats()
    result = {"benchmark": "bench_cuda_graphs", "device": dev.name, "model": model, "prompt_tokens": args.prompt,
              "decode_tokens": args.tokens, "rounds": args.rounds, "points": points,
              "graph_captures": st["graph_captures"], "capture_ms_total": st["capture_ns"] * 1e-6,
              "seconds": time.monotonic() - t0}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {args.out} in {result['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
