/*
 * The hypergraph expanded to a METIS graph, over a subset of its vertices (all of them for
 * the node level, one node's for the device level).
 *
 * Vertices: data block t is global vertex t, computation block c is nb + c. Two weights
 * each: [FLOPs, 0] for computation blocks, [0, bytes] for data blocks, scaled per
 * constraint to integers (METIS's idx_t is 32-bit here) keeping nonzero weights >= 1. A
 * union model of K layer kinds (partition/model/blocks.h) has one per kind it balances (all, unless
 * the planner frees some), then bytes.
 *
 * Clique expansion: a net of k local vertices (its owner, when local, and its members)
 * becomes a clique with edge weight w / (k - 1). A net with more than `cap` vertices - a KV
 * block read by hundreds of query blocks - becomes a star from its owner plus a band: each
 * member joined to the next cap/2 members in block order, weight w / (cap - 1). The band
 * keeps neighbouring query blocks (which share most of their KV blocks) together at
 * O(k * cap) edges instead of O(k^2).
 *
 * Star expansion: owner - member edges of weight 1, and vsize(owner) = the bytes of its
 * nets, for METIS's communication-volume objective.
 */
#ifndef DCP_PARTITION_METIS_GRAPH_H
#define DCP_PARTITION_METIS_GRAPH_H

#include "partition/model/hypergraph.h"

#include <metis.h>

typedef struct {
    idx_t nv;
    idx_t *xadj, *adjncy, *adjwgt;
    idx_t ncon;    /* constraints: the model's balanced kinds + 1 */
    idx_t *vwgt;   /* ncon per vertex */
    idx_t *vsize;  /* star expansion only, else NULL */
    int64_t edges; /* undirected edges */
} dcp_metis_graph_t;

/* `local[v]` is the local vertex of global vertex v, or -1 when v is not in the subgraph;
 * local vertices are 0..nlocal-1. Several global vertices may share one local vertex (a
 * coarse vertex): their weights add, and a net counts the vertex once. */
dcp_status_t dcp_metis_graph_build(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                                   const int32_t *local, int32_t nlocal, dcp_expansion_t how,
                                   int32_t cap, dcp_metis_graph_t *out);
void dcp_metis_graph_release(dcp_metis_graph_t *m);

#endif
