"""Fits recover known parameters from seeded noisy data within their stated 95% intervals; knee."""

import json

import numpy as np
import pytest

from llmbench.fit import exp_decay, knee, power_law

BATCHES = np.array([1, 2, 4, 8, 16, 32, 64], dtype=float)


def test_power_law_recovers_parameters():
    rng = np.random.default_rng(0)
    a, k = 35.0, 0.72
    x = np.repeat(BATCHES, 3)
    y = a * x**k * (1 + 0.03 * rng.standard_normal(x.size))    # 3% noise, 3 repetitions per batch
    f = power_law(x, y, relative=True)                          # noise proportional to y
    lo, hi = f.ci95["a"]
    assert lo < a < hi and f.ci95["k"][0] < k < f.ci95["k"][1]
    assert f.params["k"] == pytest.approx(k, abs=0.03) and f.r2 > 0.99
    assert f.n == 21 and f.dof == 19 and f.stderr["k"] > 0
    assert f.predict([2.0])[0] == pytest.approx(f.params["a"] * 2 ** f.params["k"])
    json.dumps(f.to_dict())


def test_power_law_exact_data():
    f = power_law([1, 2, 4, 8], [3, 6, 12, 24])
    assert f.params["a"] == pytest.approx(3) and f.params["k"] == pytest.approx(1)
    assert f.r2 == pytest.approx(1) and f.stderr["k"] == pytest.approx(0, abs=1e-6)


def test_power_law_interval_coverage():
    # The 95% intervals should hold the true parameters in about 95% of repeated experiments:
    # additive noise with the plain fit, relative noise with relative=True.
    a, k, trials = 10.0, 0.5, 300
    hits = {"additive": 0, "relative": 0}
    for seed in range(trials):
        rng = np.random.default_rng(seed)
        y = a * BATCHES**k + 0.5 * rng.standard_normal(BATCHES.size)
        lo, hi = power_law(BATCHES, y).ci95["k"]
        hits["additive"] += lo < k < hi
        y = a * BATCHES**k * (1 + 0.05 * rng.standard_normal(BATCHES.size))
        lo, hi = power_law(BATCHES, y, relative=True).ci95["a"]
        hits["relative"] += lo < a < hi
    for kind, n in hits.items():
        assert 0.90 <= n / trials <= 0.99, kind


def test_exp_decay_recovers_parameters():
    rng = np.random.default_rng(1)
    a, tau, c = 0.6, 4.0, 0.25                                   # accuracy decaying towards 0.25
    x = np.arange(0, 21, dtype=float)
    y = a * np.exp(-x / tau) + c + 0.01 * rng.standard_normal(x.size)
    f = exp_decay(x, y)
    for name, true in (("a", a), ("tau", tau), ("c", c)):
        lo, hi = f.ci95[name]
        assert lo < true < hi, (name, f.params[name], f.ci95[name])
    assert f.r2 > 0.99 and f.dof == 18
    json.dumps(f.to_dict())


def test_exp_decay_rising_curve():
    # a < 0: a curve that rises and saturates at c
    x = np.linspace(0, 10, 12)
    y = -2.0 * np.exp(-x / 3.0) + 5.0
    f = exp_decay(x, y)
    assert f.params["a"] == pytest.approx(-2.0, rel=1e-4)
    assert f.params["tau"] == pytest.approx(3.0, rel=1e-4) and f.params["c"] == pytest.approx(5.0, rel=1e-4)


def test_fit_input_errors():
    with pytest.raises(ValueError, match="at least 3"):
        power_law([1, 2], [1, 2])
    with pytest.raises(ValueError, match="> 0"):
        power_law([0, 1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="different lengths"):
        exp_decay([1, 2, 3, 4], [1, 2, 3])


def test_knee_on_saturating_curve():
    # y = 100 b / (1 + b/8): gain per doubling g(b) = 2 (8 + b) / (8 + 2b) - 1 = 8 / (8 + 2b)
    #   b=1: 0.8, 2: 0.667, 4: 0.5, 8: 0.333, 16: 0.2, 32: 0.111, 64 (last point, no gain)
    y = 100 * BATCHES / (1 + BATCHES / 8)
    kn = knee(BATCHES, y, threshold=0.1)
    assert kn.gains == pytest.approx([0.8, 2 / 3, 0.5, 1 / 3, 0.2, 1 / 9])
    assert kn.x is None                                          # 1/9 > 0.1: not yet saturated by 64
    kn = knee(BATCHES, y, threshold=0.25)                        # 16 -> 32 gains 0.2 < 0.25
    assert kn.x == 16 and kn.index == 4
    assert knee(BATCHES[::-1], y[::-1], threshold=0.25).x == 16  # order of points does not matter
    assert knee(BATCHES, y, threshold=0.4).x == 8                # 4 -> 8 gains 0.5, 8 -> 16 gains 1/3
    json.dumps(kn.to_dict())


def test_knee_uneven_spacing():
    # power law with k = 0.1: every step gains 2**0.1 - 1 = 0.072 per doubling whatever its length
    x = np.array([1, 3, 4, 16, 20])
    kn = knee(x, 5 * x**0.1, threshold=0.1)
    assert kn.gains == pytest.approx([2**0.1 - 1] * 4) and kn.x == 1
    assert knee(x, 5 * x**0.5, threshold=0.1).x is None          # 2**0.5 - 1 = 0.41 per doubling
    with pytest.raises(ValueError, match="distinct"):
        knee([1, 1, 2], [1, 2, 3])


def test_power_law_band_covers_the_true_curve():
    # The 95% band of the fitted curve (delta method with the parameter covariance) holds the true
    # curve at a given batch in about 95% of repeated experiments; it is narrowest inside the data.
    a, k, trials = 40.0, 0.6, 300
    hits = np.zeros(3)
    xs = np.array([1.0, 6.0, 64.0])
    for seed in range(trials):
        rng = np.random.default_rng(1000 + seed)
        y = a * BATCHES**k * (1 + 0.05 * rng.standard_normal(BATCHES.size))
        f = power_law(BATCHES, y, relative=True)
        lo, hi = f.band(xs)
        hits += (lo < a * xs**k) & (a * xs**k < hi)
    assert np.all(hits / trials > 0.88) and np.all(hits / trials < 0.995), hits / trials
    f = power_law(BATCHES, a * BATCHES**k * (1 + 0.05 * np.random.default_rng(0).standard_normal(BATCHES.size)),
                  relative=True)
    lo, hi = f.band(np.array([1.0, 8.0]))
    assert (hi - lo)[1] / f.predict(8.0) < (hi - lo)[0] / f.predict(1.0)
    assert json.loads(json.dumps(f.to_dict()))["cov"] == f.cov
