"""The CUDA backend: a plain shared library (kernels/, C ABI) that the core loads with dlopen only
when a CUDA device is asked for. ``import llmbench`` never loads it.

Without a GPU, a driver, or a build of the library, every function here raises
:class:`llmbench.BackendUnavailableError` whose message says which is missing and what to do.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import _core

LIB_NAME = "libllmbench_cuda.so"


def library_path() -> str | None:
    """Where the CUDA backend library is: $LLMBENCH_CUDA_LIB, else beside llmbench._core, else None."""
    env = os.environ.get("LLMBENCH_CUDA_LIB")
    if env:
        return env
    p = os.path.join(os.path.dirname(_core.__file__), LIB_NAME)
    return p if os.path.exists(p) else None


def load() -> None:
    """Load the backend (idempotent); raises BackendUnavailableError naming the reason."""
    _core.cuda_load(library_path())


def available() -> tuple[bool, str]:
    """(True, "") when a CUDA device can be used, else (False, reason)."""
    try:
        load()
    except _core.BackendUnavailableError as e:
        return False, str(e)
    return True, ""


def versions() -> dict[str, str]:
    """CUDA runtime the library was built with and the driver's CUDA version ("none" if absent).

    Works whenever the library itself loads, even on a machine without a device."""
    try:
        load()
    except _core.BackendUnavailableError:
        pass  # versions still readable if the library loaded; otherwise this raises below
    rt, drv = _core.cuda_versions()
    fmt = lambda v: f"{v // 1000}.{(v % 1000) // 10}" if v else "none"  # noqa: E731
    return {"runtime": fmt(rt), "driver": fmt(drv)}


@dataclass(frozen=True)
class Device:
    """One CUDA device as the runtime reports it: memory in bytes, compute capability (major, minor)."""

    index: int
    name: str
    total_memory: int
    free_memory: int
    compute_capability: tuple[int, int]
    multiprocessors: int


def devices() -> list[Device]:
    """The CUDA devices this process can use, loading the backend library first.

    Raises:
        BackendUnavailableError: the library or the driver cannot be loaded.
    """
    load()
    return [Device(**d) for d in _core.cuda_devices()]


class DeviceBuffer:
    """Device memory owned by Python: freed when closed or garbage-collected."""

    def __init__(self, nbytes: int, device: int = 0):
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        load()
        self.device = device
        self.nbytes = nbytes
        self.ptr: int | None = _core.cuda_malloc(device, nbytes)

    def upload(self, data: np.ndarray | bytes) -> None:
        buf = np.ascontiguousarray(data).view(np.uint8).reshape(-1) if isinstance(data, np.ndarray) else data
        if len(buf) > self.nbytes:
            raise ValueError(f"{len(buf)} bytes do not fit in a {self.nbytes}-byte device buffer")
        _core.cuda_upload(self.device, self._live(), buf)

    def download(self, nbytes: int | None = None) -> np.ndarray:
        n = self.nbytes if nbytes is None else nbytes
        if not 0 <= n <= self.nbytes:
            raise ValueError(f"cannot read {n} bytes from a {self.nbytes}-byte device buffer")
        return _core.cuda_download(self.device, self._live(), n)

    def _live(self) -> int:
        if self.ptr is None:
            raise ValueError("device buffer is freed")
        return self.ptr

    def free(self) -> None:
        if self.ptr is not None:
            ptr, self.ptr = self.ptr, None
            _core.cuda_free(self.device, ptr)

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - never raise from a finalizer
            pass

    def __enter__(self) -> DeviceBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()


def copy_bandwidth(nbytes: int = 1 << 28, reps: int = 20, device: int = 0) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + written), timed with CUDA events."""
    with DeviceBuffer(nbytes, device) as a, DeviceBuffer(nbytes, device) as b:
        _core.cuda_time_copy(device, b.ptr, a.ptr, nbytes, 1)  # warm up
        ms = _core.cuda_time_copy(device, b.ptr, a.ptr, nbytes, reps)
    return 2 * nbytes * reps / (ms * 1e-3) / 1e9


# ---- kernels (ABI version 3): NumPy in, NumPy out, for tests and benchmarks ----

_F32, _F16, _Q8_0 = 0, 1, 8
#: the weight types the device multiplies (kernels/matmul.cu names the same list when it refuses another)
WEIGHT_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "IQ4_NL", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                "Q6_K", "IQ4_XS")
_KV_TYPES = {"f32": _F32, "f16": _F16, "q8_0": _Q8_0}

# llmb_cuda_sampling (kernels/llmb_cuda_abi.h), one per row, for sample_dev's device parameters
SAMPLING_DTYPE = np.dtype([("temperature", "<f4"), ("top_p", "<f4"), ("min_p", "<f4"), ("u", "<f4"), ("top_k", "<i4")])


def weight_rows(wtype: int, w_raw: np.ndarray, cols: int) -> int:
    """The number of rows of ``w_raw``, after checking that it holds whole rows of ``cols`` elements of
    ggml type ``wtype`` (uint8, (rows, row bytes)): the device reads that many bytes a row, and a shorter
    buffer would be read past its end."""
    from ..models.weight_types import _TRAITS, row_bytes

    if w_raw.ndim != 2 or w_raw.dtype != np.uint8:
        raise ValueError(f"w_raw must be a 2-D uint8 array of raw rows, got {w_raw.ndim}-D {w_raw.dtype}")
    need = row_bytes(wtype, cols)
    if w_raw.shape[1] != need:
        raise ValueError(f"w_raw rows are {w_raw.shape[1]} bytes; {cols} elements of {_TRAITS[wtype][0]} "
                         f"take {need}")
    return w_raw.shape[0]


def sampling_params(params: list[tuple[float, int, float, float, float]]) -> np.ndarray:
    """Rows of (temperature, top_k, top_p, min_p, u) as the device's parameter array (SAMPLING_DTYPE)."""
    out = np.zeros(len(params), SAMPLING_DTYPE)
    for r, (t, k, p, mp, u) in enumerate(params):
        if not (0.0 <= u < 1.0 and 0.0 < p <= 1.0 and k >= 0 and mp >= 0.0 and not np.isnan(t)):
            raise ValueError(f"sampling row {r}: u {u} must be in [0, 1), top_p {p} in (0, 1], top_k {k} >= 0, "
                             f"min_p {mp} >= 0, temperature {t} a number")
        out[r] = (t, p, mp, u, k)
    return out


class Graph:
    """A CUDA Graph captured on a :class:`Context` (``Context.capture``): the ops' launches with their
    pointers and host values fixed; device memory is read when it replays. ``n_kernels`` counts its
    kernel nodes, ``capture_ms`` the host time from graph_begin to the instantiated graph."""

    def __init__(self, ctx: Context, handle: object, n_nodes: int, n_kernels: int, capture_ms: float):
        self._ctx = ctx
        self._handle: object | None = handle
        self.n_nodes = n_nodes
        self.n_kernels = n_kernels
        self.capture_ms = capture_ms

    def launch(self, reps: int = 1) -> None:
        """Replay on the context's stream (asynchronous; ``Context.sync`` waits); ``reps`` times in a row."""
        if self._handle is None:
            raise ValueError("graph is closed")
        _core.cuda_graph_launch(self._ctx._ctx, self._handle, reps)

    def close(self) -> None:
        self._handle = None  # the capsule destroys the graph (before the context it keeps alive)


def abi_version() -> int:
    """The CUDA backend ABI version this build of the core expects (kernels/llmb_cuda_abi.h)."""
    return _core.cuda_abi_version()


def mem_info(device: int = 0) -> tuple[int, int]:
    """(free, total) device memory in bytes (cudaMemGetInfo)."""
    load()
    return _core.cuda_mem_info(device)


class Context:
    """One device stream with its cuBLAS handle, workspaces and phase timers. Each method uploads its
    NumPy inputs, runs one kernel, waits, and returns NumPy outputs, so a test compares the kernel
    with a NumPy reference directly; ``*_dev`` methods take :class:`DeviceBuffer` pointers instead."""

    def __init__(self, device: int = 0):
        load()
        self.device = device
        self._ctx = _core.cuda_ctx_create(device)

    # -- plumbing --
    def _up(self, a: np.ndarray, keep: list) -> int:
        a = np.ascontiguousarray(a)
        buf = DeviceBuffer(max(a.nbytes, 1), self.device)
        if a.nbytes:
            buf.upload(a)
        keep.append(buf)
        return buf._live()

    def _out(self, shape: tuple[int, ...], dtype, keep: list) -> tuple[int, DeviceBuffer]:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        buf = DeviceBuffer(max(nbytes, 1), self.device)
        keep.append(buf)
        return buf._live(), buf

    @staticmethod
    def _down(buf: DeviceBuffer, shape: tuple[int, ...], dtype) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return buf.download(n).view(dtype).reshape(shape) if n else np.zeros(shape, dtype)

    @staticmethod
    def _free(keep: list) -> None:
        for b in keep:
            b.free()

    def sync(self) -> None:
        _core.cuda_sync(self._ctx)

    def workspace_bytes(self) -> int:
        return _core.cuda_workspace_bytes(self._ctx)

    def phase_begin(self, phase: int) -> None:
        _core.cuda_phase(self._ctx, phase, False)

    def phase_end(self, phase: int) -> None:
        _core.cuda_phase(self._ctx, phase, True)

    def phase_ms(self, phase: int) -> float:
        """Milliseconds between the last begin and end events of ``phase`` (CUDA events)."""
        return _core.cuda_phase_ms(self._ctx, phase)

    def set_gemm_min_tokens(self, ntok: int) -> None:
        _core.cuda_set_gemm_min_tokens(self._ctx, ntok)

    # -- graphs: capture the *_dev ops a function issues, replay them --
    def graph_begin(self) -> None:
        _core.cuda_graph_begin(self._ctx)

    def graph_end(self) -> Graph:
        return Graph(self, *_core.cuda_graph_end(self._ctx))

    def capture(self, ops: Callable[[], object]) -> Graph:
        """Capture what ``ops()`` queues on this context (``*_dev`` methods, device-to-device copies) into
        a Graph; nothing runs until ``Graph.launch``. If an op fails (a sync, an allocation, a host copy,
        a workspace that would grow), the capture is ended and the op's error raised."""
        self.graph_begin()
        try:
            ops()
        except BaseException:
            with contextlib.suppress(Exception):
                self.graph_end()  # ends the spoiled capture; it fails too, naming the same op
            raise
        return self.graph_end()

    # -- device pointers in, nothing waited for (capturable) --
    def copy_to_device(self, dst: int, a: np.ndarray) -> None:
        """Host array -> device, ordered on this context's stream (returns when the host array is free)."""
        a = np.ascontiguousarray(a)
        _core.cuda_copy(self._ctx, dst, a.ctypes.data, a.nbytes, 0)

    def copy_to_host(self, src: int, shape: tuple[int, ...], dtype) -> np.ndarray:
        out = np.empty(shape, dtype)
        _core.cuda_copy(self._ctx, out.ctypes.data, src, out.nbytes, 1)
        return out

    def copy_dev(self, dst: int, src: int, nbytes: int) -> None:
        _core.cuda_copy(self._ctx, dst, src, nbytes, 2)

    def dequantize_dev(self, wtype: int, w: int, rows: int, cols: int, ids: int | None, n: int, out: int,
                       dtype=np.float32) -> None:
        _core.cuda_dequantize(self._ctx, wtype, w, rows, cols, ids, n, _F16 if dtype == np.float16 else _F32, out)

    def rmsnorm_dev(self, out: int, x: int, residual: int | None, w: int, n: int, n_rows: int, eps: float) -> None:
        _core.cuda_rmsnorm(self._ctx, out, x, residual, w, n, n_rows, eps)

    def rope_dev(self, v: int, n_tok: int, n_heads: int, head_dim: int, ld: int, pos: int, base: float,
                 scale: float = 1.0, freq_factors: int | None = None, neox: bool = False) -> None:
        _core.cuda_rope(self._ctx, v, n_tok, n_heads, head_dim, ld, pos, base, scale, freq_factors, neox)

    def swiglu_dev(self, gate: int, up: int, n: int) -> None:
        _core.cuda_elementwise(self._ctx, 0, gate, up, n)

    def add_dev(self, y: int, x: int, n: int) -> None:
        _core.cuda_elementwise(self._ctx, 1, y, x, n)

    def kv_store_dev(self, kv_type: str, k_cache: int, v_cache: int, k: int, v: int, ld: int, n_tok: int, kv_dim: int,
                     slots: int) -> None:
        _core.cuda_kv_store(self._ctx, _KV_TYPES[kv_type], k_cache, v_cache, k, v, ld, n_tok, kv_dim, slots)

    def attention_dev(self, prefill: bool, **fields) -> None:
        """Paged attention on device pointers: the fields of llmb_cuda_attn by name (kv_type as "f16", ...)."""
        fields["kv_type"] = _KV_TYPES[fields["kv_type"]]
        _core.cuda_attention(self._ctx, prefill, **fields)

    def sample_dev(self, logits: int, n_rows: int, vocab: int, params: int, ids: int, logprobs: int | None = None) -> None:
        """Sample on the device: params a device array of SAMPLING_DTYPE rows (see sampling_params), ids
        int32 and logprobs float32 device arrays of n_rows."""
        _core.cuda_sample_dev(self._ctx, logits, n_rows, vocab, params, ids, logprobs)

    # -- matrix products --
    def matmul_dev(self, path: str, wtype: int, w: int, rows: int, cols: int, x: int, ldx: int, ntok: int, y: int,
                   ldy: int, reps: int = 1) -> None:
        """Device pointers in, nothing waited for; ``reps`` queues the product that many times (benchmarks)."""
        _core.cuda_matmul(self._ctx, {"matvec": 0, "gemm": 1, "auto": 2}[path], wtype, w, rows, cols, x, ldx, ntok,
                          y, ldy, reps)

    def matmul(self, wtype: int, w_raw: np.ndarray, x: np.ndarray, path: str = "auto") -> np.ndarray:
        """y (ntok, rows) = x (ntok, cols) times the rows of w_raw (rows, row_bytes) of ggml type ``wtype``;
        path "matvec" (1..16 tokens), "gemm" (cuBLAS) or "auto"."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        ntok, cols = x.shape
        rows = weight_rows(wtype, w_raw, cols)
        keep: list = []
        try:
            wp, xp = self._up(w_raw, keep), self._up(x, keep)
            yp, yb = self._out((ntok, rows), np.float32, keep)
            self.matmul_dev(path, wtype, wp, rows, cols, xp, cols, ntok, yp, rows)
            self.sync()
            return self._down(yb, (ntok, rows), np.float32)
        finally:
            self._free(keep)

    def dequantize(self, wtype: int, w_raw: np.ndarray, cols: int, ids: np.ndarray | None = None,
                   dtype=np.float32) -> np.ndarray:
        """Rows of w_raw (or the rows ``ids`` picks; ids outside give zeros) as float32 or float16."""
        rows = weight_rows(wtype, w_raw, cols)
        n = rows if ids is None else len(ids)
        keep: list = []
        try:
            wp = self._up(w_raw, keep)
            ip = None if ids is None else self._up(np.asarray(ids, np.int32), keep)
            op, ob = self._out((n, cols), dtype, keep)
            _core.cuda_dequantize(self._ctx, wtype, wp, rows, cols, ip, n, _F16 if dtype == np.float16 else _F32, op)
            self.sync()
            return self._down(ob, (n, cols), dtype)
        finally:
            self._free(keep)

    # -- elementwise --
    def rmsnorm(self, x: np.ndarray, w: np.ndarray, eps: float,
                residual: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(normed rows, x after x += residual) for x (rows, n)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        rows, n = x.shape
        keep: list = []
        try:
            xp, xb = self._out(x.shape, np.float32, keep)
            xb.upload(x)
            rp = None if residual is None else self._up(np.asarray(residual, np.float32), keep)
            wp = self._up(np.asarray(w, np.float32), keep)
            op, ob = self._out(x.shape, np.float32, keep)
            _core.cuda_rmsnorm(self._ctx, op, xp, rp, wp, n, rows, eps)
            self.sync()
            return self._down(ob, x.shape, np.float32), self._down(xb, x.shape, np.float32)
        finally:
            self._free(keep)

    def rope(self, v: np.ndarray, n_heads: int, head_dim: int, pos: np.ndarray, base: float, scale: float = 1.0,
             freq_factors: np.ndarray | None = None, neox: bool = False) -> np.ndarray:
        """v (n_tok, n_heads * head_dim) rotated by position pos[t]."""
        v = np.ascontiguousarray(v, dtype=np.float32)
        keep: list = []
        try:
            vp, vb = self._out(v.shape, np.float32, keep)
            vb.upload(v)
            pp = self._up(np.asarray(pos, np.int32), keep)
            fp = None if freq_factors is None else self._up(np.asarray(freq_factors, np.float32), keep)
            _core.cuda_rope(self._ctx, vp, v.shape[0], n_heads, head_dim, v.shape[1], pp, base, scale, fp, neox)
            self.sync()
            return self._down(vb, v.shape, np.float32)
        finally:
            self._free(keep)

    def _elementwise(self, op: int, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        y = np.ascontiguousarray(y, dtype=np.float32)
        keep: list = []
        try:
            yp, yb = self._out(y.shape, np.float32, keep)
            yb.upload(y)
            _core.cuda_elementwise(self._ctx, op, yp, self._up(np.asarray(x, np.float32), keep), y.size)
            self.sync()
            return self._down(yb, y.shape, np.float32)
        finally:
            self._free(keep)

    def swiglu(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return self._elementwise(0, gate, up)

    def add(self, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        return self._elementwise(1, y, x)

    # -- KV cache and attention --
    def kv_store(self, kv_type: str, k_cache: np.ndarray, v_cache: np.ndarray, k: np.ndarray, v: np.ndarray,
                 slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Caches (uint8 rows of one layer) after storing rows k, v (n_tok, kv_dim) into ``slots``."""
        k = np.ascontiguousarray(k, dtype=np.float32)
        keep: list = []
        try:
            kp, kb = self._out(k_cache.shape, np.uint8, keep)
            vp, vb = self._out(v_cache.shape, np.uint8, keep)
            kb.upload(k_cache)
            vb.upload(v_cache)
            _core.cuda_kv_store(self._ctx, _KV_TYPES[kv_type], kp, vp, self._up(k, keep),
                                self._up(np.asarray(v, np.float32), keep), k.shape[1], k.shape[0], k.shape[1],
                                self._up(np.asarray(slots, np.int32), keep))
            self.sync()
            return self._down(kb, k_cache.shape, np.uint8), self._down(vb, v_cache.shape, np.uint8)
        finally:
            self._free(keep)

    def attention(self, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, kv_type: str, block_size: int,
                  n_head: int, n_head_kv: int, head_dim: int, block_tables: np.ndarray, *,
                  seq_lens: np.ndarray | None = None, split_keys: int = 0,
                  q_start: np.ndarray | None = None, q_len: np.ndarray | None = None, pos0: np.ndarray | None = None,
                  scale: float | None = None) -> np.ndarray:
        """Paged attention: decode (seq_lens given: query row s of sequence s) or prefill (q_start,
        q_len, pos0 given). Caches are the uint8 rows of one layer; returns out like q."""
        q = np.ascontiguousarray(q, dtype=np.float32)
        bt = np.ascontiguousarray(block_tables, dtype=np.int32)
        prefill = seq_lens is None
        rows: dict[str, np.ndarray] = {}   # the int32 arrays of one mode
        if seq_lens is not None:
            rows["seq_lens"] = np.asarray(seq_lens, np.int32)
            extra = {"split_keys": split_keys, "max_seq_len": int(np.max(seq_lens, initial=0))}
        elif q_start is not None and q_len is not None and pos0 is not None:
            rows.update(q_start=np.asarray(q_start, np.int32), q_len=np.asarray(q_len, np.int32),
                        pos0=np.asarray(pos0, np.int32))
            extra = {"max_q_len": int(np.max(q_len, initial=0))}
        else:
            raise ValueError("attention: give seq_lens (decode) or q_start, q_len and pos0 (prefill)")
        keep: list = []
        try:
            op, ob = self._out(q.shape, np.float32, keep)
            kw = {"q": self._up(q, keep), "out": op, "ldq": q.shape[1], "ldo": q.shape[1],
                  "k_cache": self._up(k_cache, keep), "v_cache": self._up(v_cache, keep), "kv_type": _KV_TYPES[kv_type],
                  "block_size": block_size, "n_head": n_head, "n_head_kv": n_head_kv, "head_dim": head_dim,
                  "scale": 1.0 / np.sqrt(head_dim) if scale is None else scale, "block_tables": self._up(bt, keep),
                  "max_blocks": bt.shape[1], "n_seq": bt.shape[0]}
            kw.update({k: self._up(a, keep) for k, a in rows.items()}, **extra)
            _core.cuda_attention(self._ctx, prefill, **kw)
            self.sync()
            return self._down(ob, q.shape, np.float32)
        finally:
            self._free(keep)

    # -- sampling --
    def sample(self, logits: np.ndarray, params: list[tuple[float, int, float, float, float]],
               logprobs: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """Token ids (and log-probabilities) for each row of logits (rows, vocab); params[r] =
        (temperature, top_k, top_p, min_p, u) with u uniform in [0, 1)."""
        logits = np.ascontiguousarray(logits, dtype=np.float32)
        keep: list = []
        try:
            lp = self._up(logits, keep)
            return _core.cuda_sample(self._ctx, lp, logits.shape[0], logits.shape[1], list(params), logprobs)
        finally:
            self._free(keep)
