// cuda_loader.c — loads the CUDA backend library (libllmbench_cuda.so) with dlopen on demand and
// forwards calls through its function table, so the core, `import llmbench` and every CPU path
// work on machines without CUDA. Tested by tests/test_cuda.py: without a GPU every call raises
// BackendUnavailableError naming the reason; with one, device facts, copies and event timing.
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cuda_loader.h"
#include "internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const llmb_cuda_api *lib; // the library's table once loaded with the right ABI
static const llmb_cuda_api *api; // set only when a driver and a device are there too
static llmb_status load_status = LLMB_E_BACKEND;
static char load_reason[768];
static int tried;

static llmb_status try_load(const char *path) {
    if (!path || !*path) path = getenv("LLMBENCH_CUDA_LIB");
    if (!path || !*path)
        return llmb_fail(LLMB_E_BACKEND, "this llmbench was built without the CUDA backend (nvcc was not found at "
                                         "build time; reinstall with nvcc on PATH or CUDA_HOME set, or set LLMBENCH_CUDA_LIB)");
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) return llmb_fail(LLMB_E_BACKEND, "cannot load the CUDA backend library: %s", dlerror());
    llmb_cuda_get_api_fn get = (llmb_cuda_get_api_fn)dlsym(h, "llmb_cuda_get_api");
    if (!get) {
        dlclose(h);
        return llmb_fail(LLMB_E_BACKEND, "%s is not an llmbench CUDA backend (no llmb_cuda_get_api)", path);
    }
    const llmb_cuda_api *a = get();
    if (!a || a->abi_version != LLMB_CUDA_ABI_VERSION) {
        int v = a ? a->abi_version : -1;
        dlclose(h);
        return llmb_fail(LLMB_E_BACKEND, "%s has CUDA backend ABI version %d, this core needs %d (rebuild llmbench)",
                         path, v, LLMB_CUDA_ABI_VERSION);
    }
    lib = a;
    llmb_status s = a->init();
    if (s) {
        llmb_fail(LLMB_E_BACKEND, "%s", a->last_error());
        // Keep the library loaded: the static CUDA runtime may have started threads.
        return LLMB_E_BACKEND;
    }
    api = a;
    return LLMB_OK;
}

llmb_status llmb_cuda_load(const char *path) {
    pthread_mutex_lock(&lock);
    if (!tried) {
        tried = 1;
        load_status = try_load(path);
        if (load_status) snprintf(load_reason, sizeof load_reason, "%s", llmb_last_error());
    }
    llmb_status s = load_status;
    pthread_mutex_unlock(&lock);
    if (s) return llmb_fail(s, "%s", load_reason);
    return LLMB_OK;
}

int llmb_cuda_loaded(void) { return api != NULL; }

const llmb_cuda_api *llmb_cuda_table(void) {
    if (!api) llmb_fail(LLMB_E_BACKEND, "CUDA backend is not loaded: %s", tried ? load_reason : "call llmb_cuda_load first");
    return api;
}

// Forward one call; translate the library's message into the core's error buffer.
#define FORWARD(call)                                                                      \
    do {                                                                                   \
        if (!api) return llmb_fail(LLMB_E_BACKEND, "CUDA backend is not loaded: %s",       \
                                   tried ? load_reason : "call llmb_cuda_load first");     \
        llmb_status s_ = api->call;                                                        \
        if (s_) return llmb_fail(s_, "%s", api->last_error());                             \
        return LLMB_OK;                                                                    \
    } while (0)

// Versions are facts about the library and the driver, reported even when no device can be used.
llmb_status llmb_cuda_versions(int *runtime, int *driver) {
    if (!lib) return llmb_fail(LLMB_E_BACKEND, "CUDA backend library is not loaded: %s",
                               tried ? load_reason : "call llmb_cuda_load first");
    llmb_status s = lib->versions(runtime, driver);
    return s ? llmb_fail(s, "%s", lib->last_error()) : LLMB_OK;
}
llmb_status llmb_cuda_device_count(int *n) { FORWARD(device_count(n)); }
llmb_status llmb_cuda_device_info(int dev, llmb_cuda_device *out) { FORWARD(device_info(dev, out)); }
llmb_status llmb_cuda_malloc(int dev, size_t nbytes, void **out) { FORWARD(malloc_(dev, nbytes, out)); }
llmb_status llmb_cuda_free(int dev, void *p) { FORWARD(free_(dev, p)); }
llmb_status llmb_cuda_memcpy(int dev, void *dst, const void *src, size_t nbytes, int kind) {
    FORWARD(memcpy_(dev, dst, src, nbytes, kind));
}
llmb_status llmb_cuda_memset(int dev, void *p, int value, size_t nbytes) { FORWARD(memset_(dev, p, value, nbytes)); }
llmb_status llmb_cuda_time_copy(int dev, void *dst, const void *src, size_t nbytes, int reps, float *ms) {
    FORWARD(time_copy(dev, dst, src, nbytes, reps, ms));
}
