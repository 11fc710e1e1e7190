// sample.cu — token sampling on the device, so a decode step copies back only token ids (and
// log-probabilities when asked). One block per logits row.
//
// The CPU engine's rule (csrc/engine.c, sample_row) sorts the candidates; here no sort is needed:
// every cut it makes (top-k, top-p, the sampled token itself) is "the first candidate, in order of
// (value descending, id ascending), at which a running count or probability mass reaches a target".
// That candidate is found by a radix descent over 64-bit keys (order-preserving value bits, then
// the inverted id), 8 bits at a time: a histogram of count or mass per digit among the keys that
// share the digits chosen so far, and a walk from the top digit down. Masses are summed in double
// (as the CPU does) but in atomic order, so a cut that falls within rounding of a boundary may
// differ from the CPU's; greedy is exact (first maximum).
// Reference: a NumPy restatement of sample_row (tests/test_cuda_kernels.py).
#include <math.h>

#include "common.cuh"

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
        double nc = 0;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            uint64_t key;
            double e;
            nc += member(r, i, key, e) ? 1.0 : 0.0;
        }
        nc = block_sum(nc, red);
        if (p.top_k > 0 && p.top_k < nc) r.bound = select_key(r, true, (double)p.top_k, false, hist, &s_prefix, &s_above);
        // top-p: the shortest prefix whose probability reaches top_p
        if (p.top_p < 1.0f) {
            double sum = 0;
            for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
                uint64_t key;
                double e;
                if (member(r, i, key, e)) sum += e;
            }
            sum = block_sum(sum, red);
            r.bound = select_key(r, false, (double)p.top_p * sum, false, hist, &s_prefix, &s_above);
        }
        // min-p: probability >= min_p * the largest, i.e. exp(w - mx) >= min_p (the first always stays)
        if (p.min_p > 0.0f) r.e_floor = p.min_p < 1.0f ? (double)p.min_p : 1.0;
        double total = 0;
        for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
            uint64_t key;
            double e;
            if (member(r, i, key, e)) total += e;
        }
        total = block_sum(total, red);
        const uint64_t key = select_key(r, false, (double)p.u * total, true, hist, &s_prefix, &s_above);
        tok = (int)(0xffffffffu - (uint32_t)(key & 0xffffffffu));
        if (tok < 0 || tok >= vocab) tok = 0; // no candidate at all (NaN logits)
    }
    if (threadIdx.x == 0) {
        ids[blockIdx.x] = tok;
        if (lps) lps[blockIdx.x] = (float)((double)row[tok] - lse);
    }
}

llmb_status llmb_cu_sample(llmb_cuda_ctx *c, const float *logits, int n_rows, int vocab,
                           const llmb_cuda_sampling *params, int32_t *ids, float *logprobs) {
    TRY(llmb_cu_enter(c));
    if (n_rows < 0 || vocab < 1 || !logits || !params || !ids)
        return llmb_cu_fail(LLMB_E_ARG, "sample: %d rows of %d logits, NULL pointers?", n_rows, vocab);
    for (int r = 0; r < n_rows; r++) {
        const llmb_cuda_sampling *p = &params[r];
        if (!(p->u >= 0.0f && p->u < 1.0f) || !(p->top_p > 0.0f && p->top_p <= 1.0f) || p->top_k < 0 ||
            !(p->min_p >= 0.0f) || p->temperature != p->temperature)
            return llmb_cu_fail(LLMB_E_ARG, "sample: row %d: u %g must be in [0, 1), top_p %g in (0, 1], top_k %d >= 0, "
                                            "min_p %g >= 0, temperature %g a number", r, (double)p->u, (double)p->top_p,
                                p->top_k, (double)p->min_p, (double)p->temperature);
    }
    if (n_rows == 0) return LLMB_OK;
    // staging: params in, ids and logprobs out
    const size_t pb = (size_t)n_rows * sizeof(llmb_cuda_sampling), ib = (size_t)n_rows * sizeof(int32_t);
    void *ws;
    TRY(llmb_cu_ws(c, WS_SAMPLE, pb + 2 * ib + 64, &ws));
    llmb_cuda_sampling *dp = (llmb_cuda_sampling *)ws;
    int32_t *di = (int32_t *)((char *)ws + ((pb + 15) & ~(size_t)15));
    float *dl = (float *)((char *)di + ib);
    CU_CHECK(cudaMemcpyAsync(dp, params, pb, cudaMemcpyHostToDevice, c->stream));
    sample_kernel<<<n_rows, SAMPLE_THREADS, 0, c->stream>>>(logits, vocab, dp, di, logprobs ? dl : NULL);
    CU_LAUNCHED("sample_kernel");
    CU_CHECK(cudaMemcpyAsync(ids, di, ib, cudaMemcpyDeviceToHost, c->stream));
    if (logprobs) CU_CHECK(cudaMemcpyAsync(logprobs, dl, ib, cudaMemcpyDeviceToHost, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return LLMB_OK;
}
