// vecdot_avx512_decode.c — the K types (Q4_K, Q5_K, Q6_K) at a few tokens on the AVX-512 level with VNNI
// and 512-bit integer parts: small batches (2..LLMB_SMALL_TOKENS tokens, each decoded super-block used for
// every token) and one token over many rows (one sequential stream). Per output the operations of the
// type's single dot (vecdot_x86_body.h), so the same bits. Tested by csrc/tests/test_vecdot.c.
#include "simd_x86.h"

#if defined(__x86_64__) && defined(__GNUC__)

// ---- small batches: decode of 2..LLMB_SMALL_TOKENS sequences (AVX-512 VNNI; Q4_K, Q5_K, Q6_K) ----
// The weights are read once per step, as at one token: each super-block of a group of G rows is
// decoded into registers and used for every token (G = 1 from 3 tokens: the rows then stream one
// after the other as in the one-token decode). Per output the steps of the single
// dot: the exact integers of each super-block (S, and M for Q4_K/Q5_K) of all the group's outputs
// reduced at once with reduce16_epi32, then the body's fmas in lane g*NC + c. Hence the same bits
// (test_vecdot: every token count against the single dot). The legacy types run interleaved
// (vecdot_il8.c) at every token count.
#define SMALL_OUT 8   // outputs (G x NC) and tokens per pass at most

// the 8 sub-block scales and mins of a Q4_K/Q5_K super-block as int16 lanes 0..7 / 8..15 (q45_K_body)
VNNI512 INLINE __m256i k4_scales_mins(const uint8_t *scales) {
    uint32_t u[4];
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & 0x0f0f0f0f) | (((u[1] >> 6) & 0x03030303) << 4);
    const uint32_t uaux = u[1] & 0x3f3f3f3f;
    u[1] = (u[2] & 0x0f0f0f0f) | (((u[0] >> 6) & 0x03030303) << 4);
    u[2] = uaux;
    u[0] &= 0x3f3f3f3f;
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
}

// v[g*NC + c] += the 64 values q[g][e] of row g times token c's activations xb[c]->qs + off .. + 63,
// pairs weighted by int16 lane l of permute(idx, sc[g]) (maddubs, then dpwssd): the small-batch bodies'
// integer step for one 64-value chunk
INLINE VNNI512 void small_madd(__m512i *v, __m512i q[][2], int e, const __m512i *sc, __m512i idx,
                               const llmb_block_q8_K *const *xb, int off, const int G, const int NC) {
    __m512i xv[SMALL_OUT];
    for (int c = 0; c < NC; c++) xv[c] = _mm512_loadu_si512((const void *)(xb[c]->qs + off));
    for (int g = 0; g < G; g++) {
        const __m512i s = _mm512_permutexvar_epi16(idx, sc[g]);
        for (int c = 0; c < NC; c++) v[g * NC + c] = _mm512_dpwssd_epi32(v[g * NC + c], _mm512_maddubs_epi16(q[g][e], xv[c]), s);
    }
}

// G rows x NC tokens of Q4_K / Q5_K: S of output k = g*NC + c in lane k of the reduction, M in lane 8 + k
// (M = sum_j min_{j/2} bsum_j: q45_K_body's pairs of bsums against the 8 mins). dxt: the tokens' d
// per super-block i at dxt[16 i + k].
INLINE VNNI512 void q45k_small_body(const int type, int64_t nsb, const uint8_t *w, size_t ws, const uint8_t *x,
                                    size_t xs, const float *dxt, float *y, int64_t ldy, const int G, const int NC) {
    const int q5 = type == LLMB_TYPE_Q5_K;
    const size_t wb = q5 ? sizeof(llmb_block_q5_K) : sizeof(llmb_block_q4_K);
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    const __m256i min_idx = _mm256_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const llmb_block_q8_K *xb[SMALL_OUT];
        for (int c = 0; c < NC; c++) xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i;
        __m512i sm[4];    // per row: the scales (int16 lanes 0..7) and mins (8..15)
        __m256 wdv = _mm256_setzero_ps(), wmv = _mm256_setzero_ps();   // lane g*NC + c: d, dmin of row g
        __m512i v[16];
        for (int k = 0; k < 16; k++) v[k] = _mm512_setzero_si512();
        for (int g = 0; g < G; g++) {
            const uint8_t *blk = w + g * ws + i * wb;
            prefetch_w(blk, wb);
            const __m256i ms = k4_scales_mins(blk + 4);
            sm[g] = _mm512_castsi256_si512(ms);
            const __mmask8 lanes = (__mmask8)(((1u << NC) - 1) << (g * NC));
            wdv = _mm256_mask_mov_ps(wdv, lanes, _mm256_set1_ps(half_at(blk)));
            wmv = _mm256_mask_mov_ps(wmv, lanes, _mm256_set1_ps(half_at(blk + 2)));
            const __m256i mins = _mm256_permutexvar_epi16(min_idx, ms);   // int16 lane l: min l/2
            for (int c = 0; c < NC; c++)
                v[8 + g * NC + c] = _mm512_zextsi256_si512(_mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)xb[c]->bsums)));
        }
        for (int j0 = 0; j0 < 4; j0 += 2) {
            __m512i q[4][2];   // row g: values 64j .. 64j+63 for j = j0, j0 + 1
            for (int g = 0; g < G; g++) {   // chunks j0, j0+1: their 64 bytes, low nibbles then high nibbles
                const uint8_t *blk = w + g * ws + i * wb;
                const uint8_t *qs = q5 ? ((const llmb_block_q5_K *)blk)->qs : ((const llmb_block_q4_K *)blk)->qs;
                const __m512i bits = _mm512_loadu_si512((const void *)(qs + 32 * j0));
                __m512i lo = _mm512_and_si512(bits, m4), hi = _mm512_and_si512(_mm512_srli_epi16(bits, 4), m4);
                if (q5) {   // the fifth bits: value 32 s + l of sub-block s has bit s of qh[l]
                    const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const llmb_block_q5_K *)blk)->qh));
                    const __m512i bl = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j0))),
                                                          _mm256_set1_epi8((char)(1 << (2 * j0 + 2))), 1);
                    lo = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hb, bl), lo, sixteen);
                    hi = _mm512_mask_add_epi8(hi, _mm512_test_epi8_mask(hb, _mm512_add_epi8(bl, bl)), hi, sixteen);
                }
                q[g][0] = _mm512_shuffle_i64x2(lo, hi, 0x44);
                q[g][1] = _mm512_shuffle_i64x2(lo, hi, 0xEE);
            }
            for (int e = 0; e < 2; e++) {
                const int j = j0 + e;   // int16 lanes 0..15: the scale of sub-block 2j, 16..31: of 2j+1
                const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * j)), _mm256_set1_epi16((short)(2 * j + 1)), 1);
                small_madd(v, q, e, sm, idx, xb, 64 * j, G, NC);
            }
        }
        const __m512i SM = reduce16_epi32(v);
        const __m256 dx = _mm256_loadu_ps(dxt + 16 * i);
        acc = _mm256_fmadd_ps(_mm256_mul_ps(wdv, dx), _mm256_cvtepi32_ps(_mm512_castsi512_si256(SM)), acc);
        acc = _mm256_fnmadd_ps(_mm256_mul_ps(wmv, dx), _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(SM, 1)), acc);
    }
    float out[8];
    _mm256_storeu_ps(out, acc);
    for (int g = 0; g < G; g++)
        for (int c = 0; c < NC; c++) y[c * ldy + g] = out[g * NC + c];
}

// G rows x NC tokens of Q6_K: S = sum sc q x - 32 sum sc bsum (q6_K_body's integer,
// which subtracts maddubs(32, x) per 32 values), lane g*NC + c; then fma(d dx, S, acc)
INLINE VNNI512 void q6k_small_body(const int type, int64_t nsb, const uint8_t *w, size_t ws, const uint8_t *x,
                                   size_t xs, const float *dxt, float *y, int64_t ldy, const int G, const int NC) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const llmb_block_q8_K *xb[SMALL_OUT];
        for (int c = 0; c < NC; c++) xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i;
        const llmb_block_q6_K *b[4];
        __m512i s16[4];
        __m512 wdv = _mm512_setzero_ps();   // lane g*NC + c: d of row g
        __m512i v[16];
        for (int k = 0; k < 16; k++) v[k] = _mm512_setzero_si512();
        for (int g = 0; g < G; g++) {
            b[g] = (const llmb_block_q6_K *)(w + g * ws) + i;
            prefetch_w((const uint8_t *)b[g], sizeof(llmb_block_q6_K));
            const __m256i s = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b[g]->scales));
            s16[g] = _mm512_castsi256_si512(s);
            wdv = _mm512_mask_mov_ps(wdv, (__mmask16)(((1u << NC) - 1) << (g * NC)), _mm512_set1_ps(half_at((const uint8_t *)&b[g]->d)));
            for (int c = 0; c < NC; c++) {
                const __m256i corr = _mm256_madd_epi16(s, _mm256_loadu_si256((const __m256i *)xb[c]->bsums));
                v[g * NC + c] = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5)));
            }
        }
        for (int half = 0; half < 2; half++) {
            __m512i q[4][2];   // row g: values 128 half + 64e .. +63 (0..63), e = 0, 1 (q6_K_body's unpacking)
            for (int g = 0; g < G; g++) {
                const __m512i l = _mm512_loadu_si512((const void *)(b[g]->ql + 64 * half));   // l0 | l32
                const __m512i h = _mm512_srlv_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b[g]->qh + 32 * half))),
                                                    _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1));
                q[g][0] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(h, m2), 4));
                q[g][1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                          _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), m2), 4));
            }
            for (int e = 0; e < 2; e++) {
                const int m = 2 * half + e;   // values 64m..64m+63; int16 lane l: scale 4m + l/8
                const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16((short)(4 * m)),
                                                     _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20,
                                                                                        19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8,
                                                                                        7, 6, 5, 4, 3, 2, 1, 0), 3));
                small_madd(v, q, e, s16, idx, xb, 64 * m, G, NC);
            }
        }
        acc = _mm512_fmadd_ps(_mm512_mul_ps(wdv, _mm512_loadu_ps(dxt + 16 * i)), _mm512_cvtepi32_ps(reduce16_epi32(v)), acc);
    }
    float out[16];
    _mm512_storeu_ps(out, acc);
    for (int g = 0; g < G; g++)
        for (int c = 0; c < NC; c++) y[c * ldy + g] = out[g * NC + c];
}

// nr rows (any) x nc tokens (2..LLMB_SMALL_TOKENS): at 2 tokens groups of G2 rows then single rows,
// from 3 tokens single rows (docs/engine-measurements.md#small-batches). The tokens' d per super-block gathered once per call
// (dxt, lane g*nc + c).
#define SMALL_MAX_SB 256   // super-blocks per row (n <= 65536); longer rows run tiles
#define SMALL_G(body, G, NC)                                                                                         \
    for (; r + G <= nr; r += G) body(type, nb, w + r * ws, ws, x, xs, dxt, y + r, ldy, G, NC);
#define SMALL_KERNEL(name, body, T, G2)                                                                              \
    VNNI512 static void name##_small_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, \
                                             int nc, float *y, int64_t ldy) {                                       \
        const uint8_t *w = vw, *x = vx;                                                                             \
        const int type = T;                                                                                         \
        const int64_t nb = n / LLMB_QK_K;                                                                           \
        float dxt[16 * SMALL_MAX_SB];                                                                               \
        if (nb > SMALL_MAX_SB) {                                                                                    \
            K_TILES(llmb_vd_##name##_tile_vnni);                                                                              \
            return;                                                                                                 \
        }                                                                                                           \
        const int lanes = nc == 2 ? 2 * G2 : nc;                                                                    \
        for (int64_t i = 0; i < nb; i++)                                                                            \
            for (int k = 0; k < 16; k++)                                                                            \
                dxt[16 * i + k] = k < lanes ? ((const llmb_block_q8_K *)(x + (k % nc) * xs) + i)->d : 0.0f;         \
        int r = 0;                                                                                                  \
        switch (nc) {                                                                                               \
        case 2: SMALL_G(body, G2, 2) SMALL_G(body, 1, 2) break;                                                     \
        case 3: SMALL_G(body, 1, 3) break;                                                                          \
        case 4: SMALL_G(body, 1, 4) break;                                                                          \
        case 5: SMALL_G(body, 1, 5) break;                                                                          \
        case 6: SMALL_G(body, 1, 6) break;                                                                          \
        case 7: SMALL_G(body, 1, 7) break;                                                                          \
        case 8: SMALL_G(body, 1, 8) break;                                                                          \
        default: break;                                                                                             \
        }                                                                                                           \
    }
SMALL_KERNEL(q4_K, q45k_small_body, LLMB_TYPE_Q4_K, 4)
SMALL_KERNEL(q5_K, q45k_small_body, LLMB_TYPE_Q5_K, 4)
SMALL_KERNEL(q6_K, q6k_small_body, LLMB_TYPE_Q6_K, 2)

// ---- one-token decode over many rows (AVX-512 VNNI, 512-bit integer parts; Q4_K, Q5_K, Q6_K) ----
// At one thread the 256-bit dots run row after row, not the memory, bounded decode. Here a super-block's
// exact integers S (and M) take about half the instructions (scales unpacked in vector registers, nibbles
// by a broadcast load and a variable shift), 8 or 16 super-blocks share one horizontal reduction, and up to
// 8 rows' float chains run side by side. S and M are exact, the fmas the body's, so the same bits as the dot
// (test_vecdot: one-token matmul against the dot, every level and thread count; docs/engine-measurements.md#k-decode).

// k4_scales_mins without leaving the vector unit: the 12 packed bytes b of a Q4_K/Q5_K super-block
// (16 loaded from p, 4 past them unused) to the 8 6-bit scales then the 8 6-bit mins, as int16 lanes:
// scale j < 4: b[j] & 63, min j < 4: b[j+4] & 63; scale j >= 4: (b[j+4] & 15) | (b[j-4] >> 6) << 4,
// min j >= 4: (b[j+4] >> 4) | (b[j] >> 6) << 4 (ggml's get_scale_min_k4). Tested through the dots.
VNNI512 INLINE __m256i k4_scales_mins_v(const uint8_t *p) {
    const __m128i b = _mm_loadu_si128((const __m128i *)p);
    const __m128i a = _mm_shuffle_epi8(b, _mm_set_epi8(11, 10, 9, 8, 7, 6, 5, 4, 11, 10, 9, 8, 3, 2, 1, 0));
    const __m128i h = _mm_shuffle_epi8(b, _mm_set_epi8(7, 6, 5, 4, -1, -1, -1, -1, 3, 2, 1, 0, -1, -1, -1, -1));
    const __m128i lo = _mm_or_si128(_mm_and_si128(a, _mm_set_epi32(0, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f)),
                                    _mm_and_si128(_mm_srli_epi16(a, 4), _mm_set_epi32(0x0f0f0f0f, 0, 0, 0)));
    return _mm256_cvtepu8_epi16(_mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(h, 2), _mm_set1_epi8(0x30))));
}

// super-block blk of a Q4_K/Q5_K row against xb: S in the lanes of the result, M in the lanes of *m
INLINE VNNI512 __m512i q45k_sb(const int type, const uint8_t *blk, const llmb_block_q8_K *xb, __m512i *m) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
    const __m256i min_idx = _mm256_set_epi16(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    const __m512i nib_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const uint8_t *qs = type == LLMB_TYPE_Q5_K ? ((const llmb_block_q5_K *)blk)->qs : ((const llmb_block_q4_K *)blk)->qs;
    const __m256i ms = k4_scales_mins_v(blk + 4);   // int16: 8 scales, then 8 mins
    const __m512i sm = _mm512_castsi256_si512(ms);
    *m = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_permutexvar_epi16(min_idx, ms),
                                                  _mm256_loadu_si256((const __m256i *)xb->bsums)));
    __m512i S = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {   // values 64j .. 64j+63: the 32 bytes of chunk j, low nibbles then high
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * j))),
                                                       nib_shift), m4);
        if (type == LLMB_TYPE_Q5_K) {   // the fifth bits: value 32 s + l of sub-block s has bit s of qh[l]
            const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const llmb_block_q5_K *)blk)->qh));
            const __m512i bl = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * j))), _mm256_set1_epi8((char)(2 << (2 * j))), 1);
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hb, bl), q, sixteen);
        }
        // int16 lanes 0..15: the scale of sub-block 2j, 16..31: of 2j+1
        const __m512i idx = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * j)), _mm256_set1_epi16((short)(2 * j + 1)), 1);
        const __m512i xv = _mm512_loadu_si512((const void *)(xb->qs + 64 * j));
        S = _mm512_dpwssd_epi32(S, _mm512_maddubs_epi16(q, xv), _mm512_permutexvar_epi16(idx, sm));
    }
    return S;
}

// super-block b of a Q6_K row against xb: S = sum sc q x - 32 sum sc bsum (q6k_small_body's integer)
INLINE VNNI512 __m512i q6k_sb(const llmb_block_q6_K *b, const llmb_block_q8_K *xb) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    const __m512i hshift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i l8 = _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                                          15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    const __m256i s16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)b->scales));
    const __m512i sc16 = _mm512_castsi256_si512(s16);
    const __m256i corr = _mm256_madd_epi16(s16, _mm256_loadu_si256((const __m256i *)xb->bsums));
    __m512i S = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(corr, 5)));
    for (int half = 0; half < 2; half++) {   // values 128 half + 64e .. +63 (q6k_small_body's unpacking)
        const __m512i l = _mm512_loadu_si512((const void *)(b->ql + 64 * half));
        const __m512i h = _mm512_srlv_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * half))), hshift);
        const __m512i q[2] = {
            _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(_mm512_and_si512(h, m2), 4)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                            _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), m2), 4))};
        for (int e = 0; e < 2; e++) {
            const int m = 2 * half + e;   // int16 lane l: scale 4m + l/8
            const __m512i xv = _mm512_loadu_si512((const void *)(xb->qs + 64 * m));
            S = _mm512_dpwssd_epi32(S, _mm512_maddubs_epi16(q[e], xv),
                                    _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_set1_epi16((short)(4 * m)), l8), sc16));
        }
    }
    return S;
}

// NR rows x one token of a K type (the decode matrix-vector product), read one row after the other
// (one sequential stream: rows taken in turns, block by block, measured 1.4-2x slower from DRAM).
// Pass 1 builds each super-block's exact S (and M) with q45k_sb / q6k_sb; every 8 (Q4_K/Q5_K: S and
// M) or 16 (Q6_K) of them, in stream order across row ends, share one horizontal reduction, stored
// to S[], M[] with d dx (and dmin dx) in D[], DM[]. Pass 2 runs the body's fmas, super-block by
// super-block, for the NR rows side by side: NR independent chains where the dot had one per row
// (two dependent fmas per super-block for Q4_K bounded it). Per row the dot's very operations.
#define KD_ROWS 8      // rows per call at most
#define KD_SLOTS 512   // super-blocks per call at most (rows x super-blocks per row)
INLINE VNNI512 void k_decode_body(const int type, int64_t nb, const uint8_t *w, size_t ws, const llmb_block_q8_K *x,
                                  float *y, int NR) {
    const int q6 = type == LLMB_TYPE_Q6_K, P = q6 ? 16 : 8;   // super-blocks per reduction
    const size_t wb = q6 ? sizeof(llmb_block_q6_K) : type == LLMB_TYPE_Q5_K ? sizeof(llmb_block_q5_K) : sizeof(llmb_block_q4_K);
    int32_t S[KD_SLOTS + 16], M[KD_SLOTS + 16];
    float D[KD_SLOTS], DM[KD_SLOTS];
    __m512i v[16];
    int k = 0, kv = 0;
    for (int r = 0; r < NR; r++)
        for (int64_t i = 0; i < nb; i++, k++) {
            const uint8_t *blk = w + r * ws + i * wb;
            const llmb_block_q8_K *xb = x + i;
            prefetch_w(blk, wb);
            if (q6) {
                v[kv] = q6k_sb((const llmb_block_q6_K *)blk, xb);
                D[k] = half_at((const uint8_t *)&((const llmb_block_q6_K *)blk)->d) * xb->d;
            } else {
                v[kv] = q45k_sb(type, blk, xb, &v[8 + kv]);
                D[k] = half_at(blk) * xb->d;
                DM[k] = -(half_at(blk + 2) * xb->d);
            }
            if (++kv == P || k + 1 == NR * nb) {
                for (int e = kv; e < P; e++) v[e] = _mm512_setzero_si512();
                if (!q6)
                    for (int e = kv; e < P; e++) v[8 + e] = _mm512_setzero_si512();
                const __m512i R = reduce16_epi32(v);
                if (q6) {
                    _mm512_storeu_si512((void *)(S + k + 1 - kv), R);
                } else {
                    _mm256_storeu_si256((__m256i *)(S + k + 1 - kv), _mm512_castsi512_si256(R));
                    _mm256_storeu_si256((__m256i *)(M + k + 1 - kv), _mm512_extracti64x4_epi64(R, 1));
                }
                kv = 0;
            }
        }
    float acc[KD_ROWS] = {0};
    for (int64_t i = 0; i < nb; i++)
        for (int r = 0; r < NR; r++) {
            acc[r] = fmaf(D[r * nb + i], (float)S[r * nb + i], acc[r]);
            if (!q6) acc[r] = fmaf(DM[r * nb + i], (float)M[r * nb + i], acc[r]);
        }
    for (int r = 0; r < NR; r++) y[r] = acc[r];
}

// nr rows (any) x 1 token: KD_ROWS rows a call, fewer where their super-blocks exceed KD_SLOTS; rows
// longer than KD_SLOTS super-blocks (n > 131072) run the dot (the 1 x 1 tile)
#define K_DECODE(name, T)                                                                                           \
    VNNI512 static void name##_decode_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *x, size_t xs,  \
                                              int nc, float *y, int64_t ldy) {                                      \
        const uint8_t *w = vw;                                                                                      \
        const int64_t nb = n / LLMB_QK_K;                                                                           \
        const int g = nb * KD_ROWS <= KD_SLOTS ? KD_ROWS : (int)(KD_SLOTS / (nb > 0 ? nb : 1));                     \
        if (g < 1) {                                                                                                \
            for (int r = 0; r < nr; r++) llmb_vd_##name##_tile_vnni(n, w + r * ws, ws, 1, x, 0, 1, y + r, 0);     \
            return;                                                                                                 \
        }                                                                                                           \
        for (int r = 0; r < nr; r += g) k_decode_body(T, nb, w + r * ws, ws, x, y + r, nr - r < g ? nr - r : g);    \
    }
K_DECODE(q4_K, LLMB_TYPE_Q4_K)
K_DECODE(q5_K, LLMB_TYPE_Q5_K)
K_DECODE(q6_K, LLMB_TYPE_Q6_K)

void llmb_vd_avx512_decode_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_AVX512 || !llmb_cpu_has("avx512vnni")) return;
    t[LLMB_TYPE_Q4_K].small = q4_K_small_vnni512;
    t[LLMB_TYPE_Q5_K].small = q5_K_small_vnni512;
    t[LLMB_TYPE_Q6_K].small = q6_K_small_vnni512;
    t[LLMB_TYPE_Q4_K].decode = q4_K_decode_vnni512;
    t[LLMB_TYPE_Q5_K].decode = q5_K_decode_vnni512;
    t[LLMB_TYPE_Q6_K].decode = q6_K_decode_vnni512;
}
#else
void llmb_vd_avx512_decode_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif
