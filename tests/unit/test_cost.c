/* The cost model's arithmetic on cases computed by hand. */
#include "partition/plan/cost.h"
#include "partition/plan/plan.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>

static void test_efficiency_curve(void)
{
    dcp_perf_model_t m;
    dcp_perf_model_default(&m);
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_efficiency(&m, 64), 0.12, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_efficiency(&m, 32), 0.03, 1e-12); /* padded to 64 x 64 */
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_efficiency(&m, 1e6), 0.68, 1e-12);               /* clamped */
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_efficiency(&m, sqrt(64.0 * 128)), 0.185, 1e-12); /* log mid */
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_efficiency(&m, 1024), 0.60, 1e-12);
    /* a curve that starts at 256 tokens is flat down to the 64-token block, then padded */
    const double x[2] = {256, 1024}, y[2] = {0.2, 0.4};
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_curve(2, x, y, 100), 0.2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_curve(2, x, y, 16), 0.2 / 16, 1e-12);
    /* one measured on smaller tiles pads below its first point */
    const double xs[2] = {16, 64}, ys[2] = {0.1, 0.3};
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_curve(2, xs, ys, 32), 0.2, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(dcp_cost_curve(2, xs, ys, 8), 0.025, 1e-12);
}

static dcp_plan_t *plan(const char *cluster, int32_t len, const char *mask, dcp_strategy_t s,
                        const double *table_eff)
{
    dcp_mask_t m;
    CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(mask, &m), DCP_OK);
    const dcp_batch_t batch = {.num_seqs = 1, .lengths = &len, .masks = &m};
    const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s;
    o.block_size = 64;
    o.divisions = 1;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &c), DCP_OK);
    if (table_eff) {
        const double tokens[1] = {64};
        CU_ASSERT_EQUAL_FATAL(dcp_cluster_set_kernel_table(c, 1, tokens, table_eff), DCP_OK);
    }
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}

/* Shape 4/2 heads x 8, one head group: a pair costs 4 x 8 x 4 = 128 FLOPs. Publishing the
 * outputs of 64 rows reads and writes 64 x 32 + 64 x 4 fp32 elements. */
#define PAIR_FLOPS    128.0
#define PUBLISH_BYTES (2.0 * (64 * 32 + 64 * 4) * 4)

/* One rank: a full 64 x 64 tile at efficiency 0.12, then the output copy. */
static void test_compute_only(void)
{
    dcp_plan_t *p = plan("1x1:tflops=100:hbm=1000", 64, "full", DCP_STRATEGY_LPT, NULL);
    const double want = 4096 * PAIR_FLOPS / (100e12 * 0.12) + PUBLISH_BYTES / 1000e9;
    CU_ASSERT_DOUBLE_EQUAL(p->stats.predicted_ms, want * 1e3, want * 1e3 * 1e-9);
    dcp_plan_destroy(p);
    /* a measured kernel table replaces the curve */
    const double half[1] = {0.5};
    p = plan("1x1:tflops=100:hbm=1000", 64, "full", DCP_STRATEGY_LPT, half);
    const double want2 = 4096 * PAIR_FLOPS / (100e12 * 0.5) + PUBLISH_BYTES / 1000e9;
    CU_ASSERT_DOUBLE_EQUAL(p->stats.predicted_ms, want2 * 1e3, want2 * 1e3 * 1e-9);
    dcp_plan_destroy(p);
}

/* Two ranks, ring: rank 1 needs K and V of block 0 (2 x 64 rows x 16 fp32 = 8192 bytes).
 * Rank 0 packs them (read + write), both ranks launch, the transfer takes bytes / bandwidth
 * plus latency from the later launch; rank 1 computes once it has them, rank 0, which gets
 * nothing in that step, computes while they travel and waits for its send after; each then
 * publishes. */
static void test_transfer_then_compute(void)
{
    dcp_plan_t *p =
        plan("1x2:intra=10:lat=2:tflops=100:hbm=1000", 128, "causal", DCP_STRATEGY_RING, NULL);
    const double pack = 2.0 * 8192 / 1000e9;
    const double link = 8192 / 10e9 + 2e-6;
    const double diag = 64 * 65 / 2, full = 64 * 64;
    const double attn0 = diag * PAIR_FLOPS / (100e12 * 0.12);
    const double attn1 = (diag + full) * PAIR_FLOPS / (100e12 * 0.12);
    const double out = PUBLISH_BYTES / 1000e9;
    const double r0 = pack + fmax(link, attn0) + out, r1 = pack + link + attn1 + out;
    dcp_rank_stats_t a, b;
    CU_ASSERT_EQUAL(dcp_plan_get_rank_stats(p, 0, &a), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_get_rank_stats(p, 1, &b), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(a.predicted_ms, r0 * 1e3, r0 * 1e3 * 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(b.predicted_ms, r1 * 1e3, r1 * 1e3 * 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(p->stats.predicted_ms, r1 * 1e3, r1 * 1e3 * 1e-9);
    dcp_plan_destroy(p);
}

/* bwd=2: the backward's tiles run twice as fast per FLOP; the forward is untouched. One
 * rank, one full 64 x 64 tile: the backward's attention is 2.5x its FLOPs. */
static void test_backward_speed(void)
{
    dcp_plan_t *a = plan("1x1:tflops=100:hbm=1000", 64, "full", DCP_STRATEGY_LPT, NULL);
    dcp_plan_t *b = plan("1x1:tflops=100:hbm=1000:bwd=2", 64, "full", DCP_STRATEGY_LPT, NULL);
    const double attn = 2.5 * 4096 * PAIR_FLOPS / (100e12 * 0.12) * 1e3;
    CU_ASSERT_DOUBLE_EQUAL(b->stats.predicted_ms, a->stats.predicted_ms, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(a->stats.bwd_predicted_ms - b->stats.bwd_predicted_ms, attn / 2,
                           attn * 1e-9);
    dcp_plan_destroy(a);
    dcp_plan_destroy(b);
}

static void test_bad_kernel_tables_rejected(void)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &c), DCP_OK);
    const double t2[2] = {128, 64}, e2[2] = {0.3, 0.4}, ok_t[2] = {64, 128}, bad_e[2] = {0.3, 1.5};
    CU_ASSERT_EQUAL(dcp_cluster_set_kernel_table(c, 2, t2, e2), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_cluster_set_kernel_table(c, 2, ok_t, bad_e), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_cluster_set_kernel_table(c, 0, ok_t, e2), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_cluster_set_kernel_table(c, 2, ok_t, e2), DCP_OK);
    dcp_cluster_destroy(c);
}

int dcp_suite_cost(void)
{
    static const dcp_test_t tests[] = {
        {"efficiency_curve", test_efficiency_curve},
        {"compute_only", test_compute_only},
        {"transfer_then_compute", test_transfer_then_compute},
        {"backward_speed", test_backward_speed},
        {"bad_kernel_tables_rejected", test_bad_kernel_tables_rejected},
        {NULL, NULL},
    };
    return dcp_add_suite("cost", tests);
}
