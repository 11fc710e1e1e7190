"""The STREAM-style bandwidth probe: positive, finite figures and checked arguments (no timing claims)."""

import math

import numpy as np
import pytest

from llmbench.perf import membw


def test_membw_reports_three_kernels():
    r = membw.measure(8 << 20, reps=2, threads=1)
    for k in ("read", "copy", "triad"):
        assert math.isfinite(r[k]) and r[k] > 0
    assert r["threads"] == 1 and r["array_bytes"] == 8 << 20


def test_membw_rejects_bad_arguments():
    with pytest.raises(ValueError):
        membw.measure(100)
    with pytest.raises(ValueError):
        membw.measure(1 << 20, reps=0)


def test_membw_command():
    import json
    import subprocess
    import sys

    from llmbench.backends import cuda

    run = lambda *a: subprocess.run([sys.executable, "-m", "llmbench", "membw", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=120)
    r = run("--size-mib", "8", "--reps", "1", "--threads", "1", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["read"] > 0
    r = run("--threads", "0")
    assert r.returncode == 2 and "threads >= 1" in r.stderr
    if not cuda.available()[0]:
        r = run("--backend", "cuda")
        assert r.returncode == 2 and "error:" in r.stderr and "Traceback" not in r.stderr


def test_membw_again_keeps_the_better_read(monkeypatch):
    """`llmbench bench` measures the bandwidth before its tests and again after: the higher read of the
    two is the machine's limit (an earlier figure above any real one is kept, one below it replaced)."""
    from llmbench.perf import roofline

    monkeypatch.setattr(roofline, "_MEMBW_CACHE", {1: {"read": 1e9, "copy": 1.0, "triad": 1.0}})
    assert roofline.membw_elsewhere(1)["read"] == 1e9   # once per process without again
    assert roofline.membw_elsewhere(1, again=True)["read"] == 1e9
    monkeypatch.setattr(roofline, "_MEMBW_CACHE", {1: {"read": 1e-9, "copy": 1.0, "triad": 1.0}})
    now = roofline.membw_elsewhere(1, again=True)
    assert 1e-9 < now["read"] < 1e9 and now["threads"] == 1


def test_best_keeps_the_better_read():
    now = membw.best(1, nbytes=8 << 20, reps=1)
    assert now["read"] > 0 and now["threads"] == 1
    high, low = {**now, "read": 1e9}, {**now, "read": 1e-9}
    assert membw.best(1, high, nbytes=8 << 20, reps=1) is high
    again = membw.best(1, low, nbytes=8 << 20, reps=1)
    assert again is not low and 1e-9 < again["read"] < 1e9


@pytest.mark.parametrize("size,offset", [(0, 0), (3, 0), (4096, 0), (1 << 20, 1), (1 << 20, 61), (100003, 5)])
def test_mem_read_checks_every_byte(size, offset):
    # the read kernel (llmb_mem_read, membw's and bench_vecdot's) XORs every 32-bit word from the first
    # line boundary on, and every byte outside them: a checksum no dropped range or thread slice keeps
    from llmbench import _core

    rng = np.random.default_rng(size + offset)
    buf = rng.integers(0, 256, size + offset + 64, dtype=np.uint8)[offset:offset + size]
    head = min(-buf.ctypes.data % 64, size)
    words = (size - head) // 4
    body = buf[head:head + 4 * words].view(np.uint32)
    want = int(np.bitwise_xor.reduce(body)) if words else 0
    for b in np.concatenate([buf[:head], buf[head + 4 * words:]]):
        want ^= int(b)
    for threads in (1, 2, 3):
        assert _core.mem_bench(False, buf, threads, None) == want, threads
    if size:   # one flipped bit anywhere changes it
        buf = buf.copy()
        before = _core.mem_bench(False, buf, 2, None)
        buf[size // 2] ^= 0x10
        assert _core.mem_bench(False, buf, 2, None) != before


def test_page_aligned_copies():
    # NumPy's buffers start anywhere past a line boundary; a vector load straddling two lines moved one
    # build's GOP/s against the other's by up to 1.5x, so each copy starts where the engine's would
    rng = np.random.default_rng(0)
    for nbytes, align in ((3000, 4096), (3 << 20, 2 << 20)):
        w = rng.integers(0, 256, (nbytes // 6, 6), dtype=np.uint8)
        c = membw.page_aligned(w)
        assert c.ctypes.data % align == 0 and c.flags.c_contiguous
        assert c.shape == w.shape and c.dtype == w.dtype and np.array_equal(c, w)
