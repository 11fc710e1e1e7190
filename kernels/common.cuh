// common.cuh — shared by the CUDA backend's sources: error reporting (every CUDA and cuBLAS call is
// checked and a failure names the call, file and line), the context (device, stream, cuBLAS handle,
// workspaces, phase events) and the launch checks. Internal to libllmbench_cuda.so.
#ifndef LLMB_CUDA_COMMON_CUH
#define LLMB_CUDA_COMMON_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "device.cuh"
#include "llmb_cuda_abi.h"

// ---- errors (runtime.cu) ----
llmb_status llmb_cu_fail(llmb_status s, const char *fmt, ...);
llmb_status llmb_cu_cuda_fail(cudaError_t e, const char *call, const char *file, int line);
llmb_status llmb_cu_cublas_fail(cublasStatus_t e, const char *call, const char *file, int line);
// cudaMalloc with the out-of-memory message (asked, free, total); `what` names the buffer.
llmb_status llmb_cu_alloc(int dev, size_t nbytes, void **out, const char *what);

#define CU_CHECK(call)                                                                   \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess) return llmb_cu_cuda_fail(e_, #call, __FILE__, __LINE__);  \
    } while (0)

#define CUBLAS_CHECK(call)                                                                 \
    do {                                                                                   \
        cublasStatus_t e_ = (call);                                                        \
        if (e_ != CUBLAS_STATUS_SUCCESS) return llmb_cu_cublas_fail(e_, #call, __FILE__, __LINE__); \
    } while (0)

// after a kernel launch: a bad configuration shows up here, a fault inside the kernel at sync
#define CU_LAUNCHED(name)                                                                          \
    do {                                                                                           \
        cudaError_t e_ = cudaGetLastError();                                                       \
        if (e_ != cudaSuccess) return llmb_cu_cuda_fail(e_, "launch of " name, __FILE__, __LINE__); \
    } while (0)

#define TRY(expr)                    \
    do {                             \
        llmb_status s_ = (expr);     \
        if (s_) return s_;           \
    } while (0)

// ---- cuBLAS, loaded on first use (runtime.cu) ----
// The library loads and reports devices without cuBLAS; a context needs it. dlopen keeps cuBLAS (and
// its own CUDA runtime) out of processes that never make one, e.g. every process on a machine
// without a GPU.
struct llmb_cublas {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                              const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                              cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t); // overloaded in C++
    decltype(&cublasGetStatusName) status_name;
    decltype(&cublasGetStatusString) status_string;
};
extern llmb_cublas llmb_cu_blas;
llmb_status llmb_cu_blas_load(void); // LLMB_E_BACKEND naming what is missing

// ---- the context (runtime.cu) ----
enum { WS_GEMM_W, WS_GEMM_X, WS_GEMM_Y, WS_ATTN, WS_SAMPLE, WS_BLAS, WS_COUNT };

#define LLMB_CUBLAS_WORKSPACE ((size_t)32 << 20) // cuBLAS's own workspace (NVIDIA's advice for Hopper)

struct llmb_cuda_ctx {
    int dev;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *ws[WS_COUNT];       // workspaces, grown on demand (WS_BLAS: fixed, set at creation)
    size_t ws_bytes[WS_COUNT];
    cudaEvent_t ev[LLMB_CUDA_PHASES][2];
    int gemm_min_tokens;
    // graphs (runtime.cu): a capture in progress, the graphs alive, and workspaces outgrown while
    // graphs were alive (a graph holds their pointers: freed when the last graph goes)
    bool capturing;
    double capture_t0;        // ms, monotonic
    char capture_err[512];    // the first failure inside the capture (graph_end reports it)
    int graphs;
    void **retired;
    int n_retired;
};

// Make c's device current and workspace `slot` at least nbytes (growing it syncs the stream).
// Inside a capture a workspace cannot grow: that fails, saying which op needs how many bytes.
llmb_status llmb_cu_ws(llmb_cuda_ctx *c, int slot, size_t nbytes, void **out);
llmb_status llmb_cu_enter(llmb_cuda_ctx *c); // cudaSetDevice(c->dev), NULL check

// ---- the ops of the table, by source file ----
// matmul.cu
llmb_status llmb_cu_matvec(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                           int64_t ldx, int ntok, float *y, int64_t ldy);
llmb_status llmb_cu_gemm(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                         int64_t ldx, int ntok, float *y, int64_t ldy);
llmb_status llmb_cu_matmul(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                           int64_t ldx, int ntok, float *y, int64_t ldy);
llmb_status llmb_cu_set_gemm_min_tokens(llmb_cuda_ctx *c, int ntok);
llmb_status llmb_cu_dequantize(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols,
                               const int32_t *ids, int64_t n, int out_type, void *out);
// ops.cu
llmb_status llmb_cu_rmsnorm(llmb_cuda_ctx *c, float *out, float *x, const float *residual, const float *w, int64_t n,
                            int n_rows, float eps);
llmb_status llmb_cu_rope(llmb_cuda_ctx *c, float *v, int n_tok, int n_heads, int head_dim, int64_t ld,
                         const int32_t *pos, float base, float scale, const float *freq_factors, int neox);
llmb_status llmb_cu_swiglu(llmb_cuda_ctx *c, float *gate, const float *up, int64_t n);
llmb_status llmb_cu_add(llmb_cuda_ctx *c, float *y, const float *x, int64_t n);
// attention.cu
llmb_status llmb_cu_kv_store(llmb_cuda_ctx *c, int kv_type, void *k_cache, void *v_cache, const float *k,
                             const float *v, int64_t ld, int n_tok, int kv_dim, const int32_t *slots);
llmb_status llmb_cu_attn_decode(llmb_cuda_ctx *c, const llmb_cuda_attn *a);
llmb_status llmb_cu_attn_prefill(llmb_cuda_ctx *c, const llmb_cuda_attn *a);
// sample.cu
llmb_status llmb_cu_sample(llmb_cuda_ctx *c, const float *logits, int n_rows, int vocab,
                           const llmb_cuda_sampling *params, int32_t *ids, float *logprobs);
llmb_status llmb_cu_sample_dev(llmb_cuda_ctx *c, const float *logits, int n_rows, int vocab,
                               const llmb_cuda_sampling *params, int32_t *ids, float *logprobs);


#endif
