// vecdot_impl.h — internal to the SIMD kernel files: the tile generator every body goes through, and
// the installer of each file (vecdot_simd.c calls them; vecdot.h's table says what they install).
//
// Files: vecdot_x86.c + vecdot_x86_body.h (the 1 x 1 dot and the 4 x 4 tiles of every type, one body
// compiled for AVX2 and for 256-bit AVX-512 VNNI), vecdot_il8.c (groups of 8 interleaved rows, AVX2 and
// VNNI), vecdot_avx512_k.c (Q4_K / Q5_K / Q6_K prefill panels, Q4_K / Q6_K / Q8_0 groups of 16 rows),
// vecdot_avx512_float.c (F32 / F16 / BF16 panels and one-token rows), vecdot_avx512_decode.c (Q4_K /
// Q5_K / Q6_K small batches and one-token rows), vecdot_bf16.c (BF16 pair products), vecdot_neon.c.
// Shared x86 helpers and the prefetch policy: simd_x86.h.
//
// Names. A kernel is <type>_<kind>_<level>: kind as in llmb_vec_dot_kernels (dot, tile, panel, small,
// decode, il), level avx2 / vnni (the 256-bit bodies), vnni512 (512-bit integer parts), bf (AVX-512
// BF16), neon. Helpers carry the prefix of the format and layout they work on:
//   legacy0 / legacy1    Q4_0, Q5_0 (signed values) / Q4_1, Q5_1 (unsigned values and a min)
//   q45r, q4r, q5r, q6r  rows of a 16-row panel of Q4_K+Q5_K / Q4_K / Q5_K / Q6_K, regrouped per call
//   q4i, q6i, q8i        Q4_K / Q6_K / Q8_0 interleaved at load in groups of 16 rows (llmb_vec_dot_repack)
//   il8                  groups of 8 interleaved rows (vecdot_il8.c)
//   q45k, q6k, k4, k     Q4_K+Q5_K / Q6_K / Q4_K+Q5_K scales / K types at a few tokens (small, decode)
//   fl                   float rows converted a chunk at a time
//   bd, bf16dp           BF16 pair products (LLMB_TYPE_BF16_DP)
#ifndef LLMB_VECDOT_IMPL_H
#define LLMB_VECDOT_IMPL_H

#include <math.h>
#include <string.h>

#include "vecdot.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define INLINE static inline __attribute__((always_inline))

// From a body computing an NR x NC tile (NR, NC constants once inlined): the single dot (the 1x1
// tile) and the tile kernel with its 16 shapes specialized. VD_T: target attribute, VD: name suffix.
#define GEN(name, body, type)                                                                                       \
    VD_T static void VD(name##_dot)(int64_t n, float *s, const void *w, const void *x) {                           \
        body(type, n, w, 0, x, 0, s, 0, 1, 1);                                                                      \
    }                                                                                                               \
    VD_T static void VD(name##_tile)(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc, \
                                     float *y, int64_t ldy) {                                                       \
        const uint8_t *w = vw, *x = vx;                                                                             \
        switch ((nr - 1) * 4 + (nc - 1)) {                                                                          \
        case 0: body(type, n, w, ws, x, xs, y, ldy, 1, 1); break;                                                   \
        case 1: body(type, n, w, ws, x, xs, y, ldy, 1, 2); break;                                                   \
        case 2: body(type, n, w, ws, x, xs, y, ldy, 1, 3); break;                                                   \
        case 3: body(type, n, w, ws, x, xs, y, ldy, 1, 4); break;                                                   \
        case 4: body(type, n, w, ws, x, xs, y, ldy, 2, 1); break;                                                   \
        case 5: body(type, n, w, ws, x, xs, y, ldy, 2, 2); break;                                                   \
        case 6: body(type, n, w, ws, x, xs, y, ldy, 2, 3); break;                                                   \
        case 7: body(type, n, w, ws, x, xs, y, ldy, 2, 4); break;                                                   \
        case 8: body(type, n, w, ws, x, xs, y, ldy, 3, 1); break;                                                   \
        case 9: body(type, n, w, ws, x, xs, y, ldy, 3, 2); break;                                                   \
        case 10: body(type, n, w, ws, x, xs, y, ldy, 3, 3); break;                                                  \
        case 11: body(type, n, w, ws, x, xs, y, ldy, 3, 4); break;                                                  \
        case 12: body(type, n, w, ws, x, xs, y, ldy, 4, 1); break;                                                  \
        case 13: body(type, n, w, ws, x, xs, y, ldy, 4, 2); break;                                                  \
        case 14: body(type, n, w, ws, x, xs, y, ldy, 4, 3); break;                                                  \
        case 15: body(type, n, w, ws, x, xs, y, ldy, 4, 4); break;                                                  \
        default: break;                                                                                             \
        }                                                                                                           \
    }

// The installers: each overwrites the entries of `t` its file has kernels for on this CPU at level
// `lvl` (the x86 ones: the AVX2 level, or the AVX-512 level where the CPU has VNNI; the rest keep what
// was there), in the order llmb_vec_dot_simd_install calls them.
void llmb_vd_x86_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);            // vecdot_x86.c
void llmb_vd_avx512_k_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);       // vecdot_avx512_k.c
void llmb_vd_avx512_float_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);   // vecdot_avx512_float.c
void llmb_vd_avx512_decode_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);  // vecdot_avx512_decode.c
void llmb_vd_bf16_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);           // vecdot_bf16.c
void llmb_vd_neon_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);           // vecdot_neon.c
void llmb_vd_tq_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);             // vecdot_tq.c
void llmb_vd_iq_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);             // vecdot_iq.c
void llmb_vd_amx_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t);            // vecdot_amx.c

// The 256-bit VNNI tiles of the K types (vecdot_x86.c), which the AVX-512 panels and small-batch kernels
// run for rows longer than their tables on the stack (K_TILES, simd_x86.h)
void llmb_vd_q4_K_tile_vnni(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                            int64_t ldy);
void llmb_vd_q5_K_tile_vnni(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                            int64_t ldy);
void llmb_vd_q6_K_tile_vnni(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                            int64_t ldy);

#endif // LLMB_VECDOT_IMPL_H
