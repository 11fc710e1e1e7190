// ops.h — the forward pass's building blocks on float32 activations: matrix products against
// weights of any supported type, RMSNorm, RoPE, SwiGLU. Internal to the core.
#ifndef LLMB_OPS_H
#define LLMB_OPS_H

#include "model.h"

#define LLMB_MATMUL_TILE 16  // weight rows dequantized together and reused across all tokens

// Floats of scratch llmb_matmul needs for rows of up to max_ne0 elements with nthreads threads.
size_t llmb_matmul_scratch(int64_t max_ne0, int nthreads);

// y[t * ldy + r] = dot(row r of w, x[t * ldx ...]) for t < n_tok, r < w->ne1.
// Each output is computed by one fixed-order dot product, so a token's result does not depend on
// how many other tokens share the call (batch invariance).
void llmb_matmul(const llmb_weight *w, const float *x, int64_t ldx, int n_tok, float *y, int64_t ldy,
                 float *scratch, int nthreads);

// Fixed-order float32 dot product (8 interleaved partial sums, combined in a fixed tree).
float llmb_dot_f32(const float *a, const float *b, int64_t n);

void llmb_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);

// Rotate `n_heads` heads of size hd in place with the cos/sin table of one position
// (cs[2*i] = cos, cs[2*i+1] = sin of pair i).
void llmb_rope(float *v, int n_heads, int hd, const float *cs, int neox);

// cos/sin table for one position: theta_i = pos * scale * base^(-2i/hd) / freq_factor_i.
void llmb_rope_table(float *cs, int hd, int64_t pos, float base, float scale, const float *freq_factors);

void llmb_swiglu(float *gate, const float *up, int64_t n); // gate = silu(gate) * up

#endif
