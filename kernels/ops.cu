// ops.cu — elementwise steps of the forward pass on float32 rows: RMSNorm with the residual add
// fused in (one pass reads x and the residual, writes both the new x and the normed row), RoPE in
// both pair orderings with Llama-3 frequency factors, SwiGLU, residual add.
// References: csrc/ops.c (llmb_rmsnorm, llmb_rope_table + llmb_rope, llmb_swiglu), restated in
// NumPy by tests/test_cuda_kernels.py.
#include "common.cuh"
#include "ops.cuh"

llmb_status llmb_cu_rmsnorm(llmb_cuda_ctx *c, float *out, float *x, const float *residual, const float *w, int64_t n,
                            int n_rows, float eps) {
    TRY(llmb_cu_enter(c));
    if (n < 1 || n_rows < 0 || !out || !x || !w || !(eps >= 0.0f))
        return llmb_cu_fail(LLMB_E_ARG, "rmsnorm: %d rows of %lld, eps %g (need n >= 1, eps >= 0, no NULL pointers)",
                            n_rows, (long long)n, (double)eps);
    if (n_rows == 0) return LLMB_OK;
    LLMB_LAUNCH(rmsnorm_kernel, dim3(n_rows), dim3(NORM_THREADS), 0, c->stream, out, x, residual, w, n, eps);
    CU_LAUNCHED("rmsnorm_kernel");
    return LLMB_OK;
}

llmb_status llmb_cu_rope(llmb_cuda_ctx *c, float *v, int n_tok, int n_heads, int head_dim, int64_t ld,
                         const int32_t *pos, float base, float scale, const float *freq_factors, int neox) {
    TRY(llmb_cu_enter(c));
    if (n_tok < 0 || n_heads < 1 || head_dim < 2 || head_dim % 2 || ld < (int64_t)n_heads * head_dim || !v || !pos)
        return llmb_cu_fail(LLMB_E_ARG, "rope: %d tokens of %d heads of %d (even) with ld %lld", n_tok, n_heads,
                            head_dim, (long long)ld);
    const int64_t n = (int64_t)n_tok * n_heads * (head_dim / 2);
    if (n == 0) return LLMB_OK;
    LLMB_LAUNCH(rope_kernel, dim3(llmb_cu_blocks(n, 256)), dim3(256), 0, c->stream, v, n_tok, n_heads, head_dim, ld, pos,
                base, scale, freq_factors, neox);
    CU_LAUNCHED("rope_kernel");
    return LLMB_OK;
}

// y = op(y, x) elementwise over n floats
template <typename K>
static llmb_status elementwise(llmb_cuda_ctx *c, const char *op, K kernel, float *y, const float *x, int64_t n) {
    TRY(llmb_cu_enter(c));
    if (n < 0 || !y || !x) return llmb_cu_fail(LLMB_E_ARG, "%s: %lld elements, NULL pointers?", op, (long long)n);
    if (n == 0) return LLMB_OK;
    LLMB_LAUNCH(kernel, dim3(llmb_cu_blocks(n, 256)), dim3(256), 0, c->stream, y, x, n);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return llmb_cu_cuda_fail(e, op, __FILE__, __LINE__); // names the kernel's op
    return LLMB_OK;
}

llmb_status llmb_cu_swiglu(llmb_cuda_ctx *c, float *gate, const float *up, int64_t n) {
    return elementwise(c, "swiglu", swiglu_kernel, gate, up, n);
}

llmb_status llmb_cu_add(llmb_cuda_ctx *c, float *y, const float *x, int64_t n) {
    return elementwise(c, "add", add_kernel, y, x, n);
}
