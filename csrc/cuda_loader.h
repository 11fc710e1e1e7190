// cuda_loader.h — the loaded CUDA backend's function table, for the core's own callers (the
// kernel bindings in llmbench/_cuda_py.c, later the engine's CUDA backend). Internal.
#ifndef LLMB_CUDA_LOADER_H
#define LLMB_CUDA_LOADER_H

#include "../kernels/llmb_cuda_abi.h"

// The table once llmb_cuda_load succeeded (a library of this ABI, a driver and a device), else NULL
// with the reason recorded for llmb_last_error() (LLMB_E_BACKEND).
const llmb_cuda_api *llmb_cuda_table(void);

#endif
