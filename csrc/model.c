// model.c — build an llmb_model from a validated GGUF file: architecture configuration from
// metadata (llama, mistral, qwen2, gemma3), weight views with shapes checked against that configuration.
// Tested by tests/test_engine.py (stories260K, dummy presets, unsupported architectures/types) and
// tests/test_gemma3.py (the gemma3 dummy preset, the real Gemma 3 270M file).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "model.h"
#include "quants.h"
#include "vecdot.h"

// ---- metadata access ----

static const llmb_gguf_value *kv(const llmb_gguf *g, const char *key) {
    int64_t i = llmb_gguf_find_kv(g, key);
    return i < 0 ? NULL : llmb_gguf_kv_value(g, (uint64_t)i);
}

// An integer key of any integer type; `def` < 0 means required.
static llmb_status get_int(const llmb_gguf *g, const char *arch, const char *suffix, int64_t def, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const llmb_gguf_value *v = kv(g, key);
    if (!v) {
        if (def < 0) return llmb_fail(LLMB_E_FORMAT, "model: metadata key '%s' is missing", key);
        *out = (int)def;
        return LLMB_OK;
    }
    int64_t x;
    switch (v->type) {
    case LLMB_GGUF_UINT8: case LLMB_GGUF_UINT16: case LLMB_GGUF_UINT32: case LLMB_GGUF_UINT64:
        x = v->v.u64 > INT32_MAX ? -1 : (int64_t)v->v.u64; break;
    case LLMB_GGUF_INT8: case LLMB_GGUF_INT16: case LLMB_GGUF_INT32: case LLMB_GGUF_INT64:
        x = v->v.i64; break;
    default:
        return llmb_fail(LLMB_E_FORMAT, "model: metadata '%s' at byte %llu: expected an integer, got type %u", key,
                         (unsigned long long)v->offset, v->type);
    }
    if (x <= 0 || x > (1 << 30))
        return llmb_fail(LLMB_E_FORMAT, "model: metadata '%s' at byte %llu: expected a positive size, got %lld", key,
                         (unsigned long long)v->offset, (long long)x);
    *out = (int)x;
    return LLMB_OK;
}

static llmb_status get_float(const llmb_gguf *g, const char *arch, const char *suffix, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const llmb_gguf_value *v = kv(g, key);
    if (!v) {
        *out = def;
        return LLMB_OK;
    }
    if (v->type != LLMB_GGUF_FLOAT32 && v->type != LLMB_GGUF_FLOAT64)
        return llmb_fail(LLMB_E_FORMAT, "model: metadata '%s' at byte %llu: expected a float, got type %u", key,
                         (unsigned long long)v->offset, v->type);
    *out = (float)v->v.f64;
    if (!isfinite(*out) || *out <= 0)
        return llmb_fail(LLMB_E_FORMAT, "model: metadata '%s' at byte %llu: expected a positive number, got %g", key,
                         (unsigned long long)v->offset, v->v.f64);
    return LLMB_OK;
}

static int str_is(const llmb_gguf_value *v, const char *s) {
    return v && v->type == LLMB_GGUF_STRING && v->v.str.len == strlen(s) && memcmp(v->v.str.data, s, v->v.str.len) == 0;
}

// ---- tensors ----

static const llmb_gguf_tensor *find(const llmb_gguf *g, const char *name) {
    int64_t i = llmb_gguf_find_tensor(g, name);
    return i < 0 ? NULL : llmb_gguf_tensor_at(g, (uint64_t)i);
}

static llmb_status bind_matrix(const llmb_gguf *g, const char *name, int64_t ne0, int64_t ne1, llmb_weight *w) {
    const llmb_gguf_tensor *t = find(g, name);
    if (!t) return llmb_fail(LLMB_E_FORMAT, "model: tensor '%s' is missing", name);
    if (t->n_dims != 2 || t->ne[0] != ne0 || t->ne[1] != ne1)
        return llmb_fail(LLMB_E_FORMAT, "model: tensor '%s' has shape [%lld, %lld] (ggml order), expected [%lld, %lld]",
                         name, (long long)t->ne[0], (long long)t->ne[1], (long long)ne0, (long long)ne1);
    if (llmb_vec_dot_type(t->type) < 0) {
        char names[320];
        size_t len = 0;
        names[0] = '\0';
        for (int k = 0; k < LLMB_TYPE_COUNT && len < sizeof names; k++)   // every weight type a kernel exists for
            if (k != LLMB_TYPE_Q8_K && llmb_vec_dot_type(k) >= 0)
                len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                                        llmb_type_traits_get(k)->name);
        return llmb_fail(LLMB_E_UNSUPPORTED, "model: tensor '%s' has type %s, which the engine cannot run "
                         "(supported: %s); re-quantize with `llmbench quantize`",
                         name, llmb_type_traits_get(t->type)->name, names);
    }
    const llmb_type_traits *tr = llmb_type_traits_get(t->type);
    w->data = t->data;
    w->type = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = (size_t)(ne0 / tr->blck_size * tr->type_size);
    return LLMB_OK;
}

// A 1-D tensor converted to float32 and owned by the model; absent optional tensors give NULL.
static llmb_status bind_vector(llmb_model *m, const llmb_gguf *g, const char *name, int64_t n, int required,
                               float **out) {
    *out = NULL;
    const llmb_gguf_tensor *t = find(g, name);
    if (!t) return required ? llmb_fail(LLMB_E_FORMAT, "model: tensor '%s' is missing", name) : LLMB_OK;
    if (t->n_dims != 1 || t->ne[0] != n)
        return llmb_fail(LLMB_E_FORMAT, "model: tensor '%s' has %u dims and %lld elements, expected a vector of %lld",
                         name, t->n_dims, (long long)t->ne[0], (long long)n);
    const llmb_quant_traits *q = llmb_quant_traits_get(t->type);
    if (!q || !q->to_float)
        return llmb_fail(LLMB_E_UNSUPPORTED, "model: tensor '%s' has unsupported type %s", name,
                         llmb_type_traits_get(t->type)->name);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return llmb_fail(LLMB_E_NOMEM, "model: out of memory");
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(v);
            return llmb_fail(LLMB_E_NOMEM, "model: out of memory");
        }
        m->owned = o;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = v;
    q->to_float(t->data, v, n);
    *out = v;
    return LLMB_OK;
}

// ---- load ----

static llmb_status read_config(const llmb_gguf *g, llmb_model_config *c) {
    const llmb_gguf_value *a = kv(g, "general.architecture");
    if (!a || a->type != LLMB_GGUF_STRING)
        return llmb_fail(LLMB_E_FORMAT, "model: metadata 'general.architecture' is missing or not a string");
    snprintf(c->arch, sizeof c->arch, "%.*s", (int)(a->v.str.len < 31 ? a->v.str.len : 31), a->v.str.data);
    const int gemma3 = strcmp(c->arch, "gemma3") == 0;
    if (strcmp(c->arch, "llama") == 0 || strcmp(c->arch, "mistral") == 0) c->rope_neox = 0;
    else if (strcmp(c->arch, "qwen2") == 0 || gemma3) c->rope_neox = 1;
    else
        return llmb_fail(LLMB_E_UNSUPPORTED, "model: architecture '%s' is not supported (supported: llama, mistral, "
                         "qwen2, gemma3)", c->arch);
    const char *ar = c->arch;
    llmb_status s;
    if ((s = get_int(g, ar, "block_count", -1, &c->n_layer))) return s;
    if ((s = get_int(g, ar, "embedding_length", -1, &c->dim))) return s;
    if ((s = get_int(g, ar, "feed_forward_length", -1, &c->ff))) return s;
    if ((s = get_int(g, ar, "attention.head_count", -1, &c->n_head))) return s;
    if ((s = get_int(g, ar, "attention.head_count_kv", c->n_head, &c->n_head_kv))) return s;
    if ((s = get_int(g, ar, "attention.key_length", c->dim / c->n_head, &c->head_dim))) return s;
    if ((s = get_int(g, ar, "context_length", 2048, &c->ctx_train))) return s;
    if ((s = get_int(g, ar, "attention.sliding_window", 0, &c->sliding_window))) return s;
    int rope_dim, vlen;
    if ((s = get_int(g, ar, "rope.dimension_count", c->head_dim, &rope_dim))) return s;
    if ((s = get_int(g, ar, "attention.value_length", c->head_dim, &vlen))) return s;
    if ((s = get_float(g, ar, "rope.freq_base", 10000.0f, &c->rope_base))) return s;
    if ((s = get_float(g, ar, "attention.layer_norm_rms_epsilon", 1e-5f, &c->norm_eps))) return s;
    if (c->n_head % c->n_head_kv)
        return llmb_fail(LLMB_E_FORMAT, "model: %d attention heads are not a multiple of %d KV heads", c->n_head, c->n_head_kv);
    if (c->head_dim % 2 || rope_dim != c->head_dim || vlen != c->head_dim)
        return llmb_fail(LLMB_E_UNSUPPORTED, "model: head size %d with rotary dimension %d and value length %d is not "
                         "supported (the engine needs an even head size, fully rotated, equal for keys and values)",
                         c->head_dim, rope_dim, vlen);
    c->rope_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", ar);
    const llmb_gguf_value *st = kv(g, key);
    if (st && !str_is(st, "none")) {
        if (!str_is(st, "linear"))
            return llmb_fail(LLMB_E_UNSUPPORTED, "model: rope scaling type '%.*s' is not supported (none, linear; "
                             "Llama 3 scaling comes from the rope_freqs tensor)", (int)st->v.str.len, st->v.str.data);
        float f;
        if ((s = get_float(g, ar, "rope.scaling.factor", 1.0f, &f))) return s;
        c->rope_scale = 1.0f / f;
    }
    c->embd_scale = 1.0f;
    c->att_scale = 1.0f / sqrtf((float)c->head_dim);
    if (gemma3) {
        // as llama.cpp's gemma3 (llama-model.cpp, models/gemma3.cpp): embeddings times sqrt(n_embd); GeGLU;
        // every 6th layer (5, 11, ...) global, the others over a sliding window (a required key) with
        // RoPE base 10000 and no position scaling; queries scaled by 1/sqrt(head_dim), except on the 27B
        // (62 layers), whose query_pre_attn_scalar is n_embd / n_head (gemma_pytorch's config)
        if ((s = get_int(g, ar, "attention.sliding_window", -1, &c->swa_window))) return s;
        c->sliding_window = 0;
        c->embd_scale = sqrtf((float)c->dim);
        c->ffn_gelu = 1;
        c->rope_base_swa = 10000.0f;
        if (c->n_layer == 62) c->att_scale = 1.0f / sqrtf((float)(c->dim / c->n_head));
    }
    return LLMB_OK;
}

llmb_status llmb_model_load(const llmb_gguf *g, llmb_model **out) {
    *out = NULL;
    llmb_model *m = calloc(1, sizeof *m);
    if (!m) return llmb_fail(LLMB_E_NOMEM, "model: out of memory");
    llmb_model_config *c = &m->cfg;
    llmb_status s = read_config(g, c);
    if (s) goto fail;
    const llmb_gguf_tensor *emb = find(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) {
        s = llmb_fail(LLMB_E_FORMAT, "model: tensor 'token_embd.weight' is missing or not 2-D");
        goto fail;
    }
    c->vocab = (int)emb->ne[1];
    int64_t q_dim = (int64_t)c->n_head * c->head_dim, kv_dim = (int64_t)c->n_head_kv * c->head_dim;
    if ((s = bind_matrix(g, "token_embd.weight", c->dim, c->vocab, &m->tok_embd))) goto fail;
    if ((s = bind_vector(m, g, "output_norm.weight", c->dim, 1, &m->output_norm))) goto fail;
    c->tied_output = find(g, "output.weight") == NULL;
    if (c->tied_output) m->output = m->tok_embd;
    else if ((s = bind_matrix(g, "output.weight", c->dim, c->vocab, &m->output))) goto fail;
    if ((s = bind_vector(m, g, "rope_freqs.weight", c->head_dim / 2, 0, &m->rope_freqs))) goto fail;
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) {
        s = llmb_fail(LLMB_E_NOMEM, "model: out of memory");
        goto fail;
    }
    for (int i = 0; i < c->n_layer; i++) {
        llmb_layer *l = &m->layers[i];
        char n[96];
#define NAME(x) (snprintf(n, sizeof n, "blk.%d.%s", i, x), n)
        if ((s = bind_vector(m, g, NAME("attn_norm.weight"), c->dim, 1, &l->attn_norm))) goto fail;
        if ((s = bind_matrix(g, NAME("attn_q.weight"), c->dim, q_dim, &l->wq))) goto fail;
        if ((s = bind_matrix(g, NAME("attn_k.weight"), c->dim, kv_dim, &l->wk))) goto fail;
        if ((s = bind_matrix(g, NAME("attn_v.weight"), c->dim, kv_dim, &l->wv))) goto fail;
        if ((s = bind_vector(m, g, NAME("attn_q.bias"), q_dim, 0, &l->bq))) goto fail;
        if ((s = bind_vector(m, g, NAME("attn_k.bias"), kv_dim, 0, &l->bk))) goto fail;
        if ((s = bind_vector(m, g, NAME("attn_v.bias"), kv_dim, 0, &l->bv))) goto fail;
        if ((s = bind_matrix(g, NAME("attn_output.weight"), q_dim, c->dim, &l->wo))) goto fail;
        if ((s = bind_vector(m, g, NAME("ffn_norm.weight"), c->dim, 1, &l->ffn_norm))) goto fail;
        if ((s = bind_matrix(g, NAME("ffn_gate.weight"), c->dim, c->ff, &l->w_gate))) goto fail;
        if ((s = bind_matrix(g, NAME("ffn_up.weight"), c->dim, c->ff, &l->w_up))) goto fail;
        if ((s = bind_matrix(g, NAME("ffn_down.weight"), c->ff, c->dim, &l->w_down))) goto fail;
        if (c->ffn_gelu) {   // gemma3
            if ((s = bind_vector(m, g, NAME("attn_q_norm.weight"), c->head_dim, 1, &l->attn_q_norm))) goto fail;
            if ((s = bind_vector(m, g, NAME("attn_k_norm.weight"), c->head_dim, 1, &l->attn_k_norm))) goto fail;
            if ((s = bind_vector(m, g, NAME("post_attention_norm.weight"), c->dim, 1, &l->post_attn_norm))) goto fail;
            if ((s = bind_vector(m, g, NAME("post_ffw_norm.weight"), c->dim, 1, &l->post_ffn_norm))) goto fail;
            l->swa = i % 6 < 5;
        }
#undef NAME
    }
    for (uint64_t i = 0; i < llmb_gguf_n_tensors(g); i++) m->weight_bytes += llmb_gguf_tensor_at(g, i)->nbytes;
    *out = m;
    return LLMB_OK;
fail:
    llmb_model_free(m);
    return s;
}

void llmb_model_free(llmb_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m);
}
