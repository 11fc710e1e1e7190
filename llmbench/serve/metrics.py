"""/metrics of `llmbench serve` in Prometheus' text format, with vLLM's metric names where the quantity
is the same (so dashboards and scrapers made for vLLM read it), ``llmbench:`` names where vLLM has none.

vllm:num_requests_running / _waiting     sequences running in the engine / submitted and not admitted
vllm:kv_cache_usage_perc                 fraction of KV blocks in use (0..1)
llmbench:kv_blocks_used / _free          KV blocks in use / free (of --kv-budget's)
vllm:prompt_tokens_total                 prompt tokens computed (a shared prefix's reused tokens are not)
vllm:generation_tokens_total             tokens generated
vllm:request_success_total{finished_reason}   sequences finished: length, stop, abort (a client gone)
llmbench:requests_rejected_total         requests answered 429 (queue full)
vllm:time_to_first_token_seconds         histogram: request received -> first token
vllm:time_per_output_token_seconds       histogram: (last token - first token) / (tokens - 1), per sequence
vllm:e2e_request_latency_seconds         histogram: request received -> last token
vllm:request_queue_time_seconds          histogram: request received -> admitted into the running batch
"""

from __future__ import annotations

from .worker import Histogram, Stats


def _labels(**kw: str) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kw.items()) + "}"


def _num(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def render(s: Stats, model: str) -> str:
    """The server's statistics in Prometheus's text format, labelled with the model name."""
    lab = _labels(model_name=model)
    out: list[str] = []

    def metric(name: str, kind: str, help: str, value: float) -> None:
        out.extend([f"# HELP {name} {help}", f"# TYPE {name} {kind}", f"{name}{lab} {_num(value)}"])

    def histogram(name: str, help: str, h: Histogram) -> None:
        out.extend([f"# HELP {name} {help}", f"# TYPE {name} histogram"])
        cum = 0
        for le, c in zip([*map(repr, h.buckets), "+Inf"], h.counts):
            cum += c
            out.append(f"{name}_bucket{_labels(model_name=model, le=le)} {cum}")
        out.append(f"{name}_sum{lab} {_num(h.sum)}")
        out.append(f"{name}_count{lab} {h.count}")

    used = s.kv_blocks - s.kv_free
    metric("vllm:num_requests_running", "gauge", "Sequences running in the engine.", s.running)
    metric("vllm:num_requests_waiting", "gauge", "Sequences waiting to be admitted.", s.waiting)
    metric("vllm:kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (1 = full).",
           used / s.kv_blocks if s.kv_blocks else 0.0)
    metric("llmbench:kv_blocks_used", "gauge", "KV cache blocks in use.", used)
    metric("llmbench:kv_blocks_free", "gauge", "KV cache blocks free.", s.kv_free)
    metric("vllm:prompt_tokens_total", "counter", "Prompt tokens computed.", s.prompt_tokens)
    metric("vllm:generation_tokens_total", "counter", "Tokens generated.", s.generation_tokens)
    name = "vllm:request_success_total"
    out.extend([f"# HELP {name} Sequences finished, by finish reason.", f"# TYPE {name} counter"])
    for reason in sorted({"length", "stop", "abort", *s.finished}):
        out.append(f"{name}{_labels(model_name=model, finished_reason=reason)} {s.finished[reason]}")
    metric("llmbench:requests_rejected_total", "counter", "Requests refused with 429 (queue full).", s.rejected)
    histogram("vllm:time_to_first_token_seconds", "Time from request to first token.", s.ttft)
    histogram("vllm:time_per_output_token_seconds", "Mean time between output tokens of a sequence.", s.tpot)
    histogram("vllm:e2e_request_latency_seconds", "Time from request to last token.", s.e2e)
    histogram("vllm:request_queue_time_seconds", "Time from request to admission.", s.queue)
    return "\n".join(out) + "\n"


def parse(text: str) -> dict[str, float]:
    """Samples of a Prometheus text page, ``name{labels}`` -> value (for tests and scripts)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out
