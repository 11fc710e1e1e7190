// simd_x86.h — internal to the x86-64 kernel files: their target attributes, exact horizontal sums,
// unpacking of nibbles and bits, float loads of F32 / F16 / BF16 weights, and the prefetch policy of
// weight streams (the measurements behind each distance: docs/engine-measurements.md).
#ifndef LLMB_SIMD_X86_H
#define LLMB_SIMD_X86_H

#include "vecdot_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
// AVX-512 VNNI with 512-bit integer parts (vecdot_avx512_*.c)
#define VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))

// fixed-order horizontal sum
AVX2 INLINE float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// sums of the 4 / 8 int32 lanes (exact)
AVX2 INLINE int32_t hsum4_epi32(__m128i s) {
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
AVX2 INLINE int32_t hsum_epi32(__m256i v) {
    return hsum4_epi32(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)));
}

AVX2 INLINE float half_at(const uint8_t *p) {   // the fp16 at p (any alignment)
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// byte j = 0xFF where bit j of the 32-bit little-endian word at p is set
AVX2 INLINE __m256i bytes_from_bits_32(const uint8_t *p) {
    uint32_t x32;
    memcpy(&x32, p, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    return _mm256_cmpeq_epi8(_mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi64x(-1));
}

// the 32 nibbles of 16 bytes: low nibbles in bytes 0..15, high nibbles in 16..31
AVX2 INLINE __m256i nibbles_32(const uint8_t *p) {
    const __m128i q = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

// Prefetch the weight bytes PF_AHEAD past a block about to be read: the hardware prefetchers alone
// leave the kernels at a fraction of the read bandwidth (docs/engine-measurements.md#pf_ahead).
#define PF_AHEAD 4096
AVX2 INLINE void prefetch_w(const uint8_t *blk, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)blk + PF_AHEAD + o, _MM_HINT_T0);
}
// The one-stream decode kernels of the AVX-512 level (interleaved Q4_K / Q6_K, F16 / BF16 / F32 rows)
// prefetch further ahead, into L2 (one token of interleaved Q6_K further still: Q6_PF_AHEAD), which
// beat nearer prefetches into L1 in the engine (docs/engine-measurements.md#stream_pf_ahead).
#define STREAM_PF_AHEAD 9216
#define STREAM_PF_HINT _MM_HINT_T1
// the lines at p, p + 64, ... below p + bytes into L2 (every line of [p, p + bytes) where bytes is a
// multiple of 64 and p is line-aligned; bytes + 63 covers any range)
INLINE void prefetch_l2(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, STREAM_PF_HINT);
}
// One token of interleaved Q4_K / Q6_K prefetches only the first line of each 4 KiB page ahead
// (prefetch_stream): the hardware prefetchers stop at page boundaries, and this restarts them early,
// where one prefetch per line capped a stream on AMD; batched decode computes more per line and keeps
// prefetch_l2 (docs/engine-measurements.md#stream_pf_page).
#define STREAM_PF_PAGE 4096
INLINE void prefetch_stream(const uint8_t *p, size_t bytes) {   // the lines of [p, p + bytes) at page starts
    const uintptr_t a = ((uintptr_t)p + STREAM_PF_PAGE - 1) & ~(uintptr_t)(STREAM_PF_PAGE - 1);
    for (uintptr_t q = a; q < (uintptr_t)p + bytes; q += STREAM_PF_PAGE) _mm_prefetch((const char *)q, STREAM_PF_HINT);
}
// With LLMB_PREFETCH_LINES or _FAR (llmb_prefetch_mode; _FAR is the default on Intel CPUs), one token of
// interleaved Q4_K / Q6_K also prefetches every line it reads LINE_PF_AHEAD bytes ahead into L1, one prefetch
// beside each load: on Intel the L2 streamer falls behind a kernel that computes between loads, on AMD a
// prefetch per line caps the stream (docs/engine-measurements.md#line_pf_ahead); llmb_prefetch_set switches it for A/B runs.
#define LINE_PF_AHEAD 4096
// Where the weights stream from DRAM (llmb_matmul_part.stream: the model's matrices outweigh the last-level
// cache), each line is also prefetched FAR_PF_AHEAD ahead into L2 (lines = 2): the L1 prefetches alone left
// the kernels short of the read bandwidth, and from the caches it only costs (docs/engine-measurements.md#far_pf_ahead).
#define FAR_PF_AHEAD 16384
INLINE void pf_line(const void *p, const int lines) {
    _mm_prefetch((const char *)p + LINE_PF_AHEAD, _MM_HINT_T0);
    if (lines > 1) _mm_prefetch((const char *)p + FAR_PF_AHEAD, _MM_HINT_T1);
}
// 1 where one token prefetches every line far ahead: weights from DRAM (stream) under LLMB_PREFETCH_FAR
INLINE int far_pf(const int stream) { return stream && llmb_prefetch_mode() == LLMB_PREFETCH_FAR; }
// q4i_one's pf for llmb_prefetch_mode (llmb.h) and the weights' stream flag: 1 page-wise, 2 every line
// too, 3 every line far ahead as well
INLINE int decode_pf(const int stream) { return 1 + (llmb_prefetch_mode() >= LLMB_PREFETCH_LINES) + far_pf(stream); }

// 8 weights as floats
AVX2 INLINE __m256 load_w8(const int type, const uint8_t *p) {
    switch (type) {
    case LLMB_TYPE_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
    case LLMB_TYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
    default: return _mm256_loadu_ps((const float *)p);
    }
}

AVX2 INLINE float w_scalar(const int type, const uint8_t *p) {
    uint16_t h;
    float f;
    switch (type) {
    case LLMB_TYPE_F16: memcpy(&h, p, 2); return llmb_fp16_to_fp32(h);
    case LLMB_TYPE_BF16: memcpy(&h, p, 2); return llmb_bf16_to_fp32(h);
    default: memcpy(&f, p, 4); return f;
    }
}


// ---- AVX-512 (vecdot_avx512_*.c, vecdot_bf16.c) ----

// The 16 int32 vectors v[0..15] summed lane-wise into lane i of the result (exact)
VNNI512 INLINE __m512i reduce16_epi32(const __m512i v[16]) {
    __m512i a[8], b[4];
    for (int p = 0; p < 8; p++)
        a[p] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * p], v[2 * p + 1]), _mm512_unpackhi_epi32(v[2 * p], v[2 * p + 1]));
    for (int p = 0; p < 4; p++)
        b[p] = _mm512_add_epi32(_mm512_unpacklo_epi64(a[2 * p], a[2 * p + 1]), _mm512_unpackhi_epi64(a[2 * p], a[2 * p + 1]));
    const __m512i c0 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[0], b[1], 0x88), _mm512_shuffle_i32x4(b[0], b[1], 0xDD));
    const __m512i c1 = _mm512_add_epi32(_mm512_shuffle_i32x4(b[2], b[3], 0x88), _mm512_shuffle_i32x4(b[2], b[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(c0, c1, 0x88), _mm512_shuffle_i32x4(c0, c1, 0xDD));
}

// Lane k of the result: hsum_ps(lo + hi half) of v[k] for k < m (16 or 8; 0 past m), in the very
// order of hsum_ps: a_j = l_j + l_j+8, b_j = a_j + a_j+4, c_j = b_j + b_j+2, c_0 + c_1
VNNI512 INLINE __m512 hsum16_ps(const __m512 *v, int m) {
    __m512 z[8], w[4], u[2];
    for (int p = 0; p < 8; p++) {   // z[p]: a_0..7 of v[2p] in lanes 0..7, of v[2p+1] in 8..15
        const __m512 x0 = 2 * p < m ? v[2 * p] : _mm512_setzero_ps(), x1 = 2 * p + 1 < m ? v[2 * p + 1] : _mm512_setzero_ps();
        z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x44), _mm512_shuffle_f32x4(x0, x1, 0xEE));
    }
    for (int q = 0; q < 4; q++)   // w[q] block b: b_0..3 of v[4q + b]
        w[q] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * q], z[2 * q + 1], 0x88),
                             _mm512_shuffle_f32x4(z[2 * q], z[2 * q + 1], 0xDD));
    for (int t = 0; t < 2; t++)   // u[t] block b: c_0, c_1 of v[8t + b], then of v[8t + 4 + b]
        u[t] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * t], w[2 * t + 1], 0x44), _mm512_shuffle_ps(w[2 * t], w[2 * t + 1], 0xEE));
    // lane 4b + j: the sum of v[4j + b]
    const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], 0x88), _mm512_shuffle_ps(u[0], u[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), d);
}

// nr rows x nc tokens (w, ws, x, xs, y, ldy in scope) in tiles of 4 x 4: the K-type panels and
// small-batch kernels for rows longer than their tables on the stack
#define K_TILES(tile)                                                                                               \
    for (int r0 = 0; r0 < nr; r0 += 4)                                                                              \
        for (int c0 = 0; c0 < nc; c0 += 4)                                                                          \
            tile(n, w + r0 * ws, ws, nr - r0 < 4 ? nr - r0 : 4, x + c0 * xs, xs, nc - c0 < 4 ? nc - c0 : 4,       \
                 y + c0 * ldy + r0, ldy)

#endif // x86-64
#endif // LLMB_SIMD_X86_H
