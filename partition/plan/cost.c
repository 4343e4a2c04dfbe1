/* The cost model: every rank's program of a plan run on a model of the machine (cost.h). */
#include "partition/plan/cost.h"

#include "include/base/error.h"
#include "partition/model/mask.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double dcp_cost_curve(int32_t n, const double *x, const double *y, double edge)
{
    const double q = dcp_cost_min_tile(x);
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
