/* The public API on bad input: clear errors that name the field, outputs untouched, and a
 * failing rank that ends its peers' waits instead of hanging them. */
#include "include/dcp.h"
#include "kernels/cuda/device.h"
#include "kernels/device.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const int32_t lens[3] = {40, 1, 17};
static const dcp_mask_t causal3[3] = {
    {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};

static void test_status_strings(void)
{
    for (int s = 0; s <= DCP_ERR_INTERNAL; s++) {
        const char *a = dcp_status_string((dcp_status_t)s);
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        CU_ASSERT(strncmp(a, "DCP_", 4) == 0);
        for (int t = 0; t < s; t++) CU_ASSERT(strcmp(a, dcp_status_string((dcp_status_t)t)) != 0);
    }
    CU_ASSERT_STRING_EQUAL(dcp_status_string((dcp_status_t)99), "DCP_ERR_UNKNOWN");
}

/* The library reports the version of the header it was built with. */
static void test_version(void)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", DCP_VERSION_MAJOR, DCP_VERSION_MINOR,
             DCP_VERSION_PATCH);
    CU_ASSERT_STRING_EQUAL(dcp_version(), want);
}

/* dcp_last_error() is errno-like: a failure sets it, a later success leaves it alone. */
static void test_last_error_after_success(void)
{
    dcp_mask_t m;
    CU_ASSERT_EQUAL(dcp_mask_parse("window:0", &m), DCP_ERR_INVALID_ARG);
    char first[256];
    snprintf(first, sizeof first, "%s", dcp_last_error());
    CU_ASSERT(first[0] != '\0');
    CU_ASSERT_EQUAL(dcp_mask_parse("causal", &m), DCP_OK);
    CU_ASSERT_STRING_EQUAL(dcp_last_error(), first);
}

typedef struct {
    dcp_batch_t batch;
    dcp_attn_shape_t shape;
    dcp_plan_options_t opts;
    const char *field;
} bad_case_t;

/* Plan creation with one field wrong at a time: DCP_ERR_INVALID_ARG, a message naming the
 * field, and plan_out untouched. */
static void test_plan_create_rejects_bad_input(void)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &c), DCP_OK);
    const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 16;
    int32_t bad_len[3] = {40, -3, 17};
    dcp_mask_t bad_mask[3] = {{.kind = DCP_MASK_CAUSAL},
                              {.kind = DCP_MASK_WINDOW, .window = 0},
                              {.kind = DCP_MASK_CAUSAL}};
    bad_case_t cases[16];
    int n = 0;
    const dcp_batch_t good = {.num_seqs = 3, .lengths = lens, .masks = causal3};
    cases[n++] = (bad_case_t){{.num_seqs = 0, .lengths = lens, .masks = causal3}, shape, o, "batch.num_seqs"};
    cases[n++] = (bad_case_t){{.num_seqs = 3, .lengths = bad_len, .masks = causal3}, shape, o, "batch.lengths[1]"};
    cases[n++] = (bad_case_t){{.num_seqs = 3, .lengths = lens, .masks = bad_mask}, shape, o, "batch.masks[1].window"};
    cases[n++] = (bad_case_t){{.num_seqs = 3, .lengths = NULL, .masks = causal3}, shape, o, "batch.lengths"};
    dcp_attn_shape_t s2 = shape;
    s2.num_kv_heads = 3;
    cases[n++] = (bad_case_t){good, s2, o, "shape.num_kv_heads"};
    s2 = shape;
    s2.head_dim = 0;
    cases[n++] = (bad_case_t){good, s2, o, "shape.head_dim"};
    s2 = shape;
    s2.scale = NAN;
    cases[n++] = (bad_case_t){good, s2, o, "shape.scale"};
    dcp_plan_options_t o2 = o;
    o2.block_size = 0;
    cases[n++] = (bad_case_t){good, shape, o2, "options.block_size"};
    o2 = o;
    o2.head_blocks = 4;
    cases[n++] = (bad_case_t){good, shape, o2, "options.head_blocks"};
    o2 = o;
    o2.divisions = -1;
    cases[n++] = (bad_case_t){good, shape, o2, "options.divisions"};
    o2 = o;
    o2.strategy = (dcp_strategy_t)77;
    cases[n++] = (bad_case_t){good, shape, o2, "options.strategy"};
    o2 = o;
    o2.eps_inter = -1;
    cases[n++] = (bad_case_t){good, shape, o2, "options.eps_inter"};
    o2 = o;
    o2.mem_cap_bytes = -5;
    cases[n++] = (bad_case_t){good, shape, o2, "options.mem_cap_bytes"};
    for (int i = 0; i < n; i++) {
        dcp_plan_t *p = (dcp_plan_t *)&p;
        CU_ASSERT_EQUAL(dcp_plan_create(&cases[i].batch, &cases[i].shape, &cases[i].opts, c, &p),
                        DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_EQUAL(p, (dcp_plan_t *)&p);
        if (!strstr(dcp_last_error(), cases[i].field)) {
            CU_FAIL("message does not name the field");
            fprintf(stderr, "want '%s' in '%s'\n", cases[i].field, dcp_last_error());
        }
    }
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL(dcp_plan_create(NULL, &shape, &o, c, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_create(&good, NULL, &o, c, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_create(&good, &shape, &o, NULL, &p), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_create(&good, &shape, &o, c, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_create(&good, &shape, NULL, c, &p), DCP_OK); /* defaults */
    dcp_plan_destroy(p);
    dcp_plan_destroy(NULL);
    dcp_cluster_destroy(c);
}

static dcp_plan_t *small_plan(const char *cluster, dcp_dtype_t dtype)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &c), DCP_OK);
    const dcp_attn_shape_t shape = {4, 2, 8, dtype, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 8;
    o.strategy = DCP_STRATEGY_ZIGZAG;
    const dcp_batch_t b = {.num_seqs = 3, .lengths = lens, .masks = causal3};
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&b, &shape, &o, c, &p), DCP_OK);
    dcp_cluster_destroy(c);
    return p;
}

static void test_local_layout_arguments(void)
{
    dcp_plan_t *p = small_plan("1x2", DCP_DTYPE_FP32);
    dcp_token_span_t spans[8], keep = {-7, -7, -7};
    int32_t n = -1;
    int64_t tokens = -1, total = 0;
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(dcp_plan_local_layout(p, r, spans, 8, &n, &tokens), DCP_OK);
        int64_t sum = 0;
        for (int i = 0; i < n; i++) sum += spans[i].len;
        CU_ASSERT_EQUAL(sum, tokens);
        total += tokens;
    }
    CU_ASSERT_EQUAL(total, 58);
    /* the documented size query: NULL spans and capacity 0 give both counts */
    int32_t want_spans = -1;
    int64_t want_tokens = -1;
    CU_ASSERT_EQUAL(dcp_plan_local_layout(p, 1, NULL, 0, &want_spans, &want_tokens), DCP_OK);
    CU_ASSERT_EQUAL(want_spans, n);
    CU_ASSERT_EQUAL(want_tokens, tokens);
    CU_ASSERT_EQUAL(dcp_plan_local_layout(p, 2, spans, 8, &n, &tokens), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_local_layout(p, 0, NULL, 3, &n, &tokens), DCP_ERR_INVALID_ARG);
    spans[0] = keep;
    CU_ASSERT_EQUAL(dcp_plan_local_layout(p, 0, spans, 1, &n, &tokens), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(spans[0].seq, -7); /* nothing written on failure */
    dcp_plan_stats_t st;
    dcp_rank_stats_t rs;
    CU_ASSERT_EQUAL(dcp_plan_get_stats(NULL, &st), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_get_rank_stats(p, -1, &rs), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_get_rank_stats(p, 1, &rs), DCP_OK);
    CU_ASSERT(rs.local_tokens > 0 && rs.flops > 0 && rs.num_instructions > 0);
    dcp_plan_destroy(p);
}

/* The shape a plan was made for, scale resolved, from the plan and from its bytes alike. */
static void test_plan_shape(void)
{
    dcp_plan_t *p = small_plan("1x2", DCP_DTYPE_BF16);
    dcp_attn_shape_t s, keep = {-7, -7, -7, DCP_DTYPE_FP32, -7.0f};
    CU_ASSERT_EQUAL(dcp_plan_get_shape(p, &s), DCP_OK);
    CU_ASSERT(s.num_heads == 4 && s.num_kv_heads == 2 && s.head_dim == 8);
    CU_ASSERT_EQUAL(s.dtype, DCP_DTYPE_BF16);
    CU_ASSERT_DOUBLE_EQUAL(s.scale, 1.0 / sqrt(8.0), 1e-7); /* 0 resolved */
    size_t n;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, NULL, 0, &n), DCP_OK);
    void *bytes = malloc(n);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, bytes, n, &n), DCP_OK);
    dcp_plan_t *q = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_deserialize(bytes, n, &q), DCP_OK);
    dcp_attn_shape_t t;
    CU_ASSERT_EQUAL(dcp_plan_get_shape(q, &t), DCP_OK);
    CU_ASSERT_EQUAL(memcmp(&s, &t, sizeof s), 0);
    dcp_attn_shape_t u = keep;
    CU_ASSERT_EQUAL(dcp_plan_get_shape(NULL, &u), DCP_ERR_INVALID_ARG);
    CU_ASSERT(strstr(dcp_last_error(), "plan") != NULL);
    CU_ASSERT_EQUAL(memcmp(&u, &keep, sizeof u), 0); /* nothing written on failure */
    CU_ASSERT_EQUAL(dcp_plan_get_shape(p, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT(strstr(dcp_last_error(), "shape_out") != NULL);
    free(bytes);
    dcp_plan_destroy(q);
    dcp_plan_destroy(p);
}

typedef struct {
    dcp_tensors_t io[2];
    float *mem[2][5];
} tensors2_t;

static void tensors_init(tensors2_t *t, const dcp_plan_t *p)
{
    for (int r = 0; r < 2; r++) {
        int64_t n;
        dcp_plan_local_layout(p, r, NULL, 0, NULL, &n);
        const int64_t w[5] = {32, 16, 16, 32, 4};
        for (int j = 0; j < 5; j++) {
            t->mem[r][j] = malloc((size_t)(n * w[j] + 1) * sizeof(float));
            for (int64_t i = 0; i < n * w[j]; i++) t->mem[r][j][i] = j < 3 ? 0.5f : 12345.0f;
        }
        t->io[r] = (dcp_tensors_t){t->mem[r][0], t->mem[r][1], t->mem[r][2],
                                   t->mem[r][3], t->mem[r][4], 0.0f};
    }
}

static int outputs_untouched(const tensors2_t *t, const dcp_plan_t *p)
{
    for (int r = 0; r < 2; r++) {
        int64_t n;
        dcp_plan_local_layout(p, r, NULL, 0, NULL, &n);
        for (int64_t i = 0; i < n * 32; i++)
            if (t->mem[r][3][i] != 12345.0f) return 0;
        for (int64_t i = 0; i < n * 4; i++)
            if (t->mem[r][4][i] != 12345.0f) return 0;
    }
    return 1;
}

static void tensors_free(tensors2_t *t)
{
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 5; j++) free(t->mem[r][j]);
}

/* Rank 1 fails on bad input; rank 0 stops with DCP_ERR_PEER (not after the timeout), both
 * leave O and LSE untouched, and the failure names rank 1 and the field. */
static void test_failing_rank_ends_its_peers(void)
{
    dcp_plan_t *p = small_plan("1x2", DCP_DTYPE_FP32);
    tensors2_t t;
    tensors_init(&t, p);
    t.io[1].k = NULL;
    CU_ASSERT_EQUAL(dcp_forward_inproc(p, t.io, 120.0, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "rank 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "io.k"));
    CU_ASSERT(outputs_untouched(&t, p));
    tensors_free(&t);
    dcp_plan_destroy(p);
}

/* The backward's extra tensors of two ranks: dO (0.25), and dQ, dK, dV poisoned. */
typedef struct {
    dcp_grad_tensors_t io[2];
    float *mem[2][4];
    int64_t n[2];
} grads2_t;

static const int64_t grad_width[4] = {32, 32, 16, 16}; /* dO, dQ, dK, dV per token */

static void grads_init(grads2_t *g, const tensors2_t *t, const dcp_plan_t *p)
{
    for (int r = 0; r < 2; r++) {
        dcp_plan_local_layout(p, r, NULL, 0, NULL, &g->n[r]);
        for (int j = 0; j < 4; j++) {
            g->mem[r][j] = malloc((size_t)(g->n[r] * grad_width[j] + 1) * sizeof(float));
            for (int64_t i = 0; i < g->n[r] * grad_width[j]; i++)
                g->mem[r][j][i] = j == 0 ? 0.25f * (float)(i % 7) : 12345.0f;
        }
        g->io[r] =
            (dcp_grad_tensors_t){t->io[r], g->mem[r][0], g->mem[r][1], g->mem[r][2], g->mem[r][3]};
    }
}

/* Counts gradient elements still poisoned, and NaN ones. */
static void grads_scan(const grads2_t *g, int64_t *poisoned, int64_t *nans)
{
    *poisoned = *nans = 0;
    for (int r = 0; r < 2; r++)
        for (int j = 1; j < 4; j++)
            for (int64_t i = 0; i < g->n[r] * grad_width[j]; i++) {
                *poisoned += g->mem[r][j][i] == 12345.0f;
                *nans += isnan(g->mem[r][j][i]);
            }
}

static void grads_free(grads2_t *g)
{
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < 4; j++) free(g->mem[r][j]);
}

/* Missing backward tensors are named (with the rank) and leave dQ, dK, dV untouched; a
 * backward after the forward writes every gradient; NaN in dO propagates into them. */
static void test_backward_arguments(void)
{
    dcp_plan_t *p = small_plan("1x2", DCP_DTYPE_FP32);
    tensors2_t t;
    tensors_init(&t, p);
    grads2_t g;
    grads_init(&g, &t, p);
    int64_t poisoned, nans, total = 0;
    for (int r = 0; r < 2; r++) total += g.n[r] * (32 + 16 + 16);
    CU_ASSERT_EQUAL(dcp_backward_inproc(p, NULL, 10.0, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_backward(NULL, p, &g.io[0], NULL), DCP_ERR_INVALID_ARG);
    static const char *const names[4] = {"io.dout", "io.dq", "io.dk", "io.fwd.lse"};
    for (int k = 0; k < 4; k++) {
        grads2_t bad = g;
        if (k == 0) bad.io[1].dout = NULL;
        if (k == 1) bad.io[1].dq = NULL;
        if (k == 2) bad.io[1].dk = NULL;
        if (k == 3) bad.io[1].fwd.lse = NULL;
        CU_ASSERT_EQUAL(dcp_backward_inproc(p, bad.io, 120.0, NULL), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "rank 1"));
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), names[k]));
        grads_scan(&g, &poisoned, &nans);
        CU_ASSERT_EQUAL(poisoned, total);
    }
    CU_ASSERT_EQUAL_FATAL(dcp_forward_inproc(p, t.io, 30.0, NULL), DCP_OK);
    CU_ASSERT_EQUAL(dcp_backward_inproc(p, g.io, 30.0, NULL), DCP_OK);
    grads_scan(&g, &poisoned, &nans);
    CU_ASSERT_EQUAL(poisoned, 0);
    CU_ASSERT_EQUAL(nans, 0);
    g.mem[0][0][0] = NAN; /* dO of rank 0's first row, first head */
    CU_ASSERT_EQUAL(dcp_backward_inproc(p, g.io, 30.0, NULL), DCP_OK);
    grads_scan(&g, &poisoned, &nans);
    CU_ASSERT(nans > 0);
    grads_free(&g);
    tensors_free(&t);
    dcp_plan_destroy(p);
}

typedef struct {
    dcp_context_t *ctx;
    const dcp_plan_t *plan;
    const dcp_tensors_t *io;
    dcp_status_t st;
} fwd_t;

static void *fwd_thread(void *arg)
{
    fwd_t *f = arg;
    f->st = dcp_forward(f->ctx, f->plan, f->io, NULL);
    return NULL;
}

static void *barrier_thread(void *arg)
{
    fwd_t *f = arg;
    f->st = dcp_context_barrier(f->ctx);
    return NULL;
}

/* A group with a failed rank stays failed: later forwards return DCP_ERR_PEER at once. */
static void test_failed_group_stays_failed(void)
{
    dcp_plan_t *p = small_plan("1x2", DCP_DTYPE_FP32);
    tensors2_t t;
    tensors_init(&t, p);
    dcp_group_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(2, &g), DCP_OK);
    dcp_context_t *ctx[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        const dcp_context_config_t cfg = {.rank = r, .group = g, .timeout_s = 60.0};
        CU_ASSERT_EQUAL_FATAL(dcp_context_create(&cfg, &ctx[r]), DCP_OK);
    }
    /* a clean batch first */
    fwd_t f[2] = {{ctx[0], p, &t.io[0], DCP_OK}, {ctx[1], p, &t.io[1], DCP_OK}};
    pthread_t th;
    pthread_create(&th, NULL, fwd_thread, &f[1]);
    fwd_thread(&f[0]);
    pthread_join(th, NULL);
    CU_ASSERT(f[0].st == DCP_OK && f[1].st == DCP_OK);
    /* threads: the in-process engine, and no cluster of their own */
    CU_ASSERT_STRING_EQUAL(dcp_context_transport(ctx[0], 0), "inproc");
    CU_ASSERT_STRING_EQUAL(dcp_context_transport(ctx[1], 1), "inproc");
    const dcp_cluster_t *none = NULL;
    CU_ASSERT_EQUAL(dcp_context_cluster(ctx[0], &none), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "threads"));
    CU_ASSERT_PTR_NULL(none);
    /* a barrier meets when both ranks call it */
    pthread_create(&th, NULL, barrier_thread, &f[1]);
    barrier_thread(&f[0]);
    pthread_join(th, NULL);
    CU_ASSERT(f[0].st == DCP_OK && f[1].st == DCP_OK);
    /* rank 1 fails on a NULL tensor: rank 0 ends with DCP_ERR_PEER */
    dcp_tensors_t broken = t.io[1];
    broken.q = NULL;
    f[1].io = &broken;
    pthread_create(&th, NULL, fwd_thread, &f[1]);
    fwd_thread(&f[0]);
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(f[1].st, DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(f[0].st, DCP_ERR_PEER);
    /* and the next batch on the group fails at once, on every rank */
    CU_ASSERT_EQUAL(dcp_forward(ctx[0], p, &t.io[0], NULL), DCP_ERR_PEER);
    CU_ASSERT_EQUAL(dcp_forward(ctx[1], p, &t.io[1], NULL), DCP_ERR_PEER);
    /* so does a barrier, alone, instead of waiting for the other rank */
    CU_ASSERT_EQUAL(dcp_context_barrier(ctx[0]), DCP_ERR_PEER);
    CU_ASSERT_EQUAL(dcp_context_barrier(NULL), DCP_ERR_INVALID_ARG);
    for (int r = 0; r < 2; r++) dcp_context_destroy(ctx[r]);
    dcp_group_destroy(g);
    tensors_free(&t);
    dcp_plan_destroy(p);
}

/* dcp_forward on a fresh two-rank group (rank 0 only; it fails before any transfer). */
static dcp_status_t forward_once(const dcp_plan_t *p, const dcp_tensors_t *io)
{
    dcp_group_t *g = NULL;
    dcp_context_t *ctx = NULL;
    dcp_context_config_t c = {.rank = 0};
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(2, &g), DCP_OK);
    c.group = g;
    CU_ASSERT_EQUAL_FATAL(dcp_context_create(&c, &ctx), DCP_OK);
    const dcp_status_t st = dcp_forward(ctx, p, io, NULL);
    dcp_context_destroy(ctx);
    dcp_group_destroy(g);
    return st;
}

/* Rank 1 of a call, on its own thread: it starts the forward `delay_s` late. */
typedef struct {
    dcp_context_t *ctx;
    const dcp_plan_t *plan;
    const dcp_tensors_t *io;
    double delay_s;
    dcp_status_t st;
} late_rank_t;

static void *late_forward(void *arg)
{
    late_rank_t *l = arg;
    const struct timespec ts = {0, (long)(l->delay_s * 1e9)};
    nanosleep(&ts, NULL);
    l->st = dcp_forward(l->ctx, l->plan, l->io, NULL);
    return NULL;
}

/* dcp_context_get_stats: calls counted per context (failed ones too), and the host time rank
 * 0 spends waiting for the blocks of a rank that starts 150 ms late lands in its waits. */
static void test_context_stats(void)
{
    dcp_plan_t *p = small_plan("1x2", DCP_DTYPE_FP32);
    dcp_plan_stats_t ps;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_get_stats(p, &ps), DCP_OK);
    CU_ASSERT_FATAL(ps.num_transfers > 0); /* rank 0 waits for rank 1's blocks */
    tensors2_t t;
    tensors_init(&t, p);
    dcp_group_t *g = NULL;
    dcp_context_t *ctx[2] = {NULL, NULL};
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(2, &g), DCP_OK);
    for (int32_t r = 0; r < 2; r++) {
        const dcp_context_config_t cfg = {.rank = r, .group = g, .timeout_s = 30};
        CU_ASSERT_EQUAL_FATAL(dcp_context_create(&cfg, &ctx[r]), DCP_OK);
    }
    dcp_context_stats_t s, keep = {-7, -7.0};
    CU_ASSERT_EQUAL(dcp_context_get_stats(ctx[0], &s), DCP_OK);
    CU_ASSERT(s.calls == 0 && s.wait_blocked_s == 0.0);
    late_rank_t late = {ctx[1], p, &t.io[1], 0.15, DCP_ERR_INTERNAL};
    pthread_t tid;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&tid, NULL, late_forward, &late), 0);
    CU_ASSERT_EQUAL(dcp_forward(ctx[0], p, &t.io[0], NULL), DCP_OK);
    pthread_join(tid, NULL);
    CU_ASSERT_EQUAL(late.st, DCP_OK);
    CU_ASSERT_EQUAL(dcp_context_get_stats(ctx[0], &s), DCP_OK);
    CU_ASSERT_EQUAL(s.calls, 1);
    CU_ASSERT(s.wait_blocked_s >= 0.1 && s.wait_blocked_s < 30);
    CU_ASSERT_EQUAL(dcp_context_get_stats(ctx[1], &s), DCP_OK);
    CU_ASSERT_EQUAL(s.calls, 1);
    CU_ASSERT(s.wait_blocked_s < 0.1); /* the late rank found its peer's blocks waiting */
    /* a refused call counts as a call */
    dcp_tensors_t bad = t.io[0];
    bad.k = NULL;
    CU_ASSERT_EQUAL(dcp_forward(ctx[0], p, &bad, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_context_get_stats(ctx[0], &s), DCP_OK);
    CU_ASSERT_EQUAL(s.calls, 2);
    dcp_context_stats_t u = keep;
    CU_ASSERT_EQUAL(dcp_context_get_stats(NULL, &u), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "ctx"));
    CU_ASSERT_EQUAL(memcmp(&u, &keep, sizeof u), 0); /* nothing written on failure */
    CU_ASSERT_EQUAL(dcp_context_get_stats(ctx[0], NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "stats_out"));
    for (int32_t r = 0; r < 2; r++) dcp_context_destroy(ctx[r]);
    dcp_group_destroy(g);
    tensors_free(&t);
    dcp_plan_destroy(p);
}

static void test_context_and_executor_arguments(void)
{
    dcp_group_t *g = NULL;
    dcp_context_t *ctx = NULL;
    CU_ASSERT_EQUAL(dcp_group_create(0, &g), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(2, &g), DCP_OK);
    const dcp_context_config_t bad_rank = {.rank = 2, .group = g}, no_group = {.rank = 0},
                               bad_t = {.group = g, .timeout_s = -1};
    CU_ASSERT_EQUAL(dcp_context_create(&bad_rank, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_context_create(&no_group, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_context_create(&bad_t, &ctx), DCP_ERR_INVALID_ARG);
    /* an engine that cannot move host buffers between threads, named with its link */
    const dcp_context_config_t gpu_only = {.group = g, .transport_inter = "nccl"};
    CU_ASSERT_EQUAL(dcp_context_create(&gpu_only, &ctx), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "inter = nccl"));
    CU_ASSERT_PTR_NULL(ctx);
    /* the place of computation, named in the error */
    const dcp_context_config_t bad_dev = {.group = g, .device = "gpu"};
    CU_ASSERT_EQUAL(dcp_context_create(&bad_dev, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.device"));
    const dcp_context_config_t bad_ord = {.group = g, .device = "cuda:x"};
    CU_ASSERT_NOT_EQUAL(dcp_context_create(&bad_ord, &ctx), DCP_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.device"));
    if (dcp_cuda_device_count() == 0) {
        const dcp_context_config_t cuda = {.group = g, .device = "cuda"};
        CU_ASSERT_EQUAL(dcp_context_create(&cuda, &ctx), DCP_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.device"));
    }
    CU_ASSERT_PTR_NULL(ctx);
    /* borrowed handles where they cannot serve, named */
    int fake;
    const dcp_context_config_t lent_stream = {.group = g, .compute_stream = &fake},
                               lent_comm = {.group = g, .nccl_comm = &fake};
    CU_ASSERT_EQUAL(dcp_context_create(&lent_stream, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.compute_stream"));
    CU_ASSERT_EQUAL(dcp_context_create(&lent_comm, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.nccl_comm"));
    CU_ASSERT_PTR_NULL(ctx);
    const dcp_context_config_t cpu = {.group = g, .device = "cpu"};
    CU_ASSERT_EQUAL_FATAL(dcp_context_create(&cpu, &ctx), DCP_OK);
    /* shapes: the CPU runs any; the CUDA kernels' rule names head_dim and dtype */
    const dcp_attn_shape_t d100 = {4, 2, 100, DCP_DTYPE_BF16, 0.0f};
    CU_ASSERT_EQUAL(dcp_context_check_shape(ctx, &d100), DCP_OK);
    CU_ASSERT_EQUAL(dcp_context_check_shape(ctx, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_kernels_cuda.check_shape(&d100), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "head_dim = 100"));
    /* dims the CUDA kernels are built for: 64 to 256 and MLA's 192/128; not 320, not 128/64,
     * not fp32 */
    static const int32_t dims[][3] = {{64, 0, DCP_OK},
                                      {96, 96, DCP_OK},
                                      {128, 0, DCP_OK},
                                      {192, 0, DCP_OK},
                                      {256, 256, DCP_OK},
                                      {192, 128, DCP_OK},
                                      {320, 0, DCP_ERR_UNSUPPORTED},
                                      {128, 64, DCP_ERR_UNSUPPORTED},
                                      {80, 0, DCP_ERR_UNSUPPORTED}};
    for (size_t i = 0; i < sizeof dims / sizeof *dims; i++) {
        const dcp_attn_shape_t s = {.num_heads = 4,
                                    .num_kv_heads = 2,
                                    .head_dim = dims[i][0],
                                    .dtype = DCP_DTYPE_FP16,
                                    .head_dim_v = dims[i][1]};
        CU_ASSERT_EQUAL(dcp_kernels_cuda.check_shape(&s), (dcp_status_t)dims[i][2]);
    }
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "head_dim = 80, head_dim_v = 80"));
    const dcp_attn_shape_t f32 = {4, 2, 128, DCP_DTYPE_FP32, 0.0f};
    CU_ASSERT_EQUAL(dcp_kernels_cuda.check_shape(&f32), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "dtype"));
    /* a CPU context takes no stream: refused by name (and the group learns of it) */
    const dcp_tensors_t none = {NULL, NULL, NULL, NULL, NULL, 0.0f};
    dcp_plan_t *two = small_plan("1x2", DCP_DTYPE_FP32);
    CU_ASSERT_EQUAL(dcp_forward(ctx, two, &none, &fake), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "stream"));
    dcp_plan_destroy(two);
    dcp_context_destroy(ctx);
    ctx = NULL;
    const dcp_cluster_t *cl = NULL;
    CU_ASSERT_EQUAL(dcp_context_cluster(NULL, &cl), DCP_ERR_INVALID_ARG);
    dcp_group_destroy(g);
    dcp_plan_t *bf16 = small_plan("1x2", DCP_DTYPE_BF16);
    dcp_plan_t *three = small_plan("1x3", DCP_DTYPE_FP32);
    tensors2_t t;
    tensors_init(&t, bf16);
    CU_ASSERT_EQUAL(forward_once(three, &t.io[0]), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "3 ranks"));
    CU_ASSERT_EQUAL(dcp_forward_inproc(bf16, t.io, 5.0, "gpu"), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.device"));
    CU_ASSERT(outputs_untouched(&t, bf16));
    CU_ASSERT_EQUAL(forward_once(NULL, &t.io[0]), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(forward_once(bf16, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_forward(NULL, bf16, &t.io[0], NULL), DCP_ERR_INVALID_ARG);
    tensors_free(&t);
    dcp_plan_destroy(bf16);
    dcp_plan_destroy(three);
    dcp_context_destroy(NULL);
    dcp_group_destroy(NULL);
}

/* A plan whose work buffers would pass the 2^36 bytes the loader accepts is never made:
 * 4096 x 4096 fp32 heads make every received K/V block gigabytes. */
static void test_plan_over_work_limit_refused(void)
{
    const int32_t len[1] = {1200};
    const dcp_mask_t m[1] = {{.kind = DCP_MASK_CAUSAL}};
    const dcp_batch_t batch = {.num_seqs = 1, .lengths = len, .masks = m};
    const dcp_attn_shape_t wide = {4096, 4096, 4096, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = DCP_STRATEGY_RING;
    o.block_size = 64;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &c), DCP_OK);
    dcp_plan_t *p = (dcp_plan_t *)&o; /* must stay untouched */
    CU_ASSERT_EQUAL(dcp_plan_create(&batch, &wide, &o, c, &p), DCP_ERR_CAPACITY);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "work buffers"));
    CU_ASSERT_PTR_EQUAL(p, (dcp_plan_t *)&o);
    dcp_cluster_destroy(c);
}

int dcp_suite_api(void)
{
    static const dcp_test_t tests[] = {
        {"status_strings", test_status_strings},
        {"version", test_version},
        {"last_error_after_success", test_last_error_after_success},
        {"plan_create_rejects_bad_input", test_plan_create_rejects_bad_input},
        {"local_layout_arguments", test_local_layout_arguments},
        {"plan_shape", test_plan_shape},
        {"failing_rank_ends_its_peers", test_failing_rank_ends_its_peers},
        {"backward_arguments", test_backward_arguments},
        {"failed_group_stays_failed", test_failed_group_stays_failed},
        {"context_and_executor_arguments", test_context_and_executor_arguments},
        {"context_stats", test_context_stats},
        {"plan_over_work_limit_refused", test_plan_over_work_limit_refused},
        {NULL, NULL},
    };
    return dcp_add_suite("api", tests);
}
