/*
 * dcp-topo: what dcp sees of this node (or of an hwloc XML capture): GPUs with bus id and
 * NUMA node, NICs with kind, fabric (EFA, InfiniBand, RoCE, Ethernet) and speed, the NICs each
 * GPU uses with its network bandwidth (their sum) and how far they are, GPU-to-GPU PCI paths,
 * per local rank the NICs to pin and the environment lines that pin them, GPUDirect RDMA's
 * prerequisites (on the live machine), and the engine dcp picks for each link class. --json
 * for scripts. --env: dcp's settings instead (plugin/cli/settings_report.h).
 */
#include "include/base/env.h"
#include "plugin/cli/helpers/args.h"
#include "plugin/cli/helpers/pinning.h"
#include "plugin/cli/helpers/settings_report.h"
#include "plugin/cli/support/json.h"
#include "plugin/job.h"
#include "topo/gdr.h"
#include "topo/node.h"
#include "topo/node_figures.h"
#include "transport/select.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tool = "dcp-topo";

typedef struct {
    dcp_engine_kind_t kind[DCP_LINK_COUNT];
    const char *why[DCP_LINK_COUNT];
    int ucx_cuda; /* this UCX moves CUDA device memory */
} engines_t;

/* The engines a job of nodes like this one gets: the job's own choice (plugin/job.c). */
static void choose(const dcp_node_topo_t *n, engines_t *e)
{
    if (dcp_job_engines_for_node(n, e->kind, e->why, &e->ucx_cuda) != DCP_OK) {
        fprintf(stderr, "%s: %s\n", tool, dcp_last_error());
        exit(2);
    }
}

static void print_gpus(const dcp_node_topo_t *n)
{
    printf("\nGPUs\n%-4s %-14s %-5s %-5s %-10s %-5s %s\n", "gpu", "bus id", "numa", "nics",
           "net(GB/s)", "path", "nic(s)");
    for (int32_t g = 0; g < n->num_gpus; g++) {
        const dcp_gpu_info_t *x = &n->gpus[g];
        dcpt_pin_t pin;
        dcpt_pin_gpu(n, g, &pin);
        printf("%-4d %-14s %-5d %-5d %-10.2f %-5s %s\n", g, x->busid, x->numa, x->num_nics,
               dcp_node_gpu_gbps(n, g), x->nic >= 0 ? dcp_path_name(x->nic_path) : "-",
               x->num_nics ? pin.nics : "-");
    }
}

static void print_nics(const dcp_node_topo_t *n)
{
    printf("\nNICs\n%-4s %-12s %-5s %-11s %-14s %-5s %-10s %-11s %-9s %s\n", "nic", "name", "kind",
           "fabric", "bus id", "numa", "pci(GB/s)", "link(Gb/s)", "netdev", "gpus");
    for (int32_t k = 0; k < n->num_nics; k++) {
        const dcp_nic_info_t *x = &n->nics[k];
        char link[16] = "unknown";
        if (x->link_gbps > 0) snprintf(link, sizeof link, "%.0f", x->link_gbps);
        printf("%-4d %-12s %-5s %-11s %-14s %-5d %-10.1f %-11s %-9s %d\n", k, x->name,
               dcp_nic_kind_name(x->kind), dcp_nic_fabric(x), x->busid, x->numa, x->pci_gbps, link,
               x->netdev[0] ? x->netdev : "-", dcp_node_nic_users(n, k));
    }
}

/* Per local rank: its GPU, NUMA node, NICs, and a shell `case` a job's wrapper script can
 * source to pin them (SLURM_LOCALID under srun, OMPI_COMM_WORLD_LOCAL_RANK under mpirun). */
static void print_pinning(const dcp_node_topo_t *n)
{
    if (n->num_gpus == 0) return;
    printf("\nPinning: local rank r on GPU r (CUDA_DEVICE_ORDER=PCI_BUS_ID), its NUMA node and "
           "its NICs\n%-5s %-4s %-5s %-11s %s\n",
           "rank", "gpu", "numa", "fabric", "nic(s)");
    for (int32_t g = 0; g < n->num_gpus; g++) {
        dcpt_pin_t pin;
        dcpt_pin_gpu(n, g, &pin);
        printf("%-5d %-4d %-5d %-11s %s\n", g, g, n->gpus[g].numa, pin.fabric,
               pin.nics[0] ? pin.nics : "-");
    }
    const char *job = dcpt_pin_job_env(n);
    printf("\nEnvironment per local rank (source it in the job's wrapper script)%s%s\n",
           job[0] ? "; for the whole job: export " : "", job);
    printf("case ${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}} in\n");
    for (int32_t g = 0; g < n->num_gpus; g++) {
        dcpt_pin_t pin;
        dcpt_pin_gpu(n, g, &pin);
        printf("%d) export%s%s%s%s ;;\n", g, pin.ucx[0] ? " " : "", pin.ucx, pin.nccl[0] ? " " : "",
               pin.nccl);
    }
    printf("esac\n");
    if (job[0])
        printf("(EFA: NCCL goes through aws-ofi-nccl, which pairs each GPU with its nearest NICs "
               "by itself; NCCL_IB_HCA does not apply)\n");
}

static void print_gdr(const char *xml, const engines_t *e)
{
    printf("\nGPUDirect RDMA (NICs reading and writing GPU memory)\n");
    if (xml) {
        printf("  not checked: a capture; run dcp-topo on the node\n");
        return;
    }
    dcp_gdr_t g;
    dcp_gdr_probe(NULL, &g);
    printf("  nvidia driver   %s\n", !g.nvidia       ? "not loaded"
                                     : g.open_module ? "loaded (open kernel module)"
                                                     : "loaded (proprietary kernel module)");
    printf("  nvidia-peermem  %s\n", g.peermem ? "loaded" : "not loaded");
    printf("  dma-buf         %s (kernel %s; needs 5.12 or later and the open kernel module)\n",
           g.dmabuf ? "yes" : "no", g.kernel[0] ? g.kernel : "unknown");
    printf("  gdr_copy        %s\n", g.gdrcopy ? "gdrdrv loaded" : "gdrdrv not loaded");
    printf("  verdict         %s\n",
           dcp_gdr_possible(&g)
               ? "GPU memory can be registered with the NICs"
               : "GPU memory cannot be registered with the NICs: inter-node bytes of GPU buffers "
                 "pass through host memory");
    printf("  UCX moves CUDA memory: %s\n",
           e->ucx_cuda ? "yes (this UCX build; GPUDirect RDMA needs the above as well)"
                       : "no (built without CUDA: GPU buffers go over NCCL, or staged through "
                         "host memory when ucx is chosen)");
}

static void print_text(const dcp_node_topo_t *n, const engines_t *e, const char *xml)
{
    printf("# %s: host %s (%s), %d GPUs, %d NICs\n", tool, n->hostname, xml ? xml : "this machine",
           n->num_gpus, n->num_nics);
    print_gpus(n);
    print_nics(n);
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
    print_pinning(n);
    printf("\nLinks and engines\n%-12s %-7s %s\n", "link", "engine", "why");
    printf("%-12s %-7s %s\n", "same node", dcp_engine_kind_name(e->kind[DCP_LINK_INTRA]),
           e->why[DCP_LINK_INTRA]);
    printf("%-12s %-7s %s\n", "other nodes", dcp_engine_kind_name(e->kind[DCP_LINK_INTER]),
           e->why[DCP_LINK_INTER]);
    print_gdr(xml, e);
}

/* The cost-model figures a cluster built from this node would use (--cluster Nx@FILE.xml):
 * inter and lat from the NICs (defaults where no GPU has one), intra the model's default. */
static dcp_perf_model_t figures(const dcp_node_topo_t *n, int *from_nics)
{
    dcp_perf_model_t perf, def;
    dcp_perf_model_default(&perf);
    def = perf;
    dcp_node_figures(n, &perf);
    *from_nics = perf.inter_gbps != def.inter_gbps || perf.lat_us != def.lat_us;
    return perf;
}

static void print_figures(const dcp_node_topo_t *n)
{
    int nics;
    const dcp_perf_model_t p = figures(n, &nics);
    const int32_t model_nics = dcp_node_model_nics(n);
    printf("\nCost-model figures (what --cluster Nx@FILE.xml uses)\n");
    printf("  intra %.1f GB/s per device (the model's default: NVLink is not visible to hwloc)\n",
           p.intra_gbps);
    printf("  inter %.1f GB/s per device, latency %.1f us (%s)\n", p.inter_gbps, p.lat_us,
           nics ? "from the NICs the GPUs use, summed per GPU"
                : "the model's defaults: no GPU has a NIC");
    if (model_nics > 0) printf("  nics %d per node\n", model_nics);
}

static void json_gdr(dcpt_json_t *j, const char *xml)
{
    if (xml) {
        dcpt_json_null(j, "gdr");
        return;
    }
    dcp_gdr_t g;
    dcp_gdr_probe(NULL, &g);
    dcpt_json_object(j, "gdr");
    dcpt_json_bool(j, "nvidia", g.nvidia);
    dcpt_json_bool(j, "open_module", g.open_module);
    dcpt_json_bool(j, "peermem", g.peermem);
    dcpt_json_bool(j, "dmabuf", g.dmabuf);
    dcpt_json_bool(j, "gdrcopy", g.gdrcopy);
    dcpt_json_str(j, "kernel", g.kernel[0] ? g.kernel : NULL);
    dcpt_json_bool(j, "possible", dcp_gdr_possible(&g));
    dcpt_json_close(j);
}

static void json_gpus(dcpt_json_t *j, const dcp_node_topo_t *n)
{
    dcpt_json_array(j, "gpus");
    for (int32_t g = 0; g < n->num_gpus; g++) {
        const dcp_gpu_info_t *x = &n->gpus[g];
        dcpt_pin_t pin;
        dcpt_pin_gpu(n, g, &pin);
        dcpt_json_object(j, NULL);
        dcpt_json_str(j, "busid", x->busid);
        dcpt_json_int(j, "numa", x->numa);
        dcpt_json_str(j, "nic", x->nic >= 0 ? n->nics[x->nic].name : NULL);
        dcpt_json_str(j, "path", dcp_path_name(x->nic_path));
        dcpt_json_array(j, "nics");
        for (int32_t i = 0; i < x->num_nics; i++) dcpt_json_str(j, NULL, n->nics[x->nics[i]].name);
        dcpt_json_close(j);
        dcpt_json_num(j, "net_gbps", dcp_node_gpu_gbps(n, g));
        dcpt_json_object(j, "env");
        dcpt_json_str(j, "ucx", pin.ucx[0] ? pin.ucx : NULL);
        dcpt_json_str(j, "nccl", pin.nccl[0] ? pin.nccl : NULL);
        dcpt_json_close(j);
        dcpt_json_close(j);
    }
    dcpt_json_close(j);
}

static void print_json(const dcp_node_topo_t *n, const engines_t *e, const char *xml)
{
    dcpt_json_t j;
    dcpt_json_begin(&j, stdout);
    dcpt_json_str(&j, "host", n->hostname);
    json_gpus(&j, n);
    dcpt_json_array(&j, "nics");
    for (int32_t k = 0; k < n->num_nics; k++) {
        const dcp_nic_info_t *x = &n->nics[k];
        dcpt_json_object(&j, NULL);
        dcpt_json_str(&j, "name", x->name);
        dcpt_json_str(&j, "kind", dcp_nic_kind_name(x->kind));
        dcpt_json_str(&j, "fabric", dcp_nic_fabric(x));
        dcpt_json_str(&j, "busid", x->busid);
        dcpt_json_int(&j, "numa", x->numa);
        dcpt_json_num(&j, "pci_gbps", x->pci_gbps);
        dcpt_json_num(&j, "link_gbps", x->link_gbps > 0 ? x->link_gbps : NAN); /* unknown */
        dcpt_json_str(&j, "netdev", x->netdev[0] ? x->netdev : NULL);
        dcpt_json_int(&j, "gpus", dcp_node_nic_users(n, k));
        dcpt_json_close(&j);
    }
    dcpt_json_close(&j);
    dcpt_json_array(&j, "gpu_paths");
    for (int32_t a = 0; a < n->num_gpus; a++) {
        dcpt_json_array(&j, NULL);
        for (int32_t b = 0; b < n->num_gpus; b++)
            dcpt_json_str(&j, NULL, a == b ? "X" : dcp_path_name(n->gpu_path[a][b]));
        dcpt_json_close(&j);
    }
    dcpt_json_close(&j);
    const char *job = dcpt_pin_job_env(n);
    dcpt_json_str(&j, "job_env", job[0] ? job : NULL);
    dcpt_json_object(&j, "engines");
    dcpt_json_str(&j, "intra", dcp_engine_kind_name(e->kind[DCP_LINK_INTRA]));
    dcpt_json_str(&j, "inter", dcp_engine_kind_name(e->kind[DCP_LINK_INTER]));
    dcpt_json_close(&j);
    dcpt_json_bool(&j, "ucx_cuda", e->ucx_cuda);
    json_gdr(&j, xml);
    int nics;
    const dcp_perf_model_t p = figures(n, &nics);
    dcpt_json_object(&j, "figures");
    dcpt_json_num(&j, "intra_gbps", p.intra_gbps);
    dcpt_json_num(&j, "inter_gbps", p.inter_gbps);
    dcpt_json_num(&j, "lat_us", p.lat_us);
    dcpt_json_bool(&j, "from_nics", nics);
    const int32_t model_nics = dcp_node_model_nics(n);
    if (model_nics > 0)
        dcpt_json_int(&j, "nics", model_nics);
    else
        dcpt_json_null(&j, "nics");
    dcpt_json_close(&j);
    dcpt_json_end(&j);
}

/* The node, discovered from `xml` (or this machine) and `busids`; a failure blames the flag
 * whose input was wrong: the capture is read alone first, then with the bus ids. */
static void discover(const char *xml, const char *busids, dcp_node_topo_t *n)
{
    if (xml && dcp_node_discover(xml, NULL, 0, n) != DCP_OK)
        dcpt_args_fail(tool, "xml", "%s", dcp_last_error());
    if (!busids) {
        if (!xml && dcp_node_discover(NULL, NULL, 0, n) != DCP_OK) {
            fprintf(stderr, "%s: %s\n", tool, dcp_last_error());
            exit(1);
        }
        return;
    }
    char **ids = NULL, *storage = NULL;
    const int32_t nids = dcpt_args_split(tool, "busids", busids, &ids, &storage);
    memset(n, 0, sizeof *n);
    if (dcp_node_discover(xml, (const char *const *)ids, nids, n) != DCP_OK)
        dcpt_args_fail(tool, "busids", "%s", dcp_last_error());
    free(ids);
    free(storage);
}

int main(int argc, char **argv)
{
    const char *xml = NULL, *busids = NULL;
    int json = 0, env = 0, markdown = 0;
    dcpt_arg_t args[] = {
        {"xml", DCPT_ARG_STR, &xml, 0, 0, "read an hwloc XML capture instead of this machine", 0},
        {"busids", DCPT_ARG_STR, &busids, 0, 0,
         "GPU bus ids in CUDA order (default: every NVIDIA GPU)", 0},
        {"json", DCPT_ARG_FLAG, &json, 0, 0, "one JSON object", 0},
        {"env", DCPT_ARG_FLAG, &env, 0, 0,
         "dcp's settings (DCP_*) instead: type, default, the value in force and where it comes "
         "from, effect; exit status 1 when a value does not read",
         0},
        {"markdown", DCPT_ARG_FLAG, &markdown, 0, 0,
         "with --env: the table of settings as markdown (plugin/SETTINGS.md)", 0},
    };
    const int nargs = (int)(sizeof args / sizeof args[0]);
    dcpt_args_parse(argc, argv, args, nargs, tool,
                    "Shows the GPUs, NICs, PCI paths, per-rank NIC pinning, GPUDirect RDMA's\n"
                    "prerequisites and transport engines dcp sees on a node; with --env, dcp's\n"
                    "settings.");
    if (markdown && (!env || json))
        dcpt_args_fail(tool, "markdown", "goes with --env, without --json");
    if (env && (xml || busids))
        dcpt_args_fail(tool, xml ? "xml" : "busids", "does not go with --env");
    if (env) {
        const int bad = markdown ? dcpt_settings_print_markdown(stdout)
                        : json   ? dcpt_settings_print_json(stdout)
                                 : dcpt_settings_print_text(stdout);
        return bad ? 1 : 0;
    }
    dcp_node_topo_t *n = calloc(1, sizeof *n);
    if (!n) return 1;
    discover(xml, busids, n);
    engines_t e;
    choose(n, &e);
    if (json)
        print_json(n, &e, xml);
    else {
        print_text(n, &e, xml);
        print_figures(n);
    }
    free(n);
    return 0;
}
