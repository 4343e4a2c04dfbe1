/*
 * End-to-end check of a plan: random Q/K/V for a batch (the same on every process for one
 * seed; representable in the plan dtype), each rank's rows laid out as the plan says (and
 * copied to its GPU for device runs), the forward pass (and, with backward enabled, the
 * backward pass after it) run on in-process ranks or on this process's rank of a job, and
 * O, LSE (and dQ, dK, dV) compared with the double-precision single-device reference.
 * Shared by dcp-attn-test and the end-to-end test suite.
 */
#ifndef DCPT_CLI_HARNESS_H
#define DCPT_CLI_HARNESS_H

#include "include/dcp.h"
#include "plugin/cli/support/report.h"

typedef struct {
    int32_t num_seqs;
    int32_t *lengths;
    dcp_mask_t *masks;      /* CUSTOM ranges stay the caller's */
    dcp_attn_shape_t shape; /* scale resolved, used by plans and the reference alike */
    int64_t tokens;
    float *q, *k, *v;        /* whole batch, THD, sequences concatenated */
    int64_t *seq_start;      /* first token of each sequence */
    double *ref_o, *ref_lse; /* NULL until dcpt_harness_reference() */
    float *low_o;            /* bf16/fp16: the plain low-precision computation (reference.h) */
    uint8_t *ref_done;       /* sequences whose reference is computed */
    /* backward, after dcpt_harness_enable_backward(): dO and the reference gradients */
    float *dout;                      /* layout of q, representable in the plan dtype */
    double *ref_dq, *ref_dk, *ref_dv; /* NULL until dcpt_harness_reference() */
    float *low_dq, *low_dk, *low_dv;  /* bf16/fp16: the plain low-precision backward */
    const char *attn_engine;          /* the contexts' attention engine (NULL: the default) */
    int32_t deterministic;            /* the contexts' deterministic mode (dcp.h) */
    /* the attention variants (dcpt_harness_enable_sinks, _max_logit) */
    float *sinks;          /* [Hq] learnable sinks of every call; NULL: none */
    int32_t max_logit;     /* 1: forwards return the max logit, checked on every rank */
    double *ref_max_logit; /* [Hq] the batch's, from the reference */
    double *ref_seq_max;   /* [num_seqs x Hq]: each reference run's, kept by its sequences */
} dcpt_harness_t;

typedef struct {
    double max_abs_err;   /* max |O - O_ref| */
    double max_rel_err;   /* max_abs_err / max |O_ref| */
    double max_lse_err;   /* max |LSE - LSE_ref| / max(1, |LSE_ref|) over finite LSE */
    double low_abs_err;   /* bf16/fp16: max |O_plain - O_ref| of the plain computation */
    int64_t bad_values;   /* NaN, unwritten, or -inf where the reference is finite (or back) */
    int passed;           /* fp32: errors within tol; bf16/fp16: max_abs_err <= 2 low_abs_err +
                             one rounding step of max |O_ref|, LSE within 1e-3 (FlashAttention's
                             rule); no bad values; only when the reference exists */
    uint64_t digest;      /* hash of every rank's O and LSE (and dQ, dK, dV) bytes: equal outputs,
                             equal digest, whether the ranks ran as threads or as processes */
    dcpt_stats_t exec_ms; /* median [min, max] wall time of one forward pass over all ranks */
    dcpt_stats_t host_us; /* time a rank's dcp_forward takes to return (the slowest
                           rank's; on a GPU the work may still run after it returns) */
    dcpt_stats_t wait_us; /* time a forward spends blocked in its COMM_WAITs on the host
                             (threads: the ranks' mean; processes: this rank's) */
    /* backward (when enabled); `passed` then also requires bwd_passed */
    int bwd_run;
    int bwd_passed;             /* each of dQ, dK, dV: fp32 max abs err / max |ref| <= tol;
                                   bf16/fp16 FlashAttention-2's gradient rule; no bad values */
    double max_rel_err_grad[3]; /* dQ, dK, dV: max |g - g_ref| / max |g_ref| */
    double max_abs_err_grad[3];
    double low_abs_err_grad[3]; /* bf16/fp16: the plain computation's max abs error */
    int64_t bwd_bad_values;     /* NaN or unwritten gradient elements */
    /* the variants: max logit error relative to max(1, |ref|) (held to tol, 1e-3 in bf16 and
     * fp16), dsinks error relative to each rank's scale (sum exp(s - LSE) |dO O|; tol, or
     * 2 (1e-3 + a rounding step)), NaN or mismatched infinities in them */
    double max_logit_err;
    double dsinks_err;
    int64_t variant_bad;
    dcpt_stats_t bwd_exec_ms;   /* wall time of one backward pass over all ranks */
    dcpt_stats_t bwd_host_us;   /* time dcp_backward takes to return */
    /* the attention engine of rank 0's context after the runs (dcp_context_attn_engine) */
    dcp_attn_engine_info_t engine; /* its strings point into the arrays below */
    char engine_name[16], engine_note[512];
} dcpt_harness_result_t;

dcp_status_t dcpt_harness_create(const int32_t *lengths, int32_t num_seqs, const dcp_mask_t *masks,
                                 const dcp_attn_shape_t *shape, uint64_t seed,
                                 dcpt_harness_t **harness_out);
void dcpt_harness_destroy(dcpt_harness_t *h);

/* Draws dO (from `seed`) so that runs do the backward pass after the forward and checks
 * check the gradients too. Before dcpt_harness_reference(). */
dcp_status_t dcpt_harness_enable_backward(dcpt_harness_t *h, uint64_t seed);

/* The batch as the planner takes it. */
/* Learnable sinks drawn from `seed` (standard normal) passed to every call, their gradient
 * checked when the backward is enabled; before dcpt_harness_reference(). */
dcp_status_t dcpt_harness_enable_sinks(dcpt_harness_t *h, uint64_t seed);

/* Forwards return the max logit, checked on every rank against the batch's; before
 * dcpt_harness_reference(), which then covers every sequence (the max is the batch's). */
dcp_status_t dcpt_harness_enable_max_logit(dcpt_harness_t *h);

dcp_batch_t dcpt_harness_batch(const dcpt_harness_t *h);

/* The reference of every sequence (plan NULL), or only of those with rows on `rank` of
 * `plan` (what that rank's check needs); sequences computed before are kept. */
dcp_status_t dcpt_harness_reference(dcpt_harness_t *h, int32_t threads, const dcp_plan_t *plan,
                                    int32_t rank);

/* Runs `plan` warmup + iters times on in-process ranks on `device` (dcp_forward_inproc's) and
 * checks the last run against the reference (if any) with tolerance `tol`; with backward
 * enabled each run is a forward then a backward, timed apart. */
dcp_status_t dcpt_harness_run(const dcpt_harness_t *h, const dcp_plan_t *plan, int32_t warmup,
                              int32_t iters, double timeout_s, double tol, const char *device,
                              dcpt_harness_result_t *result_out);

/* The race check: `plan` run `runs` times on in-process ranks on `device`, each run on
 * fresh contexts and fresh tensors (forward, then backward when enabled), and every run
 * compared with the CPU executor's result for the same plan and storage type (run once
 * here), with the reference and, bit for bit, with the first run. A run is a mismatch when
 * it fails the check of dcpt_harness_run (needs the reference), or when any output (O, LSE,
 * dQ, dK, dV) is further from the CPU result than both results may be from the reference
 * together: twice FlashAttention's bound (bf16/fp16), 2 tol relative (fp32), 2e-3 relative
 * for LSE. */
typedef struct {
    int32_t runs, mismatches;
    int32_t failed_checks;   /* runs that failed the check against the reference */
    double max_diff[5];      /* O, LSE, dQ, dK, dV: largest |run - cpu| over every run */
    double allowed[5];       /* the bound each is held to */
    int32_t first_mismatch;  /* 0-based run, -1 when none */
    /* runs after the first whose forward outputs (O, LSE) or gradients (dQ, dK, dV) differ
     * from the first run's in any bit: 0 and 0 with deterministic mode */
    int32_t unequal_fwd, unequal_bwd;
} dcpt_harness_repeat_t;

dcp_status_t dcpt_harness_repeat(const dcpt_harness_t *h, const dcp_plan_t *plan, int32_t runs,
                                 double timeout_s, double tol, const char *device,
                                 dcpt_harness_repeat_t *result_out);

/* The engine of a context into res->engine (its strings copied into res). */
void dcpt_harness_engine(const dcp_context_t *ctx, dcpt_harness_result_t *res);

/* The same for this process's rank of a job: collective over `bootstrap` (every rank calls
 * it with the same plan); each run is timed from a common start to the last rank's end, and
 * the result, reduced over the ranks, is the same on every rank. A failure before the
 * forward pass is agreed on (every rank returns it); a forward pass that fails returns at
 * once, with no further collective (a peer may be dead): the caller ends the job. */
dcp_status_t dcpt_harness_run_rank(const dcpt_harness_t *h, const dcp_plan_t *plan,
                                   dcp_context_t *ctx, const dcp_bootstrap_t *bootstrap,
                                   int32_t warmup, int32_t iters, double tol,
                                   dcpt_harness_result_t *result_out);

#endif
