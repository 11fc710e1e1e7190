"""`llmbench serve` against live servers on stories260K: the openai client and raw HTTP on the same
answers LLM gives in-process (completions, chat, streaming, echo log-probabilities, n > 1, stop strings,
seeds), concurrent clients getting their tokens as alone, a client's disconnect freeing its KV blocks,
429 past the queue, 401 without the key, 400s naming the field, the drain on SIGTERM, and llmbench's
eval adapter and `llmbench bench --backend openai` end to end.

Servers run in a thread of this process (uvicorn on a socket bound to port 0), one LLM each; the
SIGTERM test starts `llmbench serve` as a process. ``step_delay`` slows a server's engine so a request
is still running when the test looks at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

from llmbench import LLM  # noqa: E402
from llmbench.llm import SamplingParams  # noqa: E402
from llmbench.serve import ServerConfig, create_app  # noqa: E402
from llmbench.serve.metrics import parse as parse_metrics  # noqa: E402

NAME = "stories"
TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}" \
           "assistant:{% endif %}"
PROMPTS = ["Once upon a time", "The cat sat on", "Lily and Ben went to the park", "One day, a little bird"]


@contextlib.contextmanager
def serving(path: Path, **cfg):
    """A live server on a fresh LLM (one thread) in this process; yields (base_url, Server)."""
    llm = LLM(path, threads=1, max_seqs=cfg.get("max_batch", 64))
    server = create_app(llm, ServerConfig(model_name=NAME, chat_template=TEMPLATE, **cfg))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(server.app, log_level="error", lifespan="on"))
    t = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        assert t.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", server
    finally:
        uv.should_exit = True
        t.join(30)
        sock.close()


@pytest.fixture(scope="module")
def llm(stories_path):
    return LLM(stories_path, threads=1)


@pytest.fixture(scope="module")
def live(stories_path):
    with serving(stories_path) as (url, server):
        yield url, server


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live[0], api_key="none", max_retries=0)


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(url.removesuffix("/v1") + "/metrics").text
    return {k.split("{")[0] + ("{" + k.split(",")[-1] if "finished_reason" in k else ""): v
            for k, v in parse_metrics(text).items()}


def sse(lines) -> list:
    """The JSON events of a server-sent event stream (up to [DONE], which must come)."""
    out = []
    for line in lines:
        if line.startswith("data: "):
            if line == "data: [DONE]":
                return out
            out.append(json.loads(line[6:]))
    raise AssertionError("the stream ended without [DONE]")


# ---- answers equal the engine's ----

def test_completion_equals_generate(client, llm):
    r = client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=24, temperature=0)
    ref = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=24))[0]
    assert r.choices[0].text == ref.text and r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ref.prompt_token_ids), 24)
    assert r.model == NAME and r.object == "text_completion"
    ids = llm.tokenize(PROMPTS[1])   # a prompt of token ids
    r = client.completions.create(model=NAME, prompt=ids, max_tokens=8, temperature=0)
    assert r.choices[0].text == llm.generate(ids, SamplingParams(temperature=0, max_tokens=8))[0].text


def test_prompt_list_n_and_seeds(client, llm):
    kw = dict(model=NAME, prompt=PROMPTS[:2], n=3, max_tokens=12, temperature=1.0, seed=7, logprobs=0)
    r = client.completions.create(**kw)
    assert [c.index for c in r.choices] == list(range(6))
    assert [c.text for c in client.completions.create(**kw).choices] == [c.text for c in r.choices]  # seeds
    for k, p in enumerate(PROMPTS[:2]):                                                # choice 0 keeps the seed
        ref = llm.generate(p, SamplingParams(temperature=1.0, max_tokens=12, seed=7))[0]
        assert r.choices[3 * k].text == ref.text
        assert r.choices[3 * k].logprobs.token_logprobs == pytest.approx(ref.logprobs, abs=0)
        assert len({c.text for c in r.choices[3 * k: 3 * k + 3]}) == 3                 # n choices differ
    assert r.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in r.choices)
    assert r.usage.prompt_tokens == sum(len(llm.tokenize(p)) for p in PROMPTS[:2])


def test_stop_strings_and_streaming(client, llm):
    ref = llm.generate(PROMPTS[0], SamplingParams(temperature=0, max_tokens=60, stop=[" girl", "park"]))[0]
    assert ref.finish_reason == "stop"
    r = client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=60, temperature=0, stop=[" girl", "park"])
    assert r.choices[0].text == ref.text and r.choices[0].finish_reason == "stop"
    stream = client.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=60, temperature=0,
                                       stop=[" girl", "park"], stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == ref.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(ref.token_ids)
    plain = client.completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=40, temperature=0, stream=True)
    text = "".join(c.choices[0].text for c in plain)
    assert text == llm.generate(PROMPTS[2], SamplingParams(temperature=0, max_tokens=40))[0].text


def test_generated_logprobs(client, llm):
    ref = llm.generate(PROMPTS[3], SamplingParams(temperature=0, max_tokens=10, logprobs=3))[0]
    r = client.completions.create(model=NAME, prompt=PROMPTS[3], max_tokens=10, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert lp.token_logprobs == pytest.approx(ref.logprobs, abs=0) and "".join(lp.tokens).strip() == ref.text.strip()
    for top, t_ref, chosen in zip(lp.top_logprobs, ref.top_logprobs, ref.logprobs):
        assert sorted(top.values(), reverse=True)[:3] == pytest.approx(sorted(t_ref.values(), reverse=True))
        assert max(top.values()) == chosen    # greedy: the chosen token is the top one


def test_echo_logprobs_equal_loglikelihood(live, llm):
    pairs = [("Once upon a time", " there was"), ("The cat sat on", " the mat."), ("Lily", " and Ben"),
             ("One day, a little bird", " flew away")]
    want = llm.loglikelihood(pairs)
    for (ctx, cont), (lp_ref, greedy_ref) in zip(pairs, want):
        obj = httpx.post(live[0] + "/completions", json={"model": NAME, "prompt": ctx + cont, "max_tokens": 0,
                                                         "echo": True, "logprobs": 1, "temperature": 0}).json()
        c = obj["choices"][0]
        lp = c["logprobs"]
        assert c["text"] == ctx + cont and "".join(lp["tokens"]) == ctx + cont
        assert lp["token_logprobs"][0] is None and obj["usage"]["completion_tokens"] == 0
        n = len(llm.tokenize(ctx + cont)) - len(llm.tokenize(ctx))
        got = sum(lp["token_logprobs"][-n:])
        assert got == pytest.approx(lp_ref, rel=1e-6, abs=1e-7)
        greedy = all(x >= max(t.values()) for x, t in zip(lp["token_logprobs"][-n:], lp["top_logprobs"][-n:]))
        assert greedy == greedy_ref
    from llmbench.eval.api import Loglikelihood
    from llmbench.eval.openai_adapter import OpenAIAdapter

    got = OpenAIAdapter(live[0], NAME).loglikelihood([Loglikelihood(c, x) for c, x in pairs])
    assert [a.logprob for a in got] == pytest.approx([w[0] for w in want], rel=1e-6, abs=1e-7)
    assert [a.greedy for a in got] == [w[1] for w in want]


def test_chat(client, llm):
    msgs = [{"role": "user", "content": "Tell me a story"}]
    ref = llm.chat(msgs, SamplingParams(temperature=0, max_tokens=20), chat_template=TEMPLATE)[0]
    r = client.chat.completions.create(model=NAME, messages=msgs, max_tokens=20, temperature=0)
    assert r.choices[0].message.content == ref.text and r.choices[0].message.role == "assistant"
    assert r.usage.prompt_tokens == len(ref.prompt_token_ids) and r.object == "chat.completion"
    chunks = list(client.chat.completions.create(model=NAME, messages=msgs, max_tokens=20, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}, logprobs=True,
                                                 top_logprobs=2))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.text
    lps = [x.logprob for c in chunks if c.choices and c.choices[0].logprobs for x in c.choices[0].logprobs.content]
    assert lps == pytest.approx(ref.logprobs, abs=0) and chunks[-1].usage.completion_tokens == 20


# ---- concurrency ----

def test_concurrent_clients_get_their_tokens_alone(live):
    url = live[0]
    bodies = [{"model": NAME, "prompt": p, "max_tokens": 30 + 5 * i, "temperature": 0.0 if i % 2 else 0.9,
               "seed": i, "stream": i % 2 == 0} for i, p in enumerate(PROMPTS * 2)]

    async def one(c: httpx.AsyncClient, body: dict) -> str:
        if not body["stream"]:
            return (await c.post(url + "/completions", json=body)).json()["choices"][0]["text"]
        async with c.stream("POST", url + "/completions", json=body) as r:
            return "".join(e["choices"][0]["text"] for e in sse([x async for x in r.aiter_lines()]) if e["choices"])

    async def run(concurrent: bool) -> list[str]:
        async with httpx.AsyncClient(timeout=60) as c:
            if concurrent:
                return list(await asyncio.gather(*(one(c, b) for b in bodies)))
            return [await one(c, b) for b in bodies]

    alone = asyncio.run(run(False))
    assert asyncio.run(run(True)) == alone


def test_static_batching(stories_path, live):
    bodies = [{"model": NAME, "prompt": p, "max_tokens": 16, "temperature": 0} for p in PROMPTS]

    async def run(url: str) -> list[str]:
        async with httpx.AsyncClient(timeout=60) as c:
            rs = await asyncio.gather(*(c.post(url + "/completions", json=b) for b in bodies))
            return [r.json()["choices"][0]["text"] for r in rs]

    with serving(stories_path, batching="static", max_batch=3, batch_timeout=0.3, step_delay=0.005) as (url, _):
        assert asyncio.run(run(url)) == asyncio.run(run(live[0]))   # the same tokens as continuous batching
        # a request arriving while a batch runs is not admitted into it (continuous batching would: 1 < 3)
        long = {"model": NAME, "prompt": PROMPTS[0], "max_tokens": 1000, "ignore_eos": True, "stream": True}
        with httpx.Client(timeout=30) as c:
            with c.stream("POST", url + "/completions", json=long) as r:
                lines = r.iter_lines()
                while not next(lines).startswith("data: "):
                    pass
                late = threading.Thread(target=lambda: bodies.append(
                    httpx.post(url + "/completions", json={**bodies[0], "max_tokens": 4}, timeout=30).json()))
                late.start()
                deadline = time.monotonic() + 10
                while metrics(url)["vllm:num_requests_waiting"] < 1 and time.monotonic() < deadline:
                    time.sleep(0.01)
                next(lines)   # the batch still runs, tokens still come
                m = metrics(url)
                assert (m["vllm:num_requests_running"], m["vllm:num_requests_waiting"]) == (1, 1)
            late.join(30)   # the long request is gone: the late one runs once its batch times out
        assert bodies[-1]["choices"][0]["finish_reason"] == "length" and bodies[-1]["usage"]["completion_tokens"] == 4


# ---- under pressure ----

def test_disconnect_frees_the_blocks(stories_path):
    with serving(stories_path, step_delay=0.01) as (url, server):
        with httpx.Client(timeout=30) as c:
            with c.stream("POST", url + "/completions", json={"model": NAME, "prompt": PROMPTS[0], "max_tokens": 1000,
                                                               "stream": True, "ignore_eos": True}) as r:
                lines = r.iter_lines()
                while not next(lines).startswith("data: "):
                    pass
                m = metrics(url)
                assert m["vllm:num_requests_running"] == 1 and m["llmbench:kv_blocks_used"] > 0
        deadline = time.monotonic() + 10
        while (m := metrics(url))["vllm:num_requests_running"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert m["vllm:num_requests_running"] == 0 and m["llmbench:kv_blocks_used"] == 0
        assert m["vllm:request_success_total{finished_reason=\"abort\"}"] == 1
        assert m["vllm:generation_tokens_total"] < 1000


def test_full_queue_answers_429(stories_path):
    with serving(stories_path, max_batch=1, max_waiting=1, step_delay=0.01) as (url, server):
        body = {"model": NAME, "prompt": PROMPTS[0], "max_tokens": 1000, "ignore_eos": True, "stream": True}
        with httpx.Client(timeout=30) as c, c.stream("POST", url + "/completions", json=body) as first:
            lines = first.iter_lines()
            while not next(lines).startswith("data: "):
                pass
            r = c.post(url + "/completions", json={**body, "n": 2, "stream": False})
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            err = r.json()["error"]
            assert err["type"] == "rate_limit_error" and "--max-waiting" in err["message"]
            with pytest.raises(openai.RateLimitError):
                openai.OpenAI(base_url=url, api_key="x", max_retries=0).completions.create(
                    model=NAME, prompt="a", max_tokens=1, n=2)
            assert metrics(url)["llmbench:requests_rejected_total"] == 2


def test_api_key(stories_path):
    with serving(stories_path, api_key="sekrit") as (url, server):
        root = url.removesuffix("/v1")
        assert httpx.get(root + "/health").status_code == 200
        for path in ("/v1/models", "/metrics"):
            r = httpx.get(root + path)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(root + "/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(root + "/v1/models", headers={"Authorization": "Bearer sekrit"}).json()["data"][0]["id"] == NAME
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        ok = openai.OpenAI(base_url=url, api_key="sekrit", max_retries=0)
        assert ok.completions.create(model=NAME, prompt="a", max_tokens=2).usage.completion_tokens == 2


@pytest.mark.parametrize("body,status,field", [
    (b"{not json", 400, "JSON"),
    ([1, 2], 400, "JSON object"),
    ({"model": NAME}, 400, "prompt"),
    ({"model": NAME, "prompt": "a", "temperature": "hot"}, 400, "temperature"),
    ({"model": NAME, "prompt": "a", "max_tokens": -1}, 400, "max_tokens"),
    ({"model": NAME, "prompt": "a", "n": 0}, 400, "n"),
    ({"model": NAME, "prompt": "a", "top_p": 0}, 400, "top_p"),
    ({"model": NAME, "prompt": "a", "logprobs": 21}, 400, "logprobs"),
    ({"model": NAME, "prompt": "a", "stop": [1]}, 400, "stop"),
    ({"model": NAME, "prompt": [1, 99999]}, 400, "prompt"),
    ({"model": NAME, "prompt": "a", "logit_bias": {"1": 5}}, 400, "logit_bias"),
    ({"model": NAME, "prompt": "a", "stream_options": {"include_usage": True}}, 400, "stream_options"),
    ({"model": NAME, "prompt": "a", "max_tokens": 2048}, 400, "2048"),
    ({"model": NAME, "prompt": "a " * 3000, "max_tokens": 1}, 400, "maximum context length is 2048"),
    ({"model": "gpt-4", "prompt": "a"}, 404, "model"),
])
def test_bad_requests(live, body, status, field):
    kw = {"content": body} if isinstance(body, bytes) else {"json": body}
    r = httpx.post(live[0] + "/completions", **kw)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert field in err["message"] and err["type"] in ("invalid_request_error", "not_found_error")
    if status == 400 and err["param"]:
        assert err["param"].split("[")[0] in ("prompt", field)


def test_bad_chat_requests(live):
    url = live[0]
    assert httpx.post(url + "/chat/completions", json={"model": NAME, "messages": []}).json()["error"]["param"] == \
        "messages"
    r = httpx.post(url + "/chat/completions", json={"model": NAME, "messages": [{"role": "user", "content": 3}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content"
    r = httpx.post(url + "/chat/completions", json={"model": NAME, "messages": [{"role": "user", "content": "hi"}],
                                                    "top_logprobs": 2})
    assert r.status_code == 400 and r.json()["error"]["param"] == "top_logprobs"
    assert httpx.get(url + "/nowhere").json()["error"]["type"] == "not_found_error"
    assert httpx.get(url + "/completions").status_code == 405


def test_no_chat_template_is_a_400(stories_path):
    llm = LLM(stories_path, threads=1)
    server = create_app(llm, ServerConfig(model_name=NAME))
    from starlette.testclient import TestClient

    with TestClient(server.app) as tc:
        r = tc.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400 and "--chat-template" in r.json()["error"]["message"]


# ---- the process: drain on SIGTERM ----

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_drains_running_requests(stories_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "llmbench", "serve", str(stories_path), "--port", str(port),
                             "--threads", "1", "--served-model-name", NAME, "--step-delay", "0.01"],
                            stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        body = {"model": NAME, "prompt": PROMPTS[0], "max_tokens": 100, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        with httpx.Client(timeout=60) as c, c.stream("POST", url + "/v1/completions", json=body) as r:
            lines = r.iter_lines()
            first = next(x for x in lines if x.startswith("data: "))
            proc.send_signal(signal.SIGTERM)
            events = sse([first, *lines])
        assert events[-1]["usage"]["completion_tokens"] == 100
        assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "length"
        assert proc.wait(30) == 0
        err = proc.stderr.read()
        assert "finishing 1 running or queued" in err and "stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ---- llmbench's own clients ----

def test_eval_adapter_end_to_end(live, llm):
    from llmbench.eval.api import GenerateUntil, LoglikelihoodRolling
    from llmbench.eval.openai_adapter import OpenAIAdapter

    a = OpenAIAdapter(live[0], NAME, concurrency=4)
    gens = a.generate_until([GenerateUntil(p, until=(".",), max_tokens=40) for p in PROMPTS])
    for p, g in zip(PROMPTS, gens):
        ref = llm.generate(p, SamplingParams(temperature=0, max_tokens=40, stop=["."]))[0]
        assert g.text == ref.text
    roll = a.loglikelihood_rolling([LoglikelihoodRolling("Once upon a time there was a dog.")])[0]
    ids = llm.tokenize("Once upon a time there was a dog.")
    assert roll.n_tokens == len(ids) - 1   # the server scores every token after BOS
    assert roll.logprob == pytest.approx(llm.score_tokens([(ids, 1)])[0][0], rel=1e-6)
    env = a.environment()
    assert env["server"]["id"] == NAME and a.stats["failures"] == 0


def test_bench_openai_end_to_end(live, tmp_path):
    from llmbench.cli import main

    out = tmp_path / "r.json"
    rc = main(["bench", "--backend", "openai", "--base-url", live[0], "--model", NAME, "--batch", "6",
               "--request-rate", "50", "--input-len", "12", "--output-len", "10", "--reps", "1", "--warmup", "1",
               "-o", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    reqs = res["requests"]
    assert len(reqs) == 6 and all(r["error"] is None and r["output_tokens"] == 10 for r in reqs)
    assert res["environment"]["backend"] == "openai"
