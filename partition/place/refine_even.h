/*
 * Evening out a finished placement's kernel time (partition/place/refiner.h): the default
 * planner's candidate (partition/planner.c) for batches whose step is their busiest rank's
 * kernels.
 *
 * METIS and its repair balance FLOPs within eps_intra, and stop at the bound: every rank of
 * a plan sits up to 5% above the mean. But a rank's kernels take FLOPs over the kernel's
 * rate at each tile's edge (short documents' tiles run at a fraction of a long one's), plus
 * its copies, merges and sums; in the time the simulator gives the kernels, the ranks of
 * tests/perf/peers_bench.sh's 256K-token plans at 8x8 h100-ib were 7-40% apart where their
 * FLOPs were 5%.
 * Here a rank's load is the seconds of its computation blocks, `comp_s[c]` (the planner times
 * each tile as the cost model does, dcp_cost_attn_floor, forward and backward), plus
 * `fixed_s[rank]`, the seconds of its other kernels (the incumbent plan's copies, merges and
 * sums, which stay where they are to first order).
 *
 * Node by node, while the node's busiest rank is above its target, (1 + tol) x the larger of
 * the cluster's and the node's mean load, it gives a computation block to a rank of its node
 * that stays under the target: the block's Q owner, its KV owner (where on the node) or the
 * node's least loaded rank, whichever move costs least link time per second of kernels it
 * moves (refiner.h's link-time delta). A rank none of whose blocks fits is left. With
 * `across`, the nodes are evened first the same way: while the busiest node's load passes
 * (1 + tol) x the mean node's, its busiest rank gives blocks to ranks of other nodes under
 * both targets (the block's owners there, or the least loaded node's least loaded rank).
 * Then FM (partition/place/refine_fm.h) wins back traffic under eps_intra's memory bound and a
 * FLOP bound, the lower of eps_intra's and the busiest rank's after the moves (FM knows FLOPs,
 * not kernel time: it can give some of the evening back, and the simulator judges the result).
 */
#ifndef DCP_PARTITION_REFINE_EVEN_H
#define DCP_PARTITION_REFINE_EVEN_H

#include "partition/model/hypergraph.h"
#include "partition/place/place.h"

/* Evens p (see above). comp_s: [computation blocks] seconds a step; fixed_s: [num_ranks]
 * seconds a step, or NULL. *moved_out = 1 when a block moved (p changed), else 0 and p is as
 * it was. A model of several layer kinds, or a graph too large to refine (dcp_refiner_init),
 * is left as it is. */
dcp_status_t dcp_refine_even(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                             const dcp_place_in_t *in, double tol, int across, const double *comp_s,
                             const double *fixed_s, dcp_placement_t *p, int *moved_out);

#endif
