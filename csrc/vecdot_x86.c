// vecdot_x86.c — the dot product and the 4 x 4 tiles of every weight type on x86-64, one body per format
// (vecdot_x86_body.h) compiled twice: with maddubs + madd (AVX2) and with vpdpbusd (AVX-512 VNNI on 256
// bits). One body computes a tile of NR weight rows x NC tokens and the single dot is its 1 x 1 tile, so
// every output goes through the same operation sequence whatever the tile (batch invariance by
// construction). The integer dots are exact (no int16 saturation for these ranges: the unsigned operand
// is <= 128, the signed one an activation in [-127, 127]), so both compilations give identical bits.
// Float accumulation uses explicit FMA intrinsics (deterministic: C11 mode never contracts by itself).
// Tested by csrc/tests/test_vecdot.c: every kernel against the scalar reference within tolerance, every
// tile shape against the single dot bit for bit, and the two levels against each other bit for bit.
#include "simd_x86.h"

#if defined(__x86_64__) && defined(__GNUC__)

// the 32 signed weights of a Q4_0 (-8..7) or Q5_0 (-16..15) block
AVX2 INLINE __m256i legacy0_weights(const int type, const uint8_t *blk) {
    if (type == LLMB_TYPE_Q4_0) return _mm256_sub_epi8(nibbles_32(blk + 2), _mm256_set1_epi8(8));
    // Q5_0: (q | h<<4) - 16 == q | 0xF0 where h is 0
    return _mm256_or_si256(nibbles_32(blk + 6), _mm256_andnot_si256(bytes_from_bits_32(blk + 2),
                                                                     _mm256_set1_epi8((char)0xF0)));
}

// the 32 unsigned weights of a Q4_1 (0..15) or Q5_1 (0..31) block
AVX2 INLINE __m256i legacy1_weights(const int type, const uint8_t *blk) {
    if (type == LLMB_TYPE_Q4_1) return nibbles_32(blk + 4);
    return _mm256_or_si256(nibbles_32(blk + 8), _mm256_and_si256(bytes_from_bits_32(blk + 4), _mm256_set1_epi8(0x10)));
}

#define VD_T AVX2
#define VD(f) f##_avx2
#define DOTACC(acc, u, s) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#include "vecdot_x86_body.h"
#undef VD_T
#undef VD
#undef DOTACC

#define VD_T VNNI
#define VD(f) f##_vnni
#define DOTACC(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#include "vecdot_x86_body.h"
#undef VD_T
#undef VD
#undef DOTACC

#define K_TILE(name)                                                                                                \
    VNNI void llmb_vd_##name##_tile_vnni(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,  \
                                    float *y, int64_t ldy) {                                                        \
        name##_tile_vnni(n, w, ws, nr, x, xs, nc, y, ldy);                                                          \
    }
K_TILE(q4_K)
K_TILE(q5_K)
K_TILE(q6_K)

#define SET(sfx, T, name) t[T].dot = name##_dot_##sfx, t[T].tile = name##_tile_##sfx
#define SET_ALL(sfx)                                                                                                \
    SET(sfx, LLMB_TYPE_F32, f32); SET(sfx, LLMB_TYPE_F16, f16); SET(sfx, LLMB_TYPE_BF16, bf16);                     \
    SET(sfx, LLMB_TYPE_Q4_0, q4_0); SET(sfx, LLMB_TYPE_Q5_0, q5_0); SET(sfx, LLMB_TYPE_Q8_0, q8_0);                 \
    SET(sfx, LLMB_TYPE_Q4_1, q4_1); SET(sfx, LLMB_TYPE_Q5_1, q5_1); SET(sfx, LLMB_TYPE_Q4_K, q4_K);                 \
    SET(sfx, LLMB_TYPE_Q5_K, q5_K); SET(sfx, LLMB_TYPE_Q6_K, q6_K); SET(sfx, LLMB_TYPE_Q8_K, q8_K);                 \
    SET(sfx, LLMB_TYPE_Q2_K, q2_K); SET(sfx, LLMB_TYPE_Q3_K, q3_K); SET(sfx, LLMB_TYPE_IQ4_NL, iq4_nl);             \
    SET(sfx, LLMB_TYPE_IQ4_XS, iq4_xs)

void llmb_vd_x86_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    if (lvl == LLMB_SIMD_AVX2) {
        SET_ALL(avx2);
        t[LLMB_TYPE_Q4_1].quant_x = t[LLMB_TYPE_Q5_1].quant_x = llmb_quant_q8_1_avx2;
    } else if (lvl == LLMB_SIMD_AVX512) {
        if (llmb_cpu_has("avx512vnni")) SET_ALL(vnni);
        t[LLMB_TYPE_Q4_1].quant_x = t[LLMB_TYPE_Q5_1].quant_x = llmb_quant_q8_1_avx512;
    }
}
#else
void llmb_vd_x86_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif // x86-64
