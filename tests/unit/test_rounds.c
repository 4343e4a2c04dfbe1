/* Congestion-free rounds: the colouring of random send/receive multigraphs uses exactly
 * Delta colours and every colour is a matching; plans with rounds keep one round in flight
 * and pass the validator. */
#include "partition/plan/plan.h"
#include "partition/program/rounds.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

static void test_colouring_is_optimal_and_a_matching(void)
{
    dcpt_rng_t rng = {71};
    for (int rep = 0; rep < 300; rep++) {
        const int32_t nr = (int32_t)dcpt_rng_range(&rng, 2, 24);
        const int64_t n = dcpt_rng_range(&rng, 0, 400);
        int32_t *src = malloc((size_t)n * sizeof *src + 4),
                *dst = malloc((size_t)n * sizeof *dst + 4);
        int32_t *col = malloc((size_t)n * sizeof *col + 4);
        int32_t deg_s[24] = {0}, deg_r[24] = {0}, delta = 0;
        for (int64_t e = 0; e < n; e++) {
            /* skewed: a few hot senders and receivers, repeated pairs (a multigraph) */
            src[e] = (int32_t)(dcpt_rng_range(&rng, 0, 3) ? dcpt_rng_range(&rng, 0, nr - 1) : 0);
            do
                dst[e] = (int32_t)(dcpt_rng_range(&rng, 0, 2) ? dcpt_rng_range(&rng, 0, nr - 1)
                                                              : nr - 1);
            while (dst[e] == src[e]);
            if (++deg_s[src[e]] > delta) delta = deg_s[src[e]];
            if (++deg_r[dst[e]] > delta) delta = deg_r[dst[e]];
        }
        int32_t colours = -1;
        CU_ASSERT_EQUAL_FATAL(dcp_rounds_colour(n, src, dst, nr, col, &colours), DCP_OK);
        CU_ASSERT_EQUAL(colours, delta); /* König: Delta colours, never more */
        uint8_t *used_s = calloc((size_t)nr * (delta + 1), 1),
                *used_r = calloc((size_t)nr * (delta + 1), 1);
        for (int64_t e = 0; e < n; e++) {
            CU_ASSERT_FATAL(col[e] >= 0 && col[e] < delta);
            CU_ASSERT(!used_s[src[e] * delta + col[e]]); /* one send per rank per round */
            CU_ASSERT(!used_r[dst[e] * delta + col[e]]); /* one receive per rank per round */
            used_s[src[e] * delta + col[e]] = used_r[dst[e] * delta + col[e]] = 1;
        }
        free(used_s);
        free(used_r);
        free(src);
        free(dst);
        free(col);
    }
    int32_t colours, col[1];
    const int32_t self[1] = {3};
    CU_ASSERT_EQUAL(dcp_rounds_colour(1, self, self, 8, col, &colours), DCP_ERR_INTERNAL);
}

static dcp_plan_t *plan_rounds(dcp_comm_schedule_t comm, int32_t coalesce)
{
    const int32_t len[5] = {3000, 1200, 400, 1, 90};
    dcp_mask_t m[5];
    for (int i = 0; i < 5; i++) dcp_mask_parse("causal", &m[i]);
    const dcp_batch_t batch = {.num_seqs = 5, .lengths = len, .masks = m};
    const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = DCP_STRATEGY_ZIGZAG;
    o.block_size = 64;
    o.comm_schedule = comm;
    o.coalesce = coalesce;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &c), DCP_OK);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}

/* The same transfers, split into more phases as rounds; coalescing k rounds divides the
 * phase count by about k; the bytes moved do not change. */
static void test_rounds_in_plans(void)
{
    dcp_plan_t *d = plan_rounds(DCP_COMM_DIVISIONS, 1);
    dcp_plan_t *r1 = plan_rounds(DCP_COMM_ROUNDS, 1);
    dcp_plan_t *r4 = plan_rounds(DCP_COMM_ROUNDS, 4);
    CU_ASSERT(d->stats.num_phases <= d->opts.divisions + 1);
    CU_ASSERT(r1->stats.num_phases > d->stats.num_phases);
    CU_ASSERT(r4->stats.num_phases < r1->stats.num_phases);
    CU_ASSERT(r4->stats.num_phases >= (r1->stats.num_phases + 3) / 4);
    CU_ASSERT_EQUAL(d->stats.comm_bytes, r1->stats.comm_bytes);
    CU_ASSERT_EQUAL(d->stats.comm_bytes, r4->stats.comm_bytes);
    CU_ASSERT_EQUAL(dcp_plan_check_programs(r1), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_check_programs(r4), DCP_OK);
    dcp_plan_destroy(d);
    dcp_plan_destroy(r1);
    dcp_plan_destroy(r4);
}

int dcp_suite_rounds(void)
{
    static const dcp_test_t tests[] = {
        {"colouring_is_optimal_and_a_matching", test_colouring_is_optimal_and_a_matching},
        {"rounds_in_plans", test_rounds_in_plans},
        {NULL, NULL},
    };
    return dcp_add_suite("rounds", tests);
}
