// runtime.cu — the CUDA backend's device management: versions, device list, memory, copies, the
// context (stream, cuBLAS handle, workspaces), CUDA-event phase timing, and the function table.
// A plain shared library with a C ABI (kernels/llmb_cuda_abi.h), no Python. Every CUDA call is
// checked; an error names the call, file and line. Compiled in CI wherever nvcc exists; exercised
// on a GPU by tests/test_cuda.py and tests/test_cuda_kernels.py (skipped with the reason elsewhere).
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <mutex>

#include "common.cuh"

static thread_local char errbuf[1024];

llmb_status llmb_cu_fail(llmb_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return s;
}

llmb_status llmb_cu_cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
    cudaGetLastError(); // clear a sticky-free error so the process stays usable
    return llmb_cu_fail(e == cudaErrorMemoryAllocation ? LLMB_E_DEVICE_OOM : LLMB_E_DEVICE,
                        "%s failed at %s:%d: %s (%s)", call, file, line, cudaGetErrorString(e), cudaGetErrorName(e));
}

llmb_status llmb_cu_cublas_fail(cublasStatus_t e, const char *call, const char *file, int line) {
    return llmb_cu_fail(e == CUBLAS_STATUS_ALLOC_FAILED ? LLMB_E_DEVICE_OOM : LLMB_E_DEVICE,
                        "%s failed at %s:%d: %s (%s)", call, file, line, llmb_cu_blas.status_string(e),
                        llmb_cu_blas.status_name(e));
}

llmb_cublas llmb_cu_blas;

llmb_status llmb_cu_blas_load(void) {
    static std::mutex mu;
    static llmb_status st = LLMB_E_BACKEND;
    static bool tried;
    static char why[512];
    std::lock_guard<std::mutex> g(mu);
    if (!tried) {
        tried = true;
#ifdef LLMB_SIMT_HOST // the emulated library defines these itself (kernels/tests/cuda_emu.cpp)
        llmb_cu_blas = {cublasCreate_v2, cublasDestroy_v2, cublasSetStream_v2, cublasSetMathMode, cublasGemmEx,
                        cublasGetStatusName, cublasGetStatusString};
        st = LLMB_OK;
#else
        // the soname of the toolkit the library was built with; the build's rpath points at its lib64
        char name[64];
        snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
        void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(why, sizeof why, "cannot load cuBLAS (%s): %s", name, dlerror());
        } else {
            bool ok = true;
#define SYM(field, sym) ok = ok && (*(void **)&llmb_cu_blas.field = dlsym(h, sym)) != NULL
            SYM(create, "cublasCreate_v2");
            SYM(destroy, "cublasDestroy_v2");
            SYM(set_stream, "cublasSetStream_v2");
            SYM(set_math_mode, "cublasSetMathMode");
            SYM(gemm_ex, "cublasGemmEx");
            SYM(status_name, "cublasGetStatusName");
            SYM(status_string, "cublasGetStatusString");
#undef SYM
            if (ok) st = LLMB_OK;
            else snprintf(why, sizeof why, "%s lacks a cuBLAS function this backend needs (cuBLAS %d.x expected)",
                          name, CUBLAS_VER_MAJOR);
        }
#endif
    }
    if (st) return llmb_cu_fail(st, "%s", why);
    return LLMB_OK;
}

llmb_status llmb_cu_alloc(int dev, size_t nbytes, void **out, const char *what) {
    *out = NULL;
    cudaError_t e = cudaMalloc(out, nbytes);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        return llmb_cu_fail(LLMB_E_DEVICE_OOM,
                            "out of device memory on CUDA device %d: %s asked for %zu bytes, %zu of %zu free", dev,
                            what, nbytes, fr, tot);
    }
    if (e != cudaSuccess) return llmb_cu_cuda_fail(e, "cudaMalloc", __FILE__, __LINE__);
    return LLMB_OK;
}

static const char *last_error(void) { return errbuf; }

static llmb_status init(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0))
        return llmb_cu_fail(LLMB_E_BACKEND, "no CUDA device found (cudaGetDeviceCount: %s)", cudaGetErrorString(e));
    if (e == cudaErrorInsufficientDriver)
        return llmb_cu_fail(LLMB_E_BACKEND, "no usable NVIDIA driver: %s (install or update the driver)", cudaGetErrorString(e));
    if (e != cudaSuccess)
        return llmb_cu_fail(LLMB_E_BACKEND, "CUDA is unavailable: cudaGetDeviceCount failed: %s (%s)", cudaGetErrorString(e),
                    cudaGetErrorName(e));
    return LLMB_OK;
}

static llmb_status versions(int *runtime, int *driver) {
    *runtime = 0;
    *driver = 0;
    CU_CHECK(cudaRuntimeGetVersion(runtime));
    // 0 means no driver is installed; that is a fact to report, not an error.
    if (cudaDriverGetVersion(driver) != cudaSuccess) *driver = 0;
    return LLMB_OK;
}

static llmb_status device_count(int *n) {
    *n = 0;
    CU_CHECK(cudaGetDeviceCount(n));
    return LLMB_OK;
}

static llmb_status check_dev(int dev) {
    int n = 0;
    CU_CHECK(cudaGetDeviceCount(&n));
    if (dev < 0 || dev >= n) return llmb_cu_fail(LLMB_E_ARG, "CUDA device %d does not exist (%d devices)", dev, n);
    CU_CHECK(cudaSetDevice(dev));
    return LLMB_OK;
}

static llmb_status device_info(int dev, llmb_cuda_device *out) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    cudaDeviceProp p;
    CU_CHECK(cudaGetDeviceProperties(&p, dev));
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_mem = p.totalGlobalMem;
    size_t fr = 0, tot = 0;
    CU_CHECK(cudaMemGetInfo(&fr, &tot));
    out->free_mem = fr;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->multiprocessors = p.multiProcessorCount;
    return LLMB_OK;
}

static llmb_status malloc_(int dev, size_t nbytes, void **out) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    return llmb_cu_alloc(dev, nbytes, out, "a buffer");
}

static llmb_status free_(int dev, void *p) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    CU_CHECK(cudaFree(p));
    return LLMB_OK;
}

static llmb_status memcpy_(int dev, void *dst, const void *src, size_t nbytes, int kind) {
    static const cudaMemcpyKind kinds[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    if (kind < 0 || kind > 2) return llmb_cu_fail(LLMB_E_ARG, "memcpy kind %d: expected 0 (to device), 1 (to host) or 2", kind);
    llmb_status s = check_dev(dev);
    if (s) return s;
    CU_CHECK(cudaMemcpy(dst, src, nbytes, kinds[kind]));
    return LLMB_OK;
}

static llmb_status memset_(int dev, void *p, int value, size_t nbytes) {
    llmb_status s = check_dev(dev);
    if (s) return s;
    CU_CHECK(cudaMemset(p, value, nbytes));
    CU_CHECK(cudaDeviceSynchronize());
    return LLMB_OK;
}

static llmb_status time_copy(int dev, void *dst, const void *src, size_t nbytes, int reps, float *ms) {
    if (reps < 1) return llmb_cu_fail(LLMB_E_ARG, "time_copy: reps must be >= 1, got %d", reps);
    llmb_status s = check_dev(dev);
    if (s) return s;
    cudaEvent_t a, b;
    CU_CHECK(cudaEventCreate(&a));
    cudaError_t e = cudaEventCreate(&b);
    if (e != cudaSuccess) {
        cudaEventDestroy(a);
        return llmb_cu_cuda_fail(e, "cudaEventCreate", __FILE__, __LINE__);
    }
    e = cudaEventRecord(a, 0);
    for (int r = 0; r < reps && e == cudaSuccess; r++) e = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, 0);
    if (e == cudaSuccess) e = cudaEventRecord(b, 0);
    if (e == cudaSuccess) e = cudaEventSynchronize(b);
    if (e == cudaSuccess) e = cudaEventElapsedTime(ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    if (e != cudaSuccess) return llmb_cu_cuda_fail(e, "time_copy (cudaMemcpyAsync/cudaEvent*)", __FILE__, __LINE__);
    return LLMB_OK;
}

// ---- version 2: memory, contexts, phase timing ----

static llmb_status mem_info(int dev, size_t *free_bytes, size_t *total_bytes) {
    TRY(check_dev(dev));
    CU_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return LLMB_OK;
}

static void ctx_destroy(llmb_cuda_ctx *c) {
    if (!c) return;
    cudaSetDevice(c->dev);
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < WS_COUNT; i++)
        if (c->ws[i]) cudaFree(c->ws[i]);
    for (int i = 0; i < LLMB_CUDA_PHASES; i++)
        for (int j = 0; j < 2; j++)
            if (c->ev[i][j]) cudaEventDestroy(c->ev[i][j]);
    if (c->blas) llmb_cu_blas.destroy(c->blas);
    if (c->stream) cudaStreamDestroy(c->stream);
    cudaGetLastError();
    free(c);
}

static llmb_status ctx_init(llmb_cuda_ctx *c) {
    CU_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    TRY(llmb_cu_blas_load());
    CUBLAS_CHECK(llmb_cu_blas.create(&c->blas));
    CUBLAS_CHECK(llmb_cu_blas.set_stream(c->blas, c->stream));
    CUBLAS_CHECK(llmb_cu_blas.set_math_mode(c->blas, CUBLAS_DEFAULT_MATH));
    for (int i = 0; i < LLMB_CUDA_PHASES; i++)
        for (int j = 0; j < 2; j++) CU_CHECK(cudaEventCreate(&c->ev[i][j]));
    return LLMB_OK;
}

static llmb_status ctx_create(int dev, llmb_cuda_ctx **out) {
    *out = NULL;
    TRY(check_dev(dev));
    llmb_cuda_ctx *c = (llmb_cuda_ctx *)calloc(1, sizeof *c);
    if (!c) return llmb_cu_fail(LLMB_E_NOMEM, "cannot allocate a CUDA context (host memory)");
    c->dev = dev;
    c->gemm_min_tokens = 8;
    llmb_status s = ctx_init(c);
    if (s) {
        ctx_destroy(c);
        return s;
    }
    *out = c;
    return LLMB_OK;
}

llmb_status llmb_cu_enter(llmb_cuda_ctx *c) {
    if (!c) return llmb_cu_fail(LLMB_E_ARG, "CUDA context is NULL");
    CU_CHECK(cudaSetDevice(c->dev));
    return LLMB_OK;
}

llmb_status llmb_cu_ws(llmb_cuda_ctx *c, int slot, size_t nbytes, void **out) {
    static const char *names[WS_COUNT] = {"the dequantized weight tile workspace", "the 16-bit activation workspace",
                                          "the attention workspace", "the sampling workspace"};
    if (nbytes > c->ws_bytes[slot]) {
        CU_CHECK(cudaStreamSynchronize(c->stream)); // the old buffer may still be in use
        if (c->ws[slot]) CU_CHECK(cudaFree(c->ws[slot]));
        c->ws[slot] = NULL;
        c->ws_bytes[slot] = 0;
        size_t grow = nbytes + nbytes / 4; // headroom so a slowly growing size does not realloc each call
        void *p;
        TRY(llmb_cu_alloc(c->dev, grow, &p, names[slot]));
        c->ws[slot] = p;
        c->ws_bytes[slot] = grow;
    }
    *out = c->ws[slot];
    return LLMB_OK;
}

static llmb_status sync(llmb_cuda_ctx *c) {
    TRY(llmb_cu_enter(c));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return LLMB_OK;
}

static llmb_status ctx_workspace_bytes(llmb_cuda_ctx *c, size_t *out) {
    if (!c) return llmb_cu_fail(LLMB_E_ARG, "CUDA context is NULL");
    *out = 0;
    for (int i = 0; i < WS_COUNT; i++) *out += c->ws_bytes[i];
    return LLMB_OK;
}

static llmb_status check_phase(llmb_cuda_ctx *c, int id) {
    TRY(llmb_cu_enter(c));
    if (id < 0 || id >= LLMB_CUDA_PHASES) return llmb_cu_fail(LLMB_E_ARG, "phase id %d is not in 0..%d", id, LLMB_CUDA_PHASES - 1);
    return LLMB_OK;
}

static llmb_status phase_begin(llmb_cuda_ctx *c, int id) {
    TRY(check_phase(c, id));
    CU_CHECK(cudaEventRecord(c->ev[id][0], c->stream));
    return LLMB_OK;
}

static llmb_status phase_end(llmb_cuda_ctx *c, int id) {
    TRY(check_phase(c, id));
    CU_CHECK(cudaEventRecord(c->ev[id][1], c->stream));
    return LLMB_OK;
}

static llmb_status phase_ms(llmb_cuda_ctx *c, int id, float *ms) {
    TRY(check_phase(c, id));
    CU_CHECK(cudaEventSynchronize(c->ev[id][1]));
    CU_CHECK(cudaEventElapsedTime(ms, c->ev[id][0], c->ev[id][1]));
    return LLMB_OK;
}

static const llmb_cuda_api api = {
    LLMB_CUDA_ABI_VERSION, sizeof(llmb_cuda_api), last_error, init, versions, device_count, device_info,
    malloc_, free_, memcpy_, memset_, time_copy,
    mem_info, ctx_create, ctx_destroy, sync, ctx_workspace_bytes, phase_begin, phase_end, phase_ms,
    llmb_cu_matvec, llmb_cu_gemm, llmb_cu_matmul, llmb_cu_set_gemm_min_tokens, llmb_cu_dequantize,
    llmb_cu_rmsnorm, llmb_cu_rope, llmb_cu_swiglu, llmb_cu_add,
    llmb_cu_kv_store, llmb_cu_attn_decode, llmb_cu_attn_prefill,
    llmb_cu_sample,
};

#define STR_(x) #x
#define STR(x) STR_(x)
#ifdef LLMB_SIMT_HOST
#define NEEDS_DRIVER "0" // the emulated library (kernels/tests) runs without one
#else
#define NEEDS_DRIVER "1"
#endif
// read from the file by csrc/cuda_loader.c before it decides to dlopen this library
extern "C" __attribute__((visibility("default"), used)) const char llmb_cuda_build_marker[] =
    LLMB_CUDA_BUILD_MARKER_KEY "abi=" STR(LLMB_CUDA_ABI_VERSION) " cudart=" STR(CUDART_VERSION) " driver=" NEEDS_DRIVER;

extern "C" __attribute__((visibility("default"))) const llmb_cuda_api *llmb_cuda_get_api(void) { return &api; }
