// test_gguf.c — the GGUF reader against hand-built files: one valid file with every metadata
// type, then one malformation per validation rule (each must fail with LLMB_E_FORMAT and a message
// naming the field), every truncation of the valid file, and a mutation fuzzer over the real
// stories260K model (bit flips, truncations, insertions, huge counts) run under ASan/UBSan:
// every mutant either loads (and then every value and tensor byte is read) or is rejected.
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../llmb.h"
#include "check.h"

// ---- a little GGUF builder ----

typedef struct {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void put_uint(buf *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}
static void put_u32(buf *b, uint32_t v) { put_uint(b, v, 4); }
static void put_u64(buf *b, uint64_t v) { put_uint(b, v, 8); }
static void put_str(buf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void pad_to(buf *b, size_t align) {
    while (b->n % align) put_uint(b, 0, 1);
}
static void patch_u32(buf *b, size_t at, uint32_t v) { for (int i = 0; i < 4; i++) b->p[at + i] = (uint8_t)(v >> (8 * i)); }
static void patch_u64(buf *b, size_t at, uint64_t v) { for (int i = 0; i < 8; i++) b->p[at + i] = (uint8_t)(v >> (8 * i)); }

// Offsets of fields the malformation tests patch.
typedef struct {
    size_t version, n_tensors, n_kv, key0_len, str_val_len, str_val_data, arr_type, arr_len, bool_val, val_type,
        align_val, align_type, dup_key, nested_type, t0_ndims, t0_dim0, t0_dim1, t0_type, t0_offset, t1_name,
        t1_dim0, t1_offset, data;
} layout;

// A valid v3 file: 12 metadata entries covering every value type (incl. nested arrays and
// general.alignment = 64), then tensor "a" F32 [8 x 3] and tensor "b" Q8_0 [64].
static buf build(layout *L) {
    buf b = {0};
    put(&b, "GGUF", 4);
    L->version = b.n; put_u32(&b, 3);
    L->n_tensors = b.n; put_u64(&b, 2);
    L->n_kv = b.n; put_u64(&b, 13);
    L->key0_len = b.n; put_str(&b, "k.u8"); put_u32(&b, 0); put_uint(&b, 200, 1);
    put_str(&b, "k.i8"); put_u32(&b, 1); put_uint(&b, 0xF6, 1);             // -10
    put_str(&b, "k.u16"); put_u32(&b, 2); put_uint(&b, 65000, 2);
    put_str(&b, "k.i16"); put_u32(&b, 3); put_uint(&b, 0xFFFE, 2);          // -2
    L->val_type = b.n + 8 + 5; put_str(&b, "k.u32"); put_u32(&b, 4); put_u32(&b, 4000000000u);
    put_str(&b, "k.i32"); put_u32(&b, 5); put_u32(&b, 0xFFFFFFFFu);          // -1
    put_str(&b, "k.f32"); put_u32(&b, 6); put_u32(&b, 0x3FC00000u);          // 1.5
    L->bool_val = b.n + 8 + 6 + 4; put_str(&b, "k.bool"); put_u32(&b, 7); put_uint(&b, 1, 1);
    put_str(&b, "k.str"); put_u32(&b, 8); L->str_val_len = b.n; put_str(&b, "héllo"); L->str_val_data = L->str_val_len + 8;
    put_str(&b, "k.u64"); put_u32(&b, 10); put_u64(&b, 1ull << 63);
    L->dup_key = b.n; put_str(&b, "k.i64"); put_u32(&b, 11); put_u64(&b, (uint64_t)-5);
    // k.arr: array of 2 arrays of 3 int32 -> nested
    put_str(&b, "k.arr"); put_u32(&b, 9); L->arr_type = b.n; put_u32(&b, 9); L->arr_len = b.n; put_u64(&b, 2);
    L->nested_type = b.n;
    for (int k = 0; k < 2; k++) { put_u32(&b, 5); put_u64(&b, 3); for (int j = 0; j < 3; j++) put_u32(&b, (uint32_t)(k * 10 + j)); }
    put_str(&b, "general.alignment"); L->align_type = b.n; put_u32(&b, 4); L->align_val = b.n; put_u32(&b, 64);
    // tensor infos
    put_str(&b, "a");
    L->t0_ndims = b.n; put_u32(&b, 2);
    L->t0_dim0 = b.n; put_u64(&b, 8);
    L->t0_dim1 = b.n; put_u64(&b, 3);
    L->t0_type = b.n; put_u32(&b, 0);
    L->t0_offset = b.n; put_u64(&b, 0);
    L->t1_name = b.n; put_str(&b, "b"); put_u32(&b, 1);
    L->t1_dim0 = b.n; put_u64(&b, 64); put_u32(&b, 8);
    L->t1_offset = b.n; put_u64(&b, 128);
    pad_to(&b, 64);
    L->data = b.n;
    for (int i = 0; i < 24; i++) { float f = (float)i * 0.5f; put(&b, &f, 4); }
    pad_to(&b, 64); // 96 bytes -> 128
    for (int i = 0; i < 68; i++) put_uint(&b, (uint64_t)(i * 7 + 1), 1);
    return b;
}

static llmb_status open_buf(const buf *b, llmb_gguf **g) { return llmb_gguf_open_memory(b->p, b->n, g); }

// Expect the mutated buffer to fail with a format error whose message contains `needle`.
static void expect_format(buf *b, const char *needle, const char *what) {
    llmb_gguf *g = NULL;
    llmb_status s = open_buf(b, &g);
    CHECK(s == LLMB_E_FORMAT, "%s: expected LLMB_E_FORMAT, got %s", what, llmb_status_name(s));
    CHECK(g == NULL, "%s: handle must be NULL on failure", what);
    CHECK(strstr(llmb_last_error(), needle) != NULL, "%s: message '%s' lacks '%s'", what, llmb_last_error(), needle);
    CHECK(strstr(llmb_last_error(), "at byte") != NULL || strstr(llmb_last_error(), "info at byte") != NULL,
          "%s: message '%s' names no byte offset", what, llmb_last_error());
    llmb_gguf_close(g);
}

typedef void (*mutator)(buf *b, const layout *L);
#define MUT(name, body) static void name(buf *b, const layout *L) { body; }
MUT(m_magic, b->p[0] = 'X')
MUT(m_v1, patch_u32(b, L->version, 1))
MUT(m_v4, patch_u32(b, L->version, 4))
MUT(m_bigendian, patch_u32(b, L->version, 3u << 24))
MUT(m_ntensors, patch_u64(b, L->n_tensors, 1ull << 60))
MUT(m_nkv, patch_u64(b, L->n_kv, UINT64_MAX))
MUT(m_keylen, patch_u64(b, L->key0_len, 1ull << 62))
MUT(m_strlen, patch_u64(b, L->str_val_len, 1ull << 40))
MUT(m_utf8, b->p[L->str_val_data + 1] = 0xC3; b->p[L->str_val_data + 2] = 0x28)
MUT(m_valtype, patch_u32(b, L->val_type, 13))
MUT(m_bool, b->p[L->bool_val] = 2)
MUT(m_arrtype, patch_u32(b, L->arr_type, 77))
MUT(m_arrlen, patch_u64(b, L->arr_len, 1ull << 61))
MUT(m_nested_type, patch_u32(b, L->nested_type, 42))
MUT(m_dupkey, memcpy(b->p + L->dup_key + 8, "k.u64", 5))
MUT(m_align_pow2, patch_u32(b, L->align_val, 48))
MUT(m_align_zero, patch_u32(b, L->align_val, 0))
MUT(m_align_type, patch_u32(b, L->align_type, 5))
MUT(m_ndims0, patch_u32(b, L->t0_ndims, 0))
MUT(m_ndims5, patch_u32(b, L->t0_ndims, 5))
MUT(m_dim0, patch_u64(b, L->t0_dim0, 0))
MUT(m_dimneg, patch_u64(b, L->t0_dim0, 1ull << 63))
MUT(m_dimovf, patch_u64(b, L->t0_dim0, 1ull << 40); patch_u64(b, L->t0_dim1, 1ull << 40))
MUT(m_bytesovf, patch_u64(b, L->t0_dim0, 1ull << 31); patch_u64(b, L->t0_dim1, 1ull << 31))
MUT(m_type_removed, patch_u32(b, L->t0_type, 4))
MUT(m_type_unknown, patch_u32(b, L->t0_type, 1000))
MUT(m_blocksize, patch_u64(b, L->t1_dim0, 48))
MUT(m_unaligned, patch_u64(b, L->t1_offset, 100))
MUT(m_outside, patch_u64(b, L->t1_offset, 1ull << 20))
MUT(m_offset_ovf, patch_u64(b, L->t1_offset, UINT64_MAX - 63))
MUT(m_overlap, patch_u64(b, L->t1_offset, 64); patch_u64(b, L->t0_dim1, 3))
MUT(m_dupname, b->p[L->t1_name + 8] = 'a')

static void test_valid(void) {
    layout L;
    buf b = build(&L);
    llmb_gguf *g = NULL;
    llmb_status s = open_buf(&b, &g);
    CHECK(s == LLMB_OK, "valid file: %s", llmb_last_error());
    if (s) { free(b.p); return; }
    CHECK(llmb_gguf_version(g) == 3, "version");
    CHECK(llmb_gguf_alignment(g) == 64, "alignment %llu", (unsigned long long)llmb_gguf_alignment(g));
    CHECK(llmb_gguf_data_offset(g) == L.data, "data offset %llu vs %zu", (unsigned long long)llmb_gguf_data_offset(g), L.data);
    CHECK(llmb_gguf_n_kv(g) == 13, "n_kv");
    const llmb_gguf_value *v = llmb_gguf_kv_value(g, (uint64_t)llmb_gguf_find_kv(g, "k.i8"));
    CHECK(v->v.i64 == -10, "i8 %lld", (long long)v->v.i64);
    v = llmb_gguf_kv_value(g, (uint64_t)llmb_gguf_find_kv(g, "k.i64"));
    CHECK(v->v.i64 == -5, "i64");
    v = llmb_gguf_kv_value(g, (uint64_t)llmb_gguf_find_kv(g, "k.f32"));
    CHECK(v->v.f64 == 1.5, "f32");
    v = llmb_gguf_kv_value(g, (uint64_t)llmb_gguf_find_kv(g, "k.str"));
    CHECK(v->v.str.len == 6 && memcmp(v->v.str.data, "héllo", 6) == 0, "str");
    v = llmb_gguf_kv_value(g, (uint64_t)llmb_gguf_find_kv(g, "k.arr"));
    llmb_gguf_iter it, it2;
    llmb_gguf_value e, e2;
    llmb_gguf_iter_init(&it, v);
    int n = 0, sum = 0;
    while (llmb_gguf_iter_next(&it, &e)) {
        CHECK(e.type == LLMB_GGUF_ARRAY && e.v.arr.count == 3, "nested element");
        llmb_gguf_iter_init(&it2, &e);
        while (llmb_gguf_iter_next(&it2, &e2)) sum += (int)e2.v.i64;
        n++;
    }
    CHECK(n == 2 && sum == 0 + 1 + 2 + 10 + 11 + 12, "nested walk n=%d sum=%d", n, sum);
    CHECK(llmb_gguf_find_kv(g, "missing") == -1, "missing key");
    CHECK(llmb_gguf_n_tensors(g) == 2, "tensors");
    const llmb_gguf_tensor *t = llmb_gguf_tensor_at(g, (uint64_t)llmb_gguf_find_tensor(g, "a"));
    CHECK(t->ne[0] == 8 && t->ne[1] == 3 && t->nbytes == 96, "tensor a");
    float f;
    memcpy(&f, t->data + 4 * 5, 4);
    CHECK(f == 2.5f, "tensor a data %f", f);
    t = llmb_gguf_tensor_at(g, (uint64_t)llmb_gguf_find_tensor(g, "b"));
    CHECK(t->type == 8 && t->nbytes == 68 && t->data[0] == 1, "tensor b");
    CHECK(llmb_gguf_find_tensor(g, "c") == -1, "missing tensor");
    llmb_gguf_close(g);

    // Without general.alignment the default of 32 applies; a v2 file is accepted too.
    patch_u32(&b, L.version, 2);
    CHECK(open_buf(&b, &g) == LLMB_OK, "v2: %s", llmb_last_error());
    llmb_gguf_close(g);
    free(b.p);
}

static void test_malformed(void) {
    struct { mutator m; const char *needle, *what; } cases[] = {
        {m_magic, "magic", "bad magic"},
        {m_v1, "version", "version 1"},
        {m_v4, "expected 2 or 3", "version 4"},
        {m_bigendian, "big-endian", "big-endian"},
        {m_ntensors, "tensor count", "huge tensor count"},
        {m_nkv, "metadata count", "huge kv count"},
        {m_keylen, "string length", "huge key length"},
        {m_strlen, "string length", "huge string length"},
        {m_utf8, "UTF-8", "invalid UTF-8"},
        {m_valtype, "value type", "unknown value type"},
        {m_bool, "bool", "bool 2"},
        {m_arrtype, "element type", "unknown array element type"},
        {m_arrlen, "array length", "huge array length"},
        {m_nested_type, "element type", "bad nested element type"},
        {m_dupkey, "duplicate", "duplicate key"},
        {m_align_pow2, "power of two", "alignment 48"},
        {m_align_zero, "power of two", "alignment 0"},
        {m_align_type, "uint32", "alignment type"},
        {m_ndims0, "n_dims", "0 dims"},
        {m_ndims5, "n_dims", "5 dims"},
        {m_dim0, "dims[0]", "zero dimension"},
        {m_dimneg, "dims[0]", "dimension >= 2^63"},
        {m_dimovf, "overflows", "element count overflow"},
        {m_bytesovf, "overflows int64", "byte count overflow"},
        {m_type_removed, "type", "removed type id 4"},
        {m_type_unknown, "type", "unknown type id"},
        {m_blocksize, "block size", "row not multiple of block"},
        {m_unaligned, "alignment", "unaligned offset"},
        {m_outside, "data", "offset beyond file"},
        {m_offset_ovf, "data offset", "offset near 2^64"},
        {m_overlap, "overlaps", "overlapping tensors"},
        {m_dupname, "duplicate", "duplicate tensor name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        layout L;
        buf b = build(&L);
        cases[i].m(&b, &L);
        expect_format(&b, cases[i].needle, cases[i].what);
        free(b.p);
    }
}

static void test_truncations(void) {
    layout L;
    buf b = build(&L);
    int bad = 0;
    for (size_t n = 0; n < b.n; n++) {
        llmb_gguf *g = NULL;
        llmb_status s = llmb_gguf_open_memory(b.p, n, &g);
        if (s != LLMB_E_FORMAT) bad++;
        llmb_gguf_close(g);
    }
    CHECK(bad == 0, "%d of %zu truncations were not rejected as format errors", bad, b.n);
    free(b.p);
}

static void test_nesting_limit(void) {
    buf b = {0};
    put(&b, "GGUF", 4); put_u32(&b, 3); put_u64(&b, 0); put_u64(&b, 1);
    put_str(&b, "deep"); put_u32(&b, 9);
    for (int d = 0; d < 20; d++) { put_u32(&b, 9); put_u64(&b, 1); }
    put_u32(&b, 0); put_u64(&b, 0);
    for (int i = 0; i < 64; i++) put_uint(&b, 0, 1);
    llmb_gguf *g = NULL;
    CHECK(llmb_gguf_open_memory(b.p, b.n, &g) == LLMB_E_FORMAT && strstr(llmb_last_error(), "nested"),
          "deep nesting: %s", llmb_last_error());
    free(b.p);
}

static void test_files(void) {
    llmb_gguf *g = NULL;
    CHECK(llmb_gguf_open("/nonexistent/x.gguf", &g) == LLMB_E_IO && llmb_last_errno() == ENOENT, "missing file");
    CHECK(llmb_gguf_open("/", &g) == LLMB_E_IO && llmb_last_errno() == EISDIR, "directory");
    CHECK(llmb_gguf_open("/dev/null", &g) == LLMB_E_FORMAT, "empty file: %s", llmb_last_error());
}

// ---- mutation fuzzer over a real file ----

static uint64_t rng_state = 0x1234567887654321ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return rng_state;
}

// Read every value and every tensor byte of a file that loaded, so ASan sees any bad pointer.
static uint64_t walk_value(const llmb_gguf_value *v) {
    uint64_t h = v->type;
    if (v->type == LLMB_GGUF_STRING) for (uint64_t i = 0; i < v->v.str.len; i++) h += (uint8_t)v->v.str.data[i];
    if (v->type == LLMB_GGUF_ARRAY) {
        llmb_gguf_iter it;
        llmb_gguf_value e;
        llmb_gguf_iter_init(&it, v);
        uint64_t n = 0;
        while (llmb_gguf_iter_next(&it, &e)) { h += walk_value(&e); n++; }
        if (n != v->v.arr.count) h = 0, check_failed++, fprintf(stderr, "FAIL iterator stopped early\n");
        for (uint64_t i = 0; i < v->v.arr.nbytes; i++) h += v->v.arr.data[i];
    }
    return h;
}

static uint64_t walk(llmb_gguf *g) {
    uint64_t h = 0;
    for (uint64_t i = 0; i < llmb_gguf_n_kv(g); i++) h += walk_value(llmb_gguf_kv_value(g, i));
    for (uint64_t i = 0; i < llmb_gguf_n_tensors(g); i++) {
        const llmb_gguf_tensor *t = llmb_gguf_tensor_at(g, i);
        for (uint64_t k = 0; k < t->nbytes; k += 61) h += t->data[k];
        if (t->nbytes) h += t->data[t->nbytes - 1];
    }
    return h;
}

static void test_fuzz(void) {
    const char *path = getenv("LLMB_STORIES");
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        printf("fuzz: skipped (set LLMB_STORIES to stories260K.gguf; %s not found)\n", path ? path : "(unset)");
        return;
    }
    fseek(f, 0, SEEK_END);
    size_t size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *orig = malloc(size);
    CHECK(fread(orig, 1, size, f) == size, "read %s", path);
    fclose(f);
    llmb_gguf *g0 = NULL;
    CHECK(llmb_gguf_open_memory(orig, size, &g0) == LLMB_OK, "stories loads: %s", llmb_last_error());
    uint64_t data_off = g0 ? llmb_gguf_data_offset(g0) : size;
    llmb_gguf_close(g0);
    long iters = getenv("LLMB_FUZZ_ITERS") ? atol(getenv("LLMB_FUZZ_ITERS")) : 20000;
    long loaded = 0, rejected = 0, other = 0;
    uint8_t *m = malloc(size + 64);
    for (long it = 0; it < iters; it++) {
        memcpy(m, orig, size);
        size_t n = size;
        // Mutate the header region (where the parser looks) most of the time.
        size_t region = (rnd() % 4) ? (size_t)data_off : size;
        int kind = (int)(rnd() % 5), count = 1 + (int)(rnd() % 4);
        for (int c = 0; c < count; c++) {
            size_t at = (size_t)(rnd() % region);
            if (kind == 0) m[at] ^= (uint8_t)(1u << (rnd() % 8));                     // bit flip
            else if (kind == 1) m[at] = (uint8_t)rnd();                                  // random byte
            else if (kind == 2) { n = at; break; }                                       // truncate
            else if (kind == 3 && at + 8 <= n) {                                         // huge count field
                static const uint64_t huge[] = {UINT64_MAX, 1ull << 63, 1ull << 32, 0xFFFFFFFFull, 0};
                uint64_t h = huge[rnd() % 5];
                for (int k = 0; k < 8; k++) m[at + k] = (uint8_t)(h >> (8 * k));
            } else if (kind == 4 && n + 8 <= size + 64) {                                // insert bytes
                size_t k = 1 + rnd() % 8;
                memmove(m + at + k, m + at, n - at);
                for (size_t j = 0; j < k; j++) m[at + j] = (uint8_t)rnd();
                n += k;
            }
        }
        llmb_gguf *g = NULL;
        llmb_status s = llmb_gguf_open_memory(m, n, &g);
        if (s == LLMB_OK) { loaded++; (void)walk(g); llmb_gguf_close(g); }
        else if (s == LLMB_E_FORMAT) rejected++;
        else other++;
    }
    CHECK(other == 0, "%ld mutants failed with something other than a format error", other);
    printf("fuzz: %ld mutants of %s: %ld loaded, %ld rejected as malformed, %ld other\n", iters, path, loaded, rejected, other);
    free(m);
    free(orig);
}

int main(void) {
    test_valid();
    test_malformed();
    test_truncations();
    test_nesting_limit();
    test_files();
    test_fuzz();
    return check_summary();
}
