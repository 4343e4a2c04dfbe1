/* Which NICs a local rank should use and the environment that pins them, from a discovered
 * node (dcp-topo): local rank r on GPU r (CUDA_DEVICE_ORDER=PCI_BUS_ID, or the --busids
 * order), its NICs those discovery gave that GPU.
 *   UCX (any fabric)       UCX_NET_DEVICES=dev:1,...   (netdev names for plain Ethernet)
 *   NCCL, InfiniBand/RoCE  NCCL_IB_HCA==dev:1,...      ('=': exact names, NCCL's syntax)
 *   NCCL, EFA              nothing per rank: aws-ofi-nccl pairs each GPU with its nearest
 *                          NICs itself; FI_PROVIDER=efa for the whole job
 *   NCCL, Ethernet         NCCL_SOCKET_IFNAME=netdev,...
 */
#ifndef DCPT_CLI_PINNING_H
#define DCPT_CLI_PINNING_H

#include "topo/node.h"

#define DCPT_PIN_CHARS 512

typedef struct {
    char nics[DCPT_PIN_CHARS]; /* "mlx5_0" or "rdmap79s0,rdmap80s0,..." ("" none) */
    char ucx[DCPT_PIN_CHARS];  /* "UCX_NET_DEVICES=..." ("" none) */
    char nccl[DCPT_PIN_CHARS]; /* "NCCL_IB_HCA==..." or "NCCL_SOCKET_IFNAME=..." ("" none) */
    const char *fabric;        /* of its first NIC (dcp_nic_fabric), "-" none */
} dcpt_pin_t;

/* GPU g's pinning; its NICs' fabric decides the NCCL line. */
void dcpt_pin_gpu(const dcp_node_topo_t *n, int32_t g, dcpt_pin_t *out);

/* The job-wide lines of a node whose GPUs use EFA (FI_PROVIDER=efa), else "". */
const char *dcpt_pin_job_env(const dcp_node_topo_t *n);

#endif
