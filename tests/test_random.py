"""The core's counter-based normal generator (csrc/random.c): right moments and tails, and element
i of a stream is the same whatever the chunking or the thread count."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest

from llmbench import _core


def normal(n: int, seed: int, std: float = 1.0, mean: float = 0.0, start: int = 0) -> np.ndarray:
    out = np.empty(n, np.float32)
    _core.fill_normal(out, seed, std, mean, start)
    return out


def test_moments_and_tails():
    n = 2_000_000
    x = normal(n, seed=7).astype(np.float64)
    se = 1 / math.sqrt(n)
    assert abs(x.mean()) < 5 * se
    assert abs(x.std() - 1) < 5 * se
    kurt = ((x - x.mean()) ** 4).mean() / x.var() ** 2
    assert abs(kurt - 3) < 0.02
    for k, p in [(1, 0.682689492), (2, 0.954499736), (3, 0.997300204)]:
        frac = np.mean(np.abs(x) < k)
        assert abs(frac - p) < 5 * math.sqrt(p * (1 - p) / n), (k, frac)
    # neighbouring elements are uncorrelated (the pairs share one Box-Muller draw)
    assert abs(np.corrcoef(x[:-1], x[1:])[0, 1]) < 5 * se


def test_scale_shift_and_seeds():
    a = normal(10_001, seed=1, std=0.02, mean=1.0)
    b = normal(10_001, seed=1)
    assert np.allclose(a, 1.0 + 0.02 * b, rtol=0, atol=1e-6)
    assert not np.array_equal(normal(100, seed=2), normal(100, seed=3))


@pytest.mark.parametrize("start", [0, 1, 2, 12345, 2**40 + 1])
def test_chunks_equal_whole(start):
    whole = normal(1001, seed=5, start=start)
    cut = [normal(n, seed=5, start=start + s) for s, n in [(0, 1), (1, 500), (501, 499), (1000, 1)]]
    assert np.array_equal(whole, np.concatenate(cut))


def test_same_for_any_thread_count():
    code = ("import numpy as np, llmbench._core as c, hashlib\n"
            "a = np.empty(3_000_001, np.float32); c.fill_normal(a, 11, 0.02)\n"
            "print(hashlib.sha256(a.tobytes()).hexdigest())")
    digests = set()
    for threads in ("1", "2", "3"):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "OMP_NUM_THREADS": threads})
        assert r.returncode == 0, r.stderr
        digests.add(r.stdout.strip())
    assert len(digests) == 1


def test_rejects_wrong_arrays():
    with pytest.raises(ValueError, match="float32"):
        _core.fill_normal(np.empty(4, np.float64), 1, 1.0)
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.fill_normal(np.empty((4, 4), np.float32)[:, 1], 1, 1.0)
