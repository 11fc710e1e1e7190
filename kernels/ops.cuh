// ops.cuh — the kernels of ops.cu: RMSNorm (+ residual), RoPE, SwiGLU, add. Device code only (see device.cuh), so the
// host emulation in kernels/tests can run them too.
#ifndef LLMB_CUDA_OPS_CUH
#define LLMB_CUDA_OPS_CUH

#include <math.h>
#include <stdint.h>

#include "device.cuh"

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

// ---- SwiGLU, residual add ----

__global__ void swiglu_kernel(float *__restrict__ g, const float *__restrict__ u, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

__global__ void add_kernel(float *__restrict__ y, const float *__restrict__ x, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

#endif
