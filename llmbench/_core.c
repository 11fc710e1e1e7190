// _core.c — the CPython/NumPy wrapper around the C core (csrc/). The only file that includes
// Python.h. Status codes from the core become exceptions of a small hierarchy; the GIL is released
// around every call that may take time; arrays handed to Python are read-only views that keep
// their owner (the mapped GGUF file) alive. Tested by every test in tests/.
#define LLMB_CORE_MAIN
#include "_pycore.h"

#ifndef LLMB_BUILD_CFLAGS
#define LLMB_BUILD_CFLAGS "unknown"
#endif
#ifndef LLMB_BUILD_COMMIT
#define LLMB_BUILD_COMMIT ""
#endif
#ifndef LLMB_BUILD_CC
#define LLMB_BUILD_CC "unknown"
#endif

static PyObject *LLMBenchError, *GGUFError, *BackendUnavailableError, *DeviceError, *DeviceOutOfMemoryError,
    *UnsupportedError;

// Raise the exception that matches `s`, with the core's message. Returns NULL for `return raise(s);`.
PyObject *llmb_py_raise(llmb_status s, const char *filename) {
    const char *msg = llmb_last_error();
    switch (s) {
    case LLMB_OK:
        PyErr_SetString(PyExc_SystemError, "llmbench: llmb_py_raise(LLMB_OK)");
        break;
    case LLMB_E_IO: {
        int e = llmb_last_errno();
        PyObject *args = filename ? Py_BuildValue("(isO&)", e, msg, PyUnicode_DecodeFSDefault, filename)
                                  : Py_BuildValue("(is)", e, msg);
        if (args) {
            PyErr_SetObject(PyExc_OSError, args);
            Py_DECREF(args);
        }
        break;
    }
    case LLMB_E_NOMEM: PyErr_SetString(PyExc_MemoryError, msg); break;
    case LLMB_E_FORMAT: PyErr_SetString(GGUFError, msg); break;
    case LLMB_E_ARG: PyErr_SetString(PyExc_ValueError, msg); break;
    case LLMB_E_BACKEND: PyErr_SetString(BackendUnavailableError, msg); break;
    case LLMB_E_DEVICE: PyErr_SetString(DeviceError, msg); break;
    case LLMB_E_DEVICE_OOM: PyErr_SetString(DeviceOutOfMemoryError, msg); break;
    case LLMB_E_NOTFOUND: PyErr_SetString(PyExc_KeyError, msg); break;
    case LLMB_E_UNSUPPORTED: PyErr_SetString(UnsupportedError, msg); break;
    default: PyErr_Format(LLMBenchError, "status %d: %s", (int)s, msg); break;
    }
    return NULL;
}

// ---- GGUF reader object ----

typedef struct {
    PyObject_HEAD
    llmb_gguf *g;
    Py_buffer view;   // when opened from a buffer
    int has_view;
} ReaderObject;

static void Reader_dealloc(ReaderObject *self) {
    if (self->g) llmb_gguf_close(self->g);
    if (self->has_view) PyBuffer_Release(&self->view);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Reader_init(ReaderObject *self, PyObject *args, PyObject *kwds) {
    static char *kw[] = {"source", NULL};
    PyObject *src;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kw, &src)) return -1;
    if (self->g) {
        PyErr_SetString(PyExc_RuntimeError, "Reader is already open");
        return -1;
    }
    llmb_status s;
    if (PyObject_CheckBuffer(src) && !PyUnicode_Check(src)) {
        if (PyObject_GetBuffer(src, &self->view, PyBUF_C_CONTIGUOUS) < 0) return -1;
        self->has_view = 1;
        Py_BEGIN_ALLOW_THREADS
        s = llmb_gguf_open_memory(self->view.buf, (size_t)self->view.len, &self->g);
        Py_END_ALLOW_THREADS
        if (s) {
            llmb_py_raise(s, NULL);
            return -1;
        }
        return 0;
    }
    PyObject *bytes = NULL;
    if (!PyUnicode_FSConverter(src, &bytes)) return -1;
    const char *path = PyBytes_AS_STRING(bytes);
    Py_BEGIN_ALLOW_THREADS
    s = llmb_gguf_open(path, &self->g);
    Py_END_ALLOW_THREADS
    if (s) llmb_py_raise(s, path);
    Py_DECREF(bytes);
    return s ? -1 : 0;
}

static PyObject *str_from(const llmb_str *s) {
    return PyUnicode_DecodeUTF8(s->data, (Py_ssize_t)s->len, "strict"); // validated UTF-8 at open
}

static int npy_type_of(uint32_t t) {
    switch (t) {
    case LLMB_GGUF_UINT8: return NPY_UINT8;
    case LLMB_GGUF_INT8: return NPY_INT8;
    case LLMB_GGUF_UINT16: return NPY_UINT16;
    case LLMB_GGUF_INT16: return NPY_INT16;
    case LLMB_GGUF_UINT32: return NPY_UINT32;
    case LLMB_GGUF_INT32: return NPY_INT32;
    case LLMB_GGUF_FLOAT32: return NPY_FLOAT32;
    case LLMB_GGUF_BOOL: return NPY_BOOL;
    case LLMB_GGUF_UINT64: return NPY_UINT64;
    case LLMB_GGUF_INT64: return NPY_INT64;
    case LLMB_GGUF_FLOAT64: return NPY_FLOAT64;
    }
    return -1;
}

static PyObject *value_to_py(const llmb_gguf_value *v) {
    switch (v->type) {
    case LLMB_GGUF_UINT8: case LLMB_GGUF_UINT16: case LLMB_GGUF_UINT32: case LLMB_GGUF_UINT64:
        return PyLong_FromUnsignedLongLong(v->v.u64);
    case LLMB_GGUF_INT8: case LLMB_GGUF_INT16: case LLMB_GGUF_INT32: case LLMB_GGUF_INT64:
        return PyLong_FromLongLong(v->v.i64);
    case LLMB_GGUF_FLOAT32: case LLMB_GGUF_FLOAT64: return PyFloat_FromDouble(v->v.f64);
    case LLMB_GGUF_BOOL: return PyBool_FromLong(v->v.boolean);
    case LLMB_GGUF_STRING: return str_from(&v->v.str);
    case LLMB_GGUF_ARRAY: break;
    default: return PyErr_Format(PyExc_SystemError, "unknown GGUF value type %u", v->type);
    }
    uint32_t et = v->v.arr.elem_type;
    int nt = npy_type_of(et);
    if (nt >= 0) {
        // Numeric arrays become NumPy arrays (a copy: the mapping may be unaligned for the dtype).
        npy_intp n = (npy_intp)v->v.arr.count;
        PyObject *a = PyArray_SimpleNew(1, &n, nt);
        if (a && v->v.arr.nbytes) memcpy(PyArray_DATA((PyArrayObject *)a), v->v.arr.data, (size_t)v->v.arr.nbytes);
        return a;
    }
    PyObject *list = PyList_New((Py_ssize_t)v->v.arr.count);
    if (!list) return NULL;
    llmb_gguf_iter it;
    llmb_gguf_value elem;
    llmb_gguf_iter_init(&it, v);
    for (Py_ssize_t i = 0; llmb_gguf_iter_next(&it, &elem); i++) {
        PyObject *o = value_to_py(&elem);
        if (!o) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, o);
    }
    return list;
}

static const char *value_type_name(uint32_t t) {
    static const char *names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                  "bool", "string", "array", "uint64", "int64", "float64"};
    return t < LLMB_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

#define CHECK_OPEN(self)                                                        \
    if (!(self)->g) {                                                           \
        PyErr_SetString(PyExc_ValueError, "GGUF reader is closed");             \
        return NULL;                                                            \
    }

static PyObject *Reader_metadata(ReaderObject *self, PyObject *noargs) {
    CHECK_OPEN(self);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (uint64_t i = 0; i < llmb_gguf_n_kv(self->g); i++) {
        PyObject *k = str_from(llmb_gguf_kv_key(self->g, i));
        PyObject *v = k ? value_to_py(llmb_gguf_kv_value(self->g, i)) : NULL;
        if (!v || PyDict_SetItem(d, k, v) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(v);
    }
    return d;
}

// {key: type name} with "array[elem]" for arrays: what a writer needs to reproduce the file.
static PyObject *Reader_metadata_types(ReaderObject *self, PyObject *noargs) {
    CHECK_OPEN(self);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    for (uint64_t i = 0; i < llmb_gguf_n_kv(self->g); i++) {
        const llmb_gguf_value *v = llmb_gguf_kv_value(self->g, i);
        PyObject *k = str_from(llmb_gguf_kv_key(self->g, i));
        PyObject *t = v->type == LLMB_GGUF_ARRAY
                          ? PyUnicode_FromFormat("array[%s]", value_type_name(v->v.arr.elem_type))
                          : PyUnicode_FromString(value_type_name(v->type));
        if (!k || !t || PyDict_SetItem(d, k, t) < 0) {
            Py_XDECREF(k);
            Py_XDECREF(t);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(k);
        Py_DECREF(t);
    }
    return d;
}

// [(name, ne (ggml order), type_id, data offset, nbytes, info offset), ...] in file order.
static PyObject *Reader_tensors(ReaderObject *self, PyObject *noargs) {
    CHECK_OPEN(self);
    uint64_t n = llmb_gguf_n_tensors(self->g);
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (uint64_t i = 0; i < n; i++) {
        const llmb_gguf_tensor *t = llmb_gguf_tensor_at(self->g, i);
        PyObject *ne = PyTuple_New(t->n_dims);
        if (!ne) {
            Py_DECREF(list);
            return NULL;
        }
        for (uint32_t d = 0; d < t->n_dims; d++) PyTuple_SET_ITEM(ne, d, PyLong_FromLongLong(t->ne[d]));
        PyObject *item = Py_BuildValue("(NNiKKK)", str_from(&t->name), ne, t->type, (unsigned long long)t->offset,
                                       (unsigned long long)t->nbytes, (unsigned long long)t->info_offset);
        if (!item) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    return list;
}

// A read-only uint8 view of tensor i's bytes; the array keeps this reader (and the mapping) alive.
static PyObject *Reader_raw(ReaderObject *self, PyObject *arg) {
    CHECK_OPEN(self);
    Py_ssize_t i = PyLong_AsSsize_t(arg);
    if (i == -1 && PyErr_Occurred()) return NULL;
    const llmb_gguf_tensor *t = i >= 0 ? llmb_gguf_tensor_at(self->g, (uint64_t)i) : NULL;
    if (!t) return PyErr_Format(PyExc_IndexError, "tensor index %zd out of range", i);
    npy_intp n = (npy_intp)t->nbytes;
    PyObject *a = PyArray_SimpleNewFromData(1, &n, NPY_UINT8, (void *)t->data);
    if (!a) return NULL;
    PyArray_CLEARFLAGS((PyArrayObject *)a, NPY_ARRAY_WRITEABLE);
    Py_INCREF(self);
    if (PyArray_SetBaseObject((PyArrayObject *)a, (PyObject *)self) < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

static PyObject *Reader_get_version(ReaderObject *self, void *c) {
    CHECK_OPEN(self);
    return PyLong_FromUnsignedLong(llmb_gguf_version(self->g));
}
static PyObject *Reader_get_alignment(ReaderObject *self, void *c) {
    CHECK_OPEN(self);
    return PyLong_FromUnsignedLongLong(llmb_gguf_alignment(self->g));
}
static PyObject *Reader_get_data_offset(ReaderObject *self, void *c) {
    CHECK_OPEN(self);
    return PyLong_FromUnsignedLongLong(llmb_gguf_data_offset(self->g));
}
static PyObject *Reader_get_file_size(ReaderObject *self, void *c) {
    CHECK_OPEN(self);
    return PyLong_FromUnsignedLongLong(llmb_gguf_file_size(self->g));
}

static PyMethodDef Reader_methods[] = {
    {"metadata", (PyCFunction)Reader_metadata, METH_NOARGS, "All metadata as {key: Python value}."},
    {"metadata_types", (PyCFunction)Reader_metadata_types, METH_NOARGS, "{key: GGUF value type name}."},
    {"tensors", (PyCFunction)Reader_tensors, METH_NOARGS,
     "[(name, ne, type_id, data_offset, nbytes, info_offset)] in file order (ne in ggml order)."},
    {"raw", (PyCFunction)Reader_raw, METH_O, "Read-only zero-copy uint8 view of tensor i."},
    {NULL}};

static PyGetSetDef Reader_getset[] = {
    {"version", (getter)Reader_get_version, NULL, "GGUF version", NULL},
    {"alignment", (getter)Reader_get_alignment, NULL, "data alignment in bytes", NULL},
    {"data_offset", (getter)Reader_get_data_offset, NULL, "file offset of the data section", NULL},
    {"file_size", (getter)Reader_get_file_size, NULL, "size of the file or buffer in bytes", NULL},
    {NULL}};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "llmbench._core.Reader",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_dealloc = (destructor)Reader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Validated, memory-mapped GGUF file (use llmbench.gguf.GGUFFile).",
    .tp_methods = Reader_methods,
    .tp_getset = Reader_getset,
    .tp_init = (initproc)Reader_init,
    .tp_new = PyType_GenericNew,
};

llmb_gguf *llmb_py_reader_gguf(PyObject *o) {
    if (!PyObject_TypeCheck(o, &ReaderType)) {
        PyErr_Format(PyExc_TypeError, "expected an llmbench._core.Reader, got %s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    ReaderObject *r = (ReaderObject *)o;
    if (!r->g) PyErr_SetString(PyExc_ValueError, "GGUF reader is closed");
    return r->g;
}

// ---- build, CPU and type facts ----

static PyObject *build_info(PyObject *m, PyObject *noargs) {
    return Py_BuildValue("{s:s,s:s,s:s,s:O,s:s}", "compiler", LLMB_BUILD_CC, "cflags", LLMB_BUILD_CFLAGS,
                         "commit", LLMB_BUILD_COMMIT, "openmp", llmb_openmp_enabled() ? Py_True : Py_False,
#if defined(__x86_64__)
                         "arch", "x86_64"
#elif defined(__aarch64__)
                         "arch", "aarch64"
#else
                         "arch", "other"
#endif
    );
}

static const char *const prefetch_names[] = {"page", "lines", "far"};   // llmb_prefetch_mode's modes

static PyObject *simd_info(PyObject *m, PyObject *noargs) {
    return Py_BuildValue("{s:s,s:s,s:s,s:s}", "detected", llmb_simd_name(llmb_simd_detected()), "active",
                         llmb_simd_name(llmb_simd_active()), "cpu_features", llmb_cpu_features(), "prefetch",
                         prefetch_names[llmb_prefetch_mode()]);
}

static PyObject *prefetch_set(PyObject *m, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    for (int mode = 0; mode < (int)(sizeof prefetch_names / sizeof *prefetch_names); mode++)
        if (!strcmp(name, prefetch_names[mode])) {
            llmb_prefetch_set(mode);
            Py_RETURN_NONE;
        }
    return PyErr_Format(PyExc_ValueError, "unknown decode prefetch %R: expected 'page', 'lines' or 'far'", arg);
}

static PyObject *cache_holds(PyObject *m, PyObject *arg) {
    const unsigned long long bytes = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred()) return NULL;
    return PyBool_FromLong(llmb_cache_holds((size_t)bytes));
}

static PyObject *simd_set(PyObject *m, PyObject *arg) {
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    for (int l = LLMB_SIMD_SCALAR; l <= LLMB_SIMD_AVX512; l++) {
        if (strcmp(name, llmb_simd_name((llmb_simd_level)l)) == 0) {
            llmb_status s = llmb_simd_set((llmb_simd_level)l);
            if (s) return llmb_py_raise(s, NULL);
            Py_RETURN_NONE;
        }
    }
    return PyErr_Format(PyExc_ValueError, "unknown SIMD level %R: expected scalar, neon, avx2 or avx512", arg);
}

static PyObject *max_threads(PyObject *m, PyObject *noargs) { return PyLong_FromLong(llmb_max_threads()); }
static PyObject *now_ns(PyObject *m, PyObject *noargs) { return PyLong_FromUnsignedLongLong(llmb_now_ns()); }

static PyObject *type_traits(PyObject *m, PyObject *noargs) {
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < LLMB_TYPE_COUNT; i++) {
        const llmb_type_traits *t = llmb_type_traits_get(i);
        if (!t) continue;
        PyObject *item = Py_BuildValue("(isLL)", i, t->name, (long long)t->blck_size, (long long)t->type_size);
        if (llmb_py_append_new(list, item) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

// ---- random numbers ----

// fill_normal(out: float32 C-contiguous array, seed, std, mean=0, start=0): deterministic
// N(mean, std^2) values, elements start.. of stream `seed`, the same for any thread count
// (counter-based stream, see csrc/random.c).
static PyObject *fill_normal(PyObject *m, PyObject *args) {
    PyArrayObject *out;
    unsigned long long seed;
    unsigned long long start = 0;
    double std, mean = 0.0;
    if (!PyArg_ParseTuple(args, "O!Kd|dK", &PyArray_Type, &out, &seed, &std, &mean, &start)) return NULL;
    if (PyArray_TYPE(out) != NPY_FLOAT32 || !PyArray_IS_C_CONTIGUOUS(out) || !PyArray_ISWRITEABLE(out))
        return PyErr_Format(PyExc_ValueError, "fill_normal: expected a writeable C-contiguous float32 array");
    float *p = PyArray_DATA(out);
    size_t n = (size_t)PyArray_SIZE(out);
    Py_BEGIN_ALLOW_THREADS
    llmb_fill_normal(p, n, seed, start, (float)std, (float)mean);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

// ---- memory bandwidth ----

static PyObject *membw(PyObject *m, PyObject *args) {
    unsigned long long bytes;
    int reps, threads;
    if (!PyArg_ParseTuple(args, "Kii", &bytes, &reps, &threads)) return NULL;
    double g[3];
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_membw((size_t)bytes, reps, threads, g);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    return Py_BuildValue("{s:d,s:d,s:d}", "read", g[0], "copy", g[1], "triad", g[2]);
}

// ---- arithmetic peak ----

static PyObject *compute_peak(PyObject *m, PyObject *args) {
    int kind, reps, threads;
    long long rounds;
    if (!PyArg_ParseTuple(args, "iLii", &kind, &rounds, &reps, &threads)) return NULL;
    double g = 0;
    const char *what = NULL;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_compute_peak(kind, (int64_t)rounds, reps, threads, &g, &what);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    return Py_BuildValue("{s:d,s:s}", "gops", g, "instruction", what);
}

// ---- CUDA backend ----

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

static PyMethodDef methods[] = {
    {"build_info", build_info, METH_NOARGS, "Compiler, flags, commit and OpenMP of this build."},
    {"simd_info", simd_info, METH_NOARGS, "Detected and active SIMD level, CPU features."},
    {"simd_set", simd_set, METH_O, "Force the SIMD level (scalar or a level the CPU has)."},
    {"prefetch_set", prefetch_set, METH_O,
     "Decode prefetch of the AVX-512 interleaved kernels: 'page', 'lines' or 'far' (same results)."},
    {"cache_holds", cache_holds, METH_O,
     "cache_holds(nbytes) -> bool: whether nbytes fit in the last-level cache, as the CPU engine judges whether a "
     "model's matrices come from DRAM at every step (llmb_cache_holds)."},
    {"max_threads", max_threads, METH_NOARGS, "OpenMP threads the core will use."},
    {"now_ns", now_ns, METH_NOARGS, "CLOCK_MONOTONIC in nanoseconds (the core's clock)."},
    {"type_traits", type_traits, METH_NOARGS, "[(type_id, name, block_size, type_size)]"},
    {"membw", membw, METH_VARARGS, "membw(bytes_per_array, reps, threads) -> {read, copy, triad} GB/s"},
    {"compute_peak", compute_peak, METH_VARARGS,
     "compute_peak(kind, rounds, reps, threads) -> {gops, instruction}: kind PEAK_F32, FP32 FMA (GFLOP/s), "
     "PEAK_INT8, int8 (GOP/s), or PEAK_BF16, BF16 pairs (GFLOP/s)"},
    {"fill_normal", fill_normal, METH_VARARGS, "fill_normal(out_f32, seed, std, mean=0, start=0)"},
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

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "llmbench._core",
    .m_doc = "C core of llmbench (GGUF reader, kernels, engine).",
    .m_size = -1,
    .m_methods = methods,
};

static PyObject *new_exc(PyObject *mod, const char *name, PyObject *bases, const char *doc) {
    char full[128];
    snprintf(full, sizeof full, "llmbench.%s", name);
    PyObject *e = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    Py_DECREF(bases);
    if (!e) return NULL;
    Py_INCREF(e);
    if (PyModule_AddObject(mod, name, e) < 0) {
        Py_DECREF(e);
        Py_DECREF(e);
        return NULL;
    }
    return e;
}

PyMODINIT_FUNC PyInit__core(void) {
    import_array();
    if (PyType_Ready(&ReaderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) goto fail;
    if (!(LLMBenchError = new_exc(m, "LLMBenchError", Py_BuildValue("(O)", PyExc_Exception),
                                  "Base class of llmbench's errors.")))
        goto fail;
    if (!(GGUFError = new_exc(m, "GGUFError", Py_BuildValue("(OO)", LLMBenchError, PyExc_ValueError),
                              "A GGUF file is malformed; the message names the field, byte offset and expectation.")))
        goto fail;
    if (!(BackendUnavailableError = new_exc(m, "BackendUnavailableError",
                                            Py_BuildValue("(OO)", LLMBenchError, PyExc_RuntimeError),
                                            "A backend (e.g. CUDA) cannot be used here; the message says why.")))
        goto fail;
    if (!(DeviceError = new_exc(m, "DeviceError", Py_BuildValue("(OO)", LLMBenchError, PyExc_RuntimeError),
                                "A device call failed; the message names the call, file and line.")))
        goto fail;
    if (!(DeviceOutOfMemoryError = new_exc(m, "DeviceOutOfMemoryError",
                                           Py_BuildValue("(OO)", DeviceError, PyExc_MemoryError),
                                           "Out of device memory; the message says how much was asked and free.")))
        goto fail;
    if (!(UnsupportedError = new_exc(m, "UnsupportedError", Py_BuildValue("(OO)", LLMBenchError, PyExc_ValueError),
                                     "Valid input that llmbench cannot handle (type, architecture).")))
        goto fail;
    // llmb.h's peak kinds for compute_peak, as _core.PEAK_F32 etc.
    if (PyModule_AddIntConstant(m, "PEAK_F32", LLMB_PEAK_F32) < 0 ||
        PyModule_AddIntConstant(m, "PEAK_INT8", LLMB_PEAK_INT8) < 0 ||
        PyModule_AddIntConstant(m, "PEAK_BF16", LLMB_PEAK_BF16) < 0)
        goto fail;
    if (llmb_py_init_quant(m) < 0 || llmb_py_init_engine(m) < 0 || llmb_py_init_vecdot(m) < 0 ||
        llmb_py_init_cuda(m) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
