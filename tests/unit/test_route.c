/* The routing engine over threads: 4 in-process ranks on two "nodes" ({0, 1}, {2, 3}), the
 * in-process engine of one hub for same-node peers and a fake second engine (its own hub,
 * counting what it is given, able to refuse a peer) for the others. Each launch must be
 * split by peer, the bytes must arrive, waits must span both engines, an abort must reach
 * the waits of both, and errors must name the engine, its link class and the peer. */
#include "include/base/error.h"
#include "tests/unit/suites.h"
#include "transport/inproc.h"
#include "transport/route.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define N     4
#define WORDS 512

/* ---- the fake engine: forwards to an in-process engine, counts ops, refuses a peer ---- */

typedef struct {
    dcp_engine_t base;
    dcp_engine_t *inner;
    int64_t ops;         /* ops launched through it */
    int32_t refuse_peer; /* launch fails naming this peer; -1: none */
} fake_engine_t;

static dcp_engine_t *inner(dcp_engine_t *e)
{
    return ((fake_engine_t *)e)->inner;
}

static dcp_status_t fake_register(dcp_engine_t *e, void *p, size_t b)
{
    return inner(e)->ops->mem_register(inner(e), p, b);
}
static void fake_deregister(dcp_engine_t *e, void *p)
{
    inner(e)->ops->mem_deregister(inner(e), p);
}
static dcp_status_t fake_launch(dcp_engine_t *e, const dcp_xfer_op_t *ops, int64_t n,
                                dcp_xfer_req_t **req_out)
{
    fake_engine_t *f = (fake_engine_t *)e;
    for (int64_t k = 0; k < n; k++)
        if (ops[k].peer == f->refuse_peer)
            return dcp_set_error(DCP_ERR_PEER, "fake: no path from rank %d to rank %d", e->rank,
                                 ops[k].peer);
    f->ops += n;
    return f->inner->ops->launch(f->inner, ops, n, req_out);
}
static dcp_status_t fake_test(dcp_engine_t *e, dcp_xfer_req_t *r, int *done)
{
    return inner(e)->ops->test(inner(e), r, done);
}
static dcp_status_t fake_wait(dcp_engine_t *e, dcp_xfer_req_t *r, double t, void *s)
{
    return inner(e)->ops->wait(inner(e), r, t, s);
}
static void fake_cancel(dcp_engine_t *e, dcp_xfer_req_t *r)
{
    inner(e)->ops->cancel(inner(e), r);
}
static void fake_abort(dcp_engine_t *e, const char *reason)
{
    inner(e)->ops->abort(inner(e), reason);
}
static dcp_status_t fake_health(dcp_engine_t *e)
{
    return inner(e)->ops->health(inner(e));
}
static void fake_destroy(dcp_engine_t *e)
{
    dcp_engine_destroy(inner(e));
    free(e);
}

static const dcp_engine_ops_t fake_ops = {"fake",      fake_register, fake_deregister, fake_launch,
                                          fake_test,   fake_wait,     fake_cancel,     fake_abort,
                                          fake_health, fake_destroy};

static dcp_engine_t *fake_create(dcp_inproc_hub_t *hub, int32_t rank)
{
    fake_engine_t *f = calloc(1, sizeof *f);
    if (!f || dcp_inproc_engine_create(hub, rank, &f->inner) != DCP_OK) {
        free(f);
        return NULL;
    }
    f->base = (dcp_engine_t){&fake_ops, rank, N, 0, 0, 1};
    f->refuse_peer = -1;
    return &f->base;
}

/* ---- a job of N ranks ------------------------------------------------------------------ */

typedef struct {
    dcp_inproc_hub_t *intra, *inter;
} hubs_t;

static const char *const labels[2] = {"intra-node links", "inter-node links"};

static int node_of(int32_t r)
{
    return r / 2;
}

/* Rank r's routing engine; *fake_out: its inter-node engine. */
static dcp_engine_t *route_create(const hubs_t *h, int32_t r, fake_engine_t **fake_out)
{
    dcp_engine_t *engines[2] = {NULL, fake_create(h->inter, r)};
    if (!engines[1] || dcp_inproc_engine_create(h->intra, r, &engines[0]) != DCP_OK) {
        dcp_engine_destroy(engines[1]);
        return NULL;
    }
    uint8_t of[N];
    for (int32_t p = 0; p < N; p++) of[p] = node_of(p) != node_of(r);
    dcp_engine_t *e = NULL;
    if (dcp_route_engine_create(r, N, 2, engines, labels, of, NULL, &e) != DCP_OK) return NULL;
    *fake_out = (fake_engine_t *)engines[1];
    return e;
}

typedef struct {
    const hubs_t *hubs;
    int32_t rank;
    int abort_rank; /* this rank aborts instead of posting; -1: none */
    int32_t send[N][WORDS], recv[N][WORDS];
    int64_t fake_ops;
    dcp_status_t st;
    char err[512];
} rank_t;

static void *run_rank(void *arg)
{
    rank_t *a = arg;
    fake_engine_t *fake = NULL;
    dcp_engine_t *e = route_create(a->hubs, a->rank, &fake);
    if (!e) {
        a->st = DCP_ERR_INTERNAL;
        return NULL;
    }
    dcp_xfer_op_t ops[2 * N];
    int n = 0;
    for (int32_t p = 0; p < N; p++) {
        if (p == a->rank) continue;
        for (int w = 0; w < WORDS; w++) a->send[p][w] = a->rank * 1000000 + p * 1000 + w;
        ops[n++] = (dcp_xfer_op_t){
            p, 1, (uint64_t)(a->rank * N + p), a->send[p], sizeof a->send[p], NULL, NULL};
        ops[n++] = (dcp_xfer_op_t){
            p, 0, (uint64_t)(p * N + a->rank), a->recv[p], sizeof a->recv[p], NULL, NULL};
    }
    if (a->rank == a->abort_rank) {
        e->ops->abort(e, "test abort");
        a->st = DCP_OK;
    } else {
        dcp_xfer_req_t *req = NULL;
        a->st = e->ops->launch(e, ops, n, &req);
        if (a->st == DCP_OK) a->st = e->ops->wait(e, req, 10.0, NULL);
        if (a->st != DCP_OK) {
            dcp_error_save(a->err, sizeof a->err);
            e->ops->cancel(e, req);
        }
    }
    a->fake_ops = fake->ops;
    dcp_engine_destroy(e);
    return NULL;
}

static void run_job(int abort_rank, rank_t *a)
{
    hubs_t h = {NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(N, &h.intra), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(N, &h.inter), DCP_OK);
    pthread_t t[N];
    for (int32_t r = 0; r < N; r++) {
        a[r].hubs = &h;
        a[r].rank = r;
        a[r].abort_rank = abort_rank;
        pthread_create(&t[r], NULL, run_rank, &a[r]);
    }
    for (int32_t r = 0; r < N; r++) pthread_join(t[r], NULL);
    dcp_inproc_hub_destroy(h.intra);
    dcp_inproc_hub_destroy(h.inter);
}

static void test_launch_split_by_peer(void)
{
    rank_t *a = calloc(N, sizeof *a);
    run_job(-1, a);
    for (int32_t r = 0; r < N; r++) {
        CU_ASSERT_EQUAL(a[r].st, DCP_OK);
        /* the two peers on the other node, a send and a receive each, went to the fake */
        CU_ASSERT_EQUAL(a[r].fake_ops, 4);
        for (int32_t p = 0; p < N; p++)
            for (int w = 0; p != r && w < WORDS; w++)
                if (a[r].recv[p][w] != p * 1000000 + r * 1000 + w) {
                    CU_FAIL("a block arrived wrong");
                    p = N;
                    break;
                }
    }
    free(a);
}

static void test_abort_ends_waits_on_every_engine(void)
{
    rank_t *a = calloc(N, sizeof *a);
    const double start = dcp_now();
    run_job(3, a);
    CU_ASSERT(dcp_now() - start < 5.0); /* not the 10 s timeout */
    for (int32_t r = 0; r < 3; r++) {
        CU_ASSERT_EQUAL(a[r].st, DCP_ERR_PEER);
        if (!strstr(a[r].err, "rank 3 failed") && !strstr(a[r].err, "rank 3 of the group failed"))
            CU_FAIL(a[r].err);
        /* the engine and its link class are named */
        CU_ASSERT(strstr(a[r].err, "inproc engine (intra-node links") ||
                  strstr(a[r].err, "fake engine (inter-node links"));
    }
    free(a);
}

/* One rank alone: engines on hubs nobody else joins. */
static dcp_engine_t *lone_route(hubs_t *h, fake_engine_t **fake)
{
    CU_ASSERT_EQUAL(dcp_inproc_hub_create(N, &h->intra), DCP_OK);
    CU_ASSERT_EQUAL(dcp_inproc_hub_create(N, &h->inter), DCP_OK);
    return route_create(h, 0, fake);
}

static void lone_destroy(dcp_engine_t *e, hubs_t *h)
{
    dcp_engine_destroy(e);
    dcp_inproc_hub_destroy(h->intra);
    dcp_inproc_hub_destroy(h->inter);
}

static void test_launch_error_names_engine_and_peer(void)
{
    hubs_t h;
    fake_engine_t *fake = NULL;
    dcp_engine_t *e = lone_route(&h, &fake);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    fake->refuse_peer = 2;
    int32_t x[4] = {0};
    const dcp_xfer_op_t ops[2] = {{1, 0, 7, &x[0], 8, NULL, NULL}, {2, 1, 8, &x[2], 8, NULL, NULL}};
    dcp_xfer_req_t *req = NULL;
    CU_ASSERT_EQUAL(e->ops->launch(e, ops, 2, &req), DCP_ERR_PEER);
    CU_ASSERT_PTR_NULL(req);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "fake engine (inter-node links of rank 0)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "to rank 2"));
    /* the intra-node part was withdrawn: a peer posting it now finds nothing to match */
    const dcp_xfer_op_t bad = {0, 1, 9, x, 8, NULL, NULL};
    CU_ASSERT_EQUAL(e->ops->launch(e, &bad, 1, &req), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "peer 0"));
    lone_destroy(e, &h);
}

static void test_timeout_names_engine(void)
{
    hubs_t h;
    fake_engine_t *fake = NULL;
    dcp_engine_t *e = lone_route(&h, &fake);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int32_t x[4] = {0};
    const dcp_xfer_op_t ops[2] = {{1, 0, 7, &x[0], 8, NULL, NULL}, {3, 0, 8, &x[2], 8, NULL, NULL}};
    dcp_xfer_req_t *req = NULL;
    CU_ASSERT_EQUAL_FATAL(e->ops->launch(e, ops, 2, &req), DCP_OK);
    int done = 1;
    CU_ASSERT_EQUAL(e->ops->test(e, req, &done), DCP_OK);
    CU_ASSERT_EQUAL(done, 0);
    const double start = dcp_now();
    CU_ASSERT_EQUAL(e->ops->wait(e, req, 0.2, NULL), DCP_ERR_TIMEOUT);
    CU_ASSERT(dcp_now() - start < 2.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), " engine ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "links of rank 0)"));
    e->ops->cancel(e, req);
    lone_destroy(e, &h);
}

static void test_bad_arguments_refused(void)
{
    dcp_inproc_hub_t *hub = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(N, &hub), DCP_OK);
    dcp_engine_t *engines[2] = {NULL, NULL}, *e = NULL;
    CU_ASSERT_EQUAL(dcp_inproc_engine_create(hub, 0, &engines[0]), DCP_OK);
    CU_ASSERT_EQUAL(dcp_inproc_engine_create(hub, 1, &engines[1]), DCP_OK);
    const uint8_t of[N] = {0, 0, 1, 1};
    /* engine 1 serves rank 1, not rank 0: refused, and both engines are destroyed */
    CU_ASSERT_EQUAL(dcp_route_engine_create(0, N, 2, engines, labels, of, NULL, &e),
                    DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "serves rank 1 of 4, not 0 of 4"));
    CU_ASSERT_PTR_NULL(e);
    CU_ASSERT_EQUAL(dcp_inproc_engine_create(hub, 0, &engines[0]), DCP_OK);
    const uint8_t far[N] = {0, 0, 5, 0};
    CU_ASSERT_EQUAL(dcp_route_engine_create(0, N, 1, engines, labels, far, NULL, &e),
                    DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "peer 2 goes to engine 5 of 1"));
    dcp_inproc_hub_destroy(hub);
}

int dcp_suite_route(void)
{
    static const dcp_test_t tests[] = {
        {"launch_split_by_peer", test_launch_split_by_peer},
        {"abort_ends_waits_on_every_engine", test_abort_ends_waits_on_every_engine},
        {"launch_error_names_engine_and_peer", test_launch_error_names_engine_and_peer},
        {"timeout_names_engine", test_timeout_names_engine},
        {"bad_arguments_refused", test_bad_arguments_refused},
        {NULL, NULL},
    };
    return dcp_add_suite("route", tests);
}
