"""OpenAIAdapter against a real local OpenAI-compatible server (tests/eval_server.py, 127.0.0.1 only).

The server's log-probabilities are hand-written (eval_server.LOGPROBS: " Paris" -0.25, " France" -0.5,
" London" -2.5 and not greedy, any other token -1.0), so every expected sum below is exact. Retries
use a 10 ms backoff; nothing waits on a real timeout longer than 0.5 s.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys
from pathlib import Path

import pytest

from llmbench.eval.api import AdapterError, GenerateUntil, LLAnswer, Loglikelihood, LoglikelihoodRolling
from llmbench.eval.openai_adapter import OpenAIAdapter, move_spaces, span_by_text

sys.path.insert(0, str(Path(__file__).parent))
from eval_server import MODEL, EvalServer, split_tokens

NO_ECHO = "does not return prompt log-probabilities"


@pytest.fixture(scope="module")
def server():
    with EvalServer(hang_s=3.0) as s:
        yield s


@pytest.fixture
def srv(server):
    server.reset()
    yield server
    server.reset()


def adapter(srv, **kw) -> OpenAIAdapter:
    kw.setdefault("backoff", 0.01)
    kw.setdefault("timeout", 10)
    return OpenAIAdapter(srv.base_url, MODEL, **kw)


class WordTokenizer:
    """The test model's tokenizer, as a client would load it (BOS first, as llmbench's Tokenizer adds)."""

    def encode(self, text: str) -> list[str]:
        return ["<s>", *split_tokens(text)]


# (context, continuation) -> (summed log-probability, greedy), by hand from eval_server.LOGPROBS
CASES = [
    (("The capital of France is", " Paris"), (-0.25, True)),
    (("The capital of France is", " London"), (-2.5, False)),
    (("The capital of France is", " Paris France"), (-0.75, True)),
    (("The capital of France is", " London France"), (-3.0, False)),       # one non-greedy token is enough
    (("The capital of France is ", "Paris"), (-0.25, True)),               # trailing space moves: " Paris"
    (("Q: 2+2?\nA:", " 4"), (-1.0, True)),
    (("Q: 2+2?\nA:\n", "4"), (-1.0, True)),                                 # "\n4" is one token
    (("Question: capital?  ", "Paris"), (-1.0, True)),                      # "  Paris" is not " Paris"
]


# ---- log-likelihood ----

def test_move_spaces_is_lm_evals():
    assert move_spaces("is ", "Paris") == ("is", " Paris")
    assert move_spaces("A:\n \t", "B") == ("A:", "\n \tB")
    assert move_spaces("is", " Paris") == ("is", " Paris")
    assert move_spaces("   ", "x") == ("", "   x")


def test_span_by_text_counts_tokens_that_end_past_the_context():
    toks = ["<s>", "The", " cap", "ital", " Paris"]
    assert span_by_text(toks, "The capital Paris", len("The capital")) == [4]
    assert span_by_text(toks, "The capital Paris", len("The cap")) == [3, 4]
    assert span_by_text(toks, "The capital Paris", len("The ca")) == [2, 3, 4]   # " cap" spans the boundary
    assert span_by_text(toks, "The capital Paris", len("The capital Paris")) == []
    assert span_by_text(["The", "cap"], "The cap", 3) is None                      # do not spell the prompt


@pytest.mark.parametrize("bos", ["<s>", None])
def test_loglikelihood_sums_and_greedy(srv, bos):
    srv.bos = bos
    a = adapter(srv)
    out = a.loglikelihood([Loglikelihood(c, x) for (c, x), _ in CASES])
    assert [(o.logprob, o.greedy) for o in out] == [want for _, want in CASES]
    assert all(isinstance(o, LLAnswer) for o in out)
    bodies = srv.bodies()
    assert len(bodies) == len(CASES)
    for b in bodies:
        assert b["echo"] is True and b["logprobs"] == 1 and b["temperature"] == 0 and b["max_tokens"] == 0
        assert b["model"] == MODEL and b["stream"] is False
    prompts = sorted(b["prompt"] for b in bodies)
    assert prompts == sorted(c + x for (c, x), _ in CASES)           # the prompt is context + continuation
    assert a.stats == {"requests": len(CASES), "retries": 0, "failures": 0}


def test_token_spanning_the_boundary_counts_with_the_continuation(srv):
    # "abcdef" is one token of the server's: it carries the continuation, so it is scored
    out = adapter(srv).loglikelihood([Loglikelihood("abc", "def")])
    assert (out[0].logprob, out[0].greedy) == (-1.0, True)


def test_continuation_at_the_very_start_without_bos_is_an_error(srv):
    srv.bos = None
    with pytest.raises(AdapterError, match="no BOS token"):
        adapter(srv).loglikelihood([Loglikelihood("", "Paris")])
    srv.bos = "<s>"
    out = adapter(srv).loglikelihood([Loglikelihood("", "Paris")])       # BOS first: "Paris" is scored
    assert out[0].logprob == -1.0


@pytest.mark.parametrize("how", ["tokenizer", "server count"])
def test_tokens_that_do_not_spell_the_prompt_are_counted(srv, how):
    srv.strip_space = True                     # " Paris" comes back as "Paris": the texts no longer line up
    a = adapter(srv, tokenizer=WordTokenizer() if how == "tokenizer" else None)
    reqs = [Loglikelihood(c, x) for (c, x), _ in CASES] + [Loglikelihood("The capital of France is", " Paris")]
    out = a.loglikelihood(reqs)
    assert [(o.logprob, o.greedy) for o in out] == [want for _, want in CASES] + [(-0.25, True)]
    counts = [b for b in srv.bodies() if not b.get("echo")]
    if how == "tokenizer":
        assert counts == []
    else:                                       # one count per distinct context, without echo, cached
        contexts = {move_spaces(c, x)[0] for (c, x), _ in CASES}
        assert sorted(b["prompt"] for b in counts) == sorted(contexts)
        assert all(b["max_tokens"] == 1 and "logprobs" not in b for b in counts)


def test_tokens_that_do_not_spell_the_prompt_without_usage_or_tokenizer(srv):
    srv.strip_space, srv.usage = True, False
    with pytest.raises(AdapterError, match="pass tokenizer="):
        adapter(srv).loglikelihood([Loglikelihood("The capital of France is", " Paris")])
    out = adapter(srv, tokenizer=WordTokenizer()).loglikelihood([Loglikelihood("The capital of France is", " Paris")])
    assert out[0].logprob == -0.25


def test_max_tokens_zero_refused_falls_back_to_one(srv):
    srv.zero = "reject"
    a = adapter(srv)
    out = a.loglikelihood([Loglikelihood(c, x) for (c, x), _ in CASES[:4]])
    assert [(o.logprob, o.greedy) for o in out] == [w for _, w in CASES[:4]]
    assert [b["max_tokens"] for b in srv.bodies()] == [0, 1, 1, 1, 1]   # one refusal, then 1 for every request
    assert a.echo_max_tokens == 1 and a.stats["failures"] == 0
    assert a.environment()["echo_max_tokens"] == 1


def test_generated_tokens_left_out_of_the_echo_are_not_taken_off_the_prompt(srv):
    srv.zero, srv.echo = "reject", "prompt_only"   # max_tokens 1, usage counts 1, logprobs hold the prompt only
    out = adapter(srv).loglikelihood([Loglikelihood(c, x) for (c, x), _ in CASES[:3]])
    assert [(o.logprob, o.greedy) for o in out] == [w for _, w in CASES[:3]]


def test_max_tokens_zero_read_as_unlimited_switches_to_one(srv):
    srv.zero = "unlimited"                      # llama-cpp-python: 0 = no limit; the generated tokens are left out
    a = adapter(srv)
    out = a.loglikelihood([Loglikelihood(c, x) for (c, x), _ in CASES[:3]])
    assert [(o.logprob, o.greedy) for o in out] == [w for _, w in CASES[:3]]
    assert [b["max_tokens"] for b in srv.bodies()] == [0, 1, 1]
    assert a.echo_max_tokens == 1


def test_the_probe_goes_alone_until_a_request_is_sent(srv):
    srv.zero = "unlimited"
    a = adapter(srv)
    out = a.loglikelihood_rolling([LoglikelihoodRolling(t) for t in ["", "one two", "one", "one two"]])
    assert [(o.logprob, o.n_tokens) for o in out] == [(0.0, 0), (-0.5, 2), (-0.125, 1), (-0.5, 2)]
    assert [b["max_tokens"] for b in srv.bodies()] == [0, 1, 1]         # "" sends nothing; "one two" probes
    assert srv.bodies()[0]["prompt"] == "one two"                         # and went alone, first


@pytest.mark.parametrize("bos, want", [("<s>", (-4.75, 6)), (None, (-3.75, 5))])
def test_loglikelihood_rolling(srv, bos, want):
    # "The capital of France is Paris": -1 -1 -1 -0.5 -1 -0.25; without BOS the first token has no score
    srv.bos = bos
    out = adapter(srv).loglikelihood_rolling([LoglikelihoodRolling("The capital of France is Paris"),
                                              LoglikelihoodRolling(""), LoglikelihoodRolling("one")])
    assert (out[0].logprob, out[0].n_tokens) == want
    assert (out[1].logprob, out[1].n_tokens) == (0.0, 0)
    assert (out[2].logprob, out[2].n_tokens) == ((-0.125, 1) if bos else (0.0, 0))
    assert all(b["echo"] and b["prompt"] for b in srv.bodies())


@pytest.mark.parametrize("mode", ["generated_only", "null", "content", "reject", "null_prompt"])
def test_server_without_prompt_logprobs_says_so(srv, mode):
    srv.echo = mode
    a = adapter(srv)
    with pytest.raises(AdapterError, match=NO_ECHO) as e:
        a.loglikelihood([Loglikelihood("The capital of France is", " Paris")] * 3)
    msg = str(e.value)
    assert "vLLM" in msg and "llama-cpp-python" in msg and "llama-server" in msg and srv.base_url in msg
    if mode == "reject":
        assert "Only no echo is supported" in msg
    assert a.stats["failures"] == 1 and a.stats["retries"] == 0
    with pytest.raises(AdapterError, match=NO_ECHO):
        adapter(srv).loglikelihood_rolling([LoglikelihoodRolling("The capital of France is Paris")])


def test_requests_run_concurrently_up_to_the_limit(srv):
    srv.delay_s, srv.gather = 2.0, 3             # answers go in threes (2 s at most: the probe waits alone)
    a = adapter(srv, concurrency=3)
    out = a.loglikelihood([Loglikelihood("The capital of France is", x) for x in ([" Paris", " London"] * 4)[:7]])
    assert [o.logprob for o in out] == ([-0.25, -2.5] * 4)[:7]            # in request order
    assert srv.max_inflight == 3                # the first alone (max_tokens 0 probe), then 3 at a time
    srv.reset()
    srv.delay_s, srv.gather = 2.0, 3
    a.loglikelihood([Loglikelihood("The capital of France is", " Paris")] * 6)
    assert srv.max_inflight == 3                # known server: no probe


def test_works_inside_a_running_event_loop(srv):
    async def notebook_cell():
        return adapter(srv).loglikelihood([Loglikelihood("The capital of France is", " Paris")])
    assert asyncio.run(notebook_cell())[0].logprob == -0.25


# ---- generation (streamed, and not: the same answers) ----

STREAMS = pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])


def _streamed(stream: bool) -> dict:
    return {"stream": True, "stream_options": {"include_usage": True}} if stream else {"stream": False}


@STREAMS
def test_generate_cuts_at_stops_beyond_the_four_sent(srv, stream):
    until = ("<|end|>", "###", "\n\n", "Q:", "three")
    g = adapter(srv, stream=stream).generate_until([GenerateUntil("Count:", until, max_tokens=16)])[0]
    (body,) = srv.bodies()
    assert body["stop"] == ["<|end|>", "###", "\n\n", "Q:"]                # at most 4 go to the server
    assert body["prompt"] == "Count:" and body["stream"] is stream
    assert (g.text, g.finish_reason, g.n_tokens) == ("one two ", "stop", 4)  # cut client-side at "three"
    assert g.token_logprobs is None and g.top_logprobs is None


@STREAMS
def test_generate_server_side_stop_length_and_parameters(srv, stream):
    a = adapter(srv, stream=stream)
    g1, g2, g3 = a.generate_until([
        GenerateUntil("Count:", ("three",)),
        GenerateUntil("Count:", (), max_tokens=2),
        GenerateUntil("Count:", (), temperature=0.7, top_p=0.9, top_k=40, min_p=0.05, seed=7),
    ])
    assert (g1.text, g1.finish_reason, g1.n_tokens) == ("one two ", "stop", 3)
    assert (g2.text, g2.finish_reason, g2.n_tokens) == ("one two", "length", 2)
    assert (g3.text, g3.finish_reason, g3.n_tokens) == ("one two three four", "stop", 4)
    bodies = srv.bodies()                       # sent concurrently: told apart by content
    (b1,) = [b for b in bodies if "stop" in b]
    (b2,) = [b for b in bodies if b["max_tokens"] == 2]
    (b3,) = [b for b in bodies if "seed" in b]
    assert b1 == {"model": MODEL, "prompt": "Count:", "max_tokens": 256, "temperature": 0.0, "top_p": 1.0,
                  "stop": ["three"], **_streamed(stream)}                # top_k, min_p, seed only when set
    assert "stop" not in b2 and "seed" not in b2
    assert (b3["temperature"], b3["top_p"], b3["top_k"], b3["min_p"], b3["seed"]) == (0.7, 0.9, 40, 0.05, 7)


@STREAMS
def test_generate_logprobs_are_cut_with_the_text(srv, stream):
    g = adapter(srv, stream=stream).generate_until([GenerateUntil("Count:", ("a", "b", "c", "d", " three"), logprobs=2)])[0]
    assert srv.bodies()[0]["logprobs"] == 2
    assert g.text == "one two"
    assert g.token_logprobs == [-0.125, -0.375]                          # "one", " two"; " three" cut away
    assert g.top_logprobs == [{"one": -0.125, "~alt1": -1.125}, {" two": -0.375, "~alt1": -1.375}]


@STREAMS
def test_generate_chat_messages(srv, stream):
    msgs = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to four"})
    g = adapter(srv, stream=stream).generate_until([GenerateUntil(msgs, ("\n\n", "four"), logprobs=1)])[0]
    (body,) = srv.bodies("/v1/chat/completions")
    assert body["messages"] == [dict(m) for m in msgs] and "prompt" not in body
    assert body["logprobs"] is True and body["top_logprobs"] == 1 and body["stop"] == ["\n\n", "four"]
    assert (g.text, g.finish_reason, g.n_tokens) == ("one two three ", "stop", 4)
    assert g.token_logprobs == [-0.125, -0.375, -1.0, -1.0]
    assert g.top_logprobs[0] == {"one": -0.125}


# ---- errors and retries ----

@pytest.mark.parametrize("faults", [["503", "500"], ["429"], ["drop"], ["drop", "503", "drop"]])
def test_transient_failures_are_retried_and_counted(srv, faults):
    srv.faults = list(faults)
    a = adapter(srv)
    out = a.loglikelihood([Loglikelihood("The capital of France is", " Paris")])
    assert out[0].logprob == -0.25
    n = len(faults)
    assert a.stats == {"requests": n + 1, "retries": n, "failures": 0}
    env = a.environment()
    assert (env["requests"], env["retries"], env["failures"]) == (n + 1, n, 0)


def test_a_timeout_is_retried(srv):
    srv.faults = ["hang"]
    a = adapter(srv, timeout=0.5)
    g = a.generate_until([GenerateUntil("Count:", max_tokens=2)])[0]
    assert g.text == "one two" and a.stats == {"requests": 2, "retries": 1, "failures": 0}


@STREAMS
def test_a_generation_that_never_succeeds_is_answered_failed_not_raised(srv, stream):
    srv.faults = ["503"] * 3
    a = adapter(srv, retries=2, stream=stream, concurrency=1)     # one at a time: the faults hit the first
    g, ok = a.generate_until([GenerateUntil("Count:"), GenerateUntil("Count:", max_tokens=1)])
    msg = g.error
    assert g.failed and g.text == "" and g.finish_reason == "error" and not ok.failed and ok.text == "one"
    assert f"{srv.base_url}/completions" in msg and "HTTP 503" in msg and "Service Unavailable" in msg
    assert "failed 3 times (2 retries)" in msg and "engine overloaded" in msg and "What to do" in msg
    assert len(srv.requests) == 4 and a.stats == {"requests": 4, "retries": 2, "failures": 1}


def test_a_loglikelihood_that_never_succeeds_raises_after_the_retries(srv):
    srv.faults = ["503"] * 20
    a = adapter(srv, retries=2)
    with pytest.raises(AdapterError) as e:
        a.loglikelihood([Loglikelihood("The capital of France is", " Paris")])
    msg = str(e.value)
    assert f"{srv.base_url}/completions" in msg and "HTTP 503" in msg and "failed 3 times (2 retries)" in msg
    assert len(srv.requests) == 3 and a.stats == {"requests": 3, "retries": 2, "failures": 1}


@STREAMS
def test_a_timeout_every_time_says_to_raise_the_timeout(srv, stream):
    srv.faults = ["hang"] * 3
    g = adapter(srv, timeout=0.3, retries=1, stream=stream).generate_until([GenerateUntil("Count:")])[0]
    assert g.failed and re.search(r"timed out after 0.3 s.*raise timeout=", g.error)


def test_a_4xx_fails_at_once_with_the_servers_message(srv):
    srv.faults = ["400"]
    a = adapter(srv)
    with pytest.raises(AdapterError, match=r"HTTP 400 Bad Request: bad parameter \(test fault 400\)"):
        a.generate_until([GenerateUntil("Count:")])
    assert len(srv.requests) == 1 and a.stats == {"requests": 1, "retries": 0, "failures": 1}


def test_an_error_stops_the_other_requests(srv):
    srv.faults = ["400"]
    with pytest.raises(AdapterError, match="HTTP 400"):
        adapter(srv, concurrency=2).generate_until([GenerateUntil("Count:")] * 50)
    assert len(srv.requests) < 50


def test_a_wrong_path_points_at_the_model_list(srv):
    srv.faults = []
    with pytest.raises(AdapterError, match=r"HTTP 404.*GET .*/models"):
        OpenAIAdapter(srv.base_url.removesuffix("/v1") + "/nothing/v1", MODEL, backoff=0.01).generate_until(
            [GenerateUntil("Count:")])


def test_no_server_raises_after_the_retries():
    with socket.socket() as s:                  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a = OpenAIAdapter(f"http://127.0.0.1:{port}", MODEL, retries=1, backoff=0.01, timeout=5)
    with pytest.raises(AdapterError, match="cannot connect.*is the server running"):
        a.loglikelihood([Loglikelihood("a", " b")])
    assert a.stats == {"requests": 2, "retries": 1, "failures": 1}
    env = a.environment()
    assert env["server"] is None and "cannot connect" in env["server_error"]


# ---- environment and arguments ----

def test_environment(srv):
    a = OpenAIAdapter(srv.base_url.removesuffix("/v1") + "/", MODEL)
    env = a.environment()
    assert env["backend"] == "openai" and env["base_url"] == srv.base_url and env["model"] == {"name": MODEL}
    assert env["server"] == {"id": MODEL, "object": "model", "owned_by": "llmbench-tests", "max_model_len": 4096}
    assert (env["requests"], env["retries"], env["failures"]) == (0, 0, 0)
    assert a.name == "openai" and a.precision == "server"
    other = OpenAIAdapter(srv.base_url, "other-model").environment()
    assert other["server"] == {"listed": False, "models": [MODEL]}


def test_answer_mixes_kinds_in_order(srv):
    reqs = [Loglikelihood("The capital of France is", " London"), GenerateUntil("Count:", max_tokens=1),
            LoglikelihoodRolling("one two"), Loglikelihood("The capital of France is", " Paris")]
    out = adapter(srv).answer(reqs)
    assert out[0].logprob == -2.5 and out[1].text == "one" and out[2].logprob == -0.5 and out[3].logprob == -0.25


@pytest.mark.parametrize("kw, match", [
    (dict(base_url="127.0.0.1:8000"), "http://"), (dict(concurrency=0), "concurrency"),
    (dict(retries=-1), "retries"), (dict(timeout=0), "timeout"), (dict(model=""), "model"),
])
def test_arguments_are_checked(kw, match):
    args = {"base_url": "http://127.0.0.1:1/v1", "model": "m", **kw}
    with pytest.raises(ValueError, match=match):
        OpenAIAdapter(args.pop("base_url"), args.pop("model"), **args)


# ---- streaming: drops, errors, usage; answers as they finish ----

@pytest.mark.parametrize("faults", [["drop_mid"], ["error_mid"], ["drop_mid", "503", "error_mid"]])
def test_a_stream_that_fails_midway_is_sent_again_and_counted(srv, faults):
    srv.faults = list(faults)
    a = adapter(srv, concurrency=1)
    g = a.generate_until([GenerateUntil("Count:", ("three",), logprobs=1)])[0]
    assert (g.text, g.finish_reason, g.n_tokens) == ("one two ", "stop", 3)   # not the dropped attempt's text
    assert g.token_logprobs == [-0.125, -0.375, -1.0]            # the server kept the token that stopped it
    n = len(faults)
    assert a.stats == {"requests": n + 1, "retries": n, "failures": 0}


def test_a_stream_that_always_drops_is_answered_failed(srv):
    srv.faults = ["drop_mid"] * 2
    a = adapter(srv, retries=1)
    g = a.generate_until([GenerateUntil("Count:")])[0]
    assert g.failed and "connection dropped mid-stream" in g.error and "failed 2 times (1 retries)" in g.error
    assert a.stats == {"requests": 2, "retries": 1, "failures": 1}


def test_a_malformed_stream_says_to_turn_streaming_off(srv):
    srv.faults = ["malformed"]
    with pytest.raises(AdapterError, match=r"malformed stream.*stream=False"):
        adapter(srv).generate_until([GenerateUntil("Count:")])


@pytest.mark.parametrize("chat", [False, True])
def test_without_a_usage_chunk_the_streamed_tokens_are_counted(srv, chat):
    srv.usage = False
    prompt = ({"role": "user", "content": "Count"},) if chat else "Count:"
    a = adapter(srv)
    g1, g2 = a.generate_until([GenerateUntil(prompt, (), max_tokens=3), GenerateUntil(prompt, (), logprobs=1)])
    assert (g1.text, g1.n_tokens) == ("one two three", 3) and (g2.n_tokens, len(g2.token_logprobs)) == (4, 4)
    assert a.stats["counted_usage"] == 2
    whole = adapter(srv, stream=False).generate_until([GenerateUntil(prompt, (), max_tokens=3)])[0]
    assert whole.text == g1.text and whole.n_tokens is None       # not streamed: nothing to count from


def test_on_answer_gets_each_generation_as_it_finishes(srv):
    seen = []
    reqs = [GenerateUntil("Count:", (), max_tokens=k) for k in (1, 2, 3, 4)]
    out = adapter(srv, concurrency=2).generate_until(reqs, on_answer=lambda i, g: seen.append((i, g)))
    assert sorted(i for i, _ in seen) == [0, 1, 2, 3] and all(out[i] is g for i, g in seen)
    mixed = []
    adapter(srv).answer([Loglikelihood("The capital of France is", " Paris"), GenerateUntil("Count:", max_tokens=1)],
                        on_answer=lambda i, a: mixed.append((i, a)))
    assert sorted(i for i, _ in mixed) == [0, 1] and dict(mixed)[1].text == "one"


# ---- top log-probabilities: OpenAI's limits, a server's refusal ----

def test_openai_limits_refuse_too_many_top_logprobs_before_sending():
    a = OpenAIAdapter("https://api.openai.com/v1", "gpt-4o-mini", api_key="unused")
    assert (a.top_logprobs_limit(chat=True), a.top_logprobs_limit(chat=False)) == (20, 5)
    with pytest.raises(AdapterError, match=r"20 top log-probabilities .* at most 5 .*--top-logprobs 5"):
        a.generate_until([GenerateUntil("Q: 2+2?\nA:", logprobs=20)])      # no request goes out: no network
    a.check_top_logprobs(20, chat=True)
    assert a.stats["requests"] == 0
    assert OpenAIAdapter("http://127.0.0.1:1/v1", "m").top_logprobs_limit() is None   # vLLM, llama.cpp: theirs
    assert OpenAIAdapter("http://127.0.0.1:1/v1", "m", max_top_logprobs=8).top_logprobs_limit(chat=True) == 8


def test_a_server_refusing_top_logprobs_says_which_option_to_lower(srv):
    srv.max_logprobs = 5
    with pytest.raises(AdapterError, match=r"greater than max allowed: 5.*asked for 20 top log-probabilities.*"
                                           r"--top-logprobs"):
        adapter(srv).generate_until([GenerateUntil("Count:", logprobs=20)])
    g = adapter(srv).generate_until([GenerateUntil("Count:", logprobs=5)])[0]
    assert len(g.top_logprobs[0]) == 5
