"""Aggregation of per-sample scores into subject, group and task figures, with lm-evaluation-harness's
standard errors.

- A subject's metric is the mean over its documents; its standard error lm-eval's ``mean_stderr``:
  the sample standard deviation (n - 1) over sqrt(n).
- A group (MMLU's stem, humanities, ...) and the task over its groups are weighted by document count
  (lm-eval's ``weight_by_size: True``), so the task figure is the mean over all its documents
  (micro average); their standard errors are lm-eval's ``pooled_sample_stderr`` of the members'.
  The macro average (each subject counting once) is given beside it.
- Wilson score intervals (95%) for proportions, which stay inside [0, 1] at small counts; for a
  mean of other values (MT-Bench's ratings, pass@k from several samples) the normal interval, the
  value +- 1.96 standard errors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Z95 = 1.959963984540054


def mean_stderr(values: Sequence[float]) -> float | None:
    """Standard error of the mean (sample standard deviation, ddof=1, over sqrt(n)); None for fewer than 2 values."""
    n = len(values)
    if n < 2:
        return None
    return float(np.std(values, ddof=1) / math.sqrt(n))


def pooled_sample_stderr(stderrs: Sequence[float], sizes: Sequence[int]) -> float | None:
    """lm-eval's pooled standard error of members weighted by size (matches the standard error of
    all their samples pooled)."""
    if len(sizes) < 1 or sum(sizes) - len(sizes) <= 0 or any(s is None for s in stderrs):
        return None
    var = sum((n - 1) * se**2 * n for n, se in zip(sizes, stderrs)) / (sum(sizes) - len(sizes))
    return float(math.sqrt(var / sum(sizes)))


def wilson(k: float, n: int, z: float = 1.959963984540054) -> tuple[float, float] | None:
    """Wilson score interval of a proportion k/n (95% by default)."""
    if n <= 0:
        return None
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    # At k = 0 (k = n) the bound is exactly 0 (1); rounding can leave it 1e-17 off, outside the estimate.
    return (0.0 if k == 0 else max(0.0, c - h), 1.0 if k == n else min(1.0, c + h))


def paired_difference_ci(b: int, c: int, n: int, z: float = 1.959963984540054) -> tuple[float, float] | None:
    """Interval of the difference of two paired proportions: n questions scored twice, b right only the second
    time, c right only the first (Agresti and Min 2005: the Wald interval after adding 1/2 to every cell of
    the 2x2 table). Unlike the plain Wald interval it keeps a width when no question changed (b = c = 0),
    where the sample's own spread is 0 but 100 questions bound the change only to about +-0.02."""
    if n <= 0:
        return None
    b2, c2, n2 = b + 0.5, c + 0.5, n + 2
    d = (b2 - c2) / n2
    se = math.sqrt(max(b2 + c2 - (b2 - c2) ** 2 / n2, 0.0)) / n2
    return (max(-1.0, d - z * se), min(1.0, d + z * se))


def _entry(values: list[float]) -> dict[str, Any]:
    return {"value": float(np.mean(values)) if values else None, "stderr": mean_stderr(values), "n": len(values)}


def aggregate(records: Sequence[dict[str, Any]], metrics: Sequence[str], groups: dict[str, str],
              task: str, means: Sequence[str] = ()) -> dict[str, Any]:
    """{"subjects": {s: {metric: {value, stderr, n}}}, "groups": {...}, "task": {metric: {value,
    stderr, n, macro, ci95}}} from per-sample records (each with "subject" and "metrics"). A metric whose
    values are all 0 and 1 gets a Wilson interval, unless ``means`` names it (ratings that happen to be 0 or 1)."""
    by_subject: dict[str, dict[str, list[float]]] = {}
    for r in records:
        d = by_subject.setdefault(r["subject"], {m: [] for m in metrics})
        for m in metrics:
            if m in r["metrics"] and r["metrics"][m] is not None:
                d[m].append(float(r["metrics"][m]))
    subjects = {s: {m: _entry(v) for m, v in d.items()} for s, d in by_subject.items()}

    def combine(members: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
        out = {}
        for m in metrics:
            parts = [e[m] for e in members.values() if e[m]["n"]]
            sizes = [p["n"] for p in parts]
            n = sum(sizes)
            value = sum(p["value"] * p["n"] for p in parts) / n if n else None
            out[m] = {"value": value, "stderr": pooled_sample_stderr([p["stderr"] for p in parts], sizes),
                      "n": n, "macro": float(np.mean([p["value"] for p in parts])) if parts else None}
        return out

    group_members: dict[str, dict[str, Any]] = {}
    for s, e in subjects.items():
        if s in groups:
            group_members.setdefault(groups[s], {})[s] = e
    group_res = {g: combine(mem) for g, mem in sorted(group_members.items())}
    # The task over its groups (as lm-eval's mmlu over mmlu_stem, ...), else over its subjects.
    top_members = ({g: {m: {k: v for k, v in e[m].items() if k != "macro"} for m in metrics}
                    for g, e in group_res.items()} if group_res and len(group_members) and
                   all(s in groups for s in subjects) else subjects)
    top = combine(top_members)
    for m in metrics:
        per_subject = [e[m]["value"] for e in subjects.values() if e[m]["n"]]
        top[m]["macro"] = float(np.mean(per_subject)) if per_subject else None   # none when no document has it
        vals = [e[m]["value"] * e[m]["n"] for e in subjects.values() if e[m]["n"]]
        n = top[m]["n"]
        if n and m not in means and _is_proportion(records, m):
            ci = wilson(sum(vals), n)
        elif n and top[m]["stderr"] is not None:      # a mean of other values (a rating, pass@k of n samples)
            ci = (top[m]["value"] - Z95 * top[m]["stderr"], top[m]["value"] + Z95 * top[m]["stderr"])
        else:
            ci = None
        top[m]["ci95"] = list(ci) if ci else None
    return {"task": task, "subjects": subjects, "groups": group_res, "metrics": top}


def _is_proportion(records: Sequence[dict[str, Any]], m: str) -> bool:
    return all(r["metrics"].get(m) in (0.0, 1.0, None) for r in records)
