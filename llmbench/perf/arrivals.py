"""Request arrival schedules and the open-loop runner that sends requests at them.

`gamma_arrivals` follows vLLM's serving benchmark: gaps ~ Gamma(shape=burstiness,
scale=1/(rate*burstiness)), so the mean gap is 1/rate whatever the burstiness and the gaps'
coefficient of variation is 1/sqrt(burstiness) (1 = Poisson, < 1 burstier, > 1 more regular); the
first request waits one gap, and by default the offsets are rescaled so the last one is exactly
n/rate, as vLLM does to steady throughput across seeds (scaling leaves the CV unchanged).

`run_requests` launches each request at its offset from the start, whatever earlier requests are
doing (open loop), optionally behind an asyncio semaphore (max concurrency), and returns results in
input order. Tested in tests/test_openai_backend.py.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["RunOutput", "gamma_arrivals", "run_requests"]


def gamma_arrivals(
    n: int,
    rate: float,
    burstiness: float = 1.0,
    seed: int | None = 0,
    *,
    normalize: bool = True,
) -> np.ndarray:
    """Cumulative send offsets in seconds (float64, non-decreasing) for ``n`` requests.

    ``rate`` is requests per second; ``math.inf`` sends all at once (all offsets 0).
    ``burstiness`` is the gamma shape; ``math.inf`` gives evenly spaced requests.
    ``normalize`` rescales so the last offset is n/rate (vLLM's behaviour).
    """
    if n < 0:
        raise ValueError(f"n must be >= 0 (got {n})")
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s, or inf for all at once (got {rate})")
    if not burstiness > 0:
        raise ValueError(f"burstiness must be > 0 (1 = Poisson; got {burstiness})")
    if n == 0 or math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    offsets = np.cumsum(gaps)
    if normalize and offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return offsets


class RunOutput(NamedTuple):
    """What `run_requests` returns; unpacks as (results, start_ns, end_ns)."""

    results: list[Any]      # in input order; an exception instance where send_fn raised
    start_ns: int           # monotonic ns when the schedule started (offset 0)
    end_ns: int             # monotonic ns when the last request finished

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


async def run_requests(
    send_fn: Callable[..., Awaitable[Any]],
    prompts: Sequence[Any],
    schedule: Sequence[float] | np.ndarray | None = None,
    max_concurrency: int | None = None,
    *,
    progress: bool | None = None,
    description: str = "requests",
) -> RunOutput:
    """Call ``await send_fn(prompt, index=i, scheduled_ns=t)`` for every prompt at ``start + schedule[i]``.

    ``schedule`` holds non-decreasing offsets in seconds (e.g. `gamma_arrivals`); None sends all
    at once. With ``max_concurrency``, a request whose time has come waits for a free slot (its
    ``scheduled_ns`` still says when it was due). An exception from ``send_fn`` is stored in that
    request's slot and the run goes on. ``progress`` (default: when stderr is a terminal) shows a
    rich progress bar.
    """
    n = len(prompts)
    offsets = np.zeros(n) if schedule is None else np.asarray(schedule, dtype=np.float64)
    if offsets.shape != (n,):
        raise ValueError(f"schedule has {offsets.size} offsets for {n} prompts")
    if n and (not np.all(np.isfinite(offsets)) or offsets[0] < 0 or np.any(np.diff(offsets) < 0)):
        raise ValueError("schedule must be finite, non-negative, non-decreasing offsets in seconds")
    if max_concurrency is not None and max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1 or None (got {max_concurrency})")
    if progress is None:
        progress = sys.stderr.isatty()

    bar = None
    if progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("{task.fields[errors]} errors"), TimeElapsedColumn(),
                       console=Console(stderr=True), refresh_per_second=4)
        bar_task = bar.add_task(description, total=n, errors=0)

    sem = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    results: list[Any] = [None] * n
    errors = 0

    async def one(i: int, prompt: Any, scheduled_ns: int) -> None:
        nonlocal errors
        try:
            if sem is None:
                r = await send_fn(prompt, index=i, scheduled_ns=scheduled_ns)
            else:
                async with sem:
                    r = await send_fn(prompt, index=i, scheduled_ns=scheduled_ns)
        except Exception as e:  # noqa: BLE001 -- recorded, never fatal to the run
            r = e
        results[i] = r
        if isinstance(r, Exception) or getattr(r, "error", None) is not None:
            errors += 1
        if bar is not None:
            bar.update(bar_task, advance=1, errors=errors)

    tasks: list[asyncio.Task[None]] = []
    if bar is not None:
        bar.start()
    start_ns = time.monotonic_ns()
    try:
        for i, prompt in enumerate(prompts):
            due = start_ns + int(round(offsets[i] * 1e9))
            while (wait := due - time.monotonic_ns()) > 0:    # never early: loop over sleep's rounding
                await asyncio.sleep(wait / 1e9)
            tasks.append(asyncio.create_task(one(i, prompt, due)))
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        if bar is not None:
            bar.stop()
    end_ns = time.monotonic_ns()
    return RunOutput(results, start_ns, end_ns)
