// random.c — counter-based normal random numbers for dummy weights: element i of stream `seed` is
// a pure function of (seed, i) (splitmix64 → two uniforms → Box-Muller), so generation is
// parallel, reproducible for any thread count, and resumable at any offset.
// Tested by tests/test_random.py (moments, determinism across thread counts and offsets).
#include <math.h>

#include "internal.h"

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Box-Muller on the pair (2k, 2k+1): both outputs come from one 64-bit draw pair.
static inline void normal_pair(uint64_t seed, uint64_t k, float *a, float *b) {
    uint64_t r1 = mix64(seed ^ mix64(2 * k + 0x9e3779b97f4a7c15ull));
    uint64_t r2 = mix64(r1 + 0x9e3779b97f4a7c15ull);
    double u1 = ((double)(r1 >> 11) + 0.5) * (1.0 / 9007199254740992.0); // (0, 1)
    double u2 = (double)(r2 >> 11) * (1.0 / 9007199254740992.0);         // [0, 1)
    double r = sqrt(-2.0 * log(u1)), t = 6.283185307179586 * u2;
    *a = (float)(r * cos(t));
    *b = (float)(r * sin(t));
}

void llmb_fill_normal(float *out, size_t n, uint64_t seed, uint64_t start, float std, float mean) {
    if (!out || n == 0) return;
    uint64_t s = mix64(seed);
    int64_t first = (int64_t)(start / 2), last = (int64_t)((start + n - 1) / 2);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t k = first; k <= last; k++) {
        float a, b;
        normal_pair(s, (uint64_t)k, &a, &b);
        uint64_t i0 = 2 * (uint64_t)k, i1 = i0 + 1;
        if (i0 >= start && i0 < start + n) out[i0 - start] = mean + std * a;
        if (i1 >= start && i1 < start + n) out[i1 - start] = mean + std * b;
    }
}
