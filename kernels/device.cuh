// device.cuh — device helpers the kernels share (warp reductions, dynamic shared memory). The
// kernel headers (*.cuh beside each .cu) include only this, quant.cuh and the ABI header, so
// kernels/tests/kernels_host.cpp can compile them for the host with kernels/tests/simt_host.h and
// run them on machines without a GPU.
#ifndef LLMB_CUDA_DEVICE_CUH
#define LLMB_CUDA_DEVICE_CUH

// LLMB_LAUNCH(kernel, grid, block, smem, stream, args...): kernel<<<grid, block, smem, stream>>>(args...),
// or the host emulation's launch. `kernel` is one token: a name, or a pointer to a templated kernel.
#ifdef LLMB_SIMT_HOST
#define DYN_SMEM(T, name) T *name = (T *)llmb_simt_dyn_smem()
#define LLMB_LAUNCH(kernel, grid, block, smem, stream, ...) simt::launch(stream, grid, block, smem, kernel, __VA_ARGS__)
#else
#define DYN_SMEM(T, name) extern __shared__ T name[]
#define LLMB_LAUNCH(kernel, grid, block, smem, stream, ...) kernel<<<grid, block, smem, stream>>>(__VA_ARGS__)
#endif

#include <stdint.h>

// blocks of `per` threads covering n items
static inline unsigned llmb_cu_blocks(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

#endif
