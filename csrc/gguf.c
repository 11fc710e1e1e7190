// gguf.c — GGUF v2/v3 reader for untrusted files.
//
// The file is memory-mapped read-only and parsed field by field through a bounds-checked cursor:
// no raw struct is ever read, every count is checked against the bytes that remain before it is
// trusted, every size computation is checked for int64 overflow, and every error names the field,
// its byte offset and what was expected. Tensors are zero-copy views into the mapping.
// Tested by csrc/tests/test_gguf.c (hand-built malformed files and a mutation fuzzer under
// ASan/UBSan) and tests/test_gguf*.py (against the gguf package's reader, malformed files, fuzz).
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define GGUF_MAGIC "GGUF"
#define MAX_DEPTH 8   // nested arrays deeper than this are rejected (no file needs more than 2)


// ---- cursor: every read is bounds-checked ----

typedef struct {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;
} cursor;

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

static llmb_status need(const cursor *c, uint64_t n, const char *field) {
    if (n > remaining(c))
        return llmb_fail(LLMB_E_FORMAT,
                         "GGUF: %s at byte %llu: expected %llu bytes, but the file ends at byte %llu "
                         "(truncated or corrupt file)",
                         field, (unsigned long long)c->pos, (unsigned long long)n,
                         (unsigned long long)c->size);
    return LLMB_OK;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static llmb_status rd_uint(cursor *c, int n, uint64_t *out, const char *field) {
    llmb_status s = need(c, (uint64_t)n, field);
    if (s) return s;
    *out = le(c->base + c->pos, n);
    c->pos += (uint64_t)n;
    return LLMB_OK;
}

static llmb_status rd_u32(cursor *c, uint32_t *out, const char *field) {
    uint64_t v = 0;
    llmb_status s = rd_uint(c, 4, &v, field);
    *out = (uint32_t)v;
    return s;
}

// ---- UTF-8 validation (RFC 3629: no overlongs, no surrogates, <= U+10FFFF) ----

static int64_t utf8_invalid_at(const uint8_t *s, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        uint8_t b = s[i];
        if (b < 0x80) { i++; continue; }
        int len;
        uint32_t cp, min;
        if ((b & 0xE0) == 0xC0) { len = 2; cp = b & 0x1F; min = 0x80; }
        else if ((b & 0xF0) == 0xE0) { len = 3; cp = b & 0x0F; min = 0x800; }
        else if ((b & 0xF8) == 0xF0) { len = 4; cp = b & 0x07; min = 0x10000; }
        else return (int64_t)i;
        if ((uint64_t)len > n - i) return (int64_t)i;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return (int64_t)i;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return (int64_t)i;
        i += (uint64_t)len;
    }
    return -1;
}

// A string: u64 length, then that many bytes of UTF-8. Keys and names must not contain NUL.
static llmb_status rd_str(cursor *c, llmb_str *out, int allow_nul, const char *field) {
    uint64_t start = c->pos, len;
    char f[256];
    snprintf(f, sizeof f, "%s length", field);
    llmb_status s = rd_uint(c, 8, &len, f);
    if (s) return s;
    if (len > remaining(c))
        return llmb_fail(LLMB_E_FORMAT,
                         "GGUF: %s at byte %llu: string length %llu exceeds the %llu bytes left in the file",
                         field, (unsigned long long)start, (unsigned long long)len,
                         (unsigned long long)remaining(c));
    const uint8_t *p = c->base + c->pos;
    int64_t bad = utf8_invalid_at(p, len);
    if (bad >= 0)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected UTF-8 text, invalid byte 0x%02x at byte %llu",
                         field, (unsigned long long)start, p[bad], (unsigned long long)(c->pos + (uint64_t)bad));
    if (!allow_nul && memchr(p, 0, len))
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected a name without NUL bytes",
                         field, (unsigned long long)start);
    out->data = (const char *)p;
    out->len = len;
    c->pos += len;
    return LLMB_OK;
}

// ---- metadata values ----

static const int scalar_size[LLMB_GGUF_TYPE_COUNT] = {
    [LLMB_GGUF_UINT8] = 1, [LLMB_GGUF_INT8] = 1, [LLMB_GGUF_UINT16] = 2, [LLMB_GGUF_INT16] = 2,
    [LLMB_GGUF_UINT32] = 4, [LLMB_GGUF_INT32] = 4, [LLMB_GGUF_FLOAT32] = 4, [LLMB_GGUF_BOOL] = 1,
    [LLMB_GGUF_UINT64] = 8, [LLMB_GGUF_INT64] = 8, [LLMB_GGUF_FLOAT64] = 8,
};

static void decode_scalar(uint32_t type, const uint8_t *p, llmb_gguf_value *out) {
    uint64_t raw = le(p, scalar_size[type]);
    switch (type) {
    case LLMB_GGUF_UINT8: case LLMB_GGUF_UINT16: case LLMB_GGUF_UINT32: case LLMB_GGUF_UINT64:
        out->v.u64 = raw; break;
    case LLMB_GGUF_INT8: out->v.i64 = (int8_t)raw; break;
    case LLMB_GGUF_INT16: out->v.i64 = (int16_t)raw; break;
    case LLMB_GGUF_INT32: out->v.i64 = (int32_t)raw; break;
    case LLMB_GGUF_INT64: out->v.i64 = (int64_t)raw; break;
    case LLMB_GGUF_BOOL: out->v.boolean = raw != 0; break;
    case LLMB_GGUF_FLOAT32: { uint32_t u = (uint32_t)raw; float f; memcpy(&f, &u, 4); out->v.f64 = f; break; }
    case LLMB_GGUF_FLOAT64: { double d; memcpy(&d, &raw, 8); out->v.f64 = d; break; }
    }
}

// Parse one value of `type` at the cursor (the type id has already been read). Used both to
// validate at open time and, over validated bytes, to iterate array elements.
static llmb_status parse_value(cursor *c, uint32_t type, int depth, llmb_gguf_value *out, const char *field) {
    out->type = type;
    out->offset = c->pos;
    if (type >= LLMB_GGUF_TYPE_COUNT)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s type at byte %llu: expected a value type 0..12, got %u",
                         field, (unsigned long long)c->pos - 4, type);
    if (type == LLMB_GGUF_STRING) return rd_str(c, &out->v.str, 1, field);
    if (type != LLMB_GGUF_ARRAY) {
        llmb_status s = need(c, (uint64_t)scalar_size[type], field);
        if (s) return s;
        const uint8_t *p = c->base + c->pos;
        if (type == LLMB_GGUF_BOOL && *p > 1)
            return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected a bool (0 or 1), got %u",
                             field, (unsigned long long)c->pos, *p);
        decode_scalar(type, p, out);
        c->pos += (uint64_t)scalar_size[type];
        return LLMB_OK;
    }
    // array: element type (u32), count (u64), elements
    char f[256];
    uint32_t et;
    uint64_t count, start = c->pos;
    snprintf(f, sizeof f, "%s array element type", field);
    llmb_status s = rd_u32(c, &et, f);
    if (s) return s;
    if (et >= LLMB_GGUF_TYPE_COUNT)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected an element type 0..12, got %u",
                         f, (unsigned long long)start, et);
    if (et == LLMB_GGUF_ARRAY && depth + 1 >= MAX_DEPTH)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: arrays nested deeper than %d levels",
                         field, (unsigned long long)start, MAX_DEPTH);
    snprintf(f, sizeof f, "%s array length", field);
    if ((s = rd_uint(c, 8, &count, f))) return s;
    // The smallest encoding of one element bounds how many can fit in what remains.
    uint64_t min_elem = et == LLMB_GGUF_STRING ? 8 : et == LLMB_GGUF_ARRAY ? 12 : (uint64_t)scalar_size[et];
    if (count > remaining(c) / min_elem)
        return llmb_fail(LLMB_E_FORMAT,
                         "GGUF: %s at byte %llu: %llu elements of at least %llu bytes do not fit in the "
                         "%llu bytes left in the file",
                         f, (unsigned long long)c->pos - 8, (unsigned long long)count,
                         (unsigned long long)min_elem, (unsigned long long)remaining(c));
    out->v.arr.elem_type = et;
    out->v.arr.count = count;
    out->v.arr.data = c->base + c->pos;
    out->v.arr.data_offset = c->pos;
    if (et != LLMB_GGUF_STRING && et != LLMB_GGUF_ARRAY) {
        uint64_t nbytes = count * min_elem;
        if (et == LLMB_GGUF_BOOL) {
            const uint8_t *p = c->base + c->pos;
            for (uint64_t i = 0; i < count; i++)
                if (p[i] > 1)
                    return llmb_fail(LLMB_E_FORMAT, "GGUF: %s element %llu at byte %llu: expected a bool (0 or 1), got %u",
                                     field, (unsigned long long)i, (unsigned long long)(c->pos + i), p[i]);
        }
        c->pos += nbytes;
        out->v.arr.nbytes = nbytes;
        return LLMB_OK;
    }
    uint64_t first = c->pos;
    for (uint64_t i = 0; i < count; i++) {
        llmb_gguf_value elem;
        snprintf(f, sizeof f, "%s[%llu]", field, (unsigned long long)i);
        uint32_t t = et;
        if (et == LLMB_GGUF_ARRAY) {
            // a nested array is encoded like a top-level one, without a value type of its own
            if ((s = parse_value(c, LLMB_GGUF_ARRAY, depth + 1, &elem, f))) return s;
        } else if ((s = parse_value(c, t, depth + 1, &elem, f))) {
            return s;
        }
    }
    out->v.arr.nbytes = c->pos - first;
    return LLMB_OK;
}

void llmb_gguf_iter_init(llmb_gguf_iter *it, const llmb_gguf_value *arr) {
    it->arr = arr;
    it->index = 0;
    it->pos = 0;
}

int llmb_gguf_iter_next(llmb_gguf_iter *it, llmb_gguf_value *out) {
    const llmb_gguf_value *a = it->arr;
    if (a->type != LLMB_GGUF_ARRAY || it->index >= a->v.arr.count) return 0;
    uint32_t et = a->v.arr.elem_type;
    if (et != LLMB_GGUF_STRING && et != LLMB_GGUF_ARRAY) {
        out->type = et;
        out->offset = a->v.arr.data_offset + it->pos;
        decode_scalar(et, a->v.arr.data + it->pos, out);
        it->pos += (uint64_t)scalar_size[et];
    } else {
        // Re-parse over bytes validated at open: a cursor whose origin is the array's first element.
        cursor c = {a->v.arr.data - a->v.arr.data_offset, a->v.arr.data_offset + a->v.arr.nbytes,
                    a->v.arr.data_offset + it->pos};
        if (parse_value(&c, et, 1, out, "array element") != LLMB_OK) return 0;
        it->pos = c.pos - a->v.arr.data_offset;
    }
    it->index++;
    return 1;
}

// ---- name index: open-addressing hash of names -> position (metadata keys, tensor names) ----

typedef struct {
    int64_t *slots;  // -1 empty
    uint64_t cap;    // power of two, at least twice the number of names
} name_index;

static uint64_t fnv1a(const char *s, uint64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static int str_eq(const llmb_str *a, const char *b, uint64_t n) {
    return a->len == n && memcmp(a->data, b, n) == 0;
}

static int index_init(name_index *ix, uint64_t n) {
    ix->cap = 16;
    while (ix->cap < 2 * n) ix->cap <<= 1;
    ix->slots = malloc(ix->cap * sizeof *ix->slots);
    if (!ix->slots) return -1;
    memset(ix->slots, 0xff, ix->cap * sizeof *ix->slots);
    return 0;
}

// Names are reached through `stride`-sized records whose first member is an llmb_str.
#define NAME_AT(base, stride, i) ((const llmb_str *)((const char *)(base) + (size_t)(i) * (stride)))

static int64_t index_lookup(const name_index *ix, const void *base, size_t stride, const char *name, uint64_t n) {
    if (!ix->slots) return -1;
    uint64_t mask = ix->cap - 1, h = fnv1a(name, n) & mask;
    while (ix->slots[h] >= 0) {
        if (str_eq(NAME_AT(base, stride, ix->slots[h]), name, n)) return ix->slots[h];
        h = (h + 1) & mask;
    }
    return -1;
}

// Insert record i; returns the position of an earlier record with the same name, or -1.
static int64_t index_insert(name_index *ix, const void *base, size_t stride, uint64_t i) {
    const llmb_str *name = NAME_AT(base, stride, i);
    uint64_t mask = ix->cap - 1, h = fnv1a(name->data, name->len) & mask;
    while (ix->slots[h] >= 0) {
        if (str_eq(NAME_AT(base, stride, ix->slots[h]), name->data, name->len)) return ix->slots[h];
        h = (h + 1) & mask;
    }
    ix->slots[h] = (int64_t)i;
    return -1;
}

struct llmb_gguf {
    const uint8_t *base;
    uint64_t size;
    int mapped;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    llmb_str *keys;
    llmb_gguf_value *vals;
    uint64_t n_tensors;
    llmb_gguf_tensor *tensors;
    name_index key_index;
    name_index tensor_index;
};

int64_t llmb_gguf_find_tensor(const llmb_gguf *g, const char *name) {
    return index_lookup(&g->tensor_index, g->tensors, sizeof *g->tensors, name, strlen(name));
}

int64_t llmb_gguf_find_kv(const llmb_gguf *g, const char *key) {
    return index_lookup(&g->key_index, g->keys, sizeof *g->keys, key, strlen(key));
}

// ---- header, metadata, tensor infos ----

typedef struct {
    uint64_t offset;
    uint64_t idx;
} span;

static int cmp_span(const void *a, const void *b) {
    uint64_t oa = ((const span *)a)->offset, ob = ((const span *)b)->offset;
    return oa < ob ? -1 : oa > ob;
}

static llmb_status parse_kv(llmb_gguf *g, cursor *c) {
    char f[320];
    llmb_status s;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        snprintf(f, sizeof f, "metadata entry %llu key", (unsigned long long)i);
        if ((s = rd_str(c, &g->keys[i], 0, f))) return s;
        const llmb_str *k = &g->keys[i];
        int64_t j = index_insert(&g->key_index, g->keys, sizeof *g->keys, i);
        if (j >= 0)
                return llmb_fail(LLMB_E_FORMAT, "GGUF: metadata entry %llu key '%.*s' at byte %llu: duplicate of entry %lld",
                                 (unsigned long long)i, (int)(k->len > 200 ? 200 : k->len), k->data,
                                 (unsigned long long)(c->pos - k->len - 8), (long long)j);
        uint32_t type;
        snprintf(f, sizeof f, "metadata '%.*s' value type", (int)(k->len > 200 ? 200 : k->len), k->data);
        if ((s = rd_u32(c, &type, f))) return s;
        snprintf(f, sizeof f, "metadata '%.*s'", (int)(k->len > 200 ? 200 : k->len), k->data);
        if ((s = parse_value(c, type, 0, &g->vals[i], f))) return s;
    }
    return LLMB_OK;
}

static llmb_status check_alignment(llmb_gguf *g) {
    g->alignment = LLMB_GGUF_DEFAULT_ALIGNMENT;
    int64_t i = llmb_gguf_find_kv(g, "general.alignment");
    if (i < 0) return LLMB_OK;
    const llmb_gguf_value *v = &g->vals[i];
    if (v->type != LLMB_GGUF_UINT32)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: metadata 'general.alignment' at byte %llu: expected type uint32 (4), got type %u",
                         (unsigned long long)v->offset, v->type);
    if (v->v.u64 == 0 || (v->v.u64 & (v->v.u64 - 1)))
        return llmb_fail(LLMB_E_FORMAT, "GGUF: metadata 'general.alignment' at byte %llu: expected a power of two, got %llu",
                         (unsigned long long)v->offset, (unsigned long long)v->v.u64);
    g->alignment = v->v.u64;
    return LLMB_OK;
}

static llmb_status parse_tensor_info(llmb_gguf *g, cursor *c, uint64_t i) {
    llmb_gguf_tensor *t = &g->tensors[i];
    char f[320];
    llmb_status s;
    t->info_offset = c->pos;
    snprintf(f, sizeof f, "tensor %llu name", (unsigned long long)i);
    if ((s = rd_str(c, &t->name, 0, f))) return s;
    if (t->name.len == 0)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: tensor %llu name at byte %llu: expected a non-empty name",
                         (unsigned long long)i, (unsigned long long)t->info_offset);
    int nl = (int)(t->name.len > 200 ? 200 : t->name.len);
    snprintf(f, sizeof f, "tensor '%.*s' n_dims", nl, t->name.data);
    uint64_t at = c->pos;
    if ((s = rd_u32(c, &t->n_dims, f))) return s;
    if (t->n_dims < 1 || t->n_dims > LLMB_GGUF_MAX_DIMS)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected 1..%d, got %u", f,
                         (unsigned long long)at, LLMB_GGUF_MAX_DIMS, t->n_dims);
    int64_t nelem = 1;
    for (uint32_t d = 0; d < LLMB_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t dim;
        snprintf(f, sizeof f, "tensor '%.*s' dims[%u]", nl, t->name.data, d);
        at = c->pos;
        if ((s = rd_uint(c, 8, &dim, f))) return s;
        if (dim == 0 || dim > (uint64_t)INT64_MAX)
            return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected 1..2^63-1, got %llu", f,
                             (unsigned long long)at, (unsigned long long)dim);
        if ((int64_t)dim > INT64_MAX / nelem)
            return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: element count overflows int64", f,
                             (unsigned long long)at);
        t->ne[d] = (int64_t)dim;
        nelem *= (int64_t)dim;
    }
    uint32_t type;
    snprintf(f, sizeof f, "tensor '%.*s' type", nl, t->name.data);
    at = c->pos;
    if ((s = rd_u32(c, &type, f))) return s;
    const llmb_type_traits *tr = llmb_type_traits_get((int)type);
    if (!tr)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected a known ggml type id, got %u", f,
                         (unsigned long long)at, type);
    t->type = (int)type;
    if (t->ne[0] % tr->blck_size)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: tensor '%.*s' dims[0] at byte %llu: expected a multiple of the %s block size %lld, got %lld",
                         nl, t->name.data, (unsigned long long)(t->info_offset + 8 + t->name.len + 4), tr->name,
                         (long long)tr->blck_size, (long long)t->ne[0]);
    int64_t nblocks = nelem / tr->blck_size;
    if (nblocks > INT64_MAX / tr->type_size)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: tensor '%.*s' at byte %llu: byte count overflows int64",
                         nl, t->name.data, (unsigned long long)t->info_offset);
    t->nbytes = (uint64_t)(nblocks * tr->type_size);
    snprintf(f, sizeof f, "tensor '%.*s' offset", nl, t->name.data);
    at = c->pos;
    if ((s = rd_uint(c, 8, &t->offset, f))) return s;
    if (t->offset % g->alignment)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: %s at byte %llu: expected a multiple of the alignment %llu, got %llu",
                         f, (unsigned long long)at, (unsigned long long)g->alignment, (unsigned long long)t->offset);
    int64_t dup = index_insert(&g->tensor_index, g->tensors, sizeof *g->tensors, i);
    if (dup >= 0)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: tensor %llu name '%.*s' at byte %llu: duplicate of tensor %lld",
                         (unsigned long long)i, nl, t->name.data, (unsigned long long)t->info_offset, (long long)dup);
    return LLMB_OK;
}

static llmb_status parse(llmb_gguf *g) {
    cursor c = {g->base, g->size, 0};
    llmb_status s;
    if ((s = need(&c, 4, "magic"))) return s;
    if (memcmp(g->base, GGUF_MAGIC, 4) != 0)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: magic at byte 0: expected \"GGUF\", got %02x %02x %02x %02x (not a GGUF file)",
                         g->base[0], g->base[1], g->base[2], g->base[3]);
    c.pos = 4;
    if ((s = rd_u32(&c, &g->version, "version"))) return s;
    if ((g->version & 0xFFFF) == 0)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: version at byte 4: got %u, which is a big-endian GGUF file; only little-endian files are supported",
                         g->version);
    if (g->version != 2 && g->version != 3)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: version at byte 4: expected 2 or 3, got %u%s", g->version,
                         g->version == 1 ? " (GGUF v1 is obsolete: convert the model with a current llama.cpp)" : "");
    uint64_t n_tensors, n_kv;
    if ((s = rd_uint(&c, 8, &n_tensors, "tensor count"))) return s;
    if ((s = rd_uint(&c, 8, &n_kv, "metadata count"))) return s;
    // A metadata entry takes at least 13 bytes (key length, type, one byte of value); a tensor
    // info at least 32 (name length, n_dims, one dim, type, offset).
    if (n_kv > remaining(&c) / 13)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: metadata count at byte 16: %llu entries cannot fit in the %llu bytes left in the file",
                         (unsigned long long)n_kv, (unsigned long long)remaining(&c));
    if (n_tensors > remaining(&c) / 32)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: tensor count at byte 8: %llu tensors cannot fit in the %llu bytes left in the file",
                         (unsigned long long)n_tensors, (unsigned long long)remaining(&c));
    g->n_kv = n_kv;
    g->n_tensors = n_tensors;
    g->keys = calloc(n_kv ? n_kv : 1, sizeof *g->keys);
    g->vals = calloc(n_kv ? n_kv : 1, sizeof *g->vals);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->keys || !g->vals || !g->tensors || index_init(&g->key_index, n_kv) ||
        index_init(&g->tensor_index, n_tensors))
        return llmb_fail(LLMB_E_NOMEM, "GGUF: out of memory for %llu metadata entries and %llu tensors",
                         (unsigned long long)n_kv, (unsigned long long)n_tensors);

    if ((s = parse_kv(g, &c))) return s;
    if ((s = check_alignment(g))) return s;
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((s = parse_tensor_info(g, &c, i))) return s;

    // The data section starts at the next multiple of the alignment.
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = c.pos + pad;
    if (n_tensors == 0) return LLMB_OK;
    if (g->data_offset > g->size)
        return llmb_fail(LLMB_E_FORMAT, "GGUF: data section at byte %llu: expected it inside the file, which ends at byte %llu",
                         (unsigned long long)g->data_offset, (unsigned long long)g->size);
    uint64_t data_size = g->size - g->data_offset;
    for (uint64_t i = 0; i < n_tensors; i++) {
        llmb_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return llmb_fail(LLMB_E_FORMAT,
                             "GGUF: tensor '%.*s' data (info at byte %llu): expected %llu bytes at data offset %llu, "
                             "but the data section holds only %llu bytes (truncated file?)",
                             (int)(t->name.len > 200 ? 200 : t->name.len), t->name.data,
                             (unsigned long long)t->info_offset, (unsigned long long)t->nbytes,
                             (unsigned long long)t->offset, (unsigned long long)data_size);
        t->data = g->base + g->data_offset + t->offset;
    }
    // No two tensors may share bytes.
    span *order = malloc(n_tensors * sizeof *order);
    if (!order) return llmb_fail(LLMB_E_NOMEM, "GGUF: out of memory");
    for (uint64_t i = 0; i < n_tensors; i++) order[i] = (span){g->tensors[i].offset, i};
    qsort(order, n_tensors, sizeof *order, cmp_span);
    s = LLMB_OK;
    for (uint64_t k = 1; k < n_tensors && !s; k++) {
        const llmb_gguf_tensor *a = &g->tensors[order[k - 1].idx], *b = &g->tensors[order[k].idx];
        if (a->offset + a->nbytes > b->offset)
            s = llmb_fail(LLMB_E_FORMAT, "GGUF: tensor '%.*s' offset (info at byte %llu): data at %llu overlaps tensor '%.*s' (%llu..%llu)",
                          (int)(b->name.len > 200 ? 200 : b->name.len), b->name.data, (unsigned long long)b->info_offset,
                          (unsigned long long)b->offset, (int)(a->name.len > 200 ? 200 : a->name.len), a->name.data,
                          (unsigned long long)a->offset, (unsigned long long)(a->offset + a->nbytes));
    }
    free(order);
    return s;
}

// ---- open / close / accessors ----

static llmb_status finish_open(llmb_gguf *g, llmb_gguf **out) {
    llmb_clear_error();
    llmb_status s = parse(g);
    if (s) {
        llmb_gguf_close(g);
        return s;
    }
    *out = g;
    return LLMB_OK;
}

llmb_status llmb_gguf_open_memory(const void *data, size_t size, llmb_gguf **out) {
    *out = NULL;
    if (!data && size) return llmb_fail(LLMB_E_ARG, "GGUF: NULL buffer");
    llmb_gguf *g = calloc(1, sizeof *g);
    if (!g) return llmb_fail(LLMB_E_NOMEM, "GGUF: out of memory");
    static const uint8_t empty[1];
    g->base = size ? data : empty;
    g->size = size;
    return finish_open(g, out);
}

llmb_status llmb_gguf_open(const char *path, llmb_gguf **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return llmb_fail_errno(errno, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return llmb_fail_errno(e, "cannot stat %s: %s", path, strerror(e));
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return llmb_fail_errno(EISDIR, "%s is a directory, not a GGUF file", path);
    }
    llmb_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        close(fd);
        return llmb_fail(LLMB_E_NOMEM, "GGUF: out of memory");
    }
    g->size = (uint64_t)st.st_size;
    if (g->size == 0) {
        static const uint8_t empty[1];
        g->base = empty;
    } else {
        void *p = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(g);
            return llmb_fail_errno(e, "cannot memory-map %s: %s", path, strerror(e));
        }
        g->base = p;
        g->mapped = 1;
    }
    close(fd);
    return finish_open(g, out);
}

void llmb_gguf_close(llmb_gguf *g) {
    if (!g) return;
    if (g->mapped) munmap((void *)g->base, (size_t)g->size);
    free(g->keys);
    free(g->vals);
    free(g->tensors);
    free(g->key_index.slots);
    free(g->tensor_index.slots);
    free(g);
}

uint32_t llmb_gguf_version(const llmb_gguf *g) { return g->version; }
uint64_t llmb_gguf_alignment(const llmb_gguf *g) { return g->alignment; }
uint64_t llmb_gguf_data_offset(const llmb_gguf *g) { return g->data_offset; }
uint64_t llmb_gguf_file_size(const llmb_gguf *g) { return g->size; }
const uint8_t *llmb_gguf_base(const llmb_gguf *g) { return g->base; }
uint64_t llmb_gguf_n_kv(const llmb_gguf *g) { return g->n_kv; }
uint64_t llmb_gguf_n_tensors(const llmb_gguf *g) { return g->n_tensors; }

const llmb_str *llmb_gguf_kv_key(const llmb_gguf *g, uint64_t i) { return i < g->n_kv ? &g->keys[i] : NULL; }
const llmb_gguf_value *llmb_gguf_kv_value(const llmb_gguf *g, uint64_t i) { return i < g->n_kv ? &g->vals[i] : NULL; }
const llmb_gguf_tensor *llmb_gguf_tensor_at(const llmb_gguf *g, uint64_t i) {
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}
