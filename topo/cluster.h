/* The cluster model: nodes, devices and link figures. Plain data; ranks are numbered node
 * by node (rank r is device r % G of node r / G). */
#ifndef DCP_TOPO_CLUSTER_H
#define DCP_TOPO_CLUSTER_H

#include "include/dcp.h"

/* Upper bound on ranks a cluster may have (keeps rank ids and per-rank tables small). */
#define DCP_MAX_RANKS 65536

struct dcp_cluster {
    int32_t num_nodes;
    int32_t devs_per_node;
    int32_t num_ranks;
    double intra_gbps; /* GB/s per direction per device between devices of one node */
    double inter_gbps; /* GB/s per direction per device to other nodes */
    double lat_us;     /* per-message latency, microseconds */
};

/* A uniform cluster of `nodes` x `devs` with default link figures. */
dcp_status_t dcp_cluster_create(int32_t nodes, int32_t devs, dcp_cluster_t **cluster_out);

static inline int32_t dcp_cluster_node_of(const dcp_cluster_t *c, int32_t rank)
{
    return rank / c->devs_per_node;
}

#endif
