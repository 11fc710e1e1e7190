// runtime.cu — the CUDA backend's device management: versions, device list, memory, copies and
// timing with CUDA events. A plain shared library with a C ABI (kernels/llmb_cuda_abi.h), no Python.
// Every CUDA call is checked; an error names the call, file and line. Compiled in CI wherever nvcc
// exists; exercised on a GPU by tests/test_cuda.py (skipped with the reason elsewhere).
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>

#include "llmb_cuda_abi.h"

static thread_local char errbuf[1024];

static llmb_status fail(llmb_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return s;
}

static llmb_status cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
    cudaGetLastError(); // clear a sticky-free error so the process stays usable
    return fail(e == cudaErrorMemoryAllocation ? LLMB_E_DEVICE_OOM : LLMB_E_DEVICE, "%s failed at %s:%d: %s (%s)",
                call, file, line, cudaGetErrorString(e), cudaGetErrorName(e));
}

#define CHECK(call)                                                     \
    do {                                                                \
        cudaError_t e_ = (call);                                        \
        if (e_ != cudaSuccess) return cuda_fail(e_, #call, __FILE__, __LINE__); \
    } while (0)

static const char *last_error(void) { return errbuf; }

static llmb_status init(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
        return fail(LLMB_E_BACKEND, "no CUDA device found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    if (e == cudaErrorInsufficientDriver)
        return fail(LLMB_E_BACKEND, "no usable NVIDIA driver: %s (install or update the driver)", cudaGetErrorString(e));
    if (e != cudaSuccess)
        return fail(LLMB_E_BACKEND, "CUDA is unavailable: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                    cudaGetErrorName(e));
    return LLMB_OK;
}

static llmb_status versions(int *runtime, int *driver) {
    *runtime = 0;
    *driver = 0;
    CHECK(cudaRuntimeGetVersion(runtime));
    // 0 means no driver is installed; that is a fact to report, not an error.
    if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
    return LLMB_OK;
}

static llmb_status device_count(int *n) {
    *n = 0;
    CHECK(cudaGetDeviceCount(n));
    return LLMB_OK;
}

static llmb_status check_dev(int dev) {
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    if (dev < 0 || dev >= n) return fail(LLMB_E_ARG, "CUDA device %d does not exist (%d devices)", dev, n);
    CHECK(cudaSetDevice(dev));
    return LLMB_OK;
}

static llmb_status device_info(int dev, llmb_cuda_device *out) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, dev));
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_mem = p.totalGlobalMem;
    size_t fr = 0, tot = 0;
    CHECK(cudaMemGetInfo(&fr, &tot));
    out->free_mem = fr;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->multiprocessors = p.multiProcessorCount;
    return LLMB_OK;
}

static llmb_status malloc_(int dev, size_t nbytes, void **out) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    *out = NULL;
    cudaError_t e = cudaMalloc(out, nbytes);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return fail(LLMB_E_DEVICE_OOM, "out of device memory on CUDA device %d: asked for %zu bytes, %zu of %zu free",
                    dev, nbytes, fr, tot);
    }
    if (e != cudaSuccess) return cuda_fail(e, "cudaMalloc", __FILE__, __LINE__);
    return LLMB_OK;
}

static llmb_status free_(int dev, void *p) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    CHECK(cudaFree(p));
    return LLMB_OK;
}

static llmb_status memcpy_(int dev, void *dst, const void *src, size_t nbytes, int kind) {
    static const cudaMemcpyKind kinds[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    if (kind < 0 || kind > 2) return fail(LLMB_E_ARG, "memcpy kind %d: expected 0 (to device), 1 (to host) or 2", kind);
    llmb_status s = check_dev(dev);
    if (s) return s;
    CHECK(cudaMemcpy(dst, src, nbytes, kinds[kind]));
    return LLMB_OK;
}

static llmb_status memset_(int dev, void *p, int value, size_t nbytes) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    CHECK(cudaMemset(p, value, nbytes));
    CHECK(cudaDeviceSynchronize());
    return LLMB_OK;
}

static llmb_status time_copy(int dev, void *dst, const void *src, size_t nbytes, int reps, float *ms) {
    if (reps < 1) return fail(LLMB_E_ARG, "time_copy: reps must be >= 1, got %d", reps);
    llmb_status s = check_dev(dev);
    if (s) return s;
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    cudaError_t e = cudaEventCreate(&b);
    if (e != cudaSuccess) {
        cudaEventDestroy(a);
        return cuda_fail(e, "cudaEventCreate", __FILE__, __LINE__);
    }
    e = cudaEventRecord(a, 0);
    for (int r = 0; r < reps && e == cudaSuccess; r++) e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, 0);
    if (e == cudaSuccess) e = cudaEventRecord(b, 0);
    if (e == cudaSuccess) e = cudaEventSynchronize(b);
    if (e == cudaSuccess) e = cudaEventElapsedTime(ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (e != cudaSuccess) return cuda_fail(e, "time_copy (cudaMemcpyAsync/cudaEvent*)", __FILE__, __LINE__);
    return LLMB_OK;
}

static const llmb_cuda_api api = {
    LLMB_CUDA_ABI_VERSION, last_error, init, versions, device_count, device_info,
    malloc_, free_, memcpy_, memset_, time_copy,
};

extern "C" __attribute__((visibility("default"))) const llmb_cuda_api *llmb_cuda_get_api(void) { return &api; }
