"""The JSON Schema (draft 2020-12) of one llmbench benchmark result, and ``validate``.

SCHEMA below is the single source; docs/result.schema.json is written from it
(``python -m llmbench.perf.schema > docs/result.schema.json``) and tests/test_schema.py checks that the
two agree, that a full example passes and that broken ones fail with the JSON path of the problem.
Metric keys are vLLM's (see llmbench/perf/metrics.py); llama-bench entries use llama-bench's keys.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SCHEMA_VERSION = 1

_num = {"type": "number"}
_num_or_null = {"type": ["number", "null"]}
_count = {"type": "integer", "minimum": 0}
_str_or_null = {"type": ["string", "null"]}
_ns = {"type": "integer"}  # monotonic clock, any origin

_model = {
    "type": "object",
    "description": "The model measured. For an external server only name is known; the rest is null.",
    "required": ["file", "size_bytes", "sha256", "weight_types"],
    "properties": {
        "file": {**_str_or_null, "description": "GGUF file name (base name), or null"},
        "name": {**_str_or_null, "description": "architecture preset for a dummy, served name for a server"},
        "dummy": {"type": ["boolean", "null"], "description": "seeded random weights (llmbench's dummy)"},
        "size_bytes": {"type": ["integer", "null"], "minimum": 0},
        "sha256": {"oneOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}]},
        "weight_types": {"type": ["array", "null"], "items": {"type": "string"},
                         "description": "tensor types present, e.g. [\"Q4_K\", \"Q6_K\", \"F32\"]"},
    },
}

_environment = {
    "type": "object",
    "description": "What produced the numbers. Extra keys (os, python, numpy, ...) are allowed.",
    "required": ["model", "kv_dtype", "backend", "threads", "cpu_model", "gpu_name", "build_flags",
                 "cuda_graphs"],
    "properties": {
        "model": _model,
        "kv_dtype": _str_or_null,
        "backend": {"type": "string", "description": "cpu, cuda, or openai (an external server)"},
        "threads": {"type": ["integer", "null"], "minimum": 1},
        "cpu_model": _str_or_null,
        "gpu_name": _str_or_null,
        "build_flags": {"type": ["string", "array", "null"], "items": {"type": "string"}},
        "cuda_graphs": {"type": ["boolean", "null"],
                        "description": "whether CUDA Graphs were really used; null where not applicable"},
        "prefix_cache": {"type": ["boolean", "null"]},
        "solo_steps": {"type": "integer", "minimum": 0,
                       "description": "CPU engine: steps it ran on one of its threads because other processes "
                                      "wanted the cores (over 0: the figures are not this machine's best)"},
    },
}

_config = {
    "type": "object",
    "description": "How the run was set up. Scenario parameters (batch, input_len, output_len, "
                   "request_rate, burstiness, max_concurrency, dataset, ...) are extra keys.",
    "required": ["warmup", "repetitions", "seed"],
    "properties": {
        "warmup": _count,
        "repetitions": {"type": "integer", "minimum": 1},
        "seed": {"type": ["integer", "null"]},
        "scenario": {"type": "string"},
        "percentiles": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 100}},
        "goodput": {"type": "object", "additionalProperties": False,
                    "properties": {k: {"type": "number", "minimum": 0} for k in ("ttft", "tpot", "e2el")},
                    "description": "SLOs in ms; a request is good if it meets all of them"},
    },
}

_metrics = {
    "type": "object",
    "description": "vLLM's serving-benchmark keys. Times in ms, duration in s, throughputs per s; "
                   "null where no sample exists (vLLM writes 0 there).",
    "required": ["duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
                 "request_throughput", "output_throughput", "total_token_throughput"],
    "properties": {
        "duration": {"type": "number", "minimum": 0},
        "completed": _count,
        "failed": _count,
        "total_input_tokens": _count,
        "total_output_tokens": _count,
        "request_throughput": _num_or_null,
        "request_goodput": _num_or_null,
        "output_throughput": _num_or_null,
        "total_token_throughput": _num_or_null,
        "max_output_tokens_per_s": _num,
        "max_concurrent_requests": _count,
    },
    "patternProperties": {
        r"^(mean|median|std|min|max|p[0-9]+(\.[0-9]+)?)_(ttft|tpot|itl|e2el)_ms$": _num_or_null,
    },
    "additionalProperties": False,
}

_llama_bench_entry = {
    "type": "object",
    "description": "One llama-bench-style test: pp n_prompt, tg n_gen, or both, at context depth n_depth.",
    "required": ["test", "n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts", "samples_ts",
                 "avg_ns", "stddev_ns", "samples_ns"],
    "properties": {
        "test": {"type": "string", "description": "llama-bench's name, e.g. pp512, tg128, pp512 @ d4096"},
        "n_prompt": _count,
        "n_gen": _count,
        "n_depth": _count,
        "n_tokens": _count,
        "avg_ts": _num,
        "stddev_ts": _num,
        "samples_ts": {"type": "array", "items": _num, "minItems": 1},
        "avg_ns": _num,
        "stddev_ns": _num,
        "samples_ns": {"type": "array", "items": _ns, "minItems": 1},
    },
}

_request = {
    "type": "object",
    "description": "Raw timings of one request (llmbench.perf.metrics.RequestTiming.to_dict()).",
    "required": ["arrival_ns", "first_token_ns", "token_ns", "finish_ns", "prompt_tokens",
                 "output_tokens", "error"],
    "properties": {
        "id": {"type": ["integer", "string"]},
        "arrival_ns": _ns,
        "first_token_ns": {"type": ["integer", "null"]},
        "token_ns": {"type": "array", "items": _ns},
        "finish_ns": {"type": ["integer", "null"]},
        "prompt_tokens": {"type": ["integer", "null"], "minimum": 0, "description": "null: not reported"},
        "output_tokens": {"type": ["integer", "null"], "minimum": 0},
        "error": _str_or_null,
    },
    "additionalProperties": False,
}

_phase = {
    "type": "object",
    "description": "one test's steps: wall time of each phase on the host clock, and the backend's own "
                   "time of the same phases (CUDA events on the device). Sampling on the device runs inside "
                   "the backend's step, so it counts in prefill/decode wall time and in sample_device_s; "
                   "sample_wall_s is the host's part (logits rows sampled on the host, or taking the ids)",
    "required": ["test", "steps", "prefill_wall_s", "prefill_device_s", "decode_wall_s", "decode_device_s",
                 "sample_wall_s", "sample_device_s"],
    "properties": {"test": {"type": "string"}, "steps": _count,
                   **{f"{ph}_{k}_s": {"type": "number", "minimum": 0}
                      for ph in ("prefill", "decode", "sample") for k in ("wall", "device")}},
}

_cuda = {
    "type": "object",
    "description": "--backend cuda: device time per phase of each test beside its wall time, and the CUDA "
                   "Graphs of decode steps (captures, replays, capture time, kernels one decode step launches)",
    "required": ["phases", "graphs"],
    "properties": {
        "phases": {"type": "array", "items": _phase},
        "graphs": {"type": "object", "required": ["requested", "captures", "replays", "capture_ms", "kernels_per_step"],
                   "properties": {"requested": {"type": "boolean"}, "captures": _count, "replays": _count,
                                  "capture_ms": {"type": "number", "minimum": 0}, "kernels_per_step": _count}},
    },
}

_bandwidth = {
    "type": "object",
    "description": "Decode memory bandwidth (llmbench.perf.metrics.decode_bandwidth).",
    "required": ["bytes_per_step", "step_s", "achieved_gbps", "measured_gbps", "fraction"],
    "properties": {
        "bytes_per_step": {"type": "number", "minimum": 0},
        "step_s": {"type": "number", "exclusiveMinimum": 0},
        "steps": {"type": "integer", "minimum": 1},
        "achieved_gbps": {"type": "number", "minimum": 0},
        "measured_gbps": {"type": ["number", "null"], "exclusiveMinimum": 0},
        "fraction": {"type": ["number", "null"], "minimum": 0},
        "cache_bytes": {"type": ["integer", "null"], "exclusiveMinimum": 0},
        "fits_in_cache": {"type": ["boolean", "null"]},
    },
}

_compute = {
    "type": "object",
    "description": "The depth-0 pp test against the arithmetic peaks measured in the same run "
                   "(llmbench.perf.metrics.prefill_compute, llmbench.perf.peak): operations by the "
                   "instruction they run on, time at the peaks over the measured time.",
    "required": ["n_prompt", "ops", "seconds", "min_seconds", "achieved_gops", "peaks_gops", "fraction"],
    "properties": {
        "n_prompt": {"type": "integer", "minimum": 1},
        "ops": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
        "seconds": {"type": "number", "exclusiveMinimum": 0},
        "min_seconds": {"type": "number", "minimum": 0},
        "achieved_gops": {"type": "number", "minimum": 0},
        "peaks_gops": {"type": "object", "additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
        "instructions": {"type": "object", "additionalProperties": {"type": "string"}},
        "fraction": {"type": "number", "minimum": 0},
    },
}

_timing_overhead = {
    "type": "object",
    "description": "What the engine's own timing costs per decode step: 4 clock reads plus one logged "
                   "event per sequence, measured on the engine's event log.",
    "required": ["clock_ns", "event_ns", "per_step_ns", "decode_step_ns", "fraction_of_decode_step"],
    "properties": {k: {"type": "number", "minimum": 0}
                   for k in ("clock_ns", "event_ns", "per_step_ns", "decode_step_ns", "fraction_of_decode_step")},
}

_point = {
    "type": "object",
    "description": "One sweep point: its parameters (the swept axes), environment, vLLM metrics, "
                   "output tokens/s of each repetition, decode bandwidth and raw requests.",
    "required": ["kind", "params", "environment", "metrics", "output_throughput_runs", "bandwidth", "requests"],
    "properties": {
        "kind": {"const": "point"},
        "params": {"type": "object", "minProperties": 1},
        "environment": _environment,
        "metrics": _metrics,
        "output_throughput_runs": {"type": "array", "items": _num, "minItems": 1},
        "bandwidth": {"oneOf": [_bandwidth, {"type": "null"}]},
        "timing_overhead": _timing_overhead,
        "memory": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "requests": {"type": "array", "items": _request},
    },
}

_failed_point = {
    "type": "object",
    "description": "A sweep point whose process died or failed: its parameters and the reason.",
    "required": ["kind", "params", "error"],
    "properties": {"kind": {"const": "point"}, "params": {"type": "object", "minProperties": 1},
                   "error": {"type": "string", "minLength": 1}},
    "additionalProperties": False,
}

_fit = {
    "type": "object",
    "description": "llmbench.fit.FitResult.to_dict(): params, stderr, ci95 [low, high], r2, n, dof.",
    "required": ["model", "formula", "params", "stderr", "ci95", "r2", "n", "dof"],
}

_sweep = {
    "type": "object",
    "description": "A parameter sweep (llmbench.perf.sweep): axes, every point, and per group of points "
                   "that differ only in batch the power law output_throughput = a * batch**k and the knee.",
    "required": ["axes", "points", "fits"],
    "properties": {
        "axes": {"type": "object", "additionalProperties": {"type": "array", "minItems": 1}},
        "points": {"type": "array", "items": {"oneOf": [_point, _failed_point]}, "minItems": 1},
        "failed": {**_count, "description": "points that failed (they carry an error instead of metrics)"},
        "fits": {"type": "array", "items": {
            "type": "object",
            "required": ["group", "batch", "output_throughput", "power_law", "knee", "error"],
            "properties": {"power_law": {"oneOf": [_fit, {"type": "null"}]},
                           "knee": {"type": ["object", "null"], "required": ["x", "threshold", "gains"]},
                           "error": _str_or_null}}},
        "max_timing_overhead": _num_or_null,
        "files": {"type": "object", "description": "CSV, markdown and plots written beside the result"},
    },
}

_profile_phase = {
    "type": "object",
    "required": ["tokens", "forward_ns", "kinds_ns", "shares", "matmul_by_type_ns", "other_ns", "coverage"],
    "properties": {
        "steps": _count, "tokens": _count, "forward_ns": _count, "wall_s": _num,
        "kinds_ns": {"type": "object", "additionalProperties": _count,
                     "description": "ns per operation kind: embed, norm, quant_x, matmul, rope_kv, attention, "
                                    "elementwise"},
        "shares": {"type": "object", "additionalProperties": _num_or_null,
                   "description": "each kind's ns over the backend's forward ns"},
        "matmul_by_type_ns": {"type": "object", "additionalProperties": _count,
                              "description": "the products' ns by weight type name"},
        "other_ns": {"type": "integer", "description": "forward ns the kinds do not cover (the loop between them)"},
        "coverage": _num_or_null,
        "host_ns": {"type": "object", "additionalProperties": _count,
                    "description": "the engine's host phases in the same runs: sample, schedule"},
    },
}

_profile = {
    "type": "object",
    "description": "llmbench bench --profile (llmbench.perf.profile): where prefill and decode steps spend "
                   "their time, and what timing it costs",
    "required": ["pp", "tg", "reps", "prefill", "decode"],
    "properties": {
        "model": {"type": "string"}, "threads": _count, "pp": _count, "tg": _count, "reps": _count,
        "prefill": _profile_phase, "decode": _profile_phase,
        "overhead": {"type": "object", "additionalProperties": _num,
                     "description": "profiled over unprofiled forward time (the fastest of alternated runs): "
                                    "prefill, decode"},
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:llmbench:schema:result:1",
    "title": "llmbench benchmark result",
    "description": "One benchmark run: environment, configuration, metrics and raw samples. "
                   "A run has serving metrics, llama-bench tests, or both; a sweep has its points instead.",
    "type": "object",
    "required": ["schema_version", "llmbench_version", "commit", "created", "environment", "config"],
    "anyOf": [{"required": ["metrics"]}, {"required": ["llama_bench"]}, {"required": ["sweep"]}],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "llmbench_version": {"type": "string", "minLength": 1},
        "commit": {"oneOf": [{"type": "string", "pattern": "^[0-9a-f]{7,40}(-dirty)?$"}, {"type": "null"}],
                   "description": "git commit of llmbench, null outside a checkout"},
        "created": {"type": "string", "format": "date-time",
                    "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$",
                    "description": "ISO 8601 / RFC 3339 time with zone, e.g. 2025-01-31T12:00:00Z"},
        "environment": _environment,
        "config": _config,
        "metrics": _metrics,
        "llama_bench": {"type": "array", "items": _llama_bench_entry},
        "bandwidth": _bandwidth,
        "compute": _compute,
        "timing_overhead": _timing_overhead,
        "sweep": _sweep,
        "cuda": _cuda,
        "memory": {"type": "object", "description": "peak RSS, weight/KV/scratch bytes, GPU peak",
                   "additionalProperties": {"type": ["integer", "null"], "minimum": 0}},
        "requests": {"type": "array", "items": _request},
        "tokens": {"type": "object",
                   "description": "optional raw per-token samples, e.g. decode_step_ns",
                   "additionalProperties": {"type": "array", "items": _num}},
        "profile": _profile,
        "interrupted": {"type": "boolean",
                        "description": "true: the run was stopped (Ctrl-C) before it finished; only the "
                                       "llama-bench tests that had finished are here"},
    },
    "additionalProperties": False,
}


def validate(result: Any) -> None:
    """Raise ValueError naming the JSON path (``$.environment.threads``) of the problem if ``result``
    does not match SCHEMA; return None if it does. Where several problems exist the most specific
    one is named (jsonschema's best_match)."""
    try:
        import jsonschema
        from jsonschema.exceptions import best_match
    except ImportError:  # pragma: no cover
        raise ImportError("validating a result needs jsonschema: pip install jsonschema") from None
    validator = jsonschema.Draft202012Validator(SCHEMA)
    error = best_match(validator.iter_errors(result))
    if error is not None:
        raise ValueError(f"result does not match the llmbench result schema at {error.json_path}: "
                         f"{error.message}")


def schema_json() -> str:
    """The JSON schema of a benchmark result file, as indented text."""
    return json.dumps(SCHEMA, indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(schema_json())
