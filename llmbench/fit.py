"""Curve fits for sweeps and studies: linear, power law, exponential decay, logistic and saturating
models, model choice by AIC/BIC, decay curves of accuracy by reasoning step, and knees.

Fits are nonlinear least squares in linear space (scipy.optimize.curve_fit), started from a closed-form
guess. Points may carry standard deviations ``sigma``: as relative weights (the covariance is scaled by
the residual variance, the default) or, with ``absolute_sigma=True``, as the known noise of each point
(binomial or sample variance: weighted least squares whose covariance is taken as it is). 95% confidence
intervals use Student's t with n - p degrees of freedom (the normal quantile with absolute sigma).
Each fit carries its residuals, Gaussian log-likelihood, AIC, AICc and BIC, so models fitted to the
same points compare (``compare``). Results are dataclasses whose ``to_dict()`` is JSON-serializable.
Tested in tests/test_fit.py on seeded noisy data with known parameters.
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
    residuals: list[float] | None = None   # y - fit at each point, in the order given
    weights: str = "none"   # "none", "relative" (sigma scaled by the residual variance) or "absolute"
    log_likelihood: float | None = None    # Gaussian; None for an exact fit (infinite)
    aic: float | None = None
    aicc: float | None = None              # AIC corrected for few points; None when n <= k + 1
    bic: float | None = None
    chi2: float | None = None              # sum of squared (residual / sigma), with absolute sigma
    chi2_p: float | None = None            # P(chi2 this large | the model and the sigmas are right)

    def predict(self, x: Sequence[float] | np.ndarray | float) -> np.ndarray:
        """The fitted model's values at ``x``."""
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
        half = _quantile(level, self.dof, self.weights == "absolute") * np.sqrt(np.clip(var, 0, None))
        y = f(x, *p)
        return y - half, y + half

    def to_dict(self) -> dict:
        """The fit as a JSON-serializable dict."""
        return asdict(self)


def _linear(x, a, b):
    return a + b * x


def _power_law(x, a, k):
    return a * np.power(x, k)


def _exp_decay(x, a, tau, c):
    return a * np.exp(-x / tau) + c


def _logistic(x, a, k, x0, c):
    with np.errstate(over="ignore"):   # exp overflows to inf far from x0: y is c there, as it should be
        return c + a / (1.0 + np.exp(k * (x - x0)))


def _saturating(x, a, b):
    return a * x / (b + x)


_MODELS: dict[str, Callable] = {"linear": _linear, "power_law": _power_law, "exp_decay": _exp_decay,
                                "logistic": _logistic, "saturating": _saturating}


def _quantile(level: float, dof: int, normal: bool) -> float:
    """Two-sided quantile for a ``level`` interval: Student's t with ``dof``, or the normal one where the
    noise is known (absolute sigma) rather than estimated from the residuals."""
    return float(stats.norm.ppf(0.5 + level / 2) if normal else stats.t.ppf(0.5 + level / 2, dof))


def _as_xy(x, y, min_points: int, name: str, distinct: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """x and y as float arrays of the same length, finite, at least min_points of them, and (``distinct``,
    for a curve fit) with at least two different x values."""
    x = np.asarray(x, dtype=np.float64).ravel()
    y = np.asarray(y, dtype=np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"{name}: x and y have different lengths ({x.size} and {y.size})")
    if x.size < min_points:
        raise ValueError(f"{name}: needs at least {min_points} points for error estimates, got {x.size}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError(f"{name}: x and y must be finite")
    if distinct and np.ptp(x) == 0:
        raise ValueError(f"{name}: x needs at least two distinct values")
    return x, y


def _fit(model: str, formula: str, names: tuple[str, ...], x: np.ndarray, y: np.ndarray,
         p0: Sequence[float], sigma, absolute_sigma: bool = False) -> FitResult:
    f = _MODELS[model]
    if sigma is not None:
        sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), y.shape)
        if not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
            raise ValueError(f"{model}: sigma must be finite and > 0 at every point")
    elif absolute_sigma:
        raise ValueError(f"{model}: absolute_sigma=True needs sigma")
    if x.size <= len(names):
        raise ValueError(f"{model}: needs at least {len(names) + 1} points for error estimates, got {x.size}")
    with warnings.catch_warnings():
        # curve_fit warns (OptimizeWarning) when it cannot estimate the covariance: we report inf.
        warnings.simplefilter("ignore", optimize.OptimizeWarning)
        try:
            popt, pcov = optimize.curve_fit(f, x, y, p0=p0, sigma=sigma, absolute_sigma=absolute_sigma,
                                            maxfev=20000)
        except RuntimeError as e:
            raise ValueError(f"{model}: the fit did not converge ({e})") from None
    n, dof = x.size, x.size - len(names)
    se = np.sqrt(np.clip(np.diag(pcov), 0, None))
    se = np.where(np.isfinite(se), se, math.inf)
    t = _quantile(0.95, dof, absolute_sigma)
    resid = y - f(x, *popt)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else 1.0
    # Gaussian log-likelihood at the fit. Absolute sigma: the noise is known, k = the parameters.
    # Otherwise the noise scale s (sigma = s * the relative sigmas, or s alone) is one more parameter,
    # at its maximum-likelihood value s^2 = sum((r / sigma)^2) / n.
    rel = np.ones_like(y) if sigma is None else sigma
    wrss = float(np.sum((resid / rel) ** 2))
    chi2 = chi2_p = None
    loglik: float | None
    if absolute_sigma:
        k = len(names)
        loglik = -0.5 * wrss - float(np.sum(np.log(rel))) - 0.5 * n * math.log(2 * math.pi)
        chi2, chi2_p = wrss, float(stats.chi2.sf(wrss, dof))
    else:
        k = len(names) + 1
        s2 = wrss / n
        loglik = (-0.5 * n * (math.log(2 * math.pi * s2) + 1) - float(np.sum(np.log(rel)))) if s2 > 0 else None
    aic = None if loglik is None else 2 * k - 2 * loglik
    return FitResult(model=model, formula=formula,
                     params={n: float(p) for n, p in zip(names, popt)},
                     stderr={n: float(s) for n, s in zip(names, se)},
                     ci95={n: [float(p - t * s), float(p + t * s)] for n, p, s in zip(names, popt, se)},
                     r2=r2, n=int(x.size), dof=int(dof),
                     cov=[[float(v) for v in row] for row in pcov]
                     if np.all(np.isfinite(pcov)) else None,
                     residuals=[float(r) for r in resid],
                     weights="none" if sigma is None else "absolute" if absolute_sigma else "relative",
                     log_likelihood=loglik, aic=aic,
                     aicc=None if aic is None or n - k - 1 <= 0 else aic + 2 * k * (k + 1) / (n - k - 1),
                     bic=None if loglik is None else k * math.log(n) - 2 * loglik,
                     chi2=chi2, chi2_p=chi2_p)


# ---- linear ----

def linear(x, y, sigma=None, absolute_sigma: bool = False) -> FitResult:
    """Fit ``y = a + b * x`` (ordinary or weighted least squares); needs 3+ points."""
    x, y = _as_xy(x, y, 3, "linear", distinct=True)
    b0, a0 = np.polyfit(x, y, 1)
    return _fit("linear", "y = a + b * x", ("a", "b"), x, y, (a0, b0), sigma, absolute_sigma)


# ---- power law ----

def power_law(x, y, sigma=None, relative: bool = False, absolute_sigma: bool = False) -> FitResult:
    """Fit ``y = a * x**k`` by least squares in linear space.

    The start is the straight line through (log x, log y) (exact for noise-free data). Needs x > 0,
    y > 0 and at least 3 points. ``sigma``: optional per-point standard deviations of y (relative
    weights; the covariance is still scaled by the residual variance). ``relative=True`` sets
    ``sigma = y``: noise proportional to the value, as timing noise on throughput usually is (a few
    percent at every batch size); unweighted, the largest batches would dominate the fit and the
    intervals would be wrong (tests/test_fit.py shows both).
    """
    x, y = _as_xy(x, y, 3, "power_law", distinct=True)
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("power_law: x and y must be > 0")
    if relative:
        if sigma is not None:
            raise ValueError("power_law: pass sigma or relative=True, not both")
        sigma = y
    k0, log_a0 = np.polyfit(np.log(x), np.log(y), 1)
    return _fit("power_law", "y = a * x**k", ("a", "k"), x, y, (math.exp(log_a0), k0), sigma, absolute_sigma)


# ---- exponential decay ----

def exp_decay(x, y, sigma=None, absolute_sigma: bool = False) -> FitResult:
    """Fit ``y = a * exp(-x / tau) + c`` (accuracy vs reasoning steps, say); needs 4+ points.

    Start: c just beyond the last/extreme value of y on the side the curve approaches, then the
    straight line through (x, log|y - c|) gives a and tau. ``a`` may come out negative (a rising
    curve that saturates); ``tau`` > 0 is a decay, < 0 a growth.
    """
    x, y = _as_xy(x, y, 4, "exp_decay", distinct=True)
    order = np.argsort(x)
    xs, ys = x[order], y[order]
    span = float(np.ptp(ys)) or 1.0
    falling = ys[0] >= ys[-1]
    c0 = float(ys.min() - 0.05 * span) if falling else float(ys.max() + 0.05 * span)
    d = np.abs(ys - c0)
    slope, intercept = np.polyfit(xs, np.log(d), 1)
    tau0 = -1.0 / slope if slope < 0 else float(np.ptp(xs)) / 2
    a0 = math.exp(intercept) * (1 if falling else -1)
    return _fit("exp_decay", "y = a * exp(-x / tau) + c", ("a", "tau", "c"), x, y, (a0, tau0, c0), sigma,
                absolute_sigma)


# ---- logistic ----

def logistic(x, y, sigma=None, absolute_sigma: bool = False) -> FitResult:
    """Fit ``y = c + a / (1 + exp(k * (x - x0)))``: a step from c + a (x far below x0) to c (far above)
    of width about 4 / |k| around x0 (k > 0 falls when a > 0, as accuracy past a number of steps may);
    needs 5+ points. Start: c and a from the extremes, x0 where y crosses their middle, k from the span.
    """
    x, y = _as_xy(x, y, 5, "logistic", distinct=True)
    order = np.argsort(x)
    xs, ys = x[order], y[order]
    span = float(np.ptp(ys)) or 1.0
    lo, hi = float(ys.min()) - 0.05 * span, float(ys.max()) + 0.05 * span
    falling = ys[:len(ys) // 2].mean() >= ys[len(ys) // 2:].mean()
    mid = (lo + hi) / 2
    cross = np.flatnonzero(np.diff(np.sign(ys - mid)) != 0)
    x0 = float(xs[cross[0]] + xs[cross[0] + 1]) / 2 if cross.size else float(np.median(xs))
    k0 = 4.0 / (float(np.ptp(xs)) / 2)
    p0 = (hi - lo, k0, x0, lo) if falling else (lo - hi, k0, x0, hi)
    return _fit("logistic", "y = c + a / (1 + exp(k * (x - x0)))", ("a", "k", "x0", "c"), x, y, p0, sigma,
                absolute_sigma)


# ---- saturating ----

def saturating(x, y, sigma=None, absolute_sigma: bool = False) -> FitResult:
    """Fit ``y = a * x / (b + x)``: growth that saturates at a, half of it reached at x = b (throughput
    against batch when a fixed cost per step is amortized); needs x > 0 and 3+ points. Start: the
    straight line through (x, x / y), on which the model is exact (x / y = b / a + x / a).
    """
    x, y = _as_xy(x, y, 3, "saturating", distinct=True)
    if np.any(x <= 0) or np.any(y == 0):
        raise ValueError("saturating: x must be > 0 and y nonzero")
    slope, intercept = np.polyfit(x, x / y, 1)
    if slope > 0 and intercept > 0:
        a0, b0 = 1 / slope, intercept / slope
    else:   # the data do not saturate: start from a ceiling twice the largest value
        a0, b0 = float(y.max()) * 2, float(np.median(x))
    return _fit("saturating", "y = a * x / (b + x)", ("a", "b"), x, y, (a0, b0), sigma, absolute_sigma)


# ---- model choice ----

FITTERS: dict[str, Callable[..., FitResult]] = {
    "linear": linear, "power_law": power_law, "exp_decay": exp_decay, "logistic": logistic,
    "saturating": saturating}


@dataclass
class Comparison:
    """Models fitted to the same points, ranked by ``criterion`` (lower is better). ``delta`` is each
    model's criterion minus the best's; ``weight`` its Akaike weight exp(-delta / 2), normalised (the
    relative likelihood that it is the best of those fitted). ``failed`` holds the models that could
    not be fitted, with the reason (too few points, x <= 0 for a power law, no convergence)."""

    criterion: str
    ranking: list[str]
    fits: dict[str, FitResult]
    delta: dict[str, float]
    weight: dict[str, float]
    failed: dict[str, str]

    @property
    def best(self) -> FitResult | None:
        """The fit ranked first (lowest criterion), or None when no model could be fitted."""
        return self.fits[self.ranking[0]] if self.ranking else None

    def to_dict(self) -> dict:
        """The comparison as a JSON-serializable dict."""
        return {"criterion": self.criterion, "ranking": self.ranking, "delta": self.delta, "weight": self.weight,
                "failed": self.failed, "fits": {k: f.to_dict() for k, f in self.fits.items()}}


def compare(x, y, models: Sequence[str] = ("linear", "exp_decay", "logistic", "power_law", "saturating"),
            sigma=None, absolute_sigma: bool = False, criterion: str = "aicc") -> Comparison:
    """Fit each of ``models`` (names in ``FITTERS``) to the same points and rank them by ``criterion``:
    "aicc" (AIC corrected for few points: the default, since curves here have a handful of points),
    "aic" or "bic". A model whose criterion is undefined (an exact fit, or too few points for AICc)
    is fitted but not ranked."""
    if criterion not in ("aic", "aicc", "bic"):
        raise ValueError(f"compare: criterion must be aic, aicc or bic, not {criterion!r}")
    unknown = [m for m in models if m not in FITTERS]
    if unknown:
        raise ValueError(f"compare: unknown model(s) {', '.join(unknown)}; known: {', '.join(FITTERS)}")
    fits: dict[str, FitResult] = {}
    failed: dict[str, str] = {}
    for m in models:
        try:
            fits[m] = FITTERS[m](x, y, sigma=sigma, absolute_sigma=absolute_sigma)
        except ValueError as e:
            failed[m] = str(e)
    scored = {m: getattr(f, criterion) for m, f in fits.items() if getattr(f, criterion) is not None}
    for m in fits:
        if m not in scored:
            failed[m] = f"{m}: {criterion} undefined (an exact fit, or too few points)"
    ranking = sorted(scored, key=scored.__getitem__)
    best = scored[ranking[0]] if ranking else 0.0
    delta = {m: scored[m] - best for m in ranking}
    z = sum(math.exp(-d / 2) for d in delta.values())
    return Comparison(criterion=criterion, ranking=ranking, fits={m: fits[m] for m in ranking},
                      delta=delta, weight={m: math.exp(-d / 2) / z for m, d in delta.items()}, failed=failed)


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
        """The knee as a JSON-serializable dict."""
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


@dataclass
class Kneedle:
    """The knee of a curve by Kneedle (Satopaa et al., 2011, offline). ``x``/``y``/``index`` (among the
    points sorted by x) are None where the curve has none at this sensitivity. ``difference`` is the
    difference curve over the sorted points, in the orientation where the knee is its maximum."""

    x: float | None
    y: float | None
    index: int | None
    curve: str
    direction: str
    sensitivity: float
    log_x: bool
    difference: list[float]

    def to_dict(self) -> dict:
        """The knee as a JSON-serializable dict."""
        return asdict(self)


def kneedle(x, y, curve: str = "concave", direction: str = "increasing", sensitivity: float = 1.0,
            log_x: bool = False) -> Kneedle:
    """The knee (concave curves) or elbow (convex curves) of y(x) by Kneedle.

    Sort by x (on log2 x with ``log_x``, the natural axis for batch sizes 1, 2, 4, ...), scale x and y
    to [0, 1], and turn the curve into a concave increasing one (flip y for convex decreasing curves,
    x for concave decreasing ones, both for convex increasing ones). The difference curve
    d = y - x then peaks where the curve bends most away from the straight line through its ends.
    Each local maximum i of d sets a threshold d_i - sensitivity * (mean spacing of the scaled x);
    the knee is the first local maximum after which d falls below its threshold before the next
    local maximum rises. Higher ``sensitivity`` asks for a more pronounced knee. Where d never falls
    that far (the curve still bends at its last point) there is no knee: ``x`` is None. Unlike
    ``knee`` (the doubling rule), it needs no threshold on the gain, only the shape; both see the
    points as given, so pass medians of repetitions.
    """
    if curve not in ("concave", "convex"):
        raise ValueError(f"kneedle: curve must be 'concave' or 'convex', not {curve!r}")
    if direction not in ("increasing", "decreasing"):
        raise ValueError(f"kneedle: direction must be 'increasing' or 'decreasing', not {direction!r}")
    if not sensitivity >= 0:
        raise ValueError("kneedle: sensitivity must be >= 0")
    x, y = _as_xy(x, y, 3, "kneedle")
    if log_x and np.any(x <= 0):
        raise ValueError("kneedle: log_x needs x > 0")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if np.any(np.diff(x) == 0):
        raise ValueError("kneedle: x values must be distinct")
    if np.ptp(y) == 0:
        raise ValueError("kneedle: y is constant; a flat curve has no knee")
    u = np.log2(x) if log_x else x
    xn = (u - u[0]) / (u[-1] - u[0])
    yn = (y - y.min()) / np.ptp(y)
    flip_x = (curve == "concave") == (direction == "decreasing")   # concave decreasing, convex increasing
    flip_y = curve == "convex"
    if flip_x:
        xn, yn = 1 - xn[::-1], yn[::-1]
    if flip_y:
        yn = 1 - yn
    d = yn - xn                                   # over the points in the concave increasing orientation
    step = float(np.mean(np.diff(xn)))
    peaks = [i for i in range(1, d.size - 1) if d[i - 1] < d[i] >= d[i + 1]]
    found = None
    for j, i in enumerate(peaks):
        threshold = d[i] - sensitivity * step
        stop = peaks[j + 1] if j + 1 < len(peaks) else d.size
        if np.any(d[i + 1:stop] < threshold):
            found = i
            break
    index = None if found is None else (d.size - 1 - found if flip_x else found)
    diff = d[::-1] if flip_x else d               # back in the order of the sorted points
    return Kneedle(x=None if index is None else float(x[index]), y=None if index is None else float(y[index]),
                   index=index, curve=curve, direction=direction, sensitivity=float(sensitivity), log_x=log_x,
                   difference=[float(v) for v in diff])


# ---- decay curves: accuracy by number of reasoning steps ----

def binomial_sigma(correct, n) -> np.ndarray:
    """Standard deviation of an observed proportion correct / n for weighted fits: sqrt(p (1 - p) / n) at
    Laplace's p = (correct + 1) / (n + 2), so that 0 of n and n of n still carry their uncertainty
    instead of a zero that would pin the fit to them."""
    k, n = np.asarray(correct, dtype=np.float64), np.asarray(n, dtype=np.float64)
    p = (k + 1) / (n + 2)
    return np.sqrt(p * (1 - p) / n)


@dataclass
class DecayCurve:
    """Accuracy against the number of reasoning steps for one group of answers (``"pooled"`` or a
    subject): per step count kept, the answers, how many were right, the accuracy and its 95% Wilson
    interval; the step counts ``dropped`` for having fewer than ``min_count`` answers; and the models
    fitted by weighted least squares (binomial sigma, absolute) and compared (``fit.compare``).
    ``note`` says why nothing was fitted, where nothing was."""

    group: str
    steps: list[int]
    n: list[int]
    correct: list[int]
    accuracy: list[float]
    ci95: list[list[float]]
    dropped: dict[int, int]          # step count -> answers, where too few to keep
    min_count: int
    comparison: Comparison | None
    note: str | None = None

    @property
    def best(self) -> FitResult | None:
        """The best-ranked fit of the curve, or None without a comparison (fewer than 3 step counts)."""
        return None if self.comparison is None else self.comparison.best

    def to_dict(self) -> dict:
        """The curve as a JSON-serializable dict."""
        d = {k: v for k, v in asdict(self).items() if k != "comparison"}
        d["dropped"] = {str(k): v for k, v in self.dropped.items()}
        d["comparison"] = None if self.comparison is None else self.comparison.to_dict()
        return d


def decay_curve(steps, correct, group: str = "pooled", min_count: int = 10,
                models: Sequence[str] = ("exp_decay", "logistic", "linear"), criterion: str = "aicc") -> DecayCurve:
    """The decay curve of one group's answers: ``steps[i]`` reasoning steps in answer i, ``correct[i]``
    whether it was right. Step counts with fewer than ``min_count`` answers are dropped (their accuracy
    is too noisy to place a point) and listed; the rest are fitted with each of ``models`` weighted by
    their binomial sigma and compared by ``criterion``. With too few step counts left to fit any model,
    the table is still returned, with ``note`` saying so."""
    from .eval.metrics import wilson

    s = np.asarray(steps).ravel()
    c = np.asarray(correct).ravel()
    if s.shape != c.shape:
        raise ValueError(f"decay_curve: steps and correct have different lengths ({s.size} and {c.size})")
    if s.size and (not np.all(np.isfinite(s.astype(np.float64))) or np.any(s < 0) or np.any(s != np.round(s))):
        raise ValueError("decay_curve: steps must be whole numbers >= 0")
    if min_count < 1:
        raise ValueError("decay_curve: min_count must be >= 1")
    s = s.astype(np.int64)
    c = c.astype(bool)
    xs, ns, ks, dropped = [], [], [], {}
    for v in np.unique(s):
        m = s == v
        if m.sum() < min_count:
            dropped[int(v)] = int(m.sum())
        else:
            xs.append(int(v))
            ns.append(int(m.sum()))
            ks.append(int(c[m].sum()))
    acc = [k / n for k, n in zip(ks, ns)]
    ci = []
    for k, n in zip(ks, ns):
        lo_hi = wilson(k, n)
        assert lo_hi is not None   # n >= min_count >= 1
        ci.append(list(lo_hi))
    comparison, note = None, None
    if len(xs) < 3:
        note = (f"{group}: {len(xs)} step count(s) with at least {min_count} answers; a fit needs 3 or more "
                f"({len(dropped)} dropped for too few answers)")
    else:
        comparison = compare(xs, acc, models=models, sigma=binomial_sigma(ks, ns), absolute_sigma=True,
                             criterion=criterion)
        if not comparison.ranking:
            note = f"{group}: no model could be fitted to {len(xs)} step counts"
    return DecayCurve(group=group, steps=xs, n=ns, correct=ks, accuracy=acc, ci95=ci, dropped=dropped,
                      min_count=min_count, comparison=comparison, note=note)


def decay_curves(steps, correct, groups, min_count: int = 10,
                 models: Sequence[str] = ("exp_decay", "logistic", "linear"),
                 criterion: str = "aicc") -> dict[str, DecayCurve]:
    """``decay_curve`` pooled over all answers (key ``"pooled"``) and for each group (subject) of
    ``groups[i]``, the group of answer i."""
    g = np.asarray(groups).ravel()
    s, c = np.asarray(steps).ravel(), np.asarray(correct).ravel()
    if not (g.size == s.size == c.size):
        raise ValueError(f"decay_curves: steps, correct and groups have different lengths "
                         f"({s.size}, {c.size}, {g.size})")
    out = {"pooled": decay_curve(s, c, "pooled", min_count, models, criterion)}
    for name in sorted(set(g.tolist())):
        m = g == name
        out[str(name)] = decay_curve(s[m], c[m], str(name), min_count, models, criterion)
    return out
