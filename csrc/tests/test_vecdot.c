// test_vecdot.c — the dot product kernels (csrc/vecdot_*.c: vecdot.h's table) against the scalar references of
// csrc/vecdot.c at every SIMD level this CPU has, on random weight blocks (random bytes with finite
// scales: every integer value occurs) and Gaussian activations quantized by the engine's own
// quantizers, over odd block counts. Checked:
//   - SIMD dot vs reference:       |simd - ref| <= ATOL + RTOL * sum_i |w_i x_i|
//   - reference vs a float64 dot of the dequantized rows, same bound (the references are right);
//   - the tile kernel, every nr x nc shape at every position, bit-identical to the single dot;
//   - llmb_vec_dot_matmul with 1 and 2 threads bit-identical to the single dot at one token (the decode
//     kernels: 21 rows are two groups of 8 and one of 5) and at every token count
//     of batched decode (2..10: the small-batch kernels to LLMB_SMALL_TOKENS, ragged row groups), also with enough
//     rows and tokens for several row panels and token blocks, and rows too long for a panel's
//     stack buffer (its fallback to tiles);
//   - interleaved weights (llmb_vec_dot_repack: Q4_K, Q6_K and Q8_0 with AVX-512 VNNI; Q4_0, Q4_1, Q5_0, Q5_1 with
//     AVX2 and AVX-512 VNNI, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_0, IQ4_NL and IQ4_XS with AVX2, in groups of 8: every type
//     whose level has a layout, llmb_vec_dot_interleave): the layout round-trips, and their
//     matmul at every token count of decode and batched decode and past the token blocks, on 1 and 2
//     threads, bit-identical to the plain rows' single dot, also with every weight value at its largest against
//     activations all +-127 (the largest sums: Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K);
//   - llmb_vec_dot_matmul_parts (Q4_K and Q6_K rows of 7 and 9 with one input, as Q, K, V) on 1 and 2
//     threads bit-identical to one llmb_vec_dot_matmul per part, at 1 and 70 tokens;
//   - llmb_matmul_n (ops.c) over weights of mixed activation types (Q4_0, Q4_K, Q8_0, Q6_K: the input
//     quantized again when the type changes) and of one type, on 1 and 2 threads, bit-identical to
//     llmb_vec_dot_matmul of each weight on its own quantized input, and llmb_matmul likewise;
//   - the x86 levels (AVX2, AVX-512[VNNI]) bit-identical to each other, and for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
//     Q2_K, IQ4_NL, IQ4_XS, TQ1_0, TQ2_0, MXFP4, NVFP4, Q1_0 and the I-quants to the reference;
//   - the SIMD activation quantizer byte-identical to its reference.
// Prints the largest |simd - ref| / sum|w x| seen per type.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "internal.h"
#include "ops.h"
#include "vecdot.h"

#define ATOL 1e-30
#define RTOL 1e-5   // float32 sums of up to ~100 block products in a different order (measured: below 1e-6)

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static uint64_t rng_u64(void) {   // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static float rng_uniform(void) { return (float)((rng_u64() >> 40) + 0.5) * 0x1p-24f; }

static float rng_normal(void) { return sqrtf(-2.0f * logf(rng_uniform())) * cosf(6.2831853f * rng_uniform()); }

// an fp16 scale of random sign and magnitude 2^-14 .. 2^2 (never zero, never special)
static llmb_half rng_scale(void) { return llmb_fp32_to_fp16(ldexpf(0.5f + rng_uniform(), (int)(rng_u64() % 16) - 14) * (rng_u64() & 1 ? 1 : -1)); }

// nblocks blocks of `type`: random bytes, every scale field a finite random scale
static void random_weights(int type, uint8_t *buf, int64_t n) {
    const llmb_type_traits *tt = llmb_type_traits_get(type);
    const int64_t nb = n / tt->blck_size;
    for (int64_t i = 0; i < nb * tt->type_size; i++) buf[i] = (uint8_t)rng_u64();
    if (type == LLMB_TYPE_F32 || type == LLMB_TYPE_F16 || type == LLMB_TYPE_BF16) {
        for (int64_t i = 0; i < n; i++) {
            const float v = rng_normal() * ldexpf(1.0f, (int)(rng_u64() % 8) - 4);
            if (type == LLMB_TYPE_F32) memcpy(buf + 4 * i, &v, 4);
            else {
                const uint16_t h = type == LLMB_TYPE_F16 ? llmb_fp32_to_fp16(v) : llmb_fp32_to_bf16(v);
                memcpy(buf + 2 * i, &h, 2);
            }
        }
        return;
    }
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = buf + b * tt->type_size;
        llmb_half h[2] = {rng_scale(), rng_scale()};
        switch (type) {
        case LLMB_TYPE_Q4_0: case LLMB_TYPE_Q5_0: case LLMB_TYPE_Q8_0: memcpy(blk, h, 2); break;
        case LLMB_TYPE_Q4_1: case LLMB_TYPE_Q5_1: case LLMB_TYPE_Q4_K: case LLMB_TYPE_Q5_K: memcpy(blk, h, 4); break;
        case LLMB_TYPE_Q6_K: memcpy(blk + offsetof(llmb_block_q6_K, d), h, 2); break;
        case LLMB_TYPE_Q2_K: memcpy(blk + offsetof(llmb_block_q2_K, d), h, 4); break;
        case LLMB_TYPE_Q3_K: memcpy(blk + offsetof(llmb_block_q3_K, d), h, 2); break;
        case LLMB_TYPE_IQ4_NL: case LLMB_TYPE_IQ4_XS: memcpy(blk, h, 2); break;
        case LLMB_TYPE_IQ2_XXS: case LLMB_TYPE_IQ2_XS: case LLMB_TYPE_IQ2_S: case LLMB_TYPE_IQ3_XXS:
        case LLMB_TYPE_IQ3_S: case LLMB_TYPE_IQ1_S: case LLMB_TYPE_Q1_0: memcpy(blk, h, 2); break;
        case LLMB_TYPE_IQ1_M:   // d's nibbles are the top nibbles of the 4 scale words
            for (int k = 0; k < 4; k++) {
                uint16_t sc;
                memcpy(&sc, blk + offsetof(llmb_block_iq1_m, scales) + 2 * k, 2);
                sc = (uint16_t)((sc & 0x0FFF) | ((h[0] >> 4 * k) & 0xF) << 12);
                memcpy(blk + offsetof(llmb_block_iq1_m, scales) + 2 * k, &sc, 2);
            }
            break;
        case LLMB_TYPE_TQ1_0: memcpy(blk + offsetof(llmb_block_tq1_0, d), h, 2); break;
        case LLMB_TYPE_TQ2_0: memcpy(blk + offsetof(llmb_block_tq2_0, d), h, 2); break;
        case LLMB_TYPE_MXFP4: blk[0] = (uint8_t)(127 - 14 + rng_u64() % 17); break;   // 2^-15 .. 2^1 (halved)
        case LLMB_TYPE_Q8_K: {
            const float d = llmb_fp16_to_fp32(h[0]);
            memcpy(blk, &d, 4);
            for (int j = 0; j < 16; j++) {   // keep bsums consistent (unused by the weight side, but tidy)
                int s = 0;
                for (int l = 0; l < 16; l++) s += ((int8_t *)(blk + 4))[16 * j + l];
                int16_t s16 = (int16_t)s;
                memcpy(blk + offsetof(llmb_block_q8_K, bsums) + 2 * j, &s16, 2);
            }
            break;
        }
        default: break;
        }
    }
}

// Gaussian activations, a different scale per 32 elements, some blocks shifted positive
static void random_x(float *x, int64_t n) {
    for (int64_t b = 0; b < n; b += 32) {
        const float scale = ldexpf(1.0f, (int)(rng_u64() % 12) - 6), shift = rng_u64() % 4 == 0 ? 2 * scale : 0;
        for (int64_t i = b; i < b + 32 && i < n; i++) x[i] = scale * rng_normal() + shift;
    }
}

// the activation row as floats (what the integer kernels actually multiply)
static void dequant_x(int wtype, const void *xq, float *out, int64_t n) {
    const int vt = llmb_vec_dot_type(wtype);
    if (vt == LLMB_TYPE_Q8_1) {
        const llmb_block_q8_1 *b = xq;
        for (int64_t i = 0; i < n; i++) out[i] = b[i / 32].d * b[i / 32].qs[i % 32];
    } else {
        llmb_quant_traits_get(vt)->to_float_ref(xq, out, n);
    }
}

static const int types[] = {LLMB_TYPE_Q8_0, LLMB_TYPE_Q4_K, LLMB_TYPE_Q6_K, LLMB_TYPE_Q4_0, LLMB_TYPE_F16,
                            LLMB_TYPE_Q5_K, LLMB_TYPE_Q5_0, LLMB_TYPE_Q4_1, LLMB_TYPE_Q5_1, LLMB_TYPE_BF16,
                            LLMB_TYPE_Q8_K, LLMB_TYPE_F32, LLMB_TYPE_Q3_K, LLMB_TYPE_Q2_K, LLMB_TYPE_IQ4_NL,
                            LLMB_TYPE_IQ4_XS,
                            LLMB_TYPE_TQ1_0, LLMB_TYPE_TQ2_0, LLMB_TYPE_MXFP4, LLMB_TYPE_NVFP4,
                            LLMB_TYPE_IQ2_XXS, LLMB_TYPE_IQ2_XS, LLMB_TYPE_IQ2_S, LLMB_TYPE_IQ3_XXS, LLMB_TYPE_IQ3_S,
                            LLMB_TYPE_IQ1_S, LLMB_TYPE_IQ1_M, LLMB_TYPE_Q1_0};
#define NTYPES (sizeof types / sizeof types[0])

// the types whose SIMD kernels give the reference's bits
static int exact_to_ref(int t) {
    switch (t) {
    case LLMB_TYPE_Q8_0: case LLMB_TYPE_Q4_0: case LLMB_TYPE_Q4_1: case LLMB_TYPE_Q5_0: case LLMB_TYPE_Q5_1:
    case LLMB_TYPE_Q2_K: case LLMB_TYPE_IQ4_NL: case LLMB_TYPE_IQ4_XS: case LLMB_TYPE_TQ1_0: case LLMB_TYPE_TQ2_0:
    case LLMB_TYPE_MXFP4: case LLMB_TYPE_NVFP4: case LLMB_TYPE_IQ2_XXS: case LLMB_TYPE_IQ2_XS: case LLMB_TYPE_IQ2_S:
    case LLMB_TYPE_IQ3_XXS: case LLMB_TYPE_IQ3_S: case LLMB_TYPE_IQ1_S: case LLMB_TYPE_IQ1_M: case LLMB_TYPE_Q1_0:
        return 1;
    default: return 0;
    }
}
#define R 6   // weight rows
#define T 5   // tokens

static double worst[NTYPES];
static const char *tname(int t) { return llmb_type_traits_get(t)->name; }

// dots of R rows x T tokens at the active level into out[t*R + r]; tile and matmul checks
static void check_level(size_t ti, int64_t n, const uint8_t *w, size_t ws, const uint8_t *xq, size_t xs,
                        const float *ref, const double *mag, float *out) {
    const int t = types[ti];
    const char *lvl = llmb_simd_name(llmb_simd_active());
    llmb_vec_dot_fn dot = llmb_vec_dot_get(t);
    for (int c = 0; c < T; c++)
        for (int r = 0; r < R; r++) {
            dot(n, &out[c * R + r], w + r * ws, xq + c * xs);
            const double err = fabs((double)out[c * R + r] - ref[c * R + r]);
            CHECK(err <= ATOL + RTOL * mag[c * R + r], "%s %s n=%lld: %.9g vs reference %.9g (sum|wx| %.3g)", lvl, tname(t),
                  (long long)n, out[c * R + r], ref[c * R + r], mag[c * R + r]);
            if (err / mag[c * R + r] > worst[ti]) worst[ti] = err / mag[c * R + r];
        }
    // every tile shape at every position: bit-identical
    int bad = 0;
    for (int nr = 1; nr <= LLMB_TILE_MAX_R; nr++)
        for (int nc = 1; nc <= LLMB_TILE_MAX_C; nc++)
            for (int r0 = 0; r0 + nr <= R; r0++)
                for (int c0 = 0; c0 + nc <= T; c0++) {
                    float y[T * R];
                    const int64_t ldy = R + 3;
                    float yt[LLMB_TILE_MAX_C * (R + 3)];
                    llmb_gemm_tile(t, n, w + r0 * ws, ws, nr, xq + c0 * xs, xs, nc, yt, ldy);
                    for (int c = 0; c < nc; c++)
                        for (int r = 0; r < nr; r++) y[0] = yt[c * ldy + r], bad += memcmp(&y[0], &out[(c0 + c) * R + r0 + r], 4) != 0;
                }
    CHECK(bad == 0, "%s %s n=%lld: %d tile outputs differ from the single dot", lvl, tname(t), (long long)n, bad);
    for (int nt = 1; nt <= 2; nt++) {
        float y[T * R];
        for (int ntok = 2; ntok < T; ntok++) {   // batched decode (small-batch kernels)
            llmb_vec_dot_matmul(t, n, w, ws, R, xq, xs, ntok, y, R, nt);
            CHECK(memcmp(y, out, sizeof(float) * R * ntok) == 0, "%s %s n=%lld: matmul of %d tokens with %d threads "
                  "differs from the single dot", lvl, tname(t), (long long)n, ntok, nt);
        }
        llmb_vec_dot_matmul(t, n, w, ws, R, xq, xs, T, y, R, nt);
        CHECK(memcmp(y, out, sizeof y) == 0, "%s %s n=%lld: matmul with %d threads differs from the single dot", lvl,
              tname(t), (long long)n, nt);
        llmb_vec_dot_matmul(t, n, w, ws, R, xq + (T - 1) * xs, xs, 1, y, R, nt);   // one token: the decode path
        CHECK(memcmp(y, out + (T - 1) * R, R * sizeof(float)) == 0, "%s %s n=%lld: one-token matmul with %d threads differs",
              lvl, tname(t), (long long)n, nt);
    }
}

static void check_type(size_t ti, int64_t n) {
    const int t = types[ti];
    const llmb_type_traits *tt = llmb_type_traits_get(t);
    const size_t ws = (size_t)(n / tt->blck_size * tt->type_size), xs = llmb_vec_dot_row_bytes(t, n);
    uint8_t *w = malloc(ws * R), *xq = malloc(xs * T), *xq2 = malloc(xs * T);
    float *x = malloc(sizeof(float) * n * T), *wf = malloc(sizeof(float) * n * R), *xf = malloc(sizeof(float) * n * T);
    float ref[T * R], out[T * R], x86[T * R];
    double mag[T * R];
    random_weights(t, w, n * R);   // R rows back to back
    random_x(x, n * T);
    for (int c = 0; c < T; c++) {
        llmb_vec_dot_quantize_x(t, x + c * n, xq + c * xs, n);
        llmb_vec_dot_quantize_x_ref(t, x + c * n, xq2 + c * xs, n);
        dequant_x(t, xq + c * xs, xf + c * n, n);
    }
    CHECK(memcmp(xq, xq2, xs * T) == 0, "%s: activation quantizer differs from its reference", tname(t));
    llmb_quant_traits_get(t)->to_float_ref(w, wf, n * R);
    for (int c = 0; c < T; c++)
        for (int r = 0; r < R; r++) {
            double exact = 0, m = 0;
            for (int64_t i = 0; i < n; i++) {
                exact += (double)wf[r * n + i] * xf[c * n + i];
                m += fabs((double)wf[r * n + i] * xf[c * n + i]);
            }
            mag[c * R + r] = m;
            llmb_vec_dot_ref(t)(n, &ref[c * R + r], w + r * ws, xq + c * xs);
            CHECK(fabs(ref[c * R + r] - exact) <= ATOL + RTOL * m, "reference %s n=%lld: %.9g vs float64 %.9g", tname(t),
                  (long long)n, ref[c * R + r], exact);
        }
    const llmb_simd_level levels[] = {LLMB_SIMD_SCALAR, LLMB_SIMD_NEON, LLMB_SIMD_AVX2, LLMB_SIMD_AVX512};
    int n_x86 = 0;
    for (size_t k = 0; k < sizeof levels / sizeof levels[0]; k++) {
        if (llmb_simd_set(levels[k]) != LLMB_OK) continue;
        check_level(ti, n, w, ws, xq, xs, ref, mag, out);
        if (levels[k] == LLMB_SIMD_SCALAR)
            CHECK(memcmp(out, ref, sizeof out) == 0, "scalar level %s: not the reference", tname(t));
        if (levels[k] == LLMB_SIMD_NEON && exact_to_ref(t))   // vecdot_neon.c: each type's float steps
            CHECK(memcmp(out, ref, sizeof out) == 0, "neon %s n=%lld: not the reference's bits", tname(t), (long long)n);
        if (levels[k] == LLMB_SIMD_AVX2 || levels[k] == LLMB_SIMD_AVX512) {
            // the reference's arithmetic (q8_0_body, q8_0_il_vnni512; legacy_body, vecdot_il8.c)
            if (exact_to_ref(t))
                CHECK(memcmp(out, ref, sizeof out) == 0, "%s %s n=%lld: not the reference's bits",
                      llmb_simd_name(levels[k]), tname(t), (long long)n);
            if (n_x86++) CHECK(memcmp(out, x86, sizeof out) == 0, "%s n=%lld: AVX2 and AVX-512 results differ", tname(t), (long long)n);
            memcpy(x86, out, sizeof out);
        }
    }
    llmb_simd_set(llmb_simd_detected());
    free(w), free(xq), free(xq2), free(x), free(wf), free(xf);
}

// llmb_vec_dot_matmul over PR rows x PT tokens (several row panels of 4, 8 or 16 rows, two token blocks,
// ragged ends)
// and over 1 token (long float rows: 4x1 tiles) bit-identical to single dots at every level, 1 and 2 threads
#define PR 21
#define PT (4 * LLMB_PANEL_TOKENS + 6)   // beyond the longest pass of panels (256 tokens)
static void check_panels(int t, int64_t n) {
    const llmb_type_traits *tt = llmb_type_traits_get(t);
    const size_t ws = (size_t)(n / tt->blck_size * tt->type_size), xs = llmb_vec_dot_row_bytes(t, n);
    uint8_t *w = malloc(ws * PR), *xq = malloc(xs * PT);
    float *x = malloc(sizeof(float) * n * PT), *one = malloc(sizeof(float) * PR * PT), *y = malloc(sizeof(float) * PR * PT);
    random_weights(t, w, n * PR);
    random_x(x, n * PT);
    for (int c = 0; c < PT; c++) llmb_vec_dot_quantize_x(t, x + c * n, xq + c * xs, n);
    const llmb_simd_level levels[] = {LLMB_SIMD_SCALAR, LLMB_SIMD_NEON, LLMB_SIMD_AVX2, LLMB_SIMD_AVX512};
    for (size_t k = 0; k < sizeof levels / sizeof levels[0]; k++) {
        if (llmb_simd_set(levels[k]) != LLMB_OK) continue;
        llmb_vec_dot_fn dot = llmb_vec_dot_get(t);
        for (int c = 0; c < PT; c++)
            for (int r = 0; r < PR; r++) dot(n, &one[c * PR + r], w + r * ws, xq + c * xs);
        for (int nt = 1; nt <= 2; nt++)
            for (int ntok = 1; ntok <= PT; ntok += ntok == 10 ? PT - 11 : 1) {   // 1 (decode), 2..10 (batched
                // decode: small-batch kernels to LLMB_SMALL_TOKENS, tiles or panels past it), 261, 262
                llmb_vec_dot_matmul(t, n, w, ws, PR, xq, xs, ntok, y, PR, nt);
                CHECK(memcmp(y, one, sizeof(float) * PR * ntok) == 0, "%s %s n=%lld: matmul of %d x %d on %d threads "
                      "differs from the single dot", llmb_simd_name(levels[k]), tname(t), (long long)n, PR, ntok, nt);
            }
    }
    llmb_simd_set(llmb_simd_detected());
    free(w), free(xq), free(x), free(one), free(y);
}

// K-type rows longer than the small-batch kernels' table of token scales (256 super-blocks): their
// fallback to tiles, bit-identical to single dots; at one token the decode kernel's single-row calls
// (257 super-blocks) and, past its 512 super-blocks (n = 256 * 513), its fallback to dots
static void check_small_long(int t, int64_t n) {
    const int rows = 5, ntok = 3;
    const llmb_type_traits *tt = llmb_type_traits_get(t);
    const size_t ws = (size_t)(n / tt->blck_size * tt->type_size), xs = llmb_vec_dot_row_bytes(t, n);
    uint8_t *w = malloc(ws * rows), *xq = malloc(xs * ntok);
    float *x = malloc(sizeof(float) * n * ntok), one[5 * 3], y[5 * 3];
    random_weights(t, w, n * rows);
    random_x(x, n * ntok);
    for (int c = 0; c < ntok; c++) llmb_vec_dot_quantize_x(t, x + c * n, xq + c * xs, n);
    for (int c = 0; c < ntok; c++)
        for (int r = 0; r < rows; r++) llmb_vec_dot_get(t)(n, &one[c * rows + r], w + r * ws, xq + c * xs);
    llmb_vec_dot_matmul(t, n, w, ws, rows, xq, xs, ntok, y, rows, 1);
    CHECK(memcmp(y, one, sizeof y) == 0, "%s n=%lld: matmul of %d tokens differs from the single dot", tname(t),
          (long long)n, ntok);
    llmb_vec_dot_matmul(t, n, w, ws, rows, xq + xs, xs, 1, y, rows, 1);
    CHECK(memcmp(y, one + rows, sizeof(float) * rows) == 0, "%s n=%lld: one-token matmul differs from the single dot",
          tname(t), (long long)n);
    free(w), free(xq), free(x);
}

// Every value of the blocks at its largest (all the value bytes' bits set, the scales as they are): the bytes
// [from, to) of each block of the types below; 0 for the other types
static int max_values(int t, uint8_t *w, int64_t n) {
    int from, to;
    switch (t) {
    case LLMB_TYPE_Q4_0: from = offsetof(llmb_block_q4_0, qs), to = sizeof(llmb_block_q4_0); break;
    case LLMB_TYPE_Q4_1: from = offsetof(llmb_block_q4_1, qs), to = sizeof(llmb_block_q4_1); break;
    case LLMB_TYPE_Q5_0: from = offsetof(llmb_block_q5_0, qh), to = sizeof(llmb_block_q5_0); break;
    case LLMB_TYPE_Q5_1: from = offsetof(llmb_block_q5_1, qh), to = sizeof(llmb_block_q5_1); break;
    case LLMB_TYPE_Q4_K: from = offsetof(llmb_block_q4_K, qs), to = sizeof(llmb_block_q4_K); break;
    case LLMB_TYPE_Q5_K: from = offsetof(llmb_block_q5_K, qh), to = sizeof(llmb_block_q5_K); break;
    case LLMB_TYPE_Q6_K: from = offsetof(llmb_block_q6_K, ql), to = offsetof(llmb_block_q6_K, scales); break;
    default: return 0;
    }
    const llmb_type_traits *tt = llmb_type_traits_get(t);
    for (int64_t b = 0; b < n / tt->blck_size; b++) memset(w + b * tt->type_size + from, 0xFF, (size_t)(to - from));
    return 1;
}

// Interleaved weights (llmb_vec_dot_repack), where a level has them: unpack(repack(w)) == w; matmul over
// IR rows (several groups: 2 threads take 2 and 3; Q8_0 at one token on one thread runs 4 side by side,
// then 1) at every token count of decode and batched decode, past a token tile, and past the longest pass
// of token blocks, bit-identical to the plain rows' single dot, also as one part among plain parts of
// llmb_vec_dot_matmul_parts. maxed: every weight value at its largest (max_values; other types return) against
// activations all +127 or all -127 (tokens of +1 and -1), the largest integer sums: the kernels' int16 partial
// sums must hold them
#define IR 80
static void check_interleaved(int t, int64_t n, int maxed) {
    const llmb_simd_level levels[] = {LLMB_SIMD_SCALAR, LLMB_SIMD_NEON, LLMB_SIMD_AVX2, LLMB_SIMD_AVX512};
    const llmb_type_traits *tt = llmb_type_traits_get(t);
    const size_t ws = (size_t)(n / tt->blck_size * tt->type_size), xs = llmb_vec_dot_row_bytes(t, n);
    uint8_t *w = malloc(ws * IR), *wi = malloc(ws * IR), *back = malloc(ws * IR), *xq = malloc(xs * PT);
    float *x = malloc(sizeof(float) * n * PT), *one = malloc(sizeof(float) * IR * PT), *y = malloc(sizeof(float) * IR * PT);
    float *y2 = malloc(sizeof(float) * IR * PT);
    random_weights(t, w, n * IR);
    random_x(x, n * PT);
    if (maxed && !max_values(t, w, n * IR)) {
        free(w), free(wi), free(back), free(xq), free(x), free(one), free(y), free(y2);
        return;
    }
    if (maxed)
        for (int64_t i = 0; i < n * PT; i++) x[i] = i / n % 2 ? -1.0f : 1.0f;
    for (int c = 0; c < PT; c++) llmb_vec_dot_quantize_x(t, x + c * n, xq + c * xs, n);
    for (size_t k = 0; k < sizeof levels / sizeof levels[0]; k++) {
        if (llmb_simd_set(levels[k]) != LLMB_OK) continue;
        const int G = llmb_vec_dot_interleave(t);
        if (!G) continue;
        CHECK(IR % G == 0, "%s: groups of %d rows do not divide the test's %d", tname(t), G, IR);
        llmb_vec_dot_repack(t, n, w, IR, G, wi);
        llmb_vec_dot_unpack(t, n, wi, IR, G, back);
        CHECK(memcmp(back, w, ws * IR) == 0 && memcmp(wi, w, ws * IR) != 0, "%s n=%lld: unpack(repack(w)) != w",
              tname(t), (long long)n);
        llmb_vec_dot_fn dot = llmb_vec_dot_get(t);
        for (int c = 0; c < PT; c++)
            for (int r = 0; r < IR; r++) dot(n, &one[c * IR + r], w + r * ws, xq + c * xs);
        // beside plain rows (each thread its share), alone and twice (prefill: chunks dealt to whichever thread is
        // free, vecdot.c parts_dealt)
        for (int cfg = 0; cfg < 3; cfg++)
            for (int nt = 1; nt <= 2; nt++)
                for (int st = 0; st <= 1; st++)   // weights from DRAM or not: how far one token prefetches, same bits
                    for (int ntok = 1; ntok <= PT; ntok += ntok == 12 ? PT - 13 : 1) {   // 1..12, 261, 262
                        const llmb_matmul_part parts[2] = {{t, wi, ws, IR, y, IR, G, st},
                                                           {t, cfg == 2 ? wi : w, ws, IR, y2, IR, cfg == 2 ? G : 0, st}};
                        memset(y, 0xFF, sizeof(float) * IR * PT), memset(y2, 0xFF, sizeof(float) * IR * PT);   // (NaN:
                        // an output a kernel leaves unwritten fails, whatever an earlier call left there)
                        llmb_vec_dot_matmul_parts(n, parts, cfg == 1 ? 1 : 2, xq, xs, ntok, nt);
                        CHECK(memcmp(y, one, sizeof(float) * IR * ntok) == 0 &&
                                  (cfg == 1 || memcmp(y2, one, sizeof(float) * IR * ntok) == 0),
                              "%s %s n=%lld%s: interleaved matmul of %d x %d on %d threads (stream %d, %s) differs from "
                              "the single dot", llmb_simd_name(levels[k]), tname(t), (long long)n,
                              maxed ? " (largest values)" : "", IR, ntok, nt, st,
                              cfg == 0 ? "beside plain rows" : cfg == 1 ? "alone" : "twice");
                    }
    }
    llmb_simd_set(llmb_simd_detected());
    free(w), free(wi), free(back), free(xq), free(x), free(one), free(y), free(y2);
}

// three products of one input in one region (mixed K types sharing Q8_K activations, ragged rows)
static void check_parts(void) {
    const int64_t n = 512;
    const int types3[3] = {LLMB_TYPE_Q4_K, LLMB_TYPE_Q6_K, LLMB_TYPE_Q4_K}, rows3[3] = {9, 7, 13};
    const size_t xs = llmb_vec_dot_row_bytes(LLMB_TYPE_Q4_K, n);
    uint8_t *xq = malloc(xs * PT), *w[3];
    float *x = malloc(sizeof(float) * n * PT), *y1[3], *y2[3];
    size_t wsz[3];
    random_x(x, n * PT);
    for (int c = 0; c < PT; c++) llmb_vec_dot_quantize_x(LLMB_TYPE_Q4_K, x + c * n, xq + c * xs, n);
    llmb_matmul_part parts[3];
    for (int i = 0; i < 3; i++) {
        const llmb_type_traits *tt = llmb_type_traits_get(types3[i]);
        wsz[i] = (size_t)(n / tt->blck_size * tt->type_size);
        w[i] = malloc(wsz[i] * rows3[i]);
        random_weights(types3[i], w[i], n * rows3[i]);
        y1[i] = malloc(sizeof(float) * rows3[i] * PT), y2[i] = malloc(sizeof(float) * rows3[i] * PT);
        parts[i] = (llmb_matmul_part){types3[i], w[i], wsz[i], rows3[i], y2[i], rows3[i], .il = 0, .stream = 0};
    }
    for (int nt = 1; nt <= 2; nt++)
        for (int ntok = 1; ntok <= PT; ntok += PT - 1) {
            for (int i = 0; i < 3; i++)
                llmb_vec_dot_matmul(types3[i], n, w[i], wsz[i], rows3[i], xq, xs, ntok, y1[i], rows3[i], nt);
            llmb_vec_dot_matmul_parts(n, parts, 3, xq, xs, ntok, nt);
            for (int i = 0; i < 3; i++)
                CHECK(memcmp(y1[i], y2[i], sizeof(float) * rows3[i] * ntok) == 0, "parts: part %d, %d tokens, %d threads "
                      "differs from its own matmul", i, ntok, nt);
        }
    for (int i = 0; i < 3; i++) free(w[i]), free(y1[i]), free(y2[i]);
    free(xq), free(x);
}

// llmb_matmul_n / llmb_matmul (the quantized input made inside the call, once per activation type)
// against llmb_vec_dot_matmul of each weight on an input quantized here for its type
static void check_matmul_n(void) {
    const int64_t n = 512;
    const int mixed[4] = {LLMB_TYPE_Q4_0, LLMB_TYPE_Q4_K, LLMB_TYPE_Q8_0, LLMB_TYPE_Q6_K}, rows[4] = {9, 7, 13, 5};
    const int one[3] = {LLMB_TYPE_Q4_K, LLMB_TYPE_Q6_K, LLMB_TYPE_Q4_K};
    llmb_matmul_ctx c = {0};
    c.row_cap = 0;
    for (int i = 0; i < 4; i++)
        if (llmb_vec_dot_row_bytes(mixed[i], n) > c.row_cap) c.row_cap = llmb_vec_dot_row_bytes(mixed[i], n);
    c.xq = malloc(c.row_cap * PT);
    uint8_t *xq = malloc(c.row_cap * PT), *wd[4];
    float *x = malloc(sizeof(float) * n * PT), *y1[4], *y2[4];
    random_x(x, n * PT);
    for (int set = 0; set < 2; set++) {
        const int count = set ? 3 : 4, *types_ = set ? one : mixed;
        llmb_cpu_weight w[4];
        const llmb_cpu_weight *wp[4];
        int64_t ld[4];
        for (int i = 0; i < count; i++) {
            const llmb_type_traits *tt = llmb_type_traits_get(types_[i]);
            const size_t rb = (size_t)(n / tt->blck_size * tt->type_size);
            wd[i] = malloc(rb * rows[i]);
            random_weights(types_[i], wd[i], n * rows[i]);
            w[i] = (llmb_cpu_weight){.w = {wd[i], types_[i], n, rows[i], rb}};
            wp[i] = &w[i];
            ld[i] = rows[i] + 2;   // strided outputs
            y1[i] = malloc(sizeof(float) * ld[i] * PT), y2[i] = malloc(sizeof(float) * ld[i] * PT);
        }
        for (int nt = 1; nt <= 2; nt++)
            for (int ntok = 1; ntok <= PT; ntok += PT - 1) {
                c.nthreads = nt;
                for (int i = 0; i < count; i++) {
                    for (int t = 0; t < ntok; t++)
                        llmb_vec_dot_quantize_x(types_[i], x + t * n, xq + t * c.row_cap, n);
                    memset(y1[i], 0, sizeof(float) * ld[i] * PT), memset(y2[i], 0, sizeof(float) * ld[i] * PT);
                    llmb_vec_dot_matmul(types_[i], n, wd[i], w[i].w.row_bytes, rows[i], xq, c.row_cap, ntok, y1[i], ld[i], nt);
                }
                llmb_matmul_n(&c, count, wp, x, n, ntok, y2, ld);
                for (int i = 0; i < count; i++)
                    CHECK(!memcmp(y1[i], y2[i], sizeof(float) * ld[i] * ntok), "matmul_n (%s): %s, %d tokens, %d threads "
                          "differs from its own product", set ? "one type" : "mixed", tname(types_[i]), ntok, nt);
                const int last = count - 1;
                memset(y2[last], 0, sizeof(float) * ld[last] * PT);
                llmb_matmul(&c, wp[last], x, n, ntok, y2[last], ld[last]);
                CHECK(!memcmp(y1[last], y2[last], sizeof(float) * ld[last] * ntok), "matmul: %s, %d tokens",
                      tname(types_[last]), ntok);
            }
        for (int i = 0; i < count; i++) free(wd[i]), free(y1[i]), free(y2[i]);
    }
    free(c.xq), free(xq), free(x);
}

// llmb_alloc_stream (the repacked weights' memory): 2 MiB aligned, every byte asked for writable (ASan
// checks the bounds), free() releases it
static void check_alloc_stream(void) {
    const size_t sizes[] = {0, 1, 4096, (size_t)3 << 20};
    for (size_t k = 0; k < 4; k++) {
        uint8_t *p = llmb_alloc_stream(sizes[k]);
        CHECK(p && (uintptr_t)p % ((size_t)2 << 20) == 0, "alloc_stream(%zu): %p", sizes[k], (void *)p);
        if (p) memset(p, 0xA5, sizes[k]), free(p);
    }
}

// BF16 pairs (LLMB_TYPE_BF16_DP): weights converted from F16 / F32 / BF16 rows, activations rounded; the
// reference within the bound of its float sums of the BF16 values; at every level every kernel (dot,
// tiles, matmul from 1 to 262 tokens on 1 and 2 threads: decode, panels) gives the reference's bits.
// wild: random BF16 bit patterns with exponents 0..140 (denormals read as zero, sums flushed to zero),
// which checks the reference's model of vdpbf16ps against the instruction bit for bit.
static void check_bf16dp(int64_t n, int rows, int ntok, int wild) {
    const int t = LLMB_TYPE_BF16_DP;
    const size_t ws = (size_t)n * 2, xs = llmb_vec_dot_row_bytes(t, n);
    CHECK(xs == ws, "BF16_DP row bytes %zu, want %zu", xs, ws);
    float *wf = malloc(sizeof(float) * n * rows), *x = malloc(sizeof(float) * n * ntok);
    uint16_t *w = malloc(ws * rows), *w2 = malloc(ws * rows), *h = malloc(ws * rows), *xq = malloc(xs * ntok),
             *xq2 = malloc(xs * ntok);
    float *one = malloc(sizeof(float) * rows * ntok), *y = malloc(sizeof(float) * rows * ntok);
    for (int64_t i = 0; i < n * rows; i++) wf[i] = rng_normal() * ldexpf(1.0f, (int)(rng_u64() % 8) - 8);
    random_x(x, n * ntok);
    // the conversions: F32 and F16 rows rounded once, BF16 rows copied
    for (int64_t i = 0; i < n * rows; i++) h[i] = llmb_fp32_to_fp16(wf[i]);
    CHECK(llmb_vec_dot_to_bf16(LLMB_TYPE_F16, n, h, ws, rows, w), "to_bf16 F16");
    int bad = 0;
    for (int64_t i = 0; i < n * rows; i++) bad += w[i] != llmb_fp32_to_bf16(llmb_fp16_to_fp32(h[i]));
    CHECK(llmb_vec_dot_to_bf16(LLMB_TYPE_F32, n, wf, n * 4, rows, w2), "to_bf16 F32");
    for (int64_t i = 0; i < n * rows; i++) bad += w2[i] != llmb_fp32_to_bf16(wf[i]);
    CHECK(llmb_vec_dot_to_bf16(LLMB_TYPE_BF16, n, w2, ws, rows, h), "to_bf16 BF16");
    bad += memcmp(h, w2, ws * rows) != 0;
    CHECK(bad == 0, "BF16_DP n=%lld: %d converted weights differ", (long long)n, bad);
    CHECK(!llmb_vec_dot_to_bf16(LLMB_TYPE_Q8_0, n, w2, ws, rows, h) && !llmb_vec_dot_to_bf16(LLMB_TYPE_F16, 33, w2, ws, 1, h),
          "to_bf16 takes only float types and n a multiple of 32");
    for (int c = 0; c < ntok; c++) {
        llmb_vec_dot_quantize_x(t, x + c * n, xq + c * n, n);
        llmb_vec_dot_quantize_x_ref(t, x + c * n, xq2 + c * n, n);
    }
    CHECK(memcmp(xq, xq2, xs * ntok) == 0, "BF16_DP: activation rounding differs from its reference");
    {   // and at the edges: ties, NaN (the largest carries into the sign unless kept apart), infinity, denormals
        const uint32_t bits[32] = {0x3f808000u, 0x3f818000u, 0x7fffffffu, 0xffffffffu, 0x7fc00000u, 0x7f800001u,
                                   0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x00000001u, 0x807fffffu, 0x80000000u};
        float e[32];
        uint16_t q[32], q2[32];
        memcpy(e, bits, sizeof e);
        llmb_vec_dot_quantize_x(t, e, q, 32);
        llmb_vec_dot_quantize_x_ref(t, e, q2, 32);
        CHECK(memcmp(q, q2, sizeof q) == 0 && (q[2] & 0xffc0u) == 0x7fc0u && q[6] == 0x7f80u,
              "BF16_DP: activation rounding of ties, NaN and infinity");
    }
    if (wild)
        for (int64_t i = 0; i < n * (rows > ntok ? rows : ntok); i++) {
            const uint16_t r = (uint16_t)((rng_u64() & 0x807f) | (rng_u64() % 141) << 7);
            if (i < n * rows) w[i] = r;
            if (i < n * ntok) xq[i] = (uint16_t)((r & 0x807f) | (rng_u64() % 141) << 7);
        }
    llmb_vec_dot_fn ref = llmb_vec_dot_ref(t);
    for (int c = 0; c < ntok && !wild; c++)
        for (int r = 0; r < rows; r++) {
            double exact = 0, m = 0;
            for (int64_t i = 0; i < n; i++) {
                const double p = (double)llmb_bf16_to_fp32(w[r * n + i]) * llmb_bf16_to_fp32(xq[c * n + i]);
                exact += p, m += fabs(p);
            }
            ref(n, &one[c * rows + r], w + r * n, xq + c * n);
            CHECK(fabs(one[c * rows + r] - exact) <= ATOL + RTOL * m, "BF16_DP reference n=%lld: %.9g vs float64 %.9g",
                  (long long)n, one[c * rows + r], exact);
        }
    for (int c = 0; c < ntok; c++)
        for (int r = 0; r < rows; r++) ref(n, &one[c * rows + r], w + r * n, xq + c * n);
    const llmb_simd_level levels[] = {LLMB_SIMD_SCALAR, LLMB_SIMD_NEON, LLMB_SIMD_AVX2, LLMB_SIMD_AVX512};
    for (size_t k = 0; k < sizeof levels / sizeof levels[0]; k++) {
        if (llmb_simd_set(levels[k]) != LLMB_OK) continue;
        const char *lvl = llmb_simd_name(levels[k]);
        llmb_vec_dot_fn dot = llmb_vec_dot_get(t);
        bad = 0;
        for (int c = 0; c < ntok; c++)
            for (int r = 0; r < rows; r++) {
                float v;
                dot(n, &v, w + r * n, xq + c * n);
                bad += memcmp(&v, &one[c * rows + r], 4) != 0;
            }
        CHECK(bad == 0, "%s BF16_DP n=%lld%s: %d dots differ from the reference", lvl, (long long)n, wild ? " (wild)" : "", bad);
        for (int nr = 1; nr <= LLMB_TILE_MAX_R; nr++)
            for (int nc = 1; nc <= LLMB_TILE_MAX_C; nc++) {
                float yt[LLMB_TILE_MAX_C * (LLMB_TILE_MAX_R + 1)];
                llmb_gemm_tile(t, n, w + n, ws, nr, xq + n, xs, nc, yt, LLMB_TILE_MAX_R + 1);
                for (int c = 0; c < nc; c++)
                    for (int r = 0; r < nr; r++)
                        bad += memcmp(&yt[c * (LLMB_TILE_MAX_R + 1) + r], &one[(1 + c) * rows + 1 + r], 4) != 0;
            }
        CHECK(bad == 0, "%s BF16_DP n=%lld: %d tile outputs differ from the reference", lvl, (long long)n, bad);
        for (int nt = 1; nt <= 2; nt++)
            for (int m = 1; m <= ntok; m += m == 10 ? (ntok - 11 > 1 ? ntok - 11 : 1) : 1) {
                llmb_vec_dot_matmul(t, n, w, ws, rows, xq, xs, m, y, rows, nt);
                CHECK(memcmp(y, one, sizeof(float) * rows * m) == 0, "%s BF16_DP n=%lld: matmul of %d x %d on %d threads "
                      "differs from the reference", lvl, (long long)n, rows, m, nt);
            }
    }
    llmb_simd_set(llmb_simd_detected());
    free(wf), free(x), free(w), free(w2), free(h), free(xq), free(xq2), free(one), free(y);
}

int main(void) {
    check_alloc_stream();
    for (size_t ti = 0; ti < NTYPES; ti++) {
        const int t = types[ti], bs = llmb_type_traits_get(t)->blck_size;
        CHECK(llmb_vec_dot_get(t) && llmb_vec_dot_ref(t) && llmb_vec_dot_type(t) >= 0, "%s unsupported", tname(t));
        if (bs == 256) {
            const int64_t ks[] = {1, 3, 8, 11};
            for (size_t k = 0; k < 4; k++) check_type(ti, 256 * ks[k]);
            check_panels(t, 256 * 5);
            check_panels(t, 256 * 65);   // beyond a panel's 64 decoded super-blocks
            check_small_long(t, 256 * 257);
            check_small_long(t, 256 * 513);
            check_interleaved(t, 256 * 3, 0);
            check_interleaved(t, 256 * 8, 0);   // (Q6_K's d inline after every two super-blocks: even and odd counts)
            check_interleaved(t, 256 * 65, 0);
            check_interleaved(t, 256 * 3, 1);
        } else {
            const int64_t ks[] = {1, 3, 8, 37, 64}, b = bs == 1 ? 32 : bs;   // blocks of 32 (NVFP4: 64)
            for (size_t k = 0; k < 5; k++) check_type(ti, b * ks[k]);
            check_panels(t, b * 13);
            check_interleaved(t, b * 13, 0);
            check_interleaved(t, b * 257, 0);
            check_interleaved(t, b * 13, 1);
            if (bs == 1) check_panels(t, 8192 + 29), check_panels(t, 8 * 9 + 5);   // many float-panel chunks; tails
            if (bs == 1) {   // tails of the float kernels
                const int64_t odd[] = {1, 7, 13, 45, 133};
                for (size_t k = 0; k < 5; k++) check_type(ti, odd[k]);
            }
        }
    }
    const int64_t bd_n[] = {32, 96, 32 * 37, 1024 + 96, 8192 + 32};   // one to nine panel chunks of 1024 values
    for (size_t k = 0; k < sizeof bd_n / sizeof bd_n[0]; k++) check_bf16dp(bd_n[k], PR, k < 3 ? PT : 12, 0);
    check_bf16dp(32 * 5, 11, 7, 1);
    check_parts();
    check_matmul_n();
    CHECK(llmb_vec_dot_type(LLMB_TYPE_Q8_1) == -1 && !llmb_vec_dot_get(24) && !llmb_vec_dot_get(-1) &&
              llmb_vec_dot_row_bytes(LLMB_TYPE_Q4_K, 100) == 0 && llmb_vec_dot_row_bytes(LLMB_TYPE_Q4_1, 64) == 80,
          "unsupported types and sizes");
    CHECK(!llmb_cache_holds(SIZE_MAX) && llmb_cache_holds(1) >= llmb_cache_holds((size_t)1 << 40),
          "llmb_cache_holds: no cache holds everything, and one that holds 1 TiB holds a byte");
    printf("SIMD levels here: best %s; vnni %d; bf16 %d\nlargest |simd - ref| / sum|w x| (bound %.0e):\n",
           llmb_simd_name(llmb_simd_detected()), llmb_cpu_has("avx512vnni"), llmb_cpu_has("avx512bf16"), RTOL);
    for (size_t ti = 0; ti < NTYPES; ti++) printf("  %-5s %.2e\n", tname(types[ti]), worst[ti]);
    return check_summary();
}
