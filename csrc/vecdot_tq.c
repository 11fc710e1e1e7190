// vecdot_tq.c — AVX2 dot products and 4 x 4 tiles of the ternary formats TQ1_0 / TQ2_0 (x Q8_K), the FP4
// formats MXFP4 / NVFP4 and the binary Q1_0 (x Q8_0), installed at the AVX2 level (and so at the AVX-512 level,
// which starts from the AVX2 table). Each body computes an NR x NC tile and the single dot is its 1 x 1 tile (vecdot_impl.h, GEN), so
// every output goes through the same operation sequence whatever the batch. All five give the reference's bits
// (quants_tq.c): the integer sums are exact and the float terms are added in the reference's order.
// Tested by csrc/tests/test_vecdot.c (bit-identical to the reference, tiles and matmuls to the single dot) and
// tests/test_vecdot.py (against NumPy).
#include "simd_x86.h"

#if defined(__x86_64__) && defined(__GNUC__)

#define VD_T AVX2
#define VD(f) f##_avx2
#define DOTACC(acc, u, s) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))

// ---- ternary: exact sum of t x (t in 0..3 unsigned against Q8_K's signed x), minus the sum of x (its bsums) ----

// The base-3 digit of each byte of v selected by the power of 3 in the same byte of mul: (uint8_t)(b * mul) * 3 >> 8
// (0..2), even and odd bytes multiplied in 16-bit lanes apart so no carry crosses a byte
AVX2 INLINE __m256i tq1_digits(const __m256i v, const __m256i mul) {
    const __m256i lo8 = _mm256_set1_epi16(0x00FF), three = _mm256_set1_epi16(3);
    const __m256i qe = _mm256_slli_epi16(_mm256_mullo_epi16(_mm256_and_si256(v, lo8), _mm256_and_si256(mul, lo8)), 8);
    const __m256i qo = _mm256_slli_epi16(_mm256_mullo_epi16(_mm256_srli_epi16(v, 8), _mm256_srli_epi16(mul, 8)), 8);
    return _mm256_or_si256(_mm256_mulhi_epu16(qe, three), _mm256_slli_epi16(_mm256_mulhi_epu16(qo, three), 8));
}

// the 256 digits t of a TQ1_0 block in element order, 32 per vector
AVX2 INLINE void tq1_values(const llmb_block_tq1_0 *b, __m256i t[8]) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)b->qs);
    static const uint8_t p[5] = {1, 3, 9, 27, 81};
    for (int k = 0; k < 5; k++) t[k] = tq1_digits(a, _mm256_set1_epi8((char)p[k]));   // elements 32 k + m
    const __m128i q16 = _mm_loadu_si128((const __m128i *)(b->qs + 32));
    uint32_t qh;
    memcpy(&qh, b->qh, 4);
    const __m256i bb = _mm256_set_m128i(q16, q16);
    // elements 160 + 16 k + m: digits 0, 1 (2, 3) of the 16 bytes in the low, high lane
    t[5] = tq1_digits(bb, _mm256_set_m128i(_mm_set1_epi8(3), _mm_set1_epi8(1)));
    t[6] = tq1_digits(bb, _mm256_set_m128i(_mm_set1_epi8(27), _mm_set1_epi8(9)));
    // elements 224 + m: digit 4 of the 16 bytes; 240 + 4 k + j: digit k of qh[j]
    t[7] = tq1_digits(_mm256_set_m128i(_mm_set1_epi32((int)qh), q16),
                      _mm256_set_m128i(_mm_set_epi32(0x1B1B1B1B, 0x09090909, 0x03030303, 0x01010101), _mm_set1_epi8(81)));
}

// the 256 values t (0..3) of a TQ2_0 block in element order
AVX2 INLINE void tq2_values(const llmb_block_tq2_0 *b, __m256i t[8]) {
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * h));
        for (int l = 0; l < 4; l++) t[4 * h + l] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), _mm256_set1_epi8(3));
    }
}

// sum over the block of (t - 1) x, exactly: t against x, then minus the 16 bsums
AVX2 INLINE int32_t tq_isum(const __m256i t[8], const llmb_block_q8_K *xb) {
    __m256i acc = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) acc = DOTACC(acc, t[k], _mm256_loadu_si256((const __m256i *)(xb->qs + 32 * k)));
    const __m256i bs = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)xb->bsums), _mm256_set1_epi16(1));
    return hsum_epi32(_mm256_sub_epi32(acc, bs));
}

// TQ1_0 / TQ2_0 x Q8_K: per super-block sum += (float)isum * (d_w d_x) (TQ1_0) or * (d_x d_w) (TQ2_0), the
// references' products (the same value either way: one rounding of the same two factors)
INLINE VD_T void VD(tq_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                             float *y, int64_t ldy, const int NR, const int NC) {
    const size_t wb = type == LLMB_TYPE_TQ1_0 ? sizeof(llmb_block_tq1_0) : sizeof(llmb_block_tq2_0);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + i * wb;
            prefetch_w(blk, wb);
            __m256i t[8];
            float wd;
            if (type == LLMB_TYPE_TQ1_0) {
                tq1_values((const llmb_block_tq1_0 *)blk, t);
                wd = half_at(blk + offsetof(llmb_block_tq1_0, d));
            } else {
                tq2_values((const llmb_block_tq2_0 *)blk, t);
                wd = half_at(blk + offsetof(llmb_block_tq2_0, d));
            }
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                acc[r][c] += (float)tq_isum(t, xb) * (wd * xb->d);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// ---- FP4: the 16 values of kvalues_mxfp4 looked up by nibble, |w| against x sign(w) ----

// MXFP4 x Q8_0: as iq4_nl_body (vecdot_x86_body.h) with the E2M1 values and the E8M0 scale: each block's exact
// integer sum, then sum += (d_x e8m0_half(e)) * isum block after block
INLINE VD_T void VD(mxfp4_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                                float *y, int64_t ldy, const int NR, const int NC) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)llmb_kvalues_mxfp4));
    const int64_t nb = n / LLMB_QK_MXFP4;
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t ib = 0; ib < nb; ib += 4) {
        const int nk = nb - ib < 4 ? (int)(nb - ib) : 4;
        for (int r = 0; r < NR; r++) {
            const llmb_block_mxfp4 *wb = (const llmb_block_mxfp4 *)(w + r * ws) + ib;
            prefetch_w((const uint8_t *)wb, 4 * sizeof *wb);
            __m256i wq[4], wa[4];
            float wd[4];
            for (int e = 0; e < 4; e++) {
                wq[e] = e < nk ? _mm256_shuffle_epi8(kv, nibbles_32(wb[e].qs)) : _mm256_setzero_si256();
                wa[e] = _mm256_abs_epi8(wq[e]);
                wd[e] = e < nk ? llmb_e8m0_half(wb[e].e) : 0.0f;
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

// NVFP4 x Q8_0: a super-block of 64 against two Q8_0 blocks; sub-block s's exact integer sum, then
// sum += (d_x ue4m3_half(d_s)) * isum_s sub-block after sub-block. The 16 bytes of sub-blocks 2h, 2h + 1 hold
// their values as [lo 0..7, hi 0..7 | lo 8..15, hi 8..15]: nibbles_32 gives [lo 0..15 | hi 0..15], and swapping its
// middle quarters puts them in element order.
INLINE VD_T void VD(nvfp4_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                                float *y, int64_t ldy, const int NR, const int NC) {
    const __m256i kv = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)llmb_kvalues_mxfp4));
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_NVFP4; i++) {
        for (int r = 0; r < NR; r++) {
            const llmb_block_nvfp4 *b = (const llmb_block_nvfp4 *)(w + r * ws) + i;
            prefetch_w((const uint8_t *)b, sizeof *b);
            __m256i wq[2], wa[2];
            float wd[4];
            for (int h = 0; h < 2; h++) {
                wq[h] = _mm256_shuffle_epi8(kv, _mm256_permute4x64_epi64(nibbles_32(b->qs + 16 * h), 0xD8));
                wa[h] = _mm256_abs_epi8(wq[h]);
            }
            for (int s = 0; s < 4; s++) wd[s] = llmb_ue4m3_half(b->d[s]);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_0 *xb = (const llmb_block_q8_0 *)(x + c * xs) + 2 * i;
                __m256i p[2];
                for (int h = 0; h < 2; h++)
                    p[h] = DOTACC(_mm256_setzero_si256(), wa[h],
                                  _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)xb[h].qs), wq[h]));
                // lanes 0..3 of p[h]: sub-block 2h, 4..7: 2h + 1; after two hadds lane 0 / 1 of each half holds
                // the sum of p[0] / p[1] over that half
                const __m256i hh = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_setzero_si256());
                int32_t v[8];
                _mm256_storeu_si256((__m256i *)v, hh);
                const int32_t is[4] = {v[0], v[4], v[1], v[5]};
                const float dy[2] = {half_at((const uint8_t *)&xb[0].d), half_at((const uint8_t *)&xb[1].d)};
                for (int s = 0; s < 4; s++) acc[r][c] += (dy[s / 2] * wd[s]) * (float)is[s];
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// ---- Q1_0: sign bits against Q8_0 ----

// Q1_0 x Q8_0: a block of 128 against four Q8_0 blocks; each one's exact sum of +-x (the weight's sign byte, +1
// where its bit is set, -1 else, applied to x), then as the reference: sumi += d_x * (float)isum over the four,
// and sum += d_w * sumi. The bits are decoded once per row and used for the tile's tokens.
INLINE VD_T void VD(q1_0_body)(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                               float *y, int64_t ldy, const int NR, const int NC) {
    (void)type;
    const __m256i one = _mm256_set1_epi8(1);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK1_0; i++) {
        for (int r = 0; r < NR; r++) {
            const llmb_block_q1_0 *b = (const llmb_block_q1_0 *)(w + r * ws) + i;
            prefetch_w((const uint8_t *)b, sizeof *b);
            __m256i sg[4];
            for (int k = 0; k < 4; k++)   // set bit: 0xFF -> 0x00 | 1 = +1; clear: 0x00 -> 0xFF | 1 = -1
                sg[k] = _mm256_or_si256(_mm256_xor_si256(bytes_from_bits_32(b->qs + 4 * k), _mm256_set1_epi8(-1)), one);
            const float wd = half_at((const uint8_t *)&b->d);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_0 *xb = (const llmb_block_q8_0 *)(x + c * xs) + 4 * i;
                __m256i p[4];
                for (int k = 0; k < 4; k++)
                    p[k] = DOTACC(_mm256_setzero_si256(), one,
                                  _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)xb[k].qs), sg[k]));
                const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                int32_t is[4];
                _mm_storeu_si128((__m128i *)is, _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
                float sumi = 0.0f;
                for (int k = 0; k < 4; k++) sumi += half_at((const uint8_t *)&xb[k].d) * (float)is[k];
                acc[r][c] += wd * sumi;
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

GEN(tq1_0, VD(tq_body), LLMB_TYPE_TQ1_0)
GEN(tq2_0, VD(tq_body), LLMB_TYPE_TQ2_0)
GEN(mxfp4, VD(mxfp4_body), LLMB_TYPE_MXFP4)
GEN(nvfp4, VD(nvfp4_body), LLMB_TYPE_NVFP4)
GEN(q1_0, VD(q1_0_body), LLMB_TYPE_Q1_0)

void llmb_vd_tq_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_AVX2) return;   // the AVX-512 level inherits these from the AVX2 table
    t[LLMB_TYPE_TQ1_0].dot = tq1_0_dot_avx2, t[LLMB_TYPE_TQ1_0].tile = tq1_0_tile_avx2;
    t[LLMB_TYPE_TQ2_0].dot = tq2_0_dot_avx2, t[LLMB_TYPE_TQ2_0].tile = tq2_0_tile_avx2;
    t[LLMB_TYPE_MXFP4].dot = mxfp4_dot_avx2, t[LLMB_TYPE_MXFP4].tile = mxfp4_tile_avx2;
    t[LLMB_TYPE_NVFP4].dot = nvfp4_dot_avx2, t[LLMB_TYPE_NVFP4].tile = nvfp4_tile_avx2;
    t[LLMB_TYPE_Q1_0].dot = q1_0_dot_avx2, t[LLMB_TYPE_Q1_0].tile = q1_0_tile_avx2;
}
#else
void llmb_vd_tq_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif // x86-64
