"""Any llmbench result as rows of one pandas DataFrame, so runs from different machines, versions and
commands compare in one frame.

``load(paths)`` reads benchmark results (``llmbench bench --json`` output or a saved result.json), sweep
folders, evaluation folders (results.json) and study folders, and returns one row per measurement:

- a benchmark: one row (its config, metrics, bandwidth, memory; each llama-bench test's mean tokens/s
  as ``<test>_tps``, e.g. ``pp512_tps``);
- a sweep: one row per point (its parameters, metrics and bandwidth; a failed point with ``error``);
- an evaluation: one row per task, group and subject (``level``), with each metric's value, standard
  error, 95% interval and count (``acc``, ``acc_stderr``, ``acc_ci95_low``, ``acc_ci95_high``, ``acc_n``);
- a study: one row per point (parameters, metrics, timing).

Every row also has ``kind``, ``source`` (the file), ``llmbench_version``, ``commit``, ``created`` and the
environment flattened into ``env.*`` columns (``env.cpu_model``, ``env.model.sha256``, ...).
Nested values are flattened with dots; lists are kept as they are.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable
from typing import Any

RESULT_FILES = ("result.json", "results.json")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists and other values as they are."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _files(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    out = []
    for item in items:
        item = os.fspath(item)
        matches = sorted(glob.glob(item)) if any(c in item for c in "*?[") else [item]
        if not matches:
            raise FileNotFoundError(f"{item}: no file matches")
        for m in matches:
            if os.path.isdir(m):
                found = [os.path.join(m, f) for f in RESULT_FILES if os.path.exists(os.path.join(m, f))]
                if not found:
                    raise FileNotFoundError(f"{m}: a folder without result.json or results.json (an unfinished "
                                            "sweep or study? finish it with --resume)")
                out.append(found[0])
            elif os.path.exists(m):
                out.append(m)
            else:
                raise FileNotFoundError(f"{m}: no such file or folder")
    return out


def _common(result: dict, source: str, kind: str, environment: dict | None = None) -> dict[str, Any]:
    row = {"kind": kind, "source": source, "llmbench_version": result.get("llmbench_version"),
           "commit": result.get("commit"), "created": result.get("created")}
    row.update(flatten(environment if environment is not None else result.get("environment") or {}, "env."))
    return row


def _bench_rows(result: dict, source: str) -> list[dict]:
    row = _common(result, source, "bench")
    row.update(flatten(result.get("config") or {}, "config."))
    for key in ("metrics", "bandwidth", "memory", "compute", "tokens"):
        row.update(flatten(result.get(key) or {}, "" if key == "metrics" else key + "."))
    for t in result.get("llama_bench") or []:
        row[f"{t['test']}_tps"] = t.get("avg_ts")
        row[f"{t['test']}_tps_stddev"] = t.get("stddev_ts")
    return [row]


def _sweep_rows(result: dict, source: str) -> list[dict]:
    out = []
    for p in result["sweep"]["points"]:
        row = _common(result, source, "sweep", {**(result.get("environment") or {}), **(p.get("environment") or {})})
        row.update(p.get("params") or {})
        row.update(flatten(p.get("metrics") or {}))
        for key in ("bandwidth", "memory"):
            row.update(flatten(p.get(key) or {}, key + "."))
        if "error" in p:
            row["error"] = p["error"]
        out.append(row)
    return out


def _metric_columns(metrics: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for name, m in metrics.items():
        if not isinstance(m, dict):
            row[name] = m
            continue
        row[name] = m.get("value")
        for k in ("stderr", "n", "macro"):
            if k in m:
                row[f"{name}_{k}"] = m[k]
        if isinstance(m.get("ci95"), list) and len(m["ci95"]) == 2:
            row[f"{name}_ci95_low"], row[f"{name}_ci95_high"] = m["ci95"]
    return row


def _eval_rows(result: dict, source: str) -> list[dict]:
    out = []
    for task, t in result["tasks"].items():
        base = _common(result, source, "eval")
        base.update(flatten(result.get("settings") or {}, "settings."))
        base["task"] = task
        levels = [("task", None, t.get("metrics") or {})]
        levels += [("group", g, v.get("metrics", v)) for g, v in (t.get("groups") or {}).items()]
        levels += [("subject", s, v.get("metrics", v)) for s, v in (t.get("subjects") or {}).items()]
        for level, name, metrics in levels:
            out.append({**base, "level": level, "name": name or task, **_metric_columns(metrics)})
    return out


def _study_rows(result: dict, source: str) -> list[dict]:
    out = []
    for p in result["points"]:
        row = _common(result, source, "study", p.get("environment") or {})
        row.update(p.get("params") or {})
        row.update(p.get("metrics") or {})
        row.update(flatten(p.get("timing") or {}, "timing."))
        if "error" in p:
            row["error"] = p["error"]
        out.append(row)
    return out


def rows(result: dict, source: str = "") -> list[dict]:
    """The rows of one result (a parsed result file); the kind is told by its shape."""
    if not isinstance(result, dict):
        raise ValueError(f"{source or 'result'}: not an llmbench result (a JSON object was expected)")
    if result.get("kind") == "study" and "points" in result:
        return _study_rows(result, source)
    if "tasks" in result:
        return _eval_rows(result, source)
    if isinstance(result.get("sweep"), dict) and "points" in result["sweep"]:
        return _sweep_rows(result, source)
    if "config" in result and "environment" in result:
        return _bench_rows(result, source)
    raise ValueError(f"{source or 'result'}: not an llmbench result (no bench config, sweep, tasks or study "
                     "points in it)")


def load(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]):
    """One DataFrame of every result in ``paths``: files, folders holding result.json/results.json, or
    glob patterns (``runs/*``). Columns that a result lacks are NaN/None in its rows."""
    import pandas as pd

    out: list[dict] = []
    for f in _files(paths):
        try:
            with open(f, encoding="utf-8") as fh:
                result = json.load(fh)
        except ValueError as e:
            raise ValueError(f"{f}: not JSON ({e}); was it cut off while being written?") from None
        out.extend(rows(result, f))
    return pd.DataFrame(out)
