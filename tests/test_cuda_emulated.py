"""The CUDA backend without a GPU: kernels/*.cu compiled as C++ for the CPU into an emulated
libllmbench_cuda.so (kernels/tests/simt_host.h runs each thread block as fibers with barriers and
warp shuffles; kernels/tests/cuda_emu.cpp stands in for the CUDA runtime and cuBLAS: one device of
host memory with a fixed capacity, cublasGemmEx as a column-major loop), then tests/test_cuda.py,
tests/test_cuda_kernels.py and tests/test_cuda_engine.py run against it in a child process through
LLMBENCH_CUDA_LIB, the same path a GPU run takes: the loader, the ABI table, the wrappers' argument
checks and launch plans, the kernels, llmbench/_cuda_py.c, backends/cuda.py, and the engine on
csrc/backend_cuda.c. What this cannot show: real-device memory
ordering, timing, and cuBLAS itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cuda_include() -> Path | None:
    cands = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        cands.append(str(Path(nvcc).resolve().parent.parent))
    for c in cands:
        if c and (Path(c) / "include" / "cuda_runtime.h").exists() and (Path(c) / "include" / "cublas_v2.h").exists():
            return Path(c) / "include"
    return None


@pytest.fixture(scope="module")
def emulated_lib(tmp_path_factory) -> Path:
    cxx = shutil.which(os.environ.get("CXX", "c++"))
    inc = cuda_include()
    if not cxx or inc is None:
        pytest.skip("needs a C++ compiler and the CUDA toolkit's headers (cuda_runtime.h, cublas_v2.h)")
    lib = tmp_path_factory.mktemp("emu") / "libllmbench_cuda_emu.so"
    sources = sorted(str(p) for p in (ROOT / "kernels").glob("*.cu"))
    cmd = [cxx, "-std=c++17", "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-Wno-unknown-pragmas", f"-I{inc}",
           "-include", str(ROOT / "kernels" / "tests" / "simt_host.h"), "-x", "c++", *sources,
           str(ROOT / "kernels" / "tests" / "cuda_emu.cpp"), "-o", str(lib)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-4000:]
    return lib


def test_cuda_tests_pass_on_the_emulated_device(emulated_lib):
    env = {**os.environ, "LLMBENCH_CUDA_LIB": str(emulated_lib)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda.py",
                        "tests/test_cuda_kernels.py", "tests/test_cuda_engine.py"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=1200, check=False)
    tail = "\n".join(r.stdout.splitlines()[-40:])
    assert r.returncode == 0, tail
    assert " passed" in tail and " failed" not in tail
    # every GPU test ran (only the no-GPU ones skip)
    assert "no usable CUDA device" not in r.stdout, tail
