"""OpenAI-compatible streaming client and arrival runner, against a real local SSE server.

Timing assertions are lower bounds and orderings the server's own sleeps guarantee (a loaded
machine can only make things later), never tight upper bounds. Every request goes to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbench.backends.openai import OpenAIClient, RequestResult, SSEParser, _endpoint
from llmbench.perf.arrivals import gamma_arrivals, run_requests

sys.path.insert(0, str(Path(__file__).parent))
from sse_server import SSEServer

MS = 1_000_000
SLACK = 1 * MS          # timer rounding in the server's waits


@pytest.fixture(scope="module")
def server():
    with SSEServer(ttft_s=0.05, itl_s=0.01, hang_s=10.0) as s:
        yield s


def send(server, prompt, api="completions", **kw):
    async def go():
        async with OpenAIClient(server.base_url, "test-model", api=api, **kw) as c:
            return await c.send(prompt)
    return asyncio.run(go())


# ---- streaming and timing ----

@pytest.mark.parametrize("api", ["completions", "chat"])
def test_stream_times_every_text_event_and_takes_usage_from_server(server, api):
    n = 8
    r = send(server, "ok four words here", api=api, max_tokens=n)
    assert r.error is None and r.http_status == 200 and r.finish_reason == "length"
    assert r.text == "".join(f"t{i}.0 " for i in range(n))
    assert r.usage_reported and r.prompt_tokens == 1004 and r.output_tokens == n
    assert len(r.token_ns) == n and r.token_ns[0] == r.first_token_ns
    assert r.arrival_ns < r.first_token_ns and r.token_ns == sorted(r.token_ns)
    assert r.token_ns[-1] <= r.finish_ns
    assert r.first_token_ns - r.arrival_ns >= 50 * MS - SLACK                  # server waited 50 ms
    assert r.token_ns[-1] - r.arrival_ns >= (50 + (n - 1) * 10) * MS - SLACK   # then 10 ms per gap
    assert len(np.diff(r.token_ns)) == n - 1 and np.all(np.diff(r.token_ns) >= 0)
    json.dumps(r.to_dict())


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_first_token_is_first_text_not_the_role_chunk(server, api):
    # the server sends an empty (role-only) event at once and the first text 50 ms later
    r = send(server, "role_first", api=api, max_tokens=4)
    assert r.error is None and len(r.token_ns) == 4
    assert r.first_token_ns - r.arrival_ns >= 50 * MS - SLACK


def test_token_counts_come_from_usage_not_from_events(server):
    r = send(server, "multi", max_tokens=5)        # 5 events of 2 tokens each
    assert r.error is None and len(r.token_ns) == 5 and r.output_tokens == 10


def test_missing_usage_is_none_and_flagged(server):
    r = send(server, "nousage", max_tokens=3)
    assert r.error is None and len(r.token_ns) == 3
    assert not r.usage_reported and r.prompt_tokens is None and r.output_tokens is None


def test_event_split_across_reads_is_timed_when_complete(server):
    r = send(server, "split", max_tokens=3)        # every event arrives in two halves 20 ms apart
    assert r.error is None and r.text == "t0.0 t1.0 t2.0 " and r.output_tokens == 3
    assert r.first_token_ns - r.arrival_ns >= 70 * MS - SLACK


def test_request_body_and_headers(server):
    server.reset()
    send(server, "ok x", max_tokens=3, temperature=0.7, ignore_eos=True,
         sampling={"top_p": 0.9, "seed": 7}, headers={"X-Test": "1"}, api_key="sk-test")
    send(server, "ok y", api="chat", max_tokens=2)
    (a, b) = server.requests
    assert a["path"] == "/v1/completions" and b["path"] == "/v1/chat/completions"
    assert a["body"] == {"model": "test-model", "prompt": "ok x", "max_tokens": 3, "temperature": 0.7,
                         "ignore_eos": True, "top_p": 0.9, "seed": 7, "stream": True,
                         "stream_options": {"include_usage": True}}
    assert a["headers"]["Authorization"] == "Bearer sk-test" and a["headers"]["X-Test"] == "1"
    assert b["body"]["messages"] == [{"role": "user", "content": "ok y"}]
    assert "ignore_eos" not in b["body"] and b["body"]["stream"] is True


def test_endpoint_urls():
    for base in ("http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/completions"):
        assert _endpoint(base, "completions") == "http://h:8000/v1/completions"
        assert _endpoint(base, "chat") == "http://h:8000/v1/chat/completions"
    with pytest.raises(ValueError, match="http://"):
        OpenAIClient("127.0.0.1:8000", "m")


# ---- errors: recorded per request, never raised ----

@pytest.mark.parametrize("prompt, message, n_tokens", [
    ("drop", "connection dropped mid-stream after 3 text chunks", 3),
    ("malformed", "malformed SSE event", 1),
    ("error_event", "engine died (test)", 1),
    ("http500", "HTTP 500", 0),
    ("hang", "timed out after 0.3 s (0 text chunks", 0),
    ("stall", "timed out after 0.3 s (2 text chunks", 2),
])
def test_errors_are_recorded_with_partial_timings(server, prompt, message, n_tokens):
    # a short timeout only where the timeout is the error under test: elsewhere a loaded machine's
    # scheduling delays must not turn the expected error into a timeout
    timeout = 0.3 if prompt in ("hang", "stall") else 10
    t0 = time.monotonic()
    r = send(server, prompt, max_tokens=6, timeout=timeout)
    assert time.monotonic() - t0 < (5 if timeout < 1 else 30)
    assert r.error is not None and message in r.error, r.error
    assert len(r.token_ns) == n_tokens and r.finish_ns is not None and r.finish_ns >= r.arrival_ns
    if prompt == "http500":
        assert r.http_status == 500 and "boom: internal test failure" in r.error


@pytest.mark.parametrize("prompt, kw, message", [
    ("hang", {"first_chunk_timeout": 0.5}, "no text within 0.5 s of sending (first-chunk timeout; HTTP status not"),
    ("stall", {"idle_timeout": 0.5}, "nothing for 0.5 s after 2 text chunks (idle timeout)"),
    ("role_first", {"first_chunk_timeout": 0.5}, "no text within 0.5 s"),   # a role-only event is no text
])
def test_first_chunk_and_idle_timeouts_end_a_stalled_request(prompt, kw, message):
    """Without a bound on the whole request, a server that never answers or stops mid-stream is left
    within the first-chunk or the idle timeout (the server would hold it for 10 s)."""
    with SSEServer(ttft_s=2.0, itl_s=0.01, hang_s=10.0) as slow:
        t0 = time.monotonic()
        r = send(slow, prompt, max_tokens=6, timeout=None, **kw)
        assert time.monotonic() - t0 < 2.5 if prompt != "stall" else time.monotonic() - t0 < 5
    assert r.error is not None and message in r.error, r.error


def test_idle_timeout_spares_a_stream_that_keeps_coming(server):
    r = send(server, "ok a b", max_tokens=6, timeout=None, first_chunk_timeout=5, idle_timeout=1)
    assert r.error is None and len(r.token_ns) == 6


def test_connection_refused_is_recorded():
    with socket.socket() as s:                     # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = asyncio.run(_send_once(f"http://127.0.0.1:{port}", "ok"))
    assert r.error is not None and "cannot connect" in r.error


async def _send_once(url, prompt):
    async with OpenAIClient(url, "m", timeout=2) as c:
        return await c.send(prompt)


def test_run_goes_on_past_failures_and_keeps_input_order(server):
    prompts = ["ok a", "http500", "drop", "ok b c", "malformed", "nousage", "ok"]

    async def go():
        async with OpenAIClient(server.base_url, "m", max_tokens=4, timeout=5) as c:
            return await run_requests(c.send, prompts, gamma_arrivals(len(prompts), rate=200, seed=1))
    out = asyncio.run(go())
    assert [r.index for r in out.results] == list(range(len(prompts)))
    assert [r.error is None for r in out.results] == [True, False, False, True, False, True, True]
    assert [r.prompt_tokens for r in out.results] == [1002, None, None, 1003, None, None, 1001]
    assert all(out.start_ns <= r.scheduled_ns <= r.arrival_ns <= r.finish_ns <= out.end_ns for r in out.results)


def test_the_test_servers_count_ignores_a_request_of_an_earlier_count(server):
    # a handler can leave after a test restarted the count (its client had read the last byte already)
    with server.lock:
        phase = server.enter()
    server.reset()
    with server.lock:
        server.leave(phase)
    assert server.inflight == 0 and server.max_inflight == 0


def test_max_concurrency_is_respected_at_the_server(server):
    async def go(n, limit):
        async with OpenAIClient(server.base_url, "m", max_tokens=2, timeout=10) as c:
            return await run_requests(c.send, ["slow"] * n, None, max_concurrency=limit)
    server.reset()
    out = asyncio.run(go(9, 3))
    assert all(r.error is None for r in out.results)
    assert server.max_inflight == 3
    server.reset()
    server.gather = 8
    asyncio.run(go(8, None))                       # all at once: all 8 overlap
    assert server.max_inflight == 8


# ---- SSE parsing ----

def test_sse_parser_byte_by_byte():
    stream = ("data: {\"a\": \"é\"}\r\n\r\n: ping\n\nevent: error\ndata: line1\ndata: line2\n\n"
              "retry: 10\ndata:  x\r\rdata: [DONE]").encode()
    p, events = SSEParser(), []
    for i in range(len(stream)):
        events += p.feed(stream[i:i + 1])
    events += p.close()
    assert events == [("message", '{"a": "é"}'), ("error", "line1\nline2"), ("message", " x"),
                      ("message", "[DONE]")]


_SSE_LINE = st.one_of(
    st.builds(lambda v: f"data: {v}",
              st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12)),
    st.builds(lambda v: f"event: {v}", st.sampled_from(["error", "delta", ""])),
    st.just(": ping"), st.just(""), st.just("retry: 5"), st.just("data:x"))


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.tuples(_SSE_LINE, st.sampled_from(["\n", "\r\n", "\r"])), max_size=12),
       cuts=st.lists(st.integers(0, 400), max_size=8))
def test_sse_parser_events_do_not_depend_on_how_the_stream_is_split(lines, cuts):
    stream = "".join(line + end for line, end in lines).encode()

    def parse(pieces):
        p, events = SSEParser(), []
        for piece in pieces:
            events += p.feed(piece)
        return events + p.close()

    whole = parse([stream])
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    assert parse([stream[a:b] for a, b in zip(bounds, bounds[1:])]) == whole
    assert parse([stream[i:i + 1] for i in range(len(stream))]) == whole
    # every data line sent is in the events' data, in order (close() dispatches a last unterminated event)
    sent = [line[5:].removeprefix(" ") for line, _ in lines if line.startswith("data:")]
    assert [d for _, data in whole for d in data.split("\n")] == sent


# ---- arrivals ----

def test_gamma_arrivals_mean_gap_is_one_over_rate():
    rate = 4.0
    gaps = np.diff(gamma_arrivals(20_000, rate, seed=3, normalize=False), prepend=0.0)
    assert np.all(gaps > 0)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_arrivals_cv_is_one_over_sqrt_burstiness(burstiness):
    for normalize in (False, True):                 # rescaling leaves the CV alone
        gaps = np.diff(gamma_arrivals(20_000, 10.0, burstiness, seed=5, normalize=normalize), prepend=0.0)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)


def test_gamma_arrivals_edges():
    t = gamma_arrivals(100, 5.0, seed=0)
    assert t[-1] == pytest.approx(100 / 5.0) and np.all(np.diff(t) >= 0) and t[0] > 0
    assert np.array_equal(t, gamma_arrivals(100, 5.0, seed=0))
    assert not np.array_equal(t, gamma_arrivals(100, 5.0, seed=1))
    assert np.array_equal(gamma_arrivals(5, math.inf), np.zeros(5))
    assert np.allclose(gamma_arrivals(4, 2.0, math.inf), [0.5, 1.0, 1.5, 2.0])
    assert gamma_arrivals(0, 1.0).shape == (0,)
    for bad in [dict(n=-1, rate=1.0), dict(n=3, rate=0.0), dict(n=3, rate=1.0, burstiness=0.0)]:
        with pytest.raises(ValueError):
            gamma_arrivals(**bad)


# ---- runner, with a fake send function ----

def test_runner_sends_no_earlier_than_scheduled_and_limits_concurrency():
    calls, state = {}, {"now": 0, "max": 0}

    async def fake(prompt, *, index, scheduled_ns):
        calls[index] = (time.monotonic_ns(), scheduled_ns)
        state["now"] += 1
        state["max"] = max(state["max"], state["now"])
        await asyncio.sleep(0.03)
        state["now"] -= 1
        if prompt == "bad":
            raise RuntimeError("send failed")
        return prompt.upper()

    schedule = [0.0, 0.0, 0.02, 0.05, 0.05, 0.08]
    prompts = ["a", "b", "bad", "d", "e", "f"]
    results, start, end = asyncio.run(run_requests(fake, prompts, schedule, max_concurrency=2,
                                                   progress=True))
    assert results[:2] == ["A", "B"] and isinstance(results[2], RuntimeError) and results[3:] == ["D", "E", "F"]
    assert state["max"] == 2
    for i, off in enumerate(schedule):
        sent, due = calls[i]
        assert due == start + round(off * 1e9) and sent >= due
    assert end - start >= 0.08e9


def test_runner_validates_its_arguments():
    async def fake(prompt, *, index, scheduled_ns):
        return prompt
    for schedule, limit in [([0.0], None), ([0.2, 0.1], None), ([-1.0, 0.0], None), ([0.0, math.nan], None),
                            (None, 0)]:
        with pytest.raises(ValueError):
            asyncio.run(run_requests(fake, ["a", "b"], schedule, max_concurrency=limit))


def test_result_has_request_timing_fields_first():
    r = RequestResult(1, 2, [2, 3], 4, 5, 6, None)
    assert (r.arrival_ns, r.first_token_ns, r.token_ns, r.finish_ns, r.prompt_tokens, r.output_tokens,
            r.error, r.text) == (1, 2, [2, 3], 4, 5, 6, None, "")


def test_results_feed_the_serving_metrics(server):
    from llmbench.perf.metrics import RequestTiming, serving_metrics
    n_tok, prompts = 4, ["ok a b", "ok c", "http500", "ok"]

    async def go():
        async with OpenAIClient(server.base_url, "m", max_tokens=n_tok, timeout=5) as c:
            return await run_requests(c.send, prompts, gamma_arrivals(len(prompts), rate=100, seed=2))
    out = asyncio.run(go())
    keys = ("arrival_ns", "first_token_ns", "token_ns", "finish_ns", "prompt_tokens", "output_tokens", "error")
    timings = [RequestTiming(**{k: getattr(r, k) for k in keys}) if r.ok else
               RequestTiming(r.arrival_ns, r.first_token_ns, r.token_ns, r.finish_ns, error=r.error)
               for r in out.results]
    m = serving_metrics(timings, duration_s=out.duration_s)     # vLLM: duration from the run's start
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["total_output_tokens"] == 3 * n_tok and m["total_input_tokens"] == 1003 + 1002 + 1001
    assert m["min_ttft_ms"] >= 49 and m["min_e2el_ms"] >= 49 + (n_tok - 1) * 10
