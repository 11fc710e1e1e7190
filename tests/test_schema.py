"""The result schema: docs/result.schema.json matches SCHEMA, a full result passes, broken ones fail
with the JSON path of the problem."""

import json
from pathlib import Path

import pytest

from llmbench.perf.metrics import (
    RequestTiming,
    decode_bandwidth,
    llama_bench_stats,
    serving_metrics,
)
from llmbench.perf.schema import SCHEMA, schema_json, validate

jsonschema = pytest.importorskip("jsonschema")

DOC = Path(__file__).resolve().parents[1] / "docs" / "result.schema.json"
MS = 1_000_000


def example() -> dict:
    reqs = [RequestTiming(0, 100 * MS, [100 * MS, 120 * MS, 150 * MS], 151 * MS, 16, 3),
            RequestTiming(5 * MS, 60 * MS, [60 * MS], 61 * MS, 16, 1),
            RequestTiming(9 * MS, None, [], 30 * MS, 16, 0, error="HTTP 503")]
    pp = llama_bench_stats(512, [0.51, 0.50, 0.52])
    tg = llama_bench_stats(128, [2.01, 2.00, 1.98])
    return {
        "schema_version": 1,
        "llmbench_version": "0.1.0",
        "commit": "2c733cc",
        "created": "2025-06-01T12:00:00.123+00:00",
        "environment": {
            "model": {"file": "llama-125m-Q4_K_M.gguf", "name": "llama-125m", "dummy": True,
                      "size_bytes": 81_234_567, "sha256": "ab" * 32, "weight_types": ["Q4_K", "Q6_K", "F32"]},
            "kv_dtype": "f16", "backend": "cpu", "threads": 2, "cpu_model": "AMD EPYC 9654",
            "gpu_name": None, "build_flags": "-O3 -mavx2 -mfma", "cuda_graphs": None,
            "prefix_cache": False, "os": "Linux",
        },
        "config": {"warmup": 1, "repetitions": 3, "seed": 0, "scenario": "latency", "batch": 2,
                   "input_len": 16, "output_len": 3, "percentiles": [50, 90, 95, 99],
                   "goodput": {"ttft": 500, "tpot": 50}},
        "metrics": serving_metrics(reqs, slos={"ttft": 500, "tpot": 50}),
        "llama_bench": [{"test": "pp512", "n_prompt": 512, "n_gen": 0, "n_depth": 0, **pp},
                        {"test": "tg128", "n_prompt": 0, "n_gen": 128, "n_depth": 0, **tg}],
        "bandwidth": decode_bandwidth(80e6, [0.0021, 0.0020], measured_gbps=60.0),
        "memory": {"peak_rss_bytes": 200_000_000, "weights_bytes": 81_000_000, "gpu_peak_bytes": None},
        "requests": [r.to_dict() for r in reqs],
        "tokens": {"decode_step_ns": [2_100_000, 2_000_000]},
    }


def test_doc_file_is_generated_from_schema():
    assert DOC.read_text() == schema_json(), "regenerate: python -m llmbench.perf.schema > docs/result.schema.json"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_full_example_passes_after_a_json_round_trip():
    r = example()
    validate(r)
    validate(json.loads(json.dumps(r)))


def test_minimal_llama_bench_only_and_external_server_results_pass():
    r = example()
    del r["metrics"], r["requests"], r["bandwidth"], r["memory"], r["tokens"]
    validate(r)
    r = example()
    del r["llama_bench"]
    r["environment"].update(backend="openai", threads=None, cpu_model=None, build_flags=None, kv_dtype=None)
    r["environment"]["model"] = {"file": None, "name": "meta-llama/Llama-3.1-8B", "size_bytes": None,
                                 "sha256": None, "weight_types": None}
    validate(r)


def broken(path: str, value=None, delete: bool = False) -> dict:
    r = example()
    *parents, last = path.split(".")
    node = r
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    if delete:
        del node[last]
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return r


@pytest.mark.parametrize("path, value, delete, where", [
    ("environment.threads", 0, False, "$.environment.threads"),
    ("environment.threads", "2", False, "$.environment.threads"),
    ("environment.model.sha256", "xyz", False, "$.environment.model.sha256"),
    ("environment.cuda_graphs", None, True, "$.environment"),
    ("config.repetitions", 0, False, "$.config.repetitions"),
    ("config.goodput.itl", 5, False, "$.config.goodput"),
    ("metrics.mean_ttft_ms", "fast", False, "$.metrics.mean_ttft_ms"),
    ("metrics.mean_ttft_msec", 1.0, False, "$.metrics"),
    ("metrics.completed", -1, False, "$.metrics.completed"),
    ("requests.1.token_ns", [1.5], False, "$.requests[1].token_ns[0]"),
    ("requests.2.error", None, True, "$.requests[2]"),
    ("llama_bench.0.samples_ts", [], False, "$.llama_bench[0].samples_ts"),
    ("created", "yesterday", False, "$.created"),
    ("commit", "not-a-hash", False, "$.commit"),
    ("schema_version", 2, False, "$.schema_version"),
    ("surprise", 1, False, "$"),
])
def test_broken_results_fail_with_a_path(path, value, delete, where):
    with pytest.raises(ValueError) as e:
        validate(broken(path, value, delete))
    assert f" at {where}:" in str(e.value)


def test_neither_metrics_nor_llama_bench_fails():
    r = example()
    del r["metrics"], r["llama_bench"]
    with pytest.raises(ValueError, match=r"at \$:"):
        validate(r)
    with pytest.raises(ValueError, match=r"at \$:"):
        validate([])
