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
#include "sample.cuh"

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
    if (c->capturing)
        return llmb_cu_fail(LLMB_E_ARG, "sample copies ids to the host and waits, so it cannot be captured in a "
                                        "graph: capture sample_dev (device params and ids) instead");
    // staging: params in, ids and logprobs out
    const size_t pb = (size_t)n_rows * sizeof(llmb_cuda_sampling), ib = (size_t)n_rows * sizeof(int32_t);
    void *ws;
    TRY(llmb_cu_ws(c, WS_SAMPLE, pb + 2 * ib + 64, &ws));
    llmb_cuda_sampling *dp = (llmb_cuda_sampling *)ws;
    int32_t *di = (int32_t *)((char *)ws + ((pb + 15) & ~(size_t)15));
    float *dl = (float *)((char *)di + ib);
    CU_CHECK(cudaMemcpyAsync(dp, params, pb, cudaMemcpyHostToDevice, c->stream));
    TRY(llmb_cu_sample_dev(c, logits, n_rows, vocab, dp, di, logprobs ? dl : NULL));
    CU_CHECK(cudaMemcpyAsync(ids, di, ib, cudaMemcpyDeviceToHost, c->stream));
    if (logprobs) CU_CHECK(cudaMemcpyAsync(logprobs, dl, ib, cudaMemcpyDeviceToHost, c->stream));
    CU_CHECK(cudaStreamSynchronize(c->stream));
    return LLMB_OK;
}

llmb_status llmb_cu_sample_dev(llmb_cuda_ctx *c, const float *logits, int n_rows, int vocab,
                               const llmb_cuda_sampling *params, int32_t *ids, float *logprobs) {
    TRY(llmb_cu_enter(c));
    if (n_rows < 0 || vocab < 1 || !logits || !params || !ids)
        return llmb_cu_fail(LLMB_E_ARG, "sample_dev: %d rows of %d logits, NULL pointers?", n_rows, vocab);
    if (n_rows == 0) return LLMB_OK;
    LLMB_LAUNCH(sample_kernel, dim3(n_rows), dim3(SAMPLE_THREADS), 0, c->stream, logits, vocab, params, ids, logprobs);
    CU_LAUNCHED("sample_kernel");
    return LLMB_OK;
}
