/*
 * The planner (planner.c): dcp_plan_create() and what the library says of it beyond dcp.h.
 * It sits on every layer of partition/ (model/, place/, plan/, program/, sim/: their READMEs).
 */
#ifndef DCP_PARTITION_PLANNER_H
#define DCP_PARTITION_PLANNER_H

#include "partition/plan/plan.h"

/* Checks the arguments of dcp_plan_create() (opts resolved, never NULL) without planning:
 * the options, then batch and shape, with the same messages. */
dcp_status_t dcp_plan_check_args(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                 const dcp_plan_options_t *opts);

/* A plan of every kind of `batch` on base's placement (dcp_kinds_place_on, kinds.h): what one
 * kind's placement gives the others, the baseline a joint plan is measured against (dcp-plan
 * --layers --compare). batch's lengths must be base's, and cluster base's cluster. */
dcp_status_t dcp_plan_create_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                                const dcp_cluster_t *cluster, dcp_plan_t **plan_out);

#endif
