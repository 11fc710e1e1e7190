// attention.cuh — the kernels of attention.cu: the KV store, paged decode attention with its combine, tiled causal prefill attention. Device code only (see device.cuh), so the
// host emulation in kernels/tests can run them too.
#ifndef LLMB_CUDA_ATTENTION_CUH
#define LLMB_CUDA_ATTENTION_CUH

#include <math.h>

#include "device.cuh"
#include "llmb_cuda_abi.h"
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

// ---- decode ----

#define DEC_THREADS 128
#define DEC_MAX_SPLIT 8192 // keys per split: the scores of a split live in shared memory

// Keys per split and splits of a decode launch: long contexts are split so that a small batch still
// fills the device (attention.cu and the host test plan launches with this).
static inline void dec_plan(const llmb_cuda_attn *a, int *split, int *n_split) {
    int sk = a->split_keys ? a->split_keys : ((int64_t)a->n_seq * a->n_head >= 256 ? 2048 : 512);
    if (sk > DEC_MAX_SPLIT) sk = DEC_MAX_SPLIT;
    const int max_len = a->max_seq_len > 0 ? a->max_seq_len : 1;
    *split = sk;
    *n_split = (max_len + sk - 1) / sk;
}
static inline size_t dec_smem(int hd, int split) { return (size_t)(hd + split + DEC_THREADS / 32) * sizeof(float); }

struct dec_args {
    llmb_cuda_attn a;
    int64_t rb;
    int split, n_split;
    float *part; // (n_seq, n_head, n_split) x (head_dim + 2): unnormalized o, then max m and sum l
};

template <int KV>
__global__ void __launch_bounds__(DEC_THREADS) attn_decode_kernel(const dec_args p) {
    DYN_SMEM(float, sm);
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

// ---- prefill ----

#define PF_BQ 16      // queries per block
#define PF_BK 32      // keys per tile
#define PF_THREADS 128 // 8 threads per query row
#define PF_DPT (LLMB_CUDA_HD_MAX / 8) // output dimensions per thread, at most

static inline size_t pf_smem(int hd) {
    return (size_t)((PF_BQ + PF_BK) * (hd + 1) + PF_BK * hd + PF_BQ * PF_BK) * sizeof(float);
}

template <int KV>
__global__ void __launch_bounds__(PF_THREADS) attn_prefill_kernel(const llmb_cuda_attn a, int64_t rb) {
    DYN_SMEM(float, sm);
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

#endif
