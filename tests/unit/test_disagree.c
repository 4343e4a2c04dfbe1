/* Ranks that disagree stop at once and say so: ranks that run different plans, or different
 * calls, fail within a message's latency naming both ranks and both plans (call stamps,
 * plugin/stamp.h); a rank that gives up before a call (dcp_context_abort) is named with its
 * reason by the others; a job whose contexts failed goes on with new ones; and a plan's
 * checksum is the one its bytes carry. Threads of a group (in-process engine) and ranks over
 * a bootstrap (UCX) alike. Every wait has a 30 s timeout: a rank that returns before 10 s was
 * stopped by the check, not by the timeout. */
#include "include/base/error.h"
#include "include/dcp.h"
#include "tests/unit/shm_bootstrap.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANKS 4

enum { DO_FORWARD, DO_BACKWARD, DO_ABORT };

typedef struct {
    dcp_group_t *group;  /* threads of a group, or */
    shm_bootstrap_t *bs; /* ranks over a bootstrap (UCX) */
    int32_t rank;
    const dcp_plan_t *plan;
    int action;
    int rounds; /* > 1: after a failure every rank destroys its context and makes a new one */
    float scale; /* the call's softmax_scale (0: the plan's) */
    dcp_status_t st[2];
    char msg[2][512];
    double secs[2];
} drank_t;

static dcp_status_t act(dcp_context_t *ctx, const drank_t *d)
{
    if (d->action == DO_ABORT) return dcp_context_abort(ctx, "rank 2's q has 3 heads, plan 4");
    int64_t n = 0;
    dcp_plan_local_layout(d->plan, d->rank, NULL, 0, NULL, &n);
    float *mem = calloc((size_t)(n * 4 * 8 * 8 + 16), sizeof *mem); /* 8 row-sized arrays */
    const int64_t q = n * 4 * 8, kv = n * 2 * 8;
    dcp_grad_tensors_t g = {
        {mem, mem + q, mem + q + kv, mem + q + 2 * kv, mem + 2 * q + 2 * kv, d->scale},
        mem + 3 * q + 2 * kv,
        mem + 4 * q + 2 * kv,
        mem + 5 * q + 2 * kv,
        mem + 5 * q + 3 * kv};
    const dcp_status_t st = d->action == DO_FORWARD ? dcp_forward(ctx, d->plan, &g.fwd, NULL)
                                                    : dcp_backward(ctx, d->plan, &g, NULL);
    free(mem);
    return st;
}

static void *rank_main(void *arg)
{
    drank_t *d = arg;
    for (int round = 0; round < d->rounds; round++) {
        const dcp_bootstrap_t b = d->bs ? shm_bootstrap_rank(d->bs, d->rank) : (dcp_bootstrap_t){0};
        const dcp_context_config_t cfg = {.rank = d->rank,
                                          .group = d->bs ? NULL : d->group,
                                          .bootstrap = d->bs ? &b : NULL,
                                          .timeout_s = 30};
        dcp_context_t *ctx = NULL;
        const double t0 = dcp_now();
        dcp_status_t st = dcp_context_create(&cfg, &ctx);
        if (st == DCP_OK) st = act(ctx, d);
        d->st[round] = st;
        d->secs[round] = dcp_now() - t0;
        if (st != DCP_OK) dcp_error_save(d->msg[round], sizeof d->msg[round]);
        dcp_context_destroy(ctx);
        d->action = DO_FORWARD; /* the next round: everyone runs the first rank's plan */
        d->plan = d[-d->rank].plan;
    }
    return NULL;
}

/* Runs d[0..RANKS) as threads, over a group or (ucx) a bootstrap. */
static void run(drank_t *d, int ucx)
{
    pthread_t t[RANKS];
    dcp_group_t *group = NULL;
    shm_bootstrap_t *bs = NULL;
    if (ucx) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(bs = shm_bootstrap_create(RANKS, 4096));
    } else {
        CU_ASSERT_EQUAL_FATAL(dcp_group_create(RANKS, &group), DCP_OK);
    }
    for (int32_t r = 0; r < RANKS; r++) {
        d[r].group = group;
        d[r].bs = bs;
        d[r].rank = r;
        if (!d[r].rounds) d[r].rounds = 1;
        pthread_create(&t[r], NULL, rank_main, &d[r]);
    }
    for (int32_t r = 0; r < RANKS; r++) pthread_join(t[r], NULL);
    dcp_group_destroy(group);
    shm_bootstrap_destroy(bs);
}

/* A plan that moves data between the ranks (METIS's global plan: the default's candidates
 * may keep every document inside one node, where ranks that disagree never meet). */
static dcp_plan_t *plan_with(dcp_strategy_t strategy)
{
    static const int32_t len[3] = {700, 90, 333};
    const dcp_mask_t m[3] = {{.kind = DCP_MASK_CAUSAL},
                             {.kind = DCP_MASK_FULL},
                             {.kind = DCP_MASK_WINDOW, .window = 50}};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = strategy;
    o.block_size = 64;
    o.divisions = 2;
    o.hierarchy = 0;
    return t_plan_opts(len, 3, m, "2x2", &o);
}

/* Every rank stopped well before its timeout, and the ranks that found the difference name
 * it: a status of INVALID_ARG and `what` with both plans, or PEER naming a rank. */
static void expect_stopped(const drank_t *d, const char *what, uint32_t a, uint32_t b)
{
    char pa[16], pb[16];
    snprintf(pa, sizeof pa, "0x%08x", a);
    snprintf(pb, sizeof pb, "0x%08x", b);
    int found = 0;
    for (int32_t r = 0; r < RANKS; r++) {
        CU_ASSERT(d[r].st[0] == DCP_ERR_INVALID_ARG || d[r].st[0] == DCP_ERR_PEER);
        CU_ASSERT(d[r].secs[0] < 10.0);
        CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[0], what)); /* the reason reaches every rank */
        CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[0], pa));
        CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[0], pb));
        found |= d[r].st[0] == DCP_ERR_INVALID_ARG;
    }
    CU_ASSERT(found);
}

static void plans_differ(int ucx)
{
    dcp_plan_t *a = plan_with(DCP_STRATEGY_LPT), *b = plan_with(DCP_STRATEGY_ZIGZAG);
    uint32_t ca, cb;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(a, &ca), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(b, &cb), DCP_OK);
    CU_ASSERT_NOT_EQUAL(ca, cb);
    drank_t d[RANKS] = {{0}};
    for (int32_t r = 0; r < RANKS; r++) d[r].plan = r == 2 ? b : a; /* rank 2 planned otherwise */
    run(d, ucx);
    expect_stopped(d, "plans differ", ca, cb);
    dcp_plan_destroy(a);
    dcp_plan_destroy(b);
}

static void test_plans_differ_threads(void)
{
    plans_differ(0);
}

static void test_plans_differ_ucx(void)
{
    plans_differ(1);
}

/* Rank 2 runs the window kind of a plan of layer kinds while the others run its causal kind:
 * the kinds' checksums differ (a view's is its plan's with its kind), and every rank stops. */
static void test_kinds_differ(void)
{
    static const int32_t len[3] = {700, 90, 333};
    const dcp_mask_t causal[3] = {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL},
                                  {.kind = DCP_MASK_CAUSAL}};
    const dcp_mask_t window[3] = {{.kind = DCP_MASK_WINDOW, .window = 50},
                                  {.kind = DCP_MASK_WINDOW, .window = 50},
                                  {.kind = DCP_MASK_WINDOW, .window = 50}};
    const dcp_layer_kind_t kinds[2] = {{causal, 1}, {window, 3}};
    const dcp_batch_t batch = {.num_seqs = 3, .lengths = len, .num_kinds = 2, .kinds = kinds};
    const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 64;
    o.strategy = DCP_STRATEGY_LPT;
    dcp_cluster_t *c = NULL;
    dcp_plan_t *a = NULL;
    const dcp_plan_t *w = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x2", &c), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &a), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_kind(a, 1, &w), DCP_OK);
    uint32_t ca, cw;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(a, &ca), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(w, &cw), DCP_OK);
    CU_ASSERT_NOT_EQUAL(ca, cw);
    drank_t d[RANKS] = {{0}};
    for (int32_t r = 0; r < RANKS; r++) d[r].plan = r == 2 ? w : a;
    run(d, 0);
    expect_stopped(d, "plans differ", ca, cw);
    dcp_plan_destroy(a);
    dcp_cluster_destroy(c);
}

/* Rank 1 runs its backward while the others run the forward of the same plan. */
static void test_calls_differ(void)
{
    dcp_plan_t *a = plan_with(DCP_STRATEGY_METIS);
    uint32_t ca;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(a, &ca), DCP_OK);
    drank_t d[RANKS] = {{0}};
    for (int32_t r = 0; r < RANKS; r++) d[r] = (drank_t){.plan = a, .action = DO_FORWARD};
    d[1].action = DO_BACKWARD;
    run(d, 0);
    expect_stopped(d, "calls differ", ca, ca);
    CU_ASSERT_PTR_NOT_NULL(strstr(d[1].msg[0], "backward"));
    dcp_plan_destroy(a);
}

/* Rank 3 gives the call a softmax scale of its own (the others the plan's): every rank
 * stops at once naming both scales, in the forward and in the backward; scales that agree
 * run. */
static void test_scales_differ(void)
{
    dcp_plan_t *a = plan_with(DCP_STRATEGY_METIS);
    for (int action = DO_FORWARD; action <= DO_BACKWARD; action++) {
        drank_t d[RANKS] = {{0}};
        for (int32_t r = 0; r < RANKS; r++) d[r] = (drank_t){.plan = a, .action = action};
        d[3].scale = 0.5f;
        run(d, 0);
        int found = 0;
        for (int32_t r = 0; r < RANKS; r++) {
            CU_ASSERT(d[r].st[0] == DCP_ERR_INVALID_ARG || d[r].st[0] == DCP_ERR_PEER);
            CU_ASSERT(d[r].secs[0] < 10.0);
            CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[0], "softmax scales differ"));
            CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[0], "0.5"));
            found |= d[r].st[0] == DCP_ERR_INVALID_ARG;
        }
        CU_ASSERT(found);
        for (int32_t r = 0; r < RANKS; r++) d[r] = (drank_t){.plan = a, .action = action};
        for (int32_t r = 0; r < RANKS; r++) d[r].scale = 0.5f;
        run(d, 0);
        for (int32_t r = 0; r < RANKS; r++) CU_ASSERT_EQUAL(d[r].st[0], DCP_OK);
    }
    dcp_plan_destroy(a);
}

/* Rank 2 gives up before the call; then every rank makes a new context and the next call
 * works (over UCX, where contexts of a failed job must not leave the bootstrap's collectives
 * out of step). */
static void test_abort_names_reason_then_recreate(void)
{
    dcp_plan_t *a = plan_with(DCP_STRATEGY_METIS);
    for (int ucx = 0; ucx < 2; ucx++) {
        drank_t d[RANKS] = {{0}};
        for (int32_t r = 0; r < RANKS; r++) d[r] = (drank_t){.plan = a, .rounds = 1 + ucx};
        d[2].action = DO_ABORT;
        run(d, ucx);
        for (int32_t r = 0; r < RANKS; r++) {
            if (r == 2) continue;
            CU_ASSERT_EQUAL(d[r].st[0], DCP_ERR_PEER);
            CU_ASSERT(d[r].secs[0] < 10.0);
            CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[0], "rank 2"));
            CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[0], "3 heads, plan 4"));
            if (ucx) CU_ASSERT_EQUAL(d[r].st[1], DCP_OK);
        }
        if (ucx) CU_ASSERT_EQUAL(d[2].st[1], DCP_OK);
    }
    dcp_plan_destroy(a);
}

/* The checksum is bytes 24-27 of the serialized plan, equal for equal plans and for the
 * plan rebuilt from the bytes. */
static void test_checksum_is_the_bytes(void)
{
    dcp_plan_t *a = plan_with(DCP_STRATEGY_METIS), *b = plan_with(DCP_STRATEGY_METIS);
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(a, NULL, 0, &n), DCP_OK);
    unsigned char *buf = malloc(n);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(a, buf, n, &n), DCP_OK);
    const uint32_t in_bytes = (uint32_t)buf[24] | (uint32_t)buf[25] << 8 | (uint32_t)buf[26] << 16 |
                              (uint32_t)buf[27] << 24;
    dcp_plan_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_deserialize(buf, n, &c), DCP_OK);
    uint32_t ca = 0, cb = 1, cc = 2;
    CU_ASSERT_EQUAL(dcp_plan_checksum(a, &ca), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_checksum(b, &cb), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_checksum(c, &cc), DCP_OK);
    CU_ASSERT_EQUAL(ca, in_bytes);
    CU_ASSERT_EQUAL(cb, in_bytes);
    CU_ASSERT_EQUAL(cc, in_bytes);
    CU_ASSERT_EQUAL(dcp_plan_checksum(NULL, &ca), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_context_abort(NULL, "x"), DCP_ERR_INVALID_ARG);
    free(buf);
    dcp_plan_destroy(a);
    dcp_plan_destroy(b);
    dcp_plan_destroy(c);
}

int dcp_suite_disagree(void)
{
    static const dcp_test_t tests[] = {
        {"plans_differ_threads", test_plans_differ_threads},
        {"plans_differ_ucx", test_plans_differ_ucx},
        {"calls_differ", test_calls_differ},
        {"scales_differ", test_scales_differ},
        {"kinds_differ", test_kinds_differ},
        {"abort_names_reason_then_recreate", test_abort_names_reason_then_recreate},
        {"checksum_is_the_bytes", test_checksum_is_the_bytes},
        {NULL, NULL},
    };
    return dcp_add_suite("disagree", tests);
}
