/*
 * DCP_STRATEGY_NODES, the default strategy's hierarchical candidate (partition/planner.c keeps
 * it where the simulator runs it faster than METIS's global plan), the placement packed DP x CP
 * suggests: whole documents to nodes by peer.h's longest-first balancer, then each node's
 * devices by METIS. METIS's node level minimises a cut that cannot see how a node's work is
 * spread, and on batches of many documents it leaves some split across nodes that packing
 * keeps whole. Where the packing balances the nodes (within eps_inter), balance repair and FM
 * follow, as for METIS's own plan; where it does not, the nodes keep the packing's loads (no
 * move between them) and each node's devices are METIS's partition of it: packed DP x CP with
 * METIS inside each group, which gives up some balance for traffic that stays in the nodes
 * (the trade a slow network rewards). The placement depends on the batch, options and cluster
 * only, so a plan of it is placed again from its options as any other. */
#include "partition/place/peer.h"
#include "partition/place/place_metis.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>

/* The packing's imbalance: the most of any node over the mean, in tokens or in attention
 * pairs, whichever is more. */
static dcp_status_t packed_imbalance(const dcp_blocks_t *b, const int32_t *group_of,
                                     int32_t nodes, double *imbalance_out)
{
    double *load, tokens = 0, pairs = 0, most = 0;
    DCP_CHECK(dcp_calloc(&load, 2 * (int64_t)nodes, sizeof *load, "nodes"));
    for (int32_t s = 0; s < b->num_seqs; s++) {
        const double p = dcp_peer_pairs(b, s, 0, b->seqs[s].len);
        load[2 * group_of[s]] += b->seqs[s].len;
        load[2 * group_of[s] + 1] += p;
        tokens += b->seqs[s].len;
        pairs += p;
    }
    for (int32_t n = 0; n < nodes; n++)
        most = fmax(most, fmax(load[2 * n] / (tokens / nodes),
                               pairs > 0 ? load[2 * n + 1] / (pairs / nodes) : 0));
    free(load);
    *imbalance_out = most;
    return DCP_OK;
}

dcp_status_t dcp_nodes_imbalance(const dcp_blocks_t *b, const dcp_cluster_t *cluster,
                                 double *imbalance_out)
{
    int32_t *group_of;
    DCP_CHECK(dcp_calloc(&group_of, b->num_seqs, sizeof *group_of, "nodes"));
    dcp_status_t st = dcp_peer_pack(b, cluster->num_nodes, group_of);
    if (st == DCP_OK) st = packed_imbalance(b, group_of, cluster->num_nodes, imbalance_out);
    free(group_of);
    return st;
}

static int32_t nodes_chunks(int32_t num_ranks)
{
    (void)num_ranks;
    return 0;
}

static dcp_status_t nodes_place(const dcp_place_in_t *in, dcp_placement_t *p)
{
    const dcp_blocks_t *b = in->blocks;
    const int32_t nodes = in->cluster->num_nodes;
    int32_t *group_of = NULL, *block_node = NULL;
    int found = 0;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&group_of, b->num_seqs, sizeof *group_of, "nodes"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&block_node, b->num_blocks, sizeof *block_node, "nodes"), st, out);
    DCP_CHECK_GOTO(dcp_peer_pack(b, nodes, group_of), st, out);
    for (int32_t t = 0; t < b->num_blocks; t++) block_node[t] = group_of[b->blk_seq[t]];
    double imbalance;
    DCP_CHECK_GOTO(packed_imbalance(b, group_of, nodes, &imbalance), st, out);
    const int uneven = imbalance > 1 + in->opts->eps_inter;
    DCP_CHECK_GOTO(dcp_metis_place_in_nodes(in, block_node, uneven, p, &found), st, out);
    if (!found) { /* no valid result: lpt places the blocks within the cap or says why */
        p->fallback = 1;
        st = dcp_strategy_lpt.place(in, p);
    }
out:
    free(group_of);
    free(block_node);
    return st;
}

const dcp_strategy_ops_t dcp_strategy_nodes = {
    .id = DCP_STRATEGY_NODES, .chunks = nodes_chunks, .place = nodes_place};
