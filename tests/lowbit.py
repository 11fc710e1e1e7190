"""Test-side writers of Q2_K, Q3_K, IQ4_NL and IQ4_XS blocks, which neither llmbench nor the gguf
package (0.19) can quantize to: plain round-to-nearest fits in NumPy, good enough to give a model
sensible weights in each type. They are not llama.cpp's quantizers (no search over scales), and the
tests never need them to be: the engine and the reference forward pass both read the bytes written
here, the reference through ``gguf.quants.dequantize``.
"""

from __future__ import annotations

import gguf
import numpy as np
from lowbit_iq import IQ_QUANTIZERS

KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32)


def _half(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float16).view(np.uint8).reshape(*a.shape[:-1], -1)


def _pack2(q: np.ndarray) -> np.ndarray:
    """(nb, 256) values 0..3 to Q2_K / Q3_K's qs: element 128 h + 32 s + l in bits 2 s of byte 32 h + l"""
    q = q.reshape(-1, 2, 4, 32).astype(np.uint8)
    return (q[:, :, 0] | q[:, :, 1] << 2 | q[:, :, 2] << 4 | q[:, :, 3] << 6).reshape(-1, 64)


def _nearest_kvalue(v: np.ndarray) -> np.ndarray:
    return np.abs(v[..., None] - KVALUES).argmin(-1).astype(np.uint8)


def _pack_nibbles(idx: np.ndarray) -> np.ndarray:
    """(..., 32) indices to 16 bytes: element j in the low nibble of byte j, j + 16 in the high"""
    return idx[..., :16] | idx[..., 16:] << 4


def q2_k(x: np.ndarray) -> np.ndarray:
    """rows of x (a multiple of 256 wide) as Q2_K blocks, (rows, 84 per block) uint8"""
    sb = x.reshape(-1, 16, 16).astype(np.float32)
    lo, hi = np.minimum(sb.min(-1), 0), sb.max(-1)
    scale, mins = (hi - lo) / 3, -lo
    d = (scale.max(-1) / 15).astype(np.float16).astype(np.float32)
    dmin = (mins.max(-1) / 15).astype(np.float16).astype(np.float32)
    ls = np.clip(np.rint(scale / np.where(d > 0, d, 1)[:, None]), 0, 15).astype(np.uint8)
    lm = np.clip(np.rint(mins / np.where(dmin > 0, dmin, 1)[:, None]), 0, 15).astype(np.uint8)
    dl, ml = d[:, None] * ls, dmin[:, None] * lm
    q = np.clip(np.rint((sb + ml[..., None]) / np.where(dl > 0, dl, 1)[..., None]), 0, 3)
    blocks = np.concatenate([ls | lm << 4, _pack2(q.reshape(-1, 256)), _half(d[:, None]), _half(dmin[:, None])], 1)
    return blocks.reshape(x.shape[0], -1)


def q3_k(x: np.ndarray) -> np.ndarray:
    """rows of x as Q3_K blocks (110 bytes per 256): values -4..3 times a signed 6-bit scale"""
    sb = x.reshape(-1, 16, 16).astype(np.float32)
    scale = np.abs(sb).max(-1) / 4
    d = (scale.max(-1) / 31).astype(np.float16).astype(np.float32)
    ls = np.clip(np.rint(scale / np.where(d > 0, d, 1)[:, None]), 0, 31).astype(np.int32)
    dl = d[:, None] * ls
    q = np.clip(np.rint(sb / np.where(dl > 0, dl, 1)[..., None]), -4, 3).astype(np.int32) + 4   # q + 4 = lo + 4 h
    q = q.reshape(-1, 256)
    hmask = np.zeros((q.shape[0], 32), np.uint8)
    for b in range(8):
        hmask |= ((q[:, 32 * b:32 * b + 32] >> 2) << b).astype(np.uint8)
    s6 = (ls + 32).astype(np.uint8)   # 6-bit: low 4 bits in nibbles of 0..7, high 2 bits in 8..11
    scales = np.zeros((q.shape[0], 12), np.uint8)
    scales[:, :8] = (s6[:, :8] & 0xF) | (s6[:, 8:] & 0xF) << 4
    for j in range(16):
        scales[:, 8 + j % 4] |= (s6[:, j] >> 4) << (2 * (j // 4))
    blocks = np.concatenate([hmask, _pack2(q & 3), scales, _half(d[:, None])], 1)
    return blocks.reshape(x.shape[0], -1)


def iq4_nl(x: np.ndarray) -> np.ndarray:
    """rows of x (a multiple of 32 wide) as IQ4_NL blocks (18 bytes per 32)"""
    b = x.reshape(-1, 32).astype(np.float32)
    amax = b[np.arange(b.shape[0]), np.abs(b).argmax(1)]
    d = (amax / -127).astype(np.float16).astype(np.float32)
    idx = _nearest_kvalue(b / np.where(d != 0, d, 1)[:, None])
    return np.concatenate([_half(d[:, None]), _pack_nibbles(idx)], 1).reshape(x.shape[0], -1)


def iq4_xs(x: np.ndarray) -> np.ndarray:
    """rows of x as IQ4_XS blocks (136 bytes per 256): IQ4_NL sub-blocks with 6-bit signed scales"""
    sb = x.reshape(-1, 8, 32).astype(np.float32)
    scale = np.abs(sb).max(-1) / 127
    d = (scale.max(-1) / 31).astype(np.float16).astype(np.float32)
    ls = np.clip(np.rint(scale / np.where(d > 0, d, 1)[:, None]), 0, 31).astype(np.int32)
    dl = d[:, None] * ls
    idx = _nearest_kvalue(sb / np.where(dl > 0, dl, 1)[..., None])
    s6 = (ls + 32).astype(np.uint16)
    scales_h = np.zeros(sb.shape[0], np.uint16)
    for j in range(8):
        scales_h |= (s6[:, j] >> 4) << (2 * j)
    scales_l = ((s6[:, 0::2] & 0xF) | (s6[:, 1::2] & 0xF) << 4).astype(np.uint8)
    blocks = np.concatenate([_half(d[:, None]), scales_h.view(np.uint8).reshape(-1, 2), scales_l,
                             _pack_nibbles(idx).reshape(-1, 128)], 1)
    return blocks.reshape(x.shape[0], -1)


QUANTIZERS = {"Q2_K": q2_k, "Q3_K": q3_k, "IQ4_NL": iq4_nl, "IQ4_XS": iq4_xs, **IQ_QUANTIZERS}   # I-quants: lowbit_iq.py


# ---- the ternary and FP4 types (csrc/quants_tq.c) ----

MXFP4_KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.float32)   # 2 x E2M1


def nvfp4(x: np.ndarray) -> np.ndarray:
    """rows of x (a multiple of 64 wide) as NVFP4 blocks (36 bytes per 64): per 16 elements a UE4M3 scale with
    the largest value at the largest E2M1 value (gguf's fp32_to_ue4m3 rounds it), each value the nearest"""
    sb = x.reshape(-1, 4, 16).astype(np.float32)
    codes = gguf.quants.NVFP4.fp32_to_ue4m3(np.abs(sb).max(-1) / 6)        # (nb, 4): scale of values in [-6, 6]
    d = gguf.quants.NVFP4.ue4m3_to_fp32(codes).astype(np.float32)          # half the scale, as kvalues are doubled
    idx = np.abs((sb / np.where(d > 0, d, 1)[..., None])[..., None] - MXFP4_KVALUES).argmin(-1).astype(np.uint8)
    qs = (idx[..., :8] | idx[..., 8:] << 4).reshape(-1, 32)
    return np.concatenate([codes.astype(np.uint8), qs], 1).reshape(x.shape[0], -1)


def _gguf_writer(name: str):
    """gguf's own round-to-nearest quantizer (TQ1_0, TQ2_0, MXFP4), rows of bytes"""
    t = gguf.GGMLQuantizationType[name]
    return lambda x: np.ascontiguousarray(gguf.quants.quantize(np.asarray(x, np.float32), t)).reshape(x.shape[0], -1)


def q1_0(x: np.ndarray) -> np.ndarray:
    """rows of x (a multiple of 128 wide) as Q1_0 blocks (18 bytes per 128): d the mean |x| of the block, as
    llama.cpp's quantize_row_q1_0_ref takes it, and a set bit where x >= 0"""
    b = x.reshape(-1, 128).astype(np.float32)
    d = np.abs(b).mean(-1).astype(np.float16)
    bits = np.packbits(b >= 0, axis=1, bitorder="little")
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), bits], 1).reshape(x.shape[0], -1)


QUANTIZERS.update({"TQ1_0": _gguf_writer("TQ1_0"), "TQ2_0": _gguf_writer("TQ2_0"), "MXFP4": _gguf_writer("MXFP4"),
                   "NVFP4": nvfp4, "Q1_0": q1_0})
