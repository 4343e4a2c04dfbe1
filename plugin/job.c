/*
 * Contexts of process ranks (one rank per process, any number of nodes): every rank
 * discovers its node with hwloc, the ranks allgather what they found over the bootstrap,
 * ranks with the same host name form a node, and the engine of each link class is chosen
 * from what the nodes have (transport/select.h).
 */
#include "plugin/job.h"

#include "include/base/error.h"
#include "kernels/device.h"
#include "topo/cluster.h"
#include "topo/node.h"
#include "topo/node_figures.h"
#include "transport/bootstrap.h"
#include "transport/nccl.h"
#include "transport/ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What each rank tells the others; the same layout on every rank (one build). */
typedef struct {
    char host[64];
    int32_t nic;       /* best NIC kind of the node (dcp_nic_kind_t) */
    int32_t gpus;      /* GPUs hwloc sees on the node */
    double inter_gbps; /* per-device network figures of its node, 0 unknown (no GPU) */
    double lat_us;
} rank_info_t;

static void describe_self(rank_info_t *me)
{
    memset(me, 0, sizeof *me);
    if (gethostname(me->host, sizeof me->host - 1) != 0) snprintf(me->host, sizeof me->host, "?");
    me->nic = DCP_NIC_ETH;
    dcp_node_topo_t *node = calloc(1, sizeof *node);
    /* a machine hwloc cannot read still runs, over TCP */
    if (node && dcp_node_discover(NULL, NULL, 0, node) == DCP_OK) {
        me->gpus = node->num_gpus;
        for (int32_t k = 0; k < node->num_nics; k++)
            if ((int32_t)node->nics[k].kind < me->nic) me->nic = node->nics[k].kind;
        dcp_perf_model_t perf = {0};
        dcp_node_figures(node, &perf);
        me->inter_gbps = perf.inter_gbps;
        me->lat_us = perf.lat_us;
    }
    free(node);
}

/* Nodes by host name; the cluster when ranks are placed node by node, evenly. */
static dcp_status_t build_cluster(dcp_job_t *job, const rank_info_t *all, int32_t n)
{
    /* runs of ranks on one host: each host one run, every run as long */
    int32_t nodes = 0, per = 0, blocked = 1;
    for (int32_t r = 0; r < n;) {
        int32_t e = r;
        while (e < n && !strcmp(all[e].host, all[r].host)) e++;
        for (int32_t q = 0; q < r; q++) blocked &= strcmp(all[q].host, all[r].host) != 0;
        if (nodes++ == 0)
            per = e - r;
        else
            blocked &= e - r == per;
        r = e;
    }
    if (!blocked) {
        snprintf(job->cluster_why, sizeof job->cluster_why,
                 "ranks are not placed node by node with the same count per node "
                 "(e.g. mpirun --map-by node:... places them round robin)");
        return DCP_OK;
    }
    DCP_CHECK(dcp_cluster_create(nodes, per, &job->cluster));
    /* the network figures where every node knows them: the slowest node's */
    double inter = 0, lat = 0;
    int known = 1;
    for (int32_t r = 0; r < n; r++) {
        known &= all[r].inter_gbps > 0;
        if (inter == 0 || all[r].inter_gbps < inter) inter = all[r].inter_gbps;
        if (all[r].lat_us > lat) lat = all[r].lat_us;
    }
    if (known) {
        job->cluster->perf.inter_gbps = inter;
        job->cluster->perf.lat_us = lat;
    }
    return DCP_OK;
}

static dcp_status_t attach(const dcp_context_config_t *config, dcp_job_t *job)
{
    const dcp_bootstrap_t *bs = config->bootstrap;
    if (!bs->allgather || bs->size < 1 || bs->rank < 0 || bs->rank >= bs->size)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.bootstrap: rank %d of %d, allgather %s",
                             bs->rank, bs->size, bs->allgather ? "set" : "NULL");
    rank_info_t me, *all = NULL;
    describe_self(&me);
    DCP_CHECK(dcp_calloc(&all, bs->size, sizeof *all, "job"));
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_bootstrap_allgather(bs, &me, all, sizeof me, "rank descriptions"), st, out);
    st = build_cluster(job, all, bs->size);
    /* the GPU: by the rank's place among the ranks of its host */
    int32_t local = 0;
    for (int32_t r = 0; r < bs->rank; r++) local += strcmp(all[r].host, me.host) == 0;
    if (st == DCP_OK) st = dcp_device_parse(config->device, local, "config.device", &job->device);
    /* host buffers (the CPU executor) or device buffers (NCCL is loaded at run time: a GPU
     * context without it fails when the engine is created) */
    const int gpu = job->device >= 0;
    dcp_engine_env_t env = {.nic = DCP_NIC_ETH,
                            .gpu_buffers = gpu,
                            .have_nccl = gpu,
                            .ucx_cuda = gpu && dcp_ucx_supports_cuda()};
    for (int32_t r = 0; r < bs->size; r++)
        if (all[r].nic < (int32_t)env.nic) env.nic = (dcp_nic_kind_t)all[r].nic;
    env.override[DCP_LINK_INTRA] =
        config->transport_intra ? config->transport_intra : getenv("DCP_TRANSPORT_INTRA");
    env.override[DCP_LINK_INTER] =
        config->transport_inter ? config->transport_inter : getenv("DCP_TRANSPORT_INTER");
    for (int l = 0; l < DCP_LINK_COUNT && st == DCP_OK; l++)
        st = dcp_engine_choose(&env, (dcp_link_class_t)l, &job->engine_kind[l], NULL);
    /* a context runs one engine: where the links' defaults differ (GPUs, UCX with CUDA
     * between nodes, NCCL in a node), NCCL serves both */
    if (st == DCP_OK && gpu && !env.override[DCP_LINK_INTRA] && !env.override[DCP_LINK_INTER])
        for (int l = 0; l < DCP_LINK_COUNT; l++)
            if (job->engine_kind[1 - l] == DCP_ENGINE_NCCL) job->engine_kind[l] = DCP_ENGINE_NCCL;
    const dcp_engine_kind_t kind = job->engine_kind[DCP_LINK_INTRA];
    if (st == DCP_OK && kind != job->engine_kind[DCP_LINK_INTER])
        st = dcp_set_error(DCP_ERR_UNSUPPORTED,
                           "transport: %s in a node and %s between nodes; a context of process "
                           "ranks runs one engine (give transport_intra and _inter the same)",
                           dcp_engine_kind_name(kind),
                           dcp_engine_kind_name(job->engine_kind[DCP_LINK_INTER]));
    if (st == DCP_OK && config->nccl_comm && kind != DCP_ENGINE_NCCL)
        st = dcp_set_error(DCP_ERR_INVALID_ARG,
                           "config.nccl_comm is set but the engine is %s (NCCL runs on GPU "
                           "contexts: config.device \"cuda\")",
                           dcp_engine_kind_name(kind));
    /* ranks may have been given different settings: all go on, or none */
    DCP_CHECK_GOTO(dcp_bootstrap_agree(bs, st, "device and engine choice"), st, out);
    if (kind == DCP_ENGINE_NCCL)
        st = dcp_nccl_engine_create(bs, job->device, config->nccl_comm, config->transfer_stream,
                                    &job->engine);
    else if (kind == DCP_ENGINE_UCX)
        st = dcp_ucx_engine_create(bs, &job->engine);
    else
        st = dcp_set_error(DCP_ERR_UNSUPPORTED, "transport %s: no such engine in this build",
                           dcp_engine_kind_name(kind));
out:
    free(all);
    return st;
}

dcp_status_t dcp_job_attach(const dcp_context_config_t *config, dcp_job_t *job_out)
{
    dcp_job_t job = {.device = -1};
    const dcp_status_t st = attach(config, &job);
    if (st != DCP_OK) {
        dcp_cluster_destroy(job.cluster);
        return st;
    }
    *job_out = job;
    return DCP_OK;
}
