"""Running a study: every point of the grid, on this machine or spread over a Ray cluster.

Records go to ``<dir>/points.jsonl`` (the grid on the first line, then one record per finished point,
flushed and fsynced as each arrives, whichever executor ran it; the sweep's log, perf.sweep.SweepLog).
``resume=True`` skips the points already there. A point that fails (an exception, a worker that
dies) is recorded with its ``error`` and the study goes on; resuming does not retry it (delete its
line to do so). One process writes a study folder at a time (its ``.lock``).

Executors:
- ``local``: one worker process at a time (spawned, killed with this process), which keeps its model
  load across consecutive points that share it; a worker that dies is replaced for the next point.
- ``ray``: every point is a Ray task asking for ``threads`` CPUs (``num_gpus=1`` with the CUDA
  backend), submitted at once; records are appended in the order they finish. ``address`` is passed
  to ``ray.init`` ("auto" joins a running cluster, "ray://host:10001" a remote one, None starts a
  local one). Ray is optional: ``pip install llmbench[ray]``.
The records (all but ``timing`` and ``environment``) are the same on both: a point's outputs depend only
on its settings.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable

from .. import LLMBenchError
from ..perf.bench import header
from ..perf.sweep import PointsLog, _die_with_parent, _locked
from .grid import Study, point_key


class StudyLog(PointsLog[Study]):
    """A study's ``points.jsonl``: the sweep's log, with a `Study` as its configuration."""

    config_type = "study"

    def config_from_json(self, d: dict) -> Study:
        """The study from the log's first line.

        Raises:
            ValueError: the folder holds a sweep, not a study.
        """
        if d.get("kind") != "study":
            raise ValueError("this folder holds a sweep, not a study")
        return Study.from_json(d)


class StudyFailed(LLMBenchError):
    """Every point of a study failed."""


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()


def run_study(study: Study | None, directory: str, executor: str = "local", address: str | None = None,
              resume: bool = False, progress: Callable[[dict, int, int], None] = lambda r, done, total: None) -> dict:
    """Run (or with ``resume``, continue) ``study`` into ``directory`` and return the summary
    ``{"study": grid, "points": records, "failed": n}`` (also written to ``result.json``)."""
    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', not {executor!r}")
    if study is None and not resume:
        raise ValueError("run_study: a new study needs its grid (None only with resume=True)")
    log = StudyLog(directory)
    if resume and not os.path.exists(log.path):
        log.read()   # raises, naming the folder
    with _locked(directory):
        if resume:
            study, done = log.read()
        else:
            assert study is not None   # checked above
            log.create(study)
            done = {}
        config = study.to_json()
        points = study.points()
        todo = [p for p in points if point_key(p) not in done]
        total = len(points)

        def finished(record: dict) -> None:
            log.append(record)
            done[point_key(record["params"])] = record
            progress(record, sum(point_key(p) in done for p in points), total)

        if todo:
            (_run_local if executor == "local" else _run_ray)(config, todo, finished, address)
        records = [done[point_key(p)] for p in points]
        result = {**header(), "kind": "study", "study": config, "points": records,
                  "failed": sum("error" in r for r in records)}
        with open(os.path.join(directory, "result.json"), "w") as f:
            json.dump(result, f, indent=1)
    if records and result["failed"] == len(records):
        raise StudyFailed(f"every point of the study failed; the first: {records[0]['error']}")
    return result


# ---- local ----

def _init_worker(parent: int) -> None:
    _die_with_parent(parent)


def _call(config: dict, point: dict) -> dict:
    from .point import run_point

    try:
        return run_point(config, point)
    except Exception as e:   # a failed point is a record, never the end of the study
        return {"params": point, "error": _error(e), "traceback": traceback.format_exc(limit=8)}


def _run_local(config: dict, todo: list[dict], finished: Callable[[dict], None], address: str | None) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("spawn")   # no fork of a process that may hold engine threads
    pool = None
    try:
        for point in todo:
            if pool is None:
                pool = ProcessPoolExecutor(1, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),))
            try:
                record = pool.submit(_call, config, point).result()
            except BrokenProcessPool:
                record = {"params": point, "error": "the worker process died running this point (a crash or "
                                                    "the out-of-memory killer)"}
                pool.shutdown(wait=False, cancel_futures=True)
                pool = None
            finished(record)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


# ---- ray ----

def _run_ray(config: dict, todo: list[dict], finished: Callable[[dict], None], address: str | None) -> None:
    try:
        import ray
    except ImportError:
        raise LLMBenchError("the ray executor needs Ray: pip install 'llmbench[ray]' (or pip install ray), "
                            "or run with --executor local") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        remote = ray.remote(_call)
        cuda = config.get("engine", {}).get("backend") == "cuda"
        pending = {}
        for p in todo:
            opts = {"num_cpus": int(p.get("threads") or 1), "max_retries": 0}
            if cuda:
                opts["num_gpus"] = 1
            pending[remote.options(**opts).remote(config, p)] = p
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                point = pending.pop(ref)
                try:
                    record = ray.get(ref)
                except Exception as e:   # the worker died (RayTaskError, WorkerCrashedError, ...)
                    record = {"params": point, "error": f"the Ray task failed: {_error(e)}"}
                finished(record)
    finally:
        if started:
            ray.shutdown()
