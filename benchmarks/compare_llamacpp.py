"""Side by side with llama.cpp: pp N and tg N tokens/s of llmbench's engine and of llama.cpp (as
`llama-cpp-python` builds it) on the same GGUF file with the same threads, alternating the two
engines over rounds so both see the same machine; prints medians and the llmbench/llama.cpp ratio.

Both engines run the same prompt computation (every layer product for every token, the output row for
the last token only, causal attention), so each one's pp is also given as a fraction of this machine's
arithmetic peak at the same threads (llmbench.perf.peak: FP32 FMAs for float weights, 8-bit dot products
for quantized ones; measured before the first model and after every model, best kept). The pp ratio
can reach at most 1 / (llama.cpp's fraction): the "pp ceiling" column, the ratio at which llmbench would
run at the peak itself. Decode likewise: the bytes a step reads (the weight matrices and the KV
cache at the test's mean depth, llmbench.perf.bench.tg_step_bytes as `llmbench bench` counts them)
times tg tokens/s, as a fraction of the memory read bandwidth (llmbench.perf.membw, the best of probes
taken before the first model and around every engine's process), and the tg ratio's ceiling; "near" is
the same against the probes just before and after each round's process (the host's bandwidth moves with
its neighbours' load), the median over rounds.

    pip install llama-cpp-python==0.3.36        # builds llama.cpp from source (several minutes)
    python benchmarks/compare_llamacpp.py --models llama-125m:Q4_K_M --threads 2
    LLAMA_PY=/path/to/venv/bin/python python benchmarks/compare_llamacpp.py ...   # llama_cpp elsewhere
    python benchmarks/compare_llamacpp.py --models llama-125m:F16 llama-125m:F16@bf16
    python benchmarks/compare_llamacpp.py --models llama-125m model-f16.gguf --types Q4_0 Q4_1 Q5_0 Q8_0 Q4_K_M

--types crosses every model with every quantization mix: a dummy preset is built in that mix
(`llmbench.dummy_model`), a GGUF file (best an F16 or F32 one) is converted with `llmbench quantize` into a
temporary directory, so both engines read the same file.

A model ending in @bf16 (or @f32) runs llmbench with LLM(activations=...), llama.cpp as always (it has no
such switch: F16 weights against F16 activations); its pp is measured against the BF16 pair peak.

Each measurement runs in a fresh subprocess (one model load, a warmup, then --reps timed runs of each
test) so the engines never share caches or thread pools; the medians are over every timed run of every
round (on a shared host one timed run per process let a single slow moment move a ratio by 20%).

--ik-bench PATH adds ik_llama.cpp beside them: its own llama-bench binary (built from its source with
cmake, `cmake --build build --target llama-bench`), run with run-time repacking (-rtr 1) and its other
defaults (flash attention on) on the same file, threads and sizes, one process per round after the
other two engines. Its columns give its medians and llmbench's ratio to it; beside the tg ratio, in brackets,
the same at equal bandwidth (each engine's tg against the probes just before and after its own process: on
a host whose read bandwidth jumps between levels, two processes a minute apart can run at different ones).

    python benchmarks/compare_llamacpp.py --models FILE.gguf --ik-bench ~/ik_llama.cpp/build/bin/llama-bench
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from llmbench.perf.metrics import prefill_compute

LLAMACPP = r"""
import json, sys, time
import numpy as np
from llama_cpp import Llama
path, threads, pp, tg, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=pp + tg + 16, n_batch=pp,
            n_ubatch=pp, verbose=False)
rng = np.random.default_rng(0)
toks = rng.integers(10, llm.n_vocab(), pp).tolist()
def run_pp():
    llm.reset(); llm._ctx.memory_clear(True) if hasattr(llm._ctx, "memory_clear") else llm._ctx.kv_cache_clear()
    t = time.perf_counter(); llm.eval(toks); return pp / (time.perf_counter() - t)
def run_tg():
    llm.reset(); llm._ctx.memory_clear(True) if hasattr(llm._ctx, "memory_clear") else llm._ctx.kv_cache_clear()
    t = time.perf_counter()
    for i in range(tg):
        llm.eval([toks[i % pp]])
    return tg / (time.perf_counter() - t)
run_pp(); run_tg()
print(json.dumps({"pp": [run_pp() for _ in range(reps)], "tg": [run_tg() for _ in range(reps)]}))
"""

LLMBENCH = r"""
import json, sys
sys.path.insert(0, sys.argv[6])
from bench_engine import run_once
from llmbench import LLM
path, threads, pp, tg, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
llm = LLM(path, threads=threads, ctx=pp + tg + 16, max_batch_tokens=pp, max_seqs=4, activations=sys.argv[7])
run_once(llm, pp, 0, 100); run_once(llm, 1, tg, 101)
from llmbench.perf.bench import prefill_ops, tg_step_bytes
print(json.dumps({"pp": [pp / run_once(llm, pp, 0, r) for r in range(reps)],
                  "tg": [tg / run_once(llm, 1, tg, r) for r in range(reps)], "ops": prefill_ops(llm, pp),
                  "step_bytes": tg_step_bytes(llm, tg)}))
"""


def measure(python: str, code: str, args: list[str]) -> dict:
    r = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0:
        if "No module named 'llama_cpp'" in r.stderr:
            raise RuntimeError(f"{python} cannot import llama_cpp: pip install llama-cpp-python==0.3.36 (it builds "
                               "llama.cpp, several minutes), or set LLAMA_PY to a Python that has it")
        raise RuntimeError(f"{python} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def parse_llama_bench(text: str, pp: int, tg: int) -> dict:
    """tokens/s samples of llama-bench's `-o json` report: {"pp": the prompt test's runs, "tg": the
    generation test's}. Any other test in the report (another size, a prompt-and-generate test) is
    an error: the caller asked for exactly these two."""
    out: dict[str, list[float]] = {"pp": [], "tg": []}
    for t in json.loads(text):
        key = ("pp" if (t["n_prompt"], t["n_gen"]) == (pp, 0) else
               "tg" if (t["n_prompt"], t["n_gen"]) == (0, tg) else None)
        if key is None:
            raise ValueError(f"llama-bench reported a test of {t['n_prompt']} prompt and {t['n_gen']} generated "
                             f"tokens; asked for pp{pp} and tg{tg}")
        out[key] += [float(v) for v in t["samples_ts"]]
    if not out["pp"] or not out["tg"]:
        raise ValueError(f"llama-bench's report lacks the {'pp' if not out['pp'] else 'tg'} test")
    return out


def measure_ik(bench: str, args: list[str]) -> dict:
    """One process of ik_llama.cpp's llama-bench on args = [path, threads, pp, tg, reps], with run-time
    repacking; its own warmup run precedes the timed ones."""
    path, threads, pp, tg, reps = args
    if not os.access(bench, os.X_OK):
        raise RuntimeError(f"--ik-bench {bench}: not an executable; build ik_llama.cpp's llama-bench (cmake -B "
                           "build && cmake --build build --target llama-bench) and pass build/bin/llama-bench")
    cmd = [bench, "-m", path, "-t", threads, "-p", pp, "-n", tg, "-r", reps, "-rtr", "1", "-o", "json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return parse_llama_bench(r.stdout, int(pp), int(tg))


def summarize(ours: list[dict], theirs: list[dict], pp: int, peaks_gops: dict[str, float],
              read_gbs: float | None = None, near_gbs: dict[str, list[float]] | None = None) -> dict:
    """Medians over every timed run of every round (pp and tg tokens/s) of both engines, their ratios,
    and each engine's pp as a fraction of the arithmetic peaks (ops from the llmbench runs: the same
    computation in both engines); pp_ceiling = 1 / llama.cpp's fraction, the most the pp ratio can be.
    ratio_range: the lowest and highest ratio of one round's medians (rounds alternate the engines, so a
    wide range says the host's speed moved during the row).
    With read_gbs, the same for tg against the memory read bandwidth (bytes per decode step from the
    llmbench runs: the same file and depth in both engines). With near_gbs (per engine, one read bandwidth
    per round: the probes just before and after that engine's process, averaged), tg_of_near_bandwidth: the
    median over rounds of each round's tg against its own probes. On a shared host whose bandwidth moves with
    the neighbours' load (one Zen 5 VM read 38-53 GB/s within an hour, 70-72 at best the day before), the
    best probe of the whole run is no limit for a round run in a busy minute; the adjacent probes saw it.
    tg_ratio_near: the median over rounds of the ratio of the two engines' tg, each against its own probes
    (the tg ratio at equal bandwidth: a round whose engines ran at different levels of it counts as if both
    had run at one)."""
    def med(runs: list[dict], k: str) -> float:
        return statistics.median(v for r in runs for v in r[k])

    o, t = {k: med(ours, k) for k in ("pp", "tg")}, {k: med(theirs, k) for k in ("pp", "tg")}
    frac = {name: prefill_compute(ours[0]["ops"], pp / r["pp"], peaks_gops)["fraction"]
            for name, r in (("llmbench", o), ("llama.cpp", t))}
    rounds = {k: [statistics.median(a[k]) / statistics.median(b[k]) for a, b in zip(ours, theirs)] for k in ("pp", "tg")}
    out = {"llmbench": o, "llama.cpp": t, "ratio": {k: o[k] / t[k] for k in ("pp", "tg")},
           "ratio_range": {k: (min(v), max(v)) for k, v in rounds.items()}, "pp_of_peak": frac,
           "pp_ceiling": 1.0 / frac["llama.cpp"]}
    if read_gbs:
        bw = {name: ours[0]["step_bytes"] * r["tg"] / 1e9 / read_gbs for name, r in (("llmbench", o), ("llama.cpp", t))}
        out.update(tg_of_bandwidth=bw, tg_ceiling=1.0 / bw["llama.cpp"])
    if near_gbs:
        fr = {name: [ours[0]["step_bytes"] * statistics.median(r["tg"]) / 1e9 / g for r, g in zip(runs, near_gbs[name])]
              for name, runs in (("llmbench", ours), ("llama.cpp", theirs))}
        out["tg_of_near_bandwidth"] = {name: statistics.median(f) for name, f in fr.items()}
        out["tg_ratio_near"] = statistics.median(a / b for a, b in zip(fr["llmbench"], fr["llama.cpp"]))
    return out


def with_types(models: list[str], types: list[str], tmpdir: str, split_spec) -> list[str]:
    """Every model crossed with every mix of ``types`` (none: the models as given). A preset ("llama-125m",
    a type after ":" is replaced) becomes "preset:TYPE"; a GGUF file is quantized into ``tmpdir``; an
    "@activations" suffix is kept."""
    if not types:
        return list(models)
    from llmbench.models.dummy import PRESETS
    from llmbench.models.quantize import MIXES, quantize_file

    for t in types:
        if t.upper() not in MIXES:
            raise ValueError(f"--types: unknown mix {t!r}; choose from {', '.join(MIXES)}")
    out = []
    for spec in models:
        model, act = split_spec(spec)
        suffix = f"@{act}" if act != "q8" else ""
        for t in (t.upper() for t in types):
            name = model.partition(":")[0]
            if not os.path.exists(model) and name in PRESETS:
                out.append(f"{name}:{t}{suffix}")
                continue
            if not os.path.isfile(model):
                raise FileNotFoundError(f"{model}: no such GGUF file, and not a dummy preset")
            dst = os.path.join(tmpdir, f"{os.path.splitext(os.path.basename(model))[0]}.{t}.gguf")
            quantize_file(model, dst, t)
            out.append(dst + suffix)
    return out


def ik_cells(s: dict) -> str:
    """The ik_llama.cpp columns of a row from summarize(ours, ik runs, ..., near_gbs), whose "llama.cpp" side is
    ik's: its medians, the ratios (the tg ratio at equal bandwidth beside it), their range over rounds."""
    t, r, rr = s["llama.cpp"], s["ratio"], s["ratio_range"]
    return (f" {t['pp']:.0f} / {t['tg']:.1f} | {r['pp']:.2f} / {r['tg']:.2f} ({s['tg_ratio_near']:.2f}) | "
            f"{rr['pp'][0]:.2f}–{rr['pp'][1]:.2f}; {rr['tg'][0]:.2f}–{rr['tg'][1]:.2f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["llama-125m:F16", "llama-125m:Q8_0", "llama-125m:Q4_K_M"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3, help="timed runs of each test per process, after its warmup")
    ap.add_argument("--json", help="write the raw samples here")
    ap.add_argument("--types", nargs="+", default=[],
                    help="quantization mixes to cross every model with (llmbench quantize's --type names)")
    ap.add_argument("--ik-bench", metavar="PATH", help="ik_llama.cpp's llama-bench binary: adds its columns")
    a = ap.parse_args(argv)
    for name in ("threads", "pp", "tg", "rounds", "reps"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1 (both the pp and the tg test always run), got {getattr(a, name)}")
    llama_py = os.environ.get("LLAMA_PY", sys.executable)
    here = os.path.dirname(os.path.abspath(__file__))
    from llmbench.info import llc_bytes
    from llmbench.llm import resolve_model
    from llmbench.perf import membw, peak
    from llmbench.perf.bench import peak_kinds
    from llmbench.perf.metrics import fits_in_cache

    sys.path.insert(0, here)
    from bench_engine import split_spec

    tmp = tempfile.TemporaryDirectory(prefix="compare-llamacpp-")
    try:
        a.models = with_types(a.models, a.types, tmp.name, split_spec)
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))
    specs = [split_spec(m) for m in a.models]
    try:
        paths = [str(resolve_model(m)) for m, _ in specs]
    except (ValueError, FileNotFoundError) as e:
        ap.error(str(e))

    kinds = peak_kinds([act for _, act in specs])
    llc = llc_bytes()
    peaks, bw = peak.best(a.threads, kinds), membw.best(a.threads)
    print(f"| model | llmbench pp{a.pp} / tg{a.tg} | llama.cpp pp{a.pp} / tg{a.tg} | ratio pp / tg "
          f"| pp of peak llmbench / llama.cpp | pp ceiling | tg of bandwidth llmbench / llama.cpp | tg ceiling "
          f"| ratio by round pp; tg |" + (f" ik_llama.cpp -rtr pp{a.pp} / tg{a.tg} | ratio to ik pp / tg "
                                          "(at equal bandwidth) | to ik by round pp; tg |" if a.ik_bench else ""))
    print("|---" * (12 if a.ik_bench else 9) + "|")
    raw = []
    for m, path, (_, act) in zip(a.models, paths, specs):
        args = [path, str(a.threads), str(a.pp), str(a.tg), str(a.reps)]
        ours, theirs, ik = [], [], []
        probes = [membw.measure(threads=a.threads)]   # before and after every engine's process
        near: dict[str, list[float]] = {"llmbench": [], "llama.cpp": [], "ik_llama.cpp": []}

        def probe(name: str) -> None:
            probes.append(membw.measure(threads=a.threads))
            near[name].append((probes[-2]["read"] + probes[-1]["read"]) / 2)

        for _ in range(a.rounds):
            ours.append(measure(sys.executable, LLMBENCH, args + [here, act]))
            probe("llmbench")
            theirs.append(measure(llama_py, LLAMACPP, args))
            probe("llama.cpp")
            if a.ik_bench:
                ik.append(measure_ik(a.ik_bench, args))
                probe("ik_llama.cpp")
        peaks = peak.best(a.threads, kinds, seen=peaks)
        for p in probes:
            bw = membw.better(bw, p)
        s = summarize(ours, theirs, a.pp, {k: p["gops"] for k, p in peaks.items()}, bw["read"], near)
        o, t, fr, fb = s["llmbench"], s["llama.cpp"], s["pp_of_peak"], s["tg_of_bandwidth"]
        fn = s["tg_of_near_bandwidth"]
        cached = bool(fits_in_cache(ours[0]["step_bytes"], llc))
        rr = s["ratio_range"]
        s["fits_in_cache"] = cached
        print(f"| {m} | {o['pp']:.0f} / {o['tg']:.1f} | {t['pp']:.0f} / {t['tg']:.1f} | "
              f"{s['ratio']['pp']:.2f} / {s['ratio']['tg']:.2f} | {fr['llmbench']:.0%} / {fr['llama.cpp']:.0%} | "
              f"{s['pp_ceiling']:.2f} | {fb['llmbench']:.0%} / {fb['llama.cpp']:.0%}{' †' if cached else ''} "
              f"(near {fn['llmbench']:.0%} / {fn['llama.cpp']:.0%}) | "
              f"{s['tg_ceiling']:.2f} | {rr['pp'][0]:.2f}–{rr['pp'][1]:.2f}; {rr['tg'][0]:.2f}–{rr['tg'][1]:.2f} |"
              + (ik_cells(summarize(ours, ik, a.pp, {k: p["gops"] for k, p in peaks.items()},
                                    near_gbs={"llmbench": near["llmbench"], "llama.cpp": near["ik_llama.cpp"]}))
                 if ik else ""),
              flush=True)
        raw.append({"model": m, "threads": a.threads, "llmbench": ours, "llama.cpp": theirs, "summary": s,
                    "peaks_gops": {k: p["gops"] for k, p in peaks.items()}, "read_gbs": bw["read"],
                    "read_probes_gbs": [p["read"] for p in probes], "near_gbs": near}
                   | ({"ik_llama.cpp": ik} if ik else {}))
    print(f"limits at {a.threads} thread(s), best of the measurements: "
          + ", ".join(f"{k} {p['gops']:.0f} GOP/s" for k, p in peaks.items()) + f", read {bw['read']:.1f} GB/s")
    if any(r["summary"]["fits_in_cache"] for r in raw):
        print(f"† a decode step's bytes fit in the last-level cache ({llc / 2**20:.0f} MiB): both engines can read "
              "them from there, so the fraction of the memory bandwidth is no limit for that row")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
