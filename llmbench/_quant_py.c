// _quant_py.c — Python bindings of the quantization kernels (csrc/quants.c): dequantize and
// quantize whole tensors into caller-provided NumPy arrays, with the GIL released. The friendly
// argument checking lives in llmbench/models/weight_types.py; here arrays must already have the right dtype,
// C order and size. Tested by tests/test_quant.py.
#include "_pycore.h"
#include "../csrc/quants.h"

// `arr` must be a C-contiguous array of `type_num` with exactly `n` elements (writeable if `out`)
static int check_array(PyArrayObject *arr, const char *what, int type_num, int64_t n, int out) {
    if (PyArray_TYPE(arr) != type_num || !PyArray_IS_C_CONTIGUOUS(arr)) {
        PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous %s array", what,
                     type_num == NPY_UINT8 ? "uint8" : "float32");
        return -1;
    }
    if (out && !PyArray_ISWRITEABLE(arr)) {
        PyErr_Format(PyExc_ValueError, "%s must be writeable", what);
        return -1;
    }
    if (n >= 0 && (int64_t)PyArray_SIZE(arr) != n) {
        PyErr_Format(PyExc_ValueError, "%s has %lld elements, expected %lld", what, (long long)PyArray_SIZE(arr),
                     (long long)n);
        return -1;
    }
    return 0;
}

// bytes of nrows x ncols elements of `type`, or -1 when the core will refuse the shape anyway
static int64_t tensor_bytes(int type, int64_t nrows, int64_t ncols) {
    const llmb_type_traits *t = llmb_type_traits_get(type);
    if (!t || nrows < 0 || ncols < 0 || ncols % t->blck_size || (ncols && nrows > INT64_MAX / 8 / ncols)) return -1;
    return nrows * (ncols / t->blck_size) * t->type_size;
}

// dequantize(raw_u8, type_id, nrows, ncols, out_f32, nthreads=0)
static PyObject *py_dequantize(PyObject *m, PyObject *args) {
    PyArrayObject *raw, *out;
    int type, nthreads = 0;
    long long nrows, ncols;
    if (!PyArg_ParseTuple(args, "O!iLLO!|i", &PyArray_Type, &raw, &type, &nrows, &ncols, &PyArray_Type, &out,
                          &nthreads))
        return NULL;
    const int64_t nbytes = tensor_bytes(type, nrows, ncols);
    if (check_array(raw, "raw", NPY_UINT8, nbytes, 0) < 0) return NULL;
    if (check_array(out, "out", NPY_FLOAT32, nbytes < 0 ? -1 : nrows * ncols, 1) < 0) return NULL;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_dequantize(type, PyArray_DATA(raw), PyArray_DATA(out), nrows, ncols, nthreads);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    Py_RETURN_NONE;
}

// quantize(x_f32, type_id, out_u8, nthreads=0): rows are x's last axis
static PyObject *py_quantize(PyObject *m, PyObject *args) {
    PyArrayObject *x, *out;
    int type, nthreads = 0;
    if (!PyArg_ParseTuple(args, "O!iO!|i", &PyArray_Type, &x, &type, &PyArray_Type, &out, &nthreads)) return NULL;
    if (check_array(x, "x", NPY_FLOAT32, -1, 0) < 0) return NULL;
    const int64_t ncols = PyArray_NDIM(x) ? PyArray_DIM(x, PyArray_NDIM(x) - 1) : 1;
    const int64_t nrows = ncols ? (int64_t)PyArray_SIZE(x) / ncols : 0;
    if (check_array(out, "out", NPY_UINT8, tensor_bytes(type, nrows, ncols), 1) < 0) return NULL;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_quantize(type, PyArray_DATA(x), PyArray_DATA(out), nrows, ncols, nthreads);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    Py_RETURN_NONE;
}

// quantize_imatrix(x_f32, type_id, imatrix_f32, out_u8, nthreads=0): quantize with importance weights, one
// per column of x (the last axis)
static PyObject *py_quantize_imatrix(PyObject *m, PyObject *args) {
    PyArrayObject *x, *w, *out;
    int type, nthreads = 0;
    if (!PyArg_ParseTuple(args, "O!iO!O!|i", &PyArray_Type, &x, &type, &PyArray_Type, &w, &PyArray_Type, &out,
                          &nthreads))
        return NULL;
    if (check_array(x, "x", NPY_FLOAT32, -1, 0) < 0) return NULL;
    const int64_t ncols = PyArray_NDIM(x) ? PyArray_DIM(x, PyArray_NDIM(x) - 1) : 1;
    const int64_t nrows = ncols ? (int64_t)PyArray_SIZE(x) / ncols : 0;
    if (check_array(w, "imatrix", NPY_FLOAT32, ncols, 0) < 0) return NULL;
    if (check_array(out, "out", NPY_UINT8, tensor_bytes(type, nrows, ncols), 1) < 0) return NULL;
    llmb_status s;
    Py_BEGIN_ALLOW_THREADS
    s = llmb_quantize_imatrix(type, PyArray_DATA(x), PyArray_DATA(out), nrows, ncols, PyArray_DATA(w), nthreads);
    Py_END_ALLOW_THREADS
    if (s) return llmb_py_raise(s, NULL);
    Py_RETURN_NONE;
}

// quant_types() -> [(type_id, can_quantize)] for every type that can be dequantized
static PyObject *py_quant_types(PyObject *m, PyObject *noargs) {
    PyObject *list = PyList_New(0);
    for (int t = 0; list && t < LLMB_TYPE_COUNT; t++) {
        const llmb_quant_traits *q = llmb_quant_traits_get(t);
        if (!q) continue;
        PyObject *item = Py_BuildValue("(iO)", t, q->from_float ? Py_True : Py_False);
        if (llmb_py_append_new(list, item) < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static PyMethodDef quant_methods[] = {
    {"quant_types", py_quant_types, METH_NOARGS, "[(type_id, can_quantize)] of the types the core can dequantize"},
    {"dequantize", py_dequantize, METH_VARARGS,
     "dequantize(raw_u8, type_id, nrows, ncols, out_f32, nthreads=0): decode a tensor into out"},
    {"quantize", py_quantize, METH_VARARGS,
     "quantize(x_f32, type_id, out_u8, nthreads=0): encode the rows (last axis) of x into out"},
    {"quantize_imatrix", py_quantize_imatrix, METH_VARARGS,
     "quantize_imatrix(x_f32, type_id, imatrix_f32, out_u8, nthreads=0): quantize weighing column j by imatrix[j]"},
    {NULL}};

int llmb_py_init_quant(PyObject *m) {
    return PyModule_AddFunctions(m, quant_methods);
}
