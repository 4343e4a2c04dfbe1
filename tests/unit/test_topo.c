/* Topology discovery on hwloc XML captures (tests/data), without the hardware, and the
 * engine chosen for each link class. */
#include "topo/cluster.h"
#include "topo/node.h"
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
    for (int32_t g = 0; g < 8; g++) {
        char name[32];
        snprintf(name, sizeof name, "mlx5_%d", g);
        CU_ASSERT_EQUAL(t->gpus[g].nic, nic_named(t, name));
        CU_ASSERT_EQUAL(t->gpus[g].nic_path, DCP_PATH_PIX);
        CU_ASSERT_EQUAL(t->nics[t->gpus[g].nic].kind, DCP_NIC_IB);
    }
    CU_ASSERT_EQUAL(t->nics[nic_named(t, "eno1")].kind, DCP_NIC_ETH);
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
    const char *nic[1] = {"0000:99:00.0"}, *twice[2] = {"0000:9a:00.0", "0000:9a:00.0"};
    CU_ASSERT_EQUAL(dcp_node_discover("tests/data/h100-ib.xml", nic, 1, t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "class 0x0207, not a GPU"));
    CU_ASSERT_EQUAL(dcp_node_discover("tests/data/h100-ib.xml", twice, 2, t), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "listed twice"));
    CU_ASSERT_EQUAL(dcp_node_discover("tests/data/nonexistent.xml", NULL, 0, t),
                    DCP_ERR_INVALID_ARG);
    free(t);
}

/* Four GPUs and two RDMA NICs all behind one host bridge: equally near, so each NIC gets two
 * GPUs; the plain Ethernet NIC, though just as near, is not used. */
static void test_gpus_spread_over_equal_nics(void)
{
    char path[] = "/tmp/dcp-topo-XXXXXX";
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
    for (int i = 0; i < 4; i++)
        fprintf(f,
                "<object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:00:0%d.0\" "
                "pci_type=\"0302 [10de:20b0] [10de:0000] 00\" pci_link_speed=\"31.5\"/>\n",
                10 + i, i + 1);
    for (int i = 0; i < 3; i++)
        fprintf(f,
                "<object type=\"PCIDev\" gp_index=\"%d\" pci_busid=\"0000:00:1%d.0\" "
                "pci_type=\"%s\" pci_link_speed=\"31.5\"><object type=\"OSDev\" gp_index=\"%d\" "
                "name=\"%s%d\" osdev_type=\"%d\"/></object>\n",
                20 + i, i,
                i < 2 ? "0207 [15b3:1021] [15b3:0000] 00" : "0200 [8086:1533] [8086:0000] 00",
                30 + i, i < 2 ? "mlx5_" : "eth", i, i < 2 ? 3 : 2);
    fprintf(f, "</object>\n</object>\n</topology>\n");
    fclose(f);
    dcp_node_topo_t *t = discover(path, NULL, 0);
    unlink(path);
    CU_ASSERT_EQUAL_FATAL(t->num_gpus, 4);
    int per_nic[2] = {0, 0};
    for (int32_t g = 0; g < 4; g++) {
        CU_ASSERT_EQUAL(t->gpus[g].nic_path, DCP_PATH_PHB);
        CU_ASSERT_FATAL(t->gpus[g].nic >= 0);
        CU_ASSERT_EQUAL(t->nics[t->gpus[g].nic].kind, DCP_NIC_IB);
        per_nic[strcmp(t->nics[t->gpus[g].nic].name, "mlx5_0") == 0 ? 0 : 1]++;
    }
    CU_ASSERT(per_nic[0] == 2 && per_nic[1] == 2);
    free(t);
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
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("4x@tests/data/h100-ib.xml:intra=450", &c), DCP_OK);
    CU_ASSERT_EQUAL(c->devs_per_node, 8);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 50.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.intra_gbps, 450.0, 1e-9);
    dcp_cluster_destroy(c);
    c = NULL;
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2x@tests/data/this-machine.xml", &c),
                    DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "no NVIDIA GPU"));
    CU_ASSERT_EQUAL(dcp_cluster_from_spec("2x@", &c), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(c);
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
        {"cluster_from_capture", test_cluster_from_capture},
        {"engine_per_link", test_engine_per_link},
        {NULL, NULL},
    };
    return dcp_add_suite("topo", tests);
}
