"""How ``LLM.score_tokens`` computes many (context, continuation) requests: the tree of prefixes their
contexts share, and the order in which the engine holds, forks and releases those prefixes, as a plan
of plain data. Pure functions over token tuples, tested without an engine in tests/test_prefix_plan.py;
llmbench/llm.py runs a plan on the engine."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

# A prefix that distinct contexts share is held from this many tokens on: a shorter one saves less
# prefill than the extra engine pass it costs.
SHARED_PREFIX_MIN = 32

Tokens = tuple[int, ...]


def prefix_tree(keys: Sequence[Tokens], min_len: int = SHARED_PREFIX_MIN) \
        -> tuple[dict[Tokens, Tokens | None], list[Tokens | None]]:
    """The tree of shared prefixes of token sequences: (parent, attach). A branch is a prefix that two
    sequences next to each other in sorted order share, of at least ``min_len`` tokens, or the whole of
    two equal sequences (of more than one token); ``parent[b]`` is the longest branch that ``b``
    extends (None at the top); ``attach[i]`` the longest branch ``keys[i]`` begins with (None: none)."""
    order = sorted(range(len(keys)), key=keys.__getitem__)
    branches = set()
    for i, j in itertools.pairwise(order):
        a, b = keys[i], keys[j]
        k, m = 0, min(len(a), len(b))
        while k < m and a[k] == b[k]:
            k += 1
        if k >= min_len or len(a) == len(b) == k > 1:
            branches.add(a[:k])
    # One walk over branches and sequences in sorted order (a prefix sorts before what extends it, a
    # branch before the sequence equal to it): a stack of the prefixes of the current entry gives
    # each branch its parent branch and each sequence the deepest branch it extends.
    parent: dict[Tokens, Tokens | None] = {}
    attach: list[Tokens | None] = [None] * len(keys)
    stack: list[Tokens] = []
    for key, kind, j in sorted([(p, 0, -1) for p in branches] + [(keys[i], 1, i) for i in order]):
        while stack and key[: len(stack[-1])] != stack[-1]:
            stack.pop()
        if kind == 0:
            parent[key] = stack[-1] if stack else None
            stack.append(key)
        else:
            attach[j] = stack[-1] if stack else None
    return parent, attach


@dataclass(frozen=True)
class Chunk:
    """One step of a scoring plan, done in this order: ``release`` the held prefixes that sorted order
    has moved past; compute and hold the prefixes of ``hold``, level by level, each (prefix, parent)
    forking its parent (held by then) or starting empty (parent None), a level computed together; then
    compute the requests of ``score``, each (request index, held prefix it forks or None), together."""

    release: tuple[Tokens, ...]
    hold: tuple[tuple[tuple[Tokens, Tokens | None], ...], ...]
    score: tuple[tuple[int, Tokens | None], ...]


def plan_scoring(contexts: Sequence[Sequence[int]], max_seqs: int, share_prefix: bool = True,
                 min_len: int = SHARED_PREFIX_MIN) -> list[Chunk]:
    """The plan that scores requests with these contexts, ``max_seqs`` requests a chunk, in sorted order
    of their contexts. With ``share_prefix`` a prefix of the tree (``prefix_tree``) is computed once and
    held, forked from the longest held prefix of itself; each request forks the longest held prefix of
    its context. A chunk holds only the prefixes its requests need, so the KV cache never holds more
    than one chunk's branch of the tree, and a prefix is released once the requests below it are done
    (never held twice). Without ``share_prefix`` nothing is held: each request is computed whole."""
    if max_seqs < 1 or min_len < 1:
        raise ValueError(f"plan_scoring needs max_seqs >= 1 and min_len >= 1, got {max_seqs} and {min_len}")
    keys = [tuple(c) for c in contexts]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    ctxs = [keys[i] for i in order]
    parent, attach = prefix_tree(ctxs, min_len) if share_prefix else ({}, [None] * len(ctxs))
    held: list[Tokens] = []
    plan = []
    for lo in range(0, len(order), max_seqs):
        hi = min(lo + max_seqs, len(order))
        release = tuple(p for p in held if ctxs[lo][: len(p)] != p)   # below it, sorted order is past
        held = [p for p in held if p not in release]
        need = set()
        for p in attach[lo:hi]:
            while p is not None and p not in need:
                need.add(p)
                p = parent[p]
        need.difference_update(held)
        levels = []
        while need:   # by depth: each branch forks its parent, held by then
            level = sorted(p for p in need if parent[p] is None or parent[p] in held)
            if not level:   # cannot happen: a parent is held or needed; never loop forever
                raise RuntimeError("plan_scoring: a shared prefix lost its parent")
            levels.append(tuple((p, parent[p]) for p in level))
            held += level
            need.difference_update(level)
        plan.append(Chunk(release, tuple(levels), tuple((order[j], attach[j]) for j in range(lo, hi))))
    return plan
