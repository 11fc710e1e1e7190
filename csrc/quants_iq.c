// quants_iq.c — the I-quant formats IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M (layouts in
// quants.h, lattices in iq_grids.c): dequantization, bit-identical to the gguf package's (each value
// computed in the order its NumPy code and ggml's dequantize_row_* use), and the scalar reference dots
// against Q8_K activations, ggml's ggml_vec_dot_<type>_q8_K_generic loops operation for operation. The
// AVX2 kernels (vecdot_iq.c) give these dots' bits. llmbench reads these types; it does not write them.
#include "quants.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define F16(h) llmb_fp16_to_fp32(h)
#define SIGN(s, j) (((s) >> (j)) & 1 ? -1.0f : 1.0f)

static uint32_t load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

// ---- dequantization ----

void llmb_dequant_iq2_xxs_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq2_xxs *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t idx = load_u32(&x[i].qs[4 * ib]), aux = load_u32(&x[i].qs[4 * ib + 2]);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
            for (int l = 0; l < 4; l++) {
                const uint8_t *g = llmb_iq2xxs_grid[(idx >> 8 * l) & 255], s = llmb_iq_signs7(aux >> 7 * l);
                for (int j = 0; j < 8; j++) *y++ = db * (float)g[j] * SIGN(s, j);
            }
        }
    }
}

void llmb_dequant_iq2_xs_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq2_xs *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const uint16_t q = x[i].qs[4 * ib + l];
                const float db = d * (0.5f + (float)((x[i].scales[ib] >> 4 * (l / 2)) & 15)) * 0.25f;
                const uint8_t *g = llmb_iq2xs_grid[q & 511], s = llmb_iq_signs7(q >> 9);
                for (int j = 0; j < 8; j++) *y++ = db * (float)g[j] * SIGN(s, j);
            }
    }
}

void llmb_dequant_iq2_s_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq2_s *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const float db = d * (0.5f + (float)((x[i].scales[ib] >> 4 * (l / 2)) & 15)) * 0.25f;
                const uint8_t *g = llmb_iq2s_grid[x[i].qs[4 * ib + l] | ((x[i].qh[ib] >> 2 * l) & 3) << 8];
                const uint8_t s = x[i].qs[32 + 4 * ib + l];
                for (int j = 0; j < 8; j++) *y++ = db * (float)g[j] * SIGN(s, j);
            }
    }
}

void llmb_dequant_iq3_xxs_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq3_xxs *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t aux = load_u32(&x[i].qs[64 + 4 * ib]);
            const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
            for (int l = 0; l < 4; l++) {
                const uint8_t s = llmb_iq_signs7(aux >> 7 * l);
                for (int h = 0; h < 2; h++) {
                    const uint8_t *g = llmb_iq3xxs_grid[x[i].qs[8 * ib + 2 * l + h]];
                    for (int j = 0; j < 4; j++) *y++ = db * (float)g[j] * SIGN(s, 4 * h + j);
                }
            }
        }
    }
}

void llmb_dequant_iq3_s_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq3_s *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float db = d * (float)(1 + 2 * ((x[i].scales[ib / 2] >> 4 * (ib % 2)) & 15));
            for (int k = 0; k < 8; k++) {
                const uint8_t *g = llmb_iq3s_grid[x[i].qs[8 * ib + k] | ((x[i].qh[ib] >> k) & 1) << 8];
                const uint8_t s = x[i].signs[4 * ib + k / 2];
                for (int j = 0; j < 4; j++) *y++ = db * (float)g[j] * SIGN(s, 4 * (k % 2) + j);
            }
        }
    }
}

void llmb_dequant_iq1_s_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq1_s *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = x[i].qh[ib];
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1), delta = qh & 0x8000 ? -LLMB_IQ1_DELTA : LLMB_IQ1_DELTA;
            for (int l = 0; l < 4; l++) {
                const int8_t *g = llmb_iq1s_grid[x[i].qs[4 * ib + l] | ((qh >> 3 * l) & 7) << 8];
                for (int j = 0; j < 8; j++) *y++ = dl * ((float)g[j] + delta);
            }
        }
    }
}

void llmb_dequant_iq1_m_ref(const void *vx, float *y, int64_t n) {
    const llmb_block_iq1_m *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(llmb_iq1_m_d(&x[i]));
        uint16_t sc[4];
        memcpy(sc, x[i].scales, sizeof sc);
        for (int ib = 0; ib < 8; ib++)
            for (int l = 0; l < 4; l++) {
                const int h = x[i].qh[2 * ib + l / 2] >> 4 * (l % 2);
                const float dl = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1);
                const float delta = h & 8 ? -LLMB_IQ1_DELTA : LLMB_IQ1_DELTA;
                const int8_t *g = llmb_iq1s_grid[x[i].qs[4 * ib + l] | (h & 7) << 8];
                for (int j = 0; j < 8; j++) *y++ = dl * ((float)g[j] + delta);
            }
    }
}

// ---- reference dots against Q8_K ----

// sum_j g[j] q8[j] (sign bit j of s: -1) over one group of 8
static int32_t signed8(const uint8_t *g, uint8_t s, const int8_t *q8) {
    int32_t sum = 0;
    for (int j = 0; j < 8; j++) sum += g[j] * q8[j] * ((s >> j) & 1 ? -1 : 1);
    return sum;
}

void llmb_dot_iq2_xxs_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq2_xxs *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(w[i].d) * x[i].d;
        const int8_t *q8 = x[i].qs;
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t idx = load_u32(&w[i].qs[4 * ib]), aux = load_u32(&w[i].qs[4 * ib + 2]);
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi += signed8(llmb_iq2xxs_grid[(idx >> 8 * l) & 255], llmb_iq_signs7(aux >> 7 * l), q8);
            bsum += sumi * (int32_t)(2 * (aux >> 28) + 1);
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void llmb_dot_iq2_xs_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq2_xs *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(w[i].d) * x[i].d;
        const int8_t *q8 = x[i].qs;
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++)
            for (int half = 0; half < 2; half++) {
                int32_t sumi = 0;
                for (int l = 2 * half; l < 2 * half + 2; l++, q8 += 8) {
                    const uint16_t q = w[i].qs[4 * ib + l];
                    sumi += signed8(llmb_iq2xs_grid[q & 511], llmb_iq_signs7(q >> 9), q8);
                }
                bsum += sumi * (2 * ((w[i].scales[ib] >> 4 * half) & 15) + 1);
            }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void llmb_dot_iq2_s_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq2_s *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(w[i].d) * x[i].d;
        const int8_t *q8 = x[i].qs;
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int32_t sumi[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8)
                sumi[l / 2] += signed8(llmb_iq2s_grid[w[i].qs[4 * ib + l] | ((w[i].qh[ib] >> 2 * l) & 3) << 8],
                                       w[i].qs[32 + 4 * ib + l], q8);
            bsum += (1 + 2 * (w[i].scales[ib] & 15)) * sumi[0] + (1 + 2 * (w[i].scales[ib] >> 4)) * sumi[1];
        }
        sumf += d * (float)bsum;
    }
    *s = 0.125f * sumf;
}

void llmb_dot_iq3_xxs_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq3_xxs *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(w[i].d) * x[i].d;
        const int8_t *q8 = x[i].qs;
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t aux = load_u32(&w[i].qs[64 + 4 * ib]);
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint8_t *g1 = llmb_iq3xxs_grid[w[i].qs[8 * ib + 2 * l]];
                const uint8_t *g2 = llmb_iq3xxs_grid[w[i].qs[8 * ib + 2 * l + 1]], sg = llmb_iq_signs7(aux >> 7 * l);
                for (int j = 0; j < 4; j++) {
                    sumi += g1[j] * q8[j] * ((sg >> j) & 1 ? -1 : 1);
                    sumi += g2[j] * q8[j + 4] * ((sg >> (j + 4)) & 1 ? -1 : 1);
                }
            }
            bsum += sumi * (int32_t)(2 * (aux >> 28) + 1);
        }
        sumf += d * (float)bsum;
    }
    *s = 0.25f * sumf;
}

void llmb_dot_iq3_s_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq3_s *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = F16(w[i].d) * x[i].d;
        const int8_t *q8 = x[i].qs;
        int32_t bsum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int32_t sumi = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const uint8_t *g1 = llmb_iq3s_grid[w[i].qs[8 * ib + 2 * l] | ((w[i].qh[ib] >> 2 * l) & 1) << 8];
                const uint8_t *g2 = llmb_iq3s_grid[w[i].qs[8 * ib + 2 * l + 1] | ((w[i].qh[ib] >> (2 * l + 1)) & 1) << 8];
                const uint8_t sg = w[i].signs[4 * ib + l];
                for (int j = 0; j < 4; j++) {
                    sumi += g1[j] * q8[j] * ((sg >> j) & 1 ? -1 : 1);
                    sumi += g2[j] * q8[j + 4] * ((sg >> (j + 4)) & 1 ? -1 : 1);
                }
            }
            bsum += sumi * (int32_t)(2 * ((w[i].scales[ib / 2] >> 4 * (ib % 2)) & 15) + 1);
        }
        sumf += d * (float)bsum;
    }
    *s = sumf;
}

void llmb_dot_iq1_s_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq1_s *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const int8_t *q8 = x[i].qs;
        int sumi = 0, sumi1 = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = w[i].qh[ib];
            const int ls = 2 * ((qh >> 12) & 7) + 1, delta = qh & 0x8000 ? -1 : 1;
            int lsum = 0;
            for (int l = 0; l < 4; l++, q8 += 8) {
                const int8_t *g = llmb_iq1s_grid[w[i].qs[4 * ib + l] | ((qh >> 3 * l) & 7) << 8];
                for (int j = 0; j < 8; j++) lsum += q8[j] * g[j];
            }
            sumi += ls * lsum;
            sumi1 += ls * delta * (x[i].bsums[2 * ib] + x[i].bsums[2 * ib + 1]);
        }
        sumf += F16(w[i].d) * x[i].d * ((float)sumi + LLMB_IQ1_DELTA * (float)sumi1);
    }
    *s = sumf;
}

void llmb_dot_iq1_m_ref(int64_t n, float *s, const void *vw, const void *vx) {
    const llmb_block_iq1_m *w = vw;
    const llmb_block_q8_K *x = vx;
    float sumf = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const int8_t *q8 = x[i].qs;
        uint16_t sc[4];
        memcpy(sc, w[i].scales, sizeof sc);
        int sumi1 = 0, sumi2 = 0;
        for (int ib = 0; ib < 8; ib++) {
            int sum1[2] = {0, 0}, sum2[2] = {0, 0};
            for (int l = 0; l < 4; l++, q8 += 8) {
                const int h = w[i].qh[2 * ib + l / 2] >> 4 * (l % 2);
                const int8_t *g = llmb_iq1s_grid[w[i].qs[4 * ib + l] | (h & 7) << 8];
                int lsum1 = 0, lsum2 = 0;
                for (int j = 0; j < 8; j++) {
                    lsum1 += q8[j] * g[j];
                    lsum2 += q8[j];
                }
                sum1[l / 2] += lsum1;
                sum2[l / 2] += lsum2 * (h & 8 ? -1 : 1);
            }
            const int ls1 = 2 * ((sc[ib / 2] >> 6 * (ib % 2)) & 7) + 1, ls2 = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
            sumi1 += sum1[0] * ls1 + sum1[1] * ls2;
            sumi2 += sum2[0] * ls1 + sum2[1] * ls2;
        }
        sumf += F16(llmb_iq1_m_d(&w[i])) * x[i].d * ((float)sumi1 + LLMB_IQ1_DELTA * (float)sumi2);
    }
    *s = sumf;
}
