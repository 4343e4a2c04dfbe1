/*
 * Packed DP x CP, as teams run TransformerEngine / Megatron-LM context parallelism on packed
 * (THD) batches: the ranks form groups of C consecutive ranks (options.strategy_arg, default
 * a node); whole documents go to groups by the longest-first balancer of peer.h on attention
 * pairs and tokens; inside its group every document is cut into 2C zigzag chunks, rank i of
 * the group holding chunks i and 2C-1-i, and computation runs where the queries live.
 */
#include "partition/place/peer.h"

#include "include/base/error.h"

#include <stdlib.h>

static dcp_status_t packed_resolve(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                   const dcp_cluster_t *c, dcp_plan_options_t *o)
{
    (void)batch, (void)shape;
    if (!o->strategy_arg) o->strategy_arg = c->devs_per_node;
    if (c->num_ranks % o->strategy_arg)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.strategy_arg = %d: packed groups of %d ranks do not divide "
                             "the cluster's %d ranks",
                             o->strategy_arg, o->strategy_arg, c->num_ranks);
    return DCP_OK;
}

static dcp_status_t packed_cut(dcp_blocks_t *b, const dcp_cluster_t *c, const dcp_plan_options_t *o)
{
    const int32_t size = o->strategy_arg, groups = c->num_ranks / size;
    int32_t *group_of = NULL, *ranks = NULL;
    dcp_runs_t runs = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&group_of, b->num_seqs, sizeof *group_of, "packed"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&ranks, size, sizeof *ranks, "packed"), st, out);
    DCP_CHECK_GOTO(dcp_peer_pack(b, groups, group_of), st, out);
    for (int32_t s = 0; s < b->num_seqs; s++) {
        for (int32_t i = 0; i < size; i++) ranks[i] = group_of[s] * size + i;
        DCP_CHECK_GOTO(dcp_peer_zigzag(b, s, ranks, size, &runs), st, out);
    }
    st = dcp_blocks_cut_runs(b, &runs);
out:
    dcp_runs_release(&runs);
    free(group_of);
    free(ranks);
    return st;
}

const dcp_strategy_ops_t dcp_strategy_packed = {.id = DCP_STRATEGY_PACKED,
                                                .place = dcp_peer_place_at_query,
                                                .resolve = packed_resolve,
                                                .cut = packed_cut};
