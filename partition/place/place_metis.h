/*
 * The METIS strategy's seam (partition/place/place_metis.c): one METIS call per level and method,
 * behind a function type so that the placement around it (hierarchy, refinement, validation,
 * the lpt fallback) can be driven by any partitioner.
 *
 * Outcomes of one call: a partition (DCP_OK); a refusal (DCP_OK with *refused = 1: METIS
 * returned METIS_ERROR_INPUT or METIS_ERROR, so that method has no result and loses, and when
 * every method refuses lpt places the batch, stats.fallback); or an error, which always
 * propagates out of the placement (DCP_ERR_NO_MEMORY for METIS_ERROR_MEMORY; DCP_ERR_INTERNAL
 * when a result breaks an invariant, such as a vertex in no part).
 */
#ifndef DCP_PARTITION_PLACE_METIS_H
#define DCP_PARTITION_PLACE_METIS_H

#include "partition/place/metis_graph.h"
#include "partition/place/place.h"

typedef enum { DCP_METIS_KWAY = 0, DCP_METIS_RB = 1, DCP_METIS_METHODS = 2 } dcp_metis_method_t;

/* Partitions m into nparts parts, imbalance eps per constraint, by method `how`; part[v] gets
 * vertex v's part. */
typedef dcp_status_t (*dcp_metis_fn_t)(dcp_metis_graph_t *m, int32_t nparts, double eps,
                                       dcp_metis_method_t how, const dcp_plan_options_t *o,
                                       idx_t *part, int *refused);

/* The METIS call itself (under the process-wide METIS mutex). */
dcp_status_t dcp_metis_partition(dcp_metis_graph_t *m, int32_t nparts, double eps,
                                 dcp_metis_method_t how, const dcp_plan_options_t *o, idx_t *part,
                                 int *refused);

/* The device level's METIS vertices on node `node` (node_of[v]: the node of global vertex
 * v): local[v] gets the vertex of v, -1 for a vertex on another node; returns the vertex
 * count. A node's computation blocks of one query block, all head groups, form one vertex
 * per run of 16 tiles; a token block joins the last run of its row on the node, or stands
 * alone. */
int32_t dcp_metis_row_vertices(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                               const int32_t *node_of, int32_t node, int32_t *local);

/* The METIS strategy's placement with partitioner fn (dcp_strategy_metis uses
 * dcp_metis_partition). */
dcp_status_t dcp_metis_place_with(const dcp_place_in_t *in, dcp_metis_fn_t fn, dcp_placement_t *p);

/* The METIS strategy's device level under a node level given per token block (block_node;
 * a computation block goes to its query block's node): each node's devices, then balance
 * repair and FM refinement, which may move blocks between nodes, and the balance bounds of
 * place.h; or, `within`, METIS's partition of each node as it is (the nodes' loads left as
 * given) under the memory cap only. *found = 0 when no result is within the bounds (p is then
 * unspecified); nothing falls back to lpt. */
dcp_status_t dcp_metis_place_in_nodes(const dcp_place_in_t *in, const int32_t *block_node,
                                      int within, dcp_placement_t *p, int *found);

#endif
