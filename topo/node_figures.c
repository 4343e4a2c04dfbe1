/* A node's cost-model figures from what discovery found. Only the network side is visible
 * to hwloc: NVLink, peak FLOP/s and HBM bandwidth keep the defaults (override them in the
 * cluster spec). */
#include "topo/node_figures.h"

#include "include/base/error.h"

#include <stdlib.h>

/* Nominal line rates (GB/s) and latencies (us) per NIC kind, used when sysfs does not
 * report a rate (captures, or links that are down): AWS EFA v1/v2 100 Gb/s, NDR 400 Gb/s. */
static const double kind_gbs[DCP_NIC_KIND_COUNT] = {12.5, 50.0, 3.125};
static const double kind_lat_us[DCP_NIC_KIND_COUNT] = {15.0, 3.0, 30.0};

static double nic_gbs(const dcp_nic_info_t *nic)
{
    double gbs = nic->link_gbps > 0 ? nic->link_gbps / 8.0 : kind_gbs[nic->kind];
    if (nic->pci_gbps > 0 && nic->pci_gbps < gbs) gbs = nic->pci_gbps;
    return gbs;
}

double dcp_node_gpu_gbps(const dcp_node_topo_t *node, int32_t gpu)
{
    const dcp_gpu_info_t *x = &node->gpus[gpu];
    double sum = 0;
    for (int32_t i = 0; i < x->num_nics; i++) {
        const int32_t k = x->nics[i], users = dcp_node_nic_users(node, k);
        sum += nic_gbs(&node->nics[k]) / (users > 0 ? users : 1);
    }
    return x->pci_gbps > 0 && x->pci_gbps < sum ? x->pci_gbps : sum;
}

void dcp_node_figures(const dcp_node_topo_t *node, dcp_perf_model_t *perf)
{
    double per_dev = 0, lat = 0;
    for (int32_t g = 0; g < node->num_gpus; g++) {
        if (node->gpus[g].num_nics == 0) continue;
        const double gbs = dcp_node_gpu_gbps(node, g);
        /* the slowest device sets the pace of a step */
        if (per_dev == 0 || gbs < per_dev) per_dev = gbs;
        for (int32_t i = 0; i < node->gpus[g].num_nics; i++) {
            const dcp_nic_kind_t kind = node->nics[node->gpus[g].nics[i]].kind;
            if (kind_lat_us[kind] > lat) lat = kind_lat_us[kind];
        }
    }
    if (per_dev > 0) {
        perf->inter_gbps = per_dev;
        perf->lat_us = lat;
    }
}

int32_t dcp_node_model_nics(const dcp_node_topo_t *node)
{
    const int32_t g = node->num_gpus;
    if (g == 0 || node->gpus[0].num_nics == 0) return 0;
    const int32_t per_gpu = node->gpus[0].num_nics,
                  share = dcp_node_nic_users(node, node->gpus[0].nics[0]);
    int32_t used = 0;
    for (int32_t k = 0; k < node->num_nics; k++) {
        const int32_t users = dcp_node_nic_users(node, k);
        if (users == 0) continue;
        if (users != share) return 0;
        used++;
    }
    for (int32_t i = 0; i < g; i++)
        if (node->gpus[i].num_nics != per_gpu) return 0;
    /* every GPU its own per_gpu NICs, or every NIC shared by `share` GPUs (one NIC each) */
    if (share == 1 && used == g * per_gpu) return used;
    if (per_gpu == 1 && g % share == 0 && used == g / share) return used;
    return 0;
}

dcp_status_t dcp_node_figures_from_xml(const char *xml_path, int32_t *devs_out, int32_t *nics_out,
                                       dcp_perf_model_t *perf)
{
    dcp_node_topo_t *node = NULL;
    DCP_CHECK(dcp_calloc(&node, 1, sizeof *node, "node topology"));
    dcp_status_t st = dcp_node_discover(xml_path, NULL, 0, node);
    if (st == DCP_OK && node->num_gpus == 0)
        st = dcp_set_error(DCP_ERR_INVALID_ARG, "cluster spec: '%s' has no NVIDIA GPU", xml_path);
    if (st == DCP_OK) {
        *devs_out = node->num_gpus;
        *nics_out = dcp_node_model_nics(node);
        dcp_node_figures(node, perf);
    }
    free(node);
    return st;
}
