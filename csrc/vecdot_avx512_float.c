// vecdot_avx512_float.c — F32, F16 and BF16 weights at the AVX-512 level: prefill panels (rows
// converted to float a chunk at a time, every token of the call run over the chunk) and one-token rows.
// Per output the operations of float_body (vecdot_x86_body.h), so the same bits as the dot. Tested by
// csrc/tests/test_vecdot.c.
#include "simd_x86.h"

#if defined(__x86_64__) && defined(__GNUC__)


// F32, F16, BF16: FL_R rows converted to float a chunk of at most FL_K values at a time, every
// token of the call run over the chunk in register tiles of FL_R rows x 2 tokens (16 accumulators:
// each weight vector feeds 2 fmadds, each activation vector 8), the accumulators kept in memory
// between chunks (rows of 2048 values no longer stream from L2 for every group of tokens) and summed
// from registers after the last one. Per output the operations of float_body: 16 values per 512-bit
// fmadd, whose low and high halves are its two accumulators (values i..i+7 and i+8..i+15) in order of
// i, then the 8-value step masked to the low half, its scalar tail and final sum (hsum16_ps: the same
// additions for 16 outputs at once). Rows past nr are zeros, computed and never stored.
#define FL_R 8          // rows per panel call
#define FL_TC 2         // tokens per register tile
#define FL_K 768        // most values per converted chunk (a multiple of 16): FL_R x FL_K floats stay in L1
#define FL_LD (FL_K + 16)   // floats from one converted row to the next (rows not 4 KiB apart: L1 sets)
#define FL_TOK (4 * LLMB_PANEL_TOKENS)   // tokens per pass over the chunks, the most panel_tokens hands
                                        // (the accumulators of a pass: FL_R x FL_TOK vectors)

// float_body's ending for one row and token, the values past the last multiple of 16: the 8-value
// step on the low half of *acc, then the scalar tail, returned (the panel and the decode kernel)
INLINE VNNI512 float fl_tail(const int type, int64_t n, const uint8_t *row, const float *x, __m512 *acc) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    int64_t i = n / 16 * 16;
    float tail = 0.0f;
    if (i + 8 <= n) {
        *acc = _mm512_mask3_fmadd_ps(_mm512_castps256_ps512(load_w8(type, row + i * es)),
                                     _mm512_castps256_ps512(_mm256_loadu_ps(x + i)), *acc, 0x00FF);
        i += 8;
    }
    for (; i < n; i++) tail += w_scalar(type, row + i * es) * x[i];
    return tail;
}

// The outputs of NC (1 or 2) tokens x the nr rows from their accumulators acc[c * FL_R + r]: the
// 8-value step and scalar tail of values past n16 (on a copy: acc itself stays in registers), then
// the sums of all 2 x FL_R at once
INLINE VNNI512 void fl_finish(const int type, int64_t n, const uint8_t *w, size_t ws, int nr, const float *x, size_t xs,
                              const __m512 *acc, const int NC, float *y, int64_t ldy) {
    const int64_t n16 = n / 16 * 16;
    __m512 s;
    if (n16 < n) {
        __m512 a[FL_TC * FL_R];
        float t[FL_TC * FL_R] = {0};
        memcpy(a, acc, sizeof(__m512) * NC * FL_R);
        for (int k = 0; k < NC * FL_R; k++)
            if (k % FL_R < nr)
                t[k] = fl_tail(type, n, w + (k % FL_R) * ws, (const float *)((const uint8_t *)x + (k / FL_R) * xs), &a[k]);
        s = _mm512_add_ps(hsum16_ps(a, NC * FL_R), _mm512_loadu_ps(t));
    } else   // + 0.0f as float_body adds its (empty) tail: -0.0f sums stay +0.0f
        s = _mm512_add_ps(hsum16_ps(acc, NC * FL_R), _mm512_setzero_ps());
    const __m256 s1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    if (nr == FL_R) {
        _mm256_storeu_ps(y, _mm512_castps512_ps256(s));
        if (NC == 2) _mm256_storeu_ps(y + ldy, s1);
    } else {
        const __mmask8 rows = (__mmask8)((1u << nr) - 1);
        _mm256_mask_storeu_ps(y, rows, _mm512_castps512_ps256(s));
        if (NC == 2) _mm256_mask_storeu_ps(y + ldy, rows, s1);
    }
}

// NC (1 or 2) tokens x FL_R rows over the kc values (a multiple of 16) of a chunk, from the sums
// in accm (or zeros on the first chunk) to accm, or on the last chunk to the outputs
INLINE VNNI512 void fl_tile(const float *dec, int64_t kc, const float *xk, size_t xs, __m512 *accm, int first, int last,
                            const int NC, const int type, int64_t n, const uint8_t *w, size_t ws, int nr,
                            const float *x, float *y, int64_t ldy) {
    __m512 acc[FL_TC * FL_R];
    for (int k = 0; k < NC * FL_R; k++) acc[k] = first ? _mm512_setzero_ps() : accm[k];
    for (int64_t i = 0; i < kc; i += 16) {
        __m512 xv[FL_TC];
        for (int c = 0; c < NC; c++) xv[c] = _mm512_loadu_ps((const float *)((const uint8_t *)xk + c * xs) + i);
        for (int r = 0; r < FL_R; r++) {
            __m512 wv = _mm512_load_ps(dec + r * FL_LD + i);
            __asm__("" : "+v"(wv));   // one load per row, not one folded into each of the NC fmadds
            for (int c = 0; c < NC; c++) acc[c * FL_R + r] = _mm512_fmadd_ps(wv, xv[c], acc[c * FL_R + r]);
        }
    }
    if (last) fl_finish(type, n, w, ws, nr, x, xs, acc, NC, y, ldy);
    else
        for (int k = 0; k < NC * FL_R; k++) accm[k] = acc[k];
}

// converted values k0 .. k0+kc of row `row` into o (float_panel prefetched its bytes while the
// previous panel call ran its tokens: the weights come from DRAM or L3)
INLINE VNNI512 void fl_convert(const int type, const uint8_t *row, int64_t k0, int64_t kc, float *o) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    int64_t i = 0;
    if (type == LLMB_TYPE_F16)
        for (; i + 16 <= kc; i += 16)
            _mm512_store_ps(o + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (k0 + i)))));
    for (; i < kc; i++) o[i] = w_scalar(type, row + (k0 + i) * es);
}

INLINE VNNI512 void float_panel(const int type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                                size_t xs, int nc, float *y, int64_t ldy) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    const int64_t n16 = n / 16 * 16;
    const int64_t nch = n16 ? (n16 + FL_K - 1) / FL_K : 1, kstep = n16 ? (n16 / 16 + nch - 1) / nch * 16 : 16;   // balanced chunks
    float dec[FL_R * FL_LD] __attribute__((aligned(64)));
    __m512 accm[FL_TOK * FL_R];
    for (int t0 = 0; t0 < nc; t0 += FL_TOK) {
        const int ntk = nc - t0 < FL_TOK ? nc - t0 : FL_TOK;
        const float *xt = (const float *)(x + t0 * xs);
        for (int64_t k0 = 0; k0 < n16 || k0 == 0; k0 += kstep) {
            const int64_t kc = n16 - k0 < kstep ? n16 - k0 : kstep;
            const int last = k0 + kstep >= n16;
            for (int r = 0; r < FL_R; r++) {
                if (r < nr) fl_convert(type, w + r * ws, k0, kc, dec + r * FL_LD);
                else memset(dec + r * FL_LD, 0, sizeof(float) * (size_t)kc);
            }
            // the same bytes of the next panel call's rows, all at once now that the conversion's loads
            // are issued (spread over the tiles, or issued during the conversion, they helped less)
            for (int r = 0; r < FL_R; r++)
                for (size_t b = (size_t)k0 * es; b < (size_t)(k0 + kc) * es; b += 64)
                    _mm_prefetch((const char *)w + (FL_R + r) * ws + b, _MM_HINT_T0);
            for (int c0 = 0; c0 < ntk; c0 += FL_TC) {
                __m512 *am = accm + c0 * FL_R;
                const float *xc = (const float *)((const uint8_t *)xt + c0 * xs);
                float *yc = y + (t0 + c0) * ldy;
                if (ntk - c0 >= 2) fl_tile(dec, kc, xc + k0, xs, am, k0 == 0, last, 2, type, n, w, ws, nr, xc, yc, ldy);
                else fl_tile(dec, kc, xc + k0, xs, am, k0 == 0, last, 1, type, n, w, ws, nr, xc, yc, ldy);
            }
        }
    }
}

#define FL_PANEL(name, T)                                                                                           \
    VNNI512 static void name##_panel_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, \
                                             int nc, float *y, int64_t ldy) {                                        \
        float_panel(T, n, vw, ws, nr, vx, xs, nc, y, ldy);                                                          \
    }
FL_PANEL(f32, LLMB_TYPE_F32)
FL_PANEL(f16, LLMB_TYPE_F16)
FL_PANEL(bf16, LLMB_TYPE_BF16)

// One token of F32 / F16 / BF16 weights, row after row: float_body's operations for a 1 x 1 tile,
// with its two 8-float accumulators (elements 16k .. 16k+7 and 16k+8 .. 16k+15) as the low and high
// halves of one 512-bit accumulator, so the same bits as the dot in half the instructions (docs/engine-measurements.md#float-decode).
INLINE VNNI512 __m512 load_w16(const int type, const uint8_t *p) {
    switch (type) {
    case LLMB_TYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    case LLMB_TYPE_BF16: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    default: return _mm512_loadu_ps((const float *)p);
    }
}

INLINE VNNI512 float float_decode_row(const int type, int64_t n, const uint8_t *w, const float *x) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        if (i % 32 == 0) prefetch_l2(w + i * es + STREAM_PF_AHEAD, 32 * es);   // F32: 2 lines per 32 values
        acc = _mm512_fmadd_ps(load_w16(type, w + i * es), _mm512_loadu_ps(x + i), acc);
    }
    const float tail = fl_tail(type, n, w, x, &acc);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc), hi)) + tail;
}

#define FLOAT_DECODE(name, T)                                                                                       \
    VNNI512 static void name##_decode_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *x, size_t xs,  \
                                              int nc, float *y, int64_t ldy) {                                      \
        for (int r = 0; r < nr; r++) y[r] = float_decode_row(T, n, (const uint8_t *)vw + r * ws, x);                \
    }
FLOAT_DECODE(f32, LLMB_TYPE_F32)
FLOAT_DECODE(f16, LLMB_TYPE_F16)
FLOAT_DECODE(bf16, LLMB_TYPE_BF16)

void llmb_vd_avx512_float_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_AVX512 || !llmb_cpu_has("avx512vnni")) return;
    t[LLMB_TYPE_F32].panel = f32_panel_vnni512;
    t[LLMB_TYPE_F16].panel = f16_panel_vnni512;
    t[LLMB_TYPE_BF16].panel = bf16_panel_vnni512;
    t[LLMB_TYPE_F32].panel_r = t[LLMB_TYPE_F16].panel_r = t[LLMB_TYPE_BF16].panel_r = FL_R;
    t[LLMB_TYPE_F32].decode = f32_decode_vnni512;
    t[LLMB_TYPE_F16].decode = f16_decode_vnni512;
    t[LLMB_TYPE_BF16].decode = bf16_decode_vnni512;
}
#else
void llmb_vd_avx512_float_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif
