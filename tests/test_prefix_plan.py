"""The plan LLM.score_tokens runs (llmbench.prefix_plan), without an engine: a walk over each plan checks
that every request's context is covered by the prefix it forks and its own tokens, that a prefix shared
by several contexts is computed once, that a fork only ever reads a prefix held at that moment (and the
KV cache holds no more than the chunk's branch of the tree), and that each result has its request's
place. Property tests over random contexts from a small alphabet (many shared prefixes), and one worked
example: a few-shot header with several answers per question."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbench.prefix_plan import Chunk, plan_scoring, prefix_tree


def walk(plan: list[Chunk], contexts: list[tuple[int, ...]], max_seqs: int) -> tuple[dict, Counter, dict]:
    """Run ``plan`` as the engine would, checking each step: (the prefix each request forks, how many
    times each token was computed, a token named by the prefix that ends with it, the parent each held
    prefix forked)."""
    held: set[tuple[int, ...]] = set()
    ever: dict[tuple[int, ...], tuple[int, ...] | None] = {}
    forks: dict[int, tuple[int, ...] | None] = {}
    computed: Counter = Counter()
    for chunk in plan:
        assert 1 <= len(chunk.score) <= max_seqs
        for p in chunk.release:
            held.remove(p)
        for level in chunk.hold:
            for p, up in level:
                assert p not in ever, f"{p} held twice"
                assert up is None or (up in held and p[: len(up)] == up and len(up) < len(p))
                computed.update(p[: k + 1] for k in range(len(up or ()), len(p)))
            for p, up in level:   # a level forks what was held before it, then is held itself
                held.add(p)
                ever[p] = up
        for i, p in chunk.score:
            assert i not in forks, f"request {i} scored twice"
            ctx = contexts[i]
            assert p is None or (p in held and ctx[: len(p)] == p)
            forks[i] = p
            computed.update(ctx[: k + 1] for k in range(len(p or ()), len(ctx)))
        for q in held:   # nothing held beyond this chunk's branch of the tree
            assert any(contexts[i][: len(q)] == q for i, _ in chunk.score), q
    return forks, computed, ever


def computed_by(parents: dict, p: tuple[int, ...] | None, n: int) -> tuple[int, ...] | None:
    """The held prefix that computed token ``n`` of held prefix ``p`` (p or one of its ancestors)."""
    while p is not None and parents[p] is not None and len(parents[p]) > n:
        p = parents[p]
    return p


contexts_st = st.lists(st.lists(st.integers(0, 2), min_size=1, max_size=10).map(tuple), max_size=30)


@settings(max_examples=300, deadline=None)
@given(contexts_st, st.integers(1, 7), st.integers(1, 5))
def test_every_request_is_covered_once_in_its_place(contexts, max_seqs, min_len):
    for share in (True, False):
        plan = plan_scoring(contexts, max_seqs, share, min_len)
        forks, _, _ = walk(plan, contexts, max_seqs)
        assert sorted(forks) == list(range(len(contexts)))   # each request once: its result has its place
        # in sorted order of the contexts (ties in request order), max_seqs a chunk
        assert [i for c in plan for i, _ in c.score] == sorted(range(len(contexts)), key=contexts.__getitem__)
        if not share:
            assert all(not c.hold and not c.release for c in plan) and set(forks.values()) <= {None}


@settings(max_examples=300, deadline=None)
@given(contexts_st, st.integers(1, 7), st.integers(1, 5))
def test_shared_prefixes_are_computed_once(contexts, max_seqs, min_len):
    plan = plan_scoring(contexts, max_seqs, True, min_len)
    forks, computed, parents = walk(plan, contexts, max_seqs)
    for i in range(len(contexts)):
        for j in range(i + 1, len(contexts)):
            a, b = contexts[i], contexts[j]
            k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            if k >= min_len or len(a) == len(b) == k > 1:   # a shared prefix: computed once, for both
                assert len(forks[i]) >= k and len(forks[j]) >= k
                for n in range(k):
                    assert computed_by(parents, forks[i], n) == computed_by(parents, forks[j], n), (a, b, n)
    # nothing computed twice but what no two contexts share enough of
    for key, n in computed.items():
        if n > 1:
            assert len(key) < min_len


def test_few_shot_header_then_questions():
    """A 40-token header, four questions of 3 tokens, three answers each: the header is computed once,
    each question's context once; with 5 requests a chunk the header stays held across the chunks."""
    header = tuple(range(100, 140))
    contexts = [header + (q, q, q) for q in range(4) for _ in range(3)]
    plan = plan_scoring(contexts, 5)
    forks, computed, _ = walk(plan, contexts, 5)
    assert [len(c.score) for c in plan] == [5, 5, 2]
    assert plan[0].hold == (((header, None),), tuple((header + (q, q, q), header) for q in (0, 1)))
    assert plan[1].release == (header + (0, 0, 0),)   # question 0 is done, the header is not
    assert all(forks[i] == contexts[i] for i in range(12)) and set(computed.values()) == {1}
    assert sum(computed.values()) == 40 + 4 * 3


def test_prefix_tree_branches():
    keys = [(1, 2, 3, 4), (1, 2, 3, 5), (1, 2, 9), (7, 7), (7, 7), (8,)]
    parent, attach = prefix_tree(keys, min_len=2)
    assert parent == {(1, 2): None, (1, 2, 3): (1, 2), (7, 7): None}
    assert attach == [(1, 2, 3), (1, 2, 3), (1, 2), (7, 7), (7, 7), None]


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_seqs >= 1"):
        plan_scoring([(1, 2)], 0)
    assert plan_scoring([], 4) == []
