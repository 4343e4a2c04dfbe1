/* The planner service: plans equal dcp_plan_create()'s byte for byte, tickets from many
 * threads, the cache, refusals at submission, planning failures through wait, try, destroy
 * with tickets left, bad tickets. */
#include "tests/unit/suites.h"

#include "include/base/error.h"

#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};

typedef struct {
    uint8_t *b;
    size_t n;
} bytes_t;

static bytes_t bytes_of(const dcp_plan_t *p)
{
    bytes_t r = {NULL, 0};
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, NULL, 0, &r.n), DCP_OK);
    r.b = malloc(r.n);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, r.b, r.n, &r.n), DCP_OK);
    return r;
}

static void pause_ms(long ms)
{
    const struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static int same_bytes(bytes_t a, bytes_t b)
{
    return a.n == b.n && !memcmp(a.b, b.b, a.n);
}

static dcp_cluster_t *cluster(const char *spec)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(spec, &c), DCP_OK);
    return c;
}

static dcp_planner_t *planner(int32_t threads, int32_t cache, const dcp_cluster_t *c)
{
    const dcp_planner_config_t cfg = {threads, cache, 0};
    dcp_planner_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_create(&cfg, c, &p), DCP_OK);
    return p;
}

static dcp_planner_stats_t stats_of(dcp_planner_t *p)
{
    dcp_planner_stats_t s;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_stats(p, &s), DCP_OK);
    return s;
}

/* Batch i of a small family: 1 to 4 sequences, every mask kind, custom ranges included. */
typedef struct {
    int32_t lengths[4];
    dcp_mask_t masks[4];
    int32_t ranges[4 * 50];
    dcp_batch_t batch;
    dcp_plan_options_t opts;
} sample_t;

static void sample(int i, sample_t *s)
{
    memset(s, 0, sizeof *s);
    static const dcp_strategy_t strat[4] = {DCP_STRATEGY_METIS, DCP_STRATEGY_ZIGZAG,
                                            DCP_STRATEGY_LPT, DCP_STRATEGY_RING};
    const int32_t n = 1 + i % 4;
    for (int32_t k = 0; k < n; k++) {
        s->lengths[k] = 50 + 37 * ((i + k) % 5);
        s->masks[k].kind = (dcp_mask_kind_t)((i + k) % DCP_MASK_KIND_COUNT);
        s->masks[k].window = 20;
        s->masks[k].sink = 3;
        s->masks[k].block = 16;
        s->masks[k].k = 1;
        s->masks[k].answers = 2;
        s->masks[k].question_frac = 0.25;
    }
    /* one custom mask at most, on the first sequence of length 50 */
    for (int32_t k = 0; k < n; k++)
        if (s->masks[k].kind == DCP_MASK_CUSTOM) {
            s->lengths[k] = 50;
            for (int32_t q = 0; q < 50; q++) {
                int32_t *r = s->ranges + 4 * q;
                r[0] = 0, r[1] = q / 3 + 1, r[2] = q, r[3] = q + 1;
            }
            s->masks[k].ranges = s->ranges;
            s->masks[k].num_rows = 50;
            for (int32_t m = k + 1; m < n; m++)
                if (s->masks[m].kind == DCP_MASK_CUSTOM) s->masks[m].kind = DCP_MASK_CAUSAL;
            break;
        }
    s->batch = (dcp_batch_t){.num_seqs = n, .lengths = s->lengths, .masks = s->masks};
    dcp_plan_options_default(&s->opts);
    s->opts.strategy = strat[i % 4];
    s->opts.block_size = 16 + 8 * (i % 3);
    s->opts.divisions = 1 + i % 3;
}

/* One causal sequence of `len` tokens. */
typedef struct {
    int32_t len[1];
    dcp_mask_t m[1];
    dcp_batch_t batch;
} one_seq_t;

static void one_causal(one_seq_t *o, int32_t len)
{
    o->len[0] = len;
    o->m[0] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    o->batch = (dcp_batch_t){.num_seqs = 1, .lengths = o->len, .masks = o->m};
}

static bytes_t direct_bytes(const sample_t *s, const dcp_cluster_t *c)
{
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&s->batch, &shape, &s->opts, c, &p), DCP_OK);
    const bytes_t b = bytes_of(p);
    dcp_plan_destroy(p);
    return b;
}

static bytes_t wait_bytes(dcp_planner_t *pl, uint64_t ticket)
{
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_wait(pl, ticket, &p), DCP_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const bytes_t b = bytes_of(p);
    dcp_plan_destroy(p);
    return b;
}

static void test_plans_equal_plan_create(void)
{
    dcp_cluster_t *c = cluster("2x2");
    dcp_planner_t *pl = planner(2, 0, c);
    enum { N = 12 };
    uint64_t t[N];
    sample_t *s = malloc(N * sizeof *s);
    for (int i = 0; i < N; i++) {
        sample(i, &s[i]);
        CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &s[i].batch, &shape, &s[i].opts, &t[i]),
                              DCP_OK);
        /* inputs are copied: scribbling over them after submit changes nothing */
        s[i].lengths[0] = -7;
        memset(s[i].ranges, 0xff, sizeof s[i].ranges);
    }
    for (int i = N - 1; i >= 0; i--) { /* any collection order */
        const bytes_t got = wait_bytes(pl, t[i]);
        sample(i, &s[i]);
        const bytes_t want = direct_bytes(&s[i], c);
        CU_ASSERT(same_bytes(got, want));
        free(got.b);
        free(want.b);
    }
    const dcp_planner_stats_t st = stats_of(pl);
    CU_ASSERT_EQUAL(st.submitted, N);
    CU_ASSERT_EQUAL(st.planned, N);
    CU_ASSERT_EQUAL(st.cache_hits, 0);
    CU_ASSERT_EQUAL(st.pending, 0);
    CU_ASSERT(st.plan_ms > 0);
    free(s);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

/* ---- several submitting threads -------------------------------------------------------- */

enum { SUBMITTERS = 4, PER_THREAD = 6 };

typedef struct {
    dcp_planner_t *pl;
    int first;
    dcp_status_t st[PER_THREAD];
    bytes_t got[PER_THREAD];
} submitter_t;

static void *submitter_main(void *arg)
{
    submitter_t *a = arg;
    uint64_t t[PER_THREAD];
    for (int i = 0; i < PER_THREAD; i++) {
        sample_t s;
        sample(a->first + i, &s);
        a->st[i] = dcp_planner_submit(a->pl, &s.batch, &shape, &s.opts, &t[i]);
    }
    for (int i = 0; i < PER_THREAD; i++) {
        dcp_plan_t *p = NULL;
        if (a->st[i] == DCP_OK) a->st[i] = dcp_planner_wait(a->pl, t[i], &p);
        if (a->st[i] != DCP_OK) continue;
        a->got[i].n = 0;
        dcp_plan_serialize(p, NULL, 0, &a->got[i].n);
        a->got[i].b = malloc(a->got[i].n);
        a->st[i] = dcp_plan_serialize(p, a->got[i].b, a->got[i].n, &a->got[i].n);
        dcp_plan_destroy(p);
    }
    return NULL;
}

static void test_many_threads_many_tickets(void)
{
    dcp_cluster_t *c = cluster("2x2");
    /* batches first .. first + 5 per thread, first = 0, 3, 6, 9: 15 distinct of 24. With room
     * for all 15 nothing is evicted, so every repeat is a hit - from the cache, or from the
     * worker planning it at that moment - whatever the threads' timing (with room for 8, a
     * slow run under ASan once evicted every repeat before it came) */
    const int distinct = 3 * (SUBMITTERS - 1) + PER_THREAD;
    dcp_planner_t *pl = planner(3, 16, c);
    submitter_t a[SUBMITTERS];
    pthread_t th[SUBMITTERS];
    for (int k = 0; k < SUBMITTERS; k++) {
        memset(&a[k], 0, sizeof a[k]);
        a[k].pl = pl;
        a[k].first = 3 * k; /* overlapping ranges: some batches are shared, so some hit */
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[k], NULL, submitter_main, &a[k]), 0);
    }
    for (int k = 0; k < SUBMITTERS; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < SUBMITTERS; k++)
        for (int i = 0; i < PER_THREAD; i++) {
            CU_ASSERT_EQUAL(a[k].st[i], DCP_OK);
            sample_t s;
            sample(a[k].first + i, &s);
            const bytes_t want = direct_bytes(&s, c);
            CU_ASSERT(same_bytes(a[k].got[i], want));
            free(want.b);
            free(a[k].got[i].b);
        }
    const dcp_planner_stats_t st = stats_of(pl);
    CU_ASSERT_EQUAL(st.submitted, SUBMITTERS * PER_THREAD);
    CU_ASSERT_EQUAL(st.planned, distinct);
    CU_ASSERT_EQUAL(st.cache_hits, SUBMITTERS * PER_THREAD - distinct);
    CU_ASSERT_EQUAL(st.failed, 0);
    CU_ASSERT_EQUAL(st.pending, 0);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

/* ---- cache ----------------------------------------------------------------------------- */

static void test_cache_hit_identical_without_planning(void)
{
    dcp_cluster_t *c = cluster("2x4");
    dcp_planner_t *pl = planner(1, 4, c);
    sample_t s;
    sample(5, &s); /* 2 sequences, one custom mask, zigzag */
    uint64_t t1, t2, t3;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &s.batch, &shape, &s.opts, &t1), DCP_OK);
    dcp_plan_t *p1 = NULL, *p2 = NULL, *p3 = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_wait(pl, t1, &p1), DCP_OK);
    /* the same batch in fresh memory, with fields its mask kinds do not read changed */
    sample_t s2;
    sample(5, &s2);
    for (int k = 0; k < 4; k++)
        if (s2.masks[k].kind == DCP_MASK_CAUSAL || s2.masks[k].kind == DCP_MASK_CUSTOM)
            s2.masks[k].window = 999, s2.masks[k].question_frac = 0.5;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &s2.batch, &shape, &s2.opts, &t2), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_planner_wait(pl, t2, &p2), DCP_OK);
    dcp_planner_stats_t st = stats_of(pl);
    CU_ASSERT_EQUAL(st.planned, 1);
    CU_ASSERT_EQUAL(st.cache_hits, 1);
    CU_ASSERT(p1 != p2); /* a copy each: both are the caller's to destroy */
    const bytes_t b1 = bytes_of(p1), b2 = bytes_of(p2);
    CU_ASSERT(same_bytes(b1, b2));
    dcp_plan_stats_t ps1, ps2;
    dcp_plan_get_stats(p1, &ps1);
    dcp_plan_get_stats(p2, &ps2);
    CU_ASSERT(ps1.plan_ms > 0);
    CU_ASSERT_EQUAL(ps2.plan_ms, 0); /* rebuilt from the cached bytes */
    CU_ASSERT_EQUAL(ps1.comm_bytes, ps2.comm_bytes);
    /* a changed custom range is another batch */
    s2.ranges[4 * 10 + 1] += 1;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &s2.batch, &shape, &s2.opts, &t3), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_planner_wait(pl, t3, &p3), DCP_OK);
    st = stats_of(pl);
    CU_ASSERT_EQUAL(st.planned, 2);
    CU_ASSERT_EQUAL(st.cache_hits, 1);
    free(b1.b);
    free(b2.b);
    dcp_plan_destroy(p1);
    dcp_plan_destroy(p2);
    dcp_plan_destroy(p3);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

/* NULL options are the defaults: the same cache entry as the defaults spelled out. */
static void test_cache_default_options_same_key(void)
{
    dcp_cluster_t *c = cluster("1x2");
    dcp_planner_t *pl = planner(1, 2, c);
    one_seq_t one;
    one_causal(&one, 300);
    const dcp_batch_t batch = one.batch;
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    uint64_t t1, t2;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, NULL, &t1), DCP_OK);
    bytes_t b1 = wait_bytes(pl, t1);
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, &o, &t2), DCP_OK);
    bytes_t b2 = wait_bytes(pl, t2);
    CU_ASSERT(same_bytes(b1, b2));
    CU_ASSERT_EQUAL(stats_of(pl).cache_hits, 1);
    /* another metis_tries is another request: planned, not served from the cache */
    uint64_t t3;
    o.metis_tries = 1;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, &o, &t3), DCP_OK);
    free(wait_bytes(pl, t3).b);
    CU_ASSERT_EQUAL(stats_of(pl).cache_hits, 1);
    CU_ASSERT_EQUAL(stats_of(pl).planned, 2);
    free(b1.b);
    free(b2.b);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

static void test_cache_lru_and_disabled(void)
{
    dcp_cluster_t *c = cluster("1x2");
    sample_t a, b;
    sample(1, &a);
    sample(2, &b);
    for (int cap = 0; cap <= 2; cap++) {
        dcp_planner_t *pl = planner(1, cap, c);
        const sample_t *order[4] = {&a, &b, &a, &b};
        for (int i = 0; i < 4; i++) {
            uint64_t t;
            CU_ASSERT_EQUAL_FATAL(
                dcp_planner_submit(pl, &order[i]->batch, &shape, &order[i]->opts, &t), DCP_OK);
            free(wait_bytes(pl, t).b);
        }
        const dcp_planner_stats_t st = stats_of(pl);
        /* 0: no cache; 1: a and b evict each other; 2: both kept */
        CU_ASSERT_EQUAL(st.planned, cap == 2 ? 2 : 4);
        CU_ASSERT_EQUAL(st.cache_hits, cap == 2 ? 2 : 0);
        dcp_planner_destroy(pl);
    }
    dcp_cluster_destroy(c);
}

/* Zigzag plans of k x 1500-token sequences on 2x4 (block 32): large plans, quickly made. */
static void big_batch(int32_t k, int32_t *len, dcp_mask_t *m, dcp_batch_t *batch,
                      dcp_plan_options_t *o)
{
    for (int32_t i = 0; i < k; i++) len[i] = 1500 + i, m[i] = (dcp_mask_t){.kind = DCP_MASK_FULL};
    *batch = (dcp_batch_t){.num_seqs = k, .lengths = len, .masks = m};
    dcp_plan_options_default(o);
    o->strategy = DCP_STRATEGY_ZIGZAG;
    o->block_size = 32;
}

/* The cache holds at most cache_bytes: filling it with large plans drops the least recently
 * used ones to stay under the bound, and a plan larger than the bound alone is planned and
 * handed out but never cached. */
static void test_cache_bound_in_bytes(void)
{
    dcp_cluster_t *c = cluster("2x4");
    int32_t len[8];
    dcp_mask_t m[8];
    dcp_batch_t batch;
    dcp_plan_options_t o;
    big_batch(2, len, m, &batch, &o);
    dcp_plan_t *one = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &one), DCP_OK);
    const bytes_t b = bytes_of(one);
    dcp_plan_destroy(one);
    free(b.b);
    const int64_t cap = (int64_t)(2.5 * (double)b.n); /* two 2-sequence plans and keys */
    const dcp_planner_config_t cfg = {1, 16, cap};
    dcp_planner_t *pl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_create(&cfg, c, &pl), DCP_OK);
    for (int round = 0; round < 6; round++) {
        big_batch(2, len, m, &batch, &o);
        len[1] += round; /* six distinct batches of about one size */
        uint64_t t;
        CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, &o, &t), DCP_OK);
        free(wait_bytes(pl, t).b);
        const dcp_planner_stats_t st = stats_of(pl);
        CU_ASSERT(st.cached_bytes <= cap);
        CU_ASSERT(st.cached_plans >= 1 && st.cached_plans <= 2);
    }
    big_batch(8, len, m, &batch, &o); /* about 4x the bound's share: never cached */
    for (int i = 0; i < 2; i++) {
        uint64_t t;
        CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, &o, &t), DCP_OK);
        bytes_t got = wait_bytes(pl, t);
        CU_ASSERT((int64_t)got.n > cap);
        free(got.b);
    }
    const dcp_planner_stats_t st = stats_of(pl);
    CU_ASSERT_EQUAL(st.uncached, 2);
    CU_ASSERT_EQUAL(st.planned, 8); /* the large batch was planned twice: no hit */
    CU_ASSERT_EQUAL(st.cache_hits, 0);
    CU_ASSERT(st.cached_bytes <= cap);
    CU_ASSERT_EQUAL(st.evictions, 6 - st.cached_plans); /* the six cached, the rest dropped */
    CU_ASSERT(st.evictions >= 4);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

/* Identical batches in flight at once are planned once, whatever the worker count. */
static void test_identical_in_flight_planned_once(void)
{
    dcp_cluster_t *c = cluster("2x2");
    dcp_planner_t *pl = planner(4, 4, c);
    sample_t s;
    sample(4, &s);
    uint64_t t[6];
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &s.batch, &shape, &s.opts, &t[i]), DCP_OK);
    const bytes_t want = direct_bytes(&s, c);
    for (int i = 0; i < 6; i++) {
        const bytes_t got = wait_bytes(pl, t[i]);
        CU_ASSERT(same_bytes(got, want));
        free(got.b);
    }
    const dcp_planner_stats_t st = stats_of(pl);
    CU_ASSERT_EQUAL(st.planned, 1);
    CU_ASSERT_EQUAL(st.cache_hits, 5);
    free(want.b);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

/* ---- refusals and failures ------------------------------------------------------------- */

static void test_bad_batch_refused_at_submit(void)
{
    dcp_cluster_t *c = cluster("1x2");
    dcp_planner_t *pl = planner(1, 2, c);
    int32_t len[2] = {100, 0};
    dcp_mask_t m[2] = {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};
    dcp_batch_t batch = {.num_seqs = 2, .lengths = len, .masks = m};
    uint64_t t = 77;
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &shape, NULL, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "batch.lengths[1]"));
    CU_ASSERT_EQUAL(t, 77); /* untouched */
    len[1] = 10;
    m[1] = (dcp_mask_t){.kind = DCP_MASK_WINDOW, .window = 0};
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &shape, NULL, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "batch.masks[1].window"));
    m[1] = (dcp_mask_t){.kind = DCP_MASK_CUSTOM, .ranges = NULL, .num_rows = 10};
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &shape, NULL, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "batch.masks[1].ranges"));
    m[1] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    dcp_attn_shape_t bad_shape = shape;
    bad_shape.num_kv_heads = 3;
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &bad_shape, NULL, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "shape.num_kv_heads"));
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.divisions = -1;
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &shape, &o, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "options.divisions"));
    dcp_plan_options_default(&o);
    o.head_blocks = 3;
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &shape, &o, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "options.head_blocks"));
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, NULL, &shape, NULL, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, NULL, NULL, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &shape, NULL, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_planner_submit(NULL, &batch, &shape, NULL, &t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(t, 77);
    CU_ASSERT_EQUAL(stats_of(pl).submitted, 0);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

static void test_bad_config(void)
{
    dcp_cluster_t *c = cluster("1x2");
    dcp_planner_t *pl = (dcp_planner_t *)c; /* any non-NULL value: must stay untouched */
    dcp_planner_config_t cfg = {-1, 4, 0};
    CU_ASSERT_EQUAL(dcp_planner_create(&cfg, c, &pl), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.num_threads"));
    cfg = (dcp_planner_config_t){1, -2, 0};
    CU_ASSERT_EQUAL(dcp_planner_create(&cfg, c, &pl), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.cache_entries"));
    CU_ASSERT_EQUAL(dcp_planner_create(NULL, NULL, &pl), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_planner_create(NULL, c, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT(pl == (dcp_planner_t *)c);
    /* NULL config: the defaults; 0 threads: one */
    CU_ASSERT_EQUAL(dcp_planner_create(NULL, c, &pl), DCP_OK);
    dcp_planner_destroy(pl);
    cfg = (dcp_planner_config_t){1, 4, -1};
    CU_ASSERT_EQUAL(dcp_planner_create(&cfg, c, &pl), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.cache_bytes"));
    cfg = (dcp_planner_config_t){0, 0, 0};
    CU_ASSERT_EQUAL(dcp_planner_create(&cfg, c, &pl), DCP_OK);
    dcp_planner_destroy(pl);
    dcp_planner_destroy(NULL);
    dcp_planner_stats_t st;
    CU_ASSERT_EQUAL(dcp_planner_stats(NULL, &st), DCP_ERR_INVALID_ARG);
    dcp_cluster_destroy(c);
}

static void test_planning_failure_through_wait(void)
{
    dcp_cluster_t *c = cluster("1x2");
    dcp_planner_t *pl = planner(1, 4, c);
    one_seq_t one;
    one_causal(&one, 4096);
    const dcp_batch_t batch = one.batch;
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.mem_cap_bytes = 1000; /* far below one block */
    dcp_plan_t *direct = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &direct), DCP_ERR_CAPACITY);
    char want[512];
    snprintf(want, sizeof want, "%s", dcp_last_error());
    CU_ASSERT(strlen(want) > 0);
    uint64_t t1, t2;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, &o, &t1), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, &o, &t2), DCP_OK);
    dcp_status_t (*collect[2])(dcp_planner_t *, uint64_t, dcp_plan_t **) = {dcp_planner_wait,
                                                                            dcp_planner_try};
    const uint64_t tickets[2] = {t1, t2};
    for (int k = 0; k < 2; k++) {
        dcp_plan_t *p;
        dcp_status_t st;
        do {
            pause_ms(1);
            p = (dcp_plan_t *)c; /* must stay untouched on failure */
            dcp_set_error(DCP_ERR_INTERNAL, "something else");
            st = collect[k](pl, tickets[k], &p);
        } while (st == DCP_OK && p == NULL);
        CU_ASSERT_EQUAL(st, DCP_ERR_CAPACITY);
        CU_ASSERT_STRING_EQUAL(dcp_last_error(), want);
        CU_ASSERT(p == (dcp_plan_t *)c);
    }
    const dcp_planner_stats_t st = stats_of(pl);
    CU_ASSERT_EQUAL(st.failed, 2);
    CU_ASSERT_EQUAL(st.planned, 2); /* failures are not cached */
    CU_ASSERT_EQUAL(st.pending, 0);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

/* A batch that takes a while to plan (METIS on 32 ranks). */
static void slow_batch(int32_t *len, dcp_mask_t *m, dcp_batch_t *batch)
{
    for (int i = 0; i < 8; i++) len[i] = 8192, m[i] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    *batch = (dcp_batch_t){.num_seqs = 8, .lengths = len, .masks = m};
}

static void test_try_before_and_after(void)
{
    dcp_cluster_t *c = cluster("4x8");
    dcp_planner_t *pl = planner(1, 4, c);
    int32_t len[8];
    dcp_mask_t m[8];
    dcp_batch_t slow;
    slow_batch(len, m, &slow);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 256;
    const int32_t len2[1] = {100};
    const dcp_mask_t m2[1] = {{.kind = DCP_MASK_FULL}};
    const dcp_batch_t quick = {.num_seqs = 1, .lengths = len2, .masks = m2};
    uint64_t t_slow, t;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &slow, &shape, &o, &t_slow), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &quick, &shape, NULL, &t), DCP_OK);
    /* one worker, busy with the slow batch: the quick one waits behind it */
    dcp_plan_t *p = (dcp_plan_t *)c;
    CU_ASSERT_EQUAL(dcp_planner_try(pl, t, &p), DCP_OK);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_EQUAL(stats_of(pl).pending, 2);
    while (!p) {
        pause_ms(1);
        CU_ASSERT_EQUAL_FATAL(dcp_planner_try(pl, t, &p), DCP_OK); /* still valid */
    }
    dcp_plan_stats_t ps;
    CU_ASSERT_EQUAL(dcp_plan_get_stats(p, &ps), DCP_OK);
    CU_ASSERT_EQUAL(ps.total_tokens, 100);
    dcp_plan_destroy(p);
    /* spent: try and wait refuse it now */
    p = (dcp_plan_t *)c;
    CU_ASSERT_EQUAL(dcp_planner_try(pl, t, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "already collected"));
    CU_ASSERT_EQUAL(dcp_planner_wait(pl, t, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT(p == (dcp_plan_t *)c);
    /* the slow one was finished first (FIFO): try has it at once */
    CU_ASSERT_EQUAL(dcp_planner_try(pl, t_slow, &p), DCP_OK);
    CU_ASSERT(p != NULL && p != (dcp_plan_t *)c);
    if (p != (dcp_plan_t *)c) dcp_plan_destroy(p);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

static void test_bad_tickets(void)
{
    dcp_cluster_t *c = cluster("1x2");
    dcp_planner_t *pl = planner(1, 0, c);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL(dcp_planner_wait(pl, 0, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "never issued"));
    CU_ASSERT_EQUAL(dcp_planner_wait(pl, 12345, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_planner_try(pl, 12345, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(p);
    one_seq_t one;
    one_causal(&one, 64);
    const dcp_batch_t batch = one.batch;
    uint64_t t;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &batch, &shape, NULL, &t), DCP_OK);
    CU_ASSERT(t != 0);
    CU_ASSERT_EQUAL(dcp_planner_wait(pl, t, NULL), DCP_ERR_INVALID_ARG); /* not spent */
    CU_ASSERT_EQUAL(dcp_planner_try(pl, t, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_planner_wait(NULL, t, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_planner_wait(pl, t, &p), DCP_OK);
    dcp_plan_destroy(p);
    p = NULL;
    CU_ASSERT_EQUAL(dcp_planner_wait(pl, t, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "already collected"));
    CU_ASSERT_PTR_NULL(p);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

/* Destroy with tickets done and uncollected, running, and queued: no leak (ASan), no hang. */
static void test_destroy_with_unclaimed_tickets(void)
{
    dcp_cluster_t *c = cluster("4x8");
    int32_t len[8];
    dcp_mask_t m[8];
    dcp_batch_t slow;
    slow_batch(len, m, &slow);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 512;
    for (int threads = 1; threads <= 2; threads++) {
        dcp_planner_t *pl = planner(threads, 2, c);
        uint64_t t[5];
        for (int i = 0; i < 5; i++) {
            o.divisions = 1 + i;
            CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &slow, &shape, &o, &t[i]), DCP_OK);
        }
        dcp_plan_t *p = NULL;
        CU_ASSERT_EQUAL(dcp_planner_wait(pl, t[0], &p), DCP_OK);
        dcp_planner_destroy(pl);
        /* a plan handed out outlives its planner */
        dcp_plan_stats_t ps;
        CU_ASSERT_EQUAL(dcp_plan_get_stats(p, &ps), DCP_OK);
        CU_ASSERT_EQUAL(ps.total_tokens, 8 * 8192);
        dcp_plan_destroy(p);
    }
    dcp_cluster_destroy(c);
}

int dcp_suite_plan_service(void)
{
    static const dcp_test_t tests[] = {
        {"plans_equal_plan_create", test_plans_equal_plan_create},
        {"many_threads_many_tickets", test_many_threads_many_tickets},
        {"cache_hit_identical_without_planning", test_cache_hit_identical_without_planning},
        {"cache_default_options_same_key", test_cache_default_options_same_key},
        {"cache_lru_and_disabled", test_cache_lru_and_disabled},
        {"cache_bound_in_bytes", test_cache_bound_in_bytes},
        {"identical_in_flight_planned_once", test_identical_in_flight_planned_once},
        {"bad_batch_refused_at_submit", test_bad_batch_refused_at_submit},
        {"bad_config", test_bad_config},
        {"planning_failure_through_wait", test_planning_failure_through_wait},
        {"try_before_and_after", test_try_before_and_after},
        {"bad_tickets", test_bad_tickets},
        {"destroy_with_unclaimed_tickets", test_destroy_with_unclaimed_tickets},
        {NULL, NULL},
    };
    return dcp_add_suite("plan_service", tests);
}
