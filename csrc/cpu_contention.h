// cpu_contention.h — internal to the CPU backend: when other processes want the cores, its steps drop to
// one thread for a while (cpu_contention.c says why and how long). Nothing outside the CPU backend
// needs it; the engine only learns how many threads a step used (llmb_backend_times.host_threads).
#ifndef LLMB_CPU_CONTENTION_H
#define LLMB_CPU_CONTENTION_H

#include <stdint.h>

// The rule, after a step on several threads where the calling thread waited delay_ns of the last wall_ns
// for a CPU: how long the next steps run on one thread (0: not at all). s starts zeroed: the steps in a
// row over the limit, and the last such time.
typedef struct {
    int stalled;
    uint64_t solo_ns;
} llmb_cpu_load;
uint64_t llmb_cpu_contended(llmb_cpu_load *s, uint64_t delay_ns, uint64_t wall_ns);

// The monitor a backend keeps: steps run on one thread until solo_until (llmb_now_ns); the calling
// thread's scheduler statistics (sched_fd, opened by thread sched_tid; -1 none yet, -2 none to read) gave
// run_delay ns waiting for a CPU at llmb_now_ns() = delay_at (0: no reading since a one-thread step).
// The other threads of a step's team (OpenMP threads 1.. of the calling thread's pool) are read too
// (worker_fd, opened by each of them once: -1 none), their delays as of delay_at in worker_delay: a worker
// the OS took off its core stalls the step at the next barrier while the calling thread spins, running.
#define LLMB_MONITOR_WORKERS 15
typedef struct {
    int n_threads;        // the threads a step may use
    uint64_t solo_until, run_delay, delay_at;
    llmb_cpu_load load;
    int sched_fd, sched_tid;
    int workers_open;
    int worker_fd[LLMB_MONITOR_WORKERS];
    uint64_t worker_delay[LLMB_MONITOR_WORKERS];
    uint64_t solo_steps;  // steps run on one thread of several
} llmb_cpu_monitor;

void llmb_cpu_monitor_init(llmb_cpu_monitor *m, int n_threads);
void llmb_cpu_monitor_close(llmb_cpu_monitor *m);
// before a step that starts at t0 (llmb_now_ns): the threads it runs on
int llmb_cpu_monitor_threads(llmb_cpu_monitor *m, uint64_t t0);
// after a step on `threads` threads that ended at t1: count it, or judge the cores
void llmb_cpu_monitor_step(llmb_cpu_monitor *m, int threads, uint64_t t1);

#endif
