// vecdot_iq.c — AVX2 dot, tile and panel kernels of the I-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S and IQ1_M against Q8_K activations (quants_iq.c holds the layouts' readers and the references).
//
// Every type is decoded a chunk of 32 values at a time into one form: u = |w| and s (bytes whose signs are
// w's), and k, the odd sub-block scales 2 s + 1 as int16 (lanes 0..7 for values 0..15, 8..15 for 16..31).
// One token: sum_j w_j x_j ls = madd(maddubs(u, sign(x, s)), k), each chunk used as it is decoded. Several
// tokens (tiles, panels): each block is decoded once into the signed w and a correction 128 sum w ls, and
// each token's chunk made unsigned once, x + 128, so a chunk costs madd(maddubs(x + 128, w), k) and the
// block's sum is taken less the correction. Both are exact: |u| <= 62 and |x| <= 127 (x + 128 <= 255) keep
// maddubs from saturating. Then per block, as the references: acc += (d_w d_x) * (float)bsum, and the
// result is acc times the type's constant (IQ2: 1/8, IQ3_XXS: 1/4, IQ3_S: 1). IQ1 adds a shift of +-1/8
// to each lattice value: it is decoded as 8 grid +- 1, with the constant 1/8; (d_w d_x) (8 v) / 8 and
// ggml's (d_w d_x) v round alike, since scaling by 8 is exact. So every kernel here gives the reference's
// bits (barring products so small they are subnormal), and its tiles and panels the dot's.
#include "simd_x86.h"

#if defined(__x86_64__) && defined(__GNUC__)

// 8 sign bits -> 8 bytes of +1 / -1 (the second operand of vpsignb); sign_bytes7: the same from 7 stored bits
// and their parity (llmb_iq_signs7). Filled by the installer.
static uint64_t sign_bytes[256], sign_bytes7[128];

// A block decoded for several tokens: per chunk the signed values w and the scales k; corr = 128 sum w ls,
// so that sum (x + 128) w ls - corr = sum x w ls (x + 128 is unsigned: vpmaddubsw's first operand)
typedef struct {
    __m256i w[8], k[8];
    int32_t corr;
    float d;
} iq_block;

AVX2 INLINE __m256i grid8x4(const uint8_t (*g)[8], uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
    uint64_t a, b, c, e;
    memcpy(&a, g[i0], 8), memcpy(&b, g[i1], 8), memcpy(&c, g[i2], 8), memcpy(&e, g[i3], 8);
    return _mm256_set_epi64x((int64_t)e, (int64_t)c, (int64_t)b, (int64_t)a);
}

AVX2 INLINE __m256i grid4x8(const uint8_t (*g)[4], uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3, uint32_t i4,
                            uint32_t i5, uint32_t i6, uint32_t i7) {
    uint32_t v[8];
    memcpy(&v[0], g[i0], 4), memcpy(&v[1], g[i1], 4), memcpy(&v[2], g[i2], 4), memcpy(&v[3], g[i3], 4);
    memcpy(&v[4], g[i4], 4), memcpy(&v[5], g[i5], 4), memcpy(&v[6], g[i6], 4), memcpy(&v[7], g[i7], 4);
    return _mm256_set_epi32((int)v[7], (int)v[6], (int)v[5], (int)v[4], (int)v[3], (int)v[2], (int)v[1], (int)v[0]);
}

AVX2 INLINE __m256i signs4(uint32_t s0, uint32_t s1, uint32_t s2, uint32_t s3) {
    return _mm256_set_epi64x((int64_t)sign_bytes[s3 & 255], (int64_t)sign_bytes[s2 & 255],
                             (int64_t)sign_bytes[s1 & 255], (int64_t)sign_bytes[s0 & 255]);
}

// 4 groups' 7-bit signs (each a uint32 holding them in its low 7 bits)
AVX2 INLINE __m256i signs7(uint32_t s0, uint32_t s1, uint32_t s2, uint32_t s3) {
    return _mm256_set_epi64x((int64_t)sign_bytes7[s3 & 127], (int64_t)sign_bytes7[s2 & 127],
                             (int64_t)sign_bytes7[s1 & 127], (int64_t)sign_bytes7[s0 & 127]);
}
AVX2 INLINE __m256i signs7x4(uint32_t a) { return signs7(a, a >> 7, a >> 14, a >> 21); }

AVX2 INLINE __m256i scales16(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo)); }

AVX2 INLINE uint32_t u32_at(const void *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

// IQ1: w = 8 g + shift (g -1, 0, 1; shift bytes +-1): u = |w|, s = w
AVX2 INLINE void iq1_values(__m256i *u, __m256i *s, __m256i g, __m256i shift) {
    const __m256i w = _mm256_add_epi8(_mm256_sign_epi8(_mm256_set1_epi8(8), g), shift);
    *u = _mm256_abs_epi8(w), *s = w;
}

// chunk j (values 32 j .. 32 j + 31) of a block: u, s and k as described above
AVX2 INLINE void iq_chunk(const int type, const uint8_t *blk, int j, __m256i *u, __m256i *s, __m256i *k) {
    switch (type) {
    case LLMB_TYPE_IQ2_XXS: {
        const llmb_block_iq2_xxs *b = (const llmb_block_iq2_xxs *)blk;
        const uint32_t idx = u32_at(&b->qs[4 * j]), aux = u32_at(&b->qs[4 * j + 2]);
        *u = grid8x4(llmb_iq2xxs_grid, idx & 255, (idx >> 8) & 255, (idx >> 16) & 255, idx >> 24);
        *s = signs7x4(aux);
        *k = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
        break;
    }
    case LLMB_TYPE_IQ2_XS: {
        const llmb_block_iq2_xs *b = (const llmb_block_iq2_xs *)blk;
        const uint16_t *q = &b->qs[4 * j];
        *u = grid8x4(llmb_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
        *s = signs7(q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9);
        *k = scales16(2 * (b->scales[j] & 15) + 1, 2 * (b->scales[j] >> 4) + 1);
        break;
    }
    case LLMB_TYPE_IQ2_S: {
        const llmb_block_iq2_s *b = (const llmb_block_iq2_s *)blk;
        const uint8_t *q = &b->qs[4 * j], *sg = &b->qs[32 + 4 * j];
        const uint32_t h = b->qh[j];
        *u = grid8x4(llmb_iq2s_grid, q[0] | (h & 3) << 8, q[1] | (h >> 2 & 3) << 8, q[2] | (h >> 4 & 3) << 8,
                     q[3] | (h >> 6) << 8);
        *s = signs4(sg[0], sg[1], sg[2], sg[3]);
        *k = scales16(2 * (b->scales[j] & 15) + 1, 2 * (b->scales[j] >> 4) + 1);
        break;
    }
    case LLMB_TYPE_IQ3_XXS: {
        const llmb_block_iq3_xxs *b = (const llmb_block_iq3_xxs *)blk;
        const uint8_t *q = &b->qs[8 * j];
        const uint32_t aux = u32_at(&b->qs[64 + 4 * j]);
        *u = grid4x8(llmb_iq3xxs_grid, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]);
        *s = signs7x4(aux);
        *k = _mm256_set1_epi16((short)(2 * (aux >> 28) + 1));
        break;
    }
    case LLMB_TYPE_IQ3_S: {
        const llmb_block_iq3_s *b = (const llmb_block_iq3_s *)blk;
        const uint8_t *q = &b->qs[8 * j], *sg = &b->signs[4 * j];
        const uint32_t h = b->qh[j];
        *u = grid4x8(llmb_iq3s_grid, q[0] | (h & 1) << 8, q[1] | (h & 2) << 7, q[2] | (h & 4) << 6, q[3] | (h & 8) << 5,
                     q[4] | (h & 16) << 4, q[5] | (h & 32) << 3, q[6] | (h & 64) << 2, q[7] | (h & 128) << 1);
        *s = signs4(sg[0], sg[1], sg[2], sg[3]);
        *k = _mm256_set1_epi16((short)(2 * ((b->scales[j / 2] >> 4 * (j % 2)) & 15) + 1));
        break;
    }
    case LLMB_TYPE_IQ1_S: {
        const llmb_block_iq1_s *b = (const llmb_block_iq1_s *)blk;
        const uint8_t(*g)[8] = (const uint8_t(*)[8])llmb_iq1s_grid;
        const uint8_t *q = &b->qs[4 * j];
        const uint32_t h = b->qh[j];
        iq1_values(u, s, grid8x4(g, q[0] | (h & 7) << 8, q[1] | (h >> 3 & 7) << 8, q[2] | (h >> 6 & 7) << 8,
                                 q[3] | (h >> 9 & 7) << 8),
                   _mm256_set1_epi8(h & 0x8000 ? -1 : 1));
        *k = _mm256_set1_epi16((short)(2 * ((h >> 12) & 7) + 1));
        break;
    }
    case LLMB_TYPE_IQ1_M: {
        const llmb_block_iq1_m *b = (const llmb_block_iq1_m *)blk;
        const uint8_t(*g)[8] = (const uint8_t(*)[8])llmb_iq1s_grid;
        const uint8_t *q = &b->qs[4 * j];
        const uint32_t h0 = b->qh[2 * j], h1 = b->qh[2 * j + 1];
        // the groups' shift signs, bits 3, 7, 11, 15 of h0 | h1 << 8: each 64-bit lane all ones or 0, then | 1 per byte
        const __m256i bit = _mm256_and_si256(_mm256_srlv_epi64(_mm256_set1_epi64x(h0 | h1 << 8), _mm256_setr_epi64x(3, 7, 11, 15)),
                                             _mm256_set1_epi64x(1));
        iq1_values(u, s, grid8x4(g, q[0] | (h0 & 7) << 8, q[1] | (h0 >> 4 & 7) << 8, q[2] | (h1 & 7) << 8,
                                 q[3] | (h1 >> 4 & 7) << 8),
                   _mm256_or_si256(_mm256_sub_epi64(_mm256_setzero_si256(), bit), _mm256_set1_epi8(1)));
        uint16_t sc;
        memcpy(&sc, &b->scales[2 * (j / 2)], 2);
        const uint32_t ls = (uint32_t)sc >> 6 * (j % 2);
        *k = scales16(2 * (ls & 7) + 1, 2 * (ls >> 3 & 7) + 1);
        break;
    }
    default: break;
    }
}

// the block's d (IQ1_M: gathered from its scale words)
AVX2 INLINE float iq_d(const int type, const uint8_t *blk) {
    if (type != LLMB_TYPE_IQ1_M) return half_at(blk);
    const llmb_half dh = llmb_iq1_m_d((const llmb_block_iq1_m *)blk);
    return half_at((const uint8_t *)&dh);
}

AVX2 INLINE void iq_decode(const int type, const uint8_t *blk, iq_block *o) {
    __m256i corr = _mm256_setzero_si256();
    o->d = iq_d(type, blk);
    for (int j = 0; j < 8; j++) {
        __m256i u, sg;
        iq_chunk(type, blk, j, &u, &sg, &o->k[j]);
        o->w[j] = type == LLMB_TYPE_IQ1_S || type == LLMB_TYPE_IQ1_M ? sg : _mm256_sign_epi8(u, sg);
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), o->w[j]);
        corr = _mm256_add_epi32(corr, _mm256_madd_epi16(pairs, o->k[j]));
    }
    o->corr = 128 * hsum_epi32(corr);
}

AVX2 INLINE float iq_constant(const int type) {
    return type == LLMB_TYPE_IQ3_S ? 1.0f : type == LLMB_TYPE_IQ3_XXS ? 0.25f : 0.125f;
}

// 8 int32 lanes summing w x ls over one chunk (IQ1: (8 g +- 1) x ls) from |w| and w's signs, exact
AVX2 INLINE __m256i iq_dot32(__m256i u, __m256i s, __m256i k, const int8_t *q8) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)q8);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(x, s)), k);
}

// the block's integer sum against one token's chunks made unsigned (xu[j] = x + 128)
AVX2 INLINE int32_t iq_bsum(const iq_block *b, const __m256i *xu) {
    __m256i acc = _mm256_setzero_si256();
    for (int j = 0; j < 8; j++)
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(xu[j], b->w[j]), b->k[j]));
    return hsum_epi32(acc) - b->corr;
}

AVX2 INLINE void iq_unsigned(const llmb_block_q8_K *xb, __m256i *xu) {
    for (int j = 0; j < 8; j++)
        xu[j] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(xb->qs + 32 * j)), _mm256_set1_epi8(-128));
}

// An NR x NC tile (GEN's body): at one token each chunk is used as it is decoded; else each row's block is
// decoded once for the NC tokens
INLINE AVX2 void iq_body(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y,
                         int64_t ldy, const int NR, const int NC) {
    const size_t bytes = llmb_type_traits_get(type)->type_size;
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C] = {{0}};
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        if (NC == 1) {
            const llmb_block_q8_K *xb = (const llmb_block_q8_K *)x + i;
            for (int r = 0; r < NR; r++) {
                const uint8_t *blk = w + r * ws + i * bytes;
                prefetch_w(blk, bytes);
                __m256i sum = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) {
                    __m256i u, sg, k;
                    iq_chunk(type, blk, j, &u, &sg, &k);
                    sum = _mm256_add_epi32(sum, iq_dot32(u, sg, k, xb->qs + 32 * j));
                }
                acc[r][0] += (iq_d(type, blk) * xb->d) * (float)hsum_epi32(sum);
            }
            continue;
        }
        iq_block b[LLMB_TILE_MAX_R];
        for (int r = 0; r < NR; r++) {
            prefetch_w(w + r * ws + i * bytes, bytes);
            iq_decode(type, w + r * ws + i * bytes, &b[r]);
        }
        for (int c = 0; c < NC; c++) {
            const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
            __m256i xu[8];
            iq_unsigned(xb, xu);
            for (int r = 0; r < NR; r++) acc[r][c] += (b[r].d * xb->d) * (float)iq_bsum(&b[r], xu);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = iq_constant(type) * acc[r][c];
}

// A panel: nr <= LLMB_PANEL_R rows, each block decoded once for all nc tokens, y the accumulator
INLINE AVX2 void iq_panel(const int type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs,
                          int nc, float *y, int64_t ldy) {
    const size_t bytes = llmb_type_traits_get(type)->type_size;
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) y[c * ldy + r] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++) {
        iq_block b[LLMB_PANEL_R];
        for (int r = 0; r < nr; r++) iq_decode(type, w + r * ws + i * bytes, &b[r]);
        for (int c = 0; c < nc; c++) {
            const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
            __m256i xu[8];
            iq_unsigned(xb, xu);
            for (int r = 0; r < nr; r++) y[c * ldy + r] += (b[r].d * xb->d) * (float)iq_bsum(&b[r], xu);
        }
    }
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) y[c * ldy + r] *= iq_constant(type);
}

#define VD_T AVX2
#define VD(f) f##_avx2
#define IQ_KERNELS(name, type)                                                                                      \
    GEN(name, iq_body, type)                                                                                        \
    AVX2 static void name##_panel_avx2(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, \
                                       float *y, int64_t ldy) {                                                     \
        iq_panel(type, n, w, ws, nr, x, xs, nc, y, ldy);                                                            \
    }
IQ_KERNELS(iq2_xxs, LLMB_TYPE_IQ2_XXS)
IQ_KERNELS(iq2_xs, LLMB_TYPE_IQ2_XS)
IQ_KERNELS(iq2_s, LLMB_TYPE_IQ2_S)
IQ_KERNELS(iq3_xxs, LLMB_TYPE_IQ3_XXS)
IQ_KERNELS(iq3_s, LLMB_TYPE_IQ3_S)
IQ_KERNELS(iq1_s, LLMB_TYPE_IQ1_S)
IQ_KERNELS(iq1_m, LLMB_TYPE_IQ1_M)
#undef VD_T
#undef VD

#define SET(T, name) t[T].dot = name##_dot_avx2, t[T].tile = name##_tile_avx2, t[T].panel = name##_panel_avx2

void llmb_vd_iq_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl != LLMB_SIMD_AVX2) return;   // the AVX-512 level starts from this table
    for (int s = 0; s < 256; s++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++) v |= (uint64_t)((s >> j) & 1 ? 0xFF : 0x01) << 8 * j;
        sign_bytes[s] = v;
    }
    for (int s = 0; s < 128; s++) sign_bytes7[s] = sign_bytes[llmb_iq_signs7((uint32_t)s)];
    SET(LLMB_TYPE_IQ2_XXS, iq2_xxs);
    SET(LLMB_TYPE_IQ2_XS, iq2_xs);
    SET(LLMB_TYPE_IQ2_S, iq2_s);
    SET(LLMB_TYPE_IQ3_XXS, iq3_xxs);
    SET(LLMB_TYPE_IQ3_S, iq3_s);
    SET(LLMB_TYPE_IQ1_S, iq1_s);
    SET(LLMB_TYPE_IQ1_M, iq1_m);
}
#else
void llmb_vd_iq_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif // x86-64
