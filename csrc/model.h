// model.h — a Llama-family or Gemma 3 model described by a GGUF file: the architecture configuration read from
// metadata and views of the weight tensors (zero-copy into the mapping; 1-D tensors converted to
// float32 once at load). Internal to the core; Python sees it through the engine (engine.h).
#ifndef LLMB_MODEL_H
#define LLMB_MODEL_H

#include "llmb.h"

typedef struct {
    const void *data;  // rows packed back to back, `type` blocks
    int type;          // ggml type id
    int64_t ne0;       // elements per row (the contiguous dimension)
    int64_t ne1;       // rows
    size_t row_bytes;
} llmb_weight;

typedef struct {
    float *attn_norm;               // (dim)
    llmb_weight wq, wk, wv;         // (n_head*head_dim, dim), (n_kv*head_dim, dim) x2
    float *bq, *bk, *bv;            // QKV biases (qwen2) or NULL
    llmb_weight wo;                 // (dim, n_head*head_dim)
    float *ffn_norm;                // (dim)
    llmb_weight w_gate, w_up;       // (ff, dim)
    llmb_weight w_down;             // (dim, ff)
    // gemma3 (NULL otherwise): RMSNorm of each query and key head before RoPE, and of the attention's and
    // the feed-forward's outputs before they join the residual stream
    float *attn_q_norm, *attn_k_norm;   // (head_dim)
    float *post_attn_norm, *post_ffn_norm;  // (dim)
    int swa;                        // 1: attends over the last cfg.swa_window positions only, RoPE base rope_base_swa
} llmb_layer;

typedef struct {
    char arch[32];
    int n_layer, dim, n_head, n_head_kv, head_dim, ff, vocab, ctx_train;
    float rope_base, rope_scale, norm_eps;  // rope_scale: linear position scaling (1 = none)
    int rope_neox;                          // 1: rotate pairs (i, i + d/2); 0: adjacent pairs (2i, 2i+1)
    int tied_output;
    int sliding_window;                     // {arch}.attention.sliding_window where the engine does not implement
                                            // it (mistral; 0: none): ctx may not exceed it
    // the Gemma 3 forward pass (llama, mistral, qwen2: 1, 1/sqrt(head_dim), 0, 0)
    float embd_scale;                       // token embeddings are multiplied by it (gemma3: sqrt(dim))
    float att_scale;                        // attention scores are q.k times it
    int ffn_gelu;                           // 1: GeGLU (gelu_tanh(gate) * up), 0: SwiGLU
    int swa_window;                         // window of the layers with swa set: a query at position p sees
                                            // positions p - swa_window < j <= p (gemma3; 0: no such layers)
    float rope_base_swa;                    // RoPE base of those layers (their positions are not scaled)
} llmb_model_config;

typedef struct llmb_model {
    llmb_model_config cfg;
    llmb_weight tok_embd;           // (vocab, dim)
    float *output_norm;             // (dim)
    llmb_weight output;             // (vocab, dim); the embedding when tied
    float *rope_freqs;              // (head_dim/2) frequency factors (Llama 3) or NULL
    llmb_layer *layers;             // (n_layer)
    uint64_t weight_bytes;          // bytes of all weights as stored
    float **owned;                  // converted 1-D tensors, freed with the model
    int n_owned, cap_owned;
} llmb_model;

// Read the configuration and bind the weights of `g`, which must outlive the model.
// LLMB_E_UNSUPPORTED names an architecture, tensor type or feature the engine cannot run;
// LLMB_E_FORMAT names a missing tensor, a missing key, or a shape that contradicts the metadata.
llmb_status llmb_model_load(const llmb_gguf *g, llmb_model **out);
void llmb_model_free(llmb_model *m);

#endif
