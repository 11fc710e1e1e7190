// engine.c — sequences, paged KV block tables, scheduler, sampler and event log (engine.h), written
// once for every backend.
//
// Each step admits waiting requests whose KV blocks fit (blocks for prompt + max_tokens are taken
// at admission, so a running sequence never runs out; a fork shares its parent's full blocks and
// has the backend copy the partial one), then builds one batch (an llmb_batch of backend.h): a
// decode token for every running sequence, then prefill chunks of the others up to the token
// budget. The backend's forward() runs the model over it (backend_cpu.c: host threads; the engine
// never touches KV memory or activations) and hands back logits for the rows that need them; the
// engine samples on the host and logs events. Every per-token computation of a backend has a fixed
// order, so a sequence's tokens do not depend on what else is in the batch.
// Tested by tests/test_engine.py (reference forward pass, stories260K greedy story, batch
// invariance, prefix forks, sampler, backend selection), tests/test_sampling.py and
// csrc/tests/test_engine.c.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "engine.h"
#include "internal.h"
#include "model.h"
#include "quants.h"
#include "sampler.h"

#define MAX_TOPN 20

enum { SEQ_WAITING = 0, SEQ_RUNNING = 1, SEQ_FINISHED = 2 };

typedef struct {
    int64_t id;
    int state;
    int32_t *tokens;          // prompt, then generated tokens
    int n_tokens, cap_tokens, n_prompt;
    int n_computed;           // tokens whose K/V are in the cache
    int n_generated;
    llmb_sampling s;
    int32_t *stop;            // copy of s.stop_tokens
    int32_t *blocks;          // block table
    int n_blocks;
    int64_t fork_from;
    uint64_t rng;
    float *prompt_lp;
    uint8_t *prompt_greedy;
    int32_t *prompt_top;      // argmax token of each scored prompt position
    float *prompt_top_lp;     // and its logprob
    int32_t *alt;             // copy of s.alt_tokens
    float *alt_lp;            // their logprobs and greedy flags in place of the last prompt token
    uint8_t *alt_greedy;
    float *prompt_logits;
    int admitted;
} seq_t;

// A request that only scores its prompt (nothing to generate, no KV cache kept, no prompt logits)
// never feeds its last token: only the logits before it are read. So the window it scores may be
// one token longer than ctx, as lm-evaluation-harness's is (max_length + 1 tokens, the last not fed).
static int score_only(const llmb_sampling *sp) {
    return sp->max_tokens == 0 && !sp->hold && !sp->prompt_logits && sp->prompt_logprobs_from >= 0;
}

// The positions of `s` that run: all its tokens, but for the last prompt token of a score-only request.
static int run_len(const seq_t *s) { return s->n_tokens - score_only(&s->s); }

// The positions a request of n_prompt tokens runs over its whole life: what ctx and its KV blocks must hold.
static int64_t life_len(const llmb_sampling *sp, int n_prompt) {
    return (int64_t)n_prompt - score_only(sp) + sp->max_tokens;
}

// One token of the batch being computed.
typedef struct {
    seq_t *seq;
    int pos;
    int logit_row;            // row in the logits the backend returns, or -1
} item_t;

struct llmb_engine {
    llmb_model *model;
    llmb_engine_params p;
    const llmb_backend_ops *ops;
    llmb_backend *b;          // the backend: weights, the KV pool's bytes, scratch, the forward step
    llmb_backend_memory mem;  // what it holds, asked once after kv_alloc
    int kv_type;
    size_t kv_row_bytes;      // one token's K (or V) of one layer
    int32_t *block_ref;       // reference count per block
    int32_t *free_list;
    int64_t n_free;
    // sequences
    seq_t **by_id;            // index = id; NULL once released
    int64_t n_ids, cap_ids;
    int64_t *waiting;         // FIFO of ids
    int64_t n_waiting, cap_waiting;
    seq_t **running;
    int n_running;
    // batch
    item_t *items;
    int max_logit_rows;
    int max_blocks;           // block table row length: blocks of the longest sequence (ctx)
    int32_t *tokens, *pos, *slots;      // (max_batch_tokens) the llmb_batch arrays
    int32_t *q_start, *q_len, *pos0;    // (max_seqs)
    int32_t *block_tables;              // (max_seqs, max_blocks)
    int32_t *rows;                      // (max_logit_rows)
    llmb_batch batch;
    const float *logits;      // the backend's logits of the last step, (n_rows, vocab), or NULL when
    const int32_t *dev_ids;   // it sampled on the device: each row's token
    const float *dev_lp;      // and its log-probability
    float *smp_temp, *smp_top_p, *smp_min_p, *smp_u; // (max_logit_rows) a device-sampled step's parameters
    int32_t *smp_top_k;
    // sampler: one scratch per thread (rows are sampled in parallel), and per row sampled this step
    llmb_sampler *sampler;    // one working memory per thread (sampler.c)
    int *samp_items;          // the items sampled this step, in batch order
    int32_t *samp_tok;
    float *samp_lp;
    int32_t *samp_topn_id;    // (max_logit_rows, MAX_TOPN)
    float *samp_topn_lp;
    double *lse;              // log-sum-exp of each logits row that needs one this step
    int *lse_rows;            // those rows
    int *lse_am;              // and the argmax of each (the first of the largest)
    // events
    llmb_event *ev;
    int32_t *ev_topn_id;
    float *ev_topn_lp;
    int64_t n_ev, ev_head, cap_ev;
    llmb_engine_stats stats;
};

// ---- small helpers ----

static void *xcalloc(size_t n, size_t sz, int *oom) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) *oom = 1;
    return p;
}

static int grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return 0;
    int64_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}


static int push_event(llmb_engine *e, int64_t seq, int kind, int32_t token, float lp) {
    if (e->n_ev + 1 > e->cap_ev) {  // the top-n arrays follow the log's capacity (grown by doubling)
        if (grow((void **)&e->ev, &e->cap_ev, e->n_ev + 1, sizeof *e->ev)) return -1;
        int64_t cap = e->cap_ev;
        void *a = realloc(e->ev_topn_id, (size_t)cap * MAX_TOPN * sizeof *e->ev_topn_id);
        if (a) e->ev_topn_id = a;
        void *b = realloc(e->ev_topn_lp, (size_t)cap * MAX_TOPN * sizeof *e->ev_topn_lp);
        if (b) e->ev_topn_lp = b;
        if (!a || !b) return -1;
    }
    e->ev[e->n_ev] = (llmb_event){seq, kind, token, lp, llmb_now_ns()};
    for (int i = 0; i < MAX_TOPN; i++) {
        e->ev_topn_id[e->n_ev * MAX_TOPN + i] = -1;
        e->ev_topn_lp[e->n_ev * MAX_TOPN + i] = -INFINITY;
    }
    e->n_ev++;
    return 0;
}

// ---- KV blocks (the backend holds their bytes) ----

static int32_t block_alloc(llmb_engine *e) {
    int32_t b = e->free_list[--e->n_free];
    e->block_ref[b] = 1;
    return b;
}

static void block_unref(llmb_engine *e, int32_t b) {
    if (--e->block_ref[b] == 0) e->free_list[e->n_free++] = b;
}

// last block first, so that the free list hands them out again in the sequence's order (the CPU
// backend keeps each head's blocks side by side: consecutive blocks are one stream to read)
static void seq_free_blocks(llmb_engine *e, seq_t *s) {
    for (int i = s->n_blocks - 1; i >= 0; i--) block_unref(e, s->blocks[i]);
    s->n_blocks = 0;
}

static int blocks_for(const llmb_engine *e, int n_tokens) {
    return (n_tokens + e->p.block_size - 1) / e->p.block_size;
}

// ---- engine lifetime ----

// The backend named `name` (NULL: "cpu"), or NULL with the reason recorded.
static const llmb_backend_ops *find_backend(const char *name, llmb_status *st) {
    *st = LLMB_OK;
    if (!name || !strcmp(name, "cpu")) return llmb_backend_cpu();
    if (!strcmp(name, "cuda")) {
        const llmb_backend_ops *ops = llmb_backend_cuda();
        if (!ops) *st = LLMB_E_BACKEND;  // its reason is recorded
        return ops;
    }
    *st = llmb_fail(LLMB_E_ARG, "engine: no backend named '%.64s' (built in: cpu, cuda)", name);
    return NULL;
}

llmb_status llmb_engine_create(const llmb_gguf *g, const llmb_engine_params *p, llmb_engine **out) {
    *out = NULL;
    llmb_status s;
    llmb_engine *e = calloc(1, sizeof *e);
    if (!e) return llmb_fail(LLMB_E_NOMEM, "engine: out of memory");
    s = llmb_model_load(g, &e->model);
    if (s) {
        free(e);
        return s;
    }
    // a model the CUDA backend cannot run is refused as such, on machines with or without a GPU
    if (p->backend && !strcmp(p->backend, "cuda") && (s = llmb_backend_cuda_check(e->model))) {
        llmb_model_free(e->model);
        free(e);
        return s;
    }
    const llmb_backend_ops *ops = find_backend(p->backend, &s);
    if (!ops) {
        llmb_model_free(e->model);
        free(e);
        return s;
    }
    e->p = *p;
    e->p.backend = NULL;  // not kept: the caller's string
    e->p.device_sampling = p->device_sampling && ops->samples;
    e->ops = ops;
    const llmb_model_config *c = &e->model->cfg;
    if (p->block_size < 1 || p->block_size > 4096 || p->n_blocks < 1 || p->ctx < 1 || p->max_batch_tokens < 1 ||
        p->max_seqs < 1 || p->n_threads < 1) {
        llmb_engine_free(e);
        return llmb_fail(LLMB_E_ARG, "engine: block_size, n_blocks, ctx, max_batch_tokens, max_seqs and threads must be "
                                     "positive (got %d, %lld, %d, %d, %d, %d)", p->block_size, (long long)p->n_blocks,
                         p->ctx, p->max_batch_tokens, p->max_seqs, p->n_threads);
    }
    if (p->n_blocks > INT32_MAX / p->block_size) {  // slots are int32 (llmb_batch)
        llmb_engine_free(e);
        return llmb_fail(LLMB_E_ARG, "engine: %lld KV blocks of %d tokens exceed 2^31 slots; lower kv_budget",
                         (long long)p->n_blocks, p->block_size);
    }
    if (c->sliding_window > 0 && p->ctx > c->sliding_window) {
        const int w = c->sliding_window, want = p->ctx;
        llmb_engine_free(e);
        return llmb_fail(LLMB_E_UNSUPPORTED, "engine: this model attends over a sliding window of %d tokens, which "
                                             "llmbench does not implement; up to %d tokens it is full attention, so use "
                                             "ctx <= %d (asked for %d)", w, w, w, want);
    }
    e->kv_type = p->kv_type;
    int kv_dim = c->n_head_kv * c->head_dim;
    if (e->kv_type == LLMB_TYPE_Q8_0 && c->head_dim % 32) {
        int hd = c->head_dim;
        llmb_engine_free(e);
        return llmb_fail(LLMB_E_UNSUPPORTED, "engine: a Q8_0 KV cache needs a head size that is a multiple of 32; "
                                             "this model's is %d (use kv_dtype f16 or f32)", hd);
    }
    if (e->kv_type != LLMB_TYPE_F32 && e->kv_type != LLMB_TYPE_F16 && e->kv_type != LLMB_TYPE_Q8_0) {
        llmb_engine_free(e);
        return llmb_fail(LLMB_E_ARG, "engine: KV cache type %d is not one of F32, F16, Q8_0", e->kv_type);
    }
    const llmb_type_traits *kt = llmb_type_traits_get(e->kv_type);
    e->kv_row_bytes = (size_t)(kv_dim / kt->blck_size * kt->type_size);
    int n = p->max_batch_tokens;
    e->max_logit_rows = p->max_seqs + 64 < n ? p->max_seqs + 64 : n;
    e->max_blocks = blocks_for(e, p->ctx);
    const llmb_backend_params bp = {.device = p->device, .n_threads = p->n_threads, .float_act = p->float_act,
                                    .max_batch_tokens = n, .max_seqs = p->max_seqs, .ctx = p->ctx,
                                    .graphs = p->graphs, .max_rows = e->max_logit_rows, .bf16 = p->bf16,
                                    .profile = p->profile};
    if ((s = ops->create(e->model, &bp, &e->b)) || (s = ops->kv_alloc(e->b, e->kv_type, p->block_size, p->n_blocks)) ||
        (s = ops->memory(e->b, &e->mem))) {
        llmb_engine_free(e);
        return s;
    }
    int oom = 0;
    e->block_ref = xcalloc((size_t)p->n_blocks, sizeof *e->block_ref, &oom);
    e->free_list = xcalloc((size_t)p->n_blocks, sizeof *e->free_list, &oom);
    e->items = xcalloc((size_t)n, sizeof *e->items, &oom);
    e->running = xcalloc((size_t)p->max_seqs, sizeof *e->running, &oom);
    e->tokens = xcalloc((size_t)n, sizeof *e->tokens, &oom);
    e->pos = xcalloc((size_t)n, sizeof *e->pos, &oom);
    e->slots = xcalloc((size_t)n, sizeof *e->slots, &oom);
    e->q_start = xcalloc((size_t)p->max_seqs, sizeof *e->q_start, &oom);
    e->q_len = xcalloc((size_t)p->max_seqs, sizeof *e->q_len, &oom);
    e->pos0 = xcalloc((size_t)p->max_seqs, sizeof *e->pos0, &oom);
    e->block_tables = xcalloc((size_t)p->max_seqs * (size_t)e->max_blocks, sizeof *e->block_tables, &oom);
    e->rows = xcalloc((size_t)e->max_logit_rows, sizeof *e->rows, &oom);
    e->smp_temp = xcalloc((size_t)e->max_logit_rows, sizeof *e->smp_temp, &oom);
    e->smp_top_p = xcalloc((size_t)e->max_logit_rows, sizeof *e->smp_top_p, &oom);
    e->smp_min_p = xcalloc((size_t)e->max_logit_rows, sizeof *e->smp_min_p, &oom);
    e->smp_u = xcalloc((size_t)e->max_logit_rows, sizeof *e->smp_u, &oom);
    e->smp_top_k = xcalloc((size_t)e->max_logit_rows, sizeof *e->smp_top_k, &oom);
    if (!(e->sampler = llmb_sampler_create(c->vocab, p->n_threads))) oom = 1;
    e->samp_items = xcalloc((size_t)e->max_logit_rows, sizeof *e->samp_items, &oom);
    e->samp_tok = xcalloc((size_t)e->max_logit_rows, sizeof *e->samp_tok, &oom);
    e->samp_lp = xcalloc((size_t)e->max_logit_rows, sizeof *e->samp_lp, &oom);
    e->samp_topn_id = xcalloc((size_t)e->max_logit_rows * MAX_TOPN, sizeof *e->samp_topn_id, &oom);
    e->samp_topn_lp = xcalloc((size_t)e->max_logit_rows * MAX_TOPN, sizeof *e->samp_topn_lp, &oom);
    e->lse = xcalloc((size_t)e->max_logit_rows, sizeof *e->lse, &oom);
    e->lse_rows = xcalloc((size_t)e->max_logit_rows, sizeof *e->lse_rows, &oom);
    e->lse_am = xcalloc((size_t)e->max_logit_rows, sizeof *e->lse_am, &oom);
    if (oom) {
        int vocab = c->vocab;
        llmb_engine_free(e);
        return llmb_fail(LLMB_E_NOMEM, "engine: out of memory for the batch and sampler (max_batch_tokens %d, vocab %d)",
                         n, vocab);
    }
    e->batch = (llmb_batch){.tokens = e->tokens, .pos = e->pos, .slots = e->slots, .q_start = e->q_start,
                            .q_len = e->q_len, .pos0 = e->pos0, .block_tables = e->block_tables,
                            .max_blocks = e->max_blocks, .rows = e->rows};
    for (int64_t b = 0; b < p->n_blocks; b++) e->free_list[b] = (int32_t)(p->n_blocks - 1 - b);
    e->n_free = p->n_blocks;
    llmb_omp_release();   // the steps may run on another thread than this one (cpu.c, llmb_omp_release)
    *out = e;
    return LLMB_OK;
}

static void seq_destroy(seq_t *s) {
    if (!s) return;
    free(s->tokens);
    free(s->stop);
    free(s->blocks);
    free(s->prompt_lp);
    free(s->prompt_greedy);
    free(s->prompt_top);
    free(s->prompt_top_lp);
    free(s->alt);
    free(s->alt_lp);
    free(s->alt_greedy);
    free(s->prompt_logits);
    free(s);
}

void llmb_engine_free(llmb_engine *e) {
    if (!e) return;
    for (int64_t i = 0; i < e->n_ids; i++) seq_destroy(e->by_id[i]);
    free(e->by_id);
    free(e->waiting);
    free(e->running);
    free(e->items);
    int32_t *arrays[] = {e->tokens, e->pos, e->slots, e->q_start, e->q_len, e->pos0, e->block_tables, e->rows};
    for (size_t i = 0; i < sizeof arrays / sizeof *arrays; i++) free(arrays[i]);
    llmb_sampler_free(e->sampler);
    void *bufs[] = {e->samp_items, e->samp_tok, e->samp_lp, e->samp_topn_id, e->samp_topn_lp, e->lse,
                    e->lse_rows, e->lse_am, e->smp_temp, e->smp_top_p, e->smp_min_p, e->smp_u, e->smp_top_k};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) free(bufs[i]);
    free(e->ev);
    free(e->ev_topn_id);
    free(e->ev_topn_lp);
    free(e->block_ref);
    free(e->free_list);
    if (e->b) e->ops->destroy(e->b);
    llmb_model_free(e->model);
    free(e);
}

void llmb_engine_model_info(const llmb_engine *e, llmb_model_facts *out) {
    const llmb_model_config *c = &e->model->cfg;
    *out = (llmb_model_facts){.n_layer = c->n_layer, .dim = c->dim, .n_head = c->n_head, .n_head_kv = c->n_head_kv,
                              .head_dim = c->head_dim, .ff = c->ff, .vocab = c->vocab, .ctx_train = c->ctx_train,
                              .tied_output = c->tied_output};
    memcpy(out->arch, c->arch, sizeof out->arch);
}

uint64_t llmb_engine_weight_bytes(const llmb_engine *e) { return e->mem.weights; }
uint64_t llmb_engine_kv_token_bytes(const llmb_engine *e) { return 2 * (uint64_t)e->model->cfg.n_layer * e->kv_row_bytes; }
uint64_t llmb_engine_kv_bytes(const llmb_engine *e) { return e->mem.kv; }
uint64_t llmb_engine_scratch_bytes(const llmb_engine *e) { return e->mem.scratch; }
const char *llmb_engine_backend(const llmb_engine *e) { return e->ops->name; }

llmb_status llmb_engine_memory(llmb_engine *e, llmb_memory_info *out) {
    llmb_backend_memory m;
    llmb_status s = e->ops->memory(e->b, &m);
    if (s) return s;
    *out = (llmb_memory_info){.weights = m.weights, .kv = m.kv, .scratch = m.scratch, .peak = m.peak,
                              .device_free = m.device_free, .device_total = m.device_total};
    return LLMB_OK;
}
int64_t llmb_engine_free_blocks(const llmb_engine *e) { return e->n_free; }
void llmb_engine_get_stats(const llmb_engine *e, llmb_engine_stats *st) { *st = e->stats; }
void llmb_engine_reset_stats(llmb_engine *e) { memset(&e->stats, 0, sizeof e->stats); }

// What the engine's own timing costs: the mean time of one clock read and of one logged event (the
// real push_event, into the real log, taken back out afterwards), over n of each.
llmb_status llmb_engine_timing_cost(llmb_engine *e, int n, double *clock_ns, double *event_ns) {
    if (n < 1) return llmb_fail(LLMB_E_ARG, "engine: timing_cost needs n >= 1, got %d", n);
    volatile uint64_t sink = 0;
    uint64_t t0 = llmb_now_ns();
    for (int i = 0; i < n; i++) sink += llmb_now_ns();
    uint64_t t1 = llmb_now_ns();
    int64_t n_ev = e->n_ev;
    for (int i = 0; i < n; i++)
        if (push_event(e, -1, LLMB_EV_TOKEN, 0, 0.0f)) {
            e->n_ev = n_ev;
            return llmb_fail(LLMB_E_NOMEM, "engine: out of memory");
        }
    uint64_t t2 = llmb_now_ns();
    e->n_ev = n_ev;
    (void)sink;
    *clock_ns = (double)(t1 - t0) / n;
    *event_ns = (double)(t2 - t1) / n;
    return LLMB_OK;
}

// ---- requests ----

static seq_t *get_seq(llmb_engine *e, int64_t id) {
    return id >= 0 && id < e->n_ids ? e->by_id[id] : NULL;
}

llmb_status llmb_engine_add(llmb_engine *e, const int32_t *prompt, int n_prompt, const llmb_sampling *sp,
                            int64_t fork_from, int64_t *seq_out) {
    const llmb_model_config *c = &e->model->cfg;
    if (n_prompt < 1) return llmb_fail(LLMB_E_ARG, "engine: a prompt needs at least one token");
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab)
            return llmb_fail(LLMB_E_ARG, "engine: prompt token %d at position %d is outside the vocabulary (0..%d)",
                             prompt[i], i, c->vocab - 1);
    if (sp->max_tokens < 0 || sp->min_tokens < 0 || sp->n_logprobs < 0 || sp->n_logprobs > MAX_TOPN)
        return llmb_fail(LLMB_E_ARG, "engine: max_tokens and min_tokens must be >= 0 and logprobs 0..%d", MAX_TOPN);
    const int64_t life = life_len(sp, n_prompt);
    if (life > e->p.ctx)
        return llmb_fail(LLMB_E_ARG, "engine: prompt (%d tokens%s) + max_tokens (%d) exceeds the context of %d tokens",
                         n_prompt, score_only(sp) ? ", the last only scored" : "", sp->max_tokens, e->p.ctx);
    int need = blocks_for(e, (int)life);
    if (need > e->p.n_blocks)
        return llmb_fail(LLMB_E_ARG, "engine: the request needs %d KV blocks but the cache has only %lld; raise kv_budget",
                         need, (long long)e->p.n_blocks);
    if (sp->prompt_logprobs_from >= n_prompt)
        return llmb_fail(LLMB_E_ARG, "engine: prompt_logprobs_from %d is past the prompt (%d tokens)",
                         sp->prompt_logprobs_from, n_prompt);
    if (sp->n_alt_tokens < 0 || (sp->n_alt_tokens && (!sp->alt_tokens || sp->prompt_logprobs_from < 0 ||
                                                      sp->prompt_logprobs_from >= n_prompt - 1)))
        return llmb_fail(LLMB_E_ARG, "engine: alt_tokens replace the last prompt token where it is scored: they need "
                                     "0 <= prompt_logprobs_from < n_prompt - 1 (%d, %d tokens)",
                         sp->prompt_logprobs_from, n_prompt);
    for (int i = 0; i < sp->n_alt_tokens; i++)
        if (sp->alt_tokens[i] < 0 || sp->alt_tokens[i] >= c->vocab)
            return llmb_fail(LLMB_E_ARG, "engine: alt token %d (%d) is outside the vocabulary (0..%d)", i,
                             sp->alt_tokens[i], c->vocab - 1);
    if (fork_from >= 0) {
        seq_t *par = get_seq(e, fork_from);
        if (!par || par->state != SEQ_FINISHED || !par->s.hold || par->n_blocks == 0)
            return llmb_fail(LLMB_E_ARG, "engine: cannot fork sequence %lld: it must be finished with hold=1 and not released",
                             (long long)fork_from);
    }
    seq_t *s = calloc(1, sizeof *s);
    int oom = !s;
    if (s) {
        s->cap_tokens = n_prompt + sp->max_tokens;
        s->tokens = xcalloc((size_t)s->cap_tokens, sizeof *s->tokens, &oom);
        s->stop = xcalloc((size_t)sp->n_stop_tokens, sizeof *s->stop, &oom);
        s->blocks = xcalloc((size_t)need, sizeof *s->blocks, &oom);
        if (sp->prompt_logprobs_from >= 0) {
            size_t m = (size_t)(n_prompt - 1 - sp->prompt_logprobs_from);
            s->prompt_lp = xcalloc(m, sizeof(float), &oom);
            s->prompt_greedy = xcalloc(m, 1, &oom);
            s->prompt_top = xcalloc(m, sizeof(int32_t), &oom);
            s->prompt_top_lp = xcalloc(m, sizeof(float), &oom);
        }
        if (sp->n_alt_tokens) {
            s->alt = xcalloc((size_t)sp->n_alt_tokens, sizeof *s->alt, &oom);
            s->alt_lp = xcalloc((size_t)sp->n_alt_tokens, sizeof *s->alt_lp, &oom);
            s->alt_greedy = xcalloc((size_t)sp->n_alt_tokens, 1, &oom);
        }
        if (sp->prompt_logits) s->prompt_logits = xcalloc((size_t)n_prompt * (size_t)c->vocab, sizeof(float), &oom);
    }
    if (oom || grow((void **)&e->by_id, &e->cap_ids, e->n_ids + 1, sizeof *e->by_id) ||
        grow((void **)&e->waiting, &e->cap_waiting, e->n_waiting + 1, sizeof *e->waiting)) {
        seq_destroy(s);
        return llmb_fail(LLMB_E_NOMEM, "engine: out of memory for a request of %d tokens", n_prompt);
    }
    memcpy(s->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    if (sp->n_stop_tokens) memcpy(s->stop, sp->stop_tokens, (size_t)sp->n_stop_tokens * sizeof *s->stop);
    if (sp->n_alt_tokens) memcpy(s->alt, sp->alt_tokens, (size_t)sp->n_alt_tokens * sizeof *s->alt);
    s->n_tokens = s->n_prompt = n_prompt;
    s->s = *sp;
    s->s.stop_tokens = s->stop;
    s->s.alt_tokens = s->alt;
    s->fork_from = fork_from;
    s->rng = mix64(sp->seed ^ 0x5851f42d4c957f2dull);
    s->id = e->n_ids;
    e->by_id[e->n_ids++] = s;
    e->waiting[e->n_waiting++] = s->id;
    if (push_event(e, s->id, LLMB_EV_ARRIVAL, 0, 0)) return llmb_fail(LLMB_E_NOMEM, "engine: out of memory");
    *seq_out = s->id;
    return LLMB_OK;
}

static void finish(llmb_engine *e, seq_t *s, int reason) {
    if (s->state == SEQ_RUNNING) {
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i] == s) {
                memmove(&e->running[i], &e->running[i + 1], (size_t)(e->n_running - i - 1) * sizeof *e->running);
                e->n_running--;
                break;
            }
    }
    s->state = SEQ_FINISHED;
    if (!s->s.hold) seq_free_blocks(e, s);
    push_event(e, s->id, LLMB_EV_FINISH, reason, 0);
}

llmb_status llmb_engine_abort(llmb_engine *e, int64_t id) {
    seq_t *s = get_seq(e, id);
    if (!s) return llmb_fail(LLMB_E_ARG, "engine: no sequence %lld", (long long)id);
    if (s->state == SEQ_FINISHED) return LLMB_OK;
    if (s->state == SEQ_WAITING) {
        for (int64_t i = 0; i < e->n_waiting; i++)
            if (e->waiting[i] == id) {
                memmove(&e->waiting[i], &e->waiting[i + 1], (size_t)(e->n_waiting - i - 1) * sizeof *e->waiting);
                e->n_waiting--;
                break;
            }
    }
    finish(e, s, LLMB_FINISH_ABORT);
    return LLMB_OK;
}

llmb_status llmb_engine_release(llmb_engine *e, int64_t id) {
    seq_t *s = get_seq(e, id);
    if (!s) return llmb_fail(LLMB_E_ARG, "engine: no sequence %lld (already released?)", (long long)id);
    if (s->state != SEQ_FINISHED) llmb_engine_abort(e, id);
    seq_free_blocks(e, s);
    seq_destroy(s);
    e->by_id[id] = NULL;
    return LLMB_OK;
}

// *out: the sequence whose n prompt scores are asked for, once they are all computed
static llmb_status scored_prompt(llmb_engine *e, int64_t id, int n, const seq_t **out) {
    const seq_t *s = get_seq(e, id);
    if (!s || !s->prompt_lp) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has no prompt logprobs", (long long)id);
    const int m = s->n_prompt - 1 - s->s.prompt_logprobs_from;
    if (n != m) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has %d prompt logprobs, not %d", (long long)id, m, n);
    if (s->n_computed < run_len(s)) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has not finished its prompt", (long long)id);
    *out = s;
    return LLMB_OK;
}

llmb_status llmb_engine_prompt_logprobs(llmb_engine *e, int64_t id, float *lp, uint8_t *greedy, int n) {
    const seq_t *s = NULL;
    const llmb_status st = scored_prompt(e, id, n, &s);
    if (st) return st;
    memcpy(lp, s->prompt_lp, (size_t)n * sizeof *lp);
    memcpy(greedy, s->prompt_greedy, (size_t)n);
    return LLMB_OK;
}

llmb_status llmb_engine_alt_logprobs(llmb_engine *e, int64_t id, float *lp, uint8_t *greedy, int n) {
    const seq_t *s = get_seq(e, id);
    if (!s || !s->alt_lp) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has no alt tokens", (long long)id);
    if (n != s->s.n_alt_tokens)
        return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has %d alt tokens, not %d", (long long)id, s->s.n_alt_tokens, n);
    if (s->n_computed < run_len(s)) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has not finished its prompt", (long long)id);
    memcpy(lp, s->alt_lp, (size_t)n * sizeof *lp);
    memcpy(greedy, s->alt_greedy, (size_t)n);
    return LLMB_OK;
}

llmb_status llmb_engine_prompt_top(llmb_engine *e, int64_t id, int32_t *ids, float *lp, int n) {
    const seq_t *s = NULL;
    const llmb_status st = scored_prompt(e, id, n, &s);
    if (st) return st;
    memcpy(ids, s->prompt_top, (size_t)n * sizeof *ids);
    memcpy(lp, s->prompt_top_lp, (size_t)n * sizeof *lp);
    return LLMB_OK;
}

llmb_status llmb_engine_prompt_logits(llmb_engine *e, int64_t id, float *out, int64_t n) {
    seq_t *s = get_seq(e, id);
    if (!s || !s->prompt_logits) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld kept no prompt logits", (long long)id);
    int64_t m = (int64_t)s->n_prompt * e->model->cfg.vocab;
    if (n != m) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has %lld prompt logits, not %lld", (long long)id,
                                 (long long)m, (long long)n);
    if (s->n_computed < s->n_prompt) return llmb_fail(LLMB_E_ARG, "engine: sequence %lld has not finished its prompt", (long long)id);
    memcpy(out, s->prompt_logits, (size_t)m * sizeof *out);
    return LLMB_OK;
}

int llmb_engine_poll(llmb_engine *e, llmb_event *out, int max, int32_t *topn_ids, float *topn_lp, int topn) {
    int n = 0;
    while (n < max && e->ev_head < e->n_ev) {
        int64_t i = e->ev_head++;
        out[n] = e->ev[i];
        for (int k = 0; topn_ids && k < topn && k < MAX_TOPN; k++) {
            topn_ids[n * topn + k] = e->ev_topn_id[i * MAX_TOPN + k];
            topn_lp[n * topn + k] = e->ev_topn_lp[i * MAX_TOPN + k];
        }
        n++;
    }
    if (e->ev_head == e->n_ev) e->ev_head = e->n_ev = 0;
    return n;
}

// ---- scheduling ----

// Admit a waiting sequence: take its KV blocks, sharing a forked parent's full blocks and having the
// backend copy the parent's partially filled last block (copy on write, done eagerly). 1: admitted,
// 0: its blocks do not fit yet, -1: the copy failed (*st says why; blocks returned).
static int admit(llmb_engine *e, seq_t *s, llmb_status *st) {
    int total = blocks_for(e, (int)life_len(&s->s, s->n_prompt));
    seq_t *par = s->fork_from >= 0 ? get_seq(e, s->fork_from) : NULL;
    int computed = 0;
    if (par && par->n_blocks) {
        int common = 0, lim = par->n_computed < s->n_prompt ? par->n_computed : s->n_prompt;
        while (common < lim && par->tokens[common] == s->tokens[common]) common++;
        computed = common < s->n_prompt - 1 ? common : s->n_prompt - 1;  // the last prompt token gives logits
        if (s->s.prompt_logprobs_from >= 0 && computed > s->s.prompt_logprobs_from) computed = s->s.prompt_logprobs_from;
        if (s->s.prompt_logits) computed = 0;
    }
    int shared = computed / e->p.block_size, partial = computed % e->p.block_size;
    if (e->n_free < total - shared) return 0;
    for (int b = 0; b < shared; b++) {
        s->blocks[b] = par->blocks[b];
        e->block_ref[par->blocks[b]]++;
    }
    for (int b = shared; b < total; b++) s->blocks[b] = block_alloc(e);
    s->n_blocks = total;
    if (partial && (*st = e->ops->kv_copy(e->b, s->blocks[shared], par->blocks[shared], partial))) {
        seq_free_blocks(e, s);
        return -1;
    }
    s->n_computed = computed;
    s->state = SEQ_RUNNING;
    e->running[e->n_running++] = s;
    push_event(e, s->id, LLMB_EV_ADMIT, computed, 0);
    return 1;
}

static llmb_status schedule_admissions(llmb_engine *e) {
    int64_t i = 0;
    while (i < e->n_waiting && e->n_running < e->p.max_seqs) {
        seq_t *s = get_seq(e, e->waiting[i]);
        llmb_status st = LLMB_OK;
        const int a = admit(e, s, &st);
        if (a < 0) return st;
        if (!a) break;  // first come, first served: later requests wait too
        memmove(&e->waiting[i], &e->waiting[i + 1], (size_t)(e->n_waiting - i - 1) * sizeof *e->waiting);
        e->n_waiting--;
    }
    return LLMB_OK;
}

// Does position `pos` of `s` need a row of logits in this step?
static int needs_logits(const seq_t *s, int pos) {
    if (pos == s->n_tokens - 1 && s->n_generated < s->s.max_tokens) return 1;
    if (pos < s->n_prompt - 1 && s->s.prompt_logprobs_from >= 0 && pos >= s->s.prompt_logprobs_from) return 1;
    if (pos < s->n_prompt && s->s.prompt_logits) return 1;
    return 0;
}

// Fill e->items and the llmb_batch: decode tokens first, then prefill chunks, within the token and
// logits-row budgets. A sequence's tokens are consecutive, at consecutive positions from n_computed.
static int build_batch(llmb_engine *e, int *n_rows, int *n_prefill) {
    int n = 0, rows = 0, n_seq = 0;
    const int B = e->p.block_size;
    *n_prefill = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < e->n_running && n < e->p.max_batch_tokens; i++) {
            seq_t *s = e->running[i];
            int is_decode = s->n_computed >= s->n_prompt;
            if (is_decode != (pass == 0)) continue;
            const int n0 = n;
            for (int pos = s->n_computed; pos < run_len(s) && n < e->p.max_batch_tokens; pos++) {
                int want = needs_logits(s, pos);
                if (want && rows >= e->max_logit_rows) break;
                if (want) e->rows[rows] = n;
                e->tokens[n] = s->tokens[pos];
                e->pos[n] = pos;
                e->slots[n] = s->blocks[pos / B] * B + pos % B;
                e->items[n++] = (item_t){s, pos, want ? rows++ : -1};
                if (!is_decode) (*n_prefill)++;
            }
            if (n == n0) continue;
            e->q_start[n_seq] = n0;
            e->q_len[n_seq] = n - n0;
            e->pos0[n_seq] = s->n_computed;
            memcpy(e->block_tables + (size_t)n_seq * e->max_blocks, s->blocks,
                   (size_t)blocks_for(e, e->pos[n - 1] + 1) * sizeof *s->blocks);
            n_seq++;
        }
        if (pass == 0) e->batch.n_decode = n_seq;  // decode steps first, then prompt chunks
    }
    e->batch.n_tok = n;
    e->batch.n_seq = n_seq;
    e->batch.n_rows = rows;
    *n_rows = rows;
    return n;
}

// ---- sampling: sampler.c ----

static int stops_masked(const seq_t *s) { return s->n_generated < s->s.min_tokens && s->s.n_stop_tokens > 0; }

// The row's token for sequence s on sampling thread t (sampler.c), from s's own random stream.
static int sample_row(const llmb_engine *e, int t, seq_t *s, const float *logits, double lse, int argmax,
                      float *lp_out) {
    const llmb_sample_seq q = {s->tokens, s->n_tokens, s->n_prompt, stops_masked(s), &s->rng};
    return llmb_sample_row(e->sampler, t, &s->s, &q, logits, lse, argmax, lp_out);
}

static int is_stop(const seq_t *s, int tok) {
    for (int i = 0; i < s->s.n_stop_tokens; i++)
        if (s->s.stop_tokens[i] == tok) return 1;
    return 0;
}

static int wants_prompt_lp(const seq_t *s, int pos) {
    return s->prompt_lp && pos < s->n_prompt - 1 && pos >= s->s.prompt_logprobs_from;
}

static int will_sample(const seq_t *s, int pos) {
    return s->state == SEQ_RUNNING && pos == s->n_tokens - 1 && s->n_generated < s->s.max_tokens;
}

// Can the backend sample this step's rows? Only when every row samples a running sequence's next
// token with the plain rule (temperature, top-k, top-p, min-p): no penalties, no top-n logprobs, no
// prompt scores, no stop tokens still masked by min_tokens. Then the parameters of each row, with u
// drawn from the sequence's own stream exactly where sample_row would draw it.
static int device_sampling(llmb_engine *e, int n) {
    if (!e->p.device_sampling || e->batch.n_rows == 0) return 0;
    for (int i = 0; i < n; i++) {
        const item_t *it = &e->items[i];
        const seq_t *s = it->seq;
        if (it->logit_row < 0) continue;
        const llmb_sampling *p = &s->s;
        if (!will_sample(s, it->pos) || s->prompt_logits || wants_prompt_lp(s, it->pos) || p->n_logprobs > 0 ||
            llmb_has_penalties(p) || stops_masked(s))
            return 0;
    }
    for (int i = 0; i < n; i++) {
        const item_t *it = &e->items[i];
        seq_t *s = it->seq;
        if (it->logit_row < 0) continue;
        const int r = it->logit_row;
        e->smp_temp[r] = s->s.temperature;
        e->smp_top_k[r] = s->s.top_k;
        e->smp_top_p[r] = s->s.top_p;
        e->smp_min_p[r] = s->s.min_p;
        e->smp_u[r] = s->s.temperature > 0.0f ? (float)llmb_uniform(&s->rng) : 0.0f;
    }
    return 1;
}

// Append a sampled token to s, log it (with its top-n logprobs when s asks for them) and finish s on
// a stop token (masked until min_tokens, see sample_row) or at max_tokens.
static llmb_status emit_token(llmb_engine *e, seq_t *s, int tok, float lp, const int32_t *topn_id,
                              const float *topn_lp) {
    s->tokens[s->n_tokens++] = tok;
    s->n_generated++;
    if (push_event(e, s->id, LLMB_EV_TOKEN, tok, lp)) return llmb_fail(LLMB_E_NOMEM, "engine: out of memory");
    if (topn_id && s->s.n_logprobs > 0) {
        memcpy(e->ev_topn_id + (e->n_ev - 1) * MAX_TOPN, topn_id, (size_t)s->s.n_logprobs * sizeof *topn_id);
        memcpy(e->ev_topn_lp + (e->n_ev - 1) * MAX_TOPN, topn_lp, (size_t)s->s.n_logprobs * sizeof *topn_lp);
    }
    if (is_stop(s, tok)) finish(e, s, LLMB_FINISH_STOP);
    else if (s->n_generated >= s->s.max_tokens) finish(e, s, LLMB_FINISH_LENGTH);
    return LLMB_OK;
}

// The step's tokens from the backend's device sampling (device_sampling() checked every row).
static llmb_status process_ids(llmb_engine *e, int n) {
    for (int i = 0; i < n; i++) e->items[i].seq->n_computed = e->items[i].pos + 1;
    for (int i = 0; i < n; i++) {
        item_t *it = &e->items[i];
        seq_t *s = it->seq;
        if (it->logit_row < 0 || s->state != SEQ_RUNNING) continue;
        e->stats.device_sampled_rows++;
        llmb_status st = emit_token(e, s, e->dev_ids[it->logit_row], e->dev_lp[it->logit_row], NULL, NULL);
        if (st) return st;
    }
    return LLMB_OK;
}

// nt: the threads the step's sampling may use (the backend's, which drops to one on contended cores)
static llmb_status process_logits(llmb_engine *e, int n, int nt) {
    const int V = e->model->cfg.vocab;
    if (e->dev_ids) return process_ids(e, n);
    // The log-sum-exp of every row that is sampled or scored, split over the threads (one double exp
    // per vocabulary entry: serial, it was ~5% of a batch-64 decode step); each row by one thread in
    // row_lse's order, so the same bits.
    int n_lse = 0;
    for (int i = 0; i < n; i++) {
        const item_t *it = &e->items[i];
        if (it->logit_row >= 0 && (wants_prompt_lp(it->seq, it->pos) || will_sample(it->seq, it->pos)))
            e->lse_rows[n_lse++] = it->logit_row;
    }
    LLMB_PAR_FOR(nt > 1 && n_lse > 1, nt, k, n_lse, {
        const int r = e->lse_rows[k];
        e->lse[r] = llmb_row_lse(e->logits + (int64_t)r * V, V, &e->lse_am[r]);
    });
    for (int i = 0; i < n; i++) {
        item_t *it = &e->items[i];
        seq_t *s = it->seq;
        if (it->logit_row < 0) continue;
        const float *row = e->logits + (int64_t)it->logit_row * V;
        if (s->prompt_logits && it->pos < s->n_prompt)
            memcpy(s->prompt_logits + (int64_t)it->pos * V, row, (size_t)V * sizeof *row);
        if (wants_prompt_lp(s, it->pos)) {
            const int k = it->pos - s->s.prompt_logprobs_from, next = s->tokens[it->pos + 1];
            s->prompt_lp[k] = (float)(row[next] - e->lse[it->logit_row]);
            s->prompt_greedy[k] = row[next] >= row[e->lse_am[it->logit_row]];
            s->prompt_top[k] = e->lse_am[it->logit_row];
            s->prompt_top_lp[k] = (float)(row[e->lse_am[it->logit_row]] - e->lse[it->logit_row]);
            if (it->pos == s->n_prompt - 2)   // the last prompt token's row: its alternatives, the same arithmetic
                for (int a = 0; a < s->s.n_alt_tokens; a++) {
                    s->alt_lp[a] = (float)(row[s->alt[a]] - e->lse[it->logit_row]);
                    s->alt_greedy[a] = row[s->alt[a]] >= row[e->lse_am[it->logit_row]];
                }
        }
    }
    // Advance the computed counts, then sample where a sequence reached its last known token: the rows
    // over the threads (each its own sequence's random stream and a thread's scratch, so the tokens do
    // not depend on the thread count), then tokens, events and finishes in batch order.
    for (int i = 0; i < n; i++) e->items[i].seq->n_computed = e->items[i].pos + 1;
    int n_samp = 0;
    for (int i = 0; i < n; i++) {
        item_t *it = &e->items[i];
        seq_t *s = it->seq;
        if (s->state != SEQ_RUNNING) continue;
        if (it->pos != run_len(s) - 1 || s->n_computed != run_len(s)) continue;
        if (s->n_generated >= s->s.max_tokens) {
            finish(e, s, LLMB_FINISH_LENGTH);  // prefill-only request done
            continue;
        }
        e->samp_items[n_samp++] = i;
    }
    LLMB_PAR_FOR(nt > 1 && n_samp > 1, nt, k, n_samp, {
        const int t = llmb_thread_id();
        const item_t *it = &e->items[e->samp_items[k]];
        seq_t *s = it->seq;
        const int r = it->logit_row;
        const float *row = e->logits + (int64_t)r * V;
        e->samp_tok[k] = sample_row(e, t, s, row, e->lse[r], e->lse_am[r], &e->samp_lp[k]);
        if (s->s.n_logprobs > 0)
            llmb_top_logprobs(row, V, s->s.n_logprobs, e->lse[r], e->samp_topn_id + (int64_t)k * MAX_TOPN,
                         e->samp_topn_lp + (int64_t)k * MAX_TOPN);
    });
    for (int k = 0; k < n_samp; k++) {
        llmb_status st = emit_token(e, e->items[e->samp_items[k]].seq, e->samp_tok[k], e->samp_lp[k],
                                    e->samp_topn_id + (int64_t)k * MAX_TOPN, e->samp_topn_lp + (int64_t)k * MAX_TOPN);
        if (st) return st;
    }
    return LLMB_OK;
}

llmb_status llmb_engine_step(llmb_engine *e, int *busy) {
    uint64_t t0 = llmb_now_ns();
    llmb_status st = schedule_admissions(e);
    if (st) return st;
    int n_rows, n_prefill;
    int n = build_batch(e, &n_rows, &n_prefill);
    uint64_t t1 = llmb_now_ns();
    e->stats.schedule_ns += t1 - t0;
    if (n == 0) {
        *busy = e->n_running > 0 || e->n_waiting > 0;
        if (*busy && e->n_running == 0)
            return llmb_fail(LLMB_E_ARG, "engine: %lld requests wait for KV blocks that never free up (%lld free); "
                             "raise kv_budget", (long long)e->n_waiting, (long long)e->n_free);
        return LLMB_OK;
    }
    const int dev = device_sampling(e, n);
    e->batch.temperature = dev ? e->smp_temp : NULL;
    e->batch.top_p = dev ? e->smp_top_p : NULL;
    e->batch.min_p = dev ? e->smp_min_p : NULL;
    e->batch.u = dev ? e->smp_u : NULL;
    e->batch.top_k = dev ? e->smp_top_k : NULL;
    llmb_forward_out out;
    st = e->ops->forward(e->b, &e->batch, &out);
    if (st) return st;
    e->logits = out.logits;
    e->dev_ids = dev ? out.ids : NULL;
    e->dev_lp = dev ? out.logprobs : NULL;
    if (dev && (!out.ids || !out.logprobs))
        return llmb_fail(LLMB_E_BACKEND, "engine: the %s backend returned no sampled ids", e->ops->name);
    uint64_t t2 = llmb_now_ns();
    if (n_prefill) e->stats.prefill_ns += t2 - t1;
    else e->stats.decode_ns += t2 - t1;
    llmb_backend_times bt;
    if ((st = e->ops->times(e->b, &bt))) return st;
    const uint64_t fwd = (uint64_t)(bt.forward_ms * 1e6);
    if (n_prefill) e->stats.backend_prefill_ns += fwd;
    else e->stats.backend_decode_ns += fwd;
    e->stats.backend_sample_ns += (uint64_t)(bt.sample_ms * 1e6);
    e->stats.graph_replays = bt.graph_replays;
    e->stats.graph_captures = bt.graph_captures;
    e->stats.solo_steps = bt.solo_steps;
    e->stats.capture_ns = (uint64_t)(bt.capture_ms * 1e6);
    if (!n_prefill) e->stats.kernels_per_step = (uint64_t)bt.kernels_per_step;
    if (e->p.profile) {
        const int ph = n_prefill ? 0 : 1;
        for (int k = 0; k < LLMB_PROF_N; k++) e->stats.prof_ns[ph][k] += bt.prof_ns[k];
        for (int k = 0; k < LLMB_PROF_TYPES; k++) e->stats.prof_type_ns[ph][k] += bt.prof_type_ns[k];
    }
    e->stats.prefill_tokens += (uint64_t)n_prefill;
    e->stats.decode_tokens += (uint64_t)(n - n_prefill);
    e->stats.steps++;
    llmb_status s = process_logits(e, n, bt.host_threads ? bt.host_threads : e->p.n_threads);
    e->stats.sample_ns += llmb_now_ns() - t2;
    *busy = e->n_running > 0 || e->n_waiting > 0;
    return s;
}
