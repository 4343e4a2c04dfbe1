/* The staging engine with host memory standing in for device memory: two in-process ranks,
 * each a staging engine over an in-process engine, the stager copying with memcpy and
 * counting. Blocks must arrive, every byte must pass through the stager (out of the
 * "device" before a send, into it after a receive), host buffers must be reused across
 * launches, and a wait whose peer never posts must time out and cancel cleanly. */
#include "include/base/error.h"
#include "tests/unit/suites.h"
#include "transport/inproc.h"
#include "transport/staged.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define WORDS 4096

typedef struct {
    int64_t copied, copies, allocs, syncs;
} counts_t;

static void *count_alloc(void *user, size_t bytes)
{
    ((counts_t *)user)->allocs++;
    return malloc(bytes);
}
static void count_free(void *user, void *ptr)
{
    (void)user;
    free(ptr);
}
static dcp_status_t count_copy(void *user, void *dst, const void *src, size_t bytes)
{
    counts_t *c = user;
    c->copied += (int64_t)bytes;
    c->copies++;
    memcpy(dst, src, bytes);
    return DCP_OK;
}
static dcp_status_t count_sync(void *user)
{
    ((counts_t *)user)->syncs++;
    return DCP_OK;
}

static dcp_engine_t *staged_create(dcp_inproc_hub_t *hub, int32_t rank, counts_t *c)
{
    dcp_engine_t *inner = NULL, *e = NULL;
    if (dcp_inproc_engine_create(hub, rank, &inner) != DCP_OK) return NULL;
    const dcp_stager_t st = {count_alloc, count_free, count_copy, count_sync, NULL, c};
    return dcp_staged_engine_create(inner, &st, &e) == DCP_OK ? e : NULL;
}

typedef struct {
    dcp_inproc_hub_t *hub;
    int32_t rank;
    int32_t send[2][WORDS], recv[2][WORDS]; /* the "device" buffers: two blocks each way */
    counts_t c;
    dcp_status_t st;
} rank_t;

static void *run_rank(void *arg)
{
    rank_t *a = arg;
    dcp_engine_t *e = staged_create(a->hub, a->rank, &a->c);
    a->st = e ? DCP_OK : DCP_ERR_INTERNAL;
    const int32_t peer = 1 - a->rank;
    for (int round = 0; round < 3 && a->st == DCP_OK; round++) {
        for (int b = 0; b < 2; b++)
            for (int w = 0; w < WORDS; w++)
                a->send[b][w] = round * 100000000 + a->rank * 1000000 + b * 10000 + w;
        const dcp_xfer_op_t ops[4] = {
            {peer, 1, (uint64_t)(a->rank * 2), a->send[0], sizeof a->send[0], NULL, NULL},
            {peer, 1, (uint64_t)(a->rank * 2 + 1), a->send[1], sizeof a->send[1], NULL, NULL},
            {peer, 0, (uint64_t)(peer * 2), a->recv[0], sizeof a->recv[0], NULL, NULL},
            {peer, 0, (uint64_t)(peer * 2 + 1), a->recv[1], sizeof a->recv[1], NULL, NULL},
        };
        dcp_xfer_req_t *req = NULL;
        a->st = e->ops->launch(e, ops, 4, &req);
        if (a->st == DCP_OK) a->st = e->ops->wait(e, req, 10.0, NULL);
        for (int b = 0; b < 2 && a->st == DCP_OK; b++)
            for (int w = 0; w < WORDS; w++)
                if (a->recv[b][w] != round * 100000000 + peer * 1000000 + b * 10000 + w) {
                    a->st = DCP_ERR_INTERNAL;
                    break;
                }
    }
    dcp_engine_destroy(e);
    return NULL;
}

static void test_blocks_pass_through_host_buffers(void)
{
    dcp_inproc_hub_t *hub = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
    rank_t *a = calloc(2, sizeof *a);
    pthread_t t[2];
    for (int32_t r = 0; r < 2; r++) {
        a[r].hub = hub;
        a[r].rank = r;
        pthread_create(&t[r], NULL, run_rank, &a[r]);
    }
    for (int32_t r = 0; r < 2; r++) pthread_join(t[r], NULL);
    for (int32_t r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(a[r].st, DCP_OK);
        /* 3 rounds x 4 blocks, each copied once: out of the device or into it */
        CU_ASSERT_EQUAL(a[r].c.copies, 12);
        CU_ASSERT_EQUAL(a[r].c.copied, 12 * (int64_t)sizeof a[r].send[0]);
        /* one host buffer, reused by every round */
        CU_ASSERT_EQUAL(a[r].c.allocs, 1);
        CU_ASSERT(a[r].c.syncs >= 6); /* the sends' copies, then the receives', each round */
    }
    free(a);
    dcp_inproc_hub_destroy(hub);
}

static void test_timeout_then_cancel(void)
{
    dcp_inproc_hub_t *hub = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
    counts_t c = {0};
    dcp_engine_t *e = staged_create(hub, 0, &c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    int32_t x[16] = {0};
    const dcp_xfer_op_t op = {1, 0, 5, x, sizeof x, NULL, NULL};
    dcp_xfer_req_t *req = NULL;
    CU_ASSERT_EQUAL_FATAL(e->ops->launch(e, &op, 1, &req), DCP_OK);
    CU_ASSERT_EQUAL(e->ops->wait(e, req, 0.1, NULL), DCP_ERR_TIMEOUT);
    e->ops->cancel(e, req);
    CU_ASSERT_EQUAL(c.copies, 0); /* nothing arrived, nothing copied into the device */
    dcp_engine_destroy(e);
    dcp_inproc_hub_destroy(hub);
}

static void test_bad_arguments_refused(void)
{
    dcp_engine_t *e = NULL;
    const dcp_stager_t none = {0};
    CU_ASSERT_EQUAL(dcp_staged_engine_create(NULL, &none, &e), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "every stager entry"));
    CU_ASSERT_PTR_NULL(e);
}

int dcp_suite_staged(void)
{
    static const dcp_test_t tests[] = {
        {"blocks_pass_through_host_buffers", test_blocks_pass_through_host_buffers},
        {"timeout_then_cancel", test_timeout_then_cancel},
        {"bad_arguments_refused", test_bad_arguments_refused},
        {NULL, NULL},
    };
    return dcp_add_suite("staged", tests);
}
