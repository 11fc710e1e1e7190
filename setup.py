"""Build llmbench: the C extension llmbench._core and, where nvcc is found, the CUDA backend library.

Flags: C11, -O3, hidden visibility, OpenMP when the compiler supports it, never -ffast-math. SIMD
kernels use per-function target attributes and are chosen at run time (csrc/cpu.c), so one build
runs on any CPU of its architecture.

Environment:
  LLMBENCH_CUDA=auto|0|1   build the CUDA backend if nvcc is found (auto, default), never, or
                           always (1: fail the build if it cannot be built)
  LLMBENCH_CUDA_ARCH       semicolon/comma separated compute capabilities, default "80;90"
                           (SASS for each, plus PTX for the newest)
  NVCC, CUDA_HOME, CUDA_PATH   where to look for nvcc (then PATH, then /usr/local/cuda)
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CUDA_LIB = "libllmbench_cuda.so"
BASE_CFLAGS = ["-std=c11", "-O3", "-fno-math-errno", "-fvisibility=hidden", "-D_GNU_SOURCE", "-Wall", "-Wextra",
               "-Wno-unused-parameter", "-fno-strict-aliasing"]


def log(msg: str) -> None:
    print(f"llmbench build: {msg}", file=sys.stderr, flush=True)


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10)
        if out.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def compiler_version(cc: list[str]) -> str:
    try:
        out = subprocess.run(cc + ["--version"], capture_output=True, text=True, timeout=10)
        return out.stdout.splitlines()[0].strip() if out.stdout else cc[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return cc[0]


def supports_flags(cc: list[str], flags: list[str], code: str) -> bool:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d, "t.c")
        src.write_text(code)
        try:
            r = subprocess.run(cc + flags + [str(src), "-o", str(Path(d, "t"))], capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return r.returncode == 0


def find_nvcc() -> str | None:
    cands = [os.environ.get("NVCC")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            cands.append(os.path.join(os.environ[var], "bin", "nvcc"))
    cands += [shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"]
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def cuda_arch_flags() -> list[str]:
    spec = os.environ.get("LLMBENCH_CUDA_ARCH", "80;90")
    archs = [a.strip().replace("sm_", "").replace(".", "") for a in spec.replace(",", ";").split(";") if a.strip()]
    if not archs or not all(a.isdigit() for a in archs):
        raise SystemExit(f"LLMBENCH_CUDA_ARCH={spec!r}: expected compute capabilities like '80;90'")
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    newest = max(archs, key=int)
    flags.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return flags


class BuildExt(build_ext):
    def build_extensions(self):
        cc = list(self.compiler.compiler_so[:1])
        omp = supports_flags(cc, ["-fopenmp"], "#include <omp.h>\nint main(void){return omp_get_max_threads() < 1;}\n")
        flags = BASE_CFLAGS + (["-fopenmp"] if omp else [])
        log(f"OpenMP {'enabled' if omp else 'not supported by ' + cc[0] + ': single-threaded core'}")
        for ext in self.extensions:
            ext.extra_compile_args = flags
            ext.extra_link_args = ["-fopenmp"] if omp else []
            ext.define_macros += [
                ("LLMB_BUILD_CFLAGS", '"' + " ".join(flags) + '"'),
                ("LLMB_BUILD_COMMIT", '"' + git_commit() + '"'),
                ("LLMB_BUILD_CC", '"' + compiler_version(cc).replace('"', "'") + '"'),
            ]
        super().build_extensions()
        self.build_cuda()

    def build_cuda(self):
        mode = os.environ.get("LLMBENCH_CUDA", "auto").strip().lower()
        if mode not in ("auto", "0", "1"):
            raise SystemExit(f"LLMBENCH_CUDA={mode!r}: expected auto, 0 or 1")
        if mode == "0":
            log("CUDA backend disabled (LLMBENCH_CUDA=0)")
            return
        nvcc = find_nvcc()
        if not nvcc:
            msg = "nvcc not found (set NVCC or CUDA_HOME, or put nvcc on PATH)"
            if mode == "1":
                raise SystemExit(f"LLMBENCH_CUDA=1 but {msg}")
            log(f"CUDA backend skipped: {msg}")
            return
        sources = sorted(str(p) for p in (ROOT / "kernels").glob("*.cu"))
        out_dir = Path(self.get_ext_fullpath("llmbench._core")).parent
        out_dir.mkdir(parents=True, exist_ok=True)
        target = out_dir / CUDA_LIB
        # cuBLAS is loaded with dlopen when a context is made (kernels/runtime.cu; its static archives
        # are hundreds of MB); the rpath finds it in this toolkit's lib64 first.
        libdir = Path(nvcc).resolve().parent.parent / "lib64"
        cmd = [nvcc, "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden",
               "-cudart", "static", *cuda_arch_flags(), "-o", str(target), *sources,
               "-ldl", f"-Xlinker=-rpath={libdir}"]
        log("building CUDA backend: " + " ".join(cmd))
        r = subprocess.run(cmd, cwd=ROOT)
        if r.returncode != 0:
            if mode == "1":
                raise SystemExit("LLMBENCH_CUDA=1 but the CUDA backend failed to build (see nvcc's output above)")
            log("CUDA backend failed to build; continuing without it (set LLMBENCH_CUDA=1 to make this fatal)")
            return
        # Editable installs import from the source tree: put the library beside the extension there.
        if getattr(self, "editable_mode", False) or self.inplace:
            src_target = ROOT / "llmbench" / CUDA_LIB
            if src_target.resolve() != target.resolve():
                shutil.copy2(target, src_target)

    def get_outputs(self):
        outs = super().get_outputs()
        lib = Path(self.get_ext_fullpath("llmbench._core")).parent / CUDA_LIB
        return outs + ([str(lib)] if lib.exists() else [])


core = Extension(
    "llmbench._core",
    sources=sorted(str(p.relative_to(ROOT)) for p in [*(ROOT / "csrc").glob("*.c"), *(ROOT / "llmbench").glob("*.c")]),
    include_dirs=[numpy.get_include(), "csrc"],
    depends=[str(p.relative_to(ROOT)) for d in ("csrc", "kernels", "llmbench") for p in (ROOT / d).glob("*.h")],
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildExt})
