#include "plugin/cli/helpers/pinning.h"

#include <stdio.h>
#include <string.h>

#define LIST_CHARS (DCPT_PIN_CHARS - 32) /* a list, with room for its variable's name */

/* Appends ",item suffix" to a list of LIST_CHARS (one that does not fit is cut short). */
static void append(char *list, const char *item, const char *suffix)
{
    const size_t len = strlen(list);
    if (len + 1 < LIST_CHARS)
        snprintf(list + len, LIST_CHARS - len, "%s%s%s", len ? "," : "", item, suffix);
}

void dcpt_pin_gpu(const dcp_node_topo_t *n, int32_t g, dcpt_pin_t *out)
{
    memset(out, 0, sizeof *out);
    const dcp_gpu_info_t *x = &n->gpus[g];
    out->fabric = x->num_nics ? dcp_nic_fabric(&n->nics[x->nics[0]]) : "-";
    char ucx[LIST_CHARS] = "", hca[LIST_CHARS] = "", ifs[LIST_CHARS] = "";
    int efa = 0, verbs = 0;
    for (int32_t i = 0; i < x->num_nics; i++) {
        const dcp_nic_info_t *nic = &n->nics[x->nics[i]];
        append(out->nics, nic->name, "");
        if (nic->kind == DCP_NIC_ETH) {
            append(ucx, nic->netdev[0] ? nic->netdev : nic->name, "");
            append(ifs, nic->netdev[0] ? nic->netdev : nic->name, "");
            continue;
        }
        append(ucx, nic->name, ":1");
        efa |= nic->kind == DCP_NIC_EFA;
        verbs |= nic->kind == DCP_NIC_IB;
        if (nic->kind == DCP_NIC_IB) append(hca, nic->name, ":1");
    }
    if (ucx[0]) snprintf(out->ucx, sizeof out->ucx, "UCX_NET_DEVICES=%s", ucx);
    if (verbs)
        snprintf(out->nccl, sizeof out->nccl, "NCCL_IB_HCA==%s", hca);
    else if (!efa && ifs[0])
        snprintf(out->nccl, sizeof out->nccl, "NCCL_SOCKET_IFNAME=%s", ifs);
}

const char *dcpt_pin_job_env(const dcp_node_topo_t *n)
{
    for (int32_t g = 0; g < n->num_gpus; g++)
        for (int32_t i = 0; i < n->gpus[g].num_nics; i++)
            if (n->nics[n->gpus[g].nics[i]].kind == DCP_NIC_EFA) return "FI_PROVIDER=efa";
    return "";
}
