// ops.cu — elementwise steps of the forward pass on float32 rows: RMSNorm with the residual add
// fused in (one pass reads x and the residual, writes both the new x and the normed row), RoPE in
// both pair orderings with Llama-3 frequency factors, SwiGLU, residual add.
// References: csrc/ops.c (llmb_rmsnorm, llmb_rope_table + llmb_rope, llmb_swiglu), restated in
// NumPy by tests/test_cuda_kernels.py.
#include "common.cuh"

// ---- RMSNorm (+ residual) ----

#define NORM_THREADS 256

__global__ void __launch_bounds__(NORM_THREADS)
    rmsnorm_kernel(float *__restrict__ out, float *__restrict__ x, const float *__restrict__ res,
                   const float *__restrict__ w, int64_t n, float eps) {
    __shared__ float part[NORM_THREADS / 32];
    float *xr = x + (int64_t)blockIdx.x * n;
    float *orow = out + (int64_t)blockIdx.x * n;
    const float *rr = res ? res + (int64_t)blockIdx.x * n : NULL;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) {
        float v = xr[i];
        if (rr) {
            v += rr[i];
            xr[i] = v;
        }
        ss += v * v;
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < NORM_THREADS / 32 ? part[threadIdx.x] : 0.0f;
        t = warp_sum(t);
        if (threadIdx.x == 0) part[0] = t;
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf(part[0] / (float)n + eps);
    // each thread rewrites the elements it read above, so out may alias x
    for (int64_t i = threadIdx.x; i < n; i += NORM_THREADS) orow[i] = xr[i] * scale * w[i];
}

llmb_status llmb_cu_rmsnorm(llmb_cuda_ctx *c, float *out, float *x, const float *residual, const float *w, int64_t n,
                            int n_rows, float eps) {
    TRY(llmb_cu_enter(c));
    if (n < 1 || n_rows < 0 || !out || !x || !w || !(eps >= 0.0f))
        return llmb_cu_fail(LLMB_E_ARG, "rmsnorm: %d rows of %lld, eps %g (need n >= 1, eps >= 0, no NULL pointers)",
                            n_rows, (long long)n, (double)eps);
    if (n_rows == 0) return LLMB_OK;
    rmsnorm_kernel<<<n_rows, NORM_THREADS, 0, c->stream>>>(out, x, residual, w, n, eps);
    CU_LAUNCHED("rmsnorm_kernel");
    return LLMB_OK;
}

// ---- RoPE ----

// One thread per (token, head, pair). The angle in double as llmb_rope_table computes it.
__global__ void rope_kernel(float *__restrict__ v, int n_tok, int n_heads, int hd, int64_t ld,
                            const int32_t *__restrict__ pos, float base, float scale, const float *__restrict__ ff,
                            int neox) {
    const int half = hd / 2;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n_tok * n_heads * half) return;
    const int i = (int)(idx % half);
    const int h = (int)((idx / half) % n_heads);
    const int64_t t = idx / ((int64_t)half * n_heads);
    double theta = (double)pos[t] * scale * pow((double)base, -2.0 * i / hd);
    if (ff) theta /= ff[i];
    const float cs = (float)cos(theta), sn = (float)sin(theta);
    float *x = v + t * ld + (int64_t)h * hd;
    const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
    const float x0 = x[a], x1 = x[b];
    x[a] = x0 * cs - x1 * sn;
    x[b] = x0 * sn + x1 * cs;
}

llmb_status llmb_cu_rope(llmb_cuda_ctx *c, float *v, int n_tok, int n_heads, int head_dim, int64_t ld,
                         const int32_t *pos, float base, float scale, const float *freq_factors, int neox) {
    TRY(llmb_cu_enter(c));
    if (n_tok < 0 || n_heads < 1 || head_dim < 2 || head_dim % 2 || ld < (int64_t)n_heads * head_dim || !v || !pos)
        return llmb_cu_fail(LLMB_E_ARG, "rope: %d tokens of %d heads of %d (even) with ld %lld", n_tok, n_heads,
                            head_dim, (long long)ld);
    const int64_t n = (int64_t)n_tok * n_heads * (head_dim / 2);
    if (n == 0) return LLMB_OK;
    rope_kernel<<<llmb_cu_blocks(n, 256), 256, 0, c->stream>>>(v, n_tok, n_heads, head_dim, ld, pos, base, scale,
                                                               freq_factors, neox);
    CU_LAUNCHED("rope_kernel");
    return LLMB_OK;
}

// ---- SwiGLU, residual add ----

__global__ void swiglu_kernel(float *__restrict__ g, const float *__restrict__ u, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

__global__ void add_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

static llmb_status check_n(const char *op, const void *a, const void *b, int64_t n) {
    if (n < 0 || !a || !b) return llmb_cu_fail(LLMB_E_ARG, "%s: %lld elements, NULL pointers?", op, (long long)n);
    return LLMB_OK;
}

llmb_status llmb_cu_swiglu(llmb_cuda_ctx *c, float *gate, const float *up, int64_t n) {
    TRY(llmb_cu_enter(c));
    TRY(check_n("swiglu", gate, up, n));
    if (n == 0) return LLMB_OK;
    swiglu_kernel<<<llmb_cu_blocks(n, 256), 256, 0, c->stream>>>(gate, up, n);
    CU_LAUNCHED("swiglu_kernel");
    return LLMB_OK;
}

llmb_status llmb_cu_add(llmb_cuda_ctx *c, float *y, const float *x, int64_t n) {
    TRY(llmb_cu_enter(c));
    TRY(check_n("add", y, x, n));
    if (n == 0) return LLMB_OK;
    add_kernel<<<llmb_cu_blocks(n, 256), 256, 0, c->stream>>>(y, x, n);
    CU_LAUNCHED("add_kernel");
    return LLMB_OK;
}
