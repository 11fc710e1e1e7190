"""The embedded adapter: llmbench's own engine answers evaluation requests.

This is where evaluation is fast. ``loglikelihood`` hands a whole batch of requests to
`LLM.loglikelihood`, which sorts the contexts into a tree of shared prefixes (a subject's description
and few-shot block; the four answers of one question), computes each prefix once and forks it (copy
on write) for the requests below it, runs up to ``max_seqs`` requests per engine pass, and asks the
engine for log-probabilities only from the first continuation token on, so no logits row is computed
that nobody reads. ``stats`` counts the prompt tokens the requests hold and the tokens the engine
actually computed, the measure of what sharing saved.

``loglikelihood_rolling`` follows lm-evaluation-harness: the text's tokens after a BOS (EOS where the
model has none) are cut into windows of the context length, each window predicting its own tokens
from the ones before it (one token of overlap), and the log-probabilities summed.

Tested in tests/test_eval.py (prefix-shared against unshared scoring, MMLU end to end on stories260K).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..llm import LLM, SamplingParams, prefix_tree
from .api import (
    Adapter,
    GenerateUntil,
    Generation,
    LLAnswer,
    Loglikelihood,
    LoglikelihoodRolling,
    RollingAnswer,
)

MAX_LOGPROBS = 20       # the engine's top-n log-probabilities per token (SamplingParams.logprobs 0..20)

def rolling_windows(tokens: Sequence[int], prefix_token: int, max_len: int) -> list[tuple[list[int], int]]:
    """lm-eval's rolling windows with a context of one token, made disjoint: a list of (ids,
    n_context) whose scored parts cover ``tokens`` exactly once. The first window starts with
    ``prefix_token``; each later one is preceded by the token before it."""
    out: list[tuple[list[int], int]] = []
    done = 0
    while done < len(tokens):
        n = min(max_len, len(tokens) - done)
        ctx = [prefix_token] if done == 0 else [tokens[done - 1]]
        out.append((ctx + list(tokens[done: done + n]), 1))
        done += n
    return out


def token_texts(tok: Any, ids: Sequence[int]) -> list[str]:
    """The text each output token adds: decode(ids[:i + 1]) past decode(ids[:i]), so that they join to
    the decoded text (a token that ends inside a UTF-8 character adds nothing; the one completing it
    adds the character)."""
    out, prev = [], ""
    for i in range(len(ids)):
        cur = tok.decode(list(ids[: i + 1]))
        if cur.endswith("\ufffd"):              # an incomplete character: wait for its other bytes
            out.append("")
            continue
        out.append(cur[len(prev):])
        prev = cur
    return out


def _unique_keys(tok: Any, top: dict[int, float]) -> dict[str, float]:
    """A top-logprobs entry keyed by token text; ids whose texts collide (byte tokens of one broken
    character) keep their own entry under "text[id]", so no probability is lost."""
    out: dict[str, float] = {}
    for i, v in top.items():
        key = tok.decode([i], skip_special=False)
        out[key if key not in out else f"{key}[{i}]"] = v
    return out


class EngineAdapter(Adapter):
    """Answers requests with a loaded `LLM` (or loads one: ``EngineAdapter("model.gguf", threads=2)``).

    ``share_prefix=False`` computes every request whole (the same numbers, slower: for measuring what
    sharing buys). ``model_name`` is how results name the model (default: the path or preset given)."""

    name = "engine"
    answers_as_they_finish = ("generate_until",)

    def __init__(self, model: LLM | str | os.PathLike[str], *, share_prefix: bool = True,
                 model_name: str | None = None, **llm_options: Any):
        self.llm = model if isinstance(model, LLM) else LLM(model, **llm_options)
        self.model_name = model_name or (str(model) if not isinstance(model, LLM) else str(self.llm.path))
        self.share_prefix = share_prefix
        self.precision = self.llm.activations
        self.stats = {"prompt_tokens": 0, "computed_tokens": 0, "requests": 0}

    def _count(self, before: dict[str, int], n_requests: int, n_tokens: int) -> None:
        after = self.llm.engine.stats()
        self.stats["requests"] += n_requests
        self.stats["prompt_tokens"] += n_tokens
        self.stats["computed_tokens"] += int(after["prefill_tokens"]) - int(before["prefill_tokens"])

    def loglikelihood(self, reqs: Sequence[Loglikelihood]) -> list[LLAnswer]:
        if not reqs:
            return []
        toks = self.llm.loglikelihood_tokens([(r.context, r.continuation) for r in reqs])
        before = self.llm.engine.stats()
        out = self.llm.score_tokens(toks, self.share_prefix)
        self._count(before, len(reqs), sum(len(ids) for ids, _ in toks))
        return [LLAnswer(lp, g) for lp, g in out]

    def loglikelihood_rolling(self, reqs: Sequence[LoglikelihoodRolling]) -> list[RollingAnswer]:
        tok = self.llm._tok()
        start = tok.bos_id if tok.bos_id is not None else tok.eos_id
        if start is None:
            raise ValueError("loglikelihood_rolling needs a BOS or EOS token to start the first window")
        flat: list[tuple[list[int], int]] = []
        owner: list[int] = []
        lengths = []
        for i, r in enumerate(reqs):
            ids = tok.encode(r.text, add_bos=False)
            lengths.append(len(ids))
            for w in rolling_windows(ids, start, self.llm.ctx):
                flat.append(w)
                owner.append(i)
        before = self.llm.engine.stats()
        scores = self.llm.score_tokens(flat, self.share_prefix) if flat else []
        self._count(before, len(flat), sum(len(w) for w, _ in flat))
        total = [0.0] * len(reqs)
        for i, (lp, _) in zip(owner, scores):
            total[i] += lp
        return [RollingAnswer(t, n) for t, n in zip(total, lengths)]

    def generate_until(self, reqs: Sequence[GenerateUntil],
                       on_answer: Callable[[int, Generation], None] | None = None) -> list[Generation]:
        """All requests in one engine run (continuous batching: up to ``max_seqs`` sequences decode
        together, finished ones replaced by waiting ones). With ``share_prefix`` the prompts' shared
        prefixes (`LLM.prefix_tree`: a few-shot block, a subject's header) are held once
        (`LLM.hold_prefix`, nested prefixes forked from their parent) and each request forks the longest
        one it begins with, so only its own tokens are computed; the token ids are the same either way,
        and so are the outputs. A prompt longer than ``ctx - max_tokens`` keeps its last tokens, as
        lm-evaluation-harness cuts generation contexts (``stats["truncated"]`` counts them).
        ``on_answer(i, generation)`` is called as each request finishes, while the others decode."""
        if not reqs:
            return []
        tok = self.llm._tok()
        prompts: list[list[int]] = []
        for r in reqs:
            ids = (tok.encode(tok.apply_chat_template(list(r.context), True)) if isinstance(r.context, tuple)
                   else self.llm._prompt_ids(r.context))
            room = self.llm.ctx - r.max_tokens
            if room < 1:
                raise ValueError(f"generate_until: max_tokens {r.max_tokens} leaves no room for a prompt in the "
                                 f"context of {self.llm.ctx} tokens")
            if len(ids) > room:
                ids = ids[-room:]
                self.stats["truncated"] = self.stats.get("truncated", 0) + 1
            prompts.append(ids)
        params = [SamplingParams(temperature=r.temperature, top_p=r.top_p, top_k=r.top_k, min_p=r.min_p,
                                 seed=r.seed, max_tokens=r.max_tokens, stop=list(r.until), logprobs=r.logprobs)
                  for r in reqs]
        before = self.llm.engine.stats()
        held: dict[tuple[int, ...], Any] = {}
        try:
            attach: list[tuple[int, ...] | None] = [None] * len(prompts)
            if self.share_prefix:
                parent, attach = prefix_tree([tuple(p) for p in prompts])
                parent, attach = self._fit(parent, attach)
                for b in sorted(parent, key=len):          # a parent is shorter than its children
                    up = parent[b]
                    held[b] = self.llm.hold_prefix(list(b), parent=held[up] if up else None)
            finished = None if on_answer is None else \
                (lambda i, c: on_answer(i, self._generation(reqs[i], c, tok)))
            done = self.llm.generate([p[len(a):] if a else p for p, a in zip(prompts, attach)], params,
                                     prefix=[held[a] if a else None for a in attach], on_finish=finished)
        finally:
            for h in held.values():
                h.release()
        self._count(before, len(reqs), sum(len(p) for p in prompts))
        self.stats["generated_tokens"] = self.stats.get("generated_tokens", 0) + sum(len(c.token_ids) for c in done)
        return [self._generation(r, c, tok) for r, c in zip(reqs, done)]

    @staticmethod
    def _generation(r: GenerateUntil, c: Any, tok: Any) -> Generation:
        top = texts = None
        if r.logprobs is not None:
            texts = token_texts(tok, c.token_ids)
            top = [_unique_keys(tok, d) for d in c.top_logprobs or []] if r.logprobs else None
        return Generation(c.text, c.finish_reason, len(c.token_ids), list(c.logprobs), top, texts)

    def top_logprobs_limit(self, chat: bool = False) -> int | None:
        return MAX_LOGPROBS

    def _fit(self, parent: dict, attach: list) -> tuple[dict, list]:
        """Drop held prefixes, those that save the fewest tokens first, until they take at most half of
        the KV cache (the rest is for the requests); a request below a dropped prefix forks the longest
        kept one above it."""
        bs = self.llm.block_size
        budget = self.llm.kv_blocks // 2

        def own(b: tuple[int, ...]) -> int:        # blocks a held prefix adds to its parent's
            return -(-len(b) // bs) - (len(parent[b]) // bs if parent[b] else 0)

        if sum(own(b) for b in parent) <= budget:
            return parent, attach
        below: dict[tuple[int, ...], int] = {}
        for a in attach:
            while a is not None:
                below[a] = below.get(a, 0) + 1
                a = parent[a]
        keep, used = set(), 0
        for b in sorted(parent, key=lambda b: -(len(b) - len(parent[b] or ())) * below.get(b, 0)):
            if used + -(-len(b) // bs) <= budget:   # counted whole: its parent may be dropped
                keep.add(b)
                used += -(-len(b) // bs)

        def up(a: tuple[int, ...] | None) -> tuple[int, ...] | None:
            while a is not None and a not in keep:
                a = parent[a]
            return a

        return {b: up(parent[b]) for b in keep}, [up(a) for a in attach]

    def environment(self) -> dict[str, Any]:
        from ..perf.bench import engine_environment, header

        env = engine_environment(self.llm, self.model_name, self.share_prefix)
        env["ctx"] = self.llm.ctx
        return {**{k: v for k, v in header().items() if k != "schema_version"}, **env}
