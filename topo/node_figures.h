/* Cost-model figures derived from a discovered node (per-device network bandwidth and
 * latency through the NICs each GPU uses). */
#ifndef DCP_TOPO_NODE_FIGURES_H
#define DCP_TOPO_NODE_FIGURES_H

#include "topo/node.h"
#include "topo/perf_model.h"

/* A GPU's network bandwidth, GB/s per direction: the sum over the NICs it uses of each NIC's
 * rate (sysfs when live, else the kind's nominal rate; at most its PCI link) shared by the GPUs
 * on it, at most the GPU's own PCI link. 0 when it has no NIC. */
double dcp_node_gpu_gbps(const dcp_node_topo_t *node, int32_t gpu);

/* Sets perf's inter_gbps (per device: dcp_node_gpu_gbps, the slowest device counting) and
 * lat_us (the slowest NIC kind's); leaves them when no GPU has a NIC. */
void dcp_node_figures(const dcp_node_topo_t *node, dcp_perf_model_t *perf);

/* The NICs of the node in the cluster model's terms (dcp_cluster_set_nics): the NICs its GPUs
 * use when they divide evenly (each GPU the same number of its own, or every NIC shared by
 * the same number of GPUs), else 0 (one per device). */
int32_t dcp_node_model_nics(const dcp_node_topo_t *node);

/* Reads an hwloc XML capture: GPUs per node, the model's NICs and the figures above. */
dcp_status_t dcp_node_figures_from_xml(const char *xml_path, int32_t *devs_out, int32_t *nics_out,
                                       dcp_perf_model_t *perf);

#endif
