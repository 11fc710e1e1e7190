// cpu_contention.c — the CPU backend's steps drop to one thread while other processes want the cores
// (cpu_contention.h). Tested by csrc/tests/test_engine.c (the rule) and tests/test_engine.py (a step's
// threads and the solo-step count through the engine).
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__linux__)
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "cpu_contention.h"

// Threads that meet after every matrix product (OpenMP regions, whose waiters spin GOMP_SPINCOUNT rounds
// before they sleep) lose nothing while the engine has the cores to itself. When other processes want
// them, a thread waits for one that the OS took off its core (a scheduler slice, milliseconds), and a
// spinning waiter holds the core its partner needs. Linux counts the time a thread was ready to run but
// waited for a CPU (run_delay, /proc/thread-self/schedstat): over a quarter of the time since the last
// reading, at the end of two steps in a row, sends the next steps to one thread (the same bits on any
// thread count) for SOLO_MIN_NS; the first step after that tries all of them again, and if it waited as
// long, the steps go back to one thread at once, for twice as long as before (at most SOLO_MAX_NS): a step
// on contended cores with spinning waiters costs tens of milliseconds (docs/engine-measurements.md#contention).
// Why a quarter: two threads decode 1.6x as fast as one (SmolLM2-135M Q4_1: 5.6 against 9 ms a token), so
// they stay ahead while they wait up to about a third of the time. `llmbench serve` with its client on the
// same 2 cores waits under a tenth in 95% of steps but over it in 4.4% (p99 0.21), enough at a tenth to send
// it to one thread for seconds (TPOT 6.6 against 5.9 ms); beside one busy process each thread waited 31-49%.
#define SOLO_MIN_NS 500000000ull
#define SOLO_MAX_NS 8000000000ull
uint64_t llmb_cpu_contended(llmb_cpu_load *s, uint64_t delay_ns, uint64_t wall_ns) {
    if (delay_ns * 4 <= wall_ns) {
        s->stalled = 0, s->solo_ns = 0;
        return 0;
    }
    if (!s->stalled++) return 0;
    s->solo_ns = s->solo_ns ? (s->solo_ns * 2 < SOLO_MAX_NS ? s->solo_ns * 2 : SOLO_MAX_NS) : SOLO_MIN_NS;
    return s->solo_ns;
}

// The run_delay in the schedstat file open at fd (time on a CPU, then time waiting for one); 0 where
// it cannot be read
static uint64_t read_delay(int fd) {
#if defined(__linux__)
    char buf[96];
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *end;
    strtoull(buf, &end, 10);
    return strtoull(end, NULL, 10);
#else
    (void)fd;
    return 0;
#endif
}

// This thread's run_delay in ns (0 where the OS does not tell it: then no step runs alone)
static uint64_t run_delay(llmb_cpu_monitor *b) {
#if defined(__linux__)
    if (b->sched_fd == -2) return 0;
    const int tid = (int)syscall(SYS_gettid);
    if (b->sched_fd < 0 || tid != b->sched_tid) {   // a reading of another thread's statistics is no use
        if (b->sched_fd >= 0) close(b->sched_fd);
        b->sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC), b->sched_tid = tid;
        if (b->sched_fd < 0) {
            b->sched_fd = -2;
            return 0;
        }
    }
    return read_delay(b->sched_fd);
#else
    (void)b;
    return 0;
#endif
}

static int n_workers(const llmb_cpu_monitor *b) {
    return b->n_threads - 1 < LLMB_MONITOR_WORKERS ? b->n_threads - 1 : LLMB_MONITOR_WORKERS;
}

// Each worker of the calling thread's team opens its own schedstat file, once (the pool keeps its threads
// from one parallel region to the next)
static void open_workers(llmb_cpu_monitor *b) {
    b->workers_open = 1;
#if defined(__linux__) && defined(_OPENMP)
    const int nw = n_workers(b);
#pragma omp parallel num_threads(b->n_threads)
    {
        const int t = omp_get_thread_num();
        if (t >= 1 && t <= nw) b->worker_fd[t - 1] = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    }
#endif
}

int llmb_cpu_monitor_threads(llmb_cpu_monitor *b, uint64_t t0) {
    if (b->n_threads == 1) return 1;
    if (t0 < b->solo_until) {
        b->delay_at = 0;
        return 1;
    }
    if (!b->workers_open) open_workers(b);
    if (!b->delay_at) {
        b->run_delay = run_delay(b), b->delay_at = t0;
        for (int w = 0; w < n_workers(b); w++)
            if (b->worker_fd[w] >= 0) b->worker_delay[w] = read_delay(b->worker_fd[w]);
    }
    return b->n_threads;
}

void llmb_cpu_monitor_step(llmb_cpu_monitor *b, int threads, uint64_t t1) {
    if (b->n_threads == 1) return;
    if (threads == 1) {
        b->solo_steps++;
        return;
    }
    // the longest any thread of the step waited for a CPU since the last reading
    const uint64_t d = run_delay(b), wall = t1 - b->delay_at;
    uint64_t wait = d > b->run_delay ? d - b->run_delay : 0;
    b->run_delay = d, b->delay_at = t1;
    for (int w = 0; w < n_workers(b); w++) {
        if (b->worker_fd[w] < 0) continue;
        const uint64_t dw = read_delay(b->worker_fd[w]);
        if (dw > b->worker_delay[w] && dw - b->worker_delay[w] > wait) wait = dw - b->worker_delay[w];
        b->worker_delay[w] = dw;
    }
    const uint64_t solo = llmb_cpu_contended(&b->load, wait, wall);
    if (solo) b->solo_until = t1 + solo;
}

void llmb_cpu_monitor_init(llmb_cpu_monitor *m, int n_threads) {
    *m = (llmb_cpu_monitor){.n_threads = n_threads, .sched_fd = -1};
    for (int w = 0; w < LLMB_MONITOR_WORKERS; w++) m->worker_fd[w] = -1;
}

void llmb_cpu_monitor_close(llmb_cpu_monitor *m) {
#if defined(__linux__)
    if (m->sched_fd >= 0) close(m->sched_fd);
    for (int w = 0; w < LLMB_MONITOR_WORKERS; w++)
        if (m->worker_fd[w] >= 0) close(m->worker_fd[w]);
#endif
    m->sched_fd = -1;
    for (int w = 0; w < LLMB_MONITOR_WORKERS; w++) m->worker_fd[w] = -1;
}
