"""The settings of one `llmbench bench` run (BenchConfig), their checks, and how many failed requests
they allow. The command line builds its options and their defaults from these; a bad setting is a
ConfigError naming the field, which the CLI names by its option."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

from ..llm import ACTIVATIONS


class ConfigError(ValueError):
    """A bad BenchConfig setting. The message names settings by their field names; ``fields`` lists
    them, so that a front end can name its own spelling instead (the CLI writes --reps for repetitions)."""

    def __init__(self, message: str, *fields: str):
        super().__init__(message)
        self.fields = fields


@dataclass
class BenchConfig:
    """The settings of one benchmark: the model and engine, the llama-bench tests (pp, tg at each depth),
    the latency scenario (batch, lengths, dataset), repetitions, and for backend "openai" the server,
    request rate and timeouts. `llmbench bench` takes its option defaults from BenchConfig()."""

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
    api: Literal["completions", "chat"] = "completions"
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

