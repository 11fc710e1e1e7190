// quants.h — ggml's quantized block layouts (declared once, for the C core and the CUDA kernels),
// exact fp16/bf16 conversions, and the per-type table of row kernels (to_float, from_float) that
// drives dequantization and quantization. Block size and bytes per block live in the type traits
// (csrc/types.c, llmb_type_traits_get); this table adds only the kernels.
// Tested by csrc/tests/test_quants.c (every SIMD kernel against its scalar reference) and
// tests/test_quant.py (bit-exact against the gguf package and real GGUF files).
#ifndef LLMB_QUANTS_H
#define LLMB_QUANTS_H

#include <stdint.h>
#include <string.h>

#include "llmb.h"

#ifdef __cplusplus
#define LLMB_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
extern "C" {
#else
#define LLMB_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

// ---- block layouts (identical to ggml-common.h) ----

// ggml type ids of the formats handled here (the full list is csrc/types.c)
enum {
    LLMB_TYPE_F32 = 0, LLMB_TYPE_F16 = 1, LLMB_TYPE_Q4_0 = 2, LLMB_TYPE_Q4_1 = 3, LLMB_TYPE_Q5_0 = 6,
    LLMB_TYPE_Q5_1 = 7, LLMB_TYPE_Q8_0 = 8, LLMB_TYPE_Q2_K = 10, LLMB_TYPE_Q3_K = 11, LLMB_TYPE_Q4_K = 12,
    LLMB_TYPE_Q5_K = 13, LLMB_TYPE_Q6_K = 14, LLMB_TYPE_Q8_K = 15, LLMB_TYPE_IQ4_NL = 20, LLMB_TYPE_IQ4_XS = 23,
    LLMB_TYPE_BF16 = 30,
};

typedef uint16_t llmb_half;   // IEEE binary16 bits (ggml_half)

#define LLMB_QK 32            // elements per block of the legacy formats (Q4_0 .. Q8_0)
#define LLMB_QK_K 256         // elements per super-block of the K formats
#define LLMB_K_SCALE_SIZE 12  // bytes of packed 6-bit scales and mins in Q4_K and Q5_K

typedef struct {
    llmb_half d;                 // scale
    uint8_t qs[LLMB_QK / 2];     // 4-bit quants: element j in the low nibble of qs[j], j+16 in the high
} llmb_block_q4_0;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q4_0) == 18, "wrong q4_0 block size");

typedef struct {
    llmb_half d, m;              // scale and min
    uint8_t qs[LLMB_QK / 2];
} llmb_block_q4_1;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q4_1) == 20, "wrong q4_1 block size");

typedef struct {
    llmb_half d;
    uint8_t qh[4];               // fifth bit of element j in bit j (little-endian uint32)
    uint8_t qs[LLMB_QK / 2];     // low 4 bits, as in Q4_0
} llmb_block_q5_0;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q5_0) == 22, "wrong q5_0 block size");

typedef struct {
    llmb_half d, m;
    uint8_t qh[4];
    uint8_t qs[LLMB_QK / 2];
} llmb_block_q5_1;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q5_1) == 24, "wrong q5_1 block size");

typedef struct {
    llmb_half d;
    int8_t qs[LLMB_QK];
} llmb_block_q8_0;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q8_0) == 34, "wrong q8_0 block size");

// 16 sub-blocks of 16: x = d*(scales[j] & 0xF)*q - dmin*(scales[j] >> 4), q 2-bit
typedef struct {
    uint8_t scales[LLMB_QK_K / 16];   // 4-bit scale (low nibble) and min (high nibble) of sub-block j
    uint8_t qs[LLMB_QK_K / 4];   // per 128 elements: 32 bytes, element 32s + l in bits 2s..2s+1 of byte l
    llmb_half d, dmin;
} llmb_block_q2_K;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q2_K) == 84, "wrong q2_K block size");

// 16 sub-blocks of 16: x = d*(sc[j] - 32)*(q - 4*!h), q 2-bit as in Q2_K, h its bit of hmask, sc 6-bit:
// low 4 bits in the nibbles of scales[0..7] (j < 8: low nibble of scales[j], else high of scales[j-8]),
// high 2 bits in bits 2(j/4).. of scales[8 + j%4]
typedef struct {
    uint8_t hmask[LLMB_QK_K / 8];   // element 32b + l: bit b of hmask[l]
    uint8_t qs[LLMB_QK_K / 4];
    uint8_t scales[12];
    llmb_half d;
} llmb_block_q3_K;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q3_K) == 110, "wrong q3_K block size");

// 8 sub-blocks of 32: x = d*sc[j]*q - dmin*m[j], sc and m 6-bit packed in `scales`
typedef struct {
    llmb_half d, dmin;
    uint8_t scales[LLMB_K_SCALE_SIZE];
    uint8_t qs[LLMB_QK_K / 2];   // per 64 elements: 32 bytes, low nibbles then high nibbles
} llmb_block_q4_K;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q4_K) == 144, "wrong q4_K block size");

typedef struct {
    llmb_half d, dmin;
    uint8_t scales[LLMB_K_SCALE_SIZE];
    uint8_t qh[LLMB_QK_K / 8];   // fifth bits: sub-block j uses bit j of qh[l]
    uint8_t qs[LLMB_QK_K / 2];
} llmb_block_q5_K;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q5_K) == 176, "wrong q5_K block size");

// 16 sub-blocks of 16: x = d*scales[j]*(q - 32), q 6-bit
typedef struct {
    uint8_t ql[LLMB_QK_K / 2];   // low 4 bits
    uint8_t qh[LLMB_QK_K / 4];   // high 2 bits
    int8_t scales[LLMB_QK_K / 16];
    llmb_half d;
} llmb_block_q6_K;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q6_K) == 210, "wrong q6_K block size");

// the 16 values of the non-linear 4-bit formats IQ4_NL and IQ4_XS (ggml's kvalues_iq4nl)
static const int8_t llmb_kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                              1,    13,   25,  38,  53,  69,  89,  113};

// x = d*kvalues[q], q 4-bit: element j in the low nibble of qs[j], j+16 in the high (as Q4_0)
typedef struct {
    llmb_half d;
    uint8_t qs[LLMB_QK / 2];
} llmb_block_iq4_nl;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq4_nl) == 18, "wrong iq4_nl block size");

// 8 sub-blocks of 32 as IQ4_NL blocks: x = d*(ls[j] - 32)*kvalues[q], ls 6-bit: low 4 bits in nibble j%2 of
// scales_l[j/2], high 2 bits in bits 2j..2j+1 of scales_h
typedef struct {
    llmb_half d;
    uint16_t scales_h;
    uint8_t scales_l[LLMB_QK_K / 64];
    uint8_t qs[LLMB_QK_K / 2];   // per sub-block 16 bytes, laid out as an IQ4_NL block's qs
} llmb_block_iq4_xs;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq4_xs) == 136, "wrong iq4_xs block size");

// ---- ternary, binary and FP4 formats (csrc/quants_tq.c: dequantization and reference dots) ----

enum { LLMB_TYPE_TQ1_0 = 34, LLMB_TYPE_TQ2_0 = 35, LLMB_TYPE_MXFP4 = 39, LLMB_TYPE_NVFP4 = 40, LLMB_TYPE_Q1_0 = 41 };

// Q1_0 (binary): x = +d where bit j % 8 of qs[j / 8] is set, else -d
#define LLMB_QK1_0 128
typedef struct {
    llmb_half d;
    uint8_t qs[LLMB_QK1_0 / 8];
} llmb_block_q1_0;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q1_0) == 18, "wrong q1_0 block size");

// x = d*(t - 1), t in 0..2 a base-3 digit: byte b holds its digits at the top, digit k = (uint8_t)(b*3^k)*3 >> 8
// (the byte is 256 b' / 243 rounded up, b' the digits' number). qs[0..31]: digits 0..4 of byte m are elements
// 32k + m; qs[32..47]: digits 0..4 of byte 32 + m are elements 160 + 16k + m; qh[0..3]: digits 0..3 of byte j
// are elements 240 + 4k + j
typedef struct {
    uint8_t qs[(LLMB_QK_K - 4 * LLMB_QK_K / 64) / 5];   // 48 bytes, 5 digits each
    uint8_t qh[LLMB_QK_K / 64];                         // 4 bytes, 4 digits each
    llmb_half d;
} llmb_block_tq1_0;
LLMB_STATIC_ASSERT(sizeof(llmb_block_tq1_0) == 54, "wrong tq1_0 block size");

// x = d*(t - 1), t 2-bit: per 128 elements 32 bytes, element 128 h + 32 l + m in bits 2 l of qs[32 h + m]
typedef struct {
    uint8_t qs[LLMB_QK_K / 4];
    llmb_half d;
} llmb_block_tq2_0;
LLMB_STATIC_ASSERT(sizeof(llmb_block_tq2_0) == 66, "wrong tq2_0 block size");

// twice the 16 values of E2M1 (FP4: sign, 2 exponent bits, 1 mantissa bit), ggml's kvalues_mxfp4; the scales
// below are decoded at half their value to make up for it
static const int8_t llmb_kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// OCP microscaling MXFP4: x = 2^(e - 127) * e2m1[q] = llmb_e8m0_half(e) * kvalues[q], q 4-bit laid out as Q4_0's
#define LLMB_QK_MXFP4 32
typedef struct {
    uint8_t e;                       // E8M0 scale: a biased power of two
    uint8_t qs[LLMB_QK_MXFP4 / 2];
} llmb_block_mxfp4;
LLMB_STATIC_ASSERT(sizeof(llmb_block_mxfp4) == 17, "wrong mxfp4 block size");

// NVIDIA NVFP4: 4 sub-blocks of 16, x = llmb_ue4m3_half(d[s]) * kvalues[q]; sub-block s: element j (< 8) in the
// low nibble of qs[8 s + j], j + 8 in its high nibble
#define LLMB_QK_NVFP4 64
#define LLMB_QK_NVFP4_SUB 16
typedef struct {
    uint8_t d[LLMB_QK_NVFP4 / LLMB_QK_NVFP4_SUB];   // UE4M3 scales (unsigned, 4 exponent bits of bias 7, 3 mantissa bits)
    uint8_t qs[LLMB_QK_NVFP4 / 2];
} llmb_block_nvfp4;
LLMB_STATIC_ASSERT(sizeof(llmb_block_nvfp4) == 36, "wrong nvfp4 block size");

// half of 2^(e - 127) (ggml_e8m0_to_fp32_half): the float with exponent e - 1, a subnormal for e < 2; finite for every e
static inline float llmb_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// half of the UE4M3 value of x (ggml_ue4m3_to_fp32): exponent bits 3..6 (bias 7), mantissa bits 0..2, bit 7
// ignored; 0 and 0x7F (its NaN) read as 0. Built from bits: every value is exact in float.
static inline float llmb_ue4m3_half(uint8_t x) {
    const uint32_t e = (x >> 3) & 0xFu, m = x & 7u;
    if (x == 0x7F) return 0.0f;
    if (e == 0) return (float)m * 0x1p-10f;
    const uint32_t bits = (e + 127u - 8u) << 23 | m << 20;   // (1 + m/8) 2^(e - 7) / 2
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// Rows of n elements (a multiple of the block size): dequantization (llmb_quant_traits.to_float_ref) and the
// reference dot products against the activations llama.cpp pairs them with (Q8_K for TQ1_0 / TQ2_0, Q8_0 for
// MXFP4 / NVFP4 / Q1_0), ggml's ggml_vec_dot_<type>_q8_<K|0>_generic loops operation for operation
void llmb_dequant_tq1_0_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_tq2_0_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_mxfp4_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_nvfp4_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_q1_0_ref(const void *vx, float *y, int64_t n);
void llmb_dot_tq1_0_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_tq2_0_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_mxfp4_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_nvfp4_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_q1_0_ref(int64_t n, float *s, const void *w, const void *x);

// the 6-bit scale of sub-block j (0..15) from Q3_K's 12 packed bytes, minus 32
static inline int llmb_q3_K_scale(int j, const uint8_t *s) {
    const int lo = j < 8 ? s[j] & 0xF : s[j - 8] >> 4, hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

// the 6-bit scale of sub-block j (0..7) of an IQ4_XS block, minus 32
static inline int llmb_iq4_xs_scale(int j, const llmb_block_iq4_xs *b) {
    return (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
}

// ---- the I-quants: groups of 8 (IQ3: 4) values are entries of a fixed lattice (csrc/iq_grids.c) ----
enum { LLMB_TYPE_IQ2_XXS = 16, LLMB_TYPE_IQ2_XS = 17, LLMB_TYPE_IQ3_XXS = 18, LLMB_TYPE_IQ1_S = 19,
       LLMB_TYPE_IQ3_S = 21, LLMB_TYPE_IQ2_S = 22, LLMB_TYPE_IQ1_M = 29 };
// Each superblock of 256 has 8 sub-blocks of 32; a sub-block scale ls is odd (2 s + 1, s 3 or 4 bits).
// Signs: 8 bits per group of 8 (IQ2_S, IQ3_S), or 7 stored bits whose parity gives the eighth (llmb_iq_signs7).
// The lattices, one byte per element: IQ2 values 8, 25, 43; IQ3_XXS 4..62; IQ3_S 1..15; IQ1 -1, 0, 1
extern const uint8_t llmb_iq2xxs_grid[256][8], llmb_iq2xs_grid[512][8], llmb_iq2s_grid[1024][8];
extern const uint8_t llmb_iq3xxs_grid[256][4], llmb_iq3s_grid[512][4];
extern const int8_t llmb_iq1s_grid[2048][8];

// IQ2_XXS: x = d (2 s + 1) / 8 * grid * sign. Per sub-block two little-endian uint32: the first holds 4 grid
// indices (one byte per group of 8), the second 4 x 7 sign bits (group l in bits 7 l..7 l+6) and s in bits 28..31
typedef struct {
    llmb_half d;
    uint16_t qs[LLMB_QK_K / 8];
} llmb_block_iq2_xxs;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq2_xxs) == 66, "wrong iq2_xxs block size");

// IQ2_XS: per group of 8 one uint16: 9-bit grid index, 7 sign bits above it; s per 16 values: sub-block j's
// first half in the low nibble of scales[j], its second half in the high nibble. x = d (2 s + 1) / 8 * grid * sign
typedef struct {
    llmb_half d;
    uint16_t qs[LLMB_QK_K / 8];
    uint8_t scales[LLMB_QK_K / 32];
} llmb_block_iq2_xs;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq2_xs) == 74, "wrong iq2_xs block size");

// IQ2_S: 10-bit grid indices, low 8 bits in qs[0..31], bits 8-9 of group l of sub-block j in bits 2 l.. of qh[j];
// 8 sign bits per group in qs[32..63]; scales as IQ2_XS
typedef struct {
    llmb_half d;
    uint8_t qs[LLMB_QK_K / 4];
    uint8_t qh[LLMB_QK_K / 32];
    uint8_t scales[LLMB_QK_K / 32];
} llmb_block_iq2_s;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq2_s) == 82, "wrong iq2_s block size");

// IQ3_XXS: groups of 4 values, one grid index byte each in qs[0..63]; then per sub-block a little-endian uint32
// as IQ2_XXS's second word (4 x 7 sign bits, each for 8 values, and s). x = d (2 s + 1) / 4 * grid * sign
typedef struct {
    llmb_half d;
    uint8_t qs[3 * LLMB_QK_K / 8];
} llmb_block_iq3_xxs;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq3_xxs) == 98, "wrong iq3_xxs block size");

// IQ3_S: 9-bit grid indices per 4 values, low 8 bits in qs, bit 8 of index k of sub-block j in bit k of qh[j];
// 8 sign bits per 8 values; s of sub-block j in nibble j % 2 of scales[j / 2]. x = d (2 s + 1) * grid * sign
typedef struct {
    llmb_half d;
    uint8_t qs[LLMB_QK_K / 4];
    uint8_t qh[LLMB_QK_K / 32];
    uint8_t signs[LLMB_QK_K / 8];
    uint8_t scales[LLMB_QK_K / 64];
} llmb_block_iq3_s;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq3_s) == 110, "wrong iq3_s block size");

// IQ1_S: 11-bit indices into llmb_iq1s_grid per 8 values: low 8 bits in qs, bits 8-10 of group l of sub-block j
// in bits 3 l.. of qh[j]; qh[j] bits 12-14 hold s and bit 15 the sign of the shift.
// x = d (2 s + 1) (grid +- LLMB_IQ1_DELTA)
#define LLMB_IQ1_DELTA 0.125f
typedef struct {
    llmb_half d;
    uint8_t qs[LLMB_QK_K / 8];
    uint16_t qh[LLMB_QK_K / 32];
} llmb_block_iq1_s;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq1_s) == 50, "wrong iq1_s block size");

// IQ1_M: indices as IQ1_S, bits 8-10 of group l of sub-block j in nibble l % 2 of qh[2 j + l / 2], whose bit 3 is
// the group's shift sign; 3-bit s per 16 values, 4 to each little-endian uint16 of scales (bits 0..11), whose top
// nibbles together are the fp16 d. x = d (2 s + 1) (grid +- LLMB_IQ1_DELTA)
typedef struct {
    uint8_t qs[LLMB_QK_K / 8];
    uint8_t qh[LLMB_QK_K / 16];
    uint8_t scales[LLMB_QK_K / 32];
} llmb_block_iq1_m;
LLMB_STATIC_ASSERT(sizeof(llmb_block_iq1_m) == 56, "wrong iq1_m block size");

// the 8 sign bits of a group from its 7 stored ones: the eighth makes the count of set bits even (ksigns_iq2xs)
static inline uint8_t llmb_iq_signs7(uint32_t s7) {
    return (uint8_t)((s7 & 127) | (uint32_t)__builtin_parity(s7 & 127) << 7);
}

// IQ1_M's d, from the top nibbles of its 4 scale words
static inline llmb_half llmb_iq1_m_d(const llmb_block_iq1_m *b) {
    uint16_t sc[4];
    memcpy(sc, b->scales, sizeof sc);
    return (llmb_half)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

// Rows of n elements (a multiple of 256): dequantization, and the reference dot products against Q8_K
// activations, ggml's ggml_vec_dot_<type>_q8_K_generic loops operation for operation (csrc/quants_iq.c)
void llmb_dequant_iq2_xxs_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_iq2_xs_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_iq2_s_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_iq3_xxs_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_iq3_s_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_iq1_s_ref(const void *vx, float *y, int64_t n);
void llmb_dequant_iq1_m_ref(const void *vx, float *y, int64_t n);
void llmb_dot_iq2_xxs_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_iq2_xs_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_iq2_s_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_iq3_xxs_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_iq3_s_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_iq1_s_ref(int64_t n, float *s, const void *w, const void *x);
void llmb_dot_iq1_m_ref(int64_t n, float *s, const void *w, const void *x);

// activations for integer dot products: x = d*q, bsums[j] = sum of q over elements 16j..16j+15
typedef struct {
    float d;
    int8_t qs[LLMB_QK_K];
    int16_t bsums[LLMB_QK_K / 16];
} llmb_block_q8_K;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q8_K) == 292, "wrong q8_K block size");

// the 6-bit scale and min of sub-block j (0..7) from Q4_K/Q5_K's 12 packed bytes
static inline void llmb_get_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

// ---- exact conversions ----

// binary16 -> float32, exact. NaN payloads are kept (a signalling NaN stays signalling), as NumPy does.
static inline float llmb_fp16_to_fp32(llmb_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, em = h & 0x7fffu, bits;
    float f;
    if (em >= 0x7c00) {                      // Inf, NaN
        bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13);
    } else if (em >= 0x0400) {               // normal: rebias the exponent from 15 to 127
        bits = sign | ((em << 13) + ((127u - 15u) << 23));
    } else {                                 // zero, subnormal: em * 2^-24 is exact in float32
        f = (float)em * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    memcpy(&f, &bits, 4);
    return f;
}

// float32 -> binary16, round to nearest even; overflow gives Inf. A NaN keeps its top 10 payload
// bits (made nonzero), exactly like NumPy's astype(np.float16).
static inline llmb_half llmb_fp32_to_fp16(float x) {
    uint32_t f;
    memcpy(&f, &x, 4);
    uint32_t sign = (f >> 16) & 0x8000u, a = f & 0x7fffffffu;
    if (a > 0x7f800000u) {                   // NaN
        uint32_t m = (a >> 13) & 0x3ffu;
        return (llmb_half)(sign | 0x7c00u | (m ? m : 1u));
    }
    if (a >= 0x477ff000u) return (llmb_half)(sign | 0x7c00u);   // >= 65520 rounds to Inf
    if (a >= 0x38800000u) {                  // normal half (>= 2^-14)
        uint32_t r = a - ((127u - 15u) << 23);
        return (llmb_half)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    if (a <= 0x33000000u) return (llmb_half)sign;              // <= 2^-25 rounds to zero
    // subnormal half: units of 2^-24; the value is m * 2^(e-150), so shift m right by 126-e
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e, q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    q += (rem > half) || (rem == half && (q & 1u));
    return (llmb_half)(sign | q);
}

// float32 -> bfloat16, round to nearest even; NaN is made quiet (ggml_compute_fp32_to_bf16).
static inline uint16_t llmb_fp32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float llmb_bf16_to_fp32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- the kernel table ----

// Row kernels: n elements (a multiple of the type's block size), blocks packed back to back.
// Quantizing to a block format needs finite input (llmb_quantize checks); F16/BF16 take anything.
typedef void (*llmb_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*llmb_from_float_fn)(const float *src, void *dst, int64_t n);

typedef struct {
    llmb_to_float_fn to_float;          // fastest kernel for the active SIMD level
    llmb_from_float_fn from_float;      // NULL if the type cannot be quantized to
    llmb_to_float_fn to_float_ref;      // scalar reference (the definition)
    llmb_from_float_fn from_float_ref;
} llmb_quant_traits;

// Kernels for `type_id` at the SIMD level active now (llmb_simd_active); NULL for a type that
// cannot be dequantized.
LLMB_API const llmb_quant_traits *llmb_quant_traits_get(int type_id);

// Whole tensors of nrows x ncols elements (ncols a multiple of the block size; rows packed back to
// back), split over `nthreads` OpenMP threads (0: the OpenMP default) when large enough.
// LLMB_E_UNSUPPORTED for a type we cannot convert, LLMB_E_ARG for bad sizes or misaligned buffers
// (src and dst must be 4-byte aligned).
LLMB_API llmb_status llmb_dequantize(int type, const void *src, float *dst, int64_t nrows, int64_t ncols,
                                     int nthreads);
LLMB_API llmb_status llmb_quantize(int type, const float *src, void *dst, int64_t nrows, int64_t ncols,
                                   int nthreads);
// llmb_quantize with an importance matrix: imatrix[0..ncols-1] weighs each column's squared error (llama.cpp's
// imatrix entry: the mean squared activation seen by that input), for every row, as llama.cpp's
// quantize_<type>(..., quant_weights) does for Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL and IQ4_XS; other
// types (and imatrix NULL) quantize as llmb_quantize. The weights must be finite (LLMB_E_ARG otherwise).
LLMB_API llmb_status llmb_quantize_imatrix(int type, const float *src, void *dst, int64_t nrows, int64_t ncols,
                                           const float *imatrix, int nthreads);

// Internal: the K quantizers with their costly stage, the per-sub-block scale search, pluggable
// (quants_simd.c supplies vectorized searches that give the same results as the scalar ones).
// Q4_K/Q5_K: for each of the 8 sub-blocks of 32 of x (weights w), L in 0..nmax, scale and min
// (ggml's make_qkx2_quants, grid nmax + rmin + 0.1*is for is = 0..nstep).
typedef void (*llmb_fit_k_fn)(const float *x, const float *w, int nmax, float rmin, int nstep, uint8_t *L,
                              float *scales, float *mins);
// Q6_K: for each of the 16 sub-blocks of 16 of x, L in 0..63 and a signed scale (make_qx_quants).
typedef void (*llmb_fit_q6_K_fn)(const float *x, int8_t *L, float *scales);
void llmb_fit_k_ref(const float *x, const float *w, int nmax, float rmin, int nstep, uint8_t *L, float *scales,
                    float *mins);
void llmb_fit_q6_K_ref(const float *x, int8_t *L, float *scales);
void llmb_quant_q4_K_with(const float *x, void *y, int64_t n, llmb_fit_k_fn fit);
void llmb_quant_q5_K_with(const float *x, void *y, int64_t n, llmb_fit_k_fn fit);
void llmb_quant_q6_K_with(const float *x, void *y, int64_t n, llmb_fit_q6_K_fn fit);

// Internal (quants_simd.c): overwrite the entries of `table` (indexed by type id) that have a
// kernel for SIMD level `lvl`; levels this build or architecture lacks leave it unchanged.
void llmb_quant_simd_install(llmb_simd_level lvl, llmb_quant_traits *table);

#ifdef __cplusplus
}
#endif
#endif // LLMB_QUANTS_H
