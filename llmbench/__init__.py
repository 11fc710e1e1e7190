"""llmbench: benchmark toolkit for large language models — how fast and how well, with its own
C/CUDA engine and the same measurement code for external OpenAI-compatible servers.

Importing llmbench never loads CUDA libraries; the CUDA backend is loaded when a device is asked for.
"""

from __future__ import annotations

import os as _os

# The engine's OpenMP threads meet at a barrier after every matrix product. libgomp's default is to
# spin ~300k iterations at a barrier before sleeping; when another process holds a core, the
# spinner keeps the thread it waits for off the CPU and decode slows down 5-30x (measured on a
# shared 2-core machine). A short spin keeps the uncontended hand-off fast and degrades gently.
# Must be set before libgomp loads (with _core); an explicit setting wins.
_os.environ.setdefault("GOMP_SPINCOUNT", "1000")
# NumPy's OpenBLAS threads spin for 2^28 cycles (about 0.1 s) after every threaded BLAS call, on every
# core: a generation just after a 1500x1500 matmul took 3x as long (llama-125m Q4_K_M, 24 tokens, 2
# threads: 127-171 ms against 43-50). 2^4 cycles puts them to sleep at once: 65-70 ms against 55-58,
# and 2000 back-to-back 300x300 matmuls run as fast as before. OpenBLAS reads it when it loads, so
# it counts only where llmbench is imported before NumPy (or the variable is exported).
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from . import _core  # noqa: E402
from ._core import (
    BackendUnavailableError,
    DeviceError,
    DeviceOutOfMemoryError,
    GGUFError,
    LLMBenchError,
    UnsupportedError,
)

__version__ = "0.1.0"

__all__ = [
    "BackendUnavailableError",
    "DeviceError",
    "DeviceOutOfMemoryError",
    "GGUFError",
    "LLMBenchError",
    "UnsupportedError",
    "LLM",
    "Completion",
    "SamplingParams",
    "dummy_model",
    "__version__",
]

from .dummy import dummy_model  # noqa: E402  (needs the names above)
from .llm import LLM, Completion, SamplingParams  # noqa: E402

if _os.environ.get("LLMBENCH_SIMD"):
    # Force a lower SIMD level (e.g. "scalar") for comparisons; a level the CPU lacks is an error.
    _core.simd_set(_os.environ["LLMBENCH_SIMD"].strip().lower())
if _os.environ.get("LLMBENCH_PREFETCH"):
    # How one-token decode kernels prefetch their weights (llmb_prefetch_lines in csrc/llmb.h): A/B runs
    try:
        _core.prefetch_set(_os.environ["LLMBENCH_PREFETCH"].strip().lower())
    except ValueError as e:
        raise ValueError(f"LLMBENCH_PREFETCH={_os.environ['LLMBENCH_PREFETCH']!r}: {e}; unset it for this CPU's default") from None
