"""`llmbench bench` on llmbench's own engine: llama-bench-style pp/tg tests at each depth, a latency
scenario with vLLM's TTFT/TPOT/ITL/E2E metrics from the engine's event timestamps, and the decode
bandwidth as a fraction of this machine's measured bandwidth, all in one JSON result that follows
docs/result.schema.json. With ``--backend cuda`` the same measurements run through
LLM(backend="cuda"); the result adds the device time of each phase (CUDA events) beside its wall
time, the CUDA Graph counters, device memory, and the bandwidth fraction is of the device-to-device
copy bandwidth (`llmbench membw --backend cuda`) measured in the same run.

Timing: every number comes from the C engine's monotonic clock (events stamped inside the core);
warmup runs first; each repetition starts with an empty KV cache (its requests are released).
Tested end to end on dummy models in tests/test_bench.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import LLM, BackendUnavailableError, SamplingParams, UnsupportedError
from ..llm import Prefix, resolve_model
from ..models.gguf import GGUFError, GGUFFile
from ..tokenizer import Tokenizer
from . import peak
from .config import BenchConfig, config_json
from .dataset import load_prompts, sample
from .metrics import RequestTiming, decode_bandwidth, decode_step_bytes, llama_bench_stats, serving_metrics
from .provenance import count_non_finite, engine_environment, header, non_finite_tokens, peak_rss_bytes
from .roofline import cache_limit, matrix_bytes, prefill_roofline, reference_bandwidth, reference_gbps, tg_step_bytes
from .schema import validate


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


def load(cfg: BenchConfig, ctx: int, max_seqs: int) -> LLM:
    """The engine for ``cfg`` with a context of ``ctx`` tokens and room for ``max_seqs`` sequences."""
    gpu: dict[str, Any] = {}
    if cfg.backend == "cuda":
        gpu = {"backend": "cuda", "cuda_graphs": cfg.cuda_graphs is not False}
    return LLM(cfg.model, threads=cfg.threads, ctx=ctx, kv_dtype=cfg.kv_dtype, activations=cfg.activations,
               max_batch_tokens=max(512, min(cfg.pp, 2048)), max_seqs=max(max_seqs, 4), **gpu)


def environment(llm: LLM, cfg: BenchConfig) -> dict:
    """The environment block of a result for the local engine."""
    return engine_environment(llm, cfg.model, any(d > 0 for d in cfg.depth) if (cfg.pp or cfg.tg) else False)


def _random_prompt(rng: np.random.Generator, vocab: int, n: int) -> list[int]:
    return rng.integers(10, vocab, n).tolist()


def _timed(llm: LLM, prompts: list[list[int]], n_gen: int, prefix: Prefix | None = None):
    """Run prompts together; return the completions (KV blocks are released afterwards). Tokens whose
    log-probability is not finite (NaN weights) are counted, with a warning the first time: the
    timings hold, but such a model computes nothing meaningful."""
    params = SamplingParams(temperature=0, max_tokens=n_gen, ignore_eos=True)
    outs = llm.generate(prompts, params, prefix=prefix)
    count_non_finite(llm, outs)
    return outs


def phase_times(test: str, stats: dict) -> dict:
    """Wall time (host clock) and the backend's own time (CUDA events on a GPU) of each phase over the
    steps since the engine's stats were reset."""
    out = {"test": test, "steps": stats["steps"]}
    for ph in ("prefill", "decode", "sample"):
        out[f"{ph}_wall_s"] = stats[f"{ph}_ns"] / 1e9
        out[f"{ph}_device_s"] = stats[f"backend_{ph}_ns"] / 1e9
    return out


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
        assert prompts is not None   # made above whenever cfg.batch
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
    result["environment"]["non_finite_tokens"] = non_finite_tokens(llm)
    result["tokens"] = {"decode_step_s": step_s}
    validate(result)
    return result

