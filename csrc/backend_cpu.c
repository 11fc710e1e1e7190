// backend_cpu.c — the CPU backend (backend.h): the forward pass over a batch on host threads, the
// paged KV pool in host memory, and the activation scratch. The forward pass reads like the model:
// embed, then per layer RMSNorm -> QKV -> RoPE -> KV store -> attention -> output projection ->
// residual -> RMSNorm -> SwiGLU FFN -> residual, then final norm and the output projection for the
// rows that need logits. Gemma 3 adds to it (model.h): scaled embeddings, RMSNorm of each query and key
// head, norms of the attention's and the FFN's outputs before each residual add, GeGLU, and layers that
// attend over a sliding window with a RoPE base of their own. Every per-token computation has a fixed order, so a sequence's logits do
// not depend on what else is in the batch. It is the reference every other backend is tested against.
// Tested through the engine by tests/test_engine.py (float64 reference forward pass, stories260K
// greedy story, batch invariance, prefix forks) and csrc/tests/test_engine.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_contention.h"
#include "internal.h"
#include "ops.h"
#include "quants.h"
#include "vecdot.h"

// A layer as the forward pass reads it: the model's norms and biases, and its matrices as the products take
// them (the model's views, or the backend's repacked copies: llmb_cpu_weight)
typedef struct {
    const llmb_layer *m;
    llmb_cpu_weight wq, wk, wv, wo, w_gate, w_up, w_down;
} cpu_layer;

// a decode tile that the threads share (attention_split): its queries, its KV head, its scores and sums
typedef struct {
    const float *qp[LLMB_ATT_Q];
    float *op[LLMB_ATT_Q];
    int lo[LLMB_ATT_Q], nk[LLMB_ATT_Q], nq, chunks;
    llmb_kv_head h;
    float *sc, *acc, inv[LLMB_ATT_Q];
} split_tile;
// tiles a split layer may have: 2 a unit (PAGED_MAX_Q queries), fewer than 4 units a thread
#define SPLIT_TILES(nt) (8 * (nt))

struct llmb_backend {
    const llmb_model *model;      // borrowed from the engine
    llmb_backend_params p;
    // KV pool: [layer][K|V][head][block] of block_size x kv_row_bytes / n_head_kv: a head's keys transposed,
    // its values as [slot] rows (llmb_kv_head; head_block)
    int kv_type;
    const llmb_quant_traits *kv_q; // its row conversions (from_float writes the cache)
    int block_size;
    int64_t n_blocks;
    size_t kv_row_bytes;
    uint8_t *kv;
    size_t kv_bytes;
    // activations, for n = max_batch_tokens tokens and r = max_rows logits rows, each [rows][columns]:
    float *x;            // [n][dim] the residual stream
    float *xn;           // [n][dim] x after RMSNorm: the input of the QKV and gate/up products
    float *q, *k, *v;    // [n][n_head * head_dim], [n][n_head_kv * head_dim] x2 (RoPE applied in place)
    float *att;          // [n][n_head * head_dim] attention output: the input of wo
    float *proj;         // [n][dim] a product's output before it joins x: wo's, then w_down's
    float *gate, *up;    // [n][ff] (SwiGLU leaves silu(gate) * up in gate: w_down's input)
    float *cs;           // [n][head_dim] each token's RoPE cos/sin pairs
    float *cs_swa;       // [n][head_dim] those of the sliding-window layers (gemma3), or NULL
    float *xl;           // [r][dim] final norm of the rows that need logits
    float *logits;       // [r][vocab]
    float *att_scratch;  // [threads][llmb_att_scratch_floats]: a unit's keys, values and scores as floats
    split_tile *split_tiles;   // [SPLIT_TILES(threads)]: a decode layer's tiles shared by the threads (attention_split)
    // the last layer of a step whose logits rows are fewer than its tokens (rows_batch): each token's index among
    // the rows' tokens or -1 ([n]), the rows' tokens ascending, their positions, slots and ids ([r] each), their
    // sequences' first token, count and pos0 ([max_seqs] each); the kept sequences' block tables where some
    // sequence has no row (grown as needed)
    int32_t *row_at, *kept, *kept_pos, *kept_slots, *kept_tokens, *kept_q_start, *kept_q_len, *kept_pos0;
    int32_t *kept_tables;
    size_t kept_tables_cap;
    double *rope_f;               // (head_dim / 2) RoPE inverse frequencies (llmb_rope_freqs)
    double *rope_f_swa;           // (head_dim / 2) those of the sliding-window layers, or NULL
    llmb_matmul_ctx mm;
    // the matrices as the forward pass reads them: the model's views, or the backend's repacked copies
    cpu_layer *layers;
    llmb_cpu_weight output;
    uint8_t *packed;              // the repacked copies, one after another (llmb_alloc_stream), or NULL
    int64_t weights_delta;        // bytes a forward pass reads beyond the file's weights (BF16 copies of F32)
    size_t scratch_bytes;
    llmb_backend_times times;
    llmb_cpu_monitor cores;       // steps drop to one thread while the cores are contended
};

static void *xcalloc(size_t n, size_t sz, int *oom) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) *oom = 1;
    return p;
}

static void cpu_destroy(llmb_backend *b) {
    if (!b) return;
    float *bufs[] = {b->x, b->xn, b->q, b->k, b->v, b->att,
                     b->proj, b->gate, b->up, b->cs, b->cs_swa, b->xl, b->logits, b->att_scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(b->rope_f);
    free(b->split_tiles);
    free(b->row_at);
    free(b->kept_tables);
    free(b->rope_f_swa);
    free(b->mm.xq);
    free(b->mm.wtile);
    free(b->kv);
    free(b->packed);
    free(b->layers);
    llmb_cpu_monitor_close(&b->cores);
    free(b);
}

// A matrix whose type the active SIMD level runs interleaved (llmb_vec_dot_interleave; which types, in groups of 8
// or 16 rows, at which level: vecdot.h's kernel table)
// is repacked once into the backend's memory, so that one sequential stream feeds a group's rows in the lanes
// of every vector: the decode kernel of the plain layout is bounded by its per-row work, not by the memory
// (benchmarks/bench_vecdot.py measures both layouts). Same bits as the plain rows. float_act mode reads plain
// rows. With BF16 pair products (p.bf16) float matrices are
// copied here as LLMB_TYPE_BF16_DP rows instead. The model's views stay plain (the embedding lookup
// reads them); llmb_backend_memory counts weights once, as the bytes a forward pass reads.
// The copies share one allocation with huge pages (llmb_alloc_stream), in the forward pass's order: one
// arena, not a 2 MiB-aligned allocation per matrix, which rounds each up to 2 MiB (docs/engine-measurements.md#huge-pages).
static int to_bf16(const llmb_backend *b, const llmb_weight *w) {
    return b->p.bf16 && w->ne0 % 32 == 0 &&
           (w->type == LLMB_TYPE_F32 || w->type == LLMB_TYPE_F16 || w->type == LLMB_TYPE_BF16);
}

static size_t repacked_bytes(const llmb_backend *b, const llmb_weight *w) {
    if (to_bf16(b, w)) return ((size_t)w->ne1 * (size_t)w->ne0 * 2 + 63) / 64 * 64;
    const int G = llmb_vec_dot_interleave(w->type);
    if (!G || w->ne1 % G || b->p.float_act) return 0;
    return ((size_t)w->ne1 * w->row_bytes + 63) / 64 * 64;
}

static void repack(llmb_backend *b, llmb_cpu_weight *cw, size_t *at) {
    llmb_weight *w = &cw->w;
    const size_t bytes = repacked_bytes(b, w);
    if (!bytes) return;
    if (to_bf16(b, w)) {
        llmb_vec_dot_to_bf16(w->type, w->ne0, w->data, w->row_bytes, w->ne1, (uint16_t *)(b->packed + *at));
        b->weights_delta += (int64_t)w->ne1 * w->ne0 * 2 - (int64_t)(w->ne1 * w->row_bytes);
        w->type = LLMB_TYPE_BF16_DP;
        w->row_bytes = (size_t)w->ne0 * 2;
        w->data = b->packed + *at;
        *at += bytes;
        return;
    }
    const int G = llmb_vec_dot_interleave(w->type);
    llmb_vec_dot_repack(w->type, w->ne0, w->data, w->ne1, G, b->packed + *at);
    w->data = b->packed + *at;
    cw->il = G;
    *at += bytes;
}

// layer L's matrices in the forward pass's order, NULL-terminated (repack_model places the output after them)
#define LAYER_WEIGHTS(L) {&(L)->wq, &(L)->wk, &(L)->wv, &(L)->wo, &(L)->w_gate, &(L)->w_up, &(L)->w_down, NULL}

static int repack_model(llmb_backend *b, const llmb_model *m) {
    const int n_layer = m->cfg.n_layer;
    b->layers = malloc((size_t)(n_layer ? n_layer : 1) * sizeof *b->layers);
    if (!b->layers) return 0;
    for (int l = 0; l < n_layer; l++) {
        const llmb_layer *L = &m->layers[l];
        b->layers[l] = (cpu_layer){.m = L, .wq = {.w = L->wq}, .wk = {.w = L->wk}, .wv = {.w = L->wv}, .wo = {.w = L->wo},
                                   .w_gate = {.w = L->w_gate}, .w_up = {.w = L->w_up}, .w_down = {.w = L->w_down}};
    }
    b->output = (llmb_cpu_weight){.w = m->output};
    // a step reads every matrix once (read bytes); where they outweigh the last-level cache they come from
    // DRAM at every step, and the copies' decode kernels prefetch further ahead (llmb_cpu_weight.stream)
    size_t total = repacked_bytes(b, &b->output.w), read = (size_t)b->output.w.ne1 * b->output.w.row_bytes, at = 0;
    for (int l = 0; l < n_layer; l++)
        for (llmb_cpu_weight **w = (llmb_cpu_weight *[])LAYER_WEIGHTS(&b->layers[l]); *w; w++)
            total += repacked_bytes(b, &(*w)->w), read += (size_t)(*w)->w.ne1 * (*w)->w.row_bytes;
    if (!total) return 1;
    if (!(b->packed = llmb_alloc_stream(total))) return 0;
    const int stream = !llmb_cache_holds(read);
    for (int l = 0; l < n_layer; l++)
        for (llmb_cpu_weight **w = (llmb_cpu_weight *[])LAYER_WEIGHTS(&b->layers[l]); *w; w++)
            (*w)->stream = stream, repack(b, *w, &at);
    b->output.stream = stream;
    repack(b, &b->output, &at);
    return 1;
}

static llmb_status cpu_create(const llmb_model *m, const llmb_backend_params *p, llmb_backend **out) {
    *out = NULL;
    const llmb_model_config *c = &m->cfg;
    if (p->bf16 && p->float_act)
        return llmb_fail(LLMB_E_ARG, "cpu backend: BF16 pair products and float activations exclude each other");
    if (p->max_batch_tokens < 1 || p->max_seqs < 1 || p->ctx < 1 || p->n_threads < 1 || p->max_rows < 0 ||
        p->max_rows > p->max_batch_tokens)
        return llmb_fail(LLMB_E_ARG, "cpu backend: max_batch_tokens, max_seqs, ctx and threads must be positive and "
                                     "max_rows 0..max_batch_tokens (got %d, %d, %d, %d, %d)", p->max_batch_tokens,
                         p->max_seqs, p->ctx, p->n_threads, p->max_rows);
    llmb_backend *b = calloc(1, sizeof *b);
    if (!b) return llmb_fail(LLMB_E_NOMEM, "engine: out of memory");
    b->model = m;
    b->p = *p;
    llmb_cpu_monitor_init(&b->cores, p->n_threads);
    const int n = p->max_batch_tokens, nt = p->n_threads;
    const int64_t q_dim = (int64_t)c->n_head * c->head_dim, kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    int oom = 0;
    size_t fl = 0;
#define ACT(ptr, count) (b->ptr = xcalloc((size_t)(count), sizeof(float), &oom), fl += (size_t)(count))
    ACT(x, (size_t)n * c->dim);
    ACT(xn, (size_t)n * c->dim);
    ACT(q, (size_t)n * q_dim);
    ACT(k, (size_t)n * kv_dim);
    ACT(v, (size_t)n * kv_dim);
    ACT(att, (size_t)n * q_dim);
    ACT(proj, (size_t)n * c->dim);
    ACT(gate, (size_t)n * c->ff);
    ACT(up, (size_t)n * c->ff);
    ACT(cs, (size_t)n * c->head_dim);
    if (c->swa_window) ACT(cs_swa, (size_t)n * c->head_dim);
    ACT(xl, (size_t)p->max_rows * c->dim);
    ACT(logits, (size_t)p->max_rows * c->vocab);
    ACT(att_scratch, (size_t)nt * llmb_att_scratch_floats(p->ctx, c->head_dim));
#undef ACT
    b->split_tiles = xcalloc(SPLIT_TILES(nt), sizeof *b->split_tiles, &oom);
    b->row_at = xcalloc((size_t)n + 4 * (size_t)p->max_rows + 3 * (size_t)p->max_seqs, sizeof(int32_t), &oom);
    if (b->row_at) {
        int32_t *a = b->row_at + n;
        b->kept = a, b->kept_pos = a + p->max_rows, b->kept_slots = a + 2 * p->max_rows;
        b->kept_tokens = a + 3 * p->max_rows, a += 4 * p->max_rows;
        b->kept_q_start = a, b->kept_q_len = a + p->max_seqs, b->kept_pos0 = a + 2 * p->max_seqs;
    }
    b->mm.row_cap = (llmb_matmul_row_cap(m) + 63) / 64 * 64;
    b->mm.xq = xcalloc((size_t)n * b->mm.row_cap, 1, &oom);
    b->mm.nthreads = nt;
    if (p->profile) {
        b->mm.prof_quant_x = &b->times.prof_ns[LLMB_PROF_QUANT_X];
        b->mm.prof_type = b->times.prof_type_ns;
        b->mm.prof_types = LLMB_PROF_TYPES;
    }
    if (p->float_act) {
        int64_t wide = c->dim > q_dim ? c->dim : q_dim;
        if (c->ff > wide) wide = c->ff;
        b->mm.float_act = 1;
        b->mm.wtile_ne0 = wide;
        b->mm.wtile = xcalloc((size_t)nt * LLMB_MATMUL_TILE * (size_t)wide, sizeof(float), &oom);
        fl += (size_t)nt * LLMB_MATMUL_TILE * (size_t)wide;
    }
    b->rope_f = xcalloc((size_t)c->head_dim / 2, sizeof *b->rope_f, &oom);
    if (c->swa_window) b->rope_f_swa = xcalloc((size_t)c->head_dim / 2, sizeof *b->rope_f_swa, &oom);
    if (!oom && !repack_model(b, m)) {
        cpu_destroy(b);
        return llmb_fail(LLMB_E_NOMEM, "engine: out of memory for the repacked weights (%llu bytes)",
                         (unsigned long long)m->weight_bytes);
    }
    b->scratch_bytes = fl * sizeof(float) + (size_t)n * b->mm.row_cap +
                       ((size_t)n + 4 * (size_t)p->max_rows + 3 * (size_t)p->max_seqs) * sizeof(int32_t) +
                       (size_t)(c->swa_window ? 2 : 1) * c->head_dim / 2 * sizeof *b->rope_f;
    if (!oom) llmb_rope_freqs(b->rope_f, c->head_dim, c->rope_base);
    if (!oom && c->swa_window) llmb_rope_freqs(b->rope_f_swa, c->head_dim, c->rope_base_swa);
    if (oom) {
        const int vocab = c->vocab;
        cpu_destroy(b);
        return llmb_fail(LLMB_E_NOMEM, "engine: out of memory for activations (max_batch_tokens %d, vocab %d)", n, vocab);
    }
    *out = b;
    return LLMB_OK;
}

// ---- KV cache ----

static llmb_status cpu_kv_alloc(llmb_backend *b, int kv_type, int block_size, int64_t n_blocks) {
    const llmb_model_config *c = &b->model->cfg;
    if (b->kv) return llmb_fail(LLMB_E_ARG, "cpu backend: the KV pool is already allocated");
    if (kv_type != LLMB_TYPE_F32 && kv_type != LLMB_TYPE_F16 && kv_type != LLMB_TYPE_Q8_0)
        return llmb_fail(LLMB_E_ARG, "engine: KV cache type %d is not one of F32, F16, Q8_0", kv_type);
    const llmb_type_traits *kt = llmb_type_traits_get(kv_type);
    const int kv_dim = c->n_head_kv * c->head_dim;
    if (kv_dim % kt->blck_size || c->head_dim % kt->blck_size)
        return llmb_fail(LLMB_E_UNSUPPORTED, "cpu backend: KV type %d needs a head size that is a multiple of %d; "
                                             "this model's is %d", kv_type, (int)kt->blck_size, c->head_dim);
    if (block_size < 1 || n_blocks < 1)
        return llmb_fail(LLMB_E_ARG, "cpu backend: block_size and n_blocks must be positive (got %d, %lld)", block_size,
                         (long long)n_blocks);
    b->kv_type = kv_type;
    b->kv_q = llmb_quant_traits_get(kv_type);
    b->block_size = block_size;
    b->n_blocks = n_blocks;
    b->kv_row_bytes = (size_t)(kv_dim / kt->blck_size * kt->type_size);
    b->kv_bytes = (size_t)c->n_layer * 2 * (size_t)n_blocks * (size_t)block_size * b->kv_row_bytes;
    b->kv = malloc(b->kv_bytes ? b->kv_bytes : 1);
    if (!b->kv)
        return llmb_fail(LLMB_E_NOMEM, "engine: cannot allocate a KV cache of %zu bytes (%lld blocks of %d tokens); "
                                       "lower kv_budget", b->kv_bytes, (long long)n_blocks, block_size);
    return LLMB_OK;
}

// head h's part of block blk of layer l's keys (which 0) or values (1): its keys transposed or its value
// rows (llmb_kv_head), block_size x kv_row_bytes / n_head_kv bytes. Each head's blocks lie one after
// another (the pool is [layer][K|V][head][block]), so a sequence's consecutive blocks are one stream.
// bytes of one head's row (of a token's keys or values of one layer)
static size_t head_row_bytes(const llmb_backend *b) { return b->kv_row_bytes / (size_t)b->model->cfg.n_head_kv; }

static uint8_t *head_block(llmb_backend *b, int l, int which, int32_t blk, int h) {
    const size_t per_block = (size_t)b->block_size * head_row_bytes(b);
    const size_t per_part = (size_t)b->n_blocks * b->block_size * b->kv_row_bytes;
    return b->kv + ((size_t)l * 2 + (size_t)which) * per_part + ((size_t)h * b->n_blocks + (size_t)blk) * per_block;
}

static llmb_status cpu_kv_copy(llmb_backend *b, int32_t dst, int32_t src, int n_tokens) {
    if (dst < 0 || dst >= b->n_blocks || src < 0 || src >= b->n_blocks || n_tokens < 0 || n_tokens > b->block_size)
        return llmb_fail(LLMB_E_ARG, "cpu backend: kv_copy of %d slots from block %d to %d (pool of %lld blocks of %d)",
                         n_tokens, src, dst, (long long)b->n_blocks, b->block_size);
    const int nkv = b->model->cfg.n_head_kv;   // whole head blocks (keys are transposed), slots past n_tokens unused
    for (int l = 0; l < b->model->cfg.n_layer; l++)
        for (int w = 0; w < 2; w++)
            for (int h = 0; h < nkv; h++)
                memcpy(head_block(b, l, w, dst, h), head_block(b, l, w, src, h), (size_t)b->block_size * head_row_bytes(b));
    return LLMB_OK;
}

// batch token i's key of head h (k: its n_head_kv heads) into its column of layer l's key block
static void store_key(llmb_backend *b, const llmb_batch *bt, int l, int i, int h, const float *k) {
    const int hd = b->model->cfg.head_dim;
    llmb_kv_store_key(b->kv_type, head_block(b, l, 0, bt->slots[i] / b->block_size, h), b->block_size,
                      bt->slots[i] % b->block_size, k + (size_t)h * hd, hd);
}

// its value of head h (v: its n_head_kv heads) into the row of its slot in layer l's value block
static void store_value(llmb_backend *b, const llmb_batch *bt, int l, int i, int h, const float *v) {
    const int hd = b->model->cfg.head_dim;
    b->kv_q->from_float(v + (size_t)h * hd, head_block(b, l, 1, bt->slots[i] / b->block_size, h) +
                                                (size_t)(bt->slots[i] % b->block_size) * head_row_bytes(b),
                        hd);
}

// ---- forward ----

// Attention of every batch token over its sequence's cached keys and values. Work is split by
// (sequence of the batch, KV head). A unit with many queries (prefill) converts that head's cached K
// (transposed in the cache) and V rows up to the sequence's last position here to float once
// (llmb_att_gather: 16 keys at a time, no call per row), then serves every query head of the group
// and every token of the sequence, LLMB_ATT_BLOCK queries per llmb_attend_block call (attention.c). A unit
// with at most PAGED_MAX_Q queries (decode: one token's query heads of the group) reads the cache
// straight instead (llmb_attend_paged: keys 64 at a time through an L1 chunk, values converted in
// registers), as the whole copy, written and read back once per unit and step, went through L2/L3 and
// was most of a decode step at a thousand tokens of context; both give the same bits, so the choice is
// speed only. A paged unit stores its tokens' keys itself, just before it reads their block: a key's
// store touches every line of its head's key block (a column of it), which the attention then reads, so
// here the store costs about what that read did (stored with RoPE, it added its own misses: docs/
// engine-measurements.md#kv-layout). Other tokens' keys, and every value, are stored with RoPE. Each
// (token, head) output is computed by the same operations whatever else is in the batch.
// A sliding-window layer reads from the first token's window start rounded down to a multiple of 64
// (then the softmax's 16-lane sums see every key in the lane of its position, as from 0), and each
// query weighs only its own window.
#define PAGED_MAX_Q (2 * LLMB_ATT_Q)
static int paged_seq(const llmb_backend *b, const llmb_batch *bt, int r) {
    const llmb_model_config *c = &b->model->cfg;
    return bt->q_len[r] * (c->n_head / c->n_head_kv) <= PAGED_MAX_Q;
}
// the batch sequence of token i (q_start ascends)
static int seq_of(const llmb_batch *bt, int64_t i) {
    int lo = 0, hi = bt->n_seq - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (bt->q_start[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}
// the paged path's work sits in the first floats of a unit's scratch, below the score rows (from 2 x 64 x hd on)
_Static_assert(LLMB_ATT_CHUNK + LLMB_ATT_Q <= 2 * 64, "llmb_att_paged_work_floats must fit below the score rows");
static size_t att_scratch_floats(const llmb_backend *b) {
    return llmb_att_scratch_floats(b->p.ctx, b->model->cfg.head_dim);
}

// A unit's tokens are split into parts of at least this many (each part gathers the keys it needs):
// below, the gather, done again per part, costs more than the balance gains
#define ATT_PART_MIN_TOKENS 32

// the first key position sequence r reads in a layer: a window's start (rounded down to 64), where it excludes
// earlier positions, else 0
static int first_key(const llmb_backend *b, const llmb_batch *bt, int layer, int r) {
    const int W = b->model->layers[layer].swa ? b->model->cfg.swa_window : 0, p0 = bt->pos[bt->q_start[r]];
    return W && p0 - W + 1 > 0 ? (p0 - W + 1) / 64 * 64 : 0;
}

// KV head kvh of sequence r in a layer's cache, keys from position first on
static llmb_kv_head unit_head(llmb_backend *b, const llmb_batch *bt, int layer, int r, int kvh, int first) {
    const size_t head_bytes = head_row_bytes(b);
    const llmb_kv_head h = {b->kv_type, head_block(b, layer, 0, 0, kvh), head_block(b, layer, 1, 0, kvh),
                            bt->block_tables + (size_t)r * bt->max_blocks, b->block_size,
                            (size_t)b->block_size * head_bytes, head_bytes, first};
    return h;
}

// queries q0 .. of the (token, query head) pairs of tokens t0 .. of KV head kvh (token-major; at most per of them,
// up to nq_all): their q and output rows, key counts and first keys (windows) from position first; returns how many
static int unit_queries(const llmb_backend *b, const llmb_batch *bt, int layer, int kvh, int t0, int first, int q0,
                        int nq_all, int per, const float **qp, float **op, int *lo, int *nk) {
    const llmb_model_config *c = &b->model->cfg;
    const int hd = c->head_dim, group = c->n_head / c->n_head_kv, W = b->model->layers[layer].swa ? c->swa_window : 0;
    const int64_t q_dim = (int64_t)c->n_head * hd;
    int nq = 0;
    for (; nq < per && q0 + nq < nq_all; nq++) {
        const int i = t0 + (q0 + nq) / group, h = kvh * group + (q0 + nq) % group;
        qp[nq] = b->q + i * q_dim + (int64_t)h * hd;
        op[nq] = b->att + i * q_dim + (int64_t)h * hd;
        nk[nq] = bt->pos[i] + 1 - first;
        lo[nq] = W && bt->pos[i] - W + 1 > first ? bt->pos[i] - W + 1 - first : 0;
    }
    return nq;
}

// Part `part` of `parts` of unit u of a layer's attention (sequence u / n_head_kv of the batch, KV head
// u % n_head_kv: its tokens split evenly, at most one part per ATT_PART_MIN_TOKENS; a part past them
// has nothing to do) on the scratch of thread tid
static void attend_unit(llmb_backend *b, const llmb_batch *bt, int layer, int64_t u, int part, int parts, int tid) {
    const llmb_model_config *c = &b->model->cfg;
    const int hd = c->head_dim, nkv = c->n_head_kv, group = c->n_head / nkv;
    const int r = (int)(u / nkv), kvh = (int)(u % nkv);
    const int i0 = bt->q_start[r], n_tok = bt->q_len[r], paged = paged_seq(b, bt, r);
    const int most = n_tok / ATT_PART_MIN_TOKENS, own = paged || most < 2 ? 1 : parts < most ? parts : most;
    if (part >= own) return;
    const int t0 = i0 + (int)((int64_t)n_tok * part / own), t1 = i0 + (int)((int64_t)n_tok * (part + 1) / own);
    float *kt = b->att_scratch + (size_t)tid * att_scratch_floats(b);
    const int max_pos = bt->pos[t1 - 1];   // the sequence's positions here ascend from pos0
    const int first = first_key(b, bt, layer, r);
    // this head's keys transposed (kt[d * ldk + j]) and values as rows, as floats
    const size_t ldk = llmb_att_ldk(max_pos + 1 - first);
    float *vf = kt + ldk * hd, *sc = vf + ldk * hd;
    const llmb_kv_head kvh_rows = unit_head(b, bt, layer, r, kvh, first);
    // every (token, query head) of the part, LLMB_ATT_Q (paged) or LLMB_ATT_BLOCK at a time
    const int nq_all = (t1 - t0) * group, per = paged ? LLMB_ATT_Q : LLMB_ATT_BLOCK;
    if (!paged) llmb_att_gather(&kvh_rows, max_pos + 1 - first, hd, kt, ldk, vf);
    else   // its keys, stored here (see above)
        for (int i = t0; i < t1; i++) store_key(b, bt, layer, i, kvh, b->k + (int64_t)i * nkv * hd);
    for (int q0 = 0; q0 < nq_all; q0 += per) {
        const float *qp[LLMB_ATT_BLOCK];
        float *op[LLMB_ATT_BLOCK];
        int lo[LLMB_ATT_BLOCK], nk[LLMB_ATT_BLOCK];
        const int nq = unit_queries(b, bt, layer, kvh, t0, first, q0, nq_all, per, qp, op, lo, nk);
        if (paged)   // kt's first llmb_att_paged_work_floats(hd) floats as the work (the assert above PAGED_MAX_Q)
            llmb_attend_paged(nq, qp, lo, nk, &kvh_rows, hd, c->att_scale, sc, kt, op);
        else
            llmb_attend_block(nq, qp, lo, nk, kt, ldk, vf, hd, c->att_scale, sc, op);
    }
}

// Decode with fewer units than would keep every thread busy dealt whole (one sequence of SmolLM2's 3 KV heads
// on 2 threads, Gemma 3's single one): every tile of LLMB_ATT_Q queries is shared by all threads instead, its
// scores dealt by 64-key chunks, its softmax by queries and its weighted sums by slices of 32 output elements
// (llmb_attend_paged_scores, _softmax, _values: the bits of one llmb_attend_paged call), with a wait between
// the steps. Taken where every sequence of the batch decodes (paged), the units do not divide among the threads
// and are fewer than 4 a thread, and they average SPLIT_MIN_KEYS keys or more: the waits cost a few
// microseconds a layer.
#define SPLIT_MIN_KEYS 256
#define SPLIT_SLICE 32

// floats of a split tile's scores and sums, 64-byte aligned, after the paged work in each thread's scratch
static size_t split_slot_floats(const llmb_backend *b) {
    return ((size_t)LLMB_ATT_Q * (llmb_att_ldk(b->p.ctx) + b->model->cfg.head_dim) + 31) / 16 * 16;
}

// the range of n items of thread t of nt: an even share, contiguous
static void deal(int64_t n, int t, int nt, int64_t *lo, int64_t *hi) {
    *lo = n * t / nt, *hi = n * (t + 1) / nt;
}

static int attention_split(llmb_backend *b, const llmb_batch *bt, int layer) {
    const llmb_model_config *c = &b->model->cfg;
    const int nt = b->mm.nthreads, hd = c->head_dim, nkv = c->n_head_kv, group = c->n_head / nkv;
    const int64_t units = (int64_t)bt->n_seq * nkv;
    if (nt < 2 || units % nt == 0 || units >= 4 * nt) return 0;
    int64_t keys = 0;
    for (int r = 0; r < bt->n_seq; r++) {
        if (!paged_seq(b, bt, r)) return 0;
        keys += bt->pos[bt->q_start[r] + bt->q_len[r] - 1] + 1 - first_key(b, bt, layer, r);
    }
    if (keys < (int64_t)SPLIT_MIN_KEYS * bt->n_seq) return 0;
    const size_t slot = split_slot_floats(b), work = llmb_att_paged_work_floats(hd);
    const int64_t per_thread = (int64_t)((att_scratch_floats(b) - work - 16) / slot);
    split_tile *tl = b->split_tiles;
    int nt_tiles = 0;
    for (int64_t u = 0; u < units; u++) {
        const int r = (int)(u / nkv), kvh = (int)(u % nkv), first = first_key(b, bt, layer, r);
        const int nq_all = bt->q_len[r] * group;
        for (int q0 = 0; q0 < nq_all; q0 += LLMB_ATT_Q, nt_tiles++) {
            if (nt_tiles >= SPLIT_TILES(nt) || nt_tiles / nt >= per_thread) return 0;
            split_tile *t = tl + nt_tiles;
            t->nq = unit_queries(b, bt, layer, kvh, bt->q_start[r], first, q0, nq_all, LLMB_ATT_Q, t->qp, t->op, t->lo,
                                 t->nk);
            t->h = unit_head(b, bt, layer, r, kvh, first);
            t->chunks = llmb_att_paged_chunks(t->nq, t->lo, t->nk);
            // the tile's slot: in thread (tile % nt)'s scratch, past its work, sums aligned to a line
            const uintptr_t base = (uintptr_t)(b->att_scratch + (size_t)(nt_tiles % nt) * att_scratch_floats(b) + work +
                                               (size_t)(nt_tiles / nt) * slot);
            t->acc = (float *)((base + 63) / 64 * 64);
            t->sc = t->acc + (size_t)LLMB_ATT_Q * hd;
        }
    }
    int64_t chunks = 0;
    for (int k = 0; k < nt_tiles; k++) chunks += tl[k].chunks;
    const int slices = hd % SPLIT_SLICE ? 1 : hd / SPLIT_SLICE;
#pragma omp parallel num_threads(nt)
    {
        const int tid = llmb_thread_id(), n = llmb_thread_count();
        float *work_t = b->att_scratch + (size_t)tid * att_scratch_floats(b);
        int64_t lo, hi;
        // this step's keys first, each unit's by one thread (attend_unit's store)
        deal(units, tid, n, &lo, &hi);
        for (int64_t u = lo; u < hi; u++) {
            const int r = (int)(u / nkv);
            for (int i = bt->q_start[r]; i < bt->q_start[r] + bt->q_len[r]; i++)
                store_key(b, bt, layer, i, (int)(u % nkv), b->k + (int64_t)i * nkv * hd);
        }
#pragma omp barrier
        deal(chunks, tid, n, &lo, &hi);   // the tiles' chunks one after another
        for (int k = 0, off = 0; k < nt_tiles && off < hi; off += tl[k].chunks, k++) {
            const split_tile *t = tl + k;
            const int64_t a = lo > off ? lo - off : 0, z = hi - off < t->chunks ? hi - off : t->chunks;
            if (a < z)
                llmb_attend_paged_scores(t->nq, t->qp, t->lo, t->nk, &t->h, hd, c->att_scale, t->sc, work_t, (int)a,
                                         (int)z);
        }
#pragma omp barrier
        deal((int64_t)nt_tiles * LLMB_ATT_Q, tid, n, &lo, &hi);   // (tile, query) pairs
        for (int64_t e = lo; e < hi; e++) {
            split_tile *t = tl + e / LLMB_ATT_Q;
            const int i = (int)(e % LLMB_ATT_Q);
            if (i < t->nq) llmb_attend_paged_softmax(t->nq, t->lo, t->nk, &t->h, hd, t->sc, t->inv, i, i + 1);
        }
#pragma omp barrier
        deal((int64_t)nt_tiles * slices, tid, n, &lo, &hi);   // (tile, slice) pairs, a tile's slices in one call
        for (int64_t e = lo; e < hi;) {
            const int k = (int)(e / slices), s0 = (int)(e % slices);
            const int s1 = hi - (e - s0) < slices ? (int)(hi - (e - s0)) : slices;
            const split_tile *t = tl + k;
            llmb_attend_paged_values(t->nq, t->lo, t->nk, &t->h, hd, t->sc, t->inv, t->acc, work_t, s0 * SPLIT_SLICE,
                                     s1 == slices ? hd : s1 * SPLIT_SLICE, t->op);
            e += s1 - s0;
        }
    }
    return 1;
}

// A layer's attention: on the engine's threads (units dealt one at a time) once it has 64K query values
// times keys, else here (no OpenMP region: see LLMB_PAR_FOR). Where the batch has fewer than 4 units a
// thread (one sequence's prompt has n_head_kv: 3 units on 2 threads left one idle a third of the time),
// each is split into parts by tokens, the last parts (the most keys) dealt first; a decode step's units
// are shared by the threads instead (attention_split).
static void attention(llmb_backend *b, const llmb_batch *bt, int layer) {
    const llmb_model_config *c = &b->model->cfg;
    const int64_t units = (int64_t)bt->n_seq * c->n_head_kv;
    int64_t work = 0;
    const int W = b->model->layers[layer].swa ? c->swa_window : 0;
    for (int i = 0; i < bt->n_tok; i++)
        work += (int64_t)(W && bt->pos[i] + 1 > W ? W : bt->pos[i] + 1) * c->n_head * c->head_dim;
    const int nt = b->mm.nthreads;
    if (nt > 1 && work >= (1 << 16)) {
        if (attention_split(b, bt, layer)) return;
        const int parts = units >= 4 * nt ? 1 : (int)((4 * nt + units - 1) / units);
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int64_t k = 0; k < units * parts; k++)
            attend_unit(b, bt, layer, k % units, parts - 1 - (int)(k / units), parts, llmb_thread_id());
    } else
        for (int64_t u = 0; u < units; u++) attend_unit(b, bt, layer, u, 0, 1, 0);
}

static void add_bias(float *y, const float *bias, int n, int64_t dim) {
    if (!bias) return;
    for (int i = 0; i < n; i++)
        for (int64_t d = 0; d < dim; d++) y[i * dim + d] += bias[d];
}

// Per-token steps (embedding, norms, RoPE and the KV stores, SwiGLU, residual adds) run on the
// engine's threads once a batch holds PAR_VALUES activations (below, waking the threads costs more than
// the step, and the loop runs here outside any OpenMP region: LLMB_PAR_FOR): each token's operations are
// the same on any thread. Uses cpu_forward's b and par. Their inputs are products' outputs, each row half
// written on the other core, and their outputs are read there next: on one core all those lines crossed
// between the cores through it, and a batch-16 step's norms took 2.7x their one-thread time
// (docs/engine-measurements.md#par-values).
#define PAR_VALUES (1 << 13)
#define PER_TOKEN(i, n, ...) LLMB_PAR_FOR(par, b->mm.nthreads, i, n, __VA_ARGS__)
// the statements, their time added to operation kind `kind` (LLMB_PROF_*) where the backend profiles
#define TIMED(kind, ...)                                                        \
    do {                                                                        \
        const uint64_t t_ = b->p.profile ? llmb_now_ns() : 0;                  \
        __VA_ARGS__;                                                            \
        if (b->p.profile) b->times.prof_ns[kind] += llmb_now_ns() - t_;        \
    } while (0)
// a product: its time is the matmul's own split (quantized activations, products by type: ops.c)
#define PRODUCT(...)                                                            \
    do {                                                                        \
        const uint64_t t_ = b->p.profile ? llmb_now_ns() : 0, q_ = b->times.prof_ns[LLMB_PROF_QUANT_X]; \
        __VA_ARGS__;                                                            \
        if (b->p.profile)                                                       \
            b->times.prof_ns[LLMB_PROF_MATMUL] += llmb_now_ns() - t_ - (b->times.prof_ns[LLMB_PROF_QUANT_X] - q_); \
    } while (0)

// the rows among sequence s's tokens (b->row_at), the index of its first in *first
static int seq_rows(const llmb_backend *b, const llmb_batch *bt, int s, int *first) {
    int count = 0;
    for (int i = bt->q_start[s]; i < bt->q_start[s] + bt->q_len[s]; i++)
        if (b->row_at[i] >= 0) *first = count++ ? *first : b->row_at[i];
    return count;
}

// The last layer's output is read only at the logits rows: its keys and values are needed at every token (later
// tokens attend to them), its queries, attention, output product and feed-forward only at the rows (llama.cpp
// skips the same work). rows_batch makes the batch of the rows' tokens alone, in ascending order (each token's
// operations are the same whatever else is in its batch, so the rows get the same bits), in *rb; NULL where every
// token is a row, or where the kept sequences' block tables find no memory (the whole layer then runs).
static const llmb_batch *rows_batch(llmb_backend *b, const llmb_batch *bt, llmb_batch *rb) {
    const int n = bt->n_tok;
    if (bt->n_rows >= n) return NULL;
    for (int i = 0; i < n; i++) b->row_at[i] = -1;
    for (int r = 0; r < bt->n_rows; r++) b->row_at[bt->rows[r]] = 0;
    int nk = 0;
    for (int i = 0; i < n; i++)
        if (b->row_at[i] >= 0) {
            b->row_at[i] = nk, b->kept[nk] = i, b->kept_pos[nk] = bt->pos[i], b->kept_slots[nk] = bt->slots[i];
            b->kept_tokens[nk++] = bt->tokens[i];
        }
    if (nk == n) return NULL;
    // the kept sequences; from the first without a row on, their rows of the block tables copied (the ones before
    // it are the tables' first rows as they are)
    const int32_t *tables = bt->block_tables;
    const size_t mb = (size_t)bt->max_blocks;
    int ns = 0, nd = 0, first = 0;
    for (int s = 0; s < bt->n_seq; s++) {
        const int count = seq_rows(b, bt, s, &first);
        if (!count) {
            if (tables == bt->block_tables) {
                const size_t need = (size_t)bt->n_seq * mb;
                if (need > b->kept_tables_cap) {
                    int32_t *t = realloc(b->kept_tables, need * sizeof *t);
                    if (!t) return NULL;
                    b->kept_tables = t, b->kept_tables_cap = need;
                }
                memcpy(b->kept_tables, bt->block_tables, (size_t)ns * mb * sizeof(int32_t));
                tables = b->kept_tables;
            }
            continue;
        }
        b->kept_q_start[ns] = first, b->kept_q_len[ns] = count, b->kept_pos0[ns] = bt->pos0[s];
        if (tables != bt->block_tables)
            memcpy(b->kept_tables + (size_t)ns * mb, bt->block_tables + (size_t)s * mb, mb * sizeof(int32_t));
        nd += s < bt->n_decode;
        ns++;
    }
    *rb = (llmb_batch){.n_tok = nk, .tokens = b->kept_tokens, .pos = b->kept_pos, .slots = b->kept_slots, .n_seq = ns,
                       .n_decode = nd, .q_start = b->kept_q_start, .q_len = b->kept_q_len, .pos0 = b->kept_pos0,
                       .block_tables = tables, .max_blocks = bt->max_blocks};
    return rb;
}

// n rows of `cols` floats at a: row kept[j] to row j, j ascending (kept ascends, so no row is overwritten before
// it moves)
static void compact_rows(float *a, int64_t cols, const int32_t *kept, int n) {
    for (int j = 0; j < n; j++)
        if (kept[j] != j) memmove(a + j * cols, a + (int64_t)kept[j] * cols, (size_t)cols * sizeof(float));
}

static llmb_status cpu_forward(llmb_backend *b, const llmb_batch *bt, llmb_forward_out *out) {
    const uint64_t t0 = llmb_now_ns();
    const llmb_model *m = b->model;
    const llmb_model_config *c = &m->cfg;
    const int hd = c->head_dim, n = bt->n_tok, n_rows = bt->n_rows;
    const int64_t dim = c->dim, q_dim = (int64_t)c->n_head * hd, kv_dim = (int64_t)c->n_head_kv * hd, ff = c->ff;
    *out = (llmb_forward_out){0};
    if (!b->kv) return llmb_fail(LLMB_E_ARG, "cpu backend: forward before kv_alloc");
    if (n < 1 || n > b->p.max_batch_tokens || n_rows < 0 || n_rows > b->p.max_rows || bt->n_seq < 1 ||
        bt->n_seq > b->p.max_seqs || bt->temperature)
        return llmb_fail(LLMB_E_ARG, "cpu backend: a batch of %d tokens, %d rows, %d sequences%s does not fit "
                                     "(at most %d, %d, %d; sampling is the engine's)", n, n_rows, bt->n_seq,
                         bt->temperature ? " with sampling arrays" : "", b->p.max_batch_tokens, b->p.max_rows,
                         b->p.max_seqs);
    const llmb_quant_traits *eq = llmb_quant_traits_get(m->tok_embd.type);
    llmb_matmul_ctx *mm = &b->mm;
    // this step's threads: one while the cores are contended (below)
    b->mm.nthreads = b->times.host_threads = llmb_cpu_monitor_threads(&b->cores, t0);
    if (b->p.profile) {   // the kinds of this step alone
        memset(b->times.prof_ns, 0, sizeof b->times.prof_ns);
        memset(b->times.prof_type_ns, 0, sizeof b->times.prof_type_ns);
    }
    int par = b->mm.nthreads > 1 && (int64_t)n * dim >= PAR_VALUES;
    llmb_batch rb;
    const llmb_batch *last_bt = rows_batch(b, bt, &rb);   // the last layer's queries and outputs: the rows alone
    TIMED(LLMB_PROF_EMBED, PER_TOKEN(i, n, {
        eq->to_float((const char *)m->tok_embd.data + (size_t)bt->tokens[i] * m->tok_embd.row_bytes, b->x + i * dim, dim);
        if (c->embd_scale != 1.0f)
            for (int64_t d = 0; d < dim; d++) b->x[i * dim + d] *= c->embd_scale;
        llmb_rope_table(b->cs + i * hd, hd, bt->pos[i], c->rope_scale, b->rope_f, m->rope_freqs);
        if (b->cs_swa) llmb_rope_table(b->cs_swa + i * hd, hd, bt->pos[i], 1.0f, b->rope_f_swa, m->rope_freqs);
    }));
    for (int l = 0; l < c->n_layer; l++) {
        const cpu_layer *L = &b->layers[l];
        // the last layer of a step with rows_batch: keys and values of every token, the rest for the rows' tokens
        // (kept) alone, moved to the first nq places of x, xn, q and k
        const int last = last_bt && l == c->n_layer - 1, nq = last ? last_bt->n_tok : n;
        const int32_t *kept = b->kept;
        // ---- attention ----
        if (l == 0)   // later layers': with the residual add that ends the layer before
            TIMED(LLMB_PROF_NORM, PER_TOKEN(i, n, llmb_rmsnorm(b->xn + i * dim, b->x + i * dim, L->m->attn_norm, dim,
                                                               c->norm_eps)));
        if (!last)
            PRODUCT(llmb_matmul_n(mm, 3, (const llmb_cpu_weight *[]){&L->wq, &L->wk, &L->wv}, b->xn, dim, n,
                                  (float *[]){b->q, b->k, b->v}, (int64_t[]){q_dim, kv_dim, kv_dim}));
        else {
            PRODUCT(llmb_matmul_n(mm, 2, (const llmb_cpu_weight *[]){&L->wk, &L->wv}, b->xn, dim, n,
                                  (float *[]){b->k, b->v}, (int64_t[]){kv_dim, kv_dim}));
            TIMED(LLMB_PROF_ELEMENTWISE, {
                compact_rows(b->xn, dim, kept, nq);
                compact_rows(b->x, dim, kept, nq);
            });
            if (nq) PRODUCT(llmb_matmul(mm, &L->wq, b->xn, dim, nq, b->q, q_dim));
        }
        TIMED(LLMB_PROF_ELEMENTWISE, {
            add_bias(b->q, L->m->bq, nq, q_dim);
            add_bias(b->k, L->m->bk, n, kv_dim);
            add_bias(b->v, L->m->bv, n, kv_dim);
        });
        if (L->m->attn_q_norm)   // gemma3: RMSNorm of every query and key head
            TIMED(LLMB_PROF_NORM, PER_TOKEN(i, n, {
                for (int h = 0; h < c->n_head && i < nq; h++)
                    llmb_rmsnorm(b->q + i * q_dim + h * hd, b->q + i * q_dim + h * hd, L->m->attn_q_norm, hd, c->norm_eps);
                for (int h = 0; h < c->n_head_kv; h++)
                    llmb_rmsnorm(b->k + i * kv_dim + h * hd, b->k + i * kv_dim + h * hd, L->m->attn_k_norm, hd,
                                 c->norm_eps);
            }));
        const float *cs = L->m->swa && b->cs_swa ? b->cs_swa : b->cs;
        TIMED(LLMB_PROF_ROPE_KV, PER_TOKEN(i, n, {
            if (i < nq) llmb_rope(b->q + i * q_dim, c->n_head, hd, cs + (last ? kept[i] : i) * hd, c->rope_neox);
            llmb_rope(b->k + i * kv_dim, c->n_head_kv, hd, cs + i * hd, c->rope_neox);
            for (int h = 0; h < c->n_head_kv; h++) store_value(b, bt, l, (int)i, h, b->v + i * kv_dim);
            // a paged unit stores its keys itself (attend_unit), but the last layer's units hold only the rows
            if (last || !paged_seq(b, bt, seq_of(bt, i)))
                for (int h = 0; h < c->n_head_kv; h++) store_key(b, bt, l, (int)i, h, b->k + i * kv_dim);
        }));
        if (last) {   // the rows' tokens from here on (a paged unit of last_bt stores its keys again: the same bytes)
            if (!nq) break;
            compact_rows(b->k, kv_dim, kept, nq);
            par = b->mm.nthreads > 1 && (int64_t)nq * dim >= PAR_VALUES;
        }
        TIMED(LLMB_PROF_ATTENTION, attention(b, last ? last_bt : bt, l));
        PRODUCT(llmb_matmul(mm, &L->wo, b->att, q_dim, nq, b->proj, dim));
        if (L->m->post_attn_norm)
            TIMED(LLMB_PROF_NORM, PER_TOKEN(i, nq, llmb_rmsnorm(b->proj + i * dim, b->proj + i * dim, L->m->post_attn_norm,
                                                                dim, c->norm_eps)));
        // ---- feed-forward ---- (the residual add, then the norm, token by token)
        TIMED(LLMB_PROF_NORM, PER_TOKEN(i, nq, llmb_add_rmsnorm(b->xn + i * dim, b->x + i * dim, b->proj + i * dim,
                                                                L->m->ffn_norm, dim, c->norm_eps)));
        PRODUCT(llmb_matmul_n(mm, 2, (const llmb_cpu_weight *[]){&L->w_gate, &L->w_up}, b->xn, dim, nq,
                              (float *[]){b->gate, b->up}, (int64_t[]){ff, ff}));
        if (c->ffn_gelu) TIMED(LLMB_PROF_ELEMENTWISE, PER_TOKEN(i, nq, llmb_geglu(b->gate + i * ff, b->up + i * ff, ff)));
        else TIMED(LLMB_PROF_ELEMENTWISE, PER_TOKEN(i, nq, llmb_swiglu(b->gate + i * ff, b->up + i * ff, ff)));
        PRODUCT(llmb_matmul(mm, &L->w_down, b->gate, ff, nq, b->proj, dim));
        if (L->m->post_ffn_norm)
            TIMED(LLMB_PROF_NORM, PER_TOKEN(i, nq, llmb_rmsnorm(b->proj + i * dim, b->proj + i * dim, L->m->post_ffn_norm,
                                                                dim, c->norm_eps)));
        if (l + 1 < c->n_layer)   // the residual add and the next layer's first norm
            TIMED(LLMB_PROF_NORM, PER_TOKEN(i, nq, llmb_add_rmsnorm(b->xn + i * dim, b->x + i * dim, b->proj + i * dim,
                                                                    b->layers[l + 1].m->attn_norm, dim, c->norm_eps)));
        else TIMED(LLMB_PROF_ELEMENTWISE, PER_TOKEN(i, nq * dim, b->x[i] += b->proj[i]));
    }
    // a row's residual stream: at its token, or (rows_batch) at its place among the rows' tokens
    TIMED(LLMB_PROF_NORM, for (int r = 0; r < n_rows; r++)
                              llmb_rmsnorm(b->xl + r * dim, b->x + (int64_t)(last_bt ? b->row_at[bt->rows[r]] : bt->rows[r]) * dim,
                                           m->output_norm, dim, c->norm_eps));
    if (n_rows) PRODUCT(llmb_matmul(mm, &b->output, b->xl, dim, n_rows, b->logits, c->vocab));
    out->logits = b->logits;
    const uint64_t t1 = llmb_now_ns();
    b->times.forward_ms = (double)(t1 - t0) / 1e6;
    b->times.steps++;
    llmb_cpu_monitor_step(&b->cores, b->mm.nthreads, t1);
    b->times.solo_steps = b->cores.solo_steps;
    return LLMB_OK;
}

// ---- facts ----

static llmb_status cpu_memory(llmb_backend *b, llmb_backend_memory *out) {
    *out = (llmb_backend_memory){(size_t)((int64_t)b->model->weight_bytes + b->weights_delta), b->kv_bytes,
                                 b->scratch_bytes, 0, 0, 0};
    out->peak = out->weights + out->kv + out->scratch;  // all held from create and kv_alloc on
    return LLMB_OK;
}

static llmb_status cpu_times(llmb_backend *b, llmb_backend_times *out) {
    *out = b->times;
    return LLMB_OK;
}

static const llmb_backend_ops cpu_ops = {"cpu", 0, cpu_create, cpu_destroy, cpu_kv_alloc, cpu_kv_copy, cpu_forward,
                                         cpu_memory, cpu_times};

const llmb_backend_ops *llmb_backend_cpu(void) { return &cpu_ops; }
