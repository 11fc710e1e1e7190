// llmb.h — the public C API of the llmbench core.
//
// Conventions (see STYLE.md): every function that can fail returns an llmb_status and leaves a
// human-readable message in a thread-local buffer read with llmb_last_error(). Nothing here calls
// exit() or abort() on anything a user can cause. Public symbols carry the llmb_ prefix and are the
// only ones exported (the library is built with hidden visibility). This header never includes
// Python.h: the CPython wrapper lives in llmbench/_core.c.
#ifndef LLMB_H
#define LLMB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LLMB_API __attribute__((visibility("default")))
#else
#define LLMB_API
#endif

// ---- status codes and errors ----

typedef enum {
    LLMB_OK = 0,
    LLMB_E_IO = 1,          // open/read/mmap failed; llmb_last_errno() has errno
    LLMB_E_FORMAT = 2,      // malformed file (GGUF)
    LLMB_E_NOMEM = 3,       // host allocation failed
    LLMB_E_ARG = 4,         // invalid argument
    LLMB_E_BACKEND = 5,     // backend unavailable (no library, no driver, no device)
    LLMB_E_DEVICE = 6,      // a device call failed (CUDA error), message names call, file, line
    LLMB_E_DEVICE_OOM = 7,  // out of device memory
    LLMB_E_NOTFOUND = 8,    // a named thing (tensor, key) is not there
    LLMB_E_UNSUPPORTED = 9, // valid input we cannot handle (tensor type, architecture)
} llmb_status;

LLMB_API const char *llmb_last_error(void);
LLMB_API int llmb_last_errno(void);
LLMB_API const char *llmb_status_name(llmb_status s);

// ---- build and CPU facts ----

typedef enum {
    LLMB_SIMD_SCALAR = 0,
    LLMB_SIMD_NEON = 1,
    LLMB_SIMD_AVX2 = 2,
    LLMB_SIMD_AVX512 = 3,
} llmb_simd_level;

LLMB_API llmb_simd_level llmb_simd_detected(void);   // best level this CPU and build support
LLMB_API llmb_simd_level llmb_simd_active(void);     // level dispatch uses now
LLMB_API llmb_status llmb_simd_set(llmb_simd_level lvl); // force a level <= detected (testing)
LLMB_API const char *llmb_simd_name(llmb_simd_level lvl);
LLMB_API const char *llmb_cpu_features(void);        // e.g. "sse4.2 avx avx2 fma f16c avx512f ..."
// How the AVX-512 one-token decode kernels (interleaved Q4_K / Q6_K) prefetch their weight stream:
// LLMB_PREFETCH_PAGE ("page"): the first line of each 4 KiB page far ahead, into L2, leaving the rest to
// the hardware prefetchers (best on the AMD EPYC, Zen 4, host); LLMB_PREFETCH_LINES ("lines"): that and
// every line 4 KiB ahead into L1, and interleaved Q8_0's one token reads one group a thread, not 4 (best
// on the Zen 5 host); LLMB_PREFETCH_FAR ("far"): as lines, and where the weights stream from DRAM
// (llmb_matmul_part.stream) every line 16 KiB ahead into L2 too, and interleaved Q8_0 from DRAM every
// line as well (best on the Intel Xeon host).
// Default: far on Intel CPUs, lines on AMD from Zen 5 (family 0x1A) on, else page. Results are bit-identical.
enum { LLMB_PREFETCH_PAGE = 0, LLMB_PREFETCH_LINES = 1, LLMB_PREFETCH_FAR = 2 };
LLMB_API int llmb_prefetch_mode(void);
LLMB_API void llmb_prefetch_set(int mode);   // a mode above; another value is taken as the nearest
// 1 if `bytes` fit in the last-level cache cpu0 shares (sysfs's highest data level, else sysconf's L3, else
// L2), so that matrices of that many bytes in all are read from the cache at every decode step; 0 if they do
// not or the size is unknown
LLMB_API int llmb_cache_holds(size_t bytes);
LLMB_API int llmb_openmp_enabled(void);
LLMB_API int llmb_max_threads(void);
LLMB_API uint64_t llmb_now_ns(void);                 // CLOCK_MONOTONIC in nanoseconds

// ---- random numbers ----

// Fill out[0..n) with N(mean, std^2) values of the stream `seed`, starting at element `start` of
// that stream: element i depends only on (seed, start + i), so results are identical for any
// thread count and a large tensor can be generated in pieces.
LLMB_API void llmb_fill_normal(float *out, size_t n, uint64_t seed, uint64_t start, float std, float mean);

// ---- memory bandwidth ----

// STREAM-style read / copy / triad bandwidth (GB/s, best of reps) over arrays of `bytes` each.
LLMB_API llmb_status llmb_membw(size_t bytes, int reps, int nthreads, double gbs[3]);
// membw's read kernel over one buffer (any size and alignment) on nthreads: the XOR of its 32-bit words
// (and of any bytes outside them), so that nothing is optimized away
LLMB_API uint32_t llmb_mem_read(const void *src, size_t bytes, int nthreads);

// ---- arithmetic peak ----

#define LLMB_PEAK_F32 0    // FP32 fused multiply-adds: GFLOP/s (the float prefill kernels)
#define LLMB_PEAK_INT8 1   // 8-bit multiply-accumulates: GOP/s, 2 per multiply-add (the quantized ones)
#define LLMB_PEAK_BF16 2   // BF16 pair products (vdpbf16ps): GFLOP/s, 2 per multiply-add (activations="bf16");
                           // LLMB_E_UNSUPPORTED where the active level has no such instruction
// Best of reps runs, each thread `rounds` rounds of independent instruction chains at the active SIMD
// level (csrc/peak.c); *what names the instruction measured (a static string).
LLMB_API llmb_status llmb_compute_peak(int kind, int64_t rounds, int reps, int nthreads, double *gops, const char **what);

// ---- ggml tensor types (traits table) ----

#define LLMB_TYPE_COUNT 42   // one past the largest ggml type id we know

typedef struct {
    const char *name;   // "F32", "Q4_K", ... ; NULL for ids that are not (or no longer) types
    int64_t blck_size;  // elements per block
    int64_t type_size;  // bytes per block
} llmb_type_traits;

LLMB_API const llmb_type_traits *llmb_type_traits_get(int type_id); // NULL if unknown
LLMB_API int llmb_type_from_name(const char *name);                  // -1 if unknown

// ---- GGUF reader ----

enum {
    LLMB_GGUF_UINT8 = 0, LLMB_GGUF_INT8 = 1, LLMB_GGUF_UINT16 = 2, LLMB_GGUF_INT16 = 3,
    LLMB_GGUF_UINT32 = 4, LLMB_GGUF_INT32 = 5, LLMB_GGUF_FLOAT32 = 6, LLMB_GGUF_BOOL = 7,
    LLMB_GGUF_STRING = 8, LLMB_GGUF_ARRAY = 9, LLMB_GGUF_UINT64 = 10, LLMB_GGUF_INT64 = 11,
    LLMB_GGUF_FLOAT64 = 12, LLMB_GGUF_TYPE_COUNT = 13,
};

#define LLMB_GGUF_MAX_DIMS 4
#define LLMB_GGUF_DEFAULT_ALIGNMENT 32

typedef struct llmb_gguf llmb_gguf;

typedef struct {
    const char *data;   // points into the file mapping; not NUL-terminated
    uint64_t len;
} llmb_str;

// A metadata value. Scalars are decoded; strings point into the mapping; arrays describe their
// elements: for scalar element types `data` points at count packed little-endian values in the
// mapping (which may be unaligned), for string or array elements use llmb_gguf_array_item.
typedef struct {
    uint32_t type;
    union {
        uint64_t u64;
        int64_t i64;
        double f64;
        int boolean;
        llmb_str str;
        struct {
            uint32_t elem_type;
            uint64_t count;
            const uint8_t *data;   // first element in the mapping
            uint64_t nbytes;       // bytes spanned by all elements
            uint64_t data_offset;  // file offset of the first element
        } arr;
    } v;
    uint64_t offset;    // byte offset of the value in the file
} llmb_gguf_value;

typedef struct {
    llmb_str name;
    uint32_t n_dims;
    int64_t ne[LLMB_GGUF_MAX_DIMS];  // ggml order: ne[0] is the contiguous (row) dimension
    int type;                         // ggml type id
    uint64_t offset;                  // relative to the data section
    uint64_t nbytes;
    const uint8_t *data;              // in the mapping
    uint64_t info_offset;             // where this tensor's info starts in the file
} llmb_gguf_tensor;

// Open and validate a file (memory-mapped, read-only). On LLMB_E_IO llmb_last_errno() is set.
LLMB_API llmb_status llmb_gguf_open(const char *path, llmb_gguf **out);
// Validate a buffer in memory; the caller keeps it alive and unchanged until llmb_gguf_close.
LLMB_API llmb_status llmb_gguf_open_memory(const void *data, size_t size, llmb_gguf **out);
LLMB_API void llmb_gguf_close(llmb_gguf *g);

LLMB_API uint32_t llmb_gguf_version(const llmb_gguf *g);
LLMB_API uint64_t llmb_gguf_alignment(const llmb_gguf *g);
LLMB_API uint64_t llmb_gguf_data_offset(const llmb_gguf *g);
LLMB_API uint64_t llmb_gguf_file_size(const llmb_gguf *g);
LLMB_API const uint8_t *llmb_gguf_base(const llmb_gguf *g);

LLMB_API uint64_t llmb_gguf_n_kv(const llmb_gguf *g);
LLMB_API const llmb_str *llmb_gguf_kv_key(const llmb_gguf *g, uint64_t i);
LLMB_API const llmb_gguf_value *llmb_gguf_kv_value(const llmb_gguf *g, uint64_t i);
LLMB_API int64_t llmb_gguf_find_kv(const llmb_gguf *g, const char *key); // -1 if absent
// Walk the elements of an array value in order (any element type; validated at open):
//   llmb_gguf_iter it; llmb_gguf_iter_init(&it, &val); while (llmb_gguf_iter_next(&it, &elem)) ...
typedef struct {
    const llmb_gguf_value *arr;
    uint64_t index;
    uint64_t pos;   // byte position inside arr->v.arr.data
} llmb_gguf_iter;
LLMB_API void llmb_gguf_iter_init(llmb_gguf_iter *it, const llmb_gguf_value *arr);
LLMB_API int llmb_gguf_iter_next(llmb_gguf_iter *it, llmb_gguf_value *out); // 0 when done

LLMB_API uint64_t llmb_gguf_n_tensors(const llmb_gguf *g);
LLMB_API const llmb_gguf_tensor *llmb_gguf_tensor_at(const llmb_gguf *g, uint64_t i);
LLMB_API int64_t llmb_gguf_find_tensor(const llmb_gguf *g, const char *name); // -1 if absent

// ---- CUDA backend (loaded with dlopen on demand) ----

typedef struct {
    char name[256];
    uint64_t total_mem;
    uint64_t free_mem;
    int cc_major, cc_minor;
    int multiprocessors;
} llmb_cuda_device;

// Load the CUDA backend library at `path` (NULL: $LLMBENCH_CUDA_LIB). Idempotent. Fails with
// LLMB_E_BACKEND and a reason when the library is missing, has the wrong API version, or there is
// no driver or device.
LLMB_API llmb_status llmb_cuda_load(const char *path);
LLMB_API int llmb_cuda_loaded(void);
LLMB_API llmb_status llmb_cuda_versions(int *runtime, int *driver);
LLMB_API llmb_status llmb_cuda_device_count(int *n);
LLMB_API llmb_status llmb_cuda_device_info(int dev, llmb_cuda_device *out);
LLMB_API llmb_status llmb_cuda_malloc(int dev, size_t nbytes, void **out);
LLMB_API llmb_status llmb_cuda_free(int dev, void *p);
// kind: 0 host->device, 1 device->host, 2 device->device
LLMB_API llmb_status llmb_cuda_memcpy(int dev, void *dst, const void *src, size_t nbytes, int kind);
LLMB_API llmb_status llmb_cuda_memset(int dev, void *p, int value, size_t nbytes);
// Time `reps` device-to-device copies of nbytes with CUDA events; ms is the total elapsed time.
LLMB_API llmb_status llmb_cuda_time_copy(int dev, void *dst, const void *src, size_t nbytes, int reps, float *ms);

#ifdef __cplusplus
}
#endif
#endif // LLMB_H
