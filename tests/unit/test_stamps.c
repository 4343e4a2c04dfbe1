/*
 * Call stamps and abort notices whatever engine carries the blocks, and the host
 * synchronisations a call makes. Four in-process ranks whose contexts run over an engine that
 * stands in for NCCL (tests/unit/nccl_like.h: no host-memory stamps, no notices of its own),
 * alone or as the inter-node leg of a routing engine (2 nodes of 2 ranks) whose intra-node leg
 * is the in-process engine ordered by events:
 *  - the stamps travel in the contexts' device memory (the stand-in carries them, and refuses
 *    host ones), and the outputs are those of the same plan on plain in-process ranks;
 *  - ranks that run different plans or calls stop, the ring neighbours of the difference at
 *    once naming both plans, the rest by their timeout;
 *  - a rank that fails its own check, or calls dcp_context_abort, is named with its reason by
 *    the peers it exchanges stamps with, though the engine carries no notice;
 *  - a call over a routing engine whose legs are stream-ordered makes no host
 *    synchronisation, one with a leg that completes on the host makes one before each launch,
 *    and dcp_context_transport_report() names that leg;
 *  - dcp_context_synchronize refuses bad arguments, returns at once on the CPU and reports a
 *    peer's failure.
 */
#include "include/base/error.h"
#include "include/base/test_hook.h"
#include "kernels/device.h"
#include "plugin/context.h"
#include "tests/unit/delay_hook.h"
#include "tests/unit/nccl_like.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"
#include "transport/route.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANKS 4
#define CALLS 3

enum { ALONE, ROUTE_ORDERED, ROUTE_HOST }; /* what carries the blocks */
enum { FWD, BWD, BAD_Q, ABORT, SKIP };     /* what a rank does at a call */

typedef struct {
    int kind;
    dcp_inproc_hub_t *second; /* the stand-in's hub */
} job_t;

/* The in-process leg of a routing job, ordered by events: copies at match time (memcpy on the
 * CPU), nothing to order. */
static dcp_status_t cpu_copy(void *user, const dcp_xfer_op_t *send, const dcp_xfer_op_t *recv,
                             int same_device)
{
    (void)user, (void)same_device;
    return dcp_device_cpu.copy(recv->ptr, send->ptr, send->bytes, NULL);
}

static dcp_status_t cpu_order(void *user, void *stream, void *done)
{
    (void)user, (void)stream, (void)done;
    return DCP_OK;
}

static const char *const labels[2] = {"intra-node links", "inter-node links"};

static dcp_status_t wrap(void *user, int32_t rank, dcp_engine_t *in, dcp_engine_t **out)
{
    const job_t *j = user;
    dcp_engine_t *standin = NULL;
    const dcp_status_t st = t_nccl_like_create(j->second, rank, j->kind != ROUTE_HOST, &standin);
    if (st != DCP_OK || j->kind == ALONE) {
        dcp_engine_destroy(in);
        *out = standin;
        return st;
    }
    const dcp_inproc_mover_t mover = {cpu_copy, cpu_order, NULL};
    dcp_inproc_engine_set_mover(in, &mover, -1);
    dcp_engine_t *legs[2] = {in, standin};
    uint8_t of[RANKS];
    for (int32_t p = 0; p < RANKS; p++) of[p] = p / 2 != rank / 2;
    return dcp_route_engine_create(rank, RANKS, 2, legs, labels, of, NULL, out);
}

typedef struct {
    const job_t *job;
    dcp_group_t *group;
    int32_t rank;
    double timeout_s;
    int calls;
    int action[CALLS];
    const dcp_plan_t *plan[CALLS];
    dcp_status_t st[CALLS], sync_st;
    double secs[CALLS];
    char msg[CALLS][512];
    int64_t syncs[CALLS]; /* host synchronisations during call i */
    float *o;             /* the last forward's output */
    int64_t stamps;       /* call stamps the stand-in carried */
    char report[256];
} srank_t;

/* A deterministic value of element i of tensor t on rank r. */
static float value(int32_t r, int t, int64_t i)
{
    return (float)sin(0.37 * (double)i + 1.3 * t + 0.11 * r);
}

typedef struct {
    float *mem;
    dcp_grad_tensors_t g;
} io_t;

static void io_make(const dcp_plan_t *p, int32_t r, io_t *io)
{
    int64_t n = 0;
    dcp_plan_local_layout(p, r, NULL, 0, NULL, &n);
    const int64_t q = n * 4 * 8, kv = n * 2 * 8;
    io->mem = calloc((size_t)(5 * q + 4 * kv + n * 4 + 16), sizeof *io->mem);
    float *m = io->mem;
    float *qq = m, *k = qq + q, *v = k + kv, *o = v + kv, *lse = o + q, *dout = lse + n * 4,
          *dq = dout + q, *dk = dq + q, *dv = dk + kv;
    for (int64_t i = 0; i < q; i++) qq[i] = value(r, 0, i), dout[i] = value(r, 3, i);
    for (int64_t i = 0; i < kv; i++) k[i] = value(r, 1, i), v[i] = value(r, 2, i);
    io->g = (dcp_grad_tensors_t){{qq, k, v, o, lse, 0.0f}, dout, dq, dk, dv};
}

static void *rank_main(void *arg)
{
    srank_t *d = arg;
    const dcp_context_config_t cfg = {
        .rank = d->rank, .group = d->group, .timeout_s = d->timeout_s};
    dcp_context_t *ctx = NULL;
    job_t *job = (job_t *)d->job;
    if (dcp_context_create_wrapped(&cfg, wrap, job, &ctx) != DCP_OK) {
        dcp_error_save(d->msg[0], sizeof d->msg[0]);
        d->st[0] = DCP_ERR_INTERNAL;
        return NULL;
    }
    snprintf(d->report, sizeof d->report, "%s", dcp_context_transport_report(ctx));
    for (int c = 0; c < d->calls; c++) {
        io_t io;
        io_make(d->plan[c], d->rank, &io);
        const int64_t before = t_counted(DCP_COUNT_HOST_SYNC);
        const double t0 = dcp_now();
        dcp_status_t st = DCP_OK;
        switch (d->action[c]) {
        case FWD:
            st = dcp_forward(ctx, d->plan[c], &io.g.fwd, NULL);
            break;
        case BWD:
            st = dcp_backward(ctx, d->plan[c], &io.g, NULL);
            break;
        case BAD_Q:
            io.g.fwd.q = NULL;
            st = dcp_forward(ctx, d->plan[c], &io.g.fwd, NULL);
            break;
        case ABORT:
            st = dcp_context_abort(ctx, "rank 2's q has 3 heads, plan 4");
            break;
        default:
            break;
        }
        d->secs[c] = dcp_now() - t0;
        d->syncs[c] = t_counted(DCP_COUNT_HOST_SYNC) - before;
        d->st[c] = st;
        if (st != DCP_OK) dcp_error_save(d->msg[c], sizeof d->msg[c]);
        if (d->action[c] == FWD && st == DCP_OK) {
            free(d->o);
            d->o = io.mem; /* O sits at the start of the rest: keep the whole block */
        } else {
            free(io.mem);
        }
        if (st != DCP_OK) break;
    }
    d->sync_st = dcp_context_synchronize(ctx, 0);
    const dcp_engine_t *leg = ctx->engine, *e = NULL;
    const char *label = NULL;
    if (dcp_route_leg(ctx->engine, 1, &e, &label) == 2) leg = e;
    d->stamps = t_nccl_like_stamps(leg);
    dcp_context_destroy(ctx);
    return NULL;
}

static void run(int kind, srank_t *d)
{
    job_t job = {kind, NULL};
    dcp_group_t *group = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(RANKS, &group), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(RANKS, &job.second), DCP_OK);
    pthread_t t[RANKS];
    for (int32_t r = 0; r < RANKS; r++) {
        d[r].job = &job;
        d[r].group = group;
        d[r].rank = r;
        if (!d[r].timeout_s) d[r].timeout_s = 30;
        pthread_create(&t[r], NULL, rank_main, &d[r]);
    }
    for (int32_t r = 0; r < RANKS; r++) pthread_join(t[r], NULL);
    dcp_inproc_hub_destroy(job.second);
    dcp_group_destroy(group);
}

static void ranks_free(srank_t *d)
{
    for (int32_t r = 0; r < RANKS; r++) free(d[r].o);
}

/* A plan of `strategy` (METIS's global one: its candidate of documents packed into nodes may
 * leave ranks that exchange nothing, and these tests need every rank to meet rank 2). */
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
    o.head_blocks = 1;
    o.hierarchy = 0;
    return t_plan_opts(len, 3, m, "2x2", &o);
}

/* Every rank runs forward, backward, forward of one plan: all succeed, the stand-in carried
 * the stamps, the report says where they travel, and O is bit for bit that of the same plan
 * on plain in-process ranks (host-memory stamps). */
static void agree(int kind)
{
    dcp_plan_t *p = plan_with(DCP_STRATEGY_METIS);
    srank_t d[RANKS] = {{0}};
    for (int32_t r = 0; r < RANKS; r++) {
        d[r].calls = CALLS;
        for (int c = 0; c < CALLS; c++) d[r].plan[c] = p, d[r].action[c] = c == 1 ? BWD : FWD;
    }
    run(kind, d);
    io_t io[RANKS];
    dcp_tensors_t plain[RANKS];
    for (int32_t r = 0; r < RANKS; r++) {
        io_make(p, r, &io[r]);
        plain[r] = io[r].g.fwd;
    }
    CU_ASSERT_EQUAL(dcp_forward_inproc(p, plain, 30, NULL), DCP_OK);
    for (int32_t r = 0; r < RANKS; r++) {
        for (int c = 0; c < CALLS; c++) CU_ASSERT_EQUAL(d[r].st[c], DCP_OK);
        if (d[r].st[0] != DCP_OK) fprintf(stderr, "stamps: rank %d: %s\n", r, d[r].msg[0]);
        CU_ASSERT_EQUAL(d[r].sync_st, DCP_OK);
        CU_ASSERT(d[r].stamps > 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(d[r].report, "call stamps and abort notices in device"));
        int64_t n = 0;
        dcp_plan_local_layout(p, r, NULL, 0, NULL, &n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d[r].o);
        const size_t obytes = (size_t)n * 4 * 8 * sizeof(float);
        CU_ASSERT_EQUAL(memcmp(d[r].o + n * 4 * 8 + 2 * n * 2 * 8, plain[r].o, obytes), 0);
        free(io[r].mem);
    }
    ranks_free(d);
    dcp_plan_destroy(p);
}

static void test_agree_over_nccl_like(void)
{
    agree(ALONE);
}

static void test_agree_over_route(void)
{
    agree(ROUTE_ORDERED);
}

/* The ranks that stopped on the check name `what` and both plans; every rank stops within
 * its timeout plus a margin; rank 2's ring neighbours and rank 2 itself before the timeout. */
static void expect_named(const srank_t *d, int kind, int call, const char *what, uint32_t a,
                         uint32_t b)
{
    char pa[16], pb[16];
    snprintf(pa, sizeof pa, "0x%08x", a);
    snprintf(pb, sizeof pb, "0x%08x", b);
    for (int32_t r = 0; r < RANKS; r++) {
        CU_ASSERT_NOT_EQUAL(d[r].st[call], DCP_OK);
        CU_ASSERT(d[r].secs[call] < d[r].timeout_s + 5.0);
        if (r == 0) continue; /* not next to rank 2: its check, or its timeout */
        /* alone, each found it itself; in the route the in-process leg may bring a rank the
         * failure of its node's peer first, with its text */
        if (kind == ALONE || d[r].st[call] != DCP_ERR_PEER)
            CU_ASSERT_EQUAL(d[r].st[call], DCP_ERR_INVALID_ARG);
        CU_ASSERT(d[r].secs[call] < d[r].timeout_s);
        CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[call], what));
        CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[call], pa));
        CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[call], pb));
    }
}

/* Rank 2 planned with another strategy. */
static void test_plans_differ(void)
{
    for (int kind = ALONE; kind <= ROUTE_ORDERED; kind++) {
        dcp_plan_t *a = plan_with(DCP_STRATEGY_LPT), *b = plan_with(DCP_STRATEGY_ZIGZAG);
        uint32_t ca, cb;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(a, &ca), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(b, &cb), DCP_OK);
        srank_t d[RANKS] = {{0}};
        for (int32_t r = 0; r < RANKS; r++)
            d[r] = (srank_t){.calls = 1, .timeout_s = 3, .plan = {r == 2 ? b : a}};
        run(kind, d);
        expect_named(d, kind, 0, "plans differ", ca, cb);
        ranks_free(d);
        dcp_plan_destroy(a);
        dcp_plan_destroy(b);
    }
}

/* Rank 2 runs its backward while the others run the forward. */
static void test_calls_differ(void)
{
    dcp_plan_t *a = plan_with(DCP_STRATEGY_METIS);
    uint32_t ca;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_checksum(a, &ca), DCP_OK);
    srank_t d[RANKS] = {{0}};
    for (int32_t r = 0; r < RANKS; r++)
        d[r] = (srank_t){.calls = 1, .timeout_s = 3, .plan = {a}, .action = {r == 2 ? BWD : FWD}};
    run(ALONE, d);
    expect_named(d, ALONE, 0, "calls differ", ca, ca);
    ranks_free(d);
    dcp_plan_destroy(a);
}

/* After a good call, rank 2 fails at its second: its own check (io.q NULL) or
 * dcp_context_abort. Its ring neighbours (and any peer it exchanges blocks with) stop with
 * DCP_ERR_PEER naming it and its reason, well before their timeout, though the stand-in tells
 * nobody; a later dcp_context_synchronize reports the failure too. */
static void notice(int action, const char *reason)
{
    dcp_plan_t *a = plan_with(DCP_STRATEGY_METIS);
    for (int kind = ALONE; kind <= ROUTE_ORDERED; kind++) {
        srank_t d[RANKS] = {{0}};
        for (int32_t r = 0; r < RANKS; r++)
            d[r] = (srank_t){.calls = 2,
                             .timeout_s = 20,
                             .plan = {a, a},
                             .action = {FWD, r == 2 ? action : FWD}};
        run(kind, d);
        for (int32_t r = 0; r < RANKS; r++) {
            CU_ASSERT_EQUAL(d[r].st[0], DCP_OK);
            if (r == 2) {
                CU_ASSERT_EQUAL(d[r].st[1], action == ABORT ? DCP_OK : DCP_ERR_INVALID_ARG);
                continue;
            }
            CU_ASSERT(d[r].secs[1] < 10.0);
            if (d[r].st[1] != DCP_ERR_PEER)
                fprintf(stderr, "stamps: kind %d rank %d: %s after %.1f s: %s\n", kind, r,
                        dcp_status_string(d[r].st[1]), d[r].secs[1], d[r].msg[1]);
            if (r == 0 && d[r].st[1] == DCP_OK) continue; /* no exchange with rank 2 */
            CU_ASSERT_EQUAL(d[r].st[1], DCP_ERR_PEER);
            /* alone, only the stamps can have told them; in the route the in-process leg may
             * have ("rank 2 of the group failed") */
            CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[1], kind == ALONE ? "rank 2 failed" : "rank 2"));
            CU_ASSERT_PTR_NOT_NULL(strstr(d[r].msg[1], reason));
            CU_ASSERT_EQUAL(d[r].sync_st, DCP_ERR_PEER);
        }
        ranks_free(d);
    }
    dcp_plan_destroy(a);
}

static void test_notice_of_a_failed_check(void)
{
    notice(BAD_Q, "io.q is NULL on rank 2");
}

static void test_notice_of_an_abort(void)
{
    notice(ABORT, "3 heads, plan 4");
}

/* Forward and backward after a warm-up: no host synchronisation where both legs are
 * stream-ordered; one at least before each launch where the inter-node leg completes on the
 * host, which the report names. */
static void test_host_syncs_per_call(void)
{
    dcp_plan_t *p = plan_with(DCP_STRATEGY_METIS);
    for (int kind = ROUTE_ORDERED; kind <= ROUTE_HOST; kind++) {
        srank_t d[RANKS] = {{0}};
        for (int32_t r = 0; r < RANKS; r++) {
            d[r].calls = CALLS;
            for (int c = 0; c < CALLS; c++) d[r].plan[c] = p, d[r].action[c] = c == 2 ? BWD : FWD;
        }
        run(kind, d);
        for (int32_t r = 0; r < RANKS; r++) {
            for (int c = 0; c < CALLS; c++) CU_ASSERT_EQUAL(d[r].st[c], DCP_OK);
            if (kind == ROUTE_ORDERED) {
                CU_ASSERT_EQUAL(d[r].syncs[1], 0);
                CU_ASSERT_EQUAL(d[r].syncs[2], 0);
                CU_ASSERT_PTR_NOT_NULL(strstr(d[r].report, "launches stream-ordered"));
            } else {
                CU_ASSERT(d[r].syncs[1] > 0);
                CU_ASSERT(d[r].syncs[2] > 0);
                CU_ASSERT_PTR_NOT_NULL(strstr(d[r].report, "the host waits for the compute "
                                                           "stream before each launch: "
                                                           "nccl-like (inter-node links)"));
            }
            CU_ASSERT_PTR_NOT_NULL(strstr(d[r].report, "inproc (intra-node links)"));
        }
        ranks_free(d);
    }
    dcp_plan_destroy(p);
}

/* dcp_context_synchronize: bad arguments named, and at once on a CPU context that works. */
static void test_synchronize_arguments(void)
{
    CU_ASSERT_EQUAL(dcp_context_synchronize(NULL, 0), DCP_ERR_INVALID_ARG);
    dcp_group_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(1, &g), DCP_OK);
    const dcp_context_config_t cfg = {.group = g};
    dcp_context_t *ctx = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_context_create(&cfg, &ctx), DCP_OK);
    CU_ASSERT_EQUAL(dcp_context_synchronize(ctx, -1), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "timeout_s = -1"));
    CU_ASSERT_EQUAL(dcp_context_synchronize(ctx, NAN), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_context_synchronize(ctx, INFINITY), DCP_ERR_INVALID_ARG);
    const double t0 = dcp_now();
    CU_ASSERT_EQUAL(dcp_context_synchronize(ctx, 0), DCP_OK);
    CU_ASSERT_EQUAL(dcp_context_synchronize(ctx, 5), DCP_OK);
    CU_ASSERT(dcp_now() - t0 < 1.0);
    /* the report of a plain group: its engine, and stamps in host memory */
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_context_transport_report(ctx), "engine inproc"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_context_transport_report(ctx), "call stamps in host"));
    CU_ASSERT_STRING_EQUAL(dcp_context_transport_report(NULL), "");
    CU_ASSERT_EQUAL(dcp_context_abort(ctx, "done here"), DCP_OK);
    CU_ASSERT_EQUAL(dcp_context_synchronize(ctx, 0), DCP_ERR_PEER);
    dcp_context_destroy(ctx);
    dcp_group_destroy(g);
}

int dcp_suite_stamps(void)
{
    static const dcp_test_t tests[] = {
        {"agree_over_nccl_like", test_agree_over_nccl_like},
        {"agree_over_route", test_agree_over_route},
        {"plans_differ", test_plans_differ},
        {"calls_differ", test_calls_differ},
        {"notice_of_a_failed_check", test_notice_of_a_failed_check},
        {"notice_of_an_abort", test_notice_of_an_abort},
        {"host_syncs_per_call", test_host_syncs_per_call},
        {"synchronize_arguments", test_synchronize_arguments},
        {NULL, NULL},
    };
    return dcp_add_suite("stamps", tests);
}
