// peak.c — a probe of the arithmetic peak of this machine's cores with the engine's threads, so a
// prompt phase's achieved GFLOP/s or GOP/s reads as a fraction of a limit measured in the same run
// (as membw.c does for decode). Each thread runs PK_CHAINS independent chains of the instruction the
// prefill kernels are built on, enough to cover its latency on every pipe, at the SIMD level dispatch
// uses now (llmb_simd_active):
//   LLMB_PEAK_F32   FP32 fused multiply-add (2 flops per lane): 512-bit at the AVX-512 level, 256-bit
//                   at AVX2, 128-bit NEON; separate multiply and add in plain C at the scalar level
//   LLMB_PEAK_INT8  8-bit multiply-accumulate (2 ops each): vpdpbusd (AVX-512 VNNI), vpmaddubsw +
//                   vpmaddwd + vpaddd (AVX2, AVX-512 without VNNI), sdot or smull + sadalp (NEON),
//                   int16 multiply-adds in plain C at the scalar level
//   LLMB_PEAK_BF16  BF16 pair multiply-accumulate (2 flops each): vdpbf16ps zmm at the AVX-512 level of a
//                   CPU with AVX-512 BF16, the instruction of the engine's LLMB_TYPE_BF16_DP kernels; none
//                   elsewhere (those levels run the scalar reference)
// Best of `reps` runs of `rounds` x PK_CHAINS instructions per thread. Tested by tests/test_peak.py.
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"
#include "vecdot.h"

#define PK_CHAINS 12

// One kernel: PK_CHAINS accumulators a0..a11 of type T, initialized by INIT(k), each round advanced by
// STEP(a) and then passed through an empty asm statement (so the compiler can neither merge the chains
// nor drop the loop, and they stay in registers), finally folded to a double by FOLD(a).
#if defined(__aarch64__)
#define PK_C "+w"
#else
#define PK_C "+v"
#endif
#define PK_KERNEL(name, attr, T, INIT, STEP, FOLD)                                                                  \
    attr static double name(int64_t rounds, float seed) {                                                           \
        T a0 = INIT(0), a1 = INIT(1), a2 = INIT(2), a3 = INIT(3), a4 = INIT(4), a5 = INIT(5), a6 = INIT(6),         \
          a7 = INIT(7), a8 = INIT(8), a9 = INIT(9), a10 = INIT(10), a11 = INIT(11);                                 \
        for (int64_t i = 0; i < rounds; i++) {                                                                      \
            a0 = STEP(a0), a1 = STEP(a1), a2 = STEP(a2), a3 = STEP(a3), a4 = STEP(a4), a5 = STEP(a5);               \
            a6 = STEP(a6), a7 = STEP(a7), a8 = STEP(a8), a9 = STEP(a9), a10 = STEP(a10), a11 = STEP(a11);           \
            __asm__ volatile("" : PK_C(a0), PK_C(a1), PK_C(a2), PK_C(a3), PK_C(a4), PK_C(a5), PK_C(a6), PK_C(a7),  \
                             PK_C(a8), PK_C(a9), PK_C(a10), PK_C(a11));                                             \
        }                                                                                                           \
        return FOLD(a0) + FOLD(a1) + FOLD(a2) + FOLD(a3) + FOLD(a4) + FOLD(a5) + FOLD(a6) + FOLD(a7) + FOLD(a8) +   \
               FOLD(a9) + FOLD(a10) + FOLD(a11);                                                                    \
    }

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PK_512 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#define PK_256 __attribute__((target("avx2,fma")))

#define F512_INIT(k) _mm512_set1_ps(seed * (float)(k))
#define F512_STEP(a) _mm512_fmadd_ps(a, _mm512_set1_ps(0.999f), _mm512_set1_ps(seed))
#define F512_FOLD(a) (double)_mm512_reduce_add_ps(a)
PK_KERNEL(f32_512, PK_512, __m512, F512_INIT, F512_STEP, F512_FOLD)

#define I512_INIT(k) _mm512_set1_epi32(k)
#define I512_STEP(a) _mm512_dpbusd_epi32(a, _mm512_set1_epi8((char)(3 + (int)seed)), _mm512_set1_epi8(-5))
#define I512_FOLD(a) (double)_mm512_reduce_add_epi32(a)
PK_KERNEL(int8_512, PK_512, __m512i, I512_INIT, I512_STEP, I512_FOLD)

#define PK_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define B512_STEP(a) _mm512_dpbf16_ps(a, (__m512bh)_mm512_set1_epi16(0x3f80), (__m512bh)_mm512_set1_epi16(0x3f00))
PK_KERNEL(bf16_512, PK_BF16, __m512, F512_INIT, B512_STEP, F512_FOLD)

PK_256 static inline double fold_ps256(__m256 v) {
    float o[8];
    _mm256_storeu_ps(o, v);
    return (double)o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
PK_256 static inline double fold_epi32_256(__m256i v) {
    int32_t o[8];
    _mm256_storeu_si256((__m256i *)o, v);
    return (double)o[0] + o[1] + o[2] + o[3] + o[4] + o[5] + o[6] + o[7];
}
#define F256_INIT(k) _mm256_set1_ps(seed * (float)(k))
#define F256_STEP(a) _mm256_fmadd_ps(a, _mm256_set1_ps(0.999f), _mm256_set1_ps(seed))
PK_KERNEL(f32_256, PK_256, __m256, F256_INIT, F256_STEP, fold_ps256)

#define I256_INIT(k) _mm256_set1_epi32(k)
#define I256_STEP(a)                                                                                                \
    _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8((char)(3 + (int)seed)),            \
                                                               _mm256_set1_epi8(-5)), _mm256_set1_epi16(1)))
PK_KERNEL(int8_256, PK_256, __m256i, I256_INIT, I256_STEP, fold_epi32_256)
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
#define FN_INIT(k) vdupq_n_f32(seed * (float)(k))
#define FN_STEP(a) vfmaq_f32(vdupq_n_f32(seed), a, vdupq_n_f32(0.999f))
#define FN_FOLD(a) (double)vaddvq_f32(a)
PK_KERNEL(f32_neon, , float32x4_t, FN_INIT, FN_STEP, FN_FOLD)

#define IN_INIT(k) vdupq_n_s32(k)
#if defined(__ARM_FEATURE_DOTPROD)
#define IN_STEP(a) vdotq_s32(a, vdupq_n_s8((int8_t)(3 + (int)seed)), vdupq_n_s8(-5))
#else
#define IN_STEP(a)                                                                                                  \
    vpadalq_s16(vpadalq_s16(a, vmull_s8(vdup_n_s8((int8_t)(3 + (int)seed)), vdup_n_s8(-5))),                        \
                vmull_high_s8(vdupq_n_s8((int8_t)(3 + (int)seed)), vdupq_n_s8(-5)))
#endif
#define IN_FOLD(a) (double)vaddvq_s32(a)
PK_KERNEL(int8_neon, , int32x4_t, IN_INIT, IN_STEP, IN_FOLD)
#endif

// the scalar level: plain C (the compiler's own code), float multiply then add, int32 multiply-add
#define FS_INIT(k) (seed * (float)(k))
#define FS_STEP(a) ((a) * 0.999f + seed)
#define FS_FOLD(a) (double)(a)
PK_KERNEL(f32_scalar, , float, FS_INIT, FS_STEP, FS_FOLD)
#undef PK_C
#define PK_C "+r"
#define IS_INIT(k) (int32_t)(k)
#define IS_STEP(a) ((a) + (3 + (int32_t)seed) * -5)
#define IS_FOLD(a) (double)(a)
PK_KERNEL(int8_scalar, , int32_t, IS_INIT, IS_STEP, IS_FOLD)

typedef double (*pk_fn)(int64_t rounds, float seed);

// the kernel for (kind, active level) and the operations one of its rounds performs
static pk_fn pick(int kind, double *ops_per_round, const char **what) {
    const llmb_simd_level lvl = llmb_simd_active();
    if (kind == LLMB_PEAK_BF16) {
#if defined(__x86_64__) && defined(__GNUC__)
        if (lvl == LLMB_SIMD_AVX512 && llmb_cpu_has("avx512bf16"))
            return *ops_per_round = PK_CHAINS * 64.0, *what = "vdpbf16ps zmm", bf16_512;
#endif
        return NULL;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    if (lvl == LLMB_SIMD_AVX512 && kind == LLMB_PEAK_F32)
        return *ops_per_round = PK_CHAINS * 32.0, *what = "vfmadd231ps zmm", f32_512;
    if (lvl == LLMB_SIMD_AVX512 && llmb_cpu_has("avx512vnni"))
        return *ops_per_round = PK_CHAINS * 128.0, *what = "vpdpbusd zmm", int8_512;
    if (lvl >= LLMB_SIMD_AVX2)
        return kind == LLMB_PEAK_F32 ? (*ops_per_round = PK_CHAINS * 16.0, *what = "vfmadd231ps ymm", f32_256)
                                     : (*ops_per_round = PK_CHAINS * 64.0, *what = "vpmaddubsw+vpmaddwd ymm", int8_256);
#endif
#if defined(__aarch64__)
    if (lvl == LLMB_SIMD_NEON)
        return kind == LLMB_PEAK_F32 ? (*ops_per_round = PK_CHAINS * 8.0, *what = "fmla v.4s", f32_neon)
#if defined(__ARM_FEATURE_DOTPROD)
                                     : (*ops_per_round = PK_CHAINS * 32.0, *what = "sdot v.4s", int8_neon);
#else
                                     : (*ops_per_round = PK_CHAINS * 32.0, *what = "smull+sadalp", int8_neon);
#endif
#endif
    (void)lvl;
    return kind == LLMB_PEAK_F32 ? (*ops_per_round = PK_CHAINS * 2.0, *what = "scalar mul+add", f32_scalar)
                                 : (*ops_per_round = PK_CHAINS * 2.0, *what = "scalar int32 mul+add", int8_scalar);
}

llmb_status llmb_compute_peak(int kind, int64_t rounds, int reps, int nthreads, double *gops, const char **what) {
    if ((kind != LLMB_PEAK_F32 && kind != LLMB_PEAK_INT8 && kind != LLMB_PEAK_BF16) || rounds < 1 || reps < 1 ||
        nthreads < 1)
        return llmb_fail(LLMB_E_ARG, "compute_peak: kind must be LLMB_PEAK_F32, LLMB_PEAK_INT8 or LLMB_PEAK_BF16, with "
                                     "at least 1 round, 1 repetition and 1 thread");
    double per_round;
    const char *name;
    const pk_fn f = pick(kind, &per_round, &name);
    if (!f)
        return llmb_fail(LLMB_E_UNSUPPORTED, "compute_peak: no BF16 pair instruction (vdpbf16ps) at the %s level of "
                                             "this CPU: BF16 pair products run the scalar reference there",
                         llmb_simd_name(llmb_simd_active()));
    double best = 0;
    volatile double sink = 0;
    for (int r = 0; r < reps; r++) {
        double sum = 0;
        const uint64_t t0 = llmb_now_ns();
#pragma omp parallel num_threads(nthreads) reduction(+ : sum)
        sum += f(rounds, 1.0f + (float)r);
        const uint64_t t1 = llmb_now_ns();
        sink += sum;
        const double g = per_round * (double)rounds * nthreads / (double)(t1 - t0 > 0 ? t1 - t0 : 1);
        if (g > best) best = g;
    }
    (void)sink;
    *gops = best;
    if (what) *what = name;
    return LLMB_OK;
}
