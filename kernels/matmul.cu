// matmul.cu — matrix products against weights of any supported ggml type, y[t, r] = W[r, :] . x[t, :]:
//   matvec     decode (1..16 tokens): one warp per weight row decodes the blocks in registers
//              (quant.cuh) and accumulates every token's dot product in FP32, so each weight byte is
//              read once per call whatever the token count;
//   gemm       prefill and large batches: weights dequantized tile by tile to FP16 (BF16 and F32 kept)
//              in a reused workspace, activations rounded to the same type once, cublasGemmEx with
//              FP32 accumulation and output;
//   dequantize rows (or rows picked by ids: the embedding lookup) to F32 or F16.
// References: NumPy on llmbench.quant's CPU dequantization (tests/test_cuda_kernels.py).
#include <cuda_bf16.h>
#include <limits.h>

#include "common.cuh"
#include "quant.cuh"
#include "matmul.cuh"

static llmb_status check_matmul(const char *op, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                                int64_t ldx, int ntok, float *y, int64_t ldy) {
    if (!llmb_cu_row_bytes(wtype, LLMB_QK_K))
        return llmb_cu_fail(LLMB_E_UNSUPPORTED, "%s: weight type %d has no CUDA kernel (F32, F16, BF16, Q4_0, Q8_0, "
                                                "Q4_K, Q5_K, Q6_K)", op, wtype);
    if (rows < 0 || cols < 1 || cols % llmb_cu_blck(wtype) || cols > INT_MAX || rows > INT_MAX)
        return llmb_cu_fail(LLMB_E_ARG, "%s: a %lld x %lld matrix of type %d: columns must be a positive multiple of %lld",
                            op, (long long)rows, (long long)cols, wtype, (long long)llmb_cu_blck(wtype));
    if (ntok < 1 || ldx < cols || ldy < rows)
        return llmb_cu_fail(LLMB_E_ARG, "%s: %d tokens, ldx %lld (>= %lld), ldy %lld (>= %lld)", op, ntok,
                            (long long)ldx, (long long)cols, (long long)ldy, (long long)rows);
    if (!w || !x || !y) return llmb_cu_fail(LLMB_E_ARG, "%s: NULL pointer", op);
    return LLMB_OK;
}

llmb_status llmb_cu_matvec(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                           int64_t ldx, int ntok, float *y, int64_t ldy) {
    TRY(llmb_cu_enter(c));
    TRY(check_matmul("matvec", wtype, w, rows, cols, x, ldx, ntok, y, ldy));
    if (ntok > LLMB_CUDA_MATVEC_MAX)
        return llmb_cu_fail(LLMB_E_ARG, "matvec: %d tokens, at most %d (use gemm)", ntok, LLMB_CUDA_MATVEC_MAX);
    if (rows == 0) return LLMB_OK;
    const int64_t rb = llmb_cu_row_bytes(wtype, cols);
    const bool vec = matvec_vec_ok(wtype, w, cols, x, ldx);
    const dim3 grid(llmb_cu_blocks(rows, MV_WARPS)), block(MV_WARPS * 32);
    const uint8_t *wb = (const uint8_t *)w;
    llmb_cu_dispatch_type(wtype, [&](auto tc) {
        with_matvec_nb(ntok, [&](auto nb) {
            constexpr int T = decltype(tc)::value, NB = decltype(nb)::value;
            auto *k = vec ? matvec_kernel<T, NB, true> : matvec_kernel<T, NB, false>;
            LLMB_LAUNCH(k, grid, block, 0, c->stream, wb, rb, rows, cols, x, ldx, ntok, y, ldy);
        });
    });
    CU_LAUNCHED("matvec_kernel");
    return LLMB_OK;
}

static llmb_status dequantize_on(cudaStream_t st, int wtype, const void *w, int64_t rows, int64_t cols,
                                 const int32_t *ids, int64_t n, int out_type, void *out) {
    const int64_t rb = llmb_cu_row_bytes(wtype, cols);
    llmb_cu_dispatch_type(wtype, [&](auto tc) {
        constexpr int T = decltype(tc)::value;
        auto *k16 = dequant_kernel<T, __half>;
        auto *k32 = dequant_kernel<T, float>;
        if (out_type == LLMB_TYPE_F16)
            LLMB_LAUNCH(k16, dim3((unsigned)n), dim3(128), 0, st, (const uint8_t *)w, rb, rows, cols, ids, n, (__half *)out);
        else LLMB_LAUNCH(k32, dim3((unsigned)n), dim3(128), 0, st, (const uint8_t *)w, rb, rows, cols, ids, n, (float *)out);
    });
    CU_LAUNCHED("dequant_kernel");
    return LLMB_OK;
}

llmb_status llmb_cu_dequantize(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols,
                               const int32_t *ids, int64_t n, int out_type, void *out) {
    TRY(llmb_cu_enter(c));
    float dummy;
    TRY(check_matmul("dequantize", wtype, w, rows, cols, &dummy, cols, 1, &dummy, rows));
    if (out_type != LLMB_TYPE_F32 && out_type != LLMB_TYPE_F16)
        return llmb_cu_fail(LLMB_E_ARG, "dequantize: output type %d is not F32 (0) or F16 (1)", out_type);
    if (n < 0 || n > INT_MAX || (!ids && n > rows) || !out)
        return llmb_cu_fail(LLMB_E_ARG, "dequantize: %lld output rows of a %lld-row matrix%s", (long long)n,
                            (long long)rows, out ? "" : ", NULL output");
    if (n == 0) return LLMB_OK;
    return dequantize_on(c->stream, wtype, w, rows, cols, ids, n, out_type, out);
}

#define GEMM_TILE_BYTES ((size_t)64 << 20) // dequantized weight rows per cuBLAS call

llmb_status llmb_cu_gemm(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                         int64_t ldx, int ntok, float *y, int64_t ldy) {
    TRY(llmb_cu_enter(c));
    TRY(check_matmul("gemm", wtype, w, rows, cols, x, ldx, ntok, y, ldy));
    if (rows == 0) return LLMB_OK;
    const float alpha = 1.0f, beta = 0.0f;
    if (wtype == LLMB_TYPE_F32) { // plain SGEMM on the float weights
        CUBLAS_CHECK(llmb_cu_blas.gemm_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, ntok, (int)cols, &alpha, w, CUDA_R_32F,
                                  (int)cols, x, CUDA_R_32F, (int)ldx, &beta, y, CUDA_R_32F, (int)ldy,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        return LLMB_OK;
    }
    // activations in the weights' 16-bit type: BF16 for BF16 weights, else FP16
    const bool bf = wtype == LLMB_TYPE_BF16;
    const cudaDataType_t dt = bf ? CUDA_R_16BF : CUDA_R_16F;
    void *x16, *wt;
    TRY(llmb_cu_ws(c, WS_GEMM_X, (size_t)ntok * (size_t)cols * 2, &x16));
    const int64_t nx = (int64_t)ntok * cols;
    auto *rbf = round_rows_kernel<__nv_bfloat16>;
    auto *rh = round_rows_kernel<__half>;
    const dim3 g(llmb_cu_blocks(nx, 256)), b(256);
    if (bf) LLMB_LAUNCH(rbf, g, b, 0, c->stream, x, ldx, cols, (int64_t)ntok, (__nv_bfloat16 *)x16);
    else LLMB_LAUNCH(rh, g, b, 0, c->stream, x, ldx, cols, (int64_t)ntok, (__half *)x16);
    CU_LAUNCHED("round_rows_kernel");
    const bool direct = wtype == LLMB_TYPE_F16 || bf; // the weights are already 16-bit rows
    int64_t tile = direct ? rows : (int64_t)(GEMM_TILE_BYTES / ((size_t)cols * 2));
    if (tile < 1) tile = 1;
    if (tile > rows) tile = rows;
    if (!direct) TRY(llmb_cu_ws(c, WS_GEMM_W, (size_t)tile * (size_t)cols * 2, &wt));
    const int64_t rb = llmb_cu_row_bytes(wtype, cols);
    for (int64_t r0 = 0; r0 < rows; r0 += tile) {
        const int64_t nr = rows - r0 < tile ? rows - r0 : tile;
        const void *a = (const uint8_t *)w + r0 * rb;
        if (!direct) {
            TRY(dequantize_on(c->stream, wtype, a, nr, cols, NULL, nr, LLMB_TYPE_F16, wt));
            a = wt;
        }
        CUBLAS_CHECK(llmb_cu_blas.gemm_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, ntok, (int)cols, &alpha, a, dt, (int)cols,
                                  x16, dt, (int)cols, &beta, y + r0, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    }
    return LLMB_OK;
}

llmb_status llmb_cu_set_gemm_min_tokens(llmb_cuda_ctx *c, int ntok) {
    TRY(llmb_cu_enter(c));
    if (ntok < 1) return llmb_cu_fail(LLMB_E_ARG, "gemm_min_tokens must be >= 1, got %d", ntok);
    c->gemm_min_tokens = ntok;
    return LLMB_OK;
}

llmb_status llmb_cu_matmul(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                           int64_t ldx, int ntok, float *y, int64_t ldy) {
    TRY(llmb_cu_enter(c));
    if (ntok <= LLMB_CUDA_MATVEC_MAX && ntok < c->gemm_min_tokens)
        return llmb_cu_matvec(c, wtype, w, rows, cols, x, ldx, ntok, y, ldy);
    return llmb_cu_gemm(c, wtype, w, rows, cols, x, ldx, ntok, y, ldy);
}
