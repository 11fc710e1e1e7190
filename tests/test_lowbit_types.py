"""The engine on models whose matrices are Q2_K, Q3_K, IQ4_NL, IQ4_XS or an I-quant (IQ1_S .. IQ3_S; files
written by tests/lowbit.py and tests/lowbit_iq.py, since neither llmbench nor the gguf package quantizes to
them), against the float64 NumPy forward pass of tests/reference (which dequantizes the same bytes with
the gguf package):

- float activations (activations="f32": the rows dequantized by llmbench, bit-identical to gguf) match
  the reference as closely as float weights do;
- the integer products (Q8_K activations for Q2_K, Q3_K, IQ4_XS and the I-quants; Q8_0 for IQ4_NL, as llama.cpp pairs
  them) stay within a normalized RMS error of the reference measured for each type;
- a sequence's tokens and log-probabilities are the same alone and in batches (tiles vs single dots);
- stories260K with every matrix whose rows allow it in IQ4_NL (32-wide blocks) runs and matches.
The kernels themselves are tested in csrc/tests/test_vecdot.c, the dequantization in tests/test_quant.py.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from lowbit import QUANTIZERS
from models import rewritten
from reference.forward import Reference

import llmbench
from llmbench import LLM, SamplingParams

IQ_TYPES = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"]
TYPES = ["Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS", *IQ_TYPES]
FLOAT_ACT_MAX_REL = 1e-6   # as FLOAT_WEIGHTS_MAX_REL["f32"] in test_engine.py
# the integer products against the reference, normalized RMS error of the logits (tiny preset, 37 tokens,
# F32 KV): measured 1.5e-2 (Q2_K), 1.4e-2 (Q3_K), 1.0e-2 (IQ4_NL), 1.5e-2 (IQ4_XS); test_engine.py allows
# Q4_K_M the same 3e-2; the I-quants (tests/lowbit_iq.py's writers) measured 1.5e-2 (IQ2_XXS, IQ2_XS, IQ3_XXS),
# 1.6e-2 (IQ2_S, IQ3_S), 1.7e-2 (IQ1_M), 1.8e-2 (IQ1_S)
INT_NRMSE = {"Q2_K": 3e-2, "Q3_K": 3e-2, "IQ4_NL": 3e-2, "IQ4_XS": 3e-2, **dict.fromkeys(IQ_TYPES, 3e-2)}


# the ternary, FP4 and binary types (csrc/quants_tq.c; TQ1_0, TQ2_0, MXFP4 written by gguf's quantizer, NVFP4 and
# Q1_0 by tests/lowbit.py; Q8_K activations for TQ1_0 / TQ2_0, Q8_0 for MXFP4 / NVFP4 / Q1_0): measured 1.6e-2
# (TQ1_0 and TQ2_0: gguf writes both with the same ternary values), 1.1e-2 (MXFP4), 1.2e-2 (NVFP4), 0.9e-2
# (Q1_0); allowed the same 3e-2
TQ_TYPES = ["TQ1_0", "TQ2_0", "MXFP4", "NVFP4", "Q1_0"]
TYPES += TQ_TYPES
INT_NRMSE.update(dict.fromkeys(TQ_TYPES, 3e-2))
BLOCK = {"IQ4_NL": 32, "MXFP4": 32, "NVFP4": 64, "Q1_0": 128}   # elements per block where not 256


def lowbit_model(src, dst, type_name: str, block: int):
    """A copy of the F32 model `src` whose 2-D tensors with rows a multiple of `block` are `type_name`."""
    r = gguf.GGUFReader(str(src))
    tensors = {t.name: (QUANTIZERS[type_name](np.asarray(t.data, np.float32)), gguf.GGMLQuantizationType[type_name])
               for t in r.tensors if len(t.shape) == 2 and int(t.shape[0]) % block == 0}
    assert tensors
    return rewritten(src, dst, tensors=tensors), sorted(tensors)


@pytest.fixture(scope="module", params=TYPES)
def tiny(request, tmp_path_factory):
    t = request.param
    path, names = lowbit_model(llmbench.dummy_model("tiny", "F32"), tmp_path_factory.mktemp(t) / f"tiny-{t}.gguf", t,
                               BLOCK.get(t, 256))
    assert len(names) == 2 + 7 * 2   # every matrix of the 2 layers, embeddings and output
    return t, path


def test_logits_match_reference(tiny):
    t, path = tiny
    want = Reference(path).logits(toks := np.random.default_rng(1).integers(0, 1024, 37))
    got = LLM(path, threads=2, kv_dtype="f32", activations="f32").logits(toks)
    assert np.abs(got - want).max() <= FLOAT_ACT_MAX_REL * np.abs(want).max()
    got = LLM(path, threads=2, kv_dtype="f32").logits(toks)
    nrmse = np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2))
    assert nrmse <= INT_NRMSE[t], f"{t}: {nrmse:.2e}"


def test_batch_invariance(tiny):
    """batched decode (tiles of several tokens) gives the single dots' bits"""
    _, path = tiny
    llm = LLM(path, threads=2)
    rng = np.random.default_rng(5)
    target = rng.integers(3, 1024, 12).tolist()
    others = [rng.integers(3, 1024, int(n)).tolist() for n in rng.integers(1, 40, 8)]
    params = SamplingParams(temperature=0.9, top_k=40, seed=3, max_tokens=8, logprobs=2, ignore_eos=True)
    alone = llm.generate([target], params)[0]
    for b in (3, 9):
        got = llm.generate([*others[:b - 1], target], params)[-1]
        assert got.token_ids == alone.token_ids and got.logprobs == alone.logprobs, f"batch of {b}"


def test_stories260k_iq4_nl(stories_path, tmp_path):
    path, names = lowbit_model(stories_path, tmp_path / "stories-iq4_nl.gguf", "IQ4_NL", 32)
    assert "blk.0.attn_q.weight" in names and "blk.0.ffn_down.weight" not in names   # 172-wide rows stay F32
    toks = [1, 403, 407, 261, 378, 11, 350, 365, 263, 410, 485, 13, 13, 444]
    want = Reference(path).logits(toks)
    got = LLM(path, threads=2, kv_dtype="f32", activations="f32").logits(toks)
    assert np.abs(got - want).max() <= FLOAT_ACT_MAX_REL * np.abs(want).max()
    got = LLM(path, threads=2, kv_dtype="f32").logits(toks)
    assert np.sqrt(np.mean((got - want) ** 2) / np.mean(want**2)) <= INT_NRMSE["IQ4_NL"]
    text = LLM(path, threads=2).generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=24))[0].text
    assert len(text.split()) >= 10   # a story, not a crash or an empty string
