// vexp.h — one float exp for the vectorized ops (attention's softmax, SwiGLU): a scalar version, an
// AVX-512 one and an AVX2+FMA one that run the same operations (fmaf for every fmadd, nearbyintf for
// the rounding, ldexpf for vscalefps or for two power-of-two multiplies), so they give identical bits
// element by element, whatever the lane.
// Cephes' expf polynomial on r = x - n ln2, n = round(x log2 e): within 2 ulp of expf; below -104
// the result is 0 and above 100 it is inf (the input is clamped first so that n stays small).
// Tested by csrc/tests/test_attention.c (exp8 and exp16 vs scalar bit for bit over a sweep of floats
// in [-110, 110] and random ones; scalar vs float64) and through attention and SwiGLU there.
#ifndef LLMB_VEXP_H
#define LLMB_VEXP_H

#include <math.h>
// always inlined (attention.c's prefetch helpers rely on it: see prefetch_values), on every architecture
#define LLMB_INLINE static inline __attribute__((always_inline))

#define LLMB_VEXP_LO -104.0f
#define LLMB_VEXP_HI 100.0f
#define LLMB_VEXP_LOG2E 1.44269504088896341f
#define LLMB_VEXP_LN2_HI 0.693359375f
#define LLMB_VEXP_LN2_LO -2.12194440e-4f
static const float llmb_vexp_p[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                     4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

static inline float llmb_exp_scalar(float x) {
    x = x < LLMB_VEXP_LO ? LLMB_VEXP_LO : x > LLMB_VEXP_HI ? LLMB_VEXP_HI : x;
    const float n = nearbyintf(x * LLMB_VEXP_LOG2E);
    float r = fmaf(n, -LLMB_VEXP_LN2_HI, x);
    r = fmaf(n, -LLMB_VEXP_LN2_LO, r);
    float p = llmb_vexp_p[0];
    for (int k = 1; k < 6; k++) p = fmaf(p, r, llmb_vexp_p[k]);
    p = fmaf(p, r * r, r);
    return ldexpf(p + 1.0f, (int)n);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LLMB_VEXP_AVX512 1
#define LLMB_A512 __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq")))

LLMB_A512 LLMB_INLINE __m512 llmb_exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(LLMB_VEXP_LO)), _mm512_set1_ps(LLMB_VEXP_HI));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LLMB_VEXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LLMB_VEXP_LN2_HI), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(-LLMB_VEXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(llmb_vexp_p[0]);
    for (int k = 1; k < 6; k++) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(llmb_vexp_p[k]));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    return _mm512_scalef_ps(_mm512_add_ps(p, _mm512_set1_ps(1.0f)), n);
}

// AVX2+FMA. No instruction scales by 2^n, so ldexpf(y, n) is built as (y * 2^a) * 2^b with
// a = n >> 1 and b = n - a: n is in [-150, 144] after the clamp, so a and b are in [-75, 72] and both
// factors are normal floats made from exponent bits; y = p + 1 is in [0.7, 1.42], so y * 2^a is a
// normal float (exact) and the second multiply rounds the exact y * 2^n once, as ldexpf does
// (denormals, underflow to 0 and overflow to inf included). The clamp is written as the scalar one
// (min(HI, x) then max(LO, .), whose operand order keeps a NaN input NaN as there).
#define LLMB_VEXP_AVX2 1
#define LLMB_A256 __attribute__((target("avx2,fma,f16c")))

LLMB_A256 LLMB_INLINE __m256 llmb_exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(LLMB_VEXP_LO), _mm256_min_ps(_mm256_set1_ps(LLMB_VEXP_HI), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LLMB_VEXP_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LLMB_VEXP_LN2_HI), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-LLMB_VEXP_LN2_LO), r);
    __m256 p = _mm256_set1_ps(llmb_vexp_p[0]);
    for (int k = 1; k < 6; k++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(llmb_vexp_p[k]));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    const __m256i ni = _mm256_cvtps_epi32(n), a = _mm256_srai_epi32(ni, 1), b = _mm256_sub_epi32(ni, a);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 ea = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(a, bias), 23));
    const __m256 eb = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(b, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(_mm256_add_ps(p, _mm256_set1_ps(1.0f)), ea), eb);
}
#else
#define LLMB_VEXP_AVX512 0
#define LLMB_VEXP_AVX2 0
#endif

#endif
