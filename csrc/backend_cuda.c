// backend_cuda.c — the CUDA backend of the engine (backend.h). Not written yet: until it is, asking
// the engine for "cuda" fails with LLMB_E_BACKEND (Python: BackendUnavailableError) saying so. The
// CUDA backend replaces this file with the forward pass over kernels/llmb_cuda_abi.h.
#include "backend.h"
#include "internal.h"

const llmb_backend_ops *llmb_backend_cuda(void) {
    llmb_fail(LLMB_E_BACKEND, "the CUDA engine backend is not built yet (csrc/backend_cuda.c); use backend='cpu'");
    return NULL;
}
