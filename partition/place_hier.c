/*
 * The default strategy's hierarchical candidate (partition/planner.c keeps it where the
 * simulator runs it faster than METIS's global plan), the placement packed DP x CP suggests:
 * whole documents to nodes by peer.h's longest-first balancer, then each node's devices by
 * METIS, balance repair and FM (dcp_metis_place_in_nodes). METIS's node level minimises a cut
 * that cannot see how a node's work is spread, and on batches of many documents, none longer
 * than a node's share, it leaves some documents split across nodes that packing keeps whole. */
#include "partition/peer.h"
#include "partition/place_metis.h"

#include "include/base/error.h"

#include <stdlib.h>

/* 1 when whole documents packed into nodes leave every node within (1 + eps) of the mean
 * tokens and attention pairs: where a document is longer than a node's share, no packing
 * can balance the nodes, and METIS's device level and FM then move it between nodes at a far
 * greater cost than METIS's own node level (on the 36 batches of the README's comparison the
 * packings out of these bounds made plans 1.10-2.24x slower than METIS's). */
static int packed_balanced(const dcp_blocks_t *b, const int32_t *group_of, int32_t nodes,
                           double eps)
{
    double *load = calloc(2 * (size_t)nodes, sizeof *load), tokens = 0, pairs = 0;
    if (!load) return 0;
    for (int32_t s = 0; s < b->num_seqs; s++) {
        const double p = dcp_peer_pairs(b, s, 0, b->seqs[s].len);
        load[2 * group_of[s]] += b->seqs[s].len;
        load[2 * group_of[s] + 1] += p;
        tokens += b->seqs[s].len;
        pairs += p;
    }
    int ok = 1;
    for (int32_t n = 0; n < nodes; n++)
        ok &= load[2 * n] <= (1 + eps) * tokens / nodes && load[2 * n + 1] <= (1 + eps) * pairs / nodes;
    free(load);
    return ok;
}

dcp_status_t dcp_place_nodes_packed(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                    const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                                    dcp_placed_t *x, int *found)
{
    dcp_plan_options_t mo = *o;
    mo.strategy = DCP_STRATEGY_METIS;
    *found = 0;
    DCP_CHECK(dcp_place_prepare(batch, shape, &mo, cluster, 0, x));
    const dcp_blocks_t *b = &x->b;
    int32_t *group_of = NULL, *block_node = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&group_of, b->num_seqs, sizeof *group_of, "nodes packed"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&block_node, b->num_blocks, sizeof *block_node, "nodes packed"), st,
                   out);
    DCP_CHECK_GOTO(dcp_peer_pack(b, cluster->num_nodes, group_of), st, out);
    for (int32_t t = 0; t < b->num_blocks; t++) block_node[t] = group_of[b->blk_seq[t]];
    if (!packed_balanced(b, group_of, cluster->num_nodes, x->opts.eps_inter)) goto out;
    const dcp_place_in_t in = {b, cluster, &x->opts};
    DCP_CHECK_GOTO(dcp_metis_place_in_nodes(&in, block_node, &x->pl, found), st, out);
    if (*found) DCP_CHECK_GOTO(dcp_place_spread_links(b, cluster, &x->pl), st, out);
    st = dcp_place_project(x);
out:
    free(group_of);
    free(block_node);
    return st;
}
