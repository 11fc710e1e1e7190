// backend.h — the boundary between the engine and the arithmetic of a forward step.
//
// The engine (csrc/engine.c) is written once: requests, the scheduler that mixes decode tokens with
// prefill chunks, the paged KV cache's block tables and reference counts (copy on write for forks),
// the host sampler, events with monotonic timestamps. A backend owns only what lives next to the
// arithmetic: the weights in its memory, the KV pool's bytes, scratch, and the forward step. The
// engine never dereferences KV memory: it hands out block ids and slots, and the backend stores and
// reads rows there.
//
// How engine.c calls it (the CPU backend, csrc/backend_cpu.c, is the engine's former forward pass,
// attention and KV rows behind this table, bit for bit; the CUDA backend is csrc/backend_cuda.c, the
// same forward pass written against the kernels of kernels/llmb_cuda_abi.h through llmb_cuda_table()):
//
//   llmb_engine_create:  ops = the backend named in llmb_engine_params (NULL or "cpu", "cuda")
//                        b = ops->create(model, &params)          weights uploaded once
//                        ops->kv_alloc(b, kv_type, block_size, n_blocks)
//   llmb_engine_step:    schedule_admissions(): for a forked sequence whose shared prefix ends inside
//                        a block, ops->kv_copy(b, dst, src, n_tokens) (copy on write, at admission);
//                        build_batch() fills an llmb_batch (host arrays);
//                        when every row samples plainly and params.device_sampling (cuda), the batch's
//                        sampling arrays are set (device_sampling() in engine.c)
//                        ops->forward(b, &batch, &out)           logits, or ids when the batch asks
//                        process_logits() samples on the host from out.logits, or process_ids() takes
//                        out.ids / out.logprobs
//                        ops->times(b, &t): the step's device time per phase and graph counters,
//                        summed into llmb_engine_stats (backend_*_ns)
//   stats:               ops->memory(b, &mem) once after kv_alloc: llmb_engine_weight_bytes, kv_bytes,
//                        scratch_bytes; again for each llmb_engine_memory (peak, device free/total)
//   llmb_engine_free:    ops->destroy(b)
//
// CUDA Graphs live inside the CUDA backend: a decode-only batch (n_decode == n_seq) of n tokens
// pads to the next bucket (1, 2, 4, ..., 64); the first step of a bucket runs and is then captured,
// later ones copy tokens, positions, slots, block tables and lengths into fixed device buffers and
// replay. The engine sees only forward(); `graphs` in llmb_backend_params switches it.
#ifndef LLMB_BACKEND_H
#define LLMB_BACKEND_H

#include "engine.h"
#include "llmb.h"
#include "model.h"

typedef struct llmb_backend llmb_backend; // a backend's state (weights, KV pool, scratch, streams)

typedef struct {
    int device;          // CUDA device index (CPU: ignored)
    int n_threads;       // CPU threads (CUDA: ignored)
    int float_act;       // CPU: float activations against dequantized weights
    int max_batch_tokens; // the largest llmb_batch.n_tok forward() will get (sizes scratch)
    int max_seqs;        // the largest llmb_batch.n_seq
    int ctx;             // the longest sequence (sizes attention scratch and block tables)
    int graphs;          // CUDA: capture and replay decode steps (0: launch every kernel)
    int max_rows;        // the largest llmb_batch.n_rows (sizes the logits)
    int bf16;            // CPU: float weights as BF16 against activations rounded to BF16 (LLMB_TYPE_BF16_DP)
    int profile;         // CPU: time each operation kind (llmb_backend_times.prof_*)
} llmb_backend_params;

// One forward step. Tokens of a sequence are consecutive, at positions pos0, pos0 + 1, ... (build_batch
// emits them so); all arrays are host memory owned by the engine and valid for the call.
typedef struct {
    int n_tok;
    const int32_t *tokens;       // (n_tok) token ids
    const int32_t *pos;          // (n_tok) positions
    const int32_t *slots;        // (n_tok) KV slot of each token: block * block_size + offset
    int n_seq;
    int n_decode;                // the first n_decode sequences are decode steps (one generated token
                                 // each); the others are prompt chunks, whatever their length
    const int32_t *q_start;      // (n_seq) first token of the sequence in this batch
    const int32_t *q_len;        // (n_seq) its tokens in this batch (1 for a decode step)
    const int32_t *pos0;         // (n_seq) position of its first token here (= cached tokens)
    const int32_t *block_tables; // (n_seq, max_blocks) KV block ids; entries past the block of the
    int max_blocks;              // sequence's last position in this batch are unspecified
    int n_rows;                  // tokens whose logits (or samples) are wanted
    const int32_t *rows;         // (n_rows) their index in the batch, in output order
    // device sampling (NULL: return logits): one entry per output row, u drawn by the engine from
    // the sequence's own random stream, so CPU and device runs of a seed see the same numbers
    const float *temperature, *top_p, *min_p, *u;
    const int32_t *top_k;
} llmb_batch;

// Set by forward() to host arrays the backend owns, valid until its next forward() or destroy() (the
// CPU backend hands back its own logits buffer: no copy of n_rows x vocab floats per step).
typedef struct {
    const float *logits;     // (n_rows, vocab) when the batch has no sampling arrays, else NULL
    const int32_t *ids;      // (n_rows) when it has, else NULL
    const float *logprobs;   // (n_rows) or NULL: each sampled token's log-probability
} llmb_forward_out;

typedef struct {
    uint64_t weights, kv, scratch; // bytes the backend holds
    uint64_t peak;                 // the most it held at once
    uint64_t device_free, device_total; // cudaMemGetInfo (CPU: 0)
} llmb_backend_memory;

typedef struct {
    double forward_ms, sample_ms; // device time of the last step's phases (CUDA events; CPU: host clock)
    uint64_t steps, graph_replays, graph_captures;
    double capture_ms;            // time spent capturing graphs
    int kernels_per_step;         // kernels one decode step launches (0: unknown)
    uint64_t solo_steps;          // CPU: steps run on one thread of several while the cores were contended
    int host_threads;             // host threads the last step ran on, which its sampling may use (0: the engine's)
    uint64_t prof_ns[LLMB_PROF_N];              // with profile: the last step's ns per LLMB_PROF_* kind (engine.h)
    uint64_t prof_type_ns[LLMB_PROF_TYPES];     // and its products' ns by weight type
} llmb_backend_times;

typedef struct {
    const char *name; // "cpu", "cuda"
    int samples;      // 1: forward() samples on the device when the batch carries sampling arrays
    llmb_status (*create)(const llmb_model *m, const llmb_backend_params *p, llmb_backend **out);
    void (*destroy)(llmb_backend *b);
    // the KV pool: n_blocks blocks of block_size tokens for every layer, K and V, of kv_type
    // (F32, F16, Q8_0); called once after create. LLMB_E_DEVICE_OOM / LLMB_E_NOMEM say how much.
    llmb_status (*kv_alloc)(llmb_backend *b, int kv_type, int block_size, int64_t n_blocks);
    // copy the first n_tokens slots of block src into block dst in every layer (a fork's partial block)
    llmb_status (*kv_copy)(llmb_backend *b, int32_t dst, int32_t src, int n_tokens);
    // embed, every layer (norm, QKV, RoPE, KV store into the batch's slots, attention over the block
    // tables, output projection, residuals, feed-forward), final norm and output rows, then
    // logits or sampled ids
    llmb_status (*forward)(llmb_backend *b, const llmb_batch *batch, llmb_forward_out *out);
    llmb_status (*memory)(llmb_backend *b, llmb_backend_memory *out);
    llmb_status (*times)(llmb_backend *b, llmb_backend_times *out);
} llmb_backend_ops;

// The backends built into this core: "cpu" always (backend_cpu.c), "cuda" when the CUDA library
// loads (backend_cuda.c; NULL and LLMB_E_BACKEND with the reason otherwise).
const llmb_backend_ops *llmb_backend_cpu(void);
const llmb_backend_ops *llmb_backend_cuda(void);
// Whether the CUDA backend can run model m (its architecture's operations, head size, weight types):
// LLMB_E_UNSUPPORTED naming what it lacks. Needs no GPU: the engine asks before loading the library.
llmb_status llmb_backend_cuda_check(const llmb_model *m);

#endif
