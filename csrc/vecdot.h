// vecdot.h — the decode kernels of the CPU engine: dot products between one weight row of a ggml
// type and one activation row quantized once per token to that type's `vec_dot_type` (as ggml):
//   Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4, NVFP4 -> Q8_0      Q4_1, Q5_1 -> Q8_1 (below)
//   Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_XS, TQ1_0, TQ2_0, IQ1_S .. IQ3_S (the I-quants) -> Q8_K
//   F32, F16, BF16   -> F32 (the weight is converted on the fly)
// plus a tile kernel for prefill (nr <= 4 weight rows x nc <= 4 tokens, loads reused) and, where a
// level has one, a panel kernel (nr <= its panel_r rows decoded once, then any number of tokens;
// llmb_vec_dot_matmul uses it from LLMB_PANEL_MIN_TOKENS tokens) and a small-batch kernel for
// batched decode (any number of rows streamed once, each decoded block used for 2..LLMB_SMALL_TOKENS
// tokens; llmb_vec_dot_matmul prefers it to tiles and panels at those token counts). Weights repacked
// at load into row-interleaved groups (below) run one kernel for every token count.
//
// Batch invariance: at a given SIMD level the value for (row r, token t) is bit-identical whether
// it comes from llmb_vec_dot_get(...), from llmb_gemm_tile at any nr, nc and tile position, or from a
// panel or small-batch kernel inside llmb_vec_dot_matmul (each runs the very same per-output operation sequence). The x86 levels (AVX2, AVX-512 with or
// without VNNI) all give identical results too: the integer dots are exact and the float
// accumulation is the same. SIMD results differ from the scalar reference (ggml's reference loops,
// different summation order) within the tolerances stated in csrc/tests/test_vecdot.c.
//
// Calling pattern (from an OpenMP loop over row tiles): quantize each token's x once with
// llmb_vec_dot_quantize_x into a caller buffer of llmb_vec_dot_row_bytes(wtype, n) bytes, then call
// the kernels; they never allocate, never fail and touch nothing but their arguments.
// n must be a multiple of the weight type's block size (any n >= 0 for F32/F16/BF16).
#ifndef LLMB_VECDOT_H
#define LLMB_VECDOT_H

#include <stddef.h>
#include <stdint.h>

#include "quants.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LLMB_TYPE_Q8_1 9
// BF16 rows against activations rounded to BF16, in pairs as the vdpbf16ps instruction multiplies them
// (AVX-512 BF16: twice the float multiply-adds of vfmadd per instruction). Internal to the engine (never
// in a file): float matrices are converted to it at load when the user asks for BF16 products
// (llmb_vec_dot_to_bf16). Its activation format is itself: n BF16 values (n a multiple of 32), rounded
// from float to nearest even by llmb_fp32_to_bf16 (quants.h), as the weights are.
// Per output: 16 lane sums s_l from +0; for each 32 values i.. of the row, lane l adds the products of
// its pair odd element first, s_l = r(s_l + w[i+2l+1] x[i+2l+1]), then s_l = r(s_l + w[i+2l] x[i+2l]),
// each sum of the exact product rounded once to float (round to nearest even), denormal inputs read as
// zero and denormal results flushed to zero, as vdpbf16ps does (checked bit for bit against it); then the
// 16 lanes summed as hsum: a_j = s_j + s_j+8, b_j = a_j + a_j+4, c_j = b_j + b_j+2, c_0 + c_1. The scalar
// reference and the AVX-512 BF16 kernels give the same bits.
#define LLMB_TYPE_BF16_DP LLMB_TYPE_COUNT
#define LLMB_VEC_DOT_TYPES (LLMB_TYPE_COUNT + 1)   // weight type ids of the kernel tables
#define LLMB_TILE_MAX_R 4   // weight rows per llmb_gemm_tile call
#define LLMB_TILE_MAX_C 4   // tokens per llmb_gemm_tile call
#define LLMB_PANEL_R 4      // weight rows per panel call unless the kernel sets panel_r (float: 8; Q4_K/Q5_K/Q6_K: 16)
#define LLMB_PANEL_TOKENS 64   // tokens per panel call: their activations stay in L2 while the rows are reused
#define LLMB_PANEL_X_BYTES (768 * 1024)   // up to 4x as many while their activations take at most this
// Fewest tokens for panels: decoding 4 rows per call costs more than it saves below (docs/engine-measurements.md#panel-min-tokens)
#define LLMB_PANEL_MIN_TOKENS 3
// Most tokens of the small-batch kernel (batched decode): every weight row streams once per call and
// each of its decoded super-blocks serves all the tokens; used from 2 tokens where the level has one
#define LLMB_SMALL_TOKENS 8

// Activations of Q4_1/Q5_1 dot products: x = d*q, s = d*sum(q). Internal to the engine (never in a
// file); float d and s as in ggml's original block_q8_1, whose 40 bytes are still gguf's size for
// type 9 (today's ggml stores d and s as fp16 in 36 bytes).
typedef struct {
    float d;
    float s;
    int8_t qs[LLMB_QK];
} llmb_block_q8_1;
LLMB_STATIC_ASSERT(sizeof(llmb_block_q8_1) == 40, "wrong q8_1 block size");

// *s = dot(weight row w_row of n elements, activation row x_row in the vec_dot_type)
typedef void (*llmb_vec_dot_fn)(int64_t n, float *s, const void *w_row, const void *x_row);

// ggml type id of the activation format for weights of `wtype`; -1 if unsupported
LLMB_API int llmb_vec_dot_type(int wtype);
// bytes of one activation row of n elements in that format; 0 if unsupported or n is not a multiple
LLMB_API size_t llmb_vec_dot_row_bytes(int wtype, int64_t n);
// quantize one float row x (n elements, finite) to the activation format of `wtype` (fastest kernel)
LLMB_API void llmb_vec_dot_quantize_x(int wtype, const float *x, void *xq, int64_t n);
// the scalar reference quantizer of the same format (identical bytes; for tests)
LLMB_API void llmb_vec_dot_quantize_x_ref(int wtype, const float *x, void *xq, int64_t n);

// the dot product kernel for the SIMD level active now (llmb_simd_active); NULL if unsupported
LLMB_API llmb_vec_dot_fn llmb_vec_dot_get(int wtype);
// the scalar reference (ggml's ggml_vec_dot_*_q8_* reference loops); NULL if unsupported
LLMB_API llmb_vec_dot_fn llmb_vec_dot_ref(int wtype);

// y[c*ldy + r] = dot(row r of w, token c of x) for r < nr <= LLMB_TILE_MAX_R, c < nc <= LLMB_TILE_MAX_C.
// Row r starts at (char *)w + r*w_stride, token c at (char *)x + c*x_stride (quantized as above).
// Bit-identical, output by output, to llmb_vec_dot_get(wtype) at the same SIMD level.
// Unsupported types, nr or nc out of range are programmer errors (assert).
LLMB_API void llmb_gemm_tile(int wtype, int64_t n, const void *w, size_t w_stride, int nr, const void *x,
                             size_t x_stride, int nc, float *y, int64_t ldy);

// Y[t*ldy + r] = dot(row r, token t) for r < nrows, t < ntok: row tiles of 4 split over `nthreads`
// OpenMP threads (0: the OpenMP default), token tiles of 4; at 2..LLMB_SMALL_TOKENS tokens, where the
// level has a small-batch kernel for the type, each thread streams a contiguous range of rows through
// it once; else from LLMB_PANEL_MIN_TOKENS tokens, where the level has a panel kernel for the type,
// each thread takes a contiguous range of row panels and runs them for LLMB_PANEL_TOKENS tokens at a
// time, up to 4x that while their activations fit LLMB_PANEL_X_BYTES (rows decoded once per panel
// call). One token: where the level has a decode kernel for the type, each thread's contiguous range
// of rows in one call of it (one sequential stream of weights); else single dots row after row, which
// keeps the weight reads one sequential stream (from DRAM the 4 interleaved streams of a 4x1 tile are
// up to 1.5x slower), except float weights of n >= 2048: 4x1 tiles, so the float x is loaded once
// for 4 rows (1.1x at n=3072 to 1.6x at 8192). Same bits either way. xq holds ntok quantized rows x_stride bytes apart.
LLMB_API void llmb_vec_dot_matmul(int wtype, int64_t n, const void *w, size_t w_stride, int64_t nrows,
                                  const void *xq, size_t x_stride, int ntok, float *y, int64_t ldy, int nthreads);

// Several products of the same activations in one parallel region (no barrier between them): part i
// is llmb_vec_dot_matmul(parts[i].wtype, n, parts[i].w, ..., xq, x_stride, ntok, parts[i].y, ...),
// each split over the threads as there (same bits). The types must share one vec_dot_type.
typedef struct {
    int wtype;
    const void *w;
    size_t w_stride;
    int64_t nrows;
    float *y;
    int64_t ldy;
    int il;   // 0: plain rows; else w is interleaved in groups of `il` rows (llmb_vec_dot_repack)
    int stream;   // 1: w comes from DRAM at every step, not from the caches (llmb_cpu_weight.stream): the
                  // one-token interleaved kernels then prefetch further ahead too (simd_x86.h, pf_line)
} llmb_matmul_part;
LLMB_API void llmb_vec_dot_matmul_parts(int64_t n, const llmb_matmul_part *parts, int nparts, const void *xq,
                                        size_t x_stride, int ntok, int nthreads);

// dst = nrows rows of n values of a float type (F32, F16, BF16; row_bytes apart) as LLMB_TYPE_BF16_DP rows
// (BF16 values, rounded from F32 / F16 by llmb_fp32_to_bf16); 0 for another type or n not a multiple of 32
LLMB_API int llmb_vec_dot_to_bf16(int wtype, int64_t n, const void *w, size_t row_bytes, int64_t nrows, uint16_t *dst);

// ---- row-interleaved weights, repacked once at load (the layouts as types: vecdot_layout.h) ----
// Where the active SIMD level has a kernel for it, a matrix of `wtype` rows can be repacked into groups
// of llmb_vec_dot_interleave(wtype) rows whose super-blocks are interleaved 32-bit word by word: group g,
// super-block i holds word k of row r (of that super-block's block) at word k * G + r, so each vector
// load brings the same word of G rows, one per lane, and one sequential stream feeds all G rows (the
// plain layout needs G streams or one reduction per row); a block's bytes past its last whole word
// (Q6_K's d) follow all the group's words, block by block, row by row; Q6_K's blocks are recoded first
// (values whole, in the kernel's reading order: vecdot.c, q6_K_recode), Q8_0's too (values + 128,
// then d), Q4_0's, IQ4_NL's, Q5_0's and Q5_1's too (vecdot.c, legacy_recode), Q3_K's too (values whole in 3 bits,
// then the scales and d: vecdot.c, q3_K_recode), Q5_K's fifth bits too (vecdot.c, q5_K_recode). Same bytes in all: group g starts at
// g * G * row_bytes. Products over it (llmb_matmul_part.il
// = G) give the plain layout's bits; should the active level be lowered later to one without the kernel,
// they run at the best level this CPU has.
// rows per group for wtype at the active level; 0 where it has no interleaved kernel
LLMB_API int llmb_vec_dot_interleave(int wtype);
// dst = the nrows rows of n elements at w (row_bytes apart) interleaved in groups of G rows; nrows must
// be a multiple of G and dst hold nrows * row_bytes bytes (programmer errors otherwise: assert)
LLMB_API void llmb_vec_dot_repack(int wtype, int64_t n, const void *w, int64_t nrows, int G, void *dst);
// the inverse: plain rows back from the interleaved layout (tests)
LLMB_API void llmb_vec_dot_unpack(int wtype, int64_t n, const void *src, int64_t nrows, int G, void *w);

// 1 if this CPU has `feature` ("avx512vnni", "avxvnni", "avx512bf16", "dotprod", ...), read at run time
LLMB_API int llmb_cpu_has(const char *feature);

// ---- internal: the per-level kernel table ----

typedef void (*llmb_gemm_tile_fn)(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                                  int nc, float *y, int64_t ldy);
// y[c*ldy + r] for r < nr <= the kernel's panel_r, c < nc (any nc >= 1): same bits as the single dot
typedef llmb_gemm_tile_fn llmb_gemm_panel_fn;
// a tile kernel over interleaved weights; stream as llmb_matmul_part.stream (prefetching only: same bits)
typedef void (*llmb_gemm_il_fn)(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                                int nc, float *y, int64_t ldy, int stream);
typedef struct {
    llmb_vec_dot_fn dot;
    llmb_gemm_tile_fn tile;
    llmb_gemm_panel_fn panel;   // NULL: llmb_vec_dot_matmul runs tiles
    int panel_r;                // rows per panel call (0: LLMB_PANEL_R)
    llmb_gemm_tile_fn small;    // nr rows (any) x nc tokens (2..LLMB_SMALL_TOKENS); NULL: tiles or panels
    llmb_gemm_tile_fn decode;   // nr rows (any) x 1 token (nc, x_stride, ldy unused); NULL: dots or 4x1 tiles
    llmb_gemm_il_fn il;         // interleaved weights (groups of il_r rows): nr (a multiple of il_r) x nc (any)
    int il_r;                   // rows per group of `il` (0: none)
    void (*quant_x)(const float *x, void *xq, int64_t n);   // Q8_1 activations at this level (NULL: the reference)
} llmb_vec_dot_kernels;

// Which kernel runs. llmb_vec_dot_matmul (vecdot.c, matmul_share) takes, for a matrix and a token count,
// the first of: il where the weights were repacked (any token count); small at 2..LLMB_SMALL_TOKENS
// tokens; panel from LLMB_PANEL_MIN_TOKENS tokens; decode at one token; else tiles (dots row by row at one
// token). What each level installs (vecdot_simd.c; every entry it leaves keeps the scalar reference, and
// the AVX-512 level starts from the AVX2 table):
//
//   level (file)                       kind        types
//   scalar (vecdot.c)                  dot, tile   all 27 weight types (quants_tq.c, quants_iq.c: the newer ones)
//   AVX2 (vecdot_x86.c)                dot, tile   F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K
//                                                  Q8_K IQ4_NL IQ4_XS
//                                      quant_x     Q4_1 Q5_1 (Q8_1 activations)
//        (vecdot_tq.c)                 dot, tile   TQ1_0 TQ2_0 MXFP4 NVFP4 (also the AVX-512 level's)
//        (vecdot_iq.c)                 dot, tile, panel (4)   IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S IQ1_S IQ1_M
//                                                  (also the AVX-512 level's)
//        (vecdot_il8.c)                il (8)      Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL IQ4_XS Q2_K Q3_K
//                                                  Q4_K Q5_K Q6_K (Q5_K not at the VNNI level)
//   AVX-512 with VNNI (vecdot_x86.c)   dot, tile   the 16 above, vpdpbusd on 256 bits (the AVX2 bits)
//        (vecdot_avx512_k.c)           panel (16)  Q4_K Q5_K Q6_K
//                                      il (16)     Q4_K Q6_K Q8_0
//        (vecdot_il8.c)                il (8)      Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_XS
//     + AMX-INT8 (vecdot_amx.c)        il (8)      Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL IQ4_XS from 16 tokens (fewer: the
//                                                  vecdot_il8.c kernels it wraps)
//        (vecdot_avx512_float.c)       panel (8)   F32 F16 BF16
//                                      decode      F32 F16 BF16
//        (vecdot_avx512_decode.c)      small       Q4_K Q5_K Q6_K
//                                      decode      Q4_K Q5_K Q6_K
//     + AVX-512 BF16 (vecdot_bf16.c)   dot, tile, panel (8), decode   BF16_DP
//   AVX-512 without VNNI               the AVX2 table
//   NEON (vecdot_neon.c)               dot, tile   Q4_0 Q8_0 Q4_K Q6_K F16
// (n): rows per panel call or per interleaved group. Every kernel of a type gives the dot's bits.
//
// Internal (vecdot_simd.c): overwrite the entries of `table` (indexed by weight type) that have a
// kernel for SIMD level `lvl` on this CPU; the rest keep the scalar reference.
void llmb_vec_dot_simd_install(llmb_simd_level lvl, llmb_vec_dot_kernels *table);
// Internal (vecdot_il8.c): the interleaved kernels of Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL and IQ4_XS (groups of 8 rows)
// at AVX2 and AVX-512 VNNI, and of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and Q8_0 at AVX2
void llmb_vec_dot_il8_install(llmb_simd_level lvl, llmb_vec_dot_kernels *table);
// Internal (quants_simd.c): Q8_1 activations with AVX2 and with AVX-512, byte-identical to the reference
void llmb_quant_q8_1_avx2(const float *x, void *xq, int64_t n);
void llmb_quant_q8_1_avx512(const float *x, void *xq, int64_t n);

#ifdef __cplusplus
}
#endif
#endif // LLMB_VECDOT_H
