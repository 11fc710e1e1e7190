"""`llmbench membw`: this machine's memory bandwidth, STREAM-style (csrc/membw.c), measured with the
engine's threads so a decode step's achieved GB/s can be read as a fraction of it."""

from __future__ import annotations

import os

import numpy as np

from .. import _core


def measure(nbytes: int = 256 << 20, reps: int = 5, threads: int | None = None) -> dict[str, float]:
    """Best-of-``reps`` read, copy and triad bandwidth in GB/s over arrays of ``nbytes`` each."""
    threads = (os.cpu_count() or 1) if threads is None else threads
    if nbytes < 4096 or reps < 1 or threads < 1:
        raise ValueError("membw: nbytes >= 4096, reps >= 1 and threads >= 1 are required")
    return {**_core.membw(nbytes, reps, threads), "threads": threads, "array_bytes": nbytes, "reps": reps}


def read_now(threads: int, reps: int = 3) -> float:
    """The read bandwidth in GB/s now, quickly (``reps`` passes over 256 MiB, well under a second): the probe
    benchmarks take just before and after a run, on a host whose bandwidth moves between runs."""
    return measure(256 << 20, reps, threads)["read"]


def better(a: dict | None, b: dict) -> dict:
    """Of two results of ``measure`` (``a`` may be None), the one with the higher read figure: the
    bandwidth is a limit of the machine, and on a shared host one measurement can land in a busy moment."""
    return a if a is not None and a["read"] >= b["read"] else b


def best(threads: int, seen: dict | None = None, nbytes: int = 256 << 20, reps: int = 5) -> dict:
    """``measure`` now and keep the better of it and ``seen`` (an earlier result): callers measure
    before and after their runs, as peak.best does for the arithmetic peaks."""
    return better(seen, measure(nbytes, reps, threads))


def page_aligned(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` starting on a page (2 MiB for 2 MiB or more), as the engine places its repacked
    weights (llmb_alloc_stream), for timing kernels on them. NumPy's buffers start 16 bytes into a line or
    anywhere else, and a kernel whose 64-byte loads straddle two lines ran up to 1.5x slower than on the
    same bytes aligned (docs/engine-measurements.md#q6i-inline-d)."""
    align = 2 << 20 if a.nbytes >= 2 << 20 else 4096
    buf = np.empty(a.nbytes + align, np.uint8)
    off = -buf.ctypes.data % align
    out = buf[off:off + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out
