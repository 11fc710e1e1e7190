"""The latency scenario against an external OpenAI-compatible server (vLLM, llama.cpp, Ollama, SGLang):
``batch`` streaming requests per repetition at a request rate with gamma gaps, synthetic or dataset
prompts; the server's usage report gives the token counts, failed requests are counted, never fatal
(a failed warmup stops the run). Tested against a local SSE server in tests/test_bench.py."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import LLMBenchError
from .config import BenchConfig, config_json, failure_reasons
from .dataset import load_prompts, sample
from .metrics import RequestTiming, serving_metrics
from .provenance import header
from .schema import validate

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
    base_url = cfg.base_url
    assert base_url is not None   # check() requires it for backend openai
    rng = np.random.default_rng(cfg.seed)
    dataset = load_prompts(cfg.dataset) if cfg.dataset else None

    async def one_run(prompts: list[str]):
        async with OpenAIClient(base_url, cfg.model, api=cfg.api, max_tokens=cfg.output_len, temperature=0.0,
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

