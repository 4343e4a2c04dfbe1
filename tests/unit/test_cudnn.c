/*
 * The cuDNN engine without a GPU: the version policy, the plan cache and its settling over a
 * training loop's batches, every graph finalized by the real library, and dcp's graphs
 * against cuDNN's own frontend: the graph dcp builds for a
 * key (kernels/cudnn_graph.c, traced through the real library, which finalizes every
 * descriptor up to the operation graph) and the capture of what cudnn-frontend 1.18 builds for
 * the same attention (tests/data/cudnn_sdpa_graphs) are the same graph: the same operations in
 * the same order, each with the same attributes, sub-descriptors and operand shapes, and one
 * tensor of dcp's for each of the frontend's throughout (the dataflow is the same). What may
 * differ: unique ids, the order descriptors are made in, and the dims of by-value scalars
 * (cuDNN takes either rank).
 */
#include "kernels/cudnn.h"
#include "kernels/segment.h"
#include "partition/plan/plan.h"
#include "plugin/cli/support/lengths.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Which classes each cuDNN version runs with which graph, and the versions refused by name. */
static void test_policy(void)
{
    const char *why;
    const int32_t fcb = DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL) |
                        DCP_SEG_BIT(DCP_SEG_BAND);
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91000, 0, &why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "9.10.0"));
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91001, 1, &why), 0);
    CU_ASSERT_EQUAL(dcp_cudnn_policy(90500, 0, &why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "9.6.0"));
    CU_ASSERT_EQUAL(dcp_cudnn_policy(90600, 1, &why), fcb);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "9.10.2"));
    for (int bwd = 0; bwd < 2; bwd++) {
        CU_ASSERT_EQUAL(dcp_cudnn_policy(91900, bwd, &why), DCP_SEG_ALL_DENSE);
        CU_ASSERT_EQUAL(dcp_cudnn_policy(92800, bwd, &why), DCP_SEG_ALL_DENSE);
    }
    /* the fused forward for full segments from 9.15, the composite graph for the rest */
    unsetenv("DCP_CUDNN_GRAPH");
    CU_ASSERT_EQUAL(dcp_cudnn_fused(91900, 0, DCP_SEG_FULL), 1);
    CU_ASSERT_EQUAL(dcp_cudnn_fused(91400, 0, DCP_SEG_FULL), 0);
    CU_ASSERT_EQUAL(dcp_cudnn_fused(91900, 1, DCP_SEG_FULL), 0);
    CU_ASSERT_EQUAL(dcp_cudnn_fused(91900, 0, DCP_SEG_CAUSAL), 0);
    setenv("DCP_CUDNN_GRAPH", "composite", 1);
    CU_ASSERT_EQUAL(dcp_cudnn_fused(91900, 0, DCP_SEG_FULL), 0);
    unsetenv("DCP_CUDNN_GRAPH");
    /* the engine's classes: the policy, or every class when ungated (never a refused one) */
    unsetenv("DCP_CUDNN_UNGATED");
    CU_ASSERT_EQUAL(dcp_cudnn_classes(90600, 1, &why), fcb);
    setenv("DCP_CUDNN_UNGATED", "0", 1);
    CU_ASSERT_EQUAL(dcp_cudnn_classes(90600, 1, &why), fcb);
    setenv("DCP_CUDNN_UNGATED", "1", 1);
    CU_ASSERT_EQUAL(dcp_cudnn_classes(90600, 1, &why), DCP_SEG_ALL_DENSE);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "DCP_CUDNN_UNGATED"));
    CU_ASSERT_EQUAL(dcp_cudnn_classes(91000, 0, &why), 0);
    unsetenv("DCP_CUDNN_UNGATED");
    char v[16];
    dcp_cudnn_version_string(91501, v, sizeof v);
    CU_ASSERT_STRING_EQUAL(v, "9.15.1");
}

/* The plan cache: keys in buckets, a plan serving smaller calls within 4x and any shorter
 * keys, the longest key bucket kept for new plans, pinned plans never evicted, the least
 * recently used one evicted at the bound, an emptied slot reused. */
static void test_cache(void)
{
    dcp_dense_call_t call;
    memset(&call, 0, sizeof call);
    call.cls = DCP_SEG_CAUSAL;
    call.cap = 8;
    call.max_q = 100;
    call.max_kv = 3000;
    const dcp_cudnn_key_t k = dcp_cudnn_call_key(&call, 1, 0, 0, DCP_DTYPE_BF16, 32, 8, 128, 0);
    CU_ASSERT_EQUAL(k.b, 16); /* at least 16 entries: a plan serves 4 to 16 */
    CU_ASSERT_EQUAL(k.sq, 128);
    CU_ASSERT_EQUAL(k.skv, 4096);
    CU_ASSERT_EQUAL(k.bwd, 1);
    CU_ASSERT_EQUAL(k.dqk, 128);
    dcp_cudnn_cache_t c;
    dcp_cudnn_cache_init(&c, 2);
    int64_t at, ev;
    int build;
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &k, &at, &build, &ev), DCP_OK);
    CU_ASSERT(build && at == 0 && ev == -1);
    dcp_cudnn_key_t small = k; /* fewer keys and rows: the same plan */
    small.skv = 64;
    small.sq = 64;
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &small, &at, &build, &ev), DCP_OK);
    CU_ASSERT(!build && at == 0);
    CU_ASSERT_EQUAL(dcp_cudnn_call_key(&call, 1, 0, 1, DCP_DTYPE_BF16, 32, 8, 128, 0).b, 8);
    dcp_cudnn_key_t wide = k; /* 8x the batch: a plan of its own, with the longest keys seen */
    wide.b = 128;
    wide.skv = 64;
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &wide, &at, &build, &ev), DCP_OK);
    CU_ASSERT(build && at == 1);
    CU_ASSERT_EQUAL(c.keys[1].skv, 4096);
    dcp_cudnn_key_t fwd = k; /* another graph: the cache is full and both plans pinned */
    fwd.bwd = 0;
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &fwd, &at, &build, &ev), DCP_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "DCP_CUDNN_PLANS"));
    dcp_cudnn_cache_unpin(&c);
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &wide, &at, &build, &ev), DCP_OK); /* 1 used last */
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &fwd, &at, &build, &ev), DCP_OK);
    CU_ASSERT(build && at == 0 && ev == 0 && c.evictions == 1);
    dcp_cudnn_cache_drop(&c, 0); /* a plan that did not build: its slot is reused first */
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &k, &at, &build, &ev), DCP_OK);
    CU_ASSERT(build && at == 0 && ev == -1);
    CU_ASSERT_EQUAL(c.builds, 4);
    CU_ASSERT_EQUAL(c.hits, 2);
    dcp_cudnn_cache_free(&c);
    /* calls noted first: the plan built for the smallest takes the largest sizes that it
     * still runs (rows and batch up to 4x, any keys) */
    dcp_cudnn_cache_init(&c, 8);
    dcp_cudnn_key_t big = k;
    big.b = 32;
    big.sq = 1024;
    big.skv = 65536;
    CU_ASSERT_EQUAL(dcp_cudnn_cache_expect(&c, &k), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cudnn_cache_expect(&c, &big), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &k, &at, &build, &ev), DCP_OK);
    CU_ASSERT(build);
    CU_ASSERT_EQUAL(c.keys[at].b, 32);
    CU_ASSERT_EQUAL(c.keys[at].sq, 512);
    CU_ASSERT_EQUAL(c.keys[at].skv, 65536);
    CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&c, &big, &at, &build, &ev), DCP_OK);
    CU_ASSERT(build); /* its rows are 8x k's: a plan of its own */
    CU_ASSERT_EQUAL(c.keys[at].sq, 1024);
    dcp_cudnn_cache_free(&c);
}

/* Where a cuDNN library loads (no GPU needed), every graph dcp builds finalizes, descriptor by
 * descriptor up to the operation graph (cuDNN 9.19 finalizes it without a handle): forward
 * and backward x every dense class x head dims 64 and 128 x GQA 1 and 4 in bf16, fp16 once
 * per class, the deterministic backward, and the fused forward. */
static void test_graphs_finalize(void)
{
    int64_t v = 0;
    int checked = 0;
    for (int bwd = 0; bwd < 2; bwd++)
        for (int cls = 0; cls < DCP_SEG_DENSE; cls++)
            for (int var = 0; var < 7; var++) {
                dcp_cudnn_key_t k;
                memset(&k, 0, sizeof k);
                k.bwd = bwd;
                k.cls = cls;
                k.dtype = var == 4 ? DCP_DTYPE_FP16 : DCP_DTYPE_BF16;
                k.hkv = 2;
                k.hq = var % 2 ? 8 : 2;
                k.dqk = k.dv = var / 2 % 2 ? 64 : 128;
                k.deterministic = bwd && var == 5;
                k.fused = !bwd && cls == DCP_SEG_FULL && var == 6;
                if (var == 6 && !k.fused) continue;
                k.b = 8;
                k.sq = 128;
                k.skv = 256;
                const dcp_status_t st = dcp_cudnn_check_graph(&k, NULL, &v);
                if (v == 0) {
                    CU_ASSERT_EQUAL(st, DCP_ERR_UNSUPPORTED); /* no library: says so */
                    continue;
                }
                CU_ASSERT_EQUAL(st, DCP_OK);
                if (st != DCP_OK)
                    fprintf(stderr, "cudnn %lld, %s %s variant %d: %s\n", (long long)v,
                            bwd ? "backward" : "forward", dcp_seg_class_name(cls), var,
                            dcp_last_error());
                checked++;
            }
    if (v == 0)
        printf("\ncudnn: no cuDNN library loads here; graphs not checked\n");
    else
        CU_ASSERT_EQUAL(checked, 49);
}

/* A training loop's plans ask the cache for few plans, all in its first steps: 50 steps of
 * long-tailed batches (the built-in histogram, 8K tokens on 2x2 ranks, causal and window
 * layers, block 512, 32/8 heads x 128), every dense call of both passes of rank 0 keyed as the
 * engine keys it (dcp_cudnn_call_key: powers of two), noted and looked up as
 * dcp_cudnn_prepare does (a plan serves calls up to 4x smaller in batch and rows and any
 * shorter keys; a new one takes the largest sizes its graph was asked for). Prints the builds
 * per step. */
static void test_plans_settle(void)
{
    enum { STEPS = 50, WARM = 10 };
    const char *specs[2] = {"causal", "window:1024"};
    const dcp_attn_shape_t shape = {32, 8, 128, DCP_DTYPE_BF16, 0.0f};
    const dcpt_length_source_t src = {NULL, 0};
    dcp_cudnn_cache_t cache;
    dcp_cudnn_cache_init(&cache, 64);
    int64_t builds[STEPS] = {0}, calls = 0;
    for (int step = 0; step < STEPS; step++) {
        int32_t *len = NULL, n = 0;
        CU_ASSERT_EQUAL_FATAL(dcpt_lengths_fill(&src, 8192, 8192, 100 + (uint64_t)step, &len, &n),
                              DCP_OK);
        dcp_mask_t *m = calloc((size_t)n, sizeof *m);
        for (int32_t i = 0; i < n; i++)
            CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[step % 2], &m[i]), DCP_OK);
        dcp_plan_options_t o;
        dcp_plan_options_default(&o);
        o.block_size = 512;
        dcp_plan_t *p = t_plan_shape(len, n, m, "2x2", &shape, &o);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        const int64_t before = cache.builds;
        dcp_cudnn_cache_unpin(&cache);
        for (int pass = 0; pass < 2; pass++) {
            dcp_seg_prog_t prog;
            memset(&prog, 0, sizeof prog);
            const int64_t i0 = dcp_plan_prog_begin(p, (dcp_pass_t)pass, 0),
                          i1 = dcp_plan_prog_end(p, (dcp_pass_t)pass, 0);
            prog.launches = calloc((size_t)(i1 - i0 + 1), sizeof *prog.launches);
            const dcp_seg_shape_t sh = {.q_heads = p->qpg, .kv_heads = p->kvpg, .head_dim = 128,
                                        .min_rows = 64, .dense = DCP_SEG_ALL_DENSE,
                                        .backward = pass};
            for (int64_t i = i0; i < i1; i++) {
                const dcp_instr_t *in = &p->instrs[i];
                int64_t at;
                if (in->op == DCP_OP_ATTN)
                    CU_ASSERT_EQUAL_FATAL(dcp_seg_prog_add(&prog, &sh, p->seqs, p->groups + in->first,
                                                           in->count, p->tiles, &at),
                                          DCP_OK);
            }
            dcp_cudnn_key_t *keys = calloc((size_t)prog.n_calls + 1, sizeof *keys);
            for (int64_t c = 0; c < prog.n_calls; c++) { /* as dcp_cudnn_prepare does */
                const dcp_dense_call_t *call = &prog.calls[c];
                keys[c] = dcp_cudnn_call_key(call, pass, dcp_cudnn_fused(91900, pass, call->cls), 0,
                                             DCP_DTYPE_BF16, p->qpg, p->kvpg, 128, 0);
                CU_ASSERT_EQUAL(dcp_cudnn_cache_expect(&cache, &keys[c]), DCP_OK);
            }
            for (int64_t c = 0; c < prog.n_calls; c++) {
                int64_t at, ev;
                int build;
                CU_ASSERT_EQUAL(dcp_cudnn_cache_find(&cache, &keys[c], &at, &build, &ev), DCP_OK);
                calls++;
            }
            free(keys);
            dcp_seg_prog_free(&prog);
        }
        builds[step] = cache.builds - before;
        dcp_plan_destroy(p);
        free(m);
        free(len);
    }
    int64_t late = 0;
    printf("\ncudnn: plans built per step of %d (%lld dense calls, %lld plans):", STEPS,
           (long long)calls, (long long)cache.builds);
    for (int step = 0; step < STEPS; step++) {
        printf(" %lld", (long long)builds[step]);
        if (step >= WARM) late += builds[step];
    }
    printf("\n");
    CU_ASSERT(calls > 4 * STEPS);
    CU_ASSERT_EQUAL(late, 0);
    CU_ASSERT_EQUAL(cache.evictions, 0);
    dcp_cudnn_cache_free(&cache);
}

/* ---- a trace, parsed ------------------------------------------------------------------------ */

typedef struct {
    char name[64], type[40];
    int64_t count;
    char values[512];
} attr_t;

typedef struct {
    char type[64];
    attr_t *attrs;
    int n, cap;
} desc_t;

typedef struct {
    desc_t *d; /* d[i]: descriptor @i (d[0] unused) */
    int n, cap;
    char err[256];
} graph_t;

static void graph_free(graph_t *g)
{
    for (int i = 0; i < g->n; i++) free(g->d[i].attrs);
    free(g->d);
    memset(g, 0, sizeof *g);
}

static desc_t *desc_at(graph_t *g, int i)
{
    while (g->n <= i) {
        if (g->n == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 64;
            g->d = realloc(g->d, (size_t)g->cap * sizeof *g->d);
        }
        memset(&g->d[g->n++], 0, sizeof *g->d);
    }
    return &g->d[i];
}

/* One call line into g (comments and blank lines skipped). */
static int parse_line(graph_t *g, const char *line)
{
    int at = 0, used = 0;
    char word[64];
    if (line[0] == '#' || line[0] == '\n' || line[0] == '\0') return 1;
    if (sscanf(line, "create @%d %63s", &at, word) == 2) {
        snprintf(desc_at(g, at)->type, sizeof word, "%s", word);
        return 1;
    }
    if (sscanf(line, "finalize @%d", &at) == 1) return 1;
    attr_t a;
    memset(&a, 0, sizeof a);
    long long count = 0;
    if (sscanf(line, "set @%d %63s %39s %lld%n", &at, a.name, a.type, &count, &used) != 4) {
        snprintf(g->err, sizeof g->err, "cannot read: %.120s", line);
        return 0;
    }
    a.count = count;
    const char *v = line + used;
    while (*v == ' ') v++;
    snprintf(a.values, sizeof a.values, "%.500s", v);
    const size_t len = strlen(a.values);
    if (len && a.values[len - 1] == '\n') a.values[len - 1] = '\0';
    desc_t *d = desc_at(g, at);
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 8;
        d->attrs = realloc(d->attrs, (size_t)d->cap * sizeof *d->attrs);
    }
    d->attrs[d->n++] = a;
    return 1;
}

static int parse_text(graph_t *g, const char *text)
{
    const char *p = text;
    char line[1024];
    while (*p) {
        const char *e = strchr(p, '\n');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line - 1 ? n : sizeof line - 1), p);
        if (!parse_line(g, line)) return 0;
        p += n + (e ? 1 : 0);
    }
    return 1;
}

static int parse_file(graph_t *g, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(g->err, sizeof g->err, "cannot open %.200s", path);
        return 0;
    }
    char line[1024];
    int ok = 1;
    while (ok && fgets(line, sizeof line, f)) ok = parse_line(g, line);
    fclose(f);
    return ok;
}

static const attr_t *attr_of(const desc_t *d, const char *name)
{
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->attrs[i].name, name)) return &d->attrs[i];
    return NULL;
}

/* The descriptor number a BACKEND_DESCRIPTOR value names (the k-th of the list). */
static int ref_at(const attr_t *a, int k)
{
    const char *p = a->values;
    for (int i = 0; i <= k; i++) {
        p = strchr(p, '@');
        if (!p) return -1;
        if (i < k) p++;
    }
    return atoi(p + 1);
}

/* ---- the comparison ------------------------------------------------------------------------ */

typedef struct {
    graph_t *a, *b; /* a: the frontend's; b: dcp's */
    int *map_ab, *map_ba; /* tensor descriptor numbers, one for one */
    char why[512];
} cmp_t;

static int fail(cmp_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(cmp_t *c, const char *fmt, ...)
{
    if (!c->why[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, sizeof c->why, fmt, ap);
        va_end(ap);
    }
    return 0;
}

/* Two tensors alike: type, virtual, by-value, ragged or not (the offsets alike too); dims and
 * strides unless by value. Then one for the other from here on. */
static int same_tensor(cmp_t *c, int x, int y, const char *where)
{
    if (x <= 0 || y <= 0 || x >= c->a->n || y >= c->b->n) return fail(c, "%s: no tensor", where);
    if (c->map_ab[x] || c->map_ba[y]) {
        if (c->map_ab[x] == y && c->map_ba[y] == x) return 1;
        return fail(c, "%s: the frontend's tensor and dcp's are not one for one (dataflow differs)",
                    where);
    }
    const desc_t *p = &c->a->d[x], *q = &c->b->d[y];
    if (strcmp(p->type, "CUDNN_BACKEND_TENSOR_DESCRIPTOR") || strcmp(q->type, p->type))
        return fail(c, "%s: %s against %s", where, p->type, q->type);
    const attr_t *bv = attr_of(p, "CUDNN_ATTR_TENSOR_IS_BY_VALUE");
    const int by_value = bv && strstr(bv->values, "true");
    static const char *const names[] = {"CUDNN_ATTR_TENSOR_DATA_TYPE", "CUDNN_ATTR_TENSOR_IS_VIRTUAL",
                                        "CUDNN_ATTR_TENSOR_IS_BY_VALUE", "CUDNN_ATTR_TENSOR_DIMENSIONS",
                                        "CUDNN_ATTR_TENSOR_STRIDES", "CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT"};
    for (int i = 0; i < 6; i++) {
        if (by_value && i >= 3 && i <= 4) continue;
        const attr_t *s = attr_of(p, names[i]), *t = attr_of(q, names[i]);
        const char *sv = s ? s->values : "(unset)", *tv = t ? t->values : "(unset)";
        if (i == 1 || i == 2) { /* false is the default */
            sv = s && strstr(s->values, "true") ? "true" : "false";
            tv = t && strstr(t->values, "true") ? "true" : "false";
        }
        if (strcmp(sv, tv)) return fail(c, "%s, %s: frontend %s, dcp %s", where, names[i], sv, tv);
    }
    c->map_ab[x] = y;
    c->map_ba[y] = x;
    const attr_t *ra = attr_of(p, "CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC"),
                 *rb = attr_of(q, "CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC");
    if (!ra != !rb) return fail(c, "%s: ragged offsets on one side only", where);
    return !ra || same_tensor(c, ref_at(ra, 0), ref_at(rb, 0), where);
}

/* Two sub-descriptors (POINTWISE, MATMUL, REDUCTION) alike: every attribute. */
static int same_sub(cmp_t *c, int x, int y, const char *where)
{
    const desc_t *p = &c->a->d[x], *q = &c->b->d[y];
    if (strcmp(p->type, q->type)) return fail(c, "%s: %s against %s", where, p->type, q->type);
    if (p->n != q->n) return fail(c, "%s: %s attributes differ in number", where, p->type);
    for (int i = 0; i < p->n; i++) {
        const attr_t *t = attr_of(q, p->attrs[i].name);
        if (!t || strcmp(t->values, p->attrs[i].values))
            return fail(c, "%s, %s: frontend %s, dcp %s", where, p->attrs[i].name,
                        p->attrs[i].values, t ? t->values : "(unset)");
    }
    return 1;
}

/* Two operations alike: type, every attribute, operands alike. */
static int same_op(cmp_t *c, int x, int y, int k)
{
    const desc_t *p = &c->a->d[x], *q = &c->b->d[y];
    char where[160];
    snprintf(where, sizeof where, "operation %d (%.100s)", k + 1, p->type);
    if (strcmp(p->type, q->type)) return fail(c, "%s: dcp has %s", where, q->type);
    if (p->n != q->n) return fail(c, "%s: attributes differ in number", where);
    for (int i = 0; i < p->n; i++) {
        const attr_t *s = &p->attrs[i], *t = attr_of(q, s->name);
        char w[240];
        snprintf(w, sizeof w, "%s, %.70s", where, s->name);
        if (!t) return fail(c, "%s: not set by dcp", w);
        if (strcmp(s->type, "CUDNN_TYPE_BACKEND_DESCRIPTOR")) {
            if (strcmp(s->values, t->values))
                return fail(c, "%s: frontend %s, dcp %s", w, s->values, t->values);
            continue;
        }
        const int u = ref_at(s, 0), v = ref_at(t, 0);
        if (u <= 0 || v <= 0 || u >= c->a->n || v >= c->b->n) return fail(c, "%s: dangling", w);
        const int ok = !strcmp(c->a->d[u].type, "CUDNN_BACKEND_TENSOR_DESCRIPTOR")
                           ? same_tensor(c, u, v, w)
                           : same_sub(c, u, v, w);
        if (!ok) return 0;
    }
    return 1;
}

/* The operation graph of g: its descriptor number, 0 when none. */
static int op_graph(const graph_t *g)
{
    for (int i = g->n - 1; i > 0; i--)
        if (!strcmp(g->d[i].type, "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR")) return i;
    return 0;
}

static int same_graph(cmp_t *c)
{
    const int ga = op_graph(c->a), gb = op_graph(c->b);
    if (!ga || !gb) return fail(c, "no operation graph in %s", ga ? "dcp's trace" : "the capture");
    const attr_t *oa = attr_of(&c->a->d[ga], "CUDNN_ATTR_OPERATIONGRAPH_OPS"),
                 *ob = attr_of(&c->b->d[gb], "CUDNN_ATTR_OPERATIONGRAPH_OPS");
    if (!oa || !ob) return fail(c, "an operation graph without operations");
    if (oa->count != ob->count)
        return fail(c, "the frontend's graph has %lld operations, dcp's %lld", (long long)oa->count,
                    (long long)ob->count);
    for (int k = 0; k < oa->count; k++)
        if (!same_op(c, ref_at(oa, k), ref_at(ob, k), k)) return 0;
    return 1;
}

/* dcp's graph of `key` against capture `file`; 1 when alike, 0 with the first difference
 * (printed unless quiet), -1 when no cuDNN loads here. */
static int compare(const dcp_cudnn_key_t *key, const char *file, int quiet)
{
    char *trace = NULL;
    int64_t v = 0;
    const dcp_status_t st = dcp_cudnn_check_graph(key, &trace, &v);
    if (v == 0) return -1;
    CU_ASSERT_EQUAL_FATAL(st, DCP_OK);
    graph_t a = {0}, b = {0};
    char path[256];
    snprintf(path, sizeof path, "tests/data/cudnn_sdpa_graphs/%s.txt", file);
    const int pa = parse_file(&a, path), pb = parse_text(&b, trace);
    CU_ASSERT(pa);
    CU_ASSERT(pb);
    int ok = 0;
    if (pa && pb) {
        cmp_t c = {&a, &b, calloc((size_t)a.n + 1, sizeof(int)), calloc((size_t)b.n + 1, sizeof(int)), ""};
        ok = same_graph(&c);
        if (!ok && !quiet) fprintf(stderr, "\ncudnn graph %s: %s\n", file, c.why);
        free(c.map_ab);
        free(c.map_ba);
    } else {
        fprintf(stderr, "\ncudnn graph %s: %s%s\n", file, a.err, b.err);
    }
    graph_free(&a);
    graph_free(&b);
    free(trace);
    return ok;
}

static dcp_cudnn_key_t key_of(int bwd, int cls, int fused, int deterministic, dcp_dtype_t dtype,
                              int64_t dqk, int64_t dv)
{
    dcp_cudnn_key_t k;
    memset(&k, 0, sizeof k);
    k.bwd = bwd;
    k.cls = cls;
    k.fused = fused;
    k.deterministic = deterministic;
    k.dtype = dtype;
    k.hq = 32;
    k.hkv = 8;
    k.dqk = dqk;
    k.dv = dv;
    k.b = 8;
    k.sq = 128;
    k.skv = 256;
    return k;
}

/* Every graph dcp builds for the shapes captured: forward and backward of each dense class,
 * fp16, the deterministic backward, MLA's 192/128, and the fused forward. */
static void test_matches_frontend(void)
{
    static const struct {
        const char *file;
        int bwd, cls, fused, det, fp16;
        int64_t dqk, dv;
    } cases[] = {
        {"fwd_full", 0, DCP_SEG_FULL, 1, 0, 0, 128, 128},
        {"fwd_full_composite", 0, DCP_SEG_FULL, 0, 0, 0, 128, 128},
        {"fwd_causal", 0, DCP_SEG_CAUSAL, 0, 0, 0, 128, 128},
        {"fwd_band", 0, DCP_SEG_BAND, 0, 0, 0, 128, 128},
        {"fwd_left", 0, DCP_SEG_LEFT, 0, 0, 0, 128, 128},
        {"fwd_causal_fp16", 0, DCP_SEG_CAUSAL, 0, 0, 1, 128, 128},
        {"fwd_causal_mla", 0, DCP_SEG_CAUSAL, 0, 0, 0, 192, 128},
        {"bwd_full_no_max_total", 1, DCP_SEG_FULL, 0, 0, 0, 128, 128},
        {"bwd_causal_no_max_total", 1, DCP_SEG_CAUSAL, 0, 0, 0, 128, 128},
        {"bwd_band_no_max_total", 1, DCP_SEG_BAND, 0, 0, 0, 128, 128},
        {"bwd_left_no_max_total", 1, DCP_SEG_LEFT, 0, 0, 0, 128, 128},
        {"bwd_causal_deterministic", 1, DCP_SEG_CAUSAL, 0, 1, 0, 128, 128},
        {"bwd_causal_mla_no_max_total", 1, DCP_SEG_CAUSAL, 0, 0, 0, 192, 128},
    };
    int compared = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const dcp_cudnn_key_t k =
            key_of(cases[i].bwd, cases[i].cls, cases[i].fused, cases[i].det,
                   cases[i].fp16 ? DCP_DTYPE_FP16 : DCP_DTYPE_BF16, cases[i].dqk, cases[i].dv);
        const int r = compare(&k, cases[i].file, 0);
        if (r < 0) {
            printf("\ncudnn: no cuDNN library loads here; graphs not compared\n");
            return;
        }
        CU_ASSERT_EQUAL(r, 1);
        compared++;
    }
    CU_ASSERT_EQUAL(compared, (int)(sizeof cases / sizeof cases[0]));
}

/* The comparison is not vacuous: a graph of another class, or another head count, differs. */
static void test_comparison_finds_differences(void)
{
    const dcp_cudnn_key_t causal = key_of(0, DCP_SEG_CAUSAL, 0, 0, DCP_DTYPE_BF16, 128, 128);
    dcp_cudnn_key_t gqa = causal;
    gqa.hkv = 32;
    const int r = compare(&causal, "fwd_band", 1);
    if (r < 0) return;
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(compare(&gqa, "fwd_causal", 1), 0);
    CU_ASSERT_EQUAL(compare(&causal, "fwd_causal_fp16", 1), 0);
}

int dcp_suite_cudnn(void)
{
    static const dcp_test_t tests[] = {
        {"policy", test_policy},
        {"cache", test_cache},
        {"plans_settle", test_plans_settle},
        {"graphs_finalize", test_graphs_finalize},
        {"matches_frontend", test_matches_frontend},
        {"comparison_finds_differences", test_comparison_finds_differences},
        {NULL, NULL},
    };
    return dcp_add_suite("cudnn", tests);
}
