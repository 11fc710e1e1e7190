// ops.c — float32 building blocks of the forward pass (see ops.h). Matrix products dequantize a
// tile of weight rows once (type kernels from quants.c) and reuse it for every token; the dot
// product has a fixed summation order, so results are identical for any batch composition.
// Tested by tests/test_engine.py against the NumPy float64 reference forward pass
// (tests/reference/forward.py) and by the batch-invariance tests.
#include <math.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "ops.h"
#include "quants.h"

size_t llmb_matmul_scratch(int64_t max_ne0, int nthreads) {
    return (size_t)nthreads * LLMB_MATMUL_TILE * (size_t)max_ne0;
}

float llmb_dot_f32(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += a[i + k] * b[i + k];
    for (int k = 0; i < n; i++, k++) s[k] += a[i] * b[i];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

void llmb_matmul(const llmb_weight *w, const float *x, int64_t ldx, int n_tok, float *y, int64_t ldy,
                 float *scratch, int nthreads) {
    const llmb_quant_traits *q = llmb_quant_traits_get(w->type);
    const int64_t n_tiles = (w->ne1 + LLMB_MATMUL_TILE - 1) / LLMB_MATMUL_TILE;
    const int direct = w->type == LLMB_TYPE_F32;
    // Too little work to pay for waking the other threads (and for waiting on them when the
    // machine is busy): run it here.
    const int par = nthreads > 1 && (double)w->ne0 * (double)w->ne1 * n_tok >= (double)(1 << 18);
#pragma omp parallel for schedule(static) num_threads(nthreads) if (par)
    for (int64_t tile = 0; tile < n_tiles; tile++) {
#ifdef _OPENMP
        float *buf = scratch + (size_t)omp_get_thread_num() * LLMB_MATMUL_TILE * (size_t)w->ne0;
#else
        float *buf = scratch;
#endif
        int64_t r0 = tile * LLMB_MATMUL_TILE;
        int64_t nr = w->ne1 - r0 < LLMB_MATMUL_TILE ? w->ne1 - r0 : LLMB_MATMUL_TILE;
        const float *rows;
        if (direct) {
            rows = (const float *)((const char *)w->data + (size_t)r0 * w->row_bytes);
        } else {
            for (int64_t r = 0; r < nr; r++)
                q->to_float((const char *)w->data + (size_t)(r0 + r) * w->row_bytes, buf + r * w->ne0, w->ne0);
            rows = buf;
        }
        for (int t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < nr; r++)
                y[(int64_t)t * ldy + r0 + r] = llmb_dot_f32(rows + r * w->ne0, x + (int64_t)t * ldx, w->ne0);
    }
}

void llmb_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

void llmb_rope_table(float *cs, int hd, int64_t pos, float base, float scale, const float *ff) {
    for (int i = 0; i < hd / 2; i++) {
        double theta = (double)pos * scale * pow((double)base, -2.0 * i / hd);
        if (ff) theta /= ff[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

void llmb_rope(float *v, int n_heads, int hd, const float *cs, int neox) {
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (int64_t)h * hd;
        for (int i = 0; i < hd / 2; i++) {
            int a = neox ? i : 2 * i, b = neox ? i + hd / 2 : 2 * i + 1;
            float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[a], x1 = x[b];
            x[a] = x0 * c - x1 * s;
            x[b] = x0 * s + x1 * c;
        }
    }
}

void llmb_swiglu(float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
