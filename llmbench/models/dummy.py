"""Dummy models: real architectures' shapes and metadata with seeded random weights.

Speed does not depend on weight values, so a dummy model of the right shape and quantization
measures what the real one would (vLLM's `--load-format dummy` serves the same purpose). Weights
are N(0, 0.02) from the core's counter-based generator (element i of tensor T is a function of
(seed, T, i) only: identical on every machine and thread count), norm weights are 1, and Llama 3
shapes carry the rope_freqs.weight tensor that llama.cpp's converter computes from rope_scaling.
The vocabulary is llmbench's synthetic byte-level BPE (llmbench/models/dummy_vocab.py) of the preset's exact size.
Tensors are generated, quantized (llmbench.models.weight_types) and written in row chunks on a pipeline, so a
model never sits in memory whole.

>>> path = dummy_model("tiny")                          # doctest: +SKIP
>>> path = dummy_model("llama-1b", "Q4_K_M")            # built once, then cached

Tested by tests/test_dummy.py; timed by benchmarks/bench_dummy.py.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from .. import _core
from .dummy_vocab import build_vocab, tokenizer_style
from .gguf_writer import TensorSpec, write_pipelined
from .quantize import (
    CHUNK_ELEMENTS,
    GGML_QNT_VERSION,
    MIXES,
    ModelResult,
    Shape,
    TensorResult,
    encode_rows,
    should_quantize,
    tensor_type,
)

# Bump when the bytes of a dummy model change (presets, metadata, vocabulary, generator): it is
# part of the cache key, so stale cached models are never reused.
FORMAT_VERSION = 2  # 2: float32 Box-Muller with own polynomials (csrc/random.c)
WEIGHT_STD = 0.02


@dataclass(frozen=True)
class Llama3Rope:
    """Llama 3.1+ "llama3" rope scaling (HF config rope_scaling)."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_context: int


@dataclass(frozen=True)
class Preset:
    """A model shape. ``source`` names the public config it copies."""

    name: str
    arch: str                 # llama.cpp architecture: "llama", "qwen2" or "gemma3"
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx: int
    rope_theta: float
    rms_eps: float
    tied: bool                # output projection shares token_embd (no output.weight)
    tokenizer: str            # vocabulary style, see llmbench.models.dummy_vocab.tokenizer_style
    n_special: int = 256
    qkv_bias: bool = False
    rope: Llama3Rope | None = None
    source: str = ""
    key_length: int = 0       # head size where it is not n_embd / n_head (Gemma 3)
    sliding_window: int = 0   # gemma3: the window of its local layers (all but every 6th)

    @property
    def head_dim(self) -> int:
        return self.key_length or self.n_embd // self.n_head

    def tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape in NumPy order) in file order, as llama.cpp's converter writes them."""
        e, kv, f = self.n_embd, self.n_head_kv * self.head_dim, self.n_ff
        out: list[tuple[str, tuple[int, ...]]] = []
        if self.rope:
            out.append(("rope_freqs.weight", (self.head_dim // 2,)))
        out.append(("token_embd.weight", (self.n_vocab, e)))
        for i in range(self.n_layer):
            b = f"blk.{i}."
            out.append((b + "attn_norm.weight", (e,)))
            for proj, rows in (("q", self.n_head * self.head_dim), ("k", kv), ("v", kv)):
                out.append((b + f"attn_{proj}.weight", (rows, e)))
                if self.qkv_bias:
                    out.append((b + f"attn_{proj}.bias", (rows,)))
            if self.arch == "gemma3":   # RMSNorm of each query and key head
                out += [(b + "attn_q_norm.weight", (self.head_dim,)), (b + "attn_k_norm.weight", (self.head_dim,))]
            out.append((b + "attn_output.weight", (e, self.n_head * self.head_dim)))
            if self.arch == "gemma3":   # RMSNorm of the attention's output before the residual add
                out.append((b + "post_attention_norm.weight", (e,)))
            out += [(b + "ffn_norm.weight", (e,)), (b + "ffn_gate.weight", (f, e)), (b + "ffn_up.weight", (f, e)),
                    (b + "ffn_down.weight", (e, f))]
            if self.arch == "gemma3":   # and of the feed-forward's
                out.append((b + "post_ffw_norm.weight", (e,)))
        out.append(("output_norm.weight", (e,)))
        if not self.tied:
            out.append(("output.weight", (self.n_vocab, e)))
        return out

    @property
    def n_params(self) -> int:
        return sum(math.prod(s) for name, s in self.tensors() if name != "rope_freqs.weight")


_LLAMA31_ROPE = Llama3Rope(32.0, 1.0, 4.0, 8192)

PRESETS: dict[str, Preset] = {p.name: p for p in (
    # Small enough for tests (2.1M parameters, builds in a fraction of a second) with rows of 256 so
    # the K-quants apply as they do on real models.
    Preset("tiny", "llama", 256, 2, 4, 2, 768, 1024, 2048, 500000.0, 1e-5, False, "llama3", n_special=16,
           source="llmbench (Llama 3 layout, scaled down)"),
    # The same size in the other layouts the engine runs: Llama 3.2's tied output and rope
    # frequency factors, Qwen2's QKV biases and NeoX-ordered RoPE.
    Preset("tiny-llama3", "llama", 256, 2, 4, 2, 768, 1024, 131072, 500000.0, 1e-5, True, "llama3", n_special=16,
           rope=_LLAMA31_ROPE, source="llmbench (Llama 3.2 layout, scaled down)"),
    Preset("tiny-qwen2", "qwen2", 256, 2, 4, 2, 768, 1024, 32768, 1000000.0, 1e-6, True, "qwen2", n_special=16,
           qkv_bias=True, source="llmbench (Qwen2 layout, scaled down)"),
    # "tiny" with one KV head for its four query heads (multi-query attention, as Gemma 3 270M): one sequence's
    # decode has one attention unit, which the engine's threads share (backend_cpu.c, attention_split).
    Preset("tiny-mqa", "llama", 256, 2, 4, 1, 768, 1024, 2048, 500000.0, 1e-5, False, "llama3", n_special=16,
           source="llmbench (Llama 3 layout, scaled down, one KV head)"),
    # A GPT-2-small-sized Llama (124.7M parameters) with Llama 2's vocabulary size.
    Preset("llama-125m", "llama", 768, 12, 12, 4, 2048, 32000, 2048, 10000.0, 1e-5, False, "llama3",
           n_special=16, source="llmbench (GPT-2 small dimensions, Llama layers)"),
    Preset("llama-1b", "llama", 2048, 16, 32, 8, 8192, 128256, 131072, 500000.0, 1e-5, True, "llama3",
           rope=_LLAMA31_ROPE, source="meta-llama/Llama-3.2-1B config.json"),
    Preset("llama-8b", "llama", 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0, 1e-5, False, "llama3",
           source="meta-llama/Meta-Llama-3-8B config.json"),
    Preset("qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 32768, 1000000.0, 1e-6, True, "qwen2",
           qkv_bias=True, source="Qwen/Qwen2.5-0.5B config.json"),
    # Mistral's real tokenizer is SentencePiece; a byte-level BPE vocabulary of the same size gives
    # the same embedding and output shapes (all that speed depends on) through one tokenizer path.
    Preset("mistral-7b", "llama", 4096, 32, 32, 8, 14336, 32000, 32768, 10000.0, 1e-5, False, "gpt2",
           source="mistralai/Mistral-7B-v0.1 config.json"),
    # Gemma 3's layout at test size: 6 layers, so that layer 5 is global as every 6th layer of the real
    # models and 0-4 attend over a sliding window of 20 tokens (shorter than test prompts, and neither a
    # multiple of 16 nor of the KV block size), a head size (128) apart from n_embd / n_head, tied output,
    # norms around 1 (the converter stores Gemma's 1 + w). Its vocabulary is byte-level BPE, as Mistral's.
    Preset("tiny-gemma3", "gemma3", 256, 6, 4, 2, 768, 1024, 32768, 1000000.0, 1e-6, True, "gpt2", n_special=16,
           key_length=128, sliding_window=20, source="llmbench (Gemma 3 layout, scaled down)"),
)}


def _mix_name(mix: str) -> str:
    if mix.upper() not in MIXES:
        raise ValueError(f"unknown type {mix!r}; choose one of {', '.join(MIXES)}")
    return mix.upper()


def get_preset(name: str) -> Preset:
    """The dummy-model preset called ``name``.

    Raises:
        ValueError: no preset has that name; the message lists them.
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)} "
                         "(llmbench dummy --list)") from None


def rope_freq_factors(rope: Llama3Rope, head_dim: int, theta: float) -> np.ndarray:
    """The "llama3" rope scaling factors per frequency, as llama.cpp's convert_hf_to_gguf.py computes
    them for rope_freqs.weight (float32, head_dim / 2 values)."""
    freqs = 1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    low_wavelen = rope.original_context / rope.low_freq_factor
    high_wavelen = rope.original_context / rope.high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(rope.factor)
        else:
            smooth = ((rope.original_context / wavelen - rope.low_freq_factor)
                      / (rope.high_freq_factor - rope.low_freq_factor))
            out.append(1 / ((1 - smooth) / rope.factor + smooth))
    return np.array(out, np.float32)


def metadata(p: Preset, mix: str, seed: int) -> dict[str, Any]:
    """GGUF metadata for preset ``p`` (NumPy scalars carry the types llama.cpp reads)."""
    a, u32, f32 = p.arch, np.uint32, np.float32
    md: dict[str, Any] = {
        "general.architecture": a,
        "general.type": "model",
        "general.name": f"llmbench dummy {p.name}",
        "general.file_type": u32(MIXES[mix].ftype),
        "general.quantization_version": u32(GGML_QNT_VERSION),
        f"{a}.context_length": u32(p.n_ctx),
        f"{a}.embedding_length": u32(p.n_embd),
        f"{a}.block_count": u32(p.n_layer),
        f"{a}.feed_forward_length": u32(p.n_ff),
        f"{a}.attention.head_count": u32(p.n_head),
        f"{a}.attention.head_count_kv": u32(p.n_head_kv),
        f"{a}.attention.key_length": u32(p.head_dim),
        f"{a}.attention.value_length": u32(p.head_dim),
        f"{a}.rope.freq_base": f32(p.rope_theta),
        f"{a}.rope.dimension_count": u32(p.head_dim),
        f"{a}.attention.layer_norm_rms_epsilon": f32(p.rms_eps),
        f"{a}.vocab_size": u32(p.n_vocab),
        **({f"{a}.attention.sliding_window": u32(p.sliding_window)} if p.sliding_window else {}),
        "llmbench.dummy.preset": p.name,
        "llmbench.dummy.seed": np.uint64(seed),
        "llmbench.dummy.format_version": u32(FORMAT_VERSION),
    }
    md.update(build_vocab(p.n_vocab, tokenizer_style(p.tokenizer, p.n_special)).gguf_metadata())
    return md


def tensor_seed(seed: int, name: str) -> int:
    """The random stream of tensor ``name``: a 64-bit hash of (seed, name)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest(), "little")


def _chunks(p: Preset, name: str, shape: tuple[int, ...], type_name: str, seed: int,
            threads: int) -> Iterator[tuple[Callable[[], Any], int]]:
    row = shape[-1]
    rows = math.prod(shape[:-1])
    if name == "rope_freqs.weight":
        rope = p.rope
        assert rope is not None
        yield (lambda: rope_freq_factors(rope, p.head_dim, p.rope_theta)), row
        return
    if name.endswith("norm.weight"):
        if p.arch == "gemma3":   # 1 + N(0, 0.1): a norm the engine ignored or swapped would show
            def norm() -> np.ndarray:
                x = np.empty((1, row), np.float32)
                _core.fill_normal(x, tensor_seed(seed, name), 0.1, 1.0, 0)
                return encode_rows(x, type_name, threads)
            yield norm, row
            return
        yield (lambda: encode_rows(np.ones((1, row), np.float32), type_name, threads)), row
        return
    stream = tensor_seed(seed, name)
    per = max(1, CHUNK_ELEMENTS // row)
    for r0 in range(0, rows, per):
        n = min(per, rows - r0)

        def produce(r0: int = r0, n: int = n) -> np.ndarray:
            x = np.empty((n, row), np.float32)
            _core.fill_normal(x, stream, WEIGHT_STD, 0.0, r0 * row)
            return encode_rows(x, type_name, threads)

        yield produce, n * row


def tensor_specs(p: Preset, mix: str) -> list[TensorSpec]:
    """Every tensor of preset ``p`` with the type llama-quantize gives it in ``mix`` (llama.cpp's rules
    see the preset's layers, tied output and query heads per key/value head), F32 where it stays float."""
    shape = Shape(p.n_layer, not p.tied, n_gqa=p.n_head // p.n_head_kv)
    return [TensorSpec(name, dims, tensor_type(mix, name, dims[-1], shape) if should_quantize(name, len(dims))
                       else "F32") for name, dims in p.tensors()]


def build(preset: str, mix: str, out: str | os.PathLike[str], *, seed: int = 0, threads: int = 0,
          on_progress: Callable[[str, int], None] | None = None) -> ModelResult:
    """Write dummy model ``preset`` in quantization mix ``mix`` to ``out`` (replacing a file there).
    ``on_progress(tensor_name, elements_done)`` is called after each written chunk."""
    p = get_preset(preset)
    _check_seed(seed)
    mix = _mix_name(mix)
    t0 = time.perf_counter()
    specs = tensor_specs(p, mix)

    notify = on_progress or (lambda name, n: None)

    def jobs() -> Iterator[tuple[Callable[[], Any], Callable[[], None]]]:
        for s in specs:
            for job, n in _chunks(p, s.name, s.shape, s.type, seed, threads):
                yield job, partial(notify, s.name, n)

    write_pipelined(out, metadata(p, mix, seed), specs, jobs())
    tensors = [TensorResult(s.name, s.shape, "F32", s.type, 4 * s.n_elements, s.nbytes) for s in specs]
    return ModelResult(os.fspath(out), mix, tensors, time.perf_counter() - t0, os.path.getsize(out))


def cache_dir() -> Path:
    """Where dummy models are kept: $LLMBENCH_CACHE/dummy, else ~/.cache/llmbench/dummy
    (honouring $XDG_CACHE_HOME)."""
    root = os.environ.get("LLMBENCH_CACHE")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "llmbench")
    return Path(root) / "dummy"


def _check_seed(seed: int) -> None:
    if not 0 <= seed < 2**64:   # written as a uint64 key
        raise ValueError(f"seed {seed}: a dummy model's seed is a whole number from 0 to 2**64 - 1")


def cached_path(preset: str, type: str = "Q4_K_M", seed: int = 0) -> Path:
    """Where :func:`dummy_model` keeps this model (keyed by preset, type, seed and FORMAT_VERSION)."""
    get_preset(preset)
    _check_seed(seed)
    return cache_dir() / f"{preset}-{_mix_name(type)}-seed{seed}-v{FORMAT_VERSION}.gguf"


def dummy_model(preset: str, type: str = "Q4_K_M", *, seed: int = 0) -> Path:
    """The path of dummy model ``preset`` in quantization mix ``type``, building it on first use.
    A build that fails or is interrupted leaves no file in the cache."""
    path = cached_path(preset, type, seed)
    mix = _mix_name(type)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        build(preset, mix, path, seed=seed)
    return path
