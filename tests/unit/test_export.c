/* The hypergraph exports (partition/export.h): hMETIS and PaToH files and dcp's partition,
 * read back by independent parsers and checked against the planner's own blocks, hypergraph,
 * placement and traffic. */
#include "partition/export.h"
#include "partition/plan/plan.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const dcp_attn_shape_t shape = {8, 2, 16, DCP_DTYPE_BF16, 0.0f};

/* ---- a reader for both formats, written from the formats' descriptions ---- */

typedef struct {
    int64_t nets, nv, pins;
    int ncon;
    int64_t *net_w;   /* [nets] */
    int64_t *pin_off; /* [nets + 1] */
    int64_t *pin;     /* 0-based vertices */
    int64_t *vw;      /* [nv * ncon] */
    int64_t div[3];   /* from the comment lines: nets, FLOPs, bytes */
    int exact[3];
    int ndiv;
} hg_t;

static void hg_free(hg_t *h)
{
    free(h->net_w);
    free(h->pin_off);
    free(h->pin);
    free(h->vw);
}

/* Next line that is not a comment; comments stating a divisor are recorded. Returns 0 at
 * the end of the file. */
static int next_line(FILE *f, char **line, size_t *cap, hg_t *h)
{
    while (getline(line, cap, f) >= 0) {
        if ((*line)[0] != '%') return 1;
        const char *slash = strstr(*line, " / ");
        long long d;
        char how[16];
        if (slash && h->ndiv < 3 && sscanf(slash, " / %lld (%15[a-z]", &d, how) == 2) {
            h->div[h->ndiv] = d;
            h->exact[h->ndiv++] = !strcmp(how, "exact");
        }
    }
    return 0;
}

/* Integers of one line into v (at most max); returns how many, or -1 on a non-integer. */
static int ints(const char *line, int64_t *v, int max)
{
    int n = 0;
    const char *s = line;
    for (;;) {
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '\n' || *s == '\0') return n;
        char *end;
        const long long x = strtoll(s, &end, 10);
        if (end == s || n == max) return -1;
        v[n++] = x;
        s = end;
    }
}

/* Parses an hMETIS (patoh = 0) or PaToH (patoh = 1) file; CU-asserts its structure. The
 * hMETIS file is held to what KaHyPar's reader (and hMETIS's manual) demand: `%` lines are
 * comments, every net and vertex weight is >= 1 (KaHyPar: "Vertices with weight 0 are not
 * supported"), pins lie in 1..vertices and no net names a vertex twice. */
static void hg_read(FILE *f, int patoh, hg_t *h)
{
    *h = (hg_t){0};
    char *line = NULL;
    size_t cap = 0;
    enum { MAXV = 1 << 16 };
    int64_t *v = malloc(MAXV * sizeof *v);
    CU_ASSERT_FATAL(next_line(f, &line, &cap, h));
    const int nh = ints(line, v, MAXV);
    if (patoh) {
        CU_ASSERT_EQUAL_FATAL(nh, 6);
        CU_ASSERT_EQUAL(v[0], 1); /* 1-based */
        CU_ASSERT_EQUAL(v[4], 3); /* cell weights and net costs */
        h->nv = v[1], h->nets = v[2], h->pins = v[3], h->ncon = (int)v[5];
    } else {
        CU_ASSERT_EQUAL_FATAL(nh, 3);
        CU_ASSERT_EQUAL(v[2], 11);
        h->nets = v[0], h->nv = v[1], h->ncon = 1;
    }
    h->net_w = calloc((size_t)h->nets, sizeof *h->net_w);
    h->pin_off = calloc((size_t)h->nets + 1, sizeof *h->pin_off);
    int64_t pcap = 1024;
    h->pin = malloc((size_t)pcap * sizeof *h->pin);
    for (int64_t e = 0; e < h->nets; e++) {
        CU_ASSERT_FATAL(next_line(f, &line, &cap, h));
        const int n = ints(line, v, MAXV);
        CU_ASSERT_FATAL(n >= 2);
        h->net_w[e] = v[0];
        CU_ASSERT(v[0] >= 1);
        for (int i = 1; i < n; i++) {
            CU_ASSERT_FATAL(v[i] >= 1 && v[i] <= h->nv);
            for (int j = 1; j < i; j++) CU_ASSERT(v[j] != v[i]);
            if (h->pin_off[e + 1] + h->pin_off[e] >= pcap) {
                pcap *= 2;
                h->pin = realloc(h->pin, (size_t)pcap * sizeof *h->pin);
            }
            h->pin[h->pin_off[e] + h->pin_off[e + 1]++] = v[i] - 1;
        }
        h->pin_off[e + 1] += h->pin_off[e];
    }
    h->vw = calloc((size_t)(h->nv * h->ncon), sizeof *h->vw);
    for (int64_t u = 0; u < h->nv; u++) {
        CU_ASSERT_FATAL(next_line(f, &line, &cap, h));
        CU_ASSERT_EQUAL_FATAL(ints(line, v, MAXV), h->ncon); /* one weight per constraint */
        for (int k = 0; k < h->ncon; k++) h->vw[u * h->ncon + k] = v[k];
        if (!patoh) CU_ASSERT(v[0] >= 1);
    }
    CU_ASSERT_FALSE(next_line(f, &line, &cap, h)); /* nothing after the weights */
    if (patoh) CU_ASSERT_EQUAL(h->pin_off[h->nets], h->pins);
    free(v);
    free(line);
}

/* Every written integer fits 32 bits, and so does each kind's total. */
static void check_32bit(const hg_t *h)
{
    int64_t tot = 0;
    for (int64_t e = 0; e < h->nets; e++) {
        CU_ASSERT(h->net_w[e] >= 1);
        tot += h->net_w[e];
    }
    CU_ASSERT(tot <= INT32_MAX);
    for (int k = 0; k < h->ncon; k++) {
        tot = 0;
        for (int64_t u = 0; u < h->nv; u++) tot += h->vw[u * h->ncon + k];
        CU_ASSERT(tot <= INT32_MAX);
    }
}

static int64_t *read_partition(FILE *f, int64_t nv)
{
    int64_t *part = malloc((size_t)nv * sizeof *part);
    for (int64_t u = 0; u < nv; u++) {
        long long x;
        CU_ASSERT_EQUAL_FATAL(fscanf(f, "%lld", &x), 1);
        part[u] = x;
    }
    long long extra;
    CU_ASSERT_EQUAL(fscanf(f, "%lld", &extra), EOF);
    return part;
}

/* The connectivity (lambda - 1) metric of a partition, in the file's weight units. */
static int64_t connectivity(const hg_t *h, const int64_t *part, int32_t nparts)
{
    int64_t *seen = calloc((size_t)nparts, sizeof *seen), sum = 0;
    for (int64_t e = 0; e < h->nets; e++) {
        int64_t lambda = 0;
        for (int64_t i = h->pin_off[e]; i < h->pin_off[e + 1]; i++) {
            const int64_t p = part[h->pin[i]];
            CU_ASSERT_FATAL(p >= 0 && p < nparts);
            if (seen[p] != e + 1) lambda++;
            seen[p] = e + 1;
        }
        sum += h->net_w[e] * (lambda - 1);
    }
    free(seen);
    return sum;
}

/* ---- fixtures ---- */

typedef struct {
    dcp_cluster_t *cluster;
    dcp_mask_t masks[5];
    dcp_batch_t batch;
    dcp_plan_options_t opts;
    dcp_placed_t x;
    dcp_hypergraph_t g;
} fixture_t;

static const int32_t lens[5] = {3000, 1500, 700, 260, 33};

static void fixture(fixture_t *fx, const char *mask, dcp_strategy_t s)
{
    memset(fx, 0, sizeof *fx);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &fx->cluster), DCP_OK);
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(mask, &fx->masks[i]), DCP_OK);
    fx->batch = (dcp_batch_t){.num_seqs = 5, .lengths = lens, .masks = fx->masks};
    dcp_plan_options_default(&fx->opts);
    fx->opts.strategy = s;
    fx->opts.block_size = 256;
    fx->opts.head_blocks = 2;
    CU_ASSERT_EQUAL_FATAL(dcp_place_batch(&fx->batch, &shape, &fx->opts, fx->cluster, &fx->x),
                          DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&fx->x.b, &fx->g), DCP_OK);
}

static void fixture_free(fixture_t *fx)
{
    dcp_hypergraph_release(&fx->g);
    dcp_placed_release(&fx->x);
    dcp_cluster_destroy(fx->cluster);
}

/* The file's nets, pins and weights are the planner's hypergraph, exactly (weights times
 * the stated divisors). */
static void check_against(const hg_t *h, const fixture_t *fx)
{
    const dcp_blocks_t *b = &fx->x.b;
    const dcp_hypergraph_t *g = &fx->g;
    CU_ASSERT_EQUAL_FATAL(h->nv, b->num_blocks + g->num_comps);
    CU_ASSERT_EQUAL_FATAL(h->ndiv, h->ncon + 1);
    for (int k = 0; k < h->ndiv; k++) CU_ASSERT(h->exact[k]); /* small batch: no rounding */
    int64_t e2 = 0;
    for (int64_t e = 0; e < g->num_nets; e++) {
        const int64_t n = g->net_off[e + 1] - g->net_off[e];
        if (n == 0) continue;
        CU_ASSERT_FATAL(e2 < h->nets);
        CU_ASSERT_EQUAL(h->net_w[e2] * h->div[0], g->weight[e]);
        CU_ASSERT_EQUAL_FATAL(h->pin_off[e2 + 1] - h->pin_off[e2], n + 1);
        CU_ASSERT_EQUAL(h->pin[h->pin_off[e2]], dcp_net_block(g, e));
        for (int64_t i = 0; i < n; i++)
            CU_ASSERT_EQUAL(h->pin[h->pin_off[e2] + 1 + i],
                            b->num_blocks + g->members[g->net_off[e] + i]);
        e2++;
    }
    CU_ASSERT_EQUAL(e2, h->nets);
    for (int64_t u = 0; u < h->nv; u++) {
        const int comp = u >= b->num_blocks;
        const int64_t flops =
            comp ? dcp_blocks_comp_flops(b, (u - b->num_blocks) / b->head_blocks) : 0;
        if (comp || h->ncon == 2) {
            CU_ASSERT_EQUAL(h->vw[u * h->ncon] * h->div[1], flops);
        } else {
            CU_ASSERT_EQUAL(h->vw[u], 1); /* hMETIS: a token block weighs one unit, not 0 */
        }
        if (h->ncon == 2) {
            const int64_t bytes = comp ? 0 : dcp_blocks_token_bytes(b, b->blk_len[u]);
            CU_ASSERT_EQUAL(h->vw[u * 2 + 1] * h->div[2], bytes);
        }
    }
}

static void roundtrip(int patoh)
{
    fixture_t fx;
    fixture(&fx, "causal", DCP_STRATEGY_METIS);
    FILE *f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(
        patoh ? dcp_export_patoh(f, &fx.x.b, &fx.g) : dcp_export_hmetis(f, &fx.x.b, &fx.g), DCP_OK);
    rewind(f);
    hg_t h;
    hg_read(f, patoh, &h);
    CU_ASSERT_EQUAL(h.ncon, patoh ? 2 : 1);
    check_against(&h, &fx);
    check_32bit(&h);
    hg_free(&h);
    fclose(f);
    fixture_free(&fx);
}

/* hMETIS: one weight per vertex line (the compute weight), fmt 11, exact. */
static void test_hmetis_roundtrip(void)
{
    roundtrip(0);
}

/* PaToH: both constraints per cell, net costs, the pin count in the header. */
static void test_patoh_roundtrip(void)
{
    roundtrip(1);
}

static void open_tmp(char *path)
{
    strcpy(path, "/tmp/dcp-export-XXXXXX");
    const int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
}

/* dcp_export_write writes the plan dcp_plan_create returns: the file's hypergraph is that
 * plan's blocks, its partition the plan's owners, and the partition's connectivity over the
 * hypergraph the plan's traffic, forward plus backward. On these batches (2x4, default
 * figures) lpt is its own placement, METIS on the fixture's batch returns zigzag's plan, and
 * METIS on 12000 + 300 tokens keeps its second try (seed 2). */
static void test_partition_is_the_plan_returned(void)
{
    static const int32_t long_short[2] = {12000, 300};
    static const struct {
        const char *mask;
        dcp_strategy_t s;
        int n;
        const int32_t *lens;
    } cases[3] = {{"lambda:16:400", DCP_STRATEGY_LPT, 5, lens},
                  {"causal", DCP_STRATEGY_METIS, 5, lens},
                  {"lambda:16:400", DCP_STRATEGY_METIS, 2, long_short}};
    for (int i = 0; i < 3; i++) {
        fixture_t fx;
        fixture(&fx, cases[i].mask, cases[i].s);
        fx.batch =
            (dcp_batch_t){.num_seqs = cases[i].n, .lengths = cases[i].lens, .masks = fx.masks};
        dcp_plan_t *p = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&fx.batch, &shape, &fx.opts, fx.cluster, &p), DCP_OK);
        char hp[64], pp[64];
        open_tmp(hp);
        open_tmp(pp);
        const dcp_export_paths_t paths = {hp, NULL, pp};
        dcp_plan_options_t placed;
        CU_ASSERT_EQUAL_FATAL(
            dcp_export_write(&fx.batch, &shape, &fx.opts, fx.cluster, &paths, &placed), DCP_OK);
        CU_ASSERT_EQUAL(placed.strategy, p->stats.strategy);
        CU_ASSERT_EQUAL(placed.seed, p->opts.seed);
        /* the fixture's blocks and hypergraph, placed as the plan was */
        dcp_hypergraph_release(&fx.g);
        dcp_placed_release(&fx.x);
        fx.opts = placed;
        CU_ASSERT_EQUAL_FATAL(dcp_place_batch(&fx.batch, &shape, &fx.opts, fx.cluster, &fx.x),
                              DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&fx.x.b, &fx.g), DCP_OK);
        FILE *f = fopen(hp, "r"), *fp = fopen(pp, "r");
        hg_t h;
        hg_read(f, 0, &h);
        check_against(&h, &fx);
        int64_t *part = read_partition(fp, h.nv);
        CU_ASSERT_EQUAL_FATAL(fx.x.b.num_blocks, p->num_blocks);
        for (int32_t t = 0; t < fx.x.b.num_blocks; t++) CU_ASSERT_EQUAL(part[t], p->blk_owner[t]);
        for (int64_t c = 0; c < fx.g.num_comps; c++)
            CU_ASSERT_EQUAL(part[fx.x.b.num_blocks + c], fx.x.pl.comp_exec[c]);
        CU_ASSERT_EQUAL(connectivity(&h, part, 8) * h.div[0],
                        p->stats.comm_bytes + p->stats.bwd_comm_bytes);
        free(part);
        hg_free(&h);
        fclose(f);
        fclose(fp);
        unlink(hp);
        unlink(pp);
        dcp_plan_destroy(p);
        fixture_free(&fx);
    }
}

/* Weights too large for 32 bits are divided and rounded; nonzero ones stay >= 1; a gcd
 * makes the division exact where it can. */
static void test_scale_fits_32_bits(void)
{
    const int64_t big[5] = {(int64_t)3 << 40, 5, 0, (int64_t)7 << 38, 123456789};
    const dcp_export_scale_t s = dcp_export_scale(big, 5);
    CU_ASSERT_FALSE(s.exact);
    int64_t tot = 0;
    for (int i = 0; i < 5; i++) {
        const int64_t v = dcp_export_scaled(s, big[i]);
        CU_ASSERT(big[i] == 0 ? v == 0 : v >= 1);
        tot += v;
    }
    CU_ASSERT(tot <= INT32_MAX);
    CU_ASSERT(dcp_export_scaled(s, big[0]) > dcp_export_scaled(s, big[3]));
    const int64_t even[3] = {(int64_t)6 << 40, (int64_t)4 << 40, (int64_t)2 << 40};
    const dcp_export_scale_t e = dcp_export_scale(even, 3);
    CU_ASSERT(e.exact);
    CU_ASSERT_EQUAL(e.div, (int64_t)2 << 40);
    CU_ASSERT_EQUAL(dcp_export_scaled(e, even[0]), 3);
}

/* A path that cannot be written fails with INVALID_ARG naming it, before any other file. */
static void test_bad_path_is_named(void)
{
    fixture_t fx;
    fixture(&fx, "causal", DCP_STRATEGY_LPT);
    const dcp_export_paths_t paths = {"/nonexistent-dir/x.hgr", NULL, NULL};
    CU_ASSERT_EQUAL(dcp_export_write(&fx.batch, &shape, &fx.opts, fx.cluster, &paths, NULL),
                    DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "/nonexistent-dir/x.hgr"));
    fixture_free(&fx);
}

/* Files are written whole or not at all: a later path that cannot be opened leaves the
 * earlier targets as they were (an old file keeps its text, a new one is never made), and no
 * temporary file stays behind. */
static void test_all_or_none(void)
{
    fixture_t fx;
    fixture(&fx, "causal", DCP_STRATEGY_LPT);
    char dir[] = "/tmp/dcp-export-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char old[96], fresh[96], cmd[160];
    snprintf(old, sizeof old, "%s/old.hgr", dir);
    snprintf(fresh, sizeof fresh, "%s/new.patoh", dir);
    FILE *f = fopen(old, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("before\n", f);
    fclose(f);
    const dcp_export_paths_t bad = {old, fresh, "/nonexistent-dir/x.part"};
    CU_ASSERT_EQUAL(dcp_export_write(&fx.batch, &shape, &fx.opts, fx.cluster, &bad, NULL),
                    DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "/nonexistent-dir/x.part"));
    char text[16] = {0};
    f = fopen(old, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT(fgets(text, sizeof text, f) && !strcmp(text, "before\n"));
    fclose(f);
    CU_ASSERT_NOT_EQUAL(access(fresh, F_OK), 0);
    const dcp_export_paths_t good = {old, fresh, NULL};
    CU_ASSERT_EQUAL(dcp_export_write(&fx.batch, &shape, &fx.opts, fx.cluster, &good, NULL), DCP_OK);
    CU_ASSERT_EQUAL(access(fresh, F_OK), 0);
    f = fopen(old, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT(fgets(text, sizeof text, f) && strcmp(text, "before\n") != 0);
    fclose(f);
    snprintf(cmd, sizeof cmd, "ls %s | grep -q tmp", dir);
    CU_ASSERT_NOT_EQUAL(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CU_ASSERT_EQUAL(system(cmd), 0);
    fixture_free(&fx);
}

int dcp_suite_export(void)
{
    static const dcp_test_t tests[] = {
        {"hmetis_roundtrip", test_hmetis_roundtrip},
        {"patoh_roundtrip", test_patoh_roundtrip},
        {"partition_is_the_plan_returned", test_partition_is_the_plan_returned},
        {"scale_fits_32_bits", test_scale_fits_32_bits},
        {"bad_path_is_named", test_bad_path_is_named},
        {"all_or_none", test_all_or_none},
        {NULL, NULL},
    };
    return dcp_add_suite("export", tests);
}
