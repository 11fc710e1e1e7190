// test_attention.c — llmb_attend (csrc/attention.c) on random queries, keys and values over odd key
// counts and head sizes. Checked:
//   - the SIMD version bit-identical to the scalar one (llmb_attend_ref), at every tile size and at
//     every SIMD level this CPU has (AVX-512, AVX2+FMA, scalar; head sizes that are multiples of 8
//     but not of 16 take the AVX2 version at the AVX-512 level too);
//   - each query's output bit-identical whether alone or in a tile with queries of other key counts
//     (batch invariance);
//   - the scalar version vs a float64 softmax attention: |out - ref| <= ATOL + RTOL * max_j |v_j[d]|;
//   - vexp.h's exp within 3e-7 relative of exp() over [-87, 88], within one denormal step down to
//     -104, 0 below and inf above; its 8-lane (AVX2) and 16-lane (AVX-512) versions bit-identical
//     to the scalar one on every float of [-104.5, -86] (denormal results) and [88, 89] (overflow),
//     a sweep of bit patterns over [-110, 110], random floats and the special values;
//   - outputs that do not depend on the transposed keys' padding (zeros, NaN or huge values there);
//   - llmb_att_gather (paged F32/F16/Q8_0 rows to transposed float keys and value rows) bit for bit
//     vs its scalar version, and that vs to_float row by row;
//   - llmb_attend_paged (attention straight over the paged cache, keys in chunks) bit for bit vs the
//     gathered keys and values through llmb_attend_window, at 1..1000 keys, windows, keys from 0 or 64, and its
//     three steps (scores, softmax, values) in pieces as threads share them bit for bit vs one call (test_paged);
//   - SwiGLU (same exp) SIMD vs scalar bit for bit at odd lengths, and vs float64 within 1e-6 relative;
//   - llmb_attend_window (sliding windows): SIMD vs scalar, tile vs alone, keys shifted by 16 or 64 places
//   - llmb_attend_block: up to LLMB_ATT_BLOCK queries of mixed spans, each the scalar version's bits alone
//     bit for bit, and vs a float64 softmax over each window (test_window);
//   - llmb_row_lse (the sampler's log-sum-exp and argmax, same exp): every SIMD level's bits equal the scalar
//     level's at odd lengths, with ties and far-below-max entries, and within 1e-6 of a float64 log-sum-exp.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "internal.h"
#include "ops.h"
#include "quants.h"
#include "sampler.h"
#include "vexp.h"

#define ATOL 1e-6
#define RTOL 2e-5   // float32 scores, exp and weighted sums of up to ~300 terms

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float rng_normal(void) {
    double u[2];
    for (int k = 0; k < 2; k++) {
        rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
        u[k] = ((rng_state * 0x2545F4914F6CDD1Dull >> 11) + 0.5) * 0x1p-53;
    }
    return (float)(sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
}

static void ref_f64(const float *q, int nk, const float *kt, size_t ldk, const float *v, int hd, float scale, double *o) {
    double *s = malloc((size_t)nk * sizeof *s), mx = -INFINITY, sum = 0;
    for (int j = 0; j < nk; j++) {
        double a = 0;
        for (int d = 0; d < hd; d++) a += (double)q[d] * kt[(size_t)d * ldk + j];
        s[j] = a * scale;
        if (s[j] > mx) mx = s[j];
    }
    for (int j = 0; j < nk; j++) sum += s[j] = exp(s[j] - mx);
    for (int d = 0; d < hd; d++) {
        double a = 0;
        for (int j = 0; j < nk; j++) a += s[j] * v[(size_t)j * hd + d];
        o[d] = a / sum;
    }
    free(s);
}

// nkeys random keys (transposed, rows of ldk: kt[d * ldk + j]) and values (v[j * hd + d]), then nq queries
static void fill_random(float *kt, float *v, size_t ldk, int hd, int nkeys, float *q, int nq) {
    for (int d = 0; d < hd; d++)
        for (int j = 0; j < nkeys; j++) kt[(size_t)d * ldk + j] = 2.0f * rng_normal();
    for (int j = 0; j < nkeys; j++)
        for (int d = 0; d < hd; d++) v[(size_t)j * hd + d] = rng_normal();
    for (int i = 0; i < nq * hd; i++) q[i] = 2.0f * rng_normal();
}

static void test_shape(int hd, int nkeys) {
    const size_t ldk = llmb_att_ldk(nkeys);
    float *kt = calloc(ldk * hd, sizeof *kt), *v = calloc(ldk * hd, sizeof *v), *sc = malloc(LLMB_ATT_Q * ldk * sizeof *sc);
    float *q = malloc((size_t)LLMB_ATT_Q * hd * sizeof *q), *out = malloc((size_t)3 * LLMB_ATT_Q * hd * sizeof *out);
    double *o64 = malloc((size_t)hd * sizeof *o64);
    const float scale = 1.0f / sqrtf((float)hd);
    fill_random(kt, v, ldk, hd, nkeys, q, LLMB_ATT_Q);
    // key counts of the tile: nkeys and fewer (as the tokens of one prompt run)
    int nk[LLMB_ATT_Q];
    for (int i = 0; i < LLMB_ATT_Q; i++) nk[i] = nkeys - (i * 37) % nkeys;
    const float *qp[LLMB_ATT_Q];
    float *o_simd[LLMB_ATT_Q], *o_ref[LLMB_ATT_Q], *o_one[LLMB_ATT_Q];
    for (int i = 0; i < LLMB_ATT_Q; i++) {
        qp[i] = q + (size_t)i * hd;
        o_simd[i] = out + (size_t)i * hd;
        o_ref[i] = out + (size_t)(LLMB_ATT_Q + i) * hd;
        o_one[i] = out + (size_t)(2 * LLMB_ATT_Q + i) * hd;
    }
    for (int nq = 1; nq <= LLMB_ATT_Q; nq++) {
        llmb_attend(nq, qp, nk, kt, ldk, v, hd, scale, sc, o_simd);
        llmb_attend_ref(nq, qp, nk, kt, ldk, v, hd, scale, sc, o_ref);
        for (int i = 0; i < nq; i++) {
            llmb_attend(1, &qp[i], &nk[i], kt, ldk, v, hd, scale, sc, &o_one[i]);
            CHECK(!memcmp(o_simd[i], o_ref[i], (size_t)hd * sizeof(float)), "hd %d keys %d nq %d query %d: simd != scalar",
                  hd, nk[i], nq, i);
            CHECK(!memcmp(o_simd[i], o_one[i], (size_t)hd * sizeof(float)), "hd %d keys %d nq %d query %d: tile != alone",
                  hd, nk[i], nq, i);
            ref_f64(qp[i], nk[i], kt, ldk, v, hd, scale, o64);
            double worst = 0;
            for (int d = 0; d < hd; d++) {
                double vmax = 0;
                for (int j = 0; j < nk[i]; j++) vmax = fmax(vmax, fabs(v[(size_t)j * hd + d]));
                worst = fmax(worst, fabs(o_ref[i][d] - o64[d]) / (ATOL + RTOL * vmax));
            }
            CHECK(worst <= 1.0, "hd %d keys %d query %d: error %.3g of the tolerance", hd, nk[i], i, worst);
        }
    }
    // the padding of kt past nkeys (llmb_att_gather leaves it as it was) changes no output
    const float junk[2] = {NAN, 3e38f};
    for (int k = 0; k < 2; k++) {
        for (int d = 0; d < hd; d++)
            for (size_t j = (size_t)nkeys; j < ldk; j++) kt[(size_t)d * ldk + j] = junk[k];
        llmb_attend(LLMB_ATT_Q, qp, nk, kt, ldk, v, hd, scale, sc, o_simd);   // zero-padded results above
        for (int i = 0; i < LLMB_ATT_Q; i++) {
            llmb_attend_ref(1, &qp[i], &nk[i], kt, ldk, v, hd, scale, sc, &o_one[i]);
            CHECK(!memcmp(o_simd[i], o_ref[i], (size_t)hd * sizeof(float)) &&
                      !memcmp(o_one[i], o_ref[i], (size_t)hd * sizeof(float)),
                  "hd %d keys %d query %d: the padding (%g) changed the output", hd, nk[i], i, junk[k]);
        }
    }
    free(kt), free(v), free(sc), free(q), free(out), free(o64);
}


// llmb_attend_window: query i over keys lo[i] <= j < nk[i] (a sliding window). The SIMD version bit-identical
// to the scalar one, each query alone as in the tile, the same bits when every key sits 16 or 64 places
// further (the caller's gather start), and within tolerance of a float64 softmax over the window.
static void test_window(int hd, int nkeys) {
    const int shift = 64, n2 = nkeys + shift;
    const size_t ldk = llmb_att_ldk(n2);
    float *kt = calloc(ldk * hd, sizeof *kt), *v = calloc(ldk * hd, sizeof *v), *sc = malloc(LLMB_ATT_Q * ldk * sizeof *sc);
    float *kt2 = calloc(ldk * hd, sizeof *kt2), *v2 = calloc(ldk * hd, sizeof *v2);
    float *q = malloc((size_t)LLMB_ATT_Q * hd * sizeof *q), *out = malloc((size_t)4 * LLMB_ATT_Q * hd * sizeof *out);
    double *o64 = malloc((size_t)hd * sizeof *o64);
    const float scale = 1.0f / sqrtf((float)hd);
    fill_random(kt, v, ldk, hd, nkeys, q, LLMB_ATT_Q);
    int lo[LLMB_ATT_Q], nk[LLMB_ATT_Q], lo2[LLMB_ATT_Q], nk2[LLMB_ATT_Q];
    for (int i = 0; i < LLMB_ATT_Q; i++) {   // windows of 1..21 keys ending at various keys
        nk[i] = nkeys - (i * 37) % nkeys;
        const int w = 1 + (i * 13 + nkeys) % 21;
        lo[i] = nk[i] > w ? nk[i] - w : 0;
    }
    const float *qp[LLMB_ATT_Q];
    float *o_simd[LLMB_ATT_Q], *o_ref[LLMB_ATT_Q], *o_one[LLMB_ATT_Q], *o_shift[LLMB_ATT_Q];
    for (int i = 0; i < LLMB_ATT_Q; i++) {
        qp[i] = q + (size_t)i * hd;
        o_simd[i] = out + (size_t)i * hd;
        o_ref[i] = out + (size_t)(LLMB_ATT_Q + i) * hd;
        o_one[i] = out + (size_t)(2 * LLMB_ATT_Q + i) * hd;
        o_shift[i] = out + (size_t)(3 * LLMB_ATT_Q + i) * hd;
    }
    for (int sh = 16; sh <= shift; sh += shift - 16) {   // the same keys 16, then 64 places further
        memset(kt2, 0, ldk * hd * sizeof *kt2);
        for (int d = 0; d < hd; d++)
            for (int j = 0; j < nkeys; j++) kt2[(size_t)d * ldk + j + sh] = kt[(size_t)d * ldk + j];
        memcpy(v2 + (size_t)sh * hd, v, (size_t)nkeys * hd * sizeof *v);
        for (int i = 0; i < LLMB_ATT_Q; i++) lo2[i] = lo[i] + sh, nk2[i] = nk[i] + sh;
        for (int nq = 1; nq <= LLMB_ATT_Q; nq++) {
            llmb_attend_window(nq, qp, lo, nk, kt, ldk, v, hd, scale, sc, o_simd);
            llmb_attend_window_ref(nq, qp, lo, nk, kt, ldk, v, hd, scale, sc, o_ref);
            llmb_attend_window(nq, qp, lo2, nk2, kt2, ldk, v2, hd, scale, sc, o_shift);
            for (int i = 0; i < nq; i++) {
                llmb_attend_window(1, &qp[i], &lo[i], &nk[i], kt, ldk, v, hd, scale, sc, &o_one[i]);
                CHECK(!memcmp(o_simd[i], o_ref[i], (size_t)hd * sizeof(float)),
                      "window hd %d keys %d..%d nq %d: simd != scalar", hd, lo[i], nk[i], nq);
                CHECK(!memcmp(o_simd[i], o_one[i], (size_t)hd * sizeof(float)),
                      "window hd %d keys %d..%d nq %d: tile != alone", hd, lo[i], nk[i], nq);
                CHECK(!memcmp(o_simd[i], o_shift[i], (size_t)hd * sizeof(float)),
                      "window hd %d keys %d..%d nq %d: keys %d places further give other bits", hd, lo[i], nk[i], nq, sh);
                ref_f64(qp[i], nk[i] - lo[i], kt + lo[i], ldk, v + (size_t)lo[i] * hd, hd, scale, o64);
                double worst = 0;
                for (int d = 0; d < hd; d++) {
                    double vmax = 0;
                    for (int j = lo[i]; j < nk[i]; j++) vmax = fmax(vmax, fabs(v[(size_t)j * hd + d]));
                    worst = fmax(worst, fabs(o_ref[i][d] - o64[d]) / (ATOL + RTOL * vmax));
                }
                CHECK(worst <= 1.0, "window hd %d keys %d..%d: error %.3g of the tolerance", hd, lo[i], nk[i], worst);
            }
        }
    }
    free(kt), free(v), free(kt2), free(v2), free(sc), free(q), free(out), free(o64);
}


// llmb_attend_block: up to LLMB_ATT_BLOCK queries of mixed key counts and windows (the tiles' spans
// differ, as a prompt's tokens' do) give each query the scalar version's bits for it alone.
static void test_block(int hd, int nkeys) {
    const size_t ldk = llmb_att_ldk(nkeys);
    float *kt = calloc(ldk * hd, sizeof *kt), *v = calloc(ldk * hd, sizeof *v);
    float *sc = malloc(LLMB_ATT_BLOCK * ldk * sizeof *sc), *sc1 = malloc(LLMB_ATT_Q * ldk * sizeof *sc1);
    float *q = malloc((size_t)LLMB_ATT_BLOCK * hd * sizeof *q), *out = malloc((size_t)2 * LLMB_ATT_BLOCK * hd * sizeof *out);
    const float scale = 1.0f / sqrtf((float)hd);
    fill_random(kt, v, ldk, hd, nkeys, q, LLMB_ATT_BLOCK);
    const float *qp[LLMB_ATT_BLOCK];
    float *o[LLMB_ATT_BLOCK], *o_ref[LLMB_ATT_BLOCK];
    int lo[LLMB_ATT_BLOCK], nk[LLMB_ATT_BLOCK];
    for (int i = 0; i < LLMB_ATT_BLOCK; i++) {
        qp[i] = q + (size_t)i * hd;
        o[i] = out + (size_t)i * hd;
        o_ref[i] = out + (size_t)(LLMB_ATT_BLOCK + i) * hd;
        // causal (a prompt's consecutive tokens) for most, a few far shorter, every fifth a window
        nk[i] = i % 7 == 6 ? 1 + (i * 131) % nkeys : nkeys - (LLMB_ATT_BLOCK - 1 - i) % nkeys;
        lo[i] = i % 5 == 4 && nk[i] > 40 ? nk[i] - 40 + i : 0;
    }
    const int counts[] = {1, 3, 4, 5, 8, 13, LLMB_ATT_BLOCK};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        const int nq = counts[c];
        for (int i = 0; i < nq; i++) memset(o[i], 0xff, (size_t)hd * sizeof(float));   // NaNs: a write missed shows
        llmb_attend_block(nq, qp, lo, nk, kt, ldk, v, hd, scale, sc, o);
        for (int i = 0; i < nq; i++) {
            llmb_attend_window_ref(1, &qp[i], &lo[i], &nk[i], kt, ldk, v, hd, scale, sc1, &o_ref[i]);
            CHECK(!memcmp(o[i], o_ref[i], (size_t)hd * sizeof(float)), "block hd %d keys %d..%d query %d of %d: "
                  "other bits than alone (scalar)", hd, lo[i], nk[i], i, nq);
        }
    }
    free(kt), free(v), free(sc), free(sc1), free(q), free(out);
}

#if LLMB_VEXP_AVX2
LLMB_A256 static void exp8_n(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, llmb_exp8(_mm256_loadu_ps(x + i)));
}
#endif
#if LLMB_VEXP_AVX512
LLMB_A512 static void exp16_n(const float *x, float *y, int n) {
    for (int i = 0; i < n; i += 16) _mm512_storeu_ps(y + i, llmb_exp16(_mm512_loadu_ps(x + i)));
}
#endif

// vexp.h's SIMD exps vs llmb_exp_scalar bit for bit (a NaN only as NaN) on x[0..n), n a multiple of 16;
// returns the number of differences and leaves the first in *bad_x. NaN inputs are skipped for exp16,
// whose clamp (max(x, LO) first) turns them into exp(-104) = 0 where the scalar exp and exp8 give NaN.
#define EXP_CHUNK 4096
static long exp_simd_diffs(int lanes, const float *x, int n, float *bad_x) {
    float y[EXP_CHUNK] = {0};
#if LLMB_VEXP_AVX512
    if (lanes == 16) exp16_n(x, y, n);
#endif
#if LLMB_VEXP_AVX2
    if (lanes == 8) exp8_n(x, y, n);
#endif
    long bad = 0;
    for (int i = 0; i < n; i++) {
        if (lanes == 16 && isnan(x[i])) continue;
        const float r = llmb_exp_scalar(x[i]);
        if (isnan(r) ? !isnan(y[i]) : memcmp(&r, &y[i], sizeof r) != 0) {
            if (!bad) *bad_x = x[i];
            bad++;
        }
    }
    return bad;
}

static float f_of_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t bits_of_f(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

// exp_simd_diffs on every step-th float from lo to hi (both of one sign) by bit pattern; counts them
static long exp_sweep(int lanes, float lo, float hi, uint32_t step, long *count, float *bad_x) {
    float x[EXP_CHUNK];
    uint32_t a = bits_of_f(lo), b = bits_of_f(hi);
    if (a > b) { const uint32_t t = a; a = b; b = t; }
    long bad = 0;
    int n = 0;
    for (uint64_t u = a; u <= b; u += step) {
        x[n++] = f_of_bits((uint32_t)u);
        if (n == EXP_CHUNK || u + step > b) {
            while (n % 16) x[n++] = 0.0f;
            bad += exp_simd_diffs(lanes, x, n, bad_x);
            *count += n;
            n = 0;
        }
    }
    return bad;
}

static void test_exp_simd(void) {
    for (int lanes = 8; lanes <= 16; lanes += 8) {
        if ((lanes == 8 && (!LLMB_VEXP_AVX2 || llmb_simd_detected() < LLMB_SIMD_AVX2)) ||
            (lanes == 16 && (!LLMB_VEXP_AVX512 || llmb_simd_detected() < LLMB_SIMD_AVX512)))
            continue;
        long count = 0, bad = 0;
        float bad_x = 0;
        bad += exp_sweep(lanes, -86.0f, -104.5f, 1, &count, &bad_x);   // every float: denormal results, 0 below
        bad += exp_sweep(lanes, 88.0f, 89.0f, 1, &count, &bad_x);      // every float: the overflow to inf
        bad += exp_sweep(lanes, 0.0f, 110.0f, 307, &count, &bad_x);    // all binades, both signs, the clamps
        bad += exp_sweep(lanes, -0.0f, -110.0f, 307, &count, &bad_x);
        float x[EXP_CHUNK];
        for (int rep = 0; rep < 64; rep++) {   // random floats: uniform in [-110, 110], then random bit patterns
            for (int i = 0; i < EXP_CHUNK; i++) {
                rng_state ^= rng_state >> 12, rng_state ^= rng_state << 25, rng_state ^= rng_state >> 27;
                const uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
                x[i] = rep % 2 ? f_of_bits((uint32_t)(r >> 32)) : (float)((double)(r >> 11) * 0x1p-53 * 220.0 - 110.0);
            }
            bad += exp_simd_diffs(lanes, x, EXP_CHUNK, &bad_x);
            count += EXP_CHUNK;
        }
        const float special[16] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, LLMB_VEXP_LO, LLMB_VEXP_HI,
                                   nextafterf(LLMB_VEXP_LO, 0.0f), nextafterf(LLMB_VEXP_LO, -200.0f),
                                   nextafterf(LLMB_VEXP_HI, 0.0f), nextafterf(LLMB_VEXP_HI, 200.0f),
                                   0x1p-149f, -0x1p-126f, 3.4e38f, -3.4e38f};
        bad += exp_simd_diffs(lanes, special, 16, &bad_x);
        count += 16;
        CHECK(!bad, "exp%d: %ld of %ld floats differ from the scalar exp (first: exp(%a))", lanes, bad, count, bad_x);
        printf("exp%d vs scalar: %ld floats compared, %ld differ\n", lanes, count, bad);
    }
}

static void test_exp_swiglu(void) {
    double worst = 0;
    for (int i = 0; i <= 200000; i++) {
        const float x = -87.0f + 175.0f * (float)i / 200000;   // normal results (below: denormals, then 0)
        const double ref = exp((double)x);
        worst = fmax(worst, fabs(llmb_exp_scalar(x) - ref) / ref);
        const float xd = -104.0f + 17.0f * (float)i / 200000;
        CHECK(fabs(llmb_exp_scalar(xd) - exp((double)xd)) <= 0x1p-149, "exp(%g) denormal", xd);
    }
    CHECK(worst <= 3e-7, "exp: relative error %.3g", worst);
    CHECK(llmb_exp_scalar(-200.0f) == 0.0f && isinf(llmb_exp_scalar(200.0f)) && llmb_exp_scalar(0.0f) == 1.0f,
          "exp: limits");
    for (int n = 1; n <= 77; n += 19) {
        float g[77], u[77], a[77], b[77];
        for (int i = 0; i < n; i++) g[i] = 6.0f * rng_normal(), u[i] = rng_normal();
        g[0] = -120.0f;
        memcpy(a, g, sizeof g), memcpy(b, g, sizeof g);
        llmb_swiglu(a, u, n);
        llmb_swiglu_ref(b, u, n);
        CHECK(!memcmp(a, b, (size_t)n * sizeof(float)), "swiglu n %d: simd != scalar", n);
        for (int i = 0; i < n; i++) {
            const double ref = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            CHECK(fabs(b[i] - ref) <= 1e-30 + 1e-6 * fabs(ref), "swiglu %d: %g vs %g", i, b[i], ref);
        }
        // GeGLU (gelu with the tanh approximation), the same way
        memcpy(a, g, sizeof g), memcpy(b, g, sizeof g);
        llmb_geglu(a, u, n);
        llmb_geglu_ref(b, u, n);
        CHECK(!memcmp(a, b, (size_t)n * sizeof(float)), "geglu n %d: simd != scalar", n);
        for (int i = 0; i < n; i++) {
            const double x = g[i], ref = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))) * u[i];
            CHECK(fabs(b[i] - ref) <= 1e-30 + 2e-6 * fabs(ref) + 1e-7 * fabs(u[i]), "geglu %d: %g vs %g", i, b[i], ref);
        }
    }
}

// A test cache of nblk blocks of bs slots holding two KV heads of hd values of `type`, the head under
// test the second: its keys stored by llmb_kv_store_key, its values as rows (from_float_ref), every
// element ks (keys) or vs (values) times a normal draw; blocks and value rows padded past the data.
// kf (nblk * bs * hd floats, or NULL) gets each key as to_float_ref reads back its from_float_ref row.
typedef struct { uint8_t *kc, *vc; int32_t *blocks; llmb_kv_head h; } test_cache;
static test_cache test_cache_new(int type, int hd, int nblk, int bs, int first, float ks, float vs, int perm, float *kf) {
    const llmb_quant_traits *t = llmb_quant_traits_get(type);
    const size_t row = llmb_kv_row_bytes(type, hd), row_stride = 2 * row + 8, block_stride = (size_t)bs * row_stride + 24;
    test_cache c = {calloc((size_t)nblk * block_stride, 1), calloc((size_t)nblk * block_stride, 1),
                    malloc((size_t)nblk * sizeof(int32_t)), {0}};
    for (int b = 0; b < nblk; b++) c.blocks[b] = (b * perm + 3) % nblk;   // a permutation: perm, nblk coprime
    float *tmp = malloc((size_t)hd * sizeof *tmp);
    uint8_t *q = malloc(row);
    for (int b = 0; b < nblk; b++)
        for (int s = 0; s < bs; s++) {
            for (int d = 0; d < hd; d++) tmp[d] = ks * rng_normal();
            llmb_kv_store_key(type, c.kc + (size_t)b * block_stride + (size_t)bs * row, bs, s, tmp, hd);
            if (kf) {
                t->from_float_ref(tmp, q, hd);
                t->to_float_ref(q, kf + ((size_t)b * bs + s) * hd, hd);
            }
            for (int d = 0; d < hd; d++) tmp[d] = vs * rng_normal();
            t->from_float_ref(tmp, c.vc + (size_t)b * block_stride + (size_t)s * row_stride + row, hd);
        }
    c.h = (llmb_kv_head){type, c.kc + (size_t)bs * row, c.vc + row, c.blocks, bs, block_stride, row_stride, first};
    free(tmp), free(q);
    return c;
}
static void test_cache_free(test_cache *c) { free(c->kc), free(c->vc), free(c->blocks); }

// llmb_att_gather vs its scalar version bit for bit (kt's first nkeys columns, v), for F32, F16
// and Q8_0 heads of random values in a paged layout (blocks in shuffled order, odd block sizes), and
// the scalar version vs the type's row conversions: each key as from_float_ref then to_float_ref
// give it (llmb_kv_store_key's transposed block holds the same values), each value row's to_float.
static void test_gather(int type, int hd, int nkeys, int bs) {
    const llmb_quant_traits *t = llmb_quant_traits_get(type);
    const size_t ldk = llmb_att_ldk(nkeys);
    const int nblk = (nkeys + bs - 1) / bs + 3;
    float *kf = malloc((size_t)nblk * bs * hd * sizeof *kf), *tmp = malloc((size_t)hd * sizeof *tmp);
    test_cache c = test_cache_new(type, hd, nblk, bs, 0, 3.0f, 3.0f, 7, kf);   // 7, nblk coprime unless nblk % 7 == 0
    float *kt[2], *v[2];
    for (int i = 0; i < 2; i++) {
        kt[i] = malloc(ldk * hd * sizeof(float)), v[i] = malloc(ldk * hd * sizeof(float));
        for (size_t k = 0; k < ldk * hd; k++) kt[i][k] = v[i][k] = NAN;   // every key element must be written
    }
    llmb_att_gather(&c.h, nkeys, hd, kt[0], ldk, v[0]);
    llmb_att_gather_ref(&c.h, nkeys, hd, kt[1], ldk, v[1]);
    int kdiff = 0;
    for (int d = 0; d < hd; d++)
        kdiff += memcmp(kt[0] + (size_t)d * ldk, kt[1] + (size_t)d * ldk, (size_t)nkeys * sizeof(float)) != 0;
    CHECK(!kdiff, "gather type %d hd %d keys %d bs %d: keys differ", type, hd, nkeys, bs);
    CHECK(!memcmp(v[0], v[1], (size_t)nkeys * hd * sizeof(float)), "gather type %d hd %d keys %d bs %d: values differ",
          type, hd, nkeys, bs);
    int bad = 0;
    for (int j = 0; j < nkeys; j++) {
        const int b = c.blocks[j / bs], s = j % bs;
        for (int d = 0; d < hd; d++)
            bad += memcmp(&kf[((size_t)b * bs + s) * hd + d], &kt[1][(size_t)d * ldk + j], sizeof(float)) != 0;
        t->to_float_ref(c.h.v + (size_t)b * c.h.block_stride + (size_t)s * c.h.row_stride, tmp, hd);
        bad += memcmp(tmp, v[1] + (size_t)j * hd, (size_t)hd * sizeof(float)) != 0;
    }
    CHECK(!bad, "gather_ref type %d hd %d keys %d bs %d: %d elements not the rows' conversions", type, hd, nkeys, bs, bad);
    for (int i = 0; i < 2; i++) free(kt[i]), free(v[i]);
    test_cache_free(&c), free(kf), free(tmp);
}

// llmb_attend_paged (straight over the paged cache) vs llmb_att_gather_ref then llmb_attend_window_ref,
// bit for bit, and its scalar version likewise: random F32/F16/Q8_0 rows in a shuffled block table,
// key 0 at position `first` of the cache, 1..4 queries of other key counts, whole histories and
// sliding windows (lo > 0), the scratch and the work filled with NaN first (no result may read them).
static void test_paged(int type, int hd, int nkeys, int bs, int first) {
    const size_t ldk = llmb_att_ldk(nkeys);
    const int nblk = (first + nkeys + bs - 1) / bs + 2;
    // 5: a permutation unless nblk % 5 == 0
    test_cache c = test_cache_new(type, hd, nblk, bs, first, 2.0f, 1.0f, 5, NULL);
    const llmb_kv_head h = c.h;
    float *kt = malloc(ldk * hd * sizeof *kt), *v = malloc(ldk * hd * sizeof *v), *sc = malloc(LLMB_ATT_Q * ldk * sizeof *sc);
    const size_t nw = llmb_att_paged_work_floats(hd);
    float *work = malloc(nw * sizeof *work), *q = malloc((size_t)LLMB_ATT_Q * hd * sizeof *q);
    float *out = malloc((size_t)4 * LLMB_ATT_Q * hd * sizeof *out), *acc = malloc((size_t)LLMB_ATT_Q * hd * sizeof *acc);
    for (int i = 0; i < LLMB_ATT_Q * hd; i++) q[i] = 2.0f * rng_normal();
    const float scale = 1.0f / sqrtf((float)hd);
    const float *qp[LLMB_ATT_Q];
    float *o_ref[LLMB_ATT_Q], *o_paged[LLMB_ATT_Q], *o_pref[LLMB_ATT_Q], *o_split[LLMB_ATT_Q];
    for (int i = 0; i < LLMB_ATT_Q; i++) {
        qp[i] = q + (size_t)i * hd;
        o_ref[i] = out + (size_t)i * hd;
        o_paged[i] = out + (size_t)(LLMB_ATT_Q + i) * hd;
        o_pref[i] = out + (size_t)(2 * LLMB_ATT_Q + i) * hd;
        o_split[i] = out + (size_t)(3 * LLMB_ATT_Q + i) * hd;
    }
    for (int win = 0; win < 2; win++) {
        int lo[LLMB_ATT_Q], nk[LLMB_ATT_Q];
        for (int i = 0; i < LLMB_ATT_Q; i++) {   // the last query has every key (the decode token)
            nk[i] = nkeys - ((LLMB_ATT_Q - 1 - i) * 37) % nkeys;
            const int w = 1 + (i * 29 + nkeys) % 150;
            lo[i] = win && nk[i] > w ? nk[i] - w : 0;
        }
        for (int nq = 1; nq <= LLMB_ATT_Q; nq++) {
            const int *qn = nk + LLMB_ATT_Q - nq, *ql = lo + LLMB_ATT_Q - nq;   // the last nq: nkeys among them
            const float *const *qq = qp + LLMB_ATT_Q - nq;
            for (size_t k = 0; k < ldk * hd; k++) kt[k] = v[k] = NAN;
            llmb_att_gather_ref(&h, nkeys, hd, kt, ldk, v);
            llmb_attend_window_ref(nq, qq, ql, qn, kt, ldk, v, hd, scale, sc, o_ref);
            for (size_t k = 0; k < LLMB_ATT_Q * ldk; k++) sc[k] = NAN;
            for (size_t k = 0; k < nw; k++) work[k] = NAN;
            llmb_attend_paged(nq, qq, ql, qn, &h, hd, scale, sc, work, o_paged);
            for (size_t k = 0; k < LLMB_ATT_Q * ldk; k++) sc[k] = NAN;
            for (size_t k = 0; k < nw; k++) work[k] = NAN;
            llmb_attend_paged_ref(nq, qq, ql, qn, &h, hd, scale, sc, work, o_pref);
            // the three steps as threads share them: chunks in pieces of 1..3, last first, each through work
            // refilled with NaN; queries' softmax two at a time; output elements in pieces of 32 or 64 (all of hd
            // where it is no multiple of 32)
            for (size_t k = 0; k < LLMB_ATT_Q * ldk; k++) sc[k] = NAN;
            for (size_t k = 0; k < (size_t)LLMB_ATT_Q * hd; k++) acc[k] = NAN;
            for (int k1 = llmb_att_paged_chunks(nq, ql, qn), k0; k1 > 0; k1 = k0) {
                k0 = k1 - 1 - (k1 * 7 + nq) % 3;
                k0 = k0 < 0 ? 0 : k0;
                for (size_t k = 0; k < nw; k++) work[k] = NAN;
                llmb_attend_paged_scores(nq, qq, ql, qn, &h, hd, scale, sc, work, k0, k1);
            }
            float inv[LLMB_ATT_Q];
            for (int i = 0; i < nq; i += 2) llmb_attend_paged_softmax(nq, ql, qn, &h, hd, sc, inv, i, i + 2 < nq ? i + 2 : nq);
            for (int d0 = 0, d1; d0 < hd; d0 = d1) {
                d1 = hd % 32 ? hd : d0 + 32 * (1 + (d0 / 32 + nq) % 2);
                d1 = d1 > hd ? hd : d1;
                for (size_t k = 0; k < nw; k++) work[k] = NAN;
                llmb_attend_paged_values(nq, ql, qn, &h, hd, sc, inv, acc, work, d0, d1, o_split);
            }
            for (int i = 0; i < nq; i++) {
                CHECK(!memcmp(o_split[i], o_paged[i], (size_t)hd * sizeof(float)),
                      "paged in steps type %d hd %d keys %d..%d of %d first %d nq %d level %d: != in one call", type, hd,
                      ql[i], qn[i], nkeys, first, nq, (int)llmb_simd_active());
                CHECK(!memcmp(o_paged[i], o_ref[i], (size_t)hd * sizeof(float)),
                      "paged type %d hd %d keys %d..%d of %d first %d nq %d level %d: != gathered", type, hd, ql[i], qn[i],
                      nkeys, first, nq, (int)llmb_simd_active());
                CHECK(!memcmp(o_pref[i], o_ref[i], (size_t)hd * sizeof(float)),
                      "paged_ref type %d hd %d keys %d..%d of %d first %d nq %d: != gathered", type, hd, ql[i], qn[i],
                      nkeys, first, nq);
            }
        }
    }
    test_cache_free(&c), free(kt), free(v), free(sc), free(work), free(q), free(out), free(acc);
}

// RoPE's table from the inverse frequencies computed once equals the angle computed from pow() per
// position (the former code), bit for bit, with and without frequency factors; and cos/sin within
// float rounding of the float64 angle.
static void test_rope_table(void) {
    const int hds[] = {64, 128, 8, 80};
    const float bases[] = {10000.0f, 500000.0f, 1e6f};
    double f[64];
    float cs[128], ff[64];
    for (int i = 0; i < 64; i++) ff[i] = 1.0f + 0.37f * (float)(i % 5);
    for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
        for (size_t b = 0; b < sizeof bases / sizeof *bases; b++) {
            const int hd = hds[a];
            llmb_rope_freqs(f, hd, bases[b]);
            int bad = 0;
            for (int64_t pos = 0; pos < 5000; pos += 1 + pos / 3)
                for (int k = 0; k < 2; k++) {
                    const float scale = k ? 0.25f : 1.0f;
                    llmb_rope_table(cs, hd, pos, scale, f, k ? ff : NULL);
                    for (int i = 0; i < hd / 2; i++) {
                        double theta = (double)pos * scale * pow((double)bases[b], -2.0 * i / hd);
                        if (k) theta /= ff[i];
                        bad += cs[2 * i] != (float)cos(theta) || cs[2 * i + 1] != (float)sin(theta);
                    }
                }
            CHECK(!bad, "rope table hd %d base %g: %d entries differ from pow() per position", hd, bases[b], bad);
        }
}

// llmb_row_lse at the current SIMD level against the scalar level's bits (lse_ref, argmax_ref per case)
// and a float64 log-sum-exp. Rows: normal logits scaled by up to 30, some entries 200 below the max (exp
// underflows to 0), and a tie for the max at the last entry, which must not win (the first argmax does).
#define LSE_CASES 9
static const int lse_n[LSE_CASES] = {1, 7, 15, 16, 17, 33, 1000, 49152, 49157};
static void test_row_lse(double lse_ref[LSE_CASES], int argmax_ref[LSE_CASES], int record) {
    for (int c = 0; c < LSE_CASES; c++) {
        const int n = lse_n[c];
        float *x = malloc((size_t)n * sizeof *x);
        rng_state = 0x1234567ull + (uint64_t)c;
        const float scale = 1.0f + 29.0f * (float)(c % 3) / 2.0f;
        for (int i = 0; i < n; i++) x[i] = scale * rng_normal() - (i % 11 == 5 ? 200.0f : 0.0f);
        int am0 = 0;
        for (int i = 1; i < n; i++)
            if (x[i] > x[am0]) am0 = i;
        if (n > 1 && am0 != n - 1) x[n - 1] = x[am0];
        int am = -1;
        const double lse = llmb_row_lse(x, n, &am);
        double s = 0;
        for (int i = 0; i < n; i++) s += exp((double)x[i] - (double)x[am0]);
        const double ref64 = (double)x[am0] + log(s);
        CHECK(fabs(lse - ref64) <= 1e-6 * fmax(1.0, fabs(ref64)), "lse n %d: %.17g vs float64 %.17g", n, lse, ref64);
        CHECK(am == am0, "lse n %d: argmax %d, expected the first maximum %d", n, am, am0);
        if (record) lse_ref[c] = lse, argmax_ref[c] = am;
        else CHECK(memcmp(&lse, &lse_ref[c], sizeof lse) == 0 && am == argmax_ref[c],
                   "lse n %d at SIMD level %d: %.17g (argmax %d) vs the scalar level's %.17g (%d)", n,
                   (int)llmb_simd_active(), lse, am, lse_ref[c], argmax_ref[c]);
        free(x);
    }
}

// llmb_row_lse's maximum and first argmax at the current SIMD level against the scalar level on rows
// that random ones never give: NaN first or scattered, all -inf, +inf twice, signed zeros, and equal
// maxima where the lower index sits in a higher lane. The same argmax everywhere, and the same lse bits where
// no difference of entries is NaN (rows 4-7): vexp.h's clamp turns a NaN into a number at the SIMD levels.
#define EDGE_ROWS 8
#define EDGE_SIZES 4
static void test_row_max_edges(double ref[EDGE_ROWS][EDGE_SIZES], int am_ref[EDGE_ROWS][EDGE_SIZES], int record) {
    static const int sizes[EDGE_SIZES] = {5, 40, 64, 1037};
    for (int r = 0; r < EDGE_ROWS; r++)
        for (int z = 0; z < EDGE_SIZES; z++) {
            const int n = sizes[z];
            float *x = malloc((size_t)n * sizeof *x);
            rng_state = 0x51ull + (uint64_t)(r * EDGE_SIZES + z);
            for (int i = 0; i < n; i++) x[i] = rng_normal();
            switch (r) {
            case 0: x[0] = NAN; break;
            case 1: for (int i = 1; i < n; i += 7) x[i] = NAN; break;
            case 2: for (int i = 0; i < n; i++) x[i] = -INFINITY; break;
            case 3: for (int i = 0; i < n; i++) x[i] = i % 3 ? -INFINITY : NAN; x[0] = -INFINITY; break;
            case 4: x[n - 1] = INFINITY, x[n / 2] = INFINITY; break;
            case 5: for (int i = 0; i < n; i++) x[i] = -fabsf(x[i]); x[n / 3] = -0.0f, x[n - 1] = 0.0f; break;
            case 6: x[n > 17 ? 14 : 1] = 9.0f, x[n > 17 ? 17 : n - 1] = 9.0f; break;   // equal maxima, the first in a later lane
            default: for (int i = 0; i < n; i++) x[i] = 1.0f; break;   // all equal: index 0
            }
            int am = -1;
            const double lse = llmb_row_lse(x, n, &am);
            if (record) ref[r][z] = lse, am_ref[r][z] = am;
            else CHECK((r < 4 || !memcmp(&lse, &ref[r][z], sizeof lse)) && am == am_ref[r][z],
                       "row_lse edge row %d n %d at SIMD level %d: %.17g (argmax %d) vs scalar %.17g (%d)", r, n,
                       (int)llmb_simd_active(), lse, am, ref[r][z], am_ref[r][z]);
            free(x);
        }
}

int main(void) {
    double edge_ref[EDGE_ROWS][EDGE_SIZES];
    int edge_am[EDGE_ROWS][EDGE_SIZES];
    llmb_simd_set(LLMB_SIMD_SCALAR);
    test_row_max_edges(edge_ref, edge_am, 1);
    CHECK(edge_am[0][1] == 0 && edge_am[2][1] == 0 && edge_am[7][3] == 0 && edge_am[4][3] == 1037 / 2 &&
              edge_am[6][2] == 14 && edge_am[5][1] == 40 / 3,
          "row_lse edges, scalar: argmax %d %d %d %d %d %d", edge_am[0][1], edge_am[2][1], edge_am[7][3], edge_am[4][3],
          edge_am[6][2], edge_am[5][1]);
    for (int lvl = llmb_simd_detected(); lvl > 0; lvl--)
        if (llmb_simd_set((llmb_simd_level)lvl) == LLMB_OK) test_row_max_edges(edge_ref, edge_am, 0);
    double lse_ref[LSE_CASES];
    int argmax_ref[LSE_CASES];
    llmb_simd_set(LLMB_SIMD_SCALAR);
    test_row_lse(lse_ref, argmax_ref, 1);
    for (int lvl = llmb_simd_detected(); lvl > 0; lvl--)
        if (llmb_simd_set((llmb_simd_level)lvl) == LLMB_OK) test_row_lse(lse_ref, argmax_ref, 0);
    llmb_simd_set(llmb_simd_detected());
    const int hds[] = {64, 128, 80, 48, 8, 24, 40, 20};   // 24, 40: the 8-lane tail; 20: scalar only
    const int keys[] = {1, 2, 15, 16, 17, 63, 64, 65, 130, 301};
    test_exp_simd();
    for (int lvl = llmb_simd_detected(); lvl >= 0; lvl--) {
        if (llmb_simd_set((llmb_simd_level)lvl) != LLMB_OK) continue;
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++)
            for (size_t b = 0; b < sizeof keys / sizeof *keys; b++) {
                test_shape(hds[a], keys[b]), test_window(hds[a], keys[b]);
                test_block(hds[a], keys[b]);
            }
        for (size_t a = 0; a < sizeof hds / sizeof *hds; a++) test_block(hds[a], 1000);   // many 64-key chunks
        test_exp_swiglu();
        test_rope_table();
        const int gtypes[] = {LLMB_TYPE_F32, LLMB_TYPE_F16, LLMB_TYPE_Q8_0};
        const int ghds[] = {64, 128, 96, 32, 48, 8};
        const int gkeys[] = {1, 15, 16, 17, 63, 64, 65, 301};
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < sizeof ghds / sizeof *ghds; b++)
                for (size_t c = 0; c < sizeof gkeys / sizeof *gkeys; c++) {
                    if (gtypes[a] == LLMB_TYPE_Q8_0 && ghds[b] % LLMB_QK) continue;
                    test_gather(gtypes[a], ghds[b], gkeys[c], c % 3 == 0 ? 5 : c % 3 == 1 ? 16 : 64);
                }
        const int phds[] = {64, 128, 96, 32, 48, 8, 24, 20};   // 24: the 8-lane tail at AVX-512; 20: scalar only
        const int pkeys[] = {1, 15, 16, 17, 63, 64, 65, 301, 1000};
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < sizeof phds / sizeof *phds; b++)
                for (size_t c = 0; c < sizeof pkeys / sizeof *pkeys; c++) {
                    if (gtypes[a] == LLMB_TYPE_Q8_0 && phds[b] % LLMB_QK) continue;
                    test_paged(gtypes[a], phds[b], pkeys[c], c % 3 == 0 ? 5 : c % 3 == 1 ? 16 : 64, c % 2 ? 0 : 64);
                }
        // F16 blocks read straight into whole chunks' scores (scores_f16_blocks; blocks of 64 above): from slot 0 after a
        // first key on a block's start, and not where it starts mid-block
        const int firsts[] = {0, 16, 48, 8, 5};
        for (size_t b = 0; b < 4; b++)
            for (size_t f = 0; f < sizeof firsts / sizeof *firsts; f++) {
                test_paged(LLMB_TYPE_F16, phds[b], 200, 16, firsts[f]);
                test_paged(LLMB_TYPE_F16, phds[b], 1000, 16, firsts[f]);
            }
    }
    llmb_simd_set(llmb_simd_detected());
    return check_summary();
}
