// simt_host.h — enough of CUDA's execution model to run this backend's kernels on the host, so their
// indexing, synchronization and arithmetic are tested on machines without a GPU. Force-included
// (-include) when kernels/*.cu are compiled as C++ into the emulated backend library, with
// kernels/tests/cuda_emu.cpp standing in for the CUDA runtime and cuBLAS (see tests/test_cuda_emulated.py). Each thread of a block is a fiber (ucontext) on one OS thread;
// blocks run one after another. __syncthreads and __syncwarp are barriers (a fiber waits until every
// fiber of its block, or warp, that has not returned arrives; a block whose fibers wait at different
// barriers is reported as a deadlock), warp shuffles exchange through a buffer between two warp
// barriers, __shared__ variables are static (one block runs at a time), dynamic shared memory is
// filled with NaN before each block (reads of unwritten memory show up), atomics need no lock. A
// launch on a stream that is capturing a graph is recorded (arguments by value) instead of run.
// 1-D thread blocks only; what the kernels here use, nothing more.
#ifndef LLMB_SIMT_HOST_H
#define LLMB_SIMT_HOST_H

#define LLMB_SIMT_HOST 1
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

// the CUDA headers the kernels and their wrappers use, first: they declare the built-in variables
// this file redefines
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h> // dim3, uint3, float4, uint4

#undef __device__
#undef __global__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

namespace simt {
enum { RUN = 0, AT_BLOCK = 1, AT_WARP = 2, DONE = 3 };

// Switching fibers. glibc's swapcontext saves and restores the signal mask with a system call on
// every switch, which was ~95% of an emulated forward step; on x86-64 a fiber switch is instead the
// callee-saved registers, MXCSR and the x87 control word pushed on the old stack and popped from the
// new one (what a function call may assume preserved). Elsewhere, ucontext.
#if defined(__x86_64__) && !defined(LLMB_SIMT_UCONTEXT)
#define LLMB_SIMT_FAST_SWITCH 1
extern "C" void llmb_simt_switch(void **save_sp, void *next_sp);
__asm__(".text\n"
        ".p2align 4\n"
        ".type llmb_simt_switch, @function\n"
        "llmb_simt_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size llmb_simt_switch, .-llmb_simt_switch\n");
#endif

struct Fiber {
#ifdef LLMB_SIMT_FAST_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    uint3 tid;
    int state;
    std::vector<char> stack;
};
inline std::vector<Fiber> fibers;
inline Fiber *cur;
#ifdef LLMB_SIMT_FAST_SWITCH
inline void *sched_sp;
inline void to_sched() { llmb_simt_switch(&cur->sp, sched_sp); }
inline void to_fiber(Fiber &f) { llmb_simt_switch(&sched_sp, f.sp); }
#else
inline ucontext_t sched;
inline void to_sched() { swapcontext(&cur->ctx, &sched); }
inline void to_fiber(Fiber &f) { swapcontext(&sched, &f.ctx); }
#endif
inline uint3 block_idx;
inline dim3 block_dim, grid_dim;
inline std::vector<uint64_t> xchg;
inline std::vector<float> smem;
inline std::function<void()> thunk;

inline void wait(int kind) {
    cur->state = kind;
    to_sched();
}

inline void entry() {
    thunk();
    cur->state = DONE;
    to_sched(); // never resumed
}

// f starts at entry() on its own stack when first switched to
inline void start(Fiber &f) {
#ifdef LLMB_SIMT_FAST_SWITCH
    uintptr_t top = ((uintptr_t)(f.stack.data() + f.stack.size())) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;          // entry() sees the stack of a call: 8 mod 16 after the return address pops
    *--sp = (void *)&entry;   // llmb_simt_switch's ret goes here
    for (int i = 0; i < 6; i++) *--sp = nullptr; // rbp rbx r12 r13 r14 r15
    uint32_t csr[2];
    __asm__ volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(csr[0]), "=m"(csr[1]));
    *--sp = *(void **)csr;    // MXCSR and the x87 control word of the scheduler
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, entry, 0);
#endif
}

// run one block to completion
inline void run_block() {
    const unsigned n = block_dim.x;
    for (unsigned t = 0; t < n; t++) {
        Fiber &f = fibers[t];
        f.tid = uint3{t, 0, 0};
        f.state = RUN;
        start(f);
    }
    std::fill(smem.begin(), smem.end(), std::numeric_limits<float>::quiet_NaN());
    for (;;) {
        // every runnable fiber runs until it waits at a barrier or returns
        for (unsigned t = 0; t < n; t++) {
            if (fibers[t].state != RUN) continue;
            cur = &fibers[t];
            to_fiber(*cur);
        }
        // release each warp whose live fibers all wait at the warp barrier; else the block barrier
        bool released = false, live = false, all_block = true;
        for (unsigned w = 0; w * 32 < n; w++) {
            bool all_warp = true, any = false;
            for (unsigned t = w * 32; t < std::min(n, w * 32 + 32); t++) {
                if (fibers[t].state == DONE) continue;
                any = true;
                all_warp &= fibers[t].state == AT_WARP;
            }
            if (any && all_warp) {
                for (unsigned t = w * 32; t < std::min(n, w * 32 + 32); t++)
                    if (fibers[t].state == AT_WARP) fibers[t].state = RUN;
                released = true;
            }
        }
        for (unsigned t = 0; t < n; t++) {
            if (fibers[t].state == DONE) continue;
            live = true;
            all_block &= fibers[t].state == AT_BLOCK;
        }
        if (!live) return;
        if (!released && all_block) {
            for (unsigned t = 0; t < n; t++)
                if (fibers[t].state == AT_BLOCK) fibers[t].state = RUN;
            released = true;
        }
        if (!released) {
            fprintf(stderr, "simt: deadlock in block (%u,%u,%u): threads wait at different barriers\n", block_idx.x,
                    block_idx.y, block_idx.z);
            exit(3);
        }
    }
}

// run every block of a grid, one after another
inline void run_grid(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()> &body) {
    block_dim = block;
    grid_dim = grid;
    if (fibers.size() < block.x) {
        fibers.resize(block.x);
        for (auto &f : fibers)
            if (f.stack.empty()) f.stack.resize(256 * 1024);
    }
    xchg.assign(block.x, 0);
    smem.assign(smem_bytes / sizeof(float) + 1, 0.0f);
    thunk = body;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                block_idx = uint3{x, y, z};
                run_block();
            }
}
} // namespace simt

// The emulated runtime (cuda_emu.cpp): if stream s is capturing a graph, keep op (a kernel node when
// kernel, else a copy) for the graph's replays and return true; false: run it now.
bool llmb_emu_capture(cudaStream_t s, std::function<void()> op, bool kernel);

namespace simt {
// kernel<<<grid, block, smem, s>>>(args...): run now, or recorded with its arguments by value when s
// is capturing (a graph replay then runs the same launch on whatever memory holds by then)
template <class K, class... A>
void launch(cudaStream_t s, dim3 grid, dim3 block, size_t smem_bytes, K kernel, A... args) {
    std::function<void()> run = [=]() { run_grid(grid, block, smem_bytes, [=]() { kernel(args...); }); };
    if (!llmb_emu_capture(s, run, true)) run();
}
} // namespace simt

#define threadIdx (simt::cur->tid)
#define blockIdx (simt::block_idx)
#define blockDim (simt::block_dim)
#define gridDim (simt::grid_dim)

inline void __syncthreads() { simt::wait(simt::AT_BLOCK); }
inline void __syncwarp(unsigned = 0xffffffffu) { simt::wait(simt::AT_WARP); }

template <class T>
inline T __shfl_xor_sync(unsigned, T v, int o) {
    static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
    const unsigned t = threadIdx.x;
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    simt::xchg[t] = u;
    __syncwarp();
    const uint64_t r = simt::xchg[t ^ (unsigned)o];
    __syncwarp(); // everyone has read before the buffer is reused
    T out;
    memcpy(&out, &r, sizeof out);
    return out;
}

inline double atomicAdd(double *p, double v) {
    const double old = *p;
    *p = old + v;
    return old;
}

inline void *llmb_simt_dyn_smem() { return simt::smem.data(); }
inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
using std::max;
using std::min;

#endif
