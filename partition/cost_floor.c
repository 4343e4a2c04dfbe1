/* Placement floors: the least time the cost model (partition/plan/cost.h) can predict for any
 * plan on a placement, or on a batch cut into chunks, found without building one. */
#include "partition/cost_floor.h"

#include "include/base/error.h"
#include "partition/model/hypergraph.h"
#include "partition/model/mask.h"

#include <math.h>
#include <stdlib.h>

/* Seconds every rank computes its tiles of placement pl forward, timed as
 * dcp_cost_predict() times them ([num_ranks], malloc'ed). */
static dcp_status_t compute_seconds(const dcp_blocks_t *b, const dcp_placement_t *pl,
                                    int32_t num_ranks, const dcp_perf_model_t *perf, double **out)
{
    double *sec;
    DCP_CHECK(dcp_calloc(&sec, num_ranks, sizeof *sec, "cost floor"));
    const double peak = perf->peak_tflops * 1e12;
    for (int64_t t = 0; t < b->num_tiles; t++) {
        const double edge = sqrt((double)b->blk_len[b->tile_q[t]] * b->blk_len[b->tile_kv[t]]);
        const double s =
            (double)dcp_blocks_comp_flops(b, t) / (peak * dcp_cost_efficiency(perf, edge));
        for (int32_t h = 0; h < b->head_blocks; h++)
            sec[pl->comp_exec[t * b->head_blocks + h]] += s;
    }
    *out = sec;
    return DCP_OK;
}

dcp_status_t dcp_cost_attn_floor(const dcp_blocks_t *b, const dcp_placement_t *pl,
                                 int32_t num_ranks, const dcp_perf_model_t *perf, double *ms_out)
{
    double *sec;
    DCP_CHECK(compute_seconds(b, pl, num_ranks, perf, &sec));
    double worst = 0;
    for (int32_t r = 0; r < num_ranks; r++) worst = fmax(worst, sec[r]);
    free(sec);
    *ms_out = worst * 1e3;
    return DCP_OK;
}

/* The transfers of one net between its owner and one reader, per pass: the kinds the owner
 * sends and the kinds it gets back (partials). */
static const dcp_xfer_kind_t net_out[2][2][2] = {
    /* [query side][pass][k] */
    {{DCP_XFER_KV, DCP_XFER_KIND_COUNT}, {DCP_XFER_KV, DCP_XFER_KIND_COUNT}},
    {{DCP_XFER_Q, DCP_XFER_KIND_COUNT}, {DCP_XFER_BQ, DCP_XFER_BSTAT}}};
static const dcp_xfer_kind_t net_back[2][2] = {{DCP_XFER_KIND_COUNT, DCP_XFER_DKV},
                                               {DCP_XFER_PART, DCP_XFER_DQ}};

/* Per pass, rank, direction (0 send, 1 receive) and link class (0 intra, 1 inter): bytes. */
typedef struct {
    double *v; /* [(pass * R + r) * 4 + dir * 2 + class] */
} link_bytes_t;

static void add_xfer(const dcp_blocks_t *b, link_bytes_t *lb, int32_t nr, int pass,
                     dcp_xfer_kind_t k, int64_t len, int32_t src, int32_t dst, int inter)
{
    if (k == DCP_XFER_KIND_COUNT) return;
    const double bytes = (double)dcp_blocks_xfer_bytes(b, k, len);
    lb->v[((int64_t)pass * nr + src) * 4 + 0 * 2 + inter] += bytes;
    lb->v[((int64_t)pass * nr + dst) * 4 + 1 * 2 + inter] += bytes;
}

static dcp_status_t link_bytes(const dcp_blocks_t *b, const dcp_placement_t *pl, int32_t nr,
                               int32_t devs, link_bytes_t *lb)
{
    dcp_hypergraph_t g;
    int64_t *seen = NULL;
    DCP_CHECK(dcp_hypergraph_build(b, &g));
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&seen, nr, sizeof *seen, "cost floor"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&lb->v, 2 * (int64_t)nr * 4, sizeof *lb->v, "cost floor"), st, out);
    for (int64_t e = 0; e < g.num_nets; e++) {
        const int32_t t = dcp_net_block(&g, e), o = pl->blk_owner[t];
        const int q = dcp_net_is_query(&g, e);
        const int64_t len = b->blk_len[t];
        seen[o] = e + 1;
        for (int64_t i = g.net_off[e]; i < g.net_off[e + 1]; i++) {
            const int32_t r = pl->comp_exec[g.members[i]];
            if (seen[r] == e + 1) continue;
            seen[r] = e + 1;
            const int inter = r / devs != o / devs;
            for (int pass = 0; pass < 2; pass++) {
                for (int k = 0; k < 2; k++)
                    add_xfer(b, lb, nr, pass, net_out[q][pass][k], len, o, r, inter);
                add_xfer(b, lb, nr, pass, net_back[q][pass], len, r, o, inter);
            }
        }
    }
out:
    free(seen);
    dcp_hypergraph_release(&g);
    return st;
}

dcp_status_t dcp_cost_floor(const dcp_blocks_t *b, const dcp_placement_t *pl,
                            const dcp_cluster_t *cluster, double *fwd_ms_out, double *bwd_ms_out)
{
    const int32_t nr = cluster->num_ranks;
    const dcp_perf_model_t *perf = &cluster->perf;
    double *sec;
    link_bytes_t lb = {0};
    DCP_CHECK(compute_seconds(b, pl, nr, perf, &sec));
    const dcp_status_t st = link_bytes(b, pl, nr, cluster->devs_per_node, &lb);
    if (st != DCP_OK) {
        free(sec);
        free(lb.v);
        return st;
    }
    const double bw[2] = {perf->intra_gbps * 1e9, perf->inter_gbps * 1e9};
    double worst[2] = {0, 0};
    for (int pass = 0; pass < 2; pass++)
        for (int32_t r = 0; r < nr; r++) {
            double link = 0;
            for (int d = 0; d < 2; d++)
                for (int k = 0; k < 2; k++)
                    link = fmax(link, lb.v[((int64_t)pass * nr + r) * 4 + d * 2 + k] / bw[k]);
            const double compute = (pass == 0 ? 1.0 : 2.5 / perf->bwd_speed) * sec[r];
            worst[pass] = fmax(worst[pass], fmax(compute, link / 2));
        }
    free(sec);
    free(lb.v);
    *fwd_ms_out = worst[0] * 1e3;
    *bwd_ms_out = worst[1] * 1e3;
    return DCP_OK;
}

/* The highest efficiency the curve gives any edge in [1, edge]: it rises below the padding
 * edge q (dcp_cost_curve) and is log-linear between its points above, so it peaks on
 * [1, edge] at min(edge, q), at edge, or at one of its points in between. */
static double best_efficiency(const dcp_perf_model_t *m, double edge)
{
    const double q = dcp_cost_min_tile(m->eff_tokens);
    double best = fmax(dcp_cost_efficiency(m, fmin(edge, q)), dcp_cost_efficiency(m, edge));
    for (int32_t i = 0; i < m->eff_n; i++)
        if (m->eff_tokens[i] >= q && m->eff_tokens[i] <= edge)
            best = fmax(best, dcp_cost_efficiency(m, m->eff_tokens[i]));
    return best;
}

double dcp_cost_chunked_floor(const dcp_plan_t *p, int32_t chunks)
{
    const int32_t block = p->opts.block_size;
    const double per_pair = (double)dcp_shape_pair_flops(&p->shape) * p->shape.num_heads;
    double seconds = 0;
    for (int32_t s = 0; s < p->num_seqs; s++) {
        const dcp_seq_info_t *q = &p->seqs[s];
        const int64_t chunk = chunks > 0 ? (q->len + chunks - 1) / chunks : q->len;
        const double edge = (double)(chunk < block ? chunk : block);
        const double pairs = (double)dcp_mask_pairs(&q->mask, q->len, 0, q->len, 0, q->len);
        seconds +=
            pairs * per_pair / (p->perf.peak_tflops * 1e12 * best_efficiency(&p->perf, edge));
    }
    return seconds / p->num_ranks * 1e3;
}
