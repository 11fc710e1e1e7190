"""Parameter sweeps of the latency scenario: batch sizes, input (context) lengths, models or weight
types, KV dtypes and thread counts in one command, with a power-law fit of throughput against batch.

Every point is written to ``<dir>/points.jsonl`` the moment it finishes (one JSON line, flushed and
fsynced), after a first line that holds the whole sweep's configuration. An interrupted sweep keeps
its finished points; ``run_sweep(..., resume=True)`` (``llmbench bench --resume DIR``) reads the
configuration back from that file, drops a last line cut off mid-write, and runs only the points
that are missing. When all points exist it writes ``result.json`` (docs/result.schema.json, with a
``sweep`` section), ``points.csv``, ``report.md`` and the PNG plots (llmbench/perf/report.py).

Axes run outermost first in the order of ``AXES``: the model is loaded once per (model, KV dtype,
threads), in a process of its own, and the batch size changes fastest. A point whose process dies
(a crash, the OOM killer, a model file that cannot load) is recorded with the reason instead of
metrics, and the sweep goes on; resuming does not retry it (delete its line to do so).

One process writes a sweep folder at a time: it holds a lock on ``<dir>/.lock`` while it runs, and a
second writer (two ``--resume`` of one folder) is refused. Its workers die with it, so a sweep killed
with ``kill -9`` leaves no process measuring and appending behind it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .. import LLMBenchError, fit
from .config import BenchConfig, config_json
from .local import check_kv_fits, environment, latency_prompts, latency_run, load, model_context, timing_overhead
from .openai_load import openai_latency
from .provenance import header, peak_rss_bytes
from .roofline import membw_elsewhere, reference_bandwidth
from .schema import validate

AXES = ("model", "kv_dtype", "threads", "input_len", "request_rate", "batch")
LOG_NAME = "points.jsonl"
LOCK_NAME = ".lock"
LOG_FORMAT = 1


@dataclass
class Sweep:
    """A base configuration and the values of each swept axis (axes not named keep the base's)."""

    base: BenchConfig
    axes: dict[str, list]
    knee_threshold: float = 0.1

    def __post_init__(self) -> None:
        # the points run in child processes from another folder: files named relative to the caller's
        # folder are made absolute here, before the configuration is saved
        self.base = dataclasses.replace(self.base, model=_absolute(self.base.model),
                                        dataset=self.base.dataset and os.path.abspath(self.base.dataset))
        if "model" in self.axes:
            self.axes = {**self.axes, "model": [_absolute(m) for m in self.axes["model"]]}
        for name, values in self.axes.items():
            if name not in AXES:
                raise ValueError(f"cannot sweep {name!r}; sweepable: {', '.join(AXES)}")
            if not values:
                raise ValueError(f"sweep axis {name} has no values")
            if len(set(map(str, values))) != len(values):
                raise ValueError(f"sweep axis {name} repeats a value: {values}")
        self.axes = {a: list(self.axes[a]) for a in AXES if a in self.axes}   # run order
        if self.base.backend == "cpu" and "request_rate" in self.axes:
            raise ValueError("request rates apply to --backend openai (llmbench's engine starts a batch at once)")
        if self.base.backend == "openai" and ({"kv_dtype", "threads"} & set(self.axes)):
            raise ValueError("--kv-dtype and --threads are the server's settings with --backend openai")
        if any(not math.isfinite(r) or r <= 0 for r in self.axes.get("request_rate", [])):
            raise ValueError("a request-rate sweep needs finite rates > 0 (leave --request-rate out for all at once)")
        if self.base.backend not in ("cpu", "openai"):
            raise ValueError(f"sweeps run on --backend cpu or openai, not {self.base.backend}")
        if not 0 < self.knee_threshold < 10:
            raise ValueError("--knee-threshold must be a fraction such as 0.1")
        for p in self.points():
            if self.config(p).batch < 1:
                raise ValueError("every sweep point needs --batch >= 1")
            self.config(p).check()

    def check_memory(self) -> None:
        """Refuse, before anything runs, a point whose KV cache cannot fit this machine's memory (one
        oversized value would otherwise fail every point of its model load, sized for the largest)."""
        if self.base.backend != "cpu":
            return
        for p in self.points():
            c = self.config(p)
            ctx, _ = _context_limit(self, [p])
            check_kv_fits(c.model, c.kv_dtype, ctx, f"sweep point {_label(p)} (--input-len {c.input_len}, "
                          f"--output-len {c.output_len})")

    def points(self) -> list[dict]:
        """Every point's parameters, in run order."""
        names = [a for a in AXES if a in self.axes]
        return [dict(zip(names, combo)) for combo in itertools.product(*(self.axes[a] for a in names))]

    def config(self, params: dict) -> BenchConfig:
        """The benchmark configuration of one point: the base with ``params`` applied (and no pp/tg tests)."""
        return dataclasses.replace(self.base, **params, pp=0, tg=0)

    def to_json(self) -> dict:
        """The sweep as the first line of its log holds it."""
        return {"kind": "sweep", "format": LOG_FORMAT, "base": config_json(self.base), "axes": self.axes,
                "knee_threshold": self.knee_threshold}

    @classmethod
    def from_json(cls, d: dict) -> Sweep:
        """The sweep from its log's first line.

        Raises:
            ValueError: the object is not an llmbench sweep of this log format.
        """
        if d.get("kind") != "sweep" or d.get("format") != LOG_FORMAT:
            raise ValueError("not an llmbench sweep log (its first line must be the sweep's configuration)")
        base = dict(d["base"])
        for k in ("percentiles", "depth"):
            base[k] = tuple(base[k])
        if base.get("request_rate") is None:
            base["request_rate"] = float("inf")
        known = {f.name for f in dataclasses.fields(BenchConfig)}
        return cls(BenchConfig(**{k: v for k, v in base.items() if k in known}), d["axes"], d["knee_threshold"])


def _absolute(model: str) -> str:
    """A model that names an existing file, as an absolute path; a dummy preset as it is."""
    return os.path.abspath(model) if os.path.exists(model) else model


def point_key(params: dict) -> str:
    """A sweep point's parameters as a canonical string (sorted JSON): the key it is logged and resumed by."""
    return json.dumps(params, sort_keys=True)


# ---- the log ----

class _Config(Protocol):
    def to_json(self) -> dict: ...


C = TypeVar("C", bound=_Config)


class PointsLog(Generic[C]):
    """``points.jsonl``: a configuration (of type ``C``: a `Sweep`, or a study's grid), then one finished
    point per line. `SweepLog` keeps a sweep's; llmbench.study.runner.StudyLog a study's."""

    config_type = "points"

    def __init__(self, directory: str):
        self.dir = directory
        self.path = os.path.join(directory, LOG_NAME)

    def config_from_json(self, d: dict) -> C:
        """The configuration from the log's first line."""
        raise NotImplementedError

    def create(self, sweep: C) -> None:
        """Start the log with the configuration line.

        Raises:
            FileExistsError: the folder already holds a log (resume it instead).
        """
        os.makedirs(self.dir, exist_ok=True)
        if os.path.exists(self.path):
            raise FileExistsError(f"{self.path} exists: continue it with --resume {self.dir}, "
                                  "or choose another --out-dir")
        self._write(sweep.to_json(), mode="x")

    def read(self) -> tuple[C, dict[str, dict]]:
        """The sweep and its finished points by key. A last line without its newline (the process
        died while writing it) is cut off the file; any other bad line is an error."""
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"{self.path}: no {self.config_type} to resume here")
        with open(self.path, "rb") as f:
            data = f.read()
        lines = data.split(b"\n")
        tail = lines.pop()   # b"" when the file ends with a newline
        if tail:
            with open(self.path, "r+b") as f:
                f.truncate(len(data) - len(tail))
        if not lines:
            raise ValueError(f"{self.path}: the {self.config_type}'s configuration line is missing")
        try:
            sweep = self.config_from_json(json.loads(lines[0]))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{self.path}:1: {e}") from None
        done = {}
        for i, line in enumerate(lines[1:], 2):
            try:
                rec = json.loads(line)
                done[point_key(rec["params"])] = rec
            except (ValueError, KeyError, TypeError):
                raise ValueError(f"{self.path}:{i}: not a {self.config_type} point; the file was edited or damaged "
                                 "(delete that line to re-run its point)") from None
        return sweep, done

    def append(self, record: dict) -> None:
        """Append one finished point's record, flushed and fsynced."""
        self._write(record, mode="a")

    def _write(self, obj: dict, mode: str) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with open(self.path, mode) as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


class SweepLog(PointsLog[Sweep]):
    """``points.jsonl``: the sweep's configuration, then one finished point per line (`PointsLog`)."""

    config_type = "sweep"

    def config_from_json(self, d: dict) -> Sweep:
        """The sweep from the log's first line."""
        return Sweep.from_json(d)


# ---- running ----

def _context_limit(sweep: Sweep, group: list[dict]) -> tuple[int, int]:
    """(ctx, max batch) a model load must hold for every point of its group."""
    ctx, batch = 0, 0
    for p in group:
        c = sweep.config(p)
        if c.dataset:
            need = model_context(c.model)
        else:
            need = c.input_len + c.output_len + 8
        ctx, batch = max(ctx, need), max(batch, c.batch)
    return ctx, batch


def _groups(sweep: Sweep) -> list[list[dict]]:
    """The points by model load (model, KV dtype, threads), in run order."""
    groups: dict[tuple, list[dict]] = {}
    for p in sweep.points():
        c = sweep.config(p)
        groups.setdefault((c.model, c.kv_dtype, c.threads), []).append(p)
    return list(groups.values())


def _label(p: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in p.items())


def _run_group(sweep: Sweep, log: SweepLog, group: list[dict], done: dict[str, dict],
               progress: Callable[[str], None], on_point: Callable[[dict], None], bw: dict | None = None) -> None:
    """Run the points of one group that are not in ``done``, in this process, appending each."""
    todo = [p for p in group if point_key(p) not in done]
    if not todo:
        return
    if sweep.base.backend == "openai":
        for p in todo:
            lat = openai_latency(sweep.config(p), lambda m: progress(f"{_label(p)}: {m}"))
            record = {"kind": "point", "params": p, "environment": lat["environment"], "metrics": lat["metrics"],
                      "output_throughput_runs": lat["output_throughput_runs"], "bandwidth": None,
                      "errors": lat["errors"], "requests": lat["requests"]}
            log.append(record)
            on_point(record)
        return
    first = sweep.config(todo[0])
    ctx, max_batch = _context_limit(sweep, group)
    progress(f"loading {first.model}")
    llm = load(first, ctx, max_batch)
    tokenize = llm.tokenizer.encode if llm.tokenizer is not None else None
    bw = bw or reference_bandwidth(llm)   # the device's copy bandwidth for a CUDA sweep, not the host's
    for p in todo:
        cfg = sweep.config(p)
        prompts = latency_prompts(cfg, tokenize, llm.info["vocab"], ctx)
        lat = latency_run(llm, cfg, prompts, lambda m: progress(f"{_label(p)}: {m}"), bw)
        record = {"kind": "point", "params": p, "environment": environment(llm, cfg),
                  "metrics": lat["metrics"], "output_throughput_runs": lat["output_throughput_runs"],
                  "bandwidth": lat.get("bandwidth"),
                  "memory": {**{k: v for k, v in llm.memory().items() if k in ("weights", "kv_cache", "scratch")},
                             "peak_rss": peak_rss_bytes()},   # the process's peak so far
                  "requests": lat["requests"]}
        if lat.get("bandwidth"):
            record["timing_overhead"] = timing_overhead(llm, lat["bandwidth"]["step_s"], cfg.batch)
        log.append(record)
        on_point(record)


def _run_group_isolated(sweep: Sweep, log: SweepLog, gi: int, done: dict[str, dict],
                        progress: Callable[[str], None], on_point: Callable[[dict], None]) -> None:
    """Run group ``gi`` in a child process (``python -m llmbench.perf.sweep DIR GROUP``). If the
    child dies (a crash, the kernel's OOM killer, an error loading the model), the point it was
    running is recorded as failed with the reason, and a new child continues with the next point:
    one bad point never costs the sweep its other points."""
    import signal
    import subprocess
    import sys
    import tempfile

    group = _groups(sweep)[gi]
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    threads = sweep.config(group[0]).threads or os.cpu_count() or 1
    bw = json.dumps(membw_elsewhere(threads)) if sweep.base.backend == "cpu" else "null"
    while any(point_key(p) not in done for p in group):
        with tempfile.TemporaryFile(mode="w+") as err:
            proc = subprocess.Popen([sys.executable, "-m", "llmbench.perf.sweep", os.path.abspath(log.dir), str(gi), bw,
                                     str(os.getpid())], stdout=subprocess.PIPE, stderr=err, text=True, cwd=here)
            assert proc.stdout is not None   # stdout=PIPE
            try:
                for line in proc.stdout:
                    kind, _, rest = line.rstrip("\n").partition("\t")
                    if kind == "progress":
                        progress(rest)
                    elif kind == "point":
                        on_point({"params": json.loads(rest)})   # the record itself is read back at the end
                rc = proc.wait()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if rc == 0:
                continue
            err.seek(0)
            tail = err.read().strip().splitlines()
        how = f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
        reason = next((ln for ln in reversed(tail) if ln.strip()), "") if tail else ""
        failed = next(p for p in group if point_key(p) not in done)
        record = {"kind": "point", "params": failed, "error": f"the point's process died ({how})"
                  + (f": {reason.strip()}" if reason else "")}
        log.append(record)
        done[point_key(failed)] = record
        on_point(record)


def run_sweep(sweep: Sweep | None, directory: str, resume: bool = False,
              progress: Callable[[str], None] = lambda s: None,
              advance: Callable[[int, int], None] = lambda done, total: None, isolate: bool = True) -> dict:
    """Run (or, with ``resume``, continue) a sweep into ``directory``; return the schema-valid
    summary result. ``isolate``: each model load runs in its own process (see
    ``_run_group_isolated``); False runs everything here (faster to start, for tiny sweeps)."""
    log = SweepLog(directory)
    if not resume:
        if sweep is None:
            raise ValueError("run_sweep: a new sweep needs its Sweep (None only with resume=True)")
        sweep.check_memory()
    elif not os.path.exists(log.path):
        log.read()   # raises, naming the folder, before a lock file is left there
    with _locked(directory):
        return _run_sweep_locked(sweep, log, resume, progress, advance, isolate)


class SweepBusy(LLMBenchError):
    """Another process is writing the sweep folder."""


@contextlib.contextmanager
def _locked(directory: str) -> Iterator[None]:
    """Hold an exclusive lock on ``directory`` (flock on DIR/.lock, released when this process ends,
    however it ends): a second writer is refused rather than measuring the same points beside the
    first while both compete for the cores. The file holds the writer's process id for the message."""
    import fcntl

    os.makedirs(directory, exist_ok=True)
    f = open(os.path.join(directory, LOCK_NAME), "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "?"
        f.close()
        raise SweepBusy(f"{directory} is being written by another llmbench (process {holder}); wait for it to "
                        "finish, or stop it and continue with --resume") from None
    try:
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield
    finally:
        f.close()


def _run_sweep_locked(sweep: Sweep | None, log: SweepLog, resume: bool, progress: Callable[[str], None],
                      advance: Callable[[int, int], None], isolate: bool) -> dict:
    directory = log.dir
    if resume:
        sweep, done = log.read()
    else:
        assert sweep is not None   # run_sweep checked
        log.create(sweep)
        done = {}
    points = sweep.points()
    total = len(points)

    def on_point(record: dict) -> None:
        done[point_key(record["params"])] = record
        advance(sum(point_key(q) in done for q in points), total)

    advance(sum(point_key(p) in done for p in points), total)
    for gi, group in enumerate(_groups(sweep)):
        if isolate:
            _run_group_isolated(sweep, log, gi, done, progress, on_point)
        else:
            _run_group(sweep, log, group, done, progress, on_point)
    _, done = log.read()
    result = summarize(sweep, [done[point_key(p)] for p in points])
    from .report import write_all

    result["sweep"]["files"] = write_all(result, directory)
    validate(result)
    with open(os.path.join(directory, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


class _ChildLog(SweepLog):
    """The log as a worker writes it: never after its parent, the sweep, has gone."""

    def __init__(self, directory: str, parent: int):
        super().__init__(directory)
        self.parent = parent

    def append(self, record: dict) -> None:
        if os.getppid() != self.parent:
            os._exit(1)
        super().append(record)


def _die_with_parent(parent: int) -> None:
    """Have Linux kill this worker when its parent dies (a worker orphaned by kill -9 of the sweep would
    go on measuring and appending points, competing with a resumed sweep), and exit now if it has."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):   # not Linux: _ChildLog still stops it at its next point
        pass
    if os.getppid() != parent:
        os._exit(1)


def _worker(directory: str, gi: int, bw: dict | None, parent: int) -> None:
    """The child of ``_run_group_isolated``: runs one group's missing points, reporting on stdout."""
    _die_with_parent(parent)
    log = _ChildLog(directory, parent)
    sweep, done = log.read()
    _run_group(sweep, log, _groups(sweep)[gi], done,
               progress=lambda m: print(f"progress\t{m}", flush=True),
               on_point=lambda r: print(f"point\t{json.dumps(r['params'])}", flush=True), bw=bw)


# ---- the summary ----

def _group_key(params: dict, without: str) -> dict:
    return {k: v for k, v in params.items() if k != without}


def batch_fits(sweep: Sweep, records: list[dict]) -> list[dict]:
    """Per group of points that differ only in batch size (3 or more sizes): the power law
    output_throughput = a * batch**k with 95% intervals (noise taken as relative, see
    llmbench.fit.power_law), and the knee at ``sweep.knee_threshold``."""
    if len(sweep.axes.get("batch", [])) < 2:
        return []
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(point_key(_group_key(r["params"], "batch")), []).append(r)
    out = []
    for key, recs in groups.items():
        x = [r["params"]["batch"] for r in recs]
        y = [r["metrics"]["output_throughput"] for r in recs]
        entry: dict = {"group": json.loads(key), "batch": x, "output_throughput": y,
                       "power_law": None, "knee": None, "error": None}
        try:
            entry["knee"] = fit.knee(x, y, sweep.knee_threshold).to_dict()
            entry["power_law"] = fit.power_law(x, y, relative=True).to_dict()
        except ValueError as e:
            entry["error"] = str(e)
        out.append(entry)
    return out


class SweepFailed(LLMBenchError):
    """No point of a sweep produced metrics, so there is nothing to summarize."""


def summarize(sweep: Sweep, records: list[dict]) -> dict:
    """The sweep's one JSON result: the first point's environment with the swept fields set to
    null (each point keeps its own), the base configuration and axes, every point, and the fits."""
    ok = [r for r in records if "error" not in r]
    if not ok:
        raise SweepFailed(f"every point of the sweep failed; the first: {records[0]['error']}")
    env = json.loads(json.dumps(ok[0]["environment"]))
    if "model" in sweep.axes:
        env["model"] = {"file": None, "name": None, "dummy": None, "size_bytes": None, "sha256": None,
                        "weight_types": None}
    for k in ("kv_dtype", "threads"):
        if k in sweep.axes:
            env[k] = None
    overheads = [r["timing_overhead"]["fraction_of_decode_step"] for r in records if r.get("timing_overhead")]
    result = {
        **header(),
        "environment": env,
        "config": {**config_json(sweep.base), "axes": sweep.axes, "knee_threshold": sweep.knee_threshold,
                   "membw": membw_elsewhere(ok[0]["environment"]["threads"])
                   if sweep.base.backend == "cpu" else None},
        "sweep": {"axes": sweep.axes, "points": records, "fits": batch_fits(sweep, ok),
                  "failed": len(records) - len(ok),
                  "max_timing_overhead": max(overheads) if overheads else None},
    }
    return result


def parse_list(text: str, kind: type = int, option: str | None = None) -> list:
    """'1,2,4' -> [1, 2, 4]; '1..64' -> powers of two 1, 2, 4, ..., 64 (for batch and context sweeps).
    ``option`` (such as "--batch") starts every error message."""
    text = str(text).strip()
    name = f"{option} {text!r}" if option else repr(text)
    if ".." in text and kind is int:
        try:
            lo, hi = (int(v) for v in text.split(".."))
        except ValueError:
            raise ValueError(f"{name}: a range is two whole numbers, such as 1..64") from None
        if lo < 1 or hi < lo:
            raise ValueError(f"{name}: a range needs 1 <= low <= high")
        vals, v = [], lo
        while v <= hi:
            vals.append(v)
            v *= 2
        if vals[-1] != hi:
            vals.append(hi)
        return vals
    try:
        vals = [kind(v.strip()) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{name} is not a comma-separated list of {kind.__name__} values") from None
    if not vals:
        raise ValueError(f"{option or 'the list'}: no value given")
    return vals


if __name__ == "__main__":
    import sys

    _worker(sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]))
