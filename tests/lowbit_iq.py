"""Test-side writers of the I-quant formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M (layouts
in csrc/quants.h), which neither llmbench nor the gguf package (0.19) quantizes to. Each group of values
takes the nearest lattice point (the gguf package's own copy of ggml's grids) after a plain per-sub-block
scale; signs come from the values, and where a format stores 7 sign bits the smallest value of an odd group
gives up its sign. Not llama.cpp's quantizers (no importance weights, no search over scales); the tests
need only sensible weights whose bytes the engine and ``gguf.quants.dequantize`` both read.
"""

from __future__ import annotations

import numpy as np
from gguf import quants


def _half(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float16).view(np.uint8).reshape(*a.shape[:-1], -1)


def _f16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float32)


def _grid(cls) -> np.ndarray:
    cls.init_grid()
    return np.asarray(cls.grid, np.float32).reshape(cls.grid_shape)


def _nearest(v: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """index of the nearest grid row for each row of v (squared distance), in chunks"""
    v2 = v.reshape(-1, grid.shape[1])
    out = np.empty(v2.shape[0], np.int64)
    g2 = (grid * grid).sum(1)
    for i in range(0, v2.shape[0], 4096):
        c = v2[i:i + 4096]
        out[i:i + 4096] = (g2[None, :] - 2 * c @ grid.T).argmin(1)
    return out.reshape(v.shape[:-1])


def _scales(amax: np.ndarray, top: int) -> tuple[np.ndarray, np.ndarray]:
    """per block d (fp16) and per sub-block odd multipliers m = 2 s + 1 <= top with d m ~ amax"""
    d = _f16(amax.max(-1) / top)
    s = np.clip(np.rint((amax / np.where(d > 0, d, 1)[:, None] - 1) / 2), 0, (top - 1) // 2).astype(np.int64)
    return d, s


def _signs(v: np.ndarray, even: bool) -> np.ndarray:
    """(..., 8) sign bits of v as bytes; even: the smallest |v| of an odd group flips to make the count even"""
    neg = v < 0
    if even:
        odd = neg.sum(-1) % 2 == 1
        j = np.abs(v).argmin(-1)
        flip = np.zeros_like(neg)
        np.put_along_axis(flip, j[..., None], odd[..., None], -1)
        neg ^= flip
    return (neg * (1 << np.arange(8))).sum(-1).astype(np.uint32)


def _apply_signs(v: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """|v| where the stored signs are kept, so the lattice fit matches what will be decoded"""
    s = np.where((bits[..., None] >> np.arange(8)) & 1, -1.0, 1.0)
    return np.maximum(v.reshape(*bits.shape, 8) * s, 0)


def iq2_xxs(x: np.ndarray) -> np.ndarray:
    """rows of x (a multiple of 256 wide) as IQ2_XXS blocks (66 bytes per 256)"""
    sb = x.reshape(-1, 8, 32).astype(np.float32)
    d, s = _scales(np.abs(sb).max(-1) * 8 / 43, 31)            # x = d (2 s + 1) / 8 * grid, grid <= 43
    db = d[:, None] * (2 * s + 1) / 8
    g = sb.reshape(-1, 8, 4, 8)
    bits = _signs(g, even=True)
    idx = _nearest(_apply_signs(g / np.where(db > 0, db, 1)[..., None, None], bits), _grid(quants.IQ2_XXS))
    w0 = (idx * (1 << (8 * np.arange(4)))).sum(-1).astype(np.uint32)
    w1 = ((bits & 127) << (7 * np.arange(4))).sum(-1).astype(np.uint32) | (s.astype(np.uint32) << 28)
    words = np.stack([w0, w1], -1).reshape(-1, 16)
    return np.concatenate([_half(d[:, None]), words.view(np.uint8)], 1).reshape(x.shape[0], -1)


def _iq2_16(x: np.ndarray):
    """IQ2_XS / IQ2_S: d, s per 16 values as (blocks, 8, 2), the groups of 8 and their scales"""
    sb = x.reshape(-1, 16, 16).astype(np.float32)
    d, s = _scales(np.abs(sb).max(-1) * 8 / 43, 31)
    db = d[:, None] * (2 * s + 1) / 8
    g = sb.reshape(-1, 16, 2, 8)
    return d, s.reshape(-1, 8, 2), g, db


def iq2_xs(x: np.ndarray) -> np.ndarray:
    """rows of x as IQ2_XS blocks (74 bytes per 256)"""
    d, s, g, db = _iq2_16(x)
    grid = _grid(quants.IQ2_XS)
    bits = _signs(g, even=True)
    idx = _nearest(_apply_signs(g / np.where(db > 0, db, 1)[..., None, None], bits), grid)
    qs = (idx | (bits & 127).astype(np.int64) << 9).astype(np.uint16).reshape(-1, 32)
    scales = (s[..., 0] | s[..., 1] << 4).astype(np.uint8)
    return np.concatenate([_half(d[:, None]), qs.view(np.uint8), scales], 1).reshape(x.shape[0], -1)


def iq2_s(x: np.ndarray) -> np.ndarray:
    """rows of x as IQ2_S blocks (82 bytes per 256)"""
    d, s, g, db = _iq2_16(x)
    grid = _grid(quants.IQ2_S)
    bits = _signs(g, even=False)
    idx = _nearest(_apply_signs(g / np.where(db > 0, db, 1)[..., None, None], bits), grid).reshape(-1, 8, 4)
    qh = ((idx >> 8) << (2 * np.arange(4))).sum(-1).astype(np.uint8)
    scales = (s[..., 0] | s[..., 1] << 4).astype(np.uint8)
    return np.concatenate([_half(d[:, None]), (idx & 255).astype(np.uint8).reshape(-1, 32),
                           bits.astype(np.uint8).reshape(-1, 32), qh, scales], 1).reshape(x.shape[0], -1)


def iq3_xxs(x: np.ndarray) -> np.ndarray:
    """rows of x as IQ3_XXS blocks (98 bytes per 256)"""
    sb = x.reshape(-1, 8, 32).astype(np.float32)
    d, s = _scales(np.abs(sb).max(-1) * 4 / 62, 31)            # x = d (2 s + 1) / 4 * grid, grid <= 62
    db = d[:, None] * (2 * s + 1) / 4
    g = sb.reshape(-1, 8, 4, 8)
    bits = _signs(g, even=True)
    a = _apply_signs(g / np.where(db > 0, db, 1)[..., None, None], bits)
    idx = _nearest(a.reshape(*a.shape[:-1], 2, 4), _grid(quants.IQ3_XXS)).astype(np.uint8).reshape(-1, 64)
    w = ((bits & 127) << (7 * np.arange(4))).sum(-1).astype(np.uint32) | (s.astype(np.uint32) << 28)
    return np.concatenate([_half(d[:, None]), idx, w.view(np.uint8).reshape(-1, 32)], 1).reshape(x.shape[0], -1)


def iq3_s(x: np.ndarray) -> np.ndarray:
    """rows of x as IQ3_S blocks (110 bytes per 256)"""
    sb = x.reshape(-1, 8, 32).astype(np.float32)
    d, s = _scales(np.abs(sb).max(-1) / 15, 31)                # x = d (2 s + 1) * grid, grid <= 15
    db = d[:, None] * (2 * s + 1)
    g = sb.reshape(-1, 8, 4, 8)
    bits = _signs(g, even=False)
    a = _apply_signs(g / np.where(db > 0, db, 1)[..., None, None], bits)
    idx = _nearest(a.reshape(-1, 8, 8, 4), _grid(quants.IQ3_S))   # (nb, 8 sub-blocks, 8 groups of 4)
    qh = ((idx >> 8) << np.arange(8)).sum(-1).astype(np.uint8)
    scales = (s[:, 0::2] | s[:, 1::2] << 4).astype(np.uint8)
    return np.concatenate([_half(d[:, None]), (idx & 255).astype(np.uint8).reshape(-1, 64), qh,
                           bits.astype(np.uint8).reshape(-1, 32), scales], 1).reshape(x.shape[0], -1)


def _iq1(v: np.ndarray, dl: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """nearest IQ1 lattice indices of the groups v (..., 8) at scales dl with shift signs neg (both broadcast
    to v's groups): the shift is +1/8, or -1/8 where the values lean negative"""
    shift = np.where(neg, -0.125, 0.125)
    return _nearest(v / np.where(dl > 0, dl, 1)[..., None] - shift[..., None], _grid(quants.IQ1_S))


def iq1_s(x: np.ndarray) -> np.ndarray:
    """rows of x as IQ1_S blocks (50 bytes per 256): the shift sign is one per 32 values"""
    sb = x.reshape(-1, 8, 32).astype(np.float32)
    d, s = _scales(np.abs(sb).max(-1) / 1.125, 15)              # x = d (2 s + 1) (grid +- 1/8)
    neg = sb.sum(-1) < 0
    idx = _iq1(sb.reshape(-1, 8, 4, 8), (d[:, None] * (2 * s + 1))[..., None], neg[..., None])
    qh = ((idx >> 8) << (3 * np.arange(4))).sum(-1) | s << 12 | neg.astype(np.int64) << 15
    return np.concatenate([_half(d[:, None]), (idx & 255).astype(np.uint8).reshape(-1, 32),
                           qh.astype(np.uint16).view(np.uint8)], 1).reshape(x.shape[0], -1)


def iq1_m(x: np.ndarray) -> np.ndarray:
    """rows of x as IQ1_M blocks (56 bytes per 256): scales per 16 values, shift signs per 8, the fp16 d
    spread over the top nibbles of the 4 scale words"""
    sb = x.reshape(-1, 16, 16).astype(np.float32)
    d, s = _scales(np.abs(sb).max(-1) / 1.125, 15)
    g = sb.reshape(-1, 32, 8)
    neg = g.sum(-1) < 0
    idx = _iq1(g, np.repeat(d[:, None] * (2 * s + 1), 2, axis=1), neg)   # scales per group of 8
    h = (idx >> 8) | neg.astype(np.int64) << 3                   # a nibble per group
    qh = (h[:, 0::2] | h[:, 1::2] << 4).astype(np.uint8)
    dh = d.astype(np.float16).view(np.uint16).astype(np.int64)
    words = (s.reshape(-1, 4, 4) << (3 * np.arange(4))).sum(-1) | ((dh[:, None] >> (4 * np.arange(4))) & 15) << 12
    return np.concatenate([(idx & 255).astype(np.uint8), qh, words.astype(np.uint16).view(np.uint8)],
                          1).reshape(x.shape[0], -1)


IQ_QUANTIZERS = {"IQ2_XXS": iq2_xxs, "IQ2_XS": iq2_xs, "IQ2_S": iq2_s, "IQ3_XXS": iq3_xxs, "IQ3_S": iq3_s,
                 "IQ1_S": iq1_s, "IQ1_M": iq1_m}
