#include "partition/plan/plan_walk.h"

#include "partition/plan/plan.h"

void dcp_plan_walk_shape(const dcp_plan_t *p, dcp_plan_walk_shape_t *out)
{
    *out = (dcp_plan_walk_shape_t){p->num_ranks, p->num_nodes, p->devs_per_node, p->num_seqs,
                                   p->num_blocks};
}

int32_t dcp_plan_walk_seq_len(const dcp_plan_t *p, int32_t seq)
{
    return p->seqs[seq].len;
}

void dcp_plan_walk_block(const dcp_plan_t *p, int32_t t, int32_t *seq_out, int32_t *owner_out)
{
    *seq_out = p->blk_seq[t];
    *owner_out = p->blk_owner[t];
}

void dcp_plan_walk_tiles(const dcp_plan_t *p, dcp_plan_tile_fn fn, void *arg)
{
    for (int32_t r = 0; r < p->num_ranks; r++)
        for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_FWD, r);
             i < dcp_plan_prog_end(p, DCP_PASS_FWD, r); i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_ATTN) continue;
            for (int64_t g = in->first; g < in->first + in->count; g++) {
                const dcp_tile_group_t *gr = &p->groups[g];
                for (int32_t t = gr->first_tile; t < gr->first_tile + gr->num_tiles; t++)
                    fn(arg, r, gr->head_group, gr->q_block, p->tiles[t].kv_block);
            }
        }
}

void dcp_plan_walk_sends(const dcp_plan_t *p, dcp_plan_send_fn fn, void *arg)
{
    for (int32_t r = 0; r < p->num_ranks; r++)
        for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_FWD, r);
             i < dcp_plan_prog_end(p, DCP_PASS_FWD, r); i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_COMM_LAUNCH) continue;
            for (int64_t k = in->first; k < in->first + in->count; k++)
                if (p->comm[k].send)
                    fn(arg, r, p->comm[k].peer,
                       p->comm[k].elems * dcp_plan_elem_bytes(p, p->comm[k].buf));
        }
}
