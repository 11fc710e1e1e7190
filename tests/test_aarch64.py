"""The C core's own tests (csrc/tests) cross-compiled for AArch64 and run under qemu-aarch64, so the
NEON kernels (with and without the dot-product extension) keep matching their scalar references on
every change, on an x86 machine. Skips when the cross compiler or qemu is not installed
(Debian: gcc-aarch64-linux-gnu, qemu-user)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYSROOT = Path("/usr/aarch64-linux-gnu")


@pytest.mark.parametrize("march", ["armv8-a", "armv8.2-a+dotprod"])
def test_core_tests_pass_on_aarch64(march):
    missing = [t for t in ("aarch64-linux-gnu-gcc", "qemu-aarch64", "make") if shutil.which(t) is None]
    if missing or not SYSROOT.is_dir():
        pytest.skip(f"needs {', '.join(missing) or SYSROOT} (Debian packages gcc-aarch64-linux-gnu, qemu-user)")
    r = subprocess.run(["make", "-s", "-C", "csrc", "test-aarch64", f"AARCH64_MARCH={march}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=1200, check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    counts = re.findall(r"(\d+) passed, (\d+) failed", out)
    programs = sorted(p.stem for p in (ROOT / "csrc" / "tests").glob("test_*.c"))
    assert len(counts) == len(programs), out[-4000:]      # every test program ran to its summary
    assert all(int(failed) == 0 and int(passed) > 0 for passed, failed in counts)
