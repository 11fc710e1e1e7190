"""llmbench.eval.perplexity against an independent NumPy/SciPy computation of llama-perplexity's numbers.

The reference below re-derives everything from `LLM.logits` with its own loops: chunks of ctx tokens with
BOS first, rows ctx//2 .. ctx-2 scoring the next token, scipy's logsumexp, llama.cpp's percentile and
median written out, the standard errors from their formulas. The module must agree to 1e-9 relative
(both are float64 from the same float32 logits; only summation order differs). Real model:
stories260K (skipped when absent), at ctx 64 on a hand-written story; its Q8_0 requantization for KLD.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import logsumexp

from llmbench.eval import perplexity as ppl
from llmbench.llm import LLM
from llmbench.models.quantize import quantize_file

STORY = (
    "Once upon a time, there was a little girl named Lily. She loved to play in the park with her red ball. "
    "One day, the ball rolled far away under a big tree. Lily was sad and began to cry. A kind old dog came "
    "by and saw her. The dog ran to the tree and found the ball. He brought it back to Lily and wagged his "
    "tail. Lily smiled and hugged the dog. \"Thank you, dog!\" she said. They played together all day.\n"
    "The next morning, Lily went to the park again. The sun was warm and the birds were singing. She looked "
    "for the dog, but he was not there. Lily felt a little lonely. Then she heard a bark. The dog was with a "
    "boy named Tim. Tim said, \"This is my dog, Max. He likes to play ball.\" Lily and Tim threw the ball and "
    "Max ran after it. They laughed and ran until they were tired.\n"
    "At the end of the day, Lily's mom came to take her home. Lily said goodbye to Tim and Max. \"Can we play "
    "again tomorrow?\" she asked. Tim nodded and smiled. Lily went home happy. She knew she had made two new "
    "friends. From that day on, Lily, Tim and Max played in the park every day, and they were never sad again.\n"
    "One rainy day, they could not go to the park. Lily sat by the window and watched the rain fall. Her mom "
    "gave her some paper and a pencil. Lily drew a picture of the park, the big tree, the red ball, Tim and "
    "Max. When the rain stopped, she ran outside to show her friends. Tim loved the picture and Max barked. "
    "They put it on the wall of Tim's room, and every time they looked at it they remembered their happy days."
)
CTX = 64


@pytest.fixture(scope="module")
def llm(stories_path):
    return LLM(stories_path, threads=2, ctx=256)


@pytest.fixture(scope="module")
def q8(stories_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("q8") / "stories260K-Q8_0.gguf"
    quantize_file(stories_path, out, "Q8_0")
    return LLM(out, threads=2, ctx=256)


# ---- the independent reference ----

def ref_chunks(llm: LLM, text: str, ctx: int, max_chunks: int | None = None) -> list[list[int]]:
    toks = llm.tokenize(text)
    n = len(toks) // ctx if max_chunks is None else min(len(toks) // ctx, max_chunks)
    out = []
    for i in range(n):
        c = list(toks[i * ctx:(i + 1) * ctx])
        c[0] = llm.tokenizer.bos_id   # stories260K adds BOS
        out.append(c)
    return out


def ref_rows(llm: LLM, chunk: list[int], ctx: int):
    """(log-probabilities, target) of each scored row of one chunk."""
    logits = llm.logits(chunk).astype(np.float64)
    for j in range(ctx // 2, ctx - 1):
        row = logits[j]
        yield row - logsumexp(row), chunk[j + 1], int(np.argmax(logits[j]))


def ref_mean_err(v: list[float] | np.ndarray, min_n: int = 11) -> tuple[float, float]:
    v = np.asarray(v, dtype=np.float64)
    m = v.mean()
    var = np.mean(v * v) - m * m
    return m, (math.sqrt(var / (len(v) - 1)) if var > 0 and len(v) >= min_n else 0.0)


def ref_percentile(sorted_v: np.ndarray, f: float) -> float:
    if f <= 0:
        return sorted_v[0]
    if f >= 1:
        return sorted_v[-1]
    p = f * (len(sorted_v) - 1)
    ip = int(p)
    p -= ip
    return (1 - p) * sorted_v[ip] + p * sorted_v[min(ip + 1, len(sorted_v) - 1)]


def ref_median(sorted_v: np.ndarray) -> float:
    n = len(sorted_v)
    return 0.5 * (sorted_v[n // 2] + sorted_v[n // 2 - 1]) if n % 2 == 0 else sorted_v[n // 2]


def ref_ppl(llm: LLM, text: str, ctx: int, max_chunks: int | None = None) -> tuple[float, float, int]:
    nll = [-lp[t] for c in ref_chunks(llm, text, ctx, max_chunks) for lp, t, _ in ref_rows(llm, c, ctx)]
    m, e = ref_mean_err(nll, min_n=2)
    return math.exp(m), math.exp(m) * e, len(nll)


def ref_kld(llm: LLM, base: LLM, text: str, ctx: int) -> dict[str, float]:
    nll, nll_b, kld, dp, same = [], [], [], [], []
    for c in ref_chunks(base, text, ctx):
        for (lt, t, at), (lb, _, ab) in zip(ref_rows(llm, c, ctx), ref_rows(base, c, ctx)):
            nll.append(-lt[t])
            nll_b.append(-lb[t])
            kld.append(float(np.sum(np.exp(lb) * (lb - lt))))
            dp.append(math.exp(lt[t]) - math.exp(lb[t]))
            same.append(at == ab)
    n = len(nll)
    lq, lq_e = ref_mean_err(nll)
    lb_, lb_e = ref_mean_err(nll_b)
    a, b = np.array(nll), np.array(nll_b)
    cov = (np.mean(a * b) - a.mean() * b.mean()) / (n - 1)
    k, k_e = ref_mean_err(kld)
    d, d_e = ref_mean_err(dp)
    mse, mse_e = ref_mean_err(np.square(dp))
    top = sum(same) / n
    ks, ds = np.sort(kld), np.sort(dp)
    return {"ppl": math.exp(lq), "ppl_err": math.exp(lq) * lq_e, "ppl_base": math.exp(lb_),
            "ppl_base_err": math.exp(lb_) * lb_e, "ln_ppl_corr": cov / (lq_e * lb_e), "ln_ppl_ratio": lq - lb_,
            "ln_ppl_ratio_err": math.sqrt(lq_e ** 2 + lb_e ** 2 - 2 * cov),
            "ppl_diff": math.exp(lq) - math.exp(lb_),
            "ppl_diff_err": math.sqrt((math.exp(lq) * lq_e) ** 2 + (math.exp(lb_) * lb_e) ** 2
                                      - 2 * math.exp(lq) * math.exp(lb_) * cov),
            "kld": k, "kld_err": k_e, "dp": d, "dp_err": d_e, "dp_rms": math.sqrt(mse),
            "dp_rms_err": 0.5 / math.sqrt(mse) * mse_e, "same_top": top,
            "same_top_err": math.sqrt(top * (1 - top) / (n - 1)), "n": n,
            "kld_max": ks[-1], "kld_99.9": ref_percentile(ks, 0.999), "kld_95": ref_percentile(ks, 0.95),
            "kld_median": ref_median(ks), "kld_min": ks[0], "kld_0.1": ref_percentile(ks, 0.001),
            "dp_max": ds[-1], "dp_75": ref_percentile(ds, 0.75), "dp_median": ref_median(ds),
            "dp_1": ref_percentile(ds, 0.01), "dp_min": ds[0]}


def close(a: float, b: float, rtol: float = 1e-9, atol: float = 1e-13) -> bool:
    return abs(a - b) <= atol + rtol * abs(b)


# ---- perplexity ----

def test_perplexity_matches_reference(llm):
    n_tok = len(llm.tokenize(STORY))
    assert n_tok >= 6 * CTX, "the story should make several chunks"
    r = ppl.perplexity(llm, STORY, ctx=CTX)
    want, want_err, n = ref_ppl(llm, STORY, CTX)
    assert r.n_chunks == n_tok // CTX and r.n_scored == n == r.n_chunks * (CTX - 1 - CTX // 2)
    assert close(r.ppl, want) and close(r.ppl_err, want_err), (r.ppl, want, r.ppl_err, want_err)
    assert 1 < r.ppl < 20   # stories260K on a TinyStories-like text
    # the running estimate after the last chunk is the final one; each chunk's own PPL is its rows' alone
    assert close(r.chunks[-1]["ppl"], r.ppl) and close(r.chunks[-1]["ppl_err"], r.ppl_err)
    first = ref_chunks(llm, STORY, CTX)[0]
    own = [-lp[t] for lp, t, _ in ref_rows(llm, first, CTX)]
    assert close(r.chunks[0]["chunk_ppl"], math.exp(np.mean(own)))
    js = r.to_json(values=True)
    assert js["ppl"] == r.ppl and len(js["nll"]) == r.n_scored and "Final estimate: PPL" in str(r)


def test_perplexity_max_chunks_and_token_input(llm):
    r = ppl.perplexity(llm, STORY, ctx=CTX, max_chunks=2)
    want, want_err, n = ref_ppl(llm, STORY, CTX, max_chunks=2)
    assert r.n_chunks == 2 and r.n_scored == n and close(r.ppl, want) and close(r.ppl_err, want_err)
    # token ids are used as given: the text's tokens give the same numbers
    t = ppl.perplexity(llm, llm.tokenize(STORY), ctx=CTX, max_chunks=2)
    assert t.ppl == r.ppl and t.n_tokens == r.n_tokens
    seen = []
    ppl.perplexity(llm, STORY, ctx=CTX, max_chunks=3, progress=lambda d, tot: seen.append((d, tot)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_chunks_put_bos_first(llm):
    toks = llm.tokenize(STORY)
    chunks = ppl._chunks([llm], toks, CTX, None)
    assert all(c[0] == llm.tokenizer.bos_id for c in chunks)
    assert all(c[1:] == toks[i * CTX + 1:(i + 1) * CTX] for i, c in enumerate(chunks))


def test_bad_input(llm):
    short = llm.tokenize(STORY)[: 2 * CTX - 1]
    with pytest.raises(ValueError, match=f"at least {2 * CTX} tokens"):
        ppl.perplexity(llm, short, ctx=CTX)
    ppl.perplexity(llm, short + [short[1]], ctx=CTX)   # exactly 2 * ctx is enough
    with pytest.raises(ValueError, match="ctx=256"):
        ppl.perplexity(llm, STORY, ctx=512)
    with pytest.raises(ValueError, match="max_chunks"):
        ppl.perplexity(llm, STORY, ctx=CTX, max_chunks=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ppl.perplexity(llm, [1, 600] * CTX, ctx=CTX)


def test_load_text(tmp_path):
    p = tmp_path / "t.txt"
    p.write_bytes(b" = Title = \r\n\nline\n\n")
    assert ppl.load_text(p) == " = Title = \r\n\nline\n"   # -f drops one trailing newline only
    (tmp_path / "wikitext2").mkdir()
    (tmp_path / "wikitext2" / ppl.WIKITEXT2_FILE).write_text("wiki\n")
    assert ppl.load_text(None, data_dir=tmp_path) == "wiki"


# ---- KL divergence ----

def test_kld_of_a_model_against_itself(llm, stories_path):
    other = LLM(stories_path, threads=1, ctx=128)   # another engine, another thread count, the same logits
    for base in (llm, other):
        r = ppl.kl_divergence(llm, base, STORY, ctx=CTX)
        assert r.kld == 0 and r.kld_quantiles["max"] == 0 and r.same_top == 1 and r.dp == 0 and r.dp_rms == 0
        assert r.ppl == r.ppl_base and r.ln_ppl_ratio == 0 and r.ppl_ratio == 1
    assert close(r.ppl, ppl.perplexity(llm, STORY, ctx=CTX).ppl)


def test_kld_q8_matches_reference(llm, q8):
    r = ppl.kl_divergence(q8, llm, STORY, ctx=CTX)
    want = ref_kld(q8, llm, STORY, CTX)
    assert r.n_scored == want["n"]
    for k in ("ppl", "ppl_err", "ppl_base", "ppl_base_err", "ln_ppl_corr", "ln_ppl_ratio", "ln_ppl_ratio_err",
              "ppl_diff", "ppl_diff_err", "kld", "kld_err", "dp", "dp_err", "dp_rms", "dp_rms_err", "same_top",
              "same_top_err"):
        assert close(getattr(r, k), want[k]), (k, getattr(r, k), want[k])
    for mine, ref in (("max", "max"), ("99.9%", "99.9"), ("95.0%", "95"), ("median", "median"), ("min", "min"),
                      ("0.1%", "0.1")):
        assert close(r.kld_quantiles[mine], want["kld_" + ref]), mine
    for mine, ref in (("max", "max"), ("75.0%", "75"), ("median", "median"), ("1.0%", "1"), ("min", "min")):
        assert close(r.dp_quantiles[mine], want["dp_" + ref]), mine
    # Q8_0 of a tiny model: close to the base but not equal
    assert 0 < r.kld < 0.01 and r.kld_quantiles["min"] >= -1e-12
    assert 0.9 < r.same_top < 1
    assert abs(r.ln_ppl_ratio) < 0.02 and r.ln_ppl_corr > 0.99
    # the tested model's PPL is what perplexity() gives; the base's too
    assert close(r.ppl, ppl.perplexity(q8, STORY, ctx=CTX).ppl, rtol=1e-12)
    assert close(r.ppl_base, ppl.perplexity(llm, STORY, ctx=CTX).ppl, rtol=1e-12)
    # running values per chunk end at the final ones
    assert len(r.chunks) == r.n_chunks and close(r.chunks[-1]["kld"], r.kld)
    js = r.to_json(values=True)
    assert len(js["kld_values"]) == r.n_scored and js["kld"] == r.kld
    assert "Mean    KLD" in str(r) and "Same top p" in str(r)


def test_kl_divergences_share_the_base_pass(llm, q8):
    both = ppl.kl_divergences([q8, llm], llm, STORY, ctx=CTX, max_chunks=3)
    one = ppl.kl_divergence(q8, llm, STORY, ctx=CTX, max_chunks=3)
    assert both[0].kld == one.kld and both[0].ppl == one.ppl and both[1].kld == 0


def test_kld_needs_one_vocabulary(llm):
    tiny = LLM("tiny:Q8_0", threads=1, ctx=128)        # 1024 tokens against 512
    with pytest.raises(ValueError, match="vocabulary"):
        ppl.kl_divergence(tiny, llm, STORY, ctx=CTX)
    qwen = LLM("tiny-qwen2:Q8_0", threads=1, ctx=128)  # 1024 tokens too, other special tokens
    with pytest.raises(ValueError, match="differ at token"):
        ppl.kl_divergence(qwen, tiny, STORY, ctx=CTX)


def test_concat_of_pieces_is_the_whole_run(llm, q8):
    toks = llm.tokenize(STORY)
    n = len(toks) // CTX
    cuts = [0, 3 * CTX, 6 * CTX, n * CTX]   # whole chunks, at least two a piece
    pieces = [toks[a:b] for a, b in zip(cuts, cuts[1:])]
    whole = ppl.perplexity(llm, toks, ctx=CTX)
    cat = ppl.PerplexityResult.concat([ppl.perplexity(llm, p, ctx=CTX) for p in pieces])
    assert cat.n_chunks == whole.n_chunks == n and np.array_equal(cat.nll, whole.nll)
    assert close(cat.ppl, whole.ppl, 1e-12) and close(cat.ppl_err, whole.ppl_err, 1e-12)
    assert all(close(a["ppl"], b["ppl"], 1e-12) for a, b in zip(cat.chunks, whole.chunks))
    kw = ppl.kl_divergence(q8, llm, toks, ctx=CTX)
    kc = ppl.KLDResult.concat([ppl.kl_divergence(q8, llm, p, ctx=CTX) for p in pieces])
    for k in ("ppl", "ppl_base", "ln_ppl_corr", "ln_ppl_ratio_err", "kld", "kld_err", "dp_rms", "same_top"):
        assert close(getattr(kc, k), getattr(kw, k), 1e-12), k
    assert kc.kld_quantiles == kw.kld_quantiles and kc.dp_quantiles == kw.dp_quantiles
    assert close(kc.chunks[4]["kld"], kw.chunks[4]["kld"], 1e-12)
    with pytest.raises(ValueError, match="differ in model"):
        ppl.PerplexityResult.concat([whole, ppl.perplexity(q8, toks, ctx=CTX)])
