"""The engine's sampler, checked against the model's own logits: filters (top-k, top-p, min-p)
never let an excluded token through, the unfiltered distribution is the softmax, penalties change
the greedy choice exactly as defined, and stop conditions end generation where they should."""

from __future__ import annotations

import numpy as np
import pytest
from models import rewritten

from llmbench import LLM, SamplingParams


@pytest.fixture(scope="module")
def llm(stories_path):
    return LLM(stories_path, threads=1, kv_dtype="f32")


@pytest.fixture(scope="module")
def probs(llm):
    """Next-token distribution after the prompt used below."""
    logits = llm.logits(llm.tokenize("Once upon a time, there was a"))[-1].astype(np.float64)
    p = np.exp(logits - logits.max())
    return p / p.sum()


def first_tokens(llm, n=400, **kw) -> np.ndarray:
    params = [SamplingParams(max_tokens=1, seed=s, **kw) for s in range(n)]
    out = llm.generate([llm.tokenize("Once upon a time, there was a")] * n, params)
    return np.array([o.token_ids[0] for o in out])


def test_unfiltered_follows_softmax(llm, probs):
    toks = first_tokens(llm, temperature=1.0)
    top = int(probs.argmax())
    freq = np.mean(toks == top)
    assert abs(freq - probs[top]) < 5 * np.sqrt(probs[top] * (1 - probs[top]) / len(toks))


def test_top_k(llm, probs):
    allowed = set(np.argsort(-probs)[:3].tolist())
    assert set(first_tokens(llm, temperature=1.5, top_k=3).tolist()) <= allowed


def test_top_k_keeps_exactly_the_k_best(llm, probs):
    # a flat distribution (temperature 16: a power of two, so the scaled logits keep their order and
    # ties) over the 25 best: every one of them is drawn, nothing else
    got = set(first_tokens(llm, n=1000, temperature=16.0, top_k=25).tolist())
    assert got == set(np.argsort(-probs, kind="stable")[:25].tolist())


def test_top_p(llm, probs):
    order = np.argsort(-probs)
    k = int(np.searchsorted(np.cumsum(probs[order]), 0.6) + 1)
    allowed = set(order[:k].tolist())
    got = set(first_tokens(llm, temperature=1.0, top_p=0.6).tolist())
    assert got <= allowed and len(got) >= 1


def test_min_p(llm, probs):
    allowed = set(np.flatnonzero(probs >= 0.3 * probs.max()).tolist())
    assert set(first_tokens(llm, temperature=1.0, min_p=0.3).tolist()) <= allowed


def test_seeds_and_logprobs(llm, probs):
    a = first_tokens(llm, n=50, temperature=1.0)
    b = first_tokens(llm, n=50, temperature=1.0)
    assert np.array_equal(a, b) and len(set(a.tolist())) > 1
    out = llm.generate(llm.tokenize("Once upon a time, there was a"),
                       SamplingParams(temperature=1.0, seed=3, max_tokens=1, logprobs=5))[0]
    t = out.token_ids[0]
    assert out.logprobs[0] == pytest.approx(np.log(probs[t]), abs=1e-4)
    top = out.top_logprobs[0]
    assert list(top) == np.argsort(-probs)[:5].tolist()
    assert list(top.values()) == pytest.approx(np.log(np.sort(probs)[::-1][:5]).tolist(), abs=1e-4)


def test_repetition_penalty_is_exact(llm):
    prompt = llm.tokenize("Lily and Lily and Lily and")
    logits = llm.logits(prompt)[-1].astype(np.float64)
    for t in set(prompt):
        logits[t] = logits[t] / 1.5 if logits[t] > 0 else logits[t] * 1.5
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=1, repetition_penalty=1.5))[0]
    assert out.token_ids[0] == int(logits.argmax())


def test_presence_and_frequency_penalties_are_exact(llm):
    prompt = llm.tokenize("Once upon a time")
    first = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=1))[0].token_ids[0]
    logits = llm.logits(prompt + [first])[-1].astype(np.float64)
    logits[first] -= 0.7 + 2.0 * 1
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=2, presence_penalty=0.7,
                                              frequency_penalty=2.0))[0]
    assert out.token_ids == [first, int(logits.argmax())]
    many = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=40, frequency_penalty=100.0,
                                               ignore_eos=True))[0]
    assert len(set(many.token_ids)) == 40


def test_stop_strings(llm):
    out = llm.generate("", SamplingParams(temperature=0, max_tokens=64, stop=["Lily"]))[0]
    assert out.text == "Once upon a time, there was a little girl named "
    assert out.finish_reason == "stop" and out.stop_reason == "Lily"
    inc = llm.generate("", SamplingParams(temperature=0, max_tokens=64, stop=["Lily"], include_stop_str_in_output=True))[0]
    assert inc.text.endswith("named Lily")
    # min_tokens: the first "Lily" falls before it, so the request runs on to the next one
    story = llm.generate("", SamplingParams(temperature=0, max_tokens=96))[0].text
    held = llm.generate("", SamplingParams(temperature=0, max_tokens=96, stop=["Lily"], min_tokens=16))[0]
    assert held.text == story[: story.index("Lily", len(out.text) + 1)] and held.finish_reason == "stop"


def test_stop_tokens_min_tokens_and_ignore_eos(llm):
    greedy = llm.generate("", SamplingParams(temperature=0, max_tokens=8))[0].token_ids
    stopped = llm.generate("", SamplingParams(temperature=0, max_tokens=8, stop_token_ids=[greedy[0]]))[0]
    assert stopped.token_ids == greedy[:1] and stopped.finish_reason == "stop" and stopped.stop_reason == greedy[0]
    held = llm.generate("", SamplingParams(temperature=0, max_tokens=8, min_tokens=3, stop_token_ids=[greedy[0]]))[0]
    assert len(held.token_ids) >= 3 and greedy[0] not in held.token_ids[:3]


def test_end_of_sequence_ends_unless_ignored(llm, stories_path, tmp_path):
    """stories260K never samples its EOS (llama2.c ends a story at BOS), so a copy names a token the
    greedy story reaches after ten tokens as EOS: generation ends there, except with ignore_eos, and
    min_tokens holds it back."""
    greedy = llm.generate("Lily", SamplingParams(temperature=0, max_tokens=40))[0].token_ids
    first = greedy.index(greedy[10])
    eos = LLM(rewritten(stories_path, tmp_path / "eos.gguf", {"tokenizer.ggml.eos_token_id": greedy[10]}),
              threads=1, kv_dtype="f32")
    assert eos.tokenizer.eos_id == greedy[10]
    ended = eos.generate("Lily", SamplingParams(temperature=0, max_tokens=40))[0]
    assert ended.token_ids == greedy[: first + 1] and (ended.finish_reason, ended.stop_reason) == ("stop", greedy[10])
    fixed = eos.generate("Lily", SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))[0]
    assert fixed.token_ids == greedy and fixed.finish_reason == "length"
    held = eos.generate("Lily", SamplingParams(temperature=0, max_tokens=40, min_tokens=first + 3))[0]
    assert len(held.token_ids) >= first + 3 and greedy[10] not in held.token_ids[: first + 3]


def test_on_token_streams_the_text(llm):
    pieces = []
    out = llm.generate(["Lily", "Once"], SamplingParams(temperature=0, max_tokens=20),
                       on_token=lambda i, tok, delta: pieces.append((i, tok, delta)))
    for i, o in enumerate(out):
        assert "".join(d for j, _, d in pieces if j == i) == o.text
        assert [t for j, t, _ in pieces if j == i] == o.token_ids


def test_thread_count_does_not_change_samples(llm, stories_path):
    """Rows are sampled over the threads, each with its own seeded stream: a batch of mixed samplers
    (greedy, plain greedy next to penalized greedy, temperature with every filter, penalties, stop
    tokens masked until min_tokens, top-n logprobs) gives the same tokens on 1 and 2 threads."""
    two = LLM(stories_path, threads=2, kv_dtype="f32")
    eos = llm.tokenizer.eos_id
    kinds = [dict(temperature=0.0), dict(temperature=0.0, repetition_penalty=1.3),
             dict(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, logprobs=3),
             dict(temperature=1.1, presence_penalty=0.5, frequency_penalty=0.3),
             dict(temperature=0.7, min_tokens=12, stop_token_ids=[eos, 13]), dict(temperature=1.0, logprobs=2)]
    prompts = [llm.tokenize(t) for t in ("Once upon a time", "The cat", "Lily and Ben", "One day", "Tom had a")]
    reqs = [(p, SamplingParams(max_tokens=24, seed=11 * i + j, **kw))
            for i, p in enumerate(prompts) for j, kw in enumerate(kinds)]
    a = llm.generate([p for p, _ in reqs], [sp for _, sp in reqs])
    b = two.generate([p for p, _ in reqs], [sp for _, sp in reqs])
    for x, y in zip(a, b):
        assert x.token_ids == y.token_ids and x.logprobs == y.logprobs and x.top_logprobs == y.top_logprobs
    assert len({tuple(x.token_ids) for x in a}) > len(prompts)   # the samplers did differ
