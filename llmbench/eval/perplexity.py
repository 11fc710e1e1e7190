"""Perplexity and KL divergence exactly as llama.cpp's ``llama-perplexity`` defines them, on llmbench's engine.

The method (llama.cpp tools/perplexity/perplexity.cpp, ``perplexity`` and ``kl_divergence``):

- The whole text is tokenized once, with BOS in front when the model adds one (a file's one trailing
  newline dropped first, as ``-f`` does: `load_text`). At least 2 * ``ctx`` tokens are needed.
- It is cut into ``len(tokens) // ctx`` chunks of ``ctx`` tokens (at most ``max_chunks``, ``--chunks``);
  each chunk is evaluated from an empty KV cache, its first token replaced by BOS when the model adds
  BOS (for the first chunk that is the BOS already there; for the others a text token is lost).
- With ``first = ctx // 2``, the logits at positions ``first .. ctx-2`` score the tokens
  ``first+1 .. ctx-1``: ``ctx - 1 - first`` tokens a chunk (255 of 512), each predicted from at least
  half a context.
- PPL = exp(mean nll); its ± is PPL times the standard error of the mean nll,
  sqrt((mean(nll²) - mean(nll)²) / (N - 1)).
- KL divergence, per scored token: KLD(base || test) = Σ p_base (ln p_base - ln p_test) over the
  vocabulary, Δp = p_test - p_base of the correct token, and whether the two argmaxes agree. Means
  carry the same standard error (0 below 11 tokens, as llama.cpp); KLD and Δp percentiles interpolate
  linearly (numpy's default, llama.cpp's ``percentile``); RMS Δp's error is 0.5 / RMS times the error
  of mean(Δp²); ln(PPL(Q)/PPL(base)) and PPL(Q) - PPL(base) subtract the covariance of the two mean
  nlls; the correlation is that covariance over the product of their errors; same-top's error is
  sqrt(p (1 - p) / (N - 1)).

What differs, on purpose: every quantity is computed in float64 from the engine's float32 logits,
and the base model's log-probabilities are exact. llama-perplexity stores them in a file as 16-bit
steps of (max - min) / 65535 <= 16 / 65535 nats, everything below max - 16 clamped, and sums KLD only
where ln p_base > -16, so its KLD and PPL(base) carry rounding of up to 1.2e-4 nats in each base
log-probability. The two models run in the same process over the same chunks, so no logits file is
written: `kl_divergences` scores several quantizations against one base pass.

Tested by tests/test_eval_perplexity.py against an independent NumPy computation from `LLM.logits`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .data import find

if TYPE_CHECKING:
    from ..llm import LLM

WIKITEXT2_FILE = "wikitext-2-raw-test.txt"
ROWS = 64   # logits rows turned into float64 at a time (64 x 49152 doubles: 25 MB)

# (label, fraction) as llama-perplexity prints them, top down.
KLD_QUANTILES = (("max", 1.0), ("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9),
                 ("median", 0.5), ("10.0%", 0.1), ("5.0%", 0.05), ("1.0%", 0.01), ("0.1%", 0.001), ("min", 0.0))
DP_QUANTILES = (("max", 1.0), ("99.9%", 0.999), ("99.0%", 0.99), ("95.0%", 0.95), ("90.0%", 0.9), ("75.0%", 0.75),
                ("median", 0.5), ("25.0%", 0.25), ("10.0%", 0.1), ("5.0%", 0.05), ("1.0%", 0.01), ("0.1%", 0.001),
                ("min", 0.0))

Progress = Callable[[int, int], None]   # (chunks done, chunks in all), after each chunk


# ---- input ----

def load_text(path: str | os.PathLike[str] | None = None, data_dir: str | os.PathLike[str] | None = None) -> str:
    """The text of ``path`` (default: WikiText-2's raw test split, found by `llmbench.eval.data.find`), as
    llama-perplexity's ``-f`` reads it: the bytes as they are, one trailing newline dropped."""
    p = Path(path) if path is not None else find("wikitext2", data_dir) / WIKITEXT2_FILE
    if p.is_dir():
        p = p / WIKITEXT2_FILE
    text = p.read_bytes().decode("utf-8")
    return text[:-1] if text.endswith("\n") else text


def _bos(llm: LLM) -> int | None:
    """The BOS id llama-perplexity puts at the start of each chunk: only for a model that adds BOS."""
    tok = llm.tokenizer
    if tok is not None:
        return tok.bos_id if tok.add_bos else None
    meta = llm.file.metadata
    if meta.get("tokenizer.ggml.add_bos_token") and "tokenizer.ggml.bos_token_id" in meta:
        return int(meta["tokenizer.ggml.bos_token_id"])
    return None


def _tokens(llm: LLM, text_or_tokens: str | Sequence[int] | np.ndarray) -> list[int]:
    if isinstance(text_or_tokens, str):
        return llm.tokenize(text_or_tokens)   # BOS in front when the model adds it (add_special)
    ids = [int(t) for t in text_or_tokens]
    vocab = llm.info["vocab"]
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise ValueError(f"token id {bad} is outside the vocabulary (0..{vocab - 1})")
    return ids


def _chunks(llms: Sequence[LLM], tokens: list[int], ctx: int, max_chunks: int | None) -> list[list[int]]:
    """The token lists llama-perplexity evaluates, BOS first where the model adds it."""
    if ctx < 3:
        raise ValueError(f"ctx must be >= 3 (a chunk scores ctx - 1 - ctx // 2 tokens), got {ctx}")
    if max_chunks is not None and max_chunks < 1:
        raise ValueError(f"max_chunks must be >= 1 (or None for all), got {max_chunks}")
    for llm in llms:
        if llm.ctx < ctx:
            raise ValueError(f"{llm.path.name} was loaded with ctx={llm.ctx}, shorter than the chunk length {ctx}; "
                             f"load it with LLM(path, ctx={ctx}) or more")
    if len(tokens) < 2 * ctx:
        raise ValueError(f"perplexity with a context of {ctx} needs at least {2 * ctx} tokens (as llama-perplexity); "
                         f"the text tokenizes to only {len(tokens)}: give a longer text or a smaller ctx")
    n = len(tokens) // ctx
    if max_chunks is not None:
        n = min(n, max_chunks)
    bos = _bos(llms[0])
    out = []
    for i in range(n):
        c = tokens[i * ctx:(i + 1) * ctx]
        if bos is not None:
            c[0] = bos
        out.append(c)
    return out


def check_same_vocab(llm: LLM, base: LLM) -> None:
    """Raise ValueError unless ``llm`` and ``base`` score the same token ids: same vocabulary size, same
    token strings, same BOS handling."""
    a, b = llm.info["vocab"], base.info["vocab"]
    if a != b:
        raise ValueError(f"{llm.path.name} has {a} tokens in its vocabulary, the base {base.path.name} has {b}: "
                         "KL divergence compares models of one vocabulary (quantizations of one model)")
    ta = llm.file.metadata.get("tokenizer.ggml.tokens")
    tb = base.file.metadata.get("tokenizer.ggml.tokens")
    if ta is not None and tb is not None:
        i = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), None)
        if i is not None:
            raise ValueError(f"{llm.path.name} and the base {base.path.name} differ at token {i} "
                             f"({ta[i]!r} vs {tb[i]!r}): KL divergence needs one vocabulary")
    if _bos(llm) != _bos(base):
        raise ValueError(f"{llm.path.name} and the base {base.path.name} differ in BOS ({_bos(llm)} vs {_bos(base)}, "
                         "None: not added), so their chunks would differ")


# ---- per-token quantities (float64) ----

def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=1, keepdims=True)
    x -= np.log(np.exp(x).sum(axis=1, keepdims=True))
    return x


def _scored(chunk: list[int], ctx: int) -> tuple[int, np.ndarray]:
    """(first, targets): logits rows first .. ctx-2 predict the tokens first+1 .. ctx-1."""
    first = ctx // 2
    return first, np.asarray(chunk[first + 1:ctx], dtype=np.int64)


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-ln p(target) of each row."""
    out = np.empty(len(targets))
    for r in range(0, len(targets), ROWS):
        lp = _log_softmax(logits[r:r + ROWS])
        out[r:r + ROWS] = -lp[np.arange(len(lp)), targets[r:r + ROWS]]
    return out


# ---- statistics, as llama-perplexity prints them ----

def _mean_err(s: float, s2: float, n: int, min_n: int = 11) -> tuple[float, float]:
    """Mean and its standard error sqrt((s2/n - mean²) / (n - 1)) from sums; the error is 0 when the
    variance is not positive or n < min_n (llama.cpp's mean_and_uncertainty takes n > 10)."""
    if n < 1:
        return 0.0, 0.0
    m = s / n
    var = s2 / n - m * m
    return m, math.sqrt(var / (n - 1)) if var > 0 and n >= max(min_n, 2) else 0.0


def _cov(a: np.ndarray, b: np.ndarray) -> float:
    """Covariance of the means of a and b (llama.cpp's ``covariance``: 0 below 10 values)."""
    n = len(a)
    if n < 10:
        return 0.0
    return (float(np.dot(a, b)) / n - (float(a.sum()) / n) * (float(b.sum()) / n)) / (n - 1)


def _quantiles(v: np.ndarray, table: tuple[tuple[str, float], ...]) -> dict[str, float]:
    q = np.quantile(v, [f for _, f in table]) if len(v) else [0.0] * len(table)
    return {label: float(x) for (label, _), x in zip(table, q)}


@dataclass
class PerplexityResult:
    """llama-perplexity's perplexity of ``model`` on a text. ``chunks``: per chunk its own PPL and the
    running estimate after it (``ppl``, what llama-perplexity prints as ``[i]ppl``), with the seconds its
    forward pass took. ``nll``: -ln p of every scored token, chunk by chunk."""

    model: str
    ctx: int
    n_tokens: int          # tokens in the text
    n_chunks: int
    n_scored: int          # tokens scored: n_chunks * (ctx - 1 - ctx // 2)
    ppl: float
    ppl_err: float
    nll_mean: float
    nll_err: float
    chunks: list[dict[str, float]]
    seconds: float         # wall time of the whole run
    engine_seconds: float  # of that, in LLM.logits
    nll: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.n_chunks * self.ctx / self.engine_seconds if self.engine_seconds > 0 else 0.0

    def to_json(self, values: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; ``values=True`` adds the per-token nll."""
        d = {k: getattr(self, k) for k in ("model", "ctx", "n_tokens", "n_chunks", "n_scored", "ppl", "ppl_err",
                                           "nll_mean", "nll_err", "chunks", "seconds", "engine_seconds")}
        d["metric"] = "perplexity"
        d["prefill_tokens_per_s"] = self.prefill_tokens_per_s
        if values:
            d["nll"] = self.nll.tolist()
        return d

    def table(self) -> str:
        return (f"perplexity of {self.model}: ctx {self.ctx}, {self.n_chunks} chunks, {self.n_scored} tokens scored "
                f"(text: {self.n_tokens} tokens)\n"
                f"Final estimate: PPL = {self.ppl:.4f} +/- {self.ppl_err:.5f}\n"
                f"{self.seconds:.1f} s ({self.prefill_tokens_per_s:.1f} tokens/s prefill)")

    __str__ = table

    @classmethod
    def concat(cls, parts: Sequence[PerplexityResult]) -> PerplexityResult:
        """The result of one run over consecutive pieces of a token stream, from the runs over each piece
        (``tokens[k * n * ctx:(k + 1) * n * ctx]``, n >= 2 chunks each): the same chunks, so the same
        numbers, up to summation order. For long runs done in resumable pieces."""
        _same(parts, ("model", "ctx"))
        secs = [c["seconds"] for p in parts for c in p.chunks]
        return _ppl_result(parts[0].model, parts[0].ctx, sum(p.n_tokens for p in parts),
                           np.concatenate([p.nll for p in parts]), secs, sum(p.seconds for p in parts))


def _same(parts: Sequence[Any], keys: tuple[str, ...]) -> None:
    if not parts:
        raise ValueError("concat needs at least one result")
    for k in keys:
        if len({getattr(p, k) for p in parts}) > 1:
            raise ValueError(f"concat: the results differ in {k} ({sorted({str(getattr(p, k)) for p in parts})})")


def _ppl_result(model: str, ctx: int, n_tokens: int, nll: np.ndarray, chunk_seconds: Sequence[float],
                seconds: float) -> PerplexityResult:
    per = ctx - 1 - ctx // 2
    sums, sums2 = np.cumsum(nll), np.cumsum(nll * nll)
    records = []
    for i, dt in enumerate(chunk_seconds):
        e = (i + 1) * per
        m, err = _mean_err(float(sums[e - 1]), float(sums2[e - 1]), e, min_n=2)
        records.append({"chunk": i + 1, "ppl": math.exp(m), "ppl_err": math.exp(m) * err,
                        "chunk_ppl": math.exp(float(nll[e - per:e].mean())), "seconds": dt})
    # llama-perplexity's final estimate: no lower bound on the count beyond N > 1
    m, err = _mean_err(float(nll.sum()), float(np.dot(nll, nll)), len(nll), min_n=2)
    return PerplexityResult(model, ctx, n_tokens, len(chunk_seconds), len(nll), math.exp(m), math.exp(m) * err,
                            m, err, records, seconds, float(sum(chunk_seconds)), nll)


def perplexity(llm: LLM, text_or_tokens: str | Sequence[int] | np.ndarray, ctx: int = 512,
               max_chunks: int | None = None, progress: Progress | None = None) -> PerplexityResult:
    """PPL of ``llm`` on a text (tokenized here, BOS first when the model adds it) or on token ids
    (used as they are), computed as llama-perplexity does: see the module's docstring."""
    t0 = time.perf_counter()
    tokens = _tokens(llm, text_or_tokens)
    chunks = _chunks([llm], tokens, ctx, max_chunks)
    per = ctx - 1 - ctx // 2
    nll = np.empty(len(chunks) * per)
    secs = []
    for i, chunk in enumerate(chunks):
        t = time.perf_counter()
        logits = _finite(llm, llm.logits(chunk))
        secs.append(time.perf_counter() - t)
        first, targets = _scored(chunk, ctx)
        nll[i * per:(i + 1) * per] = _nll(logits[first:ctx - 1], targets)
        if progress:
            progress(i + 1, len(chunks))
    return _ppl_result(llm.path.name, ctx, len(tokens), nll, secs, time.perf_counter() - t0)


def _finite(llm, logits: np.ndarray) -> np.ndarray:
    """``logits``, after checking they are all finite: a NaN would make the whole score NaN."""
    if not np.isfinite(logits).all():
        from ..llm import NonFiniteError

        raise NonFiniteError(f"{llm.path.name}: the model's logits are not finite (NaN or infinite weights or "
                             "activations), so no perplexity can be computed; check the model file")
    return logits


# ---- KL divergence ----

@dataclass
class KLDResult:
    """llama-perplexity's ``--kl-divergence`` statistics of ``model`` against ``base``. Probabilities
    (Δp, same-top) are fractions here; `table` prints them in percent as llama-perplexity does.
    ``chunks``: the running values after each chunk (llama-perplexity's per-chunk lines). The per-token
    values (``kld``, ``dp``, ``nll``, ``nll_base``, ``same_top``) are kept in chunk order."""

    model: str
    base: str
    ctx: int
    n_tokens: int
    n_chunks: int
    n_scored: int
    ppl: float
    ppl_err: float
    ppl_base: float
    ppl_base_err: float
    ln_ppl_corr: float                # Cor(ln PPL(Q), ln PPL(base))
    ln_ppl_ratio: float               # mean ln(PPL(Q)/PPL(base))
    ln_ppl_ratio_err: float
    ppl_ratio: float
    ppl_ratio_err: float
    ppl_diff: float
    ppl_diff_err: float
    kld: float                        # mean KLD(base || model), nats
    kld_err: float
    kld_quantiles: dict[str, float]
    dp: float                         # mean Δp = p_model - p_base of the correct token
    dp_err: float
    dp_quantiles: dict[str, float]
    dp_rms: float
    dp_rms_err: float
    same_top: float                   # fraction of tokens whose argmax agrees
    same_top_err: float
    chunks: list[dict[str, float]]
    seconds: float                    # wall time of the run (shared by all models of one kl_divergences call)
    engine_seconds: float             # in this model's LLM.logits
    base_engine_seconds: float        # in the base's
    kld_values: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    dp_values: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    nll: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    nll_base: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))
    same_top_values: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0, dtype=bool))

    _SCALARS = ("model", "base", "ctx", "n_tokens", "n_chunks", "n_scored", "ppl", "ppl_err", "ppl_base",
                "ppl_base_err", "ln_ppl_corr", "ln_ppl_ratio", "ln_ppl_ratio_err", "ppl_ratio", "ppl_ratio_err",
                "ppl_diff", "ppl_diff_err", "kld", "kld_err", "kld_quantiles", "dp", "dp_err", "dp_quantiles",
                "dp_rms", "dp_rms_err", "same_top", "same_top_err", "chunks", "seconds", "engine_seconds",
                "base_engine_seconds")

    def to_json(self, values: bool = False) -> dict[str, Any]:
        """A JSON-ready dict; ``values=True`` adds the per-token KLD, Δp, nll, nll_base and same-top."""
        d = {k: getattr(self, k) for k in self._SCALARS}
        d["metric"] = "kl_divergence"
        if values:
            for k in ("kld_values", "dp_values", "nll", "nll_base", "same_top_values"):
                d[k] = getattr(self, k).tolist()
        return d

    def table(self) -> str:
        """The closing statistics, laid out as llama-perplexity prints them."""
        L = [f"KL divergence of {self.model} against {self.base}: ctx {self.ctx}, {self.n_chunks} chunks, "
             f"{self.n_scored} tokens scored",
             "====== Perplexity statistics ======",
             f"Mean PPL(Q)                   : {self.ppl:10.6f} ± {self.ppl_err:10.6f}",
             f"Mean PPL(base)                : {self.ppl_base:10.6f} ± {self.ppl_base_err:10.6f}",
             f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * self.ln_ppl_corr:6.2f}%",
             f"Mean ln(PPL(Q)/PPL(base))     : {self.ln_ppl_ratio:10.6f} ± {self.ln_ppl_ratio_err:10.6f}",
             f"Mean PPL(Q)/PPL(base)         : {self.ppl_ratio:10.6f} ± {self.ppl_ratio_err:10.6f}",
             f"Mean PPL(Q)-PPL(base)         : {self.ppl_diff:10.6f} ± {self.ppl_diff_err:10.6f}",
             "",
             "====== KL divergence statistics ======",
             f"Mean    KLD: {self.kld:10.6f} ± {self.kld_err:10.6f}"]
        L += [f"{_label(k, 'KLD')}: {v:10.6f}" for k, v in self.kld_quantiles.items()]
        L += ["", "====== Token probability statistics ======",
              f"Mean    Δp: {100 * self.dp:6.3f} ± {100 * self.dp_err:5.3f} %"]
        L += [f"{_label(k, 'Δp')}: {100 * v:6.3f}%" for k, v in self.dp_quantiles.items()]
        L += [f"RMS Δp    : {100 * self.dp_rms:6.3f} ± {100 * self.dp_rms_err:5.3f} %",
              f"Same top p: {100 * self.same_top:6.3f} ± {100 * self.same_top_err:5.3f} %"]
        return "\n".join(L)

    __str__ = table

    @classmethod
    def concat(cls, parts: Sequence[KLDResult]) -> KLDResult:
        """As `PerplexityResult.concat`: one result from runs over consecutive pieces of a token stream."""
        _same(parts, ("model", "base", "ctx"))
        cat = {k: np.concatenate([getattr(p, k) for p in parts])
               for k in ("nll", "nll_base", "kld_values", "dp_values", "same_top_values")}
        return _kld_result(parts[0].model, parts[0].base, parts[0].ctx, sum(p.n_tokens for p in parts), cat["nll"],
                           cat["nll_base"], cat["kld_values"], cat["dp_values"], cat["same_top_values"],
                           sum(p.seconds for p in parts), sum(p.engine_seconds for p in parts),
                           sum(p.base_engine_seconds for p in parts))


def _label(key: str, what: str) -> str:
    name = {"max": "Maximum", "min": "Minimum", "median": "Median"}.get(key)
    return f"{name:<7} {what}" if name else f"{key:>5}   {what}"


def _kld_stats(nll: np.ndarray, nll_b: np.ndarray, kld: np.ndarray, dp: np.ndarray,
               top: np.ndarray) -> dict[str, float]:
    """The running values llama-perplexity prints per chunk, and the final ones, from per-token values."""
    n = len(nll)
    lq, lq_e = _mean_err(float(nll.sum()), float(np.dot(nll, nll)), n)
    lb, lb_e = _mean_err(float(nll_b.sum()), float(np.dot(nll_b, nll_b)), n)
    cov = _cov(nll, nll_b)
    ppl, ppl_b = math.exp(lq), math.exp(lb)
    ratio_e = math.sqrt(max(lq_e * lq_e + lb_e * lb_e - 2 * cov, 0.0))
    k, k_e = _mean_err(float(kld.sum()), float(np.dot(kld, kld)), n)
    d, d_e = _mean_err(float(dp.sum()), float(np.dot(dp, dp)), n)
    dp2 = dp * dp
    mse, mse_e = _mean_err(float(dp2.sum()), float(np.dot(dp2, dp2)), n)
    rms = math.sqrt(mse)
    top_p = float(top.sum()) / n if n else 0.0
    return {"ppl": ppl, "ppl_err": ppl * lq_e, "ppl_base": ppl_b, "ppl_base_err": ppl_b * lb_e,
            "ln_ppl_corr": cov / (lq_e * lb_e) if lq_e * lb_e > 0 else 0.0,
            "ln_ppl_ratio": lq - lb, "ln_ppl_ratio_err": ratio_e,
            "ppl_ratio": math.exp(lq - lb), "ppl_ratio_err": math.exp(lq - lb) * ratio_e,
            "ppl_diff": ppl - ppl_b,
            "ppl_diff_err": math.sqrt(max((ppl * lq_e) ** 2 + (ppl_b * lb_e) ** 2 - 2 * ppl * ppl_b * cov, 0.0)),
            "kld": k, "kld_err": k_e, "dp": d, "dp_err": d_e,
            "dp_rms": rms, "dp_rms_err": 0.5 / rms * mse_e if rms > 0 else 0.0,
            "same_top": top_p, "same_top_err": math.sqrt(top_p * (1 - top_p) / (n - 1)) if n > 1 else 0.0}


def _against_base(logits: np.ndarray, lp_base: np.ndarray, top_base: np.ndarray,
                  targets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(nll, KLD(base || test), p_test of the target, argmax agreement) of each row of a test model's
    logits against the base's float64 log-probabilities."""
    n = len(targets)
    nll, kld, p, top = np.empty(n), np.empty(n), np.empty(n), np.empty(n, dtype=bool)
    for r in range(0, n, ROWS):
        s = slice(r, min(r + ROWS, n))
        lt = _log_softmax(logits[s])
        lb = lp_base[s]
        rows = np.arange(len(lt))
        nll[s] = -lt[rows, targets[s]]
        p[s] = np.exp(lt[rows, targets[s]])
        kld[s] = np.einsum("ij,ij->i", np.exp(lb), lb - lt)
        top[s] = np.argmax(logits[s], axis=1) == top_base[s]   # the first maximum, as llama.cpp's scan
    return nll, kld, p, top


def kl_divergences(llms: Sequence[LLM], base_llm: LLM, text_or_tokens: str | Sequence[int] | np.ndarray,
                   ctx: int = 512, max_chunks: int | None = None,
                   progress: Progress | None = None) -> list[KLDResult]:
    """`kl_divergence` of several models against one base, the base evaluated once per chunk."""
    if not llms:
        raise ValueError("kl_divergences needs at least one model to compare with the base")
    for llm in llms:
        check_same_vocab(llm, base_llm)
    t0 = time.perf_counter()
    tokens = _tokens(base_llm, text_or_tokens)   # llama-perplexity tokenizes in the base run
    chunks = _chunks([base_llm, *llms], tokens, ctx, max_chunks)
    per, first = ctx - 1 - ctx // 2, ctx // 2
    n = len(chunks) * per
    nll_b = np.empty(n)
    cols = {id(m): {"nll": np.empty(n), "kld": np.empty(n), "dp": np.empty(n), "top": np.empty(n, dtype=bool)}
            for m in llms}
    engine_s = {id(m): 0.0 for m in llms}
    base_s = 0.0
    for i, chunk in enumerate(chunks):
        _, targets = _scored(chunk, ctx)
        t = time.perf_counter()
        base_logits = _finite(base_llm, base_llm.logits(chunk)[first:ctx - 1])
        base_s += time.perf_counter() - t
        lp_base = np.empty((per, base_logits.shape[1]))
        for r in range(0, per, ROWS):
            lp_base[r:r + ROWS] = _log_softmax(base_logits[r:r + ROWS])
        top_base = np.argmax(base_logits, axis=1)
        s = slice(i * per, (i + 1) * per)
        nll_b[s] = -lp_base[np.arange(per), targets]
        p_base = np.exp(-nll_b[s])
        for llm in llms:
            c = cols[id(llm)]
            t = time.perf_counter()
            llm_logits = _finite(llm, llm.logits(chunk)[first:ctx - 1]) if llm is not base_llm else base_logits
            engine_s[id(llm)] += time.perf_counter() - t
            c["nll"][s], c["kld"][s], p, c["top"][s] = _against_base(llm_logits, lp_base, top_base, targets)
            c["dp"][s] = p - p_base
        if progress:
            progress(i + 1, len(chunks))
    seconds = time.perf_counter() - t0
    return [_kld_result(llm.path.name, base_llm.path.name, ctx, len(tokens), c["nll"], nll_b, c["kld"], c["dp"],
                        c["top"], seconds, engine_s[id(llm)], base_s) for llm, c in ((m, cols[id(m)]) for m in llms)]


def _kld_result(model: str, base: str, ctx: int, n_tokens: int, nll: np.ndarray, nll_b: np.ndarray, kld: np.ndarray,
                dp: np.ndarray, top: np.ndarray, seconds: float, engine_s: float, base_s: float) -> KLDResult:
    per = ctx - 1 - ctx // 2
    n_chunks = len(nll) // per
    records = []
    for i in range(n_chunks):   # the running values llama-perplexity prints after each chunk
        e = (i + 1) * per
        run = _kld_stats(nll[:e], nll_b[:e], kld[:e], dp[:e], top[:e])
        records.append({"chunk": i + 1, **{k: run[k] for k in (
            "ppl", "ppl_err", "ln_ppl_ratio", "ln_ppl_ratio_err", "kld", "kld_err", "dp_rms", "dp_rms_err",
            "same_top", "same_top_err")}})
    return KLDResult(model=model, base=base, ctx=ctx, n_tokens=n_tokens, n_chunks=n_chunks, n_scored=len(nll),
                     **_kld_stats(nll, nll_b, kld, dp, top), kld_quantiles=_quantiles(kld, KLD_QUANTILES),
                     dp_quantiles=_quantiles(dp, DP_QUANTILES), chunks=records, seconds=seconds,
                     engine_seconds=engine_s, base_engine_seconds=base_s, kld_values=kld, dp_values=dp, nll=nll,
                     nll_base=nll_b, same_top_values=top)


def kl_divergence(llm: LLM, base_llm: LLM, text_or_tokens: str | Sequence[int] | np.ndarray, ctx: int = 512,
                  max_chunks: int | None = None, progress: Progress | None = None) -> KLDResult:
    """KL divergence of ``llm`` from ``base_llm`` (KLD(base || llm)) and the other statistics of
    llama-perplexity's ``--kl-divergence``, both models run here over the same chunks (see the module's
    docstring). The two must share a vocabulary (ValueError otherwise). A text is tokenized by the base."""
    return kl_divergences([llm], base_llm, text_or_tokens, ctx, max_chunks, progress)[0]
