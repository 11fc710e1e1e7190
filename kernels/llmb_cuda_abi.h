// llmb_cuda_abi.h — the C ABI between the core (csrc/cuda_loader.c) and the CUDA backend library
// (libllmbench_cuda.so, built from kernels/*.cu). The core dlopens the library only when a CUDA
// device is asked for, looks up llmb_cuda_get_api and refuses a table whose abi_version differs.
// Bump LLMB_CUDA_ABI_VERSION whenever the table changes.
#ifndef LLMB_CUDA_ABI_H
#define LLMB_CUDA_ABI_H

#include "../csrc/llmb.h"

#define LLMB_CUDA_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

// Every entry returns an llmb_status; on failure the library's last_error() names the CUDA call,
// the source file and line, and the CUDA error.
typedef struct {
    int abi_version;
    const char *(*last_error)(void);
    // Checks that a driver and at least one device are present; fails with LLMB_E_BACKEND otherwise.
    llmb_status (*init)(void);
    llmb_status (*versions)(int *runtime, int *driver);
    llmb_status (*device_count)(int *n);
    llmb_status (*device_info)(int dev, llmb_cuda_device *out);
    llmb_status (*malloc_)(int dev, size_t nbytes, void **out);
    llmb_status (*free_)(int dev, void *p);
    llmb_status (*memcpy_)(int dev, void *dst, const void *src, size_t nbytes, int kind);
    llmb_status (*memset_)(int dev, void *p, int value, size_t nbytes);
    llmb_status (*time_copy)(int dev, void *dst, const void *src, size_t nbytes, int reps, float *ms);
} llmb_cuda_api;

typedef const llmb_cuda_api *(*llmb_cuda_get_api_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
