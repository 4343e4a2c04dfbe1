/* What GPUDirect RDMA needs on a node (an RDMA NIC reading and writing GPU memory without a
 * copy through host memory), read from the running system: a way to register GPU memory with
 * the NIC - NVIDIA's peer-memory module (nvidia-peermem, formerly nv_peer_mem) or dma-buf
 * (Linux 5.12 or later with NVIDIA's open kernel modules) - and GDRCopy's driver, which NCCL
 * and UCX use for small copies to and from GPU memory. Plain data. */
#ifndef DCP_TOPO_GDR_H
#define DCP_TOPO_GDR_H

typedef struct {
    int nvidia;      /* an NVIDIA kernel driver is loaded (/proc/driver/nvidia/version) */
    int open_module; /* it is the open kernel module ("Open Kernel Module" in that file) */
    int peermem;     /* nvidia_peermem (or nv_peer_mem) is loaded (/sys/module/...) */
    int dmabuf;      /* dma-buf registration: kernel >= 5.12 and the open module */
    int gdrcopy;     /* GDRCopy's driver: /dev/gdrdrv or /sys/module/gdrdrv */
    char kernel[64]; /* the kernel release (/proc/sys/kernel/osrelease), "" unknown */
} dcp_gdr_t;

/* Reads the prerequisites under `root` (NULL or "": the running system; tests pass a folder
 * shaped like one). Never fails: what cannot be read counts as absent. */
void dcp_gdr_probe(const char *root, dcp_gdr_t *out);

/* 1 when GPU memory can be registered with an RDMA NIC (peermem or dma-buf). */
static inline int dcp_gdr_possible(const dcp_gdr_t *g)
{
    return g->peermem || g->dmabuf;
}

#endif
