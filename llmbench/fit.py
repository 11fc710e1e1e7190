"""Curve fits for sweeps: power law, exponential decay, and the knee of a throughput curve.

Fits are nonlinear least squares in linear space (scipy.optimize.curve_fit), started from a closed-form
guess; parameter uncertainties come from the covariance that curve_fit estimates (scaled by the
residual variance), and 95% confidence intervals use Student's t with n - p degrees of freedom.
Results are dataclasses whose ``to_dict()`` is JSON-serializable. Tested in tests/test_fit.py on
seeded noisy data with known parameters.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import optimize, stats


@dataclass
class FitResult:
    """One fitted model. ``params``, ``stderr`` and ``ci95`` are keyed by parameter name; ``ci95``
    holds [low, high]. ``r2`` is 1 - SS_res / SS_tot on the data as given (linear space)."""

    model: str          # "power_law" or "exp_decay"
    formula: str        # e.g. "y = a * x**k"
    params: dict[str, float]
    stderr: dict[str, float]
    ci95: dict[str, list[float]]
    r2: float
    n: int              # data points
    dof: int            # n - number of parameters
    cov: list[list[float]] | None = None   # covariance of the parameters, in the order of params

    def predict(self, x: Sequence[float] | np.ndarray | float) -> np.ndarray:
        return _MODELS[self.model](np.asarray(x, dtype=np.float64), *self.params.values())

    def band(self, x: Sequence[float] | np.ndarray | float, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Confidence band of the fitted curve at ``x`` (the mean prediction, not new data): the delta
        method with the parameter covariance (numerical gradient), Student's t with ``dof``."""
        if self.cov is None:
            raise ValueError("band: this fit has no covariance")
        x = np.asarray(x, dtype=np.float64)
        p = np.array(list(self.params.values()))
        f = _MODELS[self.model]
        grads = []
        for i in range(p.size):
            h = 1e-6 * max(abs(p[i]), 1e-12)
            up, dn = p.copy(), p.copy()
            up[i] += h
            dn[i] -= h
            grads.append((f(x, *up) - f(x, *dn)) / (2 * h))
        g = np.array(grads)                       # [n_params, len(x)]
        var = np.einsum("i...,ij,j...->...", g, np.asarray(self.cov), g)
        half = float(stats.t.ppf(0.5 + level / 2, self.dof)) * np.sqrt(np.clip(var, 0, None))
        y = f(x, *p)
        return y - half, y + half

    def to_dict(self) -> dict:
        return asdict(self)


def _power_law(x, a, k):
    return a * np.power(x, k)


def _exp_decay(x, a, tau, c):
    return a * np.exp(-x / tau) + c


_MODELS: dict[str, Callable] = {"power_law": _power_law, "exp_decay": _exp_decay}


def _as_xy(x, y, min_points: int, name: str) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"{name}: x and y have different lengths ({x.size} and {y.size})")
    if x.size < min_points:
        raise ValueError(f"{name}: needs at least {min_points} points for error estimates, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError(f"{name}: x and y must be finite")
    return x, y


def _fit(model: str, formula: str, names: tuple[str, ...], x: np.ndarray, y: np.ndarray,
         p0: Sequence[float], sigma: np.ndarray | None) -> FitResult:
    f = _MODELS[model]
    with warnings.catch_warnings():
        # curve_fit warns (OptimizeWarning) when it cannot estimate the covariance: we report inf.
        warnings.simplefilter("ignore", optimize.OptimizeWarning)
        try:
            popt, pcov = optimize.curve_fit(f, x, y, p0=p0, sigma=sigma, absolute_sigma=False,
                                            maxfev=20000)
        except RuntimeError as e:
            raise ValueError(f"{model}: the fit did not converge ({e})") from None
    dof = x.size - len(names)
    se = np.sqrt(np.clip(np.diag(pcov), 0, None))
    se = np.where(np.isfinite(se), se, math.inf)
    t = float(stats.t.ppf(0.975, dof))
    resid = y - f(x, *popt)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else 1.0
    return FitResult(model=model, formula=formula,
                     params={n: float(p) for n, p in zip(names, popt)},
                     stderr={n: float(s) for n, s in zip(names, se)},
                     ci95={n: [float(p - t * s), float(p + t * s)] for n, p, s in zip(names, popt, se)},
                     r2=r2, n=int(x.size), dof=int(dof),
                     cov=[[float(v) for v in row] for row in pcov]
                     if np.all(np.isfinite(pcov)) else None)


# ---- power law ----

def power_law(x, y, sigma=None, relative: bool = False) -> FitResult:
    """Fit ``y = a * x**k`` by least squares in linear space.

    The start is the straight line through (log x, log y) (exact for noise-free data). Needs x > 0,
    y > 0 and at least 3 points. ``sigma``: optional per-point standard deviations of y (relative
    weights; the covariance is still scaled by the residual variance). ``relative=True`` sets
    ``sigma = y``: noise proportional to the value, as timing noise on throughput usually is (a few
    percent at every batch size); unweighted, the largest batches would dominate the fit and the
    intervals would be wrong (tests/test_fit.py shows both).
    """
    x, y = _as_xy(x, y, 3, "power_law")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("power_law: x and y must be > 0")
    if np.ptp(x) == 0:
        raise ValueError("power_law: x needs at least two distinct values")
    if relative:
        if sigma is not None:
            raise ValueError("power_law: pass sigma or relative=True, not both")
        sigma = y
    k0, log_a0 = np.polyfit(np.log(x), np.log(y), 1)
    return _fit("power_law", "y = a * x**k", ("a", "k"), x, y, (math.exp(log_a0), k0),
                None if sigma is None else np.asarray(sigma, dtype=np.float64))


# ---- exponential decay ----

def exp_decay(x, y, sigma=None) -> FitResult:
    """Fit ``y = a * exp(-x / tau) + c`` (accuracy vs reasoning steps, say); needs 4+ points.

    Start: c just beyond the last/extreme value of y on the side the curve approaches, then the
    straight line through (x, log|y - c|) gives a and tau. ``a`` may come out negative (a rising
    curve that saturates); ``tau`` > 0 is a decay, < 0 a growth.
    """
    x, y = _as_xy(x, y, 4, "exp_decay")
    if np.ptp(x) == 0:
        raise ValueError("exp_decay: x needs at least two distinct values")
    order = np.argsort(x)
    xs, ys = x[order], y[order]
    span = float(np.ptp(ys)) or 1.0
    falling = ys[0] >= ys[-1]
    c0 = float(ys.min() - 0.05 * span) if falling else float(ys.max() + 0.05 * span)
    d = np.abs(ys - c0)
    slope, intercept = np.polyfit(xs, np.log(d), 1)
    tau0 = -1.0 / slope if slope < 0 else float(np.ptp(xs)) / 2
    a0 = math.exp(intercept) * (1 if falling else -1)
    return _fit("exp_decay", "y = a * exp(-x / tau) + c", ("a", "tau", "c"), x, y, (a0, tau0, c0),
                None if sigma is None else np.asarray(sigma, dtype=np.float64))


# ---- knee ----

@dataclass
class Knee:
    """Where a throughput curve stops paying for more batch. ``x`` is None when no step falls below
    the threshold (the curve has not saturated in the range measured)."""

    x: float | None
    index: int | None   # of the knee among the points sorted by x
    threshold: float
    gains: list[float]  # gain per doubling of step i -> i + 1, len(points) - 1 entries

    def to_dict(self) -> dict:
        return asdict(self)


def knee(x, y, threshold: float = 0.1) -> Knee:
    """The knee of throughput ``y`` against batch size ``x``.

    Sort the points by x. For each step i -> i + 1 the marginal relative gain per doubling is

        g_i = (y[i+1] / y[i]) ** (1 / log2(x[i+1] / x[i])) - 1

    i.e. the relative throughput gain that step would give for one doubling of the batch (for a
    sweep 1, 2, 4, ... it is simply y[i+1] / y[i] - 1; other spacings are normalised to a
    doubling, assuming a power law within the step). The knee is x[i] for the first i with
    g_i < threshold: the first batch size after which doubling the batch gains less than
    ``threshold`` (0.1 = 10%) more throughput. Measured points are used as they are (no fit), so a
    single noisy dip can set it; pass medians of repetitions.
    """
    x, y = _as_xy(x, y, 2, "knee")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("knee: batch sizes and throughputs must be > 0")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if np.any(np.diff(x) == 0):
        raise ValueError("knee: batch sizes must be distinct")
    gains = (y[1:] / y[:-1]) ** (1.0 / np.log2(x[1:] / x[:-1])) - 1.0
    below = np.flatnonzero(gains < threshold)
    i = int(below[0]) if below.size else None
    return Knee(x=None if i is None else float(x[i]), index=i, threshold=float(threshold),
                gains=[float(g) for g in gains])
