/*
 * A placement made a plan, and plans judged by the step-time simulator: what the planner
 * (planner.c) and its last choices on a placement (polish.c) build and compare candidates
 * with.
 */
#ifndef DCP_PARTITION_CANDIDATE_H
#define DCP_PARTITION_CANDIDATE_H

#include "partition/place/place.h"
#include "partition/plan/plan.h"
#include "partition/program/schedule.h"

/* With options.divisions = 0, candidates are compared (METIS's tries, zigzag, auto's
 * strategies) at this count, and the winner's placement is then divided as
 * dcp_polish_divisions() finds fastest. */
#define DCP_DIVISIONS_COMPARED 8

/* The plan of placement x with `divisions` divisions per rank, scheduled in order `order`:
 * every layer kind's schedules and programs, the plan finished. */
dcp_status_t dcp_plan_divided(const dcp_placed_t *x, const dcp_cluster_t *cluster,
                              int32_t divisions, dcp_order_t order, dcp_plan_t **plan_out);

/* The plan of placement x at its options' division count (DCP_DIVISIONS_COMPARED for 0), in
 * the default order. */
dcp_status_t dcp_plan_placed(const dcp_placed_t *x, const dcp_cluster_t *cluster,
                             dcp_plan_t **plan_out);

/* A candidate plan and its simulated training step (dcp_sim_model_step), ms. */
typedef struct {
    dcp_plan_t *plan;
    double ms;
    dcp_order_t order; /* the schedule's order the plan was built in */
    double exposed_ms; /* of ms, its slowest ranks' waits on transfers in flight */
} dcp_candidate_t;

/* Keeps in *best whichever of *best and p the step-time simulator runs faster per training
 * step (*best on a tie) and destroys the other. The simulator judges every choice between
 * plans: the cost model times a launch by its busiest link with each device's fixed share of
 * the node's NICs, where the simulator shares links and NICs between the transfers in flight
 * (its run costs about what a schedule does). Judged by the cost model, the division count
 * made overlap_bench.sh's 16x8 a100-efa steps 1.6% slower than 8 everywhere (the simulator's
 * pick: 3.5% faster); METIS's tries and the zigzag guard left its a100-efa clusters 1.2-5%
 * slower, and one 4x8 batch of plan_bench.sh (histogram causal, seed 2) got zigzag's plan:
 * 2.2x the bytes, and 14% slower than METIS's in the simulator. */
dcp_status_t dcp_candidate_keep(dcp_candidate_t *best, dcp_plan_t *p, const dcp_cluster_t *cluster);

#endif
