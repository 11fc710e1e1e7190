// attention.c — the inner part of attention: a tile of up to LLMB_ATT_Q queries against one KV
// head's keys and values, already converted to float (keys transposed, so 16 keys share one fmadd
// per head dimension and no horizontal sums are needed). Scores, max, exp, sum and the weighted sum
// of the values are vectorized; per query the operations depend only on that query and its own
// number of keys, never on the other queries of the tile (their extra keys add exact zeros), so
// attention stays batch-invariant. llmb_attend_paged runs the same operations straight over the
// paged cache (keys through a 64-key chunk, values converted in registers) for decode, where the
// gathered copy of the whole history cost more than the arithmetic; its bits are the gathered path's.
// The cache keeps keys transposed within each block (llmb_kv_head), so 16 keys load into 16 lanes
// straight: the register transposes of 16 x 16 floats they replaced took a third of a decode call from L2.
// The AVX-512 version, the AVX2+FMA one and the scalar one run the same operations (fmaf for every
// fmadd, the same exp polynomial, the same 16-lane sums and reduction tree), so they are
// bit-identical; tested by csrc/tests/test_attention.c (bit for bit at every SIMD level this CPU has,
// every tile shape, paged vs gathered, and against a float64 softmax within tolerance) and end to
// end by tests/test_engine.py.
#include <limits.h>
#include <math.h>
#include <string.h>

#include "internal.h"
#include "ops.h"
#include "quants.h"
#include "vexp.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

// s[0..15] summed in the fixed tree of the SIMD version: halves of 8, 4, 2, then the last pair
static float sum16_tree(const float s[16]) {
    float t8[8], t4[4], t2[2];
    for (int l = 0; l < 8; l++) t8[l] = s[l] + s[l + 8];
    for (int l = 0; l < 4; l++) t4[l] = t8[l] + t8[l + 4];
    for (int l = 0; l < 2; l++) t2[l] = t4[l] + t4[l + 2];
    return t2[0] + t2[1];
}

size_t llmb_att_ldk(int64_t n_keys) { return (size_t)(n_keys + 63) / 64 * 64 + 16; }

size_t llmb_att_scratch_floats(int64_t n_ctx, int hd) {
    const size_t ldk = llmb_att_ldk(n_ctx);
    return ldk * (2 * (size_t)hd + LLMB_ATT_BLOCK);
}

// ---- scalar version (the definition) ----

// the keys a tile of nq queries spans: from the lowest first key *jp to the most keys *nmax
static inline void key_span(int nq, const int *lo, const int *nk, int *jp, int *nmax) {
    *nmax = 0, *jp = nk[0];
    for (int i = 0; i < nq; i++) {
        *nmax = nk[i] > *nmax ? nk[i] : *nmax;
        *jp = lo[i] < *jp ? lo[i] : *jp;
    }
}

// query i's softmax over its scores s[l..n) in place, zeros on jp..l and n..nmax (the other queries'
// keys); returns 1 / the sum of the exps (summed by j % 16 in sum16_tree's order)
static float softmax_scalar(float *s, int l, int n, int jp, int nmax) {
    float mx = -INFINITY;
    for (int j = l; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    float lanes[16] = {0};
    for (int j = l; j < n; j++) {
        s[j] = llmb_exp_scalar(s[j] - mx);
        lanes[j % 16] += s[j];
    }
    for (int j = jp; j < l; j++) s[j] = 0.0f;
    for (int j = n; j < nmax; j++) s[j] = 0.0f;
    return 1.0f / sum16_tree(lanes);
}

static void attend_scalar(int nq, const float *const *q, const int *lo, const int *nk, const float *kt, size_t ldk,
                          const float *v, int hd, float scale, float *sc, float *const *out) {
    int jp, nmax;
    key_span(nq, lo, nk, &jp, &nmax);
    for (int i = 0; i < nq; i++) {
        float *s = sc + (size_t)i * ldk;
        for (int j = lo[i]; j < nk[i]; j++) {
            float acc = 0.0f;
            for (int d = 0; d < hd; d++) acc = fmaf(q[i][d], kt[(size_t)d * ldk + j], acc);
            s[j] = acc * scale;
        }
        const float inv = softmax_scalar(s, lo[i], nk[i], jp, nmax);
        for (int d = 0; d < hd; d++) {
            float acc = 0.0f;
            for (int j = jp; j < nmax; j++) acc = fmaf(s[j], v[(size_t)j * hd + d], acc);
            out[i][d] = acc * inv;
        }
    }
}

// call(..., NQ) with the tile's number of queries as a constant (the SIMD bodies' register tiles)
#define BY_NQ(call, ...)                                                                                             \
    switch (nq) {                                                                                                   \
    case 1: call(__VA_ARGS__, 1); break;                                                                           \
    case 2: call(__VA_ARGS__, 2); break;                                                                           \
    case 3: call(__VA_ARGS__, 3); break;                                                                           \
    default: call(__VA_ARGS__, 4); break;                                                                          \
    }

// ---- AVX-512 ----
#if LLMB_VEXP_AVX512

LLMB_A512 LLMB_INLINE float sum16(__m512 v) {   // sum16_tree
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

// scores of NQ queries x 64 keys: sc[i * ldsc + t] for the keys kt[d * ldkt + t], t < 64 (kt and sc
// point at the first of them; the rows hold 64 columns from there)
LLMB_A512 LLMB_INLINE void scores_body(const float *const *q, const float *kt, size_t ldkt, int hd, float scale,
                                       float *sc, size_t ldsc, const int NQ) {
    __m512 acc[LLMB_ATT_Q][4];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const float *k = kt + (size_t)d * ldkt;
        const __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16), k2 = _mm512_loadu_ps(k + 32),
                     k3 = _mm512_loadu_ps(k + 48);
        for (int i = 0; i < NQ; i++) {
            const __m512 qb = _mm512_set1_ps(q[i][d]);
            acc[i][0] = _mm512_fmadd_ps(qb, k0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(qb, k1, acc[i][1]);
            acc[i][2] = _mm512_fmadd_ps(qb, k2, acc[i][2]);
            acc[i][3] = _mm512_fmadd_ps(qb, k3, acc[i][3]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(sc + (size_t)i * ldsc + 16 * c, _mm512_mul_ps(acc[i][c], vs));
}

// out[i][d0 .. d0 + 16 ND) = inv[i] * sum_j sc[i][j] v[j][...] over j0 <= j < j1, where first and last;
// else the sums continue from out (first = 0) or stay unscaled there (last = 0), so consecutive ranges do
// one range's operations in its order (a float stored and loaded back is the same float)
LLMB_A512 LLMB_INLINE void pv_part(const float *sc, size_t ldk, const float *v, int hd, int j0, int j1, int first,
                                   int last, const float *inv, float *const *out, int d0, const int ND, const int NQ) {
    __m512 acc[LLMB_ATT_Q][4];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++) acc[i][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(out[i] + d0 + 16 * c);
    for (int j = j0; j < j1; j++) {
        __m512 vv[4];
        for (int c = 0; c < ND; c++) vv[c] = _mm512_loadu_ps(v + (size_t)j * hd + d0 + 16 * c);
        for (int i = 0; i < NQ; i++) {
            const __m512 p = _mm512_set1_ps(sc[(size_t)i * ldk + j]);
            for (int c = 0; c < ND; c++) acc[i][c] = _mm512_fmadd_ps(p, vv[c], acc[i][c]);
        }
    }
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++)
            _mm512_storeu_ps(out[i] + d0 + 16 * c, last ? _mm512_mul_ps(acc[i][c], _mm512_set1_ps(inv[i])) : acc[i][c]);
}

// softmax_scalar of every query's score row (rows of ldsc), 16 keys at a time
LLMB_A512 LLMB_INLINE void softmax_avx512(int nq, const int *lo, const int *nk, int jp, int nmax, float *sc, size_t ldsc,
                                          float *inv) {
    for (int i = 0; i < nq; i++) {
        float *s = sc + (size_t)i * ldsc;
        const int n = nk[i], l = lo[i], j16 = l / 16 * 16;
        // lanes j .. j + 15 that are keys of this query: l <= j + t < n
#define KEYS16(j) ((__mmask16)((n - (j) >= 16 ? 0xFFFFu : (1u << (n - (j))) - 1) & (l > (j) ? ~((1u << (l - (j))) - 1) : 0xFFFFu)))
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int j = j16; j < n; j += 16) {
            const __mmask16 m = KEYS16(j);
            mx = _mm512_mask_max_ps(mx, m, mx, _mm512_maskz_loadu_ps(m, s + j));
        }
        const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
        __m512 sum = _mm512_setzero_ps();
        for (int j = j16; j < n; j += 16) {
            const __mmask16 m = KEYS16(j);
            const __m512 e = _mm512_maskz_mov_ps(m, llmb_exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vmx)));
            _mm512_storeu_ps(s + j, e);   // zeros outside l..n in the first and last groups of 16 (inside ldk)
            sum = _mm512_add_ps(sum, e);
        }
#undef KEYS16
        for (int j = jp; j < j16; j++) s[j] = 0.0f;
        for (int j = (n + 15) / 16 * 16; j < nmax; j++) s[j] = 0.0f;
        inv[i] = 1.0f / sum16(sum);
    }
}

LLMB_A512 static void attend_avx512(int nq, const float *const *q, const int *lo, const int *nk, const float *kt,
                                    size_t ldk, const float *v, int hd, float scale, float *sc, float *const *out) {
    int jp, nmax;
    key_span(nq, lo, nk, &jp, &nmax);
    for (int j0 = jp / 64 * 64; j0 < nmax; j0 += 64) BY_NQ(scores_body, q, kt + j0, ldk, hd, scale, sc + j0, ldk);
    float inv[LLMB_ATT_Q];
    softmax_avx512(nq, lo, nk, jp, nmax, sc, ldk, inv);
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) BY_NQ(pv_part, sc, ldk, v, hd, jp, nmax, 1, 1, inv, out, d0, 4);
    for (; d0 < hd; d0 += 16) BY_NQ(pv_part, sc, ldk, v, hd, jp, nmax, 1, 1, inv, out, d0, 1);
}

// Keys per chunk of attend_block_avx512: 64 x 64 floats of keys (16 KB) beside the chunk's 32 score rows
// (8 KB), or of values beside the sums, stay in L1. 128 and 256 keys measured 0.89x and 0.84x at 2,800 keys.
#define ATT_KC 64
// the queries of tile t of a call of n: LLMB_ATT_Q, fewer in the last
static inline int tile_nq(int n, int t) { return n - t * LLMB_ATT_Q < LLMB_ATT_Q ? n - t * LLMB_ATT_Q : LLMB_ATT_Q; }
// attend_avx512 tile by tile (LLMB_ATT_Q queries each, the same operations), with the loops over keys
// outside the loops over tiles: a chunk of keys, then of values, is read by every tile of the call while
// it sits in L1 (one tile alone streamed the whole head from L2 for each 4 queries)
LLMB_A512 static void attend_block_avx512(int n, const float *const *q, const int *lo, const int *nk, const float *kt,
                                          size_t ldk, const float *v, int hd, float scale, float *sc,
                                          float *const *out) {
    const int nt = (n + LLMB_ATT_Q - 1) / LLMB_ATT_Q, kc = ATT_KC;
    int jp[LLMB_ATT_BLOCK / LLMB_ATT_Q], nmax[LLMB_ATT_BLOCK / LLMB_ATT_Q], first = INT_MAX, end = 0;
    float inv[LLMB_ATT_BLOCK];
    for (int t = 0; t < nt; t++) {
        const int nq = tile_nq(n, t);
        key_span(nq, lo + t * LLMB_ATT_Q, nk + t * LLMB_ATT_Q, &jp[t], &nmax[t]);
        first = jp[t] < first ? jp[t] : first;
        end = nmax[t] > end ? nmax[t] : end;
    }
    first = first / 64 * 64;
    for (int c0 = first; c0 < end; c0 += kc)   // attend_avx512's 64-key bodies, by chunk
        for (int t = 0; t < nt; t++) {
            const int nq = tile_nq(n, t);
            const int j1 = c0 + kc < nmax[t] ? c0 + kc : nmax[t];
            for (int j0 = c0 > jp[t] / 64 * 64 ? c0 : jp[t] / 64 * 64; j0 < j1; j0 += 64)
                BY_NQ(scores_body, q + t * LLMB_ATT_Q, kt + j0, ldk, hd, scale, sc + (size_t)t * LLMB_ATT_Q * ldk + j0, ldk);
        }
    for (int t = 0; t < nt; t++) {
        const int nq = tile_nq(n, t);
        softmax_avx512(nq, lo + t * LLMB_ATT_Q, nk + t * LLMB_ATT_Q, jp[t], nmax[t], sc + (size_t)t * LLMB_ATT_Q * ldk,
                       ldk, inv + t * LLMB_ATT_Q);
    }
    for (int c0 = first; c0 < end; c0 += kc)
        for (int t = 0; t < nt; t++) {
            const int nq = tile_nq(n, t);
            const int j0 = c0 > jp[t] ? c0 : jp[t], j1 = c0 + kc < nmax[t] ? c0 + kc : nmax[t];
            if (j0 >= j1) continue;
            const float *st = sc + (size_t)t * LLMB_ATT_Q * ldk;
            const float *it = inv + t * LLMB_ATT_Q;
            float *const *ot = out + t * LLMB_ATT_Q;
            int d0 = 0;
            for (; d0 + 64 <= hd; d0 += 64) BY_NQ(pv_part, st, ldk, v, hd, j0, j1, j0 == jp[t], j1 == nmax[t], it, ot, d0, 4);
            for (; d0 < hd; d0 += 16) BY_NQ(pv_part, st, ldk, v, hd, j0, j1, j0 == jp[t], j1 == nmax[t], it, ot, d0, 1);
        }
}
#endif

// ---- AVX2+FMA ----
// The AVX-512 version with 8 lanes: the same operations per score and per output, a 16-lane sum
// kept as two registers (lanes 0-7 and 8-15) so that sum16_tree is reproduced, the tail of each
// query's keys masked by a compare instead of a mask register.
#if LLMB_VEXP_AVX2

LLMB_A256 LLMB_INLINE float sum16_avx2(__m256 lo, __m256 hi) {   // sum16_tree of lanes lo[0..7], hi[0..7]
    const __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

// scores of NQ queries x 16 keys: scores_body with 16 columns
LLMB_A256 LLMB_INLINE void scores_body_avx2(const float *const *q, const float *kt, size_t ldkt, int hd, float scale,
                                            float *sc, size_t ldsc, const int NQ) {
    __m256 acc[LLMB_ATT_Q][2];
    for (int i = 0; i < NQ; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const float *k = kt + (size_t)d * ldkt;
        const __m256 k0 = _mm256_loadu_ps(k), k1 = _mm256_loadu_ps(k + 8);
        for (int i = 0; i < NQ; i++) {
            const __m256 qb = _mm256_broadcast_ss(q[i] + d);
            acc[i][0] = _mm256_fmadd_ps(qb, k0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(qb, k1, acc[i][1]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < 2; c++) _mm256_storeu_ps(sc + (size_t)i * ldsc + 8 * c, _mm256_mul_ps(acc[i][c], vs));
}

// out[i][d0 .. d0 + 8 ND) = inv[i] * sum_j sc[i][j] v[j][...] over jp <= j < nmax
LLMB_A256 LLMB_INLINE void pv_body_avx2(const float *sc, size_t ldk, const float *v, int hd, int jp, int nmax,
                                        const float *inv, float *const *out, int d0, const int ND, const int NQ) {
    __m256 acc[LLMB_ATT_Q][2];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++) acc[i][c] = _mm256_setzero_ps();
    for (int j = jp; j < nmax; j++) {
        __m256 vv[2];
        for (int c = 0; c < ND; c++) vv[c] = _mm256_loadu_ps(v + (size_t)j * hd + d0 + 8 * c);
        for (int i = 0; i < NQ; i++) {
            const __m256 p = _mm256_broadcast_ss(sc + (size_t)i * ldk + j);
            for (int c = 0; c < ND; c++) acc[i][c] = _mm256_fmadd_ps(p, vv[c], acc[i][c]);
        }
    }
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++) _mm256_storeu_ps(out[i] + d0 + 8 * c, _mm256_mul_ps(acc[i][c], _mm256_set1_ps(inv[i])));
}

// softmax_scalar of every query's score row (rows of ldsc), 8 keys at a time
LLMB_A256 LLMB_INLINE void softmax_avx2(int nq, const int *lo, const int *nk, int jp, int nmax, float *sc, size_t ldsc,
                                        float *inv) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), eight = _mm256_set1_epi32(8);
    for (int i = 0; i < nq; i++) {
        float *s = sc + (size_t)i * ldsc;
        const int n = nk[i], l = lo[i], j16 = l / 16 * 16;
        // max_ps(s, mx) is the scalar loop's s > mx ? s : mx lane by lane (a NaN score skipped as there)
        __m256 mx8 = _mm256_set1_ps(-INFINITY);
        int j = l;
        for (; j + 8 <= n; j += 8) mx8 = _mm256_max_ps(_mm256_loadu_ps(s + j), mx8);
        float lane[8], mx = -INFINITY;
        _mm256_storeu_ps(lane, mx8);
        for (int t = 0; t < 8; t++) mx = lane[t] > mx ? lane[t] : mx;
        for (; j < n; j++) mx = s[j] > mx ? s[j] : mx;
        const __m256 vmx = _mm256_set1_ps(mx);
        __m256 lo8 = _mm256_setzero_ps(), hi8 = _mm256_setzero_ps();
        for (j = j16; j < n; j += 16) {
            __m256 e0 = llmb_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmx));
            __m256 e1 = llmb_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j + 8), vmx));
            if (n - j < 16) {   // zeros past n in the last group of 16 (inside ldk)
                const __m256i left = _mm256_set1_epi32(n - j);
                e0 = _mm256_and_ps(e0, _mm256_castsi256_ps(_mm256_cmpgt_epi32(left, iota)));
                e1 = _mm256_and_ps(e1, _mm256_castsi256_ps(_mm256_cmpgt_epi32(left, _mm256_add_epi32(iota, eight))));
            }
            if (l > j) {        // zeros before l in the first group of 16
                const __m256i skip = _mm256_set1_epi32(l - j);   // lanes t >= l - j stay
                e0 = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(skip, iota)), e0);
                e1 = _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(skip, _mm256_add_epi32(iota, eight))), e1);
            }
            _mm256_storeu_ps(s + j, e0);
            _mm256_storeu_ps(s + j + 8, e1);
            lo8 = _mm256_add_ps(lo8, e0);
            hi8 = _mm256_add_ps(hi8, e1);
        }
        for (j = jp; j < j16; j++) s[j] = 0.0f;
        for (j = (n + 15) / 16 * 16; j < nmax; j++) s[j] = 0.0f;
        inv[i] = 1.0f / sum16_avx2(lo8, hi8);
    }
}

LLMB_A256 static void attend_avx2(int nq, const float *const *q, const int *lo, const int *nk, const float *kt,
                                  size_t ldk, const float *v, int hd, float scale, float *sc, float *const *out) {
    int jp, nmax;
    key_span(nq, lo, nk, &jp, &nmax);
    for (int j0 = jp / 16 * 16; j0 < nmax; j0 += 16) BY_NQ(scores_body_avx2, q, kt + j0, ldk, hd, scale, sc + j0, ldk);
    float inv[LLMB_ATT_Q];
    softmax_avx2(nq, lo, nk, jp, nmax, sc, ldk, inv);
    int d0 = 0;
    for (; d0 + 16 <= hd; d0 += 16) BY_NQ(pv_body_avx2, sc, ldk, v, hd, jp, nmax, inv, out, d0, 2);
    for (; d0 < hd; d0 += 8) BY_NQ(pv_body_avx2, sc, ldk, v, hd, jp, nmax, inv, out, d0, 1);
}
#endif

// ---- gathering one KV head's rows as floats ----

// bytes of one head's row of a cache of this type
size_t llmb_kv_row_bytes(int type, int hd) {
    return type == LLMB_TYPE_F32 ? 4 * (size_t)hd
           : type == LLMB_TYPE_F16 ? 2 * (size_t)hd : (size_t)hd / LLMB_QK * sizeof(llmb_block_q8_0);
}

// the block of position j (a key's or value's index plus h->first) and j's slot in it: shifts where the block size
// is a power of two (the engine's 16): a division for every key and value made decode attention 5-20% slower
// (docs/engine-measurements.md#decode-attention)
static inline int32_t block_of(const llmb_kv_head *h, int j, int *slot) {
    const int B = h->block_size;
    if ((B & (B - 1)) == 0) {
        *slot = j & (B - 1);
        return h->blocks[j >> __builtin_ctz((unsigned)B)];
    }
    *slot = j % B;
    return h->blocks[j / B];
}

// value row j of the head
static const uint8_t *v_at(const llmb_kv_head *h, int j) {
    int s;
    const int32_t blk = block_of(h, j + h->first, &s);
    return h->v + (size_t)blk * h->block_stride + (size_t)s * h->row_stride;
}

// the key block holding key j, and j's slot in it
static const uint8_t *k_block(const llmb_kv_head *h, int j, int *slot) {
    return h->k + (size_t)block_of(h, j + h->first, slot) * h->block_stride;
}

// a Q8_0 key block's int8 values, after the scales of its hd / 32 groups
static size_t q8_key_values(int hd, int block_size) { return (size_t)hd / LLMB_QK * block_size * sizeof(llmb_half); }

void llmb_kv_store_key(int type, uint8_t *kb, int block_size, int slot, const float *x, int hd) {
    const llmb_quant_traits *t = llmb_quant_traits_get(type);
    const size_t B = (size_t)block_size;
    union { float f[256]; llmb_half h[256]; llmb_block_q8_0 q[256 / LLMB_QK]; } r;   // a row of up to 256 values
    for (int c = 0; c < hd; c += 256) {
        const int n = hd - c < 256 ? hd - c : 256;
        t->from_float(x + c, &r, n);
        if (type == LLMB_TYPE_F32) {
            for (int i = 0; i < n; i++) ((float *)kb)[(size_t)(c + i) * B + (size_t)slot] = r.f[i];
        } else if (type == LLMB_TYPE_F16) {
            for (int i = 0; i < n; i++) ((llmb_half *)kb)[(size_t)(c + i) * B + (size_t)slot] = r.h[i];
        } else {
            int8_t *qs = (int8_t *)(kb + q8_key_values(hd, block_size));
            for (int i = 0; i < n; i++) qs[(size_t)(c + i) * B + (size_t)slot] = r.q[i / LLMB_QK].qs[i % LLMB_QK];
            for (int g = 0; g < n / LLMB_QK; g++)
                ((llmb_half *)kb)[(size_t)(c / LLMB_QK + g) * B + (size_t)slot] = r.q[g].d;
        }
    }
}

// key j as hd floats at dst[d * stride], as the type's to_float converts a row (x.qs[j] * d for Q8_0)
static void key_to_float(const llmb_kv_head *h, int j, int hd, float *dst, size_t stride) {
    int s;
    const uint8_t *kb = k_block(h, j, &s);
    const size_t B = (size_t)h->block_size;
    for (int d = 0; d < hd; d++) {
        const size_t at = (size_t)d * B + (size_t)s;
        float x;
        if (h->type == LLMB_TYPE_F32) x = ((const float *)kb)[at];
        else if (h->type == LLMB_TYPE_F16) x = llmb_fp16_to_fp32(((const llmb_half *)kb)[at]);
        else
            x = ((const int8_t *)(kb + q8_key_values(hd, h->block_size)))[at] *
                llmb_fp16_to_fp32(((const llmb_half *)kb)[(size_t)(d / LLMB_QK) * B + (size_t)s]);
        dst[(size_t)d * stride] = x;
    }
}

#if LLMB_VEXP_AVX512 || LLMB_VEXP_AVX2   // the SIMD gathers' and paged kernels' helpers
// the lines of key j's block from j's slot on (its rows' 16 slots from there; where the rows are at
// most two lines, the whole block, asked for once: by the group of 16 from its first slots), asked
// for, when j < n_keys
LLMB_INLINE void prefetch_keys(const llmb_kv_head *h, int j, int n_keys, int hd) {
    if (j >= n_keys) return;
    int s;
    const char *kb = (const char *)k_block(h, j, &s);
    const int B = h->block_size;
    const size_t es = h->type == LLMB_TYPE_F32 ? 4 : h->type == LLMB_TYPE_F16 ? 2 : 1;
    const char *x = h->type == LLMB_TYPE_Q8_0 ? kb + q8_key_values(hd, B) : kb;
    if (B * es <= 128) {
        if (s >= 16) return;
        for (size_t o = 0; o < (size_t)hd * B * es; o += 64) __builtin_prefetch(x + o, 0, 3);
    } else {
        for (int d = 0; d < hd; d++) {
            __builtin_prefetch(x + ((size_t)d * B + s) * es, 0, 3);
            __builtin_prefetch(x + ((size_t)d * B + s + 15) * es, 0, 3);
        }
    }
    if (h->type == LLMB_TYPE_Q8_0)
        for (int c = 0; c < hd / LLMB_QK; c++) __builtin_prefetch(kb + ((size_t)c * B + s) * 2, 0, 3);
}

// the lines of bytes o0 .. o1 - 1 of value rows j0 <= j < min(j1, nmax), asked for. Inlined always: as a
// function of its own GCC finds it free of side effects and drops every call
LLMB_INLINE void prefetch_values(const llmb_kv_head *h, int j0, int j1, int nmax, size_t o0, size_t o1) {
    for (int j = j0; j < j1 && j < nmax; j++) {
        const char *r = (const char *)v_at(h, j);
        for (size_t o = o0; o < o1; o += 64) __builtin_prefetch(r + o, 0, 3);
        __builtin_prefetch(r + o1 - 1, 0, 3);   // bytes that start inside a line end in one more
    }
}

// keys j0 .. j0 + nj - 1 one by one into lanes 0 .. nj - 1 of kt's rows, zeros in lanes nj .. lanes - 1:
// the SIMD gathers' way where their lanes span two blocks (a block size not a multiple of 16)
static inline void keys_one_by_one(const llmb_kv_head *h, int j0, int nj, int lanes, int hd, float *kt, size_t ldk) {
    for (int t = 0; t < lanes; t++)
        if (t < nj) key_to_float(h, j0 + t, hd, kt + t, ldk);
        else for (int d = 0; d < hd; d++) kt[(size_t)d * ldk + t] = 0.0f;
}
#endif

static void gather_scalar(const llmb_kv_head *h, int n_keys, int hd, float *kt, size_t ldk, float *v) {
    const llmb_quant_traits *t = llmb_quant_traits_get(h->type);
    for (int j = 0; j < n_keys; j++) {
        key_to_float(h, j, hd, kt + j, ldk);
        t->to_float_ref(v_at(h, j), v + (size_t)j * hd, hd);
    }
}

#if LLMB_VEXP_AVX512
// 16 values from element d0 of a row (d0 a multiple of 16; of 32 for Q8_0 rows, whose blocks hold 32)
LLMB_A512 LLMB_INLINE __m512 row16(int type, const uint8_t *row, int d0) {
    if (type == LLMB_TYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (size_t)d0)));
    if (type == LLMB_TYPE_F32) return _mm512_loadu_ps((const float *)row + d0);
    const llmb_block_q8_0 *b = (const llmb_block_q8_0 *)row + d0 / LLMB_QK;
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + d0 % LLMB_QK))));
    return _mm512_mul_ps(q, _mm512_set1_ps(llmb_fp16_to_fp32(b->d)));   // x.qs[j] * d as the dequantizer
}

// keys j0 .. j0 + nj - 1 (nj <= 16) as kt[d * ldk + t], t < 16 (zeros from nj on), for every d: the
// lanes read straight from the key block's rows (masked), or key by key where they span two blocks (a
// block size not a multiple of 16)
LLMB_A512 static void keys16(const llmb_kv_head *h, int j0, int nj, int hd, float *kt, size_t ldk) {
    int s;
    const uint8_t *kb = k_block(h, j0, &s);
    const size_t B = (size_t)h->block_size;
    if (s + nj > h->block_size) {
        keys_one_by_one(h, j0, nj, 16, hd, kt, ldk);
        return;
    }
    const __mmask16 m = (__mmask16)((1u << nj) - 1);
    if (h->type == LLMB_TYPE_F16) {
        for (int d = 0; d < hd; d++)
            _mm512_storeu_ps(kt + (size_t)d * ldk,
                             _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const llmb_half *)kb + (size_t)d * B + s)));
    } else if (h->type == LLMB_TYPE_F32) {
        for (int d = 0; d < hd; d++)
            _mm512_storeu_ps(kt + (size_t)d * ldk, _mm512_maskz_loadu_ps(m, (const float *)kb + (size_t)d * B + s));
    } else {
        const int8_t *qs = (const int8_t *)(kb + q8_key_values(hd, h->block_size));
        for (int d = 0; d < hd; d++) {   // x.qs[j] * d as the dequantizer
            const __m512 sc = _mm512_cvtph_ps(
                _mm256_maskz_loadu_epi16(m, (const llmb_half *)kb + (size_t)(d / LLMB_QK) * B + s));
            const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, qs + (size_t)d * B + s)));
            _mm512_storeu_ps(kt + (size_t)d * ldk, _mm512_mul_ps(q, sc));
        }
    }
}

// 16 keys at a time into kt; the values converted row by row (v NULL: the keys only). No call per row.
LLMB_A512 static void gather_avx512(const llmb_kv_head *h, int n_keys, int hd, float *kt, size_t ldk, float *v) {
    const int type = h->type;
    const size_t row_bytes = llmb_kv_row_bytes(type, hd);
    for (int j0 = 0; j0 < n_keys; j0 += 16) {
        const int nj = n_keys - j0 < 16 ? n_keys - j0 : 16;
        prefetch_keys(h, j0 + 16, n_keys, hd);   // from DRAM at large batch
        if (v) prefetch_values(h, j0 + 16, j0 + 32, n_keys, 0, row_bytes);
        keys16(h, j0, nj, hd, kt + j0, ldk);
        if (!v) continue;
        for (int t = 0; t < nj; t++) {
            const uint8_t *vr = v_at(h, j0 + t);
            for (int d0 = 0; d0 < hd; d0 += 16) _mm512_storeu_ps(v + (size_t)(j0 + t) * hd + d0, row16(type, vr, d0));
        }
    }
}
#endif

#if LLMB_VEXP_AVX2
// 8 values from element d0 of a row (d0 a multiple of 8; Q8_0 blocks hold 32, so 8 never straddle two)
LLMB_A256 LLMB_INLINE __m256 row8(int type, const uint8_t *row, int d0) {
    if (type == LLMB_TYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * (size_t)d0)));
    if (type == LLMB_TYPE_F32) return _mm256_loadu_ps((const float *)row + d0);
    const llmb_block_q8_0 *b = (const llmb_block_q8_0 *)row + d0 / LLMB_QK;
    const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + d0 % LLMB_QK))));
    return _mm256_mul_ps(q, _mm256_set1_ps(llmb_fp16_to_fp32(b->d)));   // x.qs[j] * d as the dequantizer
}

// keys16 with 8 lanes: the lanes read straight where all 8 slots lie in the key block (the lanes from
// nj on, read from its rows, then zeroed), else key by key
LLMB_A256 static void keys8(const llmb_kv_head *h, int j0, int nj, int hd, float *kt, size_t ldk) {
    int s;
    const uint8_t *kb = k_block(h, j0, &s);
    const size_t B = (size_t)h->block_size;
    if (s + 8 > h->block_size) {
        keys_one_by_one(h, j0, nj, 8, hd, kt, ldk);
        return;
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nj), lane));
    const int8_t *qs = (const int8_t *)(kb + q8_key_values(hd, h->block_size));   // Q8_0's values
    for (int d = 0; d < hd; d++) {
        const size_t at = (size_t)d * B + (size_t)s;
        __m256 x;
        if (h->type == LLMB_TYPE_F16)
            x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const llmb_half *)kb + at)));
        else if (h->type == LLMB_TYPE_F32) x = _mm256_loadu_ps((const float *)kb + at);
        else {   // x.qs[j] * d as the dequantizer
            const llmb_half *scales = (const llmb_half *)kb + (size_t)(d / LLMB_QK) * B + s;
            const __m256 sc = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)scales));
            const __m128i q8 = _mm_loadl_epi64((const __m128i *)(qs + at));
            x = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), sc);
        }
        _mm256_storeu_ps(kt + (size_t)d * ldk, _mm256_and_ps(x, keep));
    }
}

// gather_avx512 with 8 keys at a time: without it an AVX2 host converted and transposed every cached
// value one by one at every step, most of a batched decode step at a few hundred tokens of context
LLMB_A256 static void gather_avx2(const llmb_kv_head *h, int n_keys, int hd, float *kt, size_t ldk, float *v) {
    const int type = h->type;
    for (int j0 = 0; j0 < n_keys; j0 += 8) {
        const int nj = n_keys - j0 < 8 ? n_keys - j0 : 8;
        keys8(h, j0, nj, hd, kt + j0, ldk);
        if (!v) continue;
        for (int t = 0; t < nj; t++) {
            const uint8_t *vr = v_at(h, j0 + t);
            for (int d0 = 0; d0 < hd; d0 += 8) _mm256_storeu_ps(v + (size_t)(j0 + t) * hd + d0, row8(type, vr, d0));
        }
    }
}
#endif

void llmb_att_gather(const llmb_kv_head *h, int n_keys, int hd, float *kt, size_t ldk, float *v) {
#if LLMB_VEXP_AVX512
    if (llmb_simd_active() >= LLMB_SIMD_AVX512 && hd % (h->type == LLMB_TYPE_Q8_0 ? LLMB_QK : 16) == 0 &&
        ldk % 16 == 0) {
        gather_avx512(h, n_keys, hd, kt, ldk, v);
        return;
    }
#endif
#if LLMB_VEXP_AVX2
    if (llmb_simd_active() >= LLMB_SIMD_AVX2 && hd % (h->type == LLMB_TYPE_Q8_0 ? LLMB_QK : 8) == 0 && ldk % 8 == 0) {
        gather_avx2(h, n_keys, hd, kt, ldk, v);
        return;
    }
#endif
    gather_scalar(h, n_keys, hd, kt, ldk, v);
}

void llmb_att_gather_ref(const llmb_kv_head *h, int n_keys, int hd, float *kt, size_t ldk, float *v) {
    gather_scalar(h, n_keys, hd, kt, ldk, v);
}

// ---- attention straight over the paged cache (decode) ----
// llmb_att_gather then llmb_attend_window with the same operations in another order: the keys are
// gathered LLMB_ATT_CHUNK at a time into a chunk of transposed keys (work) and scored from there into
// the same score rows, the softmax runs on the whole rows as there, and the weighted sum of the
// values reads the value rows from the cache, PV_KEYS at a time, converted in registers as the gather
// converts them, into per-query sums kept in work between steps (a float stored and loaded back is
// the same float), every row prefetched PF_KEYS positions ahead. Every score is the same fma chain
// over d and every output element the same fma chain over j in the same order, so the bits are those
// of the gathered path, with no value scratch.

size_t llmb_att_paged_work_floats(int hd) { return (size_t)hd * (LLMB_ATT_CHUNK + LLMB_ATT_Q); }

// The path runs in three steps (llmb_attend_paged_scores, _softmax, _values) so that several threads can
// share one tile: the scores by 64-key chunks, the weighted sums by slices of hd. Each score and each
// output element is the same chain whoever computes it, so any split gives the bits of one call.

// the scores of keys j0 <= j < j1 (row: hd floats of work)
static void paged_scores_scalar(int nq, const float *const *q, const int *lo, const int *nk, const llmb_kv_head *h,
                                int hd, float scale, float *sc, size_t ldsc, float *row, int j0, int j1) {
    for (int j = j0; j < j1; j++) {
        key_to_float(h, j, hd, row, 1);
        for (int i = 0; i < nq; i++) {
            if (j < lo[i] || j >= nk[i]) continue;
            float a = 0.0f;
            for (int d = 0; d < hd; d++) a = fmaf(q[i][d], row[d], a);
            sc[(size_t)i * ldsc + j] = a * scale;
        }
    }
}

// out[i][d] = acc[i * hd + d] * inv[i] for d0 <= d < d1: the SIMD versions' last multiply, element by element
static void scale_out(int nq, const float *acc, const float *inv, int hd, int d0, int d1, float *const *out) {
    for (int i = 0; i < nq; i++)
        for (int d = d0; d < d1; d++) out[i][d] = acc[(size_t)i * hd + d] * inv[i];
}

// elements d0 <= d < d1 of the weighted sums over keys jp <= j < nmax into acc (nq x hd), then of out
// (row: hd floats of work)
static void paged_values_scalar(int nq, const llmb_kv_head *h, int hd, const float *sc, size_t ldsc, int jp, int nmax,
                                const float *inv, float *acc, float *row, int d0, int d1, float *const *out) {
    const llmb_quant_traits *t = llmb_quant_traits_get(h->type);
    for (int i = 0; i < nq; i++) memset(acc + (size_t)i * hd + d0, 0, (size_t)(d1 - d0) * sizeof *acc);
    for (int j = jp; j < nmax; j++) {
        t->to_float_ref(v_at(h, j), row, hd);
        for (int i = 0; i < nq; i++) {
            const float p = sc[(size_t)i * ldsc + j];
            for (int d = d0; d < d1; d++) acc[(size_t)i * hd + d] = fmaf(p, row[d], acc[(size_t)i * hd + d]);
        }
    }
    scale_out(nq, acc, inv, hd, d0, d1, out);
}

// The rows of a decode step come from DRAM (the weights streamed in between evict them), and the
// hardware prefetchers leave the loops waiting on them: each step of 8 or 16 keys first asks for the
// key block's lines PF_KEYS positions further on, each step of PV_KEYS values for the value rows (a
// head's 2 or 3 lines out of each position's row) as far on. 16 ahead measured best, 32 and 64 close
// behind.
#define PF_KEYS 16
#define PV_KEYS 16

// call(..., TYPE, ND, NQ) with the cache's type as a constant too
#define BY_TYPE_NQ(call, ...)                                                                                        \
    switch (h->type) {                                                                                              \
    case LLMB_TYPE_F16: BY_NQ(call, __VA_ARGS__, LLMB_TYPE_F16, ND_); break;                                        \
    case LLMB_TYPE_F32: BY_NQ(call, __VA_ARGS__, LLMB_TYPE_F32, ND_); break;                                        \
    default: BY_NQ(call, __VA_ARGS__, LLMB_TYPE_Q8_0, ND_); break;                                                  \
    }

#if LLMB_VEXP_AVX512
// acc[i * hd + d0 .. + 16 ND) += sc[i][j] value_j[...] over j0 <= j < j1 (value j's row at vr[j - j0]): pv_part's
// chain, carried in acc from the chunks before
LLMB_A512 LLMB_INLINE void pv_rows(const float *sc, size_t ldsc, const uint8_t *const *vr, int j0, int j1, float *acc,
                                   int hd, int d0, const int type, const int ND, const int NQ) {
    __m512 a[LLMB_ATT_Q][4];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++) a[i][c] = _mm512_loadu_ps(acc + (size_t)i * hd + d0 + 16 * c);
    for (int j = j0; j < j1; j++) {
        __m512 vv[4];
        for (int c = 0; c < ND; c++) vv[c] = row16(type, vr[j - j0], d0 + 16 * c);
        for (int i = 0; i < NQ; i++) {
            const __m512 p = _mm512_set1_ps(sc[(size_t)i * ldsc + j]);
            for (int c = 0; c < ND; c++) a[i][c] = _mm512_fmadd_ps(p, vv[c], a[i][c]);
        }
    }
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++) _mm512_storeu_ps(acc + (size_t)i * hd + d0 + 16 * c, a[i][c]);
}

// scores_body over the 64 keys from j0 of an F16 cache whose block size is a multiple of 16, j0's slot too, read
// straight from the blocks: lane t of the 16 keys from j0 + 16 c in row d is kt's element (d, 16 c + t) as keys16
// makes it (the same conversion), so the same chains and bits without the transposed chunk's stores and loads
LLMB_A512 LLMB_INLINE void scores_f16_blocks(const float *const *q, const llmb_kv_head *h, int j0, int hd, float scale,
                                             float *sc, size_t ldsc, const int NQ) {
    const size_t B = (size_t)h->block_size;
    const llmb_half *kb[4];
    for (int c = 0; c < 4; c++) {
        int s;
        kb[c] = (const llmb_half *)k_block(h, j0 + 16 * c, &s) + s;
    }
    __m512 acc[LLMB_ATT_Q][4];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 k[4];
        for (int c = 0; c < 4; c++) k[c] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kb[c] + B * d)));
        for (int i = 0; i < NQ; i++) {
            const __m512 qb = _mm512_set1_ps(q[i][d]);
            for (int c = 0; c < 4; c++) acc[i][c] = _mm512_fmadd_ps(qb, k[c], acc[i][c]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(sc + (size_t)i * ldsc + 16 * c, _mm512_mul_ps(acc[i][c], vs));
}

// the scores of chunks k0 <= k < k1 (keys jp / 64 * 64 + LLMB_ATT_CHUNK k on), through ktc; whole chunks of an F16
// cache whose groups of 16 keys lie in one block each straight from the blocks (scores_f16_blocks), the next
// chunk's keys asked for first
LLMB_A512 static void paged_scores_avx512(int nq, const float *const *q, const llmb_kv_head *h, int hd, float scale,
                                          float *sc, size_t ldsc, float *ktc, int jp, int nmax, int k0, int k1) {
    for (int c0 = jp / 64 * 64 + k0 * LLMB_ATT_CHUNK; c0 < nmax && k0 < k1; c0 += LLMB_ATT_CHUNK, k0++) {
        const int c1 = nmax - c0 < LLMB_ATT_CHUNK ? nmax : c0 + LLMB_ATT_CHUNK;   // attend_avx512's 64-key bodies
        if (h->type == LLMB_TYPE_F16 && h->block_size % 16 == 0 && c1 - c0 == LLMB_ATT_CHUNK &&
            (c0 + h->first) % 16 == 0) {
            for (int g = c1; g < c1 + LLMB_ATT_CHUNK; g += 16) prefetch_keys(h, g, nmax, hd);
            BY_NQ(scores_f16_blocks, q, h, c0, hd, scale, sc + c0, ldsc);
            continue;
        }
        for (int g = c0; g < c1; g += 16) {   // 16 keys a step
            prefetch_keys(h, g + PF_KEYS, nmax, hd);
            keys16(h, g, c1 - g < 16 ? c1 - g : 16, hd, ktc + (g - c0), LLMB_ATT_CHUNK);
        }
        for (int j0 = c0; j0 < c1; j0 += 64)
            BY_NQ(scores_body, q, ktc + (j0 - c0), LLMB_ATT_CHUNK, hd, scale, sc + j0, ldsc);
    }
}

LLMB_A512 static void paged_softmax_avx512(int nq, const int *lo, const int *nk, int jp, int nmax, float *sc,
                                           size_t ldsc, float *inv) {
    softmax_avx512(nq, lo, nk, jp, nmax, sc, ldsc, inv);
}

// paged_values_scalar's elements d0 .. d1 - 1 (multiples of 16)
LLMB_A512 static void paged_values_avx512(int nq, const llmb_kv_head *h, int hd, const float *sc, size_t ldsc, int jp,
                                          int nmax, const float *inv, float *acc, int d0, int d1, float *const *out) {
    const size_t o0 = llmb_kv_row_bytes(h->type, d0), o1 = llmb_kv_row_bytes(h->type, d1);
    for (int i = 0; i < nq; i++) memset(acc + (size_t)i * hd + d0, 0, (size_t)(d1 - d0) * sizeof *acc);
    const uint8_t *vr[LLMB_ATT_CHUNK];
    for (int c0 = jp; c0 < nmax; c0 += LLMB_ATT_CHUNK) {
        const int c1 = nmax - c0 < LLMB_ATT_CHUNK ? nmax : c0 + LLMB_ATT_CHUNK;
        for (int j = c0; j < c1; j++) vr[j - c0] = v_at(h, j);
        for (int s0 = c0; s0 < c1; s0 += PV_KEYS) {   // every slice of hd over PV_KEYS values a step
            const int s1 = c1 - s0 < PV_KEYS ? c1 : s0 + PV_KEYS;
            prefetch_values(h, s0 + PF_KEYS, s1 + PF_KEYS, nmax, o0, o1);
            int d = d0;
#define ND_ 4
            for (; d + 64 <= d1; d += 64) BY_TYPE_NQ(pv_rows, sc, ldsc, vr + (s0 - c0), s0, s1, acc, hd, d);
#undef ND_
#define ND_ 1
            for (; d < d1; d += 16) BY_TYPE_NQ(pv_rows, sc, ldsc, vr + (s0 - c0), s0, s1, acc, hd, d);
#undef ND_
        }
    }
    scale_out(nq, acc, inv, hd, d0, d1, out);
}
#endif

#if LLMB_VEXP_AVX2
// pv_rows with 8 lanes, up to 4 x 8 of them (NQ <= 3: 4 NQ sums, NQ weights and one value vector
// fill the 16 registers; more independent sums than the 2 NQ of ND = 2 keep both FMA pipes busy)
LLMB_A256 LLMB_INLINE void pv_rows_avx2(const float *sc, size_t ldsc, const uint8_t *const *vr, int j0, int j1,
                                        float *acc, int hd, int d0, const int type, const int ND, const int NQ) {
    __m256 a[LLMB_ATT_Q][4];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++) a[i][c] = _mm256_loadu_ps(acc + (size_t)i * hd + d0 + 8 * c);
    for (int j = j0; j < j1; j++) {
        __m256 p[LLMB_ATT_Q];
        for (int i = 0; i < NQ; i++) p[i] = _mm256_broadcast_ss(sc + (size_t)i * ldsc + j);
        for (int c = 0; c < ND; c++) {
            const __m256 vv = row8(type, vr[j - j0], d0 + 8 * c);
            for (int i = 0; i < NQ; i++) a[i][c] = _mm256_fmadd_ps(p[i], vv, a[i][c]);
        }
    }
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < ND; c++) _mm256_storeu_ps(acc + (size_t)i * hd + d0 + 8 * c, a[i][c]);
}

// scores_body_avx2 over 32 keys for NQ <= 3 (4 NQ sums, NQ query values and one key vector in the 16
// registers): the same chain over d for every score
LLMB_A256 LLMB_INLINE void scores32_avx2(const float *const *q, const float *kt, size_t ldkt, int hd, float scale,
                                         float *sc, size_t ldsc, const int NQ) {
    __m256 acc[3][4];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < 4; c++) acc[i][c] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        const float *k = kt + (size_t)d * ldkt;
        __m256 qb[3];
        for (int i = 0; i < NQ; i++) qb[i] = _mm256_broadcast_ss(q[i] + d);
        for (int c = 0; c < 4; c++) {
            const __m256 kc = _mm256_loadu_ps(k + 8 * c);
            for (int i = 0; i < NQ; i++) acc[i][c] = _mm256_fmadd_ps(qb[i], kc, acc[i][c]);
        }
    }
    const __m256 vs = _mm256_set1_ps(scale);
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < 4; c++) _mm256_storeu_ps(sc + (size_t)i * ldsc + 8 * c, _mm256_mul_ps(acc[i][c], vs));
}

// call(..., NQ) for tiles of at most 3 queries
#define BY_NQ3(call, ...)                                                                                            \
    switch (nq) {                                                                                                   \
    case 1: call(__VA_ARGS__, 1); break;                                                                           \
    case 2: call(__VA_ARGS__, 2); break;                                                                           \
    default: call(__VA_ARGS__, 3); break;                                                                          \
    }

// paged_scores_avx512 with 8 lanes
LLMB_A256 static void paged_scores_avx2(int nq, const float *const *q, const llmb_kv_head *h, int hd, float scale,
                                        float *sc, size_t ldsc, float *ktc, int jp, int nmax, int k0, int k1) {
    for (int c0 = jp / 64 * 64 + k0 * LLMB_ATT_CHUNK; c0 < nmax && k0 < k1; c0 += LLMB_ATT_CHUNK, k0++) {
        const int c1 = nmax - c0 < LLMB_ATT_CHUNK ? nmax : c0 + LLMB_ATT_CHUNK;
        for (int g = c0; g < c1; g += 8) {    // 8 keys a step
            if (g % 16 == 0) prefetch_keys(h, g + PF_KEYS, nmax, hd);
            keys8(h, g, c1 - g < 8 ? c1 - g : 8, hd, ktc + (g - c0), LLMB_ATT_CHUNK);
        }
        if (nq <= 3) {   // 32 keys a body from a multiple of 32 (scores before jp are written, never read)
            for (int j0 = c0 > jp / 32 * 32 ? c0 : jp / 32 * 32; j0 < c1; j0 += 32)
                BY_NQ3(scores32_avx2, q, ktc + (j0 - c0), LLMB_ATT_CHUNK, hd, scale, sc + j0, ldsc);
        } else {         // attend_avx2's 16-key bodies
            for (int j0 = c0 > jp / 16 * 16 ? c0 : jp / 16 * 16; j0 < c1; j0 += 16)
                BY_NQ(scores_body_avx2, q, ktc + (j0 - c0), LLMB_ATT_CHUNK, hd, scale, sc + j0, ldsc);
        }
    }
}

LLMB_A256 static void paged_softmax_avx2(int nq, const int *lo, const int *nk, int jp, int nmax, float *sc, size_t ldsc,
                                         float *inv) {
    softmax_avx2(nq, lo, nk, jp, nmax, sc, ldsc, inv);
}

// paged_values_scalar's elements d0 .. d1 - 1 (multiples of 8)
LLMB_A256 static void paged_values_avx2(int nq, const llmb_kv_head *h, int hd, const float *sc, size_t ldsc, int jp,
                                        int nmax, const float *inv, float *acc, int d0, int d1, float *const *out) {
    const size_t o0 = llmb_kv_row_bytes(h->type, d0), o1 = llmb_kv_row_bytes(h->type, d1);
    for (int i = 0; i < nq; i++) memset(acc + (size_t)i * hd + d0, 0, (size_t)(d1 - d0) * sizeof *acc);
    const uint8_t *vr[LLMB_ATT_CHUNK];
    for (int c0 = jp; c0 < nmax; c0 += LLMB_ATT_CHUNK) {
        const int c1 = nmax - c0 < LLMB_ATT_CHUNK ? nmax : c0 + LLMB_ATT_CHUNK;
        for (int j = c0; j < c1; j++) vr[j - c0] = v_at(h, j);
        for (int s0 = c0; s0 < c1; s0 += PV_KEYS) {   // every slice of hd over PV_KEYS values a step
            const int s1 = c1 - s0 < PV_KEYS ? c1 : s0 + PV_KEYS;
            const uint8_t *const *vs = vr + (s0 - c0);
            prefetch_values(h, s0 + PF_KEYS, s1 + PF_KEYS, nmax, o0, o1);
            int d = d0;
#define ND_ 4
            if (nq <= 3) {
                for (; d + 32 <= d1; d += 32) BY_TYPE_NQ(pv_rows_avx2, sc, ldsc, vs, s0, s1, acc, hd, d);
            }
#undef ND_
#define ND_ 2
            for (; d + 16 <= d1; d += 16) BY_TYPE_NQ(pv_rows_avx2, sc, ldsc, vs, s0, s1, acc, hd, d);
#undef ND_
#define ND_ 1
            for (; d < d1; d += 8) BY_TYPE_NQ(pv_rows_avx2, sc, ldsc, vs, s0, s1, acc, hd, d);
#undef ND_
        }
    }
    scale_out(nq, acc, inv, hd, d0, d1, out);
}
#endif

// per-query first keys: lo, or zeros
#define LOS(lo) const int *lo_ = (lo) ? (lo) : (const int[LLMB_ATT_Q]){0}

void llmb_attend_window(int nq, const float *const *q, const int *k_lo, const int *n_keys, const float *kt, size_t ldk,
                        const float *v, int hd, float scale, float *sc, float *const *out) {
    LOS(k_lo);
#if LLMB_VEXP_AVX512
    if (llmb_simd_active() >= LLMB_SIMD_AVX512 && hd % 16 == 0) {
        attend_avx512(nq, q, lo_, n_keys, kt, ldk, v, hd, scale, sc, out);
        return;
    }
#endif
#if LLMB_VEXP_AVX2
    if (llmb_simd_active() >= LLMB_SIMD_AVX2 && hd % 8 == 0) {   // also AVX-512's head sizes not a multiple of 16
        attend_avx2(nq, q, lo_, n_keys, kt, ldk, v, hd, scale, sc, out);
        return;
    }
#endif
    attend_scalar(nq, q, lo_, n_keys, kt, ldk, v, hd, scale, sc, out);
}

void llmb_attend_block(int nq, const float *const *q, const int *k_lo, const int *n_keys, const float *kt, size_t ldk,
                       const float *v, int hd, float scale, float *sc, float *const *out) {
    static const int zeros[LLMB_ATT_BLOCK];
    const int *lo = k_lo ? k_lo : zeros;
#if LLMB_VEXP_AVX512
    if (llmb_simd_active() >= LLMB_SIMD_AVX512 && hd % 16 == 0) {
        attend_block_avx512(nq, q, lo, n_keys, kt, ldk, v, hd, scale, sc, out);
        return;
    }
#endif
    for (int t = 0; t < nq; t += LLMB_ATT_Q)
        llmb_attend_window(nq - t < LLMB_ATT_Q ? nq - t : LLMB_ATT_Q, q + t, lo + t, n_keys + t, kt, ldk, v, hd, scale,
                           sc, out + t);
}

void llmb_attend_window_ref(int nq, const float *const *q, const int *k_lo, const int *n_keys, const float *kt,
                            size_t ldk, const float *v, int hd, float scale, float *sc, float *const *out) {
    LOS(k_lo);
    attend_scalar(nq, q, lo_, n_keys, kt, ldk, v, hd, scale, sc, out);
}

void llmb_attend(int nq, const float *const *q, const int *n_keys, const float *kt, size_t ldk, const float *v, int hd,
                 float scale, float *sc, float *const *out) {
    llmb_attend_window(nq, q, NULL, n_keys, kt, ldk, v, hd, scale, sc, out);
}

void llmb_attend_ref(int nq, const float *const *q, const int *n_keys, const float *kt, size_t ldk, const float *v,
                     int hd, float scale, float *sc, float *const *out) {
    llmb_attend_window_ref(nq, q, NULL, n_keys, kt, ldk, v, hd, scale, sc, out);
}

// the level of the paged path for this cache and head size: 2 AVX-512, 1 AVX2, 0 scalar (ref: always 0)
static int paged_level(const llmb_kv_head *h, int hd, int ref) {
    const int blk = h->type == LLMB_TYPE_Q8_0 ? LLMB_QK : 0;   // Q8_0 rows: whole blocks of 32
    (void)blk;
#if LLMB_VEXP_AVX512
    if (!ref && llmb_simd_active() >= LLMB_SIMD_AVX512 && hd % (blk ? blk : 16) == 0) return 2;
#endif
#if LLMB_VEXP_AVX2
    if (!ref && llmb_simd_active() >= LLMB_SIMD_AVX2 && hd % (blk ? blk : 8) == 0) return 1;
#endif
    return 0;
}

// what each step needs of a tile: its first keys (zeros where k_lo is NULL), the span of its keys, the stride of
// its score rows and the level of the path
typedef struct {
    const int *lo;
    int jp, nmax, lvl;
    size_t ldsc;
} paged_tile;

static paged_tile tile_of(int nq, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd, int ref) {
    static const int zeros[LLMB_ATT_Q];
    paged_tile t = {k_lo ? k_lo : zeros, 0, 0, h ? paged_level(h, hd, ref) : 0, 0};
    key_span(nq, t.lo, n_keys, &t.jp, &t.nmax);
    t.ldsc = llmb_att_ldk(t.nmax);
    return t;
}

int llmb_att_paged_chunks(int nq, const int *k_lo, const int *n_keys) {
    const paged_tile t = tile_of(nq, k_lo, n_keys, NULL, 0, 1);
    return (t.nmax - t.jp / 64 * 64 + LLMB_ATT_CHUNK - 1) / LLMB_ATT_CHUNK;
}

static void paged_scores(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h,
                         int hd, float scale, float *sc, float *ktc, int k0, int k1, int ref) {
    const paged_tile t = tile_of(nq, k_lo, n_keys, h, hd, ref);
#if LLMB_VEXP_AVX512
    if (t.lvl == 2) {
        paged_scores_avx512(nq, q, h, hd, scale, sc, t.ldsc, ktc, t.jp, t.nmax, k0, k1);
        return;
    }
#endif
#if LLMB_VEXP_AVX2
    if (t.lvl == 1) {
        paged_scores_avx2(nq, q, h, hd, scale, sc, t.ldsc, ktc, t.jp, t.nmax, k0, k1);
        return;
    }
#endif
    const int base = t.jp / 64 * 64, j0 = base + k0 * LLMB_ATT_CHUNK, j1 = base + k1 * LLMB_ATT_CHUNK;
    paged_scores_scalar(nq, q, t.lo, n_keys, h, hd, scale, sc, t.ldsc, ktc, j0 > t.jp ? j0 : t.jp,
                        j1 < t.nmax ? j1 : t.nmax);
}

// the softmax of queries i0 <= i < i1 (each query's row its own: any split of the queries gives the same bits)
static void paged_softmax(int nq, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd, float *sc,
                          float *inv, int i0, int i1, int ref) {
    const paged_tile t = tile_of(nq, k_lo, n_keys, h, hd, ref);
    float *s0 = sc + (size_t)i0 * t.ldsc;
#if LLMB_VEXP_AVX512
    if (t.lvl == 2) {
        paged_softmax_avx512(i1 - i0, t.lo + i0, n_keys + i0, t.jp, t.nmax, s0, t.ldsc, inv + i0);
        return;
    }
#endif
#if LLMB_VEXP_AVX2
    if (t.lvl == 1) {
        paged_softmax_avx2(i1 - i0, t.lo + i0, n_keys + i0, t.jp, t.nmax, s0, t.ldsc, inv + i0);
        return;
    }
#endif
    for (int i = i0; i < i1; i++)
        inv[i] = softmax_scalar(s0 + (size_t)(i - i0) * t.ldsc, t.lo[i], n_keys[i], t.jp, t.nmax);
}

static void paged_values(int nq, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd, const float *sc,
                         const float *inv, float *acc, float *row, int d0, int d1, float *const *out, int ref) {
    const paged_tile t = tile_of(nq, k_lo, n_keys, h, hd, ref);
#if LLMB_VEXP_AVX512
    if (t.lvl == 2) {
        paged_values_avx512(nq, h, hd, sc, t.ldsc, t.jp, t.nmax, inv, acc, d0, d1, out);
        return;
    }
#endif
#if LLMB_VEXP_AVX2
    if (t.lvl == 1) {
        paged_values_avx2(nq, h, hd, sc, t.ldsc, t.jp, t.nmax, inv, acc, d0, d1, out);
        return;
    }
#endif
    paged_values_scalar(nq, h, hd, sc, t.ldsc, t.jp, t.nmax, inv, acc, row, d0, d1, out);
}

void llmb_attend_paged_scores(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h,
                              int hd, float scale, float *sc, float *work, int k0, int k1) {
    paged_scores(nq, q, k_lo, n_keys, h, hd, scale, sc, work, k0, k1, 0);
}

void llmb_attend_paged_softmax(int nq, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd, float *sc,
                               float *inv, int i0, int i1) {
    paged_softmax(nq, k_lo, n_keys, h, hd, sc, inv, i0, i1, 0);
}

void llmb_attend_paged_values(int nq, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd, const float *sc,
                              const float *inv, float *acc, float *work, int d0, int d1, float *const *out) {
    paged_values(nq, k_lo, n_keys, h, hd, sc, inv, acc, work, d0, d1, out, 0);
}

// the three steps on one thread: work holds the key chunk (or the scalar row), then the sums
static void attend_paged(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h,
                         int hd, float scale, float *sc, float *work, float *const *out, int ref) {
    float inv[LLMB_ATT_Q];
    paged_scores(nq, q, k_lo, n_keys, h, hd, scale, sc, work, 0, llmb_att_paged_chunks(nq, k_lo, n_keys), ref);
    paged_softmax(nq, k_lo, n_keys, h, hd, sc, inv, 0, nq, ref);
    paged_values(nq, k_lo, n_keys, h, hd, sc, inv, work + (size_t)hd * LLMB_ATT_CHUNK, work, 0, hd, out, ref);
}

void llmb_attend_paged(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd,
                       float scale, float *sc, float *work, float *const *out) {
    attend_paged(nq, q, k_lo, n_keys, h, hd, scale, sc, work, out, 0);
}

void llmb_attend_paged_ref(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h,
                           int hd, float scale, float *sc, float *work, float *const *out) {
    attend_paged(nq, q, k_lo, n_keys, h, hd, scale, sc, work, out, 1);
}
