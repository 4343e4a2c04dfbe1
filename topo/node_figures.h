/* Cost-model figures derived from a discovered node (per-device network bandwidth and
 * latency through the NIC each GPU uses). */
#ifndef DCP_TOPO_NODE_FIGURES_H
#define DCP_TOPO_NODE_FIGURES_H

#include "topo/cluster.h"
#include "topo/node.h"

/* Sets perf's inter_gbps (per device: its NIC's rate shared by the GPUs on it, the slowest
 * device counting) and lat_us (the slowest NIC kind's); leaves them when no GPU has a NIC. */
void dcp_node_figures(const dcp_node_topo_t *node, dcp_perf_model_t *perf);

/* Reads an hwloc XML capture: GPUs per node and the figures above. */
dcp_status_t dcp_node_figures_from_xml(const char *xml_path, int32_t *devs_out,
                                       dcp_perf_model_t *perf);

#endif
