// test_engine.c — the engine under ASan/UBSan on the real stories260K model: the greedy story's
// first tokens, many concurrent sequences with every sampler option, prefix forks that equal the
// unshared computation, aborts and releases that return every KV block, and every user error
// answered with a status code (never a crash); the backend boundary: backends chosen by name (an
// unknown one refused), the engine's memory figures those of its backend, and the CPU backend
// driven directly through backend.h (slots and block tables in any block order, KV kept across
// forward calls, kv_copy of a partial block) giving the engine's logits bit for bit.
#include <stdlib.h>
#include <string.h>
#ifdef __SANITIZE_ADDRESS__
// <sanitizer/allocator_interface.h>, which GCC does not ship; libasan has it
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
#endif

#include "../backend.h"
#include "../cpu_contention.h"
#include "../engine.h"
#include "../model.h"
#include "../quants.h"
#include "check.h"

static const int32_t GREEDY[24] = {403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421,
                                   395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292};

static llmb_engine_params params(int kv_type, int64_t n_blocks, int threads) {
    llmb_engine_params p = {.kv_type = kv_type, .block_size = 16, .n_blocks = n_blocks, .ctx = 512,
                            .max_batch_tokens = 64, .max_seqs = 32, .n_threads = threads}; // the rest 0: cpu
    return p;
}

static llmb_sampling greedy(int max_tokens) {
    llmb_sampling s;
    memset(&s, 0, sizeof s);
    s.top_p = 1.0f;
    s.repetition_penalty = 1.0f;
    s.max_tokens = max_tokens;
    s.prompt_logprobs_from = -1;
    return s;
}

static int run(llmb_engine *e) {
    int busy = 1, steps = 0;
    while (busy && steps < 100000) {
        if (llmb_engine_step(e, &busy) != LLMB_OK) return -1;
        steps++;
    }
    return steps;
}

// tokens of sequence `seq` among the polled events (at most max)
static int collect(llmb_engine *e, int64_t seq, int32_t *out, int max, int *finish) {
    llmb_event ev[512];
    int n, k = 0;
    while ((n = llmb_engine_poll(e, ev, 512, NULL, NULL, 0)) > 0)
        for (int i = 0; i < n; i++) {
            if (ev[i].seq != seq) continue;
            if (ev[i].kind == LLMB_EV_TOKEN && k < max) out[k++] = ev[i].token;
            if (ev[i].kind == LLMB_EV_FINISH && finish) *finish = ev[i].token;
        }
    return k;
}

static void test_greedy(const llmb_gguf *g, int kv_type, int threads) {
    llmb_engine *e = NULL;
    llmb_engine_params p = params(kv_type, 64, threads);
    CHECK(llmb_engine_create(g, &p, &e) == LLMB_OK, "create: %s", llmb_last_error());
    if (!e) return;
    int32_t bos = 1, got[24];
    llmb_sampling s = greedy(24);
    int64_t id;
    CHECK(llmb_engine_add(e, &bos, 1, &s, -1, &id) == LLMB_OK, "add: %s", llmb_last_error());
    CHECK(run(e) > 0, "run: %s", llmb_last_error());
    int fin = 0, n = collect(e, id, got, 24, &fin);
    CHECK(n == 24 && memcmp(got, GREEDY, sizeof got) == 0, "greedy story tokens (kv %d, %d threads)", kv_type, threads);
    CHECK(fin == LLMB_FINISH_LENGTH, "finish reason %d", fin);
    CHECK(llmb_engine_release(e, id) == LLMB_OK && llmb_engine_free_blocks(e) == 64, "blocks returned");
    llmb_engine_free(e);
}

static void test_many_sequences(const llmb_gguf *g) {
    llmb_engine *e = NULL;
    llmb_engine_params p = params(1, 512, 2);
    if (llmb_engine_create(g, &p, &e) != LLMB_OK) {
        CHECK(0, "create: %s", llmb_last_error());
        return;
    }
    int64_t ids[40];
    int32_t stop[2] = {2, 13};
    for (int i = 0; i < 40; i++) {
        int32_t prompt[50];
        int n = 1 + (i * 7) % 50;
        for (int j = 0; j < n; j++) prompt[j] = (int32_t)(3 + (i * 31 + j * 17) % 500);
        llmb_sampling s = greedy(1 + i % 30);
        s.temperature = (float)(i % 4) * 0.4f;
        s.top_k = i % 5 == 0 ? 10 : 0;
        s.top_p = i % 3 == 0 ? 0.8f : 1.0f;
        s.min_p = i % 7 == 0 ? 0.05f : 0.0f;
        s.repetition_penalty = i % 2 ? 1.3f : 1.0f;
        s.presence_penalty = i % 6 == 0 ? 0.5f : 0.0f;
        s.frequency_penalty = i % 8 == 0 ? 0.5f : 0.0f;
        s.seed = (uint64_t)i;
        s.n_logprobs = i % 4;
        s.min_tokens = i % 9 == 0 ? 1 : 0;
        s.stop_tokens = stop;
        s.n_stop_tokens = i % 2 ? 2 : 0;
        CHECK(llmb_engine_add(e, prompt, n, &s, -1, &ids[i]) == LLMB_OK, "add %d: %s", i, llmb_last_error());
        if (i == 20) CHECK(llmb_engine_step(e, &(int){0}) == LLMB_OK, "step while adding");
    }
    CHECK(llmb_engine_abort(e, ids[5]) == LLMB_OK, "abort");
    CHECK(run(e) > 0, "run: %s", llmb_last_error());
    llmb_event ev[4096];
    int32_t topn_ids[4096 * 3];
    float topn_lp[4096 * 3];
    int n = llmb_engine_poll(e, ev, 4096, topn_ids, topn_lp, 3), finished = 0, bad_lp = 0;
    for (int i = 0; i < n; i++) {
        if (ev[i].kind == LLMB_EV_FINISH) finished++;
        if (ev[i].kind == LLMB_EV_TOKEN && !(ev[i].logprob <= 0.0f)) bad_lp++;
    }
    CHECK(finished == 40, "%d of 40 sequences finished", finished);
    CHECK(bad_lp == 0, "%d token logprobs were not <= 0", bad_lp);
    for (int i = 0; i < 40; i++) CHECK(llmb_engine_release(e, ids[i]) == LLMB_OK, "release %d", i);
    CHECK(llmb_engine_free_blocks(e) == 512, "every block back: %lld", (long long)llmb_engine_free_blocks(e));
    llmb_engine_free(e);
}

static void test_forks(const llmb_gguf *g) {
    llmb_engine *e = NULL;
    llmb_engine_params p = params(0, 128, 2);
    if (llmb_engine_create(g, &p, &e) != LLMB_OK) {
        CHECK(0, "create: %s", llmb_last_error());
        return;
    }
    int32_t ctx[37];
    ctx[0] = 1;
    for (int j = 1; j < 37; j++) ctx[j] = GREEDY[(j - 1) % 24];
    llmb_sampling hold = greedy(0);
    hold.hold = 1;
    int64_t parent, shared[3], alone[3];
    CHECK(llmb_engine_add(e, ctx, 37, &hold, -1, &parent) == LLMB_OK, "parent: %s", llmb_last_error());
    run(e);
    llmb_engine_poll(e, (llmb_event[64]){{0}}, 64, NULL, NULL, 0);
    for (int c = 0; c < 3; c++) {
        int32_t full[40];
        memcpy(full, ctx, sizeof ctx);
        full[37] = 300 + c, full[38] = 301, full[39] = 302 + c;
        llmb_sampling s = greedy(0);
        s.prompt_logprobs_from = 36;
        CHECK(llmb_engine_add(e, full, 40, &s, parent, &shared[c]) == LLMB_OK, "fork: %s", llmb_last_error());
        CHECK(llmb_engine_add(e, full, 40, &s, -1, &alone[c]) == LLMB_OK, "alone: %s", llmb_last_error());
    }
    run(e);
    for (int c = 0; c < 3; c++) {
        float a[3], b[3];
        uint8_t ga[3], gb[3];
        CHECK(llmb_engine_prompt_logprobs(e, shared[c], a, ga, 3) == LLMB_OK, "logprobs: %s", llmb_last_error());
        CHECK(llmb_engine_prompt_logprobs(e, alone[c], b, gb, 3) == LLMB_OK, "logprobs: %s", llmb_last_error());
        CHECK(memcmp(a, b, sizeof a) == 0 && memcmp(ga, gb, 3) == 0, "fork %d equals the unshared computation", c);
        int32_t top[3];
        float top_lp[3];
        CHECK(llmb_engine_prompt_top(e, shared[c], top, top_lp, 3) == LLMB_OK, "top: %s", llmb_last_error());
        for (int k = 0; k < 3; k++)
            CHECK(top_lp[k] >= a[k] && ga[k] == (top_lp[k] == a[k]) &&
                      (top[k] != (k == 0 ? 300 + c : k == 1 ? 301 : 302 + c) || top_lp[k] == a[k]),
                  "prompt top-1 %d of fork %d: the greedy flag says whether it is the prompt's token", k, c);
        llmb_engine_release(e, shared[c]);
        llmb_engine_release(e, alone[c]);
    }
    llmb_sampling s = greedy(1);
    int64_t x;
    CHECK(llmb_engine_add(e, ctx, 5, &s, alone[0], &x) == LLMB_E_ARG, "fork of a released sequence is refused");
    CHECK(llmb_engine_release(e, parent) == LLMB_OK && llmb_engine_free_blocks(e) == 128, "blocks returned");
    llmb_engine_free(e);
}

static void test_errors(const llmb_gguf *g) {
    llmb_engine *e = NULL;
    llmb_engine_params p = params(8, 64, 1);
    CHECK(llmb_engine_create(g, &p, &e) == LLMB_E_UNSUPPORTED && !e, "Q8_0 KV with 8-wide heads: %s", llmb_last_error());
    p = params(1, 0, 1);
    CHECK(llmb_engine_create(g, &p, &e) == LLMB_E_ARG && !e, "zero blocks");
    p = params(1, 4, 1);
    if (llmb_engine_create(g, &p, &e) != LLMB_OK) return;
    int32_t toks[600];
    for (int i = 0; i < 600; i++) toks[i] = 5;
    llmb_sampling s = greedy(10);
    int64_t id;
    CHECK(llmb_engine_add(e, toks, 600, &s, -1, &id) == LLMB_E_ARG, "longer than ctx");
    CHECK(llmb_engine_add(e, toks, 100, &s, -1, &id) == LLMB_E_ARG, "more blocks than the pool");
    toks[3] = 512;
    CHECK(llmb_engine_add(e, toks, 5, &s, -1, &id) == LLMB_E_ARG, "token outside the vocabulary");
    toks[3] = 5;
    CHECK(llmb_engine_add(e, toks, 0, &s, -1, &id) == LLMB_E_ARG, "empty prompt");
    CHECK(llmb_engine_add(e, toks, 5, &s, 99, &id) == LLMB_E_ARG, "fork of a missing sequence");
    s.n_logprobs = 21;
    CHECK(llmb_engine_add(e, toks, 5, &s, -1, &id) == LLMB_E_ARG, "too many logprobs");
    CHECK(llmb_engine_release(e, 12345) == LLMB_E_ARG && llmb_engine_abort(e, -1) == LLMB_E_ARG, "unknown ids");
    llmb_engine_free(e);
}

static void test_backend_choice(const llmb_gguf *g) {
    llmb_engine *e = NULL;
    llmb_engine_params p = params(1, 64, 1);
    p.backend = "tpu";
    CHECK(llmb_engine_create(g, &p, &e) == LLMB_E_ARG && !e && strstr(llmb_last_error(), "no backend named 'tpu'"),
          "unknown backend refused: %s", llmb_last_error());
    p.backend = "cuda";   // this process never loaded the CUDA library: unavailable, with the reason
    CHECK(llmb_engine_create(g, &p, &e) == LLMB_E_BACKEND && !e && *llmb_last_error(), "cuda without its library: %s",
          llmb_last_error());
    p.backend = "cpu";
    CHECK(llmb_engine_create(g, &p, &e) == LLMB_OK, "create: %s", llmb_last_error());
    if (!e) return;
    CHECK(!strcmp(llmb_engine_backend(e), "cpu"), "backend name %s", llmb_engine_backend(e));
    // the engine's figures are its backend's, and the backend's are what it allocated
    llmb_memory_info m;
    CHECK(llmb_engine_memory(e, &m) == LLMB_OK, "memory: %s", llmb_last_error());
    CHECK(m.weights == llmb_engine_weight_bytes(e) && m.kv == llmb_engine_kv_bytes(e) &&
              m.scratch == llmb_engine_scratch_bytes(e),
          "engine memory = backend memory");
    CHECK(m.peak == m.weights + m.kv + m.scratch && m.device_free == 0 && m.device_total == 0,
          "cpu peak and device figures");
    CHECK(m.kv == llmb_engine_kv_token_bytes(e) * 64 * 16, "KV pool %llu bytes", (unsigned long long)m.kv);
    uint64_t file_bytes = 0;
    for (uint64_t i = 0; i < llmb_gguf_n_tensors(g); i++) file_bytes += llmb_gguf_tensor_at(g, i)->nbytes;
    CHECK(m.weights == file_bytes && m.scratch > 0, "weights %llu of %llu bytes", (unsigned long long)m.weights,
          (unsigned long long)file_bytes);
    llmb_engine_free(e);
}

// The CPU backend without the engine: a prompt in blocks {5, 2} (any order), then one decode step
// over the cached keys, then the same step over a copy of the partial block (kv_copy), each giving the
// logits the engine gives for that prompt bit for bit.
static void test_backend_direct(const llmb_gguf *g) {
    enum { N = 20, V = 512 };
    int32_t prompt[N + 1];
    prompt[0] = 1;
    for (int j = 1; j <= N; j++) prompt[j] = GREEDY[(j * 5) % 24];
    // the engine's logits of every position of the 21-token prompt
    llmb_engine *e = NULL;
    llmb_engine_params p = params(0, 16, 1);
    if (llmb_engine_create(g, &p, &e) != LLMB_OK) {
        CHECK(0, "create: %s", llmb_last_error());
        return;
    }
    llmb_sampling s = greedy(0);
    s.prompt_logits = 1;
    int64_t id;
    float *want = malloc(sizeof(float) * (N + 1) * V), *got = malloc(sizeof(float) * (N + 1) * V);
    CHECK(llmb_engine_add(e, prompt, N + 1, &s, -1, &id) == LLMB_OK && run(e) > 0 &&
              llmb_engine_prompt_logits(e, id, want, (int64_t)(N + 1) * V) == LLMB_OK, "engine: %s", llmb_last_error());
    llmb_engine_free(e);
    llmb_model *m = NULL;
    llmb_backend *b = NULL;
    const llmb_backend_ops *ops = llmb_backend_cpu();
    const llmb_backend_params bp = {.n_threads = 2, .max_batch_tokens = 64, .max_seqs = 4, .ctx = 64, .max_rows = 32};
    CHECK(llmb_model_load(g, &m) == LLMB_OK && ops->create(m, &bp, &b) == LLMB_OK &&
              ops->kv_alloc(b, LLMB_TYPE_F32, 16, 8) == LLMB_OK, "cpu backend: %s", llmb_last_error());
    if (b) {
        int32_t pos[N], slots[N], rows[N], q_start = 0, q_len = N, pos0 = 0, bt[4] = {5, 2, -1, -1};
        for (int i = 0; i < N; i++) pos[i] = i, slots[i] = bt[i / 16] * 16 + i % 16, rows[i] = i;
        llmb_batch batch = {.n_tok = N, .tokens = prompt, .pos = pos, .slots = slots, .n_seq = 1, .q_start = &q_start,
                            .q_len = &q_len, .pos0 = &pos0, .block_tables = bt, .max_blocks = 4, .n_rows = N, .rows = rows};
        llmb_forward_out out;
        CHECK(ops->forward(b, &batch, &out) == LLMB_OK && out.logits && !out.ids, "prefill: %s", llmb_last_error());
        if (out.logits) memcpy(got, out.logits, sizeof(float) * N * V);
        // one decode token at position N, keys 0..N-1 from the cache
        int32_t dpos = N, dslot = 2 * 16 + N % 16, drow = 0, dlen = 1, d0 = N;
        llmb_batch dec = {.n_tok = 1, .tokens = prompt + N, .pos = &dpos, .slots = &dslot, .n_seq = 1, .q_start = &q_start,
                          .q_len = &dlen, .pos0 = &d0, .block_tables = bt, .max_blocks = 4, .n_rows = 1, .rows = &drow};
        CHECK(ops->forward(b, &dec, &out) == LLMB_OK, "decode: %s", llmb_last_error());
        if (out.logits) memcpy(got + (size_t)N * V, out.logits, sizeof(float) * V);
        CHECK(!memcmp(got, want, sizeof(float) * (N + 1) * V), "backend logits = engine logits");
        // the partial block's first 4 slots copied to block 7: the same step over {5, 7}
        CHECK(ops->kv_copy(b, 7, 2, N % 16) == LLMB_OK, "kv_copy: %s", llmb_last_error());
        int32_t bt2[4] = {5, 7, -1, -1}, dslot2 = 7 * 16 + N % 16;
        dec.block_tables = bt2, dec.slots = &dslot2;
        CHECK(ops->forward(b, &dec, &out) == LLMB_OK && out.logits &&
                  !memcmp(out.logits, want + (size_t)N * V, sizeof(float) * V), "decode over the copied block");
        // misuse answered with a status
        CHECK(ops->kv_copy(b, 8, 2, 4) == LLMB_E_ARG && ops->kv_copy(b, 7, 2, 17) == LLMB_E_ARG, "kv_copy bounds");
        batch.n_tok = 65;
        CHECK(ops->forward(b, &batch, &out) == LLMB_E_ARG, "a batch over max_batch_tokens");
        llmb_backend_memory mem;
        CHECK(ops->memory(b, &mem) == LLMB_OK && mem.kv == (uint64_t)m->cfg.n_layer * 2 * 8 * 16 *
              (uint64_t)m->cfg.n_head_kv * m->cfg.head_dim * 4, "KV pool bytes %llu", (unsigned long long)mem.kv);
        llmb_backend_times t;
        CHECK(ops->times(b, &t) == LLMB_OK && t.steps == 3 && t.forward_ms > 0, "times: %llu steps",
              (unsigned long long)t.steps);
    }
    if (b) ops->destroy(b);
    llmb_model_free(m);
    free(want), free(got);
}

#ifdef __SANITIZE_ADDRESS__
// Every allocation of the process (the core's, the C library's and libgomp's) while counting is set.
static volatile int counting;
static volatile long n_allocs;
static void count_malloc(const volatile void *ptr, size_t size) {
    (void)ptr, (void)size;
    if (counting) __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
}
static void ignore_free(const volatile void *ptr) { (void)ptr; }
#endif

// The hot loop allocates nothing: decode steps of two sequences (one greedy, one sampled with every
// option and top-n log-probabilities) after the first few, on 1 and 2 threads. libgomp allocates a team
// for every parallel region it enters, a one-thread one too, so the steps' serial loops must not enter one.
static void test_decode_allocates_nothing(const llmb_gguf *g, int threads) {
#ifdef __SANITIZE_ADDRESS__
    static int hooked;
    if (!hooked) hooked = __sanitizer_install_malloc_and_free_hooks(count_malloc, ignore_free);
    CHECK(hooked, "ASan malloc hooks installed");
    llmb_engine *e = NULL;
    llmb_engine_params p = params(0, 64, threads);
    if (llmb_engine_create(g, &p, &e) != LLMB_OK) {
        CHECK(0, "create: %s", llmb_last_error());
        return;
    }
    int32_t prompt[5] = {1, 403, 407, 261, 378};
    llmb_sampling s = greedy(40), t = greedy(40);
    t.temperature = 0.8f, t.top_k = 40, t.top_p = 0.9f, t.min_p = 0.05f, t.repetition_penalty = 1.1f;
    t.presence_penalty = 0.2f, t.frequency_penalty = 0.1f, t.seed = 7, t.n_logprobs = 3;
    int64_t id[2];
    CHECK(llmb_engine_add(e, prompt, 5, &s, -1, &id[0]) == LLMB_OK && llmb_engine_add(e, prompt, 3, &t, -1, &id[1]) == LLMB_OK,
          "add: %s", llmb_last_error());
    int busy = 1, ok = 1;
    llmb_event ev[64];
    for (int k = 0; k < 24 && ok; k++) {   // each step polled, as LLM.generate does
        if (k == 4) n_allocs = 0, counting = 1;
        ok = llmb_engine_step(e, &busy) == LLMB_OK;
        while (llmb_engine_poll(e, ev, 64, NULL, NULL, 0) > 0) {}
    }
    counting = 0;
    CHECK(ok && busy, "20 decode steps: %s", llmb_last_error());
    CHECK(n_allocs == 0, "%ld allocations in 20 decode steps on %d thread(s)", n_allocs, threads);
    llmb_engine_free(e);
#else
    (void)g, (void)threads;
#endif
}

// The contention rule: two steps in a row whose thread waited over a quarter of the time for a CPU send the
// steps to one thread for half a second; each stalled step right after that doubles it (up to 8 s); one
// stalled step alone, or a quarter exactly, changes nothing, and a clean step starts over.
static void test_contention_rule(void) {
    llmb_cpu_load s = {0, 0};
    CHECK(llmb_cpu_contended(&s, 3000, 10000) == 0, "one stalled step");
    CHECK(llmb_cpu_contended(&s, 2000, 10000) == 0 && s.stalled == 0, "a fifth is a clean step: resets the count");
    CHECK(llmb_cpu_contended(&s, 2500, 10000) == 0 && s.stalled == 0, "a quarter is not over a quarter");
    CHECK(llmb_cpu_contended(&s, 2501, 10000) == 0 && llmb_cpu_contended(&s, 5000, 10000) == 500000000ull,
          "two stalled steps in a row: half a second on one thread");
    uint64_t t = 0;
    for (int k = 0; k < 6; k++) t = llmb_cpu_contended(&s, 9000, 10000);
    CHECK(t == 8000000000ull, "stalled steps after each other: doubling to 8 s (%llu ns)", (unsigned long long)t);
    CHECK(llmb_cpu_contended(&s, 0, 10000) == 0 && s.stalled == 0 && s.solo_ns == 0, "no stalls: start over");
    CHECK(llmb_cpu_contended(&s, 5000, 10000) == 0 && llmb_cpu_contended(&s, 5000, 10000) == 500000000ull,
          "after a clean step, half a second again");
}

int main(void) {
    test_contention_rule();
    const char *path = getenv("LLMB_STORIES");
    llmb_gguf *g = NULL;
    if (!path || llmb_gguf_open(path, &g) != LLMB_OK) {
        printf("engine tests skipped: set LLMB_STORIES to stories260K.gguf (%s)\n", path ? llmb_last_error() : "unset");
        return check_summary();
    }
    test_greedy(g, 0, 1);
    test_greedy(g, 1, 2);
    test_many_sequences(g);
    test_forks(g);
    test_errors(g);
    test_backend_choice(g);
    test_backend_direct(g);
    test_decode_allocates_nothing(g, 1);
    test_decode_allocates_nothing(g, 2);
    llmb_gguf_close(g);
    return check_summary();
}
