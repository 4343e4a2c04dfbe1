/*
 * The block hypergraph of DESIGN.md. Vertices are the token blocks (data) and the
 * computation blocks c = tile * head_blocks + h. Nets, for every token block t and head
 * group h:
 *   Q(t, h)  = id t * hb + h         members: computation blocks reading t's queries
 *   KV(t, h) = id (nb + t) * hb + h  members: computation blocks reading t's keys/values
 * Each net belongs to its data block t. A net spanning lambda ranks (its owner's and its
 * members') costs weight x (lambda - 1) bytes: Q + O + LSE for Q nets (the query block goes
 * out and its partial output comes back), K + V for KV nets; summed over nets this is the
 * plan's communication volume exactly.
 */
#ifndef DCP_PARTITION_HYPERGRAPH_H
#define DCP_PARTITION_HYPERGRAPH_H

#include "partition/blocks.h"

typedef struct {
    int32_t num_blocks, head_blocks;
    int64_t num_comps;
    int64_t num_nets;
    int64_t *net_off; /* [num_nets + 1]: members of net e are members[net_off[e] ..] */
    int64_t *members; /* computation blocks; Q nets by KV block, KV nets by Q block */
    int64_t *weight;  /* bytes per extra rank the net spans */
} dcp_hypergraph_t;

dcp_status_t dcp_hypergraph_build(const dcp_blocks_t *b, dcp_hypergraph_t *g);
void dcp_hypergraph_release(dcp_hypergraph_t *g);

static inline int32_t dcp_net_block(const dcp_hypergraph_t *g, int64_t net)
{
    return (int32_t)((net / g->head_blocks) % g->num_blocks);
}

/* The two nets of computation block c (its Q net and its KV net). */
static inline void dcp_comp_nets(const dcp_blocks_t *b, int64_t c, int64_t nets[2])
{
    const int64_t t = c / b->head_blocks, h = c % b->head_blocks, nb = b->num_blocks;
    nets[0] = (int64_t)b->tile_q[t] * b->head_blocks + h;
    nets[1] = (nb + b->tile_kv[t]) * b->head_blocks + h;
}

/* Traffic of a placement: total bytes and the part that crosses nodes (devs_per_node
 * ranks per node). */
dcp_status_t dcp_hypergraph_traffic(const dcp_hypergraph_t *g, const int32_t *blk_owner,
                                    const int32_t *comp_exec, int32_t num_ranks,
                                    int32_t devs_per_node, int64_t *total_out, int64_t *inter_out);

#endif
