// matmul.cu — matrix products against weights of any supported ggml type, y[t, r] = W[r, :] . x[t, :]:
//   matvec     decode (1..16 tokens): one warp per weight row decodes the blocks in registers
//              (quant.cuh) and accumulates every token's dot product in FP32, so each weight byte is
//              read once per call whatever the token count;
//   gemm       prefill and large batches: weights dequantized tile by tile to FP16 (BF16 and F32 kept)
//              in a reused workspace, activations rounded to the same type once, cublasGemmEx with
//              FP32 accumulation and output on fixed 128-token chunks (batch invariance);
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
        return llmb_cu_fail(LLMB_E_UNSUPPORTED, "%s: weight type %d has no CUDA kernel (F32, F16, BF16, Q4_0, Q4_1, "
                                                "Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS)", op, wtype);
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

// Tokens per cuBLAS call. cuBLAS picks its kernel (tiles, split-K) by the problem's shape, so a
// token's bits would depend on how many tokens share the call: every call has exactly GEMM_CHUNK
// columns (the last padded with zeros), and the same leading dimensions and alignment, so a token's
// row comes out the same whatever else is in the batch and wherever it sits in it.
#define GEMM_CHUNK 128

llmb_status llmb_cu_gemm(llmb_cuda_ctx *c, int wtype, const void *w, int64_t rows, int64_t cols, const float *x,
                         int64_t ldx, int ntok, float *y, int64_t ldy) {
    TRY(llmb_cu_enter(c));
    TRY(check_matmul("gemm", wtype, w, rows, cols, x, ldx, ntok, y, ldy));
    if (rows == 0) return LLMB_OK;
    const float alpha = 1.0f, beta = 0.0f;
    // activations staged in a padded workspace: FP32 for F32 weights, BF16 for BF16, else FP16
    const bool f32 = wtype == LLMB_TYPE_F32, bf = wtype == LLMB_TYPE_BF16;
    const cudaDataType_t dt = f32 ? CUDA_R_32F : bf ? CUDA_R_16BF : CUDA_R_16F;
    const size_t es = f32 ? 4 : 2;
    const int64_t npad = ((int64_t)ntok + GEMM_CHUNK - 1) / GEMM_CHUNK * GEMM_CHUNK;
    void *xs, *wt = NULL, *ypad = NULL;
    TRY(llmb_cu_ws(c, WS_GEMM_X, (size_t)npad * (size_t)cols * es, &xs));
    const dim3 g(llmb_cu_blocks((int64_t)ntok * cols, 256)), b(256);
    if (f32) LLMB_LAUNCH(round_rows_kernel<float>, g, b, 0, c->stream, x, ldx, cols, (int64_t)ntok, (float *)xs, cols);
    else if (bf) LLMB_LAUNCH(round_rows_kernel<__nv_bfloat16>, g, b, 0, c->stream, x, ldx, cols, (int64_t)ntok,
                             (__nv_bfloat16 *)xs, cols);
    else LLMB_LAUNCH(round_rows_kernel<__half>, g, b, 0, c->stream, x, ldx, cols, (int64_t)ntok, (__half *)xs, cols);
    CU_LAUNCHED("round_rows_kernel");
    if (npad > ntok)
        CU_CHECK(cudaMemsetAsync((uint8_t *)xs + (size_t)ntok * cols * es, 0, (size_t)(npad - ntok) * cols * es,
                                 c->stream));
    // Output straight into y in whole chunks when y is 256-byte aligned (as the workspace is, so that
    // cuBLAS sees one alignment either way); the padded last chunk, or every chunk of an unaligned y,
    // goes through a workspace of the same leading dimension and is copied back.
    const bool y_direct = (uintptr_t)y % 256 == 0;
    const int64_t n_via = y_direct ? (npad > ntok ? GEMM_CHUNK : 0) : npad;
    const int64_t t_via = npad - n_via; // first token written through the workspace
    if (n_via) TRY(llmb_cu_ws(c, WS_GEMM_Y, (size_t)n_via * (size_t)ldy * 4, &ypad));
    const bool direct = wtype == LLMB_TYPE_F16 || bf || f32; // the weights are already rows of dt
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
        for (int64_t t0 = 0; t0 < npad; t0 += GEMM_CHUNK) {
            float *yc = (t0 < t_via ? y + t0 * ldy : (float *)ypad + (t0 - t_via) * ldy) + r0;
            CUBLAS_CHECK(llmb_cu_blas.gemm_ex(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, GEMM_CHUNK, (int)cols, &alpha,
                                              a, dt, (int)cols, (const uint8_t *)xs + (size_t)t0 * cols * es, dt,
                                              (int)cols, &beta, yc, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
        }
    }
    if (n_via && ntok > t_via) {
        const int64_t nc = ntok - t_via;
        LLMB_LAUNCH(round_rows_kernel<float>, dim3(llmb_cu_blocks(nc * rows, 256)), b, 0, c->stream,
                    (const float *)ypad, ldy, rows, nc, y + t_via * ldy, ldy);
        CU_LAUNCHED("round_rows_kernel");
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
