/*
 * The planner's entry points beyond dcp.h that dcp-plan uses for its studies: the block
 * hypergraph and placement written for external partitioners (--hgr, --patoh, --partition),
 * a plan of layer kinds made on another plan's placement and the price of moving tokens between
 * two placements (--layers --compare), and the network figures of a cluster model (its header
 * line). The tools' one way to partition/'s export and kinds code and the cluster's insides.
 */
#ifndef DCPT_SUPPORT_PLANNER_H
#define DCPT_SUPPORT_PLANNER_H

#include "include/dcp.h"

/* Plans `batch` as dcp_plan_create() does and writes, from the plan it returns, the files whose
 * paths are not NULL: hMETIS's hypergraph, PaToH's, and the placement (one rank per vertex).
 * placed_out (may be NULL): the options that placed it (strategy, block size, seed of the plan
 * returned). A path that cannot be opened fails naming it; the files are written whole or not
 * at all, all of them or none. */
dcp_status_t dcpt_export_write(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               const dcp_plan_options_t *opts, const dcp_cluster_t *cluster,
                               const char *hmetis, const char *patoh, const char *partition,
                               dcp_plan_options_t *placed_out);

/* A plan of `batch` (its lengths base's, its cluster base's) on base's placement: every kind
 * computed where base computes the tiles it covers, the rest where the placement gives them. */
dcp_status_t dcpt_plan_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                          const dcp_cluster_t *cluster, dcp_plan_t **plan_out);

/* The cost model's ms of moving every token whose owner differs between the layouts of plans a
 * and b (same lengths, same cluster) to its owner in b, row_bytes a token; 0 when none moves. */
dcp_status_t dcpt_relayout_ms(const dcp_plan_t *a, const dcp_plan_t *b, int64_t row_bytes,
                              double *ms_out);

/* The cluster model's network: GB/s per direction per device between nodes, NICs per node. */
void dcpt_cluster_network(const dcp_cluster_t *cluster, double *inter_gbps_out, int32_t *nics_out);

#endif
