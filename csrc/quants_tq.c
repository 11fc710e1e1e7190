// quants_tq.c — the ternary formats TQ1_0 and TQ2_0 (BitNet b1.58, TriLM), the binary Q1_0 and the FP4 formats
// MXFP4 and NVFP4:
// dequantization and the scalar reference dot products, ggml's dequantize_row_<type> and
// ggml_vec_dot_<type>_q8_<K|0>_generic loops operation for operation (block layouts: quants.h). The engine
// runs these types but never quantizes to them. Their SIMD kernels are in vecdot_tq.c.
// Tested by tests/test_quant.py (dequantization bit-identical to the gguf package on random blocks; Q1_0, which
// gguf 0.19 does not decode, against its one-line definition),
// csrc/tests/test_vecdot.c and tests/test_vecdot.py (dots against float64 and the SIMD kernels against these).
#include "quants.h"

#define F16(h) llmb_fp16_to_fp32(h)

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};

// base-3 digit k of a TQ1_0 byte: 0, 1 or 2
static inline int tq1_digit(uint8_t b, int k) {
    const uint8_t q = (uint8_t)(b * pow3[k]);
    return (q * 3) >> 8;
}

// ---- dequantization ----

void llmb_dequant_tq1_0_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_tq1_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 32; m++) *y++ = (float)(tq1_digit(x[i].qs[m], k) - 1) * d;
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 16; m++) *y++ = (float)(tq1_digit(x[i].qs[32 + m], k) - 1) * d;
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) *y++ = (float)(tq1_digit(x[i].qh[j], k) - 1) * d;
    }
}

void llmb_dequant_tq2_0_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_tq2_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++) *y++ = (float)(((x[i].qs[32 * h + m] >> (2 * l)) & 3) - 1) * d;
    }
}

void llmb_dequant_mxfp4_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_mxfp4 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_MXFP4; i++, y += LLMB_QK_MXFP4) {
        const float d = llmb_e8m0_half(x[i].e);
        for (int j = 0; j < LLMB_QK_MXFP4 / 2; j++) {
            y[j] = llmb_kvalues_mxfp4[x[i].qs[j] & 0xF] * d;
            y[j + LLMB_QK_MXFP4 / 2] = llmb_kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

void llmb_dequant_nvfp4_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_nvfp4 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_NVFP4; i++)
        for (int s = 0; s < LLMB_QK_NVFP4 / LLMB_QK_NVFP4_SUB; s++, y += LLMB_QK_NVFP4_SUB) {
            const float d = llmb_ue4m3_half(x[i].d[s]);
            const uint8_t *qs = x[i].qs + s * (LLMB_QK_NVFP4_SUB / 2);
            for (int j = 0; j < LLMB_QK_NVFP4_SUB / 2; j++) {
                y[j] = llmb_kvalues_mxfp4[qs[j] & 0xF] * d;
                y[j + LLMB_QK_NVFP4_SUB / 2] = llmb_kvalues_mxfp4[qs[j] >> 4] * d;
            }
        }
}

// ---- reference dots ----

// TQ1_0 x Q8_K (ggml_vec_dot_tq1_0_q8_K_generic): one exact integer sum per super-block, then
// sumf += (float)sum * (d_w d_x)
void llmb_dot_tq1_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_tq1_0 *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const int8_t *q8 = x[i].qs;
        int sum = 0;
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 32; m++) sum += (tq1_digit(w[i].qs[m], k) - 1) * q8[32 * k + m];
        for (int k = 0; k < 5; k++)
            for (int m = 0; m < 16; m++) sum += (tq1_digit(w[i].qs[32 + m], k) - 1) * q8[160 + 16 * k + m];
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) sum += (tq1_digit(w[i].qh[j], k) - 1) * q8[240 + 4 * k + j];
        sumf += (float)sum * (F16(w[i].d) * x[i].d);
    }
    *s = sumf;
}

// TQ2_0 x Q8_K (ggml_vec_dot_tq2_0_q8_K_generic): sumf += (float)sumi * (d_x d_w) per super-block
void llmb_dot_tq2_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_tq2_0 *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 4; l++)
                for (int m = 0; m < 32; m++)
                    sumi += x[i].qs[128 * h + 32 * l + m] * (((w[i].qs[32 * h + m] >> (2 * l)) & 3) - 1);
        const float d = x[i].d * F16(w[i].d);
        sumf += (float)sumi * d;
    }
    *s = sumf;
}

// MXFP4 x Q8_0 (ggml_vec_dot_mxfp4_q8_0_generic): per block sumf += (d_x e8m0_half(e)) * sumi
void llmb_dot_mxfp4_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_mxfp4 *w = vw;
    const llmb_block_q8_0 *x = vx;
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / LLMB_QK_MXFP4; ib++) {
        const float d = F16(x[ib].d) * llmb_e8m0_half(w[ib].e);
        int sumi1 = 0, sumi2 = 0;
        for (int j = 0; j < LLMB_QK_MXFP4 / 2; j++) {
            sumi1 += x[ib].qs[j] * llmb_kvalues_mxfp4[w[ib].qs[j] & 0xF];
            sumi2 += x[ib].qs[j + LLMB_QK_MXFP4 / 2] * llmb_kvalues_mxfp4[w[ib].qs[j] >> 4];
        }
        sumf += d * (float)(sumi1 + sumi2);
    }
    *s = sumf;
}

// NVFP4 x Q8_0 (ggml_vec_dot_nvfp4_q8_0_generic): a super-block of 64 is two Q8_0 blocks; per sub-block of 16
// sumf += (d_x ue4m3_half(d_s)) * sumi
void llmb_dot_nvfp4_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_nvfp4 *w = vw;
    const llmb_block_q8_0 *x = vx;
    float sumf = 0.0f;
    for (int64_t ib = 0; ib < n / LLMB_QK_NVFP4; ib++)
        for (int sb = 0; sb < LLMB_QK_NVFP4 / LLMB_QK_NVFP4_SUB; sb++) {
            const float d = llmb_ue4m3_half(w[ib].d[sb]);
            const llmb_block_q8_0 *xb = &x[2 * ib + sb / 2];
            const int8_t *q8 = xb->qs + (sb % 2) * LLMB_QK_NVFP4_SUB;
            const float dy = F16(xb->d);
            int sumi_lo = 0, sumi_hi = 0;
            for (int j = 0; j < LLMB_QK_NVFP4_SUB / 2; j++) {
                const uint8_t q = w[ib].qs[sb * (LLMB_QK_NVFP4_SUB / 2) + j];
                sumi_lo += q8[j] * llmb_kvalues_mxfp4[q & 0xF];
                sumi_hi += q8[j + LLMB_QK_NVFP4_SUB / 2] * llmb_kvalues_mxfp4[q >> 4];
            }
            sumf += dy * d * (float)(sumi_lo + sumi_hi);
        }
    *s = sumf;
}

void llmb_dequant_q1_0_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_q1_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK1_0; i++) {
        const float d = F16(x[i].d);
        for (int j = 0; j < LLMB_QK1_0; j++) *y++ = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}

// Q1_0 x Q8_0 (ggml_vec_dot_q1_0_q8_0_generic): a block of 128 is four Q8_0 blocks; per block
// sumi = sum over them of d_x * (float)sum(+-q), then sumf += d_w * sumi
void llmb_dot_q1_0_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_q1_0 *w = vw;
    const llmb_block_q8_0 *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK1_0; i++) {
        float sumi = 0.0f;
        for (int k = 0; k < 4; k++) {
            const llmb_block_q8_0 *xb = &x[4 * i + k];
            int sumi_block = 0;
            for (int j = 0; j < LLMB_QK; j++)
                sumi_block += (w[i].qs[4 * k + j / 8] >> (j % 8)) & 1 ? xb->qs[j] : -xb->qs[j];
            sumi += F16(xb->d) * (float)sumi_block;
        }
        sumf += F16(w[i].d) * sumi;
    }
    *s = sumf;
}
