// cpu.c — run-time CPU feature detection and the SIMD level that kernel dispatch uses, the
// monotonic clock, OpenMP facts, and memory for large streamed arrays. One build runs on any CPU of
// its architecture: kernels are compiled for several levels (function target attributes) and picked
// here at run time. Tested by tests/test_info.py (levels can be forced down, never up) and
// csrc/tests/test_vecdot.c (llmb_alloc_stream).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

static int detected = -1;
static int active = -1;
static int prefetch_mode = -1;
static char features[256];

static void add_feature(const char *f) {
    size_t n = strlen(features);
    snprintf(features + n, sizeof features - n, "%s%s", n ? " " : "", f);
}

// Intel AMX with int8 products (vecdot_amx.c), usable by this process: the CPU has it (CPUID 7.0 EDX bits
// 24, 25), the OS saves the tile state (XCR0 bits 17, 18) and Linux granted this process the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, for the whole process). LLMBENCH_AMX=0 turns it off (the
// AVX-512 VNNI kernels then run: same bits), for comparisons in one session.
#if defined(__x86_64__) || defined(__i386__)
static int amx_usable(void) {
#if defined(__x86_64__) && defined(__linux__) && defined(SYS_arch_prctl)
    unsigned a, b, c, d;
    const char *env = getenv("LLMBENCH_AMX");
    if (env && !strcmp(env, "0")) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;   // OSXSAVE: xgetbv may run
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d & (3u << 24)) != (3u << 24)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}
#endif

// The CPU family of an AMD processor (CPUID 1: base family 0xF plus the extended family; 0x19 Zen 3 and Zen 4,
// 0x1A Zen 5), 0 on others
#if defined(__x86_64__) || defined(__i386__)
static int amd_family(void) {
#if defined(__x86_64__) && defined(__linux__)
    unsigned a, b, c, d;
    if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned base = (a >> 8) & 0xF;
    return (int)(base == 0xF ? base + ((a >> 20) & 0xFF) : base);
#else
    return 0;
#endif
}
#endif

static void detect(void) {
    if (detected >= 0) return;
    int lvl = LLMB_SIMD_SCALAR;
    features[0] = '\0';
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2"), fma = __builtin_cpu_supports("fma");
    int f16c = 0;
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
    f16c = __builtin_cpu_supports("f16c");
#else
    f16c = avx2; // every AVX2 CPU shipped has F16C
#endif
    int a512f = __builtin_cpu_supports("avx512f"), a512bw = __builtin_cpu_supports("avx512bw");
    int a512vl = __builtin_cpu_supports("avx512vl");
    int vnni = __builtin_cpu_supports("avx512vnni");
    if (__builtin_cpu_supports("sse4.2")) add_feature("sse4.2");
    if (__builtin_cpu_supports("avx")) add_feature("avx");
    if (avx2) add_feature("avx2");
    if (fma) add_feature("fma");
    if (f16c) add_feature("f16c");
    if (a512f) add_feature("avx512f");
    if (a512bw) add_feature("avx512bw");
    if (a512vl) add_feature("avx512vl");
    if (vnni) add_feature("avx512vnni");
    if (__builtin_cpu_supports("avx512bf16")) add_feature("avx512bf16");
    if (a512f && a512bw && a512vl && vnni && amx_usable()) add_feature("amx-int8");
    if (avx2 && fma && f16c) lvl = LLMB_SIMD_AVX2;
    if (lvl == LLMB_SIMD_AVX2 && a512f && a512bw && a512vl) lvl = LLMB_SIMD_AVX512;
    // llmb_prefetch_mode (llmb.h): far on Intel; lines on AMD from Zen 5 on, where the page-wise prefetch alone left
    // the one-token K kernels behind; page on older AMD, where a prefetch per line capped the stream
    // (docs/engine.md#prefetch-modes)
    prefetch_mode = __builtin_cpu_is("intel")  ? LLMB_PREFETCH_FAR
                    : amd_family() >= 0x1A     ? LLMB_PREFETCH_LINES
                                               : LLMB_PREFETCH_PAGE;
#elif defined(__aarch64__)
    add_feature("neon");
    lvl = LLMB_SIMD_NEON; // Advanced SIMD is mandatory on AArch64
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
    unsigned long hw = getauxval(AT_HWCAP);
    if (hw & HWCAP_ASIMDDP) add_feature("dotprod");
    if (hw & HWCAP_ASIMDHP) add_feature("fp16");
#endif
#endif
    detected = lvl;
    active = lvl;
    if (prefetch_mode < 0) prefetch_mode = LLMB_PREFETCH_PAGE;
}

int llmb_prefetch_mode(void) { detect(); return prefetch_mode; }
void llmb_prefetch_set(int mode) {
    detect();
    prefetch_mode = mode < LLMB_PREFETCH_PAGE  ? LLMB_PREFETCH_PAGE
                    : mode > LLMB_PREFETCH_FAR ? LLMB_PREFETCH_FAR
                                               : mode;
}

#if defined(__linux__)
// the first word of /sys/devices/system/cpu/cpu0/cache/index<i>/<name>, or "" where it cannot be read
static const char *cache_fact(int i, const char *name, char *buf, size_t n) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, name);
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (f && fgets(buf, (int)n, f)) buf[strcspn(buf, " \n")] = 0;
    if (f) fclose(f);
    return buf;
}
#endif

// Size of the last-level cache cpu0 shares with its neighbours: the highest data or unified level sysfs
// lists (llmbench.info.llc_bytes reads the same). glibc's sysconf reports the whole package's L3 on AMD
// (256 MiB on an EPYC whose cores share 32 MiB per CCD), so it is only the fallback where sysfs says nothing.
static long llc_size(void) {
    long best = -1;
#if defined(__linux__)
    long best_level = 0;
    char level[16], kind[32], size[32];
    for (int i = 0; *cache_fact(i, "level", level, sizeof level); i++) {
        char *unit;
        long bytes = strtol(cache_fact(i, "size", size, sizeof size), &unit, 10);
        bytes *= *unit == 'K' ? 1L << 10 : *unit == 'M' ? 1L << 20 : *unit == 'G' ? 1L << 30 : 1;
        if (strcmp(cache_fact(i, "type", kind, sizeof kind), "Instruction") && bytes > 0 && atol(level) > best_level)
            best_level = atol(level), best = bytes;
    }
#endif
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (best <= 0) best = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (best <= 0) best = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
    return best;
}

int llmb_cache_holds(size_t bytes) {
    static long llc = 0;   // 0: not read yet
    if (!llc) llc = llc_size();
    return llc > 0 && bytes <= (size_t)llc;
}

llmb_simd_level llmb_simd_detected(void) { detect(); return (llmb_simd_level)detected; }
llmb_simd_level llmb_simd_active(void) { detect(); return (llmb_simd_level)active; }

llmb_status llmb_simd_set(llmb_simd_level lvl) {
    detect();
    if ((int)lvl < 0 || (int)lvl > LLMB_SIMD_AVX512)
        return llmb_fail(LLMB_E_ARG, "unknown SIMD level %d", (int)lvl);
    if (lvl != LLMB_SIMD_SCALAR && lvl != (llmb_simd_level)detected) {
        // Only the scalar path or a lower level of the same family is allowed.
        int same_family = (lvl == LLMB_SIMD_AVX2 && detected == LLMB_SIMD_AVX512);
        if (!same_family)
            return llmb_fail(LLMB_E_ARG, "SIMD level %s is not available on this CPU (best: %s)",
                             llmb_simd_name(lvl), llmb_simd_name((llmb_simd_level)detected));
    }
    active = lvl;
    return LLMB_OK;
}

const char *llmb_simd_name(llmb_simd_level lvl) {
    switch (lvl) {
    case LLMB_SIMD_SCALAR: return "scalar";
    case LLMB_SIMD_NEON: return "neon";
    case LLMB_SIMD_AVX2: return "avx2";
    case LLMB_SIMD_AVX512: return "avx512";
    }
    return "unknown";
}

const char *llmb_cpu_features(void) { detect(); return features; }

int llmb_openmp_enabled(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

int llmb_max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// libgomp keeps a pool of workers for every thread that has started a parallel region, and counts all of
// them: once they outnumber the CPUs, a thread waiting at a barrier spins 100 rounds before it sleeps
// instead of GOMP_SPINCOUNT's (a futex wake at every barrier, about 25 us in a VM). A model loaded on one
// thread (the load's parallel loops leave that thread a pool) and stepped on another, as `llmbench
// serve`'s engine thread does, then decoded 2.1x slower on 2 threads (SmolLM2-135M Q4_1: 11.8 against
// 5.6 ms a token); regions started from a second thread cost 22-26 us against 3 (a C loop of 20,000).
// The engine frees the loading thread's pool when the load is done (OpenMP 5.0's omp_pause_resource_all,
// soft: the threads exit, the pool is made again by the next region there), so whichever thread steps
// holds the only one.
void llmb_omp_release(void) {
#if defined(_OPENMP) && (_OPENMP >= 201811 || (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9))
    if (!omp_in_parallel()) omp_pause_resource_all(omp_pause_soft);
#endif
}

uint64_t llmb_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void *llmb_alloc_stream(size_t bytes) {
    const size_t huge = (size_t)2 << 20, cap = bytes ? (bytes + huge - 1) / huge * huge : huge;
    void *p = aligned_alloc(huge, cap);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) madvise(p, cap, MADV_HUGEPAGE);   // advice only: without THP the pages stay small
#endif
    return p;
}
