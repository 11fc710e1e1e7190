// ops.h — the forward pass's building blocks on float32 activations: matrix products against
// weights of any supported type, RMSNorm, RoPE, SwiGLU. Internal to the core.
#ifndef LLMB_OPS_H
#define LLMB_OPS_H

#include "model.h"

// State of the matrix products of one backend: a buffer for the activations quantized to the
// weights' vec_dot_type (csrc/vecdot.h), valid only inside one call.
typedef struct {
    uint8_t *xq;          // quantized activation rows, row_cap bytes apart
    size_t row_cap;
    int nthreads;
    int float_act;        // 1: keep activations in float32 and dequantize weight tiles instead
    float *wtile;         // float_act scratch: nthreads x LLMB_MATMUL_TILE rows of the widest matrix
    int64_t wtile_ne0;
    uint64_t *prof_quant_x;   // where set (the backend profiles): ns quantizing activations are added here,
    uint64_t *prof_type;      // and ns of the products by weight type id (< prof_types) here
    int prof_types;
} llmb_matmul_ctx;

#define LLMB_MATMUL_TILE 16  // weight rows dequantized together in float_act mode

// A matrix as the CPU backend's products read it: the model's view (model.h), or the backend's repacked
// copy of it, with the layout and the prefetching the kernels take it in (llmb_matmul_part).
typedef struct {
    llmb_weight w;     // the rows: type, shape, data (the copy's, where repacked)
    int il;            // 0: plain rows; else interleaved in groups of il rows (llmb_vec_dot_repack)
    int stream;        // 1: read from DRAM at every decode step (the model's matrices outweigh the
                       // last-level cache: llmb_cache_holds); prefetching only
} llmb_cpu_weight;

// Bytes of one quantized activation row for any matrix of the model (the row_cap to allocate).
size_t llmb_matmul_row_cap(const llmb_model *m);

// y[t * ldy + r] = dot(row r of w, x[t * ldx ...]) for t < n_tok, r < w->w.ne1, with the integer
// (or float) dot products of csrc/vecdot.h, or in float_act mode float dot products against
// dequantized weight rows (no activation rounding: slower, closer to the float model). Each output comes from the same operation sequence
// however many tokens share the call (batch invariance).
void llmb_matmul(llmb_matmul_ctx *c, const llmb_cpu_weight *w, const float *x, int64_t ldx, int n_tok, float *y,
                 int64_t ldy);
// The products of `count` <= LLMB_MATMUL_MAX_N matrices with the same input (Q, K and V; gate and up):
// ys[i] as llmb_matmul(c, ws[i], x, ldx, n_tok, ys[i], ldys[i]) gives it, bit for bit, with the input
// quantized once per activation type, in one parallel region where the weights share a vec_dot_type
// (one wake-up of the threads, not count).
#define LLMB_MATMUL_MAX_N 4
void llmb_matmul_n(llmb_matmul_ctx *c, int count, const llmb_cpu_weight *const *ws, const float *x, int64_t ldx, int n_tok,
                   float *const *ys, const int64_t *ldys);


void llmb_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
// x += add, then llmb_rmsnorm(out, x, ...): a residual add and the next norm in one pass over the token
void llmb_add_rmsnorm(float *out, float *x, const float *add, const float *w, int64_t n, float eps);

// Rotate `n_heads` heads of size hd in place with the cos/sin table of one position
// (cs[2*i] = cos, cs[2*i+1] = sin of pair i).
void llmb_rope(float *v, int n_heads, int hd, const float *cs, int neox);

// The inverse frequencies of RoPE, once per model: f[i] = base^(-2i/hd) for i < hd/2 (double).
void llmb_rope_freqs(double *f, int hd, float base);
// cos/sin table for one position: theta_i = pos * scale * f[i] / freq_factor_i (f: llmb_rope_freqs).
void llmb_rope_table(float *cs, int hd, int64_t pos, float scale, const double *f, const float *freq_factors);

void llmb_swiglu(float *gate, const float *up, int64_t n); // gate = silu(gate) * up
void llmb_swiglu_ref(float *gate, const float *up, int64_t n); // its scalar version (bit-identical; for tests)

// GeGLU with GELU's tanh approximation: gate = gelu(gate) * up, gelu(x) = 0.5 x (1 + tanh(u)) computed as
// x / (1 + exp(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3) (vexp.h's exp; SIMD and scalar bit-identical)
void llmb_geglu(float *gate, const float *up, int64_t n);
void llmb_geglu_ref(float *gate, const float *up, int64_t n);

// ---- attention (attention.c) ----
#define LLMB_ATT_Q 4   // queries per llmb_attend call
#define LLMB_ATT_BLOCK 32   // queries per llmb_attend_block call (a multiple of LLMB_ATT_Q)

// Row length of the transposed keys for n_keys keys (a multiple of 64; the padding is read, never used).
size_t llmb_att_ldk(int64_t n_keys);
// Floats of one thread's scratch for up to n_ctx keys of head size hd: the transposed keys
// (hd x ldk), the values (ldk x hd) and LLMB_ATT_BLOCK score rows of ldk.
size_t llmb_att_scratch_floats(int64_t n_ctx, int hd);
// One KV head in the paged cache from position `first` on: key and value j are position p = first + j,
// in block b = blocks[p / block_size] at slot s = p % block_size.
// - Values: rows of hd values of `type`, value j at v + b * block_stride + s * row_stride.
// - Keys: transposed within each block (llmb_kv_store_key writes them), the head's key block at
//   k + b * block_stride, block_size * llmb_kv_row_bytes(type, hd) bytes: element d of slot s at index
//   d * block_size + s of an F32 or F16 array; for Q8_0, the scales (F16) of the 32-value group c at
//   index c * block_size + s, then the int8 values, element d of slot s at byte d * block_size + s. So the
//   keys of consecutive slots lie side by side: SIMD lanes read them straight, with no transpose.
typedef struct {
    int type;                   // LLMB_TYPE_F32, LLMB_TYPE_F16 or LLMB_TYPE_Q8_0
    const uint8_t *k, *v;
    const int32_t *blocks;      // block table
    int block_size;
    size_t block_stride, row_stride;   // bytes (row_stride: the values only)
    int first;                  // the position of key 0 (a sliding window's start; 0: the sequence's start)
} llmb_kv_head;
// Bytes of one row of hd values of `type` (F32, F16 or Q8_0): a value row, or a slot's share of a key block
size_t llmb_kv_row_bytes(int type, int hd);
// Key x (hd floats) into slot `slot` of a head's key block (see llmb_kv_head), converted as the type's
// from_float converts a row
void llmb_kv_store_key(int type, uint8_t *key_block, int block_size, int slot, const float *x, int hd);
// The first n_keys keys of the head as floats, transposed (kt[d * ldk + j]; j >= n_keys unspecified:
// llmb_attend's 64-key loads read it, and no result depends on it), and the values as rows
// (v[j * hd + d]): llmb_attend's inputs. The conversion is exact (F16, F32) or the single float
// product q * d of the Q8_0 dequantizer, so any version gives the same bits.
void llmb_att_gather(const llmb_kv_head *h, int n_keys, int hd, float *kt, size_t ldk, float *v);
// the scalar version (one to_float call per row, then the transposed copy; for tests)
void llmb_att_gather_ref(const llmb_kv_head *h, int n_keys, int hd, float *kt, size_t ldk, float *v);
// out[i] = softmax_j(scale * q[i] . k_j) v_j over j < n_keys[i], for i < nq <= LLMB_ATT_Q, with the
// keys transposed (kt[d * ldk + j]) and the values as rows (v[j * hd + d]); sc: LLMB_ATT_Q x ldk
// floats of scratch. Each out[i] depends only on q[i], n_keys[i] and the first n_keys[i] keys and
// values (not on kt or v past them): the same bits whatever the other queries of the call.
void llmb_attend(int nq, const float *const *q, const int *n_keys, const float *kt, size_t ldk, const float *v, int hd,
                 float scale, float *sc, float *const *out);
// the scalar version (bit-identical; for tests)
void llmb_attend_ref(int nq, const float *const *q, const int *n_keys, const float *kt, size_t ldk, const float *v,
                     int hd, float scale, float *sc, float *const *out);
// llmb_attend_window for up to LLMB_ATT_BLOCK queries, tile by tile of LLMB_ATT_Q: the same bits for each
// query, with each chunk of keys and values read by all the tiles while it is in L1 (prefill, where many
// queries share one head's history); sc: LLMB_ATT_BLOCK x ldk floats.
void llmb_attend_block(int nq, const float *const *q, const int *k_lo, const int *n_keys, const float *kt, size_t ldk,
                       const float *v, int hd, float scale, float *sc, float *const *out);
// llmb_attend over keys k_lo[i] <= j < n_keys[i] for query i (a sliding window; k_lo NULL: from 0). Keys
// before k_lo[i] weigh exact zeros and the 16-lane sums of the softmax group keys by j % 16, so a query's
// output is the same bits whatever the other queries of the call and wherever the keys start, as long as
// the caller's key 0 sits at a position that is a multiple of 16 (backend_cpu.c gathers from multiples of 64).
void llmb_attend_window(int nq, const float *const *q, const int *k_lo, const int *n_keys, const float *kt, size_t ldk,
                        const float *v, int hd, float scale, float *sc, float *const *out);
void llmb_attend_window_ref(int nq, const float *const *q, const int *k_lo, const int *n_keys, const float *kt,
                            size_t ldk, const float *v, int hd, float scale, float *sc, float *const *out);

// Keys per chunk of llmb_attend_paged (a multiple of 64): hd x 64 floats of transposed keys, in L1 for
// head sizes up to 128
#define LLMB_ATT_CHUNK 64
// Floats of llmb_attend_paged's work: a chunk of transposed keys and LLMB_ATT_Q running sums of hd.
size_t llmb_att_paged_work_floats(int hd);
// llmb_att_gather(h, max n_keys, ...) then llmb_attend_window, the same bits, without the gathered
// copy: keys LLMB_ATT_CHUNK at a time through work (llmb_att_paged_work_floats(hd)), values read from
// the cache rows in the weighted sum. sc: LLMB_ATT_Q x llmb_att_ldk(max n_keys) floats. For few
// queries over a long history (decode), where the gathered copy is written once and read once.
void llmb_attend_paged(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd,
                       float scale, float *sc, float *work, float *const *out);
// llmb_attend_paged in three steps, for a tile shared by threads (decode of fewer KV heads than threads, say):
// the scores of its 64-key chunks k0 <= k < k1 (of llmb_att_paged_chunks; work: a thread's, as above); once all
// chunks are in, the softmax of queries i0 <= i < i1 in place and their 1 / sums in inv[i]; then output elements
// d0 <= d < d1 (multiples of 32, or d1 = hd) from the sums in acc (LLMB_ATT_Q x hd floats of the tile, each
// call its own elements; work as above). Any split gives llmb_attend_paged's bits.
int llmb_att_paged_chunks(int nq, const int *k_lo, const int *n_keys);
void llmb_attend_paged_scores(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h,
                              int hd, float scale, float *sc, float *work, int k0, int k1);
void llmb_attend_paged_softmax(int nq, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd, float *sc,
                               float *inv, int i0, int i1);
void llmb_attend_paged_values(int nq, const int *k_lo, const int *n_keys, const llmb_kv_head *h, int hd, const float *sc,
                              const float *inv, float *acc, float *work, int d0, int d1, float *const *out);
// the scalar version (the definition; one to_float call per row)
void llmb_attend_paged_ref(int nq, const float *const *q, const int *k_lo, const int *n_keys, const llmb_kv_head *h,
                           int hd, float scale, float *sc, float *work, float *const *out);


#endif
