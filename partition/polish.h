/*
 * The planner's last choices on the placement it chose (polish.c): the division count and the
 * schedule's order, placements evened out in kernel time, the query-runs order. Each builds
 * candidates on the placement of the incumbent c and keeps one in c only where the step-time
 * simulator runs it faster; c keeps a whole plan on failure.
 */
#ifndef DCP_PARTITION_POLISH_H
#define DCP_PARTITION_POLISH_H

#include "partition/candidate.h"

/* Replaces c's plan (built with DCP_DIVISIONS_COMPARED divisions) by its placement divided
 * as the division_choices count whose plan the simulator runs fastest (dcp_candidate_keep: the
 * compared count on a tie), then by that count's plan in DCP_ORDER_LONG_TAIL where the
 * simulator runs that faster. The second order costs a plan and a simulation; on the 36
 * batches of partition/README.md's comparison at 8x8 h100-ib (both kernel tables) it won 14, their
 * steps summing 0.5% shorter. c keeps a whole plan on failure. */
dcp_status_t dcp_polish_divisions(const dcp_batch_t *batch, const dcp_cluster_t *cluster,
                                  dcp_candidate_t *c);

/* The candidates that even out the kernel time of c's plan, on c's placement, divisions and
 * order (partition/place/refine_even.h), kept in c where the simulator runs them faster: METIS and
 * its repair balance FLOPs within eps_intra, but what a compute-bound step waits for is its
 * busiest rank's kernels, its tiles at the rate of their edges and its copies, merges and
 * sums. Only METIS's and the packing's placements, of one layer kind. The first evens the
 * ranks of each node, counting each rank's memory kernels as c's plan has them; alone, on
 * 72 batches (tests/perf/peers_bench.sh's 54: 8x8 h100-ib at both kernel tables and 4 x p4de,
 * 256K tokens; plan_bench.sh's 18: 4x8, 128K) it made 45 faster and none slower, at one plan
 * and simulation more. The second evens the nodes first, moving blocks between them; it is built
 * only where a rank holds EVEN_ACROSS_BLOCKS blocks' worth of tokens or more: on those 72
 * batches (4 blocks a rank) it beat the first on 14 and lost to it by up to 3.6x (the moved
 * blocks' transfers between nodes), where at 16 (1M tokens at 64 GPUs, steps that are their
 * kernels) it beat it on all three batches tried, two of which need it to stay within 1% of
 * MagiAttention's dispatch (WLB-LLM causal and lambda, seed 1). The third leaves the memory
 * kernels out of the loads, and is built where the incumbent's slowest ranks wait on
 * transfers for more than EVEN_EXPOSED of the step (14 of the 72): it won 5 of them
 * (histogram blockwise seed 2 at cuDNN's rates: 1.62 -> 1.55 ms, 15.1% -> 4.7% of it
 * exposed). All three: 48 of the 72 faster, none slower, the steps 2.2% shorter in the
 * geometric mean (WLB-LLM blockwise seed 1 at 8x8, FlashAttention-2's rates, 34%). */
dcp_status_t dcp_polish_even(const dcp_batch_t *batch, const dcp_cluster_t *cluster,
                             dcp_candidate_t *c);

/* The candidate that runs c's plan's placement and divisions in DCP_ORDER_QUERY_RUNS, kept in c
 * where the simulator runs it faster and its slowest ranks wait on transfers no longer than
 * c's do. Built last, on the plan the other choices returned, so it can only shorten a step;
 * only on clusters of several nodes (the order differs from DCP_ORDER_LONG_TAIL only where
 * a query block's computation is on another node). On histogram causal seed 3 of the peer
 * comparison at 8x8 h100-ib with cuDNN's rates its forward's busiest rank no longer waits
 * after its tail for two of its query blocks' partials, which another node wrote over all
 * of its remote divisions: 5.32 -> 5.23 ms, 10.3% -> 7.5% of it exposed. Without the
 * exposure condition it would also win histogram blockwise seed 1 there (1.62 -> 1.58 ms) by
 * exposing 15.6% of the step where the incumbent exposes 8.4%: a step the simulator's overlap
 * makes shorter but that leans on the network more. */
dcp_status_t dcp_polish_query_runs(const dcp_batch_t *batch, const dcp_cluster_t *cluster,
                                   dcp_candidate_t *c);

#endif
