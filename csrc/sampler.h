// sampler.h — the host sampler (sampler.c), private to the engine.
#ifndef LLMB_SAMPLER_H
#define LLMB_SAMPLER_H

#include <stdint.h>

#include "engine.h"

typedef struct llmb_sampler llmb_sampler;   // one working memory per sampling thread

llmb_sampler *llmb_sampler_create(int vocab, int n_threads);   // NULL: out of memory
void llmb_sampler_free(llmb_sampler *smp);                     // NULL is fine

// What drawing a row's token needs of its sequence: its tokens (prompt, then generated) for the
// penalties, whether its stop tokens are masked still (min_tokens), and its random stream.
typedef struct {
    const int32_t *tokens;
    int n_tokens, n_prompt;
    int mask_stops;
    uint64_t *rng;
} llmb_sample_seq;

// The token drawn from `logits` for a request sampling with `p` (greedy, penalties, temperature, top-k,
// top-p, min-p), on sampling thread `thread`; lse and argmax are llmb_row_lse's of the row. *lp_out: the
// token's log-probability under the model (before penalties and temperature). Touches only the
// sequence's random stream and the thread's working memory, so rows can be sampled concurrently and a
// row's token does not depend on the thread count.
int llmb_sample_row(llmb_sampler *smp, int thread, const llmb_sampling *p, const llmb_sample_seq *s,
                    const float *logits, double lse, int argmax, float *lp_out);
// Does drawing need more than the row's logits: repetition, presence or frequency penalties?
static inline int llmb_has_penalties(const llmb_sampling *p) {
    return p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}
// log-sum-exp of a row and its first argmax: the same bits at every SIMD level
double llmb_row_lse(const float *x, int n, int *argmax);
// the n most likely ids of a row and their log-probabilities, most likely first
void llmb_top_logprobs(const float *logits, int V, int n, double lse, int32_t *ids, float *lps);
// the next uniform [0, 1) number of a random stream (splitmix64)
double llmb_uniform(uint64_t *state);

#endif
