/* Topology discovery on hwloc XML captures (tests/data), without the hardware, and the
 * engine chosen for each link class. */
#include "plugin/job.h"
#include "topo/cluster.h"
#include "topo/gdr.h"
#include "topo/node.h"
#include "topo/node_figures.h"
#include "transport/peers.h"
#include "transport/select.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static dcp_node_topo_t *discover(const char *xml, const char *const *busids, int32_t n)
{
    dcp_node_topo_t *t = calloc(1, sizeof *t);
    const dcp_status_t st = dcp_node_discover(xml, busids, n, t);
    if (st != DCP_OK) fprintf(stderr, "discover %s: %s\n", xml, dcp_last_error());
    CU_ASSERT_EQUAL_FATAL(st, DCP_OK);
    return t;
}

static int32_t nic_named(const dcp_node_topo_t *t, const char *name)
{
    for (int32_t k = 0; k < t->num_nics; k++)
        if (!strcmp(t->nics[k].name, name)) return k;
    return -1;
}

/* 8 x A100 with 4 EFA adapters: two GPUs and one EFA per PCIe switch. */
static void test_a100_efa_node(void)
{
    dcp_node_topo_t *t = discover("tests/data/a100-efa.xml", NULL, 0);
    CU_ASSERT_EQUAL(t->num_gpus, 8);
    CU_ASSERT_EQUAL(t->num_nics, 5);
    int efa = 0, eth = 0;
    for (int32_t k = 0; k < t->num_nics; k++) {
        efa += t->nics[k].kind == DCP_NIC_EFA;
        eth += t->nics[k].kind == DCP_NIC_ETH;
    }
    CU_ASSERT(efa == 4 && eth == 1);
    static const char *want[8] = {"rdmap16s27",  "rdmap16s27",  "rdmap32s27",  "rdmap32s27",
                                  "rdmap144s27", "rdmap144s27", "rdmap160s27", "rdmap160s27"};
    for (int32_t g = 0; g < 8; g++) {
        CU_ASSERT_EQUAL(t->gpus[g].nic, nic_named(t, want[g]));
        CU_ASSERT_EQUAL(t->gpus[g].nic_path, DCP_PATH_PIX);
        CU_ASSERT_EQUAL(t->gpus[g].numa, g / 4);
    }
    CU_ASSERT_STRING_EQUAL(t->gpus[0].busid, "0000:10:1c.0");
    CU_ASSERT_STRING_EQUAL(t->nics[nic_named(t, "rdmap16s27")].netdev, "ens16");
    CU_ASSERT_EQUAL(t->gpu_path[0][1], DCP_PATH_PIX);  /* same switch */
    CU_ASSERT_EQUAL(t->gpu_path[0][2], DCP_PATH_NODE); /* other host bridge, same socket */
    CU_ASSERT_EQUAL(t->gpu_path[0][4], DCP_PATH_SYS);  /* other socket */
    free(t);
}

/* 8 x H100, each GPU beside its own ConnectX-7 under a switch; storage and management NICs
 * hang off host bridges and must not be chosen. */
static void test_h100_ib_node(void)
{
    dcp_node_topo_t *t = discover("tests/data/h100-ib.xml", NULL, 0);
    CU_ASSERT_EQUAL(t->num_gpus, 8);
    CU_ASSERT_EQUAL(t->num_nics, 11);
    /* the compute HCAs' names of the DGX H100 User Guide's network-module table */
    static const char *const hca[8] = {"mlx5_0", "mlx5_3", "mlx5_4",  "mlx5_5",
                                       "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"};
    for (int32_t g = 0; g < 8; g++) {
        CU_ASSERT_EQUAL(t->gpus[g].nic, nic_named(t, hca[g]));
        CU_ASSERT_EQUAL(t->gpus[g].nic_path, DCP_PATH_PIX);
        CU_ASSERT_EQUAL(t->nics[t->gpus[g].nic].kind, DCP_NIC_IB);
    }
    CU_ASSERT_EQUAL(t->nics[nic_named(t, "eno1")].kind, DCP_NIC_ETH);
    /* one HCA each, on InfiniBand (its port has a LID); storage HCAs serve no GPU */
    for (int32_t g = 0; g < 8; g++) {
        CU_ASSERT_EQUAL(t->gpus[g].num_nics, 1);
        CU_ASSERT_STRING_EQUAL(dcp_nic_fabric(&t->nics[t->gpus[g].nic]), "InfiniBand");
        CU_ASSERT_DOUBLE_EQUAL(dcp_node_gpu_gbps(t, g), 50.0, 1e-9);
    }
    CU_ASSERT_EQUAL(dcp_node_nic_users(t, nic_named(t, "mlx5_1")), 0);
    CU_ASSERT_EQUAL(dcp_node_nic_users(t, nic_named(t, "mlx5_7")), 0);
    CU_ASSERT_EQUAL(dcp_node_model_nics(t), 8);
    CU_ASSERT_EQUAL(t->gpu_path[0][3], DCP_PATH_NODE);
    CU_ASSERT_EQUAL(t->gpu_path[3][4], DCP_PATH_SYS);
    free(t);
}

/* This machine: no GPU, one virtio network interface. */
static void test_this_machine(void)
{
    dcp_node_topo_t *t = discover("tests/data/this-machine.xml", NULL, 0);
    CU_ASSERT_EQUAL(t->num_gpus, 0);
    CU_ASSERT_EQUAL_FATAL(t->num_nics, 1);
    CU_ASSERT_EQUAL(t->nics[0].kind, DCP_NIC_ETH);
    CU_ASSERT_STRING_EQUAL(t->nics[0].name, "eth0");
    free(t);
}

/* GPUs in the order CUDA reports them; an unknown bus id, a device that is no GPU and a GPU
 * named twice are errors that name the bus id. */
static void test_busid_order(void)
{
    const char *ids[3] = {"0000:a0:1d.0", "0000:10:1c.0", "0000:90:1c.0"};
    dcp_node_topo_t *t = discover("tests/data/a100-efa.xml", ids, 3);
    CU_ASSERT_EQUAL(t->num_gpus, 3);
    CU_ASSERT_STRING_EQUAL(t->gpus[0].busid, "0000:a0:1d.0");
    CU_ASSERT_EQUAL(t->gpus[0].nic, nic_named(t, "rdmap160s27"));
    const char *bad[1] = {"0000:77:00.0"};
    CU_ASSERT_EQUAL(dcp_node_discover("tests/data/a100-efa.xml", bad, 1, t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "0000:77:00.0"));
    /* a NIC's bus id is no GPU's, and a GPU is not listed twice */
    const char *nic[1] = {"0000:9a:00.0"}, *twice[2] = {"0000:9d:00.0", "0000:9d:00.0"};
    CU_ASSERT_EQUAL(dcp_node_discover("tests/data/h100-ib.xml", nic, 1, t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "class 0x0207, not a GPU"));
    CU_ASSERT_EQUAL(dcp_node_discover("tests/data/h100-ib.xml", twice, 2, t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "listed twice"));
    CU_ASSERT_EQUAL(dcp_node_discover("tests/data/nonexistent.xml", NULL, 0, t),
                    DCP_ERR_INVALID_ARG);
    free(t);
}

/* A NIC of a synthetic node (flat_node): its PCI type, its OS device (OpenFabrics 3 or
 * network 2) and what hwloc records of it, and a network interface of its own if any. */
typedef struct {
    const char *pci_type, *name;
    int osdev_type;
    const char *infos;            /* <info .../> lines of the OS device, or "" */
    const char *netdev, *address; /* a second OS device (a network interface), or NULL */
} fake_nic_t;

/* An hwloc XML of `gpus` GPUs and the NICs, all behind one host bridge, in a temporary
 * file whose path is written to `path` (PATH_CHARS). */
#define PATH_CHARS 32
static void flat_node(char *path, int gpus, const fake_nic_t *nics, int n)
{
    snprintf(path, PATH_CHARS, "/tmp/dcp-topo-XXXXXX");
    const int fd = mkstemp(path);
    CU_ASSERT_FATAL(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(
        f,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
        "<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\" cpuset=\"0x1\" "
        "complete_cpuset=\"0x1\" allowed_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\" "
        "allowed_nodeset=\"0x1\" gp_index=\"1\">\n<object type=\"NUMANode\" os_index=\"0\" "
        "cpuset=\"0x1\" complete_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\" "
        "gp_index=\"2\" local_memory=\"1000000\"/>\n<object type=\"PU\" os_index=\"0\" "
        "cpuset=\"0x1\" complete_cpuset=\"0x1\" nodeset=\"0x1\" complete_nodeset=\"0x1\" "
        "gp_index=\"3\"/>\n<object type=\"Bridge\" gp_index=\"4\" bridge_type=\"0-1\" "
        "depth=\"0\" bridge_pci=\"0000:[00-00]\">\n");
    for (int i = 0; i < gpus; i++)
        fprintf(f,
                "<object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:00:0%d.0\" "
                "pci_type=\"0302 [10de:20b0] [10de:0000] 00\" pci_link_speed=\"31.5\"/>\n",
                10 + i, i + 1);
    for (int i = 0; i < n; i++) {
        fprintf(f,
                "<object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:00:1%d.0\" "
                "pci_type=\"%s\" pci_link_speed=\"31.5\"><object type=\"OSDev\" gp_index=\"%d\" "
                "name=\"%s\" osdev_type=\"%d\">%s</object>\n",
                20 + i, i, nics[i].pci_type, 40 + i, nics[i].name, nics[i].osdev_type,
                nics[i].infos);
        if (nics[i].netdev)
            fprintf(f,
                    "<object type=\"OSDev\" gp_index=\"%d\" name=\"%s\" osdev_type=\"2\"><info "
                    "name=\"Address\" value=\"%s\"/></object>\n",
                    60 + i, nics[i].netdev, nics[i].address);
        fprintf(f, "</object>\n");
    }
    fprintf(f, "</object>\n</object>\n</topology>\n");
    fclose(f);
}

#define MLX5  "0207 [15b3:1021] [15b3:0000] 00"
#define EFA   "0200 [1d0f:efa1] [1d0f:0000] 00"
#define INTEL "0200 [8086:1533] [8086:0000] 00"

/* Four GPUs and two RDMA NICs all behind one host bridge: equally near, so each NIC gets two
 * GPUs; the plain Ethernet NIC, though just as near, is not used. */
static void test_gpus_spread_over_equal_nics(void)
{
    const fake_nic_t nics[3] = {{MLX5, "mlx5_0", 3, "", NULL, NULL},
                                {MLX5, "mlx5_1", 3, "", NULL, NULL},
                                {INTEL, "eth2", 2, "", NULL, NULL}};
    char path[PATH_CHARS];
    flat_node(path, 4, nics, 3);
    dcp_node_topo_t *t = discover(path, NULL, 0);
    unlink(path);
    CU_ASSERT_EQUAL_FATAL(t->num_gpus, 4);
    int per_nic[2] = {0, 0};
    for (int32_t g = 0; g < 4; g++) {
        CU_ASSERT_EQUAL(t->gpus[g].nic_path, DCP_PATH_PHB);
        CU_ASSERT_FATAL(t->gpus[g].nic >= 0);
        CU_ASSERT_EQUAL(t->gpus[g].num_nics, 1);
        CU_ASSERT_EQUAL(t->nics[t->gpus[g].nic].kind, DCP_NIC_IB);
        per_nic[strcmp(t->nics[t->gpus[g].nic].name, "mlx5_0") == 0 ? 0 : 1]++;
    }
    CU_ASSERT(per_nic[0] == 2 && per_nic[1] == 2);
    CU_ASSERT_EQUAL(dcp_node_nic_users(t, nic_named(t, "mlx5_0")), 2);
    CU_ASSERT_EQUAL(dcp_node_nic_users(t, nic_named(t, "eth2")), 0);
    /* each GPU half of an HCA: its nominal 50 GB/s capped by its PCI link's 31.5 */
    CU_ASSERT_DOUBLE_EQUAL(dcp_node_gpu_gbps(t, 0), 31.5 / 2, 1e-9);
    CU_ASSERT_EQUAL(dcp_node_model_nics(t), 2);
    free(t);
}

/* More NICs than GPUs, all equally near: two GPUs and four EFA devices, two each, and the
 * bandwidth of a GPU is the sum of its NICs'. */
static void test_gpu_uses_several_nics(void)
{
    fake_nic_t nics[4];
    static const char *names[4] = {"rdmap16s0", "rdmap17s0", "rdmap18s0", "rdmap19s0"};
    for (int i = 0; i < 4; i++) nics[i] = (fake_nic_t){EFA, names[i], 3, "", NULL, NULL};
    char path[PATH_CHARS];
    flat_node(path, 2, nics, 4);
    dcp_node_topo_t *t = discover(path, NULL, 0);
    unlink(path);
    CU_ASSERT_EQUAL_FATAL(t->num_gpus, 2);
    for (int32_t g = 0; g < 2; g++) {
        CU_ASSERT_EQUAL(t->gpus[g].num_nics, 2);
        CU_ASSERT_DOUBLE_EQUAL(dcp_node_gpu_gbps(t, g), 25.0, 1e-9); /* 2 x 100 Gb/s */
    }
    for (int32_t k = 0; k < 4; k++) CU_ASSERT_EQUAL(dcp_node_nic_users(t, k), 1);
    CU_ASSERT_EQUAL(dcp_node_model_nics(t), 4);
    free(t);
}

/* The fabric of each port in a capture: the PCI vendor for EFA, a LID for InfiniBand, LID 0
 * with a GID for RoCE, else the hardware address of its network interface (20 bytes IPoIB,
 * 6 Ethernet); a verbs device with none of these is unknown. */
static void test_link_layer_from_capture(void)
{
    const char *lid5 = "<info name=\"Port1LID\" value=\"0x5\"/>";
    const char *roce = "<info name=\"Port1LID\" value=\"0x0\"/><info name=\"Port1GID0\" "
                       "value=\"fe80:0000:0000:0000:0202:c9ff:fe00:0001\"/>";
    const fake_nic_t nics[6] = {{MLX5, "mlx5_0", 3, lid5, "ib0", NULL},
                                {MLX5, "mlx5_1", 3, roce, "ens1f0", "02:02:c9:00:00:01"},
                                {MLX5, "mlx5_2", 3, "", "ib2",
                                 "00:00:10:29:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:11:22:33"},
                                {MLX5, "mlx5_3", 3, "", "ens3", "0c:42:a1:11:22:33"},
                                {MLX5, "mlx5_4", 3, "", NULL, NULL},
                                {EFA, "rdmap5s0", 3, "", NULL, NULL}};
    char path[PATH_CHARS];
    flat_node(path, 1, nics, 6);
    dcp_node_topo_t *t = discover(path, NULL, 0);
    unlink(path);
    static const char *want[6] = {"InfiniBand", "RoCE", "InfiniBand", "RoCE", "unknown", "EFA"};
    for (int i = 0; i < 6; i++) {
        const int32_t k = nic_named(t, nics[i].name);
        CU_ASSERT_FATAL(k >= 0);
        if (strcmp(dcp_nic_fabric(&t->nics[k]), want[i]))
            fprintf(stderr, "\n%s: fabric %s, want %s\n", nics[i].name, dcp_nic_fabric(&t->nics[k]),
                    want[i]);
        CU_ASSERT_STRING_EQUAL(dcp_nic_fabric(&t->nics[k]), want[i]);
    }
    CU_ASSERT_EQUAL(t->nics[nic_named(t, "mlx5_0")].link_layer, DCP_LINK_LAYER_INFINIBAND);
    CU_ASSERT_EQUAL(t->nics[nic_named(t, "mlx5_1")].link_layer, DCP_LINK_LAYER_ETHERNET);
    CU_ASSERT_EQUAL(t->nics[nic_named(t, "rdmap5s0")].link_layer, DCP_LINK_LAYER_EFA);
    free(t);
}

/* An AWS p5.48xlarge (tests/data/p5.xml, after aws-ofi-nccl's published PCI layout): 8 H100,
 * 32 EFA, four under each GPU's switch: every GPU uses its four (50 GB/s), none shared. */
static void test_p5_node(void)
{
    dcp_node_topo_t *t = discover("tests/data/p5.xml", NULL, 0);
    CU_ASSERT_EQUAL(t->num_gpus, 8);
    CU_ASSERT_EQUAL(t->num_nics, 32);
    for (int32_t g = 0; g < 8; g++) {
        const dcp_gpu_info_t *x = &t->gpus[g];
        CU_ASSERT_EQUAL_FATAL(x->num_nics, 4);
        CU_ASSERT_EQUAL(x->nic_path, DCP_PATH_PIX);
        for (int32_t i = 0; i < 4; i++) {
            CU_ASSERT_EQUAL(x->nics[i], 4 * g + i); /* bus order: the switch's four */
            CU_ASSERT_EQUAL(t->nics[x->nics[i]].kind, DCP_NIC_EFA);
            CU_ASSERT_EQUAL(dcp_node_nic_users(t, x->nics[i]), 1);
        }
        CU_ASSERT_DOUBLE_EQUAL(dcp_node_gpu_gbps(t, g), 50.0, 1e-9);
    }
    CU_ASSERT_STRING_EQUAL(t->nics[t->gpus[0].nics[0]].name, "rdmap79s0");
    CU_ASSERT_STRING_EQUAL(t->nics[t->gpus[7].nics[3]].name, "rdmap201s0");
    CU_ASSERT_STRING_EQUAL(dcp_nic_fabric(&t->nics[0]), "EFA");
    CU_ASSERT_EQUAL(dcp_node_model_nics(t), 32);
    free(t);
}

/* The GPUDirect RDMA prerequisites read from a folder shaped like a system: nothing there,
 * then the peer-memory module, then dma-buf (kernel 6.1 and the open module) and GDRCopy. */
static void test_gdr_prerequisites(void)
{
    char root[] = "/tmp/dcp-gdr-XXXXXX";
    CU_ASSERT_FATAL(mkdtemp(root) != NULL);
    dcp_gdr_t g;
    dcp_gdr_probe(root, &g);
    CU_ASSERT(!g.nvidia && !g.peermem && !g.dmabuf && !g.gdrcopy && !dcp_gdr_possible(&g));
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/sys/module/nvidia_peermem %s/proc/driver/nvidia %s/proc/sys/kernel "
             "%s/dev && echo 5.10.0-28-amd64 > %s/proc/sys/kernel/osrelease && echo 'NVRM "
             "version: NVIDIA UNIX x86_64 Kernel Module  535.104.05' > "
             "%s/proc/driver/nvidia/version",
             root, root, root, root, root, root);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    dcp_gdr_probe(root, &g);
    CU_ASSERT(g.nvidia && !g.open_module && g.peermem && !g.dmabuf && !g.gdrcopy);
    CU_ASSERT_STRING_EQUAL(g.kernel, "5.10.0-28-amd64");
    CU_ASSERT(dcp_gdr_possible(&g));
    snprintf(cmd, sizeof cmd,
             "rmdir %s/sys/module/nvidia_peermem && touch %s/dev/gdrdrv && echo 6.1.0-18-amd64 "
             "> %s/proc/sys/kernel/osrelease && echo 'NVRM version: NVIDIA UNIX Open Kernel "
             "Module for x86_64  550.54.15' > %s/proc/driver/nvidia/version",
             root, root, root, root);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    dcp_gdr_probe(root, &g);
    CU_ASSERT(g.open_module && !g.peermem && g.dmabuf && g.gdrcopy && dcp_gdr_possible(&g));
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CU_ASSERT_EQUAL(system(cmd), 0);
}

/* A cluster planned from a capture: GPUs per node from the XML, per-device network rate
 * from the NIC each GPU uses (A100: 100 Gb/s EFA shared by two GPUs; H100: one 400 Gb/s
 * HCA each). */
static void test_cluster_from_capture(void)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x@tests/data/a100-efa.xml", &c), DCP_OK);
    CU_ASSERT_EQUAL(c->num_ranks, 16);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 6.25, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.lat_us, 15.0, 1e-9);
    CU_ASSERT_EQUAL(c->nics_per_node, 4); /* two GPUs on each of 4 EFA */
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("4x@tests/data/h100-ib.xml:intra=450", &c), DCP_OK);
    CU_ASSERT_EQUAL(c->devs_per_node, 8);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 50.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.intra_gbps, 450.0, 1e-9);
    CU_ASSERT_EQUAL(dcp_cluster_node_nics(c), 8);
    dcp_cluster_destroy(c);
    /* a p5: four NICs' bandwidth per GPU, as the preset has it */
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x@tests/data/p5.xml", &c), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 50.0, 1e-9);
    CU_ASSERT_EQUAL(c->nics_per_dev, 4);
    CU_ASSERT_EQUAL(dcp_cluster_node_nics(c), 32);
    dcp_cluster_t *pre = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2xp5", &pre), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, pre->perf.inter_gbps, 1e-9);
    CU_ASSERT_EQUAL(c->nics_per_node, pre->nics_per_node);
    dcp_cluster_destroy(pre);
    dcp_cluster_destroy(c);
    c = NULL;
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2x@tests/data/this-machine.xml", &c),
                    DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "no NVIDIA GPU"));
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2x@", &c), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(c);
}

/* One engine choice for a job and for dcp-topo (dcp_job_engines_for_node): a job of nodes like
 * a capture gets the engines its peer table gives, the defaults per NIC kind, UCX moving device
 * memory only where every rank's does, the environment's overrides below the config's. */
static void test_job_engines_for_node(void)
{
    static const struct {
        const char *xml;
        dcp_engine_kind_t intra, inter, inter_no_ucx_cuda;
    } nodes[] = {
        {"tests/data/a100-efa.xml", DCP_ENGINE_NCCL, DCP_ENGINE_NCCL, DCP_ENGINE_NCCL},
        {"tests/data/h100-ib.xml", DCP_ENGINE_NCCL, DCP_ENGINE_UCX, DCP_ENGINE_NCCL},
        {"tests/data/this-machine.xml", DCP_ENGINE_UCX, DCP_ENGINE_UCX, DCP_ENGINE_UCX},
    };
    char *saved[2] = {NULL, NULL}; /* the caller's, put back at the end */
    static const char *const vars[2] = {"DCP_TRANSPORT_INTRA", "DCP_TRANSPORT_INTER"};
    for (int v = 0; v < 2; v++) {
        const char *was = getenv(vars[v]);
        saved[v] = was ? strdup(was) : NULL;
        unsetenv(vars[v]);
    }
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        dcp_node_topo_t *n = discover(nodes[i].xml, NULL, 0);
        dcp_engine_kind_t k[DCP_LINK_COUNT], j[DCP_LINK_COUNT];
        const char *why[DCP_LINK_COUNT] = {NULL, NULL};
        int ucx_cuda = -1;
        CU_ASSERT_EQUAL_FATAL(dcp_job_engines_for_node(n, k, why, &ucx_cuda), DCP_OK);
        CU_ASSERT(ucx_cuda == 0 || ucx_cuda == 1);
        CU_ASSERT_EQUAL(k[DCP_LINK_INTRA], nodes[i].intra);
        CU_ASSERT_EQUAL(k[DCP_LINK_INTER], ucx_cuda ? nodes[i].inter : nodes[i].inter_no_ucx_cuda);
        CU_ASSERT(why[DCP_LINK_INTRA] && why[DCP_LINK_INTER] && *why[DCP_LINK_INTER]);
        /* a job of two such nodes, as its contexts choose: the same engines */
        dcp_peer_t peer[2];
        memset(peer, 0, sizeof peer);
        for (int r = 0; r < 2; r++) {
            peer[r].nic = dcp_node_nic_kind(n);
            peer[r].ucx_cuda = ucx_cuda;
        }
        const dcp_peer_table_t t = {0, 2, peer};
        const int gpu = n->num_gpus > 0;
        CU_ASSERT_EQUAL(dcp_job_choose_engines(&t, gpu, NULL, NULL, j, NULL), DCP_OK);
        CU_ASSERT(j[0] == k[0] && j[1] == k[1]);
        /* one rank whose UCX cannot move device memory takes GPU jobs off UCX between nodes */
        peer[1].ucx_cuda = 0;
        CU_ASSERT_EQUAL(dcp_job_choose_engines(&t, gpu, NULL, NULL, j, NULL), DCP_OK);
        CU_ASSERT_EQUAL(j[DCP_LINK_INTER], nodes[i].inter_no_ucx_cuda);
        /* the environment overrides the default; a name given by the caller overrides both */
        setenv("DCP_TRANSPORT_INTER", "ucx", 1);
        CU_ASSERT_EQUAL(dcp_job_engines_for_node(n, k, why, NULL), DCP_OK);
        CU_ASSERT_EQUAL(k[DCP_LINK_INTER], DCP_ENGINE_UCX);
        CU_ASSERT_STRING_EQUAL(why[DCP_LINK_INTER], "overridden");
        const dcp_status_t want = gpu ? DCP_OK : DCP_ERR_UNSUPPORTED; /* NCCL moves GPU memory */
        CU_ASSERT_EQUAL(dcp_job_choose_engines(&t, gpu, NULL, "nccl", j, NULL), want);
        if (gpu) CU_ASSERT_EQUAL(j[DCP_LINK_INTER], DCP_ENGINE_NCCL);
        setenv("DCP_TRANSPORT_INTER", "ipc", 1);
        CU_ASSERT_EQUAL(dcp_job_engines_for_node(n, k, why, NULL), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "$DCP_TRANSPORT_INTER = \"ipc\""));
        unsetenv("DCP_TRANSPORT_INTER");
        free(n);
    }
    for (int v = 0; v < 2; v++)
        if (saved[v]) {
            setenv(vars[v], saved[v], 1);
            free(saved[v]);
        }
}

static void test_engine_per_link(void)
{
    dcp_engine_kind_t k;
    const dcp_engine_env_t threads = {.threads = 1};
    CU_ASSERT(dcp_engine_choose(&threads, DCP_LINK_INTER, &k, NULL) == DCP_OK &&
              k == DCP_ENGINE_INPROC);
    const dcp_engine_env_t cpu = {.nic = DCP_NIC_ETH};
    CU_ASSERT(dcp_engine_choose(&cpu, DCP_LINK_INTRA, &k, NULL) == DCP_OK && k == DCP_ENGINE_UCX);
    CU_ASSERT(dcp_engine_choose(&cpu, DCP_LINK_INTER, &k, NULL) == DCP_OK && k == DCP_ENGINE_UCX);
    const dcp_engine_env_t efa = {.gpu_buffers = 1, .have_nccl = 1, .nic = DCP_NIC_EFA};
    CU_ASSERT(dcp_engine_choose(&efa, DCP_LINK_INTRA, &k, NULL) == DCP_OK && k == DCP_ENGINE_NCCL);
    CU_ASSERT(dcp_engine_choose(&efa, DCP_LINK_INTER, &k, NULL) == DCP_OK && k == DCP_ENGINE_NCCL);
    const dcp_engine_env_t ib = {
        .gpu_buffers = 1, .have_nccl = 1, .ucx_cuda = 1, .nic = DCP_NIC_IB};
    CU_ASSERT(dcp_engine_choose(&ib, DCP_LINK_INTRA, &k, NULL) == DCP_OK && k == DCP_ENGINE_NCCL);
    CU_ASSERT(dcp_engine_choose(&ib, DCP_LINK_INTER, &k, NULL) == DCP_OK && k == DCP_ENGINE_UCX);
    /* a UCX without CUDA cannot move device memory: NCCL between nodes */
    dcp_engine_env_t ib_host_ucx = ib;
    ib_host_ucx.ucx_cuda = 0;
    CU_ASSERT(dcp_engine_choose(&ib_host_ucx, DCP_LINK_INTER, &k, NULL) == DCP_OK &&
              k == DCP_ENGINE_NCCL);
    /* overrides, and the ones that cannot work */
    dcp_engine_env_t o = ib;
    o.override[DCP_LINK_INTER] = "nccl";
    CU_ASSERT(dcp_engine_choose(&o, DCP_LINK_INTER, &k, NULL) == DCP_OK && k == DCP_ENGINE_NCCL);
    /* no CUDA IPC engine exists: the name is refused, and the message lists the engines */
    o.override[DCP_LINK_INTER] = "ipc";
    CU_ASSERT_EQUAL(dcp_engine_choose(&o, DCP_LINK_INTER, &k, NULL), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "'ipc': unknown (inproc, ucx, nccl)"));
    dcp_engine_env_t host = cpu;
    host.override[DCP_LINK_INTRA] = "nccl";
    CU_ASSERT_EQUAL(dcp_engine_choose(&host, DCP_LINK_INTRA, &k, NULL), DCP_ERR_UNSUPPORTED);
    host.override[DCP_LINK_INTRA] = "carrier-pigeon";
    CU_ASSERT_EQUAL(dcp_engine_choose(&host, DCP_LINK_INTRA, &k, NULL), DCP_ERR_INVALID_ARG);
    host.override[DCP_LINK_INTRA] = "inproc";
    CU_ASSERT_EQUAL(dcp_engine_choose(&host, DCP_LINK_INTRA, &k, NULL), DCP_ERR_INVALID_ARG);
}

int dcp_suite_topo(void)
{
    static const dcp_test_t tests[] = {
        {"a100_efa_node", test_a100_efa_node},
        {"h100_ib_node", test_h100_ib_node},
        {"this_machine", test_this_machine},
        {"busid_order", test_busid_order},
        {"gpus_spread_over_equal_nics", test_gpus_spread_over_equal_nics},
        {"gpu_uses_several_nics", test_gpu_uses_several_nics},
        {"link_layer_from_capture", test_link_layer_from_capture},
        {"p5_node", test_p5_node},
        {"gdr_prerequisites", test_gdr_prerequisites},
        {"cluster_from_capture", test_cluster_from_capture},
        {"engine_per_link", test_engine_per_link},
        {"job_engines_for_node", test_job_engines_for_node},
        {NULL, NULL},
    };
    return dcp_add_suite("topo", tests);
}
