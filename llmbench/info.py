"""`llmbench info`: what this build and this machine are — recorded with every result."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

from . import __version__, _core
from .backends import cuda


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or what the platform module says where that is missing."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return platform.processor() or platform.machine()
    for key in ("model name", "Model", "Hardware", "CPU part"):
        for line in text.splitlines():
            if line.split(":")[0].strip() == key:
                return line.split(":", 1)[1].strip()
    return platform.machine()


def llc_bytes(base: str = "/sys/devices/system/cpu/cpu0/cache") -> int | None:
    """Size of the last-level cache (the highest data or unified level cpu0 lists in sysfs), or None where
    the system does not say. Decode weights that fit in it can be read from the cache at every step,
    so a fraction of the memory bandwidth is no limit for them."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    best = (0, 0)
    try:
        entries = os.listdir(base)
    except OSError:
        return None
    for e in entries:
        try:
            level, kind, size = (Path(base, e, f).read_text().strip() for f in ("level", "type", "size"))
            if kind != "Instruction" and size:
                best = max(best, (int(level), int(size.rstrip("KMGkmg")) * units.get(size[-1].upper(), 1)))
        except (OSError, ValueError):
            continue
    return best[1] or None


def memory_bytes() -> dict[str, int]:
    """Total and available memory from /proc/meminfo (bytes)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                k, v = line.split(":", 1)
                if k in ("MemTotal", "MemAvailable"):
                    out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return {"total": out.get("MemTotal", 0), "available": out.get("MemAvailable", 0)}


def cuda_info() -> dict[str, Any]:
    """The CUDA backend as `llmbench info` shows it: available or why not, library, versions, devices."""
    ok, why = cuda.available()
    info: dict[str, Any] = {"available": ok, "library": cuda.library_path()}
    if not ok:
        info["reason"] = why
    try:
        info.update(cuda.versions())
    except _core.LLMBenchError:
        pass
    if ok:
        info["devices"] = [d.__dict__ for d in cuda.devices()]
    return info


def collect() -> dict[str, Any]:
    """Everything `llmbench info` shows, as a JSON-serializable dict."""
    b = _core.build_info()
    s = _core.simd_info()
    return {
        "llmbench": __version__,
        "commit": b["commit"] or "unknown",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "build": {"compiler": b["compiler"], "cflags": b["cflags"], "openmp": b["openmp"], "arch": b["arch"]},
        "simd": {"active": s["active"], "detected": s["detected"], "cpu_features": s["cpu_features"],
                 "prefetch": s["prefetch"]},
        "threads": _core.max_threads(),
        "cpu": {"model": cpu_model(), "logical_cpus": os.cpu_count(), "llc_bytes": llc_bytes()},
        "memory": memory_bytes(),
        "backends": {"cpu": {"available": True}, "cuda": cuda_info()},
    }
