"""`llmbench info`, the build's flags and exported symbols, and that importing llmbench never loads CUDA."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import llmbench
from llmbench import _core, info
from llmbench.backends import cuda


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, env=env)


def test_info_json():
    r = run("-m", "llmbench", "info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["llmbench"] == llmbench.__version__
    assert info["simd"]["active"] in ("scalar", "neon", "avx2", "avx512")
    assert info["threads"] >= 1
    assert info["memory"]["total"] > 0
    assert info["cpu"]["model"]
    assert info["backends"]["cpu"]["available"] is True
    cuda = info["backends"]["cuda"]
    assert isinstance(cuda["available"], bool)
    if not cuda["available"]:
        assert cuda["reason"]


def test_info_table():
    r = run("-m", "llmbench", "info")
    assert r.returncode == 0, r.stderr
    for word in ("version", "SIMD", "OpenMP", "CPU", "memory", "backend cuda"):
        assert word in r.stdout
    if cuda.library_path():  # the runtime version is reported even without a device
        assert "runtime" in r.stdout


def test_help_has_examples():
    r = run("-m", "llmbench", "info", "--help")
    assert r.returncode == 0 and "example:" in r.stdout
    r = run("-m", "llmbench")
    assert r.returncode == 2 and "info" in r.stdout
    r = run("-m", "llmbench", "no-such-command")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_build_flags():
    b = _core.build_info()
    flags = b["cflags"].split()
    assert "-O3" in flags and "-std=c11" in flags and "-fvisibility=hidden" in flags
    assert not any(f in flags for f in ("-ffast-math", "-Ofast", "-funsafe-math-optimizations"))
    assert b["openmp"] == ("-fopenmp" in flags)


def test_only_prefixed_symbols_are_exported():
    nm = subprocess.run(["nm", "-D", "--defined-only", _core.__file__], capture_output=True, text=True)
    if nm.returncode != 0:
        pytest.skip(f"nm unavailable: {nm.stderr.strip()}")
    names = [line.split()[-1] for line in nm.stdout.splitlines() if line.split()[1:2] in (["T"], ["D"], ["B"])]
    stray = [n for n in names if not n.startswith(("llmb_", "PyInit_"))]
    assert not stray, f"symbols without the llmb_ prefix leak from the extension: {stray[:10]}"


def test_simd_levels_can_be_forced_down_only():
    info = _core.simd_info()
    try:
        _core.simd_set("scalar")
        assert _core.simd_info()["active"] == "scalar"
        with pytest.raises(ValueError, match="unknown SIMD level"):
            _core.simd_set("sse9")
        other = "neon" if info["detected"] != "neon" else "avx2"
        with pytest.raises(ValueError, match="not available"):
            _core.simd_set(other)
    finally:
        _core.simd_set(info["active"])
    r = run("-c", "import llmbench._core as c, llmbench; print(c.simd_info()['active'])",
            env={**__import__("os").environ, "LLMBENCH_SIMD": "scalar"})
    assert r.returncode == 0 and r.stdout.strip() == "scalar", r.stderr


def test_amx_is_named_only_where_granted_and_can_be_turned_off():
    # "amx-int8" (csrc/cpu.c: the CPU has it and Linux granted the tile state) turns on vecdot_amx.c's
    # kernels; LLMBENCH_AMX=0 must take it away, for A/B runs of the same build
    code = "import llmbench._core as c; print(c.simd_info()['cpu_features'])"
    on = run("-c", code)
    off = run("-c", code, env={**__import__("os").environ, "LLMBENCH_AMX": "0"})
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert "amx-int8" not in off.stdout.split()
    if "amx-int8" in on.stdout.split():
        assert "avx512vnni" in on.stdout.split() and _core.simd_info()["detected"] == "avx512"


def test_decode_prefetch_default_and_switch():
    # every line prefetched (and far ahead where the weights stream from DRAM) by default on Intel CPUs,
    # every line on AMD from Zen 5 (family 26) on, else page-wise (csrc/simd_x86.h, LINE_PF_AHEAD,
    # FAR_PF_AHEAD); switchable at run time and by LLMBENCH_PREFETCH, and a wrong name is refused
    vendor = family = None
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        vendor, family = fields.get("vendor_id"), int(fields.get("cpu family", "0"))
    if vendor is not None and not os.environ.get("LLMBENCH_PREFETCH"):   # the default, unless the user chose
        expected = "far" if vendor == "GenuineIntel" else "lines" if vendor == "AuthenticAMD" and family >= 26 else "page"
        assert _core.simd_info()["prefetch"] == expected
    before = _core.simd_info()["prefetch"]
    try:
        for mode in ("page", "lines", "far"):
            _core.prefetch_set(mode)
            assert _core.simd_info()["prefetch"] == mode
        with pytest.raises(ValueError, match="expected 'page', 'lines' or 'far'"):
            _core.prefetch_set("every")
    finally:
        _core.prefetch_set(before)
    for mode in ("page", "lines", "far"):
        r = run("-c", "import llmbench, llmbench._core as c; print(c.simd_info()['prefetch'])",
                env={**os.environ, "LLMBENCH_PREFETCH": mode.upper()})
        assert r.returncode == 0 and r.stdout.strip() == mode, r.stderr
    r = run("-c", "import llmbench", env={**os.environ, "LLMBENCH_PREFETCH": "every"})
    assert r.returncode != 0 and "LLMBENCH_PREFETCH" in r.stderr


def test_cache_holds():
    # the engine's judgement of whether a model's matrices stream from DRAM (llmb_cache_holds) uses the
    # last-level cache `llmbench info` reports: it holds exactly that many bytes and not one more (glibc's
    # sysconf would say 256 MiB on an EPYC whose cores share 32 MiB); a size must be a non-negative int
    llc = info.llc_bytes()
    if llc is None:
        pytest.skip("sysfs lists no cache sizes here")
    assert _core.cache_holds(llc) is True and _core.cache_holds(llc + 1) is False
    assert _core.cache_holds(1) is True and _core.cache_holds(2**63) is False
    with pytest.raises(OverflowError):
        _core.cache_holds(-1)
    with pytest.raises(TypeError):
        _core.cache_holds("1")


def test_monotonic_clock():
    a = _core.now_ns()
    b = _core.now_ns()
    assert 0 < a <= b


def test_import_never_loads_cuda(stories_path):
    code = (
        "import llmbench, llmbench.models.gguf, llmbench.info\n"
        f"f = llmbench.models.gguf.GGUFFile({str(stories_path)!r}); f.metadata; f.raw('output.weight')\n"
        "maps = open('/proc/self/maps').read()\n"
        "bad = [l for l in maps.splitlines() if 'libcuda' in l or 'libllmbench_cuda' in l or 'libcudart' in l]\n"
        "print('LOADED' if bad else 'CLEAN')\n"
    )
    r = run("-c", code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "CLEAN"
