/*
 * One node's devices as hwloc sees them: GPUs (PCI objects, found by the bus ids CUDA
 * reports, or every NVIDIA 3D/VGA controller), NICs (OpenFabrics devices - mlx5_*, EFA - and
 * plain network interfaces) with the fabric each port is on, their NUMA nodes, PCI-tree
 * distances, and the NICs each GPU uses: one on most nodes, several where a node has more
 * NICs than GPUs beside each GPU (an AWS p5: four 100 Gb/s EFA per H100). Plain data.
 */
#ifndef DCP_TOPO_NODE_H
#define DCP_TOPO_NODE_H

#include "include/dcp.h"

#define DCP_NODE_MAX_DEVS 64
#define DCP_GPU_MAX_NICS  8 /* NICs one GPU drives at once (its rails) */

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

/* The link layer of an RDMA NIC's port: what tells InfiniBand from RoCE (both are verbs
 * devices of kind DCP_NIC_IB) and from EFA. */
typedef enum {
    DCP_LINK_LAYER_UNKNOWN = 0,
    DCP_LINK_LAYER_INFINIBAND = 1, /* an InfiniBand fabric (a subnet manager gave it a LID) */
    DCP_LINK_LAYER_ETHERNET = 2,   /* RoCE on an RDMA NIC; TCP on a plain one */
    DCP_LINK_LAYER_EFA = 3,        /* AWS SRD ("Unspecified" in sysfs) */
    DCP_LINK_LAYER_COUNT = 4
} dcp_link_layer_t;

typedef struct {
    char busid[16]; /* "0000:18:00.0" */
    int32_t numa;   /* first NUMA node of its locality, -1 unknown */
    int32_t nic;    /* index into nics of the first NIC it uses, -1 none */
    dcp_path_t nic_path;
    int32_t num_nics;               /* NICs it uses (0 none) */
    int32_t nics[DCP_GPU_MAX_NICS]; /* their indices into nics, nearest first */
    double pci_gbps;                /* its PCI link, GB/s (0 unknown) */
} dcp_gpu_info_t;

typedef struct {
    char name[32];   /* "mlx5_0", "rdmap16s27", "eth0" */
    char netdev[32]; /* its network interface, "" when none */
    char busid[16];
    dcp_nic_kind_t kind;
    dcp_link_layer_t link_layer; /* live: ports/1/link_layer; a capture: the PCI vendor (EFA),
                                    the port's LID (InfiniBand) or GID without one (RoCE) */
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
 * busids is NULL, every NVIDIA GPU in bus order. NICs go to GPUs by PCI distance, RDMA NICs
 * before plain ones: each NIC to the GPU nearest to it among those for which it is a nearest
 * NIC (ties to the GPU with fewest NICs so far), so a GPU beside four NICs uses all four; a
 * GPU left without then shares its nearest NIC (the least shared), so GPUs spread evenly over
 * equally near NICs. A NIC farther from every GPU than that GPU's own (storage, management)
 * serves none. */
dcp_status_t dcp_node_discover(const char *xml_path, const char *const *busids, int32_t num_busids,
                               dcp_node_topo_t *node_out);

const char *dcp_path_name(dcp_path_t path);
const char *dcp_nic_kind_name(dcp_nic_kind_t kind);

/* The fabric of a NIC, for people: "EFA", "InfiniBand", "RoCE", "Ethernet" (a plain NIC:
 * TCP) or "unknown" (an RDMA NIC whose link layer is not known). */
const char *dcp_nic_fabric(const dcp_nic_info_t *nic);

/* The best kind among the node's NICs (EFA, then InfiniBand, then TCP; DCP_NIC_ETH when it has
 * none): what engine choice goes by between nodes (transport/select.h). */
dcp_nic_kind_t dcp_node_nic_kind(const dcp_node_topo_t *node);

/* GPUs that use NIC k (the GPUs sharing it). */
int32_t dcp_node_nic_users(const dcp_node_topo_t *node, int32_t k);

#endif
