/*
 * End-to-end check of a plan: random Q/K/V for a batch, each rank's rows laid out as the
 * plan says, the forward pass run on in-process ranks, and the gathered O and LSE compared
 * with the double-precision single-device reference. Shared by dcp-attn-test and the
 * end-to-end test suite.
 */
#ifndef DCP_CLI_HARNESS_H
#define DCP_CLI_HARNESS_H

#include "include/dcp.h"

typedef struct {
    int32_t num_seqs;
    int32_t *lengths;
    dcp_mask_t *masks;      /* CUSTOM ranges stay the caller's */
    dcp_attn_shape_t shape; /* scale resolved, used by plans and the reference alike */
    int64_t tokens;
    float *q, *k, *v;        /* whole batch, THD, sequences concatenated */
    double *ref_o, *ref_lse; /* NULL until dcp_harness_reference() */
} dcp_harness_t;

typedef struct {
    double max_abs_err; /* max |O - O_ref| */
    double max_rel_err; /* max_abs_err / max |O_ref| */
    double max_lse_err; /* max |LSE - LSE_ref| / max(1, |LSE_ref|) over finite LSE */
    int64_t bad_values; /* NaN, unwritten, or -inf where the reference is finite (or back) */
    int passed;         /* everything within tol (only when the reference exists) */
    uint64_t digest;    /* hash of every rank's O and LSE bytes: equal runs, equal digest */
    double exec_ms;     /* median wall time of dcp_forward_inproc */
} dcp_harness_result_t;

dcp_status_t dcp_harness_create(const int32_t *lengths, int32_t num_seqs, const dcp_mask_t *masks,
                                const dcp_attn_shape_t *shape, uint64_t seed,
                                dcp_harness_t **harness_out);
void dcp_harness_destroy(dcp_harness_t *h);

/* The batch as the planner takes it. */
dcp_batch_t dcp_harness_batch(const dcp_harness_t *h);

dcp_status_t dcp_harness_reference(dcp_harness_t *h, int32_t threads);

/* Runs `plan` warmup + iters times and checks the last run against the reference (if any)
 * with tolerance `tol`. */
dcp_status_t dcp_harness_run(const dcp_harness_t *h, const dcp_plan_t *plan, int32_t warmup,
                             int32_t iters, double timeout_s, double tol,
                             dcp_harness_result_t *result_out);

#endif
