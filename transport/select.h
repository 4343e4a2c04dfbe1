/*
 * Which engine moves blocks over which link. Defaults, per link class:
 *   ranks that are threads of one process          in-process
 *   same node, GPU buffers                         NCCL (NVLink/PCIe P2P; no CUDA IPC engine yet)
 *   same node, host buffers                        UCX (shared memory)
 *   other node, GPU buffers, EFA                   NCCL (its EFA plugin; UCX 1.13 has no EFA)
 *   other node, GPU buffers, UCX without CUDA      NCCL
 *   other node, otherwise (InfiniBand, RoCE, TCP)  UCX
 * A choice can be overridden per link class (the context config, or DCP_TRANSPORT_INTRA /
 * DCP_TRANSPORT_INTER), and is refused when the engine cannot move those buffers (UCX
 * without CUDA moves GPU buffers staged through host memory: transport/staged.h).
 */
#ifndef DCP_TRANSPORT_SELECT_H
#define DCP_TRANSPORT_SELECT_H

#include "include/dcp.h"
#include "topo/node.h"

typedef enum {
    DCP_ENGINE_INPROC = 0,
    DCP_ENGINE_UCX = 1,
    DCP_ENGINE_NCCL = 2,
    DCP_ENGINE_KIND_COUNT = 3
} dcp_engine_kind_t;

typedef enum { DCP_LINK_INTRA = 0, DCP_LINK_INTER = 1, DCP_LINK_COUNT = 2 } dcp_link_class_t;

typedef struct {
    int threads;                          /* the ranks are threads of one process */
    int gpu_buffers;                      /* blocks live in device memory */
    int have_nccl;                        /* NCCL is offered by this build and machine */
    int ucx_cuda;                         /* UCX moves device memory (built with CUDA) */
    dcp_nic_kind_t nic;                   /* the best NIC kind between nodes */
    const char *override[DCP_LINK_COUNT]; /* engine names, NULL for the default */
} dcp_engine_env_t;

/* The engine for a link class, and a one-line reason. */
dcp_status_t dcp_engine_choose(const dcp_engine_env_t *env, dcp_link_class_t link,
                               dcp_engine_kind_t *kind_out, const char **why_out);

const char *dcp_engine_kind_name(dcp_engine_kind_t kind);
dcp_status_t dcp_engine_kind_parse(const char *name, dcp_engine_kind_t *kind_out);

#endif
