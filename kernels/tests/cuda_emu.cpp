// cuda_emu.cpp — the CUDA runtime and cuBLAS calls the backend makes, implemented on the host, so
// kernels/*.cu compiled as C++ (with simt_host.h) form an emulated libllmbench_cuda.so: one fake
// device whose memory is host memory (a fixed capacity, so out-of-memory paths run), streams that
// run everything at once, events that read the monotonic clock, and cublasGemmEx as a plain
// column-major loop with FP32 accumulation. Built and used by tests/test_cuda_emulated.py; never
// part of the package.
//
// Stream capture works as CUDA's: between cudaStreamBeginCapture and cudaStreamEndCapture, kernel
// launches (simt::launch), cublasGemmEx, and device-to-device cudaMemcpyAsync / cudaMemsetAsync on the
// capturing stream are recorded with their arguments by value, not run; cudaGraphLaunch replays them
// in order. What CUDA refuses there fails the same way and invalidates the capture
// (cudaErrorStreamCaptureUnsupported now, cudaErrorStreamCaptureInvalidated from cudaStreamEndCapture):
// synchronizing the capturing stream, and from the capturing thread (modes ThreadLocal and Global)
// the calls that may synchronize: cudaMalloc, cudaFree, cudaMemcpy, cudaMemset, cudaDeviceSynchronize;
// and a copy between the capturing stream and host memory that is not pinned (none is, here). cuBLAS
// refuses to be captured unless cublasSetWorkspace gave it a workspace (it would allocate one).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

struct CUevent_st {
    double ms;
    bool captured; // recorded inside a capture: no time to read
};
struct CUgraphNode_st {
    cudaGraphNodeType type;
    std::function<void()> op;
};
struct CUgraph_st {
    std::vector<CUgraphNode_st *> nodes;
    ~CUgraph_st() {
        for (auto *n : nodes) delete n;
    }
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
};
struct CUstream_st {
    CUgraph_st *capture;       // the graph being captured, or null
    bool invalidated;          // an op the capture cannot hold was attempted
    cudaStreamCaptureMode mode;
};
struct cublasContext {
    cudaStream_t stream;
    void *workspace;
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

// the stream this thread is capturing in a mode that forbids unsafe calls (ThreadLocal, Global)
static thread_local cudaStream_t capturing_here;

// a call that may synchronize (or allocate): refused while this thread captures, spoiling the capture
static bool unsafe_now() {
    if (!capturing_here) return false;
    capturing_here->invalidated = true;
    ret(cudaErrorStreamCaptureUnsupported);
    return true;
}

static bool is_device(const void *p) { // inside a cudaMalloc'd allocation
    std::lock_guard<std::mutex> g(mu);
    auto it = allocs.upper_bound((void *)p);
    if (it == allocs.begin()) return false;
    --it;
    return (const char *)p < (const char *)it->first + it->second;
}

// Record op on s if it is capturing (true); false: the caller runs it now.
static bool record(cudaStream_t s, std::function<void()> op, cudaGraphNodeType type) {
    if (!s || !s->capture) return false;
    if (s->invalidated) { // CUDA refuses further work on a spoiled capture
        ret(cudaErrorStreamCaptureInvalidated);
        return true;
    }
    s->capture->nodes.push_back(new CUgraphNode_st{type, std::move(op)});
    return true;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
// CUDA's own strings and names for the errors this emulation raises
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    default: return "emulated error";
    }
}
const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorCapturedEvent: return "cudaErrorCapturedEvent";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    default: return "cudaErrorEmulated";
    }
}
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
    *p = nullptr;
    if (unsafe_now()) return cudaErrorStreamCaptureUnsupported;
    std::lock_guard<std::mutex> g(mu);
    if (n > EMU_TOTAL - used) return ret(cudaErrorMemoryAllocation);
    *p = aligned_alloc(256, (n + 255) / 256 * 256 + 256);
    if (!*p) return ret(cudaErrorMemoryAllocation);
    allocs[*p] = n;
    used += n;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (unsafe_now()) return cudaErrorStreamCaptureUnsupported;
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
    if (unsafe_now()) return cudaErrorStreamCaptureUnsupported;
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t s) {
    if (s && s->capture) {
        if (!is_device(dst) || !is_device(src)) { // pageable host memory cannot be captured
            s->invalidated = true;
            return ret(cudaErrorStreamCaptureUnsupported);
        }
        record(s, [=]() { memmove(dst, src, n); }, cudaGraphNodeTypeMemcpy);
        return cudaSuccess;
    }
    memmove(dst, src, n);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (unsafe_now()) return cudaErrorStreamCaptureUnsupported;
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (!record(s, [=]() { memset(p, v, n); }, cudaGraphNodeTypeMemset)) memset(p, v, n);
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
    if (unsafe_now()) return cudaErrorStreamCaptureUnsupported;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new CUstream_st();
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s && s->capture) { // waiting for a stream that only records can never end
        s->invalidated = true;
        return ret(cudaErrorStreamCaptureUnsupported);
    }
    if (unsafe_now()) return cudaErrorStreamCaptureUnsupported; // another stream (or the legacy one)
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (s && s->capture) delete s->capture;
    if (capturing_here == s) capturing_here = nullptr;
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (!s) return ret(cudaErrorStreamCaptureUnsupported); // the legacy stream cannot capture
    if (s->capture) return ret(cudaErrorIllegalState);
    s->capture = new CUgraph_st();
    s->invalidated = false;
    s->mode = mode;
    if (mode != cudaStreamCaptureModeRelaxed) capturing_here = s;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = nullptr;
    if (!s || !s->capture) return ret(cudaErrorIllegalState);
    if (capturing_here == s) capturing_here = nullptr;
    CUgraph_st *graph = s->capture;
    s->capture = nullptr;
    if (s->invalidated) {
        delete graph;
        return ret(cudaErrorStreamCaptureInvalidated);
    }
    *g = graph;
    return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus *st) {
    *st = s && s->capture ? (s->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive)
                          : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *n) {
    if (!g || !n) return ret(cudaErrorInvalidValue);
    if (nodes)
        for (size_t i = 0; i < *n; i++) nodes[i] = i < g->nodes.size() ? g->nodes[i] : nullptr;
    *n = g->nodes.size();
    return cudaSuccess;
}
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType *t) {
    if (!node) return ret(cudaErrorInvalidValue);
    *t = node->type;
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *x, cudaGraph_t g, unsigned long long) {
    if (!g) return ret(cudaErrorInvalidValue);
    *x = new CUgraphExec_st();
    for (auto *n : g->nodes) (*x)->ops.push_back(n->op);
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t x, cudaStream_t s) {
    if (!x) return ret(cudaErrorInvalidValue);
    auto all = [x]() {
        for (auto &op : x->ops) op();
    };
    if (!record(s, all, cudaGraphNodeTypeGraph)) all();
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t x) {
    delete x;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new CUevent_st();
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    e->captured = s && s->capture;
    e->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e->captured ? ret(cudaErrorCapturedEvent) : cudaSuccess; }
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (a->captured || b->captured) return ret(cudaErrorCapturedEvent);
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
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t n) {
    h->workspace = n ? ws : nullptr;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char *cublasGetStatusName(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : s == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED" : "CUBLAS_STATUS_EMULATED";
}
const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "success" : s == CUBLAS_STATUS_NOT_SUPPORTED ? "the functionality requested is not supported" : "emulated error";
}

// element (row i, column j) of a column-major matrix with leading dimension ld, transposed or not
static float at(const void *m, cudaDataType t, int ld, cublasOperation_t op, int i, int j) {
    const int64_t idx = op == CUBLAS_OP_N ? (int64_t)j * ld + i : (int64_t)i * ld + j;
    if (t == CUDA_R_32F) return ((const float *)m)[idx];
    if (t == CUDA_R_16F) return __half2float(((const __half *)m)[idx]);
    return __bfloat162float(((const __nv_bfloat16 *)m)[idx]);
}

// C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C: cuBLAS's definition, FP32 accumulation
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at_, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t ctype,
                            cublasGemmAlgo_t) {
    if (ct != CUDA_R_32F || ctype != CUBLAS_COMPUTE_32F || at_ != bt || m < 0 || n < 0 || k < 0 || ldc < m ||
        lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n))
        return CUBLAS_STATUS_INVALID_VALUE;
    const float a = *(const float *)alpha, b = *(const float *)beta; // host pointer mode: values now
    float *c = (float *)C;
    auto run = [=]() {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                float s = 0.0f;
                for (int l = 0; l < k; l++) s += at(A, at_, lda, ta, i, l) * at(B, bt, ldb, tb, l, j);
                c[(int64_t)j * ldc + i] = a * s + (b != 0.0f ? b * c[(int64_t)j * ldc + i] : 0.0f);
            }
    };
    if (h->stream && h->stream->capture) {
        if (!h->workspace) return CUBLAS_STATUS_NOT_SUPPORTED; // it would allocate one inside the capture
        record(h->stream, run, cudaGraphNodeTypeKernel);
    } else {
        run();
    }
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"

// simt_host.h's hook: kernel launches on a capturing stream become kernel nodes
bool llmb_emu_capture(cudaStream_t s, std::function<void()> op, bool kernel) {
    return record(s, std::move(op), kernel ? cudaGraphNodeTypeKernel : cudaGraphNodeTypeMemcpy);
}
