// membw.c — a STREAM-style probe of this machine's memory bandwidth with the engine's threads:
// read (sum), copy and triad over arrays much larger than the caches, each thread touching the
// same static slice in every kernel (first-touch placement). Best of `reps` runs, as STREAM reports.
// Bytes counted as STREAM does (no write-allocate traffic): read N*4, copy 2N*4, triad 3N*4.
// The read kernel is the limit decode runs against, so it reads as fast as this CPU can: the widest
// vector loads it has (a clone per level) and two streams per thread (each thread's slice read from
// two points about half its length apart: read_two_streams), over huge pages as the engine's repacked
// weights are (llmb_alloc_stream), faster than the one-SSE2-stream loop it replaced (docs/engine-measurements.md#membw).
// The read kernel also runs over any buffer as llmb_mem_read (bench_vecdot's yardstick, the same limit).
// Tested by tests/test_membw.py (sane, positive figures; arguments checked; llmb_mem_read's checksum).
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

// XOR of the bits of p[0 .. len): two streams at once, p[0 .. d) and p[d .. len), 64 bytes of each per step
// in four 32-byte accumulators, the longer one's rest after. XOR is associative, so the loop is never
// latency-bound. The accumulators are explicit vectors: GCC 12's -O3 turned the former loop over a uint32_t
// x[16] into permutes and stack spills in the AVX2 clone, which read 9.5 GB/s where this reads 24 (1 thread,
// AMD EPYC Zen 3; docs/engine-measurements.md#membw). The second stream starts 12 KiB short of the middle:
// two streams a power of two apart meet the same DRAM banks at every step.
typedef uint32_t read_vec __attribute__((vector_size(32)));
#define READ_LOAD(v, at) __builtin_memcpy(&(v), (at), sizeof(v))   // unaligned: slices start anywhere
READ_CLONES static uint32_t read_two_streams(const uint32_t *p, int64_t len) {
    const int64_t off = 3072, d = len / 2 > 4 * off ? len / 2 / 16 * 16 - off : len / 2, m = len - d < d ? len - d : d;
    read_vec x0 = {0}, x1 = {0}, y0 = {0}, y1 = {0};
    const uint32_t *q = p + d;
    int64_t i = 0;
    for (; i + 16 <= m; i += 16) {
        read_vec a, b, c, e;
        READ_LOAD(a, p + i), READ_LOAD(b, p + i + 8), READ_LOAD(c, q + i), READ_LOAD(e, q + i + 8);
        x0 ^= a, x1 ^= b, y0 ^= c, y1 ^= e;
    }
    x0 ^= x1 ^ y0 ^ y1;
    uint32_t s = 0;
    for (int64_t k = i; k < d; k++) s ^= p[k];
    for (int64_t k = d + i; k < len; k++) s ^= p[k];
    for (int j = 0; j < 8; j++) s ^= x0[j];
    return s;
}

uint32_t llmb_mem_read(const void *src, size_t bytes, int nthreads) {
    const uint8_t *b = src;
    size_t head = (size_t)(-(uintptr_t)b & 63);   // bytes before the first line boundary
    if (head > bytes) head = bytes;
    const uint32_t *u = (const uint32_t *)(b + head);
    const int64_t n = (int64_t)((bytes - head) / sizeof *u);
    uint32_t s = 0;
    for (size_t k = 0; k < head; k++) s ^= b[k];
    for (size_t k = head + (size_t)n * sizeof *u; k < bytes; k++) s ^= b[k];
    if (nthreads < 1) nthreads = 1;
#pragma omp parallel num_threads(nthreads) reduction(^ : s)
    {
#ifdef _OPENMP
        const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
#else
        const int64_t id = 0, nt = 1;
#endif
        const int64_t lo = n * id / nt, hi = n * (id + 1) / nt;   // this thread's slice
        s ^= read_two_streams(u + lo, hi - lo);
    }
    return s;
}

llmb_status llmb_membw(size_t bytes, int reps, int nthreads, double gbs[3]) {
    if (bytes < 4096 || reps < 1 || nthreads < 1)
        return llmb_fail(LLMB_E_ARG, "membw: need at least 4096 bytes, 1 repetition and 1 thread");
    int64_t n = (int64_t)(bytes / sizeof(float));
    float *a = llmb_alloc_stream((size_t)n * sizeof *a), *b = llmb_alloc_stream((size_t)n * sizeof *b),
          *c = llmb_alloc_stream((size_t)n * sizeof *c);
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
        const uint32_t s = llmb_mem_read(a, (size_t)n * sizeof *a, nthreads);
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
