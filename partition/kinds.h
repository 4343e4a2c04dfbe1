/*
 * Layer kinds across plans: one batch placed as another batch's plan placed it (the layer
 * kinds themselves: partition/model/blocks.h; a plan's kinds: partition/plan/plan.h).
 */
#ifndef DCP_PARTITION_KINDS_H
#define DCP_PARTITION_KINDS_H

#include "partition/place/place.h"
#include "partition/plan/plan.h"

/* The placement of plan `base` for `batch`, another batch of the same lengths (other masks,
 * one kind or several), into x (zeroed; release with dcp_placed_release): base's options,
 * token blocks and owners; each computation block on the rank that computes its (query
 * block, KV block, head group) in base's forward programs, or at its query block's owner
 * where base has no such block. */
dcp_status_t dcp_kinds_place_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                                const dcp_cluster_t *cluster, dcp_placed_t *x);

#endif
