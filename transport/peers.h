/*
 * The peer table: what every rank of a job knows about every other, gathered once per job
 * over the bootstrap (as NCCL gathers one peer-info record per rank) and handed to engine
 * choice and engine creation: node identity (host name and boot id: containers of two machines
 * may share a host name, and the emulated hosts of one machine share a boot id), process (pid and
 * pid namespace: two ranks are the same process, or can see each other's pid, only when host and
 * namespace match), the GPU (CUDA ordinal and PCI bus id, filled in once the device is known), the
 * node's best NIC kind and network figures, and whether its UCX moves CUDA memory.
 */
#ifndef DCP_TRANSPORT_PEERS_H
#define DCP_TRANSPORT_PEERS_H

#include "include/dcp.h"
#include "transport/select.h"

#include <stdint.h>

/* One rank's record; the same layout on every rank (one build). */
typedef struct {
    char host[64];
    char boot[40]; /* the kernel's boot id (/proc/sys/kernel/random/boot_id), else the
                      machine id (/etc/machine-id), else "" */
    int64_t pid;
    uint64_t pidns;    /* inode of /proc/self/ns/pid, 0 unknown */
    int32_t nic;       /* best NIC kind of the node (dcp_nic_kind_t) */
    int32_t gpus;      /* GPUs hwloc sees on the node */
    int32_t nics;      /* the node's NICs in the cluster model's terms, 0 unknown
                          (dcp_node_model_nics) */
    double inter_gbps; /* per-device network figure of its node (its NICs summed), 0 unknown */
    double lat_us;
    uint64_t figures; /* digest of the node file this rank prices the job with, 0 none */
    int32_t ucx_cuda; /* its UCX moves CUDA device memory */
    int32_t device;   /* CUDA ordinal, -1: the CPU (set by dcp_peers_set_device) */
    char busid[32];   /* the GPU's PCI bus id, "" on the CPU */
} dcp_peer_t;

typedef struct {
    int32_t rank, size;
    dcp_peer_t *peer; /* [size] */
} dcp_peer_table_t;

/* This process's record: host, pid, namespace, hwloc's view of the node (a machine hwloc
 * cannot read is described as reaching its peers over TCP) and `ucx_cuda`, whether this
 * process's UCX moves device memory (its caller asks UCX, transport/ucx.h
 * dcp_ucx_supports_cuda; 0 on jobs that will never run it). */
void dcp_peer_describe_self(int ucx_cuda, dcp_peer_t *me);

/* The node part of a record: host name, and the boot id read from `boot_id_path` (NULL: the
 * kernel's, falling back to /etc/machine-id). */
void dcp_peer_identify(const char *boot_id_path, dcp_peer_t *me);

/* Collective: the table of every rank's record. On failure nothing is left to free. */
dcp_status_t dcp_peers_gather(const dcp_bootstrap_t *bs, const dcp_peer_t *me,
                              dcp_peer_table_t *table_out);

/* Collective, GPU jobs: completes the device column (ordinal and bus id of every rank). */
dcp_status_t dcp_peers_set_device(const dcp_bootstrap_t *bs, int32_t device, const char *busid,
                                  dcp_peer_table_t *table);

/* Rank r's place among the ranks of its host (0-based, in rank order). */
int32_t dcp_peers_local_index(const dcp_peer_table_t *t, int32_t r);

/* One node: the same host name and the same boot id. */
int dcp_peers_same_node(const dcp_peer_table_t *t, int32_t a, int32_t b);
/* Same host and pid namespace: the pid of one is meaningful to the other. */
int dcp_peers_same_pidns(const dcp_peer_table_t *t, int32_t a, int32_t b);

/* The link class between two ranks (their engine's class). */
dcp_link_class_t dcp_peers_link(const dcp_peer_table_t *t, int32_t a, int32_t b);

/* The NIC kind engine choice goes by: the best kind any node has (EFA, InfiniBand, TCP). */
dcp_nic_kind_t dcp_peers_nic(const dcp_peer_table_t *t);

/* DCP_ERR_UNSUPPORTED naming both ranks when two ranks of one host use one GPU. */
dcp_status_t dcp_peers_check_gpus(const dcp_peer_table_t *t, const char *engine);

void dcp_peers_free(dcp_peer_table_t *t);

#endif
