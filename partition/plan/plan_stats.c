/* Plan statistics, derived from the programs alone so that planned and loaded plans report
 * the same figures. */
#include "partition/model/blocks.h"
#include "partition/model/mask.h"
#include "partition/plan/cost.h"
#include "partition/plan/plan.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

static double imbalance(const int64_t *v, int32_t n, size_t stride)
{
    double sum = 0, max = 0;
    for (int32_t i = 0; i < n; i++) {
        const double x = (double)*(const int64_t *)((const char *)v + (size_t)i * stride);
        sum += x;
        if (x > max) max = x;
    }
    return sum > 0 ? max / (sum / n) - 1.0 : 0.0;
}

/* What one rank's program of one pass computes and moves. */
typedef struct {
    int64_t flops, comps, sent, recv, inter, transfers;
} pass_tally_t;

static void tally_attn(const dcp_plan_t *p, const dcp_instr_t *in, pass_tally_t *t)
{
    /* the backward recomputes the scores and forms dV, dP, dQ, dK: 2.5x the forward */
    const int64_t per_pair = (in->arg == DCP_PASS_BWD ? dcp_shape_pair_flops_bwd(&p->shape)
                                                      : dcp_shape_pair_flops(&p->shape)) *
                             p->qpg;
    for (int64_t g = in->first; g < in->first + in->count; g++) {
        const dcp_tile_group_t *gr = &p->groups[g];
        const dcp_seq_info_t *s = &p->seqs[gr->seq];
        for (int32_t i = gr->first_tile; i < gr->first_tile + gr->num_tiles; i++) {
            const dcp_tile_t *tl = &p->tiles[i];
            t->flops +=
                per_pair * dcp_mask_pairs(&s->mask, s->len, gr->q_pos, gr->q_pos + gr->q_len,
                                          tl->kv_pos, tl->kv_pos + tl->kv_len);
            t->comps++;
        }
    }
}

static void tally_launch(const dcp_plan_t *p, int32_t r, const dcp_instr_t *in, pass_tally_t *t)
{
    for (int64_t c = in->first; c < in->first + in->count; c++) {
        const dcp_comm_op_t *op = &p->comm[c];
        const int64_t bytes = op->elems * dcp_plan_elem_bytes(p, op->buf);
        if (!op->send) {
            t->recv += bytes;
            continue;
        }
        t->sent += bytes;
        t->transfers++;
        if (r / p->devs_per_node != op->peer / p->devs_per_node) t->inter += bytes;
    }
}

static pass_tally_t tally(const dcp_plan_t *p, dcp_pass_t pass, int32_t r)
{
    pass_tally_t t = {0};
    for (int64_t i = dcp_plan_prog_begin(p, pass, r); i < dcp_plan_prog_end(p, pass, r); i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op == DCP_OP_ATTN) tally_attn(p, in, &t);
        if (in->op == DCP_OP_COMM_LAUNCH) tally_launch(p, r, in, &t);
    }
    return t;
}

/* The cost model's time of every rank for one pass, into the rank stats; the slowest. */
static dcp_status_t predict(dcp_plan_t *p, dcp_pass_t pass, double *max_out)
{
    double *ms = NULL;
    DCP_CHECK(dcp_calloc(&ms, p->num_ranks, sizeof *ms, "plan stats"));
    const dcp_status_t st = dcp_cost_predict(p, pass, ms);
    *max_out = 0;
    for (int32_t r = 0; st == DCP_OK && r < p->num_ranks; r++) {
        if (pass == DCP_PASS_FWD)
            p->rank_stats[r].predicted_ms = ms[r];
        else
            p->rank_stats[r].bwd_predicted_ms = ms[r];
        if (ms[r] > *max_out) *max_out = ms[r];
    }
    free(ms);
    return st;
}

dcp_status_t dcp_plan_derive_stats(dcp_plan_t *p)
{
    free(p->rank_stats);
    p->rank_stats = NULL;
    DCP_CHECK(dcp_calloc(&p->rank_stats, p->num_ranks, sizeof *p->rank_stats, "plan stats"));
    const double plan_ms = p->stats.plan_ms;
    dcp_plan_stats_t *st = &p->stats;
    memset(st, 0, sizeof *st);
    st->plan_ms = plan_ms;
    st->num_ranks = p->num_ranks;
    st->num_nodes = p->num_nodes;
    st->strategy = p->opts.strategy;
    st->num_divisions = p->opts.divisions;
    st->num_token_blocks = p->num_blocks;
    for (int32_t r = 0; r < p->num_ranks; r++) {
        dcp_rank_stats_t *rs = &p->rank_stats[r];
        rs->local_tokens = p->rank_tokens[r];
        rs->memory_bytes = dcp_shape_token_bytes(&p->shape, rs->local_tokens);
        rs->num_instructions = (int32_t)(dcp_plan_prog_end(p, DCP_PASS_FWD, r) -
                                         dcp_plan_prog_begin(p, DCP_PASS_FWD, r));
        rs->bwd_num_instructions = (int32_t)(dcp_plan_prog_end(p, DCP_PASS_BWD, r) -
                                             dcp_plan_prog_begin(p, DCP_PASS_BWD, r));
        for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++)
            rs->buffer_bytes += dcp_plan_buf_elems(p, r, b) * dcp_plan_elem_bytes(p, b);
        const pass_tally_t f = tally(p, DCP_PASS_FWD, r), b = tally(p, DCP_PASS_BWD, r);
        rs->flops = f.flops;
        rs->sent_bytes = f.sent;
        rs->recv_bytes = f.recv;
        rs->bwd_flops = b.flops;
        rs->bwd_sent_bytes = b.sent;
        rs->bwd_recv_bytes = b.recv;
        st->num_comp_blocks += f.comps;
        st->num_transfers += (int32_t)f.transfers;
        st->bwd_num_transfers += (int32_t)b.transfers;
        st->inter_node_bytes += f.inter;
        st->bwd_inter_node_bytes += b.inter;
        st->total_tokens += rs->local_tokens;
        st->total_flops += rs->flops;
        st->bwd_flops += rs->bwd_flops;
        st->comm_bytes += f.sent;
        st->bwd_comm_bytes += b.sent;
        if (f.sent + f.recv > st->max_rank_bytes) st->max_rank_bytes = f.sent + f.recv;
        if (b.sent + b.recv > st->bwd_max_rank_bytes) st->bwd_max_rank_bytes = b.sent + b.recv;
        if (rs->buffer_bytes > st->max_buffer_bytes) st->max_buffer_bytes = rs->buffer_bytes;
    }
    st->num_phases = p->pass_phase[DCP_PASS_FWD + 1] - p->pass_phase[DCP_PASS_FWD];
    st->bwd_num_phases = p->pass_phase[DCP_PASS_BWD + 1] - p->pass_phase[DCP_PASS_BWD];
    st->fallback = p->fallback;
    DCP_CHECK(predict(p, DCP_PASS_FWD, &st->predicted_ms));
    DCP_CHECK(predict(p, DCP_PASS_BWD, &st->bwd_predicted_ms));
    const size_t stride = sizeof *p->rank_stats;
    st->compute_imbalance = imbalance(&p->rank_stats[0].flops, p->num_ranks, stride);
    st->bwd_compute_imbalance = imbalance(&p->rank_stats[0].bwd_flops, p->num_ranks, stride);
    st->memory_imbalance = imbalance(&p->rank_stats[0].memory_bytes, p->num_ranks, stride);
    return DCP_OK;
}

dcp_status_t dcp_plan_get_stats(const dcp_plan_t *plan, dcp_plan_stats_t *stats_out)
{
    if (!plan || !stats_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "stats_out" : "plan");
    *stats_out = plan->stats;
    return DCP_OK;
}

dcp_status_t dcp_plan_get_shape(const dcp_plan_t *plan, dcp_attn_shape_t *shape_out)
{
    if (!plan || !shape_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "shape_out" : "plan");
    *shape_out = plan->shape;
    return DCP_OK;
}

dcp_status_t dcp_plan_get_rank_stats(const dcp_plan_t *plan, int32_t rank,
                                     dcp_rank_stats_t *stats_out)
{
    if (!plan || !stats_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "stats_out" : "plan");
    if (rank < 0 || rank >= plan->num_ranks)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "rank = %d, must be in [0, %d)", rank,
                             plan->num_ranks);
    *stats_out = plan->rank_stats[rank];
    return DCP_OK;
}

dcp_status_t dcp_plan_kinds_stats(dcp_plan_t *p)
{
    double model = 0;
    for (int32_t k = 0; k < p->num_kinds; k++) {
        dcp_plan_t *v = dcp_plan_view(p, k);
        DCP_CHECK(dcp_plan_derive_stats(v));
        model += v->layers * (v->stats.predicted_ms + v->stats.bwd_predicted_ms);
    }
    for (int32_t k = 0; k < p->num_kinds; k++) {
        dcp_plan_stats_t *st = &dcp_plan_view(p, k)->stats;
        st->num_kinds = p->num_kinds;
        st->kind = k;
        st->layers = dcp_plan_view(p, k)->layers;
        st->model_step_ms = model;
    }
    return DCP_OK;
}
