/* The engine side of a context of process ranks (one rank per process, any number of
 * nodes): the peer table gathered over the bootstrap, the cluster the ranks form, the place
 * of computation and the engine of each link class (a routing engine where they differ). */
#ifndef DCP_PLUGIN_JOB_H
#define DCP_PLUGIN_JOB_H

#include "include/dcp.h"
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

/* Device memory of GPU `device` over `ucx`, an engine of host memory: the staging engine
 * (transport/staged.h) with the device table's page-locked memory and copies on a stream of
 * that GPU. Takes `ucx` (released here on failure). */
dcp_status_t dcp_job_staged_engine(int32_t device, dcp_engine_t *ucx, dcp_engine_t **out);

#endif
