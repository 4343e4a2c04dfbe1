/*
 * dcp-topo: what dcp sees of this node (or of an hwloc XML capture): GPUs with bus id and
 * NUMA node, NICs with kind and speed, the NIC each GPU uses and how far it is, GPU-to-GPU
 * PCI paths, and the engine dcp picks for each link class. --json for scripts.
 */
#include "plugin/cli/args.h"
#include "plugin/cli/report.h"
#include "topo/node.h"
#include "transport/select.h"
#include "transport/ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tool = "dcp-topo";

typedef struct {
    dcp_engine_kind_t kind[DCP_LINK_COUNT];
    const char *why[DCP_LINK_COUNT];
    int ucx_cuda; /* this UCX moves CUDA device memory */
} engines_t;

static void choose(const dcp_node_topo_t *n, engines_t *e)
{
    /* no CUDA IPC engine yet: same-node GPU pairs go through NCCL (NVLink, P2P) */
    dcp_engine_env_t env = {.gpu_buffers = n->num_gpus > 0,
                            .have_nccl = n->num_gpus > 0,
                            .ucx_cuda = dcp_ucx_supports_cuda(),
                            .nic = DCP_NIC_ETH};
    for (int32_t k = 0; k < n->num_nics; k++)
        if (n->nics[k].kind < env.nic) env.nic = n->nics[k].kind;
    env.override[DCP_LINK_INTRA] = getenv("DCP_TRANSPORT_INTRA");
    env.override[DCP_LINK_INTER] = getenv("DCP_TRANSPORT_INTER");
    e->ucx_cuda = env.ucx_cuda;
    for (int l = 0; l < DCP_LINK_COUNT; l++)
        if (dcp_engine_choose(&env, (dcp_link_class_t)l, &e->kind[l], &e->why[l]) != DCP_OK) {
            fprintf(stderr, "%s: %s\n", tool, dcp_last_error());
            exit(2);
        }
}

static void print_text(const dcp_node_topo_t *n, const engines_t *e, const char *src)
{
    printf("# %s: host %s (%s), %d GPUs, %d NICs\n", tool, n->hostname, src, n->num_gpus,
           n->num_nics);
    printf("\nGPUs\n%-4s %-14s %-5s %-14s %s\n", "gpu", "bus id", "numa", "nic", "path");
    for (int32_t g = 0; g < n->num_gpus; g++) {
        const dcp_gpu_info_t *x = &n->gpus[g];
        printf("%-4d %-14s %-5d %-14s %s\n", g, x->busid, x->numa,
               x->nic >= 0 ? n->nics[x->nic].name : "-",
               x->nic >= 0 ? dcp_path_name(x->nic_path) : "-");
    }
    printf("\nNICs\n%-4s %-14s %-5s %-14s %-5s %-10s %-11s %s\n", "nic", "name", "kind", "bus id",
           "numa", "pci(GB/s)", "link(Gb/s)", "netdev");
    for (int32_t k = 0; k < n->num_nics; k++) {
        const dcp_nic_info_t *x = &n->nics[k];
        char link[16] = "unknown";
        if (x->link_gbps > 0) snprintf(link, sizeof link, "%.0f", x->link_gbps);
        printf("%-4d %-14s %-5s %-14s %-5d %-10.1f %-11s %s\n", k, x->name,
               dcp_nic_kind_name(x->kind), x->busid, x->numa, x->pci_gbps, link,
               x->netdev[0] ? x->netdev : "-");
    }
    if (n->num_gpus > 1) {
        printf("\nGPU-GPU PCI paths (NVLink is not visible to hwloc without NVML)\n     ");
        for (int32_t b = 0; b < n->num_gpus; b++) printf("%-5d", b);
        printf("\n");
        for (int32_t a = 0; a < n->num_gpus; a++) {
            printf("%-5d", a);
            for (int32_t b = 0; b < n->num_gpus; b++)
                printf("%-5s", a == b ? "X" : dcp_path_name(n->gpu_path[a][b]));
            printf("\n");
        }
    }
    printf("\nLinks and engines\n%-12s %-7s %s\n", "link", "engine", "why");
    printf("%-12s %-7s %s\n", "same node", dcp_engine_kind_name(e->kind[DCP_LINK_INTRA]),
           e->why[DCP_LINK_INTRA]);
    printf("%-12s %-7s %s\n", "other nodes", dcp_engine_kind_name(e->kind[DCP_LINK_INTER]),
           e->why[DCP_LINK_INTER]);
    printf("UCX moves CUDA memory: %s\n",
           e->ucx_cuda ? "yes"
                       : "no (built without CUDA: GPU buffers go over NCCL, or staged through host "
                         "memory when ucx is chosen)");
}

static void print_json(const dcp_node_topo_t *n, const engines_t *e)
{
    printf("{\"host\": \"%s\", \"gpus\": [", n->hostname);
    for (int32_t g = 0; g < n->num_gpus; g++)
        printf("%s{\"busid\": \"%s\", \"numa\": %d, \"nic\": %s%s%s, \"path\": \"%s\"}",
               g ? ", " : "", n->gpus[g].busid, n->gpus[g].numa, n->gpus[g].nic >= 0 ? "\"" : "",
               n->gpus[g].nic >= 0 ? n->nics[n->gpus[g].nic].name : "null",
               n->gpus[g].nic >= 0 ? "\"" : "", dcp_path_name(n->gpus[g].nic_path));
    printf("], \"nics\": [");
    for (int32_t k = 0; k < n->num_nics; k++)
        printf("%s{\"name\": \"%s\", \"kind\": \"%s\", \"busid\": \"%s\", \"numa\": %d, "
               "\"pci_gbps\": %.3f, \"link_gbps\": %.1f, \"netdev\": \"%s\"}",
               k ? ", " : "", n->nics[k].name, dcp_nic_kind_name(n->nics[k].kind), n->nics[k].busid,
               n->nics[k].numa, n->nics[k].pci_gbps, n->nics[k].link_gbps, n->nics[k].netdev);
    printf("], \"gpu_paths\": [");
    for (int32_t a = 0; a < n->num_gpus; a++) {
        printf("%s[", a ? ", " : "");
        for (int32_t b = 0; b < n->num_gpus; b++)
            printf("%s\"%s\"", b ? ", " : "", a == b ? "X" : dcp_path_name(n->gpu_path[a][b]));
        printf("]");
    }
    printf("], \"engines\": {\"intra\": \"%s\", \"inter\": \"%s\"}, \"ucx_cuda\": %s}\n",
           dcp_engine_kind_name(e->kind[DCP_LINK_INTRA]),
           dcp_engine_kind_name(e->kind[DCP_LINK_INTER]), e->ucx_cuda ? "true" : "false");
}

int main(int argc, char **argv)
{
    const char *xml = NULL, *busids = NULL;
    int json = 0;
    dcp_arg_t args[] = {
        {"xml", DCP_ARG_STR, &xml, 0, 0, "read an hwloc XML capture instead of this machine", 0},
        {"busids", DCP_ARG_STR, &busids, 0, 0,
         "GPU bus ids in CUDA order (default: every NVIDIA GPU)", 0},
        {"json", DCP_ARG_FLAG, &json, 0, 0, "one JSON object", 0},
    };
    dcp_args_parse(argc, argv, args, 3, tool,
                   "Shows the GPUs, NICs, PCI paths and transport engines dcp sees on a node.");
    char **ids = NULL, *storage = NULL;
    const int32_t nids = busids ? dcp_args_split(tool, "busids", busids, &ids, &storage) : 0;
    dcp_node_topo_t *n = calloc(1, sizeof *n);
    if (!n) return 1;
    if (dcp_node_discover(xml, busids ? (const char *const *)ids : NULL, nids, n) != DCP_OK)
        dcp_args_fail(tool, xml ? "xml" : "busids", "%s", dcp_last_error());
    engines_t e;
    choose(n, &e);
    if (json)
        print_json(n, &e);
    else
        print_text(n, &e, xml ? xml : "this machine");
    free(ids);
    free(storage);
    free(n);
    return 0;
}
