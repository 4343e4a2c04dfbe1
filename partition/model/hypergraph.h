/*
 * The block hypergraph of partition/README.md ("The block model"). Vertices are the token
 * blocks (data) and the computation blocks c = tile * head_blocks + h. Nets, for every token
 * block t and head group h:
 *   Q(t, h)  = id t * hb + h         members: computation blocks reading t's queries
 *   KV(t, h) = id (nb + t) * hb + h  members: computation blocks reading t's keys/values
 * A union model of K layer kinds (partition/model/blocks.h) has these two nets per kind k, side s
 * (0: Q, 1: KV): id ((2k + s) * nb + t) * hb + h, whose members are the computation blocks
 * with pairs in kind k, weighted by kind k's layer count: each layer moves its own blocks, so
 * connectivity is the model's traffic per step.
 * Each net belongs to its data block t. A net spanning lambda ranks (its owner's and its
 * members') costs weight x (lambda - 1) bytes: Q + O + LSE for Q nets (the query block goes
 * out and its partial output comes back), K + V for KV nets; summed over nets this is the
 * plan's communication volume exactly.
 */
#ifndef DCP_PARTITION_HYPERGRAPH_H
#define DCP_PARTITION_HYPERGRAPH_H

#include "partition/model/blocks.h"

typedef struct {
    int32_t num_blocks, head_blocks;
    int32_t num_sides; /* 2 x the model's kinds: a token block's nets per head group */
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

/* Most nets a computation block belongs to: a Q and a KV net per layer kind. */
#define DCP_MAX_COMP_NETS (2 * DCP_MAX_KINDS)

/* The nets of computation block c, Q net then KV net of each kind it has pairs in; returns
 * their count (2 in a model of one kind). */
static inline int dcp_comp_nets(const dcp_blocks_t *b, int64_t c, int64_t nets[DCP_MAX_COMP_NETS])
{
    const int64_t hb = b->head_blocks, t = c / hb, h = c % hb, nb = b->num_blocks;
    if (b->num_kinds <= 1) {
        nets[0] = (int64_t)b->tile_q[t] * hb + h;
        nets[1] = (nb + b->tile_kv[t]) * hb + h;
        return 2;
    }
    int n = 0;
    for (int32_t k = 0; k < b->num_kinds; k++) {
        if (b->kind_pairs[t * b->num_kinds + k] == 0) continue;
        nets[n++] = (2 * k * nb + b->tile_q[t]) * hb + h;
        nets[n++] = ((2 * k + 1) * nb + b->tile_kv[t]) * hb + h;
    }
    return n;
}

/* Net `side` (kind side / 2, Q when even) of token block t, head group h. */
static inline int64_t dcp_blk_net(const dcp_hypergraph_t *g, int32_t side, int32_t t, int32_t h)
{
    return ((int64_t)side * g->num_blocks + t) * g->head_blocks + h;
}

/* 1 for a Q net (query side), 0 for a KV net. */
static inline int dcp_net_is_query(const dcp_hypergraph_t *g, int64_t net)
{
    return (net / g->head_blocks / g->num_blocks) % 2 == 0;
}

/* Traffic of a placement: total bytes and the part that crosses nodes (devs_per_node
 * ranks per node). */
dcp_status_t dcp_hypergraph_traffic(const dcp_hypergraph_t *g, const int32_t *blk_owner,
                                    const int32_t *comp_exec, int32_t num_ranks,
                                    int32_t devs_per_node, int64_t *total_out, int64_t *inter_out);

#endif
