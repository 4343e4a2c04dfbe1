/* The attention variants of a call that live outside the tile kernels (kernels/README.md,
 * Numerics): learnable sinks, a correction of the merged output and its gradient, and the
 * max logit, whose per-rank maxima the ranks reduce among themselves. */
#ifndef DCP_PLUGIN_VARIANTS_H
#define DCP_PLUGIN_VARIANTS_H

#include "include/dcp.h"
#include "kernels/kernel.h"

/* What a call asks beyond its tensors (NULL fields: not asked). */
typedef struct {
    const float *sinks; /* [Hq] */
    float *max_logit;   /* [Hq] forward output */
    float *dsinks;      /* [Hq] backward output */
} dcp_call_variants_t;

/* A context's room for them: the max logit of this rank and of a peer, on its device. */
typedef struct {
    float *mem;  /* [2 cap] */
    int32_t cap; /* heads it holds */
} dcp_variants_t;

/* The call's variant arguments, before anything is exchanged: pointers the context's device
 * can read, dsinks only with sinks. */
dcp_status_t dcp_variants_check(const dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                                const dcp_call_variants_t *v);

/* At the start of a forward that asks for the max logit: env->max_logit points at this
 * rank's maxima, -inf each (queued on the context's stream). */
dcp_status_t dcp_variants_start(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                                const dcp_call_variants_t *v, dcp_kernel_env_t *env);

/* Before the pass publishes its outputs (its last COPY, or the end of a rank without rows):
 * forward, the sinks' correction of the merged accumulators and the max logit reduced over
 * every rank (collective) into v->max_logit; backward, dsinks of the rank's rows. */
dcp_status_t dcp_variants_finish(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                                 const dcp_call_variants_t *v, const dcp_kernel_env_t *env);

void dcp_variants_free(dcp_context_t *ctx);

#endif
