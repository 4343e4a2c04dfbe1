/* End to end: plans of every mask and strategy on 1, 2, 3 and 8 in-process ranks, run forward
 * and backward and checked against the double-precision single-device reference (relative
 * error <= 1e-5 for O, LSE, dQ, dK and dV), on batches with 1-token sequences, one sequence
 * much longer than the rest and lengths that are not multiples of the block, GQA 1 and 4. */
#include "include/dcp.h"
#include "plugin/cli/support/harness.h"
#include "plugin/cli/support/lengths.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>

#define TOL 1e-5

static const char *clusters[] = {"1x1", "1x2", "1x3", "2x4"};

static dcp_plan_t *plan_for(const dcpt_harness_t *h, const char *cluster, dcp_strategy_t s,
                            int32_t block, int32_t divisions, int32_t head_blocks,
                            dcp_comm_schedule_t comm)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s;
    o.block_size = block;
    o.divisions = divisions;
    o.head_blocks = head_blocks;
    o.comm_schedule = comm;
    const dcp_batch_t b = dcpt_harness_batch(h);
    dcp_plan_t *p = NULL;
    const dcp_status_t st = dcp_plan_create(&b, &h->shape, &o, c, &p);
    if (st != DCP_OK) fprintf(stderr, "plan: %s\n", dcp_last_error());
    CU_ASSERT_EQUAL_FATAL(st, DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}

static void expect_pass(const dcpt_harness_t *h, const dcp_plan_t *p, const char *what)
{
    dcpt_harness_result_t r;
    const dcp_status_t st = dcpt_harness_run(h, p, 0, 1, 30.0, TOL, NULL, &r);
    CU_ASSERT_EQUAL(st, DCP_OK);
    CU_ASSERT(r.passed);
    CU_ASSERT_EQUAL(r.bwd_run, h->dout != NULL);
    if (st != DCP_OK || !r.passed)
        fprintf(stderr,
                "e2e %s: %s rel %.3g lse %.3g bad %lld; dq %.3g dk %.3g dv %.3g bad %lld %s\n",
                what, dcp_status_string(st), r.max_rel_err, r.max_lse_err, (long long)r.bad_values,
                r.max_rel_err_grad[0], r.max_rel_err_grad[1], r.max_rel_err_grad[2],
                (long long)r.bwd_bad_values, st ? dcp_last_error() : "");
}

static void test_every_mask_strategy_and_rank_count(void)
{
    const int32_t len[6] = {1, 300, 23, 1, 57, 9};
    /* GQA ratio 1 and 4, alternating by mask */
    const dcp_attn_shape_t shapes[2] = {{4, 4, 16, DCP_DTYPE_FP32, 0.0f},
                                        {8, 2, 16, DCP_DTYPE_FP32, 0.0f}};
    dcpt_rng_t rng = {61};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
        const dcp_attn_shape_t shape = shapes[kind % 2];
        dcp_mask_t m[6];
        int32_t *store[6];
        for (int s = 0; s < 6; s++) {
            if (kind == DCP_MASK_CUSTOM)
                m[s] = t_random_mask(&rng, DCP_MASK_CUSTOM, len[s], &store[s]);
            else {
                char spec[64];
                const char *specs[] = {"full",        "causal",        "window:37",
                                       "lambda:4:20", "blockwise:8:2", "shared-question:0.2:4"};
                snprintf(spec, sizeof spec, "%s", specs[kind]);
                CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(spec, &m[s]), DCP_OK);
                store[s] = NULL;
            }
        }
        dcpt_harness_t *h = NULL;
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 6, m, &shape, 100 + kind, &h), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 200 + kind), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
        for (int s = 0; s < DCP_STRATEGY_COUNT; s++)
            for (int c = 0; c < 4; c++) {
                /* 4 and 8 divisions relay between 2x4's nodes; 8 ends with a local one */
                static const int32_t divs[4] = {1, 2, 4, 8};
                const int32_t divisions = divs[(kind + s + c) % 4], hb = 1 + (s + c) % 2;
                const dcp_comm_schedule_t comm =
                    (kind + c) % 2 ? DCP_COMM_ROUNDS : DCP_COMM_DIVISIONS;
                dcp_plan_t *p =
                    plan_for(h, clusters[c], (dcp_strategy_t)s, 16, divisions, hb, comm);
                char what[96];
                snprintf(what, sizeof what, "mask %d strategy %s cluster %s", kind,
                         dcp_strategy_name((dcp_strategy_t)s), clusters[c]);
                expect_pass(h, p, what);
                dcp_plan_destroy(p);
            }
        dcpt_harness_destroy(h);
        for (int s = 0; s < 6; s++) free(store[s]);
    }
}

/* bf16 and fp16 storage on CPU ranks (fp32 arithmetic): 2-byte staging, transfers and the
 * rounded publication of O, checked by FlashAttention's rule against the plain
 * low-precision computation; the GPU executor's numbers have this CPU twin. */
static void test_half_storage_on_cpu(void)
{
    const int32_t len[4] = {700, 1, 260, 90};
    const dcp_dtype_t types[2] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    dcpt_rng_t rng = {17};
    for (int t = 0; t < 2; t++)
        for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
            dcp_mask_t m[4];
            int32_t *store[4];
            for (int s = 0; s < 4; s++)
                m[s] = t_random_mask(&rng, (dcp_mask_kind_t)kind, len[s], &store[s]);
            const dcp_attn_shape_t shape = {8, 2, 32, types[t], 0.0f};
            dcpt_harness_t *h = NULL;
            CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 4, m, &shape, 5, &h), DCP_OK);
            CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 6), DCP_OK);
            CU_ASSERT_EQUAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
            dcp_plan_t *p = plan_for(h, "2x2", kind % 2 ? DCP_STRATEGY_METIS : DCP_STRATEGY_ZIGZAG,
                                     64, 3, 1, DCP_COMM_DIVISIONS);
            dcpt_harness_result_t r;
            CU_ASSERT_EQUAL(dcpt_harness_run(h, p, 0, 1, 30.0, TOL, NULL, &r), DCP_OK);
            CU_ASSERT(r.passed);
            CU_ASSERT(r.low_abs_err > 0); /* the rule has a real baseline to compare with */
            CU_ASSERT(r.low_abs_err_grad[0] > 0 && r.low_abs_err_grad[1] > 0 &&
                      r.low_abs_err_grad[2] > 0);
            if (!r.passed)
                fprintf(stderr,
                        "e2e half %d mask %d: abs %.3g plain %.3g lse %.3g bad %lld; grads abs "
                        "%.3g %.3g %.3g plain %.3g %.3g %.3g bad %lld\n",
                        t, kind, r.max_abs_err, r.low_abs_err, r.max_lse_err,
                        (long long)r.bad_values, r.max_abs_err_grad[0], r.max_abs_err_grad[1],
                        r.max_abs_err_grad[2], r.low_abs_err_grad[0], r.low_abs_err_grad[1],
                        r.low_abs_err_grad[2], (long long)r.bwd_bad_values);
            dcp_plan_destroy(p);
            dcpt_harness_destroy(h);
            for (int s = 0; s < 4; s++) free(store[s]);
        }
}

/* A plan that went through bytes computes bit-identical outputs and gradients, and so does
 * a second run. */
static void test_deserialized_plan_runs_identically(void)
{
    const int32_t len[4] = {130, 1, 64, 33};
    dcp_mask_t m[4];
    for (int s = 0; s < 4; s++) dcp_mask_parse("lambda:8:40", &m[s]);
    const dcp_attn_shape_t shape = {4, 2, 16, DCP_DTYPE_FP32, 0.0f};
    dcpt_harness_t *h = NULL;
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 4, m, &shape, 7, &h), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 8), DCP_OK);
    dcp_plan_t *p = plan_for(h, "2x4", DCP_STRATEGY_METIS, 16, 3, 2, DCP_COMM_ROUNDS);
    size_t n;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, NULL, 0, &n), DCP_OK);
    void *bytes = malloc(n);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, bytes, n, &n), DCP_OK);
    dcp_plan_t *q = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_deserialize(bytes, n, &q), DCP_OK);
    dcpt_harness_result_t a, b, c;
    CU_ASSERT_EQUAL(dcpt_harness_run(h, p, 0, 1, 30.0, TOL, NULL, &a), DCP_OK);
    CU_ASSERT_EQUAL(dcpt_harness_run(h, q, 0, 1, 30.0, TOL, NULL, &b), DCP_OK);
    CU_ASSERT_EQUAL(dcpt_harness_run(h, p, 0, 1, 30.0, TOL, NULL, &c), DCP_OK);
    CU_ASSERT_EQUAL(a.digest, b.digest);
    CU_ASSERT_EQUAL(a.digest, c.digest);
    free(bytes);
    dcp_plan_destroy(p);
    dcp_plan_destroy(q);
    dcpt_harness_destroy(h);
}

/* Lengths sampled from a file, the way the tools read them. */
static void test_lengths_file_batch(void)
{
    int32_t *pool = NULL, *len = NULL, n = 0;
    int64_t np = 0;
    CU_ASSERT_EQUAL_FATAL(dcpt_lengths_read("tests/data/lengths_small.txt", &pool, &np), DCP_OK);
    CU_ASSERT_EQUAL(np, 8);
    const dcpt_length_source_t src = {pool, np};
    CU_ASSERT_EQUAL_FATAL(dcpt_lengths_fill(&src, 1500, 800, 3, &len, &n), DCP_OK);
    int64_t sum = 0;
    for (int32_t i = 0; i < n; i++) {
        CU_ASSERT(len[i] >= 1 && len[i] <= 800);
        sum += len[i];
    }
    CU_ASSERT_EQUAL(sum, 1500);
    dcp_mask_t *m = calloc((size_t)n, sizeof *m);
    for (int32_t i = 0; i < n; i++) dcp_mask_parse("causal", &m[i]);
    const dcp_attn_shape_t shape = {2, 1, 8, DCP_DTYPE_FP32, 0.0f};
    dcpt_harness_t *h = NULL;
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, n, m, &shape, 5, &h), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
    for (int s = 0; s < DCP_STRATEGY_COUNT; s++) {
        dcp_plan_t *p = plan_for(h, "2x4", (dcp_strategy_t)s, 64, 4, 1, DCP_COMM_DIVISIONS);
        expect_pass(h, p, "lengths file");
        dcp_plan_destroy(p);
    }
    dcpt_harness_destroy(h);
    free(m);
    free(len);
    free(pool);
    CU_ASSERT_EQUAL(dcpt_lengths_read("tests/data/does-not-exist", &pool, &np),
                    DCP_ERR_INVALID_ARG);
}

int dcp_suite_e2e(void)
{
    static const dcp_test_t tests[] = {
        {"every_mask_strategy_and_rank_count", test_every_mask_strategy_and_rank_count},
        {"deserialized_plan_runs_identically", test_deserialized_plan_runs_identically},
        {"lengths_file_batch", test_lengths_file_batch},
        {"half_storage_on_cpu", test_half_storage_on_cpu},
        {NULL, NULL},
    };
    return dcp_add_suite("e2e", tests);
}
