"""The STREAM-style bandwidth probe: positive, finite figures and checked arguments (no timing claims)."""

import math

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
