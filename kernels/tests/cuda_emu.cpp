// cuda_emu.cpp — the CUDA runtime and cuBLAS calls the backend makes, implemented on the host, so
// kernels/*.cu compiled as C++ (with simt_host.h) form an emulated libllmbench_cuda.so: one fake
// device whose memory is host memory (a fixed capacity, so out-of-memory paths run), streams that
// run everything at once, events that read the monotonic clock, and cublasGemmEx as a plain
// column-major loop with FP32 accumulation. Built and used by tests/test_cuda_emulated.py; never
// part of the package.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

struct CUevent_st {
    double ms;
};
struct CUstream_st {
    int unused;
};
struct cublasContext {
    int unused;
};

static const size_t EMU_TOTAL = (size_t)8 << 30; // the fake device's memory
static std::mutex mu;
static std::map<void *, size_t> allocs;
static size_t used;
static cudaError_t last = cudaSuccess;

static cudaError_t ret(cudaError_t e) {
    if (e != cudaSuccess) last = e;
    return e;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "emulated error"; }
const char *cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "cudaErrorEmulated"; }
cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return ret(dev == 0 ? cudaSuccess : cudaErrorInvalidDevice); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev) {
    if (dev != 0) return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "llmbench host emulation");
    p->totalGlobalMem = EMU_TOTAL;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *fr, size_t *tot) {
    std::lock_guard<std::mutex> g(mu);
    *fr = EMU_TOTAL - used;
    *tot = EMU_TOTAL;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t n) {
    std::lock_guard<std::mutex> g(mu);
    *p = nullptr;
    if (n > EMU_TOTAL - used) return ret(cudaErrorMemoryAllocation);
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (!*p) return ret(cudaErrorMemoryAllocation);
    allocs[*p] = n;
    used += n;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    std::lock_guard<std::mutex> g(mu);
    if (!p) return cudaSuccess;
    auto it = allocs.find(p);
    if (it == allocs.end()) return ret(cudaErrorInvalidValue);
    used -= it->second;
    allocs.erase(it);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaGetLastError(void) {
    const cudaError_t e = last;
    last = cudaSuccess;
    return e;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k, cudaStream_t) { return cudaMemcpy(dst, src, n, k); }
cudaError_t cudaMemset(void *p, int v, size_t n) {
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new CUstream_st();
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new CUevent_st();
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    e->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    *ms = (float)(b->ms - a->ms);
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *, cudaFuncAttribute, int) { return cudaSuccess; }

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusName(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_EMULATED"; }
const char *cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "emulated error"; }

// element (row i, column j) of a column-major matrix with leading dimension ld, transposed or not
static float at(const void *m, cudaDataType t, int ld, cublasOperation_t op, int i, int j) {
    const int64_t idx = op == CUBLAS_OP_N ? (int64_t)j * ld + i : (int64_t)i * ld + j;
    if (t == CUDA_R_32F) return ((const float *)m)[idx];
    if (t == CUDA_R_16F) return __half2float(((const __half *)m)[idx]);
    return __bfloat162float(((const __nv_bfloat16 *)m)[idx]);
}

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C: cuBLAS's definition, FP32 accumulation
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at_, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t ctype,
                            cublasGemmAlgo_t) {
    if (ct != CUDA_R_32F || ctype != CUBLAS_COMPUTE_32F || at_ != bt || m < 0 || n < 0 || k < 0 || ldc < m ||
        lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float a = *(const float *)alpha, b = *(const float *)beta;
    float *c = (float *)C;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float s = 0.0f;
            for (int l = 0; l < k; l++) s += at(A, at_, lda, ta, i, l) * at(B, bt, ldb, tb, l, j);
            c[(int64_t)j * ldc + i] = a * s + (b != 0.0f ? b * c[(int64_t)j * ldc + i] : 0.0f);
        }
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
