/* A node's cost-model figures from what discovery found. Only the network side is visible
 * to hwloc: NVLink, peak FLOP/s and HBM bandwidth keep the defaults (override them in the
 * cluster spec). */
#include "topo/node_figures.h"

#include "include/base/error.h"

#include <stdlib.h>

/* Nominal line rates (GB/s) and latencies (us) per NIC kind, used when sysfs does not
 * report a rate (captures, or links that are down): AWS EFA v1 100 Gb/s, NDR 400 Gb/s. */
static const double kind_gbs[DCP_NIC_KIND_COUNT] = {12.5, 50.0, 3.125};
static const double kind_lat_us[DCP_NIC_KIND_COUNT] = {15.0, 3.0, 30.0};

void dcp_node_figures(const dcp_node_topo_t *node, dcp_perf_model_t *perf)
{
    int32_t share[DCP_NODE_MAX_DEVS] = {0};
    for (int32_t g = 0; g < node->num_gpus; g++)
        if (node->gpus[g].nic >= 0) share[node->gpus[g].nic]++;
    double per_dev = 0, lat = 0;
    for (int32_t g = 0; g < node->num_gpus; g++) {
        const int32_t k = node->gpus[g].nic;
        if (k < 0) continue;
        const dcp_nic_info_t *nic = &node->nics[k];
        double gbs = nic->link_gbps > 0 ? nic->link_gbps / 8.0 : kind_gbs[nic->kind];
        if (nic->pci_gbps > 0 && nic->pci_gbps < gbs) gbs = nic->pci_gbps;
        gbs /= share[k];
        /* the slowest device sets the pace of a step */
        if (per_dev == 0 || gbs < per_dev) per_dev = gbs;
        if (kind_lat_us[nic->kind] > lat) lat = kind_lat_us[nic->kind];
    }
    if (per_dev > 0) {
        perf->inter_gbps = per_dev;
        perf->lat_us = lat;
    }
}

dcp_status_t dcp_node_figures_from_xml(const char *xml_path, int32_t *devs_out,
                                       dcp_perf_model_t *perf)
{
    dcp_node_topo_t *node = NULL;
    DCP_CHECK(dcp_calloc(&node, 1, sizeof *node, "node topology"));
    dcp_status_t st = dcp_node_discover(xml_path, NULL, 0, node);
    if (st == DCP_OK && node->num_gpus == 0)
        st = dcp_set_error(DCP_ERR_INVALID_ARG, "cluster spec: '%s' has no NVIDIA GPU", xml_path);
    if (st == DCP_OK) {
        *devs_out = node->num_gpus;
        dcp_node_figures(node, perf);
    }
    free(node);
    return st;
}
