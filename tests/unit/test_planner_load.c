/* The planner service under load: 16 threads ask one planner (4 workers, a cache of 4 plans)
 * for plans of 12 batches at once, collecting with wait, with try, or not at all, while the
 * cache evicts; then the planner is destroyed after the last call, with tickets uncollected,
 * queued or being planned (dcp.h allows it once no call overlaps). Every plan collected is
 * byte-identical to serial planning of its batch, and nothing deadlocks (a watchdog ends the
 * program after 10 minutes). make test runs it plain and under ASan; make test-tsan builds the
 * library and this suite alone with ThreadSanitizer (tests/tsan/planner_load_main.c). */
#include "include/base/error.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CLIENTS 16
#define ROUNDS  12
#define BATCHES 12

static const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};

typedef struct {
    int32_t lengths[3];
    dcp_mask_t masks[3];
    dcp_batch_t batch;
    dcp_plan_options_t opts;
    uint8_t *bytes; /* serial planning's */
    size_t size;
} load_batch_t;

typedef struct {
    const load_batch_t *batches;
    dcp_planner_t *planner;
    int32_t id;
    int64_t collected, identical, failed, left, polls;
    char error[256];
} client_t;

static void make_batch(int i, load_batch_t *b)
{
    static const dcp_strategy_t strat[4] = {DCP_STRATEGY_LPT, DCP_STRATEGY_ZIGZAG,
                                            DCP_STRATEGY_RING, DCP_STRATEGY_METIS};
    memset(b, 0, sizeof *b);
    const int32_t n = 1 + i % 3;
    for (int32_t k = 0; k < n; k++) {
        b->lengths[k] = 96 + 61 * ((i * 5 + k * 3) % 7);
        b->masks[k] = (dcp_mask_t){.kind = (dcp_mask_kind_t)((i + k) % 4), .window = 40, .sink = 8};
    }
    b->batch = (dcp_batch_t){.num_seqs = n, .lengths = b->lengths, .masks = b->masks};
    dcp_plan_options_default(&b->opts);
    b->opts.strategy = strat[i % 4];
    b->opts.block_size = 64;
    b->opts.divisions = 1 + i % 3;
    b->opts.metis_tries = 1;
}

static int same_as_serial(const load_batch_t *b, const dcp_plan_t *p)
{
    size_t n = 0;
    if (dcp_plan_serialize(p, NULL, 0, &n) != DCP_OK || n != b->size) return 0;
    uint8_t *buf = malloc(n);
    const int same =
        buf && dcp_plan_serialize(p, buf, n, &n) == DCP_OK && !memcmp(buf, b->bytes, n);
    free(buf);
    return same;
}

/* Round r of a client: batch (id x 7 + r x 5) mod 12, collected with wait, with try, or left
 * uncollected (every sixth request). No CUnit call here: CUnit is not thread-safe. */
static void *client_main(void *arg)
{
    client_t *c = arg;
    for (int32_t r = 0; r < ROUNDS; r++) {
        const load_batch_t *b = &c->batches[(c->id * 7 + r * 5) % BATCHES];
        uint64_t ticket = 0;
        if (dcp_planner_submit(c->planner, &b->batch, &shape, &b->opts, &ticket) != DCP_OK) {
            c->failed++;
            snprintf(c->error, sizeof c->error, "submit: %s", dcp_last_error());
            continue;
        }
        const int how = (c->id + r) % 6;
        if (how == 5) {
            c->left++;
            continue;
        }
        dcp_plan_t *p = NULL;
        dcp_status_t st;
        if (how % 2 == 0) {
            st = dcp_planner_wait(c->planner, ticket, &p);
        } else {
            while ((st = dcp_planner_try(c->planner, ticket, &p)) == DCP_OK && !p) {
                c->polls++;
                const struct timespec ts = {0, 200000};
                nanosleep(&ts, NULL);
            }
        }
        if (r % 4 == 0) {
            dcp_planner_stats_t s;
            if (dcp_planner_stats(c->planner, &s) != DCP_OK) c->failed++;
        }
        if (st != DCP_OK) {
            c->failed++;
            snprintf(c->error, sizeof c->error, "collect: %s", dcp_last_error());
            continue;
        }
        c->collected++;
        c->identical += same_as_serial(b, p);
        dcp_plan_destroy(p);
    }
    return NULL;
}

/* ---- the watchdog: a deadlock ends the program with a message, not a silent hang ------- */

static pthread_mutex_t dog_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dog_cv = PTHREAD_COND_INITIALIZER;
static int dog_done;

static void *watchdog_main(void *arg)
{
    (void)arg;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 600;
    pthread_mutex_lock(&dog_mu);
    int rc = 0;
    while (!dog_done && rc == 0) rc = pthread_cond_timedwait(&dog_cv, &dog_mu, &deadline);
    const int done = dog_done;
    pthread_mutex_unlock(&dog_mu);
    if (!done) {
        fprintf(stderr, "planner_load: no progress in 600 s: deadlock\n");
        _exit(3);
    }
    return NULL;
}

static void test_sixteen_threads(void)
{
    load_batch_t *batches = calloc(BATCHES, sizeof *batches);
    dcp_cluster_t *cluster = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x2", &cluster), DCP_OK);
    for (int i = 0; i < BATCHES; i++) { /* serial planning: the reference bytes */
        make_batch(i, &batches[i]);
        dcp_plan_t *p = NULL;
        CU_ASSERT_EQUAL_FATAL(
            dcp_plan_create(&batches[i].batch, &shape, &batches[i].opts, cluster, &p), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, NULL, 0, &batches[i].size), DCP_OK);
        batches[i].bytes = malloc(batches[i].size);
        CU_ASSERT_EQUAL_FATAL(
            dcp_plan_serialize(p, batches[i].bytes, batches[i].size, &batches[i].size), DCP_OK);
        dcp_plan_destroy(p);
    }
    dog_done = 0;
    pthread_t dog;
    pthread_create(&dog, NULL, watchdog_main, NULL);
    const dcp_planner_config_t cfg = {4, 4, 0};
    dcp_planner_t *planner = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_create(&cfg, cluster, &planner), DCP_OK);
    client_t c[CLIENTS];
    pthread_t tid[CLIENTS];
    for (int32_t i = 0; i < CLIENTS; i++) {
        c[i] = (client_t){batches, planner, i, 0, 0, 0, 0, 0, ""};
        pthread_create(&tid[i], NULL, client_main, &c[i]);
    }
    for (int32_t i = 0; i < CLIENTS; i++) pthread_join(tid[i], NULL);
    dcp_planner_stats_t s;
    CU_ASSERT_EQUAL(dcp_planner_stats(planner, &s), DCP_OK);
    dcp_planner_destroy(planner); /* uncollected tickets: queued, running or done */
    pthread_mutex_lock(&dog_mu);
    dog_done = 1;
    pthread_cond_signal(&dog_cv);
    pthread_mutex_unlock(&dog_mu);
    pthread_join(dog, NULL);
    int64_t collected = 0, identical = 0, failed = 0, left = 0;
    for (int32_t i = 0; i < CLIENTS; i++) {
        collected += c[i].collected;
        identical += c[i].identical;
        failed += c[i].failed;
        left += c[i].left;
        if (c[i].failed) fprintf(stderr, "client %d: %s\n", i, c[i].error);
    }
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT_EQUAL(collected + left, CLIENTS * ROUNDS);
    CU_ASSERT_EQUAL(identical, collected);
    CU_ASSERT(left > 0);
    CU_ASSERT_EQUAL(s.submitted, CLIENTS * ROUNDS);
    CU_ASSERT_EQUAL(s.pending, left);
    CU_ASSERT_EQUAL(s.failed, 0);
    CU_ASSERT(s.cache_hits > 0); /* 12 batches asked for 192 times */
    CU_ASSERT(s.evictions > 0);  /* and a cache of 4 */
    CU_ASSERT(s.cached_plans <= 4);
    /* every plan made was cached, or was too large for it, and stays until evicted */
    CU_ASSERT_EQUAL(s.cached_plans, s.planned - s.failed - s.uncached - s.evictions);
    CU_ASSERT(s.planned + s.cache_hits <= s.submitted);
    for (int i = 0; i < BATCHES; i++) free(batches[i].bytes);
    free(batches);
    dcp_cluster_destroy(cluster);
}

int dcp_suite_planner_load(void)
{
    static const dcp_test_t tests[] = {
        {"sixteen_threads", test_sixteen_threads},
        {NULL, NULL},
    };
    return dcp_add_suite("planner_load", tests);
}
