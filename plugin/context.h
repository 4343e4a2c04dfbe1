/* The runtime objects behind dcp_group_t and dcp_context_t. */
#ifndef DCP_PLUGIN_CONTEXT_H
#define DCP_PLUGIN_CONTEXT_H

#include "include/base/descr.h"
#include "kernels/kernel.h"
#include "plugin/device_plan.h"
#include "transport/engine.h"
#include "transport/inproc.h"
#include "transport/select.h"

struct dcp_group {
    dcp_inproc_hub_t *hub;
};

struct dcp_context {
    int32_t rank;
    dcp_engine_t *engine;
    dcp_engine_kind_t engine_kind[DCP_LINK_COUNT];
    dcp_cluster_t *cluster; /* process ranks: the cluster they form, when it is regular */
    char cluster_why[160];  /* why there is none */
    const dcp_kernels_t *kernels;
    int32_t device;    /* CUDA device ordinal; -1: the CPU */
    void *stream;      /* GPU: kernels and buffer set-up */
    void *xfer_stream; /* GPU: the in-process block copies this rank performs */
    char *sync_dev;    /* GPU: the barrier's two bytes (NCCL moves device memory only) */
    dcp_dev_plan_t dev_plan;
    double timeout_s;
    /* work buffers, grown to the largest plan run so far and reused */
    void *work[DCP_BUF_COUNT];
    size_t work_cap[DCP_BUF_COUNT];
    uint32_t barriers; /* barriers so far: each one's tags differ from the last's */
    /* scratch for launches */
    dcp_xfer_op_t *ops;
    int64_t ops_cap;
};

/* Default per-wait timeout: $DCP_TIMEOUT_S when set to a positive number, else 60 s. */
double dcp_context_default_timeout(void);

/* The engine side of a context of process ranks (plugin/job.c): gathers every rank's node
 * over the bootstrap, builds the cluster, chooses and creates the engines. */
dcp_status_t dcp_job_attach(dcp_context_t *ctx, const dcp_context_config_t *config);

/* Makes work buffer b hold at least `bytes` (registered with the engine), in host memory or
 * on the context's GPU. */
dcp_status_t dcp_context_reserve(dcp_context_t *ctx, int32_t b, size_t bytes);

/* In-process ranks: a group and one context per rank on `device` (dcp_context_config_t),
 * created together and destroyed together (destroy accepts a partial set). */
dcp_status_t dcp_inproc_contexts_create(int32_t n, double timeout_s, const char *device,
                                        dcp_group_t **group_out, dcp_context_t ***ctx_out);
void dcp_inproc_contexts_destroy(int32_t n, dcp_group_t *group, dcp_context_t **ctx);

/* Runs ctx[r] on io[r] for every rank, rank r > 0 on its own thread; the first failure of
 * any rank (its own error preferred to the PEER/TIMEOUT it caused in the others). */
dcp_status_t dcp_forward_group(dcp_context_t *const *ctx, int32_t n, const dcp_plan_t *plan,
                               const dcp_tensors_t *io);
dcp_status_t dcp_backward_group(dcp_context_t *const *ctx, int32_t n, const dcp_plan_t *plan,
                                const dcp_grad_tensors_t *io);

/* The context's place of computation from config->device and the rank: -1 for the CPU, a
 * CUDA ordinal otherwise. `local_rank` picks the GPU for "cuda". */
dcp_status_t dcp_context_parse_device(const char *device, int32_t local_rank, int32_t *device_out);

#endif
