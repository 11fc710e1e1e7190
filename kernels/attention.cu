// attention.cu — the paged KV cache on the device (F32, F16, Q8_0 rows, as csrc/engine.c lays them
// out per layer: [block][slot][kv_dim]) and attention over it:
//   kv_store      K and V rows of new tokens into their slots (Q8_0 as csrc/quants.c quantizes);
//   attn_decode   one query per sequence; the context is split into chunks of split_keys keys, one
//                 block per (head, sequence, chunk) computes scores, a local softmax and P.V, and a
//                 combine kernel merges the chunks with log-sum-exp weights; the grid is sized from
//                 the host's max_seq_len (a bound: a graph passes the context length) and each block
//                 reads its sequence's real length from seq_lens, so chunks past it are empty;
//   attn_prefill  tiles of 16 queries x 32 keys with an online softmax (FlashAttention's running max
//                 and sum), causal by position, so chunked prefill over a cached prefix works too.
// GQA: query head h reads KV head h / (n_head / n_head_kv).
// References: softmax attention in NumPy float64 over the same cache contents (tests/test_cuda_kernels.py).
#include <math.h>

#include "common.cuh"
#include "quant.cuh"
#include "attention.cuh"

template <typename F>
static int dispatch_kv(int kv_type, F &&f) {
    switch (kv_type) {
    case LLMB_TYPE_F32: f(std::integral_constant<int, LLMB_TYPE_F32>{}); return 1;
    case LLMB_TYPE_F16: f(std::integral_constant<int, LLMB_TYPE_F16>{}); return 1;
    case LLMB_TYPE_Q8_0: f(std::integral_constant<int, LLMB_TYPE_Q8_0>{}); return 1;
    default: return 0;
    }
}

// Dynamic shared memory above the default 48 KiB needs the kernel's limit raised; decode's never
// does (at most (256 + 8192 + 4) floats), so a captured decode step makes no attribute calls.
static cudaError_t smem_limit(const void *kernel, size_t smem) {
    if (smem <= (size_t)48 << 10) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
}

static llmb_status check_kv(const char *op, int kv_type, int kv_dim) {
    if (kv_type != LLMB_TYPE_F32 && kv_type != LLMB_TYPE_F16 && kv_type != LLMB_TYPE_Q8_0)
        return llmb_cu_fail(LLMB_E_ARG, "%s: KV cache type %d is not F32 (0), F16 (1) or Q8_0 (8)", op, kv_type);
    if (kv_dim < 1 || (kv_type == LLMB_TYPE_Q8_0 && kv_dim % LLMB_QK))
        return llmb_cu_fail(LLMB_E_ARG, "%s: KV rows of %d elements (Q8_0 needs a multiple of 32)", op, kv_dim);
    return LLMB_OK;
}

llmb_status llmb_cu_kv_store(llmb_cuda_ctx *c, int kv_type, void *k_cache, void *v_cache, const float *k,
                             const float *v, int64_t ld, int n_tok, int kv_dim, const int32_t *slots) {
    TRY(llmb_cu_enter(c));
    TRY(check_kv("kv_store", kv_type, kv_dim));
    if (n_tok < 0 || ld < kv_dim || !k_cache || !v_cache || !k || !v || !slots)
        return llmb_cu_fail(LLMB_E_ARG, "kv_store: %d tokens, ld %lld < %d or NULL pointers", n_tok, (long long)ld, kv_dim);
    if (n_tok == 0) return LLMB_OK;
    const int64_t rb = kv_row_bytes(kv_type, kv_dim);
    dispatch_kv(kv_type, [&](auto tc) {
        auto *kern = kv_store_kernel<decltype(tc)::value>;
        LLMB_LAUNCH(kern, dim3(n_tok), dim3(128), 0, c->stream, (uint8_t *)k_cache, (uint8_t *)v_cache, k, v,
                                                                           ld, kv_dim, slots, rb);
    });
    CU_LAUNCHED("kv_store_kernel");
    return LLMB_OK;
}

static llmb_status check_attn(const char *op, const llmb_cuda_attn *a) {
    if (!a) return llmb_cu_fail(LLMB_E_ARG, "%s: NULL parameters", op);
    if (a->n_head < 1 || a->n_head_kv < 1 || a->n_head % a->n_head_kv || a->head_dim < 1 ||
        a->head_dim > LLMB_CUDA_HD_MAX || a->block_size < 1 || a->max_blocks < 1 || a->n_seq < 0)
        return llmb_cu_fail(LLMB_E_ARG, "%s: %d heads, %d KV heads (must divide), head size %d (1..%d), block size %d, "
                                        "%d blocks per table, %d sequences", op, a->n_head, a->n_head_kv, a->head_dim,
                            LLMB_CUDA_HD_MAX, a->block_size, a->max_blocks, a->n_seq);
    TRY(check_kv(op, a->kv_type, a->n_head_kv * a->head_dim));
    if (a->ldq < (int64_t)a->n_head * a->head_dim || a->ldo < (int64_t)a->n_head * a->head_dim || !a->q || !a->out ||
        !a->k_cache || !a->v_cache || !a->block_tables)
        return llmb_cu_fail(LLMB_E_ARG, "%s: ldq %lld / ldo %lld below %d, or NULL pointers", op, (long long)a->ldq,
                            (long long)a->ldo, a->n_head * a->head_dim);
    return LLMB_OK;
}

llmb_status llmb_cu_attn_decode(llmb_cuda_ctx *c, const llmb_cuda_attn *a) {
    TRY(llmb_cu_enter(c));
    TRY(check_attn("attn_decode", a));
    if (!a->seq_lens || a->max_seq_len < 0 || a->split_keys < 0)
        return llmb_cu_fail(LLMB_E_ARG, "attn_decode: seq_lens NULL, or max_seq_len %d / split_keys %d negative",
                            a->max_seq_len, a->split_keys);
    if (a->n_seq == 0) return LLMB_OK;
    if (a->n_seq > 65535) return llmb_cu_fail(LLMB_E_ARG, "attn_decode: %d sequences (at most 65535)", a->n_seq);
    dec_args p;
    p.a = *a;
    p.rb = kv_row_bytes(a->kv_type, a->n_head_kv * a->head_dim);
    dec_plan(a, &p.split, &p.n_split);
    if (p.n_split > 65535) return llmb_cu_fail(LLMB_E_ARG, "attn_decode: %d splits of %d keys (at most 65535)", p.n_split,
                                           p.split);
    p.part = NULL;
    if (p.n_split > 1) {
        void *ws;
        TRY(llmb_cu_ws(c, WS_ATTN, (size_t)a->n_seq * a->n_head * p.n_split * (a->head_dim + 2) * sizeof(float), &ws));
        p.part = (float *)ws;
    }
    const size_t smem = dec_smem(a->head_dim, p.split);
    const dim3 grid(a->n_head, a->n_seq, p.n_split);
    llmb_status st = LLMB_OK;
    dispatch_kv(a->kv_type, [&](auto tc) {
        auto *k = attn_decode_kernel<decltype(tc)::value>;
        cudaError_t e = smem_limit((const void *)k, smem);
        if (e != cudaSuccess) st = llmb_cu_cuda_fail(e, "cudaFuncSetAttribute(attn_decode_kernel)", __FILE__, __LINE__);
        else LLMB_LAUNCH(k, grid, dim3(DEC_THREADS), smem, c->stream, p);
    });
    TRY(st);
    CU_LAUNCHED("attn_decode_kernel");
    if (p.n_split > 1) {
        LLMB_LAUNCH(attn_combine_kernel, dim3(a->n_head, a->n_seq), dim3(128), 0, c->stream, p);
        CU_LAUNCHED("attn_combine_kernel");
    }
    return LLMB_OK;
}

llmb_status llmb_cu_attn_prefill(llmb_cuda_ctx *c, const llmb_cuda_attn *a) {
    TRY(llmb_cu_enter(c));
    TRY(check_attn("attn_prefill", a));
    if (!a->q_start || !a->q_len || !a->pos0 || a->max_q_len < 0)
        return llmb_cu_fail(LLMB_E_ARG, "attn_prefill: q_start, q_len, pos0 NULL or max_q_len %d negative", a->max_q_len);
    if (a->n_seq == 0 || a->max_q_len == 0) return LLMB_OK;
    if (a->n_seq > 65535 || a->n_head > 65535)
        return llmb_cu_fail(LLMB_E_ARG, "attn_prefill: %d sequences x %d heads (at most 65535 each)", a->n_seq, a->n_head);
    const int64_t rb = kv_row_bytes(a->kv_type, a->n_head_kv * a->head_dim);
    const size_t smem = pf_smem(a->head_dim);
    const dim3 grid((a->max_q_len + PF_BQ - 1) / PF_BQ, a->n_seq, a->n_head);
    llmb_status st = LLMB_OK;
    dispatch_kv(a->kv_type, [&](auto tc) {
        auto *k = attn_prefill_kernel<decltype(tc)::value>;
        cudaError_t e = smem_limit((const void *)k, smem);
        if (e != cudaSuccess) st = llmb_cu_cuda_fail(e, "cudaFuncSetAttribute(attn_prefill_kernel)", __FILE__, __LINE__);
        else LLMB_LAUNCH(k, grid, dim3(PF_THREADS), smem, c->stream, *a, rb);
    });
    TRY(st);
    CU_LAUNCHED("attn_prefill_kernel");
    return LLMB_OK;
}
