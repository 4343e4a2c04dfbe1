/*
 * One node's devices as hwloc sees them: GPUs (PCI objects, found by the bus ids CUDA
 * reports, or every NVIDIA 3D/VGA controller), NICs (OpenFabrics devices - mlx5_*, EFA - and
 * plain network interfaces), their NUMA nodes, and PCI-tree distances. Plain data.
 */
#ifndef DCP_TOPO_NODE_H
#define DCP_TOPO_NODE_H

#include "include/dcp.h"

#define DCP_NODE_MAX_DEVS 64

/* How far two PCI devices are, nearest first (NCCL's classes). */
typedef enum {
    DCP_PATH_PIX = 0,  /* same PCIe switch, at most one bridge on each side */
    DCP_PATH_PXB = 1,  /* same PCIe switch tree, more bridges */
    DCP_PATH_PHB = 2,  /* through a host bridge */
    DCP_PATH_NODE = 3, /* different host bridges of one NUMA node */
    DCP_PATH_SYS = 4,  /* across NUMA nodes (the socket interconnect) */
    DCP_PATH_COUNT = 5
} dcp_path_t;

typedef enum {
    DCP_NIC_EFA = 0, /* AWS Elastic Fabric Adapter (PCI vendor 0x1d0f, OpenFabrics) */
    DCP_NIC_IB = 1,  /* InfiniBand / RoCE RDMA NIC (OpenFabrics, e.g. mlx5_*) */
    DCP_NIC_ETH = 2, /* a network interface without RDMA: TCP */
    DCP_NIC_KIND_COUNT = 3
} dcp_nic_kind_t;

typedef struct {
    char busid[16]; /* "0000:18:00.0" */
    int32_t numa;   /* first NUMA node of its locality, -1 unknown */
    int32_t nic;    /* index into nics of the NIC it uses, -1 none */
    dcp_path_t nic_path;
} dcp_gpu_info_t;

typedef struct {
    char name[32];   /* "mlx5_0", "rdmap16s27", "eth0" */
    char netdev[32]; /* its network interface, "" when none */
    char busid[16];
    dcp_nic_kind_t kind;
    int32_t numa;
    double pci_gbps;  /* PCI link bandwidth, GB/s (0 unknown) */
    double link_gbps; /* network link rate, Gb/s (0 unknown: sysfs only when live) */
} dcp_nic_info_t;

typedef struct {
    char hostname[64];
    int32_t num_gpus, num_nics;
    dcp_gpu_info_t gpus[DCP_NODE_MAX_DEVS];
    dcp_nic_info_t nics[DCP_NODE_MAX_DEVS];
    dcp_path_t gpu_path[DCP_NODE_MAX_DEVS][DCP_NODE_MAX_DEVS]; /* GPU to GPU over PCI */
} dcp_node_topo_t;

/* Discovers a node: from the hwloc XML at `xml_path`, or the live machine when NULL. GPUs
 * are the PCI devices with the given bus ids in that order (as CUDA reports them), or, when
 * busids is NULL, every NVIDIA GPU in bus order. Each GPU gets the nearest NIC (RDMA NICs
 * before plain ones), GPUs spread evenly over equally near NICs. */
dcp_status_t dcp_node_discover(const char *xml_path, const char *const *busids, int32_t num_busids,
                               dcp_node_topo_t *node_out);

const char *dcp_path_name(dcp_path_t path);
const char *dcp_nic_kind_name(dcp_nic_kind_t kind);

#endif
