"""The CUDA backend library: on a machine without a GPU (or driver) every request raises
BackendUnavailableError naming the reason; on a GPU, device facts, copies, event timing and
out-of-memory errors. The library must also build wherever nvcc exists (checked by .ci/run)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import llmbench
from llmbench.backends import cuda

HAVE_GPU, WHY = cuda.available()
gpu = pytest.mark.skipif(not HAVE_GPU, reason=f"no usable CUDA device: {WHY}")
no_gpu = pytest.mark.skipif(HAVE_GPU, reason="a CUDA device is present")


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


@no_gpu
def test_unavailable_raises_with_reason():
    assert WHY
    with pytest.raises(llmbench.BackendUnavailableError) as e:
        cuda.devices()
    assert str(e.value) == WHY
    with pytest.raises(llmbench.BackendUnavailableError):
        cuda.DeviceBuffer(1024)
    assert isinstance(e.value, RuntimeError)


@no_gpu
def test_cpu_unaffected_after_failed_cuda_request(stories_path):
    with pytest.raises(llmbench.BackendUnavailableError):
        cuda.load()
    from llmbench.models.gguf import GGUFFile

    with GGUFFile(stories_path) as f:
        assert f.raw("output.weight").nbytes == 512 * 64 * 4


def test_missing_library_is_named():
    r = run_py("import llmbench.backends.cuda as c; print(c.available()[1])",
               LLMBENCH_CUDA_LIB="/nonexistent/libllmbench_cuda.so")
    assert r.returncode == 0, r.stderr
    assert "cannot load the CUDA backend library" in r.stdout and "/nonexistent" in r.stdout


def test_wrong_library_is_refused(tmp_path):
    # Any shared library without our entry point (here: the C core extension itself) is refused.
    from llmbench import _core

    r = run_py("import llmbench.backends.cuda as c; print(c.available()[1])", LLMBENCH_CUDA_LIB=_core.__file__)
    assert r.returncode == 0, r.stderr
    assert "not an llmbench CUDA backend" in r.stdout


@pytest.mark.skipif(cuda.library_path() is None, reason="llmbench was built without the CUDA backend (no nvcc)")
def test_versions_without_device():
    v = cuda.versions()
    assert v["runtime"] != "none" and "." in v["runtime"]
    if not HAVE_GPU:
        assert "driver" in WHY or "device" in WHY


@gpu
def test_devices_and_copies():
    devs = cuda.devices()
    assert devs and devs[0].total_memory > 0 and devs[0].compute_capability[0] >= 7
    data = np.random.default_rng(0).integers(0, 255, size=1_000_003, dtype=np.uint8)
    with cuda.DeviceBuffer(data.nbytes) as buf:
        buf.upload(data)
        assert np.array_equal(buf.download(), data)
    assert cuda.copy_bandwidth(1 << 24, reps=5) > 1.0  # GB/s; a sanity bound, not a timing test


@gpu
def test_out_of_memory_is_clear_and_recoverable():
    free = cuda.devices()[0].free_memory
    with pytest.raises(llmbench.DeviceOutOfMemoryError, match="asked for"):
        cuda.DeviceBuffer(free * 4)
    with cuda.DeviceBuffer(1 << 20) as buf:  # the process stays usable
        buf.upload(np.ones(16, np.uint8))
        assert buf.download(16).sum() == 16


def test_weight_rows_checked_before_the_device_reads_them():
    """A raw weight buffer whose rows are shorter (or longer) than the type's row size, or not raw bytes,
    is refused naming the sizes: the device would read each row's full byte count past the buffer."""
    from llmbench.models.weight_types import row_bytes, type_id

    q4k = type_id("Q4_K")
    good = np.zeros((3, row_bytes(q4k, 512)), np.uint8)
    assert cuda.weight_rows(q4k, good, 512) == 3
    with pytest.raises(ValueError, match="rows are 143 bytes; 512 elements of Q4_K take 288"):
        cuda.weight_rows(q4k, good[:, :143], 512)
    with pytest.raises(ValueError, match="2-D uint8"):
        cuda.weight_rows(q4k, good.view(np.int8), 512)
    with pytest.raises(ValueError, match="whole blocks of 256"):
        cuda.weight_rows(q4k, good, 500)


def test_weight_types_are_the_kernels_list():
    """cuda.WEIGHT_TYPES (what bench_cuda.py --types and cuda_type_errors.py offer) is the list the kernels
    name when they refuse a type, in the same order."""
    import re
    from pathlib import Path

    src = (Path(__file__).resolve().parents[1] / "kernels" / "matmul.cu").read_text()
    named = re.search(r"has no CUDA kernel \(([^)]*)\)", src.replace('"\n', "").replace('  "', ""))
    assert named, "kernels/matmul.cu no longer names its weight types"
    assert tuple(t.strip() for t in named.group(1).split(",")) == cuda.WEIGHT_TYPES


def test_bench_cuda_refuses_an_unknown_type():
    bench = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "bench_cuda.py")
    r = subprocess.run([sys.executable, bench, "--out", os.devnull, "--types", "Q4_1,Q7"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "--types: Q7; choose from" in r.stderr and "IQ4_XS" in r.stderr
