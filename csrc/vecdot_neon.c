// vecdot_neon.c — the dot products and tiles of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K,
// Q6_K, IQ4_XS and F16 on AArch64 (NEON, with the dot-product extension where the compiler targets it). Tested
// by csrc/tests/test_vecdot.c (cross-compiled and run under QEMU by tests/test_aarch64.py).
#include "vecdot_impl.h"

// Each block's integer dot is reduced to one int (vaddvq_s32: exact, so the same with or without
// the dot-product extension), then accumulated in float as the reference does; the legacy types, IQ4_NL,
// IQ4_XS and Q2_K are thereby bit-identical to their references (Q3_K to Q6_K sum in another order than
// theirs, within the tests' tolerance). The I-quants, TQ1_0 / TQ2_0 and the FP4 types keep the scalar
// reference on NEON.
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

// the exact sum of 32 values (w0: the first 16, w1: the rest) times the activations at q8
static inline int sum32(int8x16_t w0, int8x16_t w1, const int8_t *q8) {
    return vaddvq_s32(dot16(dot16(vdupq_n_s32(0), w0, vld1q_s8(q8)), w1, vld1q_s8(q8 + 16)));
}

static inline float half_at_neon(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return llmb_fp16_to_fp32(h);
}

// The 32 values of a legacy block (or IQ4_NL's) at blk as two vectors (elements 0..15, 16..31): what the
// reference multiplies by the activations (Q4_1 / Q5_1 without their offset m, which the block sum s of the
// Q8_1 activations carries)
static inline void legacy_values(const int type, const uint8_t *blk, int8x16_t *w0, int8x16_t *w1) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    if (type == LLMB_TYPE_Q8_0) {
        *w0 = vld1q_s8((const int8_t *)blk + 2), *w1 = vld1q_s8((const int8_t *)blk + 18);
        return;
    }
    const size_t at = type == LLMB_TYPE_Q4_1 ? 4 : type == LLMB_TYPE_Q5_0 ? 6 : type == LLMB_TYPE_Q5_1 ? 8 : 2;
    const uint8x16_t q = vld1q_u8(blk + at);
    uint8x16_t lo = vandq_u8(q, m4), hi = vshrq_n_u8(q, 4);
    if (type == LLMB_TYPE_IQ4_NL) {
        const int8x16_t values = vld1q_s8(llmb_kvalues_iq4nl);
        *w0 = vqtbl1q_s8(values, lo), *w1 = vqtbl1q_s8(values, hi);
        return;
    }
    if (type == LLMB_TYPE_Q5_0 || type == LLMB_TYPE_Q5_1) {   // element j's fifth bit: bit j of qh (before qs)
        static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t bits = vld1q_u8(bit), b16 = vdupq_n_u8(0x10);
        const uint8_t *qh = blk + at - 4;
        lo = vorrq_u8(lo, vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), bits), b16));
        hi = vorrq_u8(hi, vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), bits), b16));
    }
    *w0 = vreinterpretq_s8_u8(lo), *w1 = vreinterpretq_s8_u8(hi);
    if (type == LLMB_TYPE_Q4_0 || type == LLMB_TYPE_Q5_0) {   // centred: minus 8 or 16
        const int8x16_t off = vdupq_n_s8(type == LLMB_TYPE_Q4_0 ? 8 : 16);
        *w0 = vsubq_s8(*w0, off), *w1 = vsubq_s8(*w1, off);
    }
}

static inline size_t legacy_block_bytes(const int type) {
    switch (type) {
    case LLMB_TYPE_Q4_0: return sizeof(llmb_block_q4_0);
    case LLMB_TYPE_Q4_1: return sizeof(llmb_block_q4_1);
    case LLMB_TYPE_Q5_0: return sizeof(llmb_block_q5_0);
    case LLMB_TYPE_Q5_1: return sizeof(llmb_block_q5_1);
    case LLMB_TYPE_IQ4_NL: return sizeof(llmb_block_iq4_nl);
    default: return sizeof(llmb_block_q8_0);
    }
}

// Q4_0, Q5_0, Q8_0, IQ4_NL x Q8_0 and Q4_1, Q5_1 x Q8_1: each block's exact integer sum, then the
// reference's float step for the type (dot_*_ref in vecdot.c), so the reference's bits
INLINE void legacy_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                             float *y, int64_t ldy, const int NR, const int NC) {
    const size_t wb = legacy_block_bytes(type);
    const int q81 = type == LLMB_TYPE_Q4_1 || type == LLMB_TYPE_Q5_1;
    const size_t xb = q81 ? sizeof(llmb_block_q8_1) : sizeof(llmb_block_q8_0), xq = q81 ? 8 : 2;
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++)
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + ib * wb;
            int8x16_t w0, w1;
            legacy_values(type, blk, &w0, &w1);
            const float wd = half_at_neon(blk), wm = q81 ? half_at_neon(blk + 2) : 0.0f;
            for (int c = 0; c < NC; c++) {
                const uint8_t *xblk = x + c * xs + ib * xb;
                const int8_t *q8 = (const int8_t *)xblk + xq;
                const int sumi = sum32(w0, w1, q8);
                if (q81) {
                    const llmb_block_q8_1 *b = (const llmb_block_q8_1 *)xblk;
                    acc[r][c] += (wd * b->d) * sumi + wm * b->s;
                } else {
                    const float xd = half_at_neon(xblk);
                    if (type == LLMB_TYPE_Q4_0) acc[r][c] += sumi * wd * xd;
                    else if (type == LLMB_TYPE_IQ4_NL) acc[r][c] += (xd * wd) * sumi;
                    else acc[r][c] += sumi * (wd * xd);
                }
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q4_K, Q5_K x Q8_K: the 256 values unpacked once per row and super-block (Q5_K's fifth bits as the
// dequantizer adds them), integer sums per sub-block of 32 times the 6-bit scales, mins against the bsums
_Static_assert(offsetof(llmb_block_q5_K, dmin) == offsetof(llmb_block_q4_K, dmin) &&
                   offsetof(llmb_block_q5_K, scales) == offsetof(llmb_block_q4_K, scales),
               "q45_K_body_neon reads Q5_K's d, dmin and scales through Q4_K's block");
INLINE void q45_K_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                            float *y, int64_t ldy, const int NR, const int NC) {
    const int q5 = type == LLMB_TYPE_Q5_K;
    const size_t bytes = q5 ? sizeof(llmb_block_q5_K) : sizeof(llmb_block_q4_K);
    const size_t qs_at = q5 ? offsetof(llmb_block_q5_K, qs) : offsetof(llmb_block_q4_K, qs);
    const uint8x16_t m4 = vdupq_n_u8(0x0F), b16 = vdupq_n_u8(0x10);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + i * bytes;   // d, dmin and the scales at the same places in both
            const llmb_block_q4_K *b = (const llmb_block_q4_K *)blk;
            uint8_t sc[8], mn[8];
            for (int j = 0; j < 8; j++) llmb_get_scale_min_k4(j, b->scales, &sc[j], &mn[j]);
            int8x16_t q[16];   // sub-block k (32 values) in q[2k], q[2k + 1]
            for (int j = 0; j < 4; j++)
                for (int h = 0; h < 2; h++) {
                    const uint8x16_t v = vld1q_u8(blk + qs_at + 32 * j + 16 * h);
                    uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
                    if (q5) {   // value l of sub-blocks 2j and 2j + 1: bits 2j and 2j + 1 of qh[l]
                        const uint8x16_t qh = vld1q_u8(((const llmb_block_q5_K *)blk)->qh + 16 * h);
                        lo = vorrq_u8(lo, vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(1u << (2 * j)))), b16));
                        hi = vorrq_u8(hi, vandq_u8(vtstq_u8(qh, vdupq_n_u8((uint8_t)(2u << (2 * j)))), b16));
                    }
                    q[4 * j + h] = vreinterpretq_s8_u8(lo), q[4 * j + 2 + h] = vreinterpretq_s8_u8(hi);
                }
            const float wd = llmb_fp16_to_fp32(b->d), wdmin = llmb_fp16_to_fp32(b->dmin);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                int sumi = 0, summ = 0;
                for (int k = 0; k < 8; k++) {
                    const int8_t *q8 = xb->qs + 32 * k;
                    sumi += sc[k] * sum32(q[2 * k], q[2 * k + 1], q8);
                    summ += mn[k] * (xb->bsums[2 * k] + xb->bsums[2 * k + 1]);
                }
                acc[r][c] += (wd * xb->d) * sumi;
                acc[r][c] -= (wdmin * xb->d) * summ;
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// the low 2 bits of Q2_K's and Q3_K's sub-block j (16 values): bits 2 (j / 2 % 4) of qs[32 (j / 8) + 16 (j % 2)
// + l]
static inline uint8x16_t k_low2(const uint8_t *qs, int j) {
    return vandq_u8(vshlq_u8(vld1q_u8(qs + 32 * (j / 8) + 16 * (j % 2)), vdupq_n_s8((int8_t)(-2 * (j / 2 % 4)))),
                    vdupq_n_u8(3));
}

// Q2_K, Q3_K x Q8_K: the 16 sub-blocks of 16 values unpacked once per row and super-block (Q3_K's less 4 where
// the high bit is clear), exact integer sums times the sub-blocks' scales, then per super-block Q2_K's float step
// with the mins against the bsums (dot_q2_K_ref: its bits) or Q3_K's one product (another order than
// dot_q3_K_ref's 8 float lanes)
INLINE void q23_K_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                            float *y, int64_t ldy, const int NR, const int NC) {
    const int q3 = type == LLMB_TYPE_Q3_K;
    const size_t bytes = q3 ? sizeof(llmb_block_q3_K) : sizeof(llmb_block_q2_K);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + i * bytes;
            const llmb_block_q2_K *b2 = (const llmb_block_q2_K *)blk;
            const llmb_block_q3_K *b3 = (const llmb_block_q3_K *)blk;
            int8x16_t q[16];   // sub-block j
            int scale[16];
            for (int j = 0; j < 16; j++) {
                uint8x16_t v = k_low2(q3 ? b3->qs : b2->qs, j);
                if (q3) {   // less 4 where bit j / 2 of hmask[16 (j % 2) + l] is clear
                    const uint8x16_t set = vtstq_u8(vld1q_u8(b3->hmask + 16 * (j % 2)), vdupq_n_u8((uint8_t)(1u << (j / 2))));
                    v = vsubq_u8(v, vbicq_u8(vdupq_n_u8(4), set));
                }
                q[j] = vreinterpretq_s8_u8(v);
                scale[j] = q3 ? llmb_q3_K_scale(j, b3->scales) : b2->scales[j] & 0xF;
            }
            const float wd = llmb_fp16_to_fp32(q3 ? b3->d : b2->d), wdmin = q3 ? 0.0f : llmb_fp16_to_fp32(b2->dmin);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                int isum = 0, summs = 0;
                for (int j = 0; j < 16; j++) {
                    isum += scale[j] * vaddvq_s32(dot16(vdupq_n_s32(0), q[j], vld1q_s8(xb->qs + 16 * j)));
                    if (!q3) summs += xb->bsums[j] * (b2->scales[j] >> 4);
                }
                if (q3) {
                    acc[r][c] += (wd * xb->d) * isum;
                } else {
                    const float dall = xb->d * wd, dmin = xb->d * wdmin;
                    acc[r][c] += dall * isum - dmin * summs;
                }
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// IQ4_XS x Q8_K: the non-linear values by table lookup, per sub-block of 32 the exact integer sum and the
// reference's float step (dot_iq4_xs_ref): its bits
INLINE void iq4_xs_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                             float *y, int64_t ldy, const int NR, const int NC) {
    const int8x16_t values = vld1q_s8(llmb_kvalues_iq4nl);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        for (int r = 0; r < NR; r++) {
            const llmb_block_iq4_xs *b = (const llmb_block_iq4_xs *)(w + r * ws) + i;
            int8x16_t q[16];   // sub-block j: values 0..15 in q[2j], 16..31 in q[2j + 1]
            int scale[8];
            for (int j = 0; j < 8; j++) {
                const uint8x16_t v = vld1q_u8(b->qs + 16 * j);
                q[2 * j] = vqtbl1q_s8(values, vandq_u8(v, m4)), q[2 * j + 1] = vqtbl1q_s8(values, vshrq_n_u8(v, 4));
                scale[j] = llmb_iq4_xs_scale(j, b);
            }
            const float wd = llmb_fp16_to_fp32(b->d);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                const float d4d8 = wd * xb->d;
                for (int j = 0; j < 8; j++) {
                    const int8_t *q8 = xb->qs + 32 * j;
                    acc[r][c] += (d4d8 * scale[j]) * sum32(q[2 * j], q[2 * j + 1], q8);
                }
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
GEN(q4_0, legacy_body_neon, LLMB_TYPE_Q4_0)
GEN(q4_1, legacy_body_neon, LLMB_TYPE_Q4_1)
GEN(q5_0, legacy_body_neon, LLMB_TYPE_Q5_0)
GEN(q5_1, legacy_body_neon, LLMB_TYPE_Q5_1)
GEN(q8_0, legacy_body_neon, LLMB_TYPE_Q8_0)
GEN(iq4_nl, legacy_body_neon, LLMB_TYPE_IQ4_NL)
GEN(q2_K, q23_K_body_neon, LLMB_TYPE_Q2_K)
GEN(q3_K, q23_K_body_neon, LLMB_TYPE_Q3_K)
GEN(q4_K, q45_K_body_neon, LLMB_TYPE_Q4_K)
GEN(q5_K, q45_K_body_neon, LLMB_TYPE_Q5_K)
GEN(q6_K, q6_K_body_neon, LLMB_TYPE_Q6_K)
GEN(iq4_xs, iq4_xs_body_neon, LLMB_TYPE_IQ4_XS)
GEN(f16, f16_body_neon, LLMB_TYPE_F16)
#undef VD_T
#undef VD

void llmb_vd_neon_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_NEON) return;
#define SET(T, name) t[T].dot = name##_dot_neon, t[T].tile = name##_tile_neon
    SET(LLMB_TYPE_Q4_0, q4_0);
    SET(LLMB_TYPE_Q4_1, q4_1);
    SET(LLMB_TYPE_Q5_0, q5_0);
    SET(LLMB_TYPE_Q5_1, q5_1);
    SET(LLMB_TYPE_Q8_0, q8_0);
    SET(LLMB_TYPE_IQ4_NL, iq4_nl);
    SET(LLMB_TYPE_Q2_K, q2_K);
    SET(LLMB_TYPE_Q3_K, q3_K);
    SET(LLMB_TYPE_Q4_K, q4_K);
    SET(LLMB_TYPE_Q5_K, q5_K);
    SET(LLMB_TYPE_Q6_K, q6_K);
    SET(LLMB_TYPE_IQ4_XS, iq4_xs);
    SET(LLMB_TYPE_F16, f16);
#undef SET
}
#else
void llmb_vd_neon_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif // AArch64
