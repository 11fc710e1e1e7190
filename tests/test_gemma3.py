"""Gemma 3 in the engine: the tiny-gemma3 dummy preset (6 layers, layer 5 global, the others over a
20-token sliding window) against the float64 reference forward pass (tests/reference/forward.py), the
window under batching, chunked prefill and prefix forks, the CUDA backend's refusal, and the real
Gemma 3 270M Q4_K_M file (tests/models.py): it loads, tokenizes, renders Gemma's chat turns and answers.
How close the engine comes to llama.cpp on that file is benchmarks/gemma3_vs_llamacpp.py's measure."""

from __future__ import annotations

import numpy as np
import pytest
from models import gemma3_gguf
from reference.forward import Reference

import llmbench
from llmbench import LLM, SamplingParams

PRESET = "tiny-gemma3"
WINDOW = 20

# max |logit - reference| / max |reference| with float weights (or float activations against quantized ones)
# by KV type, as tests/test_engine.py's llama presets; normalized RMS error with quantized weights and 8-bit
# activations, looser than the llama presets' (2e-2, 3e-2): measured 2.3-2.5e-2 (Q8_0) and 3.2-3.4e-2 (Q4_K_M)
# over the three KV types, the norms after each sublayer bringing its small output (and its activation
# rounding) to the scale of the residual stream, with float activations 8e-7 (F32 KV) as with float weights
FLOAT_WEIGHTS_MAX_REL = {"f32": 1e-6, "f16": 1e-3, "q8_0": 1.5e-2}
QUANT_WEIGHTS_NRMSE = {"Q8_0": 3e-2, "Q4_K_M": 4.5e-2}


def prompt(n: int, seed: int = 1, vocab: int = 1024) -> list[int]:
    return np.random.default_rng(seed).integers(3, vocab, n).tolist()


def test_preset_is_gemma3_with_a_window():
    ref = Reference(llmbench.dummy_model(PRESET, "F32"))
    assert ref.gemma3 and ref.window == WINDOW and ref.n_layer == 6 and ref.hd * ref.n_head != ref.dim
    assert [ref.swa(layer) for layer in range(6)] == [True] * 5 + [False]
    # norms are not all ones (one the engine skipped or swapped would show)
    assert abs(ref.w["blk.0.attn_q_norm.weight"].std() - 0.1) < 0.03


@pytest.mark.parametrize("wtype", ["F32", "Q8_0", "Q4_K_M"])
@pytest.mark.parametrize("kv", ["f32", "f16", "q8_0"])
def test_logits_match_reference(wtype, kv):
    """45 tokens: past the window, so that the local layers' masks differ from causal ones."""
    path = llmbench.dummy_model(PRESET, wtype)
    ref = Reference(path)
    toks = prompt(45)
    want = ref.logits(toks)
    llm = LLM(path, threads=2, kv_dtype=kv)
    got = llm.logits(toks)
    assert got.shape == want.shape
    if wtype in QUANT_WEIGHTS_NRMSE:
        nrmse = np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2))
        assert nrmse <= QUANT_WEIGHTS_NRMSE[wtype]
        got = LLM(path, threads=2, kv_dtype=kv, activations="f32").logits(toks)
    assert np.abs(got - want).max() <= FLOAT_WEIGHTS_MAX_REL[kv] * np.abs(want).max()


def test_the_window_matters():
    """The reference with the window taken away (every layer global) is far from the engine past the
    window and equal to it before: the test above could not pass with full attention."""
    path = llmbench.dummy_model(PRESET, "F32")
    ref = Reference(path)
    toks = prompt(45)
    got = LLM(path, threads=2, kv_dtype="f32").logits(toks)
    ref.window = 10**9
    full = ref.logits(toks)
    scale = np.abs(full).max()
    assert np.abs(got[:WINDOW] - full[:WINDOW]).max() <= 1e-6 * scale
    assert np.abs(got[WINDOW + 5:] - full[WINDOW + 5:]).max() > 1e-3 * scale


def test_window_under_batching_chunks_and_forks():
    """A sequence's logits and samples are the same bits alone, inside batches of other sequences (each
    tile of the attention then mixes tokens with other windows), in prefill chunks of 7 tokens, and when
    its prompt forks from a shared prefix longer than the window."""
    path = llmbench.dummy_model(PRESET, "Q8_0")
    llm = LLM(path, threads=2, kv_dtype="f16")
    target = prompt(50, seed=2)
    others = [prompt(int(n), seed=10 + i) for i, n in enumerate(np.random.default_rng(3).integers(1, 90, 15))]
    params = SamplingParams(temperature=0.9, top_k=40, seed=7, max_tokens=30, logprobs=2, ignore_eos=True)
    alone = llm.generate([target], params)[0]
    for batch in (others[:1], others[:5], others):
        got = llm.generate([*batch, target], params)[-1]
        assert got.token_ids == alone.token_ids and got.logprobs == alone.logprobs, len(batch)
    small = LLM(path, threads=2, kv_dtype="f16", max_batch_tokens=7, max_seqs=4)
    assert np.array_equal(llm.logits(target), small.logits(target))
    # forks: a 40-token prefix (longer than the window), four continuations scored together and alone
    ctx = prompt(40, seed=4)
    reqs = [(ctx + prompt(n, seed=20 + n), len(ctx)) for n in (1, 3, 9, 17)]
    shared = llm.score_tokens(reqs)
    assert shared == [llm.score_tokens([r])[0] for r in reqs]
    ref = Reference(path)
    for (ids, n_ctx), (logp, _) in zip(reqs, shared):
        logits = ref.logits(ids)
        mx = logits.max(1, keepdims=True)
        lp = logits - mx - np.log(np.exp(logits - mx).sum(1, keepdims=True))
        assert logp == pytest.approx(sum(lp[i - 1, ids[i]] for i in range(n_ctx, len(ids))), rel=2e-2, abs=5e-2)


def test_cuda_backend_refuses_gemma3():
    """The CUDA backend's kernels lack Gemma 3's operations: it says so, before looking for a GPU."""
    from llmbench.models.gguf import GGUFFile

    with pytest.raises(llmbench.UnsupportedError, match="architecture 'gemma3' is not supported.*GeGLU.*cpu"):
        llmbench._core.Engine(GGUFFile(llmbench.dummy_model(PRESET, "F32"))._reader, kv_type=0, block_size=16,
                              n_blocks=8, ctx=64, max_batch_tokens=16, max_seqs=2, threads=1, backend="cuda")


# ---- the real Gemma 3 270M (Q4_K, Q6_K, Q5_0, Q8_0; 262,144-token SentencePiece vocabulary) ----

@pytest.fixture(scope="module")
def gemma():
    return LLM(gemma3_gguf(), threads=2, ctx=1024, max_seqs=4)


def test_real_gemma3_tokenizes(gemma):
    tok = gemma.tokenizer
    assert tok.vocab_size == 262144 and tok.bos_id == 2 and tok.eos_id == 1
    assert tok.eot_id == tok.hf.token_to_id("<end_of_turn>")
    # llama.cpp's ids for these strings (llama-cpp-python 0.3.36, this file)
    assert tok.encode("The capital of France is") == [2, 818, 5279, 529, 7001, 563]
    for text in ("Hello, world!", "emoji 🙂 and accents: café, naïve", "x = 3.14159\n\ty", "a  b"):
        assert tok.decode(tok.encode(text)) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "Hi"}], True)
    assert chat == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    ids = tok.encode(chat)
    assert ids[0] == 2 and ids.count(2) == 1 and tok.hf.token_to_id("<start_of_turn>") in ids


def test_real_gemma3_answers(gemma):
    tok = gemma.tokenizer
    greedy = SamplingParams(temperature=0, max_tokens=16)
    out = gemma.generate([tok.encode("The capital of France is Paris. The capital of Germany is")], greedy)[0]
    assert out.text.startswith(" Berlin.")
    # this is the base model (no chat template in the file): through Gemma's chat turns it repeats the
    # question; llama.cpp (llama-cpp-python 0.3.36, greedy, this file) gives these 16 tokens too
    out = gemma.chat([[{"role": "user", "content": "What is the capital of France?"}]], greedy)[0]
    assert out.prompt_token_ids == [2, 105, 2364, 107, 3689, 563, 506, 5279, 529, 7001, 236881, 106, 107, 105, 4368, 107]
    assert out.token_ids == [3689, 563, 506, 5279, 529, 7001, 236881, 217716, 107, 3689, 563, 506, 5279, 529, 7001,
                             236881]
    # a prompt past the 512-token window: the local layers' window and the global layers' full view at once
    story = "The quick brown fox jumps over the lazy dog. " * 60
    ids = tok.encode(story + "Repeat the sentence above once:")
    assert len(ids) > 600
    text = gemma.generate([ids], greedy)[0].text
    assert "quick brown fox" in text
