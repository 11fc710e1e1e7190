// load8_host.cpp — quant.cuh's block decoding run on the host, lane by lane, the way the matvec and
// dequantize kernels walk a row (every chunk of 256 elements, lanes 0..31, values k < n at
// elem_of(k)). So the device's reading of every block layout is checked against the CPU's scalar
// dequantizers on machines without a GPU: tests/test_cuda_kernels.py builds this with the host
// C++ compiler and compares its output with llmbench.quant.dequantize bit for bit.
// stdin: int32 type, int64 rows, int64 cols, then the rows' bytes. stdout: rows*cols float32 values,
// then rows*cols uint8 counts of how often each element was written (must all be 1), for the
// 16-byte-load path and then the scalar path.
#define __device__
#define __forceinline__ inline
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "../quant.cuh"

template <int T, bool VEC>
static void decode(const uint8_t *w, int64_t rows, int64_t cols, float *out, uint8_t *count) {
    const int64_t rb = llmb_cu_row_bytes(T, cols), nch = (cols + CHUNK - 1) / CHUNK;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t ch = 0; ch < nch; ch++)
            for (int lane = 0; lane < 32; lane++) {
                float v[8];
                int64_t e0, e1;
                const int n = load8<T, VEC>(w + r * rb, cols, ch, lane, v, e0, e1);
                for (int k = 0; k < n; k++) {
                    const int64_t e = elem_of(k, e0, e1);
                    if (e < 0 || e >= cols) {
                        fprintf(stderr, "lane %d of chunk %lld wrote element %lld of %lld\n", lane, (long long)ch,
                                (long long)e, (long long)cols);
                        exit(2);
                    }
                    out[r * cols + e] = v[k];
                    count[r * cols + e]++;
                }
            }
}

int main(void) {
    int32_t type;
    int64_t rows, cols;
    if (fread(&type, 4, 1, stdin) != 1 || fread(&rows, 8, 1, stdin) != 1 || fread(&cols, 8, 1, stdin) != 1) return 2;
    const int64_t rb = llmb_cu_row_bytes(type, cols);
    if (rb <= 0 || rows < 0) return 3;
    uint8_t *w = (uint8_t *)aligned_alloc(64, (size_t)(rows * rb + 64));
    if (!w || fread(w, 1, (size_t)(rows * rb), stdin) != (size_t)(rows * rb)) return 4;
    std::vector<float> out((size_t)(rows * cols));
    std::vector<uint8_t> count((size_t)(rows * cols));
    for (int vec = 1; vec >= 0; vec--) {
        std::fill(out.begin(), out.end(), 0.0f);
        std::fill(count.begin(), count.end(), 0);
        const int ok = llmb_cu_dispatch_type(type, [&](auto tc) {
            constexpr int T = decltype(tc)::value;
            if (vec) decode<T, true>(w, rows, cols, out.data(), count.data());
            else decode<T, false>(w, rows, cols, out.data(), count.data());
        });
        if (!ok) return 5;
        fwrite(out.data(), 4, out.size(), stdout);
        fwrite(count.data(), 1, count.size(), stdout);
    }
    free(w);
    return 0;
}
