// vecdot_layout.h — internal: the row-interleaved weight layouts (llmb_vec_dot_repack, vecdot.h) as
// types, so their sizes are checked against the plain blocks of quants.h at compile time.
//
// A repacked matrix is a run of groups of G rows. For each block i of its rows, a group holds the G
// blocks' whole 32-bit words as a words x G matrix: word k of row r at word[k][r], so one vector load
// brings word k of every row of the group, one row per lane. After all its blocks come the blocks'
// trailing bytes (type_size % 4: the d of Q8_0, Q6_K, Q3_K), block after block, row after row; Q4_0's, Q5_0's
// and IQ4_NL's d in groups of 8, and Q8_0's in groups of 16, follow each block's words instead
// (llmb_il_inline_tail). Some types' blocks are first recoded (vecdot.c) so that the kernels find whole values in
// reading order and the d where it is a tail: llmb_rc_* below. Q4_1, Q4_K keep their plain block.
#ifndef LLMB_VECDOT_LAYOUT_H
#define LLMB_VECDOT_LAYOUT_H

#include <stddef.h>

#include "quants.h"

// ---- recoded blocks (vecdot.c: legacy_recode, q8_0_recode, q6_K_recode, q3_K_recode, q5_K_recode) ----
typedef struct {                 // Q4_0, IQ4_NL: the values' nibbles first, d the tail
    uint8_t qs[LLMB_QK / 2];
    llmb_half d;
} llmb_rc_q4_0;
typedef struct {                 // Q5_0: qh' (the fifth bits, regrouped: vecdot.c, qh_recode), qs, d the tail
    uint8_t qh[4];
    uint8_t qs[LLMB_QK / 2];
    llmb_half d;
} llmb_rc_q5_0;
typedef struct {                 // Q5_1: the plain order, with qh' for qh
    llmb_half d, m;
    uint8_t qh[4];
    uint8_t qs[LLMB_QK / 2];
} llmb_rc_q5_1;
typedef struct {                 // Q8_0: the values plus 128 (unsigned, vpdpbusd's first operand), d the tail
    uint8_t u[LLMB_QK];
    llmb_half d;
} llmb_rc_q8_0;
typedef struct {                 // Q6_K: each value whole in 6 bits of a byte, in reading order (q6_K_recode)
    uint8_t q[LLMB_QK_K * 3 / 4];
    int8_t scales[LLMB_QK_K / 16];
    llmb_half d;                 // the tail
} llmb_rc_q6_K;
typedef struct {                 // Q3_K: each value whole in 3 bits (q + 4 h), in reading order (q3_K_recode)
    uint8_t u[LLMB_QK_K * 3 / 8];
    uint8_t scales[12];
    llmb_half d;                 // the tail
} llmb_rc_q3_K;
typedef struct {                 // Q5_K: the plain order, with qh' for qh (vecdot.c, q5_K_recode)
    llmb_half d, dmin;
    uint8_t scales[LLMB_K_SCALE_SIZE];
    uint8_t qh[LLMB_QK_K / 8];   // qh': word 2 j + h the fifth bits of words 8 j + 4 h .. + 3 of qs
    uint8_t qs[LLMB_QK_K / 2];
} llmb_rc_q5_K;
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q4_0) == sizeof(llmb_block_q4_0), "recoded q4_0 block size");
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q4_0) == sizeof(llmb_block_iq4_nl), "recoded iq4_nl block size");
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q5_0) == sizeof(llmb_block_q5_0), "recoded q5_0 block size");
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q5_1) == sizeof(llmb_block_q5_1), "recoded q5_1 block size");
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q8_0) == sizeof(llmb_block_q8_0), "recoded q8_0 block size");
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q6_K) == sizeof(llmb_block_q6_K), "recoded q6_K block size");
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q3_K) == sizeof(llmb_block_q3_K), "recoded q3_K block size");
LLMB_STATIC_ASSERT(sizeof(llmb_rc_q5_K) == sizeof(llmb_block_q5_K) &&
                       offsetof(llmb_rc_q5_K, qh) == offsetof(llmb_block_q5_K, qh),
                   "recoded q5_K block: qh' in qh's place");

// ---- one block of a group: its words, G rows to a word ----
#define LLMB_IL_WORDS(block) (sizeof(block) / 4)   // whole words of a block
#define LLMB_IL_TAIL(block) (sizeof(block) % 4)    // its trailing bytes, after the group's blocks
#define LLMB_IL_GROUP(name, block, G)                                                                           \
    typedef struct {                                                                                            \
        uint32_t word[LLMB_IL_WORDS(block)][G];                                                                 \
    } name;                                                                                                     \
    LLMB_STATIC_ASSERT(sizeof(name) + (G) * LLMB_IL_TAIL(block) == (G) * sizeof(block), #name " size")

// groups of 8 (vecdot_il8.c: AVX2, and the legacy types at AVX-512 VNNI)
LLMB_IL_GROUP(llmb_il8_q4_0, llmb_rc_q4_0, 8);      // Q4_0, IQ4_NL: 4 words of qs
LLMB_IL_GROUP(llmb_il8_q4_1, llmb_block_q4_1, 8);   // d|m, 4 words of qs
LLMB_IL_GROUP(llmb_il8_q5_0, llmb_rc_q5_0, 8);      // qh', 4 words of qs
LLMB_IL_GROUP(llmb_il8_q5_1, llmb_rc_q5_1, 8);      // d|m, qh', 4 words of qs
LLMB_IL_GROUP(llmb_il8_q8_0, llmb_rc_q8_0, 8);      // 8 words of values + 128
LLMB_IL_GROUP(llmb_il8_q4_K, llmb_block_q4_K, 8);   // d|dmin, 3 words of scales, 32 of qs
LLMB_IL_GROUP(llmb_il8_q5_K, llmb_rc_q5_K, 8);      // d|dmin, 3 words of scales, 8 of qh', 32 of qs
LLMB_IL_GROUP(llmb_il8_q6_K, llmb_rc_q6_K, 8);      // 48 words of values, 4 of scales
LLMB_IL_GROUP(llmb_il8_iq4_xs, llmb_block_iq4_xs, 8);   // d|scales_h, scales_l, 32 words of indices
LLMB_IL_GROUP(llmb_il8_q2_K, llmb_block_q2_K, 8);   // 4 words of scales, 16 of qs, d|dmin
LLMB_IL_GROUP(llmb_il8_q3_K, llmb_rc_q3_K, 8);      // 24 words of values, 3 of scales
// words of one block of a group of 8, for the types whose kernels walk the groups block by block
// (vecdot_il8.c, vecdot_amx.c); 0 for the others
static inline int llmb_il8_words(int type) {
    switch (type) {
    case LLMB_TYPE_Q4_0: case LLMB_TYPE_IQ4_NL: return (int)LLMB_IL_WORDS(llmb_rc_q4_0);
    case LLMB_TYPE_Q4_1: return (int)LLMB_IL_WORDS(llmb_block_q4_1);
    case LLMB_TYPE_Q5_0: return (int)LLMB_IL_WORDS(llmb_rc_q5_0);
    case LLMB_TYPE_Q5_1: return (int)LLMB_IL_WORDS(llmb_rc_q5_1);
    case LLMB_TYPE_Q8_0: return (int)LLMB_IL_WORDS(llmb_rc_q8_0);
    case LLMB_TYPE_IQ4_XS: return (int)LLMB_IL_WORDS(llmb_block_iq4_xs);
    default: return 0;
    }
}

// P > 0 where a group of G rows keeps its blocks' trailing bytes inline: after every P blocks' words (the last
// run fewer where P does not divide the blocks), the G tails of each of them; 0 where they all follow the group's
// last block. 1: Q4_0, Q5_0 and IQ4_NL in groups of 8, Q8_0 in groups of 16. 2: Q6_K in groups of 16, whose
// 32 bytes of d then fill one line per two super-blocks and keep each one's 52 lines of words on line
// boundaries. Read one token at a time from DRAM, a group's d apart were a second stream: Q4_0 read 0.82x
// of Q4_1's bytes/s (docs/engine-measurements.md#il8-inline-d); Q6_K inline ran 1.07x (docs/engine-measurements.md#q6i-inline-d)
static inline int llmb_il_inline_tail(int type, int G) {
    return G == 8 ? type == LLMB_TYPE_Q4_0 || type == LLMB_TYPE_Q5_0 || type == LLMB_TYPE_IQ4_NL
                  : G == 16 ? (type == LLMB_TYPE_Q8_0) + 2 * (type == LLMB_TYPE_Q6_K) : 0;
}
// Offsets in a group (nb blocks of wbytes of words and tbytes of tails, P = llmb_il_inline_tail) of block i's
// words and of its tails
static inline size_t llmb_il_words_at(int64_t i, size_t wbytes, size_t tbytes, int P) {
    if (!P) return (size_t)i * wbytes;
    return (size_t)(i / P) * (size_t)P * (wbytes + tbytes) + (size_t)(i % P) * wbytes;
}
static inline size_t llmb_il_tail_at(int64_t nb, int64_t i, size_t wbytes, size_t tbytes, int P) {
    if (!P) return (size_t)nb * wbytes + (size_t)i * tbytes;
    const int64_t run = i / P * P, in_run = nb - run < P ? nb - run : P;
    return (size_t)run * (wbytes + tbytes) + (size_t)in_run * wbytes + (size_t)(i % P) * tbytes;
}
// bytes from one block of a group of 8 to the next: its words, and its 8 d where they follow them
static inline size_t llmb_il8_stride(int type) {
    return (size_t)llmb_il8_words(type) * 32 + (llmb_il_inline_tail(type, 8) ? 16 : 0);
}

// groups of 16 (vecdot_avx512_k.c: AVX-512 VNNI)
LLMB_IL_GROUP(llmb_il16_q4_K, llmb_block_q4_K, 16);
LLMB_IL_GROUP(llmb_il16_q6_K, llmb_rc_q6_K, 16);
LLMB_IL_GROUP(llmb_il16_q8_0, llmb_rc_q8_0, 16);

#endif // LLMB_VECDOT_LAYOUT_H
