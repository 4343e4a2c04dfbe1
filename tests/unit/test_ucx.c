/* The UCX engine with ranks as threads of this process (each rank its own UCP context and
 * worker, addresses exchanged over a shared-memory bootstrap): all-to-all copies eager and
 * rendezvous, size mismatches, peer aborts, timeouts and bad arguments; and contexts of
 * process ranks (the path mpirun takes) run over it, checked against the reference. */
#include "include/base/error.h"
#include "plugin/cli/support/harness.h"
#include "plugin/context.h"
#include "plugin/hybrid.h"
#include "topo/cluster.h"
#include "tests/unit/shm_bootstrap.h"
#include "tests/unit/suites.h"
#include "transport/ucx.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXR 4

typedef struct scenario scenario_t;
typedef void (*rank_fn)(scenario_t *s, dcp_engine_t *e, int32_t rank);

struct scenario {
    shm_bootstrap_t *bs;
    int32_t n;
    rank_fn fn;
    dcp_status_t create_st[MAXR], st[MAXR];
    double secs[MAXR];
    char msg[MAXR][256];
    atomic_int round;
};

typedef struct {
    scenario_t *s;
    int32_t rank;
} rank_arg_t;

static void *rank_main(void *p)
{
    rank_arg_t *a = p;
    scenario_t *s = a->s;
    const dcp_bootstrap_t b = shm_bootstrap_rank(s->bs, a->rank);
    dcp_engine_t *e = NULL;
    s->create_st[a->rank] = dcp_ucx_engine_create(&b, &e);
    if (s->create_st[a->rank] != DCP_OK) return NULL;
    s->fn(s, e, a->rank);
    dcp_engine_destroy(e);
    return NULL;
}

static void run(scenario_t *s, int32_t n, rank_fn fn)
{
    s->n = n;
    s->fn = fn;
    s->bs = shm_bootstrap_create(n, 4096);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s->bs);
    pthread_t t[MAXR];
    rank_arg_t a[MAXR];
    for (int32_t r = 0; r < n; r++) {
        a[r] = (rank_arg_t){s, r};
        pthread_create(&t[r], NULL, rank_main, &a[r]);
    }
    for (int32_t r = 0; r < n; r++) pthread_join(t[r], NULL);
    shm_bootstrap_destroy(s->bs);
    for (int32_t r = 0; r < n; r++) CU_ASSERT_EQUAL(s->create_st[r], DCP_OK);
}

/* Waits for one group of ops, recording the outcome of rank r. */
static void launch_wait(scenario_t *s, dcp_engine_t *e, int32_t r, const dcp_xfer_op_t *ops,
                        int64_t n, double timeout_s)
{
    dcp_xfer_req_t *req = NULL;
    const double t0 = dcp_now();
    s->st[r] = e->ops->launch(e, ops, n, &req);
    if (s->st[r] == DCP_OK) {
        s->st[r] = e->ops->wait(e, req, timeout_s, NULL);
        if (s->st[r] != DCP_OK) e->ops->cancel(e, req);
    }
    s->secs[r] = dcp_now() - t0;
    if (s->st[r] != DCP_OK) dcp_error_save(s->msg[r], sizeof s->msg[r]);
}

/* ---- all to all ------------------------------------------------------------------------ */

/* 1000 bytes go eagerly; 1 MiB + 3 takes UCX's rendezvous path. */
static const size_t sizes[2] = {1000, (1u << 20) + 3};

static unsigned char pattern(int32_t from, int32_t to, int32_t round, size_t i)
{
    return (unsigned char)(from * 31 + to * 7 + round * 13 + i * 2654435761u);
}

static void all_to_all(scenario_t *s, dcp_engine_t *e, int32_t r)
{
    unsigned char *send[MAXR] = {0}, *recv[MAXR] = {0};
    dcp_xfer_op_t ops[2 * MAXR];
    int ok = 1;
    for (int32_t round = 0; round < 2; round++) {
        const size_t bytes = sizes[round];
        int64_t n = 0;
        for (int32_t k = 0; k < s->n; k++) {
            /* odd ranks post in the opposite order */
            const int32_t p = r % 2 ? s->n - 1 - k : k;
            if (p == r) continue;
            send[p] = malloc(bytes);
            recv[p] = calloc(1, bytes);
            for (size_t i = 0; i < bytes; i++) send[p][i] = pattern(r, p, round, i);
            ops[n++] = (dcp_xfer_op_t){p, 0, (uint64_t)(p * MAXR + r), recv[p], bytes, NULL, NULL};
            ops[n++] = (dcp_xfer_op_t){p, 1, (uint64_t)(r * MAXR + p), send[p], bytes, NULL, NULL};
        }
        launch_wait(s, e, r, ops, n, 30.0);
        for (int32_t p = 0; p < s->n; p++) {
            if (p == r) continue;
            for (size_t i = 0; i < bytes && s->st[r] == DCP_OK; i++)
                ok &= recv[p][i] == pattern(p, r, round, i);
            free(send[p]);
            free(recv[p]);
        }
        if (s->st[r] != DCP_OK) break;
    }
    if (s->st[r] == DCP_OK && !ok) s->st[r] = DCP_ERR_INTERNAL;
}

static void test_all_to_all(void)
{
    scenario_t s = {0};
    run(&s, 4, all_to_all);
    for (int32_t r = 0; r < 4; r++) {
        if (s.st[r] != DCP_OK) fprintf(stderr, "rank %d: %s\n", r, s.msg[r]);
        CU_ASSERT_EQUAL(s.st[r], DCP_OK);
    }
}

/* ---- size mismatch --------------------------------------------------------------------- */

static void mismatch(scenario_t *s, dcp_engine_t *e, int32_t r)
{
    char buf[2000] = {0};
    const dcp_xfer_op_t op = {1 - r, r == 0, 7, buf, r == 0 ? 2000 : 1000, NULL, NULL};
    launch_wait(s, e, r, &op, 1, 10.0);
}

static void test_size_mismatch_is_an_error(void)
{
    scenario_t s = {0};
    run(&s, 2, mismatch);
    CU_ASSERT_EQUAL(s.st[1], DCP_ERR_INTERNAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(s.msg[1], "different sizes"));
}

/* ---- a peer that fails ----------------------------------------------------------------- */

static void aborting(scenario_t *s, dcp_engine_t *e, int32_t r)
{
    if (r == 1) {
        e->ops->abort(e, "test abort");
        s->st[r] = e->ops->health(e);
        return;
    }
    int32_t word = 0;
    const dcp_xfer_op_t op = {1, 0, 5, &word, sizeof word, NULL, NULL};
    launch_wait(s, e, r, &op, 1, 20.0);
}

static void test_abort_ends_peer_wait(void)
{
    scenario_t s = {0};
    run(&s, 2, aborting);
    CU_ASSERT_EQUAL(s.st[0], DCP_ERR_PEER);
    CU_ASSERT(s.secs[0] < 10.0);
    CU_ASSERT_PTR_NOT_NULL(strstr(s.msg[0], "rank 1"));
    CU_ASSERT_EQUAL(s.st[1], DCP_ERR_PEER); /* a failed rank stays failed */
}

/* ---- timeout --------------------------------------------------------------------------- */

static void waiting(scenario_t *s, dcp_engine_t *e, int32_t r)
{
    if (r == 1) return;
    int32_t word = 0;
    const dcp_xfer_op_t op = {1, 0, 9, &word, sizeof word, NULL, NULL};
    launch_wait(s, e, r, &op, 1, 0.3);
    if (e->ops->health(e) != DCP_OK) s->st[r] = DCP_ERR_INTERNAL;
}

static void test_wait_times_out(void)
{
    scenario_t s = {0};
    run(&s, 2, waiting);
    CU_ASSERT_EQUAL(s.st[0], DCP_ERR_TIMEOUT);
    CU_ASSERT(s.secs[0] >= 0.3 && s.secs[0] < 5.0);
}

/* ---- launches ordered by ready events --------------------------------------------------- */

/* A ready event of the test: an int that says whether the work before it has run. */
static atomic_int test_ready_flag;

static dcp_status_t flag_query(void *event, int *state_out)
{
    *state_out = atomic_load((atomic_int *)event);
    return DCP_OK;
}

/* Rank 0 sends behind a ready event that is not reached: the launch returns at once and the
 * block is not posted (rank 1's receive times out) until the event is reached and rank 0's
 * engine is tested again; then it arrives whole. */
static void event_ordered(scenario_t *s, dcp_engine_t *e, int32_t r)
{
    static int32_t word[2];
    if (r == 0) {
        dcp_ucx_engine_order_by(e, flag_query);
        word[0] = 0x5eed;
        const dcp_xfer_op_t op = {1, 1, 11, &word[0], sizeof word[0], &test_ready_flag, NULL};
        dcp_xfer_req_t *req = NULL;
        const double t0 = dcp_now();
        s->st[0] = e->ops->launch(e, &op, 1, &req);
        s->secs[0] = dcp_now() - t0;
        if (s->st[0] != DCP_OK) return;
        int done = 1;
        const dcp_status_t tested = e->ops->test(e, req, &done);
        if (tested != DCP_OK || done) s->st[0] = DCP_ERR_INTERNAL; /* held, not sent */
        while (atomic_load(&s->round) == 0) { /* until rank 1's first wait has timed out */
            (void)e->ops->test(e, req, &done);
            sched_yield();
        }
        atomic_store(&test_ready_flag, 1); /* the kernels before the event have run */
        const dcp_status_t waited = e->ops->wait(e, req, 20.0, NULL);
        if (s->st[0] == DCP_OK) s->st[0] = waited;
        if (waited != DCP_OK) e->ops->cancel(e, req);
        return;
    }
    const dcp_xfer_op_t op = {0, 0, 11, &word[1], sizeof word[1], NULL, NULL};
    dcp_xfer_req_t *req = NULL;
    s->st[1] = e->ops->launch(e, &op, 1, &req);
    if (s->st[1] != DCP_OK) return;
    const dcp_status_t early = e->ops->wait(e, req, 0.3, NULL);
    atomic_store(&s->round, 1);
    if (early == DCP_ERR_TIMEOUT) {
        s->st[1] = e->ops->wait(e, req, 20.0, NULL);
        if (s->st[1] != DCP_OK) e->ops->cancel(e, req);
    } else {
        s->st[1] = DCP_ERR_INTERNAL; /* it came before its ready event */
        if (early != DCP_OK) e->ops->cancel(e, req);
    }
    if (s->st[1] == DCP_OK && word[1] != 0x5eed) s->st[1] = DCP_ERR_INTERNAL;
}

static void test_launch_ordered_by_ready_events(void)
{
    scenario_t s = {0};
    atomic_store(&test_ready_flag, 0);
    run(&s, 2, event_ordered);
    CU_ASSERT_EQUAL(s.st[0], DCP_OK);
    CU_ASSERT_EQUAL(s.st[1], DCP_OK);
    CU_ASSERT(s.secs[0] < 0.2); /* the launch did not wait for its event */
}

/* ---- bad arguments --------------------------------------------------------------------- */

static void bad_ops(scenario_t *s, dcp_engine_t *e, int32_t r)
{
    int32_t word = 0;
    dcp_xfer_req_t *req = NULL;
    const dcp_xfer_op_t self = {r, 1, 1, &word, sizeof word, NULL, NULL};
    const dcp_xfer_op_t control = {1 - r, 1, DCP_TAG_CONTROL | 1, &word, sizeof word, NULL, NULL};
    const dcp_xfer_op_t far = {2, 1, 1, &word, sizeof word, NULL, NULL};
    int bad = 0;
    bad += e->ops->launch(e, &self, 1, &req) == DCP_ERR_INVALID_ARG;
    bad += e->ops->launch(e, &control, 1, &req) == DCP_ERR_INVALID_ARG;
    bad += e->ops->launch(e, &far, 1, &req) == DCP_ERR_INVALID_ARG;
    s->st[r] = bad == 3 && req == NULL ? DCP_OK : DCP_ERR_INTERNAL;
}

static void test_bad_arguments(void)
{
    scenario_t s = {0};
    run(&s, 2, bad_ops);
    CU_ASSERT(s.st[0] == DCP_OK && s.st[1] == DCP_OK);
    dcp_engine_t *e = NULL;
    const dcp_bootstrap_t no_fn = {0, 2, NULL, NULL, NULL, 0.0},
                          bad_rank = {3, 2, NULL, NULL, NULL, 0.0};
    CU_ASSERT_EQUAL(dcp_ucx_engine_create(&no_fn, &e), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_ucx_engine_create(&bad_rank, &e), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_ucx_engine_create(NULL, &e), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(e);
}

/* ---- contexts of process ranks --------------------------------------------------------- */

/* One rank of a job run as a thread: its context over the shared bootstrap, then, when
 * there is a plan, the harness's process-rank run. */
typedef struct {
    shm_bootstrap_t *bs;
    int32_t rank;
    const char *transport_intra, *device, *node_file;
    const dcpt_harness_t *h;
    const dcp_plan_t *plan;
    dcp_status_t st;
    char msg[256];
    dcpt_harness_result_t res;
    int32_t nodes;
    char intra[16];
    dcp_perf_model_t perf; /* the figures of the cluster it discovered */
    int32_t nics;          /* its NICs per node */
    double predicted_ms;   /* a plan of plan_lengths on that cluster, by the cost model */
} job_rank_t;

/* The batch job_rank plans on the cluster its context found (one causal sequence per rank). */
static const int32_t plan_lengths[4] = {3000, 200, 700, 1500};

/* The cost model's attention time of a plan of plan_lengths on cluster c (-1 on failure). */
static double predict(const dcp_cluster_t *c)
{
    dcp_mask_t m[4];
    for (int i = 0; i < 4; i++) m[i] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    const dcp_batch_t batch = {.num_seqs = 4, .lengths = plan_lengths, .masks = m};
    const dcp_attn_shape_t shape = {4, 2, 64, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 256;
    dcp_plan_t *plan = NULL;
    dcp_plan_stats_t stats;
    double ms = -1;
    if (dcp_plan_create(&batch, &shape, &o, c, &plan) == DCP_OK &&
        dcp_plan_get_stats(plan, &stats) == DCP_OK)
        ms = stats.predicted_ms;
    dcp_plan_destroy(plan);
    return ms;
}

static void *job_rank(void *p)
{
    job_rank_t *j = p;
    const dcp_bootstrap_t b = shm_bootstrap_rank(j->bs, j->rank);
    const dcp_context_config_t cfg = {.bootstrap = &b,
                                      .timeout_s = 30,
                                      .transport_intra = j->transport_intra,
                                      .device = j->device,
                                      .node_file = j->node_file};
    dcp_context_t *ctx = NULL;
    j->st = dcp_context_create(&cfg, &ctx);
    if (j->st == DCP_OK) {
        const dcp_cluster_t *c = NULL;
        if (dcp_context_cluster(ctx, &c) == DCP_OK) {
            j->nodes = dcp_cluster_num_nodes(c);
            j->perf = c->perf;
            j->nics = dcp_cluster_node_nics(c);
            j->predicted_ms = predict(c);
        }
        snprintf(j->intra, sizeof j->intra, "%s", dcp_context_transport(ctx, 0));
        if (j->plan) j->st = dcpt_harness_run_rank(j->h, j->plan, ctx, &b, 1, 2, 1e-5, &j->res);
    }
    if (j->st != DCP_OK) dcp_error_save(j->msg, sizeof j->msg);
    dcp_context_destroy(ctx);
    return NULL;
}

/* Runs j[0..n) (bs and rank filled in here) and waits for all. */
static void run_job(job_rank_t *j, int32_t n)
{
    pthread_t t[MAXR];
    shm_bootstrap_t *bs = shm_bootstrap_create(n, 4096);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bs);
    for (int32_t r = 0; r < n; r++) {
        j[r].bs = bs;
        j[r].rank = r;
        pthread_create(&t[r], NULL, job_rank, &j[r]);
    }
    for (int32_t r = 0; r < n; r++) pthread_join(t[r], NULL);
    shm_bootstrap_destroy(bs);
}

/* A plan of the batch on a 2x2 cluster (block 64; `lpt` or the default strategy), the
 * harness with its reference, and the plan's run on 4 in-process ranks. */
typedef struct {
    dcpt_harness_t *h;
    dcp_cluster_t *c;
    dcp_plan_t *plan;
    dcpt_harness_result_t inproc;
} case_t;

static int case_create(const int32_t *len, const dcp_mask_t *m, int32_t n, uint64_t seed, int lpt,
                       case_t *k)
{
    const dcp_attn_shape_t shape = {4, 2, 16, DCP_DTYPE_FP32, 0.0f};
    memset(k, 0, sizeof *k);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 64;
    if (lpt) o.strategy = DCP_STRATEGY_LPT;
    if (dcpt_harness_create(len, n, m, &shape, seed, &k->h) != DCP_OK ||
        dcpt_harness_reference(k->h, 2, NULL, 0) != DCP_OK ||
        dcp_cluster_from_spec("2x2", &k->c) != DCP_OK)
        return 0;
    const dcp_batch_t batch = dcpt_harness_batch(k->h);
    return dcp_plan_create(&batch, &k->h->shape, &o, k->c, &k->plan) == DCP_OK &&
           dcpt_harness_run(k->h, k->plan, 0, 1, 30.0, 1e-5, NULL, &k->inproc) == DCP_OK;
}

static void case_destroy(case_t *k)
{
    dcp_plan_destroy(k->plan);
    dcp_cluster_destroy(k->c);
    dcpt_harness_destroy(k->h);
}

/* Four ranks with a context each over the bootstrap: the cluster they discover (one node),
 * the engine chosen (UCX), and outputs equal to the reference and bit-identical to the same
 * plan on in-process ranks. */
static void test_job_contexts_match_threads(void)
{
    const int32_t len[3] = {700, 1, 300};
    const dcp_mask_t m[3] = {
        {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};
    case_t k;
    CU_ASSERT_FATAL(case_create(len, m, 3, 3, 0, &k));
    const dcpt_harness_t *h = k.h;
    const dcp_plan_t *plan = k.plan;
    const dcpt_harness_result_t inproc = k.inproc;
    job_rank_t j[4];
    for (int32_t r = 0; r < 4; r++) j[r] = (job_rank_t){.h = h, .plan = plan};
    run_job(j, 4);
    for (int32_t r = 0; r < 4; r++) {
        CU_ASSERT_EQUAL(j[r].st, DCP_OK);
        CU_ASSERT(j[r].res.passed);
        CU_ASSERT_EQUAL(j[r].res.digest, inproc.digest);
        CU_ASSERT_EQUAL(j[r].nodes, 1);
        CU_ASSERT_STRING_EQUAL(j[r].intra, "ucx");
    }
    case_destroy(&k);
}

/* ---- a hybrid job: 2 "processes" (threads holding the shared bootstrap's ranks) x 2
 * in-process ranks each ---------------------------------------------------------------- */

typedef struct {
    shm_bootstrap_t *bs;
    int32_t proc;
    const dcpt_harness_t *h;
    const dcp_plan_t *plan;
    dcp_status_t st[2];
    char msg[2][256];
    dcpt_harness_result_t res[2];
    char intra[2][16];
    const char *engine[2];
} hybrid_proc_t;

typedef struct {
    hybrid_proc_t *p;
    const dcp_bootstrap_t *bs;
    int32_t local;
} hybrid_rank_t;

static void *hybrid_rank(void *arg)
{
    hybrid_rank_t *a = arg;
    hybrid_proc_t *p = a->p;
    const int32_t l = a->local;
    const dcp_context_config_t cfg = {.bootstrap = a->bs, .timeout_s = 30};
    dcp_context_t *ctx = NULL;
    p->st[l] = dcp_context_create(&cfg, &ctx);
    if (p->st[l] == DCP_OK) {
        snprintf(p->intra[l], sizeof p->intra[l], "%s", dcp_context_transport(ctx, 0));
        p->engine[l] = ctx->engine->ops->name;
        p->st[l] = dcpt_harness_run_rank(p->h, p->plan, ctx, a->bs, 1, 2, 1e-5, &p->res[l]);
    }
    if (p->st[l] != DCP_OK) dcp_error_save(p->msg[l], sizeof p->msg[l]);
    dcp_context_destroy(ctx);
    return NULL;
}

static void *hybrid_process(void *arg)
{
    hybrid_proc_t *p = arg;
    const dcp_bootstrap_t procs = shm_bootstrap_rank(p->bs, p->proc);
    dcp_hybrid_t *hy = NULL;
    p->st[0] = p->st[1] = dcp_hybrid_create(&procs, 2, &hy);
    if (p->st[0] != DCP_OK) return NULL;
    pthread_t t[2];
    hybrid_rank_t a[2];
    for (int32_t l = 0; l < 2; l++) {
        a[l] = (hybrid_rank_t){p, dcp_hybrid_bootstrap(hy, l), l};
        pthread_create(&t[l], NULL, hybrid_rank, &a[l]);
    }
    for (int32_t l = 0; l < 2; l++) pthread_join(t[l], NULL);
    dcp_hybrid_destroy(hy);
    return NULL;
}

/* Global ranks 0-1 in "process" 0 and 2-3 in "process" 1: the in-process engine inside a
 * process, UCX between them (a routing engine), outputs bit-identical to 4 in-process
 * ranks. */
static void test_hybrid_job_matches_threads(void)
{
    const int32_t len[2] = {500, 300};
    const dcp_mask_t m[2] = {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_FULL}};
    case_t k;
    CU_ASSERT_FATAL(case_create(len, m, 2, 5, 1, &k));
    const dcpt_harness_t *h = k.h;
    const dcp_plan_t *plan = k.plan;
    const dcpt_harness_result_t inproc = k.inproc;
    shm_bootstrap_t *bs = shm_bootstrap_create(2, 4096);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bs);
    hybrid_proc_t p[2];
    pthread_t t[2];
    for (int32_t q = 0; q < 2; q++) {
        p[q] = (hybrid_proc_t){.bs = bs, .proc = q, .h = h, .plan = plan};
        pthread_create(&t[q], NULL, hybrid_process, &p[q]);
    }
    for (int32_t q = 0; q < 2; q++) pthread_join(t[q], NULL);
    for (int32_t q = 0; q < 2; q++)
        for (int32_t l = 0; l < 2; l++) {
            CU_ASSERT_EQUAL(p[q].st[l], DCP_OK);
            if (p[q].st[l] != DCP_OK)
                fprintf(stderr, "hybrid rank %d: %s\n", 2 * q + l, p[q].msg[l]);
            CU_ASSERT(p[q].res[l].passed);
            CU_ASSERT_EQUAL(p[q].res[l].digest, inproc.digest);
            CU_ASSERT_STRING_EQUAL(p[q].intra[l], "ucx");
            /* two engines, so a routing engine: in-process inside, UCX between */
            CU_ASSERT(p[q].engine[l] && !strcmp(p[q].engine[l], "route"));
        }
    shm_bootstrap_destroy(bs);
    case_destroy(&k);
}

/* One rank given an engine that cannot serve its buffers: every rank's context creation
 * fails (none is left waiting in a collective), the bad rank naming its setting, the others
 * naming the rank. */
static void test_config_mismatch_fails_everywhere(void)
{
    job_rank_t j[3] = {{0}, {0}, {.transport_intra = "nccl"}};
    run_job(j, 3);
    CU_ASSERT_EQUAL(j[2].st, DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(j[2].msg, "nccl"));
    for (int32_t r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(j[r].st, DCP_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(j[r].msg, "rank 2"));
    }
}

/* The same for a bad device setting on one rank: it is named there, the rank elsewhere. */
static void test_device_mismatch_fails_everywhere(void)
{
    job_rank_t j[3] = {{0}, {.device = "gpu:1"}, {.device = "cpu"}};
    run_job(j, 3);
    CU_ASSERT_EQUAL(j[1].st, DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(j[1].msg, "config.device"));
    for (int32_t r = 0; r < 3; r += 2) {
        CU_ASSERT_EQUAL(j[r].st, DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(j[r].msg, "rank 1"));
    }
}

/* A node file (dcp-calibrate's) reaches the job: the context's cluster carries its figures
 * and NICs, and a plan made on it is priced with them (a slower node gives a slower
 * prediction); the file comes from the config or $DCP_NODE_FILE. A file for another machine
 * (other devices per node), a missing file, and ranks that load different figures fail every
 * rank's context, naming the file or the ranks. */
static void test_job_node_file(void)
{
    char fast[] = "/tmp/dcp-fast-XXXXXX", slow[] = "/tmp/dcp-slow-XXXXXX",
         other[] = "/tmp/dcp-other-XXXXXX";
    const char *text[3] = {"devices 4\nnics 1\nintra 40\ninter 2\nlat 4\n",
                           "devices 4\nnics 1\nintra 0.05\ninter 0.01\nlat 400\n", "devices 8\n"};
    char *paths[3] = {fast, slow, other};
    for (int i = 0; i < 3; i++) {
        const int fd = mkstemp(paths[i]);
        CU_ASSERT_FATAL(fd >= 0);
        CU_ASSERT_FATAL(write(fd, text[i], strlen(text[i])) == (ssize_t)strlen(text[i]));
        close(fd);
    }
    job_rank_t j[4];
    for (int32_t r = 0; r < 4; r++) j[r] = (job_rank_t){.node_file = fast};
    run_job(j, 4);
    for (int32_t r = 0; r < 4; r++) {
        CU_ASSERT_EQUAL(j[r].st, DCP_OK);
        CU_ASSERT_DOUBLE_EQUAL(j[r].perf.intra_gbps, 40, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(j[r].perf.inter_gbps, 2, 1e-12);
        CU_ASSERT_EQUAL(j[r].nics, 1);
        CU_ASSERT(j[r].predicted_ms > 0);
    }
    const double fast_ms = j[0].predicted_ms;
    /* the same job from the environment, with the slow file */
    setenv("DCP_NODE_FILE", slow, 1);
    for (int32_t r = 0; r < 4; r++) j[r] = (job_rank_t){0};
    run_job(j, 4);
    for (int32_t r = 0; r < 4; r++) {
        CU_ASSERT_EQUAL(j[r].st, DCP_OK);
        CU_ASSERT_DOUBLE_EQUAL(j[r].perf.intra_gbps, 0.05, 1e-12);
        CU_ASSERT_DOUBLE_EQUAL(j[r].predicted_ms, j[0].predicted_ms, 1e-12);
    }
    CU_ASSERT(j[0].predicted_ms > 2 * fast_ms);
    /* ... and the config's file wins over it */
    for (int32_t r = 0; r < 4; r++) j[r] = (job_rank_t){.node_file = fast};
    run_job(j, 4);
    CU_ASSERT_DOUBLE_EQUAL(j[3].predicted_ms, fast_ms, 1e-12);
    unsetenv("DCP_NODE_FILE");
    /* another machine's file */
    for (int32_t r = 0; r < 4; r++) j[r] = (job_rank_t){.node_file = other};
    run_job(j, 4);
    for (int32_t r = 0; r < 4; r++) {
        CU_ASSERT_EQUAL(j[r].st, DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(j[r].msg, "devices 8, but this job has 4 ranks per node"));
    }
    /* one rank with another file: every rank fails, naming the ranks */
    for (int32_t r = 0; r < 4; r++) j[r] = (job_rank_t){.node_file = r == 2 ? slow : fast};
    run_job(j, 4);
    for (int32_t r = 0; r < 4; r++) {
        CU_ASSERT_EQUAL(j[r].st, DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(j[r].msg, "rank 2"));
    }
    /* a file that is not there: that rank names it, the others name the rank */
    for (int32_t r = 0; r < 4; r++)
        j[r] = (job_rank_t){.node_file = r == 1 ? "/nonexistent/calib.node" : fast};
    run_job(j, 4);
    CU_ASSERT_EQUAL(j[1].st, DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(j[1].msg, "config.node_file"));
    CU_ASSERT_PTR_NOT_NULL(strstr(j[1].msg, "/nonexistent/calib.node"));
    CU_ASSERT_EQUAL(j[0].st, DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(j[0].msg, "rank 1"));
    /* in-process ranks plan with the caller's cluster: the file belongs in its spec */
    dcp_group_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(1, &g), DCP_OK);
    const dcp_context_config_t threads = {.rank = 0, .group = g, .node_file = fast};
    dcp_context_t *ctx = NULL;
    CU_ASSERT_EQUAL(dcp_context_create(&threads, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(ctx);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.node_file"));
    dcp_group_destroy(g);
    for (int i = 0; i < 3; i++) unlink(paths[i]);
}

int dcp_suite_ucx(void)
{
    static const dcp_test_t tests[] = {
        {"all_to_all", test_all_to_all},
        {"size_mismatch_is_an_error", test_size_mismatch_is_an_error},
        {"abort_ends_peer_wait", test_abort_ends_peer_wait},
        {"wait_times_out", test_wait_times_out},
        {"launch_ordered_by_ready_events", test_launch_ordered_by_ready_events},
        {"bad_arguments", test_bad_arguments},
        {"job_contexts_match_threads", test_job_contexts_match_threads},
        {"hybrid_job_matches_threads", test_hybrid_job_matches_threads},
        {"config_mismatch_fails_everywhere", test_config_mismatch_fails_everywhere},
        {"device_mismatch_fails_everywhere", test_device_mismatch_fails_everywhere},
        {"job_node_file", test_job_node_file},
        {NULL, NULL},
    };
    return dcp_add_suite("ucx", tests);
}
