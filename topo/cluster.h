/* The cluster model: nodes, devices, and the figures the cost model uses. Plain data; ranks
 * are numbered node by node (rank r is device r % G of node r / G). */
#ifndef DCP_TOPO_CLUSTER_H
#define DCP_TOPO_CLUSTER_H

#include "include/dcp.h"

/* Upper bound on ranks a cluster may have (keeps rank ids and per-rank tables small). */
#define DCP_MAX_RANKS         65536
#define DCP_MAX_KERNEL_POINTS 32

/* What the cost model knows about the machine. */
typedef struct {
    double intra_gbps;  /* GB/s per direction per device between devices of one node */
    double inter_gbps;  /* GB/s per direction per device to other nodes */
    double lat_us;      /* per-transfer latency, microseconds */
    double peak_tflops; /* dense peak of one device in the plan's dtype, TFLOP/s */
    double hbm_gbps;    /* device memory bandwidth, GB/s (copies and merges) */
    double bwd_speed;   /* the backward's FLOP/s over the forward's on the same tile (1 on
                           GPUs' fused kernels; a CPU's backward runs faster per FLOP) */
    int32_t eff_n;      /* kernel efficiency curve: fraction of peak on a tile whose */
    double eff_tokens[DCP_MAX_KERNEL_POINTS]; /* geometric-mean edge is eff_tokens[i] */
    double eff_value[DCP_MAX_KERNEL_POINTS];
} dcp_perf_model_t;

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

/* The default figures (a generic NVLink node, the default kernel curve). */
void dcp_perf_model_default(dcp_perf_model_t *m);

/* Sets a cluster's NICs from a node's count: N <= devices per node share them (nics_per_node
 * N), a multiple of the devices gives each device N / devices (nics_per_dev). DCP_ERR_INVALID_ARG
 * for any other count, naming `field`. */
dcp_status_t dcp_cluster_set_nics(dcp_cluster_t *c, int32_t nics, const char *field);

/* NICs per node (nics_per_node x nics_per_dev). */
static inline int32_t dcp_cluster_node_nics(const dcp_cluster_t *c)
{
    return c->nics_per_node * (c->nics_per_dev > 0 ? c->nics_per_dev : 1);
}

/* Checks a model's figures; `field` names it in messages. */
dcp_status_t dcp_perf_model_check(const dcp_perf_model_t *m, const char *field);

static inline int32_t dcp_cluster_node_of(const dcp_cluster_t *c, int32_t rank)
{
    return rank / c->devs_per_node;
}

#endif
