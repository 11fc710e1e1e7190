"""`llmbench bench` from Python: the settings, the local run and the run against a server, and the
pieces they are built from, under the names the docs, notebooks and benchmarks/ use. Each lives in
a module of its own:

- ``perf.config``: BenchConfig, its checks (ConfigError), how many failed requests it allows;
- ``perf.local``: llama-bench's pp/tg tests and the latency scenario on llmbench's engine (``run``);
- ``perf.openai_load``: the latency scenario against an OpenAI-compatible server (``run_openai``);
- ``perf.roofline``: the bytes and operations of a step and the machine's limits they are set against;
- ``perf.provenance``: the header and environment every result carries.
"""

from __future__ import annotations

from .config import BenchConfig, ConfigError, config_json, failure_reasons, failure_report, failures_allowed
from .local import (
    BenchInterrupted,
    check_kv_fits,
    environment,
    latency_prompts,
    latency_run,
    llama_bench_tests,
    load,
    model_context,
    model_tokenizer,
    phase_times,
    run,
    timing_overhead,
)
from .openai_load import WarmupFailed, openai_latency, run_openai, synthetic_prompt
from .provenance import engine_environment, header, peak_rss_bytes
from .roofline import (
    cache_limit,
    matrix_bytes,
    membw_elsewhere,
    peak_kinds,
    prefill_ops,
    prefill_roofline,
    reference_bandwidth,
    reference_gbps,
    tg_step_bytes,
)

__all__ = [
    "BenchConfig", "BenchInterrupted", "ConfigError", "WarmupFailed", "cache_limit", "check_kv_fits", "config_json",
    "engine_environment", "environment", "failure_reasons", "failure_report", "failures_allowed", "header",
    "latency_prompts", "latency_run", "llama_bench_tests", "load", "matrix_bytes", "membw_elsewhere", "model_context",
    "model_tokenizer", "openai_latency", "peak_kinds", "peak_rss_bytes", "phase_times", "prefill_ops",
    "prefill_roofline", "reference_bandwidth", "reference_gbps", "run", "run_openai", "synthetic_prompt",
    "tg_step_bytes", "timing_overhead",
]
