// quants_simd.c — SIMD versions of the row kernels in quants.c: AVX2 (+F16C) and AVX-512 on
// x86-64, NEON on AArch64; on AVX2 also the K-quant scale searches, which dominate K quantization. The x86
// dequantizers and F16 conversions are one body (quants_simd_body.h) compiled for AVX2 and for AVX-512.
// Each is compiled for its level with a function target attribute (no
// per-file -m flags, so one build runs on any CPU) and installed into the kernel table of that
// level by llmb_quant_simd_install; quants.c picks the table of the active level at run time.
// Every kernel gives bit-identical results to its scalar reference in quants.c: the same float
// operations in the same order (a multiply then a subtract, never a fused multiply-add: the
// targets below do not enable FMA), NaN inputs of the fp16 conversions handed to the scalar code.
// Tested by csrc/tests/test_quants.c (each kernel against its reference on random data at every
// level this CPU has) and tests/test_quant.py (LLMBENCH_SIMD=scalar gives identical results).
#include <stddef.h>

#include "quants.h"
#include "vecdot.h"

// Bit-exactness needs a*b+c rounded twice, never fused: GCC does not contract in ISO C mode
// (-std=c11, as the builds use); clang must be told.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

// ================================ x86-64 ================================
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// ---- AVX2 helpers ----

// the low 8 signed bytes of v as floats
AVX2 static inline __m256 i8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
// the low 8 unsigned bytes of v as floats
AVX2 static inline __m256 u8x8_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

AVX2 static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

AVX2 static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// roundf (halves away from zero), exactly: truncate, then step away from zero if the dropped
// fraction (computed exactly) is at least one half
AVX2 static inline __m256 round_away_ps(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
    return _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), step));
}

// ---- AVX2 kernels ----

// 32 floats as ggml's 8-bit blocks quantize them: d = max|x| / 127, q = round(x / d) (halves away from
// zero) into qs; returns d, and the sum of the q in *sum
AVX2 static inline float quant_block_q8_avx2(const float *x, int8_t *qs, int *sum) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
    }
    const float d = hmax_ps(amax) / 127;
    const float id = d ? 1.0f / d : 0.0f;
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(round_away_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
    *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    // pack 4x8 int32 to 32 int8; the in-lane packs leave 4-byte groups in order 0,2,4,6,1,3,5,7
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, p);
    return d;
}

AVX2 static void quant_q8_0_avx2(const float *x, void *vy, int64_t n) {
    llmb_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++) {
        int sum;
        y[i].d = llmb_fp32_to_fp16(quant_block_q8_avx2(x + i * LLMB_QK, y[i].qs, &sum));
    }
}

// the activations of Q4_1 / Q5_1 products (vecdot.h, llmb_block_q8_1): quant_q8_1_ref of vecdot.c, vectorized
AVX2 void llmb_quant_q8_1_avx2(const float *x, void *vy, int64_t n) {
    llmb_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++) {
        int sum;
        y[i].d = quant_block_q8_avx2(x + i * LLMB_QK, y[i].qs, &sum);
        y[i].s = sum * y[i].d;
    }
}

// the 128 six-bit values (minus 32) of half a Q6_K super-block, in output order (plain AVX2, so
// the AVX-512 kernel can inline it too)
__attribute__((target("avx2"))) static inline void unpack_q6_K_avx2(const uint8_t *ql, const uint8_t *qh, int8_t q[128]) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql), l32 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
#define HI2(s) _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, s), m2), 4)
    const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l0, m4), HI2(0));
    const __m256i q2 = _mm256_or_si256(_mm256_and_si256(l32, m4), HI2(2));
    const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), HI2(4));
    const __m256i q4 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l32, 4), m4), HI2(6));
#undef HI2
    _mm256_storeu_si256((__m256i *)(q + 0), _mm256_sub_epi8(q1, off));
    _mm256_storeu_si256((__m256i *)(q + 32), _mm256_sub_epi8(q2, off));
    _mm256_storeu_si256((__m256i *)(q + 64), _mm256_sub_epi8(q3, off));
    _mm256_storeu_si256((__m256i *)(q + 96), _mm256_sub_epi8(q4, off));
}

AVX2 static void quant_q8_K_avx2(const float *x, void *vy, int64_t n) {
    llmb_block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i max_q = _mm256_set1_epi32(127);
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < LLMB_QK_K; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        const float amax = hmax_ps(vmax);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        int jmax = 0;   // the first element of largest magnitude, as the reference picks it
        while (__builtin_fabsf(x[jmax]) != amax) jmax++;
        const float iscale = -127.f / x[jmax];
        const __m256 vs = _mm256_set1_ps(iscale);
        for (int g = 0; g < LLMB_QK_K / 16; g++) {
            const __m256i a = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 16 * g))), max_q);
            const __m256i b = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + 16 * g + 8))), max_q);
            const __m256i p = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
            _mm_storeu_si128((__m128i *)(y[i].qs + 16 * g),
                             _mm_packs_epi16(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1)));
            y[i].bsums[g] = (int16_t)hsum_epi32(_mm256_add_epi32(a, b));
        }
        y[i].d = 1 / iscale;
    }
}

// ---- AVX2 K-quant scale searches: one sub-block per lane ----
// The scalar searches (quants.c) sum over a sub-block's elements in order, so they cannot be split
// within a sub-block without changing the sums; instead lane j runs sub-block j's whole search,
// element after element, with the same operations: results are identical, 8 sub-blocks at a time.
// nearest_int becomes _mm256_cvtps_epi32 (both round to nearest even; arguments stay below 2^22).

AVX2 static inline __m256i clamp_epi32(__m256i v, int lo, int hi) {
    return _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(lo)), _mm256_set1_epi32(hi));
}

// make_qkx2_quants (use_mad off, rdelta 0.1) on the 8 sub-blocks of 32 of a Q4_K/Q5_K super-block
AVX2 static void fit_k_avx2(const float *x, const float *w, int nmax, float rmin, int nstep, uint8_t *L, float *scales,
                            float *mins) {
    __m256 xt[32], wt[32];   // element i of every sub-block: lane j holds x[32*j + i]
    __m256i Lt[32], Laux[32];
    const __m256i idx = _mm256_setr_epi32(0, 32, 64, 96, 128, 160, 192, 224);
    for (int i = 0; i < 32; i++) {
        xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
        wt[i] = _mm256_i32gather_ps(w + i, idx, 4);
    }
    const __m256 zero = _mm256_setzero_ps();
    __m256 min = xt[0], max = xt[0], sum_w = wt[0], sum_x = _mm256_mul_ps(wt[0], xt[0]);
    for (int i = 1; i < 32; i++) {
        min = _mm256_blendv_ps(min, xt[i], _mm256_cmp_ps(xt[i], min, _CMP_LT_OQ));
        max = _mm256_blendv_ps(max, xt[i], _mm256_cmp_ps(xt[i], max, _CMP_GT_OQ));
        sum_w = _mm256_add_ps(sum_w, wt[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(wt[i], xt[i]));
    }
    min = _mm256_blendv_ps(min, zero, _mm256_cmp_ps(min, zero, _CMP_GT_OQ));
    const __m256 flat = _mm256_cmp_ps(max, min, _CMP_EQ_OQ);
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)nmax), _mm256_sub_ps(max, min));
    __m256 scale = _mm256_div_ps(_mm256_set1_ps(1.0f), iscale), best = zero;
    for (int i = 0; i < 32; i++) {
        Lt[i] = clamp_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
        const __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lt[i])), min), xt[i]);
        best = _mm256_add_ps(best, _mm256_mul_ps(wt[i], _mm256_mul_ps(diff, diff)));
    }
    for (int is = 0; is <= nstep; is++) {
        // min moves with the best fit so far, and the next grid spans max - min from it (as in ggml)
        iscale = _mm256_div_ps(_mm256_set1_ps(rmin + 0.1f * is + nmax), _mm256_sub_ps(max, min));
        __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        for (int i = 0; i < 32; i++) {
            Laux[i] = clamp_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
            const __m256 l = _mm256_cvtepi32_ps(Laux[i]), wl = _mm256_mul_ps(wt[i], l);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, l));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xt[i]));
        }
        const __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        const __m256 pos = _mm256_cmp_ps(this_min, zero, _CMP_GT_OQ);
        this_min = _mm256_blendv_ps(this_min, zero, pos);
        this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), pos);
        __m256 cur = zero;
        for (int i = 0; i < 32; i++) {
            const __m256 diff =
                _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, _mm256_cvtepi32_ps(Laux[i])), this_min), xt[i]);
            cur = _mm256_add_ps(cur, _mm256_mul_ps(wt[i], _mm256_mul_ps(diff, diff)));
        }
        const __m256 better = _mm256_and_ps(_mm256_cmp_ps(D, zero, _CMP_GT_OQ), _mm256_cmp_ps(cur, best, _CMP_LT_OQ));
        if (!_mm256_movemask_ps(better)) continue;
        for (int i = 0; i < 32; i++) Lt[i] = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(Lt[i]), _mm256_castsi256_ps(Laux[i]), better));
        best = _mm256_blendv_ps(best, cur, better);
        scale = _mm256_blendv_ps(scale, this_scale, better);
        min = _mm256_blendv_ps(min, this_min, better);
    }
    // a constant sub-block: all L zero, scale zero
    _mm256_storeu_ps(scales, _mm256_blendv_ps(scale, zero, flat));
    _mm256_storeu_ps(mins, _mm256_xor_ps(min, _mm256_set1_ps(-0.0f)));
    int32_t lanes[8];
    const int flat_mask = _mm256_movemask_ps(flat);
    for (int i = 0; i < 32; i++) {
        _mm256_storeu_si256((__m256i *)lanes, Lt[i]);
        for (int j = 0; j < 8; j++) L[32 * j + i] = (flat_mask >> j) & 1 ? 0 : (uint8_t)lanes[j];
    }
}

AVX2 static void quant_q4_K_avx2(const float *x, void *y, int64_t n) { llmb_quant_q4_K_with(x, y, n, fit_k_avx2); }
AVX2 static void quant_q5_K_avx2(const float *x, void *y, int64_t n) { llmb_quant_q5_K_with(x, y, n, fit_k_avx2); }

// make_qx_quants (nmax 32, weights x^2) on 8 sub-blocks of 16 starting at x
AVX2 static void fit_q6_K_8_avx2(const float *x, int8_t *L, float *scales) {
    const int nmax = 32;
    __m256 xt[16];
    __m256i Lt[16], Laux[16];
    const __m256i idx = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    for (int i = 0; i < 16; i++) xt[i] = _mm256_i32gather_ps(x + i, idx, 4);
    const __m256 zero = _mm256_setzero_ps(), sign = _mm256_set1_ps(-0.0f);
    __m256 max = zero, amax = zero;
    for (int i = 0; i < 16; i++) {
        const __m256 ax = _mm256_andnot_ps(sign, xt[i]), gt = _mm256_cmp_ps(ax, amax, _CMP_GT_OQ);
        amax = _mm256_blendv_ps(amax, ax, gt);
        max = _mm256_blendv_ps(max, xt[i], gt);
    }
    const __m256 tiny = _mm256_cmp_ps(amax, _mm256_set1_ps(1e-15f), _CMP_LT_OQ);   // GROUP_MAX_EPS: all zero
    __m256 sumlx = zero, suml2 = zero;
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    for (int i = 0; i < 16; i++) {
        const __m256i l = clamp_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(iscale, xt[i])), -nmax, nmax - 1);
        Lt[i] = l;
        const __m256 lf = _mm256_cvtepi32_ps(l), w = _mm256_mul_ps(xt[i], xt[i]);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, xt[i]), lf));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, lf), lf));
    }
    __m256 scale = _mm256_blendv_ps(_mm256_div_ps(sumlx, suml2), zero, _mm256_cmp_ps(suml2, zero, _CMP_EQ_OQ));
    __m256 best = _mm256_mul_ps(scale, sumlx);
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = _mm256_div_ps(_mm256_set1_ps(-(nmax + 0.1f * is)), max);
        sumlx = suml2 = zero;
        for (int i = 0; i < 16; i++) {
            Laux[i] = clamp_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(iscale, xt[i])), -nmax, nmax - 1);
            const __m256 lf = _mm256_cvtepi32_ps(Laux[i]), w = _mm256_mul_ps(xt[i], xt[i]);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w, xt[i]), lf));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w, lf), lf));
        }
        const __m256 better = _mm256_and_ps(_mm256_cmp_ps(suml2, zero, _CMP_GT_OQ),
                                            _mm256_cmp_ps(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2), _CMP_GT_OQ));
        if (!_mm256_movemask_ps(better)) continue;
        for (int i = 0; i < 16; i++) Lt[i] = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(Lt[i]), _mm256_castsi256_ps(Laux[i]), better));
        scale = _mm256_blendv_ps(scale, _mm256_div_ps(sumlx, suml2), better);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(scale, sumlx), better);
    }
    _mm256_storeu_ps(scales, _mm256_blendv_ps(scale, zero, tiny));
    int32_t lanes[8];
    const int tiny_mask = _mm256_movemask_ps(tiny);
    for (int i = 0; i < 16; i++) {
        _mm256_storeu_si256((__m256i *)lanes, Lt[i]);
        for (int j = 0; j < 8; j++) L[16 * j + i] = (tiny_mask >> j) & 1 ? 0 : (int8_t)(lanes[j] + nmax);
    }
}

AVX2 static void fit_q6_K_avx2(const float *x, int8_t *L, float *scales) {
    fit_q6_K_8_avx2(x, L, scales);
    fit_q6_K_8_avx2(x + 128, L + 128, scales + 8);
}

AVX2 static void quant_q6_K_avx2(const float *x, void *y, int64_t n) { llmb_quant_q6_K_with(x, y, n, fit_q6_K_avx2); }

// ---- the row conversions of quants_simd_body.h, 16 values at a time ----

// AVX2: two halves of 8
AVX2 static inline int f16_in16_avx2(const llmb_half *x, float *y) {
    const __m128i abs_mask = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
    const __m128i a = _mm_loadu_si128((const __m128i *)x), b = _mm_loadu_si128((const __m128i *)(x + 8));
    if (_mm_movemask_epi8(_mm_or_si128(_mm_cmpgt_epi16(_mm_and_si128(a, abs_mask), inf),
                                       _mm_cmpgt_epi16(_mm_and_si128(b, abs_mask), inf))))
        return 0;
    _mm256_storeu_ps(y, _mm256_cvtph_ps(a));
    _mm256_storeu_ps(y + 8, _mm256_cvtph_ps(b));
    return 1;
}
AVX2 static inline int f16_out16_avx2(const float *x, llmb_half *y) {
    const __m256 a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_UNORD_Q))))
        return 0;
    _mm_storeu_si128((__m128i *)y, _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm_storeu_si128((__m128i *)(y + 8), _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return 1;
}
AVX2 static inline void scale16_avx2(float *y, __m128i q, float d) {
    const __m256 vd = _mm256_set1_ps(d);
    _mm256_storeu_ps(y, _mm256_mul_ps(i8x8_ps(q), vd));
    _mm256_storeu_ps(y + 8, _mm256_mul_ps(i8x8_ps(_mm_srli_si128(q, 8)), vd));
}
AVX2 static inline void affine16_avx2(float *y, __m128i q, float d, float m) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(vd, u8x8_ps(q)), vm));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(_mm256_mul_ps(vd, u8x8_ps(_mm_srli_si128(q, 8))), vm));
}

// AVX-512: one vector of 16
AVX512 static inline int f16_in16_avx512(const llmb_half *x, float *y) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)x);
    if (_mm256_cmpgt_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x7fff)), _mm256_set1_epi16(0x7c00))) return 0;
    _mm512_storeu_ps(y, _mm512_cvtph_ps(h));
    return 1;
}
AVX512 static inline int f16_out16_avx512(const float *x, llmb_half *y) {
    const __m512 v = _mm512_loadu_ps(x);
    if (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q)) return 0;
    _mm256_storeu_si256((__m256i *)y, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    return 1;
}
AVX512 static inline void scale16_avx512(float *y, __m128i q, float d) {
    _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(d)));
}
AVX512 static inline void affine16_avx512(float *y, __m128i q, float d, float m) {
    _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(d), _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q))),
                                      _mm512_set1_ps(m)));
}

#define QT AVX2
#define QV(f) f##_avx2
#include "quants_simd_body.h"
#undef QT
#undef QV
#define QT AVX512
#define QV(f) f##_avx512
#include "quants_simd_body.h"
#undef QT
#undef QV

// ---- 8-bit activation blocks on AVX-512: quant_block_q8_avx2's steps, 16 blocks at a time ----
// The 16 blocks' max |x| (and later their sums of q) reduce together: a tree of shuffles leaves block b's in lane b
// of one vector (no horizontal reduction a block, no scalars stored and loaded back as a vector, which stalled
// on the failed store forwarding); then d = max / 127 and id = 1 / d divide in one vector each where the AVX2
// loop ran two scalar divisions a block. The order of a max and of integer adds does not change them; q =
// round(x id) halves away from zero as round_away_ps: the reference's bytes.

// roundf of every lane, exactly (round_away_ps with a mask register; the sign bits by integer ops, AVX-512F only)
AVX512 static inline __m512 round_away_avx512(__m512 v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(v, t)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512i one = _mm512_castps_si512(_mm512_set1_ps(1.0f)), sign = _mm512_set1_epi32(INT32_MIN);
    const __m512 step = _mm512_castsi512_ps(_mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), sign), one));
    return _mm512_mask_add_ps(t, up, t, step);
}

// v[b] (b < 16) reduced across its lanes by OP (max_ps, or add_epi32 on the bits), the result of v[b] in lane b:
// halves of 8 lanes, then of 4 (128-bit lanes), 2 and 1 (within them); the tree leaves block b in lane
// 4 (b % 4) + b / 4, which the last permute undoes. v is overwritten.
#define REDUCE16(v, OP)                                                                                             \
    do {                                                                                                            \
        for (int i = 0; i < 8; i++)                                                                                 \
            v[i] = OP(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE)); \
        for (int i = 0; i < 4; i++)                                                                                 \
            v[i] = OP(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x88), _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xDD)); \
        for (int i = 0; i < 2; i++)                                                                                 \
            v[i] = OP(_mm512_shuffle_ps(v[2 * i], v[2 * i + 1], 0x44), _mm512_shuffle_ps(v[2 * i], v[2 * i + 1], 0xEE)); \
        v[0] = OP(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));                      \
        v[0] = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v[0]); \
    } while (0)
#define ADD_EPI32_PS(a, b) _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))

// nb <= 16 blocks of 32 floats at x: the values of block b to y + b * ystride + qs; returns their d in the lanes
// (lane b: block b's; lanes past nb unspecified), the sums of their values in *sum
AVX512 static inline __m512 quant_blocks_q8_avx512(const float *x, int nb, uint8_t *y, size_t ystride, size_t qs,
                                                   __m512i *sum) {
    __m512 v[16];
    for (int b = 0; b < 16; b++)
        v[b] = b < nb ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 32 * b)), _mm512_abs_ps(_mm512_loadu_ps(x + 32 * b + 16)))
                      : _mm512_setzero_ps();
    REDUCE16(v, _mm512_max_ps);
    const __m512 d = _mm512_div_ps(v[0], _mm512_set1_ps(127.0f));
    float id[16];
    _mm512_storeu_ps(id, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ), _mm512_set1_ps(1.0f), d));
    for (int b = 0; b < 16; b++) {
        if (b >= nb) {
            v[b] = _mm512_setzero_ps();
            continue;
        }
        const __m512 s = _mm512_set1_ps(id[b]);
        const __m512i q0 = _mm512_cvtps_epi32(round_away_avx512(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b), s)));
        const __m512i q1 = _mm512_cvtps_epi32(round_away_avx512(_mm512_mul_ps(_mm512_loadu_ps(x + 32 * b + 16), s)));
        v[b] = _mm512_castsi512_ps(_mm512_add_epi32(q0, q1));
        uint8_t *o = y + b * ystride + qs;
        _mm_storeu_si128((__m128i *)o, _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(o + 16), _mm512_cvtsepi32_epi8(q1));
    }
    REDUCE16(v, ADD_EPI32_PS);
    *sum = _mm512_castps_si512(v[0]);
    return d;
}
#undef ADD_EPI32_PS
#undef REDUCE16

AVX512 static void quant_q8_0_avx512(const float *x, void *vy, int64_t n) {
    llmb_block_q8_0 *y = vy;
    float d[16];
    __m512i sum;
    for (int64_t i = 0; i < n / LLMB_QK; i += 16) {
        const int nb = n / LLMB_QK - i < 16 ? (int)(n / LLMB_QK - i) : 16;
        _mm512_storeu_ps(d, quant_blocks_q8_avx512(x + i * LLMB_QK, nb, (uint8_t *)(y + i), sizeof *y,
                                                   offsetof(llmb_block_q8_0, qs), &sum));
        for (int b = 0; b < nb; b++) y[i + b].d = llmb_fp32_to_fp16(d[b]);
    }
}

// the activations of Q4_1 / Q5_1 products: llmb_quant_q8_1_avx2's bytes (s = the sum converted, times d)
AVX512 void llmb_quant_q8_1_avx512(const float *x, void *vy, int64_t n) {
    llmb_block_q8_1 *y = vy;
    float d[16], s[16];
    __m512i sum;
    for (int64_t i = 0; i < n / LLMB_QK; i += 16) {
        const int nb = n / LLMB_QK - i < 16 ? (int)(n / LLMB_QK - i) : 16;
        const __m512 vd = quant_blocks_q8_avx512(x + i * LLMB_QK, nb, (uint8_t *)(y + i), sizeof *y,
                                                 offsetof(llmb_block_q8_1, qs), &sum);
        _mm512_storeu_ps(d, vd);
        _mm512_storeu_ps(s, _mm512_mul_ps(_mm512_cvtepi32_ps(sum), vd));
        for (int b = 0; b < nb; b++) y[i + b].d = d[b], y[i + b].s = s[b];
    }
}
#endif // x86-64

// ================================ AArch64 ================================
#if defined(__aarch64__)
#include <arm_neon.h>

// y[0..15] = 16 signed bytes times d
static inline void scale16_neon(float *y, int8x16_t q, float32x4_t d) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
    vst1q_f32(y + 0, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
    vst1q_f32(y + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d));
    vst1q_f32(y + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
    vst1q_f32(y + 12, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d));
}

// y[0..15] = d*q - m for 16 unsigned bytes q
static inline void affine16_neon(float *y, uint8x16_t q, float32x4_t d, float32x4_t m) {
    const uint16x8_t lo = vmovl_u8(vget_low_u8(q)), hi = vmovl_u8(vget_high_u8(q));
    vst1q_f32(y + 0, vsubq_f32(vmulq_f32(d, vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)))), m));
    vst1q_f32(y + 4, vsubq_f32(vmulq_f32(d, vcvtq_f32_u32(vmovl_u16(vget_high_u16(lo)))), m));
    vst1q_f32(y + 8, vsubq_f32(vmulq_f32(d, vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)))), m));
    vst1q_f32(y + 12, vsubq_f32(vmulq_f32(d, vcvtq_f32_u32(vmovl_u16(vget_high_u16(hi)))), m));
}

static void dequant_f16_neon(const void *vx, float *y, int64_t n) {
    const llmb_half *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint16x8_t h = vld1q_u16(x + i);
        if (vmaxvq_u16(vcgtq_u16(vandq_u16(h, vdupq_n_u16(0x7fff)), vdupq_n_u16(0x7c00)))) {   // a NaN
            for (int k = 0; k < 8; k++) y[i + k] = llmb_fp16_to_fp32(x[i + k]);
            continue;
        }
        vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))));
        vst1q_f32(y + i + 4, vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h))));
    }
    for (; i < n; i++) y[i] = llmb_fp16_to_fp32(x[i]);
}

static void quant_f16_neon(const float *x, void *vy, int64_t n) {
    llmb_half *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const float32x4_t a = vld1q_f32(x + i), b = vld1q_f32(x + i + 4);
        if (vminvq_u32(vandq_u32(vceqq_f32(a, a), vceqq_f32(b, b))) == 0) {   // a NaN
            for (int k = 0; k < 8; k++) y[i + k] = llmb_fp32_to_fp16(x[i + k]);
            continue;
        }
        vst1q_u16(y + i, vreinterpretq_u16_f16(vcombine_f16(vcvt_f16_f32(a), vcvt_f16_f32(b))));
    }
    for (; i < n; i++) y[i] = llmb_fp32_to_fp16(x[i]);
}

static void dequant_q8_0_neon(const void *vx, float *y, int64_t n) {
    const llmb_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float32x4_t d = vdupq_n_f32(llmb_fp16_to_fp32(x[i].d));
        scale16_neon(y, vld1q_s8(x[i].qs), d);
        scale16_neon(y + 16, vld1q_s8(x[i].qs + 16), d);
    }
}

static void dequant_q4_0_neon(const void *vx, float *y, int64_t n) {
    const llmb_block_q4_0 *x = vx;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float32x4_t d = vdupq_n_f32(llmb_fp16_to_fp32(x[i].d));
        const uint8x16_t q = vld1q_u8(x[i].qs);
        scale16_neon(y, vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), eight), d);
        scale16_neon(y + 16, vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight), d);
    }
}

static void dequant_q4_K_neon(const void *vx, float *y, int64_t n) {
    const llmb_block_q4_K *x = vx;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d), min = llmb_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
            uint8_t sc, m;
            llmb_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float32x4_t d1 = vdupq_n_f32(d * sc), m1 = vdupq_n_f32(min * m);
            llmb_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float32x4_t d2 = vdupq_n_f32(d * sc), m2 = vdupq_n_f32(min * m);
            for (int h = 0; h < 32; h += 16) {
                const uint8x16_t v = vld1q_u8(q + h);
                affine16_neon(y + h, vandq_u8(v, m4), d1, m1);
                affine16_neon(y + 32 + h, vshrq_n_u8(v, 4), d2, m2);
            }
        }
    }
}

static void dequant_q6_K_neon(const void *vx, float *y, int64_t n) {
    const llmb_block_q6_K *x = vx;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    int8_t q[128];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        for (int half = 0; half < 2; half++, y += 128) {
            const uint8_t *ql = x[i].ql + 64 * half, *qh = x[i].qh + 32 * half;
            for (int l = 0; l < 32; l += 16) {   // the same unpacking as the reference, 16 bytes at a time
                const uint8x16_t l0 = vld1q_u8(ql + l), l32 = vld1q_u8(ql + 32 + l), h = vld1q_u8(qh + l);
                const uint8x16_t q1 = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m2), 4));
                const uint8x16_t q2 = vorrq_u8(vandq_u8(l32, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m2), 4));
                const uint8x16_t q3 = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m2), 4));
                const uint8x16_t q4 = vorrq_u8(vshrq_n_u8(l32, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4));
                vst1q_s8(q + l + 0, vsubq_s8(vreinterpretq_s8_u8(q1), off));
                vst1q_s8(q + l + 32, vsubq_s8(vreinterpretq_s8_u8(q2), off));
                vst1q_s8(q + l + 64, vsubq_s8(vreinterpretq_s8_u8(q3), off));
                vst1q_s8(q + l + 96, vsubq_s8(vreinterpretq_s8_u8(q4), off));
            }
            const int8_t *sc = x[i].scales + 8 * half;
            for (int o = 0; o < 128; o += 16) scale16_neon(y + o, vld1q_s8(q + o), vdupq_n_f32(d * sc[o / 16]));
        }
    }
}
#endif // AArch64

void llmb_quant_simd_install(llmb_simd_level lvl, llmb_quant_traits *t) {
    switch (lvl) {
#if defined(__x86_64__) && defined(__GNUC__)
    case LLMB_SIMD_AVX2:
        t[LLMB_TYPE_F16].to_float = dequant_f16_avx2;
        t[LLMB_TYPE_F16].from_float = quant_f16_avx2;
        t[LLMB_TYPE_Q8_0].to_float = dequant_q8_0_avx2;
        t[LLMB_TYPE_Q8_0].from_float = quant_q8_0_avx2;
        t[LLMB_TYPE_Q4_0].to_float = dequant_q4_0_avx2;
        t[LLMB_TYPE_Q4_K].to_float = dequant_q4_K_avx2;
        t[LLMB_TYPE_Q6_K].to_float = dequant_q6_K_avx2;
        t[LLMB_TYPE_Q8_K].from_float = quant_q8_K_avx2;
        t[LLMB_TYPE_Q4_K].from_float = quant_q4_K_avx2;
        t[LLMB_TYPE_Q5_K].from_float = quant_q5_K_avx2;
        t[LLMB_TYPE_Q6_K].from_float = quant_q6_K_avx2;
        break;
    case LLMB_SIMD_AVX512:   // quantizers: the AVX2 ones (installed first by quants.c) but Q8_0's
        t[LLMB_TYPE_F16].to_float = dequant_f16_avx512;
        t[LLMB_TYPE_F16].from_float = quant_f16_avx512;
        t[LLMB_TYPE_Q8_0].to_float = dequant_q8_0_avx512;
        t[LLMB_TYPE_Q4_0].to_float = dequant_q4_0_avx512;
        t[LLMB_TYPE_Q4_K].to_float = dequant_q4_K_avx512;
        t[LLMB_TYPE_Q6_K].to_float = dequant_q6_K_avx512;
        t[LLMB_TYPE_Q8_0].from_float = quant_q8_0_avx512;
        break;
#endif
#if defined(__aarch64__)
    case LLMB_SIMD_NEON:
        t[LLMB_TYPE_F16].to_float = dequant_f16_neon;
        t[LLMB_TYPE_F16].from_float = quant_f16_neon;
        t[LLMB_TYPE_Q8_0].to_float = dequant_q8_0_neon;
        t[LLMB_TYPE_Q4_0].to_float = dequant_q4_0_neon;
        t[LLMB_TYPE_Q4_K].to_float = dequant_q4_K_neon;
        t[LLMB_TYPE_Q6_K].to_float = dequant_q6_K_neon;
        break;
#endif
    default:
        break;
    }
}
