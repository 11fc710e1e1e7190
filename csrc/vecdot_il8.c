// vecdot_il8.c — the legacy types Q4_0, Q4_1, Q5_0 and Q5_1 on x86-64 as groups of 8 interleaved rows
// (llmb_vec_dot_repack), one row in each 32-bit lane of a 256-bit vector: AVX2 (maddubs + madd) and
// AVX-512 VNNI (vpdpbusd on 256 bits), one source compiled for both (this file includes itself), the
// same bits at both levels and the same bits as the scalar reference (vecdot.c, dot_q*_ref); and Q8_0 at
// the AVX2 level (|w| against x sign(w), as q8_0_body; the VNNI level has its own groups of 16), and Q2_K, Q3_K,
// Q4_K, Q5_K and Q6_K at the AVX2 level (the steps of q2_K_body, q3_K_body, q45_K_body and q6_K_body; the VNNI level's
// groups of 16 of Q4_K and Q6_K are in vecdot_avx512_k.c), and IQ4_NL at the AVX2 level (Q4_0's layout, each nibble
// looked up in the 16 values; one token |x| against v sign(x), |x| made once per call, several tokens |v| against
// x sign(v); the reference's (d_x d_w) s per block, as iq4_nl_body), and IQ4_XS at the AVX2 level (its sub-blocks as
// IQ4_NL's blocks, then the reference's (d_w d_x ls_j) s_j per sub-block, as iq4_xs_body); IQ4_NL and IQ4_XS at the
// VNNI level too (the same steps, vpdpbusd for maddubs + madd). At the VNNI level prefill (more than IL8_NC tokens)
// runs two groups at once on 512 bits: Q4_0 .. Q5_1 and IQ4_NL (as Q4_0 with u = v + 128) in il16_pair, IQ4_XS in
// il16x_pair, Q2_K and Q3_K (whose small batches run the AVX2 groups) in il16k_pair, the
// pairs of groups as IL16_GROUPS makes them (batches' blocks prefetched as decoded); and one token too, two groups
// decoded in registers: Q4_0 .. Q5_1 and IQ4_NL in il16_one, Q2_K in il16k_q2_one, Q3_K in il16k_q3_one, IQ4_XS in
// il16x_one (the 256-bit groups' |x| against v sign(x) then serves IQ4_NL's and IQ4_XS's small batches, and one
// token's middle group where a thread has an odd count).
//
// Per output and block the reference takes the block's exact integer sum s = sum q x and adds one float
// term, block after block: Q4_0 (s d_w) d_x, Q5_0 (d_w d_x) s, Q4_1 / Q5_1 (d_w d_x) s + m_w s_x. Here the
// 8 rows of a group do that at once in the lanes: the unsigned values u (Q4_0: u = q + 8, Q5_0: u = q + 16)
// of word k of 8 rows in one vector against 4 activation bytes broadcast, so s comes exact per lane
// (Q4_0, Q5_0 subtract 8 or 16 times the sum of the block's activations, made once per token and block),
// then the reference's float steps, in its order, on 8 rows per instruction (no fma: -std=c11 does not
// contract). The plain rows' kernel (vecdot_x86_body.h, legacy_body) does the same per row.
//
// Layout of a group's block (vecdot_layout.h: llmb_il8_*; word k of row r at word 8 k + r) after the recoding
// of vecdot.c (legacy_recode): Q4_0 qs, then the 8 rows' d (llmb_il_inline_tail; il8_d); Q4_1 d m, qs; Q5_0 qh',
// qs, then d; Q5_1 d m, qh', qs. qh' holds the fifth bits so that a shift and an AND put them in place for each
// word k of qs: bit 8 b + k is the fifth bit of value 4 k + b (low nibble of byte 4 k + b), bit 8 b + 4 + k that of
// value 16 + 4 k + b (its high nibble), for b, k in 0..3.
//
// Prefill decodes up to IL8_DEC blocks of a group into unpacked bytes once and runs the call's tokens
// over them IL8_NC at a time; up to IL8_NC tokens (decode, small batches) decode each block in registers
// as they go, and so does Q8_0 at every token count (its 16 decoded vectors a block, loaded back for
// every token, made the kernel load-bound: docs/engine-measurements.md#il8); at the VNNI level two groups' ranges
// are decoded side by side into 512-bit vectors (docs/engine-measurements.md#il16). Up to IL8_NC tokens run
// each group's row as one range (one stream a group: ranges of IL8_DEC blocks cut it every 9 KB, and the
// prefetch 4 KB ahead then fetched the next range's bytes, read only after every other group's; Q4_0
// 2048 x 8192 one token from DRAM, 1 thread, Zen 3: 16.2-16.6 -> 21.8-23.9 GB/s).
// Tested by csrc/tests/test_vecdot.c (check_interleaved, and every level against the reference bit for bit).
#ifndef LLMB_IL8_BODY
#include <string.h>

#include "llmb.h"
#include "vecdot.h"
#include "vecdot_layout.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))
#define IL8_G 8     // rows per group
#define IL8_NC 4    // tokens a register tile, 256- and 512-bit (the fastest of 2 to 4 and of 3, 4, 6:
                    // docs/engine-measurements.md#il8, #il16)
#define IL8_DEC 64  // blocks of a group decoded at a time for prefill (64 x 320 bytes: L1)
#define IL8N_DEC 32  // IQ4_NL's blocks of a group decoded at a time for several token tiles (32 x 544 bytes: L1)
#ifndef LLMB_IL8_TOKS   // (token, block) entries of the Q4_0 / Q5_0 activation sums on the stack (the C tests:
#define LLMB_IL8_TOKS 4096   // 256, so that tokens and blocks run several chunks and short rows' chunks run the
                             // prefill tiles)
#endif
// Prefetch distance of a group's blocks (8 rows' blocks one after the other; il8_prefetch_from), and where
// the weights stream from DRAM under LLMB_PREFETCH_FAR (the default on Intel) also IL8_FAR_AHEAD into L2, as
// simd_x86.h's far_pf does for the K types (docs/engine-measurements.md#il8-far)
#define IL8_PF_AHEAD 4096
#define IL8_FAR_AHEAD 16384
#define IL8_PF_TOKENS 32   // up to this many tokens a range of blocks decoded for them is prefetched (IL16_GROUPS)
_Static_assert(LLMB_IL8_TOKS >= IL8_DEC, "a chunk of the activation sums holds at least one token");

// An empty asm on v: GCC's reassociation would otherwise turn each token's chain of 8 adds into a tree
// whose maddubs results, all live at once, spill to the stack (docs/engine-measurements.md#il8)
#define IL8_KEEP(v) __asm__("" : "+x"(v))

// RUN(NC) for a tile of the `left` tokens still to run (at most IL8_NC), NC a constant in every branch
#define IL8_TILES(left, RUN)                                                                                        \
    switch ((left) < IL8_NC ? (left) : IL8_NC) {                                                                    \
    case 1: RUN(1); break;                                                                                          \
    case 2: RUN(2); break;                                                                                          \
    case 3: RUN(3); break;                                                                                          \
    default: RUN(IL8_NC); break;                                                                                    \
    }

typedef struct {
    __m256i q[8];   // word k's values: q[2k] values 4k..4k+3, q[2k+1] values 16+4k..16+4k+3 of each row
                    // (Q8_0: q[k] |values 4k..4k+3|)
    __m256i w[8];   // Q8_0 (never in the prefill buffer): the signed values of q[k] (|w|), for sign_epi8
    __m256 d, m;    // lane r: row r's d (and m for Q4_1 / Q5_1)
} il8_dec;

// 1 where the kernel takes |w| against x sign(w) (signed values: Q8_0), 0 for unsigned values u
INLINE int il8_signed(const int type) { return type == LLMB_TYPE_Q8_0; }
// 1 where a group's block starts with d and m (Q4_1, Q5_1), 0 where d follows it or the group (il8_d)
INLINE int il8_dm(const int type) { return type == LLMB_TYPE_Q4_1 || type == LLMB_TYPE_Q5_1; }
// 1 where the activations are Q8_0 (d a half, values from byte 2), 0 for Q8_1 (Q4_1, Q5_1)
INLINE int il8_x8(const int type) { return !il8_dm(type); }
INLINE int il8_offset(const int type) {
    return type == LLMB_TYPE_Q4_0 ? 8 : type == LLMB_TYPE_Q5_0 ? 16 : type == LLMB_TYPE_IQ4_NL ? 128 : 0;
}

// bytes of a block's d after the group's last block (vecdot_layout.h): Q8_0's; Q4_0, Q5_0 and IQ4_NL keep theirs
// after each block's words (llmb_il_inline_tail), Q4_1 and Q5_1 theirs in word 0
INLINE size_t il8_tail(const int type) { return type == LLMB_TYPE_Q8_0 ? 2 * IL8_G : 0; }
// the 8 rows' d (halves) of block i of the group at g (nb blocks), for the types without an m
INLINE const uint8_t *il8_d(const int type, const uint8_t *g, int64_t nb, int64_t i) {
    const size_t words = (size_t)llmb_il8_words(type) * 32;
    return llmb_il_inline_tail(type, IL8_G) ? g + (size_t)i * llmb_il8_stride(type) + words
                                            : g + (size_t)nb * words + (size_t)i * 16;
}

// pf of the tile that reads a group's blocks first from memory: 2 where its weights stream from DRAM and far
// prefetch is on, else 1
INLINE int il8_pf(const int stream) { return stream && llmb_prefetch_mode() == LLMB_PREFETCH_FAR ? 2 : 1; }
// pf of a range of blocks decoded once for nc tokens (the 256-bit groups): spf (il8_pf) up to IL8_PF_TOKENS, else 0
// (IL16_GROUPS: why)
INLINE int il8_pf_batch(const int spf, const int nc) { return nc <= IL8_PF_TOKENS ? spf : 0; }

// The prefetch of a group's blocks as they are read one after the other (il8_prefetch_from, il8_prefetch_next):
// the lines that start in each block, IL8_PF_AHEAD ahead into L1 and with pf 2 IL8_FAR_AHEAD ahead into L2 (each line
// once: one prefetch per 64 bytes of a 144-byte Q4_0 block asked for a third of them twice, and Q4_0 one token from
// DRAM read 24.4-24.9 GB/s against 29.2-29.5 then: docs/engine-measurements.md#il8-decode-gap). Where the blocks
// have a tail (their d after the group's last block: Q8_0, Q3_K, Q6_K; vecdot_layout.h) a group is two streams,
// and each is asked for as many blocks ahead: the blocks past a group's last one in the next group's blocks, the
// tail in the next group's tail (a plain distance landed in the tail, leaving the next group's first bytes to the
// hardware, and never asked for the tail in time: docs/engine-measurements.md#il8-tail-pf).
typedef struct {
    const uint8_t *q, *qend;   // the blocks' next bytes to ask for; the end of their group's blocks
    const uint8_t *t, *tend;   // the tail's next entry to ask for; the end of its group's tail
} il8_pf_at;

typedef struct {
    il8_pf_at at[2];    // IL8_PF_AHEAD (L1), IL8_FAR_AHEAD (L2)
    size_t bytes, tail, bq, bt;   // a block's bytes, its tail's; a group's blocks' bytes, its tail's
    int n;              // distances asked for: 0 (none), 1 or 2
} il8_pfs;

// distance a of s from block i0 of the group at g, `ahead` bytes ahead (il8_prefetch_from)
INLINE void il8_prefetch_start(il8_pfs *s, il8_pf_at *a, const uint8_t *g, int64_t i0, const size_t ahead) {
    const size_t gs = s->bq + s->bt;
    a->q = g + (size_t)i0 * s->bytes + ahead;
    if (!s->tail) return;
    a->qend = g + s->bq;
    while (a->q >= a->qend) a->q += s->bt, a->qend += gs;
    a->t = g + s->bq + (size_t)(i0 + (int64_t)(ahead / s->bytes)) * s->tail, a->tend = g + gs;
    while (a->t >= a->tend) a->t += s->bq, a->tend += gs;
}
// from block i0 of the group at g (nb blocks, only read where the blocks have a tail), pf distances (il8_pf; 0: none).
// One token (one) of blocks with a tail rounds the L1 distance up to whole groups, so that each block and tail entry
// asks for its twin in a later group: from DRAM Q3_K 8192 x 2048 1.11x, Q6_K (the AVX2 level) 1.11x, and Q4_0 1.08x
// while its d were a tail, where longer distances that were not whole groups gained less or lost; batches keep
// IL8_PF_AHEAD (Q5_0 8192 x 2048 x 8 tokens lost 0.95x with the twins; 2 threads, Zen 5:
// docs/engine-measurements.md#il8-twin-pf). Each distance by name, not in a loop over s.at: a loop kept the fields on
// the stack, each block's step a store and a reload (Q4_0 one token 1.04-1.15x, the K and IQ4 types 1.02-1.08x: Zen 3,
// docs/engine-measurements.md#il8-pf-regs)
INLINE il8_pfs il8_prefetch_from(const uint8_t *g, int64_t nb, size_t bytes, size_t tail, int64_t i0, const int pf,
                                  const int one) {
    il8_pfs s = {.bytes = bytes, .tail = tail, .bq = (size_t)nb * bytes, .bt = (size_t)nb * tail, .n = pf};
    if (pf > 0)
        il8_prefetch_start(&s, &s.at[0], g, i0,
                           tail && one ? (IL8_PF_AHEAD + s.bq - 1) / s.bq * s.bq : IL8_PF_AHEAD);
    if (pf > 1) il8_prefetch_start(&s, &s.at[1], g, i0, IL8_FAR_AHEAD);
    return s;
}
INLINE void il8_prefetch_line(uintptr_t l, const int far) {
    if (far) _mm_prefetch((const char *)l, _MM_HINT_T1);
    else _mm_prefetch((const char *)l, _MM_HINT_T0);
}
// ask for the next block's lines (and its tail entry's) at distance a (far: into L2), and step on
INLINE void il8_prefetch_at(const il8_pfs *s, il8_pf_at *a, const int far) {
    for (uintptr_t l = ((uintptr_t)a->q + 63) & ~(uintptr_t)63; l < (uintptr_t)a->q + s->bytes; l += 64)
        il8_prefetch_line(l, far);
    a->q += s->bytes;
    if (!s->tail) return;
    const size_t gs = s->bq + s->bt;
    if (a->q >= a->qend) a->q += s->bt, a->qend += gs;
    const uintptr_t lt = ((uintptr_t)a->t + 63) & ~(uintptr_t)63;
    if (lt < (uintptr_t)a->t + s->tail) il8_prefetch_line(lt, far);
    a->t += s->tail;
    if (a->t >= a->tend) a->t += s->bq, a->tend += gs;
}
// il8_prefetch_at at each distance (il8_prefetch_from: why by name)
INLINE void il8_prefetch_next(il8_pfs *s) {
    if (s->n > 0) il8_prefetch_at(s, &s->at[0], 0);
    if (s->n > 1) il8_prefetch_at(s, &s->at[1], 1);
}

#define LLMB_IL8_BODY
#define IL_T __attribute__((target("avx2,fma,f16c")))
#define IL(f) f##_avx2
#define IL_VNNI 0
#include "vecdot_il8.c"
#undef IL_T
#undef IL
#undef IL_VNNI

#define IL_T __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")))
#define IL(f) f##_vnni
#define IL_VNNI 1
#include "vecdot_il8.c"
#undef IL_T
#undef IL
#undef IL_VNNI
#undef LLMB_IL8_BODY

void llmb_vec_dot_il8_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    const int types[4] = {LLMB_TYPE_Q4_0, LLMB_TYPE_Q4_1, LLMB_TYPE_Q5_0, LLMB_TYPE_Q5_1};
    llmb_gemm_il_fn avx2[4] = {q4_0_il8_avx2, q4_1_il8_avx2, q5_0_il8_avx2, q5_1_il8_avx2};
    llmb_gemm_il_fn vnni[4] = {q4_0_il8_vnni, q4_1_il8_vnni, q5_0_il8_vnni, q5_1_il8_vnni};
    if (lvl != LLMB_SIMD_AVX2 && !(lvl == LLMB_SIMD_AVX512 && llmb_cpu_has("avx512vnni"))) return;
    for (int i = 0; i < 4; i++) {
        t[types[i]].il = lvl == LLMB_SIMD_AVX2 ? avx2[i] : vnni[i];
        t[types[i]].il_r = IL8_G;
    }
    if (lvl == LLMB_SIMD_AVX2) {
        t[LLMB_TYPE_Q8_0].il = q8_0_il8_avx2, t[LLMB_TYPE_Q8_0].il_r = IL8_G;
        t[LLMB_TYPE_IQ4_NL].il = iq4_nl_il8_avx2, t[LLMB_TYPE_IQ4_NL].il_r = IL8_G;
        t[LLMB_TYPE_Q4_K].il = q4_K_il8_avx2, t[LLMB_TYPE_Q4_K].il_r = IL8_G;
        t[LLMB_TYPE_Q5_K].il = q5_K_il8_avx2, t[LLMB_TYPE_Q5_K].il_r = IL8_G;
        t[LLMB_TYPE_Q6_K].il = q6_K_il8_avx2, t[LLMB_TYPE_Q6_K].il_r = IL8_G;
        t[LLMB_TYPE_IQ4_XS].il = iq4_xs_il8_avx2, t[LLMB_TYPE_IQ4_XS].il_r = IL8_G;
        t[LLMB_TYPE_Q2_K].il = q2_K_il8_avx2, t[LLMB_TYPE_Q2_K].il_r = IL8_G;
        t[LLMB_TYPE_Q3_K].il = q3_K_il8_avx2, t[LLMB_TYPE_Q3_K].il_r = IL8_G;
    } else {   // (the VNNI table starts from the AVX2 one:) Q5_K keeps its 16-row panels and one-token rows there
        t[LLMB_TYPE_Q5_K].il = NULL, t[LLMB_TYPE_Q5_K].il_r = 0;
        t[LLMB_TYPE_IQ4_NL].il = iq4_nl_il8_vnni, t[LLMB_TYPE_IQ4_NL].il_r = IL8_G;
        t[LLMB_TYPE_IQ4_XS].il = iq4_xs_il8_vnni, t[LLMB_TYPE_IQ4_XS].il_r = IL8_G;
        t[LLMB_TYPE_Q2_K].il = q2_K_il16_vnni, t[LLMB_TYPE_Q2_K].il_r = IL8_G;
        t[LLMB_TYPE_Q3_K].il = q3_K_il16_vnni, t[LLMB_TYPE_Q3_K].il_r = IL8_G;
    }
}
#else
void llmb_vec_dot_il8_install(llmb_simd_level lvl, llmb_vec_dot_kernels *t) {
    (void)lvl, (void)t;
}
#endif

#else // LLMB_IL8_BODY
// ---- compiled once per instruction set (IL_T, IL, IL_VNNI) ----

// the 8 (low, high) half pairs of a vector's 32-bit lanes as floats: Q4_1 / Q5_1's (d, m), Q4_K's (d, dmin)
INLINE IL_T void IL(il8_halves)(const uint8_t *v, __m256 *lo, __m256 *hi) {
    const __m256i split = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)v),
                                              _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1,
                                                               4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    const __m256i both = _mm256_permute4x64_epi64(split, 0xD8);   // the low halves, then the high ones
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(both));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(both, 1));
}

// the 4 words of IQ4_NL indices at v (an IQ4_NL block's qs, or an IQ4_XS sub-block's) looked up in kv (the 16 values,
// or (the VNNI level's prefill) the 16 plus 128, in both 128-bit lanes) in o[0..7]: word k's low nibbles in o[2 k],
// its high nibbles in o[2 k + 1] (Q4_0's order)
INLINE IL_T void IL(il8n_values)(const uint8_t *v, const __m256i kv, __m256i *o) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int k = 0; k < 4; k++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(v + 32 * k));
        o[2 * k] = _mm256_shuffle_epi8(kv, _mm256_and_si256(raw, m4));
        o[2 * k + 1] = _mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
    }
}
// kv of il8n_values: the 16 values plus `plus` (0, or 128 as unsigned bytes)
INLINE IL_T __m256i IL(il8n_table)(const int plus) {
    return _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)llmb_kvalues_iq4nl)),
                           _mm256_set1_epi8((char)plus));
}

// block i of a group (nb blocks) unpacked
INLINE IL_T void IL(il8_decode)(const int type, const uint8_t *g, int64_t nb, int64_t i, il8_dec *o) {
    const int q5 = type == LLMB_TYPE_Q5_0 || type == LLMB_TYPE_Q5_1;
    const int dm = il8_dm(type);
    const uint8_t *v = g + (size_t)i * llmb_il8_stride(type);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    if (dm) {   // word 0: d and m of each row
        IL(il8_halves)(v, &o->d, &o->m);
        v += 32;
    } else {   // d after the words (il8_d)
        o->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)il8_d(type, g, nb, i)));
        o->m = _mm256_setzero_ps();
    }
    if (type == LLMB_TYPE_Q8_0) {   // values + 128 (vecdot.c, q8_0_recode)
        for (int k = 0; k < 8; k++) {
            o->w[k] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(v + 32 * k)), _mm256_set1_epi8((char)0x80));
            o->q[k] = _mm256_abs_epi8(o->w[k]);
        }
        return;
    }
    if (type == LLMB_TYPE_IQ4_NL) {   // (the VNNI level only) u = v + 128
        IL(il8n_values)(v, IL(il8n_table)(128), o->q);
        return;
    }
    __m256i qh = _mm256_setzero_si256();
    if (q5) qh = _mm256_loadu_si256((const __m256i *)v), v += 32;
    for (int k = 0; k < 4; k++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(v + 32 * k));
        __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if (q5) {
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi32(qh, 4 - k), b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_srli_epi32(qh, k), b4));
        }
        o->q[2 * k] = lo, o->q[2 * k + 1] = hi;
    }
}

// s[c], lane r: the exact sum u x of row r's block against the 32 activations xq[c] of token c, each
// weight vector loaded once for the NC tokens (u <= 15: the 8 maddubs sums stay below 2^15 in int16,
// 8 x 2 x 15 x 127; u <= 31: two halves of 4)
INLINE IL_T void IL(il8_isums)(const int type, const il8_dec *d, const int8_t *const *xq, __m256i *s, const int NC) {
#if !IL_VNNI   // (the VNNI sums are int32 throughout)
    const int q5 = type == LLMB_TYPE_Q5_0 || type == LLMB_TYPE_Q5_1;
#endif
    const __m256i *q = d->q;
    __m256i h0[IL8_NC], h1[IL8_NC];
    for (int c = 0; c < NC; c++) h0[c] = h1[c] = _mm256_setzero_si256();
    if (il8_signed(type)) {   // |w| against x sign(w): each maddubs pair below 2^15, the pairs summed in int32
        const __m256i one = _mm256_set1_epi16(1);
        for (int k = 0; k < 8; k++)
            for (int c = 0; c < NC; c++) {
                int32_t a;
                memcpy(&a, xq[c] + 4 * k, 4);
                const __m256i p = _mm256_maddubs_epi16(q[k], _mm256_sign_epi8(_mm256_set1_epi32(a), d->w[k]));
                h0[c] = _mm256_add_epi32(h0[c], _mm256_madd_epi16(p, one));
                IL8_KEEP(h0[c]);
            }
        for (int c = 0; c < NC; c++) s[c] = h0[c];
        return;
    }
    for (int k = 0; k < 8; k++) {   // q[k] against x values 4 (k / 2) + 16 (k % 2) ..
        const __m256i wk = q[k];
        for (int c = 0; c < NC; c++) {
            int32_t a;
            memcpy(&a, xq[c] + 4 * (k / 2) + 16 * (k % 2), 4);
            const __m256i xb = _mm256_set1_epi32(a);
#if IL_VNNI
            if (k % 2) h1[c] = _mm256_dpbusd_epi32(h1[c], wk, xb);
            else h0[c] = _mm256_dpbusd_epi32(h0[c], wk, xb);
#else
            __m256i *h = q5 && k % 2 ? &h1[c] : &h0[c];
            *h = _mm256_add_epi16(*h, _mm256_maddubs_epi16(wk, xb));
            IL8_KEEP(*h);
#endif
        }
    }
    for (int c = 0; c < NC; c++) {
#if IL_VNNI
        s[c] = _mm256_add_epi32(h0[c], h1[c]);
#else
        const __m256i one = _mm256_set1_epi16(1);
        s[c] = q5 ? _mm256_add_epi32(_mm256_madd_epi16(h0[c], one), _mm256_madd_epi16(h1[c], one))
                  : _mm256_madd_epi16(h0[c], one);
#endif
    }
}

// acc[c] (lane r: row r, token c) plus the reference's term of block i for NC tokens of x (xs apart);
// xsum[c * xss]: 8 or 16 times the sum of token c's activations in this block and xd[c * xss] their d as a float
// (Q4_0 / Q5_0)
INLINE IL_T void IL(il8_step)(const int type, const il8_dec *d, const uint8_t *x, size_t xs, int64_t i,
                              const int32_t *xsum, const float *xd, int64_t xss, __m256 *acc, const int NC) {
    const int off = il8_offset(type), x8 = il8_x8(type);
    const size_t xb_bytes = x8 ? sizeof(llmb_block_q8_0) : sizeof(llmb_block_q8_1);
    const int8_t *xq[IL8_NC];
    __m256i s[IL8_NC];
    for (int c = 0; c < NC; c++) xq[c] = (const int8_t *)(x + c * xs + i * xb_bytes + (x8 ? 2 : 8));
    IL(il8_isums)(type, d, xq, s, NC);
    for (int c = 0; c < NC; c++) {
        const uint8_t *xb = x + c * xs + i * xb_bytes;
        if (il8_signed(type)) {   // Q8_0 s (d_w d_x)
            uint16_t h;
            memcpy(&h, xb, 2);
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s[c]),
                                                         _mm256_mul_ps(d->d, _mm256_set1_ps(_cvtsh_ss(h)))));
        } else if (off) {
            const __m256 sf = _mm256_cvtepi32_ps(_mm256_sub_epi32(s[c], _mm256_set1_epi32(xsum[c * xss])));
            const __m256 dx = _mm256_set1_ps(xd[c * xss]);
            const __m256 t = type == LLMB_TYPE_Q4_0 ? _mm256_mul_ps(_mm256_mul_ps(sf, d->d), dx)
                                                    : _mm256_mul_ps(_mm256_mul_ps(d->d, dx), sf);
            acc[c] = _mm256_add_ps(acc[c], t);
        } else {
            const llmb_block_q8_1 *x1 = (const llmb_block_q8_1 *)xb;
            const __m256 t = _mm256_mul_ps(_mm256_mul_ps(d->d, _mm256_set1_ps(x1->d)), _mm256_cvtepi32_ps(s[c]));
            acc[c] = _mm256_add_ps(acc[c], _mm256_add_ps(t, _mm256_mul_ps(d->m, _mm256_set1_ps(x1->s))));
        }
    }
}

// One group x NC tokens over blocks i0 .. i0 + bn - 1 (of nb): from dec (those blocks decoded) or, where
// dec is NULL, decoding each block from g as it goes; the sums start at 0 where first, else from y
INLINE IL_T void IL(il8_tile)(const int type, const uint8_t *g, int64_t nb, const il8_dec *dec, int64_t i0, int64_t bn,
                              const uint8_t *x, size_t xs, const int32_t *xsum, const float *xd, int64_t xss, float *y,
                              int64_t ldy, const int first, const int pf, const int NC) {
    const size_t bytes = llmb_il8_stride(type);
    __m256 acc[IL8_NC];
    for (int c = 0; c < NC; c++) acc[c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + c * ldy);
    il8_pfs ps = il8_prefetch_from(g, nb, bytes, il8_tail(type), i0, dec ? 0 : pf, NC == 1);
    for (int64_t i = 0; i < bn; i++) {
        il8_dec one;
        if (!dec) {
            if (pf) il8_prefetch_next(&ps);
            IL(il8_decode)(type, g, nb, i0 + i, &one);
        }
        IL(il8_step)(type, dec ? dec + i : &one, x, xs, i0 + i, xsum + i, xd + i, xss, acc, NC);
    }
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(y + c * ldy, acc[c]);
}

#if IL_VNNI
// ---- prefill of Q4_0, Q4_1, Q5_0, Q5_1 on 512 bits: two groups (16 rows) in the lanes of each vector ----
// A range of two groups' blocks is decoded once (il8_decode of each, group a in the low 256 bits, b in the high),
// then every tile of tokens runs over it with vpdpbusd on 512 bits: 64 products an instruction and one broadcast
// of 4 activation bytes for 16 rows, where the 256-bit tiles do 32. Per lane the same integer sums and the same
// float steps in the same order as il8_step, so the same bits. The layout in memory is il8's: one token and small
// batches keep their 256-bit tiles (one stream a group).
#define IL16_DEC 32  // blocks of a pair of groups decoded at a time (32 x 640 bytes: L1)

typedef struct {
    __m512i q[8];   // as il8_dec's q, lanes 0..7 group a's rows, 8..15 group b's
    __m512 d, m;
} il16_dec;

// The body of il16k_pair / il16x_pair (super-blocks of 256): the groups at ga and gb (nb super-blocks of `bytes`
// each, `tail` bytes after a group's last: il8_prefetch_from) for nc tokens, in ranges of NDEC super-blocks decoded
// by DECODE(i) (super-block i of both groups, each prefetched as read where pf), then TILE(NC) for every tile of
// the tokens (i0, bn, t0 in scope)
#define IL16_PAIR_RANGES(NDEC, bytes, tail, DECODE, TILE)                                                           \
    il8_pfs pa_ = il8_prefetch_from(ga, nb, bytes, tail, 0, pf, 0);                                                \
    il8_pfs pb_ = il8_prefetch_from(gb, nb, bytes, tail, 0, pf, 0);                                                \
    for (int64_t i0 = 0; i0 < nb; i0 += NDEC) {                                                                    \
        const int64_t bn = nb - i0 < NDEC ? nb - i0 : NDEC;                                                        \
        for (int64_t i = i0; i < i0 + bn; i++) {                                                                   \
            if (pf) il8_prefetch_next(&pa_), il8_prefetch_next(&pb_);                                              \
            DECODE(i);                                                                                             \
        }                                                                                                          \
        for (int t0 = 0; t0 < nc; t0 += IL8_NC) {                                                                  \
            IL8_TILES(nc - t0, TILE)                                                                               \
        }                                                                                                          \
    }

// Two groups at a time on 512 bits over ng groups: PAIR(a, b, pf) for group a = k beside group b = k + h (h = ng / 2
// rounded up), so that each of the two streams walks its half of the rows in memory order and its prefetch runs on
// into its next group (adjacent groups side by side left the one ahead unasked and asked again for the one being
// read: llama-1b Q2_K decode 0.75x; docs/engine-measurements.md#il16k-one); ALONE(h - 1), the middle group, where ng
// is odd; one token (pf: il8_pf) and IL16_GROUPS' batches
#define IL16_HALVES(ng, pf, PAIR, ALONE)                                                                           \
    do {                                                                                                           \
        const int h_ = ((ng) + 1) / 2;                                                                             \
        for (int k_ = 0; k_ + h_ < (ng); k_++) PAIR(k_, k_ + h_, pf);                                              \
        if ((ng) % 2) ALONE(h_ - 1);                                                                               \
    } while (0)

// Prefill and batches (nc tokens) on 512 bits over ng groups: up to IL8_PF_TOKENS tokens PAIR(a, b, pf) as IL16_HALVES
// pairs them, pf = il8_pf(stream): a few tokens' work a block leaves the weights' latency bare, so each group's blocks
// are prefetched as decoded (Q3_K 1536 x 768 x 8 tokens from DRAM 1.9x with it); past ~48 tokens the tiles between two
// decodes evict what was asked for (IQ4_XS x 128 tokens 0.94x with it), so more tokens pair neighbours (whose tiles
// store one vector a token) with a literal pf of 0, compiled with no prefetch in it (a pf of 0 at run time still cost
// 0.91x there), ALONE(a) the last odd group (2 threads, Zen 5; docs/engine-measurements.md#il16-pf)
#define IL16_GROUPS(ng, nc, stream, PAIR, ALONE)                                                                   \
    do {                                                                                                           \
        if ((nc) <= IL8_PF_TOKENS) {                                                                               \
            IL16_HALVES(ng, il8_pf(stream), PAIR, ALONE);                                                          \
        } else {                                                                                                   \
            int a_ = 0;                                                                                            \
            for (; a_ + 1 < (ng); a_ += 2) PAIR(a_, a_ + 1, 0);                                                    \
            if (a_ < (ng)) ALONE(a_);                                                                              \
        }                                                                                                          \
    } while (0)

INLINE IL_T __m512i IL(il16_join)(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }
INLINE IL_T __m512 IL(il16_joinf)(__m256 a, __m256 b) {
    return _mm512_castsi512_ps(IL(il16_join)(_mm256_castps_si256(a), _mm256_castps_si256(b)));
}

// the 256-bit words at a and b joined (a low)
INLINE IL_T __m512i IL(il16_load2)(const uint8_t *a, const uint8_t *b) {
    return IL(il16_join)(_mm256_loadu_si256((const __m256i *)a), _mm256_loadu_si256((const __m256i *)b));
}
// il8_halves of the words at a and b joined: lanes 0..7 a's rows, 8..15 b's
INLINE IL_T void IL(il16_halves)(const uint8_t *a, const uint8_t *b, __m512 *lo, __m512 *hi) {
    __m256 la, ha, lb, hb;
    IL(il8_halves)(a, &la, &ha);
    IL(il8_halves)(b, &lb, &hb);
    *lo = IL(il16_joinf)(la, lb), *hi = IL(il16_joinf)(ha, hb);
}
// the low 8 lanes of v to ya, the high 8 to yb
INLINE IL_T void IL(il16_store2)(float *ya, float *yb, __m512 v) {
    _mm256_storeu_ps(ya, _mm512_castps512_ps256(v));
    _mm256_storeu_ps(yb, _mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v), 1)));
}
// The sums of a pair's 16 rows (ya: group a's 8, yb: group b's) as one vector, and back: one load or store where the
// groups are neighbours (IL16_GROUPS' prefill; the compare folds where the call is inlined)
INLINE IL_T __m512 IL(il16_load_y)(const float *ya, const float *yb) {
    return yb == ya + IL8_G ? _mm512_loadu_ps(ya) : IL(il16_joinf)(_mm256_loadu_ps(ya), _mm256_loadu_ps(yb));
}
INLINE IL_T void IL(il16_store_y)(float *ya, float *yb, __m512 v) {
    if (yb == ya + IL8_G) _mm512_storeu_ps(ya, v);
    else IL(il16_store2)(ya, yb, v);
}

// block i of the groups at ga and gb (nb blocks each): il8_decode's steps on the two groups' words joined (every
// one lane-local), once for 16 rows
INLINE IL_T void IL(il16_decode)(const int type, const uint8_t *ga, const uint8_t *gb, int64_t nb, int64_t i,
                                 il16_dec *o) {
    const size_t bytes = llmb_il8_stride(type);
    const uint8_t *va = ga + i * bytes, *vb = gb + i * bytes;
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    if (il8_dm(type)) {   // word 0: d and m of each row
        IL(il16_halves)(va, vb, &o->d, &o->m);
        va += 32, vb += 32;
    } else {   // d after the words (il8_d)
        o->d = IL(il16_joinf)(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)il8_d(type, ga, nb, i))),
                              _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)il8_d(type, gb, nb, i))));
        o->m = _mm512_setzero_ps();
    }
    if (type == LLMB_TYPE_IQ4_NL) {   // u = v + 128
        const __m512i kv = _mm512_broadcast_i64x4(IL(il8n_table)(128));
        for (int k = 0; k < 4; k++) {
            const __m512i raw = IL(il16_load2)(va + 32 * k, vb + 32 * k);
            o->q[2 * k] = _mm512_shuffle_epi8(kv, _mm512_and_si512(raw, m4));
            o->q[2 * k + 1] = _mm512_shuffle_epi8(kv, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
        }
        return;
    }
    const int q5 = type == LLMB_TYPE_Q5_0 || type == LLMB_TYPE_Q5_1;
    __m512i qh = _mm512_setzero_si512();
    if (q5) qh = IL(il16_load2)(va, vb), va += 32, vb += 32;
    for (int k = 0; k < 4; k++) {
        const __m512i raw = IL(il16_load2)(va + 32 * k, vb + 32 * k);
        __m512i lo = _mm512_and_si512(raw, m4), hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
        if (q5) {
            lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi32(qh, 4 - k), b4));
            hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_srli_epi32(qh, k), b4));
        }
        o->q[2 * k] = lo, o->q[2 * k + 1] = hi;
    }
}

// acc[c] (lane r: row r of 16, token c) plus the term of block i (decoded: d) for NC tokens of x (xs apart):
// il8_step's sums and float steps per lane; xsum[c * xss], xd[c * xss] as there
INLINE IL_T void IL(il16_step)(const int type, const il16_dec *d, const uint8_t *x, size_t xs, int64_t i,
                               const int32_t *xsum, const float *xd, int64_t xss, __m512 *acc, const int NC) {
    const int off = il8_offset(type), x8 = il8_x8(type);
    const size_t xb_bytes = x8 ? sizeof(llmb_block_q8_0) : sizeof(llmb_block_q8_1);
    const uint8_t *xb[IL8_NC];
    __m512i h0[IL8_NC], h1[IL8_NC];
    for (int c = 0; c < NC; c++) {
        xb[c] = x + c * xs + i * xb_bytes;
        h0[c] = h1[c] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 8; k++)   // q[k] against x values 4 (k / 2) + 16 (k % 2) ..
        for (int c = 0; c < NC; c++) {
            int32_t a;
            memcpy(&a, xb[c] + (x8 ? 2 : 8) + 4 * (k / 2) + 16 * (k % 2), 4);
            if (k % 2) h1[c] = _mm512_dpbusd_epi32(h1[c], d->q[k], _mm512_set1_epi32(a));
            else h0[c] = _mm512_dpbusd_epi32(h0[c], d->q[k], _mm512_set1_epi32(a));
        }
    for (int c = 0; c < NC; c++) {
        const __m512i s = _mm512_add_epi32(h0[c], h1[c]);
        if (off) {
            const __m512 sf = _mm512_cvtepi32_ps(_mm512_sub_epi32(s, _mm512_set1_epi32(xsum[c * xss])));
            const __m512 dx = _mm512_set1_ps(xd[c * xss]);
            const __m512 t = type == LLMB_TYPE_Q4_0 ? _mm512_mul_ps(_mm512_mul_ps(sf, d->d), dx)
                                                    : _mm512_mul_ps(_mm512_mul_ps(d->d, dx), sf);
            acc[c] = _mm512_add_ps(acc[c], t);
        } else {
            const llmb_block_q8_1 *x1 = (const llmb_block_q8_1 *)xb[c];
            const __m512 t = _mm512_mul_ps(_mm512_mul_ps(d->d, _mm512_set1_ps(x1->d)), _mm512_cvtepi32_ps(s));
            acc[c] = _mm512_add_ps(acc[c], _mm512_add_ps(t, _mm512_mul_ps(d->m, _mm512_set1_ps(x1->s))));
        }
    }
}

// 16 rows x NC tokens over the decoded blocks dec[0 .. bn - 1] (blocks i0 ..), il16_step block after block;
// xsum[c * xss + i], xd[c * xss + i] as il8_step's; the low 8 rows' sums to ya, the high 8's to yb, starting at 0
// where first, else from ya, yb
INLINE IL_T void IL(il16_tile)(const int type, const il16_dec *dec, int64_t i0, int64_t bn, const uint8_t *x,
                               size_t xs, const int32_t *xsum, const float *xd, int64_t xss, float *ya, float *yb,
                               int64_t ldy, const int first, const int NC) {
    __m512 acc[IL8_NC];
    for (int c = 0; c < NC; c++) acc[c] = first ? _mm512_setzero_ps() : IL(il16_load_y)(ya + c * ldy, yb + c * ldy);
    for (int64_t i = 0; i < bn; i++) IL(il16_step)(type, dec + i, x, xs, i0 + i, xsum + i, xd + i, xss, acc, NC);
    for (int c = 0; c < NC; c++) IL(il16_store_y)(ya + c * ldy, yb + c * ldy, acc[c]);
}

// The groups at ga and gb over blocks i0 .. i0 + bn - 1 for cn tokens (il8_kernel's prefill and batches, paired as
// IL16_GROUPS pairs them), into ya and yb: IL16_DEC blocks decoded at a time, each group's blocks prefetched as
// they are decoded where pf (il8_pf). Batches of a few tokens read the weights from DRAM with little work a block:
// with the prefetch Q4_1 1536 x 576 x 8 tokens ran 1.21x (2 threads, Zen 5; docs/engine-measurements.md#il16-pf).
INLINE IL_T void IL(il16_pair)(const int type, const uint8_t *ga, const uint8_t *gb, int64_t nb, int64_t i0,
                               int64_t bn, const uint8_t *x, size_t xs, const int32_t *xsum, const float *xd, int cn,
                               float *ya, float *yb, int64_t ldy, const int pf) {
    const size_t bytes = llmb_il8_stride(type), tail = il8_tail(type);
    il8_pfs pa = il8_prefetch_from(ga, nb, bytes, tail, i0, pf, 0);
    il8_pfs pb = il8_prefetch_from(gb, nb, bytes, tail, i0, pf, 0);
    il16_dec dec[IL16_DEC];
    for (int64_t j0 = 0; j0 < bn; j0 += IL16_DEC) {
        const int64_t jn = bn - j0 < IL16_DEC ? bn - j0 : IL16_DEC;
        for (int64_t j = 0; j < jn; j++) {
            if (pf) il8_prefetch_next(&pa), il8_prefetch_next(&pb);
            IL(il16_decode)(type, ga, gb, nb, i0 + j0 + j, &dec[j]);
        }
        for (int t0 = 0; t0 < cn; t0 += IL8_NC) {
#define IL16_RUN(NC)                                                                                                \
    IL(il16_tile)(type, dec, i0 + j0, jn, x + t0 * xs, xs, xsum + t0 * bn + j0, xd + t0 * bn + j0, bn,             \
                  ya + t0 * ldy, yb + t0 * ldy, ldy, i0 + j0 == 0, NC)
            IL8_TILES(cn - t0, IL16_RUN)
#undef IL16_RUN
        }
    }
}

// One token over blocks i0 .. i0 + bn - 1 of the groups at ga and gb (il8_kernel's decode), each block decoded in
// registers as it streams, into ya (ga's 8 rows) and yb; from ya, yb where !first
INLINE IL_T void IL(il16_one)(const int type, const uint8_t *ga, const uint8_t *gb, int64_t nb, int64_t i0, int64_t bn,
                              const uint8_t *x, const int32_t *xsum, const float *xd, float *ya, float *yb,
                              const int first, const int pf) {
    const size_t bytes = llmb_il8_stride(type), tail = il8_tail(type);
    il8_pfs pa = il8_prefetch_from(ga, nb, bytes, tail, i0, pf, 1);
    il8_pfs pb = il8_prefetch_from(gb, nb, bytes, tail, i0, pf, 1);
    __m512 acc = first ? _mm512_setzero_ps() : IL(il16_joinf)(_mm256_loadu_ps(ya), _mm256_loadu_ps(yb));
    for (int64_t i = 0; i < bn; i++) {
        il8_prefetch_next(&pa), il8_prefetch_next(&pb);
        il16_dec d;
        IL(il16_decode)(type, ga, gb, nb, i0 + i, &d);
        IL(il16_step)(type, &d, x, 0, i0 + i, xsum + i, xd + i, 0, &acc, 1);
    }
    IL(il16_store2)(ya, yb, acc);
}
#endif

// The group at g over blocks i0 .. i0 + bn - 1 for cn tokens (il8_kernel's, xsum and xd its table) into y: where
// they run several token tiles (and the values are unsigned) the range decoded once into dec, else each block
// decoded in registers as the first tile streams it; either way prefetched as read (spf: il8_pf)
INLINE IL_T void IL(il8_group)(const int type, const uint8_t *g, int64_t nb, int64_t i0, int64_t bn, const uint8_t *x,
                               size_t xs, const int32_t *xsum, const float *xd, int cn, float *y, int64_t ldy,
                               const int spf, il8_dec *dec) {
    const il8_dec *d = NULL;
    if (cn > IL8_NC && !il8_signed(type)) {
        il8_pfs ps = il8_prefetch_from(g, nb, llmb_il8_stride(type), il8_tail(type), i0,
                                       il8_pf_batch(spf, cn), 0);
        for (int64_t i = 0; i < bn; i++) {
            il8_prefetch_next(&ps);
            IL(il8_decode)(type, g, nb, i0 + i, &dec[i]);
        }
        d = dec;
    }
    for (int t0 = 0; t0 < cn; t0 += IL8_NC) {
        const int pf = !d && t0 == 0 ? spf : 0;
#define IL8_RUN(NC)                                                                                                 \
    IL(il8_tile)(type, g, nb, d, i0, bn, x + t0 * xs, xs, xsum + t0 * bn, xd + t0 * bn, bn, y + t0 * ldy, ldy,         \
                 i0 == 0, pf, NC)
        IL8_TILES(cn - t0, IL8_RUN)
#undef IL8_RUN
    }
}

// nr rows (groups of 8, ws bytes a row) x nc tokens. Blocks in ranges of IL8_DEC (up to IL8_NC tokens: as many
// as the table holds, one stream a group), tokens in chunks whose activation sums and d fit the table (Q4_0 /
// Q5_0); the sums of a range carried in y to the next
INLINE IL_T void IL(il8_kernel)(const int type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                                size_t xs, int nc, float *y, int64_t ldy, const int stream) {
    const int spf = il8_pf(stream);   // (the first tile's prefetch: asked once a call, not once a group)
    const int64_t nb = n / LLMB_QK, rmax = nc <= IL8_NC ? LLMB_IL8_TOKS / nc : IL8_DEC, br = nb < rmax ? nb : rmax;
    const int off = il8_offset(type);
    const int tc = off ? (int)(LLMB_IL8_TOKS / br) : nc;   // tokens per chunk
    int32_t xsum[LLMB_IL8_TOKS];
    float xd[LLMB_IL8_TOKS];
    il8_dec dec[IL8_DEC];
    for (int64_t i0 = 0; i0 < nb; i0 += br) {
        const int64_t bn = nb - i0 < br ? nb - i0 : br;
        for (int c0 = 0; c0 < nc; c0 += tc) {
            const int cn = nc - c0 < tc ? nc - c0 : tc;
            const uint8_t *xc = x + c0 * xs;
            if (off)
                for (int c = 0; c < cn; c++)
                    for (int64_t i = 0; i < bn; i++) {
                        const llmb_block_q8_0 *b = (const llmb_block_q8_0 *)(xc + c * xs) + i0 + i;
                        const __m256i p = _mm256_madd_epi16(
                            _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_loadu_si256((const __m256i *)b->qs)),
                            _mm256_set1_epi16(1));
                        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
                        const __m128i h2 = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
                        xsum[c * bn + i] = off * _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 0xB1)));
                        uint16_t hd;
                        memcpy(&hd, &b->d, 2);
                        xd[c * bn + i] = _cvtsh_ss(hd);
                    }
#if IL_VNNI
            if (cn == 1 && !il8_signed(type)) {   // one token on 512 bits, two groups at a time (IL16_HALVES)
#define IL16_ONE(a, b, pf)                                                                                          \
    IL(il16_one)(type, w + (size_t)((a) * IL8_G) * ws, w + (size_t)((b) * IL8_G) * ws, nb, i0, bn, xc, xsum, xd,    \
                 y + c0 * ldy + (a) * IL8_G, y + c0 * ldy + (b) * IL8_G, i0 == 0, pf)
#define IL8_ONE(a)                                                                                                  \
    IL(il8_tile)(type, w + (size_t)((a) * IL8_G) * ws, nb, NULL, i0, bn, xc, xs, xsum, xd, bn, y + c0 * ldy + (a) * IL8_G, \
                 ldy, i0 == 0, spf, 1)
                IL16_HALVES(nr / IL8_G, spf, IL16_ONE, IL8_ONE);
#undef IL8_ONE
#undef IL16_ONE
                continue;
            }
#endif
            // group a's cn tokens: the range decoded once where they run several token tiles
#define IL8_GROUP(a)                                                                                                \
    IL(il8_group)(type, w + (size_t)((a) * IL8_G) * ws, nb, i0, bn, xc, xs, xsum, xd, cn,                              \
                  y + c0 * ldy + (a) * IL8_G, ldy, spf, dec)
#if IL_VNNI
            if (cn > IL8_NC && !il8_signed(type)) {   // prefill and batches: two groups on 512 bits
#define IL16_PAIR(a, b, pf)                                                                                         \
    IL(il16_pair)(type, w + (size_t)((a) * IL8_G) * ws, w + (size_t)((b) * IL8_G) * ws, nb, i0, bn, xc, xs, xsum,      \
                  xd, cn, y + c0 * ldy + (a) * IL8_G, y + c0 * ldy + (b) * IL8_G, ldy, pf)
                IL16_GROUPS(nr / IL8_G, cn, stream, IL16_PAIR, IL8_GROUP);
#undef IL16_PAIR
                continue;
            }
#endif
            for (int a = 0; a < nr / IL8_G; a++) IL8_GROUP(a);
#undef IL8_GROUP
        }
    }
}

// ---- Q2_K, Q3_K, Q4_K, Q5_K and Q6_K at the AVX2 level: 8 rows a group, super-blocks of 256 values ----
// Per output and super-block the steps of q2_K_body / q3_K_body / q45_K_body / q6_K_body (vecdot_x86_body.h)
// on 8 rows at once: the exact integer sums, then Q4_K (and Q5_K) acc = fma(d d_x, S, acc), acc = fma(-(dmin d_x),
// M, acc) with S = sum_s sc_s sum q x and M = sum_s min_s bsum_s; Q6_K acc = fma(d d_x, S, acc) with S = sum_s sc_s
// sum (q - 32) x, taken as sum_s sc_s sum q x - 32 sum_s sc_s bsum_s; Q3_K the same with u = q + 4 h for q and
// 4 for 32; Q2_K acc += (d_x d) S - (d_x dmin) M (no fma, as q2_K_body) with S and M as Q4_K's over sub-blocks
// of 16. The values of a sub-block (Q4_K, Q5_K: 32, 8 vectors of 4 a row; the others: 16, 4 vectors) go through
// maddubs against 4 activation bytes, summed in int16 while below 2^15 (Q4_K 8 of them, Q5_K 4: its values are
// below 32, Q6_K 2, Q2_K and Q3_K 4: their values are below 8), then one madd with the scale.
// A group's super-block: Q4_K 36 vectors (d dmin, 3 of scales, 32 of qs); Q5_K 44 (d dmin, 3 of scales, 8 of
// the fifth bits recoded as qh', vecdot.c q5_K_recode, 32 of qs: 5.5 bits a value, as its plain block); Q6_K 52
// (48 of the values recoded whole, vecdot.c q6_K_recode, then 4 of scales) and d after the group's last
// super-block; Q2_K 21 (its plain block: 4 of scales, 16 of qs, d dmin); Q3_K 27 (24 of the values recoded
// whole in 3 bits, vecdot.c q3_K_recode, then 3 of scales) and d after the group's last super-block.

#if !IL_VNNI   // (defined once; the VNNI pass uses them for Q2_K and Q3_K prefill, il16k_decode)
typedef struct {
    __m256i q[64];   // Q4_K, Q5_K q[8 s + k], the others q[4 s + k]; lane r: values 4 k .. 4 k + 3 of row r's
                     // sub-block s
    __m256i sc[16];  // lane r: row r's scale of sub-block s in both int16 halves (Q4_K, Q5_K: 8 sub-blocks)
    __m256i mn[8];   // lane r as int16: Q4_K, Q5_K, Q2_K the mins of sub-blocks 2 k, 2 k + 1; Q6_K, Q3_K their scales
    __m256 d, dmin;
} il8k_dec;

INLINE size_t il8k_bytes(const int type) {   // bytes of a group's super-block (its words)
    return type == LLMB_TYPE_Q4_K   ? sizeof(llmb_il8_q4_K)
           : type == LLMB_TYPE_Q5_K ? sizeof(llmb_il8_q5_K)
           : type == LLMB_TYPE_Q2_K ? sizeof(llmb_il8_q2_K)
           : type == LLMB_TYPE_Q3_K ? sizeof(llmb_il8_q3_K)
                                    : sizeof(llmb_il8_q6_K);
}
// bytes of a group's tail (the d of its super-blocks after its last: Q3_K, Q6_K), 0 where none
INLINE int il8k_tail(const int type) { return type == LLMB_TYPE_Q3_K || type == LLMB_TYPE_Q6_K ? 2 * IL8_G : 0; }
// 1 for the types of 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K: pairs of sub-blocks against the bsums), 0 for Q4_K
// and Q5_K (8 sub-blocks of 32)
INLINE int il8k_16(const int type) { return type != LLMB_TYPE_Q4_K && type != LLMB_TYPE_Q5_K; }
#endif

// bytes (b, b + 1) or (b, b) of each lane as its two int16 (hi: into the high bytes, for a sign-extending shift):
// the shuffle's control (the same in every 128-bit lane), and the pick
INLINE IL_T __m256i IL(il8k_pick_ctl)(int b0, int b1, int hi) {
    char i[32];
    for (int l = 0; l < 32; l += 4) {
        const int base = l % 16;
        i[l + 0] = (char)(hi ? -1 : base + b0), i[l + 1] = (char)(hi ? base + b0 : -1);
        i[l + 2] = (char)(hi ? -1 : base + b1), i[l + 3] = (char)(hi ? base + b1 : -1);
    }
    return _mm256_loadu_si256((const __m256i *)i);
}
INLINE IL_T __m256i IL(il8k_pick)(__m256i v, int b0, int b1, int hi) {
    return _mm256_shuffle_epi8(v, IL(il8k_pick_ctl)(b0, b1, hi));
}

#ifndef IL8K_Q3_SCALES
// Q3_K's 16 scales from a super-block's 3 words of them (s0, s1, s2) on W bits (256: il8k_head, 512: il16k_q3_one),
// ggml's kmask unpacking lane by lane: byte b of A[w] is scale 4 w + b plus 32
#define IL8K_Q3_SCALES(W, s0, s1, s2, A)                                                                            \
    const __m##W##i A##_0f = _mm##W##_set1_epi8(0x0F), A##_03 = _mm##W##_set1_epi8(0x03);                          \
    const __m##W##i A[4] = {                                                                                        \
        _mm##W##_or_si##W(_mm##W##_and_si##W(s0, A##_0f), _mm##W##_slli_epi16(_mm##W##_and_si##W(s2, A##_03), 4)),  \
        _mm##W##_or_si##W(_mm##W##_and_si##W(s1, A##_0f),                                                          \
                          _mm##W##_slli_epi16(_mm##W##_and_si##W(_mm##W##_srli_epi16(s2, 2), A##_03), 4)),         \
        _mm##W##_or_si##W(_mm##W##_and_si##W(_mm##W##_srli_epi16(s0, 4), A##_0f),                                  \
                          _mm##W##_slli_epi16(_mm##W##_and_si##W(_mm##W##_srli_epi16(s2, 4), A##_03), 4)),         \
        _mm##W##_or_si##W(_mm##W##_and_si##W(_mm##W##_srli_epi16(s1, 4), A##_0f),                                  \
                          _mm##W##_slli_epi16(_mm##W##_and_si##W(_mm##W##_srli_epi16(s2, 6), A##_03), 4))}
#endif

// the scales, mins, d and dmin of the group's super-block i at g (Q4_K, Q5_K: ggml's kmask unpacking, lane by lane)
INLINE IL_T void IL(il8k_head)(const int type, const uint8_t *g, int64_t nb, int64_t i, il8k_dec *o) {
    const uint8_t *v = g + (size_t)i * il8k_bytes(type);
    if (type == LLMB_TYPE_Q2_K) {   // byte b of scales word w: sub-block 4 w + b's scale (low nibble) and min
        const __m256i k0f = _mm256_set1_epi16(0x0F);
        IL(il8_halves)(v + 20 * 32, &o->d, &o->dmin);
        for (int w = 0; w < 4; w++) {
            const __m256i sv = _mm256_loadu_si256((const __m256i *)(v + 32 * w));
            for (int b = 0; b < 4; b++) o->sc[4 * w + b] = _mm256_and_si256(IL(il8k_pick)(sv, b, b, 0), k0f);
            for (int b = 0; b < 4; b += 2) o->mn[2 * w + b / 2] = _mm256_srli_epi16(IL(il8k_pick)(sv, b, b + 1, 0), 4);
        }
        return;
    }
    if (type == LLMB_TYPE_Q3_K) {   // ggml's kmask unpacking, lane by lane: byte b of a[w] is scale 4 w + b plus 32
        o->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + (size_t)nb * il8k_bytes(type) + (size_t)i * 16)));
        const __m256i s0 = _mm256_loadu_si256((const __m256i *)(v + 24 * 32));
        const __m256i s1 = _mm256_loadu_si256((const __m256i *)(v + 25 * 32));
        const __m256i s2 = _mm256_loadu_si256((const __m256i *)(v + 26 * 32));
        const __m256i k32 = _mm256_set1_epi16(32);
        IL8K_Q3_SCALES(256, s0, s1, s2, a);
        for (int w = 0; w < 4; w++) {
            for (int b = 0; b < 4; b++) o->sc[4 * w + b] = _mm256_sub_epi16(IL(il8k_pick)(a[w], b, b, 0), k32);
            for (int b = 0; b < 4; b += 2) o->mn[2 * w + b / 2] = _mm256_sub_epi16(IL(il8k_pick)(a[w], b, b + 1, 0), k32);
        }
        return;
    }
    if (type == LLMB_TYPE_Q6_K) {
        o->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + (size_t)nb * il8k_bytes(type) + (size_t)i * 16)));
        for (int w = 0; w < 4; w++) {   // int8 scales 4 w .. 4 w + 3
            const __m256i sv = _mm256_loadu_si256((const __m256i *)(v + 48 * 32 + 32 * w));
            for (int b = 0; b < 4; b++) o->sc[4 * w + b] = _mm256_srai_epi16(IL(il8k_pick)(sv, b, b, 1), 8);
            for (int b = 0; b < 4; b += 2) o->mn[2 * w + b / 2] = _mm256_srai_epi16(IL(il8k_pick)(sv, b, b + 1, 1), 8);
        }
        return;
    }
    IL(il8_halves)(v, &o->d, &o->dmin);
    const __m256i u0 = _mm256_loadu_si256((const __m256i *)(v + 32)), u1 = _mm256_loadu_si256((const __m256i *)(v + 64));
    const __m256i u2 = _mm256_loadu_si256((const __m256i *)(v + 96));
    const __m256i k3f = _mm256_set1_epi8(0x3f), k0f = _mm256_set1_epi8(0x0f), k03 = _mm256_set1_epi8(0x03);
    const __m256i sc_lo = _mm256_and_si256(u0, k3f);   // scales 0..3, 4..7, mins 0..3, 4..7: one byte a lane each
    const __m256i sc_hi = _mm256_or_si256(_mm256_and_si256(u2, k0f),
                                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), k03), 4));
    const __m256i mn_lo = _mm256_and_si256(u1, k3f);
    const __m256i mn_hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), k0f),
                                          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), k03), 4));
    for (int s = 0; s < 8; s++) o->sc[s] = IL(il8k_pick)(s < 4 ? sc_lo : sc_hi, s % 4, s % 4, 0);
    for (int k = 0; k < 4; k++) o->mn[k] = IL(il8k_pick)(k < 2 ? mn_lo : mn_hi, 2 * k % 4, 2 * k % 4 + 1, 0);
}

// the 4 vectors of Q6_K values in a triple of words at w: values of m = 0, 1, 2 in bits 0-5 of the three, m = 3's in
// their bits 6-7 (vecdot.c, q6_K_recode)
INLINE IL_T void IL(il8k_q6_triple)(const uint8_t *w, __m256i *q) {
    const __m256i k3f = _mm256_set1_epi8(0x3f);
    const __m256i a = _mm256_loadu_si256((const __m256i *)w), b = _mm256_loadu_si256((const __m256i *)(w + 32));
    const __m256i c = _mm256_loadu_si256((const __m256i *)(w + 64));
    q[0] = _mm256_and_si256(a, k3f), q[1] = _mm256_and_si256(b, k3f), q[2] = _mm256_and_si256(c, k3f);
    q[3] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 6), _mm256_set1_epi8(0x03)),
                                           _mm256_and_si256(_mm256_srli_epi16(b, 4), _mm256_set1_epi8(0x0C))),
                           _mm256_and_si256(_mm256_srli_epi16(c, 2), _mm256_set1_epi8(0x30)));
}

// Q4_K's and Q5_K's word k of chunk j (word 8 j + k of qs; Q5_K's fifth bits in qh' word 2 j + k / 4, vecdot.c
// q5_K_recode) of the super-block's words at v: its low nibbles' values to *lo (sub-block 2 j), its high ones' to *hi
INLINE IL_T void IL(il8k_q45_word)(const int type, const uint8_t *v, int j, int k, __m256i *lo, __m256i *hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    if (type == LLMB_TYPE_Q5_K) {
        const __m256i b4 = _mm256_set1_epi8(0x10);
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(v + 32 * (12 + 8 * j + k)));
        const __m256i h = _mm256_loadu_si256((const __m256i *)(v + 32 * (4 + 2 * j + k / 4)));
        *lo = _mm256_or_si256(_mm256_and_si256(raw, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4 - k % 4), b4));
        *hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), m4),
                              _mm256_and_si256(_mm256_srli_epi16(h, k % 4), b4));
        return;
    }
    const __m256i raw = _mm256_loadu_si256((const __m256i *)(v + 128 + 32 * (8 * j + k)));
    *lo = _mm256_and_si256(raw, m4), *hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
}

// the values of part j of super-block i into q: Q4_K, Q5_K chunk j of 4 (sub-blocks 2 j, 2 j + 1: words 8 j .. 8 j + 7
// of qs, low then high nibbles), 16 vectors; the others half j of 2 (sub-blocks 8 j .. 8 j + 7), 32 vectors
INLINE IL_T void IL(il8k_part)(const int type, const uint8_t *g, int64_t i, int j, __m256i *q) {
    const uint8_t *v = g + (size_t)i * il8k_bytes(type);
    // Q2_K, Q3_K: the values 128 j + 32 m + 4 t .. of the half go to q[4 (2 m + t / 4) + t % 4] (sub-block
    // 2 m + t / 4 of the half, vector t % 4)
    if (type == LLMB_TYPE_Q2_K) {   // word t of the half's qs: bits 2 m, 2 m + 1 of its bytes
        const __m256i k03 = _mm256_set1_epi8(0x03);
        for (int t = 0; t < 8; t++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(v + 32 * (4 + 8 * j + t)));
            for (int m = 0; m < 4; m++)
                q[4 * (2 * m + t / 4) + t % 4] = _mm256_and_si256(m ? _mm256_srli_epi16(raw, 2 * m) : raw, k03);
        }
        return;
    }
    if (type == LLMB_TYPE_Q3_K) {   // words 12 j + 3 p .. + 2: the values of t = 2 p, 2 p + 1 (vecdot.c, q3_K_recode)
        const __m256i k07 = _mm256_set1_epi8(0x07), k03 = _mm256_set1_epi8(0x03), k04 = _mm256_set1_epi8(0x04);
        for (int p = 0; p < 4; p++) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(v + 32 * (12 * j + 3 * p)));
            const __m256i b = _mm256_loadu_si256((const __m256i *)(v + 32 * (12 * j + 3 * p + 1)));
            const __m256i c = _mm256_loadu_si256((const __m256i *)(v + 32 * (12 * j + 3 * p + 2)));
            const int t0 = 2 * p, t1 = 2 * p + 1;
#define IL8_Q3(t, m) q[4 * (2 * (m) + (t) / 4) + (t) % 4]
            IL8_Q3(t0, 0) = _mm256_and_si256(a, k07);
            IL8_Q3(t0, 1) = _mm256_and_si256(_mm256_srli_epi16(a, 3), k07);
            IL8_Q3(t0, 2) = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 6), k03),
                                            _mm256_and_si256(_mm256_srli_epi16(c, 4), k04));
            IL8_Q3(t1, 0) = _mm256_and_si256(b, k07);
            IL8_Q3(t1, 1) = _mm256_and_si256(_mm256_srli_epi16(b, 3), k07);
            IL8_Q3(t1, 2) = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 6), k03),
                                            _mm256_and_si256(_mm256_srli_epi16(c, 5), k04));
            IL8_Q3(t0, 3) = _mm256_and_si256(c, k07);
            IL8_Q3(t1, 3) = _mm256_and_si256(_mm256_srli_epi16(c, 3), k07);
#undef IL8_Q3
        }
        return;
    }
    if (type == LLMB_TYPE_Q6_K) {   // word 24 j + 3 t (+1, +2): values 128 j + 32 m + 4 t .. of m = 0 .. 3
        for (int t = 0; t < 8; t++) {
            __m256i m4[4];
            IL(il8k_q6_triple)(v + 32 * (24 * j + 3 * t), m4);
            // value 32 m + 4 t of the half: sub-block 2 m + t / 4 of the half, vector t % 4
            for (int m = 0; m < 4; m++) q[4 * (2 * m + t / 4) + t % 4] = m4[m];
        }
        return;
    }
    for (int k = 0; k < 8; k++) IL(il8k_q45_word)(type, v, j, k, &q[k], &q[8 + k]);
}

#if !IL_VNNI   // (Q4_K, Q6_K at the VNNI level: vecdot_avx512_k.c, q4_K_il_vnni512 and q6_K_il_vnni512, groups of 16)
// A run of maddubs summed in int16 (il8k_sums): one step, h16[c] += maddubs(q, token c's 4 activation bytes at
// xq[c] + o), for NC tokens; and its end, S[c] += madd(h16[c], sc) with the sub-block's scale
INLINE IL_T void IL(il8k_run_step)(const __m256i q, const int8_t *const *xq, const int o, __m256i *h16, const int NC) {
    for (int c = 0; c < NC; c++) {
        int32_t a;
        memcpy(&a, xq[c] + o, 4);
        h16[c] = _mm256_add_epi16(h16[c], _mm256_maddubs_epi16(q, _mm256_set1_epi32(a)));
        IL8_KEEP(h16[c]);
    }
}
INLINE IL_T void IL(il8k_run_end)(const __m256i *h16, const __m256i sc, __m256i *S, const int NC) {
    for (int c = 0; c < NC; c++) S[c] = _mm256_add_epi32(S[c], _mm256_madd_epi16(h16[c], sc));
}

// S[c] += sc_s sum q x over the sub-blocks of a part (q: its vectors, sc: their scales) for NC tokens (xq[c]:
// token c's values of the part's first sub-block)
INLINE IL_T void IL(il8k_sums)(const int type, const __m256i *q, const __m256i *sc, const int8_t *const *xq,
                               __m256i *S, const int NC) {
    // values below 2^v against |x| <= 127: 2 (2^v - 1) 127 a maddubs, so Q4_K 8 a run, Q5_K 4, Q6_K 2, Q2_K Q3_K 4
    const int k16 = il8k_16(type), subs = k16 ? 8 : 2, vecs = k16 ? 4 : 8;
    const int run = type == LLMB_TYPE_Q6_K ? 2 : type == LLMB_TYPE_Q4_K ? 8 : 4;
    for (int sb = 0; sb < subs; sb++)
        for (int r0 = 0; r0 < vecs; r0 += run) {   // int16 sums of `run` maddubs, then a madd with the scale
            __m256i h16[IL8_NC];
            for (int c = 0; c < NC; c++) h16[c] = _mm256_setzero_si256();
            for (int k = r0; k < r0 + run; k++) IL(il8k_run_step)(q[vecs * sb + k], xq, vecs * 4 * sb + 4 * k, h16, NC);
            IL(il8k_run_end)(h16, sc[sb], S, NC);
        }
}

// Q2_K decoded in registers for up to IL8K_Q2F tokens: half j of super-block i's values straight into S (the
// steps of il8k_part and il8k_sums, sub-block 2 m + h from words 4 h .. 4 h + 3 of the half's qs, without the 32
// vectors of il8k_part staged on the stack). bench_il8 Q2_K 256 2048 NC, 1 thread, Zen 3, GOP/s staged -> here:
// 1 token 96.8 -> 106.7 (2048 x 8192 from DRAM 91.2 -> 101.7), 2 tokens 117 -> 134, 3: 147 -> 129, 4: 163 -> 135
#define IL8K_Q2F 2
INLINE IL_T void IL(il8k_q2_half)(const uint8_t *g, int64_t i, int j, const __m256i *sc, const int8_t *const *xq,
                                  __m256i *S, const int NC) {
    const uint8_t *v = g + (size_t)i * il8k_bytes(LLMB_TYPE_Q2_K);
    const __m256i k03 = _mm256_set1_epi8(0x03);
    for (int h = 0; h < 2; h++) {
        __m256i raw[4];
        for (int t = 0; t < 4; t++) raw[t] = _mm256_loadu_si256((const __m256i *)(v + 32 * (4 + 8 * j + 4 * h + t)));
        for (int m = 0; m < 4; m++) {   // values 32 m + 4 (4 h + t) .. of the half: bits 2 m, 2 m + 1 of word 4 h + t
            __m256i h16[IL8_NC];
            for (int c = 0; c < NC; c++) h16[c] = _mm256_setzero_si256();
            for (int t = 0; t < 4; t++) {
                const __m256i q = _mm256_and_si256(m ? _mm256_srli_epi16(raw[t], 2 * m) : raw[t], k03);
                IL(il8k_run_step)(q, xq, 32 * m + 4 * (4 * h + t), h16, NC);
            }
            IL(il8k_run_end)(h16, sc[2 * m + h], S, NC);
        }
    }
}

// Q6_K decoded in registers (one token and small batches): half j of super-block i's values straight into S, as
// il8k_q2_half does Q2_K's, without il8k_part's 32 vectors staged on the stack (words 24 j + 3 t .. + 2 hold the
// values 32 m + 4 t .. of m = 0 .. 3, sub-block 2 m + t / 4 of the half, vector t % 4; il8k_sums' runs of 2 maddubs
// are the triples of t = 2 p and 2 p + 1). The int32 sums are exact, so the order of their adds leaves the bits.
// ab_builds.py --kernel Q6_K --interleaved, 1 thread, AMD EPYC Zen 3 (AVX2), B/A: one token from L2 (512 x 2048)
// 1.17-1.27, from DRAM on 2 threads (8192 x 2048, 32000 x 768) 1.13-1.20; 2 tokens 1.15, 3: 1.13-1.16, 4: 1.03-1.11.
INLINE IL_T void IL(il8k_q6_half)(const uint8_t *g, int64_t i, int j, const __m256i *sc, const int8_t *const *xq,
                                  __m256i *S, const int NC) {
    const uint8_t *v = g + (size_t)i * il8k_bytes(LLMB_TYPE_Q6_K) + 32 * 24 * (size_t)j;
    for (int p = 0; p < 4; p++) {
        __m256i q[2][4];
        for (int u = 0; u < 2; u++) IL(il8k_q6_triple)(v + 32 * 3 * (2 * p + u), q[u]);
        for (int m = 0; m < 4; m++) {
            __m256i h16[IL8_NC];
            for (int c = 0; c < NC; c++) h16[c] = _mm256_setzero_si256();
            for (int u = 0; u < 2; u++) IL(il8k_run_step)(q[u][m], xq, 32 * m + 4 * (2 * p + u), h16, NC);
            IL(il8k_run_end)(h16, sc[2 * m + p / 2], S, NC);
        }
    }
}

// Q4_K and Q5_K decoded in registers: chunk j of super-block i's values straight into S (il8k_q45_word's words one at
// a time; il8k_sums' runs of 8 (Q4_K) or 4 (Q5_K) maddubs a sub-block, 2 j and 2 j + 1), for up to IL8K_Q4F / IL8K_Q5F
// tokens. As il8k_q6_half, B/A: Q4_K one token 1.08 from L2, 1.05-1.10 from DRAM, 2 tokens 1.13; Q5_K one token
// 1.04-1.05; more tokens lost (Q4_K 4 tokens 0.73, Q5_K 2 and 4 tokens 0.74, 0.70: docs/engine-measurements.md#il8k-regs)
#define IL8K_Q4F 2
#define IL8K_Q5F 1
INLINE IL_T void IL(il8k_q45_part)(const int type, const uint8_t *g, int64_t i, int j, const __m256i *sc,
                                   const int8_t *const *xq, __m256i *S, const int NC) {
    const uint8_t *v = g + (size_t)i * il8k_bytes(type);
    const int run = type == LLMB_TYPE_Q4_K ? 8 : 4;
    for (int r0 = 0; r0 < 8; r0 += run) {
        __m256i h16[2][IL8_NC];
        for (int e = 0; e < 2; e++)
            for (int c = 0; c < NC; c++) h16[e][c] = _mm256_setzero_si256();
        for (int k = r0; k < r0 + run; k++) {
            __m256i q[2];
            IL(il8k_q45_word)(type, v, j, k, &q[0], &q[1]);
            for (int e = 0; e < 2; e++) IL(il8k_run_step)(q[e], xq, 32 * e + 4 * k, h16[e], NC);
        }
        for (int e = 0; e < 2; e++) IL(il8k_run_end)(h16[e], sc[e], S, NC);
    }
}

// 1 where part j of a super-block for NC tokens goes from its words straight into the sums (il8k_part_regs), 0
// where il8k_part stages it for il8k_sums (Q3_K; Q4_K, Q5_K past IL8K_Q4F / IL8K_Q5F tokens; Q2_K past IL8K_Q2F)
INLINE int il8k_regs(const int type, const int NC) {
    return type == LLMB_TYPE_Q6_K || (type == LLMB_TYPE_Q2_K && NC <= IL8K_Q2F) ||
           (type == LLMB_TYPE_Q4_K && NC <= IL8K_Q4F) || (type == LLMB_TYPE_Q5_K && NC <= IL8K_Q5F);
}
// part j of super-block i in registers, sc the part's scales (il8k_regs says for which types and token counts)
INLINE IL_T void IL(il8k_part_regs)(const int type, const uint8_t *g, int64_t i, int j, const __m256i *sc,
                                    const int8_t *const *xq, __m256i *S, const int NC) {
    if (type == LLMB_TYPE_Q2_K) IL(il8k_q2_half)(g, i, j, sc, xq, S, NC);
    else if (type == LLMB_TYPE_Q6_K) IL(il8k_q6_half)(g, i, j, sc, xq, S, NC);
    else IL(il8k_q45_part)(type, g, i, j, sc, xq, S, NC);
}

// One group x NC tokens over super-blocks i0 .. i0 + bn - 1 (of nb): from dec (decoded) or, where dec is NULL,
// decoding from g as it goes; the sums start at 0 where first, else from y
INLINE IL_T void IL(il8k_tile)(const int type, const uint8_t *g, int64_t nb, const il8k_dec *dec, int64_t i0,
                               int64_t bn, const uint8_t *x, size_t xs, float *y, int64_t ldy, const int first,
                               const int pf, const int NC) {
    const int k16 = il8k_16(type), parts = k16 ? 2 : 4, pv = k16 ? 32 : 16;   // parts, vectors a part
    const size_t bytes = il8k_bytes(type);
    __m256 acc[IL8_NC];
    for (int c = 0; c < NC; c++) acc[c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + c * ldy);
    il8_pfs ps = il8_prefetch_from(g, nb, bytes, il8k_tail(type), i0, dec ? 0 : pf, NC == 1);
    for (int64_t i = 0; i < bn; i++) {
        il8k_dec head;
        const il8k_dec *o = dec ? dec + i : &head;
        if (!dec) {
            if (pf) il8_prefetch_next(&ps);
            IL(il8k_head)(type, g, nb, i0 + i, &head);
        }
        const llmb_block_q8_K *xb[IL8_NC];
        __m256i S[IL8_NC], M[IL8_NC];
        for (int c = 0; c < NC; c++) {   // M: the mins (Q4_K, Q5_K, Q2_K) or scales (Q6_K, Q3_K) against the sums of x
            xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i0 + i;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)xb[c]->bsums);   // 16 sums of 16 values
            M[c] = _mm256_setzero_si256();
            if (k16) {   // pairs of sums of 16 as int32, against pairs of scales (mins)
                const __m256i lo = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(bs));
                const __m256i hi = _mm256_broadcastsi128_si256(_mm256_extracti128_si256(bs, 1));
                const __m256i p[8] = {_mm256_shuffle_epi32(lo, 0x00), _mm256_shuffle_epi32(lo, 0x55),
                                      _mm256_shuffle_epi32(lo, 0xAA), _mm256_shuffle_epi32(lo, 0xFF),
                                      _mm256_shuffle_epi32(hi, 0x00), _mm256_shuffle_epi32(hi, 0x55),
                                      _mm256_shuffle_epi32(hi, 0xAA), _mm256_shuffle_epi32(hi, 0xFF)};
                for (int k = 0; k < 8; k++) M[c] = _mm256_add_epi32(M[c], _mm256_madd_epi16(o->mn[k], p[k]));
            } else {    // sums of 32 (sub-blocks), pairs as int32, against pairs of mins
                const __m256i b8 = _mm256_broadcastsi128_si256(_mm_hadd_epi16(_mm256_castsi256_si128(bs),
                                                                               _mm256_extracti128_si256(bs, 1)));
                const __m256i p[4] = {_mm256_shuffle_epi32(b8, 0x00), _mm256_shuffle_epi32(b8, 0x55),
                                      _mm256_shuffle_epi32(b8, 0xAA), _mm256_shuffle_epi32(b8, 0xFF)};
                for (int k = 0; k < 4; k++) M[c] = _mm256_add_epi32(M[c], _mm256_madd_epi16(o->mn[k], p[k]));
            }
            S[c] = _mm256_setzero_si256();
        }
        for (int j = 0; j < parts; j++) {
            const int8_t *xq[IL8_NC];
            for (int c = 0; c < NC; c++) xq[c] = xb[c]->qs + (k16 ? 128 : 64) * j;
            if (!dec && il8k_regs(type, NC)) {
                IL(il8k_part_regs)(type, g, i0 + i, j, o->sc + (k16 ? 8 : 2) * j, xq, S, NC);
                continue;
            }
            __m256i qv[32];
            const __m256i *q = dec ? o->q + pv * j : qv;
            if (!dec) IL(il8k_part)(type, g, i0 + i, j, qv);
            IL(il8k_sums)(type, q, o->sc + (k16 ? 8 : 2) * j, xq, S, NC);
        }
        const __m256 sign = _mm256_set1_ps(-0.0f);
        for (int c = 0; c < NC; c++) {
            const __m256 dx = _mm256_set1_ps(xb[c]->d);
            if (type == LLMB_TYPE_Q6_K || type == LLMB_TYPE_Q3_K) {   // S - 32 M, S - 4 M
                const __m256i s32 = _mm256_sub_epi32(S[c], _mm256_slli_epi32(M[c], type == LLMB_TYPE_Q6_K ? 5 : 2));
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(o->d, dx), _mm256_cvtepi32_ps(s32), acc[c]);
            } else if (type == LLMB_TYPE_Q2_K) {   // dall S - dmin M, then the sum
                const __m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(dx, o->d), _mm256_cvtepi32_ps(S[c])),
                                               _mm256_mul_ps(_mm256_mul_ps(dx, o->dmin), _mm256_cvtepi32_ps(M[c])));
                acc[c] = _mm256_add_ps(acc[c], t);
            } else {
                acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(o->d, dx), _mm256_cvtepi32_ps(S[c]), acc[c]);
                acc[c] = _mm256_fmadd_ps(_mm256_xor_ps(_mm256_mul_ps(o->dmin, dx), sign), _mm256_cvtepi32_ps(M[c]),
                                         acc[c]);
            }
        }
    }
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(y + c * ldy, acc[c]);
}

#define IL8K_DEC 8   // super-blocks of a group decoded at a time for prefill (8 x 2.9 KiB)
INLINE IL_T void IL(il8k_kernel)(const int type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                                 size_t xs, int nc, float *y, int64_t ldy, const int stream) {
    const int spf = il8_pf(stream);
    // ranges of IL8K_DEC super-blocks decoded once for several token tiles; one tile: all (one stream a group)
    const int64_t nb = n / LLMB_QK_K, br = nc <= IL8_NC || nb < IL8K_DEC ? nb : IL8K_DEC;
    const int parts = il8k_16(type) ? 2 : 4, pv = il8k_16(type) ? 32 : 16;
    il8k_dec dec[IL8K_DEC];
    for (int64_t i0 = 0; i0 < nb; i0 += br) {
        const int64_t bn = nb - i0 < br ? nb - i0 : br;
        for (int r0 = 0; r0 < nr; r0 += IL8_G) {
            const uint8_t *g = w + (size_t)r0 * ws;
            const il8k_dec *d = NULL;
            if (nc > IL8_NC) {   // several token tiles: the range decoded once (a batch's prefetched: IL8_PF_TOKENS)
                il8_pfs ps = il8_prefetch_from(g, nb, il8k_bytes(type), il8k_tail(type), i0, il8_pf_batch(spf, nc), 0);
                for (int64_t i = 0; i < bn; i++) {
                    il8_prefetch_next(&ps);
                    IL(il8k_head)(type, g, nb, i0 + i, &dec[i]);
                    for (int j = 0; j < parts; j++) IL(il8k_part)(type, g, i0 + i, j, dec[i].q + pv * j);
                }
                d = dec;
            }
            for (int t0 = 0; t0 < nc; t0 += IL8_NC) {
                const uint8_t *xt = x + t0 * xs;
                float *yt = y + t0 * ldy + r0;
                const int first = i0 == 0, pf = !d && t0 == 0 ? spf : 0;
#define IL8K_RUN(NC) IL(il8k_tile)(type, g, nb, d, i0, bn, xt, xs, yt, ldy, first, pf, NC)
                IL8_TILES(nc - t0, IL8K_RUN)
#undef IL8K_RUN
            }
        }
    }
}

IL_T static void IL(q4_K_il8)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                              int64_t ldy, int stream) {
    IL(il8k_kernel)(LLMB_TYPE_Q4_K, n, w, ws, nr, x, xs, nc, y, ldy, stream);
}
IL_T static void IL(q5_K_il8)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                              int64_t ldy, int stream) {
    IL(il8k_kernel)(LLMB_TYPE_Q5_K, n, w, ws, nr, x, xs, nc, y, ldy, stream);
}
IL_T static void IL(q6_K_il8)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                              int64_t ldy, int stream) {
    IL(il8k_kernel)(LLMB_TYPE_Q6_K, n, w, ws, nr, x, xs, nc, y, ldy, stream);
}
IL_T static void IL(q2_K_il8)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                              int64_t ldy, int stream) {
    IL(il8k_kernel)(LLMB_TYPE_Q2_K, n, w, ws, nr, x, xs, nc, y, ldy, stream);
}
IL_T static void IL(q3_K_il8)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                              int64_t ldy, int stream) {
    IL(il8k_kernel)(LLMB_TYPE_Q3_K, n, w, ws, nr, x, xs, nc, y, ldy, stream);
}
#endif   // !IL_VNNI (the K types)

#if IL_VNNI
// ---- Q2_K and Q3_K prefill at the VNNI level: two groups side by side on 512 bits ----
// A range of two groups' super-blocks decoded once (il8k_head and il8k_part of each, group a in the low 256 bits),
// then il8k_tile's steps on 16 rows with the 512-bit maddubs / madd (AVX-512 BW): the same exact S and M, the same
// float steps per lane in the same order, so the same bits. One token and small batches keep the AVX2 groups.
#define IL16K_DEC 4   // super-blocks of a pair of groups decoded at a time (4 x 5.6 KB: L1)
#define IL16_KEEP(v) __asm__("" : "+v"(v))   // (IL8_KEEP for 512-bit vectors)
typedef struct {
    __m512i q[64], sc[16], mn[8];   // as il8k_dec's (q[4 s + k]), lanes 0..7 group a's rows, 8..15 group b's
    __m512 d, dmin;
} il16k_dec;

INLINE IL_T void IL(il16k_decode)(const int type, const uint8_t *ga, const uint8_t *gb, int64_t nb, int64_t i,
                                  il16k_dec *o) {
    il8k_dec a, b;
    IL(il8k_head)(type, ga, nb, i, &a);
    IL(il8k_head)(type, gb, nb, i, &b);
    for (int j = 0; j < 2; j++) {
        IL(il8k_part)(type, ga, i, j, a.q + 32 * j);
        IL(il8k_part)(type, gb, i, j, b.q + 32 * j);
    }
    for (int k = 0; k < 64; k++) o->q[k] = IL(il16_join)(a.q[k], b.q[k]);
    for (int s = 0; s < 16; s++) o->sc[s] = IL(il16_join)(a.sc[s], b.sc[s]);
    for (int k = 0; k < 8; k++) o->mn[k] = IL(il16_join)(a.mn[k], b.mn[k]);
    o->d = IL(il16_joinf)(a.d, b.d);
    o->dmin = type == LLMB_TYPE_Q2_K ? IL(il16_joinf)(a.dmin, b.dmin) : _mm512_setzero_ps();
}

// 16 rows x NC tokens over the decoded super-blocks dec[0 .. bn - 1] (i0 ..): il8k_tile's steps; the low 8 rows'
// sums to ya, the high 8's to yb, from ya, yb where !first
INLINE IL_T void IL(il16k_tile)(const int type, const il16k_dec *dec, int64_t i0, int64_t bn, const uint8_t *x,
                                size_t xs, float *ya, float *yb, int64_t ldy, const int first, const int NC) {
    __m512 acc[IL8_NC];
    for (int c = 0; c < NC; c++)
        acc[c] = first ? _mm512_setzero_ps() : IL(il16_load_y)(ya + c * ldy, yb + c * ldy);
    for (int64_t i = 0; i < bn; i++) {
        const il16k_dec *o = dec + i;
        const llmb_block_q8_K *xb[IL8_NC];
        __m512i S[IL8_NC], M[IL8_NC];
        for (int c = 0; c < NC; c++) {   // M: the mins (Q2_K) or scales (Q3_K) against pairs of sums of 16 values
            xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i0 + i;
            M[c] = S[c] = _mm512_setzero_si512();
            for (int k = 0; k < 8; k++) {
                int32_t p;
                memcpy(&p, xb[c]->bsums + 2 * k, 4);
                M[c] = _mm512_add_epi32(M[c], _mm512_madd_epi16(o->mn[k], _mm512_set1_epi32(p)));
            }
        }
        for (int sb = 0; sb < 16; sb++) {   // 4 maddubs of a sub-block summed in int16 (values below 8), then its scale
            __m512i h16[IL8_NC];
            for (int c = 0; c < NC; c++) h16[c] = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++)
                for (int c = 0; c < NC; c++) {
                    int32_t a;
                    memcpy(&a, xb[c]->qs + 16 * sb + 4 * k, 4);
                    h16[c] = _mm512_add_epi16(h16[c], _mm512_maddubs_epi16(o->q[4 * sb + k], _mm512_set1_epi32(a)));
                    IL16_KEEP(h16[c]);
                }
            for (int c = 0; c < NC; c++) S[c] = _mm512_add_epi32(S[c], _mm512_madd_epi16(h16[c], o->sc[sb]));
        }
        for (int c = 0; c < NC; c++) {
            const __m512 dx = _mm512_set1_ps(xb[c]->d);
            if (type == LLMB_TYPE_Q3_K) {   // S - 4 M
                const __m512i s32 = _mm512_sub_epi32(S[c], _mm512_slli_epi32(M[c], 2));
                acc[c] = _mm512_fmadd_ps(_mm512_mul_ps(o->d, dx), _mm512_cvtepi32_ps(s32), acc[c]);
            } else {   // dall S - dmin M, then the sum
                const __m512 t = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dx, o->d), _mm512_cvtepi32_ps(S[c])),
                                               _mm512_mul_ps(_mm512_mul_ps(dx, o->dmin), _mm512_cvtepi32_ps(M[c])));
                acc[c] = _mm512_add_ps(acc[c], t);
            }
        }
    }
    for (int c = 0; c < NC; c++) IL(il16_store_y)(ya + c * ldy, yb + c * ldy, acc[c]);
}

// The groups at ga and gb (nb super-blocks each) x nc tokens on 512 bits into ya and yb (pf: il8_pf). Out of line as
// il16x_pair, whose inlined copies slowed prefill (IQ4_XS x 128 tokens 0.91x: docs/engine-measurements.md#il16-pf);
// GCC clones this one by type, pf at run time (Q2_K, Q3_K x 512 tokens 0.99-1.05 against the inlined pairs before)
__attribute__((noinline)) static IL_T void IL(il16k_pair)(const int type, const uint8_t *ga, const uint8_t *gb,
                                                          int64_t nb, const uint8_t *x, size_t xs, int nc, float *ya,
                                                          float *yb, int64_t ldy, const int pf) {
    il16k_dec dec[IL16K_DEC];
#define IL16K_DECODE(i) IL(il16k_decode)(type, ga, gb, nb, i, &dec[(i) - i0])
#define IL16K_TILE(NC)                                                                                              \
    IL(il16k_tile)(type, dec, i0, bn, x + t0 * xs, xs, ya + t0 * ldy, yb + t0 * ldy, ldy, i0 == 0, NC)
    IL16_PAIR_RANGES(IL16K_DEC, il8k_bytes(type), il8k_tail(type), IL16K_DECODE, IL16K_TILE)
#undef IL16K_TILE
#undef IL16K_DECODE
}

// ---- Q2_K one token at the VNNI level: two groups side by side on 512 bits, decoded in registers ----
// il8k_tile's one-token steps for Q2_K (il8k_head, il8k_q2_half, M from the bsums, the float step) on the 16 rows
// of two groups at once, each 256-bit load of one group joined with the other group's: every shuffle,
// shift and mask is lane-local, so the ops run once on 512 bits where the groups of 8 run them twice, and the
// exact S and M and the float steps per lane are il8k_tile's: the same bits.

// il8k_pick on 512 bits
INLINE IL_T __m512i IL(il16k_pick)(__m512i v, int b0, int b1, int hi) {
    return _mm512_shuffle_epi8(v, _mm512_broadcast_i64x4(IL(il8k_pick_ctl)(b0, b1, hi)));
}

// The frame of one token over the groups at ga and gb (nb super-blocks each, `bytes` of words a super-block in a
// group, `tail` bytes of d after the group's last: il8_prefetch_from) into ya (ga's 8 rows) and yb: for super-block i,
// SB adds its term to acc with va, vb its words in the two groups (each prefetched as read, pf) and xb the token's
// block (il16k_q2_one, il16k_q3_one, il16x_one; ga, gb, nb, x, ya, yb and pf in scope)
#define IL16_ONE_FRAME(bytes, tail, SB)                                                                             \
    do {                                                                                                           \
        il8_pfs pa_ = il8_prefetch_from(ga, nb, bytes, tail, 0, pf, 1);                                            \
        il8_pfs pb_ = il8_prefetch_from(gb, nb, bytes, tail, 0, pf, 1);                                            \
        __m512 acc = _mm512_setzero_ps();                                                                          \
        for (int64_t i = 0; i < nb; i++) {                                                                         \
            const uint8_t *va = ga + (size_t)i * (bytes), *vb = gb + (size_t)i * (bytes);                          \
            il8_prefetch_next(&pa_), il8_prefetch_next(&pb_);                                                      \
            const llmb_block_q8_K *xb = (const llmb_block_q8_K *)x + i;                                            \
            SB;                                                                                                    \
        }                                                                                                          \
        IL(il16_store2)(ya, yb, acc);                                                                              \
    } while (0)

// Super-block i's term of one token over two groups (IL16_ONE_FRAME), added to acc
INLINE IL_T __m512 IL(il16k_q2_sb)(const uint8_t *va, const uint8_t *vb, const llmb_block_q8_K *xb, __m512 acc) {
    const __m512i k03 = _mm512_set1_epi8(0x03), k0f = _mm512_set1_epi16(0x0F);
    __m512i sc[16], M = _mm512_setzero_si512(), S = _mm512_setzero_si512();
    for (int w = 0; w < 4; w++) {   // il8k_head's Q2_K scales and mins, and M against the bsums
        const __m512i sv = IL(il16_load2)(va + 32 * w, vb + 32 * w);
        for (int b = 0; b < 4; b++) sc[4 * w + b] = _mm512_and_si512(IL(il16k_pick)(sv, b, b, 0), k0f);
        for (int b = 0; b < 4; b += 2) {
            int32_t p;
            memcpy(&p, xb->bsums + 2 * (2 * w + b / 2), 4);
            M = _mm512_add_epi32(M, _mm512_madd_epi16(_mm512_srli_epi16(IL(il16k_pick)(sv, b, b + 1, 0), 4),
                                                      _mm512_set1_epi32(p)));
        }
    }
    for (int j = 0; j < 2; j++)   // il8k_q2_half
        for (int h = 0; h < 2; h++) {
            __m512i raw[4];
            for (int t = 0; t < 4; t++) {
                const size_t o = 32 * (4 + 8 * j + 4 * h + t);
                raw[t] = IL(il16_load2)(va + o, vb + o);
            }
            for (int m = 0; m < 4; m++) {
                __m512i h16 = _mm512_setzero_si512();
                for (int t = 0; t < 4; t++) {
                    const __m512i q = _mm512_and_si512(m ? _mm512_srli_epi16(raw[t], 2 * m) : raw[t], k03);
                    int32_t a;
                    memcpy(&a, xb->qs + 128 * j + 32 * m + 4 * (4 * h + t), 4);
                    h16 = _mm512_add_epi16(h16, _mm512_maddubs_epi16(q, _mm512_set1_epi32(a)));
                    IL16_KEEP(h16);
                }
                S = _mm512_add_epi32(S, _mm512_madd_epi16(h16, sc[8 * j + 2 * m + h]));
            }
        }
    __m512 d, dmin;
    IL(il16_halves)(va + 20 * 32, vb + 20 * 32, &d, &dmin);
    const __m512 dx = _mm512_set1_ps(xb->d);   // dall S - dmin M, then the sum
    const __m512 t = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(dx, d), _mm512_cvtepi32_ps(S)),
                                   _mm512_mul_ps(_mm512_mul_ps(dx, dmin), _mm512_cvtepi32_ps(M)));
    return _mm512_add_ps(acc, t);
}

INLINE IL_T void IL(il16k_q2_one)(const uint8_t *ga, const uint8_t *gb, int64_t nb, const uint8_t *x, float *ya,
                                  float *yb, const int pf) {
    IL16_ONE_FRAME(il8k_bytes(LLMB_TYPE_Q2_K), 0, acc = IL(il16k_q2_sb)(va, vb, xb, acc));
}

// ---- Q3_K one token at the VNNI level: il16k_q2_one's way, two groups side by side on 512 bits ----
// il8k_tile's one-token steps for Q3_K (il8k_head's kmask unpacking, il8k_part's values, il8k_sums' runs of 4
// maddubs a sub-block, M from the bsums, S - 4 M and the float step) on the 16 rows of two groups, the values
// decoded in registers: the same exact S and M, the same float steps per lane, so the same bits. The AVX2 groups'
// one token was bound by its arithmetic (1 thread: 33 GB/s from L2, where Q4_0 reads 65; from DRAM 0.64x Q4_0's
// bytes/s on 2 threads); docs/engine-measurements.md#il16k-q3-one.

// Super-block i's term (IL16_ONE_FRAME), its d at da and db (each group's tail)
INLINE IL_T __m512 IL(il16k_q3_sb)(const uint8_t *va, const uint8_t *vb, const uint8_t *da, const uint8_t *db,
                                   const llmb_block_q8_K *xb, __m512 acc) {
    const __m512i k03 = _mm512_set1_epi8(0x03), k07 = _mm512_set1_epi8(0x07), k04 = _mm512_set1_epi8(0x04);
    const __m512i k32 = _mm512_set1_epi16(32);
    // il8k_head: byte b of a[w] is scale 4 w + b plus 32; M against the pairs of bsums
    const __m512i s0 = IL(il16_load2)(va + 24 * 32, vb + 24 * 32), s1 = IL(il16_load2)(va + 25 * 32, vb + 25 * 32);
    const __m512i s2 = IL(il16_load2)(va + 26 * 32, vb + 26 * 32);
    IL8K_Q3_SCALES(512, s0, s1, s2, a);
    __m512i sc[16], M = _mm512_setzero_si512(), S = _mm512_setzero_si512();
    for (int w = 0; w < 4; w++) {
        for (int b = 0; b < 4; b++) sc[4 * w + b] = _mm512_sub_epi16(IL(il16k_pick)(a[w], b, b, 0), k32);
        for (int b = 0; b < 4; b += 2) {
            int32_t p;
            memcpy(&p, xb->bsums + 2 * (2 * w + b / 2), 4);
            M = _mm512_add_epi32(M, _mm512_madd_epi16(_mm512_sub_epi16(IL(il16k_pick)(a[w], b, b + 1, 0), k32),
                                                      _mm512_set1_epi32(p)));
        }
    }
    // il8k_part's values: words 12 j + 3 p .. + 2 hold those of t = 2 p, 2 p + 1 (value 128 j + 32 m + 4 t of
    // the super-block: sub-block 8 j + 2 m + t / 4); sub-block by sub-block, il8k_sums' run of 4
    for (int j = 0; j < 2; j++)
        for (int hq = 0; hq < 2; hq++) {   // t = 4 hq .. 4 hq + 3
            __m512i q[4][4];               // q[m][t % 4]
            for (int pp = 0; pp < 2; pp++) {
                const size_t o = 32 * (12 * j + 3 * (2 * hq + pp));
                const __m512i av = IL(il16_load2)(va + o, vb + o), bv = IL(il16_load2)(va + o + 32, vb + o + 32);
                const __m512i cv = IL(il16_load2)(va + o + 64, vb + o + 64);
                const int k0 = 2 * pp, k1 = 2 * pp + 1;   // t % 4 of t = 2 p, 2 p + 1
                q[0][k0] = _mm512_and_si512(av, k07);
                q[1][k0] = _mm512_and_si512(_mm512_srli_epi16(av, 3), k07);
                q[2][k0] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(av, 6), k03),
                                           _mm512_and_si512(_mm512_srli_epi16(cv, 4), k04));
                q[3][k0] = _mm512_and_si512(cv, k07);
                q[0][k1] = _mm512_and_si512(bv, k07);
                q[1][k1] = _mm512_and_si512(_mm512_srli_epi16(bv, 3), k07);
                q[2][k1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(bv, 6), k03),
                                           _mm512_and_si512(_mm512_srli_epi16(cv, 5), k04));
                q[3][k1] = _mm512_and_si512(_mm512_srli_epi16(cv, 3), k07);
            }
            for (int m = 0; m < 4; m++) {
                __m512i h16 = _mm512_setzero_si512();
                for (int k = 0; k < 4; k++) {
                    int32_t xa;
                    memcpy(&xa, xb->qs + 128 * j + 32 * m + 4 * (4 * hq + k), 4);
                    h16 = _mm512_add_epi16(h16, _mm512_maddubs_epi16(q[m][k], _mm512_set1_epi32(xa)));
                    IL16_KEEP(h16);
                }
                S = _mm512_add_epi32(S, _mm512_madd_epi16(h16, sc[8 * j + 2 * m + hq]));
            }
        }
    const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)da)),
                                                             _mm_loadu_si128((const __m128i *)db), 1));
    const __m512i s4 = _mm512_sub_epi32(S, _mm512_slli_epi32(M, 2));   // S - 4 M
    return _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(s4), acc);
}

INLINE IL_T void IL(il16k_q3_one)(const uint8_t *ga, const uint8_t *gb, int64_t nb, const uint8_t *x, float *ya,
                                  float *yb, const int pf) {
    const size_t bytes = il8k_bytes(LLMB_TYPE_Q3_K), tail = (size_t)il8k_tail(LLMB_TYPE_Q3_K);
    IL16_ONE_FRAME(bytes, tail,
                   acc = IL(il16k_q3_sb)(va, vb, ga + (size_t)nb * bytes + (size_t)i * tail,
                                         gb + (size_t)nb * bytes + (size_t)i * tail, xb, acc));
}

// Q2_K, Q3_K at the VNNI level: prefill's pairs of groups here (IL16_GROUPS), the rest (small batches, a group left
// alone) by the AVX2 kernel `avx2`; one token in il16k_q2_one / il16k_q3_one, two groups at a time (IL16_HALVES), a
// middle group left alone by the AVX2 kernel
#define IL16K_ONE(a, b, pf)                                                                                         \
    (type == LLMB_TYPE_Q2_K ? IL(il16k_q2_one) : IL(il16k_q3_one))(                                                 \
        (const uint8_t *)w + (size_t)((a) * IL8_G) * ws, (const uint8_t *)w + (size_t)((b) * IL8_G) * ws,             \
        n / LLMB_QK_K, x, y + (a) * IL8_G, y + (b) * IL8_G, pf)
#define IL16K_PAIR(a, b, pf)                                                                                        \
    IL(il16k_pair)(type, (const uint8_t *)w + (size_t)((a) * IL8_G) * ws,                                              \
                   (const uint8_t *)w + (size_t)((b) * IL8_G) * ws, n / LLMB_QK_K, x, xs, nc, y + (a) * IL8_G,         \
                   y + (b) * IL8_G, ldy, pf)
#define IL16K_ALONE(name, a)                                                                                        \
    name##_il8_avx2(n, (const uint8_t *)w + (size_t)((a) * IL8_G) * ws, ws, IL8_G, x, xs, nc, y + (a) * IL8_G, ldy,  \
                    stream)
#define IL16K_Q2_ALONE(a) IL16K_ALONE(q2_K, a)
#define IL16K_Q3_ALONE(a) IL16K_ALONE(q3_K, a)
#define IL16K_KERNEL(name, T, ALONE)                                                                                \
    IL_T static void IL(name##_il16)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,  \
                                     float *y, int64_t ldy, int stream) {                                           \
        const int type = T;                                                                                         \
        if (nc == 1) IL16_HALVES(nr / IL8_G, il8_pf(stream), IL16K_ONE, ALONE);                                    \
        else if (nc > IL8_NC) IL16_GROUPS(nr / IL8_G, nc, stream, IL16K_PAIR, ALONE);                               \
        else name##_il8_avx2(n, w, ws, nr, x, xs, nc, y, ldy, stream);                                              \
    }
IL16K_KERNEL(q2_K, LLMB_TYPE_Q2_K, IL16K_Q2_ALONE)
IL16K_KERNEL(q3_K, LLMB_TYPE_Q3_K, IL16K_Q3_ALONE)
#undef IL16K_KERNEL
#undef IL16K_Q3_ALONE
#undef IL16K_Q2_ALONE
#undef IL16K_ALONE
#undef IL16K_PAIR
#undef IL16K_ONE
#endif


// ---- IQ4_NL and IQ4_XS at the AVX2 and VNNI levels: 8 rows a group, |x| against v sign(x) ----

// Per output and block the steps of iq4_nl_body / iq4_xs_body (vecdot_x86_body.h) on 8 rows at once: each block's
// (IQ4_XS: sub-block's) exact integer sum s = sum v x, then IQ4_NL acc += s (d_w d_x), IQ4_XS acc += (d_w d_x ls_j)
// s_j sub-block after sub-block, ls_j its 6-bit scale less 32 as a float (no fma, as there). The values v of the
// 16 (signed, |v| <= 127) are the signed operand at one token: maddubs(|x|, v sign(x)), each pair of products
// below 2^15 in magnitude (2 x 128 x 127), so the pairs are summed in int32 (madd) after every maddubs. |x| is made
// once per call for a range of blocks (IQ4_NL's d_x as floats for every token count): a block's values are then one
// table lookup of its nibbles and one sign_epi8, where |v| against x sign(v) needs an abs of each value too.
// A group's block: IQ4_NL Q4_0's (4 words of indices, d as the tail), IQ4_XS the plain blocks' 34 words (d |
// scales_h, scales_l, then 4 words of indices a sub-block; no tail), decoded in registers for every token tile.
// A tile of several tokens takes |v| against x sign(v) instead: one broadcast a token and word where |x| needs two,
// and the abs of |v| shared by the tile's tokens (docs/engine-measurements.md#il8-iq4). 1 thread, AMD EPYC Zen 3,
// weights in L2 (256 x 2048), GOP/s before -> after: one token IQ4_NL 66 -> 77, IQ4_XS 64 -> 72; 64 tokens IQ4_NL
// 108 -> 113 (d_x as floats), where |x| against v sign(x) for every tile had given 89.
#ifndef LLMB_IL8_AX   // blocks of 32 of one token's |x| (and (token, block) entries of IQ4_NL's d_x) on the stack
#define LLMB_IL8_AX 1024   // (the C tests: 256, so that ranges and chunks of tokens run several)
#endif
_Static_assert(LLMB_IL8_AX >= IL8_DEC && LLMB_IL8_AX >= 8, "a chunk holds a token's range");

// s[c], lane r: the exact sum v x of row r's 32 values (v: Q4_0's order) against token c's (xq[c]): one token with
// its |x| at ax maddubs(|x|, v sign(x)), else maddubs(|v|, x sign(v)) (|v| from va where it is not NULL); each pair
// of products below 2^15 in magnitude (2 x 127 x 127), summed in int32
INLINE IL_T void IL(il8n_isums)(const __m256i *v, const __m256i *va, const int8_t *const *xq, const uint8_t *ax,
                                __m256i *s, const int NC) {
#if !IL_VNNI
    const __m256i one = _mm256_set1_epi16(1);
#endif
    const int ux = NC == 1 && ax;
    __m256i q[8];
    if (!ux)
        for (int k = 0; k < 8; k++) q[k] = va ? va[k] : _mm256_abs_epi8(v[k]);
    for (int c = 0; c < NC; c++) s[c] = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++)
        for (int c = 0; c < NC; c++) {   // v[k] against x 4 (k / 2) + 16 (k % 2) ..
            const int o = 4 * (k / 2) + 16 * (k % 2);
            int32_t b;
            memcpy(&b, xq[c] + o, 4);
            __m256i u, sv;   // (unsigned, signed) operands
            if (ux) {
                int32_t a;
                memcpy(&a, ax + o, 4);
                u = _mm256_set1_epi32(a), sv = _mm256_sign_epi8(v[k], _mm256_set1_epi32(b));
            } else {
                u = q[k], sv = _mm256_sign_epi8(_mm256_set1_epi32(b), v[k]);
            }
#if IL_VNNI
            s[c] = _mm256_dpbusd_epi32(s[c], u, sv);
#else
            s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u, sv), one));
#endif
            IL8_KEEP(s[c]);
        }
}

// ax[32 e] = |x| of the 32 values at xq + e bs (e < cnt)
INLINE IL_T void IL(il8n_abs)(const int8_t *xq, size_t bs, int64_t cnt, uint8_t *ax) {
    for (int64_t e = 0; e < cnt; e++)
        _mm256_storeu_si256((__m256i *)(ax + 32 * e),
                            _mm256_abs_epi8(_mm256_loadu_si256((const __m256i *)(xq + (size_t)e * bs))));
}

// A group's IQ4_NL block or IQ4_XS super-block decoded once for all token tiles of a chunk, where each tile decoded it
// again for its 4 tokens (IQ4_XS's scales and values: about 9 of 45 vector instructions a token and sub-block; 512
// tokens, 2 threads, Zen 3: 1.12-1.18x, IQ4_NL 1.01-1.08x: docs/engine-measurements.md#iq4-dec): 32 values of 8 rows
// as il8n_values' o, and their magnitudes
#if !IL_VNNI   // (defined once)
typedef struct {
    __m256i v[8], a[8];
} il8n_dec;
typedef struct {   // IQ4_NL (544 bytes)
    __m256 d;
    il8n_dec q;
} il8nl_dec;
typedef struct {   // IQ4_XS (4.4 KB): d and ls as il8x_head's, sub-block j at q[j]
    __m256 d, ls[8];
    il8n_dec q[8];
} il8x_dec;
#endif

INLINE IL_T void IL(il8n_decode)(const uint8_t *v, il8n_dec *o) {
    IL(il8n_values)(v, IL(il8n_table)(0), o->v);
    for (int k = 0; k < 8; k++) o->a[k] = _mm256_abs_epi8(o->v[k]);
}

// IQ4_NL: one group x NC tokens over blocks i0 .. i0 + bn - 1 (of nb): from dec (those blocks decoded) or, where dec
// is NULL, decoding each from g as it goes; token c's d_x of block i0 + i at dx[c bn + i] and (one token, ax not NULL)
// |x| at ax + 32 i; the sums start at 0 where first, else from y
INLINE IL_T void IL(il8n_tile)(const uint8_t *g, const il8nl_dec *dec, int64_t nb, int64_t i0, int64_t bn,
                               const uint8_t *x, size_t xs, const uint8_t *ax, const float *dx, float *y, int64_t ldy,
                               const int first, const int pf, const int NC) {
    const size_t bytes = llmb_il8_stride(LLMB_TYPE_IQ4_NL);
    __m256 acc[IL8_NC];
    for (int c = 0; c < NC; c++) acc[c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + c * ldy);
    il8_pfs ps = il8_prefetch_from(g, nb, bytes, il8_tail(LLMB_TYPE_IQ4_NL), i0, dec ? 0 : pf, NC == 1);
    for (int64_t i = 0; i < bn; i++) {
        __m256i q[8];
        __m256 d;
        if (dec) {
            d = dec[i].d;
        } else {
            if (pf) il8_prefetch_next(&ps);
            IL(il8n_values)(g + (size_t)(i0 + i) * bytes, IL(il8n_table)(0), q);
            d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)il8_d(LLMB_TYPE_IQ4_NL, g, nb, i0 + i)));
        }
        const int8_t *xq[IL8_NC];
        __m256i s[IL8_NC];
        for (int c = 0; c < NC; c++) xq[c] = (const int8_t *)(x + c * xs + (size_t)(i0 + i) * sizeof(llmb_block_q8_0) + 2);
        IL(il8n_isums)(dec ? dec[i].q.v : q, dec ? dec[i].q.a : NULL, xq, ax ? ax + 32 * i : NULL, s, NC);
        for (int c = 0; c < NC; c++)   // (d_x d_w) s
            acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(s[c]),
                                                         _mm256_mul_ps(d, _mm256_set1_ps(dx[c * bn + i]))));
    }
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(y + c * ldy, acc[c]);
}

IL_T static void IL(iq4_nl_il8)(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc,
                                float *y, int64_t ldy, int stream) {
    const uint8_t *w = vw, *x = vx;
#if IL_VNNI   // prefill and one token: as Q4_0 with u = v + 128 (il8_decode), two groups on 512 bits (il16_pair,
              // il16_one), where il8n_tile's one token on 256 bits was bound by its arithmetic
              // (docs/engine-measurements.md#iq4nl-il16-one)
    if (nc > IL8_NC || nc == 1) {
        IL(il8_kernel)(LLMB_TYPE_IQ4_NL, n, w, ws, nr, x, xs, nc, y, ldy, stream);
        return;
    }
#endif
    const int pf = il8_pf(stream);
    // ranges of blocks (one token: as many as |x| holds, one stream a group; several tiles: IL8N_DEC, decoded once for
    // a chunk's tiles), chunks of tokens whose d_x fit dx
    const int64_t rmax = nc == 1 ? LLMB_IL8_AX : nc <= IL8_NC ? IL8_DEC : IL8N_DEC;
    const int64_t nb = n / LLMB_QK, br = nb < rmax ? nb : rmax;
    const int tc = (int)(LLMB_IL8_AX / br);
    _Alignas(32) uint8_t ax[LLMB_IL8_AX * 32];
    float dx[LLMB_IL8_AX];
    il8nl_dec dec[IL8N_DEC];
    for (int64_t i0 = 0; i0 < nb; i0 += br) {
        const int64_t bn = nb - i0 < br ? nb - i0 : br;
        for (int c0 = 0; c0 < nc; c0 += tc) {
            const int cn = nc - c0 < tc ? nc - c0 : tc;
            const uint8_t *xc = x + c0 * xs;
            for (int c = 0; c < cn; c++) {   // d_x (and one token's |x|) over the range
                const llmb_block_q8_0 *b = (const llmb_block_q8_0 *)(xc + c * xs) + i0;
                for (int64_t i = 0; i < bn; i++) {
                    uint16_t h;
                    memcpy(&h, &b[i].d, 2);
                    dx[c * bn + i] = _cvtsh_ss(h);
                }
                if (nc == 1) IL(il8n_abs)(b->qs, sizeof *b, bn, ax);
            }
            for (int r0 = 0; r0 < nr; r0 += IL8_G) {
                const uint8_t *g = w + (size_t)r0 * ws;
                const il8nl_dec *d = NULL;
                if (cn > IL8_NC) {   // (bn <= IL8N_DEC: nc > IL8_NC)
                    il8_pfs ps = il8_prefetch_from(g, nb, llmb_il8_stride(LLMB_TYPE_IQ4_NL), il8_tail(LLMB_TYPE_IQ4_NL),
                                                   i0, il8_pf_batch(pf, cn), 0);
                    for (int64_t i = 0; i < bn; i++) {
                        il8_prefetch_next(&ps);
                        IL(il8n_decode)(g + (size_t)(i0 + i) * llmb_il8_stride(LLMB_TYPE_IQ4_NL), &dec[i].q);
                        dec[i].d = _mm256_cvtph_ps(
                            _mm_loadu_si128((const __m128i *)il8_d(LLMB_TYPE_IQ4_NL, g, nb, i0 + i)));
                    }
                    d = dec;
                }
                for (int t0 = 0; t0 < cn; t0 += IL8_NC) {
// (|x| or NULL, and dec or NULL, as constants in each call, so that each inlined tile has one kind of sums)
#define IL8N_CALL(D, AX, NC)                                                                                        \
    IL(il8n_tile)(g, D, nb, i0, bn, xc + t0 * xs, xs, AX, dx + t0 * bn, y + (c0 + t0) * ldy + r0, ldy, i0 == 0,      \
                  t0 == 0 ? pf : 0, NC)
#define IL8N_RUN(NC)                                                                                                \
    if (nc == 1) IL8N_CALL(NULL, ax, 1);                                                                            \
    else if (d) IL8N_CALL(d, NULL, NC);                                                                             \
    else IL8N_CALL(NULL, NULL, NC)
                    IL8_TILES(cn - t0, IL8N_RUN)
#undef IL8N_RUN
#undef IL8N_CALL
                }
            }
        }
    }
}

// d and the 8 scales ls_j as floats (lane r: row r's) of the group's super-block at v
INLINE IL_T void IL(il8x_head)(const uint8_t *v, __m256 *d, __m256 *ls) {
    __m256 sh;   // (scales_h as a half: unused)
    IL(il8_halves)(v, d, &sh);
    const __m256i h = _mm256_loadu_si256((const __m256i *)v), l = _mm256_loadu_si256((const __m256i *)(v + 32));
    const __m256i k0f = _mm256_set1_epi32(0x0F), k03 = _mm256_set1_epi32(0x03), k32 = _mm256_set1_epi32(32);
    for (int j = 0; j < 8; j++) {   // low 4 bits: nibble j of scales_l; high 2: bits 2 j, 2 j + 1 of scales_h
        const __m256i lo = _mm256_and_si256(_mm256_srli_epi32(l, 4 * j), k0f);
        const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(h, 16 + 2 * j), k03), 4);
        ls[j] = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(lo, hi), k32));
    }
}

INLINE IL_T void IL(il8x_decode)(const uint8_t *v, il8x_dec *o) {
    IL(il8x_head)(v, &o->d, o->ls);
    for (int j = 0; j < 8; j++) IL(il8n_decode)(v + 32 * (2 + 4 * j), &o->q[j]);
}

// IQ4_XS: one group x NC tokens over super-blocks i0 .. i0 + bn - 1: from dec (those super-blocks decoded) or, where
// dec is NULL, decoding each from g as it goes; (one token) |x| of super-block i0 + i at ax + 256 i (ax not NULL);
// the sums start at 0 where first, else from y
INLINE IL_T void IL(il8x_tile)(const uint8_t *g, const il8x_dec *dec, int64_t i0, int64_t bn, const uint8_t *x,
                               size_t xs, const uint8_t *ax, float *y, int64_t ldy, const int first, const int pf,
                               const int NC) {
    const size_t bytes = sizeof(llmb_il8_iq4_xs);
    __m256 acc[IL8_NC];
    for (int c = 0; c < NC; c++) acc[c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + c * ldy);
    il8_pfs ps = il8_prefetch_from(g, 0, bytes, 0, i0, dec ? 0 : pf, NC == 1);
    for (int64_t i = 0; i < bn; i++) {
        const uint8_t *v = g + (size_t)(i0 + i) * bytes;
        __m256 dh, lsh[8], dd[IL8_NC];
        const __m256 *ls = dec ? dec[i].ls : lsh;
        if (dec) {
            dh = dec[i].d;
        } else {
            if (pf) il8_prefetch_next(&ps);
            IL(il8x_head)(v, &dh, lsh);
        }
        const llmb_block_q8_K *xb[IL8_NC];
        for (int c = 0; c < NC; c++) {   // d4d8 = d_w d_x
            xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i0 + i;
            dd[c] = _mm256_mul_ps(dh, _mm256_set1_ps(xb[c]->d));
        }
        for (int j = 0; j < 8; j++) {
            __m256i ql[8];
            if (!dec) IL(il8n_values)(v + 32 * (2 + 4 * j), IL(il8n_table)(0), ql);
            const int8_t *xq[IL8_NC];
            __m256i s[IL8_NC];
            for (int c = 0; c < NC; c++) xq[c] = xb[c]->qs + 32 * j;
            IL(il8n_isums)(dec ? dec[i].q[j].v : ql, dec ? dec[i].q[j].a : NULL, xq, ax ? ax + 256 * i + 32 * j : NULL,
                           s, NC);
            for (int c = 0; c < NC; c++)
                acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_mul_ps(dd[c], ls[j]), _mm256_cvtepi32_ps(s[c])));
        }
    }
    for (int c = 0; c < NC; c++) _mm256_storeu_ps(y + c * ldy, acc[c]);
}

#if IL_VNNI
// IQ4_XS prefill at the VNNI level: two groups' super-blocks decoded side by side into 512-bit vectors (as il16_pair)
// with u = v + 128 (il8n_table(128)); each sub-block's sum starts from -128 times the sum of its 32 activations
// (two of Q8_K's bsums), so it is the exact s_j, then il8x_tile's float steps per lane in its order: the same bits
#define IL16X_DEC 4   // super-blocks of a pair of groups decoded at a time (4 x 4.6 KB: L1)
typedef struct {
    __m512 d, ls[8];   // as il8x_head's, lanes 0..7 group a's rows, 8..15 group b's
    __m512i q[64];     // sub-block j's values as il8n_values' o[0..7] at q[8 j ..]
} il16x_dec;

INLINE IL_T void IL(il16x_decode)(const uint8_t *ga, const uint8_t *gb, int64_t i, il16x_dec *o) {
    const size_t bytes = sizeof(llmb_il8_iq4_xs);
    const uint8_t *va = ga + (size_t)i * bytes, *vb = gb + (size_t)i * bytes;
    const __m256i kv = IL(il8n_table)(128);
    __m256 da, db, la[8], lb[8];
    IL(il8x_head)(va, &da, la);
    IL(il8x_head)(vb, &db, lb);
    o->d = IL(il16_joinf)(da, db);
    for (int j = 0; j < 8; j++) {
        __m256i qa[8], qb[8];
        o->ls[j] = IL(il16_joinf)(la[j], lb[j]);
        IL(il8n_values)(va + 32 * (2 + 4 * j), kv, qa);
        IL(il8n_values)(vb + 32 * (2 + 4 * j), kv, qb);
        for (int k = 0; k < 8; k++) o->q[8 * j + k] = IL(il16_join)(qa[k], qb[k]);
    }
}

// 16 rows x NC tokens over the decoded super-blocks dec[0 .. bn - 1] (i0 ..); the low 8 rows' sums to ya, the high
// 8's to yb, from ya, yb where !first
INLINE IL_T void IL(il16x_tile)(const il16x_dec *dec, int64_t i0, int64_t bn, const uint8_t *x, size_t xs, float *ya,
                                float *yb, int64_t ldy, const int first, const int NC) {
    __m512 acc[IL8_NC];
    for (int c = 0; c < NC; c++)
        acc[c] = first ? _mm512_setzero_ps() : IL(il16_load_y)(ya + c * ldy, yb + c * ldy);
    for (int64_t i = 0; i < bn; i++) {
        const il16x_dec *d = dec + i;
        const llmb_block_q8_K *xb[IL8_NC];
        __m512 dd[IL8_NC];
        for (int c = 0; c < NC; c++) {   // d4d8 = d_w d_x
            xb[c] = (const llmb_block_q8_K *)(x + c * xs) + i0 + i;
            dd[c] = _mm512_mul_ps(d->d, _mm512_set1_ps(xb[c]->d));
        }
        for (int j = 0; j < 8; j++) {
            __m512i s[IL8_NC];
            for (int c = 0; c < NC; c++)
                s[c] = _mm512_set1_epi32(-128 * (xb[c]->bsums[2 * j] + xb[c]->bsums[2 * j + 1]));
            for (int k = 0; k < 8; k++)   // q[8 j + k] against x values 32 j + 4 (k / 2) + 16 (k % 2) ..
                for (int c = 0; c < NC; c++) {
                    int32_t a;
                    memcpy(&a, xb[c]->qs + 32 * j + 4 * (k / 2) + 16 * (k % 2), 4);
                    s[c] = _mm512_dpbusd_epi32(s[c], d->q[8 * j + k], _mm512_set1_epi32(a));
                }
            for (int c = 0; c < NC; c++)
                acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dd[c], d->ls[j]), _mm512_cvtepi32_ps(s[c])));
        }
    }
    for (int c = 0; c < NC; c++) IL(il16_store_y)(ya + c * ldy, yb + c * ldy, acc[c]);
}

// IQ4_XS's one token over two groups (il16x_one: IL16_ONE_FRAME), super-block i's term decoded in registers:
// il16x_decode's values (u = v + 128), il16x_tile's exact s_j and float steps, so il8x_tile's bits. il8x_tile's one
// token on 256 bits was bound by its arithmetic (1 thread: 35 GB/s from L2 as from DRAM;
// docs/engine-measurements.md#il16x-one)
INLINE IL_T __m512 IL(il16x_sb)(const uint8_t *va, const uint8_t *vb, const llmb_block_q8_K *xb, __m512 acc) {
    const __m512i kv = _mm512_broadcast_i64x4(IL(il8n_table)(128)), m4 = _mm512_set1_epi8(0x0F);
    __m256 da, db, la[8], lb[8];
    IL(il8x_head)(va, &da, la);
    IL(il8x_head)(vb, &db, lb);
    const __m512 dd = _mm512_mul_ps(IL(il16_joinf)(da, db), _mm512_set1_ps(xb->d));   // d4d8 = d_w d_x
    for (int j = 0; j < 8; j++) {
        __m512i sj = _mm512_set1_epi32(-128 * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]));
        for (int k = 0; k < 4; k++) {   // word k's low nibbles against x values 32 j + 4 k .., its high 16 on
            const __m512i raw = IL(il16_load2)(va + 32 * (2 + 4 * j + k), vb + 32 * (2 + 4 * j + k));
            int32_t a0, a1;
            memcpy(&a0, xb->qs + 32 * j + 4 * k, 4);
            memcpy(&a1, xb->qs + 32 * j + 4 * k + 16, 4);
            sj = _mm512_dpbusd_epi32(sj, _mm512_shuffle_epi8(kv, _mm512_and_si512(raw, m4)), _mm512_set1_epi32(a0));
            sj = _mm512_dpbusd_epi32(sj, _mm512_shuffle_epi8(kv, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4)),
                                     _mm512_set1_epi32(a1));
        }
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(dd, IL(il16_joinf)(la[j], lb[j])), _mm512_cvtepi32_ps(sj)));
    }
    return acc;
}

INLINE IL_T void IL(il16x_one)(const uint8_t *ga, const uint8_t *gb, int64_t nb, const uint8_t *x, float *ya,
                               float *yb, const int pf) {
    IL16_ONE_FRAME(sizeof(llmb_il8_iq4_xs), 0, acc = IL(il16x_sb)(va, vb, xb, acc));
}

// The groups at ga and gb (nb super-blocks each) x nc tokens on 512 bits into ya and yb (pf: il8_pf). Out of line, so
// that GCC compiles the calls with a literal pf of 0 (IL16_GROUPS' prefill) apart, with no prefetch in them: inlined,
// the kernel held both copies and the prefill slowed (x 128 tokens 0.91x: docs/engine-measurements.md#il16-pf)
__attribute__((noinline)) static IL_T void IL(il16x_pair)(const uint8_t *ga, const uint8_t *gb, int64_t nb,
                                                          const uint8_t *x, size_t xs, int nc, float *ya, float *yb,
                                                          int64_t ldy, const int pf) {
    il16x_dec dec[IL16X_DEC];
#define IL16X_DECODE(i) IL(il16x_decode)(ga, gb, i, &dec[(i) - i0])
#define IL16X_TILE(NC) IL(il16x_tile)(dec, i0, bn, x + t0 * xs, xs, ya + t0 * ldy, yb + t0 * ldy, ldy, i0 == 0, NC)
    IL16_PAIR_RANGES(IL16X_DEC, sizeof(llmb_il8_iq4_xs), 0, IL16X_DECODE, IL16X_TILE)
#undef IL16X_TILE
#undef IL16X_DECODE
}
#endif

// tokens a chunk of IQ4_XS prefill: their activations (n = 768: 28 KB) stay in L1 while all groups run over them
// (3072 x 768 x 512 tokens, 1 thread, Zen 3: 93 GOP/s all tokens at once, 105 / 104 / 104 chunks of 16 / 32 / 64)
#define IL8X_TC 32
#define IL8X_DEC 4   // super-blocks of a group decoded at a time for several token tiles (4 x 4.4 KB: L1)
// IQ4_XS in groups of 8 rows (the AVX2 level, and the VNNI level's one token, small batches and a middle group)
INLINE IL_T void IL(iq4_xs_groups)(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nc,
                                   float *y, int64_t ldy, int stream) {
    const int pf = il8_pf(stream);
    // ranges of super-blocks: one token's |x| in ax; several tiles: IL8X_DEC, decoded once for a chunk's tiles;
    // otherwise all (one stream a group)
    const int64_t nb = n / LLMB_QK_K, ra = LLMB_IL8_AX / 8;
    const int64_t br = nc == 1 ? (nb < ra ? nb : ra) : nc <= IL8_NC || nb < IL8X_DEC ? nb : IL8X_DEC;
    _Alignas(32) uint8_t ax[LLMB_IL8_AX * 32];
    il8x_dec dec[IL8X_DEC];
    for (int64_t i0 = 0; i0 < nb; i0 += br) {
        const int64_t bn = nb - i0 < br ? nb - i0 : br;
        if (nc == 1)
            for (int64_t i = 0; i < bn; i++) IL(il8n_abs)(((const llmb_block_q8_K *)x + i0 + i)->qs, 32, 8, ax + 256 * i);
        for (int c0 = 0; c0 < nc; c0 += IL8X_TC)
            for (int r0 = 0; r0 < nr; r0 += IL8_G) {
                const int cn = nc - c0 < IL8X_TC ? nc - c0 : IL8X_TC;
                const uint8_t *g = w + (size_t)r0 * ws;
                const il8x_dec *d = NULL;
                if (cn > IL8_NC) {   // (bn <= IL8X_DEC: nc > IL8_NC)
                    il8_pfs ps = il8_prefetch_from(g, 0, sizeof(llmb_il8_iq4_xs), 0, i0, il8_pf_batch(pf, cn), 0);
                    for (int64_t i = 0; i < bn; i++) {
                        il8_prefetch_next(&ps);
                        IL(il8x_decode)(g + (size_t)(i0 + i) * sizeof(llmb_il8_iq4_xs), &dec[i]);
                    }
                    d = dec;
                }
                for (int t0 = c0; t0 < c0 + cn; t0 += IL8_NC) {
// (dec or NULL as a constant in each call, so that neither inlined tile carries the other's branches)
#define IL8X_CALL(D, AX, NC)                                                                                        \
    IL(il8x_tile)(g, D, i0, bn, x + t0 * xs, xs, AX, y + t0 * ldy + r0, ldy, i0 == 0, t0 == c0 ? pf : 0, NC)
#define IL8X_RUN(NC)                                                                                                \
    if (nc == 1) IL8X_CALL(NULL, ax, 1);                                                                            \
    else if (d) IL8X_CALL(d, NULL, NC);                                                                             \
    else IL8X_CALL(NULL, NULL, NC)
                    IL8_TILES(c0 + cn - t0, IL8X_RUN)
#undef IL8X_RUN
#undef IL8X_CALL
                }
            }
    }
}

IL_T static void IL(iq4_xs_il8)(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs, int nc,
                                float *y, int64_t ldy, int stream) {
    const uint8_t *w = vw, *x = vx;
#if IL_VNNI
    if (nc > IL8_NC) {   // prefill: two groups on 512 bits (IL16_GROUPS), a group alone
#define IL16X_PAIR(a, b, pf)                                                                                        \
    IL(il16x_pair)(w + (size_t)((a) * IL8_G) * ws, w + (size_t)((b) * IL8_G) * ws, n / LLMB_QK_K, x, xs, nc,           \
                   y + (a) * IL8_G, y + (b) * IL8_G, ldy, pf)
#define IL8X_ALONE(a)                                                                                                  \
    IL(iq4_xs_groups)(n, w + (size_t)((a) * IL8_G) * ws, ws, IL8_G, x, xs, nc, y + (a) * IL8_G, ldy, stream)
        IL16_GROUPS(nr / IL8_G, nc, stream, IL16X_PAIR, IL8X_ALONE);
        return;
    }
    if (nc == 1) {   // one token: two groups on 512 bits from the halves of the rows (IL16_HALVES), a middle one alone
#define IL16X_ONE(a, b, pf)                                                                                         \
    IL(il16x_one)(w + (size_t)((a) * IL8_G) * ws, w + (size_t)((b) * IL8_G) * ws, n / LLMB_QK_K, x, y + (a) * IL8_G,    \
                  y + (b) * IL8_G, pf)
        IL16_HALVES(nr / IL8_G, il8_pf(stream), IL16X_ONE, IL8X_ALONE);
#undef IL16X_ONE
#undef IL8X_ALONE
#undef IL16X_PAIR
        return;
    }
#endif
    IL(iq4_xs_groups)(n, w, ws, nr, x, xs, nc, y, ldy, stream);
}

#define IL8_KERNEL(name, T)                                                                                         \
    IL_T static void IL(name##_il8)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,   \
                                    float *y, int64_t ldy, int stream) {                                            \
        IL(il8_kernel)(T, n, w, ws, nr, x, xs, nc, y, ldy, stream);                                                 \
    }
IL8_KERNEL(q4_0, LLMB_TYPE_Q4_0)
IL8_KERNEL(q4_1, LLMB_TYPE_Q4_1)
IL8_KERNEL(q5_0, LLMB_TYPE_Q5_0)
IL8_KERNEL(q5_1, LLMB_TYPE_Q5_1)
#if !IL_VNNI   // (the VNNI level runs Q8_0 in groups of 16: vecdot_avx512_k.c, q8_0_il_vnni512)
IL8_KERNEL(q8_0, LLMB_TYPE_Q8_0)
#endif
#undef IL8_KERNEL
#endif // LLMB_IL8_BODY
