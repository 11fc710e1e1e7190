"""Writing GGUF v3 files: streamed tensor by tensor, aligned, and atomic.

The header, metadata and tensor table go out first; then each tensor's bytes are appended as the
caller produces them, so a model never has to be in memory at once. Everything is written to a
hidden temporary file in the destination directory, flushed to disk, and renamed over the
destination only when the last tensor is complete: an exception, a KeyboardInterrupt or a full disk
leaves neither a partial destination file nor the temporary file behind.

>>> specs = [TensorSpec("w", (2, 32), "F32")]                      # doctest: +SKIP
>>> with GGUFWriter("out.gguf", {"general.architecture": "llama"}, specs) as w:
...     w.write(np.zeros((2, 32), np.float32))

Tested by tests/test_writer.py (round trips through llmbench.models.gguf.GGUFFile and gguf.GGUFReader,
interrupted and out-of-space writes).
"""

from __future__ import annotations

import os
import secrets
import struct
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from .. import _core

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
DEFAULT_ALIGNMENT = 32
MAX_NAME_BYTES = 63   # llama.cpp's GGML_MAX_NAME (64) less the terminating NUL
MAX_DIMS = 4

# GGUF metadata value types, by the names llmbench.models.gguf.GGUFFile.metadata_types reports.
VALUE_TYPES = {"uint8": 0, "int8": 1, "uint16": 2, "int16": 3, "uint32": 4, "int32": 5, "float32": 6,
               "bool": 7, "string": 8, "array": 9, "uint64": 10, "int64": 11, "float64": 12}
_SCALAR_DTYPES = {"uint8": "<u1", "int8": "<i1", "uint16": "<u2", "int16": "<i2", "uint32": "<u4",
                  "int32": "<i4", "float32": "<f4", "bool": "<u1", "uint64": "<u8", "int64": "<i8",
                  "float64": "<f8"}
_DTYPE_NAMES = {np.dtype(np.uint8): "uint8", np.dtype(np.int8): "int8", np.dtype(np.uint16): "uint16",
                np.dtype(np.int16): "int16", np.dtype(np.uint32): "uint32", np.dtype(np.int32): "int32",
                np.dtype(np.float32): "float32", np.dtype(np.bool_): "bool", np.dtype(np.uint64): "uint64",
                np.dtype(np.int64): "int64", np.dtype(np.float64): "float64"}

# ggml type name -> (id, elements per block, bytes per block)
TYPE_TRAITS: dict[str, tuple[int, int, int]] = {name: (tid, blck, size)
                                                 for tid, name, blck, size in _core.type_traits()}


def row_bytes(type_name: str, n: int) -> int:
    """Bytes of one row of ``n`` elements of ggml type ``type_name`` (n must fill whole blocks)."""
    try:
        _, blck, size = TYPE_TRAITS[type_name]
    except KeyError:
        raise ValueError(f"unknown ggml type {type_name!r}; known: {', '.join(TYPE_TRAITS)}") from None
    if n % blck:
        raise ValueError(f"a row of {n} elements is not a whole number of {type_name} blocks ({blck} each)")
    return n // blck * size


@dataclass(frozen=True)
class TensorSpec:
    """A tensor to write: ``shape`` in NumPy order (the contiguous row last), ggml ``type`` name."""

    name: str
    shape: tuple[int, ...]
    type: str

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.type, self.shape[-1])

    @property
    def n_rows(self) -> int:
        return int(np.prod(self.shape[:-1], dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.n_rows * self.row_bytes

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


# ---- metadata encoding ----

def infer_type(value: Any) -> str:
    """The GGUF type a value is written as when no type is given: NumPy scalars and arrays keep their
    dtype; Python bool -> bool, int -> int32 (int64/uint64 when out of range), float -> float32,
    str -> string, list -> array of its first element's type."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, np.generic):
        return _dtype_name(value.dtype)
    if isinstance(value, int):
        if -2**31 <= value < 2**31:
            return "int32"
        return "int64" if value < 2**63 else "uint64"
    if isinstance(value, float):
        return "float32"
    if isinstance(value, str):
        return "string"
    if isinstance(value, np.ndarray):
        return f"array[{_dtype_name(value.dtype)}]"
    if isinstance(value, (list, tuple)):
        if not value:
            raise ValueError("cannot infer the element type of an empty list; give it, e.g. 'array[string]'")
        return f"array[{infer_type(value[0])}]"
    raise TypeError(f"cannot write a {type(value).__name__} as GGUF metadata")


def _dtype_name(dt: np.dtype) -> str:
    try:
        return _DTYPE_NAMES[np.dtype(dt).newbyteorder("=")]
    except KeyError:
        raise TypeError(f"GGUF metadata has no type for NumPy dtype {dt}") from None


def _parse_type(spec: str) -> tuple[str, str | None]:
    """'uint32' -> ('uint32', None); 'array[float32]' -> ('array', 'float32'); 'array' -> ('array', None)."""
    if spec.startswith("array[") and spec.endswith("]"):
        return "array", spec[6:-1]
    if spec not in VALUE_TYPES:
        raise ValueError(f"unknown GGUF value type {spec!r}; use one of {', '.join(VALUE_TYPES)} or 'array[T]'")
    return spec, None


def _string(s: str | bytes) -> bytes:
    b = s.encode("utf-8") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _encode_value(value: Any, spec: str) -> bytes:
    """The bytes of a value of type ``spec``, without the leading type id."""
    kind, elem = _parse_type(spec)
    if kind == "string":
        if not isinstance(value, (str, bytes)):
            raise TypeError(f"expected a string, got {type(value).__name__}")
        return _string(value)
    if kind != "array":
        if kind == "bool" and not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"expected a bool, got {type(value).__name__}")
        arr = np.array(value)
        if arr.ndim != 0:
            raise TypeError(f"expected a {kind} scalar, got {type(value).__name__}")
        return _numeric_bytes(arr.reshape(1), kind)
    items = value
    if elem is None:
        elem = _infer_nested(items)[6:-1]
    ekind, _ = _parse_type(elem)
    head = struct.pack("<IQ", VALUE_TYPES[ekind], len(items))
    if ekind == "string":
        return head + b"".join(_string(s) for s in items)
    if ekind == "array":   # nested arrays: each element is (type, count, values), no per-element type id
        return head + b"".join(_encode_value(v, elem if elem != "array" else _infer_nested(v)) for v in items)
    return head + _numeric_bytes(np.asarray(items), ekind)


def _infer_nested(value: Any) -> str:
    """The type of an array whose element type was not given (the inner arrays of "array[array]", as
    GGUFFile.metadata_types reports nested arrays). An empty list carries no type: it is written as an
    empty array of strings."""
    if isinstance(value, (list, tuple)) and not value:
        return "array[string]"
    return infer_type(value)


def _numeric_bytes(arr: np.ndarray, kind: str) -> bytes:
    dt = np.dtype(_SCALAR_DTYPES[kind])
    if kind in ("float32", "float64"):
        return arr.astype(dt).tobytes()
    if kind == "bool":
        return arr.astype(bool).astype(dt).tobytes()
    if arr.dtype.kind not in "biu":
        raise TypeError(f"expected integers for {kind}, got {arr.dtype}")
    info = np.iinfo(dt)
    if arr.size and (arr.min() < info.min or arr.max() > info.max):
        raise ValueError(f"value out of range for {kind} [{info.min}, {info.max}]")
    return arr.astype(dt).tobytes()


def encode_metadata(metadata: Mapping[str, Any], types: Mapping[str, str] | None = None) -> list[bytes]:
    """Each key/value pair in GGUF form (key, type id, value). ``types`` gives a key's GGUF type
    ("uint32", "array[string]", ...), as :attr:`llmbench.models.gguf.GGUFFile.metadata_types` reports them;
    keys without one are typed by :func:`infer_type`."""
    types = types or {}
    out = []
    for key, value in metadata.items():
        try:
            spec = types.get(key) or infer_type(value)
            out.append(_string(key) + struct.pack("<I", VALUE_TYPES[_parse_type(spec)[0]])
                       + _encode_value(value, spec))
        except (TypeError, ValueError, OverflowError, struct.error) as e:
            raise ValueError(f"metadata {key!r}: {e}") from None
    return out


def _alignment(metadata: Mapping[str, Any], types: Mapping[str, str]) -> int:
    if "general.alignment" not in metadata:
        return DEFAULT_ALIGNMENT
    a = metadata["general.alignment"]
    if (types.get("general.alignment") or infer_type(a)) != "uint32":
        raise ValueError("metadata 'general.alignment' must be a uint32 (give types={'general.alignment': 'uint32'})")
    a = int(a)
    if a <= 0 or a & (a - 1):
        raise ValueError(f"metadata 'general.alignment' must be a power of two, got {a}")
    return a


def _pad(n: int, align: int) -> int:
    return (align - n % align) % align


def _check_tensors(tensors: Sequence[TensorSpec]) -> None:
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            raise ValueError(f"duplicate tensor name {t.name!r}")
        seen.add(t.name)
        if not t.name or len(t.name.encode("utf-8")) > MAX_NAME_BYTES:
            raise ValueError(f"tensor name {t.name!r} must be 1..{MAX_NAME_BYTES} bytes (llama.cpp's limit)")
        if not 1 <= len(t.shape) <= MAX_DIMS or any(int(d) <= 0 for d in t.shape):
            raise ValueError(f"tensor {t.name!r}: shape {t.shape} must have 1..{MAX_DIMS} positive dimensions")
        try:
            row_bytes(t.type, t.shape[-1])
        except ValueError as e:
            raise ValueError(f"tensor {t.name!r}: {e}") from None


def _write_all(fd: int, data: memoryview) -> None:
    """Write every byte of ``data`` to ``fd`` (os.write may write less than asked)."""
    while data:
        n = os.write(fd, data)
        data = data[n:]


# ---- the streaming writer ----

class GGUFWriter:
    """Writes one GGUF v3 file at ``path``, streaming tensor data in the order of ``tensors``.

    Call :meth:`write` with each tensor's bytes (any bytes-like object or C-contiguous array; a call
    may carry part of a tensor but must not run past its end), then :meth:`close` to make the file
    appear under ``path`` (an existing file there is replaced). Used as a context manager, the file
    is closed on success and abandoned (temporary file removed) on any exception.
    """

    def __init__(self, path: str | os.PathLike[str], metadata: Mapping[str, Any], tensors: Sequence[TensorSpec],
                 *, types: Mapping[str, str] | None = None):
        self.path = os.fspath(path)
        self.tensors = list(tensors)
        _check_tensors(self.tensors)
        types = dict(types or {})
        self.alignment = _alignment(metadata, types)
        header = self._header(metadata, types)
        self._index = 0                    # tensor being written
        self._left = self.tensors[0].nbytes if self.tensors else 0
        self.bytes_written = 0
        directory = os.path.dirname(os.path.abspath(self.path))
        base = os.path.basename(self.path)
        while True:
            self._tmp = os.path.join(directory, f".{base}.{secrets.token_hex(4)}.tmp")
            try:
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
                self._fd: int | None = os.open(self._tmp, flags, 0o666)
                break
            except FileExistsError:
                continue
        try:
            self._emit(header)
            self._emit(bytes(_pad(len(header), self.alignment)))
            self._data_start = self.bytes_written
        except BaseException:
            self.abort()
            raise

    def _header(self, metadata: Mapping[str, Any], types: Mapping[str, str]) -> bytes:
        kv = encode_metadata(metadata, types)
        parts = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(kv)), *kv]
        offset = 0
        for t in self.tensors:
            parts.append(_string(t.name))
            parts.append(struct.pack(f"<I{len(t.shape)}QIQ", len(t.shape), *reversed([int(d) for d in t.shape]),
                                     TYPE_TRAITS[t.type][0], offset))
            offset += t.nbytes + _pad(t.nbytes, self.alignment)
        return b"".join(parts)

    @property
    def current(self) -> TensorSpec | None:
        """The tensor the next :meth:`write` continues, or None when all are complete."""
        return self.tensors[self._index] if self._index < len(self.tensors) else None

    def _emit(self, data: bytes | memoryview) -> None:
        if self._fd is None:
            raise ValueError(f"GGUF writer for {self.path} is closed")
        _write_all(self._fd, memoryview(data))
        self.bytes_written += len(data)

    def _end_tensor(self) -> None:
        """After a tensor's last byte: pad the data to the alignment, move on to the next tensor."""
        t = self.tensors[self._index]
        self._emit(bytes(_pad(t.nbytes, self.alignment)))
        self._index += 1
        self._left = self.tensors[self._index].nbytes if self._index < len(self.tensors) else 0

    def write(self, data: Any) -> None:
        """Append the next bytes of the current tensor."""
        t = self.current
        if t is None:
            raise ValueError(f"{self.path}: all {len(self.tensors)} tensors are already written")
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data)
        mv = memoryview(data).cast("B")
        if len(mv) > self._left:
            raise ValueError(f"tensor {t.name!r}: got {len(mv)} bytes but only {self._left} of its "
                             f"{t.nbytes} remain")
        self._emit(mv)
        self._left -= len(mv)
        if self._left == 0:
            self._end_tensor()

    def close(self) -> None:
        """Finish the file: check every tensor is complete, flush to disk, rename into place."""
        if self._fd is None:
            raise ValueError(f"GGUF writer for {self.path} is closed")
        try:
            t = self.current
            if t is not None:
                raise ValueError(f"tensor {t.name!r} is incomplete ({t.nbytes - self._left} of {t.nbytes} bytes) "
                                 f"and {len(self.tensors) - self._index - 1} more were not written")
            os.fsync(self._fd)
            fd, self._fd = self._fd, None
            os.close(fd)
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Abandon the file: close and remove the temporary file; the destination is untouched."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> GGUFWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_gguf(path: str | os.PathLike[str], metadata: Mapping[str, Any], tensors: Mapping[str, tuple[str, np.ndarray]],
               *, types: Mapping[str, str] | None = None) -> None:
    """Write a small GGUF file in one call. ``tensors`` maps a name to (ggml type, data): F32, F16,
    BF16 (as uint16) and integer types take their values as an array of the tensor's shape; block
    types take uint8 rows of encoded blocks, shape (..., row_bytes), as gguf.quants.quantize returns."""
    specs, datas = [], []
    for name, (type_name, data) in tensors.items():
        data = np.ascontiguousarray(data)
        if type_name not in TYPE_TRAITS:
            raise ValueError(f"tensor {name!r}: unknown ggml type {type_name!r}")
        if data.ndim == 0:
            raise ValueError(f"tensor {name!r}: a tensor needs at least one dimension")
        _, blck, size = TYPE_TRAITS[type_name]
        shape = data.shape
        if data.dtype == np.uint8 and (blck, size) != (1, 1):
            shape = (*shape[:-1], shape[-1] // size * blck)
        spec = TensorSpec(name, tuple(int(d) for d in shape), type_name)
        if data.nbytes != spec.nbytes:
            raise ValueError(f"tensor {name!r}: {data.nbytes} bytes of data for a {type_name} tensor of "
                             f"shape {spec.shape} ({spec.nbytes} bytes)")
        specs.append(spec)
        datas.append(data)
    with GGUFWriter(path, metadata, specs, types=types) as w:
        for data in datas:
            w.write(data)


def write_pipelined(path: str | os.PathLike[str], metadata: Mapping[str, Any], tensors: Sequence[TensorSpec],
                    jobs: Iterable[tuple[Callable[[], Any], Callable[[], None]]], *,
                    types: Mapping[str, str] | None = None, workers: int = 2, ahead: int = 3) -> None:
    """Write a GGUF file whose tensor bytes come from ``jobs``: (produce, done) pairs in file order.
    ``produce()`` returns the next piece of tensor data; it runs on ``workers`` threads up to
    ``ahead`` pieces in advance (the C kernels release the GIL, so generation, quantization and
    disk writes overlap; two producers fill the gaps of each other's OpenMP regions, ~10% faster
    than one on 2 cores), and ``done()`` is called on this thread once its piece is on disk."""
    pending: deque[tuple[Future[Any], Callable[[], None]]] = deque()
    with GGUFWriter(path, metadata, tensors, types=types) as w, \
            ThreadPoolExecutor(workers, thread_name_prefix="llmbench-write") as pool:
        try:
            for produce, done in jobs:
                pending.append((pool.submit(produce), done))
                while len(pending) > ahead or (pending and pending[0][0].done()):
                    fut, fin = pending.popleft()
                    w.write(fut.result())
                    fin()
            while pending:
                fut, fin = pending.popleft()
                w.write(fut.result())
                fin()
        finally:
            for fut, _ in pending:
                fut.cancel()
