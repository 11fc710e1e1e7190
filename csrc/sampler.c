// sampler.c — the host sampler (sampler.h): a logits row's log-sum-exp and argmax, one token drawn from it
// under a request's sampling parameters, and its top-n log-probabilities. Written once for every backend;
// the engine (engine.c) calls it for each row of a step, rows in parallel (a thread's own working memory,
// a sequence's own random stream). Tested through tests/test_sampling.py and tests/test_engine.py.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sampler.h"
#include "vexp.h"

// A sampling thread's working memory (vocab entries each).
typedef struct {
    float *work;              // the row being modified (penalties, temperature)
    int32_t *cand;            // candidate ids
    uint32_t *seen;           // repetition penalty: seen[t] == stamp once t was penalized for this row
    uint32_t stamp;
    int32_t *counts;          // presence/frequency penalties (zero between rows)
} scratch;

struct llmb_sampler {
    int vocab, n_threads;
    scratch *scr;             // (n_threads)
};

llmb_sampler *llmb_sampler_create(int vocab, int n_threads) {
    llmb_sampler *smp = calloc(1, sizeof *smp);
    if (!smp) return NULL;
    smp->vocab = vocab, smp->n_threads = n_threads;
    int ok = (smp->scr = calloc((size_t)(n_threads > 0 ? n_threads : 1), sizeof *smp->scr)) != NULL;
    for (int t = 0; ok && t < n_threads; t++) {
        scratch *w = &smp->scr[t];
        const size_t v = (size_t)(vocab > 0 ? vocab : 1);
        ok = (w->work = calloc(v, sizeof *w->work)) && (w->cand = calloc(v, sizeof *w->cand)) &&
             (w->seen = calloc(v, sizeof *w->seen)) && (w->counts = calloc(v, sizeof *w->counts));
    }
    if (!ok) {
        llmb_sampler_free(smp);
        return NULL;
    }
    return smp;
}

void llmb_sampler_free(llmb_sampler *smp) {
    if (!smp) return;
    for (int t = 0; smp->scr && t < smp->n_threads; t++) {
        free(smp->scr[t].work);
        free(smp->scr[t].cand);
        free(smp->scr[t].seen);
        free(smp->scr[t].counts);
    }
    free(smp->scr);
    free(smp);
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double llmb_uniform(uint64_t *state) {
    *state += 0x9e3779b97f4a7c15ull;
    return (double)(mix64(*state) >> 11) * (1.0 / 9007199254740992.0);
}

// log-sum-exp of a row (for log-probabilities under the model) and its first argmax. exp(x - max)
// by vexp.h's float exp (within 2 ulp of expf; the AVX-512 loop and the scalar one give the same bits
// per element), summed in double in 16 lanes (element i into lane i % 16, in order), the lanes then
// added in order: the same result at every SIMD level, and every row (alone or batched, host sampler,
// prompt scores) goes through this one function, and the AVX-512 and AVX2 loops give the scalar one's bits.
// A double exp per entry in series was ~1 ms a step for a 128256-entry vocabulary (llama-1b shape), ~3% of
// a one-thread decode step.
static void lse_lanes_scalar(const float *x, int i, int n, float mx, double lanes[16]) {
    for (; i < n; i++) lanes[i % 16] += (double)llmb_exp_scalar(x[i] - mx);
}

#if LLMB_VEXP_AVX512
LLMB_A512 static void lse_lanes_avx512(const float *x, int n, float mx, double lanes[16]) {
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    const __m512 m = _mm512_set1_ps(mx);
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 ex = llmb_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(ex)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(ex), 1))));
    }
    _mm512_storeu_pd(lanes, lo);
    _mm512_storeu_pd(lanes + 8, hi);
    lse_lanes_scalar(x, i, n, mx, lanes);
}
#endif

#if LLMB_VEXP_AVX2
// The same lanes with exp8 (the same bits as the scalar exp): element i + 8 h of a 16-element step into lane
// 8 h + (i % 8), as in the scalar loop. Without it an AVX2 host took ~1 ms a token on a 49,152-entry
// vocabulary (SmolLM2), a fifth of its one-token decode step (docs/engine-measurements.md#lse).
LLMB_A256 static void lse_lanes_avx2(const float *x, int n, float mx, double lanes[16]) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    const __m256 m = _mm256_set1_ps(mx);
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int h = 0; h < 2; h++) {
            const __m256 ex = llmb_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8 * h), m));
            acc[2 * h] = _mm256_add_pd(acc[2 * h], _mm256_cvtps_pd(_mm256_castps256_ps128(ex)));
            acc[2 * h + 1] = _mm256_add_pd(acc[2 * h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(ex, 1)));
        }
    for (int k = 0; k < 4; k++) _mm256_storeu_pd(lanes + 4 * k, acc[k]);
    lse_lanes_scalar(x, i, n, mx, lanes);
}
#endif

// The row's maximum and its first index, as this loop finds them: x[i] > max (a NaN is never greater,
// and a NaN x[0] stays the maximum). The SIMD versions keep a maximum and its index per lane (the same
// strict compare), then take the lanes' largest, the lowest index among equal ones, then the tail in
// order: the same index and value. The scalar loop was ~30 µs on SmolLM2's 49,152 logits, 3% of a batch-16
// decode step.
static float row_max_scalar(const float *x, int i, int n, float mx, int *am) {
    for (; i < n; i++)
        if (x[i] > mx) mx = x[i], *am = i;
    return mx;
}

#if LLMB_VEXP_AVX512 || LLMB_VEXP_AVX2
// the lanes' maximum (lowest index among equal ones), then the tail from i; none taken (every entry -inf
// or NaN, x[0] not NaN): x[0] and 0, as the scalar loop leaves them
static float row_max_lanes(const float *x, int i, int n, const float *lv, const int *li, int nl, int *am) {
    float mx = -INFINITY;
    int a = -1;
    for (int l = 0; l < nl; l++)
        if (li[l] >= 0 && (a < 0 || lv[l] > mx || (lv[l] == mx && li[l] < a))) mx = lv[l], a = li[l];
    if (a < 0) mx = x[0], a = 0;
    *am = a;
    return row_max_scalar(x, i, n, mx, am);
}
#endif

#if LLMB_VEXP_AVX512
LLMB_A512 static float row_max_avx512(const float *x, int n, int *am) {
    __m512 best = _mm512_set1_ps(-INFINITY);
    __m512i bi = _mm512_set1_epi32(-1), idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int i = 0;
    for (; i + 16 <= n; i += 16, idx = _mm512_add_epi32(idx, _mm512_set1_epi32(16))) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, gt, v);
        bi = _mm512_mask_mov_epi32(bi, gt, idx);
    }
    float lv[16];
    int li[16];
    _mm512_storeu_ps(lv, best);
    _mm512_storeu_si512(li, bi);
    return row_max_lanes(x, i, n, lv, li, 16, am);
}
#endif

#if LLMB_VEXP_AVX2
LLMB_A256 static float row_max_avx2(const float *x, int n, int *am) {
    __m256 best = _mm256_set1_ps(-INFINITY);
    __m256i bi = _mm256_set1_epi32(-1), idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int i = 0;
    for (; i + 8 <= n; i += 8, idx = _mm256_add_epi32(idx, _mm256_set1_epi32(8))) {
        const __m256 v = _mm256_loadu_ps(x + i), gt = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
        best = _mm256_blendv_ps(best, v, gt);
        bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(idx), gt));
    }
    float lv[8];
    int li[8];
    _mm256_storeu_ps(lv, best);
    _mm256_storeu_si256((__m256i *)li, bi);
    return row_max_lanes(x, i, n, lv, li, 8, am);
}
#endif

double llmb_row_lse(const float *x, int n, int *argmax) {
    int am = 0;
    float mx;
    if (x[0] != x[0]) mx = x[0];   // NaN: the scalar loop's maximum whatever follows
#if LLMB_VEXP_AVX512
    else if (llmb_simd_active() >= LLMB_SIMD_AVX512) mx = row_max_avx512(x, n, &am);
#endif
#if LLMB_VEXP_AVX2
    else if (llmb_simd_active() >= LLMB_SIMD_AVX2) mx = row_max_avx2(x, n, &am);
#endif
    else mx = row_max_scalar(x, 1, n, x[0], &am);
    double lanes[16] = {0};
#if LLMB_VEXP_AVX512
    if (llmb_simd_active() >= LLMB_SIMD_AVX512) lse_lanes_avx512(x, n, mx, lanes);
    else
#endif
#if LLMB_VEXP_AVX2
    if (llmb_simd_active() >= LLMB_SIMD_AVX2) lse_lanes_avx2(x, n, mx, lanes);
    else
#endif
        lse_lanes_scalar(x, 0, n, mx, lanes);
    double s = lanes[0];
    for (int l = 1; l < 16; l++) s += lanes[l];
    if (argmax) *argmax = am;
    return mx + log(s);
}

// The candidates' order: by score, descending, ties by id (a strict total order); cmp_desc is its
// qsort_r form (qsort_r: engines may sample concurrently).
static int ranks_before(int32_t i, int32_t j, const float *w) { return w[i] != w[j] ? w[i] > w[j] : i < j; }

static int cmp_desc(const void *a, const void *b, void *keys) {
    const int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    return ranks_before(i, j, keys) ? -1 : ranks_before(j, i, keys);
}

#if defined(__APPLE__)   // the BSD qsort_r: the context first, to the comparator and in the arguments
static int cmp_desc_bsd(void *keys, const void *a, const void *b) { return cmp_desc(a, b, keys); }
#define SORT_DESC(c, n, w) qsort_r(c, n, sizeof *(c), w, cmp_desc_bsd)
#else
#define SORT_DESC(c, n, w) qsort_r(c, n, sizeof *(c), cmp_desc, w)
#endif

// Move the k candidates that come first in that order to cand[0..k), in some order: a heap of the k
// best so far whose root is the worst of them (O(n log k); a full sort of a flat row of 32000
// candidates for top_k=40 cost ~3 ms). The order is strict and total, so the set is the sort's.
static void heap_sift(int32_t *h, int k, int at, const float *w) {
    for (;;) {
        int c = 2 * at + 1;
        if (c >= k) return;
        if (c + 1 < k && ranks_before(h[c], h[c + 1], w)) c++;   // the child that ranks last
        if (!ranks_before(h[at], h[c], w)) return;
        int32_t t = h[at];
        h[at] = h[c], h[c] = t;
        at = c;
    }
}

static void select_top(int32_t *cand, int n, int k, const float *w) {
    for (int i = k / 2 - 1; i >= 0; i--) heap_sift(cand, k, i, w);
    for (int i = k; i < n; i++)
        if (ranks_before(cand[i], cand[0], w)) {
            cand[0] = cand[i];
            heap_sift(cand, k, 0, w);
        }
}


int llmb_sample_row(llmb_sampler *smp, int thread, const llmb_sampling *p, const llmb_sample_seq *s,
                    const float *logits, double lse, int argmax, float *lp_out) {
    const int V = smp->vocab;
    scratch *sc = &smp->scr[thread];
    const int mask_stops = s->mask_stops;
    if (p->temperature <= 0.0f && !mask_stops && !llmb_has_penalties(p)) {   // plain greedy: the row's argmax, no copy
        *lp_out = (float)(logits[argmax] - lse);
        return argmax;
    }
    float *w = sc->work;
    memcpy(w, logits, (size_t)V * sizeof *w);
    if (mask_stops)
        for (int i = 0; i < p->n_stop_tokens; i++)
            if (p->stop_tokens[i] >= 0 && p->stop_tokens[i] < V) w[p->stop_tokens[i]] = -INFINITY;
    // penalties: repetition over the whole sequence, presence/frequency over generated tokens
    if (p->repetition_penalty != 1.0f) {
        if (++sc->stamp == 0) memset(sc->seen, 0, (size_t)V * sizeof *sc->seen), sc->stamp = 1;
        for (int i = 0; i < s->n_tokens; i++) {
            int t = s->tokens[i];
            if (sc->seen[t] == sc->stamp) continue;
            sc->seen[t] = sc->stamp;
            w[t] = w[t] > 0 ? w[t] / p->repetition_penalty : w[t] * p->repetition_penalty;
        }
    }
    if (p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f) {
        for (int i = s->n_prompt; i < s->n_tokens; i++) sc->counts[s->tokens[i]]++;
        for (int i = s->n_prompt; i < s->n_tokens; i++) {
            int t = s->tokens[i];
            if (sc->counts[t] > 0) {
                w[t] -= p->presence_penalty + p->frequency_penalty * (float)sc->counts[t];
                sc->counts[t] = 0;
            }
        }
    }
    int32_t *cand = sc->cand;
    int tok;
    if (p->temperature <= 0.0f) {
        tok = 0;
        for (int i = 1; i < V; i++)
            if (w[i] > w[tok]) tok = i;
    } else {
        // candidates sorted by logit (descending, ties by id), then top-k, softmax, top-p, min-p
        float inv_t = 1.0f / p->temperature, mx = -INFINITY;
        for (int i = 0; i < V; i++) {
            w[i] *= inv_t;
            if (w[i] > mx) mx = w[i];
        }
        // keep only tokens whose probability can matter: exp(w - mx) > 1e-12 of the max
        int nc = 0;
        for (int i = 0; i < V; i++)
            if (w[i] - mx > -27.6f) cand[nc++] = i;
        if (p->top_k > 0 && p->top_k < nc) select_top(cand, nc, p->top_k, w), nc = p->top_k;
        SORT_DESC(cand, (size_t)nc, w);
        double sum = 0;
        for (int i = 0; i < nc; i++) sum += exp((double)w[cand[i]] - mx);
        int keep = nc;
        if (p->top_p < 1.0f) {
            double cum = 0;
            for (int i = 0; i < nc; i++) {
                cum += exp((double)w[cand[i]] - mx) / sum;
                if (cum >= p->top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if (p->min_p > 0.0f) {
            double pmax = exp((double)w[cand[0]] - mx) / sum;
            int k = 1;
            while (k < keep && exp((double)w[cand[k]] - mx) / sum >= p->min_p * pmax) k++;
            keep = k;
        }
        double total = 0;
        for (int i = 0; i < keep; i++) total += exp((double)w[cand[i]] - mx);
        double u = llmb_uniform(s->rng) * total, cum = 0;
        tok = cand[keep - 1];
        for (int i = 0; i < keep; i++) {
            cum += exp((double)w[cand[i]] - mx);
            if (u < cum) {
                tok = cand[i];
                break;
            }
        }
    }
    *lp_out = (float)(logits[tok] - lse);
    return tok;
}

void llmb_top_logprobs(const float *logits, int V, int n, double lse, int32_t *ids, float *lps) {
    for (int k = 0; k < n; k++) ids[k] = -1, lps[k] = -INFINITY;
    for (int i = 0; i < V; i++) {
        float lp = (float)(logits[i] - lse);
        if (lp <= lps[n - 1]) continue;
        int k = n - 1;
        while (k > 0 && lp > lps[k - 1]) {
            ids[k] = ids[k - 1];
            lps[k] = lps[k - 1];
            k--;
        }
        ids[k] = i;
        lps[k] = lp;
    }
}
