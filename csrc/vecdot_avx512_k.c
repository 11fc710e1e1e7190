// vecdot_avx512_k.c — the K types at the AVX-512 level with VNNI and 512-bit integer parts: prefill
// panels of Q4_K, Q5_K and Q6_K (16 rows regrouped per call into the lanes of each vector) and the
// kernels of Q4_K, Q6_K and Q8_0 interleaved at load in groups of 16 rows (llmb_vec_dot_repack), for
// every token count. Per output each runs the operations of the type's single dot (vecdot_x86_body.h),
// so the same bits. Tested by csrc/tests/test_vecdot.c (every kernel and tile shape against the dot).
#include "simd_x86.h"
#include "vecdot_layout.h"

#if defined(__x86_64__) && defined(__GNUC__)

// ---- prefill panels (AVX-512 VNNI, 512-bit integer parts) ----
// A panel decodes a group of weight rows once and runs every token over them; per output it does what
// the single dot does, hence the same bits. The K types (Q4_K, Q5_K, Q6_K) hold 16 rows in the lanes
// of each vector (below); float weights are converted per chunk (vecdot_avx512_float.c); the legacy
// types run interleaved (vecdot_il8.c).
#define PANEL_MAX_SB 64   // super-blocks per row decoded on the stack (n <= 16384; Q6_K: 364 KiB); longer rows run tiles


// Q4_K and Q5_K panels hold 16 rows in the lanes of every vector (lane r: row r), so no reduction
// across lanes is needed: per super-block each lane accumulates its row's exact integers S = sum sc q x
// and M = sum min bsum, then fma(d dx, S, acc) and fma(-(dmin dx), M, acc) per token, the steps of
// q45_K_body for 16 outputs at once. The rows are regrouped once per panel call (16 x 16 transposes of
// their 32-bit words); vpdpbusd then multiplies 4 values of each row by the same 4 activation bytes
// (broadcast), 64 products per instruction. The products of one 32-value sub-block sum to at most
// 32 * 31 * 128 in magnitude, so its scale is applied with a 32-bit multiply (vpmulld), exact. Q4_K
// keeps its 4-bit values packed (split per use); Q5_K's are decoded to bytes with their fifth bit.

// Up to this many tokens the interleaved Q8_0 and Q6_K groups also ask for every line LINE_PF_AHEAD ahead into L1 as
// they first read it: batches read the weights from DRAM with little work a block (Q8_0 49,152 x 576, SmolLM2's
// output matrix, x 16 tokens 1.26x; Q6_K 1536 x 768 x 4-32 tokens 1.03-1.14x; 2 threads, Zen 5;
// docs/engine-measurements.md#il16-pf)
#define BATCH_PF_TOKENS 64
#define K_PANEL_R 16   // rows per Q4_K / Q5_K / Q6_K panel call (one row per 32-bit lane)
#define K_PANEL_NC 5   // tokens per Q4_K / Q5_K register tile (the fastest of 3 to 6: docs/engine-measurements.md#register-tiles)

typedef struct {
    __m512i sc[8];   // lane r: scale of sub-block s of row r (int32)
    __m512i mn[4];   // lane r: int16 pair (min 2p, min 2p + 1) of row r
    __m512 d, dmin;  // lane r: the row's super-block scales (0 past the panel's rows)
} q45r_hdr;
typedef struct {
    q45r_hdr h;
    __m512i q[32];   // vector 8j + t, lane r: bytes 32j + 4t .. 32j + 4t + 3 of row r's qs (low nibbles:
                     // values 64j + 4t .., high nibbles: values 64j + 32 + 4t ..)
} q4r_dec;
typedef struct {
    q45r_hdr h;
    __m512i q[64];   // vector 16j + 2t (+ 1), lane r: values 64j + 4t .. (64j + 32 + 4t ..) of row r (0..31)
} q5r_dec;

// v[c] lane r = lane c of v[r] (16 x 16 int32 transposed in place)
VNNI512 INLINE void transpose16_epi32(__m512i v[16]) {
    __m512i t[16];
    for (int p = 0; p < 8; p++)   // block k: v[2p][4k], v[2p+1][4k], v[2p][4k+1], v[2p+1][4k+1] (and 4k+2, 4k+3)
        t[2 * p] = _mm512_unpacklo_epi32(v[2 * p], v[2 * p + 1]), t[2 * p + 1] = _mm512_unpackhi_epi32(v[2 * p], v[2 * p + 1]);
    for (int q = 0; q < 4; q++) {   // v[4q + j] block k: column 4k + j of rows 4q .. 4q + 3
        v[4 * q] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]), v[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
        v[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
        v[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
    }
    for (int h = 0; h < 2; h++)   // t[8h + j]: columns j, 8 + j of rows 8h .. 8h + 7; t[8h + 4 + j]: 4 + j, 12 + j
        for (int j = 0; j < 4; j++) {
            t[8 * h + j] = _mm512_shuffle_i32x4(v[8 * h + j], v[8 * h + 4 + j], 0x88);
            t[8 * h + 4 + j] = _mm512_shuffle_i32x4(v[8 * h + j], v[8 * h + 4 + j], 0xDD);
        }
    for (int c = 0; c < 8; c++)
        v[c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0x88), v[8 + c] = _mm512_shuffle_i32x4(t[c], t[8 + c], 0xDD);
}

// 16 rows' words from byte offset `off` of super-block i (row r at w + r * ws), transposed: lane r of
// v[k] is word k of row r (`words` <= 16 of them read; the rest zero)
VNNI512 INLINE void rows_words(const uint8_t *w, size_t ws, int nr, size_t off, int words, __m512i v[16]) {
    const __mmask16 m = (__mmask16)((1u << words) - 1);
    for (int r = 0; r < K_PANEL_R; r++) v[r] = r < nr ? _mm512_maskz_loadu_epi32(m, w + r * ws + off) : _mm512_setzero_si512();
    transpose16_epi32(v);
}

// the header from its 4 words, lane r: word k of row r in vector k at h
VNNI512 INLINE void q45r_hdr_words(const __m512i *hv, q45r_hdr *o) {
    const __m512i h[4] = {_mm512_loadu_si512(hv), _mm512_loadu_si512(hv + 1), _mm512_loadu_si512(hv + 2),
                          _mm512_loadu_si512(hv + 3)};
    // q45_K_body's unpacking of the 6-bit scales and mins lane-wise: u0, u1 the 8 scales, u2, u3 the 8 mins
    const __m512i k3f = _mm512_set1_epi32(0x3f3f3f3f), k0f = _mm512_set1_epi32(0x0f0f0f0f), k03 = _mm512_set1_epi32(0x03030303);
    const __m512i a0 = h[1], a1 = h[2], a2 = h[3];
    const __m512i u3 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(a2, 4), k0f),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a1, 6), k03), 4));
    const __m512i u1 = _mm512_or_si512(_mm512_and_si512(a2, k0f),
                                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(a0, 6), k03), 4));
    const __m512i u2 = _mm512_and_si512(a1, k3f), u0 = _mm512_and_si512(a0, k3f);
    const __m512i ff = _mm512_set1_epi32(0xFF);
    for (int s = 0; s < 8; s++) o->sc[s] = _mm512_and_si512(_mm512_srli_epi32(s < 4 ? u0 : u1, 8 * (s % 4)), ff);
    for (int p = 0; p < 4; p++) {   // bytes 2p, 2p + 1 of the mins as an int16 pair
        const __m512i m = _mm512_srli_epi32(p < 2 ? u2 : u3, 16 * (p % 2));
        o->mn[p] = _mm512_or_si512(_mm512_and_si512(m, ff), _mm512_and_si512(_mm512_slli_epi32(m, 8), _mm512_set1_epi32(0xFF0000)));
    }
    o->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
    o->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
}

// super-block i of the panel's nr rows (row r at w + r * ws, blocks of bs bytes): their first 16 bytes
// (d, dmin, 12 scale bytes, the same in Q4_K and Q5_K) 16 rows at once
VNNI512 static void q45r_decode_hdr(const uint8_t *w, size_t ws, int nr, size_t bs, int64_t i, q45r_hdr *o) {
    __m512i h[16];
    rows_words(w, ws, nr, (size_t)i * bs, 4, h);
    q45r_hdr_words(h, o);
}

VNNI512 static void q4r_decode(const uint8_t *w, size_t ws, int nr, int64_t i, q4r_dec *o) {
    const size_t b0 = (size_t)i * sizeof(llmb_block_q4_K) + offsetof(llmb_block_q4_K, qs);
    q45r_decode_hdr(w, ws, nr, sizeof(llmb_block_q4_K), i, &o->h);
    rows_words(w, ws, nr, b0, 16, o->q);
    rows_words(w, ws, nr, b0 + 64, 16, o->q + 16);
}

VNNI512 static void q5r_decode(const uint8_t *w, size_t ws, int nr, int64_t i, q5r_dec *o) {
    const size_t b0 = (size_t)i * sizeof(llmb_block_q5_K);
    q45r_decode_hdr(w, ws, nr, sizeof(llmb_block_q5_K), i, &o->h);
    __m512i qs[32], qh[16];
    rows_words(w, ws, nr, b0 + offsetof(llmb_block_q5_K, qs), 16, qs);
    rows_words(w, ws, nr, b0 + offsetof(llmb_block_q5_K, qs) + 64, 16, qs + 16);
    rows_words(w, ws, nr, b0 + offsetof(llmb_block_q5_K, qh), 8, qh);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m1 = _mm512_set1_epi8(1);
    for (int j = 0; j < 4; j++)   // the fifth bits of values 64j + l and 64j + 32 + l: bits 2j and 2j + 1 of qh[l]
        for (int t = 0; t < 8; t++) {
            const __m512i p = qs[8 * j + t], h = qh[t];
            o->q[16 * j + 2 * t] = _mm512_or_si512(_mm512_and_si512(p, m4),
                                                   _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * j), m1), 4));
            o->q[16 * j + 2 * t + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(p, 4), m4),
                                                       _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2 * j + 1), m1), 4));
        }
}

// acc plus one super-block's two fmas of q45_K_body for one token (xb): d dx S, then minus dmin dx M, M the
// rows' mins against the token's sub-block sums (int16 pairs 2p, 2p + 1), exact
INLINE VNNI512 __m512 q45r_fma(const q45r_hdr *o, const llmb_block_q8_K *xb, __m512i S, __m512 acc) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)xb->bsums);
    int32_t pr[4];
    _mm_storeu_si128((__m128i *)pr, _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)));
    __m512i M = _mm512_setzero_si512();
    for (int p = 0; p < 4; p++) M = _mm512_dpwssd_epi32(M, o->mn[p], _mm512_set1_epi32(pr[p]));
    const __m512 dx = _mm512_set1_ps(xb->d);
    acc = _mm512_fmadd_ps(_mm512_mul_ps(o->d, dx), _mm512_cvtepi32_ps(S), acc);
    return _mm512_fnmadd_ps(_mm512_mul_ps(o->dmin, dx), _mm512_cvtepi32_ps(M), acc);
}

// one super-block (header o, values qv as in q4r_dec / q5r_dec) of 16 rows x NC tokens (xb[c]: token c's
// super-block) into acc[c]: the exact integers S and M per lane, then the two fmas of q45_K_body
INLINE VNNI512 void q45r_sb(const int q5, const q45r_hdr *o, const __m512i *qv, const llmb_block_q8_K *const *xb,
                            __m512 *acc, const int NC) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i S[K_PANEL_NC];
    for (int c = 0; c < NC; c++) S[c] = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {   // sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles)
        __m512i tl[K_PANEL_NC], th[K_PANEL_NC];
        for (int c = 0; c < NC; c++) tl[c] = th[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            __m512i lo, hi;
            if (q5) {
                lo = _mm512_loadu_si512(&qv[16 * j + 2 * t]), hi = _mm512_loadu_si512(&qv[16 * j + 2 * t + 1]);
            } else {
                const __m512i p = _mm512_loadu_si512(&qv[8 * j + t]);
                lo = _mm512_and_si512(p, m4), hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
            }
            for (int c = 0; c < NC; c++) {
                int32_t a, b;
                memcpy(&a, xb[c]->qs + 64 * j + 4 * t, 4);
                memcpy(&b, xb[c]->qs + 64 * j + 32 + 4 * t, 4);
                tl[c] = _mm512_dpbusd_epi32(tl[c], lo, _mm512_set1_epi32(a));
                th[c] = _mm512_dpbusd_epi32(th[c], hi, _mm512_set1_epi32(b));
            }
        }
        for (int c = 0; c < NC; c++)
            S[c] = _mm512_add_epi32(S[c], _mm512_add_epi32(_mm512_mullo_epi32(tl[c], o->sc[2 * j]),
                                                           _mm512_mullo_epi32(th[c], o->sc[2 * j + 1])));
    }
    for (int c = 0; c < NC; c++) acc[c] = q45r_fma(o, xb[c], S[c], acc[c]);
}

// the panel's rows x NC tokens: y[c * ldy + r] for the rows in `rows`
INLINE VNNI512 void q45r_body(const int q5, const void *dec, int64_t nsb, const uint8_t *x, size_t xs, float *y, int64_t ldy,
                             __mmask16 rows, const int NC) {
    __m512 acc[K_PANEL_NC];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const llmb_block_q8_K *xb[K_PANEL_NC];
        for (int c = 0; c < NC; c++) xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i;
        if (q5) q45r_sb(1, &((const q5r_dec *)dec)[i].h, ((const q5r_dec *)dec)[i].q, xb, acc, NC);
        else q45r_sb(0, &((const q4r_dec *)dec)[i].h, ((const q4r_dec *)dec)[i].q, xb, acc, NC);
    }
    for (int c = 0; c < NC; c++) _mm512_mask_storeu_ps(y + c * ldy, rows, acc[c]);
}


// The bytes [off, off + bytes) of the 16 rows at w (ws apart) prefetched into L2: while a panel decodes
// super-block i, that of the next panel of rows (whose 16 streams the hardware prefetchers do not follow)
VNNI512 INLINE void k_prefetch_next(const uint8_t *w, size_t ws, size_t off, size_t bytes) {
    for (int r = 0; r < K_PANEL_R; r++)
        for (size_t b = 0; b < bytes; b += 64) _mm_prefetch((const char *)w + r * ws + off + b, _MM_HINT_T1);
}

// A K-type panel: the rows too long for its decoded super-blocks on the stack run tiles of 4 x 4; else
// DECODE(w, ws, nr, i, &dec[i]) per super-block, then the tokens in tiles of NCMAX: BODY(k) runs k
// tokens from xc into yc (k a constant for each case, so the body's loops unroll)
#define K_PANEL_CASE(k, NCMAX, BODY) case k: BODY(k < NCMAX ? k : NCMAX); break;
#define K_PANEL(type, BLK_T, DEC_T, DECODE, NCMAX, BODY)                                                                    \
    VNNI512 static void type##_panel_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, \
                                             int nc, float *y, int64_t ldy) {                                        \
        const uint8_t *w = vw, *x = vx;                                                                             \
        const int64_t nsb = n / LLMB_QK_K;                                                                          \
        if (nsb > PANEL_MAX_SB) {                                                                                   \
            K_TILES(llmb_vd_##type##_tile_vnni);                                                                              \
            return;                                                                                                 \
        }                                                                                                           \
        DEC_T dec[PANEL_MAX_SB];                                                                                    \
        for (int64_t i = 0; i < nsb; i++) {                                                                         \
            DECODE(w, ws, nr, i, &dec[i]);                                                                          \
            k_prefetch_next(w + K_PANEL_R * ws, ws, i * sizeof(BLK_T), sizeof(BLK_T));                                    \
        }                                                                                                           \
        const __mmask16 rows = (__mmask16)((1u << nr) - 1);                                                         \
        for (int c0 = 0; c0 < nc; c0 += NCMAX) {                                                                    \
            const uint8_t *xc = x + c0 * xs;                                                                        \
            float *yc = y + c0 * ldy;                                                                               \
            switch (nc - c0 < NCMAX ? nc - c0 : NCMAX) {                                                            \
                K_PANEL_CASE(1, NCMAX, BODY) K_PANEL_CASE(2, NCMAX, BODY) K_PANEL_CASE(3, NCMAX, BODY)              \
                K_PANEL_CASE(4, NCMAX, BODY) K_PANEL_CASE(5, NCMAX, BODY) K_PANEL_CASE(6, NCMAX, BODY)              \
                K_PANEL_CASE(7, NCMAX, BODY)                                                                        \
            default: BODY(NCMAX); break;                                                                            \
            }                                                                                                       \
        }                                                                                                           \
    }

#define Q4_K_BODY(k) q45r_body(0, dec, nsb, xc, xs, yc, ldy, rows, k)
#define Q5_K_BODY(k) q45r_body(1, dec, nsb, xc, xs, yc, ldy, rows, k)
K_PANEL(q4_K, llmb_block_q4_K, q4r_dec, q4r_decode, K_PANEL_NC, Q4_K_BODY)
K_PANEL(q5_K, llmb_block_q5_K, q5r_dec, q5r_decode, K_PANEL_NC, Q5_K_BODY)

// Interleaved Q4_K (llmb_vec_dot_repack, groups of 16 rows): super-block i of a group is 36 vectors,
// vector k lane r = word k of row r's block: 4 header words (d | dmin, the 12 scale bytes), then the 32
// words of qs, in q4r_dec's order. So a group's super-block is q4r_decode's result without the 16 x 16
// transposes, read from one sequential stream, and q45r_sb runs on it: the panels' bits, the dot's bits.
// From one token to LLMB_SMALL_TOKENS a thread's whole range of groups is one call; each group is read
// from memory once, by its first token tile, which prefetches STREAM_PF_AHEAD bytes ahead into L2 (all 36
// lines of each super-block; one token, q4i_sb1, only each page's first: prefetch_stream, and with
// LLMB_PREFETCH_LINES every line LINE_PF_AHEAD ahead into L1: pf_line). Against the plain layout it
// reads nearer the read bandwidth at few tokens, the same GOP/s at 512 (docs/engine-measurements.md#interleaved-q4_k).
#define IL16_G 16   // rows per interleaved group of Q4_K and Q6_K (llmb_vec_dot_interleave at this level)
#define IL_SB sizeof(llmb_il16_q4_K)   // bytes of one super-block of a group

// the tile of min(left, NCMAX) tokens: RUN(k) with k a constant in each case (the bodies' loops unroll)
#define IL_TILE(left, NCMAX, RUN)                                                                                   \
    switch ((left) < NCMAX ? (left) : NCMAX) {                                                                      \
        K_PANEL_CASE(1, NCMAX, RUN) K_PANEL_CASE(2, NCMAX, RUN) K_PANEL_CASE(3, NCMAX, RUN)                         \
        K_PANEL_CASE(4, NCMAX, RUN) K_PANEL_CASE(5, NCMAX, RUN)                                                     \
    default: RUN(NCMAX); break;                                                                                     \
    }

// One token over one super-block v of a group: q45r_sb's exact S and M in fewer operations and shorter
// chains. The high nibbles are multiplied in place (p & 0xF0 = 16 x the value; products and sums stay
// exact in int32) and each sub-block's sum is shifted back once (arithmetic, exact: a multiple of 16),
// one operation per 8 vectors instead of one per vector; each sub-block sums its 8 vectors in two
// chains of 4 (docs/engine-measurements.md#q4i_sb1).
INLINE VNNI512 __m512 q4i_sb1(const __m512i *v, const llmb_block_q8_K *xb, const int lines, __m512 acc) {
    if (lines)
        for (int k = 0; k < 4; k++) pf_line(v + k, lines);
    q45r_hdr o;
    q45r_hdr_words(v, &o);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i S = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {   // sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles)
        __m512i tl[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, th[2] = {tl[0], tl[0]};
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            const __m512i p = _mm512_loadu_si512(v + 4 + 8 * j + t);
            if (lines) pf_line(v + 4 + 8 * j + t, lines);
            int32_t a, b;
            memcpy(&a, xb->qs + 64 * j + 4 * t, 4);
            memcpy(&b, xb->qs + 64 * j + 32 + 4 * t, 4);
            tl[t & 1] = _mm512_dpbusd_epi32(tl[t & 1], _mm512_and_si512(p, m4), _mm512_set1_epi32(a));
            th[t & 1] = _mm512_dpbusd_epi32(th[t & 1], _mm512_andnot_si512(m4, p), _mm512_set1_epi32(b));
        }
        const __m512i l = _mm512_add_epi32(tl[0], tl[1]), h = _mm512_srai_epi32(_mm512_add_epi32(th[0], th[1]), 4);
        S = _mm512_add_epi32(S, _mm512_add_epi32(_mm512_mullo_epi32(l, o.sc[2 * j]), _mm512_mullo_epi32(h, o.sc[2 * j + 1])));
    }
    return q45r_fma(&o, xb, S, acc);
}

// One token over the group at ga and, where gb is not NULL, the group at gb, super-block by super-block
// (q4i_sb1); pf: 0 no prefetch (the group in cache), 1 page-wise (prefetch_stream), 2 every line too,
// 3 every line far ahead as well (pf_line).
// Each group's sums are the same alone or paired; a pair reads two memory streams at once, which the
// read bandwidth needs: its probe reads two (membw.c; docs/engine-measurements.md#q4i_one).
INLINE VNNI512 void q4i_one(const uint8_t *ga, const uint8_t *gb, int64_t nsb, const uint8_t *x, float *ya,
                            float *yb, const int pf) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const __m512i *va = (const __m512i *)(ga + i * IL_SB), *vb = gb ? (const __m512i *)(gb + i * IL_SB) : NULL;
        if (pf) {
            prefetch_stream((const uint8_t *)va + STREAM_PF_AHEAD, IL_SB);
            if (gb) prefetch_stream((const uint8_t *)vb + STREAM_PF_AHEAD, IL_SB);
        }
        const llmb_block_q8_K *xb = (const llmb_block_q8_K *)x + i;
        if (pf == 3) {   // each branch a constant lines: q4i_sb1 inlined without its tests
            a = q4i_sb1(va, xb, 2, a);
            if (gb) b = q4i_sb1(vb, xb, 2, b);
        } else if (pf == 2) {
            a = q4i_sb1(va, xb, 1, a);
            if (gb) b = q4i_sb1(vb, xb, 1, b);
        } else {
            a = q4i_sb1(va, xb, 0, a);
            if (gb) b = q4i_sb1(vb, xb, 0, b);
        }
    }
    _mm512_storeu_ps(ya, a);
    if (gb) _mm512_storeu_ps(yb, b);
}

// NC tokens over one group: its super-blocks' headers from hd (decoded by the caller) or, where hd is
// NULL, decoded here from the group's first 4 vectors
INLINE VNNI512 void q4i_body(const uint8_t *g, const q45r_hdr *hd, int64_t nsb, const uint8_t *x, size_t xs, float *y,
                            int64_t ldy, const int pf, const int NC) {
    __m512 acc[K_PANEL_NC];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    if (NC == 1 && !hd) {   // one token
        q4i_one(g, NULL, nsb, x, y, NULL, pf);
        return;
    }
    for (int64_t i = 0; i < nsb; i++) {
        const __m512i *v = (const __m512i *)(g + i * IL_SB);
        if (pf) prefetch_l2((const uint8_t *)v + STREAM_PF_AHEAD, IL_SB);
        q45r_hdr o;
        if (!hd) q45r_hdr_words(v, &o);
        const llmb_block_q8_K *xb[K_PANEL_NC];
        for (int c = 0; c < NC; c++) xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i;
        q45r_sb(0, hd ? &hd[i] : &o, v + 4, xb, acc, NC);
    }
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

VNNI512 static void q4_K_il_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc,
                                    float *y, int64_t ldy, int stream) {
    const uint8_t *w = vw, *x = vx;
    const int64_t nsb = n / LLMB_QK_K;
    q45r_hdr hd[PANEL_MAX_SB];
    const int keep = nc > K_PANEL_NC && nsb <= PANEL_MAX_SB;   // several token tiles: headers decoded once
    const int pf1 = decode_pf(stream);   // the first token tile's prefetch (q4i_body's pf)
    if (nc == 1) {   // one token: two groups at a time, one from each half of the rows (the last alone)
        const int64_t ng = nr / IL16_G, h = (ng + 1) / 2;
        for (int64_t k = 0; k < h; k++)
            q4i_one(w + (size_t)(k * IL16_G) * ws, k + h < ng ? w + (size_t)((k + h) * IL16_G) * ws : NULL, nsb, x,
                    y + k * IL16_G, y + (k + h) * IL16_G, pf1);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += IL16_G)   // each group from memory once (its first token tile), then from cache
        for (int c0 = 0; c0 < nc; c0 += K_PANEL_NC) {
            const uint8_t *g = w + (size_t)r0 * ws, *xc = x + c0 * xs;
            float *yc = y + c0 * ldy + r0;
            const int pf = c0 == 0 ? pf1 : 0;
            if (keep && c0 == 0)
                for (int64_t i = 0; i < nsb; i++) q45r_hdr_words((const __m512i *)(g + i * IL_SB), &hd[i]);
            const q45r_hdr *h = keep ? hd : NULL;
#define Q4I_RUN(k) q4i_body(g, h, nsb, xc, xs, yc, ldy, pf, k)
            IL_TILE(nc - c0, K_PANEL_NC, Q4I_RUN)
#undef Q4I_RUN
        }
}

// Q6_K panels: the same 16 rows in lanes. Per sub-block s of 16 values T_s = sum q x (q = 0..63, before
// the minus 32; vpdpbusd, |T_s| <= 16 * 63 * 128), then S = sum_s sc_s T_s - 32 sum_s sc_s bsum_s, the
// exact integer of q6_K_body, and fma(d dx, S, acc) per token.
#define Q6R_NC 6   // tokens per Q6_K panel tile (the fastest of 4, 5, 6: docs/engine-measurements.md#register-tiles)

typedef struct {
    __m512i q[64];   // vector g, lane r: values 4g .. 4g + 3 of row r (0..63)
    __m512i sc[16];  // lane r: scale s of row r (int32)
    __m512i sp[8];   // lane r: int16 pair (scale 2p, scale 2p + 1) of row r
    __m512 d;        // lane r: the row's d (0 past the panel's rows)
} q6r_dec;

// values 32 m + 4t .. of a 128-value half, m = 0..3, from ql words t (a) and 8 + t (b) and qh word t (h),
// as q6_K_body unpacks them (lane-wise for 16 rows)
INLINE VNNI512 void q6r_vals4(__m512i a, __m512i b, __m512i h, __m512i q[4]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3);
    q[0] = _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_slli_epi16(_mm512_and_si512(h, m3), 4));
    q[1] = _mm512_or_si512(_mm512_and_si512(b, m4), _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 2), m3), 4));
    q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4),
                           _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 4), m3), 4));
    q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4),
                           _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, 6), m3), 4));
}

// lane r: the signed 8-bit scale s of row r, from the scale words sw[4]
INLINE VNNI512 __m512i q6r_scale(const __m512i *sw, int s) {
    return _mm512_srai_epi32(_mm512_slli_epi32(sw[s / 4], 24 - 8 * (s % 4)), 24);
}

// lane r: the int16 pair (scale 2p, scale 2p + 1) of row r
INLINE VNNI512 __m512i q6r_pair(__m512i s0, __m512i s1) {
    return _mm512_or_si512(_mm512_and_si512(s0, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(s1, 16));
}

// o's scales from the 16 rows' scale words sw[4]
INLINE VNNI512 void q6r_scales(const __m512i *sw, q6r_dec *o) {
    for (int s = 0; s < 16; s++) o->sc[s] = q6r_scale(sw, s);
    for (int p = 0; p < 8; p++) o->sp[p] = q6r_pair(o->sc[2 * p], o->sc[2 * p + 1]);
}

// o's values and scales from the 16 rows' words (lane r: row r): ql[32], qh[16], sw[4] (the scales)
INLINE VNNI512 void q6r_decode_words(const __m512i *ql, const __m512i *qh, const __m512i *sw, q6r_dec *o) {
    for (int hf = 0; hf < 2; hf++)   // vector 32 hf + 8 m + t holds values 128 hf + 32 m + 4t ..
        for (int t = 0; t < 8; t++) {
            __m512i q[4];
            q6r_vals4(ql[16 * hf + t], ql[16 * hf + 8 + t], qh[8 * hf + t], q);
            for (int m = 0; m < 4; m++) o->q[32 * hf + 8 * m + t] = q[m];
        }
    q6r_scales(sw, o);
}

VNNI512 static void q6r_decode(const uint8_t *w, size_t ws, int nr, int64_t i, q6r_dec *o) {
    const size_t b0 = (size_t)i * sizeof(llmb_block_q6_K);
    __m512i ql[32], qh[16], sw[16];
    rows_words(w, ws, nr, b0 + offsetof(llmb_block_q6_K, ql), 16, ql);
    rows_words(w, ws, nr, b0 + offsetof(llmb_block_q6_K, ql) + 64, 16, ql + 16);
    rows_words(w, ws, nr, b0 + offsetof(llmb_block_q6_K, qh), 16, qh);
    rows_words(w, ws, nr, b0 + offsetof(llmb_block_q6_K, scales), 4, sw);
    q6r_decode_words(ql, qh, sw, o);
    float d[K_PANEL_R];
    for (int r = 0; r < K_PANEL_R; r++) d[r] = r < nr ? half_at((const uint8_t *)&((const llmb_block_q6_K *)(w + r * ws) + i)->d) : 0.0f;
    o->d = _mm512_loadu_ps(d);
}

// one decoded super-block o of 16 rows x NC tokens (xb[c]: token c's super-block) into acc[c]
INLINE VNNI512 void q6r_sb(const q6r_dec *o, const llmb_block_q8_K *const *xb, __m512 *acc, const int NC) {
    __m512i S[Q6R_NC];
    for (int c = 0; c < NC; c++) S[c] = _mm512_setzero_si512();
    for (int s = 0; s < 16; s++) {
        __m512i ts[Q6R_NC];
        for (int c = 0; c < NC; c++) ts[c] = _mm512_setzero_si512();
        for (int t = 0; t < 4; t++) {
            const __m512i q = _mm512_load_si512(&o->q[4 * s + t]);
            for (int c = 0; c < NC; c++) {
                int32_t a;
                memcpy(&a, xb[c]->qs + 16 * s + 4 * t, 4);
                ts[c] = _mm512_dpbusd_epi32(ts[c], q, _mm512_set1_epi32(a));
            }
        }
        for (int c = 0; c < NC; c++) S[c] = _mm512_add_epi32(S[c], _mm512_mullo_epi32(ts[c], o->sc[s]));
    }
    for (int c = 0; c < NC; c++) {   // minus 32 sum_s sc_s bsum_s: the bsums of 16 values as int16 pairs
        __m512i B = _mm512_setzero_si512();
        for (int p = 0; p < 8; p++) {
            int32_t bp;
            memcpy(&bp, xb[c]->bsums + 2 * p, 4);
            B = _mm512_dpwssd_epi32(B, o->sp[p], _mm512_set1_epi32(bp));
        }
        S[c] = _mm512_sub_epi32(S[c], _mm512_slli_epi32(B, 5));
        acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(o->d, _mm512_set1_ps(xb[c]->d)), _mm512_cvtepi32_ps(S[c]), acc[c]);
    }
}

INLINE VNNI512 void q6r_body(const q6r_dec *dec, int64_t nsb, const uint8_t *x, size_t xs, float *y, int64_t ldy,
                             __mmask16 rows, const int NC) {
    __m512 acc[Q6R_NC];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const llmb_block_q8_K *xb[Q6R_NC];
        for (int c = 0; c < NC; c++) xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i;
        q6r_sb(dec + i, xb, acc, NC);
    }
    for (int c = 0; c < NC; c++) _mm512_mask_storeu_ps(y + c * ldy, rows, acc[c]);
}

#define Q6_K_BODY(k) q6r_body(dec, nsb, xc, xs, yc, ldy, rows, k)
K_PANEL(q6_K, llmb_block_q6_K, q6r_dec, q6r_decode, Q6R_NC, Q6_K_BODY)

// Interleaved Q6_K (groups of 16 rows): super-block i of a group is 52 vectors (q6i_words), lane r of
// vector k = word k of row r's recoded block (vecdot.c, q6_K_recode: the values whole, in reading order,
// vectors 0..47; the scales 48..51), and the group's 16 d of super-block i are 16 halves after the words of
// super-block i and its twin (llmb_il_inline_tail: two super-blocks in 105 whole lines). q6i_vals4 unpacks
// them (q6i_decode into the panel's table), q6r_sb runs the tokens: the panel's bits, the dot's. Each group is read from memory once, prefetched into L2 STREAM_PF_AHEAD bytes ahead:
// with more token tiles than one, all its super-blocks are decoded once into a panel's table first (as
// K_PANEL does; rows too long for it decode again per tile), else each super-block is decoded and run at
// once; one token (q6i_sb1) runs each 4 values as they are unpacked, nothing stored. Q6_K's unpacking
// costs more than Q4_K's, so the layout gains less than Q4_K's does (docs/engine-measurements.md#interleaved-q6_k).
#define IL6_SB sizeof(llmb_il16_q6_K)   // bytes of one super-block's words in a group
// One token prefetches further ahead than STREAM_PF_AHEAD, page-wise (prefetch_stream), and with
// LLMB_PREFETCH_LINES every line LINE_PF_AHEAD ahead into L1 too (pf_line): nearer lost in the engine
// (docs/engine-measurements.md#q6_pf_ahead).
#define Q6_PF_AHEAD 65536

#define IL6_TAIL (IL16_G * 2)   // bytes of one super-block's d in a group
#define IL6_RUN llmb_il_inline_tail(LLMB_TYPE_Q6_K, IL16_G)   // super-blocks whose d follow their words together

// super-block i's words in the group at g
INLINE const __m512i *q6i_words(const uint8_t *g, int64_t i) {
    return (const __m512i *)(g + llmb_il_words_at(i, IL6_SB, IL6_TAIL, IL6_RUN));
}
// lane r: row r's d of super-block i of the group at g
INLINE VNNI512 __m512 q6i_d(const uint8_t *g, int64_t nsb, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + llmb_il_tail_at(nsb, i, IL6_SB, IL6_TAIL, IL6_RUN))));
}

// bitwise select: the bits of x where m has ones, of y where it has zeros
#define SEL_BITS(m, x, y) _mm512_ternarylogic_epi32(x, y, m, 0xE4)

// The 4 values of q6r_vals4 from the recoded vectors (vecdot.c, q6_K_recode) a, b, c at v (vectors 24 hf + 3t
// to 24 hf + 3t + 2 of a super-block): q[0..2] the values of the low 6 bits of a, b, c, q[3] 4 times the
// value whose 2-bit parts are bits 6-7 of a, b, c (low to high), made in bits 2-7 without shifting them
// back: 8 operations for the 4 vectors where q6r_vals4 needs 21 (9 of them shifts)
INLINE VNNI512 void q6i_vals4(const __m512i *v, __m512i q[4]) {
    const __m512i a = _mm512_loadu_si512(v), b = _mm512_loadu_si512(v + 1), c = _mm512_loadu_si512(v + 2);
    const __m512i m6 = _mm512_set1_epi8(0x3F);
    q[0] = _mm512_and_si512(a, m6), q[1] = _mm512_and_si512(b, m6), q[2] = _mm512_and_si512(c, m6);
    const __m512i hi2 = SEL_BITS(_mm512_set1_epi8((char)0xC0), c, _mm512_srli_epi16(b, 2));   // bits 4-5: b's 6-7
    q[3] = _mm512_and_si512(SEL_BITS(_mm512_set1_epi8((char)0xF0), hi2, _mm512_srli_epi16(a, 4)),   // 2-3: a's 6-7
                            _mm512_set1_epi8((char)0xFC));
}

INLINE VNNI512 void q6i_decode(const uint8_t *g, int64_t nsb, int64_t i, int pf, const int l1, q6r_dec *o) {
    const __m512i *v = q6i_words(g, i);
    if (pf) prefetch_l2((const uint8_t *)v + STREAM_PF_AHEAD, IL6_SB);
    if (l1)
        for (size_t b = 0; b < IL6_SB; b += 64) pf_line((const uint8_t *)v + b, 1);
    for (int hf = 0; hf < 2; hf++)   // vector 32 hf + 8 m + t holds values 128 hf + 32 m + 4t ..
        for (int t = 0; t < 8; t++) {
            __m512i q[4];
            q6i_vals4(v + 24 * hf + 3 * t, q);
            q[3] = _mm512_srli_epi16(q[3], 2);   // exact: bits 0-1 of every byte are 0
            for (int m = 0; m < 4; m++) o->q[32 * hf + 8 * m + t] = q[m];
        }
    __m512i sw[4];
    for (int k = 0; k < 4; k++) sw[k] = _mm512_loadu_si512(v + 48 + k);
    q6r_scales(sw, o);
    o->d = q6i_d(g, nsb, i);
}

// One token over super-block i of a group without storing the decoded values: q6r_sb's integers T_s
// (exact, in any order) as each 4 values of the 16 rows are unpacked (q6i_vals4), then its
// S and fma
INLINE VNNI512 __m512 q6i_sb1(const uint8_t *g, int64_t nsb, int64_t i, const llmb_block_q8_K *xb, int pf,
                              const int lines, __m512 acc) {
    const __m512i *v = q6i_words(g, i);
    if (pf) prefetch_stream((const uint8_t *)v + Q6_PF_AHEAD, IL6_SB);
    __m512i ts[16], sw[4];
    for (int s = 0; s < 16; s++) ts[s] = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int hf = 0; hf < 2; hf++)
#pragma GCC unroll 8
        for (int t = 0; t < 8; t++) {
            __m512i q[4];
            q6i_vals4(v + 24 * hf + 3 * t, q);
            if (lines)
                for (int k = 0; k < 3; k++) pf_line(v + 24 * hf + 3 * t + k, lines);
            for (int m = 0; m < 4; m++) {   // values 4k .. 4k + 3 of every row, k = 32 hf + 8 m + t: sub-block k / 4
                const int k = 32 * hf + 8 * m + t;
                int32_t xa;
                memcpy(&xa, xb->qs + 4 * k, 4);
                ts[k / 4] = _mm512_dpbusd_epi32(ts[k / 4], q[m], _mm512_set1_epi32(xa));
            }
        }
    for (int s = 6; s < 16; s += 8)   // q[3]'s sub-blocks summed 4 times their values: exact division
        ts[s] = _mm512_srai_epi32(ts[s], 2), ts[s + 1] = _mm512_srai_epi32(ts[s + 1], 2);
    for (int k = 0; k < 4; k++) sw[k] = _mm512_loadu_si512(v + 48 + k);
    if (lines)
        for (int k = 0; k < 4; k++) pf_line(v + 48 + k, lines);
    __m512i S = _mm512_setzero_si512(), B = _mm512_setzero_si512();
    for (int p = 0; p < 8; p++) {
        const __m512i s0 = q6r_scale(sw, 2 * p), s1 = q6r_scale(sw, 2 * p + 1);
        S = _mm512_add_epi32(S, _mm512_add_epi32(_mm512_mullo_epi32(ts[2 * p], s0), _mm512_mullo_epi32(ts[2 * p + 1], s1)));
        int32_t bp;
        memcpy(&bp, xb->bsums + 2 * p, 4);
        B = _mm512_dpwssd_epi32(B, q6r_pair(s0, s1), _mm512_set1_epi32(bp));
    }
    S = _mm512_sub_epi32(S, _mm512_slli_epi32(B, 5));
    return _mm512_fmadd_ps(_mm512_mul_ps(q6i_d(g, nsb, i), _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(S), acc);
}

// One token over the group at ga and, where gb is not NULL, the group at gb (a second memory stream, as
// q4i_one), super-block by super-block (q6i_sb1); pf as q4i_one's
INLINE VNNI512 void q6i_one(const uint8_t *ga, const uint8_t *gb, int64_t nsb, const uint8_t *x, float *ya,
                            float *yb, const int pf) {
    __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const llmb_block_q8_K *xb = (const llmb_block_q8_K *)x + i;
        if (pf == 3) {
            a = q6i_sb1(ga, nsb, i, xb, 1, 2, a);
            if (gb) b = q6i_sb1(gb, nsb, i, xb, 1, 2, b);
        } else if (pf == 2) {
            a = q6i_sb1(ga, nsb, i, xb, 1, 1, a);
            if (gb) b = q6i_sb1(gb, nsb, i, xb, 1, 1, b);
        } else {
            a = q6i_sb1(ga, nsb, i, xb, pf, 0, a);
            if (gb) b = q6i_sb1(gb, nsb, i, xb, pf, 0, b);
        }
    }
    _mm512_storeu_ps(ya, a);
    if (gb) _mm512_storeu_ps(yb, b);
}

// NC tokens over one group, each super-block decoded as it comes
INLINE VNNI512 void q6i_body(const uint8_t *g, int64_t nsb, const uint8_t *x, size_t xs, float *y, int64_t ldy,
                            const int pf, const int NC) {
    __m512 acc[Q6R_NC];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    if (NC == 1) {
        q6i_one(g, NULL, nsb, x, y, NULL, pf);
        return;
    }
    for (int64_t i = 0; i < nsb; i++) {
        q6r_dec o;
        q6i_decode(g, nsb, i, pf, pf != 0, &o);
        const llmb_block_q8_K *xb[Q6R_NC];
        for (int c = 0; c < NC; c++) xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i;
        q6r_sb(&o, xb, acc, NC);
    }
    for (int c = 0; c < NC; c++) _mm512_storeu_ps(y + c * ldy, acc[c]);
}

VNNI512 static void q6_K_il_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc,
                                    float *y, int64_t ldy, int stream) {
    const uint8_t *w = vw, *x = vx;
    const int64_t nsb = n / LLMB_QK_K;
    const int keep = nc > Q6R_NC && nsb <= PANEL_MAX_SB;   // several token tiles: the group decoded once
    const int pf1 = decode_pf(stream);   // the first token tile's prefetch (q6i_body's pf)
    if (nc == 1) {   // one token: two groups at a time, one from each half of the rows (the last alone)
        const int64_t ng = nr / IL16_G, h = (ng + 1) / 2;
        for (int64_t k = 0; k < h; k++) {
            const uint8_t *ga = w + (size_t)(k * IL16_G) * ws, *gb = k + h < ng ? w + (size_t)((k + h) * IL16_G) * ws : NULL;
            q6i_one(ga, gb, nsb, x, y + k * IL16_G, y + (k + h) * IL16_G, pf1);
        }
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += IL16_G) {
        const uint8_t *g = w + (size_t)r0 * ws;
        if (keep) {
            q6r_dec dec[PANEL_MAX_SB];
            for (int64_t i = 0; i < nsb; i++) q6i_decode(g, nsb, i, 1, nc <= BATCH_PF_TOKENS, &dec[i]);
            for (int c0 = 0; c0 < nc; c0 += Q6R_NC) {
                const uint8_t *xc = x + c0 * xs;
                float *yc = y + c0 * ldy + r0;
#define Q6I_KEPT(k) q6r_body(dec, nsb, xc, xs, yc, ldy, 0xFFFF, k)
                IL_TILE(nc - c0, Q6R_NC, Q6I_KEPT)
#undef Q6I_KEPT
            }
            continue;
        }
        for (int c0 = 0; c0 < nc; c0 += Q6R_NC) {
            const uint8_t *xc = x + c0 * xs;
            float *yc = y + c0 * ldy + r0;
#define Q6I_RUN(k) q6i_body(g, nsb, xc, xs, yc, ldy, c0 == 0 ? pf1 : 0, k)
            IL_TILE(nc - c0, Q6R_NC, Q6I_RUN)
#undef Q6I_RUN
        }
    }
}

// Interleaved Q8_0 (vecdot.c: q8_0_recode, then groups of 16 rows): block i of a group is 8 vectors,
// lane r of vector k the values 4k .. 4k + 3 of row r plus 128, then the block's d, 16 halves
// (llmb_il_inline_tail). vpdpbusd of vector k against token x's values 4k .. 4k + 3 (broadcast),
// starting from -128 sum x (q8i_tok, made once per token and block for all the call's groups), leaves
// lane r with the exact sum w x of the block; then sum += (float)isum * (d_w * d_x) as q8_0_body does, so
// 1 conversion and 3 float operations per 8 vpdpbusd (the dot's bits). Tiles of NG groups x NC tokens.
#define Q8I_G 16
#define Q8I_BLK sizeof(llmb_il16_q8_0)   // bytes of a block's words in a group
#define Q8I_STRIDE (Q8I_BLK + 2 * Q8I_G)   // bytes from one block of a group to the next (its words, its d)
#define Q8I_NC 6                        // tokens per register tile
// One token runs 4 groups side by side (4 streams) and prefetches the first line of each page 32 KiB
// ahead (prefetch_stream): the best of the layouts and distances tried (docs/engine-measurements.md#q8i_pf_ahead),
// on the AMD EPYC Zen 4 host while the d were a second stream. Under LLMB_PREFETCH_LINES (AMD from Zen 5 on),
// with the d inline, one group (one stream) a thread read 1.10-1.25x the bytes/s of 4 (docs/engine-measurements.md#q8i-ng1-lines).
#define Q8I_PF_AHEAD 32768
#define Q8I_NG1 4         // groups side by side at one token
#define Q8I_NG1_LINES 1   // and under LLMB_PREFETCH_LINES
// Weights streaming from DRAM under LLMB_PREFETCH_FAR (llmb_prefetch_mode; the default on Intel CPUs) run
// one token 2 groups side by side and prefetch every line as the Q4_K / Q6_K kernels do (pf_line: 4 KiB
// ahead into L1, 16 KiB into L2), besides the page-wise prefetch (docs/engine-measurements.md#q8i_ng1_far).
#define Q8I_NG1_FAR 2
#ifndef LLMB_Q8I_TOKS   // (token, block) entries of the q8i_tok table on the stack (the C tests: 256, so that
#define LLMB_Q8I_TOKS (128 * 1024 / 8)   // their rows and tokens run several chunks and ranges)
#endif
#define Q8I_TOKS LLMB_Q8I_TOKS

typedef struct {
    int32_t c;   // -128 x the sum of the block's values
    float d;
} q8i_tok;

// xt[c * bn + i] for the nc tokens at x and blocks i0 .. i0 + bn - 1
INLINE VNNI512 void q8i_toks(const uint8_t *x, size_t xs, int nc, int64_t i0, int64_t bn, q8i_tok *xt) {
    for (int c = 0; c < nc; c++)
        for (int64_t i = 0; i < bn; i++) {
            const llmb_block_q8_0 *b = (const llmb_block_q8_0 *)(x + c * xs) + i0 + i;
            // sum of (q + 128) by sad against 0: four 64-bit lanes below 2^11, summed as 32-bit lanes
            const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(_mm256_loadu_si256((const __m256i *)b->qs),
                                                               _mm256_set1_epi8((char)0x80)), _mm256_setzero_si256());
            const int32_t sum = hsum_epi32(s) - 128 * LLMB_QK;
            xt[c * bn + i] = (q8i_tok){-128 * sum, half_at((const uint8_t *)&b->d)};
        }
}

// NG groups (gs bytes apart) x NC tokens over blocks i0 .. i0 + bn - 1 of nb, from y where !first; pf: 0 no
// prefetch, 1 one token page-wise (more tokens: every line into L2), 2 one token, every line too (pf_line), 3 more
// tokens, every line into L2 and into L1 too (pf_line)
INLINE VNNI512 void q8i_body(const uint8_t *g, size_t gs, int64_t nb, int64_t i0, int64_t bn, const uint8_t *x,
                             size_t xs, const q8i_tok *xt, float *y, int64_t ldy, const int first, const int pf,
                             const int NG, const int NC) {
    __m512 acc[4][Q8I_NC];
    for (int q = 0; q < NG; q++)
        for (int c = 0; c < NC; c++) acc[q][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + c * ldy + Q8I_G * q);
    for (int64_t i = 0; i < bn; i++) {
        const uint8_t *v = g + (i0 + i) * Q8I_STRIDE;
        if (pf)   // one token: page-wise, Q8I_PF_AHEAD ahead (prefetch_stream); more: every line
            for (int q = 0; q < NG; q++) {
                if (NC == 1) prefetch_stream(v + q * gs + Q8I_PF_AHEAD, Q8I_STRIDE);
                else prefetch_l2(v + q * gs + STREAM_PF_AHEAD, Q8I_STRIDE);
            }
        __m512i s[4][Q8I_NC], u[4][2];   // NC <= 2: the odd vectors' sums apart (two chains of 4 vpdpbusd)
        for (int c = 0; c < NC; c++)
            for (int q = 0; q < NG; q++) s[q][c] = _mm512_set1_epi32(xt[c * bn + i].c);
        for (int c = 0; c < NC && NC <= 2; c++)
            for (int q = 0; q < NG; q++) u[q][c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i wv[4];
            for (int q = 0; q < NG; q++) {
                wv[q] = _mm512_loadu_si512(v + q * gs + 64 * k);
                if (pf == 2) pf_line(v + q * gs + 64 * k, 2);   // one token from DRAM: every line too (Q8I_NG1_FAR)
                else if (pf == 3) pf_line(v + q * gs + 64 * k, 1);   // a batch: into L1 too (BATCH_PF_TOKENS)
            }
            for (int c = 0; c < NC; c++) {
                int32_t a;
                memcpy(&a, ((const llmb_block_q8_0 *)(x + c * xs) + i0 + i)->qs + 4 * k, 4);
                const __m512i xb = _mm512_set1_epi32(a);
                for (int q = 0; q < NG; q++) {
                    if (NC <= 2 && k % 2) u[q][c] = _mm512_dpbusd_epi32(u[q][c], wv[q], xb);
                    else s[q][c] = _mm512_dpbusd_epi32(s[q][c], wv[q], xb);
                }
            }
        }
        for (int c = 0; c < NC && NC <= 2; c++)
            for (int q = 0; q < NG; q++) s[q][c] = _mm512_add_epi32(s[q][c], u[q][c]);
        for (int q = 0; q < NG; q++) {
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(v + q * gs + Q8I_BLK)));
            for (int c = 0; c < NC; c++)
                acc[q][c] = _mm512_add_ps(acc[q][c], _mm512_mul_ps(_mm512_cvtepi32_ps(s[q][c]),
                                                                   _mm512_mul_ps(dw, _mm512_set1_ps(xt[c * bn + i].d))));
        }
    }
    for (int q = 0; q < NG; q++)
        for (int c = 0; c < NC; c++) _mm512_storeu_ps(y + c * ldy + Q8I_G * q, acc[q][c]);
}

// Tokens in chunks whose q8i_tok entries fit the table (rows past Q8I_TOKS blocks: ranges of blocks, the
// sums carried in y), each chunk over all the call's groups: two at a time from LLMB_SMALL_TOKENS + 1
// tokens (prefill: each token's broadcast feeds 2 vpdpbusd), Q8I_NG1 at one token, one otherwise
VNNI512 static void q8_0_il_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc,
                                    float *y, int64_t ldy, int stream) {
    const int far = nc == 1 && far_pf(stream);   // Q8I_NG1_FAR
    const uint8_t *w = vw, *x = vx;
    const int64_t nb = n / LLMB_QK, br = nb < Q8I_TOKS ? nb : Q8I_TOKS;
    const size_t gs = Q8I_G * ws;
    const int ng1 = far ? Q8I_NG1_FAR : llmb_prefetch_mode() == LLMB_PREFETCH_LINES ? Q8I_NG1_LINES : Q8I_NG1;
    const int tc = (int)(Q8I_TOKS / br), ng = nc > LLMB_SMALL_TOKENS ? 2 : nc == 1 ? ng1 : 1;
    q8i_tok xt[Q8I_TOKS];
    for (int c0 = 0; c0 < nc; c0 += tc) {
        const int cn = nc - c0 < tc ? nc - c0 : tc;
        for (int64_t i0 = 0; i0 < nb; i0 += br) {
            const int64_t bn = nb - i0 < br ? nb - i0 : br;
            q8i_toks(x + c0 * xs, xs, cn, i0, bn, xt);
            for (int r0 = 0, k; r0 < nr; r0 += k * Q8I_G) {
                k = (nr - r0) / Q8I_G >= ng ? ng : 1;   // groups side by side (the last ones alone)
                const uint8_t *g = w + (size_t)r0 * ws;
                for (int t0 = 0; t0 < cn; t0 += Q8I_NC) {
                    const uint8_t *xc = x + (c0 + t0) * xs;
                    const q8i_tok *xtc = xt + t0 * bn;
                    float *yc = y + (c0 + t0) * ldy + r0;
                    const int first = i0 == 0;   // q8i_body's pf, below
                    const int pf = t0 ? 0 : cn == 1 ? 1 + far : cn <= BATCH_PF_TOKENS ? 3 : 1;
                    if (k == 4) q8i_body(g, gs, nb, i0, bn, xc, xs, xtc, yc, ldy, first, pf, 4, 1);
                    else if (k == 2) {
#define Q8I_RUN2(t) q8i_body(g, gs, nb, i0, bn, xc, xs, xtc, yc, ldy, first, pf, 2, t)
                        IL_TILE(cn - t0, Q8I_NC, Q8I_RUN2)
#undef Q8I_RUN2
                    } else {
#define Q8I_RUN1(t) q8i_body(g, gs, nb, i0, bn, xc, xs, xtc, yc, ldy, first, pf, 1, t)
                        IL_TILE(cn - t0, Q8I_NC, Q8I_RUN1)
#undef Q8I_RUN1
                    }
                }
            }
        }
    }
}

void llmb_vd_avx512_k_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_AVX512 || !llmb_cpu_has("avx512vnni")) return;
    t[LLMB_TYPE_Q4_K].panel = q4_K_panel_vnni512;
    t[LLMB_TYPE_Q5_K].panel = q5_K_panel_vnni512;
    t[LLMB_TYPE_Q6_K].panel = q6_K_panel_vnni512;
    t[LLMB_TYPE_Q4_K].panel_r = t[LLMB_TYPE_Q5_K].panel_r = t[LLMB_TYPE_Q6_K].panel_r = K_PANEL_R;
    t[LLMB_TYPE_Q4_K].il = q4_K_il_vnni512;
    t[LLMB_TYPE_Q6_K].il = q6_K_il_vnni512;
    t[LLMB_TYPE_Q4_K].il_r = t[LLMB_TYPE_Q6_K].il_r = IL16_G;
    t[LLMB_TYPE_Q8_0].il = q8_0_il_vnni512;
    t[LLMB_TYPE_Q8_0].il_r = Q8I_G;
}
#else
void llmb_vd_avx512_k_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif
