/* The in-process engine: matching in either order, real copies, size mismatches, timeouts,
 * peer failure, cancellation. */
#include "include/base/error.h"
#include "kernels/cuda/device.h"
#include "transport/inproc.h"
#include "transport/nccl.h"
#include "transport/peers.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N     4
#define WORDS 1000

typedef struct {
    dcp_inproc_hub_t *hub;
    int32_t rank;
    int reverse; /* post in the opposite order */
    int32_t send[N][WORDS], recv[N][WORDS];
    dcp_status_t st;
} all2all_t;

static void *all2all_rank(void *arg)
{
    all2all_t *a = arg;
    dcp_engine_t *e = NULL;
    a->st = dcp_inproc_engine_create(a->hub, a->rank, &e);
    if (a->st != DCP_OK) return NULL;
    dcp_xfer_op_t ops[2 * N];
    int n = 0;
    for (int k = 0; k < N; k++) {
        const int p = a->reverse ? N - 1 - k : k;
        if (p == a->rank) continue;
        for (int w = 0; w < WORDS; w++) a->send[p][w] = a->rank * 1000000 + p * 1000 + w;
        ops[n++] = (dcp_xfer_op_t){
            p, 1, (uint64_t)(a->rank * N + p), a->send[p], sizeof a->send[p], NULL, NULL};
        ops[n++] = (dcp_xfer_op_t){
            p, 0, (uint64_t)(p * N + a->rank), a->recv[p], sizeof a->recv[p], NULL, NULL};
    }
    dcp_xfer_req_t *req = NULL;
    a->st = e->ops->launch(e, ops, n, &req);
    if (a->st == DCP_OK) a->st = e->ops->wait(e, req, 10.0, NULL);
    dcp_engine_destroy(e);
    return NULL;
}

static void test_all_to_all_copies(void)
{
    for (int round = 0; round < 4; round++) {
        dcp_inproc_hub_t *hub = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(N, &hub), DCP_OK);
        all2all_t *a = calloc(N, sizeof *a);
        pthread_t t[N];
        for (int r = 0; r < N; r++) {
            a[r].hub = hub;
            a[r].rank = r;
            a[r].reverse = (r + round) % 2;
            pthread_create(&t[r], NULL, all2all_rank, &a[r]);
        }
        for (int r = 0; r < N; r++) pthread_join(t[r], NULL);
        for (int r = 0; r < N; r++) {
            CU_ASSERT_EQUAL(a[r].st, DCP_OK);
            for (int p = 0; p < N; p++)
                if (p != r)
                    for (int w = 0; w < WORDS; w++)
                        CU_ASSERT_EQUAL_FATAL(a[r].recv[p][w], p * 1000000 + r * 1000 + w);
        }
        free(a);
        dcp_inproc_hub_destroy(hub);
    }
}

typedef struct {
    dcp_engine_t *e;
    dcp_xfer_op_t op;
    double timeout;
    dcp_status_t st;
} one_t;

static void *one_op(void *arg)
{
    one_t *o = arg;
    dcp_xfer_req_t *req = NULL;
    o->st = o->e->ops->launch(o->e, &o->op, 1, &req);
    if (o->st == DCP_OK) {
        o->st = o->e->ops->wait(o->e, req, o->timeout, NULL);
        if (o->st != DCP_OK) o->e->ops->cancel(o->e, req);
    }
    return NULL;
}

static void test_size_mismatch_reported(void)
{
    dcp_inproc_hub_t *hub = NULL;
    dcp_engine_t *e0 = NULL, *e1 = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
    dcp_inproc_engine_create(hub, 0, &e0);
    dcp_inproc_engine_create(hub, 1, &e1);
    char a[16] = "abc", b[8];
    one_t s = {e0, {1, 1, 7, a, 16, NULL, NULL}, 5.0, DCP_OK},
          r = {e1, {0, 0, 7, b, 8, NULL, NULL}, 5.0, DCP_OK};
    pthread_t t;
    pthread_create(&t, NULL, one_op, &r);
    one_op(&s);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(s.st, DCP_ERR_INTERNAL);
    CU_ASSERT_EQUAL(r.st, DCP_ERR_INTERNAL);
    dcp_engine_destroy(e0);
    dcp_engine_destroy(e1);
    dcp_inproc_hub_destroy(hub);
}

typedef struct {
    size_t bytes;
    int calls, fail, same_device;
    const void *send_done, *recv_done;
} copy_count_t;

static dcp_status_t counting_copy(void *user, const dcp_xfer_op_t *send, const dcp_xfer_op_t *recv,
                                  int same_device)
{
    copy_count_t *c = user;
    c->calls++;
    c->bytes += send->bytes;
    c->same_device = same_device;
    c->send_done = send->done;
    c->recv_done = recv->done;
    if (c->fail) return dcp_set_error(DCP_ERR_SYSTEM, "test copy refused");
    memcpy(recv->ptr, send->ptr, send->bytes);
    return DCP_OK;
}

static dcp_status_t counting_order(void *user, void *stream, void *done)
{
    (void)user, (void)stream, (void)done;
    return DCP_OK;
}

/* A rank's mover moves the bytes of the matches its thread completes (GPU ranks queue
 * device copies this way) and sees both sides' ops with their events; a failed copy fails
 * both sides. */
static void test_mover(void)
{
    for (int fail = 0; fail < 2; fail++) {
        dcp_inproc_hub_t *hub = NULL;
        dcp_engine_t *e0 = NULL, *e1 = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
        dcp_inproc_engine_create(hub, 0, &e0);
        dcp_inproc_engine_create(hub, 1, &e1);
        copy_count_t c0 = {.fail = fail}, c1 = {.fail = fail};
        const dcp_inproc_mover_t m0 = {counting_copy, counting_order, &c0},
                                 m1 = {counting_copy, counting_order, &c1};
        dcp_inproc_engine_set_mover(e0, &m0, 0);
        dcp_inproc_engine_set_mover(e1, &m1, 0);
        CU_ASSERT_EQUAL(e0->stream_ordered, 1);
        char a[12] = "hello hook!", b[12] = {0};
        int sdone, rdone; /* stand-ins for the ranks' events */
        one_t r = {e1, {0, 0, 9, b, 12, NULL, &rdone}, 5.0, DCP_OK},
              s = {e0, {1, 1, 9, a, 12, NULL, &sdone}, 5.0, DCP_OK};
        pthread_t t;
        pthread_create(&t, NULL, one_op, &r);
        one_op(&s);
        pthread_join(t, NULL);
        CU_ASSERT_EQUAL(c0.calls + c1.calls, 1); /* whichever side matched second copied */
        CU_ASSERT_EQUAL(c0.bytes + c1.bytes, 12);
        const copy_count_t *c = c0.calls ? &c0 : &c1;
        CU_ASSERT_EQUAL(c->same_device, 1);
        CU_ASSERT_PTR_EQUAL(c->send_done, &sdone);
        CU_ASSERT_PTR_EQUAL(c->recv_done, &rdone);
        CU_ASSERT_EQUAL(s.st, fail ? DCP_ERR_SYSTEM : DCP_OK);
        CU_ASSERT_EQUAL(r.st, fail ? DCP_ERR_SYSTEM : DCP_OK);
        if (!fail) CU_ASSERT_STRING_EQUAL(b, "hello hook!");
        dcp_engine_destroy(e0);
        dcp_engine_destroy(e1);
        dcp_inproc_hub_destroy(hub);
    }
}

/* A timeout too large for a clock (9.3e18 s) is clamped, not wrapped into the past: the
 * pair completes instead of timing out at once. */
static void test_huge_timeout_clamped(void)
{
    dcp_inproc_hub_t *hub = NULL;
    dcp_engine_t *e0 = NULL, *e1 = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
    dcp_inproc_engine_create(hub, 0, &e0);
    dcp_inproc_engine_create(hub, 1, &e1);
    char a[4] = "abc", b[4] = {0};
    one_t r = {e1, {0, 0, 4, b, 4, NULL, NULL}, 9.3e18, DCP_OK},
          s = {e0, {1, 1, 4, a, 4, NULL, NULL}, 9.3e18, DCP_OK};
    pthread_t t;
    pthread_create(&t, NULL, one_op, &r);
    one_op(&s);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(s.st, DCP_OK);
    CU_ASSERT_EQUAL(r.st, DCP_OK);
    CU_ASSERT_STRING_EQUAL(b, "abc");
    dcp_engine_destroy(e0);
    dcp_engine_destroy(e1);
    dcp_inproc_hub_destroy(hub);
}

/* A receive nobody answers ends in DCP_ERR_TIMEOUT; cancelling it withdraws it, so a late
 * send does not land in freed memory (ASan would see it) and itself times out. */
static void test_timeout_and_cancel(void)
{
    dcp_inproc_hub_t *hub = NULL;
    dcp_engine_t *e0 = NULL, *e1 = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
    dcp_inproc_engine_create(hub, 0, &e0);
    dcp_inproc_engine_create(hub, 1, &e1);
    char *buf = malloc(64);
    one_t r = {e0, {1, 0, 9, buf, 64, NULL, NULL}, 0.2, DCP_OK};
    one_op(&r);
    CU_ASSERT_EQUAL(r.st, DCP_ERR_TIMEOUT);
    free(buf);
    char src[64] = {1};
    one_t s = {e1, {0, 1, 9, src, 64, NULL, NULL}, 0.2, DCP_OK};
    one_op(&s);
    CU_ASSERT_EQUAL(s.st, DCP_ERR_TIMEOUT);
    dcp_engine_destroy(e0);
    dcp_engine_destroy(e1);
    dcp_inproc_hub_destroy(hub);
}

static void test_peer_failure_ends_waits(void)
{
    dcp_inproc_hub_t *hub = NULL;
    dcp_engine_t *e0 = NULL, *e1 = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
    dcp_inproc_engine_create(hub, 0, &e0);
    dcp_inproc_engine_create(hub, 1, &e1);
    CU_ASSERT_EQUAL(e0->ops->health(e0), DCP_OK);
    char buf[8];
    one_t r = {e0, {1, 0, 3, buf, 8, NULL, NULL}, 30.0, DCP_OK};
    pthread_t t;
    pthread_create(&t, NULL, one_op, &r);
    e1->ops->abort(e1, "test abort"); /* the waiter ends long before its 30 s timeout */
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(r.st, DCP_ERR_PEER);
    CU_ASSERT_EQUAL(e0->ops->health(e0), DCP_ERR_PEER);
    dcp_engine_destroy(e0);
    dcp_engine_destroy(e1);
    dcp_inproc_hub_destroy(hub);
}

static void test_bad_peer_rejected(void)
{
    dcp_inproc_hub_t *hub = NULL;
    dcp_engine_t *e0 = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_inproc_hub_create(2, &hub), DCP_OK);
    CU_ASSERT_EQUAL(dcp_inproc_engine_create(hub, 2, &e0), DCP_ERR_INVALID_ARG);
    dcp_inproc_engine_create(hub, 0, &e0);
    char buf[8];
    const dcp_xfer_op_t self = {0, 1, 1, buf, 8, NULL, NULL}, far = {5, 0, 1, buf, 8, NULL, NULL};
    dcp_xfer_req_t *req = NULL;
    CU_ASSERT_EQUAL(e0->ops->launch(e0, &self, 1, &req), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(e0->ops->launch(e0, &far, 1, &req), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(req);
    dcp_engine_destroy(e0);
    dcp_inproc_hub_destroy(hub);
    CU_ASSERT_EQUAL(dcp_inproc_hub_create(0, &hub), DCP_ERR_INVALID_ARG);
}

/* Without a GPU (or without CUDA in the build) the NCCL engine says so; bad arguments are
 * refused before anything is loaded. */
static dcp_status_t copy_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    (void)state;
    memcpy(recv, send, bytes); /* one rank */
    return DCP_OK;
}

static void test_nccl_engine_without_gpu(void)
{
    dcp_engine_t *e = NULL;
    const dcp_bootstrap_t none = {0, 1, NULL, NULL, NULL, 0.0},
                          one = {0, 1, copy_allgather, NULL, NULL, 0.0};
    CU_ASSERT_EQUAL(dcp_nccl_engine_create(&none, 0, NULL, NULL, &e), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_nccl_engine_create(&one, -1, NULL, NULL, &e),
                    dcp_cuda_device_count() > 0 ? DCP_ERR_INVALID_ARG : DCP_ERR_UNSUPPORTED);
    if (dcp_cuda_device_count() == 0) {
        CU_ASSERT_EQUAL(dcp_nccl_engine_create(&one, 0, NULL, NULL, &e), DCP_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "CUDA"));
    }
    CU_ASSERT_PTR_NULL(e);
}

/* A node is its host name and its boot id: two records with one host name and different boot
 * ids (containers of two machines) are two nodes, and so are two host names on one boot (the
 * emulated hosts of tests/cluster). */
static void test_node_is_host_and_boot_id(void)
{
    char path[2][64];
    const char *ids[2] = {"5d1c5f2e-0000-4000-8000-000000000001\n",
                          "5d1c5f2e-0000-4000-8000-000000000002\n"};
    for (int i = 0; i < 2; i++) {
        snprintf(path[i], sizeof path[i], "/tmp/dcp-boot-id-%d-%d", (int)getpid(), i);
        FILE *f = fopen(path[i], "w");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fputs(ids[i], f);
        fclose(f);
    }
    dcp_peer_t peer[3] = {{.pid = 0}};
    dcp_peer_identify(path[0], &peer[0]);
    dcp_peer_identify(path[1], &peer[1]);
    dcp_peer_identify(path[0], &peer[2]);
    CU_ASSERT_STRING_EQUAL(peer[0].boot, "5d1c5f2e-0000-4000-8000-000000000001");
    CU_ASSERT_STRING_EQUAL(peer[0].host, peer[1].host);
    dcp_peer_table_t t = {.rank = 0, .size = 3, .peer = peer};
    CU_ASSERT_FALSE(dcp_peers_same_node(&t, 0, 1)); /* same host name, another boot */
    CU_ASSERT_TRUE(dcp_peers_same_node(&t, 0, 2));
    CU_ASSERT_EQUAL(dcp_peers_link(&t, 0, 1), DCP_LINK_INTER);
    CU_ASSERT_EQUAL(dcp_peers_local_index(&t, 2), 1);
    peer[2].host[0] ^= 1;
    CU_ASSERT_FALSE(dcp_peers_same_node(&t, 0, 2)); /* same boot, another host name */
    /* this machine: the kernel's boot id */
    dcp_peer_t me;
    dcp_peer_identify(NULL, &me);
    CU_ASSERT(strlen(me.boot) > 0);
    for (int i = 0; i < 2; i++) unlink(path[i]);
}

int dcp_suite_transport(void)
{
    static const dcp_test_t tests[] = {
        {"all_to_all_copies", test_all_to_all_copies},
        {"size_mismatch_reported", test_size_mismatch_reported},
        {"mover", test_mover},
        {"huge_timeout_clamped", test_huge_timeout_clamped},
        {"timeout_and_cancel", test_timeout_and_cancel},
        {"peer_failure_ends_waits", test_peer_failure_ends_waits},
        {"bad_peer_rejected", test_bad_peer_rejected},
        {"nccl_engine_without_gpu", test_nccl_engine_without_gpu},
        {"node_is_host_and_boot_id", test_node_is_host_and_boot_id},
        {NULL, NULL},
    };
    return dcp_add_suite("transport", tests);
}
