"""The C core compiles without a warning, and links, for the targets users build on that this machine's
gcc never sees: Linux on AArch64 (NEON with and without the dot-product extension, with and without
OpenMP), macOS on Apple silicon (clang without OpenMP, the BSD C library), and x86-64 with clang (as on
Intel Macs). The compiler is zig's clang (the ziglang package), which carries every target's C library
headers; only compiling and linking runs here (tests/test_aarch64.py runs the AArch64 build under QEMU
where the cross tools are installed). The AArch64 build once broke for a day unseen (a macro defined only
in the x86 branch of vexp.h), and macOS had never built (glibc's qsort_r argument order)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"

# target, extra flags, whether to link the objects into a shared library (OpenMP builds only compile:
# zig has no libgomp to link against)
TARGETS = {
    "aarch64-linux": ("aarch64-linux-gnu", ["-mcpu=generic"], True),
    "aarch64-linux-dotprod-openmp": ("aarch64-linux-gnu", ["-mcpu=generic+dotprod", "-fopenmp"], False),
    "aarch64-macos": ("aarch64-macos", ["-mcpu=apple_m1"], True),
    "x86_64-linux-clang-openmp": ("x86_64-linux-gnu", ["-fopenmp"], False),
}


def setup_cflags() -> list[str]:
    """setup.py's BASE_CFLAGS (the flags users' builds get) with -Werror, at -O0: clang's warnings come from
    its front end, the same at every level, and compiling is several times faster."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BASE_CFLAGS" for t in node.targets):
            flags = ast.literal_eval(node.value)
            return [f for f in flags if not f.startswith("-O")] + ["-O0", "-Werror"]
    raise AssertionError("setup.py defines no BASE_CFLAGS")


def zig_cc() -> list[str]:
    try:
        import ziglang  # noqa: F401
    except ImportError:
        pytest.skip("needs the ziglang package (pip install ziglang; requirements-test.txt pins it)")
    return [sys.executable, "-m", "ziglang", "cc"]


def run(cmd: list[str], env: dict[str, str]) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    return "" if r.returncode == 0 else f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}"


@pytest.fixture(scope="module")
def zig_env(tmp_path_factory):
    """zig's cache for the module: the C library stubs it builds for a target's first link are kept"""
    cache = str(tmp_path_factory.mktemp("zig-cache"))
    return dict(os.environ, ZIG_GLOBAL_CACHE_DIR=cache, ZIG_LOCAL_CACHE_DIR=cache)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_core_builds_for(name, tmp_path, zig_env):
    cc = zig_cc()
    target, extra, link = TARGETS[name]
    env = zig_env
    inc = ["-I", str(CSRC)]
    if "-fopenmp" in extra:   # zig ships no omp.h: gcc's (libgomp's, the same on every architecture)
        gcc = shutil.which("gcc")
        if gcc is None:
            pytest.skip("the OpenMP variants take omp.h from gcc, which is not installed")
        omp = Path(subprocess.run([gcc, "-print-file-name=include"], capture_output=True, text=True,
                                  check=True).stdout.strip(), "omp.h")
        (tmp_path / "omp").mkdir()
        shutil.copy(omp, tmp_path / "omp" / "omp.h")
        inc += ["-isystem", str(tmp_path / "omp")]
    flags = ["-target", target, *extra, *setup_cflags(), "-fPIC", *inc]
    sources = sorted(CSRC.glob("*.c"))
    objs = [tmp_path / (s.stem + ".o") for s in sources]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        errors = [e for e in pool.map(lambda so: run(cc + flags + ["-c", str(so[0]), "-o", str(so[1])], env),
                                      zip(sources, objs)) if e]
    assert not errors, "\n".join(errors)[-6000:]
    if link:   # every function the core calls exists in the target's C library
        lib = tmp_path / ("libcore.dylib" if "macos" in target else "libcore.so")
        defs = [] if "macos" in target else ["-Wl,-z,defs"]   # Mach-O refuses undefined symbols by default
        err = run(cc + ["-target", target, "-shared", *defs, *map(str, objs), "-lm", "-o", str(lib)], env)
        assert not err, err[-6000:]
        assert lib.stat().st_size > 0
