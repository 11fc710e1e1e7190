// internal.h — helpers shared by the core's translation units (never exported).
#ifndef LLMB_INTERNAL_H
#define LLMB_INTERNAL_H

#include "llmb.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__)
#define LLMB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define LLMB_PRINTF(a, b)
#endif

// Record a message for llmb_last_error() and return `s`, so callers write
//   return llmb_fail(LLMB_E_FORMAT, "...", ...);
llmb_status llmb_fail(llmb_status s, const char *fmt, ...) LLMB_PRINTF(2, 3);
// Same, also recording errno for llmb_last_errno().
llmb_status llmb_fail_errno(int err, const char *fmt, ...) LLMB_PRINTF(2, 3);
void llmb_clear_error(void);

// Memory for a large array read as one stream (the repacked weights, the bandwidth probe's arrays): aligned
// to and rounded up to 2 MiB, with transparent huge pages asked for where the OS has them (Linux's
// MADV_HUGEPAGE), so that the stream crosses no 4 KiB pages (each a TLB miss, and a boundary the hardware
// prefetchers stop at). Freed with free(); NULL when out of memory.
void *llmb_alloc_stream(size_t bytes);

// Frees the calling thread's idle OpenMP workers (cpu.c says why the engine does so after loading).
void llmb_omp_release(void);

// This thread's number in the OpenMP region it runs (0 outside one, or without OpenMP).
static inline int llmb_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// The number of threads of the OpenMP region this thread runs (1 outside one, or without OpenMP).
static inline int llmb_thread_count(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

// for (int64_t i = 0; i < n; i++) { body } as an OpenMP `parallel for schedule(static)` on nt threads
// where cond holds, else here without entering an OpenMP region: libgomp allocates (and frees) a team for
// every region it starts, a one-thread one (a failed `if` clause) too, and a decode step runs its serial
// loops some 200 times a token, where the hot loop must allocate nothing (tests/test_engine.c).
#define LLMB_PAR_FOR(cond, nt, i, n, ...)                                          \
    do {                                                                           \
        const int64_t llmb_n_ = (n);                                               \
        const int llmb_nt_ = (nt);                                                 \
        (void)llmb_nt_;                                                            \
        if (cond) {                                                                \
            _Pragma("omp parallel for schedule(static) num_threads(llmb_nt_)")     \
            for (int64_t i = 0; i < llmb_n_; i++) { __VA_ARGS__; }                 \
        } else                                                                     \
            for (int64_t i = 0; i < llmb_n_; i++) { __VA_ARGS__; }                 \
    } while (0)

#endif
