// sample.cuh — the kernels of sample.cu: the radix-descent sampler. Device code only (see device.cuh), so the
// host emulation in kernels/tests can run them too.
#ifndef LLMB_CUDA_SAMPLE_CUH
#define LLMB_CUDA_SAMPLE_CUH

#include <math.h>
#include <stdint.h>

#include "device.cuh"
#include "llmb_cuda_abi.h"

#define SAMPLE_THREADS 1024

__device__ __forceinline__ uint64_t sort_key(float w, int i) {
    uint32_t u = __float_as_uint(w);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((uint64_t)u << 32) | (uint32_t)(0xffffffffu - (uint32_t)i);
}

struct row_state {
    const float *logits;
    int vocab;
    float inv_t, mx, cand_floor; // candidates: w - mx > cand_floor
    uint64_t bound;              // and key >= bound (top-k / top-p cuts)
    double e_floor;              // and exp(w - mx) >= e_floor (min-p)
};

__device__ __forceinline__ bool member(const row_state &r, int i, uint64_t &key, double &e) {
    const float w = r.logits[i] * r.inv_t;
    if (!(w - r.mx > r.cand_floor)) return false;
    key = sort_key(w, i);
    if (key < r.bound) return false;
    e = exp((double)w - r.mx);
    return e >= r.e_floor;
}

// block-wide sum (double) and max (float); every thread gets the result
__device__ double block_sum(double v, double *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) t += red[w];
    return t;
}

__device__ float block_max(float v, double *red) {
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float t = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++) t = fmaxf(t, (float)red[w]);
    return t;
}

// how many members there are (count) or their total mass, on every thread
__device__ double member_sum(const row_state &r, bool count, double *red) {
    double acc = 0;
    for (int i = threadIdx.x; i < r.vocab; i += blockDim.x) {
        uint64_t key;
        double e;
        if (member(r, i, key, e)) acc += count ? 1.0 : e;
    }
    return block_sum(acc, red);
}

// The key of the first member, in descending key order, at which the running count (count_mode)
// or mass reaches target (>= target, or > target when strict); the last member if none does.
__device__ uint64_t select_key(const row_state &r, bool count_mode, double target, bool strict, double *hist,
                               uint64_t *s_prefix, double *s_above) {
    uint64_t prefix = 0;
    double above = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        const uint64_t hi_mask = shift == 56 ? 0 : ~0ull << (shift + 8);
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < r.vocab; i += blockDim.x) {
            uint64_t key;
            double e;
            if (member(r, i, key, e) && (key & hi_mask) == prefix)
                atomicAdd(&hist[(key >> shift) & 255], count_mode ? 1.0 : e);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int chosen = -1, lowest = -1;
            for (int b = 255; b >= 0; b--) {
                if (hist[b] == 0) continue; // members have positive mass (e > exp(-27.6))
                lowest = b;
                const double next = above + hist[b];
                if (strict ? next > target : next >= target) {
                    chosen = b;
                    break;
                }
                above = next;
            }
            if (chosen < 0 && lowest >= 0) { // not reached (rounding): descend into the last member
                chosen = lowest;
                above -= hist[lowest];
            }
            *s_prefix = prefix | ((uint64_t)(chosen < 0 ? 0 : chosen) << shift);
            *s_above = above;
        }
        __syncthreads();
        prefix = *s_prefix;
        above = *s_above;
    }
    return prefix;
}

__global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_kernel(const float *__restrict__ logits, int vocab, const llmb_cuda_sampling *__restrict__ params,
                  int32_t *__restrict__ ids, float *__restrict__ lps) {
    __shared__ double red[32], hist[256], s_above;
    __shared__ uint64_t s_prefix;
    const float *row = logits + (int64_t)blockIdx.x * vocab;
    const llmb_cuda_sampling p = params[blockIdx.x];
    // log-sum-exp of the unmodified logits (the reported log-probability)
    float mraw = -INFINITY;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) mraw = fmaxf(mraw, row[i]);
    mraw = block_max(mraw, red);
    double se = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) se += exp((double)row[i] - mraw);
    const double lse = mraw + log(block_sum(se, red));
    int tok;
    if (p.temperature <= 0.0f) { // greedy: the first maximum
        int best = vocab;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x)
            if (row[i] == mraw && i < best) best = i;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) best = min(best, __shfl_xor_sync(0xffffffffu, best, o));
        __syncthreads();
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = best;
        __syncthreads();
        tok = vocab;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) tok = min(tok, (int)red[w]);
        if (tok == vocab) tok = 0; // all NaN
    } else {
        row_state r;
        r.logits = row;
        r.vocab = vocab;
        r.inv_t = 1.0f / p.temperature;
        float mx = -INFINITY;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, row[i] * r.inv_t);
        r.mx = block_max(mx, red);
        r.cand_floor = -27.6f;
        r.bound = 0;
        r.e_floor = 0;
        // top-k: the k-th candidate's key bounds the set
        const double nc = member_sum(r, true, red);
        if (p.top_k > 0 && p.top_k < nc) r.bound = select_key(r, true, (double)p.top_k, false, hist, &s_prefix, &s_above);
        // top-p: the shortest prefix whose probability reaches top_p
        if (p.top_p < 1.0f) {
            const double sum = member_sum(r, false, red);
            r.bound = select_key(r, false, (double)p.top_p * sum, false, hist, &s_prefix, &s_above);
        }
        // min-p: probability >= min_p * the largest, i.e. exp(w - mx) >= min_p (the first always stays)
        if (p.min_p > 0.0f) r.e_floor = p.min_p < 1.0f ? (double)p.min_p : 1.0;
        const double total = member_sum(r, false, red);
        const uint64_t key = select_key(r, false, (double)p.u * total, true, hist, &s_prefix, &s_above);
        tok = (int)(0xffffffffu - (uint32_t)(key & 0xffffffffu));
        if (tok < 0 || tok >= vocab) tok = 0; // no candidate at all (NaN logits)
    }
    if (threadIdx.x == 0) {
        ids[blockIdx.x] = tok;
        if (lps) lps[blockIdx.x] = (float)((double)row[tok] - lse);
    }
}

#endif
