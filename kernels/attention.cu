// attention.cu — the paged KV cache on the device (F32, F16, Q8_0 rows, as csrc/engine.c lays them
// out per layer: [block][slot][kv_dim]) and attention over it:
//   kv_store      K and V rows of new tokens into their slots (Q8_0 as csrc/quants.c quantizes);
//   attn_decode   one query per sequence; the context is split into chunks of split_keys keys, one
//                 block per (head, sequence, chunk) computes scores, a local softmax and P.V, and a
//                 combine kernel merges the chunks with log-sum-exp weights;
//   attn_prefill  tiles of 16 queries x 32 keys with an online softmax (FlashAttention's running max
//                 and sum), causal by position, so chunked prefill over a cached prefix works too.
// GQA: query head h reads KV head h / (n_head / n_head_kv).
// References: softmax attention in NumPy float64 over the same cache contents (tests/test_cuda_kernels.py).
#include <math.h>

#include "common.cuh"
#include "quant.cuh"

static int64_t kv_row_bytes(int kv_type, int kv_dim) {
    return kv_type == LLMB_TYPE_Q8_0 ? (int64_t)kv_dim / LLMB_QK * (int64_t)sizeof(llmb_block_q8_0)
                                     : (int64_t)kv_dim * (kv_type == LLMB_TYPE_F32 ? 4 : 2);
}

// element e of a cached row
template <int KV>
__device__ __forceinline__ float kv_load(const uint8_t *row, int e) {
    if (KV == LLMB_TYPE_F32) return ((const float *)row)[e];
    if (KV == LLMB_TYPE_F16) return h2f(((const uint16_t *)row)[e]);
    const uint8_t *b = row + (int64_t)(e / LLMB_QK) * sizeof(llmb_block_q8_0);
    return h2f(*(const uint16_t *)b) * (float)(int8_t)b[2 + e % LLMB_QK];
}

// the cached row of key p of a sequence whose block table is bt
__device__ __forceinline__ const uint8_t *kv_row(const void *cache, const int32_t *bt, int p, int bsize, int64_t rb) {
    return (const uint8_t *)cache + ((int64_t)bt[p / bsize] * bsize + p % bsize) * rb;
}

template <typename F>
static int dispatch_kv(int kv_type, F &&f) {
    switch (kv_type) {
    case LLMB_TYPE_F32: f(std::integral_constant<int, LLMB_TYPE_F32>{}); return 1;
    case LLMB_TYPE_F16: f(std::integral_constant<int, LLMB_TYPE_F16>{}); return 1;
    case LLMB_TYPE_Q8_0: f(std::integral_constant<int, LLMB_TYPE_Q8_0>{}); return 1;
    default: return 0;
    }
}

// ---- KV store ----

// one block per token; Q8_0: one warp per block of 32 (lane = element)
template <int KV>
__global__ void kv_store_kernel(uint8_t *kc, uint8_t *vc, const float *k, const float *v, int64_t ld, int kv_dim,
                                const int32_t *slots, int64_t rb) {
    const int t = blockIdx.x;
    const int64_t slot = slots[t];
    if (slot < 0) return;
    for (int which = 0; which < 2; which++) {
        const float *src = (which ? v : k) + (int64_t)t * ld;
        uint8_t *dst = (which ? vc : kc) + slot * rb;
        if (KV == LLMB_TYPE_Q8_0) {
            const int lane = threadIdx.x & 31;
            for (int b = threadIdx.x >> 5; b < kv_dim / LLMB_QK; b += blockDim.x >> 5) {
                const float x = src[b * LLMB_QK + lane];
                const float amax = warp_max(fabsf(x));
                const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
                uint8_t *blk = dst + (int64_t)b * sizeof(llmb_block_q8_0);
                if (lane == 0) *(uint16_t *)blk = __half_as_ushort(__float2half_rn(d));
                blk[2 + lane] = (uint8_t)(int8_t)roundf(x * id);
            }
        } else {
            for (int e = threadIdx.x; e < kv_dim; e += blockDim.x) {
                if (KV == LLMB_TYPE_F32) ((float *)dst)[e] = src[e];
                else ((__half *)dst)[e] = __float2half_rn(src[e]);
            }
        }
    }
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
        kv_store_kernel<decltype(tc)::value><<<n_tok, 128, 0, c->stream>>>((uint8_t *)k_cache, (uint8_t *)v_cache, k, v,
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

// ---- decode ----

#define DEC_THREADS 128
#define DEC_MAX_SPLIT 8192 // keys per split: the scores of a split live in shared memory

struct dec_args {
    llmb_cuda_attn a;
    int64_t rb;
    int split, n_split;
    float *part; // (n_seq, n_head, n_split) x (head_dim + 2): unnormalized o, then max m and sum l
};

template <int KV>
__global__ void __launch_bounds__(DEC_THREADS) attn_decode_kernel(const dec_args p) {
    extern __shared__ float sm[];
    const llmb_cuda_attn &a = p.a;
    const int h = blockIdx.x, s = blockIdx.y, sp = blockIdx.z, hd = a.head_dim;
    const int kvh = h / (a.n_head / a.n_head_kv), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float *qs = sm, *sc = sm + hd, *red = sc + p.split;
    const int32_t *bt = a.block_tables + (int64_t)s * a.max_blocks;
    int len = a.seq_lens[s];
    if (len > a.max_blocks * a.block_size) len = a.max_blocks * a.block_size;
    const int k0 = sp * p.split, k1 = min(len, k0 + p.split);
    const float *q = a.q + (int64_t)s * a.ldq + (int64_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += DEC_THREADS) qs[d] = q[d] * a.scale;
    __syncthreads();
    // scores, one warp per key
    float mx = -INFINITY;
    for (int j = k0 + warp; j < k1; j += DEC_THREADS / 32) {
        const uint8_t *kr = kv_row(a.k_cache, bt, j, a.block_size, p.rb);
        float acc = 0.0f;
        for (int d = lane; d < hd; d += 32) acc += qs[d] * kv_load<KV>(kr, kvh * hd + d);
        acc = warp_sum(acc);
        if (lane == 0) sc[j - k0] = acc;
        mx = fmaxf(mx, acc);
    }
    // block max
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < DEC_THREADS / 32; w++) mx = fmaxf(mx, red[w]);
    // probabilities (unnormalized) and their sum
    float l = 0.0f;
    for (int j = threadIdx.x; j < k1 - k0; j += DEC_THREADS) {
        const float e = expf(sc[j] - mx);
        sc[j] = e;
        l += e;
    }
    l = warp_sum(l);
    __syncthreads(); // everyone has read red[] (the max) and written sc[]
    if (lane == 0) red[warp] = l;
    __syncthreads();
    l = 0.0f;
    for (int w = 0; w < DEC_THREADS / 32; w++) l += red[w];
    // o = sum_j p_j v_j, one thread per dimension
    const bool direct = p.n_split == 1;
    float *part = p.part + (((int64_t)s * a.n_head + h) * p.n_split + sp) * (hd + 2);
    for (int d = threadIdx.x; d < hd; d += DEC_THREADS) {
        float o = 0.0f;
        for (int j = k0; j < k1; j++) o += sc[j - k0] * kv_load<KV>(kv_row(a.v_cache, bt, j, a.block_size, p.rb), kvh * hd + d);
        if (direct) a.out[(int64_t)s * a.ldo + (int64_t)h * hd + d] = k1 > k0 ? o / l : 0.0f;
        else part[d] = o;
    }
    if (!direct && threadIdx.x == 0) {
        part[hd] = k1 > k0 ? mx : -INFINITY; // an empty split (past the sequence's end) weighs nothing
        part[hd + 1] = l;
    }
}

// merge the splits of one (head, sequence): o = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s
__global__ void attn_combine_kernel(const dec_args p) {
    const llmb_cuda_attn &a = p.a;
    const int h = blockIdx.x, s = blockIdx.y, hd = a.head_dim;
    const float *part = p.part + ((int64_t)s * a.n_head + h) * p.n_split * (hd + 2);
    float M = -INFINITY;
    for (int sp = 0; sp < p.n_split; sp++) M = fmaxf(M, part[sp * (hd + 2) + hd]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f, l = 0.0f;
        for (int sp = 0; sp < p.n_split; sp++) {
            const float *ps = part + sp * (hd + 2);
            if (ps[hd] == -INFINITY) continue;
            const float w = expf(ps[hd] - M);
            o += w * ps[d];
            l += w * ps[hd + 1];
        }
        a.out[(int64_t)s * a.ldo + (int64_t)h * hd + d] = l > 0.0f ? o / l : 0.0f;
    }
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
    // split long contexts so that a small batch still fills the device
    int split = a->split_keys ? a->split_keys : ((int64_t)a->n_seq * a->n_head >= 256 ? 2048 : 512);
    if (split > DEC_MAX_SPLIT) split = DEC_MAX_SPLIT;
    const int max_len = a->max_seq_len > 0 ? a->max_seq_len : 1;
    p.split = split;
    p.n_split = (max_len + split - 1) / split;
    if (p.n_split > 65535) return llmb_cu_fail(LLMB_E_ARG, "attn_decode: %d splits of %d keys (at most 65535)", p.n_split, split);
    p.part = NULL;
    if (p.n_split > 1) {
        void *ws;
        TRY(llmb_cu_ws(c, WS_ATTN, (size_t)a->n_seq * a->n_head * p.n_split * (a->head_dim + 2) * sizeof(float), &ws));
        p.part = (float *)ws;
    }
    const size_t smem = (size_t)(a->head_dim + split + DEC_THREADS / 32) * sizeof(float);
    const dim3 grid(a->n_head, a->n_seq, p.n_split);
    llmb_status st = LLMB_OK;
    dispatch_kv(a->kv_type, [&](auto tc) {
        auto *k = attn_decode_kernel<decltype(tc)::value>;
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) st = llmb_cu_cuda_fail(e, "cudaFuncSetAttribute(attn_decode_kernel)", __FILE__, __LINE__);
        else k<<<grid, DEC_THREADS, smem, c->stream>>>(p);
    });
    TRY(st);
    CU_LAUNCHED("attn_decode_kernel");
    if (p.n_split > 1) {
        attn_combine_kernel<<<dim3(a->n_head, a->n_seq), 128, 0, c->stream>>>(p);
        CU_LAUNCHED("attn_combine_kernel");
    }
    return LLMB_OK;
}

// ---- prefill ----

#define PF_BQ 16      // queries per block
#define PF_BK 32      // keys per tile
#define PF_THREADS 128 // 8 threads per query row
#define PF_DPT (LLMB_CUDA_HD_MAX / 8) // output dimensions per thread, at most

template <int KV>
__global__ void __launch_bounds__(PF_THREADS) attn_prefill_kernel(const llmb_cuda_attn a, int64_t rb) {
    extern __shared__ float sm[];
    const int hd = a.head_dim, s = blockIdx.y, h = blockIdx.z, q0 = blockIdx.x * PF_BQ;
    const int qlen = a.q_len[s];
    if (q0 >= qlen) return;
    const int kvh = h / (a.n_head / a.n_head_kv), pos0 = a.pos0[s], qstart = a.q_start[s];
    const int nq = min(PF_BQ, qlen - q0);
    const int last = pos0 + q0 + nq - 1; // position of the tile's last query: keys 0..last
    const int32_t *bt = a.block_tables + (int64_t)s * a.max_blocks;
    // Q and K rows padded by one float, so the 8 keys (4 queries) a warp reads at once sit in different banks
    const int ld = hd + 1;
    float *Q = sm, *K = Q + PF_BQ * ld, *V = K + PF_BK * ld, *S = V + PF_BK * hd;
    const int r = threadIdx.x >> 3, sub = threadIdx.x & 7;
    for (int i = threadIdx.x; i < PF_BQ * hd; i += PF_THREADS) {
        const int rr = i / hd, d = i % hd;
        Q[rr * ld + d] = rr < nq ? a.q[(int64_t)(qstart + q0 + rr) * a.ldq + (int64_t)h * hd + d] * a.scale : 0.0f;
    }
    const int qpos = pos0 + q0 + (r < nq ? r : nq - 1);
    float o[PF_DPT];
#pragma unroll
    for (int k = 0; k < PF_DPT; k++) o[k] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int kmax = min(last, a.max_blocks * a.block_size - 1);
    for (int kt = 0; kt <= kmax; kt += PF_BK) {
        __syncthreads(); // the previous tile's K, V and S are consumed
        for (int i = threadIdx.x; i < PF_BK * hd; i += PF_THREADS) {
            const int c = i / hd, d = i % hd, kp = kt + c;
            float kv = 0.0f, vv = 0.0f;
            if (kp <= kmax) {
                kv = kv_load<KV>(kv_row(a.k_cache, bt, kp, a.block_size, rb), kvh * hd + d);
                vv = kv_load<KV>(kv_row(a.v_cache, bt, kp, a.block_size, rb), kvh * hd + d);
            }
            K[c * ld + d] = kv;
            V[i] = vv;
        }
        __syncthreads();
        // scores of row r against keys sub, sub+8, sub+16, sub+24
        float sc[PF_BK / 8], tmax = -INFINITY;
#pragma unroll
        for (int k = 0; k < PF_BK / 8; k++) {
            const int c = sub + 8 * k, kp = kt + c;
            float acc = 0.0f;
            for (int d = 0; d < hd; d++) acc += Q[r * ld + d] * K[c * ld + d];
            sc[k] = kp <= qpos && kp <= kmax ? acc : -INFINITY;
            tmax = fmaxf(tmax, sc[k]);
        }
#pragma unroll
        for (int o8 = 4; o8 > 0; o8 >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o8));
        const float mnew = fmaxf(m, tmax);
        const float alpha = mnew == -INFINITY ? 1.0f : expf(m - mnew); // m = -inf: exp(-inf) = 0
        float psum = 0.0f;
#pragma unroll
        for (int k = 0; k < PF_BK / 8; k++) {
            const float pk = sc[k] == -INFINITY ? 0.0f : expf(sc[k] - mnew);
            S[r * PF_BK + sub + 8 * k] = pk;
            psum += pk;
        }
#pragma unroll
        for (int o8 = 4; o8 > 0; o8 >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o8);
        l = l * alpha + psum;
        m = mnew;
        __syncwarp(); // S of row r is written by the 8 threads of the row, all in this warp
#pragma unroll
        for (int k = 0; k < PF_DPT; k++) {
            const int d = sub + 8 * k;
            if (d < hd) {
                float acc = o[k] * alpha;
                for (int c = 0; c < PF_BK; c++) acc += S[r * PF_BK + c] * V[c * hd + d];
                o[k] = acc;
            }
        }
    }
    if (r < nq) {
        float *out = a.out + (int64_t)(qstart + q0 + r) * a.ldo + (int64_t)h * hd;
#pragma unroll
        for (int k = 0; k < PF_DPT; k++) {
            const int d = sub + 8 * k;
            if (d < hd) out[d] = l > 0.0f ? o[k] / l : 0.0f;
        }
    }
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
    const size_t smem =
        (size_t)((PF_BQ + PF_BK) * (a->head_dim + 1) + PF_BK * a->head_dim + PF_BQ * PF_BK) * sizeof(float);
    const dim3 grid((a->max_q_len + PF_BQ - 1) / PF_BQ, a->n_seq, a->n_head);
    llmb_status st = LLMB_OK;
    dispatch_kv(a->kv_type, [&](auto tc) {
        auto *k = attn_prefill_kernel<decltype(tc)::value>;
        cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) st = llmb_cu_cuda_fail(e, "cudaFuncSetAttribute(attn_prefill_kernel)", __FILE__, __LINE__);
        else k<<<grid, PF_THREADS, smem, c->stream>>>(*a, rb);
    });
    TRY(st);
    CU_LAUNCHED("attn_prefill_kernel");
    return LLMB_OK;
}
