// _pycore.h — shared by the CPython wrapper's source files (llmbench/*.c). Each file adds its
// functions to the module through an llmb_py_init_* function called from PyInit__core.
#ifndef LLMB_PYCORE_H
#define LLMB_PYCORE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#ifndef LLMB_CORE_MAIN
#define NO_IMPORT_ARRAY
#endif
#define PY_ARRAY_UNIQUE_SYMBOL llmb_ARRAY_API
#include <numpy/arrayobject.h>

#include "../csrc/llmb.h"

// Raise the exception matching `s` with the core's last message; returns NULL.
PyObject *llmb_py_raise(llmb_status s, const char *filename);

// Append a new reference to a list and drop it: 0, or -1 with an exception set (also when item
// is NULL because building it failed).
static inline int llmb_py_append_new(PyObject *list, PyObject *item) {
    int r = item ? PyList_Append(list, item) : -1;
    Py_XDECREF(item);
    return r;
}

// The validated GGUF file behind an llmbench._core.Reader, or NULL with TypeError/ValueError set.
llmb_gguf *llmb_py_reader_gguf(PyObject *reader);

// Module sections (each returns 0, or -1 with an exception set).
int llmb_py_init_gguf(PyObject *m);    // llmbench/_gguf_py.c
int llmb_py_init_quant(PyObject *m);   // llmbench/_quant_py.c
int llmb_py_init_engine(PyObject *m);  // llmbench/_engine_py.c
int llmb_py_init_vecdot(PyObject *m);  // llmbench/_vecdot_py.c
int llmb_py_init_cuda(PyObject *m);    // llmbench/_cuda_py.c
#endif
