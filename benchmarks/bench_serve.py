"""Servers under load: `llmbench serve` (continuous and static batching) against llama-cpp-python's
server, each driven by `llmbench bench --backend openai`'s client at several Poisson request rates.

    python benchmarks/bench_serve.py --model SmolLM2-135M-Instruct.Q4_1.gguf --threads 2 \\
        --llama-python /path/to/venv/bin/python --rates 1,4,inf --requests 16 -o serve.json --md serve.md

For each server in turn (``--servers``, default llmbench,llmbench-static,llamacpp): start it on a free
port (same GGUF, same threads, same context), wait for it, and for each rate run what ``llmbench bench
--backend openai`` runs (its OpenAIClient, gamma arrivals and serving metrics: ``--requests`` streamed
requests of ``--input-len`` random common words and ``--output-len`` tokens with ignore_eos, one
warmup run of ``--warmup`` requests (default as many), one measured run, greedy; with ``--range-ratio R``
each request's output length is drawn uniformly from [L(1 - R), L(1 + R)], vLLM's random dataset's rule,
the same lengths for every server), then stop it and read its peak RSS (VmHWM). Reported per server and
rate: request throughput, output tokens/s, TTFT and TPOT p50/p99, failed requests, peak RSS.

llama-cpp-python's server runs one request at a time (requests queue behind a lock; started with
``--interrupt_requests False`` so a new request does not cut a running stream short). It ignores
``ignore_eos``, so its requests may end early at EOS, and sends no usage block in streams, which
`llmbench bench` refuses to guess: here a stream without usage counts one token per text chunk (that
server streams one token a chunk) and its prompt tokens are counted with llmbench's tokenizer of the
same GGUF; output tokens/s counts what each request produced. It needs the package's server extra (uvicorn, fastapi, sse-starlette,
starlette-context, pydantic-settings): ``--llama-python`` names a Python that has them.

The client runs on the same machine as the server, and wall times on a shared machine are noisy:
compare servers within one run, and repeat before trusting a difference under about 20%.

``--dataset FILE`` sends real prompts instead (any file `llmbench bench --dataset` reads: MT-Bench's
question.jsonl, ShareGPT, JSONL; drawn with a fixed seed, the same for every server), through ``--api chat``
(the server applies the model's chat template) or completions. ``--until-eos`` lets each answer end where
the model ends it, ``--output-len`` then being only the cap: the output lengths are the model's own, long-tailed
as real traffic is, which is where a static batch waits longest for its last sequence. Greedy answers are the
same under both of llmbench's batching policies (its batches are invariant); llama.cpp's answers may differ in
length, so compare its output tokens/s, not its request throughput, with them. A chat stream without usage
(llama-cpp-python's) counts its prompt tokens on the raw prompt text, without the template's tokens.

``--overhead ROUNDS``: instead, the server's own cost at batch 1, TPOT of one streamed request through
`llmbench serve` against the same prompt on the engine in this process, alternated (overhead()).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peak_rss(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def server_command(kind: str, args: argparse.Namespace, port: int) -> list[str]:
    if kind.startswith("llmbench"):
        return [sys.executable, "-m", "llmbench", "serve", args.model, "--port", str(port), "--threads",
                str(args.threads), "--ctx", str(args.ctx), "--served-model-name", "m", "--max-batch",
                str(args.max_batch), "--batching", "static" if kind == "llmbench-static" else "continuous",
                "--batch-timeout", str(args.batch_timeout)]
    if kind == "llamacpp":
        return [args.llama_python, "-m", "llama_cpp.server", "--model", args.model, "--port", str(port),
                "--n_threads", str(args.threads), "--n_threads_batch", str(args.threads), "--n_ctx", str(args.ctx),
                "--model_alias", "m", "--interrupt_requests", "False", "--logits_all", "False"]
    raise ValueError(f"unknown server {kind!r} (llmbench, llmbench-static, llamacpp)")


def wait_ready(proc: subprocess.Popen, url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}")
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server at {url} did not answer within {timeout:g} s")


def _tokenizer(path: str):
    from llmbench.models.gguf import GGUFFile
    from llmbench.tokenizer import Tokenizer

    return Tokenizer.from_gguf(GGUFFile(path).metadata)


@functools.cache
def dataset_prompts(path: str) -> list:
    """The prompts of a ``--dataset`` file, read once per process (main checks it, every run draws from it)."""
    from llmbench.perf.dataset import load_prompts

    return load_prompts(path)


def output_lengths(n: int, length: int, ratio: float, rng) -> list[int]:
    """``n`` output lengths, uniform integers in [length (1 - ratio), length (1 + ratio)], at least 1
    (vLLM's `--random-range-ratio`); ratio 0 gives ``length`` every time."""
    if not 0 <= ratio < 1:
        raise ValueError(f"--range-ratio must be in [0, 1), got {ratio}")
    lo, hi = max(1, round(length * (1 - ratio))), max(1, round(length * (1 + ratio)))
    return [int(v) for v in rng.integers(lo, hi + 1, n)]


def bench(url: str, rate: str, args: argparse.Namespace) -> dict:
    """A warmup run of ``--warmup`` and a measured run of ``--requests`` streamed requests at ``rate``: what
    ``llmbench bench --backend openai`` runs (its client, arrivals and metrics), except that a stream
    without a usage block counts one output token per text chunk (llama-cpp-python's server sends no
    usage in streams, and streams one token a chunk)."""
    import asyncio

    import numpy as np

    from llmbench.backends.openai import OpenAIClient
    from llmbench.perf.arrivals import gamma_arrivals, run_requests
    from llmbench.perf.bench import synthetic_prompt
    from llmbench.perf.dataset import sample
    from llmbench.perf.metrics import RequestTiming, serving_metrics

    rng = np.random.default_rng(0)
    tok = _tokenizer(args.model)
    dataset = dataset_prompts(args.dataset) if args.dataset else None

    async def one_run(prompts: list[str], lengths: list[int]):
        async with OpenAIClient(url + "/v1", "m", api=args.api, max_tokens=args.output_len, temperature=0.0,
                                ignore_eos=not args.until_eos,
                                timeout=None, first_chunk_timeout=600, idle_timeout=120) as client:
            sched = gamma_arrivals(len(prompts), float(rate), 1.0, seed=0)

            def send(prompt, *, index, scheduled_ns):
                return client.send(prompt, index=index, scheduled_ns=scheduled_ns, max_tokens=lengths[index])
            return await run_requests(send, prompts, sched, None, progress=False)

    for n in (args.warmup, args.requests):   # the warmup run, then the measured one
        prompts = ([p.text for p in sample(dataset, n, rng)] if dataset
                   else [synthetic_prompt(rng, args.input_len) for _ in range(n)])
        out = asyncio.run(one_run(prompts, output_lengths(n, args.output_len, args.range_ratio, rng)))
    reqs, errors, lengths, counted = [], [], [], 0
    for r in out.results:
        if isinstance(r, BaseException) or r.error or r.first_token_ns is None:
            err = repr(r) if isinstance(r, BaseException) else (r.error or "no text")
            errors.append(err)
            reqs.append(RequestTiming(out.start_ns, None, [], out.end_ns, None, None, error=err))
            continue
        n_in, n_out = r.prompt_tokens, r.output_tokens
        if n_out is None:
            n_out, counted = len(r.token_ns), counted + 1
            n_in = len(tok.encode(prompts[r.index]))
        reqs.append(RequestTiming(r.arrival_ns, r.first_token_ns, r.token_ns, r.finish_ns, n_in, n_out))
        lengths.append((r.index, n_out))
    m = serving_metrics(reqs, [50, 99], None, duration_s=out.duration_s)
    return {"request_throughput": m["request_throughput"], "output_throughput": m["output_throughput"],
            "ttft_ms": {"p50": m["median_ttft_ms"], "p99": m["p99_ttft_ms"]},
            "tpot_ms": {"p50": m["median_tpot_ms"], "p99": m["p99_tpot_ms"]},
            "failed": len(errors), "errors": sorted(set(errors))[:3], "completed": m["completed"],
            "input_tokens": m["total_input_tokens"], "output_tokens": m["total_output_tokens"],
            "tokens_counted_by_chunk": counted,
            "output_lengths": [n for _, n in sorted(lengths)],   # of the completed requests, in request order
            "duration_s": out.duration_s}


@contextlib.contextmanager
def server(kind: str, args: argparse.Namespace):
    """A started server of `kind`: yields (url, process, its log file); stopped (SIGINT, then kill) after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile("w+")   # a file, not a pipe: llama.cpp's load log would fill a pipe and block it
    proc = subprocess.Popen(server_command(kind, args, port), stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        yield url, proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def run_server(kind: str, args: argparse.Namespace) -> dict:
    out: dict = {"server": kind, "rates": {}}
    with server(kind, args) as (url, proc, log):
        try:
            wait_ready(proc, url)
            for rate in args.rates.split(","):
                print(f"bench_serve: {kind} at {rate} requests/s", file=sys.stderr, flush=True)
                out["rates"][rate] = bench(url, rate, args)
            out["peak_rss"] = peak_rss(proc.pid)
        except RuntimeError as e:
            log.seek(0)
            out["error"] = str(e) + ": " + " ".join(log.read().split()[-40:])
    return out


def overhead(args: argparse.Namespace) -> dict:
    """The server's own cost at batch 1: TPOT of one streamed request through `llmbench serve` (as the
    client sees it: bench() with one request) against TPOT of the same prompt generated by the engine
    in this process (LLM.generate's token timestamps: (last - first) / (n - 1), vLLM's definition), the
    two alternated for ``--overhead`` rounds while the other side idles. Same model, threads, context,
    greedy, ``--output-len`` tokens with ignore_eos."""
    import statistics

    import numpy as np

    from llmbench import LLM, SamplingParams
    from llmbench.perf.bench import synthetic_prompt

    prompt = synthetic_prompt(np.random.default_rng(0), args.input_len)   # bench()'s first prompt
    one = argparse.Namespace(**{**vars(args), "requests": 1})
    llm = LLM(args.model, threads=args.threads, ctx=args.ctx)
    sp = SamplingParams(max_tokens=args.output_len, temperature=0.0, ignore_eos=True)
    engine_ms, http_ms = [], []
    with server("llmbench", args) as (url, proc, _log):
        wait_ready(proc, url)
        llm.generate([prompt], sp)   # warmup (bench() warms the server up itself)
        for r in range(args.overhead):
            print(f"bench_serve: overhead round {r + 1} of {args.overhead}", file=sys.stderr, flush=True)
            t = llm.generate([prompt], sp)[0].token_ns.astype(np.int64)
            engine_ms.append(float(t[-1] - t[0]) / (len(t) - 1) / 1e6)
            http_ms.append(bench(url, "inf", one)["tpot_ms"]["p50"])
    e, h = statistics.median(engine_ms), statistics.median(http_ms)
    return {"rounds": args.overhead, "engine_tpot_ms": engine_ms, "http_tpot_ms": http_ms,
            "median_engine_tpot_ms": e, "median_http_tpot_ms": h, "overhead": h / e - 1}


def pct(d: dict | None, p: str) -> str:
    v = (d or {}).get(p)
    return "—" if v is None else f"{v:.0f}"


def markdown(results: list[dict], args: argparse.Namespace, host: str) -> str:
    lines = ["| server | rate (req/s) | req/s | output tok/s | tokens / request | TTFT p50 / p99 (ms) | TPOT p50 / p99 (ms) "
             "| failed | peak RSS (MiB) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        if "error" in r and not r["rates"]:
            lines.append(f"| {r['server']} | — | {r['error']} | | | | | | |")
            continue
        rss = f"{r['peak_rss'] / 2**20:.0f}" if r.get("peak_rss") else "—"
        for rate, m in r["rates"].items():
            if "error" in m:
                lines.append(f"| {r['server']} | {rate} | {m['error']} | | | | | | {rss} |")
                continue
            per = f"{m['output_tokens'] / m['completed']:.0f}" if m.get("completed") else "—"
            lines.append(f"| {r['server']} | {rate} | {m['request_throughput']:.2f} | {m['output_throughput']:.1f} | {per} | "
                         f"{pct(m['ttft_ms'], 'p50')} / {pct(m['ttft_ms'], 'p99')} | "
                         f"{pct(m['tpot_ms'], 'p50')} / {pct(m['tpot_ms'], 'p99')} | {m['failed']} | {rss} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="GGUF file both servers load")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--max-batch", type=int, default=64, help="llmbench: sequences running at once")
    ap.add_argument("--batch-timeout", type=float, default=1.0, help="llmbench static: wait for a full batch (s)")
    ap.add_argument("--servers", default="llmbench,llmbench-static,llamacpp")
    ap.add_argument("--llama-python", default="python", help="a Python with llama-cpp-python[server]")
    ap.add_argument("--rates", default="1,4,inf", help="Poisson request rates, comma-separated (inf: all at once)")
    ap.add_argument("--requests", type=int, default=16, help="requests per rate (measured; one warmup run more)")
    ap.add_argument("--warmup", type=int, help="requests of the warmup run before each measured one (default: --requests)")
    ap.add_argument("--input-len", type=int, default=64, help="prompt words per request")
    ap.add_argument("--output-len", type=int, default=64, help="output tokens per request")
    ap.add_argument("--range-ratio", type=float, default=0.0,
                    help="output lengths uniform in [L(1-R), L(1+R)] (vLLM's --random-range-ratio; default 0: all L)")
    ap.add_argument("--dataset", help="prompts from this file (MT-Bench, ShareGPT, JSONL) instead of random words")
    ap.add_argument("--api", choices=("completions", "chat"), default="completions",
                    help="chat: the server applies the model's chat template")
    ap.add_argument("--until-eos", action="store_true",
                    help="answers end at the model's end of sequence; --output-len is only the cap")
    ap.add_argument("-o", "--output", help="write the JSON results here")
    ap.add_argument("--md", help="write the markdown table here")
    ap.add_argument("--overhead", type=int, metavar="ROUNDS",
                    help="instead: batch-1 TPOT through `llmbench serve` against the engine in process, ROUNDS rounds")
    args = ap.parse_args()
    if args.warmup is None:
        args.warmup = args.requests
    if args.requests < 1 or args.warmup < 1:
        ap.error("--requests and --warmup must be at least 1")
    if not 0 <= args.range_ratio < 1:
        ap.error(f"--range-ratio must be in [0, 1), got {args.range_ratio}")
    if args.dataset:
        try:
            dataset_prompts(args.dataset)
        except (OSError, ValueError) as e:
            ap.error(f"--dataset: {e}")
    from llmbench.info import cpu_model

    if args.overhead:
        o = overhead(args)
        print(f"batch 1, {args.output_len} tokens, {o['rounds']} rounds ({cpu_model()}): TPOT engine "
              f"{o['median_engine_tpot_ms']:.2f} ms, through HTTP {o['median_http_tpot_ms']:.2f} ms: "
              f"overhead {100 * o['overhead']:+.1f}%")
        if args.output:
            Path(args.output).write_text(json.dumps({"host": cpu_model(), "args": vars(args), "overhead": o}, indent=1))
        return 0

    results = [run_server(kind, args) for kind in args.servers.split(",")]
    host = cpu_model()
    table = markdown(results, args, host)
    print(table)
    doc = {"host": host, "args": vars(args), "results": results}
    if args.output:
        Path(args.output).write_text(json.dumps(doc, indent=1))
    if args.md:
        Path(args.md).write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
