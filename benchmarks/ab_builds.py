"""Two builds of the engine in one process, alternated round by round: the median ratio B/A of their
pp N or tg N tokens/s, of batched decode's tokens/s (--mode decode: --batch sequences at --depth tokens of
context, tg N each), or of one matrix product's GOP/s. On a shared host, runs in separate processes
minutes apart drift by more than most kernel changes; two builds timed side by side in one process see
the same machine.

    git worktree add /tmp/base HEAD~1 && (cd /tmp/base && LLMBENCH_CUDA=0 python setup.py -q build_ext --inplace)
    python benchmarks/ab_builds.py /tmp/base/llmbench/_core.*.so llmbench/_core.*.so --model llama-125m:F16 --threads 1
    python benchmarks/ab_builds.py A.so B.so --model M.gguf --mode decode --batch 16 --depth 500 --tg 64 --threads 2
    python benchmarks/ab_builds.py A.so B.so --kernel F16 --shapes 768x768 2048x768 --tokens 512
    python benchmarks/ab_builds.py A.so B.so --kernel Q6_K --interleaved --shapes 2048x8192 --tokens 1 --copies 40

Each build's extension module is loaded from its file; this checkout's Python code drives both, so the
two must share the extension's Python API (any two builds of nearby commits do). An engine is created
while its build is the module llmbench.llm and llmbench.models.gguf call. Kernel mode also checks that the two
builds give the same bits. LLMBENCH_PREFETCH=MODE (page, lines, far) sets both builds' decode prefetch, and
LLMBENCH_SIMD=LEVEL both builds' SIMD level, as they set the imported build's.

Kernel mode places every weight copy on a page (2 MiB from 2 MiB up), as the engine places its repacked
weights, and times each round over at least 20 ms of passes. --by-bandwidth probes the read bandwidth
between rounds and adds the ratio of the rounds at each level of it (a shared host's bandwidth can jump
between levels within seconds, and a change to how weights stream may gain at one level only):

    python benchmarks/ab_builds.py A.so B.so --kernel Q6_K --interleaved --shapes 8192x2048 --tokens 1 --copies 30 \
        --threads 2 --rounds 40 --by-bandwidth
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

import llmbench.llm
import llmbench.models.gguf
from llmbench import LLM
from llmbench.perf import membw


def load_build(path: str):
    """The extension module in `path` (a built llmbench/_core*.so), separate from the imported one.

    Loaded from a private copy: CPython keeps one module per extension file, so loading the file that
    `import llmbench` already loaded (this checkout's build, the usual B) handed back the previously loaded
    build's module object refilled with this file's functions, and A and B then both ran B's kernels."""
    if not os.path.isfile(path):
        raise SystemExit(f"ab_builds: {path} is not a file: give the built extension (llmbench/_core.*.so) of each build")
    folder = tempfile.mkdtemp(prefix="ab_builds-")
    copy = os.path.join(folder, os.path.basename(path))
    shutil.copy2(path, copy)
    saved = sys.modules.get("llmbench._core")
    try:
        spec = importlib.util.spec_from_file_location("llmbench._core", copy)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for var, setter in (("LLMBENCH_PREFETCH", mod.prefetch_set), ("LLMBENCH_SIMD", mod.simd_set)):
            if os.environ.get(var):   # (as `import llmbench` sets its own build's)
                setter(os.environ[var].strip().lower())
    finally:   # (loading an extension puts it in sys.modules: the package keeps its own build)
        if saved is not None:
            sys.modules["llmbench._core"] = saved
        shutil.rmtree(folder, ignore_errors=True)   # (the loaded copy stays mapped; each run left 19 MB in /tmp)
    return mod


def make_llm(build, model: str, threads: int) -> LLM:
    """model may end in @q8, @f32 or @bf16: the LLM activations (bench_engine.split_spec)."""
    from bench_engine import split_spec

    saved = llmbench.llm._core, llmbench.models.gguf._core
    llmbench.llm._core = llmbench.models.gguf._core = build
    try:
        path, act = split_spec(model)
        return LLM(path, threads=threads, activations=act)
    finally:
        llmbench.llm._core, llmbench.models.gguf._core = saved


def alternate(fns, rounds: int, probe=None) -> list[list[float]]:
    """rates[i][r]: fns[i]() in round r; even rounds run A first, odd rounds B first. With probe (a
    function giving the read bandwidth in GB/s), rates[2][r]: the mean of the probes just before and just
    after round r."""
    rates = [[], [], []]
    before = probe() if probe else None
    for r in range(rounds):
        for i in ((0, 1) if r % 2 == 0 else (1, 0)):
            rates[i].append(fns[i]())
        if probe:
            after = probe()
            rates[2].append((before + after) / 2)
            before = after
    return rates


def summary(label: str, rates: list[list[float]], unit: str) -> str:
    """The medians and the B/A ratio over all rounds; where the rounds were probed (alternate's rates[2]),
    the ratio again for the rounds at each read bandwidth (10 GB/s bins): on a host whose bandwidth sits
    at one of two levels, a change to how a kernel streams its weights can gain at one and not the other."""
    def line(head: str, a: list[float], b: list[float]) -> str:
        ratios = sorted(y / x for x, y in zip(a, b))
        return (f"{head}: A {statistics.median(a):.1f} B {statistics.median(b):.1f} {unit}, "
                f"B/A median {statistics.median(ratios):.3f} (min {ratios[0]:.3f}, max {ratios[-1]:.3f}, "
                f"{len(ratios)} rounds)")

    out = [line(label, rates[0], rates[1])]
    bins: dict[int, list[int]] = {}
    for r, gbs in enumerate(rates[2]):
        bins.setdefault(int(gbs // 10) * 10, []).append(r)
    for lo, rs in sorted(bins.items()):
        out.append(line(f"  read {lo}-{lo + 10} GB/s", [rates[0][r] for r in rs], [rates[1][r] for r in rs]))
    return "\n".join(out)


def engine_ab(builds, a: argparse.Namespace) -> str:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_engine import run_once

    llms = [make_llm(b, a.model, a.threads) for b in builds]
    if a.mode == "decode":
        for llm in llms:
            decode_rate(llm, a)   # warmup
        rates = alternate([lambda llm=llm: decode_rate(llm, a) for llm in llms], a.rounds, probe(a))
        return summary(f"{a.model} decode of {a.batch} x tg{a.tg} at depth {a.depth}, {a.threads} thread(s)", rates,
                       "t/s")
    n_prompt, n_gen, n = (a.pp, 1, a.pp) if a.mode == "pp" else (1, a.tg, a.tg)
    for llm in llms:
        run_once(llm, n_prompt, n_gen, 100)   # warmup
    rates = alternate([lambda llm=llm: n / run_once(llm, n_prompt, n_gen, 0) for llm in llms], a.rounds, probe(a))
    return summary(f"{a.model} {a.mode}{n}, {a.threads} thread(s)", rates, "t/s")


def probe(a: argparse.Namespace):
    """--by-bandwidth: a function measuring the read bandwidth at a.threads (membw.read_now), else None"""
    return (lambda: membw.read_now(a.threads)) if a.by_bandwidth else None


def decode_rate(llm: LLM, a: argparse.Namespace) -> float:
    """Tokens/s of the decode steps alone (the engine's forward time) of a.batch sequences of a.depth
    prompt tokens generating a.tg tokens each, all at once."""
    from llmbench.llm import SamplingParams

    rng = np.random.default_rng(0)
    prompts = [rng.integers(10, llm.info["vocab"], a.depth).tolist() for _ in range(a.batch)]
    before = llm.engine.stats()
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=a.tg, ignore_eos=True))
    after = llm.engine.stats()
    return (after["decode_tokens"] - before["decode_tokens"]) / ((after["backend_decode_ns"] -
                                                                  before["backend_decode_ns"]) / 1e9)


def product_rate(build, tid: int, ws, x, threads: int, ops: float, group: int, min_ns: int = 20_000_000) -> float:
    """GOP/s of one matrix product on `build` per weight copy in `ws`, the copies run one after another, in
    passes over them until min_ns have gone by: one product of a small matrix takes microseconds, which
    the timer's resolution and one preemption would swamp."""
    passes, t0 = 0, time.perf_counter_ns()
    while True:
        for w in ws:
            build.vec_dot(tid, w, x, threads, interleave=group)
        passes += 1
        if (dt := time.perf_counter_ns() - t0) >= min_ns:
            return ops * len(ws) * passes / dt


def weight_copies(build, tid: int, w, a: argparse.Namespace) -> tuple[list, int]:
    """`a.copies` page-aligned copies of w for `build`, in its interleaved layout where --interleaved asks (and
    the rows of each group per layout, 0 for plain rows)"""
    group = 0
    if a.interleaved:
        if not build.vec_dot_interleave(tid):
            raise SystemExit(f"ab_builds: --interleaved {a.kernel}: this SIMD level has no interleaved layout for it")
        w, group = build.vec_dot_repack(tid, w)
    return [membw.page_aligned(w) for _ in range(a.copies)], group


def kernel_ab(builds, a: argparse.Namespace) -> list[str]:
    from llmbench.models.weight_types import quantize, type_id

    rng = np.random.default_rng(0)
    lines = []
    for shape in a.shapes:
        rows, cols = (int(v) for v in shape.split("x"))
        w = quantize(rng.standard_normal((rows, cols), dtype=np.float32), a.kernel).reshape(rows, -1)
        x = rng.standard_normal((a.tokens, cols), dtype=np.float32)
        tid = type_id(a.kernel)
        copies = [weight_copies(b, tid, w, a) for b in builds]
        ya, yb = (b.vec_dot(tid, c[0][0], x, a.threads, interleave=c[1]) for b, c in zip(builds, copies))
        if not np.array_equal(ya, yb):
            raise SystemExit(f"ab_builds: the two builds' {a.kernel} {shape} products differ "
                             f"(max |A - B| = {np.max(np.abs(ya - yb)):.3g}): not the same kernel numerics")

        ops = 2.0 * rows * cols * a.tokens
        rates = alternate([lambda b=b, c=c, o=ops: product_rate(b, tid, c[0], x, a.threads, o, c[1])
                           for b, c in zip(builds, copies)], a.rounds, probe(a))
        where = f", {a.copies} copies ({a.copies * w.nbytes >> 20} MiB)" if a.copies > 1 else ""
        layout = " interleaved" if a.interleaved else ""
        lines.append(summary(f"{a.kernel}{layout} {shape} x {a.tokens} tokens, {a.threads} thread(s){where}", rates,
                             "GOP/s"))
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="build A's extension module (llmbench/_core*.so of the base)")
    ap.add_argument("b", help="build B's extension module (of the change)")
    ap.add_argument("--model", default="llama-125m:F16", help="GGUF path or dummy preset (engine mode)")
    ap.add_argument("--mode", choices=("pp", "tg", "decode"), default="pp")
    ap.add_argument("--pp", type=int, default=512)
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16, help="decode mode: sequences decoded together")
    ap.add_argument("--depth", type=int, default=64, help="decode mode: prompt tokens of each sequence")
    ap.add_argument("--kernel", help="weight type: time one matrix product (llmbench._core.vec_dot) instead")
    ap.add_argument("--shapes", nargs="+", default=["768x768", "2048x768", "768x2048"], help="ROWSxCOLS")
    ap.add_argument("--tokens", type=int, default=512, help="tokens of the kernel mode's product")
    ap.add_argument("--interleaved", action="store_true",
                    help="kernel mode: the weights in each build's interleaved layout (vec_dot_repack)")
    ap.add_argument("--copies", type=int, default=1,
                    help="kernel mode: time a pass over this many copies of the weights (enough to exceed the "
                         "last-level cache times a product from memory, as decode reads its weights)")
    ap.add_argument("--by-bandwidth", action="store_true",
                    help="probe the read bandwidth around every round and give the ratio per 10 GB/s of it too")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args(argv)
    for name in ("pp", "tg", "batch", "depth", "tokens", "threads", "rounds", "copies"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1, got {getattr(a, name)}")
    for shape in a.shapes:
        if not all(v.isdigit() and int(v) > 0 for v in shape.split("x")) or shape.count("x") != 1:
            ap.error(f"--shapes takes ROWSxCOLS such as 768x2048, got {shape!r}")
    builds = [load_build(a.a), load_build(a.b)]
    print("\n".join(kernel_ab(builds, a)) if a.kernel else engine_ab(builds, a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
