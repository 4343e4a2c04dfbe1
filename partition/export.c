#include "partition/export.h"

#include "include/base/error.h"
#include "include/base/out_file.h"
#include "partition/plan/plan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int64_t dcp_export_scaled(dcp_export_scale_t s, int64_t w)
{
    if (w <= 0) return 0;
    const int64_t v = (w + s.div / 2) / s.div;
    return v > 0 ? v : 1;
}

static int64_t scaled_total(dcp_export_scale_t s, const int64_t *w, int64_t n)
{
    int64_t total = 0;
    for (int64_t i = 0; i < n && total <= INT32_MAX; i++) total += dcp_export_scaled(s, w[i]);
    return total;
}

dcp_export_scale_t dcp_export_scale(const int64_t *w, int64_t n)
{
    int64_t g = 0;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        if (w[i] <= 0) continue;
        g = gcd64(w[i], g);
        sum += (double)w[i];
    }
    dcp_export_scale_t s = {g > 0 ? g : 1, 1};
    const double units = sum / (double)s.div;
    if (units <= (double)INT32_MAX) return s;
    /* aim at half the range, then double until rounding up small weights fits too */
    int64_t k = (int64_t)ceil(units / (double)(INT32_MAX / 2));
    for (;; k *= 2) {
        const dcp_export_scale_t t = {s.div * k, 0};
        if (scaled_total(t, w, n) <= INT32_MAX) {
            s = t;
            break;
        }
    }
    s.exact = 1;
    for (int64_t i = 0; i < n && s.exact; i++) s.exact = w[i] % s.div == 0;
    return s;
}

/* The three weight kinds of a hypergraph, gathered to choose their divisors. */
typedef struct {
    int64_t *net, *flops, *bytes; /* [nets with members], [vertices], [vertices] */
    int64_t num_nets, num_pins, nv;
    dcp_export_scale_t s_net, s_flops, s_bytes;
} weights_t;

static void weights_release(weights_t *w)
{
    free(w->net);
    free(w->flops);
    free(w->bytes);
}

static int net_used(const dcp_hypergraph_t *g, int64_t e)
{
    return g->net_off[e + 1] > g->net_off[e];
}

static dcp_status_t weights_build(const dcp_blocks_t *b, const dcp_hypergraph_t *g, weights_t *w)
{
    *w = (weights_t){.nv = b->num_blocks + g->num_comps};
    DCP_CHECK(dcp_calloc(&w->net, g->num_nets, sizeof(int64_t), "export"));
    DCP_CHECK(dcp_calloc(&w->flops, w->nv, sizeof(int64_t), "export"));
    DCP_CHECK(dcp_calloc(&w->bytes, w->nv, sizeof(int64_t), "export"));
    for (int64_t e = 0; e < g->num_nets; e++) {
        if (!net_used(g, e)) continue;
        w->net[w->num_nets++] = g->weight[e];
        w->num_pins += 1 + g->net_off[e + 1] - g->net_off[e];
    }
    for (int32_t t = 0; t < b->num_blocks; t++)
        w->bytes[t] = dcp_blocks_token_bytes(b, b->blk_len[t]);
    for (int64_t c = 0; c < g->num_comps; c++)
        w->flops[b->num_blocks + c] = dcp_blocks_comp_flops(b, c / b->head_blocks);
    w->s_net = dcp_export_scale(w->net, w->num_nets);
    w->s_flops = dcp_export_scale(w->flops, w->nv);
    w->s_bytes = dcp_export_scale(w->bytes, w->nv);
    return DCP_OK;
}

static void comment_scale(FILE *f, const char *what, dcp_export_scale_t s)
{
    fprintf(f, "%% %s / %lld (%s)\n", what, (long long)s.div,
            s.exact ? "exact" : "rounded, nonzero weights kept >= 1");
}

static void write_head(FILE *f, const dcp_blocks_t *b, const weights_t *w, int both)
{
    fprintf(f,
            "%% dcp block hypergraph: %d token blocks (vertices 1..%d), %lld computation "
            "blocks (vertices %d..%lld), %d head groups\n",
            b->num_blocks, b->num_blocks, (long long)(w->nv - b->num_blocks), b->num_blocks + 1,
            (long long)w->nv, b->head_blocks);
    fprintf(f, "%% net: its owner token block, then the computation blocks that read it; a "
               "net spanning lambda parts moves weight x (lambda - 1) bytes\n");
    comment_scale(f, "net weights: bytes per extra part spanned", w->s_net);
    comment_scale(f, "vertex weight 1: forward FLOPs", w->s_flops);
    if (both) comment_scale(f, "vertex weight 2: bytes held (Q, K, V, O, LSE)", w->s_bytes);
}

static void write_nets(FILE *f, const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                       const weights_t *w)
{
    for (int64_t e = 0; e < g->num_nets; e++) {
        if (!net_used(g, e)) continue;
        fprintf(f, "%lld %d", (long long)dcp_export_scaled(w->s_net, g->weight[e]),
                dcp_net_block(g, e) + 1);
        for (int64_t i = g->net_off[e]; i < g->net_off[e + 1]; i++)
            fprintf(f, " %lld", (long long)(b->num_blocks + g->members[i] + 1));
        fputc('\n', f);
    }
}

static dcp_status_t write_error(FILE *f, const char *what)
{
    return ferror(f) ? dcp_set_error(DCP_ERR_SYSTEM, "%s: write error", what) : DCP_OK;
}

dcp_status_t dcp_export_hmetis(FILE *f, const dcp_blocks_t *b, const dcp_hypergraph_t *g)
{
    weights_t w;
    dcp_status_t st = weights_build(b, g, &w);
    if (st == DCP_OK) {
        write_head(f, b, &w, 0);
        fprintf(f, "%lld %lld 11\n", (long long)w.num_nets, (long long)w.nv);
        write_nets(f, b, g, &w);
        /* hMETIS and KaHyPar refuse vertices of weight 0: token blocks weigh 1 unit */
        for (int64_t v = 0; v < w.nv; v++) {
            const int64_t x = dcp_export_scaled(w.s_flops, w.flops[v]);
            fprintf(f, "%lld\n", (long long)(x > 0 ? x : 1));
        }
        st = write_error(f, "hmetis export");
    }
    weights_release(&w);
    return st;
}

dcp_status_t dcp_export_patoh(FILE *f, const dcp_blocks_t *b, const dcp_hypergraph_t *g)
{
    weights_t w;
    dcp_status_t st = weights_build(b, g, &w);
    if (st == DCP_OK) {
        write_head(f, b, &w, 1);
        fprintf(f, "1 %lld %lld %lld 3 2\n", (long long)w.nv, (long long)w.num_nets,
                (long long)w.num_pins);
        write_nets(f, b, g, &w);
        for (int64_t v = 0; v < w.nv; v++)
            fprintf(f, "%lld %lld\n", (long long)dcp_export_scaled(w.s_flops, w.flops[v]),
                    (long long)dcp_export_scaled(w.s_bytes, w.bytes[v]));
        st = write_error(f, "patoh export");
    }
    weights_release(&w);
    return st;
}

dcp_status_t dcp_export_partition(FILE *f, const dcp_blocks_t *b, const dcp_placement_t *p)
{
    for (int32_t t = 0; t < b->num_blocks; t++) fprintf(f, "%d\n", p->blk_owner[t]);
    for (int64_t c = 0; c < b->num_tiles * b->head_blocks; c++) fprintf(f, "%d\n", p->comp_exec[c]);
    return write_error(f, "partition export");
}

typedef enum { FMT_HMETIS, FMT_PATOH, FMT_PARTITION } fmt_t;

static dcp_status_t write_body(FILE *f, fmt_t fmt, const dcp_placed_t *x, const dcp_hypergraph_t *g)
{
    if (fmt == FMT_HMETIS) return dcp_export_hmetis(f, &x->b, g);
    if (fmt == FMT_PATOH) return dcp_export_patoh(f, &x->b, g);
    return dcp_export_partition(f, &x->b, &x->pl);
}

dcp_status_t dcp_export_write(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              const dcp_plan_options_t *opts, const dcp_cluster_t *cluster,
                              const dcp_export_paths_t *paths, dcp_plan_options_t *placed_out)
{
    /* the plan returned carries the options that placed it (strategy, block size, seed):
     * placing with them again gives its blocks and placement, placement being deterministic */
    dcp_plan_t *p = NULL;
    DCP_CHECK(dcp_plan_create(batch, shape, opts, cluster, &p));
    const dcp_plan_options_t o = p->opts;
    dcp_plan_destroy(p);
    dcp_placed_t x = {0};
    dcp_hypergraph_t g = {0};
    const char *const path[3] = {paths->hmetis, paths->patoh, paths->partition};
    static const char *const what[3] = {"hmetis export", "patoh export", "partition export"};
    dcp_out_file_t file[3] = {{0}};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_place_batch(batch, shape, &o, cluster, &x), st, out);
    DCP_CHECK_GOTO(dcp_hypergraph_build(&x.b, &g), st, out);
    /* every file is opened before any is written, and all replace their targets or none */
    for (int k = 0; k < 3; k++)
        if (path[k]) DCP_CHECK_GOTO(dcp_out_file_open(&file[k], path[k], what[k]), st, out);
    for (int k = 0; k < 3; k++)
        if (path[k]) DCP_CHECK_GOTO(write_body(file[k].f, (fmt_t)k, &x, &g), st, out);
    if (placed_out) *placed_out = o;
out:
    for (int k = 0; k < 3; k++) st = dcp_out_file_close(&file[k], st, what[k]);
    dcp_hypergraph_release(&g);
    dcp_placed_release(&x);
    return st;
}
