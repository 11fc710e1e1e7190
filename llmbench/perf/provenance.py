"""Where a result came from: the header every result starts with (schema version, llmbench version
and commit, time) and the environment of a local engine run (model file and its SHA-256, weight
types, backend, threads, CPU or GPU, build flags, SIMD level, activations, context), with the count
of generated tokens whose log-probability was not finite and the process's peak memory."""

from __future__ import annotations

import datetime
import hashlib
import os
import resource
import warnings

import numpy as np

from .. import LLM, __version__, _core
from ..info import cpu_model


def header() -> dict:
    """The fields every result starts with."""
    return {"schema_version": 1, "llmbench_version": __version__, "commit": (_core.build_info()["commit"] or None),
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")}


def engine_environment(llm: LLM, model: str, prefix_cache: bool) -> dict:
    """The environment block of a result for the local engine; ``model`` as the user named it (a path
    or a dummy preset)."""
    path = str(llm.path)
    st = os.stat(path)
    key = (path, st.st_mtime, st.st_size)
    if key not in _SHA_CACHE:
        _SHA_CACHE[key] = _sha256(path)
    name = model if not os.path.exists(model) else os.path.basename(path)
    simd = _core.simd_info()
    return {
        "model": {"file": os.path.basename(path), "name": name, "dummy": not os.path.exists(model),
                  "size_bytes": st.st_size, "sha256": _SHA_CACHE[key],
                  "weight_types": sorted({t.type for t in llm.file.tensors.values()})},
        "kv_dtype": llm.kv_dtype, "backend": llm.backend, "threads": llm.threads, "cpu_model": cpu_model(),
        "gpu_name": _gpu_name(llm), "build_flags": _core.build_info()["cflags"],
        "cuda_graphs": llm.engine.stats()["graph_replays"] > 0 if llm.backend == "cuda" else None,
        "prefix_cache": prefix_cache,
        "simd": simd["active"], "prefetch": simd["prefetch"], "activations": llm.activations,
        "ctx": llm.ctx, "ctx_train": llm.ctx_train, "past_trained_context": llm.ctx > llm.ctx_train,
        "non_finite_tokens": non_finite_tokens(llm),   # in this model load so far
        "omp": {k: os.environ.get(k) for k in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OMP_PROC_BIND")},
    }


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


_SHA_CACHE: dict[tuple[str, float, int], str] = {}


def _gpu_name(llm: LLM) -> str | None:
    if llm.backend != "cuda":
        return None
    from ..backends import cuda

    assert llm.device is not None   # set for the CUDA backend
    return cuda.devices()[llm.device].name


def peak_rss_bytes() -> int:
    """Peak resident memory of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_NONFINITE: dict[int, int] = {}   # id(LLM) -> generated tokens whose log-probability was NaN or infinite


def count_non_finite(llm: LLM, outs) -> None:
    """Count the generated tokens of ``outs`` whose log-probability is not finite (NaN weights), with
    a warning the first time for this model load: the timings hold, the outputs are meaningless."""
    bad = sum(int(np.count_nonzero(~np.isfinite(np.asarray(o.logprobs, dtype=np.float64)))) for o in outs)
    if bad:
        if not _NONFINITE.get(id(llm)):
            warnings.warn(f"{llm.path.name}: generated tokens have NaN or infinite log-probabilities (non-finite "
                          "logits): the timings hold, the outputs are meaningless; check the model file",
                          stacklevel=3)
        _NONFINITE[id(llm)] = _NONFINITE.get(id(llm), 0) + bad


def non_finite_tokens(llm: LLM) -> int:
    """Generated tokens of this model load so far whose log-probability was not finite."""
    return _NONFINITE.get(id(llm), 0)

