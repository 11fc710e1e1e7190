// runtime.cu — the CUDA backend's device management: versions, device list, memory, copies, the
// context (stream, cuBLAS handle, workspaces), CUDA-event phase timing, CUDA Graphs (capture of a
// context's stream, replay), and the function table.
// A plain shared library with a C ABI (kernels/llmb_cuda_abi.h), no Python. Every CUDA call is
// checked; an error names the call, file and line. Compiled in CI wherever nvcc exists; exercised
// on a GPU by tests/test_cuda.py and tests/test_cuda_kernels.py (skipped with the reason elsewhere).
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <time.h>

#include <mutex>
#include <vector>

#include "common.cuh"

static thread_local char errbuf[1024];
// the context this thread is capturing (graph_begin .. graph_end): a failure meanwhile spoils the capture
static thread_local llmb_cuda_ctx *capturing;

llmb_status llmb_cu_fail(llmb_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    if (capturing && !capturing->capture_err[0]) snprintf(capturing->capture_err, sizeof capturing->capture_err, "%s", errbuf);
    return s;
}

static bool capture_error(cudaError_t e) {
    return e == cudaErrorStreamCaptureUnsupported || e == cudaErrorStreamCaptureInvalidated ||
           e == cudaErrorStreamCaptureImplicit || e == cudaErrorCapturedEvent || e == cudaErrorStreamCaptureWrongThread;
}

llmb_status llmb_cu_cuda_fail(cudaError_t e, const char *call, const char *file, int line) {
    cudaGetLastError(); // clear a sticky-free error so the process stays usable
    return llmb_cu_fail(e == cudaErrorMemoryAllocation ? LLMB_E_DEVICE_OOM : LLMB_E_DEVICE,
                        "%s failed at %s:%d: %s (%s)%s", call, file, line, cudaGetErrorString(e), cudaGetErrorName(e),
                        capture_error(e) ? "; a graph capture cannot hold this call (syncs, allocations, host copies "
                                           "and events run outside graph_begin .. graph_end)" : "");
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
        llmb_cu_blas = {cublasCreate_v2,  cublasDestroy_v2, cublasSetStream_v2,  cublasSetMathMode,
                        cublasSetWorkspace_v2, cublasGemmEx, cublasGetStatusName, cublasGetStatusString};
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
            SYM(set_workspace, "cublasSetWorkspace_v2");
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
    // cudaMemcpy may return before a copy from pageable host memory (staged) or between device
    // buffers has landed, and contexts' streams do not wait for the legacy stream: wait here, so a
    // kernel queued next on any stream reads what was copied
    if (kind != 1) CU_CHECK(cudaDeviceSynchronize());
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

static void free_retired(llmb_cuda_ctx *c) {
    for (int i = 0; i < c->n_retired; i++) cudaFree(c->retired[i]);
    free(c->retired);
    c->retired = NULL;
    c->n_retired = 0;
}

static void ctx_destroy(llmb_cuda_ctx *c) {
    if (!c) return;
    cudaSetDevice(c->dev);
    if (c->capturing) { // abandoned mid-capture: end it so the stream can go
        cudaGraph_t g = NULL;
        if (cudaStreamEndCapture(c->stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
        if (capturing == c) capturing = NULL;
    }
    if (c->stream) cudaStreamSynchronize(c->stream);
    for (int i = 0; i < WS_COUNT; i++)
        if (c->ws[i]) cudaFree(c->ws[i]);
    free_retired(c);
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
    // a workspace of cuBLAS's own, so it allocates nothing inside a graph capture
    TRY(llmb_cu_alloc(c->dev, LLMB_CUBLAS_WORKSPACE, &c->ws[WS_BLAS], "the cuBLAS workspace"));
    c->ws_bytes[WS_BLAS] = LLMB_CUBLAS_WORKSPACE;
    CUBLAS_CHECK(llmb_cu_blas.set_workspace(c->blas, c->ws[WS_BLAS], LLMB_CUBLAS_WORKSPACE));
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
    static const char *names[WS_COUNT] = {"the dequantized weight tile workspace", "the GEMM activation workspace",
                                          "the GEMM output workspace",
                                          "the attention workspace", "the sampling workspace", "the cuBLAS workspace"};
    if (nbytes > c->ws_bytes[slot]) {
        if (c->capturing)
            return llmb_cu_fail(LLMB_E_ARG, "%s must grow from %zu to %zu bytes inside a graph capture, where memory "
                                            "cannot be allocated: run the same op once before graph_begin",
                                names[slot], c->ws_bytes[slot], nbytes);
        CU_CHECK(cudaStreamSynchronize(c->stream)); // the old buffer may still be in use
        if (c->ws[slot] && c->graphs) { // graphs captured with the old buffer still use it
            void **r = (void **)realloc(c->retired, (size_t)(c->n_retired + 1) * sizeof *r);
            if (!r) return llmb_cu_fail(LLMB_E_NOMEM, "cannot grow %s (host memory)", names[slot]);
            c->retired = r;
            c->retired[c->n_retired++] = c->ws[slot];
        } else if (c->ws[slot]) {
            CU_CHECK(cudaFree(c->ws[slot]));
        }
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
    if (c->capturing)
        return llmb_cu_fail(LLMB_E_ARG, "phase %d: phase events cannot be recorded inside a graph capture (time "
                                        "graph_launch instead)", id);
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

// ---- version 3: CUDA Graphs ----

struct llmb_cuda_graph {
    llmb_cuda_ctx *c;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static llmb_status graph_begin(llmb_cuda_ctx *c) {
    TRY(llmb_cu_enter(c));
    if (c->capturing) return llmb_cu_fail(LLMB_E_ARG, "graph_begin: the context is already capturing (graph_end first)");
    if (capturing) return llmb_cu_fail(LLMB_E_ARG, "graph_begin: this thread is already capturing another context");
    c->capture_t0 = now_ms();
    CU_CHECK(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal));
    c->capturing = true;
    c->capture_err[0] = 0;
    capturing = c;
    return LLMB_OK;
}

static void graph_destroy(llmb_cuda_graph *g) {
    if (!g) return;
    llmb_cuda_ctx *c = g->c;
    cudaSetDevice(c->dev);
    if (g->exec) cudaGraphExecDestroy(g->exec); // a replay in flight completes first
    if (g->graph) cudaGraphDestroy(g->graph);
    free(g);
    // the last graph gone: the outgrown workspaces it may have used can go once the stream is idle
    // (not inside a capture, where a sync would invalidate it; then with a later graph or the context)
    if (--c->graphs == 0 && !c->capturing && c->n_retired && cudaStreamSynchronize(c->stream) == cudaSuccess)
        free_retired(c);
    cudaGetLastError();
}

static llmb_status graph_end(llmb_cuda_ctx *c, llmb_cuda_graph **out, llmb_cuda_graph_info *info) {
    *out = NULL;
    if (info) *info = llmb_cuda_graph_info{0, 0, 0.0};
    TRY(llmb_cu_enter(c));
    if (!c->capturing) return llmb_cu_fail(LLMB_E_ARG, "graph_end: the context is not capturing (graph_begin first)");
    c->capturing = false;
    capturing = NULL;
    cudaGraph_t cg = NULL;
    const cudaError_t e = cudaStreamEndCapture(c->stream, &cg);
    if (c->capture_err[0]) { // an op failed inside the capture: the graph would lack it
        if (cg) cudaGraphDestroy(cg);
        cudaGetLastError();
        return llmb_cu_fail(LLMB_E_DEVICE, "graph_end: the capture is invalid: an op inside it failed: %s", c->capture_err);
    }
    if (e != cudaSuccess) {
        if (cg) cudaGraphDestroy(cg);
        return llmb_cu_cuda_fail(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    llmb_cuda_graph *g = (llmb_cuda_graph *)calloc(1, sizeof *g);
    if (!g) {
        cudaGraphDestroy(cg);
        return llmb_cu_fail(LLMB_E_NOMEM, "graph_end: out of host memory");
    }
    g->c = c;
    g->graph = cg;
    c->graphs++;
    size_t n = 0;
    cudaError_t e2 = cudaGraphGetNodes(cg, NULL, &n);
    std::vector<cudaGraphNode_t> nodes(n);
    if (e2 == cudaSuccess && n) e2 = cudaGraphGetNodes(cg, nodes.data(), &n);
    int kernels = 0;
    for (size_t i = 0; i < n && e2 == cudaSuccess; i++) {
        cudaGraphNodeType t;
        e2 = cudaGraphNodeGetType(nodes[i], &t);
        kernels += e2 == cudaSuccess && t == cudaGraphNodeTypeKernel;
    }
    if (e2 == cudaSuccess) e2 = cudaGraphInstantiate(&g->exec, cg, 0);
    if (e2 != cudaSuccess) {
        graph_destroy(g);
        return llmb_cu_cuda_fail(e2, "cudaGraphGetNodes/cudaGraphNodeGetType/cudaGraphInstantiate", __FILE__, __LINE__);
    }
    if (info) *info = llmb_cuda_graph_info{(int)n, kernels, now_ms() - c->capture_t0};
    *out = g;
    return LLMB_OK;
}

static llmb_status graph_launch(llmb_cuda_ctx *c, llmb_cuda_graph *g) {
    TRY(llmb_cu_enter(c));
    if (!g || g->c != c) return llmb_cu_fail(LLMB_E_ARG, "graph_launch: %s", g ? "the graph was captured on another context" : "NULL graph");
    if (c->capturing) return llmb_cu_fail(LLMB_E_ARG, "graph_launch: the context is capturing");
    CU_CHECK(cudaGraphLaunch(g->exec, c->stream));
    return LLMB_OK;
}

static llmb_status copy(llmb_cuda_ctx *c, void *dst, const void *src, size_t nbytes, int kind) {
    static const cudaMemcpyKind kinds[3] = {cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice};
    TRY(llmb_cu_enter(c));
    if (kind < 0 || kind > 2) return llmb_cu_fail(LLMB_E_ARG, "copy kind %d: expected 0 (to device), 1 (to host) or 2", kind);
    if (nbytes && (!dst || !src)) return llmb_cu_fail(LLMB_E_ARG, "copy: NULL pointer");
    if (c->capturing && kind != 2)
        return llmb_cu_fail(LLMB_E_ARG, "copy: a copy %s host memory cannot be captured in a graph (copy into its "
                                        "fixed device buffers before graph_launch, read results after)",
                            kind == 0 ? "from" : "to");
    if (!nbytes) return LLMB_OK;
    CU_CHECK(cudaMemcpyAsync(dst, src, nbytes, kinds[kind], c->stream));
    if (kind != 2) CU_CHECK(cudaStreamSynchronize(c->stream)); // the host buffer is free (or filled) on return
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
    graph_begin, graph_end, graph_launch, graph_destroy, copy, llmb_cu_sample_dev,
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
