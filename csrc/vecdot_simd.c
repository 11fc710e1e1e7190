// vecdot_simd.c — SIMD versions of the dot products in vecdot.c: AVX2 (+FMA, F16C) and AVX-512
// VNNI on x86-64, NEON on AArch64, each compiled with a function target attribute and installed
// into the table of its level by llmb_vec_dot_simd_install.
//
// One body per format computes a tile of NR weight rows x NC tokens; the single dot product is the
// 1x1 tile, so every output goes through the same operation sequence whatever the tile (batch
// invariance by construction). Integer dots are exact (no int16 saturation for these ranges: the
// unsigned operand is <= 128, the signed one is an activation in [-127, 127]), so the x86 bodies are
// compiled twice from the same source (this file includes itself): once with maddubs+madd (AVX2) and
// once with vpdpbusd (AVX-512 VNNI, 256-bit); both give identical bits. Float accumulation uses
// explicit FMA intrinsics (deterministic; the compiler never contracts anything itself in C11 mode).
// Tested by csrc/tests/test_vecdot.c: every kernel vs the scalar reference within tolerance, every
// tile shape vs the single dot bit for bit, and the x86 levels vs each other bit for bit.
#ifndef LLMB_VECDOT_BODY
#include <math.h>

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


// ================================ x86-64 ================================
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))

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

#define LLMB_VECDOT_BODY
#define VD_T AVX2
#define VD(f) f##_avx2
#define DOTACC(acc, u, s) _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#include "vecdot_simd.c"
#undef VD_T
#undef VD
#undef DOTACC

#define VD_T VNNI
#define VD(f) f##_vnni
#define DOTACC(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#include "vecdot_simd.c"
#undef VD_T
#undef VD
#undef DOTACC
#undef LLMB_VECDOT_BODY

// ---- prefill panels (AVX-512 VNNI, 512-bit integer parts) ----
// A panel decodes a group of weight rows once and runs every token over them; per output it does what
// the single dot does, hence the same bits. The K types (Q4_K, Q5_K, Q6_K) hold 16 rows in the lanes
// of each vector (below); the legacy types decode LLMB_PANEL_R rows and run 4 tokens x NR rows per
// register tile (PANEL_TOKENS_LOOP); float weights are converted per chunk (float_panel).
#define VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define PANEL_MAX_SB 64   // super-blocks per row decoded on the stack (n <= 16384; Q6_K: 364 KiB); longer rows run tiles

// every group of 4 tokens (fewer at the end) over the nr decoded rows, shapes specialized; PANEL_ARGS:
// the decoded data the body takes first (dec, or a redefinition)
#define PANEL_ARGS dec
#define PANEL_TOKENS_LOOP(body)                                                                                     \
    for (int c0 = 0; c0 < nc; c0 += 4) {                                                                            \
        const uint8_t *xc = x + c0 * xs;                                                                            \
        float *yc = y + c0 * ldy;                                                                                   \
        switch ((nr - 1) * 4 + (nc - c0 < 4 ? nc - c0 : 4) - 1) {                                                   \
        case 0: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 1, 1); break;                                                       \
        case 1: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 1, 2); break;                                                       \
        case 2: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 1, 3); break;                                                       \
        case 3: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 1, 4); break;                                                       \
        case 4: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 2, 1); break;                                                       \
        case 5: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 2, 2); break;                                                       \
        case 6: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 2, 3); break;                                                       \
        case 7: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 2, 4); break;                                                       \
        case 8: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 3, 1); break;                                                       \
        case 9: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 3, 2); break;                                                       \
        case 10: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 3, 3); break;                                                      \
        case 11: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 3, 4); break;                                                      \
        case 12: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 4, 1); break;                                                      \
        case 13: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 4, 2); break;                                                      \
        case 14: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 4, 3); break;                                                      \
        case 15: body(PANEL_ARGS, nsb, xc, xs, yc, ldy, 4, 4); break;                                                      \
        default: break;                                                                                             \
        }                                                                                                           \
    }

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

// Q4_K and Q5_K panels hold 16 rows in the lanes of every vector (lane r: row r), so no reduction
// across lanes is needed: per super-block each lane accumulates its row's exact integers S = sum sc q x
// and M = sum min bsum, then fma(d dx, S, acc) and fma(-(dmin dx), M, acc) per token, the steps of
// q45_K_body for 16 outputs at once. The rows are regrouped once per panel call (16 x 16 transposes of
// their 32-bit words); vpdpbusd then multiplies 4 values of each row by the same 4 activation bytes
// (broadcast), 64 products per instruction. The products of one 32-value sub-block sum to at most
// 32 * 31 * 128 in magnitude, so its scale is applied with a 32-bit multiply (vpmulld), exact. Q4_K
// keeps its 4-bit values packed (split per use); Q5_K's are decoded to bytes with their fifth bit.
#define Q4R 16     // rows per Q4_K / Q5_K / Q6_K panel call
#define Q4R_NC 5   // tokens per Q4_K / Q5_K register tile (kernel GOP/s, 1 thread, 512 tokens: 3/4/5/6 tokens 0.89/0.96/1/0.70)

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
    for (int r = 0; r < Q4R; r++) v[r] = r < nr ? _mm512_maskz_loadu_epi32(m, w + r * ws + off) : _mm512_setzero_si512();
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
    __m512i S[Q4R_NC];
    for (int c = 0; c < NC; c++) S[c] = _mm512_setzero_si512();
    for (int j = 0; j < 4; j++) {   // sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles)
        __m512i tl[Q4R_NC], th[Q4R_NC];
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
    __m512 acc[Q4R_NC];
    for (int c = 0; c < NC; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const llmb_block_q8_K *xb[Q4R_NC];
        for (int c = 0; c < NC; c++) xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i;
        if (q5) q45r_sb(1, &((const q5r_dec *)dec)[i].h, ((const q5r_dec *)dec)[i].q, xb, acc, NC);
        else q45r_sb(0, &((const q4r_dec *)dec)[i].h, ((const q4r_dec *)dec)[i].q, xb, acc, NC);
    }
    for (int c = 0; c < NC; c++) _mm512_mask_storeu_ps(y + c * ldy, rows, acc[c]);
}

// nr rows x nc tokens (w, ws, x, xs, y, ldy in scope) in tiles of 4 x 4: the K-type panels and
// small-batch kernels for rows longer than their tables on the stack
#define K_TILES(tile)                                                                                               \
    for (int r0 = 0; r0 < nr; r0 += 4)                                                                              \
        for (int c0 = 0; c0 < nc; c0 += 4)                                                                          \
            tile(n, w + r0 * ws, ws, nr - r0 < 4 ? nr - r0 : 4, x + c0 * xs, xs, nc - c0 < 4 ? nc - c0 : 4,       \
                 y + c0 * ldy + r0, ldy)

// The bytes [off, off + bytes) of the 16 rows at w (ws apart) prefetched into L2: while a panel decodes
// super-block i, that of the next panel of rows (whose 16 streams the hardware prefetchers do not follow)
VNNI512 INLINE void k_prefetch_next(const uint8_t *w, size_t ws, size_t off, size_t bytes) {
    for (int r = 0; r < Q4R; r++)
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
            K_TILES(type##_tile_vnni);                                                                              \
            return;                                                                                                 \
        }                                                                                                           \
        DEC_T dec[PANEL_MAX_SB];                                                                                    \
        for (int64_t i = 0; i < nsb; i++) {                                                                         \
            DECODE(w, ws, nr, i, &dec[i]);                                                                          \
            k_prefetch_next(w + Q4R * ws, ws, i * sizeof(BLK_T), sizeof(BLK_T));                                    \
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
K_PANEL(q4_K, llmb_block_q4_K, q4r_dec, q4r_decode, Q4R_NC, Q4_K_BODY)
K_PANEL(q5_K, llmb_block_q5_K, q5r_dec, q5r_decode, Q4R_NC, Q5_K_BODY)

// Interleaved Q4_K (llmb_vec_dot_repack, groups of 16 rows): super-block i of a group is 36 vectors,
// vector k lane r = word k of row r's block: 4 header words (d | dmin, the 12 scale bytes), then the 32
// words of qs, in q4r_dec's order. So a group's super-block is q4r_decode's result without the 16 x 16
// transposes, read from one sequential stream, and q45r_sb runs on it: the panels' bits, the dot's bits.
// From one token to LLMB_SMALL_TOKENS a thread's whole range of groups is one call; each group is read
// from memory once, by its first token tile, which prefetches STREAM_PF_AHEAD bytes ahead into L2 (all 36
// lines of each super-block; one token, q4i_sb1, only each page's first: prefetch_stream, and with
// LLMB_PREFETCH_LINES every line LINE_PF_AHEAD ahead into L1: pf_line). Against the
// plain layout's kernels on an AMD EPYC (Zen 4), 1 thread (benchmarks/bench_vecdot.py, 2048 x 8192 from
// DRAM, one run: 19.3 against 10.4 GB/s, 0.87 of the read bandwidth against 0.46; 2 threads 0.91 against
// 0.64; one process alternating the two on 2048 x 2048 and 8192 x 2048 weights: 2 tokens 2.1-2.8x, 8
// tokens 1.7-2.0x, 512 tokens 1.00-1.06x GOP/s). The prefetch into L1 of the current super-block measured
// best in the kernel alone, and into L1 at 2.3-18 KiB ahead slower still, but in the engine
// STREAM_PF_AHEAD into L2 won (above).
#define IL_SB (Q4R * sizeof(llmb_block_q4_K))   // bytes of one super-block of a group

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
// chains of 4. Engine tg64 of llama-1b Q4_K_M at 1 thread, alternated in one process against q45r_sb
// (both with prefetch_stream): 1.08x, 1.18x (AMD EPYC, Zen 4).
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
// Each group's sums are the same alone or paired; a pair reads two memory streams at once. With one stream
// per thread the kernels stayed below the read bandwidth, whose probe reads two (membw.c); on the Intel
// Xeon host a C loop of the Q4_K body's work with one prefetch per line over 1 GiB read 13.1-13.8 GB/s as
// one stream, 15.2 as two (1 thread), 20.3-26.9 against 28.6-29.8 on 2 threads. Alternated in one process
// (benchmarks/ab_builds.py, 300 copies), B/A: Q4_K 2048x2048 / 2048x8192 1.05x / 1.03x on 1 thread, 1.05x /
// 1.04x on 2 (four streams against two: 0.97x / 0.98x on 1 thread, 0.98x / 1.01x on 2); llama-1b Q4_K_M
// tg64 1.03x on 1 thread, 1.02x on 2. Q6_K 2048x2048 / 8192x2048 (q6i_one) 1.03x / 1.01x on 1 thread,
// 1.09x / 1.02x on 2, and tg64 1.01x / 1.00x more.
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
    __m512 acc[Q4R_NC];
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
        const llmb_block_q8_K *xb[Q4R_NC];
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
    const int keep = nc > Q4R_NC && nsb <= PANEL_MAX_SB;   // several token tiles: headers decoded once
    const int pf1 = decode_pf(stream);   // the first token tile's prefetch (q4i_body's pf)
    if (nc == 1) {   // one token: two groups at a time, one from each half of the rows (the last alone)
        const int64_t ng = nr / Q4R, h = (ng + 1) / 2;
        for (int64_t k = 0; k < h; k++)
            q4i_one(w + (size_t)(k * Q4R) * ws, k + h < ng ? w + (size_t)((k + h) * Q4R) * ws : NULL, nsb, x,
                    y + k * Q4R, y + (k + h) * Q4R, pf1);
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += Q4R)   // each group from memory once (its first token tile), then from cache
        for (int c0 = 0; c0 < nc; c0 += Q4R_NC) {
            const uint8_t *g = w + (size_t)r0 * ws, *xc = x + c0 * xs;
            float *yc = y + c0 * ldy + r0;
            const int pf = c0 == 0 ? pf1 : 0;
            if (keep && c0 == 0)
                for (int64_t i = 0; i < nsb; i++) q45r_hdr_words((const __m512i *)(g + i * IL_SB), &hd[i]);
            const q45r_hdr *h = keep ? hd : NULL;
#define Q4I_RUN(k) q4i_body(g, h, nsb, xc, xs, yc, ldy, pf, k)
            IL_TILE(nc - c0, Q4R_NC, Q4I_RUN)
#undef Q4I_RUN
        }
}

// Q6_K panels: the same 16 rows in lanes. Per sub-block s of 16 values T_s = sum q x (q = 0..63, before
// the minus 32; vpdpbusd, |T_s| <= 16 * 63 * 128), then S = sum_s sc_s T_s - 32 sum_s sc_s bsum_s, the
// exact integer of q6_K_body, and fma(d dx, S, acc) per token.
#define Q6R_NC 6   // tokens per Q6_K panel tile (kernel GOP/s, 1 thread, 512 tokens: 4/5/6 tokens 0.95/0.98/1)

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
    float d[Q4R];
    for (int r = 0; r < Q4R; r++) d[r] = r < nr ? half_at((const uint8_t *)&((const llmb_block_q6_K *)(w + r * ws) + i)->d) : 0.0f;
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

// Interleaved Q6_K (groups of 16 rows): super-block i of a group is 52 vectors at 3328 i, lane r of
// vector k = word k of row r's recoded block (vecdot.c, q6_K_recode: the values whole, in reading order,
// vectors 0..47; the scales 48..51), and the group's 16 d of super-block i are the 16 halves at 3328 nsb
// + 32 i. q6i_vals4 unpacks them (q6i_decode into the panel's table), q6r_sb runs the tokens: the panel's
// bits, the dot's. Each group is read from memory once, prefetched into L2 STREAM_PF_AHEAD bytes ahead:
// with more token tiles than one, all its super-blocks are decoded once into a panel's table first (as
// K_PANEL does; rows too long for it decode again per tile), else each super-block is decoded and run at
// once; one token (q6i_sb1) runs each 4 values as they are unpacked, nothing stored. Q6_K's unpacking
// costs more than Q4_K's, so the gain is smaller: 1 token, 1 thread, one process alternating plain and
// interleaved, GB/s, 2048 x 8192 from cache 20-22 -> 23-25, from DRAM 14-16 -> 17-18 (2048 x 2048 even);
// engine tg64 of llama-1b Q4_K_M (42% of its bytes Q6_K, the tied output among them) 1.06x at 1 thread,
// 0.99x at 2.
#define IL6_SB (52 * 64)   // bytes of one super-block's words in a group
// One token prefetches further ahead than STREAM_PF_AHEAD: since q6i_sb1 keeps its 16 sums in registers
// (both halves unrolled; rolled, they lived on the stack) it runs 1.13x faster from memory in the kernel
// alone, but in the engine at 9 KiB ahead it lost (llama-1b Q4_K_M tg64, 1 thread, alternated in one
// process: 0.88x); 32 KiB ahead 1.04x, 64 KiB 1.06x against the rolled kernel at 9 KiB (AMD EPYC, Zen 4).
// Now page-wise (prefetch_stream), 32 KiB measured the same as 64 (1.00x); with LLMB_PREFETCH_LINES every line
// LINE_PF_AHEAD ahead into L1 too (pf_line).
#define Q6_PF_AHEAD 65536

// lane r: row r's d of super-block i of the group at g (the halves past the group's words)
INLINE VNNI512 __m512 q6i_d(const uint8_t *g, int64_t nsb, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + nsb * IL6_SB + i * 32)));
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

INLINE VNNI512 void q6i_decode(const uint8_t *g, int64_t nsb, int64_t i, int pf, q6r_dec *o) {
    const __m512i *v = (const __m512i *)(g + i * IL6_SB);
    if (pf) prefetch_l2((const uint8_t *)v + STREAM_PF_AHEAD, IL6_SB);
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
    const __m512i *v = (const __m512i *)(g + i * IL6_SB);
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

// The d of the group after the one at g (past that group's words), where no prefetch of the stream reaches.
// Their loads missed the caches (9-12% of this kernel's samples in the engine: perf, llama-1b Q4_K_M tg);
// prefetched a group ahead, tg64 1.08x (1 thread, alternated in one process; AMD EPYC, Zen 4)
INLINE void q6i_prefetch_next_d(const uint8_t *g, size_t ws, int64_t nsb) {
    prefetch_l2(g + Q4R * ws + nsb * IL6_SB, (size_t)nsb * 32 + 63);
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
        q6i_decode(g, nsb, i, pf, &o);
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
        const int64_t ng = nr / Q4R, h = (ng + 1) / 2;
        for (int64_t k = 0; k < h; k++) {
            const uint8_t *ga = w + (size_t)(k * Q4R) * ws, *gb = k + h < ng ? w + (size_t)((k + h) * Q4R) * ws : NULL;
            if (k + 1 < h) q6i_prefetch_next_d(ga, ws, nsb);
            if (k + h + 1 < ng) q6i_prefetch_next_d(gb, ws, nsb);
            q6i_one(ga, gb, nsb, x, y + k * Q4R, y + (k + h) * Q4R, pf1);
        }
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += Q4R) {
        const uint8_t *g = w + (size_t)r0 * ws;
        if (r0 + Q4R < nr) q6i_prefetch_next_d(g, ws, nsb);
        if (keep) {
            q6r_dec dec[PANEL_MAX_SB];
            for (int64_t i = 0; i < nsb; i++) q6i_decode(g, nsb, i, 1, &dec[i]);
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
// lane r of vector k the values 4k .. 4k + 3 of row r plus 128, and after the group's last block the
// blocks' d, 16 halves a block. vpdpbusd of vector k against token x's values 4k .. 4k + 3 (broadcast),
// starting from -128 sum x (q8i_tok, made once per token and block for all the call's groups), leaves
// lane r with the exact sum w x of the block; then sum += (float)isum * (d_w * d_x) as q8_0_body does, so
// 1 conversion and 3 float operations per 8 vpdpbusd (the dot's bits). Tiles of NG groups x NC tokens.
#define Q8I_G 16
#define Q8I_BLK (Q8I_G * LLMB_QK)       // bytes of a block of a group
#define Q8I_NC 6                        // tokens per register tile
// One token runs 4 groups side by side (4 streams) and prefetches the first line of each page 32 KiB
// ahead (prefetch_stream). Engine tg of llama-1b Q8_0 / llama-125m Q8_0, alternated in one process
// against the plain rows' dot of 348d14e (AMD EPYC, Zen 4, 1 thread): one group, every line 32 KiB ahead
// 0.83x / 0.99-1.04x; one group page-wise 32 KiB 0.95x / -; 2 groups page-wise 0.96-0.99x; 4 groups
// page-wise 32 KiB 1.07x, 1.16x / 1.06x (2 threads 1.05x / 1.08x), 16 KiB 1.13x / 1.04x, every line
// 32 KiB 1.09x / 1.12x (2 threads 1.11x / 0.99x). One group with no prefetch 0.88x, into L1 0.80-0.83x.
#define Q8I_PF_AHEAD 32768
#define Q8I_NG1 4   // groups side by side at one token
// Weights streaming from DRAM under LLMB_PREFETCH_FAR (llmb_prefetch_mode; the default on Intel CPUs) run
// one token 2 groups side by side and prefetch every line as the Q4_K / Q6_K kernels do (pf_line: 4 KiB
// ahead into L1, 16 KiB into L2), besides the page-wise prefetch. Engine tg32 of llama-1b Q8_0 alternated
// in one process (benchmarks/ab_builds.py) on the Intel Xeon host, B/A: 1.05x at 1 thread, 1.06x at 2
// (4 groups with every line: 1.05x; every line into L2 alone: 0.96x).
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
// prefetch, 1 one token page-wise (more tokens: every line into L2), 2 one token, every line too (pf_line)
INLINE VNNI512 void q8i_body(const uint8_t *g, size_t gs, int64_t nb, int64_t i0, int64_t bn, const uint8_t *x,
                             size_t xs, const q8i_tok *xt, float *y, int64_t ldy, const int first, const int pf,
                             const int NG, const int NC) {
    __m512 acc[4][Q8I_NC];
    for (int q = 0; q < NG; q++)
        for (int c = 0; c < NC; c++) acc[q][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + c * ldy + Q8I_G * q);
    for (int64_t i = 0; i < bn; i++) {
        const uint8_t *v = g + (i0 + i) * Q8I_BLK;
        if (pf)   // one token: page-wise, Q8I_PF_AHEAD ahead (prefetch_stream); more: every line
            for (int q = 0; q < NG; q++) {
                if (NC == 1) prefetch_stream(v + q * gs + Q8I_PF_AHEAD, Q8I_BLK);
                else prefetch_l2(v + q * gs + STREAM_PF_AHEAD, Q8I_BLK);
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
            const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + q * gs + nb * Q8I_BLK) + i0 + i));
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
    const int tc = (int)(Q8I_TOKS / br), ng = nc > LLMB_SMALL_TOKENS ? 2 : nc == 1 ? (far ? Q8I_NG1_FAR : Q8I_NG1) : 1;
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
                    const int first = i0 == 0, pf = t0 == 0 ? 1 + far : 0;   // q8i_body's pf
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

// F32, F16, BF16: FL_R rows converted to float a chunk of at most FL_K values at a time, every
// token of the call run over the chunk in register tiles of FL_R rows x 2 tokens (16 accumulators:
// each weight vector feeds 2 fmadds, each activation vector 8), the accumulators kept in memory
// between chunks (rows of 2048 values no longer stream from L2 for every group of tokens) and summed
// from registers after the last one. Per output the operations of float_body: 16 values per 512-bit
// fmadd, whose low and high halves are its two accumulators (values i..i+7 and i+8..i+15) in order of
// i, then the 8-value step masked to the low half, its scalar tail and final sum (hsum16_ps: the same
// additions for 16 outputs at once). Rows past nr are zeros, computed and never stored.
#define FL_R 8          // rows per panel call
#define FL_TC 2         // tokens per register tile
#define FL_K 768        // most values per converted chunk (a multiple of 16): FL_R x FL_K floats stay in L1
#define FL_LD (FL_K + 16)   // floats from one converted row to the next (rows not 4 KiB apart: L1 sets)
#define FL_TOK (4 * LLMB_PANEL_TOKENS)   // tokens per pass over the chunks, the most panel_tokens hands
                                        // (the accumulators of a pass: FL_R x FL_TOK vectors)

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

// float_body's ending for one row and token, the values past the last multiple of 16: the 8-value
// step on the low half of *acc, then the scalar tail, returned (the panel and the decode kernel)
INLINE VNNI512 float fl_tail(const int type, int64_t n, const uint8_t *row, const float *x, __m512 *acc) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    int64_t i = n / 16 * 16;
    float tail = 0.0f;
    if (i + 8 <= n) {
        *acc = _mm512_mask3_fmadd_ps(_mm512_castps256_ps512(load_w8(type, row + i * es)),
                                     _mm512_castps256_ps512(_mm256_loadu_ps(x + i)), *acc, 0x00FF);
        i += 8;
    }
    for (; i < n; i++) tail += w_scalar(type, row + i * es) * x[i];
    return tail;
}

// The outputs of NC (1 or 2) tokens x the nr rows from their accumulators acc[c * FL_R + r]: the
// 8-value step and scalar tail of values past n16 (on a copy: acc itself stays in registers), then
// the sums of all 2 x FL_R at once
INLINE VNNI512 void fl_finish(const int type, int64_t n, const uint8_t *w, size_t ws, int nr, const float *x, size_t xs,
                              const __m512 *acc, const int NC, float *y, int64_t ldy) {
    const int64_t n16 = n / 16 * 16;
    __m512 s;
    if (n16 < n) {
        __m512 a[FL_TC * FL_R];
        float t[FL_TC * FL_R] = {0};
        memcpy(a, acc, sizeof(__m512) * NC * FL_R);
        for (int k = 0; k < NC * FL_R; k++)
            if (k % FL_R < nr)
                t[k] = fl_tail(type, n, w + (k % FL_R) * ws, (const float *)((const uint8_t *)x + (k / FL_R) * xs), &a[k]);
        s = _mm512_add_ps(hsum16_ps(a, NC * FL_R), _mm512_loadu_ps(t));
    } else   // + 0.0f as float_body adds its (empty) tail: -0.0f sums stay +0.0f
        s = _mm512_add_ps(hsum16_ps(acc, NC * FL_R), _mm512_setzero_ps());
    const __m256 s1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1));
    if (nr == FL_R) {
        _mm256_storeu_ps(y, _mm512_castps512_ps256(s));
        if (NC == 2) _mm256_storeu_ps(y + ldy, s1);
    } else {
        const __mmask8 rows = (__mmask8)((1u << nr) - 1);
        _mm256_mask_storeu_ps(y, rows, _mm512_castps512_ps256(s));
        if (NC == 2) _mm256_mask_storeu_ps(y + ldy, rows, s1);
    }
}

// NC (1 or 2) tokens x FL_R rows over the kc values (a multiple of 16) of a chunk, from the sums
// in accm (or zeros on the first chunk) to accm, or on the last chunk to the outputs
INLINE VNNI512 void fl_tile(const float *dec, int64_t kc, const float *xk, size_t xs, __m512 *accm, int first, int last,
                            const int NC, const int type, int64_t n, const uint8_t *w, size_t ws, int nr,
                            const float *x, float *y, int64_t ldy) {
    __m512 acc[FL_TC * FL_R];
    for (int k = 0; k < NC * FL_R; k++) acc[k] = first ? _mm512_setzero_ps() : accm[k];
    for (int64_t i = 0; i < kc; i += 16) {
        __m512 xv[FL_TC];
        for (int c = 0; c < NC; c++) xv[c] = _mm512_loadu_ps((const float *)((const uint8_t *)xk + c * xs) + i);
        for (int r = 0; r < FL_R; r++) {
            __m512 wv = _mm512_load_ps(dec + r * FL_LD + i);
            __asm__("" : "+v"(wv));   // one load per row, not one folded into each of the NC fmadds
            for (int c = 0; c < NC; c++) acc[c * FL_R + r] = _mm512_fmadd_ps(wv, xv[c], acc[c * FL_R + r]);
        }
    }
    if (last) fl_finish(type, n, w, ws, nr, x, xs, acc, NC, y, ldy);
    else
        for (int k = 0; k < NC * FL_R; k++) accm[k] = acc[k];
}

// converted values k0 .. k0+kc of row `row` into o (float_panel prefetched its bytes while the
// previous panel call ran its tokens: the weights come from DRAM or L3)
INLINE VNNI512 void fl_convert(const int type, const uint8_t *row, int64_t k0, int64_t kc, float *o) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    int64_t i = 0;
    if (type == LLMB_TYPE_F16)
        for (; i + 16 <= kc; i += 16)
            _mm512_store_ps(o + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * (k0 + i)))));
    for (; i < kc; i++) o[i] = w_scalar(type, row + (k0 + i) * es);
}

INLINE VNNI512 void float_panel(const int type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                                size_t xs, int nc, float *y, int64_t ldy) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    const int64_t n16 = n / 16 * 16;
    const int64_t nch = n16 ? (n16 + FL_K - 1) / FL_K : 1, kstep = n16 ? (n16 / 16 + nch - 1) / nch * 16 : 16;   // balanced chunks
    float dec[FL_R * FL_LD] __attribute__((aligned(64)));
    __m512 accm[FL_TOK * FL_R];
    for (int t0 = 0; t0 < nc; t0 += FL_TOK) {
        const int ntk = nc - t0 < FL_TOK ? nc - t0 : FL_TOK;
        const float *xt = (const float *)(x + t0 * xs);
        for (int64_t k0 = 0; k0 < n16 || k0 == 0; k0 += kstep) {
            const int64_t kc = n16 - k0 < kstep ? n16 - k0 : kstep;
            const int last = k0 + kstep >= n16;
            for (int r = 0; r < FL_R; r++) {
                if (r < nr) fl_convert(type, w + r * ws, k0, kc, dec + r * FL_LD);
                else memset(dec + r * FL_LD, 0, sizeof(float) * (size_t)kc);
            }
            // the same bytes of the next panel call's rows, all at once now that the conversion's loads
            // are issued (spread over the tiles, or issued during the conversion, they helped less)
            for (int r = 0; r < FL_R; r++)
                for (size_t b = (size_t)k0 * es; b < (size_t)(k0 + kc) * es; b += 64)
                    _mm_prefetch((const char *)w + (FL_R + r) * ws + b, _MM_HINT_T0);
            for (int c0 = 0; c0 < ntk; c0 += FL_TC) {
                __m512 *am = accm + c0 * FL_R;
                const float *xc = (const float *)((const uint8_t *)xt + c0 * xs);
                float *yc = y + (t0 + c0) * ldy;
                if (ntk - c0 >= 2) fl_tile(dec, kc, xc + k0, xs, am, k0 == 0, last, 2, type, n, w, ws, nr, xc, yc, ldy);
                else fl_tile(dec, kc, xc + k0, xs, am, k0 == 0, last, 1, type, n, w, ws, nr, xc, yc, ldy);
            }
        }
    }
}

#define FL_PANEL(name, T)                                                                                           \
    VNNI512 static void name##_panel_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, \
                                             int nc, float *y, int64_t ldy) {                                        \
        float_panel(T, n, vw, ws, nr, vx, xs, nc, y, ldy);                                                          \
    }
FL_PANEL(f32, LLMB_TYPE_F32)
FL_PANEL(f16, LLMB_TYPE_F16)
FL_PANEL(bf16, LLMB_TYPE_BF16)

// ---- BF16 pairs (LLMB_TYPE_BF16_DP: vecdot.h; AVX-512 BF16) ----
// Per output the reference's chain: one 16-lane vdpbf16ps accumulator over the whole row from +0, then
// hsum16_ps (the reference's lane order). The kernels differ only in how many outputs share a pass: NR
// rows x NC tokens of independent chains (the instruction's latency needs several), a panel's rows
// chunk by chunk with the sums kept in memory in between (the chain resumes where it stopped).
#define BFD __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni,avx512bf16")))
#define BD_R 8                          // rows per panel call and per decode pass
// values per panel chunk (the C tests: 1024, so that rows run in several). Whole rows measured best: a
// 2048 x 8192 matrix, 512 tokens, 1 thread, against the F16 panel in one process: chunks of 1024 1.37 /
// 1.46x, 2048 1.60 / 1.67x, 4096 1.82 / 1.90x, 8192 2.01 / 2.10x (the rows stay in L2)
#ifndef LLMB_BD_K
#define LLMB_BD_K 16384
#endif
#define BD_K LLMB_BD_K
#define BD_TOK (4 * LLMB_PANEL_TOKENS)  // tokens per pass over the chunks (the sums of a pass: BD_R x BD_TOK)
// tokens per register tile of 4 rows: 16 chains, 8 loads per 16 vdpbf16ps (an L1-resident loop of
// them: 4 rows x 4 tokens 99.8 GMAC/s, 8 x 2 76.7, 6 x 4 90.7, 8 x 3 81.3)
#define BD_TC 4

// acc[c * NR + r] += the pairs of values k0 .. k0 + kc of row rows[r] and token c
BFD INLINE void bd_run(const uint8_t *const *rows, const uint8_t *x, size_t xs, int64_t k0, int64_t kc, __m512 *acc,
                       const int NR, const int NC) {
    for (int64_t i = k0; i < k0 + kc; i += 32) {
        __m512bh xv[LLMB_TILE_MAX_C];
        for (int c = 0; c < NC; c++) xv[c] = (__m512bh)_mm512_loadu_si512(x + c * xs + 2 * i);
        for (int r = 0; r < NR; r++) {
            __m512bh wv = (__m512bh)_mm512_loadu_si512(rows[r] + 2 * i);
            __asm__("" : "+v"(wv));   // one load per row, not one folded into each of the NC products
            for (int c = 0; c < NC; c++) acc[c * NR + r] = _mm512_dpbf16_ps(acc[c * NR + r], wv, xv[c]);
        }
    }
}

// y[c * ldy + r] for r < nr <= NR, c < NC: the sums of acc[c * NR + r]
BFD INLINE void bd_store(const __m512 *acc, int nr, float *y, int64_t ldy, const int NR, const int NC) {
    float o[16];
    _mm512_storeu_ps(o, hsum16_ps(acc, NR * NC));
    for (int c = 0; c < NC; c++)
        for (int r = 0; r < nr; r++) y[c * ldy + r] = o[c * NR + r];
}

// one panel chunk for the nr <= BD_R rows x NC tokens, in register tiles of 4 rows x NC: the sums from
// am[c * BD_R + r] (zeros at the first chunk), to am or, after the last chunk, to y
BFD INLINE void bd_pass(const uint8_t *const *rows, const uint8_t *x, size_t xs, int64_t k0, int64_t kc, __m512 *am,
                        int last, int nr, float *y, int64_t ldy, const int NC) {
    for (int h = 0; h < nr; h += 4) {
        __m512 acc[4 * BD_TC];
        for (int c = 0; c < NC; c++)
            for (int r = 0; r < 4; r++) acc[c * 4 + r] = k0 ? am[c * BD_R + h + r] : _mm512_setzero_ps();
        bd_run(rows + h, x, xs, k0, kc, acc, 4, NC);
        if (last) bd_store(acc, nr - h < 4 ? nr - h : 4, y + h, ldy, 4, NC);
        else
            for (int c = 0; c < NC; c++)
                for (int r = 0; r < 4; r++) am[c * BD_R + h + r] = acc[c * 4 + r];
    }
}

// rows r < NR of w (ws bytes apart) x tokens c < NC, whole rows
BFD INLINE void bd_outputs(int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y, int64_t ldy,
                           const int NR, const int NC) {
    const uint8_t *rows[BD_R];
    __m512 acc[16];
    for (int r = 0; r < NR; r++) rows[r] = w + r * ws;
    for (int k = 0; k < NR * NC; k++) acc[k] = _mm512_setzero_ps();
    bd_run(rows, x, xs, 0, n, acc, NR, NC);
    bd_store(acc, NR, y, ldy, NR, NC);
}

BFD static void bf16dp_dot_bf(int64_t n, float *s, const void *w, const void *x) {
    bd_outputs(n, w, 0, x, 0, s, 0, 1, 1);
}

#define BD_CASE(R, C) case (R - 1) * 4 + C - 1: bd_outputs(n, w, ws, x, xs, y, ldy, R, C); break;
BFD static void bf16dp_tile_bf(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc, float *y,
                               int64_t ldy) {
    const uint8_t *w = vw, *x = vx;
    switch ((nr - 1) * 4 + nc - 1) {
        BD_CASE(1, 1) BD_CASE(1, 2) BD_CASE(1, 3) BD_CASE(1, 4) BD_CASE(2, 1) BD_CASE(2, 2) BD_CASE(2, 3) BD_CASE(2, 4)
        BD_CASE(3, 1) BD_CASE(3, 2) BD_CASE(3, 3) BD_CASE(3, 4) BD_CASE(4, 1) BD_CASE(4, 2) BD_CASE(4, 3) BD_CASE(4, 4)
    default: break;
    }
}
#undef BD_CASE

// one token, any number of rows: row after row, one sequential stream left to the hardware prefetchers,
// 16 rows' sums summed by one hsum16_ps. llama-125m F16@bf16 tg (1 thread, one process alternating
// builds): rows side by side (8 chains, 8 streams) 61 t/s where F16 ran 117; two rows side by side 0.92x
// of one; one line prefetched STREAM_PF_AHEAD ahead per 32 values (as float_decode_row does) 0.75x.
BFD INLINE __m512 bd_decode_row(int64_t n, const uint8_t *w, const uint8_t *x) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(w + 2 * i), (__m512bh)_mm512_loadu_si512(x + 2 * i));
    }
    return acc;
}

BFD static void bf16dp_decode_bf(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc,
                                 float *y, int64_t ldy) {
    (void)xs, (void)nc, (void)ldy;
    const uint8_t *w = vw, *x = vx;
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int m = nr - r0 < 16 ? nr - r0 : 16;
        __m512 acc[16];
        for (int r = 0; r < m; r++) acc[r] = bd_decode_row(n, w + (size_t)(r0 + r) * ws, x);
        float o[16];
        _mm512_storeu_ps(o, hsum16_ps(acc, m));
        memcpy(y + r0, o, sizeof(float) * (size_t)m);
    }
}

// nr <= BD_R rows (past nr: row 0 again, computed and not stored) x nc tokens, BD_TC at a time, chunk by chunk
BFD static void bf16dp_panel_bf(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc, float *y,
                                int64_t ldy) {
    const uint8_t *w = vw, *x = vx;
    const uint8_t *rows[BD_R];
    for (int r = 0; r < BD_R; r++) rows[r] = w + (r < nr ? r : 0) * ws;
    __m512 accm[BD_TOK * BD_R];
    for (int t0 = 0; t0 < nc; t0 += BD_TOK) {
        const int ntk = nc - t0 < BD_TOK ? nc - t0 : BD_TOK;
        for (int64_t k0 = 0; k0 < n; k0 += BD_K) {
            const int64_t kc = n - k0 < BD_K ? n - k0 : BD_K;
            // the same values of the next panel call's rows, while these run from L1
            if (t0 == 0)
                for (int r = 0; r < BD_R; r++)
                    for (int64_t b = 2 * k0; b < 2 * (k0 + kc); b += 64)
                        _mm_prefetch((const char *)w + (BD_R + r) * ws + b, _MM_HINT_T0);
            for (int c0 = 0; c0 < ntk; c0 += BD_TC) {
                const int nc1 = ntk - c0 < BD_TC ? ntk - c0 : BD_TC;
                __m512 *am = accm + c0 * BD_R;
                const uint8_t *xc = x + (size_t)(t0 + c0) * xs;
                float *yc = y + (t0 + c0) * ldy;
                const int last = k0 + kc >= n;
                switch (nc1) {
                case 1: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, 1); break;
                case 2: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, 2); break;
                case 3: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, 3); break;
                default: bd_pass(rows, xc, xs, k0, kc, am, last, nr, yc, ldy, BD_TC); break;
                }
            }
        }
    }
}

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
// from 3 tokens single rows (measured: Q4_K 2048x768, 1 thread, 4 tokens, rows one by one 0.82x the
// time of pairs of rows; 2 tokens, groups of 4 0.96x pairs). The tokens' d per super-block gathered
// once per call (dxt, lane g*nc + c).
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
            K_TILES(name##_tile_vnni);                                                                              \
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
// At one thread the 256-bit dots run row after row, not the memory, bounded decode (Q4_K ~22 GB/s
// from L2 or DRAM alike). Here a super-block's exact integers S (and M) take about half the
// instructions (scales unpacked in vector registers, nibbles by a broadcast load and a variable shift),
// 8 or 16 super-blocks share one horizontal reduction, and up to 8 rows' float chains run side by
// side. S and M are exact, the fmas the body's, so the same bits as the dot (test_vecdot: one-token
// matmul against the dot, every level and thread count). Matrix-vector GB/s from DRAM, 1 thread
// (256 MB pool, 2 alternated runs, medians of 60+ calls): Q4_K 2048x2048 21.3 -> 24.5, 2048x768
// 20.0 -> 22.7; Q6_K 2048x8192 26.7 -> 33.1, 32000x2048 26.2 -> 32.1.

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
// longer than KD_SLOTS super-blocks (n > 131072) run the dot
#define K_DECODE(name, T)                                                                                           \
    VNNI512 static void name##_decode_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *x, size_t xs,  \
                                              int nc, float *y, int64_t ldy) {                                      \
        const uint8_t *w = vw;                                                                                      \
        const int64_t nb = n / LLMB_QK_K;                                                                           \
        const int g = nb * KD_ROWS <= KD_SLOTS ? KD_ROWS : (int)(KD_SLOTS / (nb > 0 ? nb : 1));                     \
        if (g < 1) {                                                                                                \
            for (int r = 0; r < nr; r++) name##_dot_vnni(n, y + r, w + r * ws, x);                                  \
            return;                                                                                                 \
        }                                                                                                           \
        for (int r = 0; r < nr; r += g) k_decode_body(T, nb, w + r * ws, ws, x, y + r, nr - r < g ? nr - r : g);    \
    }
K_DECODE(q4_K, LLMB_TYPE_Q4_K)
K_DECODE(q5_K, LLMB_TYPE_Q5_K)
K_DECODE(q6_K, LLMB_TYPE_Q6_K)

// One token of F32 / F16 / BF16 weights, row after row: float_body's operations for a 1 x 1 tile,
// with its two 8-float accumulators (elements 16k .. 16k+7 and 16k+8 .. 16k+15) as the low and high
// halves of one 512-bit accumulator, so the same bits as the dot in half the instructions. Matrix-
// vector GB/s from DRAM (1 thread, 256 MB pool, 3 alternated runs): F16 768 x 2048 (the 4x1 tiles
// before) 17-19 -> 25-31, 2048 x 768 (the dot before) 25-30 -> 28-31. Four rows side by side (four
// fma chains; 1.4-1.9x faster from L2) read slower from DRAM at n = 768 whatever their prefetch.
INLINE VNNI512 __m512 load_w16(const int type, const uint8_t *p) {
    switch (type) {
    case LLMB_TYPE_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
    case LLMB_TYPE_BF16: return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
    default: return _mm512_loadu_ps((const float *)p);
    }
}

INLINE VNNI512 float float_decode_row(const int type, int64_t n, const uint8_t *w, const float *x) {
    const size_t es = type == LLMB_TYPE_F32 ? 4 : 2;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        if (i % 32 == 0) prefetch_l2(w + i * es + STREAM_PF_AHEAD, 32 * es);   // F32: 2 lines per 32 values
        acc = _mm512_fmadd_ps(load_w16(type, w + i * es), _mm512_loadu_ps(x + i), acc);
    }
    const float tail = fl_tail(type, n, w, x, &acc);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1));
    return hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc), hi)) + tail;
}

#define FLOAT_DECODE(name, T)                                                                                       \
    VNNI512 static void name##_decode_vnni512(int64_t n, const void *vw, size_t ws, int nr, const void *x, size_t xs,  \
                                              int nc, float *y, int64_t ldy) {                                      \
        for (int r = 0; r < nr; r++) y[r] = float_decode_row(T, n, (const uint8_t *)vw + r * ws, x);                \
    }
FLOAT_DECODE(f32, LLMB_TYPE_F32)
FLOAT_DECODE(f16, LLMB_TYPE_F16)
FLOAT_DECODE(bf16, LLMB_TYPE_BF16)
#endif // x86-64



// ================================ AArch64 ================================
// Each block's integer dot is reduced to one int (vaddvq_s32: exact, so the same with or without
// the dot-product extension), then accumulated in float as the reference does; Q8_0 and Q4_0 are
// thereby bit-identical to their references. Other types keep the scalar reference on NEON.
#if defined(__aarch64__)
#include <arm_neon.h>

static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
    return vdotq_s32(acc, a, b);
#else
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

static inline float half_at_neon(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return llmb_fp16_to_fp32(h);
}

// Q4_0, Q8_0 x Q8_0
INLINE void legacy0_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                              float *y, int64_t ldy, const int NR, const int NC) {
    const size_t wb = type == LLMB_TYPE_Q4_0 ? sizeof(llmb_block_q4_0) : sizeof(llmb_block_q8_0);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t ib = 0; ib < n / LLMB_QK; ib++)
        for (int r = 0; r < NR; r++) {
            const uint8_t *blk = w + r * ws + ib * wb;
            int8x16_t w0, w1;
            if (type == LLMB_TYPE_Q4_0) {
                const uint8x16_t q = vld1q_u8(blk + 2);
                w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0F))), vdupq_n_s8(8));
                w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
            } else {
                w0 = vld1q_s8((const int8_t *)blk + 2), w1 = vld1q_s8((const int8_t *)blk + 18);
            }
            const float wd = half_at_neon(blk);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_0 *xb = (const llmb_block_q8_0 *)(x + c * xs) + ib;
                const int sumi = vaddvq_s32(dot16(dot16(vdupq_n_s32(0), w0, vld1q_s8(xb->qs)), w1, vld1q_s8(xb->qs + 16)));
                const float xd = half_at_neon((const uint8_t *)&xb->d);
                if (type == LLMB_TYPE_Q4_0) acc[r][c] += sumi * wd * xd;
                else acc[r][c] += sumi * (wd * xd);
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q4_K x Q8_K: integer sums per sub-block times the 6-bit scales, mins against the bsums
INLINE void q4_K_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                           float *y, int64_t ldy, const int NR, const int NC) {
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        for (int r = 0; r < NR; r++) {
            const llmb_block_q4_K *b = (const llmb_block_q4_K *)(w + r * ws) + i;
            uint8_t sc[8], mn[8];
            for (int j = 0; j < 8; j++) llmb_get_scale_min_k4(j, b->scales, &sc[j], &mn[j]);
            const float wd = llmb_fp16_to_fp32(b->d), wdmin = llmb_fp16_to_fp32(b->dmin);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                int sumi = 0, summ = 0;
                for (int j = 0; j < 4; j++) {
                    const uint8x16_t q0 = vld1q_u8(b->qs + 32 * j), q1 = vld1q_u8(b->qs + 32 * j + 16);
                    const int8_t *q8 = xb->qs + 64 * j;
                    const int8x16_t m4 = vdupq_n_s8(0x0F);
                    int32x4_t lo = dot16(vdupq_n_s32(0), vandq_s8(vreinterpretq_s8_u8(q0), m4), vld1q_s8(q8));
                    lo = dot16(lo, vandq_s8(vreinterpretq_s8_u8(q1), m4), vld1q_s8(q8 + 16));
                    int32x4_t hi = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vld1q_s8(q8 + 32));
                    hi = dot16(hi, vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), vld1q_s8(q8 + 48));
                    sumi += sc[2 * j] * vaddvq_s32(lo) + sc[2 * j + 1] * vaddvq_s32(hi);
                }
                for (int j = 0; j < 8; j++) summ += mn[j] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
                acc[r][c] += (wd * xb->d) * sumi;
                acc[r][c] -= (wdmin * xb->d) * summ;
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// Q6_K x Q8_K: the values unpacked to int8 (minus 32) as the dequantizer does, 16 per scale
INLINE void q6_K_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                           float *y, int64_t ldy, const int NR, const int NC) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    float acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = 0.0f;
    for (int64_t i = 0; i < n / LLMB_QK_K; i++)
        for (int r = 0; r < NR; r++) {
            const llmb_block_q6_K *b = (const llmb_block_q6_K *)(w + r * ws) + i;
            int8x16_t q[16];   // 16 sub-blocks of 16 values
            for (int half = 0; half < 2; half++) {
                const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
                for (int l = 0; l < 32; l += 16) {
                    const uint8x16_t l0 = vld1q_u8(ql + l), l32 = vld1q_u8(ql + 32 + l), h = vld1q_u8(qh + l);
                    int8x16_t *o = q + 8 * half + l / 16;
                    o[0] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h, m2), 4))), off);
                    o[2] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l32, m4),
                                                                 vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 2), m2), 4))), off);
                    o[4] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l0, 4),
                                                                 vshlq_n_u8(vandq_u8(vshrq_n_u8(h, 4), m2), 4))), off);
                    o[6] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l32, 4), vshlq_n_u8(vshrq_n_u8(h, 6), 4))), off);
                }
            }
            const float wd = llmb_fp16_to_fp32(b->d);
            for (int c = 0; c < NC; c++) {
                const llmb_block_q8_K *xb = (const llmb_block_q8_K *)(x + c * xs) + i;
                int sumi = 0;
                for (int j = 0; j < 16; j++)
                    sumi += b->scales[j] * vaddvq_s32(dot16(vdupq_n_s32(0), q[j], vld1q_s8(xb->qs + 16 * j)));
                acc[r][c] += (wd * xb->d) * sumi;
            }
        }
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = acc[r][c];
}

// F16 x F32: two 4-float accumulators per output over 8 elements, then scalars
INLINE void f16_body_neon(const int type, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                          float *y, int64_t ldy, const int NR, const int NC) {
    float32x4_t acc[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C][2];
    float tail[LLMB_TILE_MAX_R][LLMB_TILE_MAX_C];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) acc[r][c][0] = acc[r][c][1] = vdupq_n_f32(0.0f), tail[r][c] = 0.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int r = 0; r < NR; r++) {
            const float16x8_t h = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(w + r * ws) + i));
            const float32x4_t w0 = vcvt_f32_f16(vget_low_f16(h)), w1 = vcvt_high_f32_f16(h);
            for (int c = 0; c < NC; c++) {
                const float *xc = (const float *)(x + c * xs) + i;
                acc[r][c][0] = vaddq_f32(acc[r][c][0], vmulq_f32(w0, vld1q_f32(xc)));
                acc[r][c][1] = vaddq_f32(acc[r][c][1], vmulq_f32(w1, vld1q_f32(xc + 4)));
            }
        }
    for (; i < n; i++)
        for (int r = 0; r < NR; r++)
            for (int c = 0; c < NC; c++)
                tail[r][c] += llmb_fp16_to_fp32(((const uint16_t *)(w + r * ws))[i]) * ((const float *)(x + c * xs))[i];
    for (int r = 0; r < NR; r++)
        for (int c = 0; c < NC; c++) y[c * ldy + r] = vaddvq_f32(vaddq_f32(acc[r][c][0], acc[r][c][1])) + tail[r][c];
}

#define VD_T
#define VD(f) f##_neon
GEN(q4_0, legacy0_body_neon, LLMB_TYPE_Q4_0)
GEN(q8_0, legacy0_body_neon, LLMB_TYPE_Q8_0)
GEN(q4_K, q4_K_body_neon, LLMB_TYPE_Q4_K)
GEN(q6_K, q6_K_body_neon, LLMB_TYPE_Q6_K)
GEN(f16, f16_body_neon, LLMB_TYPE_F16)
#undef VD_T
#undef VD
#endif // AArch64

#define SET(lvl_sfx, T, name) t[T].dot = name##_dot_##lvl_sfx, t[T].tile = name##_tile_##lvl_sfx
#define SET_ALL(sfx)                                                                                                \
    SET(sfx, LLMB_TYPE_F32, f32); SET(sfx, LLMB_TYPE_F16, f16); SET(sfx, LLMB_TYPE_BF16, bf16);                     \
    SET(sfx, LLMB_TYPE_Q4_0, q4_0); SET(sfx, LLMB_TYPE_Q5_0, q5_0); SET(sfx, LLMB_TYPE_Q8_0, q8_0);                 \
    SET(sfx, LLMB_TYPE_Q4_1, q4_1); SET(sfx, LLMB_TYPE_Q5_1, q5_1); SET(sfx, LLMB_TYPE_Q4_K, q4_K);                 \
    SET(sfx, LLMB_TYPE_Q5_K, q5_K); SET(sfx, LLMB_TYPE_Q6_K, q6_K); SET(sfx, LLMB_TYPE_Q8_K, q8_K);                 \
    SET(sfx, LLMB_TYPE_Q2_K, q2_K); SET(sfx, LLMB_TYPE_Q3_K, q3_K); SET(sfx, LLMB_TYPE_IQ4_NL, iq4_nl);             \
    SET(sfx, LLMB_TYPE_IQ4_XS, iq4_xs)

void llmb_vec_dot_simd_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    switch (lvl) {
#if defined(__x86_64__) && defined(__GNUC__)
    case LLMB_SIMD_AVX2:
        SET_ALL(avx2);
        t[LLMB_TYPE_Q4_1].quant_x = t[LLMB_TYPE_Q5_1].quant_x = llmb_quant_q8_1_avx2;
        llmb_vec_dot_il8_install(lvl, t);
        break;
    case LLMB_SIMD_AVX512:   // the AVX2 kernels (installed first by vecdot.c), or the same math with VNNI
        if (llmb_cpu_has("avx512vnni")) {
            SET_ALL(vnni);
            t[LLMB_TYPE_Q4_K].panel = q4_K_panel_vnni512;
            t[LLMB_TYPE_Q4_K].panel_r = Q4R;
            t[LLMB_TYPE_Q5_K].panel = q5_K_panel_vnni512;
            t[LLMB_TYPE_Q5_K].panel_r = Q4R;
            t[LLMB_TYPE_Q6_K].panel = q6_K_panel_vnni512;
            t[LLMB_TYPE_Q6_K].panel_r = Q4R;
            t[LLMB_TYPE_F32].panel = f32_panel_vnni512;
            t[LLMB_TYPE_F16].panel = f16_panel_vnni512;
            t[LLMB_TYPE_BF16].panel = bf16_panel_vnni512;
            t[LLMB_TYPE_F32].panel_r = t[LLMB_TYPE_F16].panel_r = t[LLMB_TYPE_BF16].panel_r = FL_R;
            t[LLMB_TYPE_Q4_K].small = q4_K_small_vnni512;
            t[LLMB_TYPE_Q5_K].small = q5_K_small_vnni512;
            t[LLMB_TYPE_Q6_K].small = q6_K_small_vnni512;
            t[LLMB_TYPE_Q4_K].decode = q4_K_decode_vnni512;
            t[LLMB_TYPE_Q4_K].il = q4_K_il_vnni512;
            t[LLMB_TYPE_Q4_K].il_r = Q4R;
            t[LLMB_TYPE_Q6_K].il = q6_K_il_vnni512;
            t[LLMB_TYPE_Q6_K].il_r = Q4R;
            t[LLMB_TYPE_Q8_0].il = q8_0_il_vnni512;
            t[LLMB_TYPE_Q8_0].il_r = Q8I_G;
            t[LLMB_TYPE_Q5_K].decode = q5_K_decode_vnni512;
            t[LLMB_TYPE_Q6_K].decode = q6_K_decode_vnni512;
            t[LLMB_TYPE_F32].decode = f32_decode_vnni512;
            t[LLMB_TYPE_F16].decode = f16_decode_vnni512;
            t[LLMB_TYPE_BF16].decode = bf16_decode_vnni512;
            llmb_vec_dot_il8_install(lvl, t);
            if (llmb_cpu_has("avx512bf16")) {
                SET(bf, LLMB_TYPE_BF16_DP, bf16dp);
                t[LLMB_TYPE_BF16_DP].panel = bf16dp_panel_bf;
                t[LLMB_TYPE_BF16_DP].panel_r = BD_R;
                t[LLMB_TYPE_BF16_DP].decode = bf16dp_decode_bf;
            }
        }
        break;
#endif
#if defined(__aarch64__)
    case LLMB_SIMD_NEON:
        SET(neon, LLMB_TYPE_Q4_0, q4_0); SET(neon, LLMB_TYPE_Q8_0, q8_0); SET(neon, LLMB_TYPE_Q4_K, q4_K);
        SET(neon, LLMB_TYPE_Q6_K, q6_K); SET(neon, LLMB_TYPE_F16, f16);
        break;
#endif
    default: break;
    }
}

#else // LLMB_VECDOT_BODY
// ---- x86 kernel bodies, compiled once per instruction set (VD_T, VD, DOTACC) ----

// Every body: y[c*ldy + r] = dot(row r, token c) for r < NR, c < NC (constants once inlined).

// Q4_0, Q5_0 x Q8_0 and Q4_1, Q5_1 x Q8_1: the reference's arithmetic to the bit (vecdot.c, dot_q*_ref), as
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
#endif // LLMB_VECDOT_BODY
