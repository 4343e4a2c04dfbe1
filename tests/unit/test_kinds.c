/* Layer kinds: a plan of one kind is byte for byte the plan of its masks (checksums of plans
 * serialized before kinds existed); every mask as a kind beside another, every strategy, 1 to 8
 * ranks, forward and backward of each kind equal to the double reference of its masks; views,
 * statistics and the model's step; per-kind balance; version-7 bytes round-trip, run
 * identically and are refused when corrupt; bad kinds are named. */
#include "include/dcp.h"
#include "partition/kinds.h"
#include "partition/plan/plan.h"
#include "partition/plan/wire.h"
#include "partition/planner.h"
#include "plugin/cli/support/harness.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

/* ---- one kind: today's bytes ------------------------------------------------------------ */

/* Plans of five sequences (one of each parsed mask, or a CUSTOM one last): their size and
 * CRC-32C, given as masks and as a one-kind batch.kinds: a one-kind batch must plan to the
 * very bytes of the same masks given without kinds. The figures are the plans this code makes
 * today (fixture 3's batch gets the default's packed-nodes plan, DCP_STRATEGY_NODES; fixture
 * 5 is auto's choice). A change to the planner, the schedule or the plan format that moves
 * them on purpose updates them (the failure prints the new ones); a change that should not
 * move them is caught here. */
static const struct {
    const char *cluster;
    dcp_strategy_t strategy;
    int custom;
    dcp_comm_schedule_t comm;
    dcp_dtype_t dtype;
    size_t size;
    uint32_t crc;
} fixtures[] = {
    {"2x2", DCP_STRATEGY_RING, 0, DCP_COMM_DIVISIONS, DCP_DTYPE_FP32, 100160, 0x4236cecau},
    {"2x2", DCP_STRATEGY_ZIGZAG, 0, DCP_COMM_DIVISIONS, DCP_DTYPE_FP32, 170680, 0xabc43e56u},
    {"2x2", DCP_STRATEGY_LPT, 0, DCP_COMM_DIVISIONS, DCP_DTYPE_FP32, 102408, 0xe582e709u},
    {"2x2", DCP_STRATEGY_METIS, 0, DCP_COMM_DIVISIONS, DCP_DTYPE_FP32, 74852, 0x78b191a8u},
    {"1x3", DCP_STRATEGY_METIS, 1, DCP_COMM_ROUNDS, DCP_DTYPE_BF16, 104196, 0x5feb24eeu},
    {"2x2", DCP_STRATEGY_AUTO, 1, DCP_COMM_DIVISIONS, DCP_DTYPE_BF16, 111468, 0xafb0dd68u},
};

static int32_t fixture_ranges[4 * 900];

static dcp_plan_t *fixture_plan(size_t i, int as_kind)
{
    static const int32_t lengths[5] = {3000, 700, 1, 1500, 900};
    static const char *specs[5] = {"causal", "window:256", "lambda:16:300", "blockwise:64:2",
                                   "shared-question:0.2:3"};
    dcp_mask_t masks[5];
    for (int s = 0; s < 5; s++) CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[s], &masks[s]), DCP_OK);
    for (int q = 0; q < 900; q++) { /* keys [q/2, q] */
        int32_t *r = &fixture_ranges[4 * q];
        r[0] = q / 2, r[1] = q + 1, r[2] = q + 1, r[3] = q + 1;
    }
    if (fixtures[i].custom)
        masks[4] = (dcp_mask_t){.kind = DCP_MASK_CUSTOM, .ranges = fixture_ranges, .num_rows = 900};
    /* as a kind: the same masks as the one kind of batch.kinds, its layer count ignored */
    const dcp_layer_kind_t kind = {masks, 7};
    const dcp_batch_t batch = {.num_seqs = 5,
                               .lengths = lengths,
                               .masks = as_kind ? NULL : masks,
                               .num_kinds = as_kind ? 1 : 0,
                               .kinds = as_kind ? &kind : NULL};
    const dcp_attn_shape_t shape = {4, 2, 16, fixtures[i].dtype, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 256;
    o.head_blocks = 2;
    o.divisions = 3;
    o.strategy = fixtures[i].strategy;
    o.comm_schedule = fixtures[i].comm;
    o.coalesce = 2;
    o.seed = 7;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(fixtures[i].cluster, &c), DCP_OK);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}

static uint8_t *bytes_of(const dcp_plan_t *p, size_t *n)
{
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, NULL, 0, n), DCP_OK);
    uint8_t *b = malloc(*n);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, b, *n, n), DCP_OK);
    return b;
}

static void test_one_kind_bytes_unchanged(void)
{
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++)
        for (int as_kind = 0; as_kind < 2; as_kind++) {
            dcp_plan_t *p = fixture_plan(i, as_kind);
            size_t n;
            uint8_t *b = bytes_of(p, &n);
            const uint32_t crc = dcp_crc32c(b, n);
            CU_ASSERT_EQUAL(n, fixtures[i].size);
            CU_ASSERT_EQUAL(crc, fixtures[i].crc);
            CU_ASSERT_EQUAL(b[8], 6); /* version 6: one kind, no KINDS section */
            if (n != fixtures[i].size || crc != fixtures[i].crc)
                fprintf(stderr, "fixture %zu (as kind %d): {%zu, 0x%08xu}\n", i, as_kind, n, crc);
            dcp_plan_stats_t st;
            CU_ASSERT_EQUAL(dcp_plan_get_stats(p, &st), DCP_OK);
            CU_ASSERT_EQUAL(st.num_kinds, 1);
            CU_ASSERT_EQUAL(st.layers, 1);
            CU_ASSERT_EQUAL(st.model_step_ms, st.predicted_ms + st.bwd_predicted_ms);
            const dcp_plan_t *v = NULL;
            CU_ASSERT_EQUAL(dcp_plan_kind(p, 0, &v), DCP_OK);
            CU_ASSERT_PTR_EQUAL(v, p);
            CU_ASSERT_EQUAL(dcp_plan_kind(p, 1, &v), DCP_ERR_INVALID_ARG);
            free(b);
            dcp_plan_destroy(p);
        }
}

/* ---- several kinds, run against the reference --------------------------------------------- */

#define KCASE_SEQS 16

typedef struct {
    int32_t n; /* <= KCASE_SEQS */
    const int32_t *len;
    int32_t num_kinds;
    dcp_mask_t masks[DCP_MAX_KINDS][KCASE_SEQS];
    int32_t *store[DCP_MAX_KINDS][KCASE_SEQS];
    dcp_layer_kind_t kinds[DCP_MAX_KINDS];
    dcpt_harness_t *h[DCP_MAX_KINDS]; /* one per kind: the same inputs, the kind's masks */
} kcase_t;

/* Kind k of the case: `kind` masks (random parameters; CUSTOM random ranges), or the parsed
 * spec when spec is not NULL. */
static void kcase_kind(kcase_t *c, int32_t k, dcp_mask_kind_t kind, const char *spec,
                       int32_t layers, dcpt_rng_t *rng)
{
    for (int32_t s = 0; s < c->n; s++) {
        c->store[k][s] = NULL;
        if (spec) {
            CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(spec, &c->masks[k][s]), DCP_OK);
        } else {
            c->masks[k][s] = t_random_mask(rng, kind, c->len[s], &c->store[k][s]);
        }
    }
    c->kinds[k] = (dcp_layer_kind_t){c->masks[k], layers};
    if (k >= c->num_kinds) c->num_kinds = k + 1;
}

/* Harnesses: the same Q, K, V, dO for every kind (one seed), each kind's reference. */
static void kcase_harness(kcase_t *c, const dcp_attn_shape_t *shape)
{
    for (int32_t k = 0; k < c->num_kinds; k++) {
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(c->len, c->n, c->masks[k], shape, 31, &c->h[k]),
                              DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(c->h[k], 32), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(c->h[k], 2, NULL, 0), DCP_OK);
    }
}

static void kcase_release(kcase_t *c)
{
    for (int32_t k = 0; k < c->num_kinds; k++) {
        dcpt_harness_destroy(c->h[k]);
        for (int32_t s = 0; s < c->n; s++) free(c->store[k][s]);
    }
}

static dcp_batch_t kcase_batch(const kcase_t *c)
{
    return (dcp_batch_t){
        .num_seqs = c->n, .lengths = c->len, .num_kinds = c->num_kinds, .kinds = c->kinds};
}

static dcp_plan_t *kcase_plan(const kcase_t *c, const char *cluster, const dcp_plan_options_t *o)
{
    const dcp_batch_t b = kcase_batch(c);
    dcp_cluster_t *cl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &cl), DCP_OK);
    dcp_plan_t *p = NULL;
    const dcp_status_t st = dcp_plan_create(&b, &c->h[0]->shape, o, cl, &p);
    if (st != DCP_OK) fprintf(stderr, "kinds plan: %s\n", dcp_last_error());
    CU_ASSERT_EQUAL_FATAL(st, DCP_OK);
    dcp_cluster_destroy(cl);
    return p;
}

/* Every kind of p run through its view, forward and backward, against its reference;
 * digests[k] (may be NULL) get each kind's output digest. */
static void expect_kinds_pass(const kcase_t *c, const dcp_plan_t *p, const char *what,
                              uint64_t *digests)
{
    for (int32_t k = 0; k < c->num_kinds; k++) {
        const dcp_plan_t *v = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_kind(p, k, &v), DCP_OK);
        dcpt_harness_result_t r;
        const dcp_status_t st = dcpt_harness_run(c->h[k], v, 0, 1, 30.0, TOL, NULL, &r);
        CU_ASSERT_EQUAL(st, DCP_OK);
        CU_ASSERT(r.passed && r.bwd_run);
        if (digests) digests[k] = r.digest;
        if (st != DCP_OK || !r.passed)
            fprintf(stderr, "kinds %s, kind %d: %s rel %.3g lse %.3g; dq %.3g dk %.3g dv %.3g %s\n",
                    what, k, dcp_status_string(st), r.max_rel_err, r.max_lse_err,
                    r.max_rel_err_grad[0], r.max_rel_err_grad[1], r.max_rel_err_grad[2],
                    st ? dcp_last_error() : "");
    }
}

/* Each mask as kind 0 beside a window (a causal mask beside the window mask), every strategy,
 * on 1, 2, 3 and 8 ranks in turn, divisions and rounds varied: each kind's forward and backward
 * equal its reference. */
static void test_every_mask_as_a_kind(void)
{
    static const char *clusters[] = {"1x1", "1x2", "1x3", "2x4"};
    const int32_t len[5] = {1, 300, 23, 57, 130};
    const dcp_attn_shape_t shapes[2] = {{4, 4, 16, DCP_DTYPE_FP32, 0.0f},
                                        {8, 2, 16, DCP_DTYPE_FP32, 0.0f}};
    dcpt_rng_t rng = {71};
    for (int m = 0; m < DCP_MASK_KIND_COUNT; m++) {
        kcase_t c = {.n = 5, .len = len};
        kcase_kind(&c, 0, (dcp_mask_kind_t)m, NULL, 1 + m % 3, &rng);
        kcase_kind(&c, 1, DCP_MASK_WINDOW, m == DCP_MASK_WINDOW ? "causal" : "window:37", 5, &rng);
        kcase_harness(&c, &shapes[m % 2]);
        for (int s = 0; s < DCP_STRATEGY_COUNT; s++) {
            dcp_plan_options_t o;
            dcp_plan_options_default(&o);
            o.strategy = (dcp_strategy_t)s;
            o.block_size = 16;
            o.divisions = 1 + (m + s) % 4;
            o.head_blocks = 1 + s % 2;
            o.comm_schedule = (m + s) % 2 ? DCP_COMM_ROUNDS : DCP_COMM_DIVISIONS;
            const char *cluster = clusters[(m + s) % 4];
            dcp_plan_t *p = kcase_plan(&c, cluster, &o);
            char what[96];
            snprintf(what, sizeof what, "mask %d strategy %s cluster %s", m,
                     dcp_strategy_name((dcp_strategy_t)s), cluster);
            expect_kinds_pass(&c, p, what, NULL);
            dcp_plan_destroy(p);
        }
        kcase_release(&c);
    }
}

/* Four kinds at once, with AUTO, and a plan that went through bytes (version 7) runs every
 * kind bit-identically. */
static void test_four_kinds_and_bytes(void)
{
    const int32_t len[4] = {200, 1, 90, 45};
    kcase_t c = {.n = 4, .len = len};
    dcpt_rng_t rng = {5};
    kcase_kind(&c, 0, DCP_MASK_CAUSAL, "causal", 1, &rng);
    kcase_kind(&c, 1, DCP_MASK_WINDOW, "window:20", 3, &rng);
    kcase_kind(&c, 2, DCP_MASK_LAMBDA, "lambda:4:24", 2, &rng);
    kcase_kind(&c, 3, DCP_MASK_CUSTOM, NULL, 1, &rng);
    const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    kcase_harness(&c, &shape);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 32;
    o.divisions = 2;
    o.strategy = DCP_STRATEGY_AUTO;
    dcp_plan_t *p = kcase_plan(&c, "2x2", &o);
    uint64_t d0[DCP_MAX_KINDS], d1[DCP_MAX_KINDS];
    expect_kinds_pass(&c, p, "four kinds, auto", d0);
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    CU_ASSERT_EQUAL(b[8], 7); /* version 7: several kinds */
    dcp_plan_t *q = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_deserialize(b, n, &q), DCP_OK);
    size_t n2;
    uint8_t *b2 = bytes_of(q, &n2); /* canonical: the same bytes again */
    CU_ASSERT(n2 == n && !memcmp(b, b2, n));
    const dcp_plan_t *v3 = NULL;
    CU_ASSERT_EQUAL(dcp_plan_kind(q, 3, &v3), DCP_OK);
    size_t n3;
    uint8_t *b3 = bytes_of(v3, &n3); /* a view writes its plan */
    CU_ASSERT(n3 == n && !memcmp(b, b3, n));
    expect_kinds_pass(&c, q, "four kinds, deserialized", d1);
    for (int32_t k = 0; k < 4; k++) CU_ASSERT_EQUAL(d0[k], d1[k]);
    /* the kinds' digests differ: each view runs its own masks */
    CU_ASSERT(d0[0] != d0[1] && d0[1] != d0[2] && d0[2] != d0[3]);
    free(b);
    free(b2);
    free(b3);
    dcp_plan_destroy(q);
    dcp_plan_destroy(p);
    kcase_release(&c);
}

/* ---- views, statistics, balance ----------------------------------------------------------- */

/* A long-tailed batch with a global and a window kind (Gemma 3's 1 : 5). */
static void gemma_case(kcase_t *c, const int32_t *len, int32_t n, dcpt_rng_t *rng)
{
    *c = (kcase_t){.n = n, .len = len};
    kcase_kind(c, 0, DCP_MASK_CAUSAL, "causal", 1, rng);
    kcase_kind(c, 1, DCP_MASK_WINDOW, "window:256", 5, rng);
}

static void test_views_and_stats(void)
{
    const int32_t len[6] = {4096, 700, 300, 1200, 64, 2000};
    kcase_t c;
    dcpt_rng_t rng = {1};
    gemma_case(&c, len, 6, &rng);
    const dcp_batch_t b = kcase_batch(&c);
    const dcp_attn_shape_t shape = {8, 2, 32, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 256;
    dcp_cluster_t *cl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &cl), DCP_OK);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&b, &shape, &o, cl, &p), DCP_OK);
    const dcp_plan_t *v[3] = {NULL, NULL, NULL};
    CU_ASSERT_EQUAL(dcp_plan_kind(p, 0, &v[0]), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_kind(p, 1, &v[1]), DCP_OK);
    CU_ASSERT_PTR_EQUAL(v[0], p);
    CU_ASSERT_EQUAL(dcp_plan_kind(v[1], 0, &v[2]), DCP_OK); /* a view finds its plan */
    CU_ASSERT_PTR_EQUAL(v[2], p);
    CU_ASSERT_EQUAL(dcp_plan_kind(p, 2, &v[2]), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_kind(p, -1, &v[2]), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_kind(NULL, 0, &v[2]), DCP_ERR_INVALID_ARG);
    dcp_plan_destroy((dcp_plan_t *)v[1]); /* does nothing: the view is the plan's */
    dcp_plan_stats_t s[2];
    CU_ASSERT_EQUAL(dcp_plan_get_stats(v[0], &s[0]), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_get_stats(v[1], &s[1]), DCP_OK);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(s[k].num_kinds, 2);
        CU_ASSERT_EQUAL(s[k].kind, k);
        CU_ASSERT_EQUAL(s[k].layers, k == 0 ? 1 : 5);
        CU_ASSERT(s[k].predicted_ms > 0 && s[k].bwd_predicted_ms > 0);
    }
    const double model = 1 * (s[0].predicted_ms + s[0].bwd_predicted_ms) +
                         5 * (s[1].predicted_ms + s[1].bwd_predicted_ms);
    CU_ASSERT_DOUBLE_EQUAL(s[0].model_step_ms, model, 1e-9 * model);
    CU_ASSERT_EQUAL(s[0].model_step_ms, s[1].model_step_ms);
    /* the window kind computes far fewer pairs than the global one, on the same tokens */
    CU_ASSERT(s[1].total_flops < s[0].total_flops / 2);
    CU_ASSERT_EQUAL(s[0].total_tokens, s[1].total_tokens);
    CU_ASSERT_EQUAL(s[0].num_token_blocks, s[1].num_token_blocks);
    /* one placement: every rank's local layout is the same through either kind */
    for (int32_t r = 0; r < 8; r++) {
        int32_t n0, n1;
        int64_t t0, t1;
        CU_ASSERT_EQUAL(dcp_plan_local_layout(v[0], r, NULL, 0, &n0, &t0), DCP_OK);
        CU_ASSERT_EQUAL(dcp_plan_local_layout(v[1], r, NULL, 0, &n1, &t1), DCP_OK);
        CU_ASSERT(n0 == n1 && t0 == t1);
    }
    /* each kind is balanced on its own (the joint plan's constraint per kind) */
    CU_ASSERT(s[0].compute_imbalance < 0.25);
    CU_ASSERT(s[1].compute_imbalance < 0.25);
    dcp_plan_destroy(p);
    dcp_cluster_destroy(cl);
    kcase_release(&c);
}

/* Planned for the window alone, the global layers run unbalanced; the joint plan balances the kind
 * with the most work and is predicted faster for the model (Gemma 3's five windows per global
 * layer) than either. */
static void test_joint_beats_one_kinds_placement(void)
{
    const int32_t len[10] = {8192, 4096, 2048, 512, 512, 512, 300, 200, 1024, 3000};
    kcase_t c;
    dcpt_rng_t rng = {2};
    gemma_case(&c, len, 10, &rng);
    const dcp_attn_shape_t shape = {8, 2, 64, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 256;
    dcp_cluster_t *cl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &cl), DCP_OK);
    const dcp_batch_t joint = kcase_batch(&c);
    dcp_plan_t *pj = NULL, *one[2] = {NULL, NULL}, *on[2] = {NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&joint, &shape, &o, cl, &pj), DCP_OK);
    dcp_plan_stats_t sj[2], so[2][2];
    for (int k = 0; k < 2; k++) {
        const dcp_batch_t alone = {.num_seqs = c.n, .lengths = c.len, .masks = c.masks[k]};
        CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&alone, &shape, &o, cl, &one[k]), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcp_plan_create_on(one[k], &joint, cl, &on[k]), DCP_OK);
        for (int j = 0; j < 2; j++) {
            const dcp_plan_t *v = NULL;
            CU_ASSERT_EQUAL(dcp_plan_kind(on[k], j, &v), DCP_OK);
            CU_ASSERT_EQUAL(dcp_plan_get_stats(v, &so[k][j]), DCP_OK);
        }
        const dcp_plan_t *v = NULL;
        CU_ASSERT_EQUAL(dcp_plan_kind(pj, k, &v), DCP_OK);
        CU_ASSERT_EQUAL(dcp_plan_get_stats(v, &sj[k]), DCP_OK);
    }
    /* each kind's own plan is the other kind's placement run as is */
    dcp_plan_stats_t s0;
    CU_ASSERT_EQUAL(dcp_plan_get_stats(one[0], &s0), DCP_OK);
    CU_ASSERT_EQUAL(so[0][0].comm_bytes, s0.comm_bytes);
    CU_ASSERT_EQUAL(so[0][0].compute_imbalance, s0.compute_imbalance);
    CU_ASSERT(sj[0].compute_imbalance < 0.1); /* the kind with the most work is balanced */
    /* (the window on the global placement is no longer unbalanced here: the global mask's own
     * plan became zigzag's once relays made zigzag cheaper, and zigzag balances a window) */
    CU_ASSERT(so[1][0].compute_imbalance > 0.3); /* the global on the window's */
    CU_ASSERT(sj[0].model_step_ms < so[0][0].model_step_ms);
    CU_ASSERT(sj[0].model_step_ms < so[1][0].model_step_ms);
    for (int k = 0; k < 2; k++) {
        dcp_plan_destroy(one[k]);
        dcp_plan_destroy(on[k]);
    }
    dcp_plan_destroy(pj);
    dcp_cluster_destroy(cl);
    kcase_release(&c);
}

/* The re-layout between a ring and a zigzag placement of one sequence on two ranks: a
 * quarter of the tokens each way (chunk 1 to rank 1, chunk 3 to rank 0), at the intra-node
 * bandwidth, plus one latency; nothing between a plan and itself. */
static void test_relayout_cost(void)
{
    const int32_t len[1] = {4096};
    dcp_mask_t m[1];
    dcp_mask_parse("causal", &m[0]);
    const dcp_attn_shape_t shape = {4, 2, 16, DCP_DTYPE_BF16, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 512;
    o.strategy = DCP_STRATEGY_RING;
    dcp_plan_t *ring = t_plan_shape(len, 1, m, "1x2:intra=100:lat=10", &shape, &o);
    o.strategy = DCP_STRATEGY_ZIGZAG;
    dcp_plan_t *zz = t_plan_shape(len, 1, m, "1x2:intra=100:lat=10", &shape, &o);
    const int64_t row = 4 * 16 * 2;
    double ms = -1;
    CU_ASSERT_EQUAL(dcp_kinds_relayout_ms(ring, zz, row, &ms), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(ms, 1024.0 * row / 100e9 * 1e3 + 10e-3, 1e-12);
    CU_ASSERT_EQUAL(dcp_kinds_relayout_ms(zz, ring, row, &ms), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(ms, 1024.0 * row / 100e9 * 1e3 + 10e-3, 1e-12);
    CU_ASSERT_EQUAL(dcp_kinds_relayout_ms(zz, zz, row, &ms), DCP_OK);
    CU_ASSERT_EQUAL(ms, 0.0);
    const int32_t other[1] = {4095};
    dcp_plan_t *short_one = t_plan_shape(other, 1, m, "1x2:intra=100:lat=10", &shape, &o);
    CU_ASSERT_EQUAL(dcp_kinds_relayout_ms(zz, short_one, row, &ms), DCP_ERR_INVALID_ARG);
    dcp_plan_destroy(short_one);
    dcp_plan_destroy(ring);
    dcp_plan_destroy(zz);
}

/* partition/README.md's example, as printed there (its lines are an excerpt of these): a plan of a
 * global and a window kind, each kind run on the same local rows. */
static void test_readme_example(void)
{
    const int32_t lengths[3] = {3000, 700, 1};
    const dcp_attn_shape_t shape = {
        .num_heads = 8, .num_kv_heads = 2, .head_dim = 64, .dtype = DCP_DTYPE_FP32};
    dcp_plan_options_t opts;
    dcp_plan_options_default(&opts);
    opts.block_size = 256;
    dcp_cluster_t *cluster = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &cluster), DCP_OK);
    dcp_plan_t *plan = NULL;
    dcp_tensors_t io[8];
    float *mem[8][5];
    dcpt_rng_t rng = {3};
    dcp_status_t st[3];

    dcp_mask_t global[3], local[3];
    for (int i = 0; i < 3; i++) {
        dcp_mask_parse("causal", &global[i]);
        dcp_mask_parse("window:1024", &local[i]);
    }
    const dcp_layer_kind_t kinds[2] = {{global, 1}, {local, 5}}; /* masks, layers */
    const dcp_batch_t batch = {.num_seqs = 3, .lengths = lengths, .num_kinds = 2, .kinds = kinds};
    st[0] = dcp_plan_create(&batch, &shape, &opts, cluster, &plan);
    const dcp_plan_t *window = NULL;
    dcp_plan_kind(plan, 1, &window); /* kind 1 as a plan of its own; kind 0 is `plan` */

    CU_ASSERT_EQUAL_FATAL(st[0], DCP_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(window);
    for (int32_t r = 0; r < 8; r++) { /* rank r's local rows: Q, K, V random, O, LSE */
        int64_t t;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_local_layout(plan, r, NULL, 0, NULL, &t), DCP_OK);
        const int64_t n[5] = {t * 8 * 64, t * 2 * 64, t * 2 * 64, t * 8 * 64, t * 8};
        for (int j = 0; j < 5; j++) {
            mem[r][j] = calloc((size_t)n[j] + 1, sizeof(float));
            for (int64_t i = 0; j < 3 && i < n[j]; i++) mem[r][j][i] = (float)dcpt_rng_normal(&rng);
        }
        io[r] = (dcp_tensors_t){
            .q = mem[r][0], .k = mem[r][1], .v = mem[r][2], .o = mem[r][3], .lse = mem[r][4]};
    }
    st[1] = dcp_forward_inproc(window, io, 0, NULL); /* a window layer: the same local rows */
    st[2] = dcp_forward_inproc(plan, io, 0, NULL);   /* a global layer */
    CU_ASSERT(st[1] == DCP_OK && st[2] == DCP_OK);
    for (int32_t r = 0; r < 8; r++)
        for (int j = 0; j < 5; j++) free(mem[r][j]);
    dcp_plan_destroy(plan);
    dcp_cluster_destroy(cluster);
}

/* ---- bytes and arguments ------------------------------------------------------------------ */

/* Version-4 bytes altered in their KINDS section (and resealed, so that only the validator
 * stands between them and a run) are refused; truncations too. */
static void test_kinds_bytes_rejected(void)
{
    const int32_t len[3] = {100, 40, 7};
    kcase_t c = {.n = 3, .len = len};
    dcpt_rng_t rng = {9};
    kcase_kind(&c, 0, DCP_MASK_CAUSAL, "causal", 2, &rng);
    kcase_kind(&c, 1, DCP_MASK_CUSTOM, NULL, 3, &rng);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 16;
    o.strategy = DCP_STRATEGY_LPT;
    const dcp_attn_shape_t shape = {2, 1, 8, DCP_DTYPE_FP32, 0.0f};
    kcase_harness(&c, &shape);
    dcp_plan_t *p = kcase_plan(&c, "1x3", &o);
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    dcp_plan_t *q = NULL;
    for (size_t cut = 0; cut < n; cut += 1 + n / 97)
        CU_ASSERT_EQUAL(dcp_plan_deserialize(b, cut, &q), DCP_ERR_PLAN_CORRUPT);
    /* the KINDS tag and the fields after it: kind count, layer counts, kind 1's pass ranges */
    const uint32_t tag = 0x4154454d + 5;
    size_t at = 32;
    while (at + 4 <= n && memcmp(b + at, &tag, 4) != 0) at++;
    CU_ASSERT_FATAL(at + 4 <= n);
    const struct {
        size_t off;
        int32_t value;
    } edits[] = {{4, 1},  {4, 5},        {4, 0},  {8, 0},  {8, 2000}, {12, -1},
                 {16, 1}, {20, 1 << 20}, {24, 3}, {28, 0}, {36, 99}};
    for (size_t e = 0; e < sizeof edits / sizeof *edits; e++) {
        uint8_t *x = malloc(n);
        memcpy(x, b, n);
        memcpy(x + at + edits[e].off, &edits[e].value, 4);
        const uint32_t crc = dcp_crc32c(x + 32, n - 32);
        memcpy(x + 24, &crc, 4);
        const dcp_status_t st = dcp_plan_deserialize(x, n, &q);
        CU_ASSERT_EQUAL(st, DCP_ERR_PLAN_CORRUPT);
        if (st == DCP_OK) {
            fprintf(stderr, "kinds bytes edit %zu accepted\n", e);
            dcp_plan_destroy(q);
        }
        free(x);
    }
    /* these bytes read as version 6 (no KINDS section) are refused */
    uint8_t *x = malloc(n);
    memcpy(x, b, n);
    x[8] = 6;
    CU_ASSERT_EQUAL(dcp_plan_deserialize(x, n, &q), DCP_ERR_PLAN_CORRUPT);
    free(x);
    free(b);
    dcp_plan_destroy(p);
    kcase_release(&c);
}

static void expect_refused(const dcp_batch_t *b, const char *field)
{
    const dcp_attn_shape_t shape = {2, 1, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_cluster_t *cl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &cl), DCP_OK);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL(dcp_plan_create(b, &shape, NULL, cl, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), field));
    if (!strstr(dcp_last_error(), field))
        fprintf(stderr, "expected '%s' in '%s'\n", field, dcp_last_error());
    dcp_planner_t *pl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_create(NULL, cl, &pl), DCP_OK);
    uint64_t ticket = 0;
    CU_ASSERT_EQUAL(dcp_planner_submit(pl, b, &shape, NULL, &ticket), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), field));
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(cl);
}

static void test_bad_kinds_named(void)
{
    const int32_t len[2] = {10, 20};
    dcp_mask_t causal[2], bad[2];
    dcp_mask_parse("causal", &causal[0]);
    dcp_mask_parse("causal", &causal[1]);
    bad[0] = causal[0];
    bad[1] = (dcp_mask_t){.kind = DCP_MASK_WINDOW, .window = 0};
    dcp_layer_kind_t k[DCP_MAX_KINDS + 1];
    for (int i = 0; i <= DCP_MAX_KINDS; i++) k[i] = (dcp_layer_kind_t){causal, 1};
    dcp_batch_t b = {.num_seqs = 2, .lengths = len, .num_kinds = 2, .kinds = k};
    b.masks = causal;
    expect_refused(&b, "batch.masks");
    b.masks = NULL;
    b.num_kinds = DCP_MAX_KINDS + 1;
    expect_refused(&b, "batch.num_kinds");
    b.num_kinds = -1;
    expect_refused(&b, "batch.num_kinds");
    b.num_kinds = 2;
    b.kinds = NULL;
    expect_refused(&b, "batch.kinds");
    b.kinds = k;
    k[1].layers = 0;
    expect_refused(&b, "batch.kinds[1].layers");
    k[1].layers = 1025;
    expect_refused(&b, "batch.kinds[1].layers");
    k[1].layers = 1;
    k[1].masks = NULL;
    expect_refused(&b, "batch.kinds[1].masks");
    k[1].masks = bad;
    expect_refused(&b, "batch.kinds[1].masks[1].window");
}

/* The planner service plans (and caches) batches of kinds as dcp_plan_create() does. */
static void test_planner_service_kinds(void)
{
    const int32_t len[3] = {300, 77, 5};
    kcase_t c = {.n = 3, .len = len};
    dcpt_rng_t rng = {3};
    kcase_kind(&c, 0, DCP_MASK_CAUSAL, "causal", 1, &rng);
    kcase_kind(&c, 1, DCP_MASK_CUSTOM, NULL, 2, &rng);
    const dcp_batch_t b = kcase_batch(&c);
    const dcp_attn_shape_t shape = {2, 1, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_cluster_t *cl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x4", &cl), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 32;
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&b, &shape, &o, cl, &p), DCP_OK);
    dcp_planner_t *pl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_create(NULL, cl, &pl), DCP_OK);
    size_t n;
    uint8_t *want = bytes_of(p, &n);
    for (int i = 0; i < 2; i++) { /* planned, then from the cache */
        uint64_t t;
        CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &b, &shape, &o, &t), DCP_OK);
        dcp_plan_t *q = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_planner_wait(pl, t, &q), DCP_OK);
        size_t m;
        uint8_t *got = bytes_of(q, &m);
        CU_ASSERT(m == n && !memcmp(got, want, n));
        free(got);
        dcp_plan_destroy(q);
    }
    /* another layer count is another batch */
    c.kinds[1].layers = 3;
    uint64_t t;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &b, &shape, &o, &t), DCP_OK);
    dcp_plan_t *q = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_wait(pl, t, &q), DCP_OK);
    dcp_plan_stats_t st;
    const dcp_plan_t *v = NULL;
    CU_ASSERT_EQUAL(dcp_plan_kind(q, 1, &v), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_get_stats(v, &st), DCP_OK);
    CU_ASSERT_EQUAL(st.layers, 3);
    dcp_planner_stats_t ps;
    CU_ASSERT_EQUAL(dcp_planner_stats(pl, &ps), DCP_OK);
    CU_ASSERT_EQUAL(ps.cache_hits, 1);
    dcp_plan_destroy(q);
    free(want);
    dcp_planner_destroy(pl);
    dcp_plan_destroy(p);
    dcp_cluster_destroy(cl);
    kcase_release(&c);
}

int dcp_suite_kinds(void)
{
    static const dcp_test_t tests[] = {
        {"one_kind_bytes_unchanged", test_one_kind_bytes_unchanged},
        {"every_mask_as_a_kind", test_every_mask_as_a_kind},
        {"four_kinds_and_bytes", test_four_kinds_and_bytes},
        {"views_and_stats", test_views_and_stats},
        {"joint_beats_one_kinds_placement", test_joint_beats_one_kinds_placement},
        {"relayout_cost", test_relayout_cost},
        {"readme_example", test_readme_example},
        {"kinds_bytes_rejected", test_kinds_bytes_rejected},
        {"bad_kinds_named", test_bad_kinds_named},
        {"planner_service_kinds", test_planner_service_kinds},
        {NULL, NULL}};
    return dcp_add_suite("kinds", tests);
}
