/* The allocation failure walk (tests/README.md "Failure walks"): every allocation of a call
 * fails in turn (make test: a seeded sample; DCP_WALK=full: every one) and the call must end
 * with DCP_ERR_NO_MEMORY and a message, or complete with the clean run's result, and leave no
 * block of dcp's allocator behind. Calls walked on one thread: clusters from specs and from
 * an hwloc capture, plans of every strategy and peer policy, in rounds and of two layer kinds,
 * plan bytes both ways, a one-rank context through forward and backward (dcp's engine and the
 * twin of cuDNN's data path), the planner service. Then four ranks as threads of this process,
 * the process ranks' path (UCX, and the hybrid of processes of threads) with every process a
 * thread, and ranks as processes and processes of threads started by this program
 * (walk_procs.c). */
#include "include/base/error.h"
#include "tests/unit/shm_bootstrap.h"
#include "tests/unit/suites.h"
#include "tests/unit/walk.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs of a sampled walk, per call. */
#define SAMPLE 12

/* ---- clusters ---------------------------------------------------------------------------- */

static dcp_status_t run_cluster(void *arg, uint64_t *digest_out)
{
    dcp_cluster_t *c = NULL;
    dcp_status_t st = dcp_cluster_from_spec((const char *)arg, &c);
    const double tiles[3] = {64, 256, 1024}, eff[3] = {0.2, 0.5, 0.8};
    if (st == DCP_OK) st = dcp_cluster_set_kernel_table(c, 3, tiles, eff);
    if (st == DCP_OK) {
        const int32_t shape[2] = {dcp_cluster_num_ranks(c), dcp_cluster_num_nodes(c)};
        *digest_out = t_digest(0, shape, sizeof shape);
    }
    dcp_cluster_destroy(c);
    return st;
}

static void test_cluster_from_spec(void)
{
    t_alloc_walk("cluster 2x4 spec", run_cluster, "2x4:intra=450:inter=12.5:nics=2", SAMPLE, NULL);
    t_alloc_walk("cluster 4xh100-ib", run_cluster, "4xh100-ib", SAMPLE, NULL);
}

static void test_cluster_from_hwloc(void)
{
    t_alloc_walk("cluster from hwloc xml", run_cluster, "2x@tests/data/h100-ib.xml", SAMPLE, NULL);
}

/* ---- plans ------------------------------------------------------------------------------- */

typedef struct {
    t_walk_batch_t b;
    const char *cluster;
    dcp_layer_kind_t kinds[2];
    dcp_mask_t kind_masks[4];
} plan_case_t;

/* Everything a caller reads of a plan: stats, every rank's stats and layout, the layer kinds'
 * views, the checksum. */
static dcp_status_t read_plan(const dcp_plan_t *p, uint64_t *digest_out)
{
    dcp_plan_stats_t s;
    DCP_CHECK(dcp_plan_get_stats(p, &s));
    for (int32_t r = 0; r < s.num_ranks; r++) {
        dcp_rank_stats_t rs;
        dcp_token_span_t spans[64];
        int32_t n = 0;
        DCP_CHECK(dcp_plan_get_rank_stats(p, r, &rs));
        DCP_CHECK(dcp_plan_local_layout(p, r, spans, 64, &n, NULL));
    }
    for (int32_t k = 1; k < s.num_kinds; k++) {
        const dcp_plan_t *view = NULL;
        uint32_t sum = 0;
        DCP_CHECK(dcp_plan_kind(p, k, &view));
        DCP_CHECK(dcp_plan_checksum(view, &sum));
    }
    uint32_t sum = 0;
    DCP_CHECK(dcp_plan_checksum(p, &sum));
    *digest_out = sum;
    return DCP_OK;
}

static dcp_status_t run_plan(void *arg, uint64_t *digest_out)
{
    const plan_case_t *pc = arg;
    dcp_cluster_t *c = NULL;
    dcp_plan_t *p = NULL;
    dcp_status_t st = dcp_cluster_from_spec(pc->cluster, &c);
    if (st == DCP_OK) st = dcp_plan_create(&pc->b.batch, &pc->b.shape, &pc->b.opts, c, &p);
    if (st == DCP_OK) st = read_plan(p, digest_out);
    dcp_plan_destroy(p);
    dcp_cluster_destroy(c);
    return st;
}

static void plan_walk(const char *name, dcp_strategy_t strategy, int rounds, int kinds)
{
    const int64_t sample = strategy == DCP_STRATEGY_AUTO && t_walk_full() ? -400 : SAMPLE;
    plan_case_t *pc = calloc(1, sizeof *pc);
    t_walk_batch_init(&pc->b, strategy);
    pc->cluster = "2x2";
    if (rounds) {
        pc->b.opts.comm_schedule = DCP_COMM_ROUNDS;
        pc->b.opts.coalesce = 2;
    }
    if (kinds) { /* the batch's masks, and a 32-token window for every sequence */
        for (int i = 0; i < 4; i++)
            pc->kind_masks[i] = (dcp_mask_t){.kind = DCP_MASK_WINDOW, .window = 32};
        pc->kinds[0] = (dcp_layer_kind_t){pc->b.masks, 1};
        pc->kinds[1] = (dcp_layer_kind_t){pc->kind_masks, 3};
        pc->b.batch.masks = NULL;
        pc->b.batch.num_kinds = 2;
        pc->b.batch.kinds = pc->kinds;
    }
    t_alloc_walk(name, run_plan, pc, sample, NULL);
    free(pc);
}

static void test_plan_ring(void)
{
    plan_walk("plan ring", DCP_STRATEGY_RING, 0, 0);
}

static void test_plan_zigzag(void)
{
    plan_walk("plan zigzag", DCP_STRATEGY_ZIGZAG, 0, 0);
}

static void test_plan_lpt(void)
{
    plan_walk("plan lpt", DCP_STRATEGY_LPT, 0, 0);
}

static void test_plan_metis(void)
{
    plan_walk("plan metis", DCP_STRATEGY_METIS, 0, 0);
}

/* The peer policies (partition/peer*.c): placements of their own, each walked. */
static void test_plan_peers(void)
{
    static const struct {
        const char *name;
        dcp_strategy_t strategy;
    } peers[] = {{"plan packed", DCP_STRATEGY_PACKED},   {"plan dyncp", DCP_STRATEGY_DYNCP},
                 {"plan ulysses", DCP_STRATEGY_ULYSSES}, {"plan usp", DCP_STRATEGY_USP},
                 {"plan magi", DCP_STRATEGY_MAGI}};
    for (size_t i = 0; i < sizeof peers / sizeof *peers; i++)
        plan_walk(peers[i].name, peers[i].strategy, 0, 0);
}

/* AUTO builds the plans of every strategy at three block sizes: its sites are those of the
 * walks above (checked with DCP_WALK_SITES), whose full walks fail every one; a full walk
 * draws 400 of its N. */
static void test_plan_auto(void)
{
    plan_walk("plan auto", DCP_STRATEGY_AUTO, 0, 0);
}

static void test_plan_rounds(void)
{
    plan_walk("plan lpt in rounds", DCP_STRATEGY_LPT, 1, 0);
}

static void test_plan_kinds(void)
{
    plan_walk("plan of 2 layer kinds", DCP_STRATEGY_METIS, 0, 1);
}

/* ---- plan bytes -------------------------------------------------------------------------- */

typedef struct {
    dcp_plan_t *plan;
} bytes_case_t;

static dcp_status_t run_bytes(void *arg, uint64_t *digest_out)
{
    const bytes_case_t *bc = arg;
    size_t n = 0;
    DCP_CHECK(dcp_plan_serialize(bc->plan, NULL, 0, &n));
    uint8_t *buf = malloc(n);
    dcp_plan_t *back = NULL;
    dcp_status_t st = buf ? dcp_plan_serialize(bc->plan, buf, n, &n) : DCP_ERR_INTERNAL;
    if (st == DCP_OK) st = dcp_plan_deserialize(buf, n, &back);
    if (st == DCP_OK) st = read_plan(back, digest_out);
    if (st == DCP_OK) *digest_out = t_digest(*digest_out, buf, n);
    dcp_plan_destroy(back);
    free(buf);
    return st;
}

static void test_plan_bytes(void)
{
    plan_case_t *pc = calloc(1, sizeof *pc);
    t_walk_batch_init(&pc->b, DCP_STRATEGY_METIS);
    pc->cluster = "2x2";
    for (int i = 0; i < 4; i++) pc->kind_masks[i] = (dcp_mask_t){.kind = DCP_MASK_FULL};
    pc->kinds[0] = (dcp_layer_kind_t){pc->b.masks, 2};
    pc->kinds[1] = (dcp_layer_kind_t){pc->kind_masks, 1};
    pc->b.batch = (dcp_batch_t){4, pc->b.lengths, NULL, 2, pc->kinds};
    dcp_cluster_t *c = NULL;
    bytes_case_t bc = {NULL};
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(pc->cluster, &c), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&pc->b.batch, &pc->b.shape, &pc->b.opts, c, &bc.plan),
                          DCP_OK);
    t_alloc_walk("plan bytes both ways", run_bytes, &bc, SAMPLE, NULL);
    dcp_plan_destroy(bc.plan);
    dcp_cluster_destroy(c);
    free(pc);
}

/* ---- a one-rank context ------------------------------------------------------------------ */

typedef struct {
    dcp_plan_t *plan;
    const char *engine;
} ctx_case_t;

static dcp_status_t run_context(void *arg, uint64_t *digest_out)
{
    const ctx_case_t *cc = arg;
    dcp_group_t *g = NULL;
    dcp_context_t *ctx = NULL;
    dcp_status_t st = dcp_group_create(1, &g);
    const dcp_context_config_t cfg = {.group = g, .timeout_s = 5, .attn_engine = cc->engine};
    if (st == DCP_OK) st = dcp_context_create(&cfg, &ctx);
    if (st == DCP_OK) st = t_rank_pass(ctx, cc->plan, 0, digest_out);
    dcp_context_destroy(ctx);
    dcp_group_destroy(g);
    return st;
}

static void context_walk(const char *name, const char *engine)
{
    t_walk_batch_t b;
    t_walk_batch_init(&b, DCP_STRATEGY_LPT);
    b.opts.divisions = 2;
    dcp_cluster_t *c = NULL;
    ctx_case_t cc = {NULL, engine};
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x1", &c), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&b.batch, &b.shape, &b.opts, c, &cc.plan), DCP_OK);
    t_alloc_walk(name, run_context, &cc, SAMPLE, NULL);
    dcp_plan_destroy(cc.plan);
    dcp_cluster_destroy(c);
}

static void test_context_own(void)
{
    context_walk("context, own kernels", "own");
}

static void test_context_twin(void)
{
    context_walk("context, cudnn twin", "twin");
}

/* ---- the planner service ----------------------------------------------------------------- */

typedef struct {
    dcp_cluster_t *cluster;
    t_walk_batch_t b[2];
} planner_case_t;

/* One worker and a cache of one plan, each batch submitted and collected in turn (so that
 * the walk's runs are alike): batch 0, batch 1, batch 1 again (a hit), batch 0 (planned anew:
 * the cache holds batch 1). Many workers, tickets left uncollected and destroy are the load
 * test's (test_planner_load.c). */
static dcp_status_t run_planner(void *arg, uint64_t *digest_out)
{
    const planner_case_t *pc = arg;
    const dcp_planner_config_t cfg = {1, 1, 0};
    dcp_planner_t *pl = NULL;
    DCP_CHECK(dcp_planner_create(&cfg, pc->cluster, &pl));
    static const int order[4] = {0, 1, 1, 0};
    dcp_status_t st = DCP_OK;
    uint64_t h = 0;
    for (int i = 0; i < 4 && st == DCP_OK; i++) {
        const t_walk_batch_t *b = &pc->b[order[i]];
        dcp_plan_t *p = NULL;
        uint64_t t = 0, d = 0;
        st = dcp_planner_submit(pl, &b->batch, &b->shape, &b->opts, &t);
        if (st == DCP_OK) st = dcp_planner_wait(pl, t, &p);
        if (st == DCP_OK) st = read_plan(p, &d);
        h = t_digest(h, &d, sizeof d);
        dcp_plan_destroy(p);
    }
    dcp_planner_stats_t stats;
    if (st == DCP_OK) st = dcp_planner_stats(pl, &stats);
    dcp_planner_destroy(pl);
    *digest_out = h;
    return st;
}

static void test_planner_service(void)
{
    planner_case_t pc;
    t_walk_batch_init(&pc.b[0], DCP_STRATEGY_LPT);
    t_walk_batch_init(&pc.b[1], DCP_STRATEGY_ZIGZAG);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x2", &pc.cluster), DCP_OK);
    t_alloc_walk("planner service", run_planner, &pc, SAMPLE, NULL);
    dcp_cluster_destroy(pc.cluster);
}

/* ---- four ranks as threads ---------------------------------------------------------------- */

#define THREAD_RANKS     4
#define THREAD_TIMEOUT_S 5.0

/* The plan, the group and the contexts are made on this thread (a failure there ends the run,
 * as dcp_forward_inproc does), then every rank runs forward and backward on its own thread:
 * any rank may be the one whose allocation fails (t_judge_ranks), and the run returns its
 * failure, or DCP_ERR_INTERNAL naming a broken rule. */
static dcp_status_t run_threads(void *arg, uint64_t *digest_out)
{
    t_rank_result_t r[THREAD_RANKS];
    memset(r, 0, sizeof r);
    DCP_CHECK(t_group_pass(arg, "2x2", THREAD_RANKS, THREAD_TIMEOUT_S, r));
    char why[512];
    if (t_judge_ranks(r, THREAD_RANKS, 0, THREAD_RANKS, 0, THREAD_TIMEOUT_S, dcp_test_fired_time(),
                      why, sizeof why)[0])
        return dcp_set_error(DCP_ERR_INTERNAL, "%s", why);
    uint64_t h = 0;
    for (int32_t k = 0; k < THREAD_RANKS; k++) {
        if (r[k].st == DCP_ERR_NO_MEMORY)
            return dcp_set_error(DCP_ERR_NO_MEMORY, "rank %d: %s", k, r[k].msg);
        h = t_digest(h, &r[k].digest, sizeof r[k].digest);
    }
    *digest_out = h;
    return DCP_OK;
}

static void test_threads(void)
{
    t_walk_batch_t b;
    t_walk_batch_init(&b, DCP_STRATEGY_METIS);
    b.opts.divisions = 2;
    t_alloc_walk("4 ranks as threads", run_threads, &b, t_walk_full() ? 400 : SAMPLE, NULL);
}

/* dcp_forward_inproc and dcp_backward_inproc: the group, the contexts and the rank threads
 * all made inside the call. */
static dcp_status_t run_inproc_calls(void *arg, uint64_t *digest_out)
{
    const dcp_plan_t *plan = arg;
    t_rank_io_t io[THREAD_RANKS];
    dcp_tensors_t fwd[THREAD_RANKS];
    dcp_grad_tensors_t bwd[THREAD_RANKS];
    dcp_status_t st = DCP_OK;
    for (int32_t r = 0; r < THREAD_RANKS; r++) {
        t_rank_io_init(&io[r], plan, r);
        fwd[r] = io[r].fwd;
        bwd[r] = io[r].bwd;
    }
    st = dcp_forward_inproc(plan, fwd, THREAD_TIMEOUT_S, NULL);
    if (st == DCP_OK) st = dcp_backward_inproc(plan, bwd, THREAD_TIMEOUT_S, NULL);
    uint64_t h = 0;
    for (int32_t r = 0; r < THREAD_RANKS; r++) {
        if (st == DCP_OK) h = t_rank_io_digest(&io[r], h);
        t_rank_io_free(&io[r]);
    }
    if (st == DCP_OK) *digest_out = h;
    return st;
}

static void test_inproc_calls(void)
{
    t_walk_batch_t b;
    t_walk_batch_init(&b, DCP_STRATEGY_LPT);
    dcp_cluster_t *c = NULL;
    dcp_plan_t *plan = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x2", &c), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&b.batch, &b.shape, &b.opts, c, &plan), DCP_OK);
    t_alloc_walk("forward/backward_inproc", run_inproc_calls, plan, SAMPLE, NULL);
    dcp_plan_destroy(plan);
    dcp_cluster_destroy(c);
}

/* ---- UCX ranks as threads, ranks as processes, processes of threads ------------------- */

/* The process ranks' path (bootstrap, peer table, job cluster, UCX engine; with threads > 1
 * the hybrid, the in-process engine and the routing engine too) with every process a thread of
 * this process, so that its allocations are counted, and their sites seen, here. */
static dcp_status_t run_job_threads(void *arg, uint64_t *digest_out)
{
    const t_proc_job_t *job = arg;
    const int32_t ranks = job->procs * job->threads;
    t_job_result_t *r = calloc(1, sizeof *r);
    if (!r || t_threads_run(job, r) != 0) {
        free(r);
        return dcp_set_error(DCP_ERR_INTERNAL, "cannot start the rank threads");
    }
    char why[512];
    dcp_status_t st = DCP_OK;
    uint64_t h = 0;
    if (t_judge_ranks(r->rank, ranks, 0, ranks, 0, job->timeout_s, dcp_test_fired_time(), why,
                      sizeof why)[0]) {
        st = dcp_set_error(DCP_ERR_INTERNAL, "%s", why);
        for (int32_t k = 0; k < ranks; k++) /* the whole picture of a broken rule */
            fprintf(stderr, "  rank %d: %s %.2f s after the failure: %s\n", k,
                    dcp_status_string(r->rank[k].st), r->rank[k].ended_at - dcp_test_fired_time(),
                    r->rank[k].msg);
    }
    for (int32_t k = 0; st == DCP_OK && k < ranks; k++) {
        if (r->rank[k].st == DCP_ERR_NO_MEMORY)
            st = dcp_set_error(DCP_ERR_NO_MEMORY, "rank %d: %s", k, r->rank[k].msg);
        h = t_digest(h, &r->rank[k].digest, sizeof r->rank[k].digest);
    }
    free(r);
    if (st == DCP_OK) *digest_out = h;
    return st;
}

static void test_ucx_threads(void)
{
    t_proc_job_t job = {THREAD_RANKS, 1, -1, 0, 0, 3.0};
    t_alloc_walk("4 ucx ranks as threads", run_job_threads, &job,
                 t_walk_full() ? -150 : -T_PROC_RUNS(2, 1), NULL);
}

/* The hybrid path (plugin/hybrid.c, transport/route.c, plugin/job.c's routed engines) in one
 * process: 2 processes x 2 threads, every process a thread. Its sites are those of the hybrid
 * processes walked below, which draw runs at random; here a full walk fails each. */
static void test_hybrid_threads(void)
{
    t_proc_job_t job = {2, 2, -1, 0, 0, 3.0};
    t_alloc_walk("2x2 hybrid as threads", run_job_threads, &job,
                 t_walk_full() ? -150 : -T_PROC_RUNS(2, 1), NULL);
}

static void test_processes(void)
{
    t_job_walk("4 processes", 4, 1, 0, t_walk_full() ? 60 : T_PROC_RUNS(3, 1));
}

static void test_hybrid(void)
{
    t_job_walk("2 processes x 2 threads", 2, 2, 0, t_walk_full() ? 60 : T_PROC_RUNS(2, 1));
}

/* ---- a context that fails after its engine exists ------------------------------------- */

typedef struct {
    shm_bootstrap_t *bs;
    int32_t rank;
    dcp_status_t create, barrier;
    double secs;
    char msg[512];
} late_rank_t;

static void *late_rank_main(void *arg)
{
    late_rank_t *a = arg;
    const dcp_bootstrap_t b = shm_bootstrap_rank(a->bs, a->rank);
    /* rank 2's attention engine is refused once its UCX engine is connected */
    const dcp_context_config_t cfg = {
        .bootstrap = &b, .timeout_s = 20, .attn_engine = a->rank == 2 ? "bogus" : "own"};
    dcp_context_t *ctx = NULL;
    a->create = dcp_context_create(&cfg, &ctx);
    const double t0 = dcp_now();
    if (a->create == DCP_OK) a->barrier = dcp_context_barrier(ctx);
    a->secs = dcp_now() - t0;
    dcp_error_save(a->msg, sizeof a->msg);
    dcp_context_destroy(ctx);
    return NULL;
}

/* A rank whose creation fails after the ranks' engines are connected tells its peers: their
 * first call stops at once naming it and why (it used to leave them waiting for the timeout,
 * itself waiting in UCX's collective close). */
static void test_creation_failure_is_told(void)
{
    late_rank_t a[4];
    pthread_t tid[4];
    shm_bootstrap_t *bs = shm_bootstrap_create(4, 4096);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bs);
    for (int32_t r = 0; r < 4; r++) {
        a[r] = (late_rank_t){bs, r, DCP_OK, DCP_OK, 0, ""};
        pthread_create(&tid[r], NULL, late_rank_main, &a[r]);
    }
    for (int32_t r = 0; r < 4; r++) pthread_join(tid[r], NULL);
    shm_bootstrap_destroy(bs);
    CU_ASSERT_EQUAL(a[2].create, DCP_ERR_INVALID_ARG);
    for (int32_t r = 0; r < 4; r++) {
        if (r == 2) continue;
        CU_ASSERT_EQUAL(a[r].create, DCP_OK);
        CU_ASSERT_EQUAL(a[r].barrier, DCP_ERR_PEER);
        CU_ASSERT(a[r].secs < 5.0);
        CU_ASSERT_PTR_NOT_NULL(strstr(a[r].msg, "rank 2"));
        CU_ASSERT_PTR_NOT_NULL(strstr(a[r].msg, "bogus"));
    }
}

int dcp_suite_alloc_walk(void)
{
    static const dcp_test_t tests[] = {
        {"cluster_from_spec", test_cluster_from_spec},
        {"cluster_from_hwloc", test_cluster_from_hwloc},
        {"plan_ring", test_plan_ring},
        {"plan_zigzag", test_plan_zigzag},
        {"plan_lpt", test_plan_lpt},
        {"plan_metis", test_plan_metis},
        {"plan_peers", test_plan_peers},
        {"plan_auto", test_plan_auto},
        {"plan_rounds", test_plan_rounds},
        {"plan_kinds", test_plan_kinds},
        {"plan_bytes", test_plan_bytes},
        {"context_own", test_context_own},
        {"context_twin", test_context_twin},
        {"planner_service", test_planner_service},
        {"threads", test_threads},
        {"inproc_calls", test_inproc_calls},
        {"ucx_threads", test_ucx_threads},
        {"hybrid_threads", test_hybrid_threads},
        {"creation_failure_is_told", test_creation_failure_is_told},
        {"processes", test_processes},
        {"hybrid", test_hybrid},
        {NULL, NULL},
    };
    return dcp_add_suite("alloc_walk", tests);
}
