/*
 * Layer kinds in planning. A batch may name K >= 2 kinds of attention layer, each with its own
 * mask per sequence and a layer count; one placement of token blocks serves them all, and each
 * kind gets its own schedules and programs on it.
 *
 * Placement sees one union model (dcp_blocks_t with num_kinds = K): the token blocks, and a
 * tile wherever some kind has an allowed pair, weighing each kind apart (kind_pairs: one balance
 * constraint per kind, partition/place/place.h; one net per kind and side, weighted by the kind's
 * layer count, partition/model/hypergraph.h). A tile's computation blocks of every kind run on the
 * rank the union model gives it: they read the same query and key blocks. Scheduling then sees
 * each kind as a model of its own (dcp_kinds_model) with the placement projected onto it
 * (dcp_kinds_project), so the schedule and program builders run unchanged, once per kind.
 */
#ifndef DCP_PARTITION_KINDS_H
#define DCP_PARTITION_KINDS_H

#include "partition/place/place.h"
#include "partition/plan/plan.h"

/* Kind k of union model u as a model of one kind: u's sequences with kind k's masks, u's token
 * blocks, and kind k's tiles. out must be zeroed; release it with dcp_blocks_release(). */
dcp_status_t dcp_kinds_model(const dcp_blocks_t *u, int32_t k, dcp_blocks_t *out);

/* The tiles of union model u (u->num_kinds >= 2) from its kinds' models models[K] (each from
 * dcp_kinds_model): a tile of any kind, its pairs in each kind. */
dcp_status_t dcp_kinds_union(dcp_blocks_t *u, const dcp_blocks_t *models);

/* The tiles of union model u, its kinds' models made and dropped on the way (a coarse union
 * model's tiles: partition/model/blocks.h dcp_blocks_tiles). */
dcp_status_t dcp_kinds_tiles(dcp_blocks_t *u);

/* Kind model m's placement from the union model's placement pu: the same owners, and each of
 * m's computation blocks on the rank of the union tile it lies in. out's arrays are allocated
 * here (release with free). */
dcp_status_t dcp_kinds_project(const dcp_blocks_t *u, const dcp_placement_t *pu,
                               const dcp_blocks_t *m, dcp_placement_t *out);

/* The placement of plan `base` for `batch`, another batch of the same lengths (other masks,
 * one kind or several), into x (zeroed; release with dcp_placed_release): base's options,
 * token blocks and owners; each computation block on the rank that computes its (query
 * block, KV block, head group) in base's forward programs, or at its query block's owner
 * where base has no such block. */
dcp_status_t dcp_kinds_place_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                                const dcp_cluster_t *cluster, dcp_placed_t *x);

/* A plan of every kind of `batch` on base's placement (dcp_kinds_place_on): what one kind's
 * placement gives the others, the baseline a joint plan is measured against (dcp-plan
 * --layers --compare). batch's lengths must be base's, and cluster base's cluster. */
dcp_status_t dcp_plan_create_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                                const dcp_cluster_t *cluster, dcp_plan_t **plan_out);

/* The cost model's time (ms) of moving every token whose owner differs between the local
 * layouts of plans a and b (the same lengths on the same cluster) to its owner in b, row_bytes
 * a token: each rank's bytes sent and received per link class over the cluster model's
 * bandwidths (a device's links work in parallel, each direction apart, as dcp_cost_predict
 * times a phase), the busiest rank's time plus one latency; 0 when nothing moves. The price of
 * giving each layer kind its own placement: an all-to-all re-layout wherever the model goes
 * from a layer of one kind to one of another (dcp-plan --layers --compare). */
dcp_status_t dcp_kinds_relayout_ms(const dcp_plan_t *a, const dcp_plan_t *b, int64_t row_bytes,
                                   double *ms_out);

#endif
