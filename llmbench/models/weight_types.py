"""Dequantize and quantize tensors in ggml's formats with the C core (csrc/quants.c).

Types (:data:`SUPPORTED_TYPES`, read from the C core): F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K,
Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS both ways (:data:`QUANTIZE_TYPES` lists the types :func:`quantize`
writes); the I-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0
are dequantized only. Results are bit-identical to
llama.cpp's code (its quantizer's bytes, and the gguf package's NumPy code where it has the type); large
tensors are split over OpenMP threads. A quantized tensor is a uint8 array whose last
axis holds the bytes of one row, the layout ``gguf.quants.quantize`` returns.

>>> x = np.random.default_rng(0).standard_normal((4, 512), dtype=np.float32)
>>> q = quantize(x, "Q4_K")             # (4, 288) uint8: two 144-byte blocks per row
>>> y = dequantize(q, "Q4_K", x.shape)  # float32, shape (4, 512)
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np

from .. import UnsupportedError, _core

_TRAITS = {tid: (name, bs, ts) for tid, name, bs, ts in _core.type_traits()}
_IDS = {name: tid for tid, (name, _, _) in _TRAITS.items()}
_CAN_QUANTIZE = dict(_core.quant_types())

#: names of the types :func:`dequantize` and :func:`quantize` handle, in type-id order
SUPPORTED_TYPES: tuple[str, ...] = tuple(_TRAITS[t][0] for t in _CAN_QUANTIZE)
#: names of the types :func:`quantize` can produce
QUANTIZE_TYPES: tuple[str, ...] = tuple(_TRAITS[t][0] for t, ok in _CAN_QUANTIZE.items() if ok)


def type_id(type: str | int) -> int:
    """The ggml type id of a type name ("Q4_K", case-insensitive) or id (checked)."""
    if isinstance(type, (int, np.integer)) and not isinstance(type, bool):
        if int(type) not in _TRAITS:
            raise ValueError(f"unknown ggml type id {type}; known ids: {sorted(_TRAITS)}")
        return int(type)
    if not isinstance(type, str):
        raise TypeError(f"type must be a name like 'Q4_K' or a ggml type id, not {type.__class__.__name__}")
    tid = _IDS.get(type.upper())
    if tid is None:
        close = difflib.get_close_matches(type.upper(), _IDS, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise ValueError(f"unknown tensor type {type!r}{hint}; supported: {', '.join(SUPPORTED_TYPES)}")
    return tid


def block_size(type: str | int) -> int:
    """Elements per block (1 for F32/F16/BF16, 32 for Q4_0..Q8_0, 256 for the K types)."""
    return _TRAITS[type_id(type)][1]


def type_size(type: str | int) -> int:
    """Bytes per block."""
    return _TRAITS[type_id(type)][2]


def row_bytes(type: str | int, ncols: int) -> int:
    """Bytes of one row of ``ncols`` elements (a multiple of the block size)."""
    _check_row(type_id(type), ncols)
    return ncols // block_size(type) * type_size(type)


def _check_row(tid: int, ncols: int) -> None:
    name, bs, _ = _TRAITS[tid]
    if ncols % bs:
        raise ValueError(f"a {name} row holds whole blocks of {bs} elements, but the last dimension is {ncols}; "
                         f"pad it to {-(-ncols // bs) * bs} or pick a type with a smaller block")


def _supported(type: str | int, quantize: bool) -> int:
    tid = type_id(type)
    ok = tid in _CAN_QUANTIZE and (_CAN_QUANTIZE[tid] or not quantize)
    if not ok:
        names = QUANTIZE_TYPES if quantize else SUPPORTED_TYPES
        raise UnsupportedError(f"llmbench cannot {'quantize to' if quantize else 'dequantize'} {_TRAITS[tid][0]}; "
                               f"supported: {', '.join(names)}")
    return tid


def dequantize(raw: np.ndarray | bytes, type: str | int, shape: int | Sequence[int], *,
               nthreads: int = 0) -> np.ndarray:
    """Decode the bytes of a tensor of ``type`` to a new float32 array of ``shape`` (NumPy order,
    contiguous rows last). ``raw`` is any C-contiguous array (read as bytes) or bytes-like object.
    ``nthreads``: OpenMP threads for large tensors, 0 for the default."""
    tid = _supported(type, quantize=False)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"shape {shape} has a negative dimension")
    ncols = shape[-1] if shape else 1
    _check_row(tid, ncols)
    nrows = int(np.prod(shape[:-1], dtype=np.int64))
    if isinstance(raw, (bytes, bytearray, memoryview)):
        raw = np.frombuffer(raw, dtype=np.uint8)
    raw = np.asarray(raw)
    if not raw.flags.c_contiguous:
        raise ValueError("raw must be C-contiguous (it is read as packed blocks); pass np.ascontiguousarray(raw)")
    raw = raw.reshape(-1).view(np.uint8)
    need = nrows * row_bytes(tid, ncols)
    if raw.size != need:
        raise ValueError(f"raw has {raw.size} bytes, but a {_TRAITS[tid][0]} tensor of shape {shape} takes {need}")
    if raw.ctypes.data % 4:   # the core reads scales in place: give it an aligned copy
        raw = raw.copy()
    out = np.empty(shape, dtype=np.float32)
    _core.dequantize(raw, tid, nrows, ncols, out, nthreads)
    return out


#: types whose quantizer uses importance weights (:func:`quantize`'s ``imatrix``); others ignore them
IMATRIX_TYPES: tuple[str, ...] = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL",
                                  "IQ4_XS")


# byte offsets of each block's FP16 scales (d, and the min or dmin where there is one)
_HALF_SCALES = {"Q4_0": [0], "Q5_0": [0], "Q8_0": [0], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2],
                "Q6_K": [208], "Q2_K": [80, 82], "Q3_K": [108], "IQ4_NL": [0], "IQ4_XS": [0],
                **dict.fromkeys(["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "Q1_0"], [0])}


def random_blocks(type: str | int, nblocks: int, rng: np.random.Generator) -> np.ndarray:
    """``nblocks`` blocks of random bytes of a block type as (nblocks, type_size) uint8: every bit pattern
    of quants and sub-block scales (which a quantizer may never write), with finite scales of any sign
    and size, subnormal ones included. For testing a kernel against :func:`dequantize`."""
    name = _TRAITS[type_id(type)][0]
    blocks = rng.integers(0, 256, (nblocks, type_size(name)), dtype=np.uint8)

    def finite_half() -> np.ndarray:
        return (rng.integers(0, 0x7C00, nblocks) | (rng.integers(0, 2, nblocks) << 15)).astype(np.uint16)

    for off in _HALF_SCALES.get(name, []):
        blocks[:, off:off + 2] = finite_half().view(np.uint8).reshape(nblocks, 2)
    if name == "IQ1_M":   # d's 4 nibbles are the top nibbles of the 4 scale words (bytes 48..55)
        words = blocks[:, 48:56].copy().view(np.uint16)
        d = finite_half()
        for k in range(4):
            words[:, k] = (words[:, k] & 0x0FFF) | ((d >> (4 * k)) & 0xF) << 12
        blocks[:, 48:56] = words.view(np.uint8)
    if name in ("TQ1_0", "TQ2_0"):   # d is the block's last 2 bytes
        blocks[:, -2:] = finite_half().view(np.uint8).reshape(nblocks, 2)
    if name == "MXFP4":   # E8M0 exponents keeping 12 * 2^(e - 128) finite (e <= 252), subnormal ones (0, 1) too
        blocks[:, 0] = rng.integers(0, 253, nblocks)
        blocks[:3, 0] = [0, 1, 252][:nblocks]
    if name == "Q8_K":
        blocks[:, 0:4] = rng.standard_normal(nblocks, dtype=np.float32).view(np.uint8).reshape(nblocks, 4)
    return blocks


def quantize(array: np.ndarray, type: str | int, *, nthreads: int = 0, imatrix: np.ndarray | None = None) -> np.ndarray:
    """Encode the rows (last axis) of ``array`` as ``type``: a new uint8 array of shape
    ``(*array.shape[:-1], row_bytes)``, as ``gguf.quants.quantize`` lays it out. Values are converted
    to float32 first; block formats cannot hold NaN or Inf. ``nthreads`` as for :func:`dequantize`.
    ``imatrix``: one finite importance weight per column (llama.cpp's importance matrix entry for the
    tensor), used as llama.cpp's quantizer uses it by the :data:`IMATRIX_TYPES`, ignored by the others."""
    tid = _supported(type, quantize=True)
    a = np.asarray(array)
    if a.ndim == 0:
        raise ValueError("quantize needs an array with at least one dimension (the row)")
    if a.dtype.kind not in "fiub":
        raise TypeError(f"cannot quantize an array of dtype {a.dtype}: expected float32 (or real numbers to convert)")
    a = np.require(a, np.float32, ["C_CONTIGUOUS", "ALIGNED"])
    _check_row(tid, a.shape[-1])
    out = np.empty((*a.shape[:-1], row_bytes(tid, a.shape[-1])), dtype=np.uint8)
    if imatrix is None:
        _core.quantize(a, tid, out, nthreads)
        return out
    w = np.require(np.asarray(imatrix, dtype=np.float32), np.float32, ["C_CONTIGUOUS", "ALIGNED"])
    if w.shape != (a.shape[-1],):
        raise ValueError(f"imatrix holds one weight per column: shape ({a.shape[-1]},), not {w.shape}")
    if not np.all(np.isfinite(w)):
        raise ValueError("imatrix has NaN or Inf weights")
    _core.quantize_imatrix(a, tid, w, out, nthreads)
    return out
