/*
 * Placement floors: lower bounds of the time the cost model (partition/plan/cost.h) can
 * predict for any plan on a placement, or on a batch cut into chunks, cheap enough for the
 * planner to skip a candidate that cannot win without building its plan (planner.c).
 */
#ifndef DCP_PARTITION_COST_FLOOR_H
#define DCP_PARTITION_COST_FLOOR_H

#include "partition/place/place.h"
#include "partition/plan/cost.h"

/* The least forward time that the cost model can predict for any plan on placement `pl` of
 * blocks `b`: the busiest rank's tiles, each timed as dcp_cost_predict() times it, with
 * nothing else (ms). The backward's floor is 2.5 times it (2.5x the FLOPs on the same tiles),
 * so a training step's is 3.5 times it. */
dcp_status_t dcp_cost_attn_floor(const dcp_blocks_t *b, const dcp_placement_t *pl,
                                 int32_t num_ranks, const dcp_perf_model_t *perf, double *ms_out);

/* Lower bounds of the forward and the backward time the cost model can predict for any plan
 * on placement `pl` (ms; the backward's on the same placement). Each rank computes at least
 * its tiles (2.5x the FLOPs backward) and moves at least its transfers - the Q, KV and
 * partial transfers of every net it reads or owns, in both directions and both link classes -
 * and no more than two of a rank's launches are in flight at once in its programs (launch
 * d+1 goes out before waiting for d; launch d+2 only after that wait), each lasting at least
 * the rank's busiest link in it: so a pass takes at least max(compute, busiest link's total /
 * 2) on every rank. Cheap (no schedule or program is built), so the planner can skip a
 * candidate plan that cannot win. */
dcp_status_t dcp_cost_floor(const dcp_blocks_t *b, const dcp_placement_t *pl,
                            const dcp_cluster_t *cluster, double *fwd_ms_out, double *bwd_ms_out);

/* A lower bound of the forward time the cost model can predict for any plan of p's batch,
 * shape, block size and cluster whose sequences are cut into `chunks` chunks each (0: not
 * cut) and the chunks into token blocks, as ring and zigzag cut them (ms; the backward's is
 * 2.5 times it). Every tile of sequence s then has an edge of at most E_s = min(block,
 * ceil(L_s / chunks)) tokens, so it computes at no more than the curve's best efficiency on
 * [1, E_s]; the busiest rank computes at least the mean of all tiles so timed. O(sequences):
 * no blocks, tiles or placement, so the planner can rule a baseline out without building
 * it. */
double dcp_cost_chunked_floor(const dcp_plan_t *p, int32_t chunks);

#endif
