/* The cluster model: nodes, devices, and the figures the cost model uses. Plain data; ranks
 * are numbered node by node (rank r is device r % G of node r / G). */
#ifndef DCP_TOPO_CLUSTER_H
#define DCP_TOPO_CLUSTER_H

#include "include/dcp.h"
#include "topo/perf_model.h"

/* Upper bound on ranks a cluster may have (keeps rank ids and per-rank tables small). */
#define DCP_MAX_RANKS 65536

struct dcp_cluster {
    int32_t num_nodes;
    int32_t devs_per_node;
    int32_t num_ranks;
    int32_t nics_per_node; /* network links the devices of a node share (device g uses link
                              g * nics / devs), 1..devs_per_node; perf.inter_gbps is then the
                              node's network bandwidth over its devices */
    int32_t nics_per_dev;  /* NICs each device drives at once (its rails: 4 on an AWS p5), where
                              nics_per_node == devs_per_node, else 1: a device's link is its NICs
                              together and perf.inter_gbps sums them. The node has
                              nics_per_node x nics_per_dev NICs */
    dcp_perf_model_t perf;
};

/* A uniform cluster of `nodes` x `devs` with default figures. */
dcp_status_t dcp_cluster_create(int32_t nodes, int32_t devs, dcp_cluster_t **cluster_out);

/* Sets a cluster's NICs from a node's count: N <= devices per node share them (nics_per_node
 * N), a multiple of the devices gives each device N / devices (nics_per_dev). DCP_ERR_INVALID_ARG
 * for any other count, naming `field`. */
dcp_status_t dcp_cluster_set_nics(dcp_cluster_t *c, int32_t nics, const char *field);

/* NICs per node (nics_per_node x nics_per_dev). */
static inline int32_t dcp_cluster_node_nics(const dcp_cluster_t *c)
{
    return c->nics_per_node * (c->nics_per_dev > 0 ? c->nics_per_dev : 1);
}

static inline int32_t dcp_cluster_node_of(const dcp_cluster_t *c, int32_t rank)
{
    return rank / c->devs_per_node;
}

#endif
