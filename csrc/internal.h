// internal.h — helpers shared by the core's translation units (never exported).
#ifndef LLMB_INTERNAL_H
#define LLMB_INTERNAL_H

#include "llmb.h"

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

#endif
