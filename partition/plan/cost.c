#include "partition/plan/cost.h"

#include "include/base/error.h"
#include "partition/model/hypergraph.h"
#include "partition/model/mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The smallest edge a curve through points x[0..] prices without padding. */
static double curve_min_tile(const double *x)
{
    return fmin(x[0], DCP_COST_MIN_TILE);
}

double dcp_cost_curve(int32_t n, const double *x, const double *y, double edge)
{
    const double q = curve_min_tile(x);
    if (edge < q) return (edge / q) * (edge / q) * dcp_cost_curve(n, x, y, q);
    if (edge <= x[0]) return y[0];
    if (edge >= x[n - 1]) return y[n - 1];
    int32_t i = 1;
    while (x[i] < edge) i++;
    const double x0 = log(x[i - 1]), x1 = log(x[i]);
    const double f = (log(edge) - x0) / (x1 - x0);
    return y[i - 1] + f * (y[i] - y[i - 1]);
}

double dcp_cost_efficiency(const dcp_perf_model_t *m, double tokens)
{
    return dcp_cost_curve(m->eff_n, m->eff_tokens, m->eff_value, tokens);
}

double dcp_cost_attn_seconds(const dcp_plan_t *p, const dcp_instr_t *in, dcp_cost_rate_fn rate,
                             const void *ctx)
{
    const int bwd = in->arg == DCP_PASS_BWD;
    const double per_pair =
        (double)(bwd ? dcp_shape_pair_flops_bwd(&p->shape) : dcp_shape_pair_flops(&p->shape)) *
        p->qpg;
    double s = 0;
    for (int64_t g = in->first; g < in->first + in->count; g++) {
        const dcp_tile_group_t *gr = &p->groups[g];
        const dcp_seq_info_t *q = &p->seqs[gr->seq];
        for (int32_t t = gr->first_tile; t < gr->first_tile + gr->num_tiles; t++) {
            const dcp_tile_t *tl = &p->tiles[t];
            const double pairs =
                (double)dcp_mask_pairs(&q->mask, q->len, gr->q_pos, gr->q_pos + gr->q_len,
                                       tl->kv_pos, tl->kv_pos + tl->kv_len);
            const double edge = sqrt((double)gr->q_len * tl->kv_len);
            s += pairs * per_pair / rate(ctx, edge, bwd);
        }
    }
    return s;
}

/* The cost model's FLOP/s: peak x efficiency(tile), the backward's scaled by bwd_speed. */
static double perf_rate(const void *ctx, double edge, int bwd)
{
    const dcp_perf_model_t *m = ctx;
    return m->peak_tflops * 1e12 * dcp_cost_efficiency(m, edge) * (bwd ? m->bwd_speed : 1.0);
}

double dcp_cost_memory_bytes(const dcp_plan_t *p, const dcp_instr_t *in)
{
    double bytes = 0;
    if (in->op == DCP_OP_COPY || in->arg == DCP_PASS_BWD)
        for (int64_t i = in->first; i < in->first + in->count; i++) {
            /* a copy reads and writes; a sum reads each source, and its destination once */
            const int next = in->op == DCP_OP_REDUCE && i > in->first &&
                             dcp_copy_same_dst(&p->copies[i - 1], &p->copies[i]);
            bytes += (in->op == DCP_OP_COPY ? 2.0
                      : next                ? 1.0
                                            : 3.0) *
                     p->copies[i].rows * p->copies[i].row_elems *
                     dcp_plan_elem_bytes(p, p->copies[i].dst.buf);
        }
    else
        for (int64_t i = in->first; i < in->first + in->count; i++)
            bytes += 4.0 * (p->merges[i].num_src + 2) * p->merges[i].rows * p->qpg *
                     (dcp_shape_dv(&p->shape) + 1);
    return bytes;
}

/* Link time of one rank's part of a phase: both directions and both link classes at once. */
static double launch_seconds(const dcp_plan_t *p, int32_t r, const dcp_instr_t *in)
{
    double b[2][2] = {{0, 0}, {0, 0}}; /* [send/recv][intra/inter] */
    for (int64_t i = in->first; i < in->first + in->count; i++) {
        const dcp_comm_op_t *op = &p->comm[i];
        const int inter = r / p->devs_per_node != op->peer / p->devs_per_node;
        b[op->send ? 0 : 1][inter] += (double)op->elems * dcp_plan_elem_bytes(p, op->buf);
    }
    const double bw[2] = {p->perf.intra_gbps * 1e9, p->perf.inter_gbps * 1e9};
    double t = 0;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++) t = fmax(t, b[d][k] / bw[k]);
    return t + p->perf.lat_us * 1e-6;
}

typedef struct {
    int64_t pc;
    double clock;
} rank_sim_t;

typedef struct {
    const dcp_plan_t *p;
    dcp_pass_t pass;
    rank_sim_t *rk;
    double *launch_at;             /* [rank * phases + phase], NAN until launched */
    double *busy;                  /* [rank * phases + phase]: the rank's link time in the phase */
    const dcp_instr_t **launch_of; /* [rank * phases + phase] */
} sim_t;

/* The time rank r's phase completes, or NAN while a peer has not launched it yet. */
static double phase_done(const sim_t *s, int32_t r, int32_t ph)
{
    const dcp_plan_t *p = s->p;
    const int64_t np = p->num_phases;
    const dcp_instr_t *in = s->launch_of[r * np + ph];
    double start = s->launch_at[r * np + ph], link = s->busy[r * np + ph];
    for (int64_t i = in->first; i < in->first + in->count; i++) {
        const int32_t q = p->comm[i].peer;
        const double lq = s->launch_at[q * np + ph];
        if (isnan(lq)) return NAN;
        start = fmax(start, lq);
        link = fmax(link, s->busy[q * np + ph]);
    }
    return start + link;
}

/* Runs rank r until it finishes or blocks on a peer; returns 1 if it advanced. */
static int advance(sim_t *s, int32_t r)
{
    const dcp_plan_t *p = s->p;
    rank_sim_t *k = &s->rk[r];
    const int64_t np = p->num_phases;
    int moved = 0;
    for (; k->pc < dcp_plan_prog_end(p, s->pass, r); k->pc++, moved = 1) {
        const dcp_instr_t *in = &p->instrs[k->pc];
        switch (in->op) {
        case DCP_OP_ATTN:
            k->clock += dcp_cost_attn_seconds(p, in, perf_rate, &p->perf);
            break;
        case DCP_OP_COPY:
        case DCP_OP_REDUCE:
            k->clock += dcp_cost_memory_bytes(p, in) / (p->perf.hbm_gbps * 1e9);
            break;
        case DCP_OP_COMM_LAUNCH:
            s->launch_at[r * np + in->arg] = k->clock;
            s->busy[r * np + in->arg] = launch_seconds(p, r, in);
            s->launch_of[r * np + in->arg] = in;
            break;
        case DCP_OP_COMM_WAIT: {
            const double done = phase_done(s, r, in->arg);
            if (isnan(done)) return moved;
            k->clock = fmax(k->clock, done);
            break;
        }
        default:
            break;
        }
    }
    return moved;
}

dcp_status_t dcp_cost_predict(const dcp_plan_t *p, dcp_pass_t pass, double *ms_out)
{
    const int64_t cells = (int64_t)p->num_ranks * (p->num_phases > 0 ? p->num_phases : 1);
    sim_t s = {.p = p, .pass = pass};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&s.rk, p->num_ranks, sizeof *s.rk, "cost model"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s.launch_at, cells, sizeof *s.launch_at, "cost model"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s.busy, cells, sizeof *s.busy, "cost model"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s.launch_of, cells, sizeof *s.launch_of, "cost model"), st, out);
    for (int64_t i = 0; i < cells; i++) s.launch_at[i] = NAN;
    for (int32_t r = 0; r < p->num_ranks; r++) s.rk[r].pc = dcp_plan_prog_begin(p, pass, r);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int32_t r = 0; r < p->num_ranks; r++) progress |= advance(&s, r);
    }
    for (int32_t r = 0; r < p->num_ranks; r++) {
        if (s.rk[r].pc != dcp_plan_prog_end(p, pass, r)) {
            st = dcp_set_error(DCP_ERR_INTERNAL, "cost model: rank %d never finishes", r);
            goto out;
        }
        ms_out[r] = s.rk[r].clock * 1e3;
    }
    st = DCP_OK;
out:
    free(s.rk);
    free(s.launch_at);
    free(s.busy);
    free(s.launch_of);
    return st;
}

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
    const double q = curve_min_tile(m->eff_tokens);
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
