// test_quants.c — every SIMD row kernel of csrc/quants_simd.c against its scalar reference in
// csrc/quants.c, at every SIMD level this CPU has, on random data (random block bytes with finite
// scales; Gaussian rows with a different scale per block; fp16 specials), odd block counts; the
// whole-tensor functions (thread counts, argument errors); and quantize->dequantize round trips
// within a stated relative RMS error. Dequantization must match bit for bit, quantization byte for byte.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "internal.h"
#include "quants.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rng_u64(void) {   // xorshift64*
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static float rng_uniform(void) { return (float)((rng_u64() >> 40) + 0.5) * 0x1p-24f; }   // (0, 1)

static float rng_normal(void) {
    return sqrtf(-2.0f * logf(rng_uniform())) * cosf(6.2831853f * rng_uniform());
}

// a finite fp16 value with a random sign, exponent and mantissa
static llmb_half rng_finite_half(void) {
    uint16_t h = (uint16_t)rng_u64();
    return (h & 0x7c00) == 0x7c00 ? (uint16_t)(h & ~0x4000) : h;
}

// n elements of `type` as random bytes, with every scale field made finite (element fields of
// F16 and BF16 stay fully random: NaN and Inf included)
static void random_blocks(int type, uint8_t *buf, int64_t nblocks, int64_t type_size) {
    for (int64_t i = 0; i < nblocks * type_size; i++) buf[i] = (uint8_t)rng_u64();
    for (int64_t b = 0; b < nblocks; b++) {
        uint8_t *blk = buf + b * type_size;
        llmb_half h[2] = {rng_finite_half(), rng_finite_half()};
        switch (type) {
        case LLMB_TYPE_Q4_0: case LLMB_TYPE_Q5_0: case LLMB_TYPE_Q8_0: memcpy(blk, h, 2); break;
        case LLMB_TYPE_Q4_1: case LLMB_TYPE_Q5_1: case LLMB_TYPE_Q4_K: case LLMB_TYPE_Q5_K: memcpy(blk, h, 4); break;
        case LLMB_TYPE_Q6_K: memcpy(blk + offsetof(llmb_block_q6_K, d), h, 2); break;
        case LLMB_TYPE_Q2_K: memcpy(blk + offsetof(llmb_block_q2_K, d), h, 4); break;
        case LLMB_TYPE_Q3_K: memcpy(blk + offsetof(llmb_block_q3_K, d), h, 2); break;
        case LLMB_TYPE_IQ4_NL: case LLMB_TYPE_IQ4_XS: memcpy(blk, h, 2); break;
        case LLMB_TYPE_TQ1_0: memcpy(blk + offsetof(llmb_block_tq1_0, d), h, 2); break;
        case LLMB_TYPE_TQ2_0: memcpy(blk + offsetof(llmb_block_tq2_0, d), h, 2); break;
        case LLMB_TYPE_Q8_K: {
            float d = ldexpf(rng_normal(), (int)(rng_u64() % 40) - 20);
            memcpy(blk, &d, 4);
            break;
        }
        default: break;
        }
    }
}

// Gaussian rows, each block with its own scale (some blocks all positive), plus fp16 specials
// (NaN payloads, Inf, overflow, subnormals, ties) when `specials`
static void random_floats(float *x, int64_t n, int64_t block, int specials) {
    for (int64_t b = 0; b < n; b += block) {
        float scale = ldexpf(1.0f, (int)(rng_u64() % 24) - 12), shift = (rng_u64() % 4 == 0) ? 3 * scale : 0;
        for (int64_t i = b; i < b + block && i < n; i++) x[i] = scale * rng_normal() + shift;
    }
    if (!specials) return;
    const uint32_t bits[] = {0x7fc00000, 0x7f800001, 0xffa00000, 0x7f800000, 0xff800000, 0x477ff000, 0x477fefff,
                             0x33000000, 0x33000001, 0x38800000, 0x387fffff, 0x80000001, 0x00000000, 0x80000000};
    for (size_t k = 0; k < sizeof bits / sizeof bits[0] && (int64_t)(7 * k) < n; k++) memcpy(&x[7 * k], &bits[k], 4);
}

static const char *type_name(int t) { return llmb_type_traits_get(t)->name; }

// every kernel of the active level against the reference
static void compare_level(const char *level) {
    for (int t = 0; t < LLMB_TYPE_COUNT; t++) {
        const llmb_quant_traits *q = llmb_quant_traits_get(t);
        if (!q) continue;
        const llmb_type_traits *tt = llmb_type_traits_get(t);
        for (int64_t nblocks = 1; nblocks <= 67; nblocks += 22) {   // 1, 23, 45, 67 blocks
            const int64_t nb = tt->blck_size == 1 ? 8 * nblocks + 5 : nblocks;   // odd tails for F16/BF16
            const int64_t n = nb * tt->blck_size;
            uint8_t *raw = malloc((size_t)(nb * tt->type_size)), *qa = malloc((size_t)(nb * tt->type_size));
            uint8_t *qb = malloc((size_t)(nb * tt->type_size));
            float *ya = malloc((size_t)n * 4), *yb = malloc((size_t)n * 4), *x = malloc((size_t)n * 4);
            random_blocks(t, raw, nb, tt->type_size);
            q->to_float(raw, ya, n);
            q->to_float_ref(raw, yb, n);
            CHECK(memcmp(ya, yb, (size_t)n * 4) == 0, "%s dequantize %s: %lld elements differ from the reference",
                  level, type_name(t), (long long)n);
            random_floats(x, n, tt->blck_size == 1 ? 32 : tt->blck_size, t == LLMB_TYPE_F16 || t == LLMB_TYPE_BF16);
            if (nblocks == 23 && tt->blck_size > 1) {
                memset(x, 0, (size_t)tt->blck_size * 4);   // one all-zero block
                // one block of ties: amax 127 makes Q8_0's and Q8_K's scale 1, so x.5 must round as the reference does
                for (int64_t j = 0; j < tt->blck_size; j++) x[tt->blck_size + j] = j ? (float)(j % 64) - 31.5f : 127.0f;
            }
            if (!q->from_float_ref) {   // dequantization only
                CHECK(!q->from_float, "%s: %s has a quantizer but no reference", level, type_name(t));
                free(raw), free(qa), free(qb), free(ya), free(yb), free(x);
                continue;
            }
            q->from_float(x, qa, n);
            q->from_float_ref(x, qb, n);
            CHECK(memcmp(qa, qb, (size_t)(nb * tt->type_size)) == 0, "%s quantize %s: %lld elements differ from the reference",
                  level, type_name(t), (long long)n);
            free(raw), free(qa), free(qb), free(ya), free(yb), free(x);
        }
    }
}

// relative RMS error of quantize -> dequantize on Gaussian rows, with the bound each type must meet
static void round_trips(void) {
    static const struct { int type; double max_rel_rmse; } bounds[] = {
        {LLMB_TYPE_F32, 0}, {LLMB_TYPE_F16, 4e-4}, {LLMB_TYPE_BF16, 3e-3}, {LLMB_TYPE_Q8_0, 0.01}, {LLMB_TYPE_Q8_K, 0.01},
        {LLMB_TYPE_Q6_K, 0.03}, {LLMB_TYPE_Q5_0, 0.06}, {LLMB_TYPE_Q5_1, 0.06}, {LLMB_TYPE_Q5_K, 0.05},
        {LLMB_TYPE_Q4_0, 0.12}, {LLMB_TYPE_Q4_1, 0.12}, {LLMB_TYPE_Q4_K, 0.1}, {LLMB_TYPE_IQ4_NL, 0.09},
        {LLMB_TYPE_IQ4_XS, 0.09}, {LLMB_TYPE_Q3_K, 0.17}, {LLMB_TYPE_Q2_K, 0.32},
    };
    const int64_t nrows = 3, ncols = 1024, n = nrows * ncols;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    uint8_t *q = malloc(n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = rng_normal();
    for (size_t k = 0; k < sizeof bounds / sizeof bounds[0]; k++) {
        int t = bounds[k].type;
        CHECK(llmb_quantize(t, x, q, nrows, ncols, 0) == LLMB_OK, "quantize %s: %s", type_name(t), llmb_last_error());
        CHECK(llmb_dequantize(t, q, y, nrows, ncols, 0) == LLMB_OK, "dequantize %s: %s", type_name(t), llmb_last_error());
        double err = 0, ref = 0;
        for (int64_t i = 0; i < n; i++) err += (double)(x[i] - y[i]) * (x[i] - y[i]), ref += (double)x[i] * x[i];
        double rel = sqrt(err / ref);
        CHECK(rel <= bounds[k].max_rel_rmse, "%s round trip: relative RMSE %.5f > %.5f", type_name(t), rel,
              bounds[k].max_rel_rmse);
    }
    free(x), free(y), free(q);
}

// whole tensors: any thread count gives the same bytes; bad arguments fail with a message
static void whole_tensors(void) {
    const int64_t nrows = 129, ncols = 2560, n = nrows * ncols;   // above the threading threshold
    float *x = malloc(n * 4), *y1 = malloc(n * 4), *y4 = malloc(n * 4);
    uint8_t *q1 = malloc(n * 4), *q4 = malloc(n * 4);
    random_floats(x, n, 256, 0);
    int types[] = {LLMB_TYPE_Q4_K, LLMB_TYPE_Q8_0, LLMB_TYPE_F16};
    for (size_t k = 0; k < 3; k++) {
        int t = types[k];
        CHECK(llmb_quantize(t, x, q1, nrows, ncols, 1) == LLMB_OK, "%s", llmb_last_error());
        CHECK(llmb_quantize(t, x, q4, nrows, ncols, 4) == LLMB_OK, "%s", llmb_last_error());
        size_t bytes = (size_t)(n / llmb_type_traits_get(t)->blck_size * llmb_type_traits_get(t)->type_size);
        CHECK(memcmp(q1, q4, bytes) == 0, "%s: quantize with 1 and 4 threads differ", type_name(t));
        CHECK(llmb_dequantize(t, q1, y1, nrows, ncols, 1) == LLMB_OK, "%s", llmb_last_error());
        CHECK(llmb_dequantize(t, q1, y4, nrows, ncols, 4) == LLMB_OK, "%s", llmb_last_error());
        CHECK(memcmp(y1, y4, (size_t)n * 4) == 0, "%s: dequantize with 1 and 4 threads differ", type_name(t));
    }
    // importance weights: any thread count, NULL weights and weight-blind types as llmb_quantize, NaN refused
    float *w = malloc(ncols * 4);
    for (int64_t j = 0; j < ncols; j++) w[j] = (float)((j * 37) % 11) + 0.25f;
    int wtypes[] = {LLMB_TYPE_Q2_K, LLMB_TYPE_IQ4_NL, LLMB_TYPE_Q5_1};
    for (size_t k = 0; k < 3; k++) {
        int t = wtypes[k];
        size_t bytes = (size_t)(n / llmb_type_traits_get(t)->blck_size * llmb_type_traits_get(t)->type_size);
        CHECK(llmb_quantize_imatrix(t, x, q1, nrows, ncols, w, 1) == LLMB_OK, "%s", llmb_last_error());
        CHECK(llmb_quantize_imatrix(t, x, q4, nrows, ncols, w, 4) == LLMB_OK, "%s", llmb_last_error());
        CHECK(memcmp(q1, q4, bytes) == 0, "%s: weighted quantize with 1 and 4 threads differ", type_name(t));
        CHECK(llmb_quantize(t, x, q4, nrows, ncols, 0) == LLMB_OK, "%s", llmb_last_error());
        CHECK(memcmp(q1, q4, bytes) != 0, "%s: the weights changed nothing", type_name(t));
        CHECK(llmb_quantize_imatrix(t, x, q1, nrows, ncols, NULL, 0) == LLMB_OK && memcmp(q1, q4, bytes) == 0,
              "%s: no weights must quantize as llmb_quantize", type_name(t));
    }
    CHECK(llmb_quantize_imatrix(LLMB_TYPE_Q8_0, x, q1, nrows, ncols, w, 0) == LLMB_OK, "%s", llmb_last_error());
    CHECK(llmb_quantize(LLMB_TYPE_Q8_0, x, q4, nrows, ncols, 0) == LLMB_OK && memcmp(q1, q4, (size_t)n / 32 * 34) == 0,
          "Q8_0 ignores the weights, as llama.cpp's quantize_q8_0 does");
    w[5] = NAN;
    CHECK(llmb_quantize_imatrix(LLMB_TYPE_Q4_K, x, q1, nrows, ncols, w, 0) == LLMB_E_ARG &&
              strstr(llmb_last_error(), "finite"), "NaN weights: %s", llmb_last_error());
    free(w);
    CHECK(llmb_dequantize(LLMB_TYPE_Q4_K, q1, y1, 2, 100, 0) == LLMB_E_ARG && strstr(llmb_last_error(), "multiple"),
          "ncols not a multiple of the block size: %s", llmb_last_error());
    CHECK(llmb_dequantize(24, q1, y1, 1, 256, 0) == LLMB_E_UNSUPPORTED && strstr(llmb_last_error(), "I8"),
          "I8 is not supported: %s", llmb_last_error());
    CHECK(llmb_quantize(16, x, q1, 1, 256, 0) == LLMB_E_UNSUPPORTED && strstr(llmb_last_error(), "IQ2_XXS"),
          "quantizing to IQ2_XXS is not supported: %s", llmb_last_error());
    CHECK(llmb_dequantize(99, q1, y1, 1, 256, 0) == LLMB_E_ARG, "unknown type id: %s", llmb_last_error());
    CHECK(llmb_quantize(LLMB_TYPE_Q8_0, x, q1, -1, 32, 0) == LLMB_E_ARG, "negative rows: %s", llmb_last_error());
    CHECK(llmb_quantize(LLMB_TYPE_Q8_0, x, q1 + 1, 1, 32, 0) == LLMB_E_ARG, "misaligned: %s", llmb_last_error());
    CHECK(llmb_quantize(LLMB_TYPE_Q8_0, x, q1, INT64_MAX / 64, 64, 0) == LLMB_E_ARG, "overflow: %s", llmb_last_error());
    CHECK(llmb_quantize(LLMB_TYPE_Q8_0, x, q1, 1, 32, -2) == LLMB_E_ARG, "negative threads: %s", llmb_last_error());
    CHECK(llmb_dequantize(LLMB_TYPE_Q8_0, NULL, NULL, 0, 32, 0) == LLMB_OK, "empty tensor: %s", llmb_last_error());
    x[77] = NAN;
    CHECK(llmb_quantize(LLMB_TYPE_Q4_K, x, q1, 1, 256, 0) == LLMB_E_ARG && strstr(llmb_last_error(), "NaN"),
          "NaN input: %s", llmb_last_error());
    CHECK(llmb_quantize(LLMB_TYPE_F16, x, q1, 1, 256, 0) == LLMB_OK, "NaN to F16: %s", llmb_last_error());
    free(x), free(y1), free(y4), free(q1), free(q4);
}

int main(void) {
    const llmb_simd_level levels[] = {LLMB_SIMD_NEON, LLMB_SIMD_AVX2, LLMB_SIMD_AVX512};
    const llmb_simd_level best = llmb_simd_detected();
    int tested = 0;
    for (size_t k = 0; k < sizeof levels / sizeof levels[0]; k++) {
        if (llmb_simd_set(levels[k]) != LLMB_OK) continue;
        compare_level(llmb_simd_name(levels[k]));
        tested++;
    }
    printf("compared SIMD kernels at %d level(s) (best here: %s)\n", tested, llmb_simd_name(best));
    llmb_simd_set(best);
    round_trips();
    whole_tensors();
    return check_summary();
}
