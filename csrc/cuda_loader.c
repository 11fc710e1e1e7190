// cuda_loader.c — loads the CUDA backend library (libllmbench_cuda.so) with dlopen on demand and
// forwards calls through its function table, so the core, `import llmbench` and every CPU path
// work on machines without CUDA. Tested by tests/test_cuda.py: without a GPU every call raises
// BackendUnavailableError naming the reason; with one, device facts, copies and event timing.
//
// The library is read as a file first: its build marker (LLMB_CUDA_BUILD_MARKER, kernels/runtime.cu)
// gives the ABI version and the CUDA runtime it was built with, and says whether it needs the
// NVIDIA driver (the emulated test library does not). It is dlopened only where the driver
// (libcuda.so.1) loads: the static CUDA runtime inside it unregisters its kernels at process exit,
// and without a driver that teardown can jump through an unset pointer (seen here: a SIGSEGV in
// __cudaUnregisterFatBinary after every test had passed).
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <errno.h>
#include <string.h>

#include "cuda_loader.h"
#include "internal.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const llmb_cuda_api *lib; // the library's table once loaded with the right ABI
static const llmb_cuda_api *api; // set only when a driver and a device are there too
static llmb_status load_status = LLMB_E_BACKEND;
static char load_reason[768];
static int tried;

static int built_runtime; // from the library file's marker: the CUDA runtime it was built with

// The build marker in the file at `path`: 1 and abi/cudart/driver set, 0 if absent, -1 (errno) if unreadable.
static int read_marker(const char *path, int *abi, int *cudart, int *needs_driver) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    int found = 0;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m != MAP_FAILED) {
            static const char key[] = LLMB_CUDA_BUILD_MARKER_KEY;
            const char *hit = memmem(m, (size_t)st.st_size, key, sizeof key - 1);
            char buf[96] = {0};
            if (hit) {
                size_t left = (size_t)st.st_size - (size_t)(hit - (const char *)m);
                memcpy(buf, hit, left < sizeof buf - 1 ? left : sizeof buf - 1);
                found = sscanf(buf + sizeof key - 1, "abi=%d cudart=%d driver=%d", abi, cudart, needs_driver) == 3;
            }
            munmap(m, (size_t)st.st_size);
        }
    }
    close(fd);
    return found;
}

// The CUDA version of the installed driver (0: none), asked of libcuda without loading the backend.
static int driver_version(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    int v = 0;
    int (*get)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    if (!get || get(&v) != 0) v = 0;
    return v; // keep libcuda loaded: the backend will use it
}

static llmb_status try_load(const char *path) {
    if (!path || !*path) path = getenv("LLMBENCH_CUDA_LIB");
    if (!path || !*path)
        return llmb_fail(LLMB_E_BACKEND, "this llmbench was built without the CUDA backend (nvcc was not found at "
                                         "build time; reinstall with nvcc on PATH or CUDA_HOME set, or set LLMBENCH_CUDA_LIB)");
    int abi = -1, cudart = 0, needs_driver = 1;
    int mk = read_marker(path, &abi, &cudart, &needs_driver);
    if (mk < 0) return llmb_fail(LLMB_E_BACKEND, "cannot load the CUDA backend library: %s: %s", path, strerror(errno));
    if (mk == 0) return llmb_fail(LLMB_E_BACKEND, "%s is not an llmbench CUDA backend (no build marker)", path);
    if (abi != LLMB_CUDA_ABI_VERSION)
        return llmb_fail(LLMB_E_BACKEND, "%s has CUDA backend ABI version %d, this core needs %d (rebuild llmbench)",
                         path, abi, LLMB_CUDA_ABI_VERSION);
    built_runtime = cudart;
    if (needs_driver && driver_version() == 0)
        return llmb_fail(LLMB_E_BACKEND, "no usable NVIDIA driver: libcuda.so.1 cannot be loaded (install the driver; "
                                         "%s needs CUDA %d.%d or newer)", path, cudart / 1000, (cudart % 1000) / 10);
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
        // keep it loaded: its CUDA runtime has registered kernels that unregister at exit
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
// Without a driver the library is not loaded; its file said which runtime it was built with.
llmb_status llmb_cuda_versions(int *runtime, int *driver) {
    if (lib) {
        llmb_status s = lib->versions(runtime, driver);
        return s ? llmb_fail(s, "%s", lib->last_error()) : LLMB_OK;
    }
    if (!built_runtime)
        return llmb_fail(LLMB_E_BACKEND, "CUDA backend library is not loaded: %s",
                         tried ? load_reason : "call llmb_cuda_load first");
    *runtime = built_runtime;
    *driver = driver_version();
    return LLMB_OK;
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
