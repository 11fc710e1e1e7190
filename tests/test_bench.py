"""`llmbench bench` end to end on a tiny dummy model: a schema-valid result whose numbers are
consistent with each other (no timing claims)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import llmbench
from llmbench import cli
from llmbench.perf import bench as pb
from llmbench.perf import local
from llmbench.perf.schema import validate


def test_bench_command_writes_a_valid_result(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "llmbench", "bench", "--model", "tiny:Q8_0", "--threads", "1", "--pp", "32",
           "--tg", "8", "--batch", "3", "--input-len", "8", "--output-len", "5", "--reps", "2", "--goodput",
           "ttft:100000", "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "pp32 tokens/s" in r.stdout and "decode bandwidth" in r.stdout and "pp32 compute" in r.stdout
    res = json.loads(out.read_text())
    validate(res)
    assert [t["test"] for t in res["llama_bench"]] == ["pp32", "tg8"]
    assert len(res["llama_bench"][0]["samples_ts"]) == 2
    m = res["metrics"]
    assert m["completed"] == 6 and m["failed"] == 0 and m["total_output_tokens"] == 30
    assert m["request_goodput"] == m["request_throughput"]  # a 100 s TTFT SLO holds for all
    assert 0 < m["mean_ttft_ms"] <= m["mean_e2el_ms"]
    assert res["environment"]["model"]["weight_types"] == ["F32", "Q8_0"]
    assert res["environment"]["solo_steps"] == 0 and "contended" not in r.stdout   # one thread is never moved
    assert 0 < res["bandwidth"]["fraction"] and res["bandwidth"]["steps"] == 2 * 7
    assert len(res["requests"]) == 6 and all(len(q["token_ns"]) == 5 for q in res["requests"])
    # pp32 against the arithmetic peaks: tiny's layer matrices (2 x 786432 weights, all Q8_0: 8-bit dots)
    # for 32 tokens plus the output row of the last one; causal attention (2 layers x 4 heads x 64) in FP32
    c = res["compute"]
    assert c["n_prompt"] == 32 and c["instructions"].keys() == {"f32", "int8"}
    assert c["ops"] == {"int8": 2 * (2 * 786432 * 32 + 1024 * 256), "f32": 2 * 4 * 4 * 64 * 32 * 33 / 2}
    assert abs(c["seconds"] - sum(32 / v for v in res["llama_bench"][0]["samples_ts"]) / 2) < 1e-12
    assert c["min_seconds"] == sum(c["ops"][k] / (c["peaks_gops"][k] * 1e9) for k in c["ops"])
    assert abs(c["fraction"] - c["min_seconds"] / c["seconds"]) < 1e-12


def test_bench_with_bf16_pairs(tmp_path):
    """--activations bf16: recorded in the environment; tiny's float matrices (2 x 786432 layer weights for
    32 tokens, the 1024 x 256 output row) counted on the BF16 pair peak where the CPU has one."""
    from llmbench import _core

    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "llmbench", "bench", "--model", "tiny:F16", "--activations", "bf16", "--threads", "1",
           "--pp", "32", "--tg", "4", "--batch", "0", "--reps", "1", "-o", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    validate(res)
    assert res["environment"]["activations"] == "bf16" and re.search(r"activations\s+bf16", r.stdout)
    if "avx512bf16" in _core.simd_info()["cpu_features"].split() and _core.simd_info()["active"] == "avx512":
        c = res["compute"]
        assert c["instructions"]["bf16"] == "vdpbf16ps zmm"
        assert c["ops"] == {"bf16": 2 * (2 * 786432 * 32 + 1024 * 256), "f32": 2 * 4 * 4 * 64 * 32 * 33 / 2}
    else:
        assert res.get("compute") is None
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--backend", "openai", "--base-url",
                        "http://127.0.0.1:9/v1", "--model", "m", "--activations", "bf16"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not to an external server" in r.stderr


def test_bench_rejects_bad_arguments():
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--model", "tiny:F32", "--reps", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--reps must be >= 1" in r.stderr
    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--model", "no-such-model"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "not a dummy preset" in r.stderr


def test_the_cli_defaults_are_bench_configs_and_errors_name_options():
    """`llmbench bench` with no options is BenchConfig(); a bad setting is named by its field in Python
    and by its option on the command line."""
    cfg, axes = cli._bench_config(cli.build_parser().parse_args(["bench"]))
    assert cfg == pb.BenchConfig() and axes == {}
    with pytest.raises(pb.ConfigError, match=r"^repetitions must be >= 1 and warmup >= 0$") as bad:
        pb.BenchConfig(repetitions=0).check()
    assert bad.value.fields == ("repetitions", "warmup")
    with pytest.raises(pb.ConfigError, match=r"^backend openai needs base_url"):
        pb.BenchConfig(backend="openai").check()
    for args, message in ((["--reps", "0"], "--reps must be >= 1 and --warmup >= 0"),
                          (["--backend", "openai"], "--backend openai needs --base-url"),
                          (["--idle-timeout", "0"], "--idle-timeout must be > 0 seconds"),
                          (["--max-failed", "x"], "--max-failed 'x': give a count")):
        with pytest.raises(ValueError, match=message) as bad:
            cli.cmd_bench(cli.build_parser().parse_args(["bench", "--model", "tiny:Q8_0", *args]))
        assert not isinstance(bad.value, pb.ConfigError)


def test_bench_against_a_local_openai_server(tmp_path):
    """--backend openai against a real local SSE server: token counts come from its usage report.
    (Per-request failures are covered by tests/test_openai_backend.py.)"""
    from sse_server import SSEServer

    out = tmp_path / "r.json"
    with SSEServer(ttft_s=0.02, itl_s=0.002) as srv:
        cmd = [sys.executable, "-m", "llmbench", "bench", "--backend", "openai", "--base-url", srv.base_url,
               "--model", "test-model", "--batch", "4", "--input-len", "6", "--output-len", "5", "--reps", "2",
               "--warmup", "0", "-o", str(out)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    validate(res)
    m = res["metrics"]
    assert m["completed"] == 8 and m["failed"] == 0
    assert m["total_input_tokens"] == 8 * (1000 + 6)  # the server's usage, not a guess
    assert m["total_output_tokens"] == 8 * 5 and m["mean_ttft_ms"] >= 20
    assert res["environment"]["backend"] == "openai"


def _openai_bench(base_url: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmbench", "bench", "--backend", "openai", "--base-url", base_url,
                           "--model", "test-model", "--output-len", "4", "--warmup", "0", *args],
                          capture_output=True, text=True, timeout=timeout)


def _prompts(path, *texts: str) -> str:
    path.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in texts))
    return str(path)


def test_failed_requests_are_reported_by_reason_and_fail_the_run(tmp_path):
    """Requests the server fails (500, a dropped stream, a malformed chunk) are counted per reason on
    stderr, and the exit status is 1 unless --max-failed allows that many."""
    from sse_server import SSEServer

    data = _prompts(tmp_path / "p.jsonl", "http500 a", "drop b", "malformed c", "ok d")
    out = tmp_path / "r.json"
    with SSEServer(ttft_s=0.01, itl_s=0.001) as srv:
        r = _openai_bench(srv.base_url, "--dataset", data, "--batch", "4", "--reps", "2", "-o", str(out))
        assert r.returncode == 1, r.stderr
        assert "6 of 8 measured requests failed (--max-failed 0 allows 0)" in r.stderr
        assert re.search(r"2 x HTTP 500 Internal Server Error: boom", r.stderr)
        assert re.search(r"2 x connection dropped mid-stream after 3 text chunks", r.stderr)
        assert re.search(r"2 x malformed SSE event", r.stderr)
        assert "2 / 6" in r.stdout   # the table still shows the run, and the result is saved
        assert json.loads(out.read_text())["metrics"]["failed"] == 6
        r = _openai_bench(srv.base_url, "--dataset", data, "--batch", "4", "--reps", "2", "--max-failed", "75%")
        assert r.returncode == 0, r.stderr
        r = _openai_bench(srv.base_url, "--dataset", data, "--batch", "4", "--reps", "2", "--max-failed", "5", "--json")
        assert r.returncode == 1 and json.loads(r.stdout)["metrics"]["failed"] == 6
    r = _openai_bench(srv.base_url, "--batch", "2", "--reps", "1")   # the server is gone: refused
    assert r.returncode == 1 and re.search(r"2 x cannot connect to .*is the server running", r.stderr), r.stderr


def test_a_stalled_server_is_left_within_the_timeouts(tmp_path):
    """A server that never answers stops the run in its warmup, with the reason, within about the
    first-chunk timeout; one that stalls mid-stream fails its requests at the idle timeout."""
    import time

    from sse_server import SSEServer

    with SSEServer(ttft_s=0.01, itl_s=0.001, hang_s=60) as srv:
        t0 = time.monotonic()
        r = _openai_bench(srv.base_url, "--dataset", _prompts(tmp_path / "h.jsonl", "hang a"), "--batch", "2",
                          "--warmup", "1", "--first-chunk-timeout", "1")
        assert time.monotonic() - t0 < 20   # a Python start, one warmup and 1 s: not 60 s, not 120 s
        assert r.returncode == 2 and "2 warmup requests" in r.stderr and "first-chunk timeout" in r.stderr, r.stderr
        assert len(srv.requests) == 2   # nothing measured after the warmup failed
        t0 = time.monotonic()
        r = _openai_bench(srv.base_url, "--dataset", _prompts(tmp_path / "s.jsonl", "stall a"), "--batch", "2",
                          "--reps", "1", "--idle-timeout", "1")
        assert time.monotonic() - t0 < 20
        assert r.returncode == 1 and "2 x the stream stalled: nothing for 1 s after 2 text chunks" in r.stderr, \
            r.stderr


def _llmbench(*args: str, timeout: int = 120, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmbench", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def test_arguments_are_checked_before_measuring(tmp_path):
    """-o into a missing folder, out-of-range percentiles and a sweep point whose KV cache cannot fit
    are refused before any model is loaded or point measured; no traceback."""
    r = _llmbench("bench", "--model", "tiny:Q8_0", "-o", str(tmp_path / "missing" / "r.json"))
    _one_line_error(r, "-o .* does not exist")
    assert r.stdout == ""
    _one_line_error(_llmbench("bench", "--model", "tiny:Q8_0", "--percentiles", "50,150"), "--percentiles 50,150")
    _one_line_error(_llmbench("bench", "--model", "tiny:Q8_0", "--percentiles", "50,x"), "--percentiles '50,x'")
    out = tmp_path / "sweep"
    r = _llmbench("bench", "--model", "tiny:Q8_0", "--input-len", "1..100000000", "--out-dir", str(out))
    _one_line_error(r, r"sweep point input_len \d+ .* GiB of KV cache")
    assert not (out / "points.jsonl").exists()   # nothing was started


def _one_line_error(r: subprocess.CompletedProcess, pattern: str) -> None:
    """The command failed with exit status 2 and one line on stderr that matches ``pattern``."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmbench ") and re.search(pattern, lines[0]), r.stderr


def test_cli_errors_are_one_line_with_exit_status_2(tmp_path):
    """Bad models, empty or malformed option values, impossible sizes and bad seeds: one line, exit 2;
    --debug shows the traceback instead."""
    from models import rewritten

    from llmbench import dummy_model

    bad = rewritten(dummy_model("tiny", "Q8_0"), tmp_path / "heads0.gguf", {"llama.attention.head_count": 0})
    _one_line_error(_llmbench("bench", "--model", str(bad), "--pp", "8", "--tg", "0", "--batch", "0"),
                    "heads0.gguf: metadata 'llama.attention.head_count' is 0")
    for option, pattern in (("--model", "--model: no value given"), ("--batch", "--batch: no value given"),
                            ("--kv-dtype", "--kv-dtype: no value given"), ("--threads", "--threads: no value")):
        _one_line_error(_llmbench("bench", option, ""), pattern)
    _one_line_error(_llmbench("bench", "--batch", "1..x"), "--batch '1..x': a range is two whole numbers")
    _one_line_error(_llmbench("bench", "--model", "tiny:Q8_0", "--pp", "0", "--tg", "0", "--input-len", "100000000"),
                    r"--input-len 100000000, --output-len 128: a sequence of \d+ tokens needs .* GiB of KV cache")
    _one_line_error(_llmbench("dummy", "--seed", "-5", "-o", str(tmp_path / "d.gguf")),
                    "seed -5: a dummy model's seed is a whole number from 0")
    r = _llmbench("bench", "--batch", "1..x", "--debug")
    assert r.returncode == 1 and "Traceback" in r.stderr and "ValueError: --batch '1..x'" in r.stderr


def test_ctrl_c_during_a_single_run_ends_it_in_one_line(tmp_path):
    """Ctrl-C while a request is in flight: status 130 and one line saying what was kept, no traceback."""
    import signal
    import time

    from sse_server import SSEServer

    with SSEServer(hang_s=60) as srv:   # a prompt starting with "hang" makes the server hold the request
        p = subprocess.Popen([sys.executable, "-m", "llmbench", "bench", "--backend", "openai", "--base-url",
                              srv.base_url, "--model", "m", "--dataset", _prompts(tmp_path / "p.jsonl", "hang on"),
                              "--batch", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not srv.requests and time.monotonic() < deadline:   # wait until the warmup request is held
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("llmbench bench: interrupted before any test finished")


def test_ctrl_c_after_a_test_keeps_it(tmp_path, monkeypatch, capsys):
    """Ctrl-C once a llama-bench test has finished: run() raises BenchInterrupted with those tests in a
    schema-valid result marked interrupted; the CLI saves it where -o says and exits 130."""
    def stop_at_tg(msg: str) -> None:   # progress names each test as it starts: interrupt the second one
        if msg.startswith("tg"):
            raise KeyboardInterrupt

    cfg = pb.BenchConfig(model=str(llmbench.dummy_model("tiny", "Q4_0")), pp=16, tg=8, repetitions=1, warmup=0,
                         batch=0, threads=1)
    with pytest.raises(pb.BenchInterrupted) as stop:
        pb.run(cfg, stop_at_tg)
    part = stop.value.result
    validate(part)
    assert part["interrupted"] is True and [t["test"] for t in part["llama_bench"]] == ["pp16"]
    assert "metrics" not in part and "bandwidth" not in part
    with pytest.raises(KeyboardInterrupt) as early:   # nothing finished yet: a plain Ctrl-C
        pb.run(cfg, lambda msg: (_ for _ in ()).throw(KeyboardInterrupt) if msg.startswith("pp") else None)
    assert not isinstance(early.value, pb.BenchInterrupted)

    monkeypatch.setattr(local, "run", lambda cfg, progress: (_ for _ in ()).throw(pb.BenchInterrupted(part)))
    out = tmp_path / "r.json"
    rc = cli.main(["bench", "--model", cfg.model, "--pp", "16", "--tg", "8", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 130 and json.loads(out.read_text()) == part, err
    assert "interrupted; what finished (pp16) is saved in " + str(out) in err


def test_threads_context_and_nan_weights_are_not_silent(tmp_path):
    """--threads past the CPUs is clamped, a context past the trained one warned about, NaN weights
    warned about in a benchmark: each in one line on stderr and recorded in the environment."""
    import numpy as np
    from models import rewritten

    from llmbench import dummy_model
    from llmbench.llm import _cpus

    src = dummy_model("tiny", "Q8_0")
    short = rewritten(src, tmp_path / "short.gguf", {"llama.context_length": 16})
    nan = rewritten(src, tmp_path / "nan.gguf", tensors={"output_norm.weight": (np.full(256, np.nan, np.float32), 0)})
    small = ["--pp", "32", "--tg", "2", "--batch", "1", "--input-len", "4", "--output-len", "2", "--reps", "1"]
    # pp32 sizes the context: 32 + 8 tokens
    for model, threads, warning, key, want in (
            ("tiny:Q8_0", "5000", f"--threads 5000 is more than the {_cpus()} CPUs", "threads", _cpus()),
            (str(short), "1", "ctx=40 is past short.gguf's trained context of 16 tokens", "past_trained_context",
             True),
            (str(nan), "1", "nan.gguf: generated tokens have NaN or infinite log-probabilities", "non_finite_tokens",
             2 * (1 + 1 + 1 + 1))):   # warmup and timed runs of tg2 and of the latency run, 2 tokens each
        out = tmp_path / "r.json"
        r = _llmbench("bench", "--model", model, "--threads", threads, *small, "-o", str(out), timeout=180)
        assert r.returncode == 0, r.stderr
        assert f"llmbench: warning: {warning}" in r.stderr and r.stderr.count(warning) == 1, r.stderr
        assert json.loads(out.read_text())["environment"][key] == want


def test_non_finite_log_likelihoods_and_thousands_of_threads_are_errors(tmp_path):
    import numpy as np
    import pytest
    from models import rewritten

    from llmbench import LLM, dummy_model
    from llmbench.llm import NonFiniteError

    nan = rewritten(dummy_model("tiny", "Q8_0"), tmp_path / "nan.gguf",
                    tensors={"output_norm.weight": (np.full(256, np.nan, np.float32), 0)})
    llm = LLM(nan, threads=1, ctx=64, max_seqs=2)
    with pytest.raises(ValueError, match="threads=5000: this process may use"):
        LLM(nan, threads=5000, ctx=64, max_seqs=2)
    with pytest.raises(NonFiniteError, match="nan.gguf: the log-probability of request 0 is nan"):
        llm.score_tokens([([1, 2, 3, 4], 2)])
