"""`llmbench bench` on llmbench's own engine: llama-bench-style pp/tg throughput, a latency
scenario with vLLM's TTFT/TPOT/ITL/E2E metrics from the engine's event timestamps, and the decode
bandwidth as a fraction of this machine's measured bandwidth, all in one JSON result that follows
docs/result.schema.json.

Timing: every number comes from the C engine's monotonic clock (events stamped inside the core);
warmup runs first; each repetition starts with an empty KV cache (its requests are released).
"""

from __future__ import annotations

import datetime
import hashlib
import os
import json
import resource
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import LLM, SamplingParams, __version__, _core
from ..info import cpu_model
from . import membw
from .metrics import RequestTiming, decode_bandwidth, decode_step_bytes, llama_bench_stats, serving_metrics
from .schema import validate


@dataclass
class BenchConfig:
    model: str = "llama-125m:Q4_K_M"   # GGUF path or dummy preset[:type]
    threads: int | None = None
    kv_dtype: str = "f16"
    pp: int = 512                      # llama-bench pp test (0: skip)
    tg: int = 128                      # llama-bench tg test (0: skip)
    batch: int = 1                     # latency scenario: concurrent requests (0: skip)
    input_len: int = 128
    output_len: int = 128
    warmup: int = 1
    repetitions: int = 5
    seed: int = 0
    percentiles: tuple[float, ...] = (50, 90, 95, 99)
    goodput: dict[str, float] = field(default_factory=dict)
    # external OpenAI-compatible server (backend "openai")
    backend: str = "cpu"
    base_url: str | None = None
    api: str = "completions"
    request_rate: float = float("inf")  # requests/s with gamma gaps; inf: all at once
    burstiness: float = 1.0
    max_concurrency: int | None = None


def _random_prompt(rng: np.random.Generator, vocab: int, n: int) -> list[int]:
    return rng.integers(10, vocab, n).tolist()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def _environment(llm: LLM, cfg: BenchConfig) -> dict:
    path = str(llm.path)
    name = cfg.model if not os.path.exists(cfg.model) else os.path.basename(path)
    return {
        "model": {"file": os.path.basename(path), "name": name, "dummy": not os.path.exists(cfg.model),
                  "size_bytes": os.path.getsize(path), "sha256": _sha256(path),
                  "weight_types": sorted({t.type for t in llm.file.tensors.values()})},
        "kv_dtype": cfg.kv_dtype, "backend": "cpu", "threads": llm.threads, "cpu_model": cpu_model(),
        "gpu_name": None, "build_flags": _core.build_info()["cflags"], "cuda_graphs": None,
        "prefix_cache": False, "simd": _core.simd_info()["active"], "activations": llm.activations,
        "omp": {k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_PROC_BIND")},
    }


def _header() -> dict:
    """The fields every result starts with."""
    return {"schema_version": 1, "llmbench_version": __version__, "commit": (_core.build_info()["commit"] or None),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")}


def _membw_elsewhere(threads: int) -> dict:
    """membw in a child process, so its arrays do not count in this process's peak memory. The child
    runs from the folder that holds this llmbench, so a source tree in the working directory cannot
    shadow it."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "llmbench", "membw", "--json", "--reps", "3", "--threads", str(threads)],
                       capture_output=True, text=True, timeout=600, cwd=here)
    if r.returncode != 0:  # fall back to measuring here rather than reporting no fraction
        return membw.measure(256 << 20, 3, threads)
    return json.loads(r.stdout)


def _timed(llm: LLM, prompts: list[list[int]], n_gen: int):
    """Run prompts together; return the completions (KV blocks are released afterwards)."""
    params = SamplingParams(temperature=0, max_tokens=n_gen, ignore_eos=True)
    return llm.generate(prompts, params)


def run(cfg: BenchConfig, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Run the whole benchmark on the local engine; returns a schema-valid result dict."""
    ctx = max(cfg.pp + 8, cfg.tg + 8, cfg.input_len + cfg.output_len + 8)
    progress(f"loading {cfg.model}")
    llm = LLM(cfg.model, threads=cfg.threads, ctx=ctx, kv_dtype=cfg.kv_dtype,
              max_batch_tokens=max(512, min(cfg.pp, 2048)), max_seqs=max(cfg.batch, 4))
    vocab = llm.info["vocab"]
    rng = np.random.default_rng(cfg.seed)
    progress("measuring memory bandwidth")
    bw = _membw_elsewhere(llm.threads)
    result: dict = {
        **_header(),
        "environment": _environment(llm, cfg),
        "config": {**asdict(cfg), "percentiles": list(cfg.percentiles), "membw": bw},
    }
    tests = []
    if cfg.pp:
        progress(f"pp{cfg.pp}")
        secs = []
        for r in range(cfg.warmup + cfg.repetitions):
            c = _timed(llm, [_random_prompt(rng, vocab, cfg.pp)], 0)[0]
            if r >= cfg.warmup:
                secs.append((c.finish_ns - c.admit_ns) / 1e9)
        tests.append({"test": f"pp{cfg.pp}", "n_prompt": cfg.pp, "n_gen": 0, "n_depth": 0,
                      **llama_bench_stats(cfg.pp, secs)})
    step_s: list[float] = []
    if cfg.tg:
        progress(f"tg{cfg.tg}")
        secs = []
        for r in range(cfg.warmup + cfg.repetitions):
            c = _timed(llm, [_random_prompt(rng, vocab, 1)], cfg.tg)[0]
            if r >= cfg.warmup:
                secs.append((c.finish_ns - c.admit_ns) / 1e9)
                step_s += (np.diff(c.token_ns.astype(np.int64)) / 1e9).tolist()  # pure decode steps
        tests.append({"test": f"tg{cfg.tg}", "n_prompt": 0, "n_gen": cfg.tg, "n_depth": 0,
                      **llama_bench_stats(cfg.tg, secs)})
    if tests:
        result["llama_bench"] = tests
    if step_s:
        matrices = sum(t.nbytes for name, t in llm.file.tensors.items()
                       if len(t.shape) == 2 and (name != "token_embd.weight" or llm.info["tied_output"]))
        step_bytes = decode_step_bytes(matrices, llm.memory()["kv_per_token"], 1 + cfg.tg // 2)
        result["bandwidth"] = decode_bandwidth(step_bytes, step_s, measured_gbps=bw["read"])
    if cfg.batch:
        progress(f"latency: batch {cfg.batch}, {cfg.input_len} in, {cfg.output_len} out")
        reqs: list[RequestTiming] = []
        duration = 0.0
        for r in range(cfg.warmup + cfg.repetitions):
            outs = _timed(llm, [_random_prompt(rng, vocab, cfg.input_len) for _ in range(cfg.batch)], cfg.output_len)
            if r < cfg.warmup:
                continue
            run_reqs = [RequestTiming(o.arrival_ns, int(o.token_ns[0]), o.token_ns.astype(np.int64).tolist(),
                                      o.finish_ns, len(o.prompt_token_ids), len(o.token_ids)) for o in outs]
            duration += (max(o.finish_ns for o in outs) - min(o.arrival_ns for o in outs)) / 1e9
            reqs += run_reqs
        result["metrics"] = serving_metrics(reqs, cfg.percentiles, cfg.goodput or None, duration_s=duration)
        result["requests"] = [q.to_dict() for q in reqs]
    mem = llm.memory()
    result["memory"] = {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                        "weights_bytes": mem["weights"], "kv_cache_bytes": mem["kv_cache"],
                        "scratch_bytes": mem["scratch"], "gpu_peak_bytes": None}
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


def run_openai(cfg: BenchConfig, progress: Callable[[str], None] = lambda s: None) -> dict:
    """The latency scenario against an OpenAI-compatible server: ``batch`` requests per repetition
    at ``request_rate`` (gamma gaps), streaming; errors are counted per request, never fatal."""
    import asyncio

    from ..backends.openai import OpenAIClient
    from .arrivals import gamma_arrivals, run_requests

    if not cfg.base_url:
        raise ValueError("--backend openai needs --base-url (e.g. http://localhost:8000/v1)")
    if cfg.batch < 1:
        raise ValueError("--batch must be >= 1 with --backend openai")
    rng = np.random.default_rng(cfg.seed)

    async def one_run(prompts: list[str]):
        async with OpenAIClient(cfg.base_url, cfg.model, api=cfg.api, max_tokens=cfg.output_len, temperature=0.0,
                                ignore_eos=True) as client:
            sched = gamma_arrivals(len(prompts), cfg.request_rate, cfg.burstiness, seed=cfg.seed)
            return await run_requests(client.send, prompts, sched, cfg.max_concurrency, progress=False)

    reqs: list[RequestTiming] = []
    duration = 0.0
    errors: list[str] = []
    for r in range(cfg.warmup + cfg.repetitions):
        progress(f"{'warmup' if r < cfg.warmup else 'run'} {r + 1}: {cfg.batch} requests to {cfg.base_url}")
        out = asyncio.run(one_run([synthetic_prompt(rng, cfg.input_len) for _ in range(cfg.batch)]))
        if r < cfg.warmup:
            continue
        duration += out.duration_s
        for res in out.results:
            if isinstance(res, BaseException):
                reqs.append(RequestTiming(out.start_ns, None, [], out.end_ns, None, None, error=repr(res)))
                continue
            ok = res.ok and res.output_tokens is not None
            err = res.error or (None if ok else "the server reported no token usage (enable stream usage)")
            if err:
                errors.append(err)
            reqs.append(RequestTiming(res.arrival_ns, res.first_token_ns if ok else None, res.token_ns if ok else [],
                                      res.finish_ns, res.prompt_tokens, res.output_tokens if ok else None, error=err))
    result = {
        **_header(),
        "environment": {
            "model": {"file": None, "name": cfg.model, "size_bytes": None, "sha256": None, "weight_types": None},
            "kv_dtype": None, "backend": "openai", "base_url": cfg.base_url, "api": cfg.api, "threads": None,
            "cpu_model": None, "gpu_name": None, "build_flags": None, "cuda_graphs": None, "prefix_cache": None,
        },
        "config": {**asdict(cfg), "percentiles": list(cfg.percentiles), "errors": sorted(set(errors))[:20]},
        "metrics": serving_metrics(reqs, cfg.percentiles, cfg.goodput or None, duration_s=duration),
        "requests": [q.to_dict() for q in reqs],
    }
    validate(result)
    return result
