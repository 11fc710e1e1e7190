// _core.c — the module llmbench._core, the CPython/NumPy wrapper around the C core (csrc/): its
// exception hierarchy (status codes from the core become these exceptions, llmb_py_raise), the build,
// CPU, random-number, bandwidth and peak functions, and the init that adds the other files' parts
// (_gguf_py.c, _quant_py.c, _engine_py.c, _vecdot_py.c, _cuda_py.c; _pycore.h). Everywhere the GIL is
// released around every call that may take time, and arrays handed to Python are read-only views that
// keep their owner (the mapped GGUF file) alive. Tested by every test in tests/.
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
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
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
    if (llmb_py_init_gguf(m) < 0 || llmb_py_init_quant(m) < 0 || llmb_py_init_engine(m) < 0 ||
        llmb_py_init_vecdot(m) < 0 || llmb_py_init_cuda(m) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
