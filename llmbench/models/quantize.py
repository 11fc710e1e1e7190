"""`llmbench quantize`: convert a GGUF model to a llama.cpp quantization mix (F16, Q8_0, Q4_K_M, Q2_K,
Q3_K_M, IQ4_XS, ...).

Which tensor gets which type follows llama.cpp (src/llama-quant.cpp, llama_tensor_get_type) for the
mixes offered here: only 2-D+ tensors named "*weight" are converted (norms, 1-D tensors and the
like are copied as they are); the output projection (or the token embedding when it doubles as the
output) gets Q6_K; attn_v, ffn_down and attn_output get more bits where llama.cpp gives them (by layer,
and for Q2_K / IQ4_* by the number of query heads per key/value head); a tensor whose rows are not a
whole number of blocks falls back (Q2_K, Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0,
IQ4_XS -> IQ4_NL), and to F16 when even 32 does not divide the row (a 172-wide ffn_down). Checked
against llama-quantize (benchmarks/quantize_vs_llamacpp.py runs llama-cpp-python 0.3.36's
llama_model_quantize on the same file): every mix gives the same tensor types, bytes and metadata, block
for block, on stories260K, the tiny dummy preset and a 17-layer, 4-way grouped-query shape (results in
docs/quant-types.md). Q4_1, Q5_0 and Q5_1 are uniform mixes (llama.cpp changes Q4_0 / Q5_0's ffn_down only
with an importance matrix). Not modelled: Falcon's and mixture-of-experts models' special cases.
With ``imatrix`` (llama.cpp's importance matrix, llmbench.models.imatrix) each tensor's weights go to the
quantizers that use them (llmbench.models.weight_types.IMATRIX_TYPES), matched by name as llama-quantize matches them.
Tensors are converted in row chunks and streamed to disk (llmbench.models.gguf_writer), so memory stays at a
few chunks whatever the model size. Tested by tests/test_quantize_cmd.py.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from .. import UnsupportedError
from .gguf import GGUFFile, TensorInfo
from .gguf_writer import TYPE_TRAITS, TensorSpec, write_pipelined

GGML_QNT_VERSION = 2          # general.quantization_version, as llama.cpp writes it
CHUNK_ELEMENTS = 1 << 22      # elements converted per step (16 MiB of float32)


@dataclass(frozen=True)
class Mix:
    """A quantization mix: its llama.cpp LLAMA_FTYPE value and the type most tensors get."""

    name: str
    ftype: int
    default: str


MIXES = {m.name: m for m in (
    Mix("F32", 0, "F32"), Mix("F16", 1, "F16"), Mix("BF16", 32, "BF16"), Mix("Q8_0", 7, "Q8_0"),
    Mix("Q4_0", 2, "Q4_0"), Mix("Q4_1", 3, "Q4_1"), Mix("Q5_0", 8, "Q5_0"), Mix("Q5_1", 9, "Q5_1"),
    Mix("Q2_K", 10, "Q2_K"), Mix("Q3_K_S", 11, "Q3_K"), Mix("Q3_K_M", 12, "Q3_K"), Mix("Q3_K_L", 13, "Q3_K"),
    Mix("Q4_K_S", 14, "Q4_K"), Mix("Q4_K_M", 15, "Q4_K"), Mix("Q5_K_S", 16, "Q5_K"), Mix("Q5_K_M", 17, "Q5_K"),
    Mix("Q6_K", 18, "Q6_K"), Mix("IQ4_NL", 25, "IQ4_NL"), Mix("IQ4_XS", 30, "IQ4_XS"),
)}

# llama.cpp's fallback when a row is not a whole number of the type's blocks (tensor_type_fallback).
K_FALLBACK = {"Q2_K": "Q4_0", "Q3_K": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0", "IQ4_XS": "IQ4_NL"}

# Substrings of weight names llama.cpp never quantizes (gates, small recurrent/positional tensors).
_KEEP = ("_norm.weight", "ffn_gate_inp.weight", "altup", "laurel", "per_layer_model_proj", "ssm_conv1d.weight",
         "shortconv.conv.weight", "time_mix_", "attn_rel_b.weight")
_KEEP_EXACT = ("position_embd.weight", "token_types.weight")

_LAYER = re.compile(r"^blk\.(\d+)\.")


def _mix(name: str) -> Mix:
    try:
        return MIXES[name.upper()]
    except KeyError:
        raise ValueError(f"unknown quantization type {name!r}; choose one of {', '.join(MIXES)}") from None


def _block(type_name: str) -> int:
    return TYPE_TRAITS[type_name][1]


def is_block_type(type_name: str) -> bool:
    """True for block-quantized types (Q4_0, Q4_K, ...), False for F32/F16/BF16 and integers."""
    return _block(type_name) > 1


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama.cpp's choice of layers that get more bits: the first and last eighth, and every third
    layer in between."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def should_quantize(name: str, n_dims: int) -> bool:
    """Whether llama.cpp converts this tensor at all (else it is copied unchanged)."""
    return (name.endswith("weight") and n_dims >= 2 and not any(k in name for k in _KEEP)
            and name not in _KEEP_EXACT)


@dataclass(frozen=True)
class Shape:
    """What llama.cpp's type rules read about the model besides a tensor's name and row length."""

    n_layer: int              # blocks (ffn_down's layer count; attn_v's when every block has one)
    has_output: bool          # output.weight exists, i.e. the token embedding is not tied to the output
    n_gqa: int = 1            # query heads per key/value head (of the first layer)
    has_imatrix: bool = False  # an importance matrix is given (changes IQ4_*, Q4_0, Q5_0's ffn_down)
    n_attn_v: int | None = None   # attn_v-like tensors (attn_v, attn_qkv, attn_kv_b); None: n_layer
    is_70b: bool = False      # llama.cpp's LLM_TYPE_70B (a llama of 80 blocks with grouped-query attention)


def _is_attn_v(name: str) -> bool:
    return any(k in name for k in ("attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight"))


def tensor_type(mix: str, name: str, row: int, n_layer: int | Shape, has_output: bool = True, *,
                i_attn_v: int | None = None) -> str:
    """The type llama.cpp's `llama-quantize` gives a quantizable tensor ``name`` whose rows have
    ``row`` elements (llama_tensor_get_type of src/llama-quant.cpp, for dense models other than Falcon).
    ``n_layer`` is a :class:`Shape`, or the number of blocks with ``has_output`` (the file has
    output.weight) for a model without grouped-query attention or importance matrix. ``i_attn_v``: the
    tensor's rank among the attn_v-like tensors in layer order (default: its layer number)."""
    m = _mix(mix)
    shape = n_layer if isinstance(n_layer, Shape) else Shape(n_layer, has_output)
    n, gqa, imatrix = shape.n_layer, shape.n_gqa, shape.has_imatrix
    t = m.default
    if not is_block_type(t):
        return t
    layer = _LAYER.match(name)
    i = int(layer.group(1)) if layer else -1
    if name == "output.weight" or (not shape.has_output and name in ("token_embd.weight", "per_layer_token_embd.weight")):
        if row % _block(t):
            t = "Q8_0"
        elif t != "Q8_0":
            t = "Q6_K"
    elif name in ("token_embd.weight", "per_layer_token_embd.weight"):
        pass
    elif _is_attn_v(name):
        iv = i if i_attn_v is None else i_attn_v
        nv = n if shape.n_attn_v is None else shape.n_attn_v
        if m.name == "Q2_K":
            t = "Q4_K" if gqa >= 4 else "Q3_K"
        elif m.name == "Q3_K_M":
            t = "Q5_K" if iv < 2 else "Q4_K"
        elif m.name == "Q3_K_L":
            t = "Q5_K"
        elif m.name in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
            t = "Q5_K"
        elif m.name in ("Q4_K_M", "Q5_K_M") and use_more_bits(iv, nv):
            t = "Q6_K"
        elif m.name == "Q4_K_S" and iv < 4:
            t = "Q5_K"
        if shape.is_70b and t in ("Q3_K", "Q4_K"):
            t = "Q5_K"
    elif "ffn_down" in name:
        if m.name == "Q2_K":
            t = "Q3_K"
        elif m.name == "Q3_K_M":
            t = "Q5_K" if i < n // 16 else "Q4_K"
        elif m.name == "Q3_K_L":
            t = "Q5_K"
        elif m.name == "Q4_K_M":
            if use_more_bits(i, n):
                t = "Q6_K"
        elif m.name in ("IQ4_NL", "IQ4_XS") and i < n // 8 and not imatrix:
            t = "Q5_K"
        elif m.name == "Q5_K_M" and use_more_bits(i, n):
            t = "Q6_K"
        elif m.name == "Q4_K_S" and i < n // 8:
            t = "Q5_K"
        elif m.name in ("Q4_0", "Q5_0") and imatrix and i < n // 8:
            t = {"Q4_0": "Q4_1", "Q5_0": "Q5_1"}[m.name]
    elif "attn_output.weight" in name:
        t = {"Q2_K": "Q3_K", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K"}.get(m.name, t)
    if row % _block(t):
        t = K_FALLBACK.get(t, "F16")
        if row % _block(t):
            t = "F16"
    return t


# ---- converting rows ----

def _quant() -> Any:
    try:
        from . import weight_types as quant
    except ImportError as e:
        raise UnsupportedError(f"converting tensors needs llmbench.models.weight_types ({e}); rebuild the extension: "
                               "python setup.py build_ext --inplace") from None
    return quant


def decode_rows(raw: np.ndarray, type_name: str, n: int, threads: int = 0) -> np.ndarray:
    """float32 rows (rows, n) from the raw bytes (rows, row_bytes) of a ``type_name`` tensor."""
    if type_name == "F32":
        return raw.view(np.float32).reshape(raw.shape[0], n)
    return _quant().dequantize(np.ascontiguousarray(raw), type_name, (raw.shape[0], n), nthreads=threads)


def encode_rows(x: np.ndarray, type_name: str, threads: int = 0, imatrix: np.ndarray | None = None) -> np.ndarray:
    """The raw bytes (rows, row_bytes) of float32 rows ``x`` in ``type_name`` (``imatrix``: importance
    weights, one per column, for the types whose quantizer takes them)."""
    if type_name == "F32":
        return x.view(np.uint8)
    return _quant().quantize(x, type_name, nthreads=threads, imatrix=imatrix)


def convertible_types() -> set[str]:
    """Types llmbench reads and writes: those of llmbench.models.weight_types."""
    return set(_quant().SUPPORTED_TYPES)


# ---- results ----

@dataclass(frozen=True)
class TensorResult:
    """One tensor as written: name, shape, source and written types and sizes, and whether an importance
    matrix weighted it."""

    name: str
    shape: tuple[int, ...]
    src_type: str
    type: str
    src_bytes: int
    nbytes: int
    imatrix: bool = False     # quantized with importance weights


@dataclass(frozen=True)
class ModelResult:
    """What a quantize or dummy build wrote: per-tensor types and sizes, time taken."""

    path: str
    mix: str
    tensors: list[TensorResult]
    seconds: float
    file_size: int

    @property
    def n_elements(self) -> int:
        return sum(int(np.prod(t.shape)) for t in self.tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def bits_per_weight(self) -> float:
        """Bits of tensor data per element over all tensors (as llama.cpp reports a model's BPW)."""
        return 8.0 * self.nbytes / max(1, self.n_elements)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "mix": self.mix, "seconds": self.seconds, "file_size": self.file_size,
                "n_elements": self.n_elements, "nbytes": self.nbytes, "bits_per_weight": self.bits_per_weight,
                "tensors": [asdict(t) | {"shape": list(t.shape)} for t in self.tensors]}


# ---- the plan and the run ----

@dataclass(frozen=True)
class _Step:
    src: TensorInfo
    dst: TensorSpec
    weights: np.ndarray | None = None   # importance weights: (n_mat, row), n_mat matrices (experts)


def _step_weights(t: TensorInfo, dst: str, imatrix: dict[str, np.ndarray] | None) -> np.ndarray | None:
    """The importance weights for converting ``t`` to ``dst``, as llama.cpp matches them: by tensor name,
    holding row * n_mat values (n_mat: the 3-D tensor's matrices); a mismatch is an error except for the
    token embedding, which is then quantized without."""
    if imatrix is None or dst == t.type or not is_block_type(dst):
        return None
    w = imatrix.get(t.name)
    if w is None:
        return None
    row = t.shape[-1]
    n_mat = t.shape[-3] if len(t.shape) >= 3 else 1
    if w.size != row * n_mat:
        if t.name in ("token_embd.weight", "per_layer_token_embd.weight"):
            return None
        raise ValueError(f"the importance matrix holds {w.size} values for {t.name}, which needs {row * n_mat} "
                         f"({n_mat} x {row}); it was computed for another model")
    return w.reshape(n_mat, row)


def _layer_order(name: str) -> tuple[int, str]:
    g = _LAYER.match(name)
    return (int(g.group(1)) if g else -1, name)


def _first(v: Any, default: int) -> int:
    """A per-model or per-layer (array) integer hyperparameter's first value."""
    if v is None:
        return default
    v = np.asarray(v).reshape(-1)
    return int(v[0]) if v.size else default


def model_shape(src: GGUFFile, has_imatrix: bool = False) -> Shape:
    """The :class:`Shape` llama.cpp's type rules see for the model in ``src``."""
    arch = src.metadata.get("general.architecture", "")
    n_layer = int(src.metadata.get(f"{arch}.block_count", 0))
    if n_layer <= 0:
        n_layer = 1 + max((int(g.group(1)) for n in src.tensors if (g := _LAYER.match(n))), default=-1)
    n_head = _first(src.metadata.get(f"{arch}.attention.head_count"), 0)
    n_head_kv = _first(src.metadata.get(f"{arch}.attention.head_count_kv"), n_head)
    n_gqa = n_head // n_head_kv if n_head_kv > 0 else 0
    n_attn_v = sum(1 for n in src.tensors if _is_attn_v(n))
    return Shape(n_layer, "output.weight" in src.tensors, n_gqa=n_gqa, has_imatrix=has_imatrix, n_attn_v=n_attn_v,
                 is_70b=arch == "llama" and n_layer == 80 and n_head != n_head_kv)


def plan(src: GGUFFile, mix: str, imatrix: dict[str, np.ndarray] | None = None) -> list[_Step]:
    """Each source tensor with its destination type under ``mix`` (and its importance weights when
    ``imatrix`` is given); checks every conversion is possible."""
    m = _mix(mix)
    has_imatrix = imatrix is not None
    if int(src.metadata.get("split.count", 1)) > 1:
        raise UnsupportedError(f"{src.path} is one part of a split model; merge the parts first "
                               "(llama-gguf-split --merge) and quantize the merged file")
    shape = model_shape(src, has_imatrix)
    # llama.cpp counts attn_v-like tensors in its loader's order: by layer, then by name
    order = sorted((t.name for t in src.tensors.values() if _is_attn_v(t.name)), key=_layer_order)
    rank = {name: k for k, name in enumerate(order)}
    readable = convertible_types()
    steps = []
    for t in src.tensors.values():
        dst = t.type
        if should_quantize(t.name, len(t.shape)):
            dst = tensor_type(m.name, t.name, t.shape[-1], shape, i_attn_v=rank.get(t.name))
        if dst != t.type and t.type not in readable:
            raise UnsupportedError(f"tensor {t.name!r} is {t.type}, which llmbench cannot convert "
                                   f"(it reads {', '.join(sorted(readable))}); convert it with llama.cpp's "
                                   f"llama-quantize instead, or start from an F16/F32 file")
        steps.append(_Step(t, TensorSpec(t.name, t.shape, dst), _step_weights(t, dst, imatrix)))
    return steps


def _chunks(src: GGUFFile, step: _Step, threads: int) -> Iterator[tuple[Callable[[], Any], int]]:
    t, d = step.src, step.dst
    raw = src.raw(t.name)
    row = t.shape[-1]
    rows = t.n_elements // row
    src_row = t.nbytes // rows
    raw = raw.reshape(rows, src_row)
    per = max(1, CHUNK_ELEMENTS // row)
    w = step.weights
    per_mat = max(1, rows // (1 if w is None else w.shape[0]))   # chunks stay inside one matrix (expert)
    for m0 in range(0, rows, per_mat):
        wm = None if w is None else w[m0 // per_mat]
        for r0 in range(m0, m0 + per_mat, per):
            part = raw[r0:min(r0 + per, m0 + per_mat)]
            if d.type == t.type:
                yield partial(np.asarray, part), part.shape[0] * row
            else:
                yield partial(_convert, part, t.type, d.type, row, threads, wm), part.shape[0] * row


def _convert(raw: np.ndarray, src_type: str, dst_type: str, n: int, threads: int,
             imatrix: np.ndarray | None) -> np.ndarray:
    """Rows of ``src_type`` bytes re-encoded as ``dst_type`` (through float32)."""
    return encode_rows(decode_rows(raw, src_type, n, threads), dst_type, threads, imatrix)


def quantize_file(src_path: str | os.PathLike[str], dst_path: str | os.PathLike[str], mix: str, *,
                  threads: int = 0, force: bool = False, imatrix: str | os.PathLike[str] | None = None,
                  on_progress: Callable[[str, int], None] | None = None) -> ModelResult:
    """Write ``dst_path``: the model at ``src_path`` converted to ``mix``. Metadata is kept (same keys
    and types) except general.file_type and general.quantization_version, set as llama.cpp does.
    ``imatrix``: a llama.cpp importance-matrix file (GGUF or legacy .dat, see :mod:`llmbench.models.imatrix`)
    whose weights guide the quantizers that use them, and llama.cpp's rules that depend on having one.
    ``on_progress(tensor_name, elements_done)`` is called after each written chunk."""
    m = _mix(mix)
    weights = None
    if imatrix is not None:
        from .imatrix import load_imatrix

        weights = load_imatrix(imatrix)
        bad = [n for n, w in weights.items() if not np.all(np.isfinite(w))]
        if bad:
            raise ValueError(f"{imatrix}: the importance matrix has NaN or Inf values (first: {bad[0]})")
    if os.path.exists(dst_path) and not force:
        raise FileExistsError(f"{dst_path} exists; pass --force (force=True) to replace it")
    if os.path.abspath(src_path) == os.path.abspath(dst_path):
        raise ValueError("source and destination are the same file; write to a new path")
    t0 = time.perf_counter()
    with GGUFFile(src_path) as src:
        steps = plan(src, m.name, weights)
        metadata = dict(src.metadata)
        types = dict(src.metadata_types)
        metadata["general.file_type"], types["general.file_type"] = m.ftype, "uint32"
        metadata["general.quantization_version"] = GGML_QNT_VERSION
        types["general.quantization_version"] = "uint32"

        notify = on_progress or (lambda name, n: None)

        def jobs() -> Iterator[tuple[Callable[[], Any], Callable[[], None]]]:
            for s in steps:
                for job, n in _chunks(src, s, threads):
                    yield job, partial(notify, s.src.name, n)

        write_pipelined(dst_path, metadata, [s.dst for s in steps], jobs(), types=types)
    tensors = [TensorResult(s.src.name, s.src.shape, s.src.type, s.dst.type, s.src.nbytes, s.dst.nbytes,
                            s.weights is not None) for s in steps]
    return ModelResult(os.fspath(dst_path), m.name, tensors, time.perf_counter() - t0, os.path.getsize(dst_path))
