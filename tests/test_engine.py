"""The inference engine against an independent float64 NumPy forward pass (tests/reference), the
stories260K greedy story, batch invariance, chunked prefill, prefix forks, and clear errors."""

from __future__ import annotations

import re
import sys
import threading

import gguf
import numpy as np
import pytest
from conftest import STORIES
from models import rewritten, with_tensor_replaced
from reference.forward import Reference

import llmbench
from llmbench import LLM, SamplingParams


@pytest.fixture(scope="module")
def stories(stories_path):
    return LLM(stories_path, threads=2, kv_dtype="f32", tokenizer_options={"remove_extra_whitespaces": True})


def expected_story() -> str:
    md = (STORIES.parent / "stories260K.md").read_text()
    block = re.search(r"\./run stories260K/stories260K\.bin -z stories260K/tok512\.bin -t 0\.0\n(.*?)```", md, re.S)
    return block.group(1).strip()


def test_greedy_story_token_for_token(stories):
    want = expected_story()
    assert want.startswith("Once upon a time, there was a little girl named Lily.")
    out = stories.generate("", SamplingParams(temperature=0, max_tokens=256))[0]
    assert out.text[: len(want)] == want
    # the same text re-tokenized is exactly the generated token sequence (token for token)
    assert stories.tokenize(want, add_bos=False) == out.token_ids[: len(stories.tokenize(want, add_bos=False))]


# Measured on the tiny preset (2 layers, dim 256), max |logit - reference| / max |reference|:
# float weights run float dot products, so F32 KV reproduces the float64 reference to float32
# rounding (2.6e-7), F16 KV adds 2.8e-4 and Q8_0 KV 7e-3. Quantized weights run integer dot
# products against activations quantized to 8 bits per token (as llama.cpp does), which costs
# about 1% (normalized RMS error 1.0e-2 for Q8_0, 1.5e-2 for Q4_K_M, whatever the KV type).
# Bounds are the measured values with a 2-4x margin.
FLOAT_WEIGHTS_MAX_REL = {"f32": 1e-6, "f16": 1e-3, "q8_0": 1.5e-2}
QUANT_WEIGHTS_NRMSE = {"Q8_0": 2e-2, "Q4_K_M": 3e-2}


@pytest.mark.parametrize("kv", ["f32", "f16"])
def test_stories_logits_match_reference(stories_path, kv):
    ref = Reference(stories_path)
    llm = LLM(stories_path, threads=2, kv_dtype=kv)
    toks = [1, 403, 407, 261, 378, 11, 350, 365, 263, 410, 485, 13, 13, 444]
    got, want = llm.logits(toks), ref.logits(toks)
    assert got.shape == (len(toks), 512) and got.dtype == np.float32
    # stories260K has 8-wide heads: F16 keys round a little more than the tiny preset's (1.1e-3)
    bound = {"f32": 2e-6, "f16": 3e-3}[kv]
    assert np.abs(got - want).max() <= bound * np.abs(want).max()
    assert (got.argmax(1) == want.argmax(1)).all()


@pytest.mark.parametrize("wtype", ["F32", "F16", "Q8_0", "Q4_K_M"])
@pytest.mark.parametrize("kv", ["f32", "f16", "q8_0"])
def test_dummy_logits_match_reference(wtype, kv):
    path = llmbench.dummy_model("tiny", wtype)
    ref = Reference(path)
    llm = LLM(path, threads=2, kv_dtype=kv)
    toks = np.random.default_rng(1).integers(0, llm.info["vocab"], 37)
    got, want = llm.logits(toks), ref.logits(toks)
    if wtype in QUANT_WEIGHTS_NRMSE:
        nrmse = np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2))
        assert nrmse <= QUANT_WEIGHTS_NRMSE[wtype]
        # float activations against the dequantized weights: as close as float weights are
        got = LLM(path, threads=2, kv_dtype=kv, activations="f32").logits(toks)
    assert np.abs(got - want).max() <= FLOAT_WEIGHTS_MAX_REL[kv] * np.abs(want).max()


# activations="bf16": float matrices and activations rounded to BF16 (8-bit mantissa). Measured on the
# tiny presets (F32, F16; llama, llama3, qwen2), max |logit - reference| / max |reference| with F32 KV:
# 4.0e-3 to 6.5e-3 from the float64 reference, 0.7e-3 to 2.1e-3 from the reference that rounds the same
# operands to BF16 (what remains: float32 sums, and activations that round to the other neighbour).
BF16_MAX_REL = {"plain": 1.5e-2, "bf16": 5e-3}


@pytest.mark.parametrize("preset", ["tiny", "tiny-qwen2"])
@pytest.mark.parametrize("wtype", ["F32", "F16"])
def test_bf16_products_match_reference(preset, wtype):
    path = llmbench.dummy_model(preset, wtype)
    toks = np.random.default_rng(1).integers(0, 1000, 37)
    want, want16 = Reference(path).logits(toks), Reference(path, bf16=True).logits(toks)
    llm = LLM(path, threads=2, kv_dtype="f32", activations="bf16")
    got = llm.logits(toks)
    scale = np.abs(want).max()
    err, err16 = np.abs(got - want).max() / scale, np.abs(got - want16).max() / scale
    assert err <= BF16_MAX_REL["plain"] and err16 <= BF16_MAX_REL["bf16"]
    assert err16 < 0.6 * err   # it follows the BF16 model, not float products
    assert (got.argmax(1) == want16.argmax(1)).all()
    # weights counted as what the forward pass reads: F32 matrices halve, F16 ones keep their size
    r = gguf.GGUFReader(path)
    mats = [t for t in r.tensors if len(t.shape) == 2 and t.name != "token_embd.weight"]
    if not any(t.name == "output.weight" for t in r.tensors):   # tied: the output reads a BF16 copy
        mats += [t for t in r.tensors if t.name == "token_embd.weight"]
    delta = sum(2 * int(t.n_elements) - int(t.n_bytes) for t in mats)
    assert llm.engine.memory()["weights"] == LLM(path, threads=2).engine.memory()["weights"] + delta


def test_bf16_products_leave_quantized_matrices_alone():
    path = llmbench.dummy_model("tiny", "Q4_K_M")   # every matrix quantized: the "q8" products
    toks = np.random.default_rng(2).integers(0, 1000, 9)
    assert np.array_equal(LLM(path, threads=2, activations="bf16").logits(toks), LLM(path, threads=2).logits(toks))
    with pytest.raises(ValueError, match="CPU backend only"):
        LLM(path, activations="bf16", backend="cuda")
    with pytest.raises(ValueError, match="'q8', 'f32' or 'bf16'"):
        LLM(path, activations="int4")


@pytest.mark.parametrize("preset", ["tiny-llama3", "tiny-qwen2"])
@pytest.mark.parametrize("wtype", ["F32", "Q4_K_M"])
def test_layouts_match_reference(preset, wtype):
    """Llama 3.2's tied output and rope frequency factors; Qwen2's QKV biases and NeoX RoPE."""
    path = llmbench.dummy_model(preset, wtype)
    ref = Reference(path)
    toks = np.random.default_rng(3).integers(0, 1024, 29)
    want = ref.logits(toks)
    got = LLM(path, threads=2, kv_dtype="f32", activations="f32").logits(toks)
    assert np.abs(got - want).max() <= FLOAT_WEIGHTS_MAX_REL["f32"] * np.abs(want).max()
    if wtype in QUANT_WEIGHTS_NRMSE:
        got = LLM(path, threads=2, kv_dtype="f32").logits(toks)
        assert np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2)) <= QUANT_WEIGHTS_NRMSE[wtype]


def test_mistral_runs_as_llama(tmp_path):
    """A `mistral` file is a Llama: the same logits, bit for bit. Its sliding attention window, which
    the engine does not implement, bounds ctx (within the window attention is full)."""
    path = llmbench.dummy_model("tiny", "Q8_0")
    toks = np.random.default_rng(5).integers(0, 1024, 40).tolist()
    want = LLM(path, threads=2).logits(toks)
    llm = LLM(rewritten(path, tmp_path / "mistral.gguf", arch="mistral"), threads=2)
    assert llm.info["arch"] == "mistral" and np.array_equal(llm.logits(toks), want)
    windowed = rewritten(path, tmp_path / "window.gguf", {"mistral.attention.sliding_window": 64}, arch="mistral")
    assert LLM(windowed, threads=1).ctx == 64
    with pytest.raises(llmbench.UnsupportedError, match="sliding window of 64 tokens.*ctx <= 64"):
        LLM(windowed, threads=1, ctx=128)


def test_long_positions_use_rope_frequency_factors():
    """At positions past a thousand, Llama 3's frequency factors move the mid-frequency rotations
    by radians; the logits there still match the reference."""
    path = llmbench.dummy_model("tiny-llama3", "F32")
    toks = np.random.default_rng(4).integers(0, 1024, 1200)
    want = Reference(path).logits(toks)[-16:]
    got = LLM(path, threads=2, kv_dtype="f32", max_batch_tokens=256).logits(toks)[-16:]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_batch_invariance(stories):
    """A sequence's logits and sampled tokens are identical alone and inside a batch of 64."""
    rng = np.random.default_rng(2)
    target = [1, *rng.integers(3, 512, 20).tolist()]
    others = [[1, *rng.integers(3, 512, int(n)).tolist()] for n in rng.integers(1, 60, 63)]
    params = SamplingParams(temperature=0.9, top_k=40, seed=7, max_tokens=24, logprobs=2, ignore_eos=True)
    alone = stories.generate([target], params)[0]
    batch = stories.generate([*others[:31], target, *others[31:]], params)[31]
    assert alone.token_ids == batch.token_ids
    assert alone.logprobs == batch.logprobs and alone.top_logprobs == batch.top_logprobs
    # prompt logits: one big prefill vs tiny chunks next to other sequences
    small = LLM(STORIES, threads=2, kv_dtype="f32", max_batch_tokens=5, max_seqs=4)
    assert np.array_equal(stories.logits(target), small.logits(target))


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q4_1"])
def test_last_layer_runs_the_rows_alone(mix):
    """Where a step reads fewer logits rows than it has tokens, its last layer computes keys and values for every
    token and the rest for the rows' tokens alone: the rows' log-probabilities are the bits of a run reading every
    score, with one row, two, and beside sequences that read none (held prefixes, in the same steps). Prefill runs
    in steps of 64 tokens, so the 300-token prompt's first 256 scores come from steps whose every token is a row,
    the whole last layer: rows read alone there are checked against them too."""
    llm = LLM(llmbench.dummy_model("tiny", mix), threads=2, max_batch_tokens=64)
    rng = np.random.default_rng(11)

    def logprobs(ids, start, n, beside=()):   # (held prefixes before and after it in the step's sequences)
        held = [llm.engine.add(p, max_tokens=0, hold=True) for p in beside[:1]]
        s = llm.engine.add(ids, max_tokens=0, prompt_logprobs_from=start)
        held += [llm.engine.add(p, max_tokens=0, hold=True) for p in beside[1:]]
        llm._run_to_idle()
        try:
            return llm.engine.prompt_logprobs(s, n)[0].tolist()
        finally:
            for h in (s, *held):
                llm.engine.release(h)

    for n in (2, 3, 9, 70, 300):
        ids = rng.integers(3, llm.info["vocab"], n).tolist()
        every = logprobs(ids, 0, n - 1)
        assert logprobs(ids, n - 2, 1) == every[-1:], n
        if n > 2:
            assert logprobs(ids, n - 3, 2) == every[-2:], n
        beside = [rng.integers(3, llm.info["vocab"], k).tolist() for k in (5, 40)]
        assert logprobs(ids, n - 2, 1, beside) == every[-1:], n
        for k in (10, 63, 64, 200) if n == 300 else ():   # against the whole layer's steps
            assert logprobs(ids[:k + 2], k, 1) == every[k:k + 1], k


@pytest.mark.parametrize("wtype, act", [("Q4_K_M", "q8"), ("Q8_0", "q8"), ("F16", "bf16")])
def test_batch_invariance_by_kernel(wtype, act):
    """Quantized weights: batched decode of 2..8 sequences runs the small-batch kernels, 64 the panels,
    one the single dots; BF16 pairs: one token the decode kernel, 2 tiles, 3 and more the panels. A
    sequence's tokens and log-probabilities are the same in all of them."""
    llm = LLM(llmbench.dummy_model("tiny", wtype), threads=2, activations=act)
    rng = np.random.default_rng(5)
    vocab = llm.info["vocab"]
    target = rng.integers(3, vocab, 12).tolist()
    others = [rng.integers(3, vocab, int(n)).tolist() for n in rng.integers(1, 40, 63)]
    params = SamplingParams(temperature=0.9, top_k=40, seed=3, max_tokens=10, logprobs=2, ignore_eos=True)
    alone = llm.generate([target], params)[0]
    for b in (2, 3, 5, 8, 64):
        got = llm.generate([*others[:b - 1], target], params)[-1]
        assert got.token_ids == alone.token_ids, f"batch of {b}"
        assert got.logprobs == alone.logprobs and got.top_logprobs == alone.top_logprobs, f"batch of {b}"


@pytest.mark.parametrize(
    "mix, wtype", [("Q4_K_M", "Q4_K"), ("Q5_K_M", "Q5_K"), ("Q8_0", "Q8_0"), ("Q4_0", "Q4_0"), ("Q5_1", "Q5_1"),
                   ("Q4_1", "Q4_1"), ("IQ4_NL", "IQ4_NL"), ("IQ4_XS", "IQ4_XS")]
)
def test_interleaved_weights_give_the_plain_bits(mix, wtype):
    """Where the SIMD level has an interleaved kernel (groups of 16 rows with AVX-512 VNNI, of 8 with AVX2 or VNNI:
    csrc/vecdot.h's kernel table says which types), the CPU backend repacks those
    matrices at load; lowered to AVX2, groups of 8 or plain rows. The x86 levels give the same bits, so both
    engines' logits must be identical, at one token (decode), a few (batched decode's count) and many
    (prefill: on a host with AMX all 70 tokens go through the tiles, the last 6 as a smaller tile); an engine
    made at the top level still runs after the level is lowered."""
    from llmbench import _core

    top = _core.simd_info()["active"]
    if not _core.vec_dot_interleave(gguf.GGMLQuantizationType[wtype]):
        pytest.skip(f"no interleaved {wtype} kernel at {top}")
    path = llmbench.dummy_model("tiny", mix)
    repacked = LLM(path, threads=2)
    rng = np.random.default_rng(9)
    prompts = [rng.integers(3, repacked.info["vocab"], n).tolist() for n in (1, 5, 70)]
    want = [repacked.logits(p) for p in prompts]
    try:
        _core.simd_set("avx2")
        plain = LLM(path, threads=2)
        for p, y in zip(prompts, want):
            assert np.array_equal(plain.logits(p), y), f"{len(p)} tokens: plain rows at avx2 differ"
            assert np.array_equal(repacked.logits(p), y), f"{len(p)} tokens: repacked weights after lowering the level"
    finally:
        _core.simd_set(top)


def test_threads_do_not_change_results(stories_path):
    toks = list(range(1, 40))
    one = LLM(stories_path, threads=1).logits(toks)
    two = LLM(stories_path, threads=2).logits(toks)
    assert np.array_equal(one, two)
    # A quantized model with interleaved kernels: a 300-token prefill (its per-token steps on the threads too),
    # a short one, then decode's tokens and log-probabilities, bit for bit on 1, 2 and 3 threads (more
    # threads than this host's cores: waiting threads sleep).
    path = llmbench.dummy_model("tiny", "Q4_K_M")
    prompt = np.random.default_rng(4).integers(3, 256, 300).tolist()
    params = SamplingParams(temperature=0.8, seed=5, max_tokens=12, logprobs=3, ignore_eos=True)
    runs = []
    for threads in (1, 2, 3):
        llm = LLM(path, threads=threads)
        runs.append((llm.logits(prompt), llm.logits(prompt[:7]), llm.generate([prompt[:7], prompt[:30]], params)))
    for threads, (full, short, gen) in zip((2, 3), runs[1:]):
        assert np.array_equal(full, runs[0][0]) and np.array_equal(short, runs[0][1]), threads
        for a, b in zip(gen, runs[0][2]):
            assert a.token_ids == b.token_ids and a.logprobs == b.logprobs and a.top_logprobs == b.top_logprobs, threads
    # One KV head: decoding one or three sequences over 300 tokens of history, the threads share each attention
    # unit (its scores by key chunks, its weighted sums by slices of the head); bit for bit against one thread.
    mqa = llmbench.dummy_model("tiny-mqa", "Q8_0")
    long = [prompt, prompt[::-1], prompt[:290]]
    for kv in ("f16", "q8_0"):
        one, two = (LLM(mqa, threads=t, kv_dtype=kv) for t in (1, 2))
        for prompts in (long[:1], long):
            for a, b in zip(two.generate(prompts, params), one.generate(prompts, params)):
                assert a.token_ids == b.token_ids and a.logprobs == b.logprobs and a.top_logprobs == b.top_logprobs, kv


def test_prefix_fork_equals_full_computation(stories):
    ctx = stories.tokenize("Once upon a time, there was a little girl")
    conts = [stories.tokenize(c, add_bos=False) for c in (" named Lily", " who", " and a dog", " named Lily.")]
    reqs = [(ctx + c, len(ctx)) for c in conts]
    shared = stories.score_tokens(reqs)          # one prefix, forked four times
    alone = [stories.score_tokens([r])[0] for r in reqs]  # no sharing
    assert shared == alone
    assert shared[0][1] is True                  # " named Lily" is the greedy continuation
    free = stories.memory()["free_blocks"]
    stories.score_tokens(reqs)
    assert stories.memory()["free_blocks"] == free  # every block returned


def ref_score(ref: Reference, ids: list[int], n_ctx: int) -> tuple[float, bool]:
    """(sum log-probability of ids[n_ctx:], all greedy) from the float64 reference."""
    logits = ref.logits(ids)
    mx = logits.max(1, keepdims=True)
    logp = logits - mx - np.log(np.exp(logits - mx).sum(1, keepdims=True))
    return (sum(logp[i - 1, ids[i]] for i in range(n_ctx, len(ids))),
            all(logits[i - 1].argmax() == ids[i] for i in range(n_ctx, len(ids))))


def test_loglikelihood_matches_reference(stories_path, stories):
    ref = Reference(stories_path)
    ctx, cont = "Lily went to the park", " and played"
    lp, greedy = stories.loglikelihood([(ctx, cont)])[0]
    whole, n_ctx = stories.tokenize(ctx + cont), len(stories.tokenize(ctx))
    want_lp, want_greedy = ref_score(ref, whole, n_ctx)
    assert lp == pytest.approx(want_lp, abs=1e-4) and greedy == want_greedy
    # trailing space of the context moves to the continuation, as lm-evaluation-harness does
    assert stories.loglikelihood([(ctx + " ", "and played")]) == stories.loglikelihood([(ctx, cont)])


def test_loglikelihood_encodes_as_the_harness(stories_path, stories):
    """lm-evaluation-harness feeds encode(context), then encode(context + continuation) past that many
    tokens: where the two encodings differ at the boundary, the scored sequence is neither."""
    ref = Reference(stories_path)
    ctx, cont = "Lily went to the pa", "rk"
    ctx_ids, whole = stories.tokenize(ctx), stories.tokenize(ctx + cont)
    assert whole[: len(ctx_ids)] != ctx_ids          # "pa" + "rk" encode across the boundary
    ids = ctx_ids + whole[len(ctx_ids):]
    lp, greedy = stories.loglikelihood([(ctx, cont)])[0]
    want_lp, want_greedy = ref_score(ref, ids, len(ctx_ids))
    assert lp == pytest.approx(want_lp, abs=1e-4) and greedy == want_greedy
    # an empty context is the BOS token alone
    lp, _ = stories.loglikelihood([("", "Once upon a time")])[0]
    ids = [stories.tokenizer.bos_id] + stories.tokenize("Once upon a time", add_bos=False)
    assert lp == pytest.approx(ref_score(ref, ids, 1)[0], abs=1e-4)
    # longer than ctx + 1: the harness's window of max_length + 1 tokens, the last one never fed
    short = LLM(stories_path, threads=1, ctx=12, kv_dtype="f32", tokenizer_options={"remove_extra_whitespaces": True})
    ctx, cont = "Once upon a time, there was a little girl named", " Lily"
    ctx_ids = short.tokenize(ctx)
    n_cont = len(short.tokenize(ctx + cont)) - len(ctx_ids)
    ids = (ctx_ids + short.tokenize(ctx + cont)[len(ctx_ids):])[-13:]
    assert len(ctx_ids) + n_cont > 13
    lp, _ = short.loglikelihood([(ctx, cont)])[0]
    assert lp == pytest.approx(ref_score(ref, ids, 13 - n_cont)[0], abs=1e-4)
    assert short.score_tokens([(ids, 13 - n_cont)])[0][0] == lp
    with pytest.raises(ValueError, match=r"prompt \(14 tokens, the last only scored\)"):
        short.score_tokens([(ctx_ids[:14], 10)])


@pytest.mark.parametrize("max_seqs", [64, 3])
def test_few_shot_prefix_is_computed_once(stories_path, max_seqs):
    """Questions behind one few-shot header, several answers each: the header is computed once and
    forked, each question once, and every score equals the request scored alone. max_seqs=3 runs
    the requests in chunks that cut through the questions."""
    llm = LLM(stories_path, threads=2, kv_dtype="f32", max_seqs=max_seqs,
              tokenizer_options={"remove_extra_whitespaces": True})
    header = ("Once upon a time, there was a little girl named Lily. She liked to play in the park with "
              "her dog. One day, she saw a big red ball under a tree.\n")
    questions = ["Lily was", "The dog wanted to", "Then the ball", "She went home and"]
    answers = [" happy", " sad", " a cat", " the park"]
    pairs = [(header + q, a) for q in questions for a in answers]
    assert len(llm.tokenize(header)) >= 32   # SHARED_PREFIX_MIN: long enough to be shared
    llm.engine.reset_stats()
    free = llm.memory()["free_blocks"]
    shared = llm.loglikelihood(pairs)
    computed = llm.engine.stats()["prefill_tokens"]
    assert llm.memory()["free_blocks"] == free      # every block returned
    alone = [llm.loglikelihood([p])[0] for p in pairs]
    assert shared == alone
    n_header = len(llm.tokenize(header))
    ctxs = [llm.tokenize(header + q) for q in questions]
    conts = [len(llm.tokenize(header + q + a)) - len(c) for q, c in zip(questions, ctxs) for a in answers]
    # header once; each question's own tokens and its last token once more; each answer and the token before it
    bound = n_header + sum(len(c) - n_header + 1 for c in ctxs) + sum(n + 1 for n in conts)
    assert computed <= bound < len(pairs) * n_header
    ref = Reference(stories_path)
    ids = llm.tokenize(header + questions[1] + answers[2])
    n_ctx = len(ctxs[1])
    assert shared[6][0] == pytest.approx(ref_score(ref, ids, n_ctx)[0], abs=1e-4)


def test_letter_answers_run_as_one_request(stories_path):
    """Multiple-choice answers (one token each after one context) run as one engine request, the other
    letters scored from the row that scores the first: each question's tokens are computed once, and
    every score equals the request scored alone."""
    llm = LLM(stories_path, threads=2, kv_dtype="f32")
    header = ("Once upon a time, there was a little girl named Lily. She liked to play in the park with "
              "her dog. One day, she saw a big red ball under a tree.\nAnswer:")
    questions = ["\nLily was happy.\nAnswer:", "\nThe dog ran.\nAnswer:"]
    letters = [" the", " he", " she", " it"]   # one token each in this 512-token vocabulary
    pairs = [(header + q, a) for q in questions for a in letters]
    reqs = llm.loglikelihood_tokens(pairs)
    assert all(len(ids) - n == 1 for ids, n in reqs)   # one token each
    llm.engine.reset_stats()
    shared = llm.score_tokens(reqs)
    computed = llm.engine.stats()["prefill_tokens"]
    assert shared == [llm.score_tokens([r])[0] for r in reqs] == llm.score_tokens(reqs, share_prefix=False)
    assert len({lp for lp, _ in shared}) == len(shared)   # the letters' scores differ: each is its own
    # the shared header once and each question's own tokens once: no token computed again per letter
    (a, n_a), (b, n_b) = reqs[0], reqs[4]
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert common >= len(llm.tokenize(header)) - 1 and computed == n_a + n_b - common
    # the engine's checks: alternatives need the last prompt token to be scored, and ids in the vocabulary
    e = llm.engine
    with pytest.raises(ValueError, match="alt_tokens replace the last prompt token"):
        e.add([1, 2, 3], max_tokens=0, alt_tokens=[5])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        e.add([1, 2, 3], max_tokens=0, prompt_logprobs_from=0, alt_tokens=[10 ** 6])
    s = e.add([1, 2, 3], max_tokens=0, prompt_logprobs_from=0)
    with pytest.raises(ValueError, match="no alt tokens"):
        e.alt_logprobs(s, 1)
    e.release(s)


def test_held_prefix_is_shared_and_changes_nothing(stories):
    ctx = stories.tokenize("Once upon a time, there was a little girl")
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True, logprobs=2)
    free = stories.memory()["free_blocks"]
    with stories.hold_prefix(ctx) as prefix:
        assert len(prefix) == len(ctx) and stories.memory()["free_blocks"] < free
        forked = stories.generate([" named", " who"], params, prefix=prefix)
    whole = stories.generate([ctx + stories.tokenize(" named", add_bos=False),
                              ctx + stories.tokenize(" who", add_bos=False)], params)
    for f, w in zip(forked, whole):
        assert f.prompt_token_ids == w.prompt_token_ids
        assert f.token_ids == w.token_ids and f.logprobs == w.logprobs   # bit-identical
        assert f.cached_tokens >= len(ctx) - stories.block_size and w.cached_tokens == 0
    assert stories.memory()["free_blocks"] == free    # released on leaving the block
    with pytest.raises(ValueError, match="released"):
        stories.generate([" named"], params, prefix=prefix)


def test_timing_cost_is_measured_and_leaves_no_event(stories):
    stories.engine.poll()
    c = stories.engine.timing_cost(20000)
    assert 0 < c["clock_ns"] < 1e5 and 0 < c["event_ns"] < 1e5 and c["n"] == 20000
    assert stories.engine.poll() == []   # the probe's events were taken back out
    with pytest.raises(ValueError, match="n >= 1"):
        stories.engine.timing_cost(0)


def test_events_and_timestamps(stories):
    out = stories.generate(["Once upon", "Lily"], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    for o in out:
        assert len(o.token_ids) == 12 == len(o.token_ns) and o.finish_reason == "length"
        t = o.token_ns.astype(np.int64)
        assert o.arrival_ns <= o.admit_ns <= t[0] and (np.diff(t) >= 0).all() and t[-1] <= o.finish_ns
        assert 0 < o.ttft_s <= o.e2e_s


def test_errors(stories, tmp_path):
    with pytest.raises(ValueError, match="exceeds the context"):
        stories.generate([1] * 2040, SamplingParams(max_tokens=100))
    with pytest.raises(ValueError, match="outside the vocabulary"):
        stories.generate([[1, 999]], SamplingParams(max_tokens=1))
    with pytest.raises(llmbench.UnsupportedError, match="multiple of 32"):
        LLM(STORIES, kv_dtype="q8_0")
    with pytest.raises(ValueError, match="threads must be >= 1"):
        LLM(STORIES, threads=0)
    with pytest.raises(ValueError, match="ctx must be >= 1"):
        LLM(STORIES, ctx=0)
    with pytest.raises(ValueError, match="kv_dtype"):
        LLM(STORIES, kv_dtype="int4")
    with pytest.raises(FileNotFoundError, match="not a dummy preset"):
        LLM(tmp_path / "nope.gguf")
    with pytest.raises(ValueError, match="raise kv_budget"):
        LLM(STORIES, kv_budget=64 * 640).generate([1], SamplingParams(max_tokens=200))
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    # a model of an architecture the engine does not run names it
    w = gguf.GGUFWriter(str(tmp_path / "g.gguf"), arch="gemma2")
    w.add_tensor("token_embd.weight", np.zeros((8, 4), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(llmbench.UnsupportedError, match="architecture 'gemma2' is not supported"):
        LLM(tmp_path / "g.gguf")


def test_unsupported_tensor_type_is_named(tmp_path):
    """A weight in a type the engine cannot run (here I8, an integer tensor) raises, naming tensor, type and the
    types it runs."""
    src = llmbench.dummy_model("tiny", "F32")
    q = next(t for t in gguf.GGUFReader(src).tensors if t.name == "blk.0.attn_q.weight")
    with_tensor_replaced(src, tmp_path / "i8.gguf", q.name, np.zeros(np.asarray(q.data).shape, np.int8),
                         gguf.GGMLQuantizationType.I8)
    with pytest.raises(llmbench.UnsupportedError,
                       match=r"blk.0.attn_q.weight' has type I8.*supported: F32, F16, Q4_0, .*IQ1_M, BF16, .*Q1_0"):
        LLM(tmp_path / "i8.gguf")


def test_backend_selection_and_memory(stories, stories_path):
    """The engine runs on the backend it is given by name; its memory figures are the backend's."""
    assert stories.backend == stories.engine.backend == "cpu"
    m = stories.memory()
    assert m["weights"] == sum(t.nbytes for t in stories.file.tensors.values())
    assert m["kv_cache"] == m["kv_per_token"] * stories.kv_blocks * stories.block_size
    assert m["peak"] == m["weights"] + m["kv_cache"] + m["scratch"] and m["scratch"] > 0
    assert m["device_free"] == m["device_total"] == 0
    with pytest.raises(ValueError, match="no backend named 'tpu'"):
        llmbench._core.Engine(stories.file._reader, kv_type=0, block_size=16, n_blocks=8, ctx=64, max_batch_tokens=16,
                              max_seqs=2, threads=1, backend="tpu")
    with pytest.raises(ValueError, match="backend must be 'cpu' or 'cuda'"):
        LLM(stories_path, backend="tpu")


def test_cuda_backend_unavailable_names_the_reason(stories_path):
    """backend="cuda" goes through the engine; where it cannot run, BackendUnavailableError says why."""
    from llmbench.backends import cuda
    from llmbench.models.gguf import GGUFFile

    ok, why = cuda.available()
    try:
        llm = LLM(stories_path, backend="cuda", device=0, cuda_graphs=False, threads=1)
    except llmbench.BackendUnavailableError as e:
        assert str(e) and (ok or str(e) == why)
    else:   # a machine with a GPU and a CUDA engine backend: the same engine, on the device
        assert ok and llm.backend == "cuda" and llm.device == 0 and llm.cuda_graphs is False
    # the engine's own check, below LLM's: the CUDA backend of this core is not usable without its library
    if not ok:
        with pytest.raises(llmbench.BackendUnavailableError):
            llmbench._core.Engine(GGUFFile(stories_path)._reader, kv_type=0, block_size=16, n_blocks=8,
                                  ctx=64, max_batch_tokens=16, max_seqs=2, threads=1, backend="cuda")


def test_requests_beyond_the_kv_budget_wait_their_turn(stories_path, stories):
    """A KV budget of 6 blocks (1280 bytes a token at F32, 16 tokens a block: "120KiB") holds two of
    these requests at once; eight of them queue, run two by two, and give what a large cache gives."""
    small = LLM(stories_path, threads=2, kv_dtype="f32", kv_budget="120KiB",
                tokenizer_options={"remove_extra_whitespaces": True})
    assert small.kv_blocks == 6 and small.memory()["kv_cache"] == 6 * 16 * 1280
    prompts = ["Lily", "Tom had", "The dog", "Once upon", "She saw", "A big", "They went", "One day"]
    params = SamplingParams(temperature=0.9, seed=3, max_tokens=40, ignore_eos=True)
    got = small.generate(prompts, params)
    assert [o.token_ids for o in got] == [o.token_ids for o in stories.generate(prompts, params)]
    first_done = min(o.finish_ns for o in got)
    assert sum(o.admit_ns < first_done for o in got) == 2      # two at a time, the rest waited
    assert small.memory()["free_blocks"] == 6
    from llmbench.llm import _parse_bytes

    assert [_parse_bytes(v) for v in ("120KiB", "2GiB", "512MB", "1000000", 7, "1.5 kib")] == \
        [122880, 2**31, 512 * 10**6, 10**6, 7, 1536]
    with pytest.raises(ValueError, match="cannot read 'lots' as a size"):
        _parse_bytes("lots")


def test_steps_release_the_gil():
    """A step lets go of the GIL, and a raw Engine refuses a second thread meanwhile. No clock: with forced
    GIL switches pushed 60 s away, the main thread, waiting for the GIL while the worker runs Python, can
    run before the worker is done only where the worker lets go of it, and the only place it can is inside
    step(); so the main thread finds the worker inside the step exactly when step() releases the GIL."""
    llm = LLM("tiny-llama3:F32", threads=1, ctx=4096, max_batch_tokens=4096, activations="f32")
    ids = np.random.default_rng(0).integers(0, llm.info["vocab"], 4000).tolist()
    state = {"in_step": False}

    def work():
        seq = llm.engine.add(ids, max_tokens=0)
        state["in_step"] = True
        llm.engine.step()   # the whole prompt in one step (max_batch_tokens)
        state["in_step"] = False
        while llm.engine.step():
            pass
        llm.engine.poll()
        llm.engine.release(seq)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(60.0)
    try:
        worker = threading.Thread(target=work)
        worker.start()   # waits (GIL released) for the worker to start, then for the GIL
        inside = state["in_step"]
        refused = ""
        if inside:
            try:
                llm.engine.stats()
            except RuntimeError as e:
                refused = str(e)
        worker.join()
    finally:
        sys.setswitchinterval(switch)
    assert inside, "the main thread ran only after the step: engine.step() held the GIL"
    assert "another thread is running it" in refused


def test_calls_from_threads_take_turns(stories):
    params = SamplingParams(temperature=0.8, seed=5, max_tokens=40)
    want = [stories.generate(p, params)[0].token_ids for p in ("Lily", "Once upon a time", "The dog")]
    got: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda i=i, p=p: got.__setitem__(i, stories.generate(p, params)[0].token_ids))
               for i, p in enumerate(("Lily", "Once upon a time", "The dog"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(3)] == want
    with pytest.raises(RuntimeError, match="inside another call on the same LLM"):
        stories.generate("Lily", SamplingParams(max_tokens=3), on_token=lambda *a: stories.logits([1, 2]))


def test_thread_pools_do_not_spin_against_each_other():
    """Importing llmbench (before NumPy) sets libgomp's barrier spin (about 1.3 ms, shorter than libgomp's
    own) and shortens OpenBLAS's after-call spin unless the user set them: both pools' threads sleep soon,
    instead of holding cores the other needs."""
    import os
    import subprocess
    import sys

    code = "import llmbench, numpy, os; print(os.environ['GOMP_SPINCOUNT'], os.environ['OPENBLAS_THREAD_TIMEOUT'])"
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["100000", "4"]
    out = subprocess.run([sys.executable, "-c", code], env={**env, "OPENBLAS_THREAD_TIMEOUT": "20"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["100000", "20"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts the process's threads in /proc")
def test_loading_frees_the_loading_threads_openmp_workers():
    """libgomp counts the workers of every thread's pool, and once they outnumber the CPUs its barriers spin
    100 rounds instead of GOMP_SPINCOUNT's: a model loaded on one thread and stepped on another (serve's
    engine thread) decoded 2.1x slower. Creating an LLM frees the creating thread's idle workers (here a
    pool of 2 made by a 3-thread quantization), and the thread that steps makes its own."""
    import subprocess

    code = """if True:
        import os, threading, time
        import llmbench, numpy as np
        from llmbench.models.weight_types import quantize
        def count(want):   # freed workers exit on their own time
            for _ in range(200):
                if len(os.listdir('/proc/self/task')) == want:
                    break
                time.sleep(0.01)
            return len(os.listdir('/proc/self/task'))
        base = len(os.listdir('/proc/self/task'))
        quantize(np.ones((512, 1024), np.float32), 'Q8_0', nthreads=3)
        pool = count(base + 2)
        llm = llmbench.LLM(llmbench.dummy_model('tiny', 'Q8_0'), threads=3, ctx=64, max_seqs=1)
        loaded = count(base)
        seen = []
        def step():
            llm.generate('Lily', llmbench.SamplingParams(max_tokens=3, temperature=0))
            seen.append(len(os.listdir('/proc/self/task')))
        t = threading.Thread(target=step); t.start(); t.join()
        print(pool - base, loaded - base, seen[0] - base)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # the quantization's pool: 2 workers; after the load: none; the stepping thread and its 2 workers
    assert out.stdout.split() == ["2", "0", "3"], out.stdout + out.stderr


@pytest.mark.parametrize("key, value, message", [
    ("llama.attention.head_count", 0, "'llama.attention.head_count' is 0, expected a size from 1"),
    ("llama.attention.head_count_kv", 0, "'llama.attention.head_count_kv' is 0"),
    ("llama.attention.head_count_kv", 3, "'llama.attention.head_count' 4 is not a multiple of "
                                         "'llama.attention.head_count_kv' 3"),
    ("llama.block_count", 4_000_000_000, "'llama.block_count' is 4000000000, expected a size from 1 to"),
    ("llama.block_count", 5, "'llama.block_count' is 5, but the file holds the tensors of 2 blocks"),
    ("llama.context_length", 0, "'llama.context_length' is 0"),
])
def test_bad_hyperparameters_are_named_at_load(tmp_path, key, value, message):
    """Impossible shapes in the metadata raise GGUFError naming the file and the key, before the
    engine (or a division by a head count of 0) sees them."""
    bad = rewritten(llmbench.dummy_model("tiny", "Q8_0"), tmp_path / "bad.gguf", {key: value})
    with pytest.raises(llmbench.GGUFError, match=re.escape(message)) as e:
        LLM(bad, threads=1)
    assert str(bad) in str(e.value)


def test_detokenize_refuses_ids_outside_the_vocabulary():
    llm = LLM(llmbench.dummy_model("tiny", "Q8_0"), threads=1, ctx=32, max_seqs=1)
    assert isinstance(llm.detokenize([llm.info["vocab"] - 1]), str)
    for bad in (10**6, llm.info["vocab"], -1):
        with pytest.raises(ValueError, match=f"token id {bad} is outside the vocabulary of tiny"):
            llm.detokenize([1, bad])
