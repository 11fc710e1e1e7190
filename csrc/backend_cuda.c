// backend_cuda.c — the "cuda" backend of backend.h: the engine's forward step written against the
// kernels of kernels/llmb_cuda_abi.h (libllmbench_cuda.so, loaded by cuda_loader.c), so the engine's
// scheduler, block tables, sampler and events are the CPU engine's and only the arithmetic moves.
//
//   create    every weight uploaded once, each in its own ggml type, into one device allocation
//             (the output matrix is the embedding's bytes when tied; Q, K and V rows back to back as
//             one matrix when they share a type, so one product computes all three)
//   kv_alloc  the paged KV pool, [layer][K|V][block][slot] rows of F32, F16 or Q8_0 (engine.c's layout)
//   forward   embed (dequantize with ids) -> per layer: RMSNorm (fused with the residual add) -> QKV
//             (+ bias) -> RoPE -> KV store into the batch's slots -> attention -> output projection
//             -> RMSNorm with residual -> gate, up -> SwiGLU -> down -> ...; final norm, the rows that
//             want logits, the output projection; then logits to the host or sampling on the device
//             (only ids cross the bus)
//
// Batch invariance (a sequence's logits do not depend on what else is in the batch, nor on how its
// prompt was chunked or forked), as the CPU engine guarantees: the path of a token depends only on
// its role. Decode steps (the batch's first n_decode sequences: a generated token each) run through
// matvec (16 tokens per call, each token's dot products in a fixed order) and attn_decode with a
// fixed context split; prompt tokens, however few, through gemm (FP16 activations, FP32
// accumulation) and attn_prefill, whose per-query result does not depend on how queries are grouped
// into tiles. Logits rows always come from matvec. cuBLAS picks its kernel by the problem's shape,
// so gemm calls it on fixed-width token chunks (GEMM_CHUNK, the last padded) with the same leading
// dimensions and alignment: a prompt token's bits do not depend on how many tokens share the step.
// The emulated device's GEMM is a fixed loop, so only a GPU run checks this (test_cuda_engine's
// batch-invariance and fork tests, test_cuda_kernels' token-count test).
//
// CUDA Graphs (params.graphs): a decode-only step of n sequences pads to the next bucket B of 1, 2,
// 4, ..., 64 (padding rows: token 0 at position 0, stored into a trash block past the pool, one key
// of context) and replays the bucket's graph; the first step of a bucket runs its kernels, then
// captures them once. Every per-step input lives at a fixed offset of one device buffer, uploaded
// before the launch; decode attention is sized for the whole context (max_seq_len = ctx, splits past
// a sequence's end weigh nothing), so a graph never needs re-capture. With or without graphs a token
// gets the same bits: padding adds rows, never changes the real ones.
//
// Ordering: every copy and kernel runs on the context's stream (the library's `copy`: host copies
// return when done), so nothing needs a device-wide barrier.
//
// Tested by tests/test_cuda_engine.py (LLM(backend="cuda") against the CPU engine), which
// tests/test_cuda_emulated.py also runs on the emulated device.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cuda_loader.h"
#include "internal.h"
#include "quants.h"

#define ALIGN 256          // device offset alignment of every tensor and buffer
#define DECODE_SPLIT 512   // keys per split of attn_decode: fixed, so a sequence's split does not depend on the batch
#define BIAS_ROWS 64       // rows of the replicated QKV bias (one add call per this many tokens)
#define GRAPH_BUCKETS 7    // decode graphs for 1, 2, 4, ..., 64 sequences
enum { PH_FORWARD = 0, PH_SAMPLE = 1 };

typedef struct {
    const void *data; // device
    int type;
    int64_t rows, cols;
} dev_mat;

typedef struct {
    float *attn_norm, *ffn_norm; // (dim)
    dev_mat wqkv;                // (q_dim + 2 kv_dim, dim) when Q, K and V share a type (wq.data set, wk/wv unused)
    dev_mat wq, wk, wv;          // else three matrices
    int fused_qkv;
    float *bias;                 // (BIAS_ROWS, q_dim + 2 kv_dim) the QKV bias repeated per row, or NULL
    dev_mat wo, w_gate, w_up, w_down;
} dev_layer;

struct llmb_backend {
    const llmb_cuda_api *api;
    llmb_cuda_ctx *ctx;
    int dev;
    const llmb_model *m;
    llmb_backend_params p;
    int64_t q_dim, kv_dim, qkv_dim;
    // weights (one allocation)
    uint8_t *wbuf;
    uint64_t weight_bytes;
    dev_mat tok_embd, output;
    float *output_norm, *rope_freqs; // rope_freqs NULL when the model has none
    dev_layer *layers;
    // KV pool (kv_alloc): per layer K and V parts of n_blocks + 1 blocks; the last is the trash block
    // that a graph's padding rows write
    uint8_t *kv;
    int kv_type, block_size;
    int64_t n_blocks;
    size_t kv_row_bytes;
    uint64_t kv_bytes, trash_bytes; // the engine's pool; the trash blocks (counted as scratch)
    // activations (create), sized for max_batch_tokens tokens and max_rows logits rows
    uint8_t *act;
    uint64_t act_bytes;
    int max_rows;
    float *x, *xn, *tmp;     // (n, dim) residual stream, normed, a projection's output
    float *qkv, *att;        // (n, qkv_dim) rows [q | k | v], (n, q_dim)
    float *gate, *up;        // (n, ff)
    float *xl, *logits;      // (max_rows, dim), (max_rows, vocab)
    // what forward() hands back (host, max_rows each): logits rows, or sampled ids and log-probabilities
    float *h_logits, *h_lp;
    int32_t *h_ids;
    // per-step inputs (kv_alloc): host staging and its device copy at fixed offsets
    int32_t *in_host, *in_dev;
    size_t in_ints;
    int in_max_blocks;
    size_t off_tok, off_pos, off_slot, off_rows, off_lens, off_qs, off_ql, off_p0, off_bt;
    llmb_cuda_sampling *samp; // (max_rows) host
    // CUDA Graphs of decode steps, one per bucket of GRAPH_MAX_LOG2 + 1 (1, 2, 4, ..., 64 sequences)
    llmb_cuda_graph *graph[GRAPH_BUCKETS];
    int graph_kernels[GRAPH_BUCKETS];
    // statistics
    uint64_t peak;
    llmb_backend_times t;
    int kernels; // counted in the current step
};

// ---- errors ----

// The library's message (the CUDA or cuBLAS call, file and line) behind what the backend was doing.
static llmb_status lib_fail(llmb_backend *b, llmb_status s, const char *what) {
    return llmb_fail(s, "cuda backend: %s: %s", what, b->api->last_error());
}

#define CK(what, call)                                   \
    do {                                                 \
        llmb_status s_ = b->api->call;                   \
        if (s_) return lib_fail(b, s_, what);            \
    } while (0)

#define TRY(expr)                \
    do {                         \
        llmb_status s_ = (expr); \
        if (s_) return s_;       \
    } while (0)

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

static uint64_t held_bytes(llmb_backend *b) {
    size_t ws = 0;
    if (b->ctx && b->api->ctx_workspace_bytes(b->ctx, &ws)) ws = 0;
    return b->weight_bytes + b->kv_bytes + b->trash_bytes + b->act_bytes + (uint64_t)b->in_ints * sizeof(int32_t) + ws;
}

static void note_peak(llmb_backend *b) {
    uint64_t h = held_bytes(b);
    if (h > b->peak) b->peak = h;
}

// ---- create: weights uploaded once ----

static const int SUPPORTED[] = {LLMB_TYPE_F32,  LLMB_TYPE_F16,  LLMB_TYPE_BF16, LLMB_TYPE_Q4_0,   LLMB_TYPE_Q4_1,
                                LLMB_TYPE_Q5_0, LLMB_TYPE_Q5_1, LLMB_TYPE_Q8_0, LLMB_TYPE_IQ4_NL, LLMB_TYPE_Q2_K,
                                LLMB_TYPE_Q3_K, LLMB_TYPE_Q4_K, LLMB_TYPE_Q5_K, LLMB_TYPE_Q6_K,   LLMB_TYPE_IQ4_XS};

static llmb_status check_weight(const llmb_weight *w, const char *name, int layer) {
    int ok = 0;
    for (size_t i = 0; i < sizeof SUPPORTED / sizeof *SUPPORTED; i++) ok |= w->type == SUPPORTED[i];
    const llmb_type_traits *tt = llmb_type_traits_get(w->type);
    char where[64];
    if (layer >= 0) snprintf(where, sizeof where, "blk.%d.%s", layer, name);
    else snprintf(where, sizeof where, "%s", name);
    if (!ok)
        return llmb_fail(LLMB_E_UNSUPPORTED, "cuda backend: %s is %s, which has no CUDA kernel (F32, F16, BF16, Q4_0, "
                                             "Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS); requantize it (llmbench quantize) or use "
                                             "backend='cpu'", where, tt && tt->name ? tt->name : "an unknown type");
    if (w->ne0 % tt->blck_size)
        return llmb_fail(LLMB_E_UNSUPPORTED, "cuda backend: %s has rows of %lld, not a multiple of %s's block of %lld",
                         where, (long long)w->ne0, tt->name, (long long)tt->blck_size);
    return LLMB_OK;
}

static size_t wbytes(const llmb_weight *w) { return (size_t)w->ne1 * w->row_bytes; }

// A layout pass (base == NULL: only count) or an upload pass over every tensor, in one order.
typedef struct {
    llmb_backend *b;
    uint8_t *base;  // device allocation, NULL while counting
    size_t off;
    float *bias_host; // (BIAS_ROWS, qkv_dim) scratch for the repeated bias
} placer;

static llmb_status place(placer *pl, const void *host, size_t nbytes, void **dev) {
    size_t at = pl->off;
    pl->off = align_up(pl->off + nbytes);
    if (!pl->base) return LLMB_OK;
    *dev = pl->base + at;
    llmb_backend *b = pl->b;
    if (nbytes) CK("uploading the weights", copy(b->ctx, pl->base + at, host, nbytes, 0));
    return LLMB_OK;
}

static llmb_status place_mat(placer *pl, const llmb_weight *w, dev_mat *out) {
    void *d = NULL;
    TRY(place(pl, w->data, wbytes(w), &d));
    *out = (dev_mat){d, w->type, w->ne1, w->ne0};
    return LLMB_OK;
}

static llmb_status place_vec(placer *pl, const float *v, int64_t n, float **out) {
    void *d = NULL;
    TRY(place(pl, v, (size_t)n * sizeof(float), &d));
    *out = d;
    return LLMB_OK;
}

static llmb_status place_all(placer *pl) {
    llmb_backend *b = pl->b;
    const llmb_model *m = b->m;
    const llmb_model_config *c = &m->cfg;
    TRY(place_mat(pl, &m->tok_embd, &b->tok_embd));
    if (c->tied_output) b->output = b->tok_embd;
    else TRY(place_mat(pl, &m->output, &b->output));
    TRY(place_vec(pl, m->output_norm, c->dim, &b->output_norm));
    b->rope_freqs = NULL;
    if (m->rope_freqs) TRY(place_vec(pl, m->rope_freqs, c->head_dim / 2, &b->rope_freqs));
    for (int l = 0; l < c->n_layer; l++) {
        const llmb_layer *L = &m->layers[l];
        dev_layer *D = &b->layers[l];
        TRY(place_vec(pl, L->attn_norm, c->dim, &D->attn_norm));
        TRY(place_vec(pl, L->ffn_norm, c->dim, &D->ffn_norm));
        D->fused_qkv = L->wq.type == L->wk.type && L->wq.type == L->wv.type;
        if (D->fused_qkv) { // rows of Q, K, V back to back: one (qkv_dim, dim) matrix
            size_t nq = wbytes(&L->wq), nk = wbytes(&L->wk), nv = wbytes(&L->wv);
            size_t at = pl->off;
            pl->off = align_up(at + nq + nk + nv);
            if (pl->base) {
                uint8_t *d = pl->base + at;
                CK("uploading the weights", copy(b->ctx, d, L->wq.data, nq, 0));
                CK("uploading the weights", copy(b->ctx, d + nq, L->wk.data, nk, 0));
                CK("uploading the weights", copy(b->ctx, d + nq + nk, L->wv.data, nv, 0));
                D->wqkv = (dev_mat){d, L->wq.type, b->qkv_dim, c->dim};
            }
        } else {
            TRY(place_mat(pl, &L->wq, &D->wq));
            TRY(place_mat(pl, &L->wk, &D->wk));
            TRY(place_mat(pl, &L->wv, &D->wv));
        }
        D->bias = NULL;
        if (L->bq || L->bk || L->bv) {
            if (pl->base) {
                float *row = pl->bias_host;
                for (int64_t i = 0; i < b->q_dim; i++) row[i] = L->bq ? L->bq[i] : 0.0f;
                for (int64_t i = 0; i < b->kv_dim; i++) row[b->q_dim + i] = L->bk ? L->bk[i] : 0.0f;
                for (int64_t i = 0; i < b->kv_dim; i++) row[b->q_dim + b->kv_dim + i] = L->bv ? L->bv[i] : 0.0f;
                for (int r = 1; r < BIAS_ROWS; r++) memcpy(row + r * b->qkv_dim, row, (size_t)b->qkv_dim * sizeof *row);
            }
            TRY(place_vec(pl, pl->bias_host, BIAS_ROWS * b->qkv_dim, &D->bias));
        }
        TRY(place_mat(pl, &L->wo, &D->wo));
        TRY(place_mat(pl, &L->w_gate, &D->w_gate));
        TRY(place_mat(pl, &L->w_up, &D->w_up));
        TRY(place_mat(pl, &L->w_down, &D->w_down));
    }
    return LLMB_OK;
}

static void cuda_destroy(llmb_backend *b) {
    if (!b) return;
    if (b->ctx) {
        b->api->sync(b->ctx);
        for (int i = 0; i < GRAPH_BUCKETS; i++) b->api->graph_destroy(b->graph[i]);
        b->api->ctx_destroy(b->ctx);
    }
    void *bufs[] = {b->wbuf, b->kv, b->act, b->in_dev};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        if (bufs[i]) b->api->free_(b->dev, bufs[i]);
    free(b->in_host);
    free(b->samp);
    free(b->h_logits);
    free(b->h_lp);
    free(b->h_ids);
    free(b->layers);
    free(b);
}

llmb_status llmb_backend_cuda_check(const llmb_model *m) {
    const llmb_model_config *c = &m->cfg;
    // Gemma 3 (model.h) needs operations the kernels (kernels/llmb_cuda_abi.h) lack
    if (c->ffn_gelu || c->swa_window || c->embd_scale != 1.0f || c->att_scale != 1.0f / sqrtf((float)c->head_dim))
        return llmb_fail(LLMB_E_UNSUPPORTED, "cuda backend: architecture '%s' is not supported: its kernels lack the "
                         "per-head RMSNorm of queries and keys, the norms after attention and after the feed-forward, "
                         "GeGLU, scaled embeddings and sliding-window attention that it needs; use the cpu backend",
                         c->arch);
    if (c->head_dim > LLMB_CUDA_HD_MAX || c->head_dim % 2 || c->n_head % c->n_head_kv)
        return llmb_fail(LLMB_E_UNSUPPORTED, "cuda backend: head size %d (at most %d, even) with %d heads over %d "
                                             "KV heads",
                         c->head_dim, LLMB_CUDA_HD_MAX, c->n_head, c->n_head_kv);
    TRY(check_weight(&m->tok_embd, "token_embd.weight", -1));
    if (!c->tied_output) TRY(check_weight(&m->output, "output.weight", -1));
    for (int l = 0; l < c->n_layer; l++) {
        const llmb_layer *L = &m->layers[l];
        TRY(check_weight(&L->wq, "attn_q.weight", l));
        TRY(check_weight(&L->wk, "attn_k.weight", l));
        TRY(check_weight(&L->wv, "attn_v.weight", l));
        TRY(check_weight(&L->wo, "attn_output.weight", l));
        TRY(check_weight(&L->w_gate, "ffn_gate.weight", l));
        TRY(check_weight(&L->w_up, "ffn_up.weight", l));
        TRY(check_weight(&L->w_down, "ffn_down.weight", l));
    }
    return LLMB_OK;
}

static llmb_status create_in(llmb_backend *b) {
    const llmb_model_config *c = &b->m->cfg;
    const llmb_backend_params *p = &b->p;
    CK("creating the CUDA context", ctx_create(b->dev, &b->ctx));
    // weights: count, allocate once, upload
    placer pl = {b, NULL, 0, NULL};
    TRY(place_all(&pl));
    b->weight_bytes = pl.off;
    void *w = NULL;
    llmb_status s = b->api->malloc_(b->dev, pl.off ? pl.off : 1, &w);
    if (s) return llmb_fail(s, "cuda backend: the weights (%zu bytes) do not fit: %s", pl.off, b->api->last_error());
    b->wbuf = w;
    pl = (placer){b, b->wbuf, 0, NULL};
    int has_bias = 0;
    for (int l = 0; l < c->n_layer; l++) has_bias |= b->m->layers[l].bq || b->m->layers[l].bk || b->m->layers[l].bv;
    if (has_bias) { // a model with QKV biases: one host block of rows to repeat
        pl.bias_host = malloc((size_t)BIAS_ROWS * b->qkv_dim * sizeof(float));
        if (!pl.bias_host) return llmb_fail(LLMB_E_NOMEM, "cuda backend: out of host memory");
    }
    s = place_all(&pl);
    free(pl.bias_host);
    TRY(s);
    // activations for max_batch_tokens tokens, logits for max_rows rows
    const int64_t n = p->max_batch_tokens, dim = c->dim, ff = c->ff, rows = b->max_rows;
    const int64_t counts[] = {n * dim, n * dim, n * dim, n * b->qkv_dim, n * b->q_dim, n * ff, n * ff,
                              rows * dim, rows * c->vocab};
    float **ptrs[] = {&b->x, &b->xn, &b->tmp, &b->qkv, &b->att, &b->gate, &b->up, &b->xl, &b->logits};
    size_t total = 0;
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) total += align_up((size_t)counts[i] * sizeof(float));
    void *a = NULL;
    s = b->api->malloc_(b->dev, total, &a);
    if (s) return llmb_fail(s, "cuda backend: activations for %d tokens (%zu bytes) do not fit: %s",
                            p->max_batch_tokens, total, b->api->last_error());
    b->act = a;
    b->act_bytes = total;
    size_t off = 0;
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        *ptrs[i] = (float *)(b->act + off);
        off += align_up((size_t)counts[i] * sizeof(float));
    }
    b->samp = calloc((size_t)rows, sizeof *b->samp);
    b->h_logits = calloc((size_t)rows * (size_t)c->vocab, sizeof *b->h_logits);
    b->h_lp = calloc((size_t)rows, sizeof *b->h_lp);
    b->h_ids = calloc((size_t)rows, sizeof *b->h_ids);
    if (!b->samp || !b->h_logits || !b->h_lp || !b->h_ids)
        return llmb_fail(LLMB_E_NOMEM, "cuda backend: out of host memory for %lld logits rows", (long long)rows);
    note_peak(b);
    return LLMB_OK;
}

static llmb_status cuda_create(const llmb_model *m, const llmb_backend_params *p, llmb_backend **out) {
    *out = NULL;
    if (p->bf16)
        return llmb_fail(LLMB_E_UNSUPPORTED, "cuda backend: BF16 pair products (activations='bf16') run on the CPU "
                                             "backend only");
    const llmb_model_config *c = &m->cfg;
    const llmb_cuda_api *api = llmb_cuda_table();
    if (!api) return LLMB_E_BACKEND; // the reason is recorded
    if (p->max_batch_tokens < 1 || p->max_seqs < 1 || p->ctx < 1 || p->max_rows < 1 || p->device < 0)
        return llmb_fail(LLMB_E_ARG, "cuda backend: max_batch_tokens %d, max_seqs %d, ctx %d, max_rows %d must be "
                                     "positive and device %d >= 0", p->max_batch_tokens, p->max_seqs, p->ctx,
                         p->max_rows, p->device);
    TRY(llmb_backend_cuda_check(m));
    llmb_backend *b = calloc(1, sizeof *b);
    if (!b) return llmb_fail(LLMB_E_NOMEM, "cuda backend: out of host memory");
    b->api = api;
    b->dev = p->device;
    b->m = m;
    b->p = *p;
    b->max_rows = p->max_rows < p->max_batch_tokens ? p->max_rows : p->max_batch_tokens;
    b->q_dim = (int64_t)c->n_head * c->head_dim;
    b->kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    b->qkv_dim = b->q_dim + 2 * b->kv_dim;
    b->layers = calloc((size_t)(c->n_layer ? c->n_layer : 1), sizeof *b->layers);
    if (!b->layers) {
        free(b);
        return llmb_fail(LLMB_E_NOMEM, "cuda backend: out of host memory");
    }
    llmb_status s = create_in(b);
    if (s) {
        cuda_destroy(b); // frees what was allocated; the device and the process stay usable
        return s;
    }
    *out = b;
    return LLMB_OK;
}

// ---- KV pool ----

static llmb_status cuda_kv_alloc(llmb_backend *b, int kv_type, int block_size, int64_t n_blocks) {
    const llmb_model_config *c = &b->m->cfg;
    if (b->kv) return llmb_fail(LLMB_E_ARG, "cuda backend: the KV pool is already allocated");
    if (kv_type != LLMB_TYPE_F32 && kv_type != LLMB_TYPE_F16 && kv_type != LLMB_TYPE_Q8_0)
        return llmb_fail(LLMB_E_ARG, "cuda backend: KV cache type %d is not one of F32, F16, Q8_0", kv_type);
    if (kv_type == LLMB_TYPE_Q8_0 && b->kv_dim % 32)
        return llmb_fail(LLMB_E_UNSUPPORTED, "cuda backend: a Q8_0 KV cache needs KV rows of a multiple of 32 values; "
                                             "this model's are %lld (use kv_dtype f16 or f32)", (long long)b->kv_dim);
    if (block_size < 1 || n_blocks < 1 || n_blocks + 1 > INT32_MAX / block_size) // slots are int32, + the trash block
        return llmb_fail(LLMB_E_ARG, "cuda backend: %lld KV blocks of %d tokens", (long long)n_blocks, block_size);
    const llmb_type_traits *tt = llmb_type_traits_get(kv_type);
    const size_t rb = (size_t)(b->kv_dim / tt->blck_size * tt->type_size);
    const uint64_t per_block = (uint64_t)c->n_layer * 2 * (uint64_t)block_size * rb;
    const uint64_t bytes = per_block * (uint64_t)n_blocks, all = bytes + per_block; // + the trash block
    // the per-step inputs: tokens, positions, slots, rows (max_batch_tokens each, at least a graph
    // bucket's 64), decode lengths, prefill starts, lengths and first positions (max_seqs each, at
    // least 64), block tables (that many rows of the blocks of ctx tokens)
    const int max_blocks = (b->p.ctx + block_size - 1) / block_size;
    const int graph_max = 1 << (GRAPH_BUCKETS - 1);
    const size_t nt = (size_t)(b->p.max_batch_tokens > graph_max ? b->p.max_batch_tokens : graph_max);
    const size_t ns = (size_t)(b->p.max_seqs > graph_max ? b->p.max_seqs : graph_max);
    b->off_tok = 0, b->off_pos = nt, b->off_slot = 2 * nt, b->off_rows = 3 * nt;
    b->off_lens = 4 * nt, b->off_qs = 4 * nt + ns, b->off_ql = 4 * nt + 2 * ns, b->off_p0 = 4 * nt + 3 * ns;
    b->off_bt = 4 * nt + 4 * ns;
    const size_t ints = b->off_bt + ns * (size_t)max_blocks;
    void *in = NULL, *kv = NULL;
    llmb_status s = b->api->malloc_(b->dev, ints * sizeof(int32_t), &in);
    if (s) return llmb_fail(s, "cuda backend: the step inputs (%zu bytes) do not fit: %s", ints * sizeof(int32_t),
                            b->api->last_error());
    s = b->api->malloc_(b->dev, all, &kv);
    if (s) {
        b->api->free_(b->dev, in);
        return llmb_fail(s, "cuda backend: the KV cache (%lld blocks of %d tokens, %s, %llu bytes) does not fit; lower "
                            "kv_budget: %s", (long long)n_blocks, block_size, tt->name, (unsigned long long)bytes,
                         b->api->last_error());
    }
    b->in_host = calloc(ints, sizeof(int32_t));
    if (!b->in_host) {
        b->api->free_(b->dev, in);
        b->api->free_(b->dev, kv);
        return llmb_fail(LLMB_E_NOMEM, "cuda backend: out of host memory");
    }
    b->in_dev = in;
    b->in_ints = ints;
    b->in_max_blocks = max_blocks;
    b->kv = kv;
    b->kv_bytes = bytes;
    b->trash_bytes = per_block;
    b->kv_type = kv_type;
    b->block_size = block_size;
    b->n_blocks = n_blocks;
    b->kv_row_bytes = rb;
    // zeros, so a tile of keys read past the written ones holds finite values
    CK("clearing the KV cache", memset_(b->dev, b->kv, 0, all));
    note_peak(b);
    return LLMB_OK;
}

static uint8_t *kv_part(llmb_backend *b, int layer, int which) {
    const size_t per_part = (size_t)(b->n_blocks + 1) * (size_t)b->block_size * b->kv_row_bytes;
    return b->kv + ((size_t)layer * 2 + (size_t)which) * per_part;
}

static llmb_status cuda_kv_copy(llmb_backend *b, int32_t dst, int32_t src, int n_tokens) {
    if (!b->kv) return llmb_fail(LLMB_E_ARG, "cuda backend: kv_copy before kv_alloc");
    if (dst < 0 || src < 0 || dst >= b->n_blocks || src >= b->n_blocks || n_tokens < 0 || n_tokens > b->block_size)
        return llmb_fail(LLMB_E_ARG, "cuda backend: kv_copy of %d tokens from block %d to %d (%lld blocks of %d)",
                         n_tokens, src, dst, (long long)b->n_blocks, b->block_size);
    if (n_tokens == 0 || dst == src) return LLMB_OK;
    const size_t per_block = (size_t)b->block_size * b->kv_row_bytes, nbytes = (size_t)n_tokens * b->kv_row_bytes;
    for (int l = 0; l < b->m->cfg.n_layer; l++)
        for (int w = 0; w < 2; w++) {
            uint8_t *part = kv_part(b, l, w);
            CK("kv_copy", copy(b->ctx, part + (size_t)dst * per_block, part + (size_t)src * per_block, nbytes, 2));
        }
    return LLMB_OK;
}

// ---- forward ----

// y (ntok, rows) = x (ntok, cols) W^T: the first n_dec tokens (decode) by matvec, 16 at a time, the
// rest (prefill) by gemm, so a token's path depends only on its own sequence.
static llmb_status mm(llmb_backend *b, const dev_mat *w, const float *x, int64_t ldx, int ntok, int n_dec, float *y,
                      int64_t ldy) {
    for (int t0 = 0; t0 < n_dec; t0 += LLMB_CUDA_MATVEC_MAX) {
        const int nt = n_dec - t0 < LLMB_CUDA_MATVEC_MAX ? n_dec - t0 : LLMB_CUDA_MATVEC_MAX;
        CK("matvec", matvec(b->ctx, w->type, w->data, w->rows, w->cols, x + t0 * ldx, ldx, nt, y + t0 * ldy, ldy));
        b->kernels++;
    }
    if (ntok > n_dec) {
        CK("gemm", gemm(b->ctx, w->type, w->data, w->rows, w->cols, x + n_dec * ldx, ldx, ntok - n_dec,
                        y + n_dec * ldy, ldy));
        b->kernels += 3; // activations rounded, weights dequantized (a tile), cuBLAS (at least)
    }
    return LLMB_OK;
}

// Q, K, V of every token into b->qkv rows [q | k | v] (+ bias).
static llmb_status qkv_proj(llmb_backend *b, const dev_layer *D, int n, int n_dec) {
    const int64_t ld = b->qkv_dim;
    if (D->fused_qkv) TRY(mm(b, &D->wqkv, b->xn, b->m->cfg.dim, n, n_dec, b->qkv, ld));
    else {
        TRY(mm(b, &D->wq, b->xn, b->m->cfg.dim, n, n_dec, b->qkv, ld));
        TRY(mm(b, &D->wk, b->xn, b->m->cfg.dim, n, n_dec, b->qkv + b->q_dim, ld));
        TRY(mm(b, &D->wv, b->xn, b->m->cfg.dim, n, n_dec, b->qkv + b->q_dim + b->kv_dim, ld));
    }
    if (D->bias)
        for (int t0 = 0; t0 < n; t0 += BIAS_ROWS) {
            const int nr = n - t0 < BIAS_ROWS ? n - t0 : BIAS_ROWS;
            CK("bias add", add(b->ctx, b->qkv + t0 * ld, D->bias, (int64_t)nr * ld));
            b->kernels++;
        }
    return LLMB_OK;
}

typedef struct {
    int n, n_dec;           // tokens; the leading decode tokens (one per decode sequence)
    int n_seq, n_dec_seq;
    int max_len, max_q_len; // host values: the longest decode context, the longest prefill chunk
    int max_blocks;
    const int32_t *d_tok, *d_pos, *d_slot, *d_rows, *d_lens, *d_qs, *d_ql, *d_p0, *d_bt; // device
} step_t;

static llmb_status attention(llmb_backend *b, int layer, const step_t *st) {
    const llmb_model_config *c = &b->m->cfg;
    llmb_cuda_attn a = {0};
    a.ldq = b->qkv_dim;
    a.ldo = b->q_dim;
    a.k_cache = kv_part(b, layer, 0);
    a.v_cache = kv_part(b, layer, 1);
    a.kv_type = b->kv_type;
    a.block_size = b->block_size;
    a.n_head = c->n_head;
    a.n_head_kv = c->n_head_kv;
    a.head_dim = c->head_dim;
    a.scale = 1.0f / sqrtf((float)c->head_dim);
    a.max_blocks = st->max_blocks;
    if (st->n_dec_seq) {
        llmb_cuda_attn d = a;
        d.q = b->qkv;
        d.out = b->att;
        d.block_tables = st->d_bt;
        d.n_seq = st->n_dec_seq;
        d.seq_lens = st->d_lens;
        d.split_keys = DECODE_SPLIT;
        d.max_seq_len = st->max_len;
        CK("attn_decode", attn_decode(b->ctx, &d));
        b->kernels += st->max_len > DECODE_SPLIT ? 2 : 1;
    }
    if (st->n_seq > st->n_dec_seq) {
        llmb_cuda_attn f = a;
        f.q = b->qkv + (int64_t)st->n_dec * b->qkv_dim;
        f.out = b->att + (int64_t)st->n_dec * b->q_dim;
        f.block_tables = st->d_bt + (int64_t)st->n_dec_seq * st->max_blocks;
        f.n_seq = st->n_seq - st->n_dec_seq;
        f.q_start = st->d_qs;
        f.q_len = st->d_ql;
        f.pos0 = st->d_p0;
        f.max_q_len = st->max_q_len;
        CK("attn_prefill", attn_prefill(b->ctx, &f));
        b->kernels++;
    }
    return LLMB_OK;
}

// The graph bucket of a decode-only step whose rows are its tokens in order (-1: launch the kernels):
// the smallest 2^k >= n_tok that the activations hold.
static int graph_bucket(const llmb_backend *b, const llmb_batch *bt) {
    if (!b->p.graphs || bt->n_decode != bt->n_seq || bt->n_rows != bt->n_tok) return -1;
    for (int r = 0; r < bt->n_rows; r++)
        if (bt->rows[r] != r) return -1;
    for (int k = 0; k < GRAPH_BUCKETS; k++) {
        const int B = 1 << k;
        if (B >= bt->n_tok) return B <= b->p.max_batch_tokens && B <= b->max_rows ? k : -1;
    }
    return -1;
}

// Check the batch against the pool and the capacities (the kernels trust slots and block ids), pack
// the step's inputs at their fixed offsets (block tables in rows of in_max_blocks), pad a graph
// bucket's extra rows, and upload them in one copy.
static llmb_status prepare(llmb_backend *b, const llmb_batch *bt, int bucket, step_t *st) {
    const llmb_model_config *c = &b->m->cfg;
    const int n = bt->n_tok, ns = bt->n_seq, M = b->in_max_blocks, bs = b->block_size;
    if (n < 1 || n > b->p.max_batch_tokens || ns < 1 || ns > b->p.max_seqs || bt->n_rows < 0 || bt->n_rows > n ||
        bt->n_rows > b->max_rows || bt->max_blocks < 1)
        return llmb_fail(LLMB_E_ARG, "cuda backend: a batch of %d tokens (1..%d), %d sequences (1..%d), %d output rows "
                                     "(0..%d), %d blocks per table", n, b->p.max_batch_tokens, ns, b->p.max_seqs,
                         bt->n_rows, b->max_rows, bt->max_blocks);
    const int64_t n_slots = b->n_blocks * bs;
    int32_t *h = b->in_host;
    int next = 0, n_dec_seq = bt->n_decode, max_len = 0, max_q = 0;
    if (n_dec_seq < 0 || n_dec_seq > ns)
        return llmb_fail(LLMB_E_ARG, "cuda backend: %d decode sequences in a batch of %d", n_dec_seq, ns);
    for (int s = 0; s < ns; s++) {
        const int q0 = bt->q_start[s], ql = bt->q_len[s], p0 = bt->pos0[s];
        const int64_t end = (int64_t)p0 + ql;
        if (q0 != next || ql < 1 || p0 < 0 || end > (int64_t)bt->max_blocks * bs || end > (int64_t)M * bs)
            return llmb_fail(LLMB_E_ARG, "cuda backend: sequence %d of the batch: tokens %d..%d at positions %d.. (the "
                                         "sequences' tokens must be consecutive and fit %d blocks of %d)", s, q0,
                             q0 + ql - 1, p0, bt->max_blocks < M ? bt->max_blocks : M, bs);
        next = q0 + ql;
        if (s < n_dec_seq && ql != 1)
            return llmb_fail(LLMB_E_ARG, "cuda backend: decode sequence %d of the batch has %d tokens (1 expected)", s,
                             ql);
        const int used = (int)((end + bs - 1) / bs);
        const int32_t *row = bt->block_tables + (int64_t)s * bt->max_blocks;
        for (int k = 0; k < used; k++)
            if (row[k] < 0 || row[k] >= b->n_blocks)
                return llmb_fail(LLMB_E_ARG, "cuda backend: sequence %d's block table entry %d is %d, outside the pool "
                                             "(0..%lld)", s, k, row[k], (long long)b->n_blocks - 1);
        memcpy(h + b->off_bt + (size_t)s * M, row, (size_t)used * sizeof *h);
        for (int i = 0; i < ql; i++)
            if (bt->pos[q0 + i] != p0 + i)
                return llmb_fail(LLMB_E_ARG, "cuda backend: token %d of the batch is at position %d, its sequence's "
                                             "run says %d", q0 + i, bt->pos[q0 + i], p0 + i);
        if (s < n_dec_seq) {
            h[b->off_lens + s] = p0 + 1;
            if (p0 + 1 > max_len) max_len = p0 + 1;
        } else {
            const int k = s - n_dec_seq;
            h[b->off_qs + k] = q0 - n_dec_seq; // relative to the first prompt token
            h[b->off_ql + k] = ql;
            h[b->off_p0 + k] = p0;
            if (ql > max_q) max_q = ql;
        }
    }
    if (next != n)
        return llmb_fail(LLMB_E_ARG, "cuda backend: the sequences cover %d of the batch's %d tokens", next, n);
    for (int i = 0; i < n; i++) {
        if (bt->slots[i] < 0 || bt->slots[i] >= n_slots)
            return llmb_fail(LLMB_E_ARG, "cuda backend: token %d's KV slot %d is outside the pool (%lld slots)", i,
                             bt->slots[i], (long long)n_slots);
        if (bt->tokens[i] < 0 || bt->tokens[i] >= c->vocab)
            return llmb_fail(LLMB_E_ARG, "cuda backend: token id %d is outside the vocabulary (0..%d)", bt->tokens[i],
                             c->vocab - 1);
    }
    for (int r = 0; r < bt->n_rows; r++)
        if (bt->rows[r] < 0 || bt->rows[r] >= n)
            return llmb_fail(LLMB_E_ARG, "cuda backend: output row %d is token %d, outside the batch of %d", r,
                             bt->rows[r], n);
    memcpy(h + b->off_tok, bt->tokens, (size_t)n * sizeof *h);
    memcpy(h + b->off_pos, bt->pos, (size_t)n * sizeof *h);
    memcpy(h + b->off_slot, bt->slots, (size_t)n * sizeof *h);
    if (bt->n_rows) memcpy(h + b->off_rows, bt->rows, (size_t)bt->n_rows * sizeof *h);
    int rows_n = n, seqs_n = ns;
    if (bucket >= 0) { // padding rows up to the bucket: token 0 at position 0 in the trash block
        const int B = 1 << bucket;
        for (int i = n; i < B; i++) {
            h[b->off_tok + i] = 0;
            h[b->off_pos + i] = 0;
            h[b->off_slot + i] = (int32_t)n_slots; // slot 0 of block n_blocks
            h[b->off_lens + i] = 1;
            h[b->off_bt + (size_t)i * M] = (int32_t)b->n_blocks;
        }
        rows_n = seqs_n = n_dec_seq = B;
        max_len = b->p.ctx; // the graph serves any context up to ctx
    }
    CK("uploading the step's inputs", copy(b->ctx, b->in_dev, h, (b->off_bt + (size_t)seqs_n * M) * sizeof *h, 0));
    *st = (step_t){rows_n, n_dec_seq, seqs_n, n_dec_seq, max_len, max_q, M,
                   b->in_dev + b->off_tok, b->in_dev + b->off_pos, b->in_dev + b->off_slot, b->in_dev + b->off_rows,
                   b->in_dev + b->off_lens, b->in_dev + b->off_qs, b->in_dev + b->off_ql, b->in_dev + b->off_p0,
                   b->in_dev + b->off_bt};
    return LLMB_OK;
}

static llmb_status body(llmb_backend *b, const step_t *st) {
    const llmb_model_config *c = &b->m->cfg;
    const int n = st->n, nd = st->n_dec, hd = c->head_dim;
    const int64_t dim = c->dim, ld = b->qkv_dim;
    CK("embedding", dequantize(b->ctx, b->tok_embd.type, b->tok_embd.data, b->tok_embd.rows, dim, st->d_tok, n,
                               LLMB_TYPE_F32, b->x));
    b->kernels++;
    if (c->n_layer == 0) {
        CK("rmsnorm", rmsnorm(b->ctx, b->xn, b->x, NULL, b->output_norm, dim, n, c->norm_eps));
        b->kernels++;
        return LLMB_OK;
    }
    CK("rmsnorm", rmsnorm(b->ctx, b->xn, b->x, NULL, b->layers[0].attn_norm, dim, n, c->norm_eps));
    b->kernels++;
    for (int l = 0; l < c->n_layer; l++) {
        const dev_layer *D = &b->layers[l];
        // ---- attention ----
        TRY(qkv_proj(b, D, n, nd));
        CK("rope", rope(b->ctx, b->qkv, n, c->n_head, hd, ld, st->d_pos, c->rope_base, c->rope_scale, b->rope_freqs,
                        c->rope_neox));
        CK("rope", rope(b->ctx, b->qkv + b->q_dim, n, c->n_head_kv, hd, ld, st->d_pos, c->rope_base, c->rope_scale,
                        b->rope_freqs, c->rope_neox));
        CK("kv_store", kv_store(b->ctx, b->kv_type, kv_part(b, l, 0), kv_part(b, l, 1), b->qkv + b->q_dim,
                                b->qkv + b->q_dim + b->kv_dim, ld, n, (int)b->kv_dim, st->d_slot));
        b->kernels += 3;
        TRY(attention(b, l, st));
        TRY(mm(b, &D->wo, b->att, b->q_dim, n, nd, b->tmp, dim));
        // x += attention output; xn = RMSNorm(x) in one pass
        CK("rmsnorm", rmsnorm(b->ctx, b->xn, b->x, b->tmp, D->ffn_norm, dim, n, c->norm_eps));
        // ---- feed-forward ----
        TRY(mm(b, &D->w_gate, b->xn, dim, n, nd, b->gate, c->ff));
        TRY(mm(b, &D->w_up, b->xn, dim, n, nd, b->up, c->ff));
        CK("swiglu", swiglu(b->ctx, b->gate, b->up, (int64_t)n * c->ff));
        TRY(mm(b, &D->w_down, b->gate, c->ff, n, nd, b->tmp, dim));
        const float *next = l + 1 < c->n_layer ? b->layers[l + 1].attn_norm : b->output_norm;
        CK("rmsnorm", rmsnorm(b->ctx, b->xn, b->x, b->tmp, next, dim, n, c->norm_eps));
        b->kernels += 3;
    }
    return LLMB_OK;
}

// The kernels of a step: the layers, then the logits of `nr` rows (gathered from the batch's rows
// unless they are its tokens in order).
static llmb_status run_step(llmb_backend *b, const step_t *st, int nr, int gather) {
    const llmb_model_config *c = &b->m->cfg;
    TRY(body(b, st));
    if (!nr) return LLMB_OK;
    const float *xl = b->xn;
    if (gather) { // a gather: dequantize of F32 rows by ids
        CK("gathering output rows", dequantize(b->ctx, LLMB_TYPE_F32, b->xn, st->n, c->dim, st->d_rows, nr,
                                               LLMB_TYPE_F32, b->xl));
        b->kernels++;
        xl = b->xl;
    }
    // always matvec: a row's bits do not depend on how many rows there are
    return mm(b, &b->output, xl, c->dim, nr, nr, b->logits, c->vocab);
}

// Capture the step's kernels as the bucket's graph (they ran once already, so every workspace has
// its size); the capture is always ended, also when an op inside it failed.
static llmb_status capture(llmb_backend *b, int bucket, const step_t *st) {
    CK("graph capture", graph_begin(b->ctx));
    const int kernels = b->kernels;
    llmb_status s = run_step(b, st, st->n, 0);
    char why[512] = "";
    if (s) snprintf(why, sizeof why, "%s", llmb_last_error());
    llmb_cuda_graph_info info = {0};
    llmb_status e = b->api->graph_end(b->ctx, &b->graph[bucket], &info);
    b->kernels = kernels;
    if (s) return llmb_fail(s, "%s (while capturing the graph of %d sequences)", why, 1 << bucket);
    if (e) return lib_fail(b, e, "graph capture");
    b->graph_kernels[bucket] = info.n_kernels;
    b->t.graph_captures++;
    b->t.capture_ms += info.capture_ms;
    return LLMB_OK;
}

static llmb_status cuda_forward(llmb_backend *b, const llmb_batch *bt, llmb_forward_out *out) {
    const llmb_model_config *c = &b->m->cfg;
    *out = (llmb_forward_out){NULL, NULL, NULL};
    if (!b->kv) return llmb_fail(LLMB_E_ARG, "cuda backend: forward before kv_alloc");
    const int sampling = bt->temperature != NULL;
    if (sampling && (!bt->top_p || !bt->min_p || !bt->u || !bt->top_k))
        return llmb_fail(LLMB_E_ARG, "cuda backend: device sampling needs temperature, top_k, top_p, min_p and u");
    const int bucket = graph_bucket(b, bt);
    step_t st = {0};
    TRY(prepare(b, bt, bucket, &st));
    const int nr = bt->n_rows;
    b->kernels = 0;
    CK("phase timer", phase_begin(b->ctx, PH_FORWARD));
    if (bucket >= 0 && b->graph[bucket]) {
        CK("graph launch", graph_launch(b->ctx, b->graph[bucket]));
        b->t.graph_replays++;
        b->kernels = b->graph_kernels[bucket];
    } else if (bucket >= 0) {
        TRY(run_step(b, &st, st.n, 0));
        TRY(capture(b, bucket, &st));
    } else {
        TRY(run_step(b, &st, nr, 1));
    }
    CK("phase timer", phase_end(b->ctx, PH_FORWARD));
    float fwd = 0, smp = 0;
    if (sampling) { // on the device: only ids and log-probabilities cross the bus; sampling is queued
                    // behind the forward pass without waiting for it (the timers are read afterwards)
        for (int r = 0; r < nr; r++)
            b->samp[r] = (llmb_cuda_sampling){bt->temperature[r], bt->top_p[r], bt->min_p[r], bt->u[r], bt->top_k[r]};
        CK("phase timer", phase_begin(b->ctx, PH_SAMPLE));
        if (nr) CK("sampling", sample(b->ctx, b->logits, nr, c->vocab, b->samp, b->h_ids, b->h_lp));
        CK("phase timer", phase_end(b->ctx, PH_SAMPLE));
        CK("phase timer", phase_ms(b->ctx, PH_FORWARD, &fwd));
        CK("phase timer", phase_ms(b->ctx, PH_SAMPLE, &smp));
        out->ids = b->h_ids;
        out->logprobs = b->h_lp;
    } else { // the logits rows to the host (a synchronous copy: timed by the host clock, once the
             // forward pass is done)
        CK("phase timer", phase_ms(b->ctx, PH_FORWARD, &fwd));
        const uint64_t t0 = llmb_now_ns();
        if (nr) CK("copying logits", copy(b->ctx, b->h_logits, b->logits, (size_t)nr * c->vocab * sizeof(float), 1));
        smp = (float)((llmb_now_ns() - t0) / 1e6);
        out->logits = b->h_logits;
    }
    b->t.forward_ms = fwd;
    b->t.sample_ms = smp;
    b->t.steps++;
    if (bt->n_decode == bt->n_seq) b->t.kernels_per_step = b->kernels; // a decode step's kernels
    note_peak(b);
    return LLMB_OK;
}

// ---- statistics ----

static llmb_status cuda_memory(llmb_backend *b, llmb_backend_memory *out) {
    memset(out, 0, sizeof *out);
    size_t ws = 0, fr = 0, tot = 0;
    CK("memory", ctx_workspace_bytes(b->ctx, &ws));
    CK("memory", mem_info(b->dev, &fr, &tot));
    note_peak(b);
    out->weights = b->weight_bytes;
    out->kv = b->kv_bytes;
    out->scratch = b->act_bytes + b->trash_bytes + (uint64_t)b->in_ints * sizeof(int32_t) + ws;
    out->peak = b->peak;
    out->device_free = fr;
    out->device_total = tot;
    return LLMB_OK;
}

static llmb_status cuda_times(llmb_backend *b, llmb_backend_times *out) {
    *out = b->t;
    return LLMB_OK;
}

static const llmb_backend_ops cuda_ops = {
    "cuda", 1, cuda_create, cuda_destroy, cuda_kv_alloc, cuda_kv_copy, cuda_forward, cuda_memory, cuda_times,
};

// The table once llmb_cuda_load succeeded (llmbench.backends.cuda.load() from Python), else NULL with
// the loader's reason (LLMB_E_BACKEND) recorded.
const llmb_backend_ops *llmb_backend_cuda(void) {
    if (!llmb_cuda_table()) return NULL;
    return &cuda_ops;
}
