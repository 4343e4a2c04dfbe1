/* The attention variants of today's open models, end to end against the double-precision
 * reference: learnable sinks (GPT-OSS), logit softcap (Gemma 2), head dim 256 (Gemma), MLA's
 * query/key head dim 192 with value head dim 128 (DeepSeek-V3), each with the max logit
 * (QK-clip): O, LSE, dQ, dK, dV, d sinks and the max logit of every mask with the default
 * strategy and zigzag on 1, 4 and 8 in-process ranks; the same in bf16 storage; and the
 * refusals of calls that ask for them wrongly. */
#include "include/dcp.h"
#include "plugin/cli/support/harness.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

typedef struct {
    const char *name;
    dcp_attn_shape_t shape;
    int sinks; /* learnable sinks and their gradient */
} variant_t;

static const variant_t variants[] = {
    {"sinks", {8, 2, 32, DCP_DTYPE_FP32, 0.0f, 0.0f, 0}, 1},
    {"softcap", {4, 4, 16, DCP_DTYPE_FP32, 0.0f, 2.0f, 0}, 0},
    {"d256", {2, 1, 256, DCP_DTYPE_FP32, 0.0f, 0.0f, 0}, 0},
    {"mla-192-128", {2, 1, 192, DCP_DTYPE_FP32, 0.0f, 0.0f, 128}, 0},
};

static dcp_plan_t *plan_for(const dcpt_harness_t *h, const char *cluster, dcp_strategy_t s)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s;
    o.block_size = 16;
    o.divisions = 2;
    const dcp_batch_t b = dcpt_harness_batch(h);
    dcp_plan_t *p = NULL;
    const dcp_status_t st = dcp_plan_create(&b, &h->shape, &o, c, &p);
    if (st != DCP_OK) fprintf(stderr, "plan: %s\n", dcp_last_error());
    CU_ASSERT_EQUAL_FATAL(st, DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}

static void report(const char *what, dcp_status_t st, const dcpt_harness_result_t *r)
{
    fprintf(stderr,
            "variants %s: %s rel %.3g lse %.3g bad %lld; dq %.3g dk %.3g dv %.3g bad %lld; max "
            "logit %.3g dsinks %.3g bad %lld %s\n",
            what, dcp_status_string(st), r->max_rel_err, r->max_lse_err, (long long)r->bad_values,
            r->max_rel_err_grad[0], r->max_rel_err_grad[1], r->max_rel_err_grad[2],
            (long long)r->bwd_bad_values, r->max_logit_err, r->dsinks_err,
            (long long)r->variant_bad, st ? dcp_last_error() : "");
}

/* A harness of the batch below with mask kind `kind` on every sequence, the variant's shape,
 * backward, max logit and (for the sinks variant) sinks; reference computed. */
static dcpt_harness_t *harness_for(const variant_t *v, int kind, dcpt_rng_t *rng, int32_t *store[5],
                                   uint64_t seed)
{
    static const int32_t len[5] = {1, 150, 23, 57, 9};
    dcp_mask_t m[5];
    for (int s = 0; s < 5; s++) m[s] = t_random_mask(rng, (dcp_mask_kind_t)kind, len[s], &store[s]);
    dcpt_harness_t *h = NULL;
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 5, m, &v->shape, seed, &h), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, seed + 1), DCP_OK);
    if (v->sinks) CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_sinks(h, seed + 2), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_max_logit(h), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
    return h;
}

/* Every mask x {the default strategy, zigzag} x {1, 4, 8 ranks} of one variant. */
static void every_mask_and_rank_count(const variant_t *v)
{
    static const char *clusters[3] = {"1x1", "1x4", "2x4"};
    static const dcp_strategy_t strategies[2] = {DCP_STRATEGY_METIS, DCP_STRATEGY_ZIGZAG};
    dcpt_rng_t rng = {97};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
        int32_t *store[5];
        dcpt_harness_t *h = harness_for(v, kind, &rng, store, 300 + kind);
        for (int c = 0; c < 3; c++)
            for (int s = 0; s < 2; s++) {
                dcp_plan_t *p = plan_for(h, clusters[c], strategies[s]);
                dcpt_harness_result_t r;
                const dcp_status_t st = dcpt_harness_run(h, p, 0, 1, 30.0, TOL, NULL, &r);
                CU_ASSERT_EQUAL(st, DCP_OK);
                CU_ASSERT(r.passed);
                CU_ASSERT(r.bwd_run);
                if (st != DCP_OK || !r.passed) {
                    char what[96];
                    snprintf(what, sizeof what, "%s mask %d %s on %s", v->name, kind,
                             dcp_strategy_name(strategies[s]), clusters[c]);
                    report(what, st, &r);
                }
                dcp_plan_destroy(p);
            }
        dcpt_harness_destroy(h);
        for (int s = 0; s < 5; s++) free(store[s]);
    }
}

static void test_sinks(void)
{
    every_mask_and_rank_count(&variants[0]);
}

static void test_softcap(void)
{
    every_mask_and_rank_count(&variants[1]);
}

static void test_head_dim_256(void)
{
    every_mask_and_rank_count(&variants[2]);
}

static void test_mla_192_128(void)
{
    every_mask_and_rank_count(&variants[3]);
}

/* The variants change what they should: the reference with them differs from the plain one
 * (so the checks above cannot pass on kernels that ignore them), sinks lower every row's
 * weight of its values and raise its LSE, a softcap bounds the max logit. */
static void test_variants_change_the_result(void)
{
    static const int32_t len[2] = {40, 17};
    dcp_mask_t m[2];
    for (int s = 0; s < 2; s++) dcp_mask_parse("causal", &m[s]);
    dcp_attn_shape_t shape = {4, 2, 16, DCP_DTYPE_FP32, 0.0f, 0.0f, 0};
    dcpt_harness_t *plain = NULL, *sinks = NULL, *capped = NULL;
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 2, m, &shape, 11, &plain), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 2, m, &shape, 11, &sinks), DCP_OK);
    shape.softcap = 0.5f;
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 2, m, &shape, 11, &capped), DCP_OK);
    CU_ASSERT_EQUAL(dcpt_harness_enable_sinks(sinks, 3), DCP_OK);
    CU_ASSERT_EQUAL(dcpt_harness_enable_max_logit(plain), DCP_OK);
    CU_ASSERT_EQUAL(dcpt_harness_enable_max_logit(capped), DCP_OK);
    dcpt_harness_t *all[3] = {plain, sinks, capped};
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(dcpt_harness_reference(all[i], 1, NULL, 0), DCP_OK);
    int lse_up = 1;
    double o_diff = 0;
    for (int64_t i = 0; i < plain->tokens * 4; i++) lse_up &= sinks->ref_lse[i] > plain->ref_lse[i];
    for (int64_t i = 0; i < plain->tokens * 4 * 16; i++)
        o_diff = fmax(o_diff, fabs(sinks->ref_o[i] - plain->ref_o[i]));
    CU_ASSERT(lse_up);
    CU_ASSERT(o_diff > 1e-3);
    for (int h = 0; h < 4; h++) {
        CU_ASSERT(plain->ref_max_logit[h] > 0.5); /* random scores of 57 keys exceed it */
        CU_ASSERT(capped->ref_max_logit[h] <= 0.5 && capped->ref_max_logit[h] > 0.4);
    }
    dcpt_harness_destroy(plain);
    dcpt_harness_destroy(sinks);
    dcpt_harness_destroy(capped);
}

/* All four at once in bf16 storage on CPU ranks (fp32 arithmetic): the GPU executor's numbers
 * have this twin, checked by FlashAttention's rules. */
static void test_all_variants_half_storage(void)
{
    const variant_t v = {"all-bf16", {8, 2, 192, DCP_DTYPE_BF16, 0.0f, 20.0f, 128}, 1};
    dcpt_rng_t rng = {5};
    for (int kind = DCP_MASK_CAUSAL; kind <= DCP_MASK_LAMBDA; kind++) {
        int32_t *store[5];
        dcpt_harness_t *h = harness_for(&v, kind, &rng, store, 40 + kind);
        dcp_plan_t *p = plan_for(h, "2x2", DCP_STRATEGY_METIS);
        dcpt_harness_result_t r;
        const dcp_status_t st = dcpt_harness_run(h, p, 0, 1, 30.0, TOL, NULL, &r);
        CU_ASSERT_EQUAL(st, DCP_OK);
        CU_ASSERT(r.passed);
        CU_ASSERT(r.low_abs_err > 0);
        if (st != DCP_OK || !r.passed) report("all variants, bf16", st, &r);
        dcp_plan_destroy(p);
        dcpt_harness_destroy(h);
        for (int s = 0; s < 5; s++) free(store[s]);
    }
}

/* Calls that ask for a variant wrongly are refused by name on every rank, and write nothing:
 * dsinks without sinks; a max logit one rank asks for and another does not. */
static void test_wrong_requests_refused(void)
{
    static const int32_t len[1] = {64};
    dcp_mask_t m;
    dcp_mask_parse("causal", &m);
    const dcp_attn_shape_t shape = {2, 1, 8, DCP_DTYPE_FP32, 0.0f, 0.0f, 0};
    dcp_plan_t *p = t_plan_shape(len, 1, &m, "1x2", &shape, NULL);
    float *mem[2];
    dcp_tensors_t io[2];
    dcp_grad_tensors_t gio[2];
    float ml[2][2] = {{7, 7}, {7, 7}}, ds[2] = {7, 7};
    for (int r = 0; r < 2; r++) {
        int64_t n;
        dcp_plan_local_layout(p, r, NULL, 0, NULL, &n);
        mem[r] = calloc((size_t)(n * 2 * 8 * 6 + n * 2), sizeof(float));
        float *b = mem[r];
        io[r] = (dcp_tensors_t){b, b + n * 16, b + n * 24, b + n * 32, b + n * 48, 0.0f};
        gio[r] = (dcp_grad_tensors_t){io[r], b + n * 50, b + n * 66, b + n * 82, b + n * 90};
    }
    io[0].max_logit = ml[0]; /* rank 1 does not ask */
    CU_ASSERT_EQUAL(dcp_forward_inproc(p, io, 10.0, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "max logit"));
    CU_ASSERT(ml[0][0] == 7 && ml[0][1] == 7); /* nothing written */
    io[0].max_logit = NULL;
    CU_ASSERT_EQUAL(dcp_forward_inproc(p, io, 10.0, NULL), DCP_OK);
    for (int r = 0; r < 2; r++) gio[r].fwd = io[r];
    gio[1].dsinks = ds; /* without fwd.sinks */
    CU_ASSERT_EQUAL(dcp_backward_inproc(p, gio, 10.0, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "io.dsinks"));
    CU_ASSERT(ds[0] == 7 && ds[1] == 7);
    for (int r = 0; r < 2; r++) free(mem[r]);
    dcp_plan_destroy(p);
}

/* Bad shapes are refused by name: a negative softcap, a value head dim past 4096. */
static void test_bad_shapes_refused(void)
{
    static const int32_t len[1] = {8};
    dcp_mask_t m;
    dcp_mask_parse("causal", &m);
    const dcp_batch_t b = {.num_seqs = 1, .lengths = len, .masks = &m};
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x1", &c), DCP_OK);
    const struct {
        dcp_attn_shape_t shape;
        const char *field;
    } cases[] = {
        {{2, 1, 8, DCP_DTYPE_FP32, 0.0f, -1.0f, 0}, "shape.softcap"},
        {{2, 1, 8, DCP_DTYPE_FP32, 0.0f, INFINITY, 0}, "shape.softcap"},
        {{2, 1, 8, DCP_DTYPE_FP32, 0.0f, 0.0f, 5000}, "shape.head_dim_v"},
        {{2, 1, 8, DCP_DTYPE_FP32, 0.0f, 0.0f, -2}, "shape.head_dim_v"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dcp_plan_t *p = NULL;
        CU_ASSERT_EQUAL(dcp_plan_create(&b, &cases[i].shape, NULL, c, &p), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), cases[i].field));
        CU_ASSERT_PTR_NULL(p);
    }
    dcp_cluster_destroy(c);
}

/* The value head dim through the plan: bytes moved, FLOPs and the shape it reports. */
static void test_value_head_dim_in_the_plan(void)
{
    static const int32_t len[2] = {300, 200};
    dcp_mask_t m[2];
    for (int s = 0; s < 2; s++) dcp_mask_parse("causal", &m[s]);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = DCP_STRATEGY_ZIGZAG;
    o.block_size = 32;
    const dcp_attn_shape_t mla = {8, 8, 192, DCP_DTYPE_BF16, 0.0f, 0.0f, 128};
    const dcp_attn_shape_t same = {8, 8, 192, DCP_DTYPE_BF16, 0.0f, 0.0f, 0};
    dcp_plan_t *a = t_plan_shape(len, 2, m, "1x4", &mla, &o);
    dcp_plan_t *b = t_plan_shape(len, 2, m, "1x4", &same, &o);
    dcp_plan_stats_t sa, sb;
    CU_ASSERT_EQUAL(dcp_plan_get_stats(a, &sa), DCP_OK);
    CU_ASSERT_EQUAL(dcp_plan_get_stats(b, &sb), DCP_OK);
    /* FLOPs: 2 (d_qk + d_v) per pair, 640 against 768 */
    CU_ASSERT_EQUAL(sa.total_flops * 768, sb.total_flops * 640);
    CU_ASSERT_EQUAL(sa.bwd_flops * 768, sb.bwd_flops * 640);
    /* fewer bytes travel (V, O, dO and dV rows are narrower), the same placement */
    CU_ASSERT(sa.comm_bytes < sb.comm_bytes && sa.comm_bytes > 0);
    CU_ASSERT(sa.bwd_comm_bytes < sb.bwd_comm_bytes);
    dcp_attn_shape_t got;
    CU_ASSERT_EQUAL(dcp_plan_get_shape(a, &got), DCP_OK);
    CU_ASSERT(got.head_dim == 192 && got.head_dim_v == 128);
    CU_ASSERT_EQUAL(dcp_plan_get_shape(b, &got), DCP_OK);
    CU_ASSERT_EQUAL(got.head_dim_v, 192); /* 0 resolved */
    dcp_plan_destroy(a);
    dcp_plan_destroy(b);
}

/* Plans are made for their softcap and value head dim: the planner's cache keeps batches that
 * differ only there apart, the plans' checksums differ, and a softcap of -0.0 plans as 0
 * (its bytes load again). */
static void test_plans_keep_variants_apart(void)
{
    static const int32_t len[2] = {90, 40};
    dcp_mask_t m[2];
    for (int s = 0; s < 2; s++) dcp_mask_parse("causal", &m[s]);
    const dcp_batch_t b = {.num_seqs = 2, .lengths = len, .masks = m};
    const dcp_attn_shape_t shapes[4] = {{4, 2, 64, DCP_DTYPE_BF16, 0.0f, 0.0f, 0},
                                        {4, 2, 64, DCP_DTYPE_BF16, 0.0f, 30.0f, 0},
                                        {4, 2, 64, DCP_DTYPE_BF16, 0.0f, 0.0f, 32},
                                        {4, 2, 64, DCP_DTYPE_BF16, 0.0f, -0.0f, 64}};
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &c), DCP_OK);
    dcp_planner_t *pl = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_planner_create(NULL, c, &pl), DCP_OK);
    uint32_t sums[4];
    for (int i = 0; i < 4; i++) {
        uint64_t t;
        dcp_plan_t *p = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_planner_submit(pl, &b, &shapes[i], NULL, &t), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcp_planner_wait(pl, t, &p), DCP_OK);
        CU_ASSERT_EQUAL(dcp_plan_checksum(p, &sums[i]), DCP_OK);
        size_t n;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, NULL, 0, &n), DCP_OK);
        void *bytes = malloc(n);
        CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, bytes, n, &n), DCP_OK);
        dcp_plan_t *q = NULL;
        CU_ASSERT_EQUAL(dcp_plan_deserialize(bytes, n, &q), DCP_OK);
        dcp_attn_shape_t got;
        CU_ASSERT_EQUAL(dcp_plan_get_shape(q, &got), DCP_OK);
        CU_ASSERT(got.softcap == shapes[i].softcap && !signbit(got.softcap));
        free(bytes);
        dcp_plan_destroy(q);
        dcp_plan_destroy(p);
    }
    dcp_planner_stats_t st;
    CU_ASSERT_EQUAL(dcp_planner_stats(pl, &st), DCP_OK);
    CU_ASSERT_EQUAL(st.cache_hits, 1); /* the last: the first's shape, -0.0 and 64 resolved */
    CU_ASSERT_EQUAL(st.planned, 3);
    CU_ASSERT(sums[0] != sums[1] && sums[0] != sums[2] && sums[1] != sums[2]);
    CU_ASSERT_EQUAL(sums[3], sums[0]);
    dcp_planner_destroy(pl);
    dcp_cluster_destroy(c);
}

int dcp_suite_variants(void)
{
    static const dcp_test_t tests[] = {
        {"sinks", test_sinks},
        {"softcap", test_softcap},
        {"head_dim_256", test_head_dim_256},
        {"mla_192_128", test_mla_192_128},
        {"variants_change_the_result", test_variants_change_the_result},
        {"all_variants_half_storage", test_all_variants_half_storage},
        {"wrong_requests_refused", test_wrong_requests_refused},
        {"bad_shapes_refused", test_bad_shapes_refused},
        {"value_head_dim_in_the_plan", test_value_head_dim_in_the_plan},
        {"plans_keep_variants_apart", test_plans_keep_variants_apart},
        {NULL, NULL},
    };
    return dcp_add_suite("variants", tests);
}
