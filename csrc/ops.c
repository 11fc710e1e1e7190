// ops.c — building blocks of the forward pass (see ops.h). Matrix products quantize each token's
// activations once to the weights' vec_dot_type and run the integer (or float) dot products of
// vecdot.c, whose per-output operation order does not depend on the batch.
// Tested by tests/test_engine.py against the NumPy float64 reference forward pass
// (tests/reference/forward.py) and by the batch-invariance tests.
#include <assert.h>
#include <math.h>

#include "internal.h"
#include "ops.h"
#include "quants.h"
#include "vecdot.h"
#include "vexp.h"

// Compiled for AVX2 and the baseline; both run the same 8-lane operation order, so their results
// are identical (no FMA contraction under -std=c11).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define LLMB_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LLMB_CLONES
#endif

size_t llmb_matmul_row_cap(const llmb_model *m) {
    size_t cap = llmb_vec_dot_row_bytes(m->output.type, m->output.ne0);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const llmb_layer *L = &m->layers[l];
        const llmb_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < sizeof lw / sizeof *lw; i++) {
            size_t b = llmb_vec_dot_row_bytes(lw[i]->type, lw[i]->ne0);
            if (b > cap) cap = b;
        }
    }
    return cap;
}

// float_act mode: dequantize LLMB_MATMUL_TILE rows at a time, reuse them for every token.
static void matmul_float(llmb_matmul_ctx *c, const llmb_weight *w, const float *x, int64_t ldx, int n_tok, float *y,
                         int64_t ldy, int nthreads) {
    const llmb_quant_traits *q = llmb_quant_traits_get(w->type);
    const int64_t n_tiles = (w->ne1 + LLMB_MATMUL_TILE - 1) / LLMB_MATMUL_TILE;
    LLMB_PAR_FOR(nthreads > 1, nthreads, tile, n_tiles, {
        float *buf = c->wtile + (size_t)llmb_thread_id() * LLMB_MATMUL_TILE * (size_t)c->wtile_ne0;
        const int64_t r0 = tile * LLMB_MATMUL_TILE;
        const int64_t nr = w->ne1 - r0 < LLMB_MATMUL_TILE ? w->ne1 - r0 : LLMB_MATMUL_TILE;
        for (int64_t r = 0; r < nr; r++)
            q->to_float((const char *)w->data + (size_t)(r0 + r) * w->row_bytes, buf + r * w->ne0, w->ne0);
        // the F32 weights' kernels (panels for many tokens): the bits of the same matrix stored as F32
        llmb_vec_dot_matmul(LLMB_TYPE_F32, w->ne0, buf, (size_t)w->ne0 * sizeof(float), nr, x, (size_t)ldx * sizeof(float),
                            n_tok, y + r0, ldy, 1);
    });
}

// llmb_matmul_n with *have: the activation type c->xq holds for this input x (-1: none yet), so x is
// quantized once per type however the products are split.
static void matmul_n(llmb_matmul_ctx *c, int count, const llmb_cpu_weight *const *ws, const float *x, int64_t ldx, int n_tok,
                     float *const *ys, const int64_t *ldys, int *have) {
    assert(count >= 1 && count <= LLMB_MATMUL_MAX_N);
    const int vt = llmb_vec_dot_type(ws[0]->w.type);
    double work = 0;
    int same = 1;
    for (int i = 0; i < count; i++) {
        work += (double)ws[i]->w.ne0 * (double)ws[i]->w.ne1 * n_tok;
        same &= llmb_vec_dot_type(ws[i]->w.type) == vt && ws[i]->w.ne0 == ws[0]->w.ne0;
    }
    // Too little work to pay for waking the other threads (and for waiting on them when the
    // machine is busy): run it here.
    const int nthreads = c->nthreads > 1 && work >= (double)(1 << 18) ? c->nthreads : 1;
    if (c->float_act && vt != LLMB_TYPE_F32) {
        for (int i = 0; i < count; i++) {
            const uint64_t t0 = c->prof_type ? llmb_now_ns() : 0;
            matmul_float(c, &ws[i]->w, x, ldx, n_tok, ys[i], ldys[i], nthreads);
            if (c->prof_type && ws[i]->w.type >= 0 && ws[i]->w.type < c->prof_types)
                c->prof_type[ws[i]->w.type] += llmb_now_ns() - t0;
        }
        return;
    }
    if (!same) {   // weights of different activation types (Q4_0 beside Q4_K, say): one at a time
        for (int i = 0; i < count; i++) matmul_n(c, 1, &ws[i], x, ldx, n_tok, &ys[i], &ldys[i], have);
        return;
    }
    const void *xq = x;
    size_t x_stride = (size_t)ldx * sizeof(float);
    uint64_t t0 = c->prof_type ? llmb_now_ns() : 0;
    if (vt != LLMB_TYPE_F32) {
        if (*have != vt) {   // row by row: the same bytes on any thread
            LLMB_PAR_FOR(nthreads > 1 && n_tok >= 16, nthreads, t, n_tok,
                         llmb_vec_dot_quantize_x(ws[0]->w.type, x + t * ldx, c->xq + (size_t)t * c->row_cap, ws[0]->w.ne0));
            *have = vt;
        }
        xq = c->xq;
        x_stride = c->row_cap;
    }
    if (c->prof_type) {
        const uint64_t t1 = llmb_now_ns();
        *c->prof_quant_x += t1 - t0;
        t0 = t1;
    }
    llmb_matmul_part parts[LLMB_MATMUL_MAX_N];
    for (int i = 0; i < count; i++)
        parts[i] = (llmb_matmul_part){ws[i]->w.type, ws[i]->w.data, ws[i]->w.row_bytes, ws[i]->w.ne1, ys[i], ldys[i], ws[i]->il,
                                      ws[i]->stream};
    llmb_vec_dot_matmul_parts(ws[0]->w.ne0, parts, count, xq, x_stride, n_tok, nthreads);
    if (c->prof_type) {   // a fused product's time split over its matrices by their sizes (same ne0: rows)
        const double ns = (double)(llmb_now_ns() - t0);
        double rows = 0;
        for (int i = 0; i < count; i++) rows += (double)ws[i]->w.ne1;
        for (int i = 0; i < count; i++)
            if (ws[i]->w.type >= 0 && ws[i]->w.type < c->prof_types)
                c->prof_type[ws[i]->w.type] += (uint64_t)(ns * (double)ws[i]->w.ne1 / rows + 0.5);
    }
}

void llmb_matmul_n(llmb_matmul_ctx *c, int count, const llmb_cpu_weight *const *ws, const float *x, int64_t ldx, int n_tok,
                   float *const *ys, const int64_t *ldys) {
    int have = -1;
    matmul_n(c, count, ws, x, ldx, n_tok, ys, ldys, &have);
}

void llmb_matmul(llmb_matmul_ctx *c, const llmb_cpu_weight *w, const float *x, int64_t ldx, int n_tok, float *y,
                 int64_t ldy) {
    llmb_matmul_n(c, 1, &w, x, ldx, n_tok, &y, &ldy);
}

// sum of squares in 8 interleaved double partial sums combined in a fixed tree (vectorizable; one
// serial chain of double adds was ~5% of a 125m prefill)
LLMB_CLONES void llmb_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps) {
    double s[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += (double)x[i + k] * x[i + k];
    for (int k = 0; i < n; i++, k++) s[k] += (double)x[i] * x[i];
    const double ss = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

LLMB_CLONES void llmb_add_rmsnorm(float *out, float *x, const float *add, const float *w, int64_t n, float eps) {
    for (int64_t i = 0; i < n; i++) x[i] += add[i];
    llmb_rmsnorm(out, x, w, n, eps);
}

void llmb_rope_freqs(double *f, int hd, float base) {
    for (int i = 0; i < hd / 2; i++) f[i] = pow((double)base, -2.0 * i / hd);
}

void llmb_rope_table(float *cs, int hd, int64_t pos, float scale, const double *f, const float *ff) {
    for (int i = 0; i < hd / 2; i++) {
        double theta = (double)pos * scale * f[i];
        if (ff) theta /= ff[i];
        cs[2 * i] = (float)cos(theta);
        cs[2 * i + 1] = (float)sin(theta);
    }
}

// (one loop for each pairing, so that each vectorizes; every output element takes the same two products and
// one add or subtract in any lane)
LLMB_CLONES void llmb_rope(float *v, int n_heads, int hd, const float *cs, int neox) {
    const int half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (int64_t)h * hd;
        if (neox)
            for (int i = 0; i < half; i++) {
                const float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[i], x1 = x[i + half];
                x[i] = x0 * c - x1 * s;
                x[i + half] = x0 * s + x1 * c;
            }
        else
            for (int i = 0; i < half; i++) {
                const float c = cs[2 * i], s = cs[2 * i + 1], x0 = x[2 * i], x1 = x[2 * i + 1];
                x[2 * i] = x0 * c - x1 * s;
                x[2 * i + 1] = x0 * s + x1 * c;
            }
    }
}

// Gated activations act(g) * u, both as g / (1 + exp(-z)) * u with vexp.h's exp: SwiGLU's silu with z = g, and
// GeGLU's gelu (tanh approximation: 0.5 g (1 + tanh(u)) = g sigmoid(2u), no tanh needed) with
// z = 2u = g (c1 + c2 g^2), c1 = 2 sqrt(2/pi), c2 = 0.044715 c1. The AVX-512 loop, the AVX2 one and the scalar
// one run the same operations per element (identical bits); which activation is a branch outside the arithmetic.
#define GELU_C1 1.5957691216057308f
#define GELU_C2 0.07135481627260025f
static void gated_scalar(float *gate, const float *up, int64_t n, const int gelu) {
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], z = gelu ? g * (GELU_C1 + GELU_C2 * (g * g)) : g;
        gate[i] = g / (1.0f + llmb_exp_scalar(-z)) * up[i];
    }
}

#if LLMB_VEXP_AVX512
LLMB_A512 static void gated_avx512(float *gate, const float *up, int64_t n, const int gelu) {
    const __m512 one = _mm512_set1_ps(1.0f), c1 = _mm512_set1_ps(GELU_C1), c2 = _mm512_set1_ps(GELU_C2);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 z = gelu ? _mm512_mul_ps(g, _mm512_add_ps(c1, _mm512_mul_ps(c2, _mm512_mul_ps(g, g)))) : g;
        const __m512 e = llmb_exp16(_mm512_sub_ps(_mm512_setzero_ps(), z));
        _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
    }
    gated_scalar(gate + i, up + i, n - i, gelu);
}
#endif

#if LLMB_VEXP_AVX2
LLMB_A256 static void gated_avx2(float *gate, const float *up, int64_t n, const int gelu) {
    const __m256 one = _mm256_set1_ps(1.0f), c1 = _mm256_set1_ps(GELU_C1), c2 = _mm256_set1_ps(GELU_C2);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 z = gelu ? _mm256_mul_ps(g, _mm256_add_ps(c1, _mm256_mul_ps(c2, _mm256_mul_ps(g, g)))) : g;
        const __m256 e = llmb_exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
        _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
    }
    gated_scalar(gate + i, up + i, n - i, gelu);
}
#endif

static void gated(float *gate, const float *up, int64_t n, const int gelu) {
#if LLMB_VEXP_AVX512
    if (llmb_simd_active() >= LLMB_SIMD_AVX512) {
        gated_avx512(gate, up, n, gelu);
        return;
    }
#endif
#if LLMB_VEXP_AVX2
    if (llmb_simd_active() >= LLMB_SIMD_AVX2) {
        gated_avx2(gate, up, n, gelu);
        return;
    }
#endif
    gated_scalar(gate, up, n, gelu);
}

void llmb_swiglu(float *gate, const float *up, int64_t n) { gated(gate, up, n, 0); }
void llmb_swiglu_ref(float *gate, const float *up, int64_t n) { gated_scalar(gate, up, n, 0); }
void llmb_geglu(float *gate, const float *up, int64_t n) { gated(gate, up, n, 1); }
void llmb_geglu_ref(float *gate, const float *up, int64_t n) { gated_scalar(gate, up, n, 1); }

