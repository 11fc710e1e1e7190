// quants.c — scalar reference kernels for ggml's tensor formats: dequantization of F32, F16, BF16,
// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, and quantization to each
// of them, following ggml-quants.c's algorithms as llama.cpp's quantizer runs them (quantize_row_*_ref
// without an importance matrix; IQ4_NL/IQ4_XS its quantize_iq4_* with 7 tries) operation for operation
// so results are bit-identical; the per-SIMD-level kernel tables; and the whole-tensor
// entry points, split over OpenMP threads. SIMD kernels live in quants_simd.c.
// Tested by csrc/tests/test_quants.c and tests/test_quant.py (bit-exact against the gguf package's
// NumPy code, byte-identical quantization where it has one, round-trip error tables, real files).
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"
#include "quants.h"

// Bit-exactness needs a*b+c rounded twice, never fused: GCC does not contract in ISO C mode
// (-std=c11, as the builds use); clang must be told.
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

// ggml's GROUP_MAX_EPS: a group whose largest magnitude is below this quantizes to zeros
#define GROUP_MAX_EPS 1e-15f

// Round to the nearest integer, ties to even, for |v| <= 2^22 (ggml's nearest_int: adding 1.5*2^23
// leaves the integer in the low mantissa bits). Larger or non-finite v give a meaningless value,
// never undefined behaviour; callers clamp the result.
static inline int nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007fffff) - 0x00400000;
}

// ---- F32, F16, BF16 ----

static void dequant_f32(const void *x, float *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }
static void quant_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void dequant_f16_ref(const void *vx, float *y, int64_t n) {
    const llmb_half *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = llmb_fp16_to_fp32(x[i]);
}

static void quant_f16_ref(const float *x, void *vy, int64_t n) {
    llmb_half *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = llmb_fp32_to_fp16(x[i]);
}

static void dequant_bf16_ref(const void *vx, float *y, int64_t n) {
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++) y[i] = llmb_bf16_to_fp32(x[i]);
}

static void quant_bf16_ref(const float *x, void *vy, int64_t n) {
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++) y[i] = llmb_fp32_to_bf16(x[i]);
}

// ---- Q4_0: x = d*(q - 8), d = -max/8 where max is the element of largest magnitude ----

static void dequant_q4_0_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + LLMB_QK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

// the element of largest magnitude (the first one on ties), keeping its sign
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void quant_q4_0_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++, x += LLMB_QK) {
        const float d = signed_absmax(x, LLMB_QK) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = llmb_fp32_to_fp16(d);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            const uint8_t q0 = MIN(15, (int8_t)(x[j] * id + 8.5f));
            const uint8_t q1 = MIN(15, (int8_t)(x[j + LLMB_QK / 2] * id + 8.5f));
            y[i].qs[j] = q0 | (q1 << 4);
        }
    }
}

// ---- Q4_1: x = d*q + m, q in 0..15 spanning [min, max] ----

static void dequant_q4_1_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d), m = llmb_fp16_to_fp32(x[i].m);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            y[j] = (x[i].qs[j] & 0x0F) * d + m;
            y[j + LLMB_QK / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void minmax(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > *max) *max = x[j];
    }
}

static void quant_q4_1_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++, x += LLMB_QK) {
        float min, max;
        minmax(x, LLMB_QK, &min, &max);
        const float d = (max - min) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = llmb_fp32_to_fp16(d);
        y[i].m = llmb_fp32_to_fp16(min);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            const uint8_t q0 = MIN(15, (int8_t)((x[j] - min) * id + 0.5f));
            const uint8_t q1 = MIN(15, (int8_t)((x[j + LLMB_QK / 2] - min) * id + 0.5f));
            y[i].qs[j] = q0 | (q1 << 4);
        }
    }
}

// ---- Q5_0 and Q5_1: Q4_0 and Q4_1 with a fifth bit per element in qh ----

static void dequant_q5_0_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            const int q0 = ((x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
            const int q1 = ((x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            y[j] = q0 * d;
            y[j + LLMB_QK / 2] = q1 * d;
        }
    }
}

static void dequant_q5_1_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d), m = llmb_fp16_to_fp32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            const int q0 = (x[i].qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
            const int q1 = (x[i].qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
            y[j] = q0 * d + m;
            y[j + LLMB_QK / 2] = q1 * d + m;
        }
    }
}

// pack 32 five-bit values: low nibbles as in Q4_0, fifth bits into qh
static void pack_q5(const uint8_t q[LLMB_QK], uint8_t qs[LLMB_QK / 2], uint8_t qh_out[4]) {
    uint32_t qh = 0;
    for (int j = 0; j < LLMB_QK / 2; j++) {
        qs[j] = (q[j] & 0x0F) | ((q[j + LLMB_QK / 2] & 0x0F) << 4);
        qh |= ((q[j] & 0x10u) >> 4) << j;
        qh |= ((q[j + LLMB_QK / 2] & 0x10u) >> 4) << (j + LLMB_QK / 2);
    }
    memcpy(qh_out, &qh, 4);
}

static void quant_q5_0_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q5_0 *y = vy;
    uint8_t q[LLMB_QK];
    for (int64_t i = 0; i < n / LLMB_QK; i++, x += LLMB_QK) {
        const float d = signed_absmax(x, LLMB_QK) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = llmb_fp32_to_fp16(d);
        for (int j = 0; j < LLMB_QK; j++) q[j] = MIN(31, (int8_t)(x[j] * id + 16.5f));
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

static void quant_q5_1_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q5_1 *y = vy;
    uint8_t q[LLMB_QK];
    for (int64_t i = 0; i < n / LLMB_QK; i++, x += LLMB_QK) {
        float min, max;
        minmax(x, LLMB_QK, &min, &max);
        const float d = (max - min) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = llmb_fp32_to_fp16(d);
        y[i].m = llmb_fp32_to_fp16(min);
        for (int j = 0; j < LLMB_QK; j++) q[j] = (uint8_t)((x[j] - min) * id + 0.5f);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

// ---- Q8_0: x = d*q, d = amax/127, q = round(x/d) (halves away from zero) ----

static void dequant_q8_0_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        for (int j = 0; j < LLMB_QK; j++) y[j] = x[i].qs[j] * d;
    }
}

static void quant_q8_0_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++, x += LLMB_QK) {
        float amax = 0.0f;
        for (int j = 0; j < LLMB_QK; j++) amax = MAX(amax, fabsf(x[j]));
        const float d = amax / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = llmb_fp32_to_fp16(d);
        for (int j = 0; j < LLMB_QK; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

// ---- K-quant helpers (ggml's make_qkx2_quants and make_qx_quants) ----

// Fit x[i] ~ scale*L[i] - the_min with L in 0..nmax, minimizing the weighted squared error, or with
// use_mad the weighted absolute error (ggml's make_qkx2_quants with rdelta 0.1): start from the min/max grid, then try nstep+1
// grids of nmax + rmin + 0.1*is steps, solving the least-squares scale and min for each. Note that
// a better fit also moves `min`, where the next grids start. Returns the scale.
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              float rmin, int nstep, int use_mad) {
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + 0.1f * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * (x[i] - min));
            l = MAX(0, MIN(nmax, l));
            Laux[i] = l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// Symmetric fit x[i] ~ scale*(L[i] - nmax), L in 0..2*nmax-1, weights x^2 (ggml's rmse_type 1):
// try 19 grids around nmax/max and keep the least-squares scale with the best weighted error.
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = signed_absmax(x, n), amax = fabsf(max);
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = l + nmax;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = nmax + MAX(-nmax, MIN(nmax - 1, l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Symmetric fit for Q3_K: x[i] ~ scale*(L[i] - nmax), L in 0..2*nmax-1, weights x^2 (ggml's make_q3_quants
// with do_rmse): round at -nmax/max, then up to 5 passes moving single elements to the level that most
// improves the weighted least-squares fit.
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = signed_absmax(x, n), amax = fabsf(max);
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = MAX(-nmax, MIN(nmax - 1, new_l));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// The scalar sub-block fit of Q4_K and Q5_K: make_qkx2_quants on each of the 8 sub-blocks of 32.
void llmb_fit_k_ref(const float *x, const float *w, int nmax, float rmin, int nstep, uint8_t *L, float *scales,
                    float *mins) {
    for (int j = 0; j < LLMB_QK_K / 32; j++)
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, w + 32 * j, L + 32 * j, &mins[j], rmin, nstep, 0);
}

// Shared by Q4_K and Q5_K (nmax 15 or 31): per sub-block of 32, fit scale and min with weights
// av_x + |x|; quantize the 8 scales and 8 mins to 6 bits against the super-block d and dmin; then
// requantize every element with the scale and min it will really be decoded with.
static void quantize_k_superblock(const float *x, int nmax, float rmin, int nstep, llmb_fit_k_fn fit,
                                  llmb_half *d_out, llmb_half *dmin_out, uint8_t scales_out[LLMB_K_SCALE_SIZE],
                                  uint8_t L[LLMB_QK_K]) {
    float weights[LLMB_QK_K], mins[LLMB_QK_K / 32], scales[LLMB_QK_K / 32];
    for (int j = 0; j < LLMB_QK_K / 32; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[32 * j + l] = av_x + fabsf(xs[l]);
    }
    fit(x, weights, nmax, rmin, nstep, L, scales, mins);
    float max_scale = 0, max_min = 0;   // scales and mins are never negative
    for (int j = 0; j < LLMB_QK_K / 32; j++) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < LLMB_QK_K / 32; j++) {
        uint8_t ls = (uint8_t)nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)nearest_int(inv_min * mins[j]);
        ls = MIN(63, ls);
        lm = MIN(63, lm);
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            scales_out[j - 4] |= ((ls >> 4) << 6);
            scales_out[j - 0] |= ((lm >> 4) << 6);
        }
    }
    *d_out = llmb_fp32_to_fp16(max_scale / 63.f);
    *dmin_out = llmb_fp32_to_fp16(max_min / 63.f);
    for (int j = 0; j < LLMB_QK_K / 32; j++) {
        uint8_t sc, m;
        llmb_get_scale_min_k4(j, scales_out, &sc, &m);
        const float d = llmb_fp16_to_fp32(*d_out) * sc;
        if (!d) continue;
        const float dm = llmb_fp16_to_fp32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = MAX(0, MIN(nmax, l));
        }
    }
}

// ---- Q2_K: super-blocks of 256, 16 sub-blocks with 4-bit scale and min, 2-bit quants ----

static void dequant_q2_K_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q2_K *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d), min = llmb_fp16_to_fp32(x[i].dmin);
        for (int e = 0; e < LLMB_QK_K; e++, y++) {   // e = 128 h + 32 s + l: bits 2s of qs[32 h + l]
            const int j = e / 16, q = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * (e / 32 % 4))) & 3;
            const float dl = d * (x[i].scales[j] & 0xF), ml = min * (x[i].scales[j] >> 4);
            *y = dl * q - ml;
        }
    }
}

// pack 256 two-bit values: per 128 elements 32 bytes, element 32s + l in bits 2s..2s+1 of byte l
static void pack_2bit(const uint8_t L[LLMB_QK_K], uint8_t qs[LLMB_QK_K / 4]) {
    for (int j = 0; j < LLMB_QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
}

// quantize_row_q2_K_ref: per sub-block of 16 a scale and min fit by make_qkx2_quants (weights |x|,
// absolute error), both quantized to 4 bits against the super-block's d and dmin, then every element
// requantized with the scale and min it will be decoded with.
static void quant_q2_K_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q2_K *y = vy;
    uint8_t L[LLMB_QK_K];
    float weights[16], mins[LLMB_QK_K / 16], scales[LLMB_QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        float max_scale = 0, max_min = 0;   // scales and mins are never negative
        for (int j = 0; j < LLMB_QK_K / 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], -0.5f, 15, 1);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            float iscale = q4scale / max_scale;
            for (int j = 0; j < LLMB_QK_K / 16; j++) y[i].scales[j] = (uint8_t)nearest_int(iscale * scales[j]);
            y[i].d = llmb_fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < LLMB_QK_K / 16; j++) y[i].scales[j] = 0;
            y[i].d = llmb_fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            float iscale = q4scale / max_min;
            for (int j = 0; j < LLMB_QK_K / 16; j++) y[i].scales[j] |= (uint8_t)(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = llmb_fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = llmb_fp32_to_fp16(0.f);
        }
        for (int j = 0; j < LLMB_QK_K / 16; j++) {
            const float d = llmb_fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = llmb_fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = (uint8_t)MAX(0, MIN(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

// ---- Q3_K: super-blocks of 256, 16 sub-blocks with a 6-bit signed scale, 3-bit quants ----

static void dequant_q3_K_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q3_K *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        for (int e = 0; e < LLMB_QK_K; e++, y++) {   // as Q2_K; the high bit: bit e / 32 of hmask[e % 32]
            const int lo = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * (e / 32 % 4))) & 3;
            const int h = (x[i].hmask[e % 32] >> (e / 32)) & 1;
            const float dl = d * llmb_q3_K_scale(e / 16, x[i].scales);
            *y = dl * (lo - (h ? 0 : 4));
        }
    }
}

// Q3_K's 6-bit scale l (0..63) of sub-block j into the 12 packed bytes (zeroed first)
static void set_q3_K_scale(int j, int l, uint8_t *s) {
    if (j < 8) s[j] = l & 0xF;
    else s[j - 8] |= (l & 0xF) << 4;
    s[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
}

// After the scales are set: quantize every element with the scale it is decoded with, split off the
// high bits into hmask (element j: bit j/32 of hmask[j%32]) and pack the low two bits.
static void q3_K_finish(const float *x, llmb_block_q3_K *y, int8_t L[LLMB_QK_K]) {
    for (int j = 0; j < LLMB_QK_K / 16; j++) {
        const float d = llmb_fp16_to_fp32(y->d) * llmb_q3_K_scale(j, y->scales);
        if (!d) continue;
        for (int ii = 0; ii < 16; ii++) {
            int l = nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = (int8_t)(MAX(-4, MIN(3, l)) + 4);
        }
    }
    memset(y->hmask, 0, sizeof y->hmask);
    uint8_t lo[LLMB_QK_K];
    for (int j = 0; j < LLMB_QK_K; j++) {
        if (L[j] > 3) y->hmask[j % 32] |= (uint8_t)(1u << (j / 32));
        lo[j] = (uint8_t)(L[j] > 3 ? L[j] - 4 : L[j]);
    }
    pack_2bit(lo, y->qs);
}

// quantize_row_q3_K_ref: per sub-block of 16 a signed scale from make_q3_quants, the 16 scales quantized
// to 6 bits against d = max/-32 (max: the scale of largest magnitude).
static void quant_q3_K_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q3_K *y = vy;
    int8_t L[LLMB_QK_K];
    float scales[LLMB_QK_K / 16];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < LLMB_QK_K / 16; j++) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            float scale = fabsf(scales[j]);
            if (scale > amax) {
                amax = scale;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int j = 0; j < LLMB_QK_K / 16; j++) {
                int8_t l = (int8_t)nearest_int(iscale * scales[j]);
                set_q3_K_scale(j, MAX(-32, MIN(31, l)) + 32, y[i].scales);
            }
            y[i].d = llmb_fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = llmb_fp32_to_fp16(0.f);
        }
        q3_K_finish(x, &y[i], L);
    }
}

// ---- IQ4_NL, IQ4_XS: 4-bit indices into the 16 non-linear values of llmb_kvalues_iq4nl ----

static void dequant_iq4_nl_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq4_nl *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        for (int j = 0; j < LLMB_QK / 2; j++) {
            y[j] = d * llmb_kvalues_iq4nl[x[i].qs[j] & 0xF];
            y[j + LLMB_QK / 2] = d * llmb_kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

static void dequant_iq4_xs_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq4_xs *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        for (int j = 0; j < LLMB_QK_K / 32; j++, y += 32) {
            const float dl = d * llmb_iq4_xs_scale(j, &x[i]);
            const uint8_t *qs = x[i].qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                y[l] = dl * llmb_kvalues_iq4nl[qs[l] & 0xF];
                y[l + 16] = dl * llmb_kvalues_iq4nl[qs[l] >> 4];
            }
        }
    }
}

// the index of the value in the sorted `val` (n values) nearest to x; ties go up (ggml's best_index_int8)
static inline int best_index_int8(int n, const int8_t *val, float x) {
    if (x <= val[0]) return 0;
    if (x >= val[n - 1]) return n - 1;
    int ml = 0, mu = n - 1;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav;
        else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

// ggml's quantize_row_iq4_nl_impl with 16 values, as llama.cpp's quantizer calls it (ntry 7): for each block
// of 32 in a super-block of `sbs` elements, weights qw*sqrt(sigma2 + x^2) (x^2 without an importance
// matrix), a scale from the nearest-value fit at max/-127 improved over 15 grids (itry - 127)/max; with
// several blocks (IQ4_XS) the scales are quantized to 6 bits against d = -max_scale/32 and the indices redone.
// `qw`: the importance weights of these sbs elements, or NULL.
static void quant_iq4_superblock(int sbs, const float *x, const float *qw, llmb_half *dh, uint8_t *q4,
                                 uint16_t *scales_h, uint8_t *scales_l) {
    const int bs = 32, ntry = 7;
    const int8_t *values = llmb_kvalues_iq4nl;
    float scales[LLMB_QK_K / 32], weight[32];
    uint8_t L[LLMB_QK_K];
    float sigma2 = 0;
    for (int j = 0; j < sbs; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / sbs;
    memset(q4, 0, (size_t)sbs / 2);
    dh[0] = llmb_fp32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / bs; ib++) {
        const float *xb = x + ib * bs;
        uint8_t *Lb = L + ib * bs;
        if (qw) {
            for (int j = 0; j < bs; j++) weight[j] = qw[ib * bs + j] * sqrtf(sigma2 + xb[j] * xb[j]);
        } else {
            for (int j = 0; j < bs; j++) weight[j] = xb[j] * xb[j];
        }
        const float max = signed_absmax(xb, bs), amax = fabsf(max);
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            memset(Lb, 0, (size_t)bs);
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < bs; j++) {
            int l = best_index_int8(16, values, id * xb[j]);
            Lb[j] = (uint8_t)l;
            float q = values[l], w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; itry++) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < bs; j++) {
                int l = best_index_int8(16, values, id * xb[j]);
                float q = values[l], w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        float abs_d = fabsf(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if (sbs / bs > 1) {
        *scales_h = 0;
        float d = -max_scale / 32;
        dh[0] = llmb_fp32_to_fp16(d);
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / bs; ib++) {
            int l = nearest_int(id * scales[ib]);
            l = MAX(-32, MIN(31, l));
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < bs; j++) L[ib * bs + j] = (uint8_t)best_index_int8(16, values, idl * x[ib * bs + j]);
            l += 32;
            if (ib % 2 == 0) scales_l[ib / 2] = l & 0xF;
            else scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
            *scales_h |= (uint16_t)((l >> 4) << (2 * (ib % 8)));
        }
    } else {
        dh[0] = llmb_fp32_to_fp16(scales[0]);
        float id = scales[0] ? 1 / scales[0] : 0;
        for (int j = 0; j < sbs; j++) L[j] = (uint8_t)best_index_int8(16, values, id * x[j]);
    }
    for (int i = 0; i < sbs / 32; i++)
        for (int j = 0; j < 16; j++) q4[16 * i + j] = L[32 * i + j] | (L[32 * i + 16 + j] << 4);
}

static void quant_iq4_nl_ref(const float *x, void *vy, int64_t n) {
    llmb_block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++) quant_iq4_superblock(LLMB_QK, x + LLMB_QK * i, NULL, &y[i].d, y[i].qs, NULL, NULL);
}

static void quant_iq4_xs_ref(const float *x, void *vy, int64_t n) {
    llmb_block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        quant_iq4_superblock(LLMB_QK_K, x + LLMB_QK_K * i, NULL, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l);
}

// ---- Q4_K: super-blocks of 256, 8 sub-blocks with 6-bit scale and min ----

static void dequant_q4_K_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q4_K *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const uint8_t *q = x[i].qs;
        const float d = llmb_fp16_to_fp32(x[i].d), min = llmb_fp16_to_fp32(x[i].dmin);
        for (int is = 0; is < 8; is += 2, q += 32) {
            uint8_t sc, m;
            llmb_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            llmb_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void llmb_quant_q4_K_with(const float *x, void *vy, int64_t n, llmb_fit_k_fn fit) {
    llmb_block_q4_K *y = vy;
    uint8_t L[LLMB_QK_K];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        quantize_k_superblock(x, 15, -1.f, 20, fit, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < LLMB_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = L[j + l] | (L[j + l + 32] << 4);
    }
}

static void quant_q4_K_ref(const float *x, void *y, int64_t n) { llmb_quant_q4_K_with(x, y, n, llmb_fit_k_ref); }

// ---- Q5_K: Q4_K with a fifth bit per element ----

static void dequant_q5_K_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q5_K *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        const float d = llmb_fp16_to_fp32(x[i].d), min = llmb_fp16_to_fp32(x[i].dmin);
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            llmb_get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            llmb_get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void llmb_quant_q5_K_with(const float *x, void *vy, int64_t n, llmb_fit_k_fn fit) {
    llmb_block_q5_K *y = vy;
    uint8_t L[LLMB_QK_K];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        memset(y[i].scales, 0, sizeof y[i].scales);
        quantize_k_superblock(x, 31, -0.5f, 15, fit, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, LLMB_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int j = 0; j < LLMB_QK_K; j += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[j + l], l2 = L[j + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[l] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[l] |= m2;
                }
                ql[l] = l1 | (l2 << 4);
            }
        }
    }
}

static void quant_q5_K_ref(const float *x, void *y, int64_t n) { llmb_quant_q5_K_with(x, y, n, llmb_fit_k_ref); }

// ---- Q6_K: super-blocks of 256, 16 sub-blocks with an 8-bit signed scale, 6-bit quants ----

static void dequant_q6_K_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q6_K *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int j = 0; j < LLMB_QK_K; j += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                const int q1 = ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

// The scalar sub-block fit of Q6_K: make_qx_quants on each of the 16 sub-blocks of 16.
void llmb_fit_q6_K_ref(const float *x, int8_t *L, float *scales) {
    for (int ib = 0; ib < LLMB_QK_K / 16; ib++) scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
}

// One Q6_K super-block from its 16 fitted sub-block scales: the scales as 8-bit levels of d = max/-128,
// every element requantized with the scale it is decoded with.
static void q6_K_finish(const float *x, llmb_block_q6_K *y, int8_t L[LLMB_QK_K], const float scales[LLMB_QK_K / 16]) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < LLMB_QK_K / 16; ib++) {
        if (fabsf(scales[ib]) > max_abs_scale) {
            max_abs_scale = fabsf(scales[ib]);
            max_scale = scales[ib];
        }
    }
    if (max_abs_scale < GROUP_MAX_EPS) {
        memset(y, 0, sizeof *y);
        return;
    }
    float iscale = -128.f / max_scale;
    y->d = llmb_fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < LLMB_QK_K / 16; ib++) y->scales[ib] = (int8_t)MIN(127, nearest_int(iscale * scales[ib]));
    for (int j = 0; j < LLMB_QK_K / 16; j++) {
        float d = llmb_fp16_to_fp32(y->d) * y->scales[j];
        if (!d) continue;
        for (int ii = 0; ii < 16; ii++) {
            int l = nearest_int(x[16 * j + ii] / d);
            L[16 * j + ii] = MAX(-32, MIN(31, l)) + 32;
        }
    }
    uint8_t *ql = y->ql, *qh = y->qh;
    for (int j = 0; j < LLMB_QK_K; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; l++) {
            const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF;
            const uint8_t q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
            ql[l + 0] = q1 | (q3 << 4);
            ql[l + 32] = q2 | (q4 << 4);
            qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                    ((L[j + l + 96] >> 4) << 6);
        }
    }
}

void llmb_quant_q6_K_with(const float *x, void *vy, int64_t n, llmb_fit_q6_K_fn fit) {
    llmb_block_q6_K *y = vy;
    int8_t L[LLMB_QK_K];
    float scales[LLMB_QK_K / 16];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        fit(x, L, scales);
        q6_K_finish(x, &y[i], L, scales);
    }
}

static void quant_q6_K_ref(const float *x, void *y, int64_t n) { llmb_quant_q6_K_with(x, y, n, llmb_fit_q6_K_ref); }

// ---- Q8_K: x = d*q, q in -127..127 from the element of largest magnitude, with group sums ----

static void dequant_q8_K_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q8_K *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, y += LLMB_QK_K)
        for (int j = 0; j < LLMB_QK_K; j++) y[j] = x[i].d * x[i].qs[j];
}

static void quant_q8_K_ref(const float *x, void *vy, int64_t n) {
    llmb_block_q8_K *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < LLMB_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (!amax) {   // all zeros (ggml leaves bsums unset here; they are zero)
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < LLMB_QK_K; j++) y[i].qs[j] = (int8_t)MIN(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < LLMB_QK_K / 16; j++) {
            int sum = 0;
            for (int ii = 0; ii < 16; ii++) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

// ---- quantization with an importance matrix (llama.cpp's quantize_<type> with quant_weights) ----
//
// Each function quantizes one row of n elements with the row's importance weights qw[0..n-1] (llama.cpp's
// imatrix entry for the tensor: mean squared activation per input column), following ggml-quants.c's
// quantize_row_<type>_impl operation for operation. Weights enter as qw[j]*sqrt(sigma2 + x[j]^2).

// make_qx_quants with explicit weights: the symmetric fit of make_qx_quants above, weighted by w.
static float make_qx_quants_w(int n, int nmax, const float *x, int8_t *L, const float *w) {
    const float max = signed_absmax(x, n), amax = fabsf(max);
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * x[i]);
        l = MAX(-nmax, MIN(nmax - 1, l));
        L[i] = (int8_t)(l + nmax);
        sumlx += w[i] * x[i] * l;
        suml2 += w[i] * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nearest_int(iscale * x[i]);
            l = MAX(-nmax, MIN(nmax - 1, l));
            sumlx += w[i] * x[i] * l;
            suml2 += w[i] * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nearest_int(iscale * x[i]);
                L[i] = (int8_t)(nmax + MAX(-nmax, MIN(nmax - 1, l)));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// ggml's make_qkx3_quants (weights given, squared error): make_qkx2_quants' search over nstep+1 grids
// (nmax + rmin + rdelta*is)/(max - min), with levels clamped before rounding.
static float make_qkx3_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                              float rmin, float rdelta, int nstep) {
    uint8_t Laux[32];
    float min = x[0], max = x[0];
    float sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; i++) {
        int l = nearest_int(iscale * (x[i] - min));
        L[i] = (uint8_t)MAX(0, MIN(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = diff * diff;
        best_mad += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const float v = iscale * (x[i] - min);
            const int l = v > 0 ? nearest_int(MIN(v, nmax)) : 0;
            Laux[i] = (uint8_t)l;
            float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = diff * diff;
                mad += weights[i] * diff;
            }
            if (mad < best_mad) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// ggml's make_qp_quants: x >= 0 (sub-block scales or mins) ~ scale*L, L in 0..nmax, weighted by qw; a
// grid search over 9 scales, then up to 5 passes moving single levels. L keeps ggml's uint8 arithmetic.
static float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; i++) max = MAX(max, x[i]);
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        float iscale_is = (0.1f * is + nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = MIN(nmax, nearest_int(iscale_is * x[i]));
            float diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = MIN(nmax, nearest_int(iscale * x[i]));
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = MIN(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

static float row_sigma2(const float *x, int64_t n) {
    float sum_x2 = 0;
    for (int64_t j = 0; j < n; j++) sum_x2 += x[j] * x[j];
    return sum_x2 / n;
}

static void quant_q4_0_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q4_0 *y = vy;
    float weight[LLMB_QK];
    int8_t L[LLMB_QK];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        const float *xb = x + LLMB_QK * ib, *w = qw + LLMB_QK * ib;
        for (int j = 0; j < LLMB_QK; j++) weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        y[ib].d = llmb_fp32_to_fp16(make_qx_quants_w(LLMB_QK, 8, xb, L, weight));
        for (int j = 0; j < 16; j++) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void quant_q5_0_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q5_0 *y = vy;
    float weight[LLMB_QK];
    int8_t L[LLMB_QK];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        const float *xb = x + LLMB_QK * ib, *w = qw + LLMB_QK * ib;
        for (int j = 0; j < LLMB_QK; j++) weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
        y[ib].d = llmb_fp32_to_fp16(make_qx_quants_w(LLMB_QK, 16, xb, L, weight));
        pack_q5((const uint8_t *)L, y[ib].qs, y[ib].qh);
    }
}

// Q4_1 / Q5_1: the asymmetric fit make_qkx3_quants, nmax 15 or 31; the block keeps d and the min
static void quant_qx_1_w(const float *xb, const float *w, float sigma2, int nmax, llmb_half *d, llmb_half *m,
                         uint8_t *L) {
    float weight[LLMB_QK], min;
    for (int j = 0; j < LLMB_QK; j++) weight[j] = w[j] * sqrtf(sigma2 + xb[j] * xb[j]);
    *d = llmb_fp32_to_fp16(make_qkx3_quants(LLMB_QK, nmax, xb, weight, L, &min, -0.9f, 0.05f, 36));
    *m = llmb_fp32_to_fp16(-min);
}

static void quant_q4_1_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q4_1 *y = vy;
    uint8_t L[LLMB_QK];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        quant_qx_1_w(x + LLMB_QK * ib, qw + LLMB_QK * ib, sigma2, 15, &y[ib].d, &y[ib].m, L);
        for (int j = 0; j < 16; j++) y[ib].qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void quant_q5_1_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q5_1 *y = vy;
    uint8_t L[LLMB_QK];
    const float sigma2 = row_sigma2(x, n);
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++) {
        quant_qx_1_w(x + LLMB_QK * ib, qw + LLMB_QK * ib, sigma2, 31, &y[ib].d, &y[ib].m, L);
        pack_q5(L, y[ib].qs, y[ib].qh);
    }
}

static void quant_q2_K_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q2_K *y = vy;
    uint8_t L[LLMB_QK_K], Ls[LLMB_QK_K / 16], Lm[LLMB_QK_K / 16];
    float mins[LLMB_QK_K / 16], scales[LLMB_QK_K / 16], sw[LLMB_QK_K / 16], weight[16];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        memset(sw, 0, sizeof sw);
        const float sigma2 = row_sigma2(x, LLMB_QK_K);
        for (int j = 0; j < LLMB_QK_K / 16; j++) {
            const float *w = qw + LLMB_QK_K * i + 16 * j;
            for (int l = 0; l < 16; l++) weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            for (int l = 0; l < 16; l++) sw[j] += weight[l];
            scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], -0.9f, 0.05f, 36);
        }
        float dm = make_qp_quants(LLMB_QK_K / 16, 15, scales, Ls, sw);
        float mm = make_qp_quants(LLMB_QK_K / 16, 15, mins, Lm, sw);
        y[i].d = llmb_fp32_to_fp16(dm);
        y[i].dmin = llmb_fp32_to_fp16(mm);
        dm = llmb_fp16_to_fp32(y[i].d);
        mm = llmb_fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < LLMB_QK_K / 16; j++) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < LLMB_QK_K / 16; j++) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ii++) {
                int l = nearest_int((x[16 * j + ii] + m) / d);
                L[16 * j + ii] = (uint8_t)MAX(0, MIN(3, l));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

static void quant_q3_K_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q3_K *y = vy;
    int8_t L[LLMB_QK_K], Ls[LLMB_QK_K / 16];
    float scales[LLMB_QK_K / 16], weight[16], sw[LLMB_QK_K / 16];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        const float sigma2 = 2 * row_sigma2(x, LLMB_QK_K);
        for (int j = 0; j < LLMB_QK_K / 16; j++) {
            const float *w = qw + LLMB_QK_K * i + 16 * j;
            for (int l = 0; l < 16; l++) weight[l] = w[l] * sqrtf(sigma2 + x[16 * j + l] * x[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; l++) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants_w(16, 4, x + 16 * j, L + 16 * j, weight);
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        const float d_block = make_qx_quants_w(LLMB_QK_K / 16, 32, scales, Ls, sw);
        for (int j = 0; j < LLMB_QK_K / 16; j++) set_q3_K_scale(j, Ls[j], y[i].scales);
        y[i].d = llmb_fp32_to_fp16(d_block);
        q3_K_finish(x, &y[i], L);
    }
}

// Q4_K / Q5_K (nmax 15 / 31): per sub-block of 32 make_qkx3_quants, then the 8 scales and 8 mins as 6-bit
// levels of make_qp_quants weighted by the sub-blocks' total weight. clamp63: Q5_K clamps the levels, Q4_K
// stores them as they come (the same unless make_qp_quants wrapped a negative level).
static void quantize_k_superblock_w(const float *x, const float *qw, int nmax, int clamp63, llmb_half *d_out,
                                    llmb_half *dmin_out, uint8_t scales_out[LLMB_K_SCALE_SIZE], uint8_t L[LLMB_QK_K]) {
    uint8_t Ls[LLMB_QK_K / 32], Lm[LLMB_QK_K / 32];
    float weights[32], sw[LLMB_QK_K / 32], mins[LLMB_QK_K / 32], scales[LLMB_QK_K / 32];
    float sum_x2 = 0;
    for (int l = 0; l < LLMB_QK_K; l++) sum_x2 += x[l] * x[l];
    const float sigma2 = 2 * sum_x2 / LLMB_QK_K;
    for (int j = 0; j < LLMB_QK_K / 32; j++) {
        for (int l = 0; l < 32; l++) weights[l] = qw[32 * j + l] * sqrtf(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; l++) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], -0.9f, 0.05f, 36);
    }
    const float d_block = make_qp_quants(LLMB_QK_K / 32, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(LLMB_QK_K / 32, 63, mins, Lm, sw);
    memset(scales_out, 0, LLMB_K_SCALE_SIZE);
    for (int j = 0; j < LLMB_QK_K / 32; j++) {
        uint8_t ls = Ls[j], lm = Lm[j];
        if (clamp63) {
            ls = MIN(63, ls);
            lm = MIN(63, lm);
        }
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 0xF) | ((lm & 0xF) << 4));
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j - 0] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = llmb_fp32_to_fp16(d_block);
    *dmin_out = llmb_fp32_to_fp16(m_block);
    for (int j = 0; j < LLMB_QK_K / 32; j++) {
        uint8_t sc, m;
        llmb_get_scale_min_k4(j, scales_out, &sc, &m);
        const float d = llmb_fp16_to_fp32(*d_out) * sc;
        if (!d) continue;
        const float dm = llmb_fp16_to_fp32(*dmin_out) * m;
        for (int ii = 0; ii < 32; ii++) {
            int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = (uint8_t)MAX(0, MIN(nmax, l));
        }
    }
}

static void quant_q4_K_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q4_K *y = vy;
    uint8_t L[LLMB_QK_K];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        quantize_k_superblock_w(x, qw + LLMB_QK_K * i, 15, 0, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *q = y[i].qs;
        for (int j = 0; j < LLMB_QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; l++) q[l] = L[j + l] | (L[j + l + 32] << 4);
    }
}

static void quant_q5_K_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_q5_K *y = vy;
    uint8_t L[LLMB_QK_K];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++, x += LLMB_QK_K) {
        quantize_k_superblock_w(x, qw + LLMB_QK_K * i, 31, 1, &y[i].d, &y[i].dmin, y[i].scales, L);
        uint8_t *qh = y[i].qh, *ql = y[i].qs;
        memset(qh, 0, LLMB_QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int j = 0; j < LLMB_QK_K; j += 64, ql += 32, m1 <<= 2, m2 <<= 2) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[j + l], l2 = L[j + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[l] |= m1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    qh[l] |= m2;
                }
                ql[l] = (uint8_t)(l1 | (l2 << 4));
            }
        }
    }
}

// Q6_K: the reference algorithm with make_qx_quants weighted by the importance weights themselves
static void fit_q6_K_w(const float *x, const float *qw, int8_t *L, float *scales) {
    for (int ib = 0; ib < LLMB_QK_K / 16; ib++)
        scales[ib] = make_qx_quants_w(16, 32, x + 16 * ib, L + 16 * ib, qw + 16 * ib);
}

static void quant_q6_K_w(const float *x, void *vy, int64_t n, const float *qw) {
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        int8_t L[LLMB_QK_K];
        float scales[LLMB_QK_K / 16];
        fit_q6_K_w(x + LLMB_QK_K * i, qw + LLMB_QK_K * i, L, scales);
        q6_K_finish(x + LLMB_QK_K * i, (llmb_block_q6_K *)vy + i, L, scales);
    }
}

static void quant_iq4_nl_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_iq4_nl *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK; i++)
        quant_iq4_superblock(LLMB_QK, x + LLMB_QK * i, qw + LLMB_QK * i, &y[i].d, y[i].qs, NULL, NULL);
}

static void quant_iq4_xs_w(const float *x, void *vy, int64_t n, const float *qw) {
    llmb_block_iq4_xs *y = vy;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        quant_iq4_superblock(LLMB_QK_K, x + LLMB_QK_K * i, qw + LLMB_QK_K * i, &y[i].d, y[i].qs, &y[i].scales_h,
                             y[i].scales_l);
}

typedef void (*quant_row_w_fn)(const float *x, void *y, int64_t n, const float *qw);
static const quant_row_w_fn weighted_table[LLMB_TYPE_COUNT] = {
    [LLMB_TYPE_Q4_0] = quant_q4_0_w,   [LLMB_TYPE_Q4_1] = quant_q4_1_w, [LLMB_TYPE_Q5_0] = quant_q5_0_w,
    [LLMB_TYPE_Q5_1] = quant_q5_1_w,   [LLMB_TYPE_Q2_K] = quant_q2_K_w, [LLMB_TYPE_Q3_K] = quant_q3_K_w,
    [LLMB_TYPE_Q4_K] = quant_q4_K_w,   [LLMB_TYPE_Q5_K] = quant_q5_K_w, [LLMB_TYPE_Q6_K] = quant_q6_K_w,
    [LLMB_TYPE_IQ4_NL] = quant_iq4_nl_w, [LLMB_TYPE_IQ4_XS] = quant_iq4_xs_w,
};

// ---- kernel tables, one per SIMD level ----

#define REF(to, from) {to, from, to, from}
static const llmb_quant_traits ref_table[LLMB_TYPE_COUNT] = {
    [LLMB_TYPE_F32] = REF(dequant_f32, quant_f32),
    [LLMB_TYPE_F16] = REF(dequant_f16_ref, quant_f16_ref),
    [LLMB_TYPE_Q4_0] = REF(dequant_q4_0_ref, quant_q4_0_ref),
    [LLMB_TYPE_Q4_1] = REF(dequant_q4_1_ref, quant_q4_1_ref),
    [LLMB_TYPE_Q5_0] = REF(dequant_q5_0_ref, quant_q5_0_ref),
    [LLMB_TYPE_Q5_1] = REF(dequant_q5_1_ref, quant_q5_1_ref),
    [LLMB_TYPE_Q8_0] = REF(dequant_q8_0_ref, quant_q8_0_ref),
    [LLMB_TYPE_Q2_K] = REF(dequant_q2_K_ref, quant_q2_K_ref),
    [LLMB_TYPE_Q3_K] = REF(dequant_q3_K_ref, quant_q3_K_ref),
    [LLMB_TYPE_IQ4_NL] = REF(dequant_iq4_nl_ref, quant_iq4_nl_ref),
    [LLMB_TYPE_IQ4_XS] = REF(dequant_iq4_xs_ref, quant_iq4_xs_ref),
    [LLMB_TYPE_Q4_K] = REF(dequant_q4_K_ref, quant_q4_K_ref),
    [LLMB_TYPE_Q5_K] = REF(dequant_q5_K_ref, quant_q5_K_ref),
    [LLMB_TYPE_Q6_K] = REF(dequant_q6_K_ref, quant_q6_K_ref),
    [LLMB_TYPE_Q8_K] = REF(dequant_q8_K_ref, quant_q8_K_ref),
    [LLMB_TYPE_BF16] = REF(dequant_bf16_ref, quant_bf16_ref),
    [LLMB_TYPE_TQ1_0] = REF(llmb_dequant_tq1_0_ref, NULL),   // quants_tq.c: dequantization only
    [LLMB_TYPE_TQ2_0] = REF(llmb_dequant_tq2_0_ref, NULL),
    [LLMB_TYPE_MXFP4] = REF(llmb_dequant_mxfp4_ref, NULL),
    [LLMB_TYPE_NVFP4] = REF(llmb_dequant_nvfp4_ref, NULL),
    [LLMB_TYPE_Q1_0] = REF(llmb_dequant_q1_0_ref, NULL),
    [LLMB_TYPE_IQ2_XXS] = REF(llmb_dequant_iq2_xxs_ref, NULL),   // quants_iq.c: dequantization only
    [LLMB_TYPE_IQ2_XS] = REF(llmb_dequant_iq2_xs_ref, NULL),
    [LLMB_TYPE_IQ2_S] = REF(llmb_dequant_iq2_s_ref, NULL),
    [LLMB_TYPE_IQ3_XXS] = REF(llmb_dequant_iq3_xxs_ref, NULL),
    [LLMB_TYPE_IQ3_S] = REF(llmb_dequant_iq3_s_ref, NULL),
    [LLMB_TYPE_IQ1_S] = REF(llmb_dequant_iq1_s_ref, NULL),
    [LLMB_TYPE_IQ1_M] = REF(llmb_dequant_iq1_m_ref, NULL),
};
#undef REF

static llmb_quant_traits tables[LLMB_SIMD_AVX512 + 1][LLMB_TYPE_COUNT];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void build_tables(void) {
    for (int lvl = 0; lvl <= LLMB_SIMD_AVX512; lvl++) {
        memcpy(tables[lvl], ref_table, sizeof ref_table);
        // an AVX-512 CPU runs the AVX2 kernels too: install them first, then the wider ones
        if (lvl == LLMB_SIMD_AVX512) llmb_quant_simd_install(LLMB_SIMD_AVX2, tables[lvl]);
        llmb_quant_simd_install((llmb_simd_level)lvl, tables[lvl]);
    }
}

const llmb_quant_traits *llmb_quant_traits_get(int type_id) {
    if (type_id < 0 || type_id >= LLMB_TYPE_COUNT || !ref_table[type_id].to_float_ref) return NULL;
    pthread_once(&tables_once, build_tables);
    return &tables[llmb_simd_active()][type_id];
}

// ---- whole tensors ----

#define CHUNK_ELEMS 16384          // elements per task handed to a thread
#define PARALLEL_MIN_ELEMS 262144  // smaller tensors are converted by the calling thread

static void supported_names(int quantize, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = '\0';
    for (int t = 0; t < LLMB_TYPE_COUNT && len < size; t++) {
        if (!ref_table[t].to_float_ref || (quantize && !ref_table[t].from_float_ref)) continue;
        len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? ", " : "", llmb_type_traits_get(t)->name);
    }
}

static llmb_status check_args(const char *what, int quantize, int type, const void *src, const void *dst,
                              int64_t nrows, int64_t ncols, int nthreads, const llmb_type_traits **tt) {
    char names[256];
    *tt = llmb_type_traits_get(type);
    if (!*tt) return llmb_fail(LLMB_E_ARG, "%s: unknown ggml type id %d", what, type);
    if (!llmb_quant_traits_get(type) || (quantize && !llmb_quant_traits_get(type)->from_float)) {
        supported_names(quantize, names, sizeof names);
        return llmb_fail(LLMB_E_UNSUPPORTED, "%s: type %s is not supported (supported: %s)", what, (*tt)->name, names);
    }
    if (nrows < 0 || ncols < 0)
        return llmb_fail(LLMB_E_ARG, "%s: negative shape (%lld rows, %lld columns)", what, (long long)nrows,
                         (long long)ncols);
    if (ncols % (*tt)->blck_size)
        return llmb_fail(LLMB_E_ARG, "%s: row length %lld is not a multiple of the %s block size %lld", what,
                         (long long)ncols, (*tt)->name, (long long)(*tt)->blck_size);
    if (ncols && nrows > INT64_MAX / 8 / ncols)
        return llmb_fail(LLMB_E_ARG, "%s: %lld x %lld elements overflow", what, (long long)nrows, (long long)ncols);
    if (nthreads < 0) return llmb_fail(LLMB_E_ARG, "%s: nthreads must be >= 0 (0: default), got %d", what, nthreads);
    if (nrows && ncols && (!src || !dst)) return llmb_fail(LLMB_E_ARG, "%s: NULL buffer", what);
    if (((uintptr_t)src | (uintptr_t)dst) & 3) return llmb_fail(LLMB_E_ARG, "%s: buffers must be 4-byte aligned", what);
    return LLMB_OK;
}

static int all_finite(const float *x, int64_t n) {
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

llmb_status llmb_dequantize(int type, const void *src, float *dst, int64_t nrows, int64_t ncols, int nthreads) {
    const llmb_type_traits *tt;
    llmb_status s = check_args("dequantize", 0, type, src, dst, nrows, ncols, nthreads, &tt);
    if (s) return s;
    const llmb_to_float_fn to_float = llmb_quant_traits_get(type)->to_float;
    const int64_t bs = tt->blck_size, ts = tt->type_size;
    const int64_t nb = nrows * (ncols / bs), per_chunk = CHUNK_ELEMS / bs;
    const int64_t nchunks = (nb + per_chunk - 1) / per_chunk;
#pragma omp parallel for schedule(static) if (nb * bs >= PARALLEL_MIN_ELEMS) \
    num_threads(nthreads > 0 ? nthreads : llmb_max_threads())
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t b0 = c * per_chunk, nblk = MIN(per_chunk, nb - b0);
        to_float((const uint8_t *)src + b0 * ts, dst + b0 * bs, nblk * bs);
    }
    return LLMB_OK;
}

llmb_status llmb_quantize(int type, const float *src, void *dst, int64_t nrows, int64_t ncols, int nthreads) {
    const llmb_type_traits *tt;
    llmb_status s = check_args("quantize", 1, type, src, dst, nrows, ncols, nthreads, &tt);
    if (s) return s;
    const llmb_from_float_fn from_float = llmb_quant_traits_get(type)->from_float;
    const int64_t bs = tt->blck_size, ts = tt->type_size;
    const int64_t nb = nrows * (ncols / bs), per_chunk = CHUNK_ELEMS / bs;
    const int64_t nchunks = (nb + per_chunk - 1) / per_chunk;
    const int check_finite = bs > 1;   // block formats have no NaN or Inf (llama.cpp refuses them too)
    int nonfinite = 0;
#pragma omp parallel for schedule(static) if (nb * bs >= PARALLEL_MIN_ELEMS) \
    num_threads(nthreads > 0 ? nthreads : llmb_max_threads())
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t b0 = c * per_chunk, nblk = MIN(per_chunk, nb - b0);
        const float *x = src + b0 * bs;
        if (check_finite && !all_finite(x, nblk * bs)) {
#pragma omp atomic write
            nonfinite = 1;
            continue;
        }
        from_float(x, (uint8_t *)dst + b0 * ts, nblk * bs);
    }
    if (nonfinite) return llmb_fail(LLMB_E_ARG, "quantize: input has NaN or Inf, which %s cannot represent", tt->name);
    return LLMB_OK;
}

llmb_status llmb_quantize_imatrix(int type, const float *src, void *dst, int64_t nrows, int64_t ncols,
                                  const float *imatrix, int nthreads) {
    const llmb_type_traits *tt;
    llmb_status s = check_args("quantize", 1, type, src, dst, nrows, ncols, nthreads, &tt);
    if (s) return s;
    const quant_row_w_fn fn = weighted_table[type];
    if (!imatrix || !fn) return llmb_quantize(type, src, dst, nrows, ncols, nthreads);   // as llama.cpp: ignored
    if (((uintptr_t)imatrix & 3) || !all_finite(imatrix, ncols))
        return llmb_fail(LLMB_E_ARG, "quantize: the importance weights must be %lld finite, 4-byte aligned floats",
                         (long long)ncols);
    const int64_t row_bytes = ncols / tt->blck_size * tt->type_size;
    const int64_t per_chunk = MAX(1, CHUNK_ELEMS / MAX(1, ncols));   // rows per task
    const int64_t nchunks = (nrows + per_chunk - 1) / per_chunk;
    int nonfinite = 0;
#pragma omp parallel for schedule(dynamic) if (nrows * ncols >= PARALLEL_MIN_ELEMS) \
    num_threads(nthreads > 0 ? nthreads : llmb_max_threads())
    for (int64_t c = 0; c < nchunks; c++) {
        const int64_t r0 = c * per_chunk, nr = MIN(per_chunk, nrows - r0);
        if (!all_finite(src + r0 * ncols, nr * ncols)) {
#pragma omp atomic write
            nonfinite = 1;
            continue;
        }
        for (int64_t r = r0; r < r0 + nr; r++) fn(src + r * ncols, (uint8_t *)dst + r * row_bytes, ncols, imatrix);
    }
    if (nonfinite) return llmb_fail(LLMB_E_ARG, "quantize: input has NaN or Inf, which %s cannot represent", tt->name);
    return LLMB_OK;
}
