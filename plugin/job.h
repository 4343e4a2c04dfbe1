/* The engine side of a context of process ranks (one rank per process, any number of
 * nodes): the peer table gathered over the bootstrap, the cluster the ranks form, the place
 * of computation and the engine of each link class (a routing engine where they differ). */
#ifndef DCP_PLUGIN_JOB_H
#define DCP_PLUGIN_JOB_H

#include "include/dcp.h"
#include "topo/node.h"
#include "transport/engine.h"
#include "transport/peers.h"
#include "transport/select.h"

typedef struct {
    dcp_peer_table_t peers; /* gathered once at attach */
    dcp_engine_t *engine;   /* one engine, or a routing engine over one per link class */
    dcp_engine_kind_t engine_kind[DCP_LINK_COUNT];
    dcp_cluster_t *cluster; /* when the ranks are placed node by node, evenly */
    char cluster_why[160];  /* why there is none */
    int32_t device;         /* CUDA ordinal, -1: the CPU */
    double timeout_s;       /* the context's (engine set-up that may wait, e.g. NCCL's) */
} dcp_job_t;

/* Collective over config->bootstrap: all ranks succeed or all fail. On failure nothing is
 * left to free. timeout_s: the context's timeout. */
dcp_status_t dcp_job_attach(const dcp_context_config_t *config, double timeout_s,
                            dcp_job_t *job_out);

/* The engine of each link class of a job (transport/select.h's defaults), from its peer table:
 * blocks in device memory when `gpu` (NCCL offered then: a GPU context without it fails when
 * the engine is created), the best NIC kind any node has, UCX moving device memory only where
 * every rank's does; the overrides `intra` and `inter` (engine names; NULL:
 * $DCP_TRANSPORT_INTRA, $DCP_TRANSPORT_INTER, else none). why_out (may be NULL): a line on
 * each. A job's contexts choose with it, and dcp-topo shows it (dcp_job_engines_for_node). */
dcp_status_t dcp_job_choose_engines(const dcp_peer_table_t *t, int gpu, const char *intra,
                                    const char *inter, dcp_engine_kind_t kind_out[DCP_LINK_COUNT],
                                    const char *why_out[DCP_LINK_COUNT]);

/* The same for a job of nodes like `node`: a rank on each of its GPUs (the CPU where it has
 * none), its best NIC kind between the nodes, this process's UCX (*ucx_cuda_out, may be NULL:
 * whether it moves device memory). */
dcp_status_t dcp_job_engines_for_node(const dcp_node_topo_t *node,
                                      dcp_engine_kind_t kind_out[DCP_LINK_COUNT],
                                      const char *why_out[DCP_LINK_COUNT], int *ucx_cuda_out);

/* Device memory of GPU `device` over `ucx`, an engine of host memory: the staging engine
 * (transport/staged.h) with the device table's page-locked memory and copies on a stream of
 * that GPU. Takes `ucx` (released here on failure). */
dcp_status_t dcp_job_staged_engine(int32_t device, dcp_engine_t *ucx, dcp_engine_t **out);

#endif
