"""Dummy models: presets match their architectures, builds are deterministic and load in both GGUF
readers, the synthetic vocabulary has the exact size and valid merges and works in `tokenizers`."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

import llmbench
from llmbench import _core
from llmbench.models import dummy
from llmbench.models.dummy import PRESETS, build, dummy_model, metadata, rope_freq_factors, tensor_seed
from llmbench.models.dummy_vocab import build_vocab, bytes_to_unicode, synthetic_merges, tokenizer_style
from llmbench.models.gguf import GGUFFile

# The bytes of `llmbench dummy --preset tiny --type F32`. Cached dummy models are keyed by
# dummy.FORMAT_VERSION, so whatever changes these bytes (presets, metadata, vocabulary, the random
# generator) must bump FORMAT_VERSION and update this hash.
TINY_F32_SHA256 = {2: "ec598856c6f7e402cc3da73e1e165032c7bd25ce573c366234b17b9701e3edef"}


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- presets ----

@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_shapes_are_consistent(name):
    p = PRESETS[name]
    assert p.head_dim * p.n_head == p.n_embd or p.arch == "gemma3"   # Gemma 3's head size is its own
    assert p.n_head % p.n_head_kv == 0 and p.head_dim % 2 == 0
    names = [n for n, _ in p.tensors()]
    assert len(names) == len(set(names))
    shapes = dict(p.tensors())
    kv, q = p.n_head_kv * p.head_dim, p.n_head * p.head_dim
    assert shapes["token_embd.weight"] == (p.n_vocab, p.n_embd)
    assert ("output.weight" in shapes) == (not p.tied)
    for i in range(p.n_layer):
        assert shapes[f"blk.{i}.attn_q.weight"] == (q, p.n_embd)
        assert shapes[f"blk.{i}.attn_output.weight"] == (p.n_embd, q)
        gemma = {f"blk.{i}.attn_q_norm.weight": (p.head_dim,), f"blk.{i}.attn_k_norm.weight": (p.head_dim,),
                 f"blk.{i}.post_attention_norm.weight": (p.n_embd,), f"blk.{i}.post_ffw_norm.weight": (p.n_embd,)}
        assert all((shapes.get(k) == v) == (p.arch == "gemma3") for k, v in gemma.items())
        assert shapes[f"blk.{i}.attn_k.weight"] == shapes[f"blk.{i}.attn_v.weight"] == (kv, p.n_embd)
        assert shapes[f"blk.{i}.ffn_down.weight"] == (p.n_embd, p.n_ff)
        assert (f"blk.{i}.attn_k.bias" in shapes) == p.qkv_bias
    md = metadata(p, "Q4_K_M", 0)
    a = p.arch
    assert md["general.architecture"] == a
    assert md[f"{a}.embedding_length"] == p.n_embd and md[f"{a}.block_count"] == p.n_layer
    assert md[f"{a}.rope.dimension_count"] == p.head_dim and md[f"{a}.vocab_size"] == p.n_vocab
    assert len(md["tokenizer.ggml.tokens"]) == p.n_vocab == len(md["tokenizer.ggml.token_type"])
    assert md["tokenizer.ggml.model"] == "gpt2"
    assert md.get(f"{a}.attention.sliding_window", 0) == p.sliding_window and (p.sliding_window > 0) == (a == "gemma3")


def test_real_model_parameter_counts():
    # The published sizes of the models the presets copy.
    assert round(PRESETS["llama-1b"].n_params / 1e9, 2) == 1.24
    assert round(PRESETS["llama-8b"].n_params / 1e9, 2) == 8.03
    assert round(PRESETS["qwen2.5-0.5b"].n_params / 1e6) == 494
    assert round(PRESETS["mistral-7b"].n_params / 1e9, 2) == 7.24


def test_llama3_rope_factors():
    p = PRESETS["llama-1b"]
    f = rope_freq_factors(p.rope, p.head_dim, p.rope_theta)
    assert f.shape == (32,) and f.dtype == np.float32
    assert f[0] == 1.0 and f[-1] == 32.0                 # high frequencies kept, low ones scaled by `factor`
    assert np.all(np.diff(f) >= 0) and np.any((f > 1) & (f < 32))   # smooth in between


# ---- vocabulary ----

@pytest.mark.parametrize("size, style", [(1024, "llama3"), (32000, "gpt2"), (151936, "qwen2")])
def test_vocab_exact_size_and_valid_merges(size, style):
    st = tokenizer_style(style, 16)
    v = build_vocab(size, st)
    assert len(v.tokens) == size == len(v.token_types) and len(set(v.tokens)) == size
    assert v.tokens[:256] == list(bytes_to_unicode().values())
    ids = {t: i for i, t in enumerate(v.tokens)}
    assert len(v.merges) == size - 256 - len(st.specials)
    for rank, m in enumerate(v.merges):
        a, b = m.split(" ")
        assert ids[a] < 256 + rank and ids[b] < 256 + rank     # parts exist before the merge
        assert ids[a + b] == 256 + rank                         # the merge's token comes in rank order
    assert [v.tokens[i] for i in np.flatnonzero(v.token_types == 3)] == list(st.specials)
    assert v.tokens[v.bos_id] == st.bos and v.tokens[v.eos_id] == st.eos


def test_vocab_is_deterministic():
    assert synthetic_merges(5000) == synthetic_merges(5000)
    m = synthetic_merges(20)
    assert m[:3] == [("Ġ", "t"), ("Ġt", "h"), ("Ġ", "w")]   # pinned: a change here needs FORMAT_VERSION bumped


def test_vocab_works_in_tokenizers():
    tokenizers = pytest.importorskip("tokenizers")
    v = build_vocab(32000, tokenizer_style("gpt2"))
    model = tokenizers.models.BPE(vocab={t: i for i, t in enumerate(v.tokens)},
                                  merges=[tuple(m.split(" ")) for m in v.merges])
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    for s in ["The model reads the weights from a file.", "héllo wörld, 日本語 ✓ 🤖", "  two\n\tlines 12345 "]:
        enc = tok.encode(s)
        assert tok.decode(enc.ids) == s
    assert len(tok.encode("the measurement of the threads").ids) < 12   # merges do compress English


# ---- builds ----

def test_tiny_build_is_deterministic_and_readable(tmp_path):
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    build("tiny", "F32", a)
    build("tiny", "F32", b)
    assert _sha(a) == _sha(b)
    assert _sha(a) == TINY_F32_SHA256.get(dummy.FORMAT_VERSION), \
        "dummy model bytes changed: bump llmbench.models.dummy.FORMAT_VERSION and record the new hash here"
    build("tiny", "F32", b, seed=1)
    assert _sha(a) != _sha(b)
    gguf = pytest.importorskip("gguf")
    with GGUFFile(a) as f:
        p = PRESETS["tiny"]
        assert [(n, t.shape) for n, t in f.tensors.items()] == p.tensors()
        assert f.metadata_types["llama.block_count"] == "uint32"
        assert f.metadata_types["llama.rope.freq_base"] == "float32"
        w = f.raw("blk.1.ffn_up.weight").view(np.float32).reshape(p.n_ff, p.n_embd)
        assert abs(float(w.std()) - 0.02) < 0.001 and abs(float(w.mean())) < 0.001
        # element i of a tensor comes from stream (seed, name) at offset i, whatever the chunking
        ref = np.empty(100, np.float32)
        _core.fill_normal(ref, tensor_seed(0, "blk.1.ffn_up.weight"), 0.02, 0.0, 5000)
        assert np.array_equal(w.reshape(-1)[5000:5100], ref)
        assert np.all(f.raw("output_norm.weight").view(np.float32) == 1.0)
        reader = gguf.GGUFReader(a)
        assert [t.name for t in reader.tensors] == list(f.tensors)
        for t in reader.tensors:
            assert np.asarray(t.data).tobytes() == f.raw(t.name).tobytes()


def test_llama3_and_qwen_layouts(tmp_path, monkeypatch):
    # Scaled-down copies of the big presets keep their special tensors and metadata.
    small = {
        "l3": PRESETS["llama-1b"].__class__(**{**PRESETS["llama-1b"].__dict__, "name": "l3", "n_embd": 256,
                                               "n_head": 4, "n_head_kv": 2, "n_ff": 512, "n_layer": 2, "n_vocab": 600}),
        "q2": PRESETS["qwen2.5-0.5b"].__class__(**{**PRESETS["qwen2.5-0.5b"].__dict__, "name": "q2", "n_embd": 128,
                                                   "n_head": 2, "n_head_kv": 1, "n_ff": 256, "n_layer": 2,
                                                   "n_vocab": 400}),
    }
    monkeypatch.setattr(dummy, "PRESETS", {**PRESETS, **small})
    build("l3", "F16", tmp_path / "l3.gguf")
    with GGUFFile(tmp_path / "l3.gguf") as f:
        assert "output.weight" not in f.tensors                       # tied, as Llama 3.2 1B
        assert f.tensors["rope_freqs.weight"].shape == (32,) and f.tensors["rope_freqs.weight"].type == "F32"
        assert f.tensors["token_embd.weight"].type == "F16"
        assert f.metadata["tokenizer.ggml.pre"] == "llama-bpe"
        assert f.metadata["tokenizer.ggml.tokens"][f.metadata["tokenizer.ggml.bos_token_id"]] == "<|begin_of_text|>"
        assert f.metadata["general.file_type"] == 1
    build("q2", "F32", tmp_path / "q2.gguf")
    with GGUFFile(tmp_path / "q2.gguf") as f:
        assert f.metadata["general.architecture"] == "qwen2"
        assert f.tensors["blk.0.attn_k.bias"].shape == (64,) and "output.weight" not in f.tensors
        assert f.metadata["tokenizer.ggml.pre"] == "qwen2"
        assert f.metadata["qwen2.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6)


def test_dummy_model_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path))
    p = llmbench.dummy_model("tiny", "f32")
    assert p.parent == tmp_path / "dummy" and p.name == f"tiny-F32-seed0-v{dummy.FORMAT_VERSION}.gguf"
    mtime = p.stat().st_mtime_ns
    assert dummy_model("tiny", "F32") == p and p.stat().st_mtime_ns == mtime   # reused, not rebuilt
    assert sorted(x.name for x in p.parent.iterdir()) == [p.name]
    with pytest.raises(ValueError, match="unknown preset"):
        dummy_model("llama-70b")
    with pytest.raises(ValueError, match="unknown type"):
        dummy_model("tiny", "Q3_K")


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q8_0", "BF16"])
def test_tiny_quantized_build(tmp_path, mix):
    from llmbench.models.quantize import decode_rows
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    ra = build("tiny", mix, a)
    build("tiny", mix, b)
    assert _sha(a) == _sha(b)
    x = np.empty((768, 256), np.float32)
    _core.fill_normal(x, tensor_seed(0, "blk.0.ffn_up.weight"), 0.02, 0.0, 0)
    with GGUFFile(a) as f:
        t = f.tensors["blk.0.ffn_up.weight"]
        assert t.type == {"Q4_K_M": "Q4_K", "Q8_0": "Q8_0", "BF16": "BF16"}[mix]
        y = decode_rows(f.raw(t.name).reshape(768, -1), t.type, 256)
        assert np.mean((y - x) ** 2) / np.mean(x ** 2) < {"Q4_K_M": 0.01, "Q8_0": 1e-4, "BF16": 1e-4}[mix]
    assert ra.bits_per_weight < {"Q4_K_M": 6.0, "Q8_0": 8.6, "BF16": 16.1}[mix]


def test_dummy_command(tmp_path, monkeypatch, capsys):
    from llmbench import cli
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    assert cli.main(["dummy", "--list"]) == 0
    assert "llama-1b" in capsys.readouterr().out
    out = tmp_path / "t.gguf"
    assert cli.main(["dummy", "--preset", "tiny", "--type", "f16", "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mix"] == "F16" and report["n_elements"] == PRESETS["tiny"].n_params
    with GGUFFile(out) as f:
        assert f.tensors["blk.0.attn_q.weight"].type == "F16"
    assert cli.main(["dummy", "--preset", "tiny", "--type", "f16", "-o", str(out)]) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert cli.main(["dummy", "--preset", "llama-70b"]) == 2
    assert "unknown preset 'llama-70b'" in capsys.readouterr().err
    # without -o the model goes to the cache; asking again just prints where it is
    assert cli.main(["dummy", "--type", "F32"]) == 0
    capsys.readouterr()
    assert cli.main(["dummy", "--type", "F32"]) == 0
    assert capsys.readouterr().out.strip() == str(dummy.cached_path("tiny", "F32"))


def test_failed_build_leaves_no_cache_file(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path))
    calls, encode = [], dummy.encode_rows

    def interrupted_encode(x, type_name, threads=0):   # Ctrl-C while the 5th chunk is converted
        calls.append(type_name)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return encode(x, type_name, threads)

    monkeypatch.setattr(dummy, "encode_rows", interrupted_encode)
    with pytest.raises(KeyboardInterrupt):
        dummy_model("tiny", "F32")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_types_see_grouped_query_attention():
    """The dummy builder gives each tensor llama-quantize's type, which for attn_v depends on the query heads
    per key/value head (llama_tensor_get_type: Q2_K -> Q4_K and IQ4_XS -> Q5_K from 4 of them)."""
    def attn_v(preset, mix):
        return {s.name: s.type for s in dummy.tensor_specs(dummy.get_preset(preset), mix)}["blk.0.attn_v.weight"]
    assert attn_v("llama-1b", "Q2_K") == "Q4_K" and attn_v("llama-1b", "IQ4_XS") == "Q5_K"   # 32 / 8 heads
    assert attn_v("llama-125m", "Q2_K") == "Q3_K" and attn_v("llama-125m", "IQ4_XS") == "IQ4_XS"   # 12 / 4
    assert attn_v("llama-1b", "Q4_K_M") == "Q6_K"   # not a rule of the head ratio

