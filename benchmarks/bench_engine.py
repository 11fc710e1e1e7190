"""llama-bench-style throughput of llmbench's engine: pp N (prompt tokens/s) and tg N (generated
tokens/s) per model, weight type and thread count, average ± sample stddev over repetitions after
a warmup, with the decode bandwidth achieved as a fraction of this machine's read bandwidth, and the
prompt phase as a fraction of its arithmetic peak, both measured in the same run (llmbench.perf.membw,
llmbench.perf.peak): before the first row and again after every row, each row using the best figures
seen by its end, so one busy moment on a shared host does not lower a limit (fractions above 100% are
flagged: cache-resident weights, or limits only measured in busier moments than the row ran in). With
--near N each row also runs N tg tests between probes of the read bandwidth in its own process, each against
the mean of the two around it: on a host whose bandwidth swings within minutes, that fraction is the one a
run had, where the best probe of the whole run is only a floor for it.

    python benchmarks/bench_engine.py --presets llama-125m --types F16 Q8_0 Q4_K_M --threads 1 2
    python benchmarks/bench_engine.py --model path/to/model.gguf --pp 512 --tg 128 --reps 5
    python benchmarks/bench_engine.py --presets llama-125m --types F16 F16@bf16   # LLM(activations="bf16")
    python benchmarks/bench_engine.py --model llama-1b-Q4_0.gguf --threads 2 --reps 1 --near 6

A model (or type) ending in @q8, @f32 or @bf16 runs with that LLM(activations=...); the default is q8.

Decode bytes per token = every weight matrix read once (the embedding only for its output use when
tied) + the KV cache read at the average context of the tg run.
Prompt "of peak" = the time a pp run needs at the measured peaks over its measured time
(llmbench.perf.bench.prefill_ops: matrix products on their weight type's instruction, attention on FP32).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from llmbench import LLM, SamplingParams
from llmbench.info import llc_bytes
from llmbench.llm import ACTIVATIONS
from llmbench.perf import membw, peak
from llmbench.perf.bench import peak_kinds, prefill_ops, tg_step_bytes
from llmbench.perf.metrics import cache_note, fits_in_cache, prefill_compute


def near_fractions(llm: LLM, tg: int, threads: int, runs: int) -> list[float]:
    """Decode GB/s of `runs` tg runs, each against the mean of the read bandwidth probes taken just before and
    just after it in this process (membw.read_now): on a host whose bandwidth swings between two levels within
    minutes, the best probe of the whole run is not what a given run had."""
    step = tg_step_bytes(llm, tg)
    probes = [membw.read_now(threads)]
    out = []
    for r in range(runs):
        gbs = step * tg / run_once(llm, 1, tg, 200 + r) / 1e9
        probes.append(membw.read_now(threads))
        out.append(gbs / ((probes[-2] + probes[-1]) / 2))
    return out


def split_spec(spec: str) -> tuple[str, str]:
    """"llama-125m:F16@bf16" -> ("llama-125m:F16", "bf16"): a model and the LLM activations it runs with."""
    model, sep, act = spec.rpartition("@")
    if not sep or act not in ACTIVATIONS:
        return spec, "q8"
    return model, act


def peaks_text(p: dict[str, float]) -> str:
    return (f"{p['f32']:.0f} GFLOP/s FP32, {p['int8']:.0f} GOP/s int8"
            + (f", {p['bf16']:.0f} GFLOP/s BF16" if "bf16" in p else ""))


def run_once(llm: LLM, n_prompt: int, n_gen: int, seed: int) -> float:
    """Seconds the engine spent from admission to finish for one request (timestamps from the core)."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(10, llm.info["vocab"], n_prompt).tolist()
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n_gen, ignore_eos=True))[0]
    return (out.finish_ns - out.admit_ns) / 1e9


def bench(llm: LLM, pp: int, tg: int, reps: int, warmup: int) -> dict:
    res = {}
    for name, n_prompt, n_gen in (("pp", pp, 0), ("tg", 1, tg)):
        for r in range(warmup):
            run_once(llm, n_prompt, n_gen, 1000 + r)
        secs = [run_once(llm, n_prompt, n_gen, r) for r in range(reps)]
        n = n_prompt if name == "pp" else n_gen
        tps = [n / s for s in secs]
        res[f"{name}{n}"] = {"avg": statistics.mean(tps), "stddev": statistics.stdev(tps) if reps > 1 else 0.0,
                             "samples": tps}
    tg_tps = res[f"tg{tg}"]["avg"]
    res["decode_gbs"] = tg_step_bytes(llm, tg) * tg_tps / 1e9
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="GGUF file (repeatable)")
    ap.add_argument("--presets", nargs="*", default=["llama-125m"])
    ap.add_argument("--types", nargs="*", default=["F16", "Q8_0", "Q4_K_M"])
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--near", type=int, default=0, metavar="N",
                    help="also N tg runs per row, each between two bandwidth probes: its decode against their mean")
    ap.add_argument("--json", help="write all results here")
    a = ap.parse_args(argv)
    if a.near < 0:
        ap.error(f"--near takes a number of runs, 0 or more (got {a.near})")
    models = a.model or [f"{p}:{t}" for p in a.presets for t in a.types]
    bw, peaks, best_bw, best_peaks = {}, {}, {}, {}
    kinds = peak_kinds([split_spec(m)[1] for m in models])

    def measure_limits(t: int) -> None:
        """Bandwidth and peaks with t threads, kept as the best seen so far (membw.best, peak.best)."""
        best_bw[t] = membw.best(t, best_bw.get(t))
        best_peaks[t] = peak.best(t, kinds, seen=best_peaks.get(t))
        bw[t] = best_bw[t]["read"]
        peaks[t] = {k: p["gops"] for k, p in best_peaks[t].items()}

    for t in a.threads:
        measure_limits(t)
    rows = []
    llc = llc_bytes()
    print("memory read bandwidth: " + ", ".join(f"{t} thr {g:.1f} GB/s" for t, g in bw.items()), flush=True)
    print("arithmetic peak: " + ", ".join(f"{t} thr {peaks_text(p)}" for t, p in peaks.items()), flush=True)
    print(f"| model | threads | pp{a.pp} t/s | of peak | tg{a.tg} t/s | decode GB/s | of bandwidth |")
    print("|---|---|---|---|---|---|---|")
    for m in models:
        for t in a.threads:
            path, act = split_spec(m)
            llm = LLM(path, threads=t, ctx=max(a.pp, a.tg) + 8, max_batch_tokens=a.pp, max_seqs=4, activations=act)
            r = bench(llm, a.pp, a.tg, a.reps, a.warmup)
            measure_limits(t)   # again after the row: its fractions use the best limits seen
            pp, tg = r[f"pp{a.pp}"], r[f"tg{a.tg}"]
            frac = r["decode_gbs"] / bw[t]
            r["prefill_of_peak"] = prefill_compute(prefill_ops(llm, a.pp), [a.pp / v for v in pp["samples"]],
                                                   peaks[t])["fraction"]
            step_bytes = tg_step_bytes(llm, a.tg)
            cached = fits_in_cache(step_bytes, llc)
            # a cached row's decode may exceed the memory bandwidth; its prefill still may not exceed the peak
            over = " !" if (frac > 1 and not cached) or r["prefill_of_peak"] > 1 else ""
            print(f"| {m} | {t} | {pp['avg']:.1f} ± {pp['stddev']:.1f} | {r['prefill_of_peak']:.0%} | "
                  f"{tg['avg']:.1f} ± {tg['stddev']:.1f} | {r['decode_gbs']:.1f} | {frac:.0%}{over}{' †' if cached else ''} |",
                  flush=True)
            if cached:
                print(f"  † {cache_note(step_bytes, llc)}", flush=True)
            if over:
                print("  ! above 100%: the weights fit in the caches (a small model), or the limits were only measured "
                      "in busier moments than this row ran in (a shared host: rerun when it is quiet)", flush=True)
            if a.near:
                r["near_fractions"] = near = near_fractions(llm, a.tg, t, a.near)
                print(f"  near: decode at {statistics.median(near):.0%} ({min(near):.0%}-{max(near):.0%}) of the probes "
                      f"around each of {a.near} tg{a.tg} runs", flush=True)
            solo = llm.engine.stats()["solo_steps"]
            if solo:
                print(f"  contended: {solo} steps ran on one thread, other processes wanted the cores (rerun when "
                      "the host is quiet)", flush=True)
            rows.append({"model": m, "threads": t, "membw_read_gbs": bw[t], "peak_gops": peaks[t], **r,
                         "solo_steps": solo, "time": time.time()})
            del llm
    print("limits at the end: " + ", ".join(f"{t} thr {bw[t]:.1f} GB/s, {peaks_text(peaks[t])}" for t in a.threads))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
