// _gguf_py.c — llmbench._core.Reader: a validated, memory-mapped GGUF file (csrc/gguf.c) as Python sees
// it, metadata as Python values and tensors as zero-copy read-only NumPy views that keep the file alive.
// llmbench/models/gguf.py wraps it (GGUFFile). Tested by tests/test_gguf.py and tests/test_gguf_malformed.py.
#include "_pycore.h"

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
    .tp_doc = "Validated, memory-mapped GGUF file (use llmbench.models.gguf.GGUFFile).",
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

int llmb_py_init_gguf(PyObject *m) {
    if (PyType_Ready(&ReaderType) < 0) return -1;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        return -1;
    }
    return 0;
}
