// engine.h — the inference engine: sequences, a paged KV cache with prefix sharing, a scheduler
// that mixes decode tokens with chunked prefill in one forward step, the sampler, and an event
// log with monotonic timestamps. Written once; the arithmetic runs on a backend (backend.h): "cpu"
// (backend_cpu.c) or "cuda" (backend_cuda.c), chosen in llmb_engine_params.
#ifndef LLMB_ENGINE_H
#define LLMB_ENGINE_H

#include "llmb.h"

typedef struct llmb_engine llmb_engine;

typedef struct {
    int kv_type;          // ggml type id of the KV cache: 1 F16 (default), 0 F32, 8 Q8_0
    int block_size;       // tokens per KV block (default 16)
    int64_t n_blocks;     // KV blocks in the pool (memory budget)
    int ctx;              // longest sequence (prompt + output) allowed
    int max_batch_tokens; // tokens per forward step (decode + prefill chunks)
    int max_seqs;         // sequences running at once
    int n_threads;
    int float_act;        // 1: float32 activations against dequantized weights (no 8-bit activations)
    const char *backend;  // "cpu" (NULL: cpu) or "cuda"; read only by llmb_engine_create
    int device;           // CUDA device index (cpu: ignored)
    int graphs;           // CUDA: capture and replay decode steps with CUDA Graphs (cpu: ignored)
    int device_sampling;  // CUDA: a step whose every row is plain sampling (no penalties, top-n logprobs,
                          // prompt scores or masked stop tokens) samples on the device and returns only
                          // token ids and their log-probabilities (cpu: ignored)
    int bf16;             // cpu: F32 / F16 / BF16 matrices rounded to BF16 at load and multiplied against
                          // activations rounded to BF16 (vdpbf16ps where the CPU has AVX-512 BF16; the same
                          // bits elsewhere, slowly); quantized matrices unchanged. Not with float_act.
    int profile;          // cpu: time each operation kind of every step (llmb_engine_stats.prof_*)
} llmb_engine_params;

// Operation kinds of a forward step that the CPU backend times with profile set: the clock of the
// thread that runs the step around each operation (each ends at a barrier of its threads), so the kinds
// add up to the step's forward time but for the loop between them. EMBED: token rows and RoPE tables;
// NORM: RMSNorms; QUANT_X: activations quantized for the products; MATMUL: the products themselves (by
// weight type in prof_type_ns); ROPE_KV: RoPE of q, k and the KV cache stores; ATTENTION; ELEMENTWISE:
// biases, residual adds, SwiGLU.
enum {
    LLMB_PROF_EMBED, LLMB_PROF_NORM, LLMB_PROF_QUANT_X, LLMB_PROF_MATMUL, LLMB_PROF_ROPE_KV, LLMB_PROF_ATTENTION,
    LLMB_PROF_ELEMENTWISE, LLMB_PROF_N
};
#define LLMB_PROF_TYPES 48   // matmul time by ggml weight type id (all ids the engine runs are below it)

typedef struct {
    float temperature;        // 0: greedy
    int top_k;                // 0: off
    float top_p;              // 1: off
    float min_p;              // 0: off
    float repetition_penalty; // 1: off (over prompt and output tokens)
    float presence_penalty, frequency_penalty; // 0: off (over output tokens)
    uint64_t seed;
    int max_tokens;           // tokens to generate (0: prefill only)
    int min_tokens;           // stop tokens are masked until this many are generated
    int n_logprobs;           // top-n logprobs to report per output token (0..20)
    int prompt_logprobs_from; // -1: none; else logprob and greedy flag of prompt tokens after this position
    int prompt_logits;        // 1: keep the full logits of every prompt position (llmb_engine_prompt_logits)
    // With prompt_logprobs_from < n_prompt - 1: other tokens scored in place of the last prompt token, from
    // the same row (llmb_engine_alt_logprobs), so requests that differ only in their last token run as one
    const int32_t *alt_tokens;
    int n_alt_tokens;
    int hold;                 // 1: keep the KV cache after finishing, for forks, until released
    const int32_t *stop_tokens;
    int n_stop_tokens;
} llmb_sampling;

enum { LLMB_EV_ARRIVAL = 0, LLMB_EV_ADMIT = 1, LLMB_EV_TOKEN = 2, LLMB_EV_FINISH = 3 };
enum { LLMB_FINISH_NONE = 0, LLMB_FINISH_LENGTH = 1, LLMB_FINISH_STOP = 2, LLMB_FINISH_ABORT = 3 };

typedef struct {
    int64_t seq;
    int32_t kind;      // LLMB_EV_*
    int32_t token;     // TOKEN: the token id; FINISH: the finish reason
    float logprob;     // TOKEN: log-probability under the model (before sampling transforms)
    uint64_t t_ns;     // llmb_now_ns() when it happened
} llmb_event;

// Phase time accumulators (nanoseconds) and counters. The *_ns are the host clock around each phase;
// backend_*_ns are the backend's own time of the same steps (CUDA events on the device; the CPU
// backend's forward on the host clock, no sampling time); device_sampled_rows: rows sampled there.
typedef struct {
    uint64_t prefill_ns, decode_ns, sample_ns, schedule_ns;
    uint64_t steps, prefill_tokens, decode_tokens;
    uint64_t backend_prefill_ns, backend_decode_ns, backend_sample_ns;
    uint64_t graph_replays, graph_captures, capture_ns; // CUDA Graphs of decode steps (backend totals)
    uint64_t kernels_per_step;                          // kernels of the last decode step (0: unknown)
    uint64_t device_sampled_rows;
    uint64_t solo_steps;                                // CPU: steps on one thread of several (cores contended)
    // with profile: [0] steps with prompt tokens (prefill), [1] decode steps; ns per LLMB_PROF_* kind, and the
    // products' time by weight type (a fused product of several matrices split in proportion to their sizes)
    uint64_t prof_ns[2][LLMB_PROF_N];
    uint64_t prof_type_ns[2][LLMB_PROF_TYPES];
} llmb_engine_stats;

LLMB_API llmb_status llmb_engine_create(const llmb_gguf *g, const llmb_engine_params *p, llmb_engine **out);
LLMB_API void llmb_engine_free(llmb_engine *e);

// Model facts: the architecture's name and shape.
typedef struct {
    char arch[32];      // general.architecture, e.g. "llama"
    int n_layer, dim, n_head, n_head_kv, head_dim, ff, vocab;
    int ctx_train;      // the context length the model was trained with
    int tied_output;    // 1: the output matrix is the token embedding
} llmb_model_facts;
LLMB_API void llmb_engine_model_info(const llmb_engine *e, llmb_model_facts *out);
// Bytes the backend holds (its memory() once it was created): weights, the KV pool, activation scratch.
LLMB_API uint64_t llmb_engine_weight_bytes(const llmb_engine *e);
LLMB_API uint64_t llmb_engine_kv_bytes(const llmb_engine *e);      // the KV pool
LLMB_API uint64_t llmb_engine_kv_token_bytes(const llmb_engine *e); // KV bytes per token (all layers)
LLMB_API uint64_t llmb_engine_scratch_bytes(const llmb_engine *e);
// The backend's memory() now, in bytes.
typedef struct {
    uint64_t weights, kv, scratch; // held by the backend
    uint64_t peak;                 // the most it held at once
    uint64_t device_free, device_total; // the GPU's memory now (cpu: 0, 0)
} llmb_memory_info;
LLMB_API llmb_status llmb_engine_memory(llmb_engine *e, llmb_memory_info *out);
LLMB_API const char *llmb_engine_backend(const llmb_engine *e);   // "cpu" or "cuda"
LLMB_API int64_t llmb_engine_free_blocks(const llmb_engine *e);

// Queue a request. fork_from >= 0 shares that finished, held sequence's KV blocks for the common
// prefix of the prompts (copy on write). Returns the new sequence id.
LLMB_API llmb_status llmb_engine_add(llmb_engine *e, const int32_t *prompt, int n_prompt, const llmb_sampling *s,
                                     int64_t fork_from, int64_t *seq_out);
// Run one forward step over the scheduled batch; *busy = 0 when nothing is waiting or running.
LLMB_API llmb_status llmb_engine_step(llmb_engine *e, int *busy);
// Move up to `max` events out of the log.
LLMB_API int llmb_engine_poll(llmb_engine *e, llmb_event *out, int max, int32_t *topn_ids, float *topn_lp, int topn);
LLMB_API llmb_status llmb_engine_abort(llmb_engine *e, int64_t seq);    // finish now (stop string, cancel)
LLMB_API llmb_status llmb_engine_release(llmb_engine *e, int64_t seq);  // forget a finished sequence
// After a sequence with prompt_logprobs_from >= 0 finished prefill: n = n_prompt - 1 - from entries.
LLMB_API llmb_status llmb_engine_prompt_logprobs(llmb_engine *e, int64_t seq, float *lp, uint8_t *greedy, int n);
// The same positions' most likely token and its logprob (the top-1 alternative a server's echo reports).
LLMB_API llmb_status llmb_engine_prompt_top(llmb_engine *e, int64_t seq, int32_t *ids, float *lp, int n);
// The logprob and greedy flag of each of the n = n_alt_tokens alternatives to the last prompt token.
LLMB_API llmb_status llmb_engine_alt_logprobs(llmb_engine *e, int64_t seq, float *lp, uint8_t *greedy, int n);
// After a sequence with prompt_logits finished prefill: n_prompt x vocab floats.
LLMB_API llmb_status llmb_engine_prompt_logits(llmb_engine *e, int64_t seq, float *out, int64_t n);
LLMB_API void llmb_engine_get_stats(const llmb_engine *e, llmb_engine_stats *st);
// Mean ns of one clock read and of one logged event (the engine's timing overhead), over n of each.
LLMB_API llmb_status llmb_engine_timing_cost(llmb_engine *e, int n, double *clock_ns, double *event_ns);
LLMB_API void llmb_engine_reset_stats(llmb_engine *e);

#endif
