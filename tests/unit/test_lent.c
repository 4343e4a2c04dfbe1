/* A lent NCCL communicator checked against the bootstrap (transport/lent.h), with the facts
 * NCCL would report given by hand: four ranks as threads over a shared-memory bootstrap, one of
 * them lending a communicator that does not fit (too few ranks, another rank order, another
 * GPU, unreadable), or not lending one while the others do. Every rank must get the same
 * DCP_ERR_INVALID_ARG naming the rank and the field; communicators that fit pass. (The GPU
 * suite lends a real one.) */
#include "include/base/error.h"
#include "tests/unit/shm_bootstrap.h"
#include "tests/unit/suites.h"
#include "transport/lent.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define RANKS 4

typedef struct {
    shm_bootstrap_t *bs;
    int32_t rank;
    int lends;
    dcp_lent_comm_t facts;
    int32_t device;
    dcp_status_t st;
    char msg[256];
} lrank_t;

static void *rank_main(void *arg)
{
    lrank_t *l = arg;
    const dcp_bootstrap_t b = shm_bootstrap_rank(l->bs, l->rank);
    l->st = dcp_lent_comm_check(&b, l->lends ? &l->facts : NULL, l->device);
    if (l->st != DCP_OK) dcp_error_save(l->msg, sizeof l->msg);
    return NULL;
}

/* Every rank lends {RANKS, rank, rank % 2} on device rank % 2, then `bad` changes rank
 * `who`'s; every rank must return `want`, with `text` in its message when it fails. */
static void check(int32_t who, void (*bad)(lrank_t *), dcp_status_t want, const char *text)
{
    lrank_t l[RANKS];
    shm_bootstrap_t *bs = shm_bootstrap_create(RANKS, 256);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bs);
    for (int32_t r = 0; r < RANKS; r++)
        l[r] = (lrank_t){bs, r, 1, {RANKS, r, r % 2}, r % 2, DCP_OK, ""};
    if (bad) bad(&l[who]);
    pthread_t t[RANKS];
    for (int32_t r = 0; r < RANKS; r++) pthread_create(&t[r], NULL, rank_main, &l[r]);
    for (int32_t r = 0; r < RANKS; r++) pthread_join(t[r], NULL);
    for (int32_t r = 0; r < RANKS; r++) {
        CU_ASSERT_EQUAL(l[r].st, want);
        if (want != DCP_OK && !strstr(l[r].msg, text)) {
            fprintf(stderr, "lent: rank %d: '%s' lacks '%s'\n", r, l[r].msg, text);
            CU_FAIL("the refusal does not name the rank and the field");
        }
    }
    shm_bootstrap_destroy(bs);
}

static void too_few(lrank_t *l)
{
    l->facts.count = 3;
}
static void other_order(lrank_t *l)
{
    l->facts.rank = 3;
}
static void other_gpu(lrank_t *l)
{
    l->facts.device = 1 - l->device;
}
static void unreadable(lrank_t *l)
{
    l->facts = (dcp_lent_comm_t){-1, -1, -1};
}
static void lends_none(lrank_t *l)
{
    l->lends = 0;
}

static void test_fitting_communicators_pass(void)
{
    check(0, NULL, DCP_OK, NULL);
}

static void test_size_refused(void)
{
    check(2, too_few, DCP_ERR_INVALID_ARG,
          "config.nccl_comm of rank 2 has 3 ranks, the bootstrap 4");
}

static void test_rank_order_refused(void)
{
    check(1, other_order, DCP_ERR_INVALID_ARG, "config.nccl_comm of rank 1 gives it rank 3");
}

static void test_device_refused(void)
{
    check(3, other_gpu, DCP_ERR_INVALID_ARG,
          "config.nccl_comm of rank 3 is on GPU 0, the rank "
          "computes on GPU 1");
}

static void test_unreadable_refused(void)
{
    check(2, unreadable, DCP_ERR_INVALID_ARG, "config.nccl_comm of rank 2: NCCL cannot read it");
}

static void test_some_ranks_lend_none(void)
{
    check(2, lends_none, DCP_ERR_INVALID_ARG, "set on rank 0 but not on rank 2");
    check(0, lends_none, DCP_ERR_INVALID_ARG, "set on rank 1 but not on rank 0");
}

int dcp_suite_lent(void)
{
    static const dcp_test_t tests[] = {
        {"fitting_communicators_pass", test_fitting_communicators_pass},
        {"size_refused", test_size_refused},
        {"rank_order_refused", test_rank_order_refused},
        {"device_refused", test_device_refused},
        {"unreadable_refused", test_unreadable_refused},
        {"some_ranks_lend_none", test_some_ranks_lend_none},
        {NULL, NULL},
    };
    return dcp_add_suite("lent", tests);
}
