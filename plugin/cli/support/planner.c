#include "plugin/cli/support/planner.h"

#include "partition/export.h"
#include "partition/kinds.h"
#include "partition/planner.h"
#include "topo/cluster.h"

dcp_status_t dcpt_export_write(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               const dcp_plan_options_t *opts, const dcp_cluster_t *cluster,
                               const char *hmetis, const char *patoh, const char *partition,
                               dcp_plan_options_t *placed_out)
{
    const dcp_export_paths_t paths = {hmetis, patoh, partition};
    return dcp_export_write(batch, shape, opts, cluster, &paths, placed_out);
}

dcp_status_t dcpt_plan_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                          const dcp_cluster_t *cluster, dcp_plan_t **plan_out)
{
    return dcp_plan_create_on(base, batch, cluster, plan_out);
}

dcp_status_t dcpt_relayout_ms(const dcp_plan_t *a, const dcp_plan_t *b, int64_t row_bytes,
                              double *ms_out)
{
    return dcp_kinds_relayout_ms(a, b, row_bytes, ms_out);
}

void dcpt_cluster_network(const dcp_cluster_t *cluster, double *inter_gbps_out, int32_t *nics_out)
{
    *inter_gbps_out = cluster->perf.inter_gbps;
    *nics_out = dcp_cluster_node_nics(cluster);
}
