// _quant_py.c — Python bindings of the quantization kernels (csrc/quants.c). Filled in by the
// quantization work; registered from PyInit__core.
#include "_pycore.h"

static PyMethodDef quant_methods[] = {{NULL}};

int llmb_py_init_quant(PyObject *m) {
    return PyModule_AddFunctions(m, quant_methods);
}
