"""MMLU-style log-likelihoods from the engine (LLM.loglikelihood, LLM.score_tokens) against the float64
NumPy forward pass of tests/reference, on the real stories260K model and its Q8_0 quantization.

Twenty (context, continuation) pairs: four questions behind one few-shot header (long enough to be held
as a shared prefix) with the answers " A".." D" (one or two tokens each on the 512-token vocabulary),
a long answer, a context ending in a space, and two short unrelated contexts. The reference scores the
same token ids (built here with llm.tokenize, lm-evaluation-harness's split) with log-softmax in float64.
Checked: activations="f32" within a tight bound, the default settings ("q8" activations, F16 KV cache)
within a looser one, the greedy flag wherever the reference decides it by a clear margin, and prefix
sharing in score_tokens giving bit-identical numbers to each request scored alone.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference.forward import Reference
from scipy.special import log_softmax

from llmbench import LLM
from llmbench.llm import SHARED_PREFIX_MIN
from llmbench.models.quantize import quantize_file

HEADER = ("The following are questions about short stories.\n\n"
          "Lily had a red ball. She played with it in the park.\nWhat did Lily have?\n"
          "A. a dog\nB. a red ball\nC. a cat\nD. a tree\nAnswer: B\n\n")
QUESTIONS = [
    "Tom saw a big dog. The dog was happy and ran to him.\nHow was the dog?\nA. sad\nB. angry\nC. happy\n"
    "D. sleepy\nAnswer:",
    "Sue went to the shop with her mom. They bought some milk.\nWhat did they buy?\nA. milk\nB. bread\n"
    "C. a toy\nD. a hat\nAnswer:",
    "Once upon a time, there was a little bird. It could not fly.\nWhat could the bird not do?\nA. sing\n"
    "B. eat\nC. walk\nD. fly\nAnswer:",
    "Ben and Mia made a big cake for their friend.\nWho made the cake?\nA. Ben and Mia\nB. the dog\nC. mom\n"
    "D. the bird\nAnswer:",
]
PAIRS = [(HEADER + q, " " + c) for q in QUESTIONS for c in "ABCD"] + [
    (HEADER + QUESTIONS[0], " C. happy"),                       # a longer answer behind the header
    (HEADER + QUESTIONS[3] + " ", "A"),                         # the space moves to the continuation
    ("Lily went to the park", " and played with her friends."),
    ("Once upon a time,", " there was a little girl named Lily."),   # the greedy story: greedy True
]

# activations="f32": float products in float32 against the float64 reference. Measured over the 20 pairs,
# |logprob - reference|: F32 file max 2.4e-6 (relative 1.0e-6), Q8_0 file max 6.9e-6 (relative 9.6e-7):
# float32 rounding of the logits, about 1e-6 of |logprob|. The bound is 3.5-5x the measured errors:
F32_ATOL, F32_RTOL = 2e-6, 3e-6
# Default settings (activations="q8", kv_dtype="f16"), (atol, rtol) per file, 3-3.5x the measured errors.
# F32 file: q8 changes nothing there (only quantized matrices take 8-bit activations; asserted bit-identical
# below), the error is the F16 KV cache's: max 1.0e-2 (relative 2.0e-3). Q8_0 file: max 0.11 (relative
# 2.2e-2), the 8-bit activations' (with an F32 KV cache max 0.12; F16 KV with f32 activations max 5.5e-3);
# it hardly grows with the number of tokens (0.039 on the 4-token answer, logprob -36), so mostly absolute.
DEFAULT_BOUNDS = {"F32": (0.02, 3e-3), "Q8_0": (0.3, 1e-2)}
# The greedy flag is compared where the reference decides it by more than this many logits between the
# target token and the best other token (one position's gap decides False; True needs every position's):
# well above the logit errors of each setting. Measured: every pair's flag is decided by more than that.
GREEDY_MARGIN = {"f32": 1e-4, "F32": 0.05, "Q8_0": 0.3}


# ---- requests and the independent reference ----

def harness_request(llm: LLM, context: str, continuation: str) -> tuple[list[int], int]:
    """(token ids, n_context) as lm-evaluation-harness builds them: trailing spaces of the context move to
    the continuation; the context is encode(context) (BOS as the model says), the continuation the tokens
    of encode(context + continuation) past that many."""
    n_sp = len(context) - len(context.rstrip())
    if n_sp:
        context, continuation = context[:-n_sp], context[-n_sp:] + continuation
    ctx = llm.tokenize(context)
    return ctx + llm.tokenize(context + continuation)[len(ctx):], len(ctx)


def reference_scores(ref: Reference, reqs: list[tuple[list[int], int]]) -> list[tuple[float, np.ndarray]]:
    """For each (ids, n_ctx): the float64 sum of log p(ids[i] | ids[:i]) over i >= n_ctx, and the gap per
    scored position (best other token's logit minus the target's: the target is greedy where it is < 0).

    The reference is causal, so the rows of a sequence's logits are also the logits of each of its
    prefixes: one forward pass over every longest fed sequence (ids without the last, scored-only token)
    serves all requests whose fed sequence it extends (the four answers of a question, mostly)."""
    fed = {tuple(ids[:-1]) for ids, _ in reqs}
    longest = [f for f in fed if not any(len(g) > len(f) and g[: len(f)] == f for g in fed)]
    logits = {f: ref.logits(list(f)) for f in longest}
    out = []
    for ids, n_ctx in reqs:
        f = tuple(ids[:-1])
        host = next(g for g in longest if g[: len(f)] == f)
        rows = logits[host][n_ctx - 1: len(ids) - 1]            # row i-1 predicts ids[i]
        at = np.arange(len(rows)), np.asarray(ids[n_ctx:])
        logp = log_softmax(rows, axis=1)
        others = rows.copy()
        others[at] = -np.inf
        out.append((float(logp[at].sum()), others.max(1) - rows[at]))
    return out


def check_against_reference(got: list[tuple[float, bool]], want: list[tuple[float, np.ndarray]],
                            atol: float, rtol: float, margin: float) -> int:
    """Every logprob within atol + rtol * |reference|; the greedy flag equal wherever the reference decides
    it by more than ``margin``. Returns how many flags were compared."""
    errs = [abs(lp - w) for (lp, _), (w, _) in zip(got, want)]
    compared = 0
    for k, ((lp, greedy), (w, gap), err) in enumerate(zip(got, want, errs)):
        assert err <= atol + rtol * abs(w), f"pair {k} {PAIRS[k]!r}: {lp} vs reference {w} (max error {max(errs):.3g})"
        if (gap > margin).any() or (gap < -margin).all():       # decided by more than the margin
            assert greedy == bool((gap < 0).all()), f"pair {k} {PAIRS[k]!r}: greedy {greedy}, gaps {gap}"
            compared += 1
    return compared


# ---- fixtures: the F32 file and its Q8_0 quantization, each with its reference scores ----

@pytest.fixture(scope="module", params=["F32", "Q8_0"])
def model(request, stories_path, tmp_path_factory):
    """(kind, path, requests, reference scores) for stories260K as shipped (F32) and quantized to Q8_0 (its
    172-wide ffn_down in F16), where q8 activations take the integer dot products."""
    path = stories_path
    if request.param != "F32":
        path = tmp_path_factory.mktemp("stories") / f"stories260K.{request.param}.gguf"
        quantize_file(stories_path, path, request.param)
    tok = LLM(path, threads=1, ctx=16, max_seqs=1)
    reqs = [harness_request(tok, c, x) for c, x in PAIRS]
    return request.param, path, reqs, reference_scores(Reference(path), reqs)


def test_requests_are_mmlu_like(model):
    _, path, reqs, want = model
    llm = LLM(path, threads=1, ctx=16, max_seqs=1)
    assert len(llm.tokenize(HEADER)) >= SHARED_PREFIX_MIN        # long enough to be held once and forked
    n_cont = [len(ids) - n for ids, n in reqs]
    assert set(n_cont[:16]) <= {1, 2} and min(n_cont[16], *n_cont[18:]) >= 4   # " A".." D"; longer ones
    assert reqs[-3] == reqs[12]                                   # trailing space of the context moved
    assert want[-1][1].max() < 0                                  # the greedy story is greedy


# ---- log-likelihoods against the reference ----

def test_f32_activations_match_reference(model):
    _, path, reqs, want = model
    llm = LLM(path, threads=2, kv_dtype="f32", activations="f32")
    got = llm.loglikelihood(PAIRS)
    assert got == llm.score_tokens(reqs)                          # the harness's tokenization, as built here
    assert check_against_reference(got, want, F32_ATOL, F32_RTOL, GREEDY_MARGIN["f32"]) == len(PAIRS)


def test_default_settings_match_reference(model):
    kind, path, reqs, want = model
    llm = LLM(path, threads=2)                                    # activations="q8", kv_dtype="f16"
    got = llm.loglikelihood(PAIRS)
    assert check_against_reference(got, want, *DEFAULT_BOUNDS[kind], GREEDY_MARGIN[kind]) >= len(PAIRS) - 4
    if kind == "F32":                                             # no quantized matrix: q8 is f32 exactly
        assert got == LLM(path, threads=2, activations="f32").loglikelihood(PAIRS)


# ---- prefix sharing ----

def test_shared_prefixes_give_the_numbers_of_requests_alone(model):
    """score_tokens computes the header once, each question's context once, and forks them. Bit-identical
    to each request computed whole: a token's numbers depend only on its own row and the KV cache before
    it (the engine is batch-invariant, tests/test_engine.py; activation scales are per token), and a forked
    prefix's cache holds the very values the whole computation writes. Default settings: float products
    on the F32 file, 8-bit activations on the Q8_0 file."""
    _, path, reqs, _ = model
    llm = LLM(path, threads=2)
    llm.engine.reset_stats()
    shared = llm.score_tokens(reqs)
    computed = llm.engine.stats()["prefill_tokens"]
    alone = [llm.score_tokens([r])[0] for r in reqs]
    assert shared == alone
    assert computed < sum(len(ids) for ids, _ in reqs) // 3       # the sharing did happen
