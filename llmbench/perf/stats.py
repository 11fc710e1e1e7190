"""Summary statistics of timing samples: mean, median, std, min, max and percentiles.

Percentiles use NumPy's default linear interpolation (``np.percentile(x, p)``), the method vLLM's
serving benchmark reports, so a p99 here and a p99 there mean the same thing. Tested by hand-computed
cases in tests/test_metrics.py.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)


def percentile_key(p: float) -> str:
    """The JSON key of percentile ``p``: ``p99`` for 99, ``p99.9`` for 99.9 (vLLM's spelling)."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p}"


def _check_percentiles(percentiles: Iterable[float]) -> list[float]:
    ps = [float(p) for p in percentiles]
    for p in ps:
        if not 0 <= p <= 100:
            raise ValueError(f"percentile {p} is outside [0, 100]")
    return ps


def summarize(
    samples: Sequence[float] | np.ndarray,
    percentiles: Iterable[float] = DEFAULT_PERCENTILES,
    ddof: int = 1,
) -> dict:
    """Summary of ``samples`` as a JSON-serializable dict.

    Keys: ``count``, ``mean``, ``median``, ``std``, ``min``, ``max``, one ``p<P>`` per percentile
    (``p50``, ``p99.9``, ...) and ``samples`` (the raw values as a list of floats).

    ``std`` is the sample standard deviation (``ddof=1``) by default and 0.0 for a single sample.
    Pass ``ddof=0`` for the population standard deviation (what vLLM's ``std_*_ms`` report).

    Empty input gives ``count`` 0, ``samples`` [] and ``None`` for every statistic: None is what
    JSON can carry (NaN is not valid JSON) and it cannot be mistaken for a measured 0.
    Non-finite samples raise ValueError: a NaN latency is a bug upstream, not a number to average.
    """
    ps = _check_percentiles(percentiles)
    x = np.asarray(samples, dtype=np.float64).ravel()
    out: dict = {"count": int(x.size)}
    if x.size == 0:
        out.update(mean=None, median=None, std=None, min=None, max=None)
        out.update({percentile_key(p): None for p in ps})
        out["samples"] = []
        return out
    if not np.all(np.isfinite(x)):
        raise ValueError("summarize: samples contain NaN or infinity")
    out["mean"] = float(np.mean(x))
    out["median"] = float(np.median(x))
    out["std"] = float(np.std(x, ddof=ddof)) if x.size > ddof else 0.0
    out["min"] = float(np.min(x))
    out["max"] = float(np.max(x))
    for p in ps:
        out[percentile_key(p)] = float(np.percentile(x, p))
    out["samples"] = x.tolist()
    return out


def sample_std(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0.0 for fewer than two values."""
    n = len(values)
    if n < 2:
        return 0.0
    m = math.fsum(values) / n
    return math.sqrt(math.fsum((v - m) ** 2 for v in values) / (n - 1))
