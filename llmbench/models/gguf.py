"""Reading GGUF files: a validated, memory-mapped view of metadata and tensors.

Parsing and validation happen in the C core (csrc/gguf.c), which treats every file as untrusted:
any malformed file raises :class:`llmbench.GGUFError` naming the field, byte offset and expectation.

>>> with GGUFFile("model.gguf") as f:                       # doctest: +SKIP
...     print(f.metadata["general.architecture"], len(f.tensors))
...     w = f.raw("token_embd.weight")   # zero-copy, read-only uint8 view
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from .. import GGUFError, _core

_TYPE_NAMES = {tid: name for tid, name, _, _ in _core.type_traits()}


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file.

    ``shape`` is in NumPy order (outermost dimension first, the contiguous row last); ``ne`` is the
    same in ggml order as stored in the file. ``offset`` is the absolute byte offset in the file.
    """

    name: str
    shape: tuple[int, ...]
    type: str
    type_id: int
    offset: int
    nbytes: int

    @property
    def ne(self) -> tuple[int, ...]:
        """The shape in GGUF's order (fastest-varying dimension first), the reverse of ``shape``."""
        return tuple(reversed(self.shape))

    @property
    def n_elements(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))


class GGUFFile:
    """A GGUF file (version 2 or 3), memory-mapped read-only and validated on open.

    ``source`` is a path, or a bytes-like object holding a whole file. Use as a context manager;
    arrays returned by :meth:`raw` keep the mapping alive after :meth:`close`.
    """

    def __init__(self, source: str | os.PathLike[str] | bytes | bytearray | memoryview):
        if isinstance(source, (str, os.PathLike)):
            self.path: str | None = os.fspath(source)
        elif isinstance(source, (bytes, bytearray, memoryview)):
            self.path = None
        else:
            raise TypeError(f"GGUFFile expects a path or a bytes-like object, got {type(source).__name__}")
        try:
            self._reader: _core.Reader | None = _core.Reader(source)
        except GGUFError as e:   # name the file: a sweep or an eval may open several
            if self.path is None:
                raise
            raise GGUFError(f"{self.path}: {e}") from None
        r = self._reader
        self.version: int = r.version
        self.alignment: int = r.alignment
        self.data_offset: int = r.data_offset
        self.file_size: int = r.file_size
        self._index: dict[str, int] = {}
        tensors: dict[str, TensorInfo] = {}
        for i, (name, ne, type_id, rel_offset, nbytes, _info) in enumerate(r.tensors()):
            self._index[name] = i
            tensors[name] = TensorInfo(name, tuple(reversed(ne)), _TYPE_NAMES[type_id], type_id,
                                       self.data_offset + rel_offset, nbytes)
        self.tensors: dict[str, TensorInfo] = tensors

    # ---- lifetime ----

    def close(self) -> None:
        """Drop this object's hold on the file (views from :meth:`raw` stay valid)."""
        self._reader = None

    @property
    def closed(self) -> bool:
        """Whether the file has been closed."""
        return self._reader is None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_reader(self) -> _core.Reader:
        if self._reader is None:
            raise ValueError(f"GGUF file {self.path or '<buffer>'} is closed")
        return self._reader

    # ---- contents ----

    @cached_property
    def metadata(self) -> dict[str, Any]:
        """Metadata as {key: value}: ints, floats, bools, strings; numeric arrays as NumPy arrays,
        arrays of strings or arrays as lists."""
        return self._open_reader().metadata()

    @cached_property
    def metadata_types(self) -> dict[str, str]:
        """{key: GGUF type name}, e.g. "uint32", "string", "array[float32]"."""
        return self._open_reader().metadata_types()

    def raw(self, name: str) -> np.ndarray:
        """The bytes of tensor ``name``: a read-only, zero-copy uint8 view of the mapped file."""
        try:
            i = self._index[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._index, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise KeyError(f"no tensor named {name!r} in {self.path or '<buffer>'}{hint}") from None
        return self._open_reader().raw(i)

    def __repr__(self) -> str:
        arch = self.metadata.get("general.architecture", "?") if self._reader is not None else "?"
        state = "closed" if self.closed else "open"
        return (f"<GGUFFile {self.path or '<buffer>'} v{self.version} arch={arch} "
                f"tensors={len(self.tensors)} {state}>")

    def dequantize(self, name: str) -> np.ndarray:
        """Tensor ``name`` decoded to a new float32 array of its NumPy-order shape (see
        :mod:`llmbench.models.weight_types` for the types handled)."""
        from .weight_types import dequantize

        raw = self.raw(name)   # a helpful KeyError for an unknown name
        info = self.tensors[name]
        return dequantize(raw, info.type_id, info.shape)
