"""Fits recover known parameters from seeded noisy data within their stated 95% intervals; the
information criteria pick the model that made the data; knees where the curve has them; decay curves."""

import json
import math

import numpy as np
import pytest
from scipy import stats

from llmbench.fit import (
    binomial_sigma,
    compare,
    decay_curve,
    decay_curves,
    exp_decay,
    knee,
    kneedle,
    linear,
    logistic,
    power_law,
    saturating,
)

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


def test_linear_logistic_saturating_recover_parameters():
    rng = np.random.default_rng(7)
    x = np.linspace(0, 10, 25)
    f = linear(x, 2.0 - 0.3 * x + 0.05 * rng.standard_normal(x.size))
    assert f.ci95["a"][0] < 2.0 < f.ci95["a"][1] and f.ci95["b"][0] < -0.3 < f.ci95["b"][1]
    true = {"a": 0.5, "k": 1.5, "x0": 4.0, "c": 0.25}          # accuracy stepping from 0.75 down to 0.25
    y = true["c"] + true["a"] / (1 + np.exp(true["k"] * (x - true["x0"]))) + 0.01 * rng.standard_normal(x.size)
    f = logistic(x, y)
    for name, v in true.items():
        assert f.ci95[name][0] < v < f.ci95[name][1], (name, f.params, f.ci95)
    b = np.array([1, 2, 4, 8, 16, 32, 64, 128], dtype=float)
    f = saturating(b, 900 * b / (12 + b) * (1 + 0.02 * rng.standard_normal(b.size)), sigma=900 * b / (12 + b))
    assert f.ci95["a"][0] < 900 < f.ci95["a"][1] and f.ci95["b"][0] < 12 < f.ci95["b"][1]
    assert f.weights == "relative" and len(f.residuals) == b.size
    json.dumps(f.to_dict())


def test_log_likelihood_and_criteria():
    # the Gaussian log-likelihood at the fit, recomputed with scipy: noise scale estimated (k = p + 1) or
    # known (absolute sigma, k = p); AIC = 2k - 2 logL, AICc and BIC from the same
    rng = np.random.default_rng(3)
    x = np.arange(10, dtype=float)
    y = 1 + 2 * x + rng.standard_normal(x.size)
    f = linear(x, y)
    r = np.asarray(f.residuals)
    ll = stats.norm.logpdf(r, scale=math.sqrt(np.mean(r ** 2))).sum()
    assert f.log_likelihood == pytest.approx(ll) and f.aic == pytest.approx(6 - 2 * ll)
    assert f.aicc == pytest.approx(f.aic + 2 * 3 * 4 / (10 - 3 - 1))
    assert f.bic == pytest.approx(3 * math.log(10) - 2 * ll)
    sigma = np.linspace(0.5, 1.5, x.size)
    f = linear(x, y, sigma=sigma, absolute_sigma=True)
    ll = stats.norm.logpdf(np.asarray(f.residuals), scale=sigma).sum()
    assert f.log_likelihood == pytest.approx(ll) and f.aic == pytest.approx(4 - 2 * ll)
    assert f.chi2 == pytest.approx(np.sum((np.asarray(f.residuals) / sigma) ** 2)) and 0 < f.chi2_p < 1
    # a model that fits exactly has no finite likelihood: no criteria rather than -inf
    f = linear([1, 2, 3, 4], [3, 5, 7, 9])
    assert f.log_likelihood is None and f.aic is None


def test_compare_picks_the_model_that_made_the_data():
    x = np.arange(1, 13, dtype=float)
    wins = {"exp_decay": 0, "saturating": 0}
    for seed in range(40):
        rng = np.random.default_rng(seed)
        y = 0.6 * np.exp(-x / 3) + 0.25 + 0.01 * rng.standard_normal(x.size)
        wins["exp_decay"] += compare(x, y, models=("linear", "exp_decay", "power_law")).ranking[0] == "exp_decay"
        y = 500 * x / (4 + x) * (1 + 0.01 * rng.standard_normal(x.size))
        wins["saturating"] += compare(x, y, models=("linear", "saturating", "power_law")).ranking[0] == "saturating"
    assert wins["exp_decay"] >= 36 and wins["saturating"] >= 36, wins
    c = compare(x, 0.6 * np.exp(-x / 3) + 0.25 + 0.01 * np.random.default_rng(0).standard_normal(x.size),
                models=("linear", "exp_decay", "logistic", "power_law", "saturating"))
    assert sum(c.weight.values()) == pytest.approx(1) and c.delta[c.ranking[0]] == 0
    assert c.best is c.fits[c.ranking[0]]
    json.dumps(c.to_dict())
    # models that cannot be fitted are named with the reason, not raised
    c = compare([0, 1, 2, 3], [4, 3, 2.5, 2.2], models=("power_law", "logistic", "exp_decay"), criterion="aic")
    assert "> 0" in c.failed["power_law"] and "at least 5" in c.failed["logistic"] and c.ranking == ["exp_decay"]


def test_weighted_fit_intervals_with_binomial_sigma():
    # accuracy at 8 step counts from 120 answers each, decaying exponentially: the 95% intervals of
    # the weighted fit with absolute (binomial) sigma hold the true tau in about 95% of experiments
    x = np.arange(1, 9, dtype=float)
    p = 0.6 * np.exp(-x / 3) + 0.25
    hits, trials = 0, 200
    for seed in range(trials):
        k = np.random.default_rng(seed).binomial(120, p)
        f = exp_decay(x, k / 120, sigma=binomial_sigma(k, 120), absolute_sigma=True)
        hits += f.ci95["tau"][0] < 3 < f.ci95["tau"][1]
    assert 0.88 <= hits / trials <= 0.99, hits / trials
    assert binomial_sigma([0, 10], [10, 10]) == pytest.approx([math.sqrt(1 / 12 * 11 / 12 / 10)] * 2)


def test_fit_weight_errors():
    with pytest.raises(ValueError, match="sigma must be finite and > 0"):
        linear([1, 2, 3], [1, 2, 4], sigma=[1, 0, 1])
    with pytest.raises(ValueError, match="absolute_sigma=True needs sigma"):
        linear([1, 2, 3], [1, 2, 4], absolute_sigma=True)
    with pytest.raises(ValueError, match="unknown model"):
        compare([1, 2, 3], [1, 2, 3], models=("cubic",))
    with pytest.raises(ValueError, match="criterion"):
        compare([1, 2, 3], [1, 2, 3], criterion="r2")


@pytest.mark.parametrize("curve,direction,y,want", [
    ("concave", "increasing", lambda x: np.minimum(x, 10), 10),        # rises, then flat from 10
    ("convex", "decreasing", lambda x: np.maximum(10 - x, 0), 10),     # falls, then flat from 10
    ("concave", "decreasing", lambda x: 10 - np.maximum(x - 20, 0), 20),   # flat, then falls from 20
    ("convex", "increasing", lambda x: np.maximum(x - 20, 0), 20),     # flat, then rises from 20
])
def test_kneedle_on_curves_with_a_known_knee(curve, direction, y, want):
    x = np.arange(31, dtype=float)
    k = kneedle(x, y(x), curve=curve, direction=direction)
    assert k.x == want and k.index == want and k.y == y(x)[want]
    assert np.argmax(k.difference) == want
    perm = np.random.default_rng(0).permutation(x.size)               # the order of the points does not matter
    assert kneedle(x[perm], y(x)[perm], curve=curve, direction=direction).x == want


def test_kneedle_smooth_curve_and_no_knee():
    # y = 1 - exp(-x) on [0, 10]: the scaled difference curve peaks where y' = 1/10 of its rise per unit,
    # exp(-x) = (1 - exp(-10)) / 10, x = ln 10 + ln(1 - e^-10) = 2.3025...; the grid's nearest point is 2.3
    x = np.linspace(0, 10, 101)
    k = kneedle(x, 1 - np.exp(-x))
    assert k.x == pytest.approx(2.3)
    assert kneedle(x, 3 * x + 1).x is None                              # a straight line has no knee
    assert kneedle(x, 1 - np.exp(-x), sensitivity=100).x is None       # asks for more bend than there is
    # on log2 batch, the saturating throughput curve of test_knee_on_saturating_curve bends the other way
    # below batch 8 (the difference curve is negative there); its bend is past the last doubling
    k = kneedle(BATCHES, 100 * BATCHES / (1 + BATCHES / 8), log_x=True, sensitivity=0.1)
    assert k.x == 32 and min(k.difference) < 0
    with pytest.raises(ValueError, match="constant"):
        kneedle(x, np.ones_like(x))
    with pytest.raises(ValueError, match="curve must be"):
        kneedle(x, x, curve="flat")


def test_decay_curve_table_and_fit():
    rng = np.random.default_rng(11)
    counts = {1: 400, 2: 400, 3: 400, 4: 300, 5: 300, 6: 200, 7: 150, 8: 120, 9: 4}
    steps = np.concatenate([np.full(n, s) for s, n in counts.items()])
    correct = rng.random(steps.size) < 0.6 * np.exp(-steps / 3) + 0.25
    d = decay_curve(steps, correct, min_count=10)
    assert d.steps == [1, 2, 3, 4, 5, 6, 7, 8] and d.dropped == {9: 4}
    assert d.n == [counts[s] for s in d.steps]
    assert d.correct == [int(correct[steps == s].sum()) for s in d.steps]
    assert all(lo <= a <= hi for a, (lo, hi) in zip(d.accuracy, d.ci95))
    f = d.comparison.fits["exp_decay"]
    assert f.weights == "absolute" and f.ci95["tau"][0] < 3 < f.ci95["tau"][1]
    assert d.best is not None and d.note is None
    json.dumps(d.to_dict())


def test_decay_curves_pooled_and_per_subject():
    rng = np.random.default_rng(12)
    steps = rng.integers(1, 7, 900)
    groups = np.where(np.arange(900) < 880, "algebra", "anatomy")      # anatomy: 20 answers over 6 step counts
    correct = rng.random(900) < 0.8 - 0.08 * steps
    curves = decay_curves(steps, correct, groups, min_count=10)
    assert set(curves) == {"pooled", "algebra", "anatomy"}
    assert curves["pooled"].n == [int((steps == s).sum()) for s in range(1, 7)]
    assert curves["algebra"].comparison is not None and "linear" in curves["algebra"].comparison.fits
    a = curves["anatomy"]
    assert a.comparison is None and "a fit needs 3 or more" in a.note and sum(a.dropped.values()) == 20
    with pytest.raises(ValueError, match="whole numbers"):
        decay_curve([1.5, 2], [True, False])
    with pytest.raises(ValueError, match="different lengths"):
        decay_curves([1, 2], [True], ["a", "b"])
