"""`llmbench.LLM`: the Python face of the C engine — generation, chat, logits and log-likelihoods.

>>> llm = LLM("stories260K.gguf")                                            # doctest: +SKIP
>>> out = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=32))[0]
>>> out.text, out.ttft_s, out.token_ids                                       # doctest: +SKIP

Timestamps are the engine's monotonic clock (CLOCK_MONOTONIC, nanoseconds), taken inside the C
core when each event happens, not when Python sees it.
"""

from __future__ import annotations

import functools
import os
import re
import threading
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import numpy as np

from . import BackendUnavailableError, GGUFError, LLMBenchError, UnsupportedError, _core
from .info import memory_bytes
from .models.gguf import GGUFFile
from .prefix_plan import SHARED_PREFIX_MIN as SHARED_PREFIX_MIN
from .prefix_plan import plan_scoring
from .prefix_plan import prefix_tree as prefix_tree
from .tokenizer import Tokenizer

# KV cache types by name: their type ids, and the engine's event kinds and finish reasons, from the core
_TYPE_IDS = {name: type_id for type_id, name, *_ in _core.type_traits()}
KV_DTYPES = {name: _TYPE_IDS[name.upper()] for name in ("f32", "f16", "q8_0")}
ACTIVATIONS = ("q8", "f32", "bf16")   # LLM(activations=...)
EV_ARRIVAL, EV_ADMIT, EV_TOKEN, EV_FINISH = _core.EV_ARRIVAL, _core.EV_ADMIT, _core.EV_TOKEN, _core.EV_FINISH
FINISH_REASONS = {_core.FINISH_LENGTH: "length", _core.FINISH_STOP: "stop", _core.FINISH_ABORT: "abort"}


@dataclass
class SamplingParams:
    """How to sample, with vLLM's names and defaults where the quantity is the same."""

    temperature: float = 1.0
    top_k: int = 0                      # 0: off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None             # None: a fresh random seed per request
    max_tokens: int = 16
    min_tokens: int = 0                 # no stop token, EOS or stop string ends a request before this many
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False            # fixed-length runs for benchmarks
    logprobs: int | None = None         # top-n logprobs per output token (0..20)
    include_stop_str_in_output: bool = False

    def __post_init__(self) -> None:
        checks = [
            (self.temperature >= 0, "temperature must be >= 0"),
            (self.top_k >= 0, "top_k must be >= 0 (0 disables it)"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (0 <= self.min_p <= 1, "min_p must be in [0, 1]"),
            (self.repetition_penalty > 0, "repetition_penalty must be > 0"),
            (self.max_tokens >= 0, "max_tokens must be >= 0"),
            (0 <= self.min_tokens <= max(self.max_tokens, 0), "min_tokens must be in [0, max_tokens]"),
            (self.logprobs is None or 0 <= self.logprobs <= 20, "logprobs must be 0..20"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"SamplingParams: {msg}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]


@dataclass
class Completion:
    """One finished request: text, tokens, log-probabilities and the engine's timestamps (ns)."""

    prompt_token_ids: list[int]
    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[dict[int, float]] | None
    finish_reason: str                  # "length", "stop" or "abort"
    stop_reason: str | int | None       # the stop string or token id that ended it
    arrival_ns: int
    admit_ns: int
    token_ns: np.ndarray                # uint64 timestamp of each output token
    finish_ns: int
    cached_tokens: int = 0              # prompt tokens reused from a shared prefix

    @property
    def ttft_s(self) -> float | None:
        """Time to first token in seconds (from arrival); None without output tokens."""
        return (int(self.token_ns[0]) - self.arrival_ns) / 1e9 if len(self.token_ns) else None

    @property
    def e2e_s(self) -> float:
        """Seconds from arrival to the last token (or to the finish, without output tokens)."""
        end = int(self.token_ns[-1]) if len(self.token_ns) else self.finish_ns
        return (end - self.arrival_ns) / 1e9


def _parse_bytes(v: int | str) -> int:
    if isinstance(v, int):
        return v
    m = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?i?B?)\s*", v, re.I)
    if not m:
        raise ValueError(f"cannot read {v!r} as a size (examples: 2GiB, 512MB, 1000000)")
    unit = m.group(2).upper().rstrip("B")
    mult = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}[unit]
    return int(float(m.group(1)) * mult)


MAX_THREADS_PER_CPU = 4


def _cpus() -> int:
    """CPUs this process may run on (its affinity mask, as taskset or a container sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


class NonFiniteError(LLMBenchError):
    """The model produced NaN or infinite logits (its weights or activations hold non-finite values)."""


def _available_memory() -> int:
    return memory_bytes()["available"] or 8 << 30


def resolve_model(model: str | os.PathLike[str]) -> Path:
    """A GGUF path, or a dummy preset name optionally with a type: "llama-125m", "llama-1b:Q8_0"."""
    p = Path(model)
    if p.exists():
        return p
    from .models import dummy as dummy

    name, _, typ = str(model).partition(":")
    if name in dummy.PRESETS:
        return dummy.dummy_model(name, typ or "Q4_K_M")
    raise FileNotFoundError(f"{model}: no such GGUF file, and not a dummy preset "
                            f"(presets: {', '.join(dummy.PRESETS)})")


# ---- model hyper-parameters ----

_MAX_SIZE = 1 << 30   # the engine's bound on any count or dimension (csrc/model.c, get_int)
ARCHITECTURES = ("llama", "mistral", "qwen2", "gemma3")   # those csrc/model.c read_config accepts
WINDOWED = ("gemma3",)   # architectures whose sliding window the engine implements (others: ctx <= window)


def hyperparameters(meta: dict, tensors: Collection[str] = (), where: str = "model") -> dict[str, int]:
    """The shape a model's metadata declares, checked as the engine will use it: every size a positive
    integer, the heads dividing as attention needs, the blocks present among ``tensors`` (names, when
    given). Raises GGUFError naming the key; ``where`` (the file) starts the message. Keys: n_layer,
    dim, n_head, n_head_kv, head_dim, ctx_train, sliding_window (0: none, or an architecture in WINDOWED,
    whose window the engine implements)."""
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GGUFError(f"{where}: metadata 'general.architecture' is missing or not a string")
    if arch not in ARCHITECTURES:   # its keys may be named otherwise: say so rather than name a missing key
        raise UnsupportedError(f"{where}: model: architecture '{arch}' is not supported (supported: "
                               f"{', '.join(ARCHITECTURES)})")

    def get(suffix: str, default: int | None) -> int:
        key = f"{arch}.{suffix}"
        v = meta.get(key, default)
        if v is None:
            raise GGUFError(f"{where}: metadata key '{key}' is missing")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise GGUFError(f"{where}: metadata '{key}' is {v!r}, expected an integer")
        if not 0 < v <= _MAX_SIZE and not (suffix == "attention.sliding_window" and v == 0):
            raise GGUFError(f"{where}: metadata '{key}' is {int(v)}, expected a size from 1 to {_MAX_SIZE}")
        return int(v)

    hp = {"n_layer": get("block_count", None), "dim": get("embedding_length", None),
          "n_head": get("attention.head_count", None)}
    hp["n_head_kv"] = get("attention.head_count_kv", hp["n_head"])
    if hp["n_head"] % hp["n_head_kv"]:
        raise GGUFError(f"{where}: metadata '{arch}.attention.head_count' {hp['n_head']} is not a multiple of "
                        f"'{arch}.attention.head_count_kv' {hp['n_head_kv']}")
    if f"{arch}.attention.key_length" not in meta and hp["dim"] % hp["n_head"]:
        raise GGUFError(f"{where}: metadata '{arch}.embedding_length' {hp['dim']} is not a multiple of "
                        f"'{arch}.attention.head_count' {hp['n_head']} (and no key_length gives the head size)")
    hp["head_dim"] = get("attention.key_length", max(hp["dim"] // hp["n_head"], 1))
    hp["ctx_train"] = get("context_length", 2048)
    hp["sliding_window"] = 0 if arch in WINDOWED else get("attention.sliding_window", 0)
    if tensors:
        blocks = {int(m.group(1)) for m in map(re.compile(r"blk\.(\d+)\.").match, tensors) if m}
        if hp["n_layer"] > len(blocks):
            raise GGUFError(f"{where}: metadata '{arch}.block_count' is {hp['n_layer']}, but the file holds the "
                            f"tensors of {len(blocks)} blocks")
    return hp


def kv_bytes_per_token(hp: dict[str, int], kv_dtype: str) -> float:
    """Bytes of KV cache one token takes: keys and values of every layer's KV heads, each row in the KV
    dtype's own format (the C type traits: Q8_0 is 34 bytes a block of 32)."""
    from .models.weight_types import row_bytes

    kv_dim = hp["n_head_kv"] * hp["head_dim"]
    if kv_dtype == "q8_0" and kv_dim % 32:   # the engine refuses it with its own message; a size still
        return 2 * hp["n_layer"] * kv_dim * 34 / 32   # stands for the budget check before it
    return 2 * hp["n_layer"] * row_bytes(KV_DTYPES[kv_dtype], kv_dim)


def _exclusive(method: Callable) -> Callable:
    """For LLM methods that drive the engine: they run one at a time, a call from another thread
    waiting for the running one; a call from inside one (an on_token callback) raises, as it would
    take the running call's events."""
    @functools.wraps(method)
    def run(self: LLM, *args, **kwargs):
        if self._owner == threading.get_ident():
            raise RuntimeError(f"LLM.{method.__name__} was called inside another call on the same LLM (from an "
                               "on_token callback?); call it after that one returns")
        with self._lock:
            self._owner = threading.get_ident()
            try:
                return method(self, *args, **kwargs)
            finally:
                self._owner = None
    return run


class LLM:
    """A model loaded into llmbench's engine.

    ``model``: a GGUF path or a dummy preset name ("llama-125m", "llama-1b:Q8_0", ...).
    ``threads``: engine threads (default: all CPUs). ``ctx``: longest sequence (default: the
    model's training context, at most 4096, and at most its sliding attention window, which the
    engine does not implement: within it attention is full). ``kv_dtype``: "f16", "f32" or "q8_0".
    ``kv_budget``: bytes for the paged KV cache (int or "2GiB"; default: enough for ``max_seqs``
    full-context sequences, at most a quarter of available memory).
    ``activations``: "q8" (default, as llama.cpp: activations quantized to 8 bits per token for
    integer dot products with quantized weights), "f32" (weights dequantized, float products:
    slower, and free of the activation rounding, which separates weight from activation error) or
    "bf16" (cpu: F32, F16 and BF16 matrices rounded to BF16 once at load and multiplied against
    activations rounded to BF16, by vdpbf16ps where the CPU has AVX-512 BF16, for 8 bits of mantissa
    instead of F16's 11, as ik_llama.cpp's run-time repacking does on Zen 4: there about twice the
    prefill speed of float products, on an Intel Xeon (vdpbf16ps at half the FMA rate) slower;
    quantized matrices as with "q8"; elsewhere the same bits, slowly).
    ``backend``: "cpu" or "cuda" (the same engine, scheduler and sampler; the forward pass on device
    ``device``, decode steps replayed as CUDA Graphs when ``cuda_graphs``). Without a usable CUDA
    backend, "cuda" raises BackendUnavailableError saying why. ``device_sampling`` (cuda): a step whose every
    request samples plainly (no penalties, no top-n logprobs, no prompt scores) samples on the device,
    so only token ids and their log-probabilities cross the bus. ``profile`` (cpu): time every operation
    kind of every step (embedding, norms, activation quantization, products by weight type, RoPE and KV
    stores, attention, element-wise), read back from ``engine.stats()["prof_ns"]`` per prefill and decode
    steps (llmbench.perf.profile).

    The GIL is released while the engine computes, so other Python threads run meanwhile; calls on
    one LLM from several threads take turns.
    """

    def __init__(self, model: str | os.PathLike[str], threads: int | None = None, ctx: int | None = None,
                 kv_dtype: str = "f16", kv_budget: int | str | None = None, backend: str = "cpu",
                 max_batch_tokens: int = 512, max_seqs: int = 64, block_size: int = 16,
                 activations: str = "q8", tokenizer_options: dict | None = None, device: int = 0,
                 cuda_graphs: bool = True, device_sampling: bool = True, profile: bool = False):
        self._lock = threading.Lock()   # see _exclusive
        self._owner: int | None = None
        if backend not in ("cpu", "cuda"):
            raise ValueError(f"backend must be 'cpu' or 'cuda', got {backend!r}")
        if device < 0:
            raise ValueError(f"device must be >= 0, got {device}")
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations must be 'q8', 'f32' or 'bf16', got {activations!r}")
        if profile and backend != "cpu":
            raise ValueError("profile=True times the CPU backend's operations; the CUDA backend's kernels are not "
                             "timed one by one (profile the CPU backend, or use Nsight Systems)")
        if activations == "bf16" and backend != "cpu":
            raise ValueError("activations='bf16' (BF16 pair products) runs on the CPU backend only")
        if backend == "cuda":
            from .backends import cuda

            ok, why = cuda.available()   # loads the library the engine's CUDA backend runs on
            if not ok:
                raise BackendUnavailableError(why)
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
        self.path = resolve_model(model)
        self.file = GGUFFile(self.path)
        cpus = _cpus()
        self.threads = cpus if threads is None else threads
        if self.threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        # More threads than CPUs is allowed (tests of odd thread counts on small machines) but slow: each
        # spins at every barrier for a CPU its partners need. Thousands never got through a step.
        if self.threads > MAX_THREADS_PER_CPU * cpus:
            raise ValueError(f"threads={threads}: this process may use {cpus} CPUs, and more than "
                             f"{MAX_THREADS_PER_CPU} threads a CPU only wait on each other; use at most {cpus}")
        if self.threads > cpus:
            warnings.warn(f"threads={threads} is more than the {cpus} CPUs this process may use: the threads "
                          "take turns, so timings are not this machine's best", stacklevel=2)
        meta = self.file.metadata
        hp = hyperparameters(meta, self.file.tensors, str(self.path))
        ctx_train = self.ctx_train = hp["ctx_train"]
        window = hp["sliding_window"] or ctx_train   # see the engine's refusal
        self.ctx = min(ctx_train, 4096, window) if ctx is None else ctx
        if self.ctx < 1:
            raise ValueError(f"ctx must be >= 1, got {ctx}")
        if self.ctx > ctx_train:
            warnings.warn(f"ctx={self.ctx} is past {self.path.name}'s trained context of {ctx_train} tokens: "
                          "positions beyond it are ones the model never saw", stacklevel=2)
        self.kv_dtype = kv_dtype
        self.block_size = block_size
        # Size the KV pool: bytes per token from the shape, then the budget.
        per_tok = kv_bytes_per_token(hp, kv_dtype)
        if kv_budget is None:
            full = -(-self.ctx // block_size) * block_size * per_tok   # one full-context sequence, whole blocks
            if backend == "cuda":
                from .backends import cuda

                avail = cuda.mem_info(device)[0]
            else:
                avail = _available_memory()
            if full > avail:
                raise MemoryError(f"ctx {self.ctx}: one sequence's KV cache needs {full / 2**30:.1f} GiB "
                                  f"({per_tok:.0f} bytes a token, {kv_dtype}) and {avail / 2**30:.1f} GiB are "
                                  "available; choose a smaller ctx or kv_dtype='q8_0'")
            budget = max(min(max_seqs * full, avail // 4), full)
        else:
            budget = _parse_bytes(kv_budget)
        n_blocks = int(budget // (per_tok * block_size))
        if n_blocks < 1:
            raise ValueError(f"kv_budget {budget} bytes holds no KV block ({per_tok * block_size:.0f} bytes each)")
        self.kv_blocks = n_blocks
        self.max_seqs = max_seqs
        self.engine = _core.Engine(self.file._reader, kv_type=KV_DTYPES[kv_dtype], block_size=block_size,
                                   n_blocks=n_blocks, ctx=self.ctx, max_batch_tokens=max_batch_tokens,
                                   max_seqs=max_seqs, threads=self.threads, float_act=activations == "f32",
                                   bf16=activations == "bf16",
                                   backend=backend, device=device, graphs=cuda_graphs,
                                   device_sampling=device_sampling, profile=profile)
        self.backend = self.engine.backend
        self.profile = profile
        self.device = device if backend == "cuda" else None
        self.cuda_graphs = cuda_graphs if backend == "cuda" else None
        self.activations = activations
        self.info = self.engine.model_info()
        try:
            self.tokenizer: Tokenizer | None = Tokenizer.from_gguf(meta, **(tokenizer_options or {}))
            self._no_tokenizer = ""
        except UnsupportedError as e:   # the model still runs on token ids
            self.tokenizer, self._no_tokenizer = None, str(e)

    def __repr__(self) -> str:
        i = self.info
        where = f"backend=cuda:{self.device}" if self.backend == "cuda" else f"threads={self.threads}"
        return (f"<LLM {self.path.name} {i['arch']} {i['n_layer']}L dim {i['dim']} vocab {i['vocab']} "
                f"{where} ctx={self.ctx} kv={self.kv_dtype} activations={self.activations}>")

    @_exclusive
    def memory(self) -> dict[str, int]:
        """Bytes the engine's backend holds: weights (mapped on the CPU), KV cache, scratch, peak; on a
        GPU also device_free and device_total (0 on the CPU); kv_per_token, free_blocks."""
        return self.engine.memory()

    # ---- tokens ----

    def _tok(self) -> Tokenizer:
        if self.tokenizer is None:
            raise UnsupportedError(f"{self.path.name} has no usable tokenizer ({self._no_tokenizer}); pass token ids")
        return self.tokenizer

    def tokenize(self, text: str, add_bos: bool | None = None) -> list[int]:
        """Token ids of ``text``; ``add_bos`` None follows the model's metadata."""
        return self._tok().encode(text, add_bos)

    def detokenize(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """The text of token ids; an id outside the model's vocabulary raises ValueError (the tokenizer
        would drop it silently). Ids the model has and its tokenizer lacks (padding rows) have no text."""
        ids = [int(i) for i in ids]
        bad = next((i for i in ids if not 0 <= i < self.info["vocab"]), None)
        if bad is not None:
            raise ValueError(f"token id {bad} is outside the vocabulary of {self.path.name} "
                             f"(0 .. {self.info['vocab'] - 1})")
        return self._tok().decode(ids, skip_special)

    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            ids = self.tokenize(prompt)
        else:
            ids = [int(t) for t in prompt]
        if not ids:  # an empty prompt starts from BOS, as llama.cpp does
            bos = self.tokenizer.bos_id if self.tokenizer else None
            if bos is None:
                raise ValueError("empty prompt and the model has no BOS token to start from")
            ids = [bos]
        return ids

    # ---- generation ----

    @_exclusive
    def _release(self, seq: int) -> None:
        self.engine.release(seq)

    def _run_to_idle(self) -> None:
        """Step the engine until no request is left to run, discarding the events (for requests whose
        results are read back another way: held prefixes, prompt logits and logprobs)."""
        while self.engine.step():
            pass
        self.engine.poll()

    @_exclusive
    def hold_prefix(self, prompt: str | Sequence[int], parent: Prefix | None = None) -> Prefix:
        """Compute a prompt prefix once and keep its KV cache: ``generate(..., prefix=p)`` then
        forks it (copy on write) for each request instead of recomputing it. Release it with
        ``p.release()`` or use it as a context manager. With ``parent`` (a held prefix that
        ``prompt``'s token ids begin with) only the tokens past the parent are computed: nested
        prefixes, such as a task's header and a subject's few-shot block below it."""
        ids = self._prompt_ids(prompt)
        fork = -1
        if parent is not None:
            if parent.llm is not self or parent.seq is None:
                raise ValueError("hold_prefix: parent was released or belongs to another LLM")
            if ids[: len(parent.ids)] != parent.ids:
                raise ValueError("hold_prefix: the prompt's token ids do not begin with the parent's")
            fork = parent.seq
        seq = self.engine.add(ids, max_tokens=0, hold=True, fork_from=fork)
        try:
            self._run_to_idle()
        except BaseException:
            self.engine.release(seq)
            raise
        return Prefix(self, ids, seq)

    @_exclusive
    def generate(self, prompts: str | Sequence[int] | Sequence[str | Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] | None = None,
                 on_token: Callable[[int, int, str], None] | None = None,
                 prefix: Prefix | Sequence[Prefix | None] | None = None,
                 on_finish: Callable[[int, Completion], None] | None = None) -> list[Completion]:
        """Generate for one prompt or a batch (text or token ids); all run concurrently in the engine.

        ``on_token(request_index, token_id, text_delta)`` is called as tokens arrive, and
        ``on_finish(request_index, completion)`` as each request finishes (the evaluation runner writes
        a sample's record then, while the others run on). With
        ``prefix`` (from ``hold_prefix``) each prompt continues that prefix: the request's prompt is
        prefix + prompt, and the prefix's KV cache is shared rather than recomputed (a prompt given
        as text is then tokenized without BOS). ``prefix`` may also be a list, one held prefix (or
        None) per prompt, so requests below different prefixes run in one batch."""
        single = isinstance(prompts, str) or (len(prompts) > 0 and isinstance(prompts[0], (int, np.integer)))
        # one prompt (text or ids) or a list of them; isinstance on the first item cannot narrow the union
        batch = cast("list[str | Sequence[int]]", [prompts] if single else list(prompts))
        plist = params if isinstance(params, Sequence) else [params or SamplingParams()] * len(batch)
        if len(plist) != len(batch):
            raise ValueError(f"{len(plist)} SamplingParams for {len(batch)} prompts")
        prefixes = list(prefix) if isinstance(prefix, Sequence) else [prefix] * len(batch)
        if len(prefixes) != len(batch):
            raise ValueError(f"{len(prefixes)} prefixes for {len(batch)} prompts")
        for pf in prefixes:
            if pf is not None and (pf.llm is not self or pf.seq is None):
                raise ValueError("generate: prefix was released or belongs to another LLM")
        runs = [_Run(self, self._prompt_ids(p) if pf is None else
                     pf.ids + (self.tokenize(p, add_bos=False) if isinstance(p, str) else [int(t) for t in p]), sp)
                for p, sp, pf in zip(batch, plist, prefixes)]
        by_seq = {}
        try:
            for i, (r, pf) in enumerate(zip(runs, prefixes)):
                r.index = i
                r.seq = self.engine.add(r.prompt, **r.engine_args(), fork_from=-1 if pf is None else pf.seq)
                by_seq[r.seq] = r
            self._drive(by_seq, on_token, on_finish)
        finally:
            for r in runs:
                if r.seq is not None:
                    self.engine.release(r.seq)
        return [r.result() for r in runs]

    def _drive(self, by_seq: dict[int, _Run], on_token: Callable[[int, int, str], None] | None,
               on_finish: Callable[[int, Completion], None] | None = None) -> None:
        topn = max((r.sp.logprobs or 0) for r in by_seq.values()) if by_seq else 0   # top-n only if asked
        busy = True
        while busy:
            busy = self.engine.step()
            for seq, kind, tok, lp, t, top_ids, top_lps in self.engine.poll(topn):
                for k, (sq, kd, tk, p, tt) in enumerate(zip(seq.tolist(), kind.tolist(), tok.tolist(), lp.tolist(),
                                                             t.tolist())):
                    r = by_seq.get(sq)
                    if r is not None:
                        r.event(kd, tk, p, tt, top_ids[k], top_lps[k], on_token)
                        if kd == EV_FINISH and on_finish is not None:
                            on_finish(r.index, r.result())

    def chat(self, messages: list[dict[str, str]] | list[list[dict[str, str]]],
             params: SamplingParams | None = None, chat_template: str | None = None,
             on_token: Callable[[int, int, str], None] | None = None) -> list[Completion]:
        """Generate replies to one conversation or a list of them, through the model's chat template."""
        convs = cast("list[list[dict[str, str]]]",
                     [messages] if messages and isinstance(messages[0], dict) else messages)
        tok = self._tok()
        prompts = [tok.encode(tok.apply_chat_template(c, True, chat_template)) for c in convs]
        return self.generate(prompts, params, on_token)

    # ---- scoring ----

    @_exclusive
    def logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Float32 logits [n, vocab] of every position of ``token_ids`` (one forward pass)."""
        ids = [int(t) for t in token_ids]
        seq = self.engine.add(ids, max_tokens=0, prompt_logits=True)
        try:
            self._run_to_idle()
            return self.engine.prompt_logits(seq, len(ids), self.info["vocab"])
        finally:
            self.engine.release(seq)

    def loglikelihood(self, pairs: Sequence[tuple[str, str]], add_bos: bool | None = None,
                      share_prefix: bool = True) -> list[tuple[float, bool]]:
        """(sum of log-probabilities of the continuation, whether it is the greedy continuation) for
        each (context, continuation) pair, as lm-evaluation-harness defines it: trailing spaces of the
        context move to the continuation; the model reads encode(context) followed by the tokens of
        encode(context + continuation) past that many (so a merge across the boundary is scored as
        the harness scores it); an empty context is the BOS token (EOS where there is none). A
        prefix shared by several contexts, such as a few-shot header, is computed once (score_tokens).
        A sequence longer than ``ctx`` + 1 keeps its last ``ctx`` + 1 tokens, as the harness does with
        ``max_length``: the last token is scored, never fed. ``share_prefix=False`` computes every
        request whole (for comparisons; the same numbers)."""
        return self.score_tokens(self.loglikelihood_tokens(pairs, add_bos), share_prefix)

    def loglikelihood_tokens(self, pairs: Sequence[tuple[str, str]],
                             add_bos: bool | None = None) -> list[tuple[list[int], int]]:
        """The (token ids, n_context) requests `loglikelihood` scores for ``pairs`` (see there)."""
        tok = self._tok()
        moved = []   # (context, continuation) with the context's trailing spaces moved
        for context, continuation in pairs:
            n_sp = len(context) - len(context.rstrip())
            moved.append((context[:-n_sp], context[-n_sp:] + continuation) if n_sp else (context, continuation))
        # every distinct context and context + continuation encoded once, all at once (a question's answers
        # share its context, which is most of the characters)
        texts = list(dict.fromkeys(t for c, k in moved if c for t in (c, c + k)))
        enc = dict(zip(texts, tok.encode_batch(texts, add_bos)))
        reqs = []
        for context, continuation in moved:
            if context == "":
                start = tok.bos_id if tok.bos_id is not None else tok.eos_id
                if start is None:
                    raise ValueError(f"{self.path.name}: an empty context is scored after BOS (or EOS), and this "
                                     "model's vocabulary has neither; give each request a context")
                ctx_ids, cont_ids = [start], tok.encode(continuation, add_bos=False)
            else:
                ctx_ids = enc[context]
                cont_ids = enc[context + continuation][len(ctx_ids):]
            if not cont_ids:
                raise ValueError(f"continuation {continuation!r} encodes to no tokens")
            ids = (ctx_ids + cont_ids)[-(self.ctx + 1):]  # truncated on the left, as the harness does
            reqs.append((ids, len(ids) - len(cont_ids)))
        return reqs

    @_exclusive
    def score_tokens(self, reqs: Sequence[tuple[Sequence[int], int]],
                     share_prefix: bool = True) -> list[tuple[float, bool]]:
        """For (token ids, n_context) requests: (sum logprob of ids[n_context:], all greedy). The last
        token is only scored, never fed, so a request may hold ``ctx`` + 1 tokens.

        The contexts form a tree of shared prefixes (the same context scored with several continuations,
        or a prefix of at least ``SHARED_PREFIX_MIN`` tokens, such as a few-shot header): each is computed
        once, held and forked, ``max_seqs`` requests at a time, as ``prefix_plan.plan_scoring`` plans it;
        the KV cache never holds more than one chunk's branch of the tree. Requests that differ only in
        their last token (the four letters of a multiple-choice question) run as one, the others' last
        tokens scored from the same row (the engine's ``alt_tokens``): the same numbers.
        ``share_prefix=False`` holds nothing: each request is computed whole."""
        reqs = [(list(ids), int(n)) for ids, n in reqs]
        for ids, n in reqs:
            if not 1 <= n < len(ids):
                raise ValueError(f"a request needs 1 <= n_context < {len(ids)} (its length), got {n}")
        # one engine request per (all tokens but the last, n_context): the first request of each and the
        # last tokens of the rest
        groups: dict[tuple[tuple[int, ...], int], list[int]] = {}
        for i, (ids, n) in enumerate(reqs):
            groups.setdefault((tuple(ids[:-1]), n) if share_prefix else (tuple(ids), -1 - i), []).append(i)
        members = list(groups.values())
        plan = plan_scoring([reqs[g[0]][0][:reqs[g[0]][1]] for g in members], max(1, self.max_seqs), share_prefix)
        held: dict[tuple[int, ...], int] = {}
        live: list[int] = []
        out: list[tuple[float, bool]] = [(0.0, False)] * len(reqs)
        try:
            for chunk in plan:
                for p in chunk.release:
                    self.engine.release(held.pop(p))
                for level in chunk.hold:
                    for p, up in level:
                        held[p] = self.engine.add(list(p), max_tokens=0, hold=True,
                                                  fork_from=-1 if up is None else held[up])
                    self._run_to_idle()
                for g, base in chunk.score:
                    ids, n_ctx = reqs[members[g][0]]
                    alt = [reqs[i][0][-1] for i in members[g][1:]]
                    live.append(self.engine.add(ids, max_tokens=0, prompt_logprobs_from=n_ctx - 1, alt_tokens=alt,
                                                fork_from=-1 if base is None else held[base]))
                self._run_to_idle()
                for (g, _), s in zip(chunk.score, live):
                    first = members[g][0]
                    lp, greedy = self.engine.prompt_logprobs(s, len(reqs[first][0]) - reqs[first][1])
                    alt_lp, alt_greedy = (self.engine.alt_logprobs(s, len(members[g]) - 1) if len(members[g]) > 1
                                          else (lp[:0], greedy[:0]))
                    for k, i in enumerate(members[g]):
                        if k:
                            lp[-1], greedy[-1] = alt_lp[k - 1], alt_greedy[k - 1]
                        out[i] = (float(np.sum(lp, dtype=np.float64)), bool(greedy.all()))
                        if not np.isfinite(out[i][0]):
                            raise NonFiniteError(f"{self.path.name}: the log-probability of request {i} is "
                                                 f"{out[i][0]}: the model's logits are not finite (NaN or "
                                                 "infinite weights or activations); check the model file")
                while live:
                    self.engine.release(live.pop())
            return out
        finally:
            for s in live + list(held.values()):
                self.engine.release(s)


class Prefix:
    """A prompt prefix held in the engine's KV cache (see ``LLM.hold_prefix``)."""

    def __init__(self, llm: LLM, ids: list[int], seq: int):
        self.llm, self.ids = llm, ids
        self.seq: int | None = seq   # None once released

    def __len__(self) -> int:
        return len(self.ids)

    def release(self) -> None:
        """Free the prefix's KV cache; later calls do nothing."""
        if self.seq is not None:
            self.llm._release(self.seq)
            self.seq = None

    def __enter__(self) -> Prefix:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class _Run:
    """Book-keeping of one request inside LLM.generate."""

    def __init__(self, llm: LLM, prompt: list[int], sp: SamplingParams):
        self.llm, self.prompt, self.sp = llm, prompt, sp
        self.index = 0
        self.seq: int | None = None
        self.tokens: list[int] = []
        self.lps: list[float] = []
        self.top: list[dict[int, float]] = []
        self.times: list[int] = []
        self.arrival = self.admit = self.finish_ns = 0
        self.cached = 0
        self.reason = ""
        self.stop_reason: str | int | None = None
        self.text = ""
        self.done = False
        self.prefix = self.read = 0   # incremental detokenization window (as vLLM's)

    def engine_args(self) -> dict:
        sp = self.sp
        stops = list(sp.stop_token_ids)
        tok = self.llm.tokenizer
        if not sp.ignore_eos and tok is not None:
            stops += tok.stop_ids
        seed = sp.seed if sp.seed is not None else int.from_bytes(os.urandom(8), "little")
        return dict(temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p, min_p=sp.min_p,
                    repetition_penalty=sp.repetition_penalty, presence_penalty=sp.presence_penalty,
                    frequency_penalty=sp.frequency_penalty, seed=seed, max_tokens=sp.max_tokens,
                    min_tokens=sp.min_tokens, logprobs=sp.logprobs or 0, stop_tokens=stops)

    def event(self, kind: int, tok: int, lp: float, t: int, top_ids: np.ndarray, top_lps: np.ndarray,
              on_token: Callable[[int, int, str], None] | None) -> None:
        if kind == EV_ARRIVAL:
            self.arrival = t
        elif kind == EV_ADMIT:
            self.admit, self.cached = t, tok
        elif kind == EV_TOKEN and not self.done:
            self.tokens.append(tok)
            self.lps.append(lp)
            self.times.append(t)
            if self.sp.logprobs:
                self.top.append({int(i): float(v) for i, v in zip(top_ids[: self.sp.logprobs], top_lps) if i >= 0})
            self._text_update(tok, on_token)
        elif kind == EV_FINISH:
            self.finish_ns = t
            if not self.reason:
                self.reason = FINISH_REASONS.get(tok, "abort")
                if self.reason == "stop" and self.tokens:
                    self.stop_reason = self.tokens[-1]

    def _text_update(self, tok: int, on_token: Callable[[int, int, str], None] | None) -> None:
        """Extend the text by the new token's characters, decoding only a short window of tokens,
        and end the request at a stop string. Skipped when nobody looks at partial text."""
        tk = self.llm.tokenizer
        if tk is None or not (on_token or self.sp.stop):
            if on_token:
                on_token(self.index, tok, "")
            return
        new = tk.decode(self.tokens[self.prefix:])
        if new.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for its other bytes
            if on_token:
                on_token(self.index, tok, "")
            return
        delta = new[len(tk.decode(self.tokens[self.prefix:self.read])):]
        self.prefix, self.read = self.read, len(self.tokens)
        text = self.text + delta
        # as vLLM: no stop string ends a request before min_tokens, nor is one looked for in text before then
        for s in self.sp.stop if len(self.tokens) >= self.sp.min_tokens else ():
            at = text.find(s, max(0, len(self.text) - len(s) + 1))
            if at >= 0:
                text = text[: at + len(s)] if self.sp.include_stop_str_in_output else text[:at]
                self.reason, self.stop_reason, self.done = "stop", s, True
                self.llm.engine.abort(self.seq)
                break
        delta, self.text = text[len(self.text):], text
        if on_token:
            on_token(self.index, tok, delta)

    def result(self) -> Completion:
        if self.llm.tokenizer is not None and self.stop_reason not in self.sp.stop:
            self.text = self.llm.tokenizer.decode(self.tokens)  # the whole output, decoded once
        return Completion(self.prompt, self.text, self.tokens, self.lps, self.top if self.sp.logprobs else None,
                          self.reason or "abort", self.stop_reason, self.arrival, self.admit,
                          np.asarray(self.times, dtype=np.uint64), self.finish_ns, self.cached)
