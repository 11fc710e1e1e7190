// random.c — counter-based normal random numbers for dummy weights: element i of stream `seed` is
// a pure function of (seed, i), so generation is parallel, reproducible for any thread count and
// resumable at any offset. Pair k = (2k, 2k+1) takes one 64-bit splitmix64 hash of (seed, k): its
// high and low 24-bit halves are two uniforms for a Box-Muller transform computed with this file's
// own float32 polynomials for log, sin and cos (no libm calls), so the loop vectorizes and the
// bits are the same on every machine and SIMD width (no FMA contraction under -std=c11).
// Uniforms of 24 bits bound |z| by 5.9 (a tail mass of 4e-9, immaterial for weights).
// Tested by tests/test_random.py (moments, tails, determinism across thread counts and offsets).
#include <stdint.h>
#include <string.h>

#include "internal.h"

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// ln(u) for u in (0, 1]: u = m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s), s = (m-1)/(m+1),
// |s| < 0.172, series to s^11 (relative error < 1e-8 before float rounding).
static inline float log_unit(float u) {
    uint32_t b;
    memcpy(&b, &u, 4);
    int32_t e = (int32_t)(b >> 23) - 127;
    b = (b & 0x007fffffu) | 0x3f800000u;   // m in [1, 2)
    float m;
    memcpy(&m, &b, 4);
    int big = m > 1.41421356f;               // branch-free, so the loop vectorizes
    m = m * (1.0f - 0.5f * (float)big);
    e += big;
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float p = 1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9 + s2 * (1.0f / 11)))));
    return 2.0f * s * p + (float)e * 0.693147180559945f;
}

// cos and sin of 2*pi*v for v in [0, 1): quadrant q of v, then polynomials on [0, pi/2).
static inline void cos_sin_turn(float v, float *c, float *s) {
    float w = v * 4.0f;
    int q = (int)w;                          // 0..3
    float a = (w - (float)q) * 1.5707963267948966f, a2 = a * a;
    float sn = a * (1.0f - a2 / 6 * (1.0f - a2 / 20 * (1.0f - a2 / 42 * (1.0f - a2 / 72 * (1.0f - a2 / 110 * (1.0f - a2 / 156))))));
    float cs = 1.0f - a2 / 2 * (1.0f - a2 / 12 * (1.0f - a2 / 30 * (1.0f - a2 / 56 * (1.0f - a2 / 90 * (1.0f - a2 / 132)))));
    // quadrant q: (cos, sin) = (cs, sn), (-sn, cs), (-cs, -sn), (sn, -cs); selected with bit masks
    uint32_t cb, sb, swap = 0u - (uint32_t)(q & 1), x, y;
    memcpy(&cb, &cs, 4);
    memcpy(&sb, &sn, 4);
    x = (cb & ~swap) | (sb & swap);
    y = (sb & ~swap) | (cb & swap);
    x ^= (uint32_t)(((q + 1) >> 1) & 1) << 31;
    y ^= (uint32_t)(q >> 1) << 31;
    memcpy(c, &x, 4);
    memcpy(s, &y, 4);
}

#define CHUNK 256  // pairs per inner batch: hashes first (integer), then the float transform

void llmb_fill_normal(float *out, size_t n, uint64_t seed, uint64_t start, float std, float mean) {
    if (!out || n == 0) return;
    const uint64_t s = mix64(seed);
    const int64_t first = (int64_t)(start / 2), last = (int64_t)((start + n - 1) / 2);
    const int64_t n_chunks = (last - first) / CHUNK + 1;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t ch = 0; ch < n_chunks; ch++) {
        float u1[CHUNK], u2[CHUNK], za[CHUNK], zb[CHUNK];
        const int64_t k0 = first + ch * CHUNK;
        const int cnt = (int)(last - k0 + 1 < CHUNK ? last - k0 + 1 : CHUNK);
        for (int j = 0; j < cnt; j++) {
            uint64_t r = mix64(s ^ ((uint64_t)(k0 + j) * 0x9e3779b97f4a7c15ull));
            u1[j] = ((float)(uint32_t)(r >> 40) + 0.5f) * (1.0f / 16777216.0f);   // (0, 1)
            u2[j] = (float)(uint32_t)(r & 0xffffffu) * (1.0f / 16777216.0f);      // [0, 1)
        }
        for (int j = 0; j < cnt; j++) {
            float r = __builtin_sqrtf(-2.0f * log_unit(u1[j])), c, sn;
            cos_sin_turn(u2[j], &c, &sn);
            za[j] = mean + std * (r * c);
            zb[j] = mean + std * (r * sn);
        }
        for (int j = 0; j < cnt; j++) {
            uint64_t i0 = 2 * (uint64_t)(k0 + j), i1 = i0 + 1;
            if (i0 >= start && i0 < start + n) out[i0 - start] = za[j];
            if (i1 >= start && i1 < start + n) out[i1 - start] = zb[j];
        }
    }
}
