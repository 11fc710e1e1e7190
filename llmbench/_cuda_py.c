// _cuda_py.c — Python bindings of the CUDA backend: loading its library, the devices and raw device
// memory (cuda_load, cuda_devices, cuda_malloc, ...; tests/test_cuda.py), and its kernels
// (kernels/llmb_cuda_abi.h, version 3): contexts, memory facts, phase timers, one function per op taking
// device pointers as ints (None for NULL), and CUDA Graphs (capture on a context, replay).
// llmbench/backends/cuda.py wraps them with NumPy uploads and downloads; the kernel tests are
// tests/test_cuda_kernels.py. Every call goes through the library csrc/cuda_loader.c loaded, so without a
// GPU each raises BackendUnavailableError with the reason.
#include "_pycore.h"
#include "../csrc/cuda_loader.h"
#include "../csrc/internal.h"

#define CTX_CAPSULE "llmbench.cuda_ctx"
#define GRAPH_CAPSULE "llmbench.cuda_graph"

static const llmb_cuda_api *table(void) {
    const llmb_cuda_api *a = llmb_cuda_table();
    if (!a) llmb_py_raise(LLMB_E_BACKEND, NULL);
    return a;
}

// the library's message into the core's error buffer, then the matching exception
static PyObject *raise_lib(const llmb_cuda_api *a, llmb_status s) {
    llmb_fail(s, "%s", a->last_error());
    return llmb_py_raise(s, NULL);
}

// "O&" converter: a device pointer given as an int, or None for NULL
static int ptr_arg(PyObject *o, void *out) {
    if (o == Py_None) {
        *(void **)out = NULL;
        return 1;
    }
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "a device pointer must be an int or None, not %.100s", Py_TYPE(o)->tp_name);
        return 0;
    }
    *(void **)out = PyLong_AsVoidPtr(o);
    return !PyErr_Occurred();
}

static void ctx_free(PyObject *cap) {
    llmb_cuda_ctx *c = PyCapsule_GetPointer(cap, CTX_CAPSULE);
    const llmb_cuda_api *a = llmb_cuda_table();
    if (c && a) a->ctx_destroy(c);
}

static int ctx_arg(PyObject *o, void *out) {
    llmb_cuda_ctx *c = PyCapsule_GetPointer(o, CTX_CAPSULE);
    if (!c) return 0;
    *(llmb_cuda_ctx **)out = c;
    return 1;
}

// Run `call` (an llmb_status expression using `a`) without the GIL; raise on failure.
#define CALL(call)                       \
    do {                                 \
        llmb_status s_;                  \
        Py_BEGIN_ALLOW_THREADS           \
        s_ = (call);                     \
        Py_END_ALLOW_THREADS             \
        if (s_) return raise_lib(a, s_); \
    } while (0)

static PyObject *py_abi_version(PyObject *m, PyObject *noargs) { return PyLong_FromLong(LLMB_CUDA_ABI_VERSION); }

static PyObject *py_mem_info(PyObject *m, PyObject *args) {
    int dev;
    if (!PyArg_ParseTuple(args, "i", &dev)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    size_t fr = 0, tot = 0;
    CALL(a->mem_info(dev, &fr, &tot));
    return Py_BuildValue("(KK)", (unsigned long long)fr, (unsigned long long)tot);
}

static PyObject *py_ctx_create(PyObject *m, PyObject *args) {
    int dev;
    if (!PyArg_ParseTuple(args, "i", &dev)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    llmb_cuda_ctx *c = NULL;
    CALL(a->ctx_create(dev, &c));
    PyObject *cap = PyCapsule_New(c, CTX_CAPSULE, ctx_free);
    if (!cap) a->ctx_destroy(c);
    return cap;
}

static PyObject *py_sync(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    if (!PyArg_ParseTuple(args, "O&", ctx_arg, &c)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->sync(c));
    Py_RETURN_NONE;
}

static PyObject *py_workspace_bytes(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    if (!PyArg_ParseTuple(args, "O&", ctx_arg, &c)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    size_t n = 0;
    CALL(a->ctx_workspace_bytes(c, &n));
    return PyLong_FromSize_t(n);
}

// phase(ctx, id, end): record the begin (end=0) or end (end=1) event of phase id
static PyObject *py_phase(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    int id, end;
    if (!PyArg_ParseTuple(args, "O&ip", ctx_arg, &c, &id, &end)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(end ? a->phase_end(c, id) : a->phase_begin(c, id));
    Py_RETURN_NONE;
}

static PyObject *py_phase_ms(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    int id;
    if (!PyArg_ParseTuple(args, "O&i", ctx_arg, &c, &id)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    float ms = 0;
    CALL(a->phase_ms(c, id, &ms));
    return PyFloat_FromDouble(ms);
}

// matmul(ctx, path, wtype, w, rows, cols, x, ldx, ntok, y, ldy, reps=1); path 0 matvec, 1 gemm, 2 matmul;
// reps > 1 queues the same product that many times (benchmarks: no Python call between launches)
static PyObject *py_matmul(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    int path, wtype, ntok, reps = 1;
    void *w, *x, *y;
    long long rows, cols, ldx, ldy;
    if (!PyArg_ParseTuple(args, "O&iiO&LLO&LiO&L|i", ctx_arg, &c, &path, &wtype, ptr_arg, &w, &rows, &cols, ptr_arg, &x,
                          &ldx, &ntok, ptr_arg, &y, &ldy, &reps))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    if (path < 0 || path > 2) return PyErr_Format(PyExc_ValueError, "path %d: 0 matvec, 1 gemm, 2 matmul", path);
    llmb_status (*f)(llmb_cuda_ctx *, int, const void *, int64_t, int64_t, const float *, int64_t, int, float *,
                     int64_t) = path == 0 ? a->matvec : path == 1 ? a->gemm : a->matmul;
    for (int r = 0; r < reps; r++) CALL(f(c, wtype, w, rows, cols, x, ldx, ntok, y, ldy));
    Py_RETURN_NONE;
}

static PyObject *py_set_gemm_min_tokens(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    int n;
    if (!PyArg_ParseTuple(args, "O&i", ctx_arg, &c, &n)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->set_gemm_min_tokens(c, n));
    Py_RETURN_NONE;
}

// dequantize(ctx, wtype, w, rows, cols, ids, n, out_type, out)
static PyObject *py_dequantize(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    int wtype, out_type;
    void *w, *ids, *out;
    long long rows, cols, n;
    if (!PyArg_ParseTuple(args, "O&iO&LLO&LiO&", ctx_arg, &c, &wtype, ptr_arg, &w, &rows, &cols, ptr_arg, &ids, &n,
                          &out_type, ptr_arg, &out))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->dequantize(c, wtype, w, rows, cols, ids, n, out_type, out));
    Py_RETURN_NONE;
}

// rmsnorm(ctx, out, x, residual, w, n, n_rows, eps)
static PyObject *py_rmsnorm(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    void *out, *x, *res, *w;
    long long n;
    int n_rows;
    float eps;
    if (!PyArg_ParseTuple(args, "O&O&O&O&O&Lif", ctx_arg, &c, ptr_arg, &out, ptr_arg, &x, ptr_arg, &res, ptr_arg, &w,
                          &n, &n_rows, &eps))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->rmsnorm(c, out, x, res, w, n, n_rows, eps));
    Py_RETURN_NONE;
}

// rope(ctx, v, n_tok, n_heads, head_dim, ld, pos, base, scale, freq_factors, neox)
static PyObject *py_rope(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    void *v, *pos, *ff;
    int n_tok, n_heads, hd, neox;
    long long ld;
    float base, scale;
    if (!PyArg_ParseTuple(args, "O&O&iiiLO&ffO&p", ctx_arg, &c, ptr_arg, &v, &n_tok, &n_heads, &hd, &ld, ptr_arg, &pos,
                          &base, &scale, ptr_arg, &ff, &neox))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->rope(c, v, n_tok, n_heads, hd, ld, pos, base, scale, ff, neox));
    Py_RETURN_NONE;
}

// elementwise(ctx, op, y, x, n): op 0 swiglu (y = gate, x = up), 1 add (y += x)
static PyObject *py_elementwise(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    int op;
    void *y, *x;
    long long n;
    if (!PyArg_ParseTuple(args, "O&iO&O&L", ctx_arg, &c, &op, ptr_arg, &y, ptr_arg, &x, &n)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    if (op != 0 && op != 1) return PyErr_Format(PyExc_ValueError, "op %d: 0 swiglu, 1 add", op);
    CALL(op == 0 ? a->swiglu(c, y, x, n) : a->add(c, y, x, n));
    Py_RETURN_NONE;
}

// kv_store(ctx, kv_type, k_cache, v_cache, k, v, ld, n_tok, kv_dim, slots)
static PyObject *py_kv_store(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    int kv_type, n_tok, kv_dim;
    void *kc, *vc, *k, *v, *slots;
    long long ld;
    if (!PyArg_ParseTuple(args, "O&iO&O&O&O&LiiO&", ctx_arg, &c, &kv_type, ptr_arg, &kc, ptr_arg, &vc, ptr_arg, &k,
                          ptr_arg, &v, &ld, &n_tok, &kv_dim, ptr_arg, &slots))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->kv_store(c, kv_type, kc, vc, k, v, ld, n_tok, kv_dim, slots));
    Py_RETURN_NONE;
}

// attention(ctx, prefill, **fields of llmb_cuda_attn): pointers as ints or None
static PyObject *py_attention(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"ctx", "prefill", "q", "out", "ldq", "ldo", "k_cache", "v_cache", "kv_type",
                             "block_size", "n_head", "n_head_kv", "head_dim", "scale", "block_tables", "max_blocks",
                             "n_seq", "seq_lens", "split_keys", "max_seq_len", "q_start", "q_len", "pos0",
                             "max_q_len", NULL};
    llmb_cuda_ctx *c;
    int prefill;
    llmb_cuda_attn at = {0};
    long long ldq, ldo;
    void *q, *out, *kc, *vc, *bt, *sl = NULL, *qs = NULL, *ql = NULL, *p0 = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&pO&O&LLO&O&iiiiifO&ii|O&iiO&O&O&i", kwlist, ctx_arg, &c, &prefill,
                                     ptr_arg, &q, ptr_arg, &out, &ldq, &ldo, ptr_arg, &kc, ptr_arg, &vc, &at.kv_type,
                                     &at.block_size, &at.n_head, &at.n_head_kv, &at.head_dim, &at.scale, ptr_arg, &bt,
                                     &at.max_blocks, &at.n_seq, ptr_arg, &sl, &at.split_keys, &at.max_seq_len,
                                     ptr_arg, &qs, ptr_arg, &ql, ptr_arg, &p0, &at.max_q_len))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    at.q = q, at.out = out, at.ldq = ldq, at.ldo = ldo, at.k_cache = kc, at.v_cache = vc, at.block_tables = bt;
    at.seq_lens = sl, at.q_start = qs, at.q_len = ql, at.pos0 = p0;
    CALL(prefill ? a->attn_prefill(c, &at) : a->attn_decode(c, &at));
    Py_RETURN_NONE;
}

// sample(ctx, logits, n_rows, vocab, params, logprobs) -> (ids int32 array, logprobs float32 array or None);
// params: a sequence of n_rows tuples (temperature, top_k, top_p, min_p, u)
// sample_dev(ctx, logits, n_rows, vocab, params, ids, logprobs): device pointers, asynchronous
static PyObject *py_sample_dev(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    void *logits, *params, *ids, *lps;
    int n_rows, vocab;
    if (!PyArg_ParseTuple(args, "O&O&iiO&O&O&", ctx_arg, &c, ptr_arg, &logits, &n_rows, &vocab, ptr_arg, &params,
                          ptr_arg, &ids, ptr_arg, &lps))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->sample_dev(c, logits, n_rows, vocab, params, ids, lps));
    Py_RETURN_NONE;
}

// copy(ctx, dst, src, nbytes, kind): pointers as ints (host ones from NumPy's .ctypes.data), on the stream
static PyObject *py_copy(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    void *dst, *src;
    unsigned long long n;
    int kind;
    if (!PyArg_ParseTuple(args, "O&O&O&Ki", ctx_arg, &c, ptr_arg, &dst, ptr_arg, &src, &n, &kind)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->copy(c, dst, src, (size_t)n, kind));
    Py_RETURN_NONE;
}

// ---- graphs: a graph capsule keeps its context's capsule alive (its context), so a graph always
// goes before the context it was captured on ----

static void graph_free(PyObject *cap) {
    llmb_cuda_graph *g = PyCapsule_GetPointer(cap, GRAPH_CAPSULE);
    PyObject *ctx = PyCapsule_GetContext(cap);
    const llmb_cuda_api *a = llmb_cuda_table();
    if (g && a) a->graph_destroy(g);
    Py_XDECREF(ctx);
}

static PyObject *py_graph_begin(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    if (!PyArg_ParseTuple(args, "O&", ctx_arg, &c)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    CALL(a->graph_begin(c));
    Py_RETURN_NONE;
}

// graph_end(ctx) -> (graph capsule, n_nodes, n_kernels, capture_ms)
static PyObject *py_graph_end(PyObject *m, PyObject *args) {
    PyObject *ctx_obj;
    llmb_cuda_ctx *c;
    if (!PyArg_ParseTuple(args, "O", &ctx_obj) || !ctx_arg(ctx_obj, &c)) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    llmb_cuda_graph *g = NULL;
    llmb_cuda_graph_info info;
    CALL(a->graph_end(c, &g, &info));
    PyObject *cap = PyCapsule_New(g, GRAPH_CAPSULE, graph_free);
    if (!cap) {
        a->graph_destroy(g);
        return NULL;
    }
    if (PyCapsule_SetContext(cap, Py_NewRef(ctx_obj))) { // graph_free drops it
        Py_DECREF(ctx_obj);
        Py_DECREF(cap);
        return NULL;
    }
    return Py_BuildValue("(Niid)", cap, info.n_nodes, info.n_kernels, info.capture_ms);
}

// graph_launch(ctx, graph, reps=1): reps > 1 replays it that many times (benchmarks)
static PyObject *py_graph_launch(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    PyObject *gcap;
    int reps = 1;
    if (!PyArg_ParseTuple(args, "O&O|i", ctx_arg, &c, &gcap, &reps)) return NULL;
    llmb_cuda_graph *g = PyCapsule_GetPointer(gcap, GRAPH_CAPSULE);
    if (!g) return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    for (int r = 0; r < reps; r++) CALL(a->graph_launch(c, g));
    Py_RETURN_NONE;
}

static PyObject *py_sample(PyObject *m, PyObject *args) {
    llmb_cuda_ctx *c;
    void *logits;
    int n_rows, vocab, want_lp;
    PyObject *params, *ids = NULL, *lps = NULL;
    llmb_cuda_sampling *p = NULL;
    if (!PyArg_ParseTuple(args, "O&O&iiOp", ctx_arg, &c, ptr_arg, &logits, &n_rows, &vocab, &params, &want_lp))
        return NULL;
    const llmb_cuda_api *a = table();
    if (!a) return NULL;
    if (n_rows < 0 || !PySequence_Check(params) || PySequence_Size(params) != n_rows)
        return PyErr_Format(PyExc_ValueError, "params must be a sequence of %d (temperature, top_k, top_p, min_p, u)",
                            n_rows);
    p = PyMem_Calloc(n_rows ? (size_t)n_rows : 1, sizeof *p);
    if (!p) return PyErr_NoMemory();
    for (int r = 0; r < n_rows; r++) {
        PyObject *t = PySequence_GetItem(params, r);
        int ok = t && PyArg_ParseTuple(t, "fifff", &p[r].temperature, &p[r].top_k, &p[r].top_p, &p[r].min_p, &p[r].u);
        Py_XDECREF(t);
        if (!ok) goto fail;
    }
    npy_intp dims[1] = {n_rows};
    ids = PyArray_SimpleNew(1, dims, NPY_INT32);
    if (!ids || (want_lp && !(lps = PyArray_SimpleNew(1, dims, NPY_FLOAT32)))) goto fail;
    llmb_status s;
    int32_t *ip = PyArray_DATA((PyArrayObject *)ids);
    float *lp = lps ? PyArray_DATA((PyArrayObject *)lps) : NULL;
    Py_BEGIN_ALLOW_THREADS
    s = a->sample(c, logits, n_rows, vocab, p, ip, lp);
    Py_END_ALLOW_THREADS
    if (s) {
        raise_lib(a, s);
        goto fail;
    }
    PyMem_Free(p);
    return Py_BuildValue("(NN)", ids, lps ? lps : Py_NewRef(Py_None));
fail:
    PyMem_Free(p);
    Py_XDECREF(ids);
    Py_XDECREF(lps);
    return NULL;
}

static PyMethodDef methods[] = {
    {"cuda_abi_version", py_abi_version, METH_NOARGS, "The CUDA backend ABI version this core expects."},
    {"cuda_mem_info", py_mem_info, METH_VARARGS, "cuda_mem_info(dev) -> (free, total) bytes (cudaMemGetInfo)"},
    {"cuda_ctx_create", py_ctx_create, METH_VARARGS, "cuda_ctx_create(dev) -> context capsule"},
    {"cuda_sync", py_sync, METH_VARARGS, "cuda_sync(ctx): wait for the context's stream"},
    {"cuda_workspace_bytes", py_workspace_bytes, METH_VARARGS, "cuda_workspace_bytes(ctx) -> bytes"},
    {"cuda_phase", py_phase, METH_VARARGS, "cuda_phase(ctx, id, end): record a phase event"},
    {"cuda_phase_ms", py_phase_ms, METH_VARARGS, "cuda_phase_ms(ctx, id) -> ms between begin and end"},
    {"cuda_matmul", py_matmul, METH_VARARGS, "cuda_matmul(ctx, path, wtype, w, rows, cols, x, ldx, ntok, y, ldy, reps=1)"},
    {"cuda_set_gemm_min_tokens", py_set_gemm_min_tokens, METH_VARARGS, "cuda_set_gemm_min_tokens(ctx, n)"},
    {"cuda_dequantize", py_dequantize, METH_VARARGS, "cuda_dequantize(ctx, wtype, w, rows, cols, ids, n, out_type, out)"},
    {"cuda_rmsnorm", py_rmsnorm, METH_VARARGS, "cuda_rmsnorm(ctx, out, x, residual, w, n, n_rows, eps)"},
    {"cuda_rope", py_rope, METH_VARARGS, "cuda_rope(ctx, v, n_tok, n_heads, head_dim, ld, pos, base, scale, ff, neox)"},
    {"cuda_elementwise", py_elementwise, METH_VARARGS, "cuda_elementwise(ctx, op, y, x, n): 0 swiglu, 1 add"},
    {"cuda_kv_store", py_kv_store, METH_VARARGS, "cuda_kv_store(ctx, kv_type, kc, vc, k, v, ld, n_tok, kv_dim, slots)"},
    {"cuda_attention", (PyCFunction)(void (*)(void))py_attention, METH_VARARGS | METH_KEYWORDS,
     "cuda_attention(ctx, prefill, q=, out=, ...): paged attention (fields of llmb_cuda_attn)"},
    {"cuda_sample", py_sample, METH_VARARGS, "cuda_sample(ctx, logits, n_rows, vocab, params, logprobs) -> (ids, lps)"},
    {"cuda_sample_dev", py_sample_dev, METH_VARARGS, "cuda_sample_dev(ctx, logits, n_rows, vocab, params, ids, logprobs)"},
    {"cuda_copy", py_copy, METH_VARARGS, "cuda_copy(ctx, dst, src, nbytes, kind): 0 to device, 1 to host, 2 on device"},
    {"cuda_graph_begin", py_graph_begin, METH_VARARGS, "cuda_graph_begin(ctx): capture the context's stream"},
    {"cuda_graph_end", py_graph_end, METH_VARARGS, "cuda_graph_end(ctx) -> (graph, n_nodes, n_kernels, capture_ms)"},
    {"cuda_graph_launch", py_graph_launch, METH_VARARGS, "cuda_graph_launch(ctx, graph, reps=1): replay"},
    {NULL, NULL, 0, NULL},
};

// ---- the library, devices and memory (tests/test_cuda.py, benchmarks/bench_cuda.py) ----

static PyObject *cuda_load(PyObject *m, PyObject *args) {
    const char *path = NULL;
    if (!PyArg_ParseTuple(args, "|z", &path)) return NULL;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_cuda_load(path);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    Py_RETURN_NONE;
}

static PyObject *cuda_versions(PyObject *m, PyObject *noargs) {
    int rt = 0, drv = 0;
    llmb_status s = llmb_cuda_versions(&rt, &drv);
    if (s) return llmb_py_raise(s, NULL);
    return Py_BuildValue("(ii)", rt, drv);
}

static PyObject *cuda_devices(PyObject *m, PyObject *noargs) {
    int n = 0;
    llmb_status s = llmb_cuda_device_count(&n);
    if (s) return llmb_py_raise(s, NULL);
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < n; i++) {
        llmb_cuda_device d;
        if ((s = llmb_cuda_device_info(i, &d))) {
            Py_DECREF(list);
            return llmb_py_raise(s, NULL);
        }
        PyObject *item = Py_BuildValue("{s:i,s:s,s:K,s:K,s:(ii),s:i}", "index", i, "name", d.name, "total_memory",
                                       (unsigned long long)d.total_mem, "free_memory", (unsigned long long)d.free_mem,
                                       "compute_capability", d.cc_major, d.cc_minor, "multiprocessors",
                                       d.multiprocessors);
        if (llmb_py_append_new(list, item) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static PyObject *cuda_malloc(PyObject *m, PyObject *args) {
    int dev;
    unsigned long long n;
    if (!PyArg_ParseTuple(args, "iK", &dev, &n)) return NULL;
    void *p = NULL;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_cuda_malloc(dev, (size_t)n, &p);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    return PyLong_FromVoidPtr(p);
}

static PyObject *cuda_free(PyObject *m, PyObject *args) {
    int dev;
    PyObject *ptr;
    if (!PyArg_ParseTuple(args, "iO", &dev, &ptr)) return NULL;
    void *p = PyLong_AsVoidPtr(ptr);
    if (PyErr_Occurred()) return NULL;
    llmb_status s = llmb_cuda_free(dev, p);
    if (s) return llmb_py_raise(s, NULL);
    Py_RETURN_NONE;
}

// cuda_upload(dev, ptr, buffer): host buffer -> device
static PyObject *cuda_upload(PyObject *m, PyObject *args) {
    int dev;
    PyObject *ptr;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "iOy*", &dev, &ptr, &b)) return NULL;
    void *p = PyLong_AsVoidPtr(ptr);
    llmb_status s = LLMB_OK;
    if (!PyErr_Occurred()) {
        Py_BEGIN_ALLOW_THREADS
        s = llmb_cuda_memcpy(dev, p, b.buf, (size_t)b.len, 0);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&b);
    if (PyErr_Occurred()) return NULL;
    if (s) return llmb_py_raise(s, NULL);
    Py_RETURN_NONE;
}

// cuda_download(dev, ptr, n) -> numpy uint8 array
static PyObject *cuda_download(PyObject *m, PyObject *args) {
    int dev;
    PyObject *ptr;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "iOn", &dev, &ptr, &n)) return NULL;
    void *p = PyLong_AsVoidPtr(ptr);
    if (PyErr_Occurred()) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "byte count must be >= 0, got %zd", n);
    npy_intp dims = n;
    PyObject *a = PyArray_SimpleNew(1, &dims, NPY_UINT8);
    if (!a) return NULL;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_cuda_memcpy(dev, PyArray_DATA((PyArrayObject *)a), p, (size_t)n, 1);
    Py_END_ALLOW_THREADS
    if (s) {
        Py_DECREF(a);
        return llmb_py_raise(s, NULL);
    }
    return a;
}

static PyObject *cuda_time_copy(PyObject *m, PyObject *args) {
    int dev, reps;
    PyObject *dst, *src;
    unsigned long long n;
    if (!PyArg_ParseTuple(args, "iOOKi", &dev, &dst, &src, &n, &reps)) return NULL;
    void *d = PyLong_AsVoidPtr(dst), *sp = PyLong_AsVoidPtr(src);
    if (PyErr_Occurred()) return NULL;
    float ms = 0;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_cuda_time_copy(dev, d, sp, (size_t)n, reps, &ms);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    return PyFloat_FromDouble(ms);
}

static PyMethodDef device_methods[] = {
    {"cuda_load", cuda_load, METH_VARARGS, "Load the CUDA backend library (path or $LLMBENCH_CUDA_LIB)."},
    {"cuda_versions", cuda_versions, METH_NOARGS, "(runtime, driver) CUDA versions, 0 = none."},
    {"cuda_devices", cuda_devices, METH_NOARGS, "List CUDA devices."},
    {"cuda_malloc", cuda_malloc, METH_VARARGS, "cuda_malloc(dev, nbytes) -> pointer (int)"},
    {"cuda_free", cuda_free, METH_VARARGS, "cuda_free(dev, ptr)"},
    {"cuda_upload", cuda_upload, METH_VARARGS, "cuda_upload(dev, ptr, buffer)"},
    {"cuda_download", cuda_download, METH_VARARGS, "cuda_download(dev, ptr, nbytes) -> uint8 array"},
    {"cuda_time_copy", cuda_time_copy, METH_VARARGS,
     "cuda_time_copy(dev, dst, src, nbytes, reps) -> ms (CUDA events)"},
    {NULL}};

int llmb_py_init_cuda(PyObject *m) {
    return PyModule_AddFunctions(m, device_methods) < 0 ? -1 : PyModule_AddFunctions(m, methods);
}
