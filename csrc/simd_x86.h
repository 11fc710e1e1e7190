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

// Prefetch the weight bytes `ahead` bytes past the `bytes` of a block about to be read: weight rows
// come from DRAM exactly once per token, and the hardware prefetchers alone leave the kernels at a
// fraction of the read bandwidth (measured by benchmarks/bench_vecdot.py). 4 KiB ahead: decode tg128
// (2 threads, alternated) F16 125m 159 -> 183, Q4_K_M 125m 418 -> 457, llama-1b Q4_K_M 42.8 -> 47.2
// t/s against 1 KiB; 2.5 KiB was in between and 6-8 KiB no better.
#define PF_AHEAD 4096
AVX2 INLINE void prefetch_w(const uint8_t *blk, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)blk + PF_AHEAD + o, _MM_HINT_T0);
}
// The one-stream decode kernels of the AVX-512 level (interleaved Q4_K / Q6_K, F16 / BF16 / F32 rows)
// prefetch further ahead, into L2 (one token of interleaved Q6_K further still: Q6_PF_AHEAD). Engine tg
// alternated in one process on an AMD EPYC (Zen 4): llama-1b Q4_K_M interleaved 1.12x against the
// current super-block into L1; llama-125m F16 1.06x (1 thread), 1.05x (2) against PF_AHEAD into L1.
#define STREAM_PF_AHEAD 9216
#define STREAM_PF_HINT _MM_HINT_T1
// the lines at p, p + 64, ... below p + bytes into L2 (every line of [p, p + bytes) where bytes is a
// multiple of 64 and p is line-aligned; bytes + 63 covers any range)
INLINE void prefetch_l2(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + o, STREAM_PF_HINT);
}
// One token of interleaved Q4_K / Q6_K prefetches only the first line of each 4 KiB page ahead
// (prefetch_stream): the hardware prefetchers stop at page boundaries, and this restarts them early,
// while one prefetch per line (prefetch_l2) caps a stream near 21 GB/s on the Zen 4 host, whatever the
// kernel (a pure read in C: 30 GB/s without prefetches, 19-24 with one per line at 1-64 KiB ahead).
// Engine tg64 of llama-1b Q4_K_M (with the Q6_K recoding of vecdot.c, which a page-wise prefetch needs:
// ql / qh's three interleaved streams fell to 0.55x), alternated in one process, against one prefetch per
// line: 1 thread 1.31x, 1.05x, 0.99x, 1.12x (the host's phases differ); 2 threads 1.16x, 1.10x. A page of
// 2 KiB measured 1.05x and 1.01x, 8 KiB 0.95x against 4 KiB. Batched decode (2 to 12 tokens) computes
// more per line and keeps prefetch_l2: page-wise, 4 tokens ran 0.63-0.73x; F16 rows page-wise 0.89x.
#define STREAM_PF_PAGE 4096
INLINE void prefetch_stream(const uint8_t *p, size_t bytes) {   // the lines of [p, p + bytes) at page starts
    const uintptr_t a = ((uintptr_t)p + STREAM_PF_PAGE - 1) & ~(uintptr_t)(STREAM_PF_PAGE - 1);
    for (uintptr_t q = a; q < (uintptr_t)p + bytes; q += STREAM_PF_PAGE) _mm_prefetch((const char *)q, STREAM_PF_HINT);
}
// With LLMB_PREFETCH_LINES or _FAR (llmb_prefetch_mode; _FAR is the default on Intel CPUs), one token of
// interleaved Q4_K / Q6_K also prefetches every line it reads LINE_PF_AHEAD bytes ahead into L1, one prefetch
// beside each load (a burst of a super-block's prefetches at once gained nothing). On the Intel Xeon host (2
// cores, 17 GB/s read at 1 thread) the page-wise prefetch alone left the kernels at 72-78% of the read
// bandwidth: the L2 streamer falls behind a kernel that computes between loads (a C loop of the Q4_K body's
// and / andnot / vpdpbusd over 1 GiB: 10.4 GB/s page-wise, 14.4-15.0 every line 4-9 KiB ahead into L2, 16 with
// no compute). Alternated in one process (benchmarks/ab_builds.py, 300 copies of the weights, 1 thread), B/A:
// Q4_K 2048x2048 / 2048x8192 1.12x / 1.11x (page-wise kept at STREAM_PF_AHEAD; every line alone into L1
// 1.04-1.08x, into L2 at 4-32 KiB 0.98-1.08x); Q6_K 1.10x / 1.07x; llama-1b Q4_K_M tg64 1.10x at 1 thread,
// 1.13x at 2. On the AMD EPYC (Zen 4) host one prefetch per line capped a stream near 21 GB/s (above), so
// elsewhere the page-wise prefetch stays alone; llmb_prefetch_set switches it for A/B runs.
#define LINE_PF_AHEAD 4096
// Where the weights stream from DRAM (llmb_matmul_part.stream: the model's matrices outweigh the last-level
// cache), each line is also prefetched FAR_PF_AHEAD ahead into L2 (lines = 2): the L1 prefetches alone
// left the kernels at 73-88% of the read bandwidth (benchmarks/bench_vecdot.py, 1 and 2 threads), the
// L2's own streamer not far enough ahead of them. Engine tg64 of llama-1b Q4_K_M alternated in one process
// (benchmarks/ab_builds.py) on the Intel Xeon host, B/A: 1.11x, 1.11x and 1.13x at 2 threads, 1.10x at 1;
// 8, 24 and 32 KiB ahead measured as 16 (1.005, 0.997, 0.995). The kernels alone (bench_vecdot.py, 8192 x
// 2048) then read at 0.92 / 0.86 (Q4_K / Q6_K) of the read bandwidth on 2 threads, 0.92 / 0.94 on 1; the
// engine's decode (bench_engine.py) at 81-87% on 2 threads, 88-90% on 1.
// From the caches the second prefetch is only cost: llama-125m Q4_K_M (in the L3) tg128 0.95x at 1 and 2
// threads. A plain read with the same prefetch (two streams a thread) gained 0-2%: the read bandwidth
// stays the limit.
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
