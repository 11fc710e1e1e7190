// vecdot_neon.c — the dot products and tiles of Q4_0, Q8_0, Q4_K, Q6_K and F16 on AArch64 (NEON, with the
// dot-product extension where the compiler targets it). Tested by csrc/tests/test_vecdot.c (cross-compiled
// and run under QEMU by tests/test_aarch64.py).
#include "vecdot_impl.h"

// Each block's integer dot is reduced to one int (vaddvq_s32: exact, so the same with or without
// the dot-product extension), then accumulated in float as the reference does; Q8_0 and Q4_0 are
// thereby bit-identical to their references. Other types keep the scalar reference on NEON.
#if defined(__aarch64__)
#include <arm_neon.h>

static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

static inline float half_at_neon(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return llmb_fp16_to_fp32(h);
}

// Q4_0, Q8_0 x Q8_0
INLINE void legacy0_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                              float *y, int64_t ldy, const int NR, const int NC) {
    const size_t wb = type == LLMB_TYPE_Q4_0 ? sizeof(llmb_block_q4_0) : sizeof(llmb_block_q8_0);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++)
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + ib * wb;
            int8x16_t w0, w1;
            if (type == LLMB_TYPE_Q4_0) {
                const uint8x16_t q = vld1q_u8(blk + 2);
                w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
                w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
            } else {
                w0 = vld1q_s8((const int8_t *)blk + 2), w1 = vld1q_s8((const int8_t *)blk + 18);
            }
            const float wd = half_at_neon(blk);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_0 *xb = (const llmb_block_q8_0 *)(x + c * xs) + ib;
                const int sumi = vaddvq_s32(dot16(dot16(vdupq_n_s32(0), w0, vld1q_s8(xb->qs)), w1, vld1q_s8(xb->qs + 16)));
                const float xd = half_at_neon((const uint8_t *)&xb->d);
                if (type == LLMB_TYPE_Q4_0) acc[r][c] += sumi * wd * xd;
                else acc[r][c] += sumi * (wd * xd);
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q4_K x Q8_K: integer sums per sub-block times the 6-bit scales, mins against the bsums
INLINE void q4_K_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                           float *y, int64_t ldy, const int NR, const int NC) {
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        for (int r = 0; r < NR; r++) {
            const llmb_block_q4_K *b = (const llmb_block_q4_K *)(w + r * ws) + i;
            uint8_t sc[8], mn[8];
            for (int j = 0; j < 8; j++) llmb_get_scale_min_k4(j, b->scales, &sc[j], &mn[j]);
            const float wd = llmb_fp16_to_fp32(b->d), wdmin = llmb_fp16_to_fp32(b->dmin);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                int sumi = 0, summ = 0;
                for (int j = 0; j < 4; j++) {
                    const uint8x16_t q0 = vld1q_u8(b->qs + 32 * j), q1 = vld1q_u8(b->qs + 32 * j + 16);
                    const int8_t *q8 = xb->qs + 64 * j;
                    const int8x16_t m4 = vdupq_n_s8(0x0F);
                    int32x4_t lo = dot16(vdupq_n_s32(0), vandq_s8(vreinterpretq_s8_u8(q0), m4), vld1q_s8(q8));
                    lo = dot16(lo, vandq_s8(vreinterpretq_s8_u8(q1), m4), vld1q_s8(q8 + 16));
                    int32x4_t hi = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vld1q_s8(q8 + 32));
                    hi = dot16(hi, vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), vld1q_s8(q8 + 48));
                    sumi += sc[2 * j] * vaddvq_s32(lo) + sc[2 * j + 1] * vaddvq_s32(hi);
                }
                for (int j = 0; j < 8; j++) summ += mn[j] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
                acc[r][c] += (wd * xb->d) * sumi;
                acc[r][c] -= (wdmin * xb->d) * summ;
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q6_K x Q8_K: the values unpacked to int8 (minus 32) as the dequantizer does, 16 per scale
INLINE void q6_K_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                           float *y, int64_t ldy, const int NR, const int NC) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        for (int r = 0; r < NR; r++) {
            const llmb_block_q6_K *b = (const llmb_block_q6_K *)(w + r * ws) + i;
            int8x16_t q[16];   // 16 sub-blocks of 16 values
            for (int half = 0; half < 2; half++) {
                const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
                for (int l = 0; l < 32; l += 16) {
                    const uint8x16_t l0 = vld1q_u8(ql + l), l32 = vld1q_u8(ql + 32 + l), h = vld1q_u8(qh + l);
                    int8x16_t *o = q + 8 * half + l / 16;
                    o[0] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m2), 4))), off);
                    o[2] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l32, m4),
                                                                 vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m2), 4))), off);
                    o[4] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l0, 4),
                                                                 vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m2), 4))), off);
                    o[6] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l32, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4))), off);
                }
            }
            const float wd = llmb_fp16_to_fp32(b->d);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                int sumi = 0;
                for (int j = 0; j < 16; j++)
                    sumi += b->scales[j] * vaddvq_s32(dot16(vdupq_n_s32(0), q[j], vld1q_s8(xb->qs + 16 * j)));
                acc[r][c] += (wd * xb->d) * sumi;
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// F16 x F32: two 4-float accumulators per output over 8 elements, then scalars
INLINE void f16_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                          float *y, int64_t ldy, const int NR, const int NC) {
    float32x4_t acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C][2];
    float tail[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c][0] = acc[r][c][1] = vdupq_n_f32(0.0f), tail[r][c] = 0.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int r = 0; r < NR; r++) {
            const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(w + r * ws) + i));
            const float32x4_t w0 = vcvt_f32_f16(vget_low_f16(h)), w1 = vcvt_high_f32_f16(h);
            for (int c = 0; c < NC; c++) {
                const float *xc = (const float *)(x + c * xs) + i;
                acc[r][c][0] = vaddq_f32(acc[r][c][0], vmulq_f32(w0, vld1q_f32(xc)));
                acc[r][c][1] = vaddq_f32(acc[r][c][1], vmulq_f32(w1, vld1q_f32(xc + 4)));
            }
        }
    for (; i < n; i++)
        for (int r = 0; r < NR; r++)
            for (int c = 0; c < NC; c++)
                tail[r][c] += llmb_fp16_to_fp32(((const uint16_t *)(w + r * ws))[i]) * ((const float *)(x + c * xs))[i];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = vaddvq_f32(vaddq_f32(acc[r][c][0], acc[r][c][1])) + tail[r][c];
}

#define VD_T
#define VD(f) f##_neon
GEN(q4_0, legacy0_body_neon, LLMB_TYPE_Q4_0)
GEN(q8_0, legacy0_body_neon, LLMB_TYPE_Q8_0)
GEN(q4_K, q4_K_body_neon, LLMB_TYPE_Q4_K)
GEN(q6_K, q6_K_body_neon, LLMB_TYPE_Q6_K)
GEN(f16, f16_body_neon, LLMB_TYPE_F16)
#undef VD_T
#undef VD

void llmb_vd_neon_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_NEON) return;
#define SET(T, name) t[T].dot = name##_dot_neon, t[T].tile = name##_tile_neon
    SET(LLMB_TYPE_Q4_0, q4_0);
    SET(LLMB_TYPE_Q8_0, q8_0);
    SET(LLMB_TYPE_Q4_K, q4_K);
    SET(LLMB_TYPE_Q6_K, q6_K);
    SET(LLMB_TYPE_F16, f16);
#undef SET
}
#else
void llmb_vd_neon_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif // AArch64
