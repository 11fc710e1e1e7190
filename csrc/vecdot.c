// vecdot.c — scalar reference dot products between weight rows and quantized activation rows
// (ggml's ggml_vec_dot_*_q8_* / *_generic reference loops, operation for operation), the Q8_1
// activation quantizer, the per-SIMD-level kernel tables and their dispatch, a reference tile
// kernel, and a small OpenMP matrix product over row tiles. SIMD kernels live in vecdot_x86.c, vecdot_il8.c, vecdot_avx512_*.c, vecdot_bf16.c and vecdot_neon.c (vecdot_impl.h).
// Tested by csrc/tests/test_vecdot.c (every kernel at every level against these references,
// tiles against single dots bit for bit) and tests/test_vecdot.py (against NumPy).
#include <assert.h>
#include <float.h>
#include <math.h>
#include <pthread.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

#include "vecdot.h"
#include "vecdot_layout.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define F16(h) llmb_fp16_to_fp32(h)

// ---- float weights x float activations (ggml_vec_dot_f32/f16/bf16: float products, double sum) ----

static void dot_f32_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const float *w = vw, *x = vx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(w[i] * x[i]);
    *s = (float)sum;
}

static void dot_f16_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_half *w = vw;
    const float *x = vx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(F16(w[i]) * x[i]);
    *s = (float)sum;
}

static void dot_bf16_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const uint16_t *w = vw;
    const float *x = vx;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (double)(llmb_bf16_to_fp32(w[i]) * x[i]);
    *s = (float)sum;
}

// ---- BF16 pairs (LLMB_TYPE_BF16_DP, vecdot.h: the operation sequence of vdpbf16ps) ----

static float bf16_daz(uint16_t h) {   // denormal inputs read as zero
    return llmb_bf16_to_fp32((h & 0x7f80u) ? h : (uint16_t)(h & 0x8000u));
}

// d (an exact sum of a float and a product of two BF16 values) rounded once to float, a denormal result
// flushed to zero of its sign. The double sum is exact where a float midpoint is at stake (24 + 16 bits),
// so rounding it to float is the single rounding of the instruction.
static float round_ftz(double d) {
    const float f = (float)d;
    return fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f;
}

static float hsum16_ref(const float *l) {   // the order of the kernels' hsum16_ps
    float a[8], b[4], c[2];
    for (int j = 0; j < 8; j++) a[j] = l[j] + l[j + 8];
    for (int j = 0; j < 4; j++) b[j] = a[j] + a[j + 4];
    for (int j = 0; j < 2; j++) c[j] = b[j] + b[j + 2];
    return c[0] + c[1];
}

static void dot_bf16dp_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const uint16_t *w = vw, *x = vx;
    float l[16] = {0};
    for (int64_t i = 0; i < n; i += 32)
        for (int k = 0; k < 16; k++) {
            const int64_t e = i + 2 * k;
            l[k] = round_ftz((double)l[k] + (double)bf16_daz(w[e + 1]) * bf16_daz(x[e + 1]));   // never denormal
            l[k] = round_ftz((double)l[k] + (double)bf16_daz(w[e]) * bf16_daz(x[e]));
        }
    *s = hsum16_ref(l);
}

// x rounded to BF16 (llmb_fp32_to_bf16's bits: nearest even, NaN made quiet) in a form the compiler
// vectorizes: the activations of every BF16 pair product, once per token and input
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void round_bf16_row(const float *x, uint16_t *o, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, q = (u >> 16) | 64u;
        o[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? q : r);
    }
}

int llmb_vec_dot_to_bf16(int wtype, int64_t n, const void *w, size_t row_bytes, int64_t nrows, uint16_t *dst) {
    if (n % 32 || (wtype != LLMB_TYPE_F32 && wtype != LLMB_TYPE_F16 && wtype != LLMB_TYPE_BF16)) return 0;
#pragma omp parallel for schedule(static) if (nrows * n >= (1 << 20))
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        uint16_t *o = dst + r * n;
        for (int64_t i = 0; i < n; i++) {
            if (wtype == LLMB_TYPE_BF16) o[i] = ((const uint16_t *)row)[i];
            else if (wtype == LLMB_TYPE_F16) o[i] = llmb_fp32_to_bf16(F16(((const llmb_half *)row)[i]));
            else o[i] = llmb_fp32_to_bf16(((const float *)row)[i]);
        }
    }
    return 1;
}

// ---- legacy formats x Q8_0 / Q8_1 ----

static void dot_q4_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q4_0 *w = vw;
    const llmb_block_q8_0 *x = vx;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < LLMB_QK / 2; j++) {
            sumi0 += ((w[ib].qs[j] & 0x0F) - 8) * x[ib].qs[j];
            sumi1 += ((w[ib].qs[j] >> 4) - 8) * x[ib].qs[j + LLMB_QK / 2];
        }
        sumf += (sumi0 + sumi1) * F16(w[ib].d) * F16(x[ib].d);
    }
    *s = sumf;
}

static void dot_q4_1_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q4_1 *w = vw;
    const llmb_block_q8_1 *x = vx;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < LLMB_QK / 2; j++) {
            sumi0 += (w[ib].qs[j] & 0x0F) * x[ib].qs[j];
            sumi1 += (w[ib].qs[j] >> 4) * x[ib].qs[j + LLMB_QK / 2];
        }
        sumf += (F16(w[ib].d) * x[ib].d) * (sumi0 + sumi1) + F16(w[ib].m) * x[ib].s;
    }
    *s = sumf;
}

// the 32 five-bit values of a Q5_0/Q5_1 block (0..31)
static void unpack_q5(const uint8_t qs[LLMB_QK / 2], const uint8_t qh_bytes[4], int v[LLMB_QK]) {
    uint32_t qh;
    memcpy(&qh, qh_bytes, 4);
    for (int j = 0; j < LLMB_QK / 2; j++) {
        v[j] = (qs[j] & 0x0F) | (((qh >> j) & 1) << 4);
        v[j + LLMB_QK / 2] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    }
}

static void dot_q5_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q5_0 *w = vw;
    const llmb_block_q8_0 *x = vx;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        int v[LLMB_QK], sumi0 = 0, sumi1 = 0;
        unpack_q5(w[ib].qs, w[ib].qh, v);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            sumi0 += (v[j] - 16) * x[ib].qs[j];
            sumi1 += (v[j + LLMB_QK / 2] - 16) * x[ib].qs[j + LLMB_QK / 2];
        }
        sumf += (F16(w[ib].d) * F16(x[ib].d)) * (sumi0 + sumi1);
    }
    *s = sumf;
}

static void dot_q5_1_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q5_1 *w = vw;
    const llmb_block_q8_1 *x = vx;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        int v[LLMB_QK], sumi0 = 0, sumi1 = 0;
        unpack_q5(w[ib].qs, w[ib].qh, v);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            sumi0 += v[j] * x[ib].qs[j];
            sumi1 += v[j + LLMB_QK / 2] * x[ib].qs[j + LLMB_QK / 2];
        }
        sumf += (F16(w[ib].d) * x[ib].d) * (sumi0 + sumi1) + F16(w[ib].m) * x[ib].s;
    }
    *s = sumf;
}

static void dot_q8_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q8_0 *w = vw, *x = vx;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        int sumi = 0;
        for (int j = 0; j < LLMB_QK; j++) sumi += w[ib].qs[j] * x[ib].qs[j];
        sumf += sumi * (F16(w[ib].d) * F16(x[ib].d));
    }
    *s = sumf;
}

// ---- K formats (and IQ4_NL / IQ4_XS, below) x Q8_K ----

// The shared tail of ggml's K reference loops: a[256] are the weight's integer values, `scale(j)`
// the integer scale of 16-element group j; eight int32 lanes per super-block, then 8 float sums.
static void k_accumulate(const int8_t a[LLMB_QK_K], const int scales16[LLMB_QK_K / 16], const int8_t *q8, float d,
                         float sums[8]) {
    int32_t aux32[8] = {0};
    for (int j = 0; j < LLMB_QK_K / 16; j++) {
        for (int half = 0; half < 2; half++, q8 += 8, a += 8) {
            int16_t aux16[8];
            for (int l = 0; l < 8; l++) aux16[l] = (int16_t)(q8[l] * a[l]);
            for (int l = 0; l < 8; l++) aux32[l] += scales16[j] * aux16[l];
        }
    }
    for (int l = 0; l < 8; l++) sums[l] += d * aux32[l];
}

static float sum8(const float sums[8], float sumf) {
    for (int l = 0; l < 8; l++) sumf += sums[l];
    return sumf;
}

// Q4_K and Q5_K: integer values, sub-block scales (per 16 elements) and the bsums-times-mins term
static void k45_dot(const llmb_block_q8_K *y, const uint8_t *scales12, const int8_t a[LLMB_QK_K], float d, float dmin,
                    float sums[8], float *sumf) {
    int scales16[16], sumi = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        llmb_get_scale_min_k4(j, scales12, &sc, &m);
        scales16[2 * j] = scales16[2 * j + 1] = sc;
        sumi += (y->bsums[2 * j] + y->bsums[2 * j + 1]) * m;
    }
    k_accumulate(a, scales16, y->qs, d * y->d, sums);
    *sumf -= dmin * y->d * sumi;
}

static void dot_q4_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q4_K *w = vw;
    const llmb_block_q8_K *x = vx;
    float sums[8] = {0}, sumf = 0;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        int8_t a[LLMB_QK_K];
        for (int j = 0; j < LLMB_QK_K / 64; j++)
            for (int l = 0; l < 32; l++) {
                a[64 * j + l] = (int8_t)(w[i].qs[32 * j + l] & 0xF);
                a[64 * j + 32 + l] = (int8_t)(w[i].qs[32 * j + l] >> 4);
            }
        k45_dot(&x[i], w[i].scales, a, F16(w[i].d), F16(w[i].dmin), sums, &sumf);
    }
    *s = sum8(sums, sumf);
}

static void dot_q5_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q5_K *w = vw;
    const llmb_block_q8_K *x = vx;
    float sums[8] = {0}, sumf = 0;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        int8_t a[LLMB_QK_K];
        for (int j = 0; j < LLMB_QK_K / 64; j++)
            for (int l = 0; l < 32; l++) {
                const uint8_t q = w[i].qs[32 * j + l], h = w[i].qh[l];
                a[64 * j + l] = (int8_t)((q & 0xF) + (((h >> (2 * j)) & 1) << 4));
                a[64 * j + 32 + l] = (int8_t)((q >> 4) + (((h >> (2 * j + 1)) & 1) << 4));
            }
        k45_dot(&x[i], w[i].scales, a, F16(w[i].d), F16(w[i].dmin), sums, &sumf);
    }
    *s = sum8(sums, sumf);
}

static void dot_q6_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q6_K *w = vw;
    const llmb_block_q8_K *x = vx;
    float sums[8] = {0};
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        int8_t a[LLMB_QK_K];
        int scales16[16];
        for (int half = 0; half < 2; half++) {
            const uint8_t *ql = w[i].ql + 64 * half, *qh = w[i].qh + 32 * half;
            int8_t *o = a + 128 * half;
            for (int l = 0; l < 32; l++) {
                o[l + 0] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                o[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                o[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        for (int j = 0; j < 16; j++) scales16[j] = w[i].scales[j];
        k_accumulate(a, scales16, x[i].qs, F16(w[i].d) * x[i].d, sums);
    }
    *s = sum8(sums, 0.0f);
}

// Q2_K: per 16 elements an exact integer sum weighted by the 4-bit scale, the mins against bsums, and
// per super-block sumf += dall*isum - dmin*summs (ggml_vec_dot_q2_K_q8_K_generic)
static void dot_q2_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q2_K *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const uint8_t *sc = w[i].scales;
        int summs = 0, isum = 0;
        for (int j = 0; j < 16; j++) summs += x[i].bsums[j] * (sc[j] >> 4);
        const float dall = x[i].d * F16(w[i].d), dmin = x[i].d * F16(w[i].dmin);
        for (int j = 0; j < 16; j++) {   // sub-block j: elements 16 j.., bits 2 (j / 2 % 4) of qs[32 (j / 8) + 16 (j % 2) + l]
            const uint8_t *q2 = w[i].qs + 32 * (j / 8) + 16 * (j % 2);
            const int8_t *q8 = x[i].qs + 16 * j;
            int isuml = 0;
            for (int l = 0; l < 16; l++) isuml += q8[l] * ((q2[l] >> (2 * (j / 2 % 4))) & 3);
            isum += (sc[j] & 0xF) * isuml;
        }
        sumf += dall * isum - dmin * summs;
    }
    *s = sumf;
}

// Q3_K: values q - 4*!h in -4..3 through k_accumulate with the signed 6-bit scales
static void dot_q3_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q3_K *w = vw;
    const llmb_block_q8_K *x = vx;
    float sums[8] = {0};
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        int8_t a[LLMB_QK_K];
        int scales16[16];
        for (int e = 0; e < LLMB_QK_K; e++) {
            const int lo = (w[i].qs[32 * (e / 128) + e % 32] >> (2 * (e / 32 % 4))) & 3;
            a[e] = (int8_t)(lo - ((w[i].hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4));
        }
        for (int j = 0; j < 16; j++) scales16[j] = llmb_q3_K_scale(j, w[i].scales);
        k_accumulate(a, scales16, x[i].qs, F16(w[i].d) * x[i].d, sums);
    }
    *s = sum8(sums, 0.0f);
}

// IQ4_NL x Q8_0 (ggml_vec_dot_iq4_nl_q8_0_generic): per block sumf += (d_x d_w) * sumi
static void dot_iq4_nl_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq4_nl *w = vw;
    const llmb_block_q8_0 *x = vx;
    float sumf = 0;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        const float d = F16(x[ib].d) * F16(w[ib].d);
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < LLMB_QK / 2; j++) {
            sumi1 += x[ib].qs[j] * llmb_kvalues_iq4nl[w[ib].qs[j] & 0xF];
            sumi2 += x[ib].qs[j + LLMB_QK / 2] * llmb_kvalues_iq4nl[w[ib].qs[j] >> 4];
        }
        sumf += d * (sumi1 + sumi2);
    }
    *s = sumf;
}

// IQ4_XS x Q8_K (ggml_vec_dot_iq4_xs_q8_K_generic): per sub-block of 32 sumf += (d_w d_x (ls - 32)) * sumi
static void dot_iq4_xs_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq4_xs *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d4d8 = F16(w[i].d) * x[i].d;
        for (int j = 0; j < LLMB_QK_K / 32; j++) {
            const uint8_t *qs = w[i].qs + 16 * j;
            const int8_t *q8 = x[i].qs + 32 * j;
            const float dl = d4d8 * llmb_iq4_xs_scale(j, &w[i]);
            int sumi1 = 0, sumi2 = 0;
            for (int l = 0; l < 16; l++) {
                sumi1 += q8[l] * llmb_kvalues_iq4nl[qs[l] & 0xF];
                sumi2 += q8[l + 16] * llmb_kvalues_iq4nl[qs[l] >> 4];
            }
            sumf += dl * (sumi1 + sumi2);
        }
    }
    *s = sumf;
}

// Q8_K weights (ggml has no dot for them; the Q8_0 loop per super-block)
static void dot_q8_K_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q8_K *w = vw, *x = vx;
    float sumf = 0;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        int sumi = 0;
        for (int j = 0; j < LLMB_QK_K; j++) sumi += w[i].qs[j] * x[i].qs[j];
        sumf += sumi * (w[i].d * x[i].d);
    }
    *s = sumf;
}

// ---- activation quantizers ----

// ggml's original quantize_row_q8_1_reference: d = max|x|/127, q = round(x/d), s = d*sum(q)
static void quant_q8_1_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q8_1 *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++, x += LLMB_QK) {
        float amax = 0.0f;
        for (int j = 0; j < LLMB_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127, id = d ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < LLMB_QK; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].d = d;
        y[i].s = sum * d;
    }
}

// ---- dispatch ----

static void tile_ref(llmb_vec_dot_fn dot, int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,
                     float *y, int64_t ldy) {
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) dot(n, &y[c * ldy + r], (const char *)w + r * ws, (const char *)x + c * xs);
}

#define REF_TILE(name)                                                                                              \
    static void tile_##name##_ref(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,   \
                                  float *y, int64_t ldy) {                                                          \
        tile_ref(dot_##name##_ref, n, w, ws, nr, x, xs, nc, y, ldy);                                                \
    }
REF_TILE(f32) REF_TILE(f16) REF_TILE(bf16) REF_TILE(q4_0) REF_TILE(q4_1) REF_TILE(q5_0) REF_TILE(q5_1)
REF_TILE(q8_0) REF_TILE(q4_K) REF_TILE(q5_K) REF_TILE(q6_K) REF_TILE(q8_K) REF_TILE(bf16dp)
REF_TILE(q2_K) REF_TILE(q3_K) REF_TILE(iq4_nl) REF_TILE(iq4_xs)
// the reference dots of quants_tq.c (TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0)
#define REF_TILE_EXT(name)                                                                                          \
    static void tile_##name##_ref(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,   \
                                  float *y, int64_t ldy) {                                                          \
        tile_ref(llmb_dot_##name##_ref, n, w, ws, nr, x, xs, nc, y, ldy);                                           \
    }
REF_TILE_EXT(tq1_0) REF_TILE_EXT(tq2_0) REF_TILE_EXT(mxfp4) REF_TILE_EXT(nvfp4) REF_TILE_EXT(q1_0)
// and of quants_iq.c (the I-quants)
REF_TILE_EXT(iq2_xxs) REF_TILE_EXT(iq2_xs) REF_TILE_EXT(iq2_s) REF_TILE_EXT(iq3_xxs) REF_TILE_EXT(iq3_s)
REF_TILE_EXT(iq1_s) REF_TILE_EXT(iq1_m)
#define REF_EXT(name) {.dot = llmb_dot_##name##_ref, .tile = tile_##name##_ref}

#define REF(name) {.dot = dot_##name##_ref, .tile = tile_##name##_ref}
static const llmb_vec_dot_kernels ref_table[LLMB_VEC_DOT_TYPES] = {
    [LLMB_TYPE_F32] = REF(f32),   [LLMB_TYPE_F16] = REF(f16),   [LLMB_TYPE_BF16] = REF(bf16),
    [LLMB_TYPE_Q4_0] = REF(q4_0), [LLMB_TYPE_Q4_1] = REF(q4_1), [LLMB_TYPE_Q5_0] = REF(q5_0),
    [LLMB_TYPE_Q5_1] = REF(q5_1), [LLMB_TYPE_Q8_0] = REF(q8_0), [LLMB_TYPE_Q4_K] = REF(q4_K),
    [LLMB_TYPE_Q5_K] = REF(q5_K), [LLMB_TYPE_Q6_K] = REF(q6_K), [LLMB_TYPE_Q8_K] = REF(q8_K),
    [LLMB_TYPE_Q2_K] = REF(q2_K), [LLMB_TYPE_Q3_K] = REF(q3_K), [LLMB_TYPE_IQ4_NL] = REF(iq4_nl),
    [LLMB_TYPE_IQ4_XS] = REF(iq4_xs),
    [LLMB_TYPE_TQ1_0] = REF_EXT(tq1_0),
    [LLMB_TYPE_TQ2_0] = REF_EXT(tq2_0),
    [LLMB_TYPE_MXFP4] = REF_EXT(mxfp4),
    [LLMB_TYPE_NVFP4] = REF_EXT(nvfp4),
    [LLMB_TYPE_Q1_0] = REF_EXT(q1_0),
    [LLMB_TYPE_IQ2_XXS] = REF_EXT(iq2_xxs), [LLMB_TYPE_IQ2_XS] = REF_EXT(iq2_xs), [LLMB_TYPE_IQ2_S] = REF_EXT(iq2_s),
    [LLMB_TYPE_IQ3_XXS] = REF_EXT(iq3_xxs), [LLMB_TYPE_IQ3_S] = REF_EXT(iq3_s), [LLMB_TYPE_IQ1_S] = REF_EXT(iq1_s),
    [LLMB_TYPE_IQ1_M] = REF_EXT(iq1_m),
    [LLMB_TYPE_BF16_DP] = REF(bf16dp),
};

static llmb_vec_dot_kernels tables[LLMB_SIMD_AVX512 + 1][LLMB_VEC_DOT_TYPES];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int lvl = 0; lvl <= LLMB_SIMD_AVX512; lvl++) {
        memcpy(tables[lvl], ref_table, sizeof ref_table);
        if (lvl == LLMB_SIMD_AVX512) llmb_vec_dot_simd_install(LLMB_SIMD_AVX2, tables[lvl]);
        llmb_vec_dot_simd_install((llmb_simd_level)lvl, tables[lvl]);
    }
}

static const llmb_vec_dot_kernels *kernels(int wtype) {
    if (wtype < 0 || wtype >= LLMB_VEC_DOT_TYPES || !ref_table[wtype].dot) return NULL;
    pthread_once(&tables_once, build_tables);
    return &tables[llmb_simd_active()][wtype];
}

int llmb_vec_dot_type(int wtype) {
    switch (wtype) {
    case LLMB_TYPE_F32: case LLMB_TYPE_F16: case LLMB_TYPE_BF16: return LLMB_TYPE_F32;
    case LLMB_TYPE_Q4_0: case LLMB_TYPE_Q5_0: case LLMB_TYPE_Q8_0: case LLMB_TYPE_IQ4_NL: return LLMB_TYPE_Q8_0;
    case LLMB_TYPE_MXFP4: case LLMB_TYPE_NVFP4: case LLMB_TYPE_Q1_0: return LLMB_TYPE_Q8_0;
    case LLMB_TYPE_TQ1_0: case LLMB_TYPE_TQ2_0: return LLMB_TYPE_Q8_K;
    case LLMB_TYPE_IQ2_XXS: case LLMB_TYPE_IQ2_XS: case LLMB_TYPE_IQ2_S: case LLMB_TYPE_IQ3_XXS: case LLMB_TYPE_IQ3_S:
    case LLMB_TYPE_IQ1_S: case LLMB_TYPE_IQ1_M: return LLMB_TYPE_Q8_K;
    case LLMB_TYPE_Q4_1: case LLMB_TYPE_Q5_1: return LLMB_TYPE_Q8_1;
    case LLMB_TYPE_Q2_K: case LLMB_TYPE_Q3_K: case LLMB_TYPE_Q4_K: case LLMB_TYPE_Q5_K: case LLMB_TYPE_Q6_K:
    case LLMB_TYPE_Q8_K: case LLMB_TYPE_IQ4_XS: return LLMB_TYPE_Q8_K;
    case LLMB_TYPE_BF16_DP: return LLMB_TYPE_BF16_DP;
    default: return -1;
    }
}

size_t llmb_vec_dot_row_bytes(int wtype, int64_t n) {
    const int vt = llmb_vec_dot_type(wtype);
    if (vt < 0 || n < 0) return 0;
    if (vt == LLMB_TYPE_BF16_DP) return n % 32 ? 0 : (size_t)n * 2;
    const llmb_type_traits *wt = llmb_type_traits_get(wtype), *xt = llmb_type_traits_get(vt);
    if (n % wt->blck_size || n % xt->blck_size) return 0;
    return (size_t)(n / xt->blck_size) * xt->type_size;
}

static void quantize_x(int wtype, const float *x, void *xq, int64_t n, int ref) {
    switch (llmb_vec_dot_type(wtype)) {
    case LLMB_TYPE_F32: memcpy(xq, x, (size_t)n * sizeof(float)); break;
    case LLMB_TYPE_Q8_1: {
        const llmb_vec_dot_kernels *k = ref ? NULL : kernels(wtype);
        (k && k->quant_x ? k->quant_x : quant_q8_1_ref)(x, xq, n);
        break;
    }
    case LLMB_TYPE_BF16_DP:   // llmb_fp32_to_bf16, and the same bits vectorized
        if (ref)
            for (int64_t i = 0; i < n; i++) ((uint16_t *)xq)[i] = llmb_fp32_to_bf16(x[i]);
        else
            round_bf16_row(x, xq, n);
        break;
    case LLMB_TYPE_Q8_0: case LLMB_TYPE_Q8_K: {
        const llmb_quant_traits *q = llmb_quant_traits_get(llmb_vec_dot_type(wtype));
        (ref ? q->from_float_ref : q->from_float)(x, xq, n);
        break;
    }
    default: assert(!"unsupported weight type"); break;
    }
}

void llmb_vec_dot_quantize_x(int wtype, const float *x, void *xq, int64_t n) { quantize_x(wtype, x, xq, n, 0); }
void llmb_vec_dot_quantize_x_ref(int wtype, const float *x, void *xq, int64_t n) { quantize_x(wtype, x, xq, n, 1); }

llmb_vec_dot_fn llmb_vec_dot_get(int wtype) {
    const llmb_vec_dot_kernels *k = kernels(wtype);
    return k ? k->dot : NULL;
}

llmb_vec_dot_fn llmb_vec_dot_ref(int wtype) {
    return wtype >= 0 && wtype < LLMB_VEC_DOT_TYPES ? ref_table[wtype].dot : NULL;
}

void llmb_gemm_tile(int wtype, int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                    int nc, float *y, int64_t ldy) {
    const llmb_vec_dot_kernels *k = kernels(wtype);
    assert(k && nr >= 1 && nr <= LLMB_TILE_MAX_R && nc >= 1 && nc <= LLMB_TILE_MAX_C);
    k->tile(n, w, w_stride, nr, x, x_stride, nc, y, ldy);
}

// ---- row-interleaved weights ----

int llmb_vec_dot_interleave(int wtype) {
    const llmb_vec_dot_kernels *k = kernels(wtype);
    return k && k->il ? k->il_r : 0;
}

// The kernel for weights interleaved in groups of il rows: the active level's (k), or where it has none (the
// level was lowered after the weights were repacked) the best level's this CPU has (the same bits at
// every x86 level); NULL if neither has one
static llmb_gemm_il_fn il_kernel(const llmb_vec_dot_kernels *k, int wtype, int il) {
    if (!k) return NULL;
    if (k->il && k->il_r == il) return k->il;
    k = &tables[llmb_simd_detected()][wtype];
    return k->il && k->il_r == il ? k->il : NULL;
}

// Interleaved Q6_K stores each 6-bit value whole in a byte, so the kernel needs one AND where ql / qh
// need up to five operations (llama.cpp's layout splits every value into a nibble and 2 bits), and in
// the order the kernel reads them (one forward stream; the hardware prefetchers lose track of ql / qh's
// three interleaved streams). For l < 32 in half h (0, 1) of the block, t = l / 4: word 24 h + 3 t,
// byte l % 4, holds the value 128 h + l and bits 0-1 of the value 128 h + 96 + l (in bits 6-7); word
// 24 h + 3 t + 1 the value 128 h + 32 + l and bits 2-3; word 24 h + 3 t + 2 the value 128 h + 64 + l and
// bits 4-5. The scales and d stay where they are. from and to must not overlap.
static void q6_K_recode(const uint8_t *from, uint8_t *to, int pack) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const int a = 64 * h + l, b = a + 32, c = 128 + 32 * h + l;        // ql / qh
            const int na = 4 * (24 * h + 3 * (l / 4)) + l % 4, nb = na + 4, nc = na + 8;   // recoded
            if (pack) {   // from: ql / qh as in llmb_block_q6_K
                const int v0 = (from[a] & 0xF) | (from[c] & 3) << 4, v1 = (from[b] & 0xF) | (from[c] >> 2 & 3) << 4;
                const int v2 = (from[a] >> 4) | (from[c] >> 4 & 3) << 4, v3 = (from[b] >> 4) | (from[c] >> 6) << 4;
                to[na] = (uint8_t)(v0 | (v3 & 3) << 6), to[nb] = (uint8_t)(v1 | (v3 >> 2 & 3) << 6);
                to[nc] = (uint8_t)(v2 | (v3 >> 4) << 6);
            } else {
                const int v0 = from[na] & 0x3F, v1 = from[nb] & 0x3F, v2 = from[nc] & 0x3F;
                const int v3 = from[na] >> 6 | (from[nb] >> 6) << 2 | (from[nc] >> 6) << 4;
                to[a] = (uint8_t)((v0 & 0xF) | (v2 & 0xF) << 4), to[b] = (uint8_t)((v1 & 0xF) | (v3 & 0xF) << 4);
                to[c] = (uint8_t)(v0 >> 4 | (v1 >> 4) << 2 | (v2 >> 4) << 4 | (v3 >> 4) << 6);
            }
        }
}

// Interleaved Q3_K stores each value whole in 3 bits, u = q + 4 h (0..7, the kernel's operand: q its 2 bits of
// qs, h its bit of hmask), in the order the kernel reads them: 3 bit fields where Q3_K's split every value over
// two arrays, which cost the kernel 5 operations a vector of values (2.4 now). Let u(t, m) be the value
// 128 h + 32 m + 4 t + l of half h (0, 1) of the block, l < 4. For t = 2 p, p < 4, the three words 12 h + 3 p,
// + 1, + 2 hold in their byte l A = u(t, 0) | u(t, 1) << 3 | (u(t, 2) & 3) << 6, B the same of t + 1, and
// C = u(t, 3) | u(t + 1, 3) << 3 | (u(t, 2) >> 2) << 6 | (u(t + 1, 2) >> 2) << 7: 96 bytes for hmask and qs's
// 96. The scales and d stay where they are. from and to must not overlap.
static void q3_K_recode(const uint8_t *from, uint8_t *to, int pack) {
    const int qs = offsetof(llmb_block_q3_K, qs);
    if (!pack) memset(to, 0, (size_t)qs + sizeof ((llmb_block_q3_K *)0)->qs);   // hmask and qs, set bit by bit
    for (int h = 0; h < 2; h++)
        for (int p = 0; p < 4; p++)
            for (int l = 0; l < 4; l++) {
                const int a = 4 * (12 * h + 3 * p) + l, b = a + 4, c = a + 8;   // recoded
                int u[2][4];
                if (!pack) {
                    u[0][0] = from[a] & 7, u[0][1] = from[a] >> 3 & 7, u[0][2] = from[a] >> 6 | (from[c] >> 6 & 1) << 2;
                    u[1][0] = from[b] & 7, u[1][1] = from[b] >> 3 & 7, u[1][2] = from[b] >> 6 | (from[c] >> 7) << 2;
                    u[0][3] = from[c] & 7, u[1][3] = from[c] >> 3 & 7;
                }
                for (int e = 0; e < 2; e++)
                    for (int m = 0; m < 4; m++) {
                        const int L = 4 * (2 * p + e) + l;   // byte L of the half's qs, of hmask (bit 4 h + m)
                        if (pack) u[e][m] = (from[qs + 32 * h + L] >> (2 * m) & 3) | (from[L] >> (4 * h + m) & 1) << 2;
                        else {
                            to[qs + 32 * h + L] |= (uint8_t)((u[e][m] & 3) << (2 * m));
                            to[L] |= (uint8_t)((u[e][m] >> 2) << (4 * h + m));
                        }
                    }
                if (pack) {
                    to[a] = (uint8_t)(u[0][0] | u[0][1] << 3 | (u[0][2] & 3) << 6);
                    to[b] = (uint8_t)(u[1][0] | u[1][1] << 3 | (u[1][2] & 3) << 6);
                    to[c] = (uint8_t)(u[0][3] | u[1][3] << 3 | (u[0][2] >> 2) << 6 | (u[1][2] >> 2) << 7);
                }
            }
}

// Interleaved Q8_0 stores a block as its 32 values plus 128 (unsigned, vpdpbusd's first operand: the
// kernel starts each block's sum from -128 sum x), then d: 8 whole words of values, d the 2-byte tail.
static void q8_0_recode(const uint8_t *from, uint8_t *to, int pack) {
    if (pack) {
        const llmb_block_q8_0 *b = (const llmb_block_q8_0 *)from;
        llmb_rc_q8_0 *o = (llmb_rc_q8_0 *)to;
        for (int j = 0; j < LLMB_QK; j++) o->u[j] = (uint8_t)b->qs[j] ^ 0x80;
        o->d = b->d;
    } else {
        const llmb_rc_q8_0 *b = (const llmb_rc_q8_0 *)from;
        llmb_block_q8_0 *o = (llmb_block_q8_0 *)to;
        for (int j = 0; j < LLMB_QK; j++) o->qs[j] = (int8_t)(b->u[j] ^ 0x80);
        o->d = b->d;
    }
}

// The legacy types' interleaved blocks (vecdot_il8.c): whole words of values first and d, where alone, as
// the tail (Q4_0, IQ4_NL: qs, d; Q5_0: qh', qs, d; Q4_1, Q5_1 keep their order), and Q5_0 / Q5_1's fifth bits as
// qh': bit 8 b + k the fifth bit of value 4 k + b, bit 8 b + 4 + k that of value 16 + 4 k + b (b, k < 4),
// so that each word k of qs finds its 8 bits in place after one shift.
static uint32_t qh_recode(uint32_t qh, int pack) {
    uint32_t out = 0;
    for (int b = 0; b < 4; b++)
        for (int k = 0; k < 4; k++)
            for (int hi = 0; hi < 2; hi++) {
                const int plain = 16 * hi + 4 * k + b, coded = 8 * b + 4 * hi + k;
                const int from = pack ? plain : coded, to = pack ? coded : plain;
                out |= ((qh >> from) & 1u) << to;
            }
    return out;
}

static void legacy_recode(int wtype, const uint8_t *from, uint8_t *to, int pack) {
    uint32_t qh;
    switch (wtype) {
    case LLMB_TYPE_Q4_0: case LLMB_TYPE_IQ4_NL: {   // d qs <-> qs d (the same bytes as llmb_block_iq4_nl)
        llmb_block_q4_0 *p = (llmb_block_q4_0 *)(pack ? from : to);
        llmb_rc_q4_0 *r = (llmb_rc_q4_0 *)(pack ? to : from);
        if (pack) memcpy(r->qs, p->qs, sizeof r->qs), r->d = p->d;
        else memcpy(p->qs, r->qs, sizeof p->qs), p->d = r->d;
        break;
    }
    case LLMB_TYPE_Q5_0: {   // d qh qs <-> qh' qs d
        llmb_block_q5_0 *p = (llmb_block_q5_0 *)(pack ? from : to);
        llmb_rc_q5_0 *r = (llmb_rc_q5_0 *)(pack ? to : from);
        memcpy(&qh, pack ? p->qh : r->qh, 4);
        qh = qh_recode(qh, pack);
        if (pack) memcpy(r->qh, &qh, 4), memcpy(r->qs, p->qs, sizeof r->qs), r->d = p->d;
        else memcpy(p->qh, &qh, 4), memcpy(p->qs, r->qs, sizeof p->qs), p->d = r->d;
        break;
    }
    default: {   // Q5_1: d m qh qs <-> d m qh' qs
        memcpy(to, from, sizeof(llmb_block_q5_1));
        llmb_rc_q5_1 *r = (llmb_rc_q5_1 *)to;
        memcpy(&qh, r->qh, 4);
        qh = qh_recode(qh, pack);
        memcpy(r->qh, &qh, 4);
        break;
    }
    }
}

// Interleaved Q5_K keeps its plain block but for qh, which becomes qh' as the legacy types' (qh_recode) for each
// 4 words of qs: for part j (values 64 j .., words 8 j .. 8 j + 7 of qs) and h = 0, 1, bit 8 b + k of qh' word
// 2 j + h is the fifth bit of the low nibble of qs byte 32 j + 16 h + 4 k + b (value 64 j + 16 h + 4 k + b: bit
// 2 j of qh[16 h + 4 k + b]), bit 8 b + 4 + k that of its high nibble (value 64 j + 32 + 16 h + 4 k + b: bit
// 2 j + 1), for b, k < 4. Word 8 j + 4 h + k of qs then finds its 8 fifth bits in place (bit 4 of each byte)
// after one shift of that qh' word: left by 4 - k for the low nibbles, right by k for the high ones (vecdot_il8.c).
// Still 8 words: 5.5 bits a value, as the plain block. from and to must not overlap.
static void q5_K_recode(const uint8_t *from, uint8_t *to, int pack) {
    const size_t qh = offsetof(llmb_block_q5_K, qh);
    memcpy(to, from, sizeof(llmb_block_q5_K));
    memset(to + qh, 0, LLMB_QK_K / 8);
    for (int j = 0; j < 4; j++)
        for (int h = 0; h < 2; h++)
            for (int b = 0; b < 4; b++)
                for (int k = 0; k < 4; k++)
                    for (int hi = 0; hi < 2; hi++) {
                        const int plain_byte = 16 * h + 4 * k + b, plain_bit = 2 * j + hi;
                        const int coded_byte = 4 * (2 * j + h) + b, coded_bit = 4 * hi + k;
                        const int fb = pack ? plain_byte : coded_byte, fbit = pack ? plain_bit : coded_bit;
                        const int tb = pack ? coded_byte : plain_byte, tbit = pack ? coded_bit : plain_bit;
                        to[qh + tb] |= (uint8_t)(((from[qh + fb] >> fbit) & 1) << tbit);
                    }
}

// whether blocks of wtype are recoded before interleaving, and the recoding (pack) or its inverse
static int recoded(int wtype) {
    return wtype == LLMB_TYPE_Q6_K || wtype == LLMB_TYPE_Q8_0 || wtype == LLMB_TYPE_Q4_0 || wtype == LLMB_TYPE_Q5_0 ||
           wtype == LLMB_TYPE_Q5_1 || wtype == LLMB_TYPE_IQ4_NL || wtype == LLMB_TYPE_Q3_K || wtype == LLMB_TYPE_Q5_K;
}
static void recode(int wtype, const uint8_t *from, uint8_t *to, int pack) {
    if (wtype == LLMB_TYPE_Q6_K) q6_K_recode(from, to, pack);
    else if (wtype == LLMB_TYPE_Q3_K) q3_K_recode(from, to, pack);
    else if (wtype == LLMB_TYPE_Q5_K) q5_K_recode(from, to, pack);
    else if (wtype == LLMB_TYPE_Q8_0) q8_0_recode(from, to, pack);
    else legacy_recode(wtype, from, to, pack);
}

// Group g of the interleaved layout (G rows, nb blocks each): for block i, the G x words matrix of the
// block's whole 32-bit words in the G rows, transposed (word k of row r at word k * G + r); after all nb
// of them, the blocks' trailing type_size % 4 bytes (the d of Q3_K, Q6_K, Q8_0), block after block, row
// after row, or where llmb_il_inline_tail (Q4_0, Q5_0, IQ4_NL in groups of 8, Q8_0 and Q6_K of 16) each
// block's G inline after its words (Q6_K's after its own and its twin's: llmb_il_words_at, llmb_il_tail_at).
// Q6_K's, Q3_K's, Q5_K's, Q8_0's, Q4_0's, IQ4_NL's and Q5_0 / Q5_1's blocks are recoded first (q6_K_recode,
// q3_K_recode, q5_K_recode, q8_0_recode, legacy_recode).
static void interleave(int wtype, int64_t n, const uint8_t *src, int64_t nrows, int G, uint8_t *dst, int pack) {
    const llmb_type_traits *tt = llmb_type_traits_get(wtype);
    assert(tt && n % tt->blck_size == 0 && G > 0 && nrows % G == 0);
    const int64_t nb = n / tt->blck_size, words = tt->type_size / 4, tail = tt->type_size % 4;
    const size_t row_bytes = (size_t)nb * (size_t)tt->type_size, wbytes = (size_t)words * 4 * G, bs = tt->type_size;
    const int rec = recoded(wtype), inl = tail ? llmb_il_inline_tail(wtype, G) : 0;
    const size_t tbytes = (size_t)G * (size_t)tail;   // a block's tails in a group
    assert(!rec || bs <= sizeof(llmb_block_q6_K));   // the largest recoded block (blk below)
#pragma omp parallel for schedule(static) if (nrows * nb >= 4096)
    for (int64_t g = 0; g < nrows / G; g++) {
        uint8_t *grp = (pack ? dst : (uint8_t *)src) + (size_t)g * G * row_bytes;
        for (int64_t i = 0; i < nb; i++) {
            uint8_t *bw = grp + llmb_il_words_at(i, wbytes, tbytes, inl), *bt = grp + llmb_il_tail_at(nb, i, wbytes, tbytes, inl);
            for (int r = 0; r < G; r++) {
                uint8_t *row = (pack ? (uint8_t *)src : dst) + ((size_t)g * G + r) * row_bytes + (size_t)i * bs;
                uint8_t blk[sizeof(llmb_block_q6_K)], *plain = rec ? blk : row;   // the recoded block in blk
                if (rec && pack) {   // (bytes recode leaves alone stay as they are: Q6_K's scales, d)
                    memcpy(blk, row, bs);
                    recode(wtype, row, blk, 1);
                }
                for (int64_t k = 0; k < words; k++) {
                    uint8_t *il = bw + ((size_t)k * G + r) * 4, *p = plain + (size_t)k * 4;
                    memcpy(pack ? il : p, pack ? p : il, 4);
                }
                if (tail) {
                    uint8_t *il = bt + (size_t)r * tail,
                            *p = plain + words * 4;
                    memcpy(pack ? il : p, pack ? p : il, tail);
                }
                if (rec && !pack) {
                    memcpy(row, blk, bs);
                    recode(wtype, blk, row, 0);
                }
            }
        }
    }
}

void llmb_vec_dot_repack(int wtype, int64_t n, const void *w, int64_t nrows, int G, void *dst) {
    interleave(wtype, n, w, nrows, G, dst, 1);
}

void llmb_vec_dot_unpack(int wtype, int64_t n, const void *src, int64_t nrows, int G, void *w) {
    interleave(wtype, n, src, nrows, G, w, 0);
}

// Tokens per pass of a thread over its row panels: LLMB_PANEL_TOKENS, doubled (up to 4x) while their
// activations stay within LLMB_PANEL_X_BYTES (L2): every pass decodes the rows again and reads the
// weights again from L3 or DRAM (docs/engine-measurements.md#panel-tokens).
static int panel_tokens(size_t x_stride) {
    int tb = LLMB_PANEL_TOKENS;
    while (tb < 4 * LLMB_PANEL_TOKENS && x_stride * (size_t)(2 * tb) <= LLMB_PANEL_X_BYTES) tb *= 2;
    return tb;
}

// groups g0 .. g1 - 1 (of il rows each) of an interleaved product for nc tokens from token t0
static void il_groups(llmb_gemm_il_fn kil, int64_t n, const void *w, size_t w_stride, int il, int64_t g0, int64_t g1,
                      const void *xq, size_t x_stride, int t0, int nc, float *y, int64_t ldy, int stream) {
    kil(n, (const char *)w + g0 * il * w_stride, w_stride, (int)((g1 - g0) * il), (const char *)xq + t0 * x_stride,
        x_stride, nc, y + t0 * ldy + g0 * il, ldy, stream);
}

// This thread's share (id of nt) of one matrix product: a contiguous range of row panels (from
// LLMB_PANEL_MIN_TOKENS tokens, where the level has a panel kernel) or of 4-row tiles.
static void matmul_share(const llmb_vec_dot_kernels *k, int wtype, int64_t n, const void *w, size_t w_stride,
                         int64_t nrows, const void *xq, size_t x_stride, int ntok, float *y, int64_t ldy, int id, int nt,
                         int il, int stream) {
    if (il) {   // interleaved groups: this thread's range of them (one token of Q4_K / Q6_K: two streams, q4i_one)
        const llmb_gemm_il_fn kil = il_kernel(k, wtype, il);
        const int64_t ng = nrows / il, g0 = ng * id / nt, g1 = ng * (id + 1) / nt;
        if (g0 == g1) return;
        // decode and batched decode: every group read once for all tokens; prefill: token blocks outside,
        // the groups inside (each kernel runs its groups one after the other, its token tiles in each)
        const int tb = ntok <= LLMB_SMALL_TOKENS ? ntok : panel_tokens(x_stride);
        for (int t0 = 0; t0 < ntok; t0 += tb)
            il_groups(kil, n, w, w_stride, il, g0, g1, xq, x_stride, t0, ntok - t0 < tb ? ntok - t0 : tb, y, ldy, stream);
        return;
    }
    if (ntok >= 2 && ntok <= LLMB_SMALL_TOKENS && k->small) {   // batched decode: this thread's rows, streamed once
        const int64_t n_tiles = (nrows + LLMB_TILE_MAX_R - 1) / LLMB_TILE_MAX_R;
        const int64_t r0 = n_tiles * id / nt * LLMB_TILE_MAX_R, r1 = n_tiles * (id + 1) / nt * LLMB_TILE_MAX_R;
        if (r0 < nrows)
            k->small(n, (const char *)w + r0 * w_stride, w_stride, (int)((r1 < nrows ? r1 : nrows) - r0), xq, x_stride,
                     ntok, y + r0, ldy);
        return;
    }
    if (ntok >= LLMB_PANEL_MIN_TOKENS && k->panel) {   // token blocks outside, this thread's row panels inside
        const int pr = k->panel_r ? k->panel_r : LLMB_PANEL_R;
        const int64_t n_panels = (nrows + pr - 1) / pr;
        const int64_t p0 = n_panels * id / nt, p1 = n_panels * (id + 1) / nt;
        const int tb = panel_tokens(x_stride);
        for (int t0 = 0; t0 < ntok; t0 += tb) {
            const int nc = ntok - t0 < tb ? ntok - t0 : tb;
            for (int64_t p = p0; p < p1; p++) {
                const int64_t r0 = p * pr;
                const int nr = (int)(nrows - r0 < pr ? nrows - r0 : pr);
                k->panel(n, (const char *)w + r0 * w_stride, w_stride, nr, (const char *)xq + t0 * x_stride, x_stride,
                         nc, y + t0 * ldy + r0, ldy);
            }
        }
        return;
    }
    // Without a decode kernel, long float rows at one token run 4x1 tiles: the float activations
    // (4 bytes a value against the weight's 2) are then loaded once for 4 rows, faster from n = 2048;
    // quantized rows stay one stream (docs/engine-measurements.md#float-tiles).
    const int float_w = llmb_vec_dot_type(wtype) == LLMB_TYPE_F32 && n >= 2048;
    const int64_t n_tiles = (nrows + LLMB_TILE_MAX_R - 1) / LLMB_TILE_MAX_R;
    const int64_t t_lo = n_tiles * id / nt, t_hi = n_tiles * (id + 1) / nt;
    if (ntok == 1 && k->decode) {   // decode: this thread's rows in one call, one stream (same bits as the dot)
        const int64_t r0 = t_lo * LLMB_TILE_MAX_R, r1 = t_hi * LLMB_TILE_MAX_R < nrows ? t_hi * LLMB_TILE_MAX_R : nrows;
        if (r0 < r1) k->decode(n, (const char *)w + r0 * w_stride, w_stride, (int)(r1 - r0), xq, x_stride, 1, y + r0, ldy);
        return;
    }
    for (int64_t tile = t_lo; tile < t_hi; tile++) {
        const int64_t r0 = tile * LLMB_TILE_MAX_R;
        const int nr = (int)(nrows - r0 < LLMB_TILE_MAX_R ? nrows - r0 : LLMB_TILE_MAX_R);
        if (ntok == 1 && !float_w) {   // decode: row after row, one sequential stream of weights (same bits as a tile)
            for (int r = 0; r < nr; r++)
                k->dot(n, y + r0 + r, (const char *)w + (r0 + r) * w_stride, xq);
            continue;
        }
        for (int t0 = 0; t0 < ntok; t0 += LLMB_TILE_MAX_C) {
            const int nc = ntok - t0 < LLMB_TILE_MAX_C ? ntok - t0 : LLMB_TILE_MAX_C;
            k->tile(n, (const char *)w + r0 * w_stride, w_stride, nr, (const char *)xq + t0 * x_stride, x_stride, nc,
                    y + t0 * ldy + r0, ldy);
        }
    }
}

// Prefill of repacked weights dealt in chunks of groups for one block of tokens each, taken in turn by whichever thread
// is free (an atomic count over the items, every part's token blocks in order, its chunks inside each): a thread the
// host slows takes fewer, where equal shares left the other waiting at the end of every product (pp512 on 2 threads,
// Zen 3: llama-1b 1.05-1.17x, SmolLM2-135M 1.07-1.10x: docs/engine-measurements.md#dealt). Each group's arithmetic is
// the same whichever thread and call run it (the kernels' bits do not depend on the range), so the same bits.
#ifdef _OPENMP   // (threads come from OpenMP: without it there is nothing to deal)
#define DEAL_PARTS 4   // at most this many parts dealt (ops.c fuses up to LLMB_MATMUL_MAX_N, 4)
static int dealt(const llmb_matmul_part *parts, int nparts, int ntok) {
    if (ntok <= LLMB_SMALL_TOKENS || nparts > DEAL_PARTS) return 0;
    for (int i = 0; i < nparts; i++)
        if (!parts[i].il) return 0;
    return 1;
}
static void parts_dealt(int64_t n, const llmb_matmul_part *parts, int nparts, const void *xq, size_t x_stride, int ntok,
                        int nt, int *next) {
    const int tb = panel_tokens(x_stride), nblk = (ntok + tb - 1) / tb;
    int64_t chunk[DEAL_PARTS], nch[DEAL_PARTS], total = 0;
    for (int i = 0; i < nparts; i++) {   // ~8 chunks a thread and token block of an even count of groups (pairs), 2 or more
        const int64_t ng = parts[i].nrows / parts[i].il;
        chunk[i] = ng / (8 * nt) & ~(int64_t)1;
        if (chunk[i] < 2) chunk[i] = 2;
        nch[i] = (ng + chunk[i] - 1) / chunk[i];
        total += nblk * nch[i];
    }
    for (;;) {
        int64_t it = __atomic_fetch_add(next, 1, __ATOMIC_RELAXED);
        if (it >= total) return;
        int i = 0;
        while (it >= nblk * nch[i]) it -= nblk * nch[i++];
        const llmb_matmul_part *p = &parts[i];
        const int64_t g0 = it % nch[i] * chunk[i], ng = p->nrows / p->il, g1 = g0 + chunk[i] < ng ? g0 + chunk[i] : ng;
        const int t0 = (int)(it / nch[i]) * tb;
        il_groups(il_kernel(kernels(p->wtype), p->wtype, p->il), n, p->w, p->w_stride, p->il, g0, g1, xq, x_stride, t0,
                  ntok - t0 < tb ? ntok - t0 : tb, p->y, p->ldy, p->stream);
    }
}
#endif

// thread id's share (of nt) of every part
static void parts_share(int64_t n, const llmb_matmul_part *parts, int nparts, const void *xq, size_t x_stride, int ntok,
                        int id, int nt) {
    for (int i = 0; i < nparts; i++) {
        const llmb_matmul_part *p = &parts[i];
        matmul_share(kernels(p->wtype), p->wtype, n, p->w, p->w_stride, p->nrows, xq, x_stride, ntok, p->y, p->ldy, id,
                     nt, p->il, p->stream);
    }
}

void llmb_vec_dot_matmul_parts(int64_t n, const llmb_matmul_part *parts, int nparts, const void *xq, size_t x_stride,
                               int ntok, int nthreads) {
    for (int i = 0; i < nparts; i++)
        assert(kernels(parts[i].wtype) &&
               (!parts[i].il || (il_kernel(kernels(parts[i].wtype), parts[i].wtype, parts[i].il) &&
                                  parts[i].nrows % parts[i].il == 0)));
#ifdef _OPENMP
    if (nthreads <= 0) nthreads = omp_get_max_threads();
    if (nthreads > 1) {   // one thread runs here: libgomp allocates a team for every region, a one-thread one too
        int next = 0;
        const int deal = dealt(parts, nparts, ntok);
#pragma omp parallel num_threads(nthreads)
        {
            if (deal) parts_dealt(n, parts, nparts, xq, x_stride, ntok, omp_get_num_threads(), &next);
            else parts_share(n, parts, nparts, xq, x_stride, ntok, omp_get_thread_num(), omp_get_num_threads());
        }
        return;
    }
#endif
    parts_share(n, parts, nparts, xq, x_stride, ntok, 0, 1);
}

void llmb_vec_dot_matmul(int wtype, int64_t n, const void *w, size_t w_stride, int64_t nrows, const void *xq,
                         size_t x_stride, int ntok, float *y, int64_t ldy, int nthreads) {
    const llmb_matmul_part p = {wtype, w, w_stride, nrows, y, ldy, 0, 0};
    llmb_vec_dot_matmul_parts(n, &p, 1, xq, x_stride, ntok, nthreads);
}

// ---- CPU features not in cpu.c's list ----

int llmb_cpu_has(const char *f) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
#define HAS(name) if (!strcmp(f, name)) return __builtin_cpu_supports(name) != 0
    HAS("avx2"); HAS("fma"); HAS("avx512f"); HAS("avx512bw"); HAS("avx512vl"); HAS("avx512vnni");
    HAS("avx512bf16"); HAS("avxvnni");
#undef HAS
    if (!strcmp(f, "amx-int8")) return strstr(llmb_cpu_features(), "amx-int8") != NULL;   // (cpu.c: usable here)
#elif defined(__aarch64__) && defined(__linux__)
#ifdef HWCAP_ASIMDDP
    if (!strcmp(f, "dotprod")) return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
    if (!strcmp(f, "neon")) return 1;
#endif
    return 0;
}
