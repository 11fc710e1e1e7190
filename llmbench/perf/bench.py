"""`llmbench bench` on llmbench's own engine: llama-bench-style pp/tg throughput, a latency
scenario with vLLM's TTFT/TPOT/ITL/E2E metrics from the engine's event timestamps, and the decode
bandwidth as a fraction of this machine's measured bandwidth, all in one JSON result that follows
docs/result.schema.json. With ``--backend cuda`` the same measurements run through
LLM(backend="cuda"); the result adds the device time of each phase (CUDA events) beside its wall
time, the CUDA Graph counters, device memory, and the bandwidth fraction is of the device-to-device
copy bandwidth (`llmbench membw --backend cuda`) measured in the same run.

Timing: every number comes from the C engine's monotonic clock (events stamped inside the core);
warmup runs first; each repetition starts with an empty KV cache (its requests are released).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import resource
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import LLM, BackendUnavailableError, LLMBenchError, SamplingParams, UnsupportedError, __version__, _core
from ..gguf import GGUFError, GGUFFile
from ..info import cpu_model, llc_bytes
from ..llm import ACTIVATIONS, Prefix, resolve_model
from ..tokenizer import Tokenizer
from . import membw, peak
from .dataset import load_prompts, sample
from .metrics import (
    RequestTiming,
    decode_bandwidth,
    decode_step_bytes,
    llama_bench_stats,
    prefill_compute,
    serving_metrics,
)
from .schema import validate


@dataclass
class BenchConfig:
    model: str = "llama-125m:Q4_K_M"   # GGUF path or dummy preset[:type]
    threads: int | None = None
    kv_dtype: str = "f16"
    activations: str = "q8"            # LLM(activations=...): "q8", "f32" or "bf16" (local engine)
    pp: int = 512                      # llama-bench pp test (0: skip)
    tg: int = 128                      # llama-bench tg test (0: skip)
    depth: tuple[int, ...] = (0,)      # llama-bench -d: context already in the KV cache before pp/tg
    batch: int = 1                     # latency scenario: concurrent requests (0: skip)
    input_len: int = 128
    output_len: int = 128
    dataset: str | None = None         # JSONL/JSON prompts instead of random tokens (latency scenario)
    warmup: int = 1
    repetitions: int = 5
    seed: int = 0
    percentiles: tuple[float, ...] = (50, 90, 95, 99)
    goodput: dict[str, float] = field(default_factory=dict)
    cuda_graphs: bool | None = None    # backend cuda only
    # external OpenAI-compatible server (backend "openai")
    backend: str = "cpu"
    base_url: str | None = None
    api: str = "completions"
    request_rate: float = float("inf")  # requests/s with gamma gaps; inf: all at once
    burstiness: float = 1.0
    max_concurrency: int | None = None
    max_failed: str = "0"              # measured requests allowed to fail: a count, or a share such as "5%"
    # seconds (backend openai): a stalled server costs one warmup's worth of these, not 600 s a request.
    # A first token can take long at a large batch (the last prompt of the batch waits for the others'
    # prefill), a silence mid-stream should not: a busy server still sends a token every few seconds.
    connect_timeout: float = 10.0
    first_chunk_timeout: float = 120.0
    idle_timeout: float = 30.0

    def check(self) -> None:
        """Raise ConfigError naming the first bad setting (by its field name)."""
        if self.repetitions < 1 or self.warmup < 0:
            raise ConfigError("repetitions must be >= 1 and warmup >= 0", "repetitions", "warmup")
        if min(self.pp, self.tg, self.batch) < 0 or min(self.depth, default=0) < 0:
            raise ConfigError("pp, tg, batch and depth must be >= 0", "pp", "tg", "batch", "depth")
        if self.batch and (self.input_len < 1 or self.output_len < 1) and not (self.dataset and self.output_len >= 1):
            raise ConfigError("input_len and output_len must be >= 1", "input_len", "output_len")
        if self.threads is not None and self.threads < 1:
            raise ConfigError("threads must be >= 1", "threads")
        if self.activations not in ACTIVATIONS:
            raise ConfigError(f"activations {self.activations!r}: choose {', '.join(ACTIVATIONS)}", "activations")
        if self.activations != "q8" and self.backend == "openai":
            raise ConfigError("activations applies to llmbench's own engine, not to an external server",
                              "activations")
        if self.cuda_graphs is not None and self.backend != "cuda":
            raise ConfigError("cuda_graphs applies to backend cuda only", "cuda_graphs", "backend")
        if not (self.pp or self.tg or self.batch):
            raise ConfigError("nothing to run: pp, tg and batch are all 0", "pp", "tg", "batch")
        failures_allowed(self.max_failed, 0)
        if not self.percentiles or any(not 0 < p <= 100 for p in self.percentiles):
            raise ConfigError(f"percentiles {','.join(f'{p:g}' for p in self.percentiles)}: each must be "
                              "above 0 and at most 100, e.g. 50,90,99", "percentiles")
        for name in ("connect_timeout", "first_chunk_timeout", "idle_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds", name)
        if self.backend == "openai" and not self.base_url:
            raise ConfigError("backend openai needs base_url (e.g. http://localhost:8000/v1)", "backend", "base_url")
        if self.backend == "openai" and self.batch < 1:
            raise ConfigError("batch must be >= 1 with backend openai", "batch", "backend")


class ConfigError(ValueError):
    """A bad BenchConfig setting. The message names settings by their field names; ``fields`` lists
    them, so that a front end can name its own spelling instead (the CLI writes --reps for repetitions)."""

    def __init__(self, message: str, *fields: str):
        super().__init__(message)
        self.fields = fields


def failures_allowed(max_failed: str, n: int) -> int:
    """How many of ``n`` measured requests may fail: ``max_failed`` is a count ("3") or a share of
    the requests ("5%", rounded down)."""
    text = str(max_failed).strip()
    try:
        v = float(text[:-1]) if text.endswith("%") else int(text)
    except ValueError:
        v = -1
    if not 0 <= v <= (100 if text.endswith("%") else float("inf")):
        raise ConfigError(f"max_failed {max_failed!r}: give a count such as 3 or a share such as 5%", "max_failed")
    return int(v * n / 100) if text.endswith("%") else int(v)


def failure_reasons(requests: list[dict]) -> list[tuple[str, int]]:
    """The errors of the failed requests, grouped by their text, most frequent first."""
    from collections import Counter

    return Counter(q["error"] for q in requests if q.get("error")).most_common()


def failure_report(requests: list[dict], max_failed: str) -> str | None:
    """A few lines saying how many measured requests failed and why, grouped by reason; None when
    no more failed than ``max_failed`` allows."""
    reasons = failure_reasons(requests)
    n_failed = sum(n for _, n in reasons)
    allowed = failures_allowed(max_failed, len(requests))
    if n_failed <= allowed:
        return None
    lines = [f"{n_failed} of {len(requests)} measured requests failed (--max-failed {max_failed} allows "
             f"{allowed}):"]
    lines += [f"  {n} x {why}" for why, n in reasons[:10]]
    if len(reasons) > 10:
        lines.append(f"  ... and {len(reasons) - 10} other reasons (see the result's requests)")
    return "\n".join(lines)


def config_json(cfg: BenchConfig) -> dict:
    """The configuration as JSON values (an unlimited request rate, inf, is written as null)."""
    d = asdict(cfg)
    d["percentiles"], d["depth"] = list(cfg.percentiles), list(cfg.depth)
    if d["request_rate"] == float("inf"):
        d["request_rate"] = None
    return d


def _random_prompt(rng: np.random.Generator, vocab: int, n: int) -> list[int]:
    return rng.integers(10, vocab, n).tolist()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


_SHA_CACHE: dict[tuple[str, float, int], str] = {}


def _gpu_name(llm: LLM) -> str | None:
    if llm.backend != "cuda":
        return None
    from ..backends import cuda

    return cuda.devices()[llm.device].name


def engine_environment(llm: LLM, model: str, prefix_cache: bool) -> dict:
    """The environment block of a result for the local engine; ``model`` as the user named it (a path
    or a dummy preset)."""
    path = str(llm.path)
    st = os.stat(path)
    key = (path, st.st_mtime, st.st_size)
    if key not in _SHA_CACHE:
        _SHA_CACHE[key] = _sha256(path)
    name = model if not os.path.exists(model) else os.path.basename(path)
    simd = _core.simd_info()
    return {
        "model": {"file": os.path.basename(path), "name": name, "dummy": not os.path.exists(model),
                  "size_bytes": st.st_size, "sha256": _SHA_CACHE[key],
                  "weight_types": sorted({t.type for t in llm.file.tensors.values()})},
        "kv_dtype": llm.kv_dtype, "backend": llm.backend, "threads": llm.threads, "cpu_model": cpu_model(),
        "gpu_name": _gpu_name(llm), "build_flags": _core.build_info()["cflags"],
        "cuda_graphs": llm.engine.stats()["graph_replays"] > 0 if llm.backend == "cuda" else None,
        "prefix_cache": prefix_cache,
        "simd": simd["active"], "prefetch": simd["prefetch"], "activations": llm.activations,
        "ctx": llm.ctx, "ctx_train": llm.ctx_train, "past_trained_context": llm.ctx > llm.ctx_train,
        "non_finite_tokens": _NONFINITE.get(id(llm), 0),   # in this model load so far
        "omp": {k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_PROC_BIND")},
    }


def environment(llm: LLM, cfg: BenchConfig) -> dict:
    """The environment block of a result for the local engine."""
    return engine_environment(llm, cfg.model, any(d > 0 for d in cfg.depth) if (cfg.pp or cfg.tg) else False)


def header() -> dict:
    """The fields every result starts with."""
    return {"schema_version": 1, "llmbench_version": __version__, "commit": (_core.build_info()["commit"] or None),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")}


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


def cache_limit(llm: LLM) -> int | None:
    """The last-level cache decode's bytes are compared with (CPU; a GPU's L2 is not counted)."""
    return llc_bytes() if llm.backend != "cuda" else None


def reference_bandwidth(llm: LLM, again: bool = False) -> dict:
    """The bandwidth decode is measured against: this machine's STREAM read (CPU, in a child process;
    ``again``: measured now too, the better of the two kept) or the device's copy bandwidth (CUDA, here:
    device memory is not this process's RSS)."""
    if llm.backend != "cuda":
        return membw_elsewhere(llm.threads, again)
    from ..backends import cuda

    nbytes, reps = 1 << 28, 20
    return {"backend": "cuda", "copy_gbs": cuda.copy_bandwidth(nbytes, reps, device=llm.device), "bytes": nbytes,
            "reps": reps}


def reference_gbps(bw: dict | None) -> float | None:
    bw = bw or {}
    return bw.get("copy_gbs") if bw.get("backend") == "cuda" else bw.get("read")


def phase_times(test: str, stats: dict) -> dict:
    """Wall time (host clock) and the backend's own time (CUDA events on a GPU) of each phase over the
    steps since the engine's stats were reset."""
    out = {"test": test, "steps": stats["steps"]}
    for ph in ("prefill", "decode", "sample"):
        out[f"{ph}_wall_s"] = stats[f"{ph}_ns"] / 1e9
        out[f"{ph}_device_s"] = stats[f"backend_{ph}_ns"] / 1e9
    return out


_NONFINITE: dict[int, int] = {}   # id(LLM) -> generated tokens whose log-probability was NaN or infinite


def _timed(llm: LLM, prompts: list[list[int]], n_gen: int, prefix: Prefix | None = None):
    """Run prompts together; return the completions (KV blocks are released afterwards). Tokens whose
    log-probability is not finite (NaN weights) are counted, with a warning the first time: the
    timings hold, but such a model computes nothing meaningful."""
    params = SamplingParams(temperature=0, max_tokens=n_gen, ignore_eos=True)
    outs = llm.generate(prompts, params, prefix=prefix)
    bad = sum(int(np.count_nonzero(~np.isfinite(np.asarray(o.logprobs, dtype=np.float64)))) for o in outs)
    if bad:
        if not _NONFINITE.get(id(llm)):
            warnings.warn(f"{llm.path.name}: generated tokens have NaN or infinite log-probabilities (non-finite "
                          "logits): the timings hold, the outputs are meaningless; check the model file",
                          stacklevel=2)
        _NONFINITE[id(llm)] = _NONFINITE.get(id(llm), 0) + bad
    return outs


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


def _test_name(kind: str, n: int, depth: int) -> str:
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")   # llama-bench's spelling


def llama_bench_tests(llm: LLM, cfg: BenchConfig, rng: np.random.Generator,
                      progress: Callable[[str], None],
                      phases: list[dict] | None = None,
                      tests: list[dict] | None = None) -> tuple[list[dict], list[float]]:
    """llama-bench's pp and tg tests at each depth: tokens/s per repetition. At depth d the first d
    tokens are computed once, untimed, and held; each repetition forks them (so only the test's
    own tokens are timed, over a KV cache of d + n tokens) and releases its blocks afterwards.
    Returns the test entries and the decode step times of the depth-0 tg test; appends each test's
    phase_times over its timed repetitions to ``phases``. Each finished test is appended to ``tests``
    (a new list if None) as soon as it finishes, so a caller keeps them if the run is interrupted."""
    vocab = llm.info["vocab"]
    tests = [] if tests is None else tests
    step_s: list[float] = []
    for depth in cfg.depth:
        prefix = llm.hold_prefix(_random_prompt(rng, vocab, depth)) if depth else None
        try:
            # (kind, tokens the test counts, prompt tokens, tokens generated): llama-bench's tg
            # starts from one prompt token and counts only the generated ones
            for kind, n_test, n_prompt, n_gen in (("pp", cfg.pp, cfg.pp, 0), ("tg", cfg.tg, 1, cfg.tg)):
                if not n_test:
                    continue
                name = _test_name(kind, n_test, depth)
                progress(name)
                secs = []
                for r in range(cfg.warmup + cfg.repetitions):
                    if r == cfg.warmup:
                        llm.engine.reset_stats()
                    c = _timed(llm, [_random_prompt(rng, vocab, n_prompt)], n_gen, prefix)[0]
                    if r < cfg.warmup:
                        continue
                    secs.append((c.finish_ns - c.admit_ns) / 1e9)
                    if kind == "tg" and depth == 0:
                        step_s += (np.diff(c.token_ns.astype(np.int64)) / 1e9).tolist()  # pure decode steps
                tests.append({"test": name, "n_prompt": n_prompt if kind == "pp" else 0, "n_gen": n_gen,
                              "n_depth": depth, **llama_bench_stats(n_test, secs)})
                if phases is not None:
                    phases.append(phase_times(name, llm.engine.stats()))
        finally:
            if prefix is not None:
                prefix.release()
    return tests, step_s


def latency_prompts(cfg: BenchConfig, tokenize: Callable[[str], list[int]] | None, vocab: int,
                    ctx_limit: int) -> list[list[list[int]]]:
    """The prompts of every run (warmup first), ``batch`` each: seeded random tokens of
    ``input_len``, or prompts drawn from ``cfg.dataset`` (tokenized, cut to fit ``ctx_limit`` with
    the output)."""
    rng = np.random.default_rng([cfg.seed, 1])
    runs = cfg.warmup + cfg.repetitions
    if not cfg.dataset:
        return [[_random_prompt(rng, vocab, cfg.input_len) for _ in range(cfg.batch)] for _ in range(runs)]
    if tokenize is None:
        raise UnsupportedError(f"{cfg.model} has no tokenizer in its metadata, so dataset prompts cannot be used")
    items = load_prompts(cfg.dataset)
    keep = max(1, ctx_limit - cfg.output_len - 1)
    return [[tokenize(p.text)[:keep] for p in sample(items, cfg.batch, rng)] for _ in range(runs)]


def _decode_steps(outs) -> tuple[list[float], int]:
    """Decode step times of a batch run: the token gaps of its first request once every request
    has its first token (all sequences decoding together), and the mean KV context of those steps
    summed over the batch."""
    start = max(int(o.token_ns[0]) for o in outs if len(o.token_ns))
    t = outs[0].token_ns.astype(np.int64)
    t = t[t >= start]
    steps = (np.diff(t) / 1e9).tolist()
    mid = len(outs[0].token_ns) - len(t) + len(steps) / 2
    return steps, int(sum(len(o.prompt_token_ids) for o in outs) + len(outs) * mid)


def latency_run(llm: LLM, cfg: BenchConfig, prompts: list[list[list[int]]], progress: Callable[[str], None],
                bw: dict | None = None, phases: list[dict] | None = None) -> dict:
    """The latency scenario: ``batch`` requests at once per run, fixed output length (EOS ignored).
    Returns metrics (vLLM keys), raw requests, per-run output throughputs and, from the steps where
    every sequence decodes, the decode bandwidth."""
    reqs: list[RequestTiming] = []
    duration = 0.0
    per_run: list[float] = []
    steps: list[float] = []
    ctx_tokens: list[int] = []
    for r, batch in enumerate(prompts):
        progress(f"{'warmup' if r < cfg.warmup else 'run'} {r + 1}/{len(prompts)}: batch {len(batch)}, "
                 f"{len(batch[0])} in, {cfg.output_len} out")
        if r == cfg.warmup:
            llm.engine.reset_stats()
        outs = _timed(llm, batch, cfg.output_len)
        if r < cfg.warmup:
            continue
        run_reqs = [RequestTiming(o.arrival_ns, int(o.token_ns[0]), o.token_ns.astype(np.int64).tolist(),
                                  o.finish_ns, len(o.prompt_token_ids), len(o.token_ids)) for o in outs]
        secs = (max(o.finish_ns for o in outs) - min(o.arrival_ns for o in outs)) / 1e9
        duration += secs
        per_run.append(sum(len(o.token_ids) for o in outs) / secs)
        s, ctx = _decode_steps(outs)
        steps += s
        ctx_tokens.append(ctx)
        reqs += run_reqs
    out = {"metrics": serving_metrics(reqs, cfg.percentiles, cfg.goodput or None, duration_s=duration),
           "requests": [q.to_dict() for q in reqs], "output_throughput_runs": per_run}
    if steps:
        step_bytes = decode_step_bytes(matrix_bytes(llm), llm.memory()["kv_per_token"], int(np.mean(ctx_tokens)))
        out["bandwidth"] = decode_bandwidth(step_bytes, steps, measured_gbps=reference_gbps(bw),
                                       cache_bytes=cache_limit(llm))
    if phases is not None and len(prompts) > cfg.warmup:
        phases.append(phase_times(f"latency b{cfg.batch}", llm.engine.stats()))
    return out


def timing_overhead(llm: LLM, step_s: float, batch: int) -> dict:
    """What the engine's own timing costs per decode step: 4 clock reads (phase accumulators) plus
    one logged event per sequence, measured on the real event log, as a fraction of the step."""
    c = llm.engine.timing_cost(10000)
    per_step = 4 * c["clock_ns"] + batch * c["event_ns"]
    return {"clock_ns": c["clock_ns"], "event_ns": c["event_ns"], "per_step_ns": per_step,
            "decode_step_ns": step_s * 1e9, "fraction_of_decode_step": per_step / (step_s * 1e9)}


def load(cfg: BenchConfig, ctx: int, max_seqs: int) -> LLM:
    gpu = {"backend": "cuda", "cuda_graphs": cfg.cuda_graphs is not False} if cfg.backend == "cuda" else {}
    return LLM(cfg.model, threads=cfg.threads, ctx=ctx, kv_dtype=cfg.kv_dtype, activations=cfg.activations,
               max_batch_tokens=max(512, min(cfg.pp, 2048)), max_seqs=max(max_seqs, 4), **gpu)


def _metadata(model: str) -> dict:
    with GGUFFile(resolve_model(model)) as f:
        return f.metadata


def model_context(model: str) -> int:
    """The training context of a model, from its metadata (no engine, no tokenizer)."""
    meta = _metadata(model)
    return int(meta.get(f"{meta.get('general.architecture', '?')}.context_length", 2048))


def model_tokenizer(model: str) -> Callable[[str], list[int]] | None:
    """The tokenizer's encode of a model without loading the engine (None if it has none)."""
    try:
        return Tokenizer.from_gguf(_metadata(model)).encode
    except UnsupportedError:
        return None


def check_kv_fits(model: str, kv_dtype: str, ctx: int, options: str) -> None:
    """Raise MemoryError before anything is loaded or measured when one sequence of ``ctx`` tokens
    needs more KV cache than this machine has memory available; ``options`` names the settings that
    made ``ctx``. A model file that cannot be read is left to the load, which says why."""
    from ..llm import _available_memory, hyperparameters, kv_bytes_per_token

    try:
        with GGUFFile(resolve_model(model)) as f:
            hp = hyperparameters(f.metadata, f.tensors, f.path or "model")
    except GGUFError:
        return
    need, avail = ctx * kv_bytes_per_token(hp, kv_dtype), _available_memory()
    if need > avail:
        raise MemoryError(f"{options}: a sequence of {ctx} tokens needs {need / 2**30:.1f} GiB of KV cache "
                          f"({kv_dtype}) and {avail / 2**30:.1f} GiB of memory are available; choose shorter "
                          "lengths (or --kv-dtype q8_0)")


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


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


class BenchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a single run after a llama-bench test finished: ``result`` holds the finished tests as a
    schema-valid result marked ``interrupted``."""

    def __init__(self, result: dict):
        super().__init__()
        self.result = result


def run(cfg: BenchConfig, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Run the whole benchmark on the local engine; returns a schema-valid result dict. Ctrl-C once a test
    has finished raises BenchInterrupted with what was measured."""
    state: dict = {}
    try:
        return _run(cfg, progress, state)
    except KeyboardInterrupt:
        partial = state.get("result")
        if not partial or not partial.get("llama_bench"):
            raise
        keep = ("schema_version", "llmbench_version", "commit", "created", "environment", "config", "llama_bench")
        partial = {k: v for k, v in partial.items() if k in keep}
        partial["interrupted"] = True
        validate(partial)
        raise BenchInterrupted(partial) from None


def _run(cfg: BenchConfig, progress: Callable[[str], None], state: dict) -> dict:
    cfg.check()
    if cfg.backend == "cuda":
        from ..backends import cuda

        ok, why = cuda.available()
        if not ok:
            raise BackendUnavailableError(why)
    progress(f"preparing {cfg.model}")
    prompts = None
    if cfg.batch and cfg.dataset:   # tokenized before the load: their lengths size the KV cache
        prompts = latency_prompts(cfg, model_tokenizer(cfg.model), 10**9, model_context(cfg.model))
    longest = max((len(p) for run_ in prompts or [] for p in run_), default=cfg.input_len if cfg.batch else 0)
    ctx = max(cfg.pp + max(cfg.depth) + 8, cfg.tg + max(cfg.depth) + 8, longest + cfg.output_len + 8)
    if cfg.backend == "cpu":
        check_kv_fits(cfg.model, cfg.kv_dtype, ctx, f"--pp {cfg.pp}, --tg {cfg.tg}, --depth {max(cfg.depth)}, "
                      f"--input-len {longest}, --output-len {cfg.output_len}")
    progress(f"loading {cfg.model}")
    llm = load(cfg, ctx, cfg.batch)
    if prompts is None and cfg.batch:
        prompts = latency_prompts(cfg, None, llm.info["vocab"], ctx)
    rng = np.random.default_rng(cfg.seed)
    progress("measuring memory bandwidth")
    bw = reference_bandwidth(llm)
    result: dict = {
        **header(),
        "environment": environment(llm, cfg),
        "config": {**config_json(cfg), "membw": bw},
        "llama_bench": [],   # filled test by test (an interrupted run keeps the finished ones)
    }
    state["result"] = result
    phases: list[dict] = []
    early_peaks = None
    if cfg.pp and llm.backend == "cpu":   # once before the tests, once after: the better of the two
        progress("measuring the arithmetic peak")
        early_peaks = peak.best(llm.threads)
    tests, step_s = (llama_bench_tests(llm, cfg, rng, progress, phases, result["llama_bench"])
                     if (cfg.pp or cfg.tg) else ([], []))
    if not tests:
        del result["llama_bench"]
    if tests:
        progress("measuring the arithmetic peak again")
        roof = prefill_roofline(llm, tests, early_peaks)
        if roof:
            result["compute"] = roof
    if step_s:
        if llm.backend == "cpu":   # once before the tests, once after: the better of the two
            progress("measuring memory bandwidth again")
            bw = result["config"]["membw"] = reference_bandwidth(llm, again=True)
        step_bytes = tg_step_bytes(llm, cfg.tg)
        result["bandwidth"] = decode_bandwidth(step_bytes, step_s, measured_gbps=reference_gbps(bw),
                                       cache_bytes=cache_limit(llm))
    if cfg.batch:
        lat = latency_run(llm, cfg, prompts, progress, bw, phases)
        result["metrics"], result["requests"] = lat["metrics"], lat["requests"]
        if "bandwidth" not in result and "bandwidth" in lat:
            result["bandwidth"] = lat["bandwidth"]
    if "bandwidth" in result:
        result["timing_overhead"] = timing_overhead(llm, result["bandwidth"]["step_s"],
                                                    1 if step_s else cfg.batch)
    mem = llm.memory()
    gpu = llm.backend == "cuda"
    result["memory"] = {"peak_rss_bytes": peak_rss_bytes(),
                        "weights_bytes": mem["weights"], "kv_cache_bytes": mem["kv_cache"],
                        "scratch_bytes": mem["scratch"], "gpu_peak_bytes": mem["peak"] if gpu else None,
                        **({"gpu_total_bytes": mem["device_total"], "gpu_free_bytes": mem["device_free"]}
                           if gpu else {})}
    if gpu:
        st = llm.engine.stats()
        result["environment"]["cuda_graphs"] = st["graph_replays"] > 0   # really used, not just asked for
        result["cuda"] = {"phases": phases, "graphs": {
            "requested": bool(llm.cuda_graphs), "captures": st["graph_captures"], "replays": st["graph_replays"],
            "capture_ms": st["capture_ns"] / 1e6, "kernels_per_step": st["kernels_per_step"]}}
    if llm.backend == "cpu":   # steps moved to one thread while other processes wanted the cores
        result["environment"]["solo_steps"] = llm.engine.stats()["solo_steps"]
    result["environment"]["non_finite_tokens"] = _NONFINITE.get(id(llm), 0)
    result["tokens"] = {"decode_step_s": step_s}
    validate(result)
    return result


# ---- external OpenAI-compatible servers ----

_WORDS = ("the quick brown fox jumps over a lazy dog while seven bright stars watch from far above "
          "quiet hills and rivers that run toward an open sea under morning light").split()


def synthetic_prompt(rng: np.random.Generator, n_words: int) -> str:
    """Random common English words: the server's own tokenizer decides the token count, which the
    result takes from the server's usage report."""
    return " ".join(_WORDS[i] for i in rng.integers(0, len(_WORDS), n_words))


def openai_latency(cfg: BenchConfig, progress: Callable[[str], None] = lambda s: None) -> dict:
    """The latency scenario against an OpenAI-compatible server: ``batch`` requests per repetition
    at ``request_rate`` (gamma gaps), streaming; errors are counted per request, never fatal.
    Returns the environment, metrics, raw requests, per-run output throughputs and error texts."""
    import asyncio

    from ..backends.openai import OpenAIClient
    from .arrivals import gamma_arrivals, run_requests

    cfg.check()
    rng = np.random.default_rng(cfg.seed)
    dataset = load_prompts(cfg.dataset) if cfg.dataset else None

    async def one_run(prompts: list[str]):
        async with OpenAIClient(cfg.base_url, cfg.model, api=cfg.api, max_tokens=cfg.output_len, temperature=0.0,
                                ignore_eos=True, timeout=None, connect_timeout=cfg.connect_timeout,
                                first_chunk_timeout=cfg.first_chunk_timeout, idle_timeout=cfg.idle_timeout) as client:
            sched = gamma_arrivals(len(prompts), cfg.request_rate, cfg.burstiness, seed=cfg.seed)
            return await run_requests(client.send, prompts, sched, cfg.max_concurrency, progress=False)

    reqs: list[RequestTiming] = []
    duration = 0.0
    errors: list[str] = []
    per_run: list[float] = []
    for r in range(cfg.warmup + cfg.repetitions):
        progress(f"{'warmup' if r < cfg.warmup else 'run'} {r + 1}: {cfg.batch} requests to {cfg.base_url}")
        texts = ([p.text for p in sample(dataset, cfg.batch, rng)] if dataset else
                 [synthetic_prompt(rng, cfg.input_len) for _ in range(cfg.batch)])
        out = asyncio.run(one_run(texts))
        if r < cfg.warmup:
            failed = [repr(x) if isinstance(x, BaseException) else x.error for x in out.results
                      if isinstance(x, BaseException) or x.error]
            if failed:   # the server is broken or stalled: measuring it would fail the same way
                raise WarmupFailed(failed, cfg.base_url)
            continue
        duration += out.duration_s
        n_out = 0
        for res in out.results:
            if isinstance(res, BaseException):
                reqs.append(RequestTiming(out.start_ns, None, [], out.end_ns, None, None, error=repr(res)))
                continue
            ok = res.ok and res.output_tokens is not None
            err = res.error or (None if ok else "the server reported no token usage (enable stream usage)")
            if err:
                errors.append(err)
            else:
                n_out += res.output_tokens
            reqs.append(RequestTiming(res.arrival_ns, res.first_token_ns if ok else None, res.token_ns if ok else [],
                                      res.finish_ns, res.prompt_tokens, res.output_tokens if ok else None, error=err))
        per_run.append(n_out / out.duration_s if out.duration_s > 0 else 0.0)
    return {
        "environment": {
            "model": {"file": None, "name": cfg.model, "size_bytes": None, "sha256": None, "weight_types": None},
            "kv_dtype": None, "backend": "openai", "base_url": cfg.base_url, "api": cfg.api, "threads": None,
            "cpu_model": None, "gpu_name": None, "build_flags": None, "cuda_graphs": None, "prefix_cache": None,
        },
        "metrics": serving_metrics(reqs, cfg.percentiles, cfg.goodput or None, duration_s=duration),
        "requests": [q.to_dict() for q in reqs], "output_throughput_runs": per_run,
        "errors": sorted(set(errors))[:20],
    }


class WarmupFailed(LLMBenchError):
    """Requests of a warmup run failed, so nothing was measured; the message groups the reasons."""

    def __init__(self, errors: list[str], base_url: str | None):
        reasons = failure_reasons([{"error": e} for e in errors])
        super().__init__(f"{len(errors)} warmup requests to {base_url} failed, so the run stopped before "
                         "measuring: " + "; ".join(f"{n} x {why}" for why, n in reasons[:5]))


def run_openai(cfg: BenchConfig, progress: Callable[[str], None] = lambda s: None) -> dict:
    """One result of the latency scenario against an OpenAI-compatible server (``openai_latency``)."""
    lat = openai_latency(cfg, progress)
    result = {**header(), "environment": lat["environment"],
              "config": {**config_json(cfg), "errors": lat["errors"]},
              "metrics": lat["metrics"], "requests": lat["requests"]}
    validate(result)
    return result
