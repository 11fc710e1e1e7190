// quants_simd_body.h — the x86 row conversions compiled once per instruction set by quants_simd.c (QT: the
// target attribute, QV: the name suffix), in steps of 16 values through four primitives of that level:
//   QV(f16_in16)(x, y)     16 halves to floats into y; 0 (nothing stored) if one is a NaN
//   QV(f16_out16)(x, y)    16 floats to halves into y; 0 (nothing stored) if one is a NaN
//   QV(scale16)(y, q, d)   y[k] = (float)q[k] * d for 16 signed bytes q
//   QV(affine16)(y, q, d, m)  y[k] = d * (float)q[k] - m for 16 unsigned bytes q
// Every value takes the operations of its scalar reference (quants.c) in its order: the same bits at
// each level. A NaN goes through the scalar conversion, which keeps its payload. Include only from
// quants_simd.c.

QT static void QV(dequant_f16)(const void *vx, float *y, int64_t n) {
    const llmb_half *x = vx;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        if (!QV(f16_in16)(x + i, y + i))
            for (int k = 0; k < 16; k++) y[i + k] = llmb_fp16_to_fp32(x[i + k]);
    for (; i < n; i++) y[i] = llmb_fp16_to_fp32(x[i]);
}

QT static void QV(quant_f16)(const float *x, void *vy, int64_t n) {
    llmb_half *y = vy;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        if (!QV(f16_out16)(x + i, y + i))
            for (int k = 0; k < 16; k++) y[i + k] = llmb_fp32_to_fp16(x[i + k]);
    for (; i < n; i++) y[i] = llmb_fp32_to_fp16(x[i]);
}

QT static void QV(dequant_q8_0)(const void *vx, float *y, int64_t n) {
    const llmb_block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        QV(scale16)(y + 0, _mm_loadu_si128((const __m128i *)x[i].qs), d);
        QV(scale16)(y + 16, _mm_loadu_si128((const __m128i *)(x[i].qs + 16)), d);
    }
}

QT static void QV(dequant_q4_0)(const void *vx, float *y, int64_t n) {
    const llmb_block_q4_0 *x = vx;
    const __m128i m4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / LLMB_QK; i++, y += LLMB_QK) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        const __m128i q = _mm_loadu_si128((const __m128i *)x[i].qs);
        QV(scale16)(y + 0, _mm_sub_epi8(_mm_and_si128(q, m4), eight), d);
        QV(scale16)(y + 16, _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight), d);
    }
}

QT static void QV(dequant_q4_K)(const void *vx, float *y, int64_t n) {
    const llmb_block_q4_K *x = vx;
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d), min = llmb_fp16_to_fp32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
            uint8_t sc1, m1, sc2, m2;
            llmb_get_scale_min_k4(is + 0, x[i].scales, &sc1, &m1);
            llmb_get_scale_min_k4(is + 1, x[i].scales, &sc2, &m2);
            for (int h = 0; h < 32; h += 16) {
                const __m128i v = _mm_loadu_si128((const __m128i *)(q + h));
                QV(affine16)(y + h, _mm_and_si128(v, m4), d * sc1, min * m1);
                QV(affine16)(y + 32 + h, _mm_and_si128(_mm_srli_epi16(v, 4), m4), d * sc2, min * m2);
            }
        }
    }
}

QT static void QV(dequant_q6_K)(const void *vx, float *y, int64_t n) {
    const llmb_block_q6_K *x = vx;
    int8_t q[128];
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        const float d = llmb_fp16_to_fp32(x[i].d);
        for (int half = 0; half < 2; half++, y += 128) {
            unpack_q6_K_avx2(x[i].ql + 64 * half, x[i].qh + 32 * half, q);
            const int8_t *sc = x[i].scales + 8 * half;
            for (int o = 0; o < 128; o += 16) QV(scale16)(y + o, _mm_loadu_si128((const __m128i *)(q + o)), d * sc[o / 16]);
        }
    }
}
