// membw.c — a STREAM-style probe of this machine's memory bandwidth with the engine's threads:
// read (sum), copy and triad over arrays much larger than the caches, each thread touching the
// same static slice in every kernel (first-touch placement). Best of `reps` runs, as STREAM reports.
// Bytes counted as STREAM does (no write-allocate traffic): read N*4, copy 2N*4, triad 3N*4.
// The read kernel is the limit decode runs against, so it reads as fast as this CPU can: the widest
// vector loads it has (a clone per level) and two streams per thread (each thread's slice read from
// both halves at once). On this project's 2-core host, alternated with the one-SSE2-stream loop it
// replaced: 1 thread 29.0-31.4 GB/s against 24.0-26.7, 2 threads 44-55 against 35-43. The engine's
// llama-1b Q8_0 decode reads 29.0 GB/s at 1 thread (benchmarks/bench_engine.py): above the old figure.
// Tested by tests/test_membw.py (sane, positive figures; arguments checked).
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define READ_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define READ_CLONES
#endif

// XOR of the bits of p[0 .. 2*len): both halves read at once, 16 values (64 bytes) of each per step.
// XOR is associative, so the loops vectorize without -ffast-math and are never latency-bound.
READ_CLONES static uint32_t read_two_streams(const uint32_t *p, int64_t len) {
    uint32_t x[16] = {0};
    const uint32_t *q = p + len;
    int64_t i = 0;
    for (; i + 16 <= len; i += 16)
        for (int j = 0; j < 16; j++) x[j] ^= p[i + j] ^ q[i + j];
    uint32_t s = 0;
    for (; i < len; i++) s ^= p[i] ^ q[i];
    for (int j = 0; j < 16; j++) s ^= x[j];
    return s;
}

llmb_status llmb_membw(size_t bytes, int reps, int nthreads, double gbs[3]) {
    if (bytes < 4096 || reps < 1 || nthreads < 1)
        return llmb_fail(LLMB_E_ARG, "membw: need at least 4096 bytes, 1 repetition and 1 thread");
    int64_t n = (int64_t)(bytes / sizeof(float));
    float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b), *c = malloc((size_t)n * sizeof *c);
    if (!a || !b || !c) {
        free(a), free(b), free(c);
        return llmb_fail(LLMB_E_NOMEM, "membw: cannot allocate 3 arrays of %zu bytes", bytes);
    }
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t i = 0; i < n; i++) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.0f;
    double best[3] = {0, 0, 0};
    volatile uint32_t sink = 0;
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = llmb_now_ns();
        uint32_t s = 0;
        const uint32_t *au = (const uint32_t *)a;
#pragma omp parallel num_threads(nthreads) reduction(^ : s)
        {
#ifdef _OPENMP
            const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
#else
            const int64_t id = 0, nt = 1;
#endif
            const int64_t lo = n * id / nt, hi = n * (id + 1) / nt, half = (hi - lo) / 2;   // this thread's slice
            s ^= read_two_streams(au + lo, half);
            if (lo + 2 * half < hi) s ^= au[hi - 1];
        }
        uint64_t t1 = llmb_now_ns();
#pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int64_t i = 0; i < n; i++) c[i] = a[i];
        uint64_t t2 = llmb_now_ns();
#pragma omp parallel for schedule(static) num_threads(nthreads)
        for (int64_t i = 0; i < n; i++) a[i] = b[i] + 3.0f * c[i];
        uint64_t t3 = llmb_now_ns();
        sink += s;
        double f[3] = {1.0 * n * 4 / (double)(t1 - t0), 2.0 * n * 4 / (double)(t2 - t1), 3.0 * n * 4 / (double)(t3 - t2)};
        for (int k = 0; k < 3; k++)
            if (f[k] > best[k]) best[k] = f[k];  // bytes per ns = GB/s
    }
    (void)sink;
    for (int k = 0; k < 3; k++) gbs[k] = best[k];
    free(a), free(b), free(c);
    return LLMB_OK;
}
