// vecdot_bf16.c — BF16 pair products (LLMB_TYPE_BF16_DP, vecdot.h) at the AVX-512 BF16 level: the dot,
// tiles, panels and one-token rows, all with the reference's chain per output (the same bits). Tested by
// csrc/tests/test_vecdot.c.
#include "simd_x86.h"

#if defined(__x86_64__) && defined(__GNUC__)

// ---- BF16 pairs (LLMB_TYPE_BF16_DP: vecdot.h; AVX-512 BF16) ----
// Per output the reference's chain: one 16-lane vdpbf16ps accumulator over the whole row from +0, then
// hsum16_ps (the reference's lane order). The kernels differ only in how many outputs share a pass: NR
// rows x NC tokens of independent chains (the instruction's latency needs several), a panel's rows
// chunk by chunk with the sums kept in memory in between (the chain resumes where it stopped).
#define BFD __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,avx512bf16")))
#define BD_R 8                          // rows per panel call and per decode pass
// values per panel chunk (the C tests: 1024, so that rows run in several); whole rows measured best (docs/engine-measurements.md#bf16-panels)
#ifndef LLMB_BD_K
#define LLMB_BD_K 16384
#endif
#define BD_K LLMB_BD_K
#define BD_TOK (4 * LLMB_PANEL_TOKENS)  // tokens per pass over the chunks (the sums of a pass: BD_R x BD_TOK)
// tokens per register tile of 4 rows: 16 chains, 8 loads per 16 vdpbf16ps (docs/engine-measurements.md#bf16-panels)
#define BD_TC 4

// acc[c * NR + r] += the pairs of values k0 .. k0 + kc of row rows[r] and token c
BFD INLINE void bd_run(const uint8_t *const *rows, const uint8_t *x, size_t xs, int64_t k0, int64_t kc, __m512 *acc,
                       const int NR, const int NC) {
    for (int64_t i = k0; i < k0 + kc; i += 32) {
        __m512bh xv[LLMB_TILE_MAX_C];
        for (int c = 0; c < NC; c++) xv[c] = (__m512bh)_mm512_loadu_si512(x + c * xs + 2 * i);
        for (int r = 0; r < NR; r++) {
            __m512bh wv = (__m512bh)_mm512_loadu_si512(rows[r] + 2 * i);
            __asm__("" : "+v"(wv));   // one load per row, not one folded into each of the NC products
            for (int c = 0; c < NC; c++) acc[c * NR + r] = _mm512_dpbf16_ps(acc[c * NR + r], wv, xv[c]);
        }
    }
}

// y[c * ldy + r] for r < nr <= NR, c < NC: the sums of acc[c * NR + r]
BFD INLINE void bd_store(const __m512 *acc, int nr, float *y, int64_t ldy, const int NR, const int NC) {
    float o[16];
    _mm512_storeu_ps(o, hsum16_ps(acc, NR * NC));
    for (int c = 0; c < NC; c++)
        for (int r = 0; r < nr; r++) y[c * ldy + r] = o[c * NR + r];
}

// one panel chunk for the nr <= BD_R rows x NC tokens, in register tiles of 4 rows x NC: the sums from
// am[c * BD_R + r] (zeros at the first chunk), to am or, after the last chunk, to y
BFD INLINE void bd_pass(const uint8_t *const *rows, const uint8_t *x, size_t xs, int64_t k0, int64_t kc, __m512 *am,
                        int last, int nr, float *y, int64_t ldy, const int NC) {
    for (int h = 0; h < nr; h += 4) {
        __m512 acc[4 * BD_TC];
        for (int c = 0; c < NC; c++)
            for (int r = 0; r < 4; r++) acc[c * 4 + r] = k0 ? am[c * BD_R + h + r] : _mm512_setzero_ps();
        bd_run(rows + h, x, xs, k0, kc, acc, 4, NC);
        if (last) bd_store(acc, nr - h < 4 ? nr - h : 4, y + h, ldy, 4, NC);
        else
            for (int c = 0; c < NC; c++)
                for (int r = 0; r < 4; r++) am[c * BD_R + h + r] = acc[c * 4 + r];
    }
}

// rows r < NR of w (ws bytes apart) x tokens c < NC, whole rows
BFD INLINE void bd_outputs(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y, int64_t ldy,
                           const int NR, const int NC) {
    const uint8_t *rows[BD_R];
    __m512 acc[16];
    for (int r = 0; r < NR; r++) rows[r] = w + r * ws;
    for (int k = 0; k < NR * NC; k++) acc[k] = _mm512_setzero_ps();
    bd_run(rows, x, xs, 0, n, acc, NR, NC);
    bd_store(acc, NR, y, ldy, NR, NC);
}

BFD static void bf16dp_dot_bf(int64_t n, float *s, const void *w, const void *x) {
    bd_outputs(n, w, 0, x, 0, s, 0, 1, 1);
}

#define BD_CASE(R, C) case (R - 1) * 4 + C - 1: bd_outputs(n, w, ws, x, xs, y, ldy, R, C); break;
BFD static void bf16dp_tile_bf(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc, float *y,
                               int64_t ldy) {
    const uint8_t *w = vw, *x = vx;
    switch ((nr - 1) * 4 + nc - 1) {
        BD_CASE(1, 1) BD_CASE(1, 2) BD_CASE(1, 3) BD_CASE(1, 4) BD_CASE(2, 1) BD_CASE(2, 2) BD_CASE(2, 3) BD_CASE(2, 4)
        BD_CASE(3, 1) BD_CASE(3, 2) BD_CASE(3, 3) BD_CASE(3, 4) BD_CASE(4, 1) BD_CASE(4, 2) BD_CASE(4, 3) BD_CASE(4, 4)
    default: break;
    }
}
#undef BD_CASE

// one token, any number of rows: row after row, one sequential stream left to the hardware prefetchers,
// 16 rows' sums summed by one hsum16_ps (docs/engine-measurements.md#bf16-decode).
BFD INLINE __m512 bd_decode_row(int64_t n, const uint8_t *w, const uint8_t *x) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w + 2 * i), (__m512bh)_mm512_loadu_si512(x + 2 * i));
    }
    return acc;
}

BFD static void bf16dp_decode_bf(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc,
                                 float *y, int64_t ldy) {
    (void)xs, (void)nc, (void)ldy;
    const uint8_t *w = vw, *x = vx;
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int m = nr - r0 < 16 ? nr - r0 : 16;
        __m512 acc[16];
        for (int r = 0; r < m; r++) acc[r] = bd_decode_row(n, w + (size_t)(r0 + r) * ws, x);
        float o[16];
        _mm512_storeu_ps(o, hsum16_ps(acc, m));
        memcpy(y + r0, o, sizeof(float) * (size_t)m);
    }
}

// nr <= BD_R rows (past nr: row 0 again, computed and not stored) x nc tokens, BD_TC at a time, chunk by chunk
BFD static void bf16dp_panel_bf(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc, float *y,
                                int64_t ldy) {
    const uint8_t *w = vw, *x = vx;
    const uint8_t *rows[BD_R];
    for (int r = 0; r < BD_R; r++) rows[r] = w + (r < nr ? r : 0) * ws;
    __m512 accm[BD_TOK * BD_R];
    for (int t0 = 0; t0 < nc; t0 += BD_TOK) {
        const int ntk = nc - t0 < BD_TOK ? nc - t0 : BD_TOK;
        for (int64_t k0 = 0; k0 < n; k0 += BD_K) {
            const int64_t kc = n - k0 < BD_K ? n - k0 : BD_K;
            // the same values of the next panel call's rows, while these run from L1
            if (t0 == 0)
                for (int r = 0; r < BD_R; r++)
                    for (int64_t b = 2 * k0; b < 2 * (k0 + kc); b += 64)
                        _mm_prefetch((const char *)w + (BD_R + r) * ws + b, _MM_HINT_T0);
            for (int c0 = 0; c0 < ntk; c0 += BD_TC) {
                const int nc1 = ntk - c0 < BD_TC ? ntk - c0 : BD_TC;
                __m512 *am = accm + c0 * BD_R;
                const uint8_t *xc = x + (size_t)(t0 + c0) * xs;
                float *yc = y + (t0 + c0) * ldy;
                const int last = k0 + kc >= n;
                switch (nc1) {
                case 1: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, 1); break;
                case 2: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, 2); break;
                case 3: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, 3); break;
                default: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, BD_TC); break;
                }
            }
        }
    }
}

void llmb_vd_bf16_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_AVX512 || !llmb_cpu_has("avx512vnni") || !llmb_cpu_has("avx512bf16")) return;
    t[LLMB_TYPE_BF16_DP].dot = bf16dp_dot_bf;
    t[LLMB_TYPE_BF16_DP].tile = bf16dp_tile_bf;
    t[LLMB_TYPE_BF16_DP].panel = bf16dp_panel_bf;
    t[LLMB_TYPE_BF16_DP].panel_r = BD_R;
    t[LLMB_TYPE_BF16_DP].decode = bf16dp_decode_bf;
}
#else
void llmb_vd_bf16_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif
