// vecdot_amx.c — prompt processing and batched decode (5 tokens or more) with Intel AMX (Sapphire Rapids and
// later; cpu.c asks Linux for the tile state and names "amx-int8" where it was granted) for the types of 32-value
// blocks whose interleaved layout is vecdot_il8.c's groups of 8 rows at this level: Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL, and IQ4_XS (its super-blocks as 8 blocks of 32 with a scale each).
//
// Two groups are taken at a time. A range of blocks of the 16 rows is decoded once per call into bytes, each
// block of 32 values one 8 x 64-byte tile B: row j holds values 4 j .. 4 j + 3 (j < 4) or 16 + 4 (j - 4) ..
// (j >= 4) of the 16 rows, 4 bytes a row, the layout TDPBxxD reads its second operand in. The activations
// need no copy: a tile A of 16 tokens x 32 bytes is loaded straight from the quantized rows, x_stride apart.
// One TDPBSUD (Q4_1, Q5_1: unsigned values against signed activations) or TDPBSSD (Q4_0, Q5_0: the values less
// 8 or 16; IQ4_NL, IQ4_XS: the looked-up values) gives the exact integer sums of a block for 16 tokens x 16
// rows; then the reference's float steps of that block, in its order (vecdot.c, dot_*_ref; vecdot_il8.c,
// il8_step and il8x_tile), 16 rows to a vector, one accumulator per token. So the bits are the reference's.
//
// What this file does not take runs the kernel it replaces (the table's il before it, kept in amx_next): calls of
// fewer than AMX_MIN tokens (decode at small batches) and a last group of 8 rows. A call's last nc % 16 tokens run
// as one smaller tile over the values its full tiles decoded (on tiles of its own shape). Tested by
// csrc/tests/test_vecdot.c (check_interleaved: 80 rows, 1..12, 261 and 262 tokens, against the single dot bit for
// bit) on hosts with AMX; elsewhere the kernels it wraps run and are tested.
// Measured: docs/engine-measurements.md#amx.
#include <string.h>

#include "vecdot.h"
#include "vecdot_impl.h"
#include "vecdot_layout.h"

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#include <immintrin.h>

#define AMX_T __attribute__((target("avx512f,avx512bw,avx512vl,f16c,fma,amx-tile,amx-int8")))
#define AMX_INLINE static inline __attribute__((always_inline)) AMX_T   // (nt a constant where it is one)
#define AMX_TOK 16    // tokens a tile
#define AMX_MIN 5     // the fewest tokens a call runs on tiles (up to 4, the wrapped kernels decode in registers)
#define AMX_ROWS 16   // rows a tile: two groups of 8
#define AMX_PF 4096   // prefetch distance of the weights (bytes ahead in each group)
#define AMX_DEC 64    // 32-value units decoded at a time (64 x 512 bytes of values: the L1 and a half)

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

#define AMX_NTYPES 6
static const int amx_types[AMX_NTYPES] = {LLMB_TYPE_Q4_0, LLMB_TYPE_Q4_1,   LLMB_TYPE_Q5_0,
                                          LLMB_TYPE_Q5_1, LLMB_TYPE_IQ4_NL, LLMB_TYPE_IQ4_XS};
static llmb_gemm_il_fn amx_next[AMX_NTYPES];   // the kernel each type had, for what the tiles do not take

static inline int amx_dm(const int type) { return type == LLMB_TYPE_Q4_1 || type == LLMB_TYPE_Q5_1; }
static inline int amx_q5(const int type) { return type == LLMB_TYPE_Q5_0 || type == LLMB_TYPE_Q5_1; }
static inline int amx_iq(const int type) { return type == LLMB_TYPE_IQ4_NL || type == LLMB_TYPE_IQ4_XS; }
static inline int amx_units(const int type) { return type == LLMB_TYPE_IQ4_XS ? LLMB_QK_K / LLMB_QK : 1; }

// word k (32 bytes: 8 rows) of two groups' block, g0's rows in the low half
static inline AMX_T __m512i amx_pair(const uint8_t *v0, const uint8_t *v1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)v0)),
                              _mm256_loadu_si256((const __m256i *)v1), 1);
}

// values 4 k .. 4 k + 3 and 16 + 4 k .. of 16 rows (a word of two groups) into rows k and 4 + k of tile o:
// the nibbles less off, or looked up in kv
static inline AMX_T void amx_nibbles(const __m512i raw, const __m512i qh, const int k, const int q5, const int iq,
                                     const __m512i off, const __m512i kv, uint8_t *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    __m512i lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
    if (q5) {   // (as vecdot_il8.c, il8_decode)
        lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi32(qh, 4 - k), b4));
        hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi32(qh, k), b4));
    }
    _mm512_storeu_si512(o + 64 * k, iq ? _mm512_shuffle_epi8(kv, lo) : _mm512_sub_epi8(lo, off));
    _mm512_storeu_si512(o + 64 * (4 + k), iq ? _mm512_shuffle_epi8(kv, hi) : _mm512_sub_epi8(hi, off));
}

// blocks i0 .. i0 + bn - 1 of the groups at g0 and g1 (nb blocks each) as tiles (b: 512 bytes per 32 values)
// and per 32 values the rows' d (and m; IQ4_XS: the scale ls - 32) as floats, 16 at a time; values less 8 / 16
// where the type has no m, IQ4_NL's and IQ4_XS's looked up (signed products)
static inline AMX_T void amx_decode(const int type, const uint8_t *g0, const uint8_t *g1, int64_t nb, int64_t i0,
                                    int64_t bn, uint8_t *b, float *d, float *m) {
    const int words = llmb_il8_words(type), q5 = amx_q5(type), dm = amx_dm(type), iq = amx_iq(type);
    const __m512i off = _mm512_set1_epi8(dm || iq ? 0 : q5 ? 16 : 8);
    const __m512i kv = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)llmb_kvalues_iq4nl));
    const size_t stride = llmb_il8_stride(type);   // a block's words, and its d where they follow them
    for (int64_t i = 0; i < bn; i++) {
        const size_t at = (size_t)(i0 + i) * stride;
        const uint8_t *v0 = g0 + at, *v1 = g1 + at;
        for (size_t o = 0; o < stride; o += 64) {   // (few tokens wait for the weights, not the tiles)
            _mm_prefetch((const char *)v0 + AMX_PF + o, _MM_HINT_T0);
            _mm_prefetch((const char *)v1 + AMX_PF + o, _MM_HINT_T0);
        }
        if (type == LLMB_TYPE_IQ4_XS) {   // d | scales_h, scales_l, then 8 sub-blocks of 4 words
            const __m512i h = amx_pair(v0, v1), sl = amx_pair(v0 + 32, v1 + 32), sh = _mm512_srli_epi32(h, 16);
            const __m512 dv = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h));
            for (int j = 0; j < 8; j++) {   // (llmb_iq4_xs_scale)
                const __m512i ls = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(0xF)),
                    _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4));
                _mm512_storeu_ps(d + 16 * (8 * i + j), dv);
                _mm512_storeu_ps(m + 16 * (8 * i + j), _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
                for (int k = 0; k < 4; k++) {
                    const size_t wk = 64 + 32 * (size_t)(4 * j + k);   // (after the two words of d and scales)
                    amx_nibbles(amx_pair(v0 + wk, v1 + wk), _mm512_setzero_si512(), k, 0, 1, off, kv, b + 512 * (8 * i + j));
                }
            }
            continue;
        }
        if (dm) {   // word 0: d | m of each row
            const __m512i h = amx_pair(v0, v1);
            _mm512_storeu_ps(d + 16 * i, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
            _mm512_storeu_ps(m + 16 * i, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h, 16))));
            v0 += 32, v1 += 32;
        } else {    // 8 halves after the block's words (llmb_il_inline_tail), or after the group's last block
            const size_t t = llmb_il_inline_tail(type, 8) ? at + (size_t)words * 32
                                                          : (size_t)nb * words * 32 + (size_t)(i0 + i) * 16;
            const __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(g0 + t))),
                                                      _mm_loadu_si128((const __m128i *)(g1 + t)), 1);
            _mm512_storeu_ps(d + 16 * i, _mm512_cvtph_ps(h));
        }
        __m512i qh = _mm512_setzero_si512();
        if (q5) qh = amx_pair(v0, v1), v0 += 32, v1 += 32;
        for (int k = 0; k < 4; k++) amx_nibbles(amx_pair(v0 + 32 * k, v1 + 32 * k), qh, k, q5, iq, off, kv, b + 512 * i);
    }
}

// acc[c] (lane r: row r) plus the reference's term of one block for nt tokens: s the block's nt x 16 sums
// (token c's in row c), xb token 0's activation block (the others xs apart), d / m the rows' d and m
AMX_INLINE void amx_scale(const int type, const int nt, const int32_t *s, const uint8_t *xb, size_t xs, const float *d,
                           const float *m, __m512 *acc) {
    const __m512 dv = _mm512_loadu_ps(d);
    if (amx_dm(type)) {   // Q4_1, Q5_1: ((d_w d_x) s + m_w s_x), Q8_1 activations
        const __m512 mv = _mm512_loadu_ps(m);
        for (int c = 0; c < nt; c++) {
            const llmb_block_q8_1 *x1 = (const llmb_block_q8_1 *)(xb + c * xs);
            const __m512 t = _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_set1_ps(x1->d)),
                                           _mm512_cvtepi32_ps(_mm512_loadu_si512(s + 16 * c)));
            acc[c] = _mm512_add_ps(acc[c], _mm512_add_ps(t, _mm512_mul_ps(mv, _mm512_set1_ps(x1->s))));
        }
        return;
    }
    if (type == LLMB_TYPE_IQ4_XS) {   // ((d_w d_x) ls) s, Q8_K activations
        const __m512 mv = _mm512_loadu_ps(m);
        for (int c = 0; c < nt; c++) {
            const __m512 dx = _mm512_set1_ps(((const llmb_block_q8_K *)(xb + c * xs))->d);
            const __m512 sf = _mm512_cvtepi32_ps(_mm512_loadu_si512(s + 16 * c));
            acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dv, dx), mv), sf));
        }
        return;
    }
    for (int c = 0; c < nt; c++) {   // Q4_0 (s d_w) d_x; Q5_0, IQ4_NL (d_w d_x) s; Q8_0 activations
        uint16_t h;
        memcpy(&h, xb + c * xs, 2);
        const __m512 dx = _mm512_set1_ps(_cvtsh_ss(h)), sf = _mm512_cvtepi32_ps(_mm512_loadu_si512(s + 16 * c));
        const __m512 t = type == LLMB_TYPE_Q4_0 ? _mm512_mul_ps(_mm512_mul_ps(sf, dv), dx)
                                                : _mm512_mul_ps(_mm512_mul_ps(dv, dx), sf);
        acc[c] = _mm512_add_ps(acc[c], t);
    }
}

// Tiles: 0, 1 the sums (nt tokens x 16 rows, int32); 2, 3 the activations (nt tokens x 32 bytes); 4, 5 the
// values (8 x 64 bytes). The pairs alternate from one 32 values (u: of the decoded range) to the next.
#define AMX_XB(u) (xt + (size_t)(i0 + ((u) >> us)) * xbb)   // the activation block of u, token 0
#define AMX_ISSUE(C, A, B, u)                                                                                       \
    do {                                                                                                            \
        _tile_zero(C);                                                                                              \
        _tile_loadd(A, AMX_XB(u) + xq + 32 * ((u) & (upb - 1)), (long)xs);                                          \
        _tile_loadd(B, dec + 512 * (size_t)(u), 64);                                                                \
        if (amx_dm(type)) _tile_dpbsud(C, A, B);                                                                    \
        else _tile_dpbssd(C, A, B);                                                                                 \
    } while (0)

// nt tokens (the tiles' rows as configured) from xt, x_stride xs, over the decoded range's un units (blocks from
// i0) into 16 rows of y at yt: from 0 where i0 is 0, else adding to what y holds. alt: on tiles 6 and 7 (shaped
// for a call's last nc % 16 tokens, so that they need no change of shape), one unit at a time
AMX_INLINE void amx_tokens(const int type, const int nt, const int alt, const uint8_t *xt, size_t xs, int64_t i0,
                           int64_t un, const uint8_t *dec, const float *d, const float *m, float *yt, int64_t ldy) {
    const int upb = amx_units(type), us = upb == 8 ? 3 : 0;   // 32-value units a block (IQ4_XS: 8)
    const size_t xbb = type == LLMB_TYPE_IQ4_XS ? sizeof(llmb_block_q8_K)
                       : amx_dm(type)           ? sizeof(llmb_block_q8_1)
                                                : sizeof(llmb_block_q8_0);
    const size_t xq = type == LLMB_TYPE_IQ4_XS ? offsetof(llmb_block_q8_K, qs)
                      : amx_dm(type)           ? offsetof(llmb_block_q8_1, qs)
                                               : offsetof(llmb_block_q8_0, qs);
    _Alignas(64) int32_t sums[AMX_TOK * AMX_ROWS];
    __m512 acc[AMX_TOK];
    for (int c = 0; c < nt; c++) acc[c] = i0 ? _mm512_loadu_ps(yt + c * ldy) : _mm512_setzero_ps();
    if (alt) {
        for (int64_t u = 0; u < un; u++) {
            AMX_ISSUE(6, 7, 4, u);
            _tile_stored(6, sums, 64);
            amx_scale(type, nt, sums, AMX_XB(u), xs, d + 16 * u, m + 16 * u, acc);
        }
    } else {
        AMX_ISSUE(0, 2, 4, 0);
        for (int64_t u = 0; u < un; u += 2) {
            if (u + 1 < un) AMX_ISSUE(1, 3, 5, u + 1);
            _tile_stored(0, sums, 64);
            amx_scale(type, nt, sums, AMX_XB(u), xs, d + 16 * u, m + 16 * u, acc);
            if (u + 1 < un) {
                if (u + 2 < un) AMX_ISSUE(0, 2, 4, u + 2);
                _tile_stored(1, sums, 64);
                amx_scale(type, nt, sums, AMX_XB(u + 1), xs, d + 16 * (u + 1), m + 16 * (u + 1), acc);
            }
        }
    }
    for (int c = 0; c < nt; c++) _mm512_storeu_ps(yt + c * ldy, acc[c]);
}
#undef AMX_ISSUE
#undef AMX_XB

// tiles 0-3 with nt rows (tokens), 4 and 5 the 8 x 64 bytes of values, 6 and 7 as 0 and 2 with alt rows
static inline void amx_configure(amx_config *cfg, const int nt, const int alt) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg->rows[t] = t >= 6 ? alt : t >= 4 ? LLMB_QK / 4 : nt;
        cfg->colsb[t] = !cfg->rows[t] ? 0 : (t >= 2 && t < 4) || t == 7 ? LLMB_QK : 64;
    }
}

// (nr / 16) * 16 rows x nc tokens of the call, 16 at a time and the last nc % 16 as one smaller tile (over the
// values the full tiles decoded, or where nc < 16 as a tile of its own); a last group of 8 rows to amx_next
static AMX_T void amx_kernel(const int type, const int ti, int64_t n, const uint8_t *w, size_t ws, int nr,
                             const uint8_t *x, size_t xs, int nc, float *y, int64_t ldy, int stream) {
    const int upb = amx_units(type);
    const int64_t nb = n / (LLMB_QK * upb), br = AMX_DEC / upb;
    const int pr = nr / AMX_ROWS * AMX_ROWS, rest = nc % AMX_TOK, full = nc - rest;
    _Alignas(64) uint8_t dec[AMX_DEC * 512];
    float d[AMX_DEC * AMX_ROWS], m[AMX_DEC * AMX_ROWS];
    amx_config cfg;
    amx_configure(&cfg, full ? AMX_TOK : rest, full ? rest : 0);
    _tile_loadconfig(&cfg);
    for (int r0 = 0; r0 < pr; r0 += AMX_ROWS) {
        const uint8_t *g0 = w + (size_t)r0 * ws, *g1 = g0 + 8 * ws;
        for (int64_t i0 = 0; i0 < nb; i0 += br) {
            const int64_t un = (nb - i0 < br ? nb - i0 : br) * upb;
            amx_decode(type, g0, g1, nb, i0, un / upb, dec, d, m);
            for (int c0 = 0; c0 < full; c0 += AMX_TOK)
                amx_tokens(type, AMX_TOK, 0, x + (size_t)c0 * xs, xs, i0, un, dec, d, m, y + c0 * ldy + r0, ldy);
            if (rest) {
                const uint8_t *xr = x + (size_t)full * xs;
                amx_tokens(type, rest, full > 0, xr, xs, i0, un, dec, d, m, y + full * ldy + r0, ldy);
            }
        }
    }
    _tile_release();
    if (pr < nr) amx_next[ti](n, w + (size_t)pr * ws, ws, nr - pr, x, xs, nc, y + pr, ldy, stream);
}

#define AMX_FN(name, TYPE, TI)                                                                                      \
    static void name(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,      \
                     int64_t ldy, int stream) {                                                                     \
        if (nc < AMX_MIN || nr < AMX_ROWS) amx_next[TI](n, w, ws, nr, x, xs, nc, y, ldy, stream);                 \
        else amx_kernel(TYPE, TI, n, (const uint8_t *)w, ws, nr, (const uint8_t *)x, xs, nc, y, ldy, stream);      \
    }
AMX_FN(q4_0_amx, LLMB_TYPE_Q4_0, 0)
AMX_FN(q4_1_amx, LLMB_TYPE_Q4_1, 1)
AMX_FN(q5_0_amx, LLMB_TYPE_Q5_0, 2)
AMX_FN(q5_1_amx, LLMB_TYPE_Q5_1, 3)
AMX_FN(iq4_nl_amx, LLMB_TYPE_IQ4_NL, 4)
AMX_FN(iq4_xs_amx, LLMB_TYPE_IQ4_XS, 5)
#undef AMX_FN

void llmb_vd_amx_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    const llmb_gemm_il_fn fns[AMX_NTYPES] = {q4_0_amx, q4_1_amx, q5_0_amx, q5_1_amx, iq4_nl_amx, iq4_xs_amx};
    if (lvl != LLMB_SIMD_AVX512 || !llmb_cpu_has("amx-int8")) return;
    for (int i = 0; i < AMX_NTYPES; i++) {
        if (!t[amx_types[i]].il || t[amx_types[i]].il_r != 8) continue;   // (the groups of 8 of vecdot_il8.c)
        amx_next[i] = t[amx_types[i]].il;
        t[amx_types[i]].il = fns[i];
    }
}
#else
void llmb_vd_amx_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif
