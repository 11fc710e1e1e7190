// matmul.cuh — the kernels of matmul.cu: matvec, dequantize, 16-bit rounding of activations. Device code only (see device.cuh), so the
// host emulation in kernels/tests can run them too.
#ifndef LLMB_CUDA_MATMUL_CUH
#define LLMB_CUDA_MATMUL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device.cuh"
#include "quant.cuh"

#define MV_WARPS 4 // rows per block of the matvec kernel

// 16-byte loads of x (and of float-type rows) need 16-byte alignment of every row start
static inline bool matvec_vec_ok(int wtype, const void *w, int64_t cols, const float *x, int64_t ldx) {
    return ((uintptr_t)x % 16 == 0) && ldx % 4 == 0 &&
           (llmb_cu_blck(wtype) > 1 ||
            ((uintptr_t)w % 16 == 0 && llmb_cu_row_bytes(wtype, cols) % 16 == 0 && cols % 8 == 0));
}

// f(std::integral_constant<int, NB>{}) with the smallest instantiated token count NB >= ntok (1..16)
template <typename F>
static inline void with_matvec_nb(int ntok, F &&f) {
    if (ntok == 1) f(std::integral_constant<int, 1>{});
    else if (ntok == 2) f(std::integral_constant<int, 2>{});
    else if (ntok <= 4) f(std::integral_constant<int, 4>{});
    else if (ntok <= 8) f(std::integral_constant<int, 8>{});
    else f(std::integral_constant<int, 16>{});
}

// ---- decode: matrix-vector products ----

template <int T, int NB, bool VEC>
__global__ void __launch_bounds__(MV_WARPS * 32)
    matvec_kernel(const uint8_t *__restrict__ w, int64_t row_bytes, int64_t rows, int64_t cols,
                  const float *__restrict__ x, int64_t ldx, int ntok, float *__restrict__ y, int64_t ldy) {
    const int lane = threadIdx.x & 31;
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return; // a whole warp leaves together
    const uint8_t *row = w + r * row_bytes;
    float acc[NB];
#pragma unroll
    for (int t = 0; t < NB; t++) acc[t] = 0.0f;
    const int64_t nch = (cols + CHUNK - 1) / CHUNK;
    for (int64_t ch = 0; ch < nch; ch++) {
        float v[8];
        int64_t e0, e1;
        const int n = load8<T, VEC>(row, cols, ch, lane, v, e0, e1);
        if (n == 8 && VEC) {
#pragma unroll
            for (int t = 0; t < NB; t++) {
                if (t < ntok) {
                    const float4 a = *(const float4 *)(x + t * ldx + e0), b = *(const float4 *)(x + t * ldx + e1);
                    acc[t] += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y +
                              v[6] * b.z + v[7] * b.w;
                }
            }
        } else if (n > 0) {
#pragma unroll
            for (int t = 0; t < NB; t++) {
                if (t < ntok) {
                    const float *xt = x + t * ldx;
                    float s = 0.0f;
#pragma unroll
                    for (int k = 0; k < 8; k++)
                        if (k < n) s += v[k] * xt[elem_of(k, e0, e1)];
                    acc[t] += s;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NB; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0 && t < ntok) y[t * ldy + r] = s;
    }
}

// ---- dequantization ----

__device__ __forceinline__ void store_cvt(float *p, float v) { *p = v; }
__device__ __forceinline__ void store_cvt(__half *p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void store_cvt(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

// Output row i (< n) from weight row ids[i] (or i); one block of 4 warps per output row.
template <int T, typename OUT>
__global__ void dequant_kernel(const uint8_t *__restrict__ w, int64_t row_bytes, int64_t rows, int64_t cols,
                               const int32_t *__restrict__ ids, int64_t n, OUT *__restrict__ out) {
    const int64_t i = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    const int64_t src = ids ? (int64_t)ids[i] : i;
    OUT *o = out + i * cols;
    if (src < 0 || src >= rows) { // an id outside the table: a row of zeros
        for (int64_t e = threadIdx.x; e < cols; e += blockDim.x) store_cvt(o + e, 0.0f);
        return;
    }
    const int64_t nch = (cols + CHUNK - 1) / CHUNK;
    for (int64_t ch = warp; ch < nch; ch += nwarps) {
        float v[8];
        int64_t e0, e1;
        const int nv = load8<T, false>(w + src * row_bytes, cols, ch, lane, v, e0, e1);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (k < nv) store_cvt(o + elem_of(k, e0, e1), v[k]);
        }
    }
}

// ---- prefill: dequantized tiles and cuBLAS ----

// out[t, e] (leading dimension ldo) = x[t, e] (leading dimension ldx) in OUT, for n rows of cols
template <typename OUT>
__global__ void round_rows_kernel(const float *__restrict__ x, int64_t ldx, int64_t cols, int64_t n,
                                  OUT *__restrict__ out, int64_t ldo) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * cols) return;
    store_cvt(out + (i / cols) * ldo + i % cols, x[(i / cols) * ldx + i % cols]);
}

#endif
