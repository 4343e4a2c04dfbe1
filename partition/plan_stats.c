/* Plan statistics, derived from the programs alone so that planned and loaded plans report
 * the same figures. */
#include "partition/blocks.h"
#include "partition/cost.h"
#include "partition/mask.h"
#include "partition/plan.h"

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

/* FLOPs and computation blocks of one rank's ATTN instructions. */
static void rank_compute(const dcp_plan_t *p, int32_t r, int64_t *flops, int64_t *comps)
{
    const int64_t per_pair = 4 * (int64_t)p->shape.head_dim * p->qpg;
    for (int64_t i = p->prog_off[r]; i < p->prog_off[r + 1]; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op != DCP_OP_ATTN) continue;
        for (int64_t g = in->first; g < in->first + in->count; g++) {
            const dcp_tile_group_t *gr = &p->groups[g];
            const dcp_seq_info_t *s = &p->seqs[gr->seq];
            for (int32_t t = gr->first_tile; t < gr->first_tile + gr->num_tiles; t++) {
                const dcp_tile_t *tl = &p->tiles[t];
                *flops +=
                    per_pair * dcp_mask_pairs(&s->mask, s->len, gr->q_pos, gr->q_pos + gr->q_len,
                                              tl->kv_pos, tl->kv_pos + tl->kv_len);
                (*comps)++;
            }
        }
    }
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
        rs->num_instructions = (int32_t)(p->prog_off[r + 1] - p->prog_off[r]);
        rank_compute(p, r, &rs->flops, &st->num_comp_blocks);
        for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++)
            rs->buffer_bytes += dcp_plan_buf_elems(p, r, b) * dcp_plan_elem_bytes(p, b);
        for (int64_t i = p->prog_off[r]; i < p->prog_off[r + 1]; i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_COMM_LAUNCH) continue;
            for (int64_t c = in->first; c < in->first + in->count; c++) {
                const dcp_comm_op_t *op = &p->comm[c];
                const int64_t bytes = op->elems * dcp_plan_elem_bytes(p, op->buf);
                if (!op->send) {
                    rs->recv_bytes += bytes;
                    continue;
                }
                rs->sent_bytes += bytes;
                st->num_transfers++;
                if (r / p->devs_per_node != op->peer / p->devs_per_node)
                    st->inter_node_bytes += bytes;
            }
        }
        st->total_tokens += rs->local_tokens;
        st->total_flops += rs->flops;
        st->comm_bytes += rs->sent_bytes;
        if (rs->sent_bytes + rs->recv_bytes > st->max_rank_bytes)
            st->max_rank_bytes = rs->sent_bytes + rs->recv_bytes;
        if (rs->buffer_bytes > st->max_buffer_bytes) st->max_buffer_bytes = rs->buffer_bytes;
    }
    st->num_phases = p->num_phases;
    st->fallback = p->fallback;
    double *ms = NULL;
    DCP_CHECK(dcp_calloc(&ms, p->num_ranks, sizeof *ms, "plan stats"));
    const dcp_status_t cst = dcp_cost_predict(p, ms);
    for (int32_t r = 0; cst == DCP_OK && r < p->num_ranks; r++) {
        p->rank_stats[r].predicted_ms = ms[r];
        if (ms[r] > st->predicted_ms) st->predicted_ms = ms[r];
    }
    free(ms);
    DCP_CHECK(cst);
    st->compute_imbalance = imbalance(&p->rank_stats[0].flops, p->num_ranks, sizeof *p->rank_stats);
    st->memory_imbalance =
        imbalance(&p->rank_stats[0].memory_bytes, p->num_ranks, sizeof *p->rank_stats);
    return DCP_OK;
}

dcp_status_t dcp_plan_get_stats(const dcp_plan_t *plan, dcp_plan_stats_t *stats_out)
{
    if (!plan || !stats_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "stats_out" : "plan");
    *stats_out = plan->stats;
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
