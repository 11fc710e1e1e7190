"""The CUDA backend: a plain shared library (kernels/, C ABI) that the core loads with dlopen only
when a CUDA device is asked for. ``import llmbench`` never loads it.

Without a GPU, a driver, or a build of the library, every function here raises
:class:`llmbench.BackendUnavailableError` whose message says which is missing and what to do.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .. import _core

LIB_NAME = "libllmbench_cuda.so"


def library_path() -> str | None:
    """Where the CUDA backend library is: $LLMBENCH_CUDA_LIB, else beside llmbench._core, else None."""
    env = os.environ.get("LLMBENCH_CUDA_LIB")
    if env:
        return env
    p = os.path.join(os.path.dirname(_core.__file__), LIB_NAME)
    return p if os.path.exists(p) else None


def load() -> None:
    """Load the backend (idempotent); raises BackendUnavailableError naming the reason."""
    _core.cuda_load(library_path())


def available() -> tuple[bool, str]:
    """(True, "") when a CUDA device can be used, else (False, reason)."""
    try:
        load()
    except _core.BackendUnavailableError as e:
        return False, str(e)
    return True, ""


def versions() -> dict[str, str]:
    """CUDA runtime the library was built with and the driver's CUDA version ("none" if absent).

    Works whenever the library itself loads, even on a machine without a device."""
    try:
        load()
    except _core.BackendUnavailableError:
        pass  # versions still readable if the library loaded; otherwise this raises below
    rt, drv = _core.cuda_versions()
    fmt = lambda v: f"{v // 1000}.{(v % 1000) // 10}" if v else "none"  # noqa: E731
    return {"runtime": fmt(rt), "driver": fmt(drv)}


@dataclass(frozen=True)
class Device:
    index: int
    name: str
    total_memory: int
    free_memory: int
    compute_capability: tuple[int, int]
    multiprocessors: int


def devices() -> list[Device]:
    load()
    return [Device(**d) for d in _core.cuda_devices()]


class DeviceBuffer:
    """Device memory owned by Python: freed when closed or garbage-collected."""

    def __init__(self, nbytes: int, device: int = 0):
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        load()
        self.device = device
        self.nbytes = nbytes
        self.ptr: int | None = _core.cuda_malloc(device, nbytes)

    def upload(self, data: np.ndarray | bytes) -> None:
        buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) else data
        if len(buf) > self.nbytes:
            raise ValueError(f"{len(buf)} bytes do not fit in a {self.nbytes}-byte device buffer")
        _core.cuda_upload(self.device, self._live(), buf)

    def download(self, nbytes: int | None = None) -> np.ndarray:
        n = self.nbytes if nbytes is None else nbytes
        if not 0 <= n <= self.nbytes:
            raise ValueError(f"cannot read {n} bytes from a {self.nbytes}-byte device buffer")
        return _core.cuda_download(self.device, self._live(), n)

    def _live(self) -> int:
        if self.ptr is None:
            raise ValueError("device buffer is freed")
        return self.ptr

    def free(self) -> None:
        if self.ptr is not None:
            ptr, self.ptr = self.ptr, None
            _core.cuda_free(self.device, ptr)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


def copy_bandwidth(nbytes: int = 1 << 28, reps: int = 20, device: int = 0) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written), timed with CUDA events."""
    with DeviceBuffer(nbytes, device) as a, DeviceBuffer(nbytes, device) as b:
        _core.cuda_time_copy(device, b.ptr, a.ptr, nbytes, 1)  # warm up
        ms = _core.cuda_time_copy(device, b.ptr, a.ptr, nbytes, reps)
    return 2 * nbytes * reps / (ms * 1e-3) / 1e9
