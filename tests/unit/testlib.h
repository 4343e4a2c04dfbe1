/* Helpers shared by the suites. */
#ifndef DCP_TESTS_TESTLIB_H
#define DCP_TESTS_TESTLIB_H

#include "include/dcp.h"
#include "plugin/cli/support/rng.h"

/* A random mask of `kind` with parameters that exercise sequences of length L (edges
 * included); CUSTOM ranges are written to *ranges_out (malloc'ed, 4 * L), else NULL. */
dcp_mask_t t_random_mask(dcpt_rng_t *rng, dcp_mask_kind_t kind, int32_t len, int32_t **ranges_out);

/* Plans `n` sequences with masks[i] on a cluster spec, shape 4/2 heads x 8; CU-asserts
 * success. */
dcp_plan_t *t_plan(const int32_t *lengths, int32_t n, const dcp_mask_t *masks, const char *cluster,
                   dcp_strategy_t strategy, int32_t block, int32_t divisions, int32_t head_blocks);

/* The same with every option given. */
dcp_plan_t *t_plan_opts(const int32_t *lengths, int32_t n, const dcp_mask_t *masks,
                        const char *cluster, const dcp_plan_options_t *opts);

/* The same with the attention shape given too (opts NULL: the defaults). */
dcp_plan_t *t_plan_shape(const int32_t *lengths, int32_t n, const dcp_mask_t *masks,
                         const char *cluster, const dcp_attn_shape_t *shape,
                         const dcp_plan_options_t *opts);

#endif
