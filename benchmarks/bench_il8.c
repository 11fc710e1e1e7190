// bench_il8.c — the AVX2 interleaved kernels of csrc/vecdot_il8.c timed on their own: one call of a kernel over
// nr rows (groups of 8) of n values and nc tokens, repeated for `secs` seconds, best and mean GOP/s. The weights
// and activations are random bytes in the group layouts (halves set to valid scales), so the figures are the
// kernels' speed, not their results. Build against a checkout's csrc (two checkouts: an A/B of two versions,
// alternated by hand in one sitting):
//   cc -std=c11 -O3 -fno-math-errno -D_GNU_SOURCE -fno-strict-aliasing -Icsrc benchmarks/bench_il8.c -o /tmp/bench_il8
//   /tmp/bench_il8 IQ4_NL 256 2048 1           # one token, weights in L2
//   /tmp/bench_il8 IQ4_XS 2048 8192 1 8        # one token, 8 copies of the weights cycled (from DRAM)
//   /tmp/bench_il8 Q4_0 3072 768 512 1 1       # 512 tokens for 1 s
// arguments: type (Q4_0, IQ4_NL, IQ4_XS, Q2_K) rows n tokens [copies, default 1] [seconds, default 0.5];
// LLMBENCH_PREFETCH=far: the engine's far prefetch, which it uses by default on Intel where weights stream from DRAM
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vecdot_il8.c"

int llmb_cpu_has(const char *f) {   // (vecdot_il8.c's install asks for VNNI; unused here)
    (void)f;
    return 0;
}

// the engine's LLMBENCH_PREFETCH as this harness reads it: "far" adds the L2 prefetch where copies > 1 (from DRAM)
int llmb_prefetch_mode(void) {
    const char *m = getenv("LLMBENCH_PREFETCH");
    return m && !strcmp(m, "far") ? LLMB_PREFETCH_FAR : LLMB_PREFETCH_LINES;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef void (*il_fn)(int64_t, const void *, size_t, int, const void *, size_t, int, float *, int64_t, int);

static void set_half(uint8_t *p) { p[0] = 0, p[1] = 0x1c; }   // 2^-8

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s TYPE ROWS N TOKENS [COPIES] [SECONDS]  (TYPE: Q4_0 IQ4_NL IQ4_XS Q2_K)\n", argv[0]);
        return 2;
    }
    const char *type = argv[1];
    const int nr = atoi(argv[2]), nc = atoi(argv[4]), copies = argc > 5 ? atoi(argv[5]) : 1;
    const int64_t n = atoll(argv[3]);
    const double secs = argc > 6 ? atof(argv[6]) : 0.5;
    const int q2 = !strcmp(type, "Q2_K"), xs4 = !strcmp(type, "IQ4_XS"), k = q2 || xs4;
    const int q40 = !strcmp(type, "Q4_0"), nl = !strcmp(type, "IQ4_NL");
    if (!(q2 || xs4 || q40 || nl) || nr <= 0 || nr % 8 || nc <= 0 || copies <= 0 || n % (k ? 256 : 32)) {
        fprintf(stderr, "bad arguments: rows a multiple of 8, n of 32 (K types: 256), tokens and copies > 0\n");
        return 2;
    }
    const il_fn f = q2 ? q2_K_il8_avx2 : xs4 ? iq4_xs_il8_avx2 : q40 ? q4_0_il8_avx2 : iq4_nl_il8_avx2;
    const size_t ws = q2 ? (size_t)n / 256 * sizeof(llmb_block_q2_K)
                      : xs4 ? (size_t)n / 256 * sizeof(llmb_block_iq4_xs) : (size_t)n / 32 * 18;
    const size_t xs = k ? (size_t)n / 256 * sizeof(llmb_block_q8_K) : (size_t)n / 32 * sizeof(llmb_block_q8_0);
    const size_t gs = 8 * ws;   // bytes of a group
    srand(1);
    uint8_t **w = malloc(sizeof *w * copies);
    for (int c = 0; c < copies; c++) {
        w[c] = aligned_alloc(64, ws * nr);
        for (size_t i = 0; i < ws * nr; i++) w[c][i] = (uint8_t)rand();
        for (size_t g = 0; g < (size_t)nr / 8; g++) {
            uint8_t *gp = w[c] + g * gs;
            if (q40 || nl)   // the group's tail of d: 8 halves a block, after its blocks
                for (size_t i = (size_t)n / 32 * 128; i < gs; i += 2) set_half(gp + i);
            else
                for (size_t b = 0; b < (size_t)n / 256; b++)
                    for (int r = 0; r < 8; r++) {   // Q2_K: d dmin in word 20; IQ4_XS: d in word 0
                        uint8_t *sb = gp + b * 8 * (q2 ? sizeof(llmb_block_q2_K) : sizeof(llmb_block_iq4_xs));
                        if (q2) set_half(sb + 20 * 32 + 4 * r), set_half(sb + 20 * 32 + 4 * r + 2);
                        else set_half(sb + 4 * r);
                    }
        }
    }
    uint8_t *x = aligned_alloc(64, xs * nc + 64);
    for (size_t i = 0; i < xs * nc; i++) x[i] = (uint8_t)(rand() % 255 - 127);
    for (int c = 0; c < nc; c++)
        for (int64_t b = 0; b < n / (k ? 256 : 32); b++) {
            if (k) ((llmb_block_q8_K *)(x + c * xs))[b].d = 0.01f;
            else set_half(x + c * xs + b * sizeof(llmb_block_q8_0));
        }
    float *y = malloc(sizeof(float) * nr * nc);
    double best = 1e30, total = 0;
    long calls = 0;
    for (const double t0 = now(); now() - t0 < secs; calls++) {
        const double t = now();
        f(n, w[calls % copies], ws, nr, x, xs, nc, y, nr, copies > 1);
        const double dt = now() - t;
        total += dt, best = dt < best ? dt : best;
    }
    const double ops = 2.0 * nr * n * nc;
    printf("%s %dx%lld x %d tokens, %d copies: best %.1f GOP/s (%.2f GB/s of weights), mean %.1f GOP/s, %ld calls\n",
           type, nr, (long long)n, nc, copies, ops / best * 1e-9, ws * nr / best * 1e-9, ops * calls / total * 1e-9,
           calls);
    for (int c = 0; c < copies; c++) free(w[c]);
    free(w), free(x), free(y);
    return 0;
}
