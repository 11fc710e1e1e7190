// _vecdot_py.c — Python bindings of the decode kernels (csrc/vecdot.c): matrix products of raw
// weight rows of any supported type with float activations quantized here to the type's
// vec_dot_type, through the dispatched kernels (tiles, OpenMP over rows) or the scalar references;
// plus the memory yardsticks of benchmarks/bench_vecdot.py (threaded memcpy and read).
// Arrays must be C-contiguous of the right dtype and shape. Tested by tests/test_vecdot.py.
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "_pycore.h"
#include "../csrc/vecdot.h"

static int check_c(PyArrayObject *a, const char *what, int type_num, int ndim) {
    if (PyArray_TYPE(a) != type_num || !PyArray_IS_C_CONTIGUOUS(a) || (ndim && PyArray_NDIM(a) != ndim)) {
        PyErr_Format(PyExc_ValueError, "%s must be a C-contiguous %s array%s", what,
                     type_num == NPY_UINT8 ? "uint8" : "float32", ndim == 2 ? " of 2 dimensions" : "");
        return -1;
    }
    return 0;
}

// vec_dot(wtype, w_raw, x, nthreads=1, ref=False, interleave=0, stream=False) -> float32 (tokens, rows)
static PyObject *py_vec_dot(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"wtype", "w_raw", "x", "nthreads", "ref", "interleave", "stream", NULL};
    PyArrayObject *w, *x;
    int wtype, nthreads = 1, ref = 0, il = 0, stream = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO!O!|ipip", kwlist, &wtype, &PyArray_Type, &w, &PyArray_Type, &x,
                                     &nthreads, &ref, &il, &stream))
        return NULL;
    if (check_c(w, "w_raw", NPY_UINT8, 2) < 0 || check_c(x, "x", NPY_FLOAT32, 2) < 0) return NULL;
    const llmb_type_traits *tt = llmb_type_traits_get(wtype);
    if (!tt || llmb_vec_dot_type(wtype) < 0) {
        PyErr_Format(PyExc_ValueError, "weight type %d has no dot product kernel", wtype);
        return NULL;
    }
    const int64_t rows = PyArray_DIM(w, 0), row_bytes = PyArray_DIM(w, 1), ntok = PyArray_DIM(x, 0),
                  n = PyArray_DIM(x, 1);
    const size_t xs = llmb_vec_dot_row_bytes(wtype, n);
    if (n % tt->blck_size || !xs || row_bytes != n / tt->blck_size * tt->type_size) {
        PyErr_Format(PyExc_ValueError, "x rows of %lld elements do not fit %s weight rows of %lld bytes", (long long)n,
                     tt->name, (long long)row_bytes);
        return NULL;
    }
    if (ntok > INT32_MAX || nthreads < 0) {
        PyErr_SetString(PyExc_ValueError, "too many tokens or negative nthreads");
        return NULL;
    }
    if (il && (ref || il != llmb_vec_dot_interleave(wtype) || rows % il)) {
        PyErr_Format(PyExc_ValueError, "interleave=%d: %s rows here interleave in groups of %d (0: not at this SIMD "
                     "level), the rows (%lld) must be a multiple of it, and ref must be False", il, tt->name,
                     llmb_vec_dot_interleave(wtype), (long long)rows);
        return NULL;
    }
    npy_intp dims[2] = {(npy_intp)ntok, (npy_intp)rows};
    PyArrayObject *y = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_FLOAT32);
    void *xq = malloc(xs * (size_t)(ntok ? ntok : 1));
    if (!y || !xq) {
        Py_XDECREF(y);
        free(xq);
        return PyErr_NoMemory();
    }
    const uint8_t *wd = PyArray_DATA(w);
    const float *xd = PyArray_DATA(x);
    float *yd = PyArray_DATA(y);
    Py_BEGIN_ALLOW_THREADS
    for (int64_t t = 0; t < ntok; t++)
        (ref ? llmb_vec_dot_quantize_x_ref : llmb_vec_dot_quantize_x)(wtype, xd + t * n, (char *)xq + t * xs, n);
    if (ref) {
        llmb_vec_dot_fn dot = llmb_vec_dot_ref(wtype);
        for (int64_t t = 0; t < ntok; t++)
            for (int64_t r = 0; r < rows; r++) dot(n, &yd[t * rows + r], wd + r * row_bytes, (char *)xq + t * xs);
    } else {
        const llmb_matmul_part part = {wtype, wd, (size_t)row_bytes, rows, yd, rows, il, stream};
        llmb_vec_dot_matmul_parts(n, &part, 1, xq, xs, (int)ntok, nthreads);
    }
    Py_END_ALLOW_THREADS
    free(xq);
    return (PyObject *)y;
}

// vec_dot_repack(wtype, w_raw, unpack=False) -> (uint8 array of w_raw's shape, G): the rows interleaved in
// groups of G (llmb_vec_dot_repack), or back to plain rows
static PyObject *py_repack(PyObject *m, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"wtype", "w_raw", "unpack", NULL};
    PyArrayObject *w;
    int wtype, unpack = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "iO!|p", kwlist, &wtype, &PyArray_Type, &w, &unpack)) return NULL;
    if (check_c(w, "w_raw", NPY_UINT8, 2) < 0) return NULL;
    const llmb_type_traits *tt = llmb_type_traits_get(wtype);
    const int G = tt ? llmb_vec_dot_interleave(wtype) : 0;
    const int64_t rows = PyArray_DIM(w, 0), row_bytes = PyArray_DIM(w, 1);
    if (!G || row_bytes % tt->type_size || rows % G)
        return PyErr_Format(PyExc_ValueError, "weight type %d has no interleaved layout at this SIMD level, or the "
                            "%lld rows of %lld bytes are not whole groups of %d rows of whole blocks", wtype,
                            (long long)rows, (long long)row_bytes, G);
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(2, PyArray_DIMS(w), NPY_UINT8);
    if (!out) return NULL;
    const int64_t n = row_bytes / tt->type_size * tt->blck_size;
    Py_BEGIN_ALLOW_THREADS
    (unpack ? llmb_vec_dot_unpack : llmb_vec_dot_repack)(wtype, n, PyArray_DATA(w), rows, G, PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(Ni)", out, G);
}

// vec_dot_interleave(wtype) -> int: rows per group of wtype's interleaved layout at the active level (0: none)
static PyObject *py_interleave(PyObject *m, PyObject *args) {
    int wtype;
    if (!PyArg_ParseTuple(args, "i", &wtype)) return NULL;
    return PyLong_FromLong(llmb_type_traits_get(wtype) ? llmb_vec_dot_interleave(wtype) : 0);
}

// vec_dot_quantize_x(wtype, x) -> uint8 (tokens, row_bytes): the activations as the kernels see them
static PyObject *py_quantize_x(PyObject *m, PyObject *args) {
    PyArrayObject *x;
    int wtype;
    if (!PyArg_ParseTuple(args, "iO!", &wtype, &PyArray_Type, &x)) return NULL;
    if (check_c(x, "x", NPY_FLOAT32, 2) < 0) return NULL;
    const int64_t ntok = PyArray_DIM(x, 0), n = PyArray_DIM(x, 1);
    const size_t xs = llmb_vec_dot_row_bytes(wtype, n);
    if (!xs) {
        PyErr_Format(PyExc_ValueError, "weight type %d: no activation format for rows of %lld", wtype, (long long)n);
        return NULL;
    }
    npy_intp dims[2] = {(npy_intp)ntok, (npy_intp)xs};
    PyArrayObject *q = (PyArrayObject *)PyArray_SimpleNew(2, dims, NPY_UINT8);
    if (!q) return NULL;
    const float *xd = PyArray_DATA(x);
    char *qd = PyArray_DATA(q);
    Py_BEGIN_ALLOW_THREADS
    for (int64_t t = 0; t < ntok; t++) llmb_vec_dot_quantize_x(wtype, xd + t * n, qd + t * xs, n);
    Py_END_ALLOW_THREADS
    return (PyObject *)q;
}

// memory yardsticks: copy src into dst (same size), or read src (returns a checksum), on nthreads
static PyObject *py_mem_bench(PyObject *m, PyObject *args) {
    PyArrayObject *src, *dst = NULL;
    int nthreads, copy;
    if (!PyArg_ParseTuple(args, "pO!iO", &copy, &PyArray_Type, &src, &nthreads, &dst)) return NULL;
    if (!PyArray_IS_C_CONTIGUOUS(src)) return PyErr_Format(PyExc_ValueError, "src must be C-contiguous");
    const size_t nbytes = (size_t)PyArray_NBYTES(src);
    char *out = NULL;
    if (copy) {
        if (!PyArray_Check(dst) || !PyArray_IS_C_CONTIGUOUS((PyArrayObject *)dst) ||
            (size_t)PyArray_NBYTES((PyArrayObject *)dst) != nbytes || !PyArray_ISWRITEABLE((PyArrayObject *)dst))
            return PyErr_Format(PyExc_ValueError, "dst must be a writeable C-contiguous array of src's size");
        out = PyArray_DATA((PyArrayObject *)dst);
    }
    const char *in = PyArray_DATA(src);
    uint64_t sum = 0;
    if (nthreads < 1) nthreads = 1;
    Py_BEGIN_ALLOW_THREADS
    if (copy) {
        const size_t chunk = (nbytes / (size_t)nthreads + 63) & ~(size_t)63;
#pragma omp parallel for num_threads(nthreads) schedule(static)
        for (int k = 0; k < nthreads; k++) {
            const size_t lo = (size_t)k * chunk, hi = lo + chunk < nbytes ? lo + chunk : nbytes;
            if (lo < hi) memcpy(out + lo, in + lo, hi - lo);
        }
    } else {
        sum = llmb_mem_read(in, nbytes, nthreads);   // membw's read kernel: the engine's bandwidth limit
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(sum);
}

static PyMethodDef vecdot_methods[] = {
    {"vec_dot", (PyCFunction)(void (*)(void))py_vec_dot, METH_VARARGS | METH_KEYWORDS,
     "vec_dot(wtype, w_raw_u8[rows, row_bytes], x_f32[tokens, n], nthreads=1, ref=False, interleave=0,\n"
     "stream=False) -> f32[tokens, rows]: x quantized to the type's vec_dot_type, then the dispatched kernels (or\n"
     "the scalar references); interleave=G: w_raw is in vec_dot_repack's layout; stream: the weights come from\n"
     "DRAM (one token then prefetches further ahead under the 'far' prefetch; same results)"},
    {"matvec", (PyCFunction)(void (*)(void))py_vec_dot, METH_VARARGS | METH_KEYWORDS,
     "matvec(wtype, w_raw_u8, x_f32[tokens, n], nthreads): vec_dot with OpenMP over row tiles"},
    {"vec_dot_repack", (PyCFunction)(void (*)(void))py_repack, METH_VARARGS | METH_KEYWORDS,
     "vec_dot_repack(wtype, w_raw_u8[rows, row_bytes], unpack=False) -> (u8[rows, row_bytes], G): the rows\n"
     "interleaved in groups of G as the engine repacks them at load (ValueError where this level has none)"},
    {"vec_dot_interleave", py_interleave, METH_VARARGS,
     "vec_dot_interleave(wtype) -> int: rows per group of the interleaved layout at the active SIMD level\n"
     "(0: the level has none for wtype; the CPU backend then reads plain rows)"},
    {"vec_dot_quantize_x", py_quantize_x, METH_VARARGS,
     "vec_dot_quantize_x(wtype, x_f32[tokens, n]) -> u8[tokens, row_bytes]: the quantized activations"},
    {"mem_bench", py_mem_bench, METH_VARARGS,
     "mem_bench(copy, src, nthreads, dst): memcpy src to dst (copy=True) or read src, split over nthreads"},
    {NULL}};

int llmb_py_init_vecdot(PyObject *m) { return PyModule_AddFunctions(m, vecdot_methods); }
