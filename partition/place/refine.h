/*
 * Refinement of a placement, costed in link time (partition/place/refiner.h):
 *  1. compute repair: while a rank holds more than (1 + tol) x the mean FLOPs, move the
 *     computation block whose move costs least to a rank with room (its Q or KV owner, the
 *     least loaded rank of its node, or the least loaded rank); with layer kinds
 *     (partition/model/blocks.h) kind by kind, to a rank with room under every kind's bound;
 *  2. memory repair: likewise with token blocks and owned bytes (and the memory cap);
 *  3. FM passes (partition/place/refine_fm.h) over computation and token blocks together, with
 *     exact connectivity gains under both bounds.
 * FM replaced two greedy passes (computation blocks towards their inputs, token blocks
 * towards their readers), which it contains as its positive-gain moves. On the 18 4x8 128K
 * batches of tests/perf/plan_bench.sh it cut the bytes of METIS's plans from 6561 to 5384 MB and their
 * inter-node bytes from 2847 to 1265 MB, at under 1 ms a plan.
 */
#ifndef DCP_PARTITION_REFINE_H
#define DCP_PARTITION_REFINE_H

#include "partition/model/hypergraph.h"
#include "partition/place/place.h"

dcp_status_t dcp_refine(const dcp_blocks_t *b, const dcp_hypergraph_t *g, const dcp_place_in_t *in,
                        double tol, dcp_placement_t *p);

#endif
