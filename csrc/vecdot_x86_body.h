// vecdot_x86_body.h — the x86 kernel bodies, compiled once per instruction set by vecdot_x86.c (VD_T: the
// target attribute, VD: the name suffix, DOTACC: the integer multiply-add of 4 unsigned by 4 signed bytes
// per 32-bit lane). Not a header of its own: include it only from there.

// Every body: y[c*ldy + r] = dot(row r, token c) for r < NR, c < NC (constants once inlined).
// the interleaved kernels of vecdot_il8.c do for 8 rows at once: each block's exact integer sum, then its
// float term in the reference's order, block after block (Q4_0 (s d_w) d_x, Q5_0 (d_w d_x) s, Q4_1 / Q5_1
// (d_w d_x) s + m_w s_x). Signed weights (Q4_0 -8..7, Q5_0 -16..15) as |w| against x * sign(w), unsigned
// ones (Q4_1 / Q5_1 0..31) as they are; four blocks at a time, their lane sums reduced together by two
// rounds of hadd (as q8_0_body).
INLINE VD_T void VD(legacy_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                                 float *y, int64_t ldy, const int NR, const int NC) {
    const int one = type == LLMB_TYPE_Q4_1 || type == LLMB_TYPE_Q5_1;   // x d s (Q8_1) and a min
    const size_t wb = type == LLMB_TYPE_Q4_0   ? sizeof(llmb_block_q4_0)
                      : type == LLMB_TYPE_Q5_0 ? sizeof(llmb_block_q5_0)
                      : type == LLMB_TYPE_Q4_1 ? sizeof(llmb_block_q4_1)
                                               : sizeof(llmb_block_q5_1);
    const size_t xb_bytes = one ? sizeof(llmb_block_q8_1) : sizeof(llmb_block_q8_0);
    const int64_t nb = n / LLMB_QK;
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib += 4) {
        const int nk = nb - ib < 4 ? (int)(nb - ib) : 4;
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + ib * wb;
            prefetch_w(blk, 4 * wb);
            __m256i wq[4], wa[4];
            float wd[4], wm[4];
            for (int e = 0; e < 4; e++) {
                const uint8_t *b = blk + e * wb;
                wq[e] = e >= nk ? _mm256_setzero_si256() : one ? legacy1_weights(type, b) : legacy0_weights(type, b);
                wa[e] = one ? wq[e] : _mm256_abs_epi8(wq[e]);
                wd[e] = e < nk ? half_at(b) : 0.0f;
                wm[e] = e < nk && one ? half_at(b + 2) : 0.0f;
            }
            for (int c = 0; c < NC; c++) {
                const uint8_t *xb = x + c * xs + ib * xb_bytes;
                __m256i p[4];
                for (int e = 0; e < 4; e++) {
                    const uint8_t *xe = xb + e * xb_bytes;
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)(xe + (one ? 8 : 2)));
                    p[e] = e < nk ? DOTACC(_mm256_setzero_si256(), wa[e], one ? xq : _mm256_sign_epi8(xq, wq[e]))
                                  : _mm256_setzero_si256();
                }
                const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                int32_t is[4];
                _mm_storeu_si128((__m128i *)is, _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
                for (int e = 0; e < nk; e++) {
                    const uint8_t *xe = xb + e * xb_bytes;
                    if (one) {
                        const llmb_block_q8_1 *x1 = (const llmb_block_q8_1 *)xe;
                        acc[r][c] += (wd[e] * x1->d) * (float)is[e] + wm[e] * x1->s;
                    } else if (type == LLMB_TYPE_Q4_0) {
                        acc[r][c] += (float)is[e] * wd[e] * half_at(xe);
                    } else {
                        acc[r][c] += (wd[e] * half_at(xe)) * (float)is[e];
                    }
                }
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q8_0 x Q8_0: the reference's arithmetic to the bit (vecdot.c, dot_q8_0_ref): each block's exact
// integer sum, then sum += (float)isum * (d_w * d_x) block after block (no fma: -std=c11 does not
// contract), which the interleaved kernel can do for 16 rows at once (q8_0_il_vnni512) where per-lane
// float sums would cost a conversion, a multiply and an fma per vpdpbusd. Four blocks at a time: |w|
// against x * sign(w), the four lane sums reduced together by two rounds of hadd.
INLINE VD_T void VD(q8_0_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                               float *y, int64_t ldy, const int NR, const int NC) {
    const int64_t nb = n / LLMB_QK;
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib += 4) {
        const int nk = nb - ib < 4 ? (int)(nb - ib) : 4;
        for (int r = 0; r < NR; r++) {
            const llmb_block_q8_0 *wb = (const llmb_block_q8_0 *)(w + r * ws) + ib;
            prefetch_w((const uint8_t *)wb, 4 * sizeof *wb);
            __m256i wq[4], wa[4];
            float wd[4];
            for (int e = 0; e < 4; e++) {
                wq[e] = e < nk ? _mm256_loadu_si256((const __m256i *)wb[e].qs) : _mm256_setzero_si256();
                wa[e] = _mm256_abs_epi8(wq[e]);
                wd[e] = e < nk ? half_at((const uint8_t *)&wb[e].d) : 0.0f;
            }
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_0 *xb = (const llmb_block_q8_0 *)(x + c * xs) + ib;
                __m256i p[4];
                for (int e = 0; e < 4; e++)
                    p[e] = e < nk ? DOTACC(_mm256_setzero_si256(), wa[e],
                                           _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)xb[e].qs), wq[e]))
                                  : _mm256_setzero_si256();
                const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                int32_t is[4];
                _mm_storeu_si128((__m128i *)is, _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
                for (int e = 0; e < nk; e++) acc[r][c] += (float)is[e] * (wd[e] * half_at((const uint8_t *)&xb[e].d));
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q8_K x Q8_K
INLINE VD_T void VD(q8_K_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                               float *y, int64_t ldy, const int NR, const int NC) {
    __m256 acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const llmb_block_q8_K *b = (const llmb_block_q8_K *)(w + r * ws) + i;
            prefetch_w((const uint8_t *)b, sizeof *b);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                __m256i sumi = _mm256_setzero_si256();
                for (int k = 0; k < LLMB_QK_K; k += 32) {
                    const __m256i wq = _mm256_loadu_si256((const __m256i *)(b->qs + k));
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)(xb->qs + k));
                    sumi = DOTACC(sumi, _mm256_abs_epi8(wq), _mm256_sign_epi8(xq, wq));
                }
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * xb->d), _mm256_cvtepi32_ps(sumi), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = hsum_ps(acc[r][c]);
}

// Q4_K, Q5_K x Q8_K: per 32 elements maddubs(q, x) weighted by the 6-bit scale (madd), the mins
// against the activation's bsums; per super-block both reduced to exact integers S = sum sc q x and
// M = sum min bsum, then one float accumulator per output: acc = fma(d dx, S, acc), then
// acc = fma(-(dmin dx), M, acc) (the VNNI panel does the same for 16 outputs in the lanes of a vector)
INLINE VD_T void VD(q45_K_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                                float *y, int64_t ldy, const int NR, const int NC) {
    const int q5 = type == LLMB_TYPE_Q5_K;
    const size_t wb = q5 ? sizeof(llmb_block_q5_K) : sizeof(llmb_block_q4_K);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + i * wb;
            prefetch_w(blk, wb);
            const llmb_block_q4_K *b = (const llmb_block_q4_K *)blk;   // Q5_K starts the same way
            const uint8_t *qs = q5 ? ((const llmb_block_q5_K *)blk)->qs : b->qs;
            uint32_t u[4];   // 8 scale bytes, then 8 min bytes (ggml's kmask unpacking)
            memcpy(u, b->scales, 12);
            u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
            const uint32_t uaux = u[1] & 0x3f3f3f3f;
            u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
            u[2] = uaux;
            u[0] &= 0x3f3f3f3f;
            const __m256i ms = _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
            const __m256i sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(ms));   // 8 int16 scales, twice
            const __m128i mins = _mm256_extracti128_si256(ms, 1);
            const float wd = half_at(blk), wdmin = half_at(blk + 2);
            const __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)((const llmb_block_q5_K *)blk)->qh)
                                  : _mm256_setzero_si256();
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
                const __m128i prod = _mm_madd_epi16(mins, _mm_hadd_epi16(_mm256_castsi256_si128(bs),
                                                                         _mm256_extracti128_si256(bs, 1)));
                __m256i sumi = _mm256_setzero_si256();
                for (int j = 0; j < 4; j++) {
                    const __m256i bits = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
                    __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
                    if (q5) {
                        const __m256i bl = _mm256_set1_epi8((char)(1 << (2 * j))), bh = _mm256_set1_epi8((char)(2 << (2 * j)));
                        const __m256i sixteen = _mm256_set1_epi8(16);
                        lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bl), bl), sixteen));
                        hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, bh), bh), sixteen));
                    }
                    const __m256i sl = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(((4 * j + 1) << 8) | (4 * j))));
                    const __m256i sh = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(((4 * j + 3) << 8) | (4 * j + 2))));
                    const __m256i pl = _mm256_madd_epi16(sl, _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(xb->qs + 64 * j))));
                    const __m256i ph = _mm256_madd_epi16(sh, _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xb->qs + 64 * j + 32))));
                    sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
                }
                acc[r][c] = fmaf(wd * xb->d, (float)hsum_epi32(sumi), acc[r][c]);
                acc[r][c] = fmaf(-(wdmin * xb->d), (float)hsum4_epi32(prod), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q6_K x Q8_K: maddubs(q, x) - maddubs(32, x) per 32 elements, weighted by two 8-bit scales (madd);
// per super-block the exact integer S = sum sc (q - 32) x, then one fma per output (as Q4_K)
INLINE VD_T void VD(q6_K_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                               float *y, int64_t ldy, const int NR, const int NC) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const llmb_block_q6_K *b = (const llmb_block_q6_K *)(w + r * ws) + i;
            prefetch_w((const uint8_t *)b, sizeof *b);
            const __m128i scales = _mm_loadu_si128((const __m128i *)b->scales);
            const float wd = half_at((const uint8_t *)&b->d);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                __m256i sumi = _mm256_setzero_si256();
                for (int half = 0; half < 2; half++) {
                    const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
                    const int8_t *q8 = xb->qs + 128 * half;
                    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
                    const __m256i l32 = _mm256_loadu_si256((const __m256i *)(ql + 32));
                    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
                    __m256i q[4];
                    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
                    q[1] = _mm256_or_si256(_mm256_and_si256(l32, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
                    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
                    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l32, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
                    for (int k = 0; k < 4; k++) {
                        const __m256i xq = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                        const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q[k], xq), _mm256_maddubs_epi16(m32, xq));
                        const long long s0 = 8 * half + 2 * k;   // the sub-blocks of 16 of these 32 elements
                        const __m128i shuf = _mm_set_epi64x(0x0101010101010101LL * (s0 + 1), 0x0101010101010101LL * s0);
                        const __m256i sck = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, shuf));
                        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sck, p));
                    }
                }
                acc[r][c] = fmaf(wd * xb->d, (float)hsum_epi32(sumi), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q2_K x Q8_K: the reference's arithmetic to the bit (vecdot.c, dot_q2_K_ref): per 32 elements maddubs(q, x)
// (q 0..3) weighted by the two 4-bit scales of its sub-blocks of 16 (madd), the mins against the activation's
// bsums; per super-block the exact integers isum and summs, then sum += dall isum - dmin summs
INLINE VD_T void VD(q2_K_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                               float *y, int64_t ldy, const int NR, const int NC) {
    const __m256i m3 = _mm256_set1_epi8(3);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const llmb_block_q2_K *b = (const llmb_block_q2_K *)(w + r * ws) + i;
            prefetch_w((const uint8_t *)b, sizeof *b);
            const __m128i sc8 = _mm_loadu_si128((const __m128i *)b->scales);
            const __m128i scl = _mm_and_si128(sc8, _mm_set1_epi8(0x0F));
            const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), _mm_set1_epi8(0x0F)));
            const float wd = half_at((const uint8_t *)&b->d), wdmin = half_at((const uint8_t *)&b->dmin);
            __m256i q[8], sck[8];   // k = 4 h + s: the values 128 h + 32 s + 0..31 and their two sub-blocks' scales
            for (int h = 0; h < 2; h++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
                for (int sh = 0; sh < 4; sh++) {
                    const int k = 4 * h + sh;
                    q[k] = sh ? _mm256_and_si256(_mm256_srli_epi16(bits, 2 * sh), m3) : _mm256_and_si256(bits, m3);
                    const __m128i shuf = _mm_set_epi64x(0x0101010101010101LL * (2 * k + 1), 0x0101010101010101LL * (2 * k));
                    sck[k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scl, shuf));
                }
            }
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                const int summs = hsum_epi32(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)xb->bsums)));
                __m256i sumi = _mm256_setzero_si256();
                for (int k = 0; k < 8; k++) {
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * k));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sck[k], _mm256_maddubs_epi16(q[k], xq)));
                }
                const float dall = xb->d * wd, dmin = xb->d * wdmin;
                acc[r][c] += dall * (float)hsum_epi32(sumi) - dmin * (float)summs;
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q3_K x Q8_K: the values plus 4, u = q + 4 h (0..7), as maddubs(u, x) weighted by the signed 6-bit scales
// (madd), less 4 sum_j sc_j bsum_j; per super-block the exact integer S = sum sc (q - 4 !h) x, then one fma
// per output (as Q6_K)
INLINE VD_T void VD(q3_K_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                               float *y, int64_t ldy, const int NR, const int NC) {
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const llmb_block_q3_K *b = (const llmb_block_q3_K *)(w + r * ws) + i;
            prefetch_w((const uint8_t *)b, sizeof *b);
            int8_t scb[16];
            for (int j = 0; j < 16; j++) scb[j] = (int8_t)llmb_q3_K_scale(j, b->scales);
            const __m128i sc8 = _mm_loadu_si128((const __m128i *)scb);
            const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            const float wd = half_at((const uint8_t *)&b->d);
            const __m256i hm = _mm256_loadu_si256((const __m256i *)b->hmask);
            __m256i u[8], sck[8];   // k = 4 h + s: the values 32 k + 0..31 plus 4, their sub-blocks' scales
            for (int h = 0; h < 2; h++) {
                const __m256i bits = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
                for (int sh = 0; sh < 4; sh++) {
                    const int k = 4 * h + sh;
                    const __m256i lo = sh ? _mm256_and_si256(_mm256_srli_epi16(bits, 2 * sh), m3) : _mm256_and_si256(bits, m3);
                    const __m256i hb = _mm256_set1_epi8((char)(1 << k));
                    u[k] = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, hb), hb), four));
                    const __m128i shuf = _mm_set_epi64x(0x0101010101010101LL * (2 * k + 1), 0x0101010101010101LL * (2 * k));
                    sck[k] = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, shuf));
                }
            }
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                const __m256i corr = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)xb->bsums));
                __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 2));
                for (int k = 0; k < 8; k++) {
                    const __m256i xq = _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * k));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(sck[k], _mm256_maddubs_epi16(u[k], xq)));
                }
                acc[r][c] = fmaf(wd * xb->d, (float)hsum_epi32(sumi), acc[r][c]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// the 32 values of 16 bytes of IQ4_NL / IQ4_XS indices (kv: llmb_kvalues_iq4nl in both lanes)
INLINE VD_T __m256i VD(iq4_values)(const uint8_t *qs, const __m256i kv) { return _mm256_shuffle_epi8(kv, nibbles_32(qs)); }

// IQ4_NL x Q8_0: the reference's arithmetic to the bit (vecdot.c, dot_iq4_nl_ref), as q8_0_body: each block's
// exact integer sum (|w| against x * sign(w)), then sum += (d_x d_w) * isum block after block
INLINE VD_T void VD(iq4_nl_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                                 float *y, int64_t ldy, const int NR, const int NC) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)llmb_kvalues_iq4nl));
    const int64_t nb = n / LLMB_QK;
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib += 4) {
        const int nk = nb - ib < 4 ? (int)(nb - ib) : 4;
        for (int r = 0; r < NR; r++) {
            const llmb_block_iq4_nl *wb = (const llmb_block_iq4_nl *)(w + r * ws) + ib;
            prefetch_w((const uint8_t *)wb, 4 * sizeof *wb);
            __m256i wq[4], wa[4];
            float wd[4];
            for (int e = 0; e < 4; e++) {
                wq[e] = e < nk ? VD(iq4_values)(wb[e].qs, kv) : _mm256_setzero_si256();
                wa[e] = _mm256_abs_epi8(wq[e]);
                wd[e] = e < nk ? half_at((const uint8_t *)&wb[e].d) : 0.0f;
            }
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_0 *xb = (const llmb_block_q8_0 *)(x + c * xs) + ib;
                __m256i p[4];
                for (int e = 0; e < 4; e++)
                    p[e] = e < nk ? DOTACC(_mm256_setzero_si256(), wa[e],
                                           _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)xb[e].qs), wq[e]))
                                  : _mm256_setzero_si256();
                const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                int32_t is[4];
                _mm_storeu_si128((__m128i *)is, _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
                for (int e = 0; e < nk; e++) acc[r][c] += (half_at((const uint8_t *)&xb[e].d) * wd[e]) * (float)is[e];
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// IQ4_XS x Q8_K: the reference's arithmetic to the bit (vecdot.c, dot_iq4_xs_ref): each sub-block's exact
// integer sum (|w| against x * sign(w)), the eight reduced together by hadd, then sum += (d_w d_x ls_j) * isum_j
// sub-block after sub-block
INLINE VD_T void VD(iq4_xs_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                                 float *y, int64_t ldy, const int NR, const int NC) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)llmb_kvalues_iq4nl));
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const llmb_block_iq4_xs *b = (const llmb_block_iq4_xs *)(w + r * ws) + i;
            prefetch_w((const uint8_t *)b, sizeof *b);
            __m256i wq[8], wa[8];
            float ls[8];
            for (int j = 0; j < 8; j++) {
                wq[j] = VD(iq4_values)(b->qs + 16 * j, kv);
                wa[j] = _mm256_abs_epi8(wq[j]);
                ls[j] = (float)llmb_iq4_xs_scale(j, b);
            }
            const float wd = half_at((const uint8_t *)&b->d);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                __m256i p[8];
                for (int j = 0; j < 8; j++)
                    p[j] = DOTACC(_mm256_setzero_si256(), wa[j],
                                  _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(xb->qs + 32 * j)), wq[j]));
                // lane l of h: sub-block l % 4 + 4 (l >= 4) of the lower / upper 128 bits: fold the halves
                const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
                int32_t is[8];
                _mm_storeu_si128((__m128i *)is, _mm_add_epi32(_mm256_castsi256_si128(h0), _mm256_extracti128_si256(h0, 1)));
                _mm_storeu_si128((__m128i *)(is + 4), _mm_add_epi32(_mm256_castsi256_si128(h1), _mm256_extracti128_si256(h1, 1)));
                const float d4d8 = wd * xb->d;
                for (int j = 0; j < 8; j++) acc[r][c] += (d4d8 * ls[j]) * (float)is[j];
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// F32, F16, BF16 x F32: two 8-float accumulators per output over 16 elements, then 8, then scalars
INLINE VD_T void VD(float_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                                float *y, int64_t ldy, const int NR, const int NC) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    __m256 acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C][2];
    float tail[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps(), tail[r][c] = 0.0f;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int r = 0; r < NR; r++) {
            if (i % 32 == 0) prefetch_w(w + r * ws + i * es, 32 * es);
            const __m256 w0 = load_w8(type, w + r * ws + i * es), w1 = load_w8(type, w + r * ws + (i + 8) * es);
            for (int c = 0; c < NC; c++) {
                const float *xc = (const float *)(x + c * xs) + i;
                acc[r][c][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xc), acc[r][c][0]);
                acc[r][c][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xc + 8), acc[r][c][1]);
            }
        }
    for (; i + 8 <= n; i += 8)
        for (int r = 0; r < NR; r++) {
            const __m256 w0 = load_w8(type, w + r * ws + i * es);
            for (int c = 0; c < NC; c++)
                acc[r][c][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps((const float *)(x + c * xs) + i), acc[r][c][0]);
        }
    for (; i < n; i++)
        for (int r = 0; r < NR; r++)
            for (int c = 0; c < NC; c++) tail[r][c] += w_scalar(type, w + r * ws + i * es) * ((const float *)(x + c * xs))[i];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = hsum_ps(_mm256_add_ps(acc[r][c][0], acc[r][c][1])) + tail[r][c];
}

GEN(q4_0, VD(legacy_body), LLMB_TYPE_Q4_0)
GEN(q5_0, VD(legacy_body), LLMB_TYPE_Q5_0)
GEN(q8_0, VD(q8_0_body), LLMB_TYPE_Q8_0)
GEN(q4_1, VD(legacy_body), LLMB_TYPE_Q4_1)
GEN(q5_1, VD(legacy_body), LLMB_TYPE_Q5_1)
GEN(q4_K, VD(q45_K_body), LLMB_TYPE_Q4_K)
GEN(q5_K, VD(q45_K_body), LLMB_TYPE_Q5_K)
GEN(q6_K, VD(q6_K_body), LLMB_TYPE_Q6_K)
GEN(q8_K, VD(q8_K_body), LLMB_TYPE_Q8_K)
GEN(q2_K, VD(q2_K_body), LLMB_TYPE_Q2_K)
GEN(q3_K, VD(q3_K_body), LLMB_TYPE_Q3_K)
GEN(iq4_nl, VD(iq4_nl_body), LLMB_TYPE_IQ4_NL)
GEN(iq4_xs, VD(iq4_xs_body), LLMB_TYPE_IQ4_XS)
GEN(f32, VD(float_body), LLMB_TYPE_F32)
GEN(f16, VD(float_body), LLMB_TYPE_F16)
GEN(bf16, VD(float_body), LLMB_TYPE_BF16)
