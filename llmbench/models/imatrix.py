"""llama.cpp importance matrices (`llama-imatrix` output) as the per-tensor weights its quantizer uses.

For each weight matrix, `llama-imatrix` sums the squares of the activations each input column saw.
`llmbench quantize --imatrix FILE` divides them by the count of tokens, exactly as llama.cpp's
`llama-quantize` does (tools/quantize/quantize.cpp, load_imatrix), and hands the result to the quantizers
of the types that use it (llmbench.models.weight_types.IMATRIX_TYPES). Two formats:

- GGUF (current llama.cpp): per matrix ``<name>.in_sum2`` (float32, n_mat x n_cols: the sums of squares)
  and ``<name>.counts`` (float32, n_mat x 1: tokens seen), n_mat > 1 for the experts of a mixture-of-experts
  tensor; weights are in_sum2 / count, and 1 where the count is 0.
- the legacy binary ``.dat`` (older llama-imatrix, or ``--output-format dat``): int32 entry count, then
  per entry an int32-length name, int32 ncall, int32 nval and nval float32 values; weights are value /
  ncall. Optional trailing fields (last call, dataset name) are ignored.

Anything else is refused with a message. Tested by tests/test_imatrix.py.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from .. import GGUFError
from .gguf import GGUFFile


class ImatrixError(ValueError):
    """An importance-matrix file that cannot be read."""


def load_imatrix(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """{tensor name: float32 weights of n_mat * n_cols values} from a llama.cpp importance-matrix file."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"GGUF":
        return _load_gguf(path)
    return _load_legacy(path)


def _load_gguf(path: str) -> dict[str, np.ndarray]:
    try:
        f = GGUFFile(path)
    except GGUFError as e:
        raise ImatrixError(f"{path}: not a readable GGUF importance matrix ({e})") from None
    with f:
        kind = f.metadata.get("general.type")
        if kind not in (None, "imatrix"):
            raise ImatrixError(f"{path} is a GGUF file of type {kind!r}, not an importance matrix (general.type "
                               "'imatrix'); pass the file llama-imatrix wrote")
        out: dict[str, np.ndarray] = {}
        for name, t in f.tensors.items():
            if not name.endswith(".in_sum2"):
                continue
            base = name[: -len(".in_sum2")]
            c = f.tensors.get(base + ".counts")
            if c is None:
                raise ImatrixError(f"{path}: {name} has no {base}.counts beside it")
            if t.type != "F32" or c.type != "F32" or len(t.shape) > 2 or len(c.shape) > 2:
                raise ImatrixError(f"{path}: {name} / {base}.counts must be float32 matrices "
                                   f"(got {t.type} {t.shape}, {c.type} {c.shape})")
            sums = f.raw(name).view(np.float32)
            counts = f.raw(base + ".counts").view(np.float32)
            n_mat = counts.size
            if n_mat == 0 or sums.size == 0 or sums.size % n_mat:
                raise ImatrixError(f"{path}: {name} holds {sums.size} sums for {n_mat} counts")
            # as llama.cpp, in float32: sums[j*ne0 + i] / counts[j], or 1 where matrix j saw no token
            safe = np.where(counts > 0, counts, np.float32(1))[:, None]
            w = np.where(counts[:, None] > 0, sums.reshape(n_mat, -1) / safe, np.float32(1))
            out[base] = np.ascontiguousarray(w, dtype=np.float32).reshape(-1)
        if not out:
            raise ImatrixError(f"{path}: a GGUF file without <tensor>.in_sum2 / .counts entries is not an importance "
                               "matrix")
    return out


def _load_legacy(path: str) -> dict[str, np.ndarray]:
    data = np.fromfile(path, dtype=np.uint8).tobytes()
    bad = (f"{path} is neither a GGUF importance matrix nor llama.cpp's legacy imatrix .dat format; "
           "pass the file llama-imatrix wrote")
    pos = 0

    def i32() -> int:
        nonlocal pos
        if pos + 4 > len(data):
            raise ImatrixError(f"{bad} (truncated at byte {pos})")
        (v,) = struct.unpack_from("<i", data, pos)
        pos += 4
        return v

    n = i32()
    if n <= 0 or n > len(data) // 12:
        raise ImatrixError(f"{bad} (entry count {n})")
    out: dict[str, np.ndarray] = {}
    for _ in range(n):
        ln = i32()
        if ln <= 0 or ln > 4096 or pos + ln > len(data):
            raise ImatrixError(f"{bad} (name length {ln} at byte {pos - 4})")
        try:
            name = data[pos:pos + ln].decode("utf-8")
        except UnicodeDecodeError:
            raise ImatrixError(f"{bad} (a name at byte {pos} is not UTF-8)") from None
        pos += ln
        ncall, nval = i32(), i32()
        if nval <= 0 or pos + 4 * nval > len(data) or ncall < 0:
            raise ImatrixError(f"{bad} (entry {name!r}: {nval} values, {ncall} calls)")
        v = np.frombuffer(data, dtype="<f4", count=nval, offset=pos).astype(np.float32)
        pos += 4 * nval
        if name in out:
            raise ImatrixError(f"{path}: entry {name!r} appears twice")
        out[name] = v / np.float32(ncall) if ncall > 0 else v.copy()
    return out
