/*
 * Export of a batch's block hypergraph and of dcp's placement of it, so that external
 * hypergraph partitioners (hMETIS, KaHyPar, PaToH) and dcp can be scored on identical
 * inputs. The blocks and the placement are the planner's own (dcp_place_batch), cut the way
 * the chosen strategy cuts them.
 *
 * Vertices, 1-based in the files: token blocks 1..nb (data), then computation blocks
 * nb+1..nb+nc (c = tile * head_blocks + h). Nets: the Q and KV nets of partition/model/hypergraph.h
 * that have at least one member, in net order; each lists its owner token block, then the
 * computation blocks that read it. A net's weight is the bytes it moves per extra rank it
 * spans, so the connectivity (lambda - 1) metric of a partition is its traffic.
 *
 * Partitioners add weights in 32-bit integers: every weight kind (net bytes, vertex FLOPs,
 * vertex bytes) is divided by one divisor chosen so that the kind's total fits in 31 bits;
 * the divisor is the weights' greatest common divisor where that suffices (the file is then
 * exact), else a multiple of it with rounding (nonzero weights stay >= 1). A `%` comment
 * line in each file states every divisor and whether it is exact.
 *
 * Formats:
 *   hMETIS (fmt 11): `<nets> <vertices> 11`, one line per net `<weight> <pins...>`, then
 *     one line per vertex with one weight, the forward FLOPs (token blocks 1: hMETIS and
 *     KaHyPar refuse a vertex of weight 0);
 *   PaToH: `1 <cells> <nets> <pins> 3 2` (1-based, cell weights and net costs, two
 *     constraints), one line per net `<cost> <pins...>`, then one line per cell
 *     `<FLOPs> <bytes>` (token blocks: bytes of Q, K, V, O, LSE; computation blocks: 0);
 *   partition: one line per vertex, in the same order, with the rank it is placed on
 *     (0-based), as hMETIS and KaHyPar write theirs.
 */
#ifndef DCP_PARTITION_EXPORT_H
#define DCP_PARTITION_EXPORT_H

#include "partition/model/hypergraph.h"
#include "partition/place/place.h"

#include <stdio.h>

/* How one kind of weight is written: value = max(1, round(w / div)) for w > 0, 0 for 0. */
typedef struct {
    int64_t div;
    int exact; /* every w is a multiple of div: the file holds the weights exactly */
} dcp_export_scale_t;

/* The divisor for weights w[0..n) (all >= 0): their gcd, or the smallest multiple of it that
 * brings the total of the written values within INT32_MAX. */
dcp_export_scale_t dcp_export_scale(const int64_t *w, int64_t n);

/* The written value of w under scale s. */
int64_t dcp_export_scaled(dcp_export_scale_t s, int64_t w);

/* Writers over one placed batch and its hypergraph (the caller opens and closes f). */
dcp_status_t dcp_export_hmetis(FILE *f, const dcp_blocks_t *b, const dcp_hypergraph_t *g);
dcp_status_t dcp_export_patoh(FILE *f, const dcp_blocks_t *b, const dcp_hypergraph_t *g);
dcp_status_t dcp_export_partition(FILE *f, const dcp_blocks_t *b, const dcp_placement_t *p);

/* Files to write; NULL paths are skipped. */
typedef struct {
    const char *hmetis, *patoh, *partition;
} dcp_export_paths_t;

/* Plans `batch` as dcp_plan_create() does and writes the files asked for from the plan it
 * returns: its blocks and its placement (METIS's kept try, or zigzag's plan where the planner
 * kept that; auto's choice). placed_out (may be NULL) gets the options that placed it (the
 * strategy, block size and seed of the plan returned). A path that cannot be opened fails
 * with DCP_ERR_INVALID_ARG naming it. The files are written whole or not at all, all of them
 * or none (include/base/out_file.h). */
dcp_status_t dcp_export_write(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              const dcp_plan_options_t *opts, const dcp_cluster_t *cluster,
                              const dcp_export_paths_t *paths, dcp_plan_options_t *placed_out);

#endif
