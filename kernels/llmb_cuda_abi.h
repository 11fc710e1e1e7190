// llmb_cuda_abi.h — the C ABI between the core (csrc/cuda_loader.c) and the CUDA backend library
// (libllmbench_cuda.so, built from kernels/*.cu). The core dlopens the library only when a CUDA
// device is asked for, looks up llmb_cuda_get_api and refuses a table whose abi_version differs.
// Bump LLMB_CUDA_ABI_VERSION whenever the table or a struct here changes.
//
// Version 2 adds the kernels of a forward step. They run on a context (one device, one stream, a
// cuBLAS handle, reusable workspaces, CUDA events per phase); every pointer an op takes is device
// memory unless its comment says host, ops are asynchronous on the context's stream, and `sync`
// waits for them and reports an error a kernel raised. Matrices are row-major; a weight matrix is
// `rows` rows of `cols` elements of a ggml type (csrc/quants.h), packed back to back.
//
// Version 3 adds CUDA Graphs: graph_begin starts capturing what the context's stream receives,
// graph_end turns it into an instantiated graph (with its kernel count and the capture time), and
// graph_launch replays it on the stream. Every op of a decode step is capturable: launches only,
// grids fixed by host values that stay the same across replays (decode attention sizes its split
// grid from max_seq_len, so a graph passes the longest context and the real lengths are read from
// device memory), workspaces that never grow inside a capture (they grow on an uncaptured call;
// growing one while graphs exist keeps the old buffer alive for them), and cuBLAS with a workspace
// of its own (cublasSetWorkspace). What cannot be captured fails with a message that says so: a
// sync, an allocation, a copy to or from host memory, phase events, the synchronous sampler. After
// such a failure, graph_end ends the (invalidated) capture and fails too; the context stays usable.
#ifndef LLMB_CUDA_ABI_H
#define LLMB_CUDA_ABI_H

#include "../csrc/llmb.h"

#define LLMB_CUDA_ABI_VERSION 3

// A string the library carries (kernels/runtime.cu) and the core reads from the file before any
// dlopen: "LLMB_CUDA_BUILD abi=<version> cudart=<CUDART_VERSION> driver=<1 needs libcuda, 0 not>".
#define LLMB_CUDA_BUILD_MARKER_KEY "LLMB_CUDA_BUILD "

#ifdef __cplusplus
extern "C" {
#endif

typedef struct llmb_cuda_ctx llmb_cuda_ctx;
typedef struct llmb_cuda_graph llmb_cuda_graph; // an instantiated graph, replayed on the context that captured it

#define LLMB_CUDA_MATVEC_MAX 16 // tokens one matvec call serves (weights read once for all of them)
#define LLMB_CUDA_PHASES 8      // phase timers per context (ids 0..7; the engine names them)
#define LLMB_CUDA_HD_MAX 256    // largest head size of the attention kernels

// Attention over a paged KV cache: the cache of one layer is n_blocks x block_size token rows of
// kv_dim = n_head_kv * head_dim elements of kv_type (F32, F16 or Q8_0), K and V in separate pools;
// token p of sequence s is in block block_tables[s * max_blocks + p / block_size], slot p % block_size.
// Query heads h use KV head h / (n_head / n_head_kv) (GQA).
typedef struct {
    const float *q;               // (n_tok, n_head * head_dim), rows ldq floats apart
    float *out;                   // (n_tok, n_head * head_dim), rows ldo floats apart
    int64_t ldq, ldo;
    const void *k_cache, *v_cache;
    int kv_type, block_size, n_head, n_head_kv, head_dim;
    float scale;                  // usually 1/sqrt(head_dim)
    const int32_t *block_tables;  // (n_seq, max_blocks)
    int max_blocks, n_seq;
    // decode: query row s of sequence s attends its keys 0 .. seq_lens[s]-1
    const int32_t *seq_lens;
    int split_keys;               // decode: keys per split of the context (0: chosen from the lengths)
    int max_seq_len;              // decode: at least the largest seq_lens (host value; sizes the split grid,
                                  // keys past max_seq_len are not attended): a graph passes the context length
    // prefill: query rows q_start[s] + i (i < q_len[s]) of sequence s sit at positions pos0[s] + i
    // and attend keys 0 .. pos0[s] + i (causal)
    const int32_t *q_start, *q_len, *pos0;
    int max_q_len;                // host value: the largest q_len
} llmb_cuda_attn;

// Sampling of one logits row (host struct). temperature <= 0: greedy (first maximum). Otherwise
// the CPU engine's rule: logits / temperature, candidates within exp(-27.6) of the max, sorted by
// value (ties by id), cut to top_k (0: off), to the shortest prefix whose probability reaches
// top_p (1: off), to those with probability >= min_p * the largest (0: off); then the first
// candidate whose cumulative weight exceeds u * total, u uniform in [0, 1) from the caller.
typedef struct {
    float temperature, top_p, min_p, u;
    int top_k;
} llmb_cuda_sampling;

// What graph_end reports about a capture.
typedef struct {
    int n_nodes;       // nodes of the graph (kernels, copies, memsets)
    int n_kernels;     // of which kernel launches (cudaGraphNodeTypeKernel)
    double capture_ms; // host time from graph_begin to the instantiated graph (monotonic clock)
} llmb_cuda_graph_info;

// Every entry returns an llmb_status; on failure the library's last_error() names the CUDA or
// cuBLAS call, the source file and line, and the error; out of device memory says how many bytes
// were asked for and how many are free.
typedef struct {
    int abi_version;
    size_t table_size; // sizeof(llmb_cuda_api): every pointer after it is set (tests check)
    const char *(*last_error)(void);
    // Checks that a driver and at least one device are present; fails with LLMB_E_BACKEND otherwise.
    llmb_status (*init)(void);
    llmb_status (*versions)(int *runtime, int *driver);
    llmb_status (*device_count)(int *n);
    llmb_status (*device_info)(int dev, llmb_cuda_device *out);
    llmb_status (*malloc_)(int dev, size_t nbytes, void **out);
    llmb_status (*free_)(int dev, void *p);
    // kind 0 to device, 1 to host, 2 device to device; complete on return (kernels queued next on
    // any stream see the bytes)
    llmb_status (*memcpy_)(int dev, void *dst, const void *src, size_t nbytes, int kind);
    llmb_status (*memset_)(int dev, void *p, int value, size_t nbytes);
    llmb_status (*time_copy)(int dev, void *dst, const void *src, size_t nbytes, int reps, float *ms);

    // ---- version 2: contexts, memory, timing ----
    llmb_status (*mem_info)(int dev, size_t *free_bytes, size_t *total_bytes);
    llmb_status (*ctx_create)(int dev, llmb_cuda_ctx **out);
    void (*ctx_destroy)(llmb_cuda_ctx *c);
    llmb_status (*sync)(llmb_cuda_ctx *c);
    // bytes the context holds in workspaces (cuBLAS, dequantized tiles, attention partials, ...)
    llmb_status (*ctx_workspace_bytes)(llmb_cuda_ctx *c, size_t *out);
    // CUDA events on the context's stream around phase `id`; phase_ms syncs on the end event and
    // gives the time between the last begin and end of that phase.
    llmb_status (*phase_begin)(llmb_cuda_ctx *c, int id);
    llmb_status (*phase_end)(llmb_cuda_ctx *c, int id);
    llmb_status (*phase_ms)(llmb_cuda_ctx *c, int id, float *ms);

    // ---- version 2: matrix products, y[t * ldy + r] = sum_k W[r, k] * x[t * ldx + k] ----
    // Decode: 1 <= ntok <= LLMB_CUDA_MATVEC_MAX straight from the blocks of a type kernels/quant.cuh
    // decodes (llmb_cu_dispatch_type; dequantized in registers, FP32 accumulation); each weight row
    // is read once for all tokens. cols a multiple of the type's block size.
    llmb_status (*matvec)(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                          int64_t ldx, int ntok, float *y, int64_t ldy);
    // Prefill and large batches: weights dequantized tile by tile to FP16 (BF16 stays BF16) in a
    // reused workspace, activations rounded to the same 16-bit type, cublasGemmEx with FP32
    // accumulation and FP32 output. Any ntok >= 1.
    llmb_status (*gemm)(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                        int64_t ldx, int ntok, float *y, int64_t ldy);
    // matvec below the context's crossover token count (set_gemm_min_tokens; default 8), else gemm.
    llmb_status (*matmul)(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                          int64_t ldx, int ntok, float *y, int64_t ldy);
    llmb_status (*set_gemm_min_tokens)(llmb_cuda_ctx *c, int ntok);
    // out = rows x cols of out_type (F32 or F16) from W; ids (may be NULL: rows 0..n-1) pick n rows
    // (embedding lookup); ids outside 0..rows-1 give rows of zeros.
    llmb_status (*dequantize)(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols,
                              const int32_t *ids, int64_t n, int out_type, void *out);

    // ---- version 2: elementwise ops on float32 rows ----
    // For each of n_rows rows of n: if residual, x += residual (stored back to x) first; then
    // out = x / sqrt(mean(x^2) + eps) * w. out may equal x.
    llmb_status (*rmsnorm)(llmb_cuda_ctx *c, float *out, float *x, const float *residual, const float *w, int64_t n,
                           int n_rows, float eps);
    // Rotate n_heads heads of head_dim in each of n_tok rows (ld floats apart) by position pos[t]:
    // theta_i = pos * scale * base^(-2i/head_dim) / freq_factors[i] (freq_factors NULL: 1), pairs
    // (2i, 2i+1), or (i, i + head_dim/2) when neox.
    llmb_status (*rope)(llmb_cuda_ctx *c, float *v, int n_tok, int n_heads, int head_dim, int64_t ld,
                        const int32_t *pos, float base, float scale, const float *freq_factors, int neox);
    // gate[i] = silu(gate[i]) * up[i], i < n
    llmb_status (*swiglu)(llmb_cuda_ctx *c, float *gate, const float *up, int64_t n);
    // y[i] += x[i], i < n
    llmb_status (*add)(llmb_cuda_ctx *c, float *y, const float *x, int64_t n);

    // ---- version 2: KV cache and attention ----
    // Store n_tok rows of K and V (kv_dim floats each, ld floats apart) into cache slots
    // slots[t] = block * block_size + offset, converted to kv_type (F32, F16, Q8_0: kv_dim % 32 == 0).
    llmb_status (*kv_store)(llmb_cuda_ctx *c, int kv_type, void *k_cache, void *v_cache, const float *k,
                            const float *v, int64_t ld, int n_tok, int kv_dim, const int32_t *slots);
    llmb_status (*attn_decode)(llmb_cuda_ctx *c, const llmb_cuda_attn *a);
    llmb_status (*attn_prefill)(llmb_cuda_ctx *c, const llmb_cuda_attn *a);

    // ---- version 2: sampling ----
    // For each of n_rows logits rows (vocab floats, device), sample with params[r] (host array) and
    // write the token id to ids[r] (host); if logprobs (host, may be NULL), logprobs[r] is the
    // token's log-probability under the unmodified logits. Synchronous: only ids cross the bus.
    llmb_status (*sample)(llmb_cuda_ctx *c, const float *logits, int n_rows, int vocab,
                          const llmb_cuda_sampling *params, int32_t *ids, float *logprobs);

    // ---- version 3: CUDA Graphs ----
    // Capture the work the context's stream receives from this thread (cudaStreamCaptureModeThreadLocal)
    // until graph_end. Ops called meanwhile are recorded, not run; their pointers and host values are
    // fixed in the graph, the contents of device memory are read when it replays.
    llmb_status (*graph_begin)(llmb_cuda_ctx *c);
    // End the capture and instantiate it: *out is the graph (NULL on failure), info (may be NULL) its
    // node and kernel counts and the capture time. Fails if an op inside the capture failed.
    llmb_status (*graph_end)(llmb_cuda_ctx *c, llmb_cuda_graph **out, llmb_cuda_graph_info *info);
    // Replay g on the context that captured it (asynchronous, like the ops it holds).
    llmb_status (*graph_launch)(llmb_cuda_ctx *c, llmb_cuda_graph *g);
    void (*graph_destroy)(llmb_cuda_graph *g); // NULL is fine; destroy graphs before their context
    // Stream-ordered copy on the context's stream (kind as memcpy_: 0 to device, 1 to host, 2 device to
    // device): per-step inputs into a graph's fixed buffers before graph_launch, results back after.
    // Host copies are synchronous; device-to-device copies are asynchronous and capturable.
    llmb_status (*copy)(llmb_cuda_ctx *c, void *dst, const void *src, size_t nbytes, int kind);
    // sample with everything in device memory (params, ids, logprobs: n_rows each; logprobs may be
    // NULL): asynchronous and capturable. Parameters are not checked on the host (sample checks them).
    llmb_status (*sample_dev)(llmb_cuda_ctx *c, const float *logits, int n_rows, int vocab,
                              const llmb_cuda_sampling *params, int32_t *ids, float *logprobs);
} llmb_cuda_api;

typedef const llmb_cuda_api *(*llmb_cuda_get_api_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
