"""The engine adapter's generate_until: prefix sharing (held few-shot prefixes, nested ones, the KV budget)
changes no output token or log-probability, computes the shared prefix once, and long prompts are cut on
the left as lm-eval cuts them. On the real stories260K model and GSM8K data."""

from __future__ import annotations

import pytest
from conftest import SHARED

from llmbench import LLM, SamplingParams
from llmbench.eval import make_task
from llmbench.eval.adapters import EngineAdapter, token_texts
from llmbench.eval.api import GenerateUntil
from llmbench.llm import prefix_tree

DATA = SHARED / "data"


@pytest.fixture(scope="module")
def llm(stories_path):
    return LLM(stories_path, threads=2)


@pytest.fixture(scope="module")
def gsm8k_data():
    if not (DATA / "gsm8k" / "test.jsonl").exists():
        pytest.skip(f"{DATA / 'gsm8k'} not found: the GSM8K data lives in ../shared/data")
    return DATA


def _run(llm, reqs, share):
    ad = EngineAdapter(llm, share_prefix=share)
    return ad, ad.answer(reqs)


def _same(a, b):
    assert [g.text for g in a] == [g.text for g in b]
    assert [g.token_logprobs for g in a] == [g.token_logprobs for g in b]     # bit-identical
    assert [g.finish_reason for g in a] == [g.finish_reason for g in b]
    assert [g.n_tokens for g in a] == [g.n_tokens for g in b]


def test_prefix_sharing_changes_no_greedy_output(llm, gsm8k_data):
    """gsm8k_cot's 8-shot prompts (about 1,500 tokens each, all but the question shared) and 2-shot ones
    of other questions in one batch: the same greedy texts and log-probabilities with and without held
    prefixes, and the shared run computes each few-shot block once."""
    eight = make_task("gsm8k_cot", limit=5, data_dir=gsm8k_data)
    two = make_task("gsm8k_cot", shots=2, limit=8, data_dir=gsm8k_data)
    reqs = [r for t, docs in ((eight, eight.docs()), (two, two.docs()[5:])) for d in docs for r in t.requests(d)]
    shared_ad, shared = _run(llm, reqs, True)
    alone_ad, alone = _run(llm, reqs, False)
    _same(shared, alone)
    assert all(g.n_tokens > 0 for g in shared)
    assert shared_ad.stats["prompt_tokens"] == alone_ad.stats["prompt_tokens"] > 5 * 1400
    assert alone_ad.stats["computed_tokens"] == alone_ad.stats["prompt_tokens"]
    header = len(llm.tokenize(eight.prompt(eight.docs()[0]))) - 60    # the 8-shot block, give or take
    assert shared_ad.stats["computed_tokens"] < alone_ad.stats["computed_tokens"] - 4 * header
    assert shared_ad.stats["generated_tokens"] == sum(g.n_tokens for g in shared)
    # and as LLM.generate gives them, one prompt at a time
    for r, g in list(zip(reqs, shared))[::3]:
        want = llm.generate(r.context, SamplingParams(temperature=0, max_tokens=r.max_tokens, stop=list(r.until)))[0]
        assert g.text == want.text and g.token_logprobs == want.logprobs


def test_nested_prefixes_and_the_kv_budget(llm, monkeypatch):
    """A header shared by all and two blocks below it form a tree of three held prefixes; when held
    prefixes would take more than half the KV cache, the ones saving least are dropped (their requests
    fork the next one up): outputs never change."""
    head = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the sun with her "
            "friends and her big brown dog. ")
    a = head + "One day, she saw a big red ball in the park near her house and she ran to get it. "
    b = head + "Her mom said they would go to the zoo to see the lions, and the tigers and the bears. "
    reqs = [GenerateUntil(x + y, (".",), max_tokens=24, logprobs=3)
            for x in (a, b) for y in ("She", "Lily was", "Then")] + [GenerateUntil("Tom had a dog.", (), max_tokens=8)]
    ids = [tuple(llm.tokenize(r.context)) for r in reqs]
    parent, attach = prefix_tree(ids)
    assert len(parent) == 3 and sum(p is None for p in parent.values()) == 1      # head, head+a, head+b
    assert attach[-1] is None and len({attach[0], attach[3]}) == 2
    alone_ad, alone = _run(llm, reqs, False)
    shared_ad, shared = _run(llm, reqs, True)
    _same(shared, alone)
    assert [g.top_logprobs for g in shared] == [g.top_logprobs for g in alone]
    assert all(len(d) == 3 for g in shared[:-1] for d in g.top_logprobs) and shared[-1].top_logprobs is None
    assert shared_ad.stats["computed_tokens"] < alone_ad.stats["computed_tokens"] - 4 * len(llm.tokenize(head))
    for g in shared[:-1]:                                # each token's text, joined: the text (up to the stop)
        assert "".join(g.tokens).startswith(g.text) and len(g.tokens) == g.n_tokens
    # a KV cache that holds only the header: the blocks below it are dropped, their requests fork the header
    small = EngineAdapter(llm)
    head_blocks = -(-len(parent_key := min(parent, key=len)) // llm.block_size)
    monkeypatch.setattr(llm, "kv_blocks", 2 * head_blocks + 1)
    kept, attach2 = small._fit(parent, attach)
    assert list(kept) == [parent_key] and attach2[:6] == [parent_key] * 6 and attach2[-1] is None
    _same(small.answer(reqs), alone)


def test_token_texts_join_to_the_text(llm):
    ids = llm.tokenize("Lily saw a cat. It was big and soft!", add_bos=False)
    parts = token_texts(llm.tokenizer, ids)
    assert len(parts) == len(ids) and "".join(parts) == llm.detokenize(ids)


def test_long_prompts_keep_their_end(llm):
    """A prompt longer than ctx - max_tokens keeps its last tokens (lm-eval's left cut), instead of
    failing in the engine."""
    story = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 70
    ids = llm.tokenize(story)
    assert len(ids) > llm.ctx
    ad = EngineAdapter(llm)
    g = ad.answer([GenerateUntil(story, (), max_tokens=16)])[0]
    want = llm.generate([ids[-(llm.ctx - 16):]], SamplingParams(temperature=0, max_tokens=16))[0]
    assert g.text == want.text and ad.stats["truncated"] == 1
    with pytest.raises(ValueError, match="leaves no room"):
        ad.answer([GenerateUntil("Hi", (), max_tokens=llm.ctx)])
