/*
 * Refinement of a placement, costed in link time: a net whose owner is on rank o and which
 * is read on rank p != o costs weight / bandwidth(o, p), with the intra- or inter-node
 * bandwidth of the cluster model. Three greedy passes, each move strictly cheaper or needed:
 *  1. compute repair: while a rank holds more than (1 + tol) x the mean FLOPs, move the
 *     computation block whose move costs least to a rank with room (its Q or KV owner, the
 *     least loaded rank of its node, or the least loaded rank);
 *  2. memory repair: likewise with token blocks and owned bytes (and the memory cap);
 *  3. traffic: move computation blocks to the owner of their Q or KV block when that lowers
 *     the cost and keeps the target within the compute bound;
 *  4. owners: move token blocks to the rank among their readers where their nets cost least
 *     (exact connectivity: each net's readers counted per rank), within the memory bound;
 *     then 3 and 4 once more. (On the 18 4x8 128K batches of issue 14 this cut bytes on 2,
 *     by 1.7% and 3.2%, and raised them on none.)
 */
#ifndef DCP_PARTITION_REFINE_H
#define DCP_PARTITION_REFINE_H

#include "partition/hypergraph.h"
#include "partition/place.h"

dcp_status_t dcp_refine(const dcp_blocks_t *b, const dcp_hypergraph_t *g, const dcp_place_in_t *in,
                        double tol, dcp_placement_t *p);

#endif
