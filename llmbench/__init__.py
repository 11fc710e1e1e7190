"""llmbench: benchmark toolkit for large language models — how fast and how well, with its own
C/CUDA engine and the same measurement code for external OpenAI-compatible servers.

Importing llmbench never loads CUDA libraries; the CUDA backend is loaded when a device is asked for.
"""

from __future__ import annotations

import os as _os
from importlib import metadata as _metadata

# The engine's OpenMP threads meet at a barrier after every matrix product, some 65 times a token. A
# thread that sleeps there takes about 25 us to wake in a VM, so the spin before sleeping must outlast
# the serial steps between products: 100000 rounds of pause (about 1.3 ms) against 1000 ran decode on
# 2 threads of a 2-core host 1.04x faster (llama-1b Q4_K_M) to 1.1-1.2x (llama-125m). When other
# processes want the cores, a spinner holds the core its partner waits for (llama-1b decode beside one
# busy process: 5-6 tok/s against 16-17 at 1000); the CPU backend then sees its thread wait for a CPU and
# runs on one thread for a while (csrc/backend_cpu.c: contention; README, GOMP_SPINCOUNT, has the
# figures). libgomp's own default is 300000. Must be set before libgomp loads (with _core); an explicit
# setting wins.
_os.environ.setdefault("GOMP_SPINCOUNT", "100000")
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

try:   # the version is written in one place, pyproject.toml; an installed package's metadata carries it
    __version__ = _metadata.version("llmbench")
except _metadata.PackageNotFoundError:   # a source tree put on sys.path without installing it
    __version__ = "0+unknown"

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

from .llm import LLM, Completion, SamplingParams  # noqa: E402
from .models.dummy import dummy_model  # noqa: E402  (needs the names above)

if _os.environ.get("LLMBENCH_SIMD"):
    # Force a lower SIMD level (e.g. "scalar") for comparisons; a level the CPU lacks is an error.
    _core.simd_set(_os.environ["LLMBENCH_SIMD"].strip().lower())
if _os.environ.get("LLMBENCH_PREFETCH"):
    # How one-token decode kernels prefetch their weights (llmb_prefetch_mode in csrc/llmb.h): A/B runs
    try:
        _core.prefetch_set(_os.environ["LLMBENCH_PREFETCH"].strip().lower())
    except ValueError as e:
        raise ValueError(f"LLMBENCH_PREFETCH={_os.environ['LLMBENCH_PREFETCH']!r}: {e}; unset it for this CPU's default") from None
