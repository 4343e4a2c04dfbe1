/*
 * Contexts of process ranks (one rank per process, any number of nodes): every rank
 * describes itself (host, process, hwloc's view of its node, what its UCX moves), the
 * ranks gather the peer table once over the bootstrap, ranks with the same host name and
 * boot id form a node, the engine of each link class is chosen from the table
 * (transport/select.h), and where the classes in use get different engines a routing engine
 * holds them all.
 */
#include "plugin/job.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/log.h"
#include "kernels/device.h"
#include "plugin/hybrid.h"
#include "topo/cluster.h"
#include "topo/node.h"
#include "topo/node_figures.h"
#include "topo/node_file.h"
#include "transport/bootstrap.h"
#include "transport/nccl.h"
#include "transport/peers.h"
#include "transport/route.h"
#include "transport/staged.h"
#include "transport/ucx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A node file's figures, as this rank loaded them (config.node_file, $DCP_NODE_FILE). */
typedef struct {
    const char *path, *field; /* NULL: none */
    int32_t devs, nics;
    dcp_perf_model_t perf;
} node_file_t;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

/* The figures' digest, field by field (no padding), never 0. */
static uint64_t figures_digest(const node_file_t *f)
{
    const dcp_perf_model_t *m = &f->perf;
    const double v[6] = {m->intra_gbps,  m->inter_gbps, m->lat_us,
                         m->peak_tflops, m->hbm_gbps,   m->bwd_speed};
    uint64_t h = fnv(14695981039346656037ull, &f->devs, sizeof f->devs);
    h = fnv(h, &f->nics, sizeof f->nics);
    h = fnv(h, v, sizeof v);
    h = fnv(h, &m->eff_n, sizeof m->eff_n);
    h = fnv(h, m->eff_tokens, (size_t)m->eff_n * sizeof *m->eff_tokens);
    h = fnv(h, m->eff_value, (size_t)m->eff_n * sizeof *m->eff_value);
    return h ? h : 1;
}

static dcp_status_t load_node_file(const dcp_context_config_t *config, node_file_t *f)
{
    memset(f, 0, sizeof *f);
    f->path = config->node_file;
    f->field = config->node_file ? "config.node_file" : "$DCP_NODE_FILE";
    if (!f->path) DCP_CHECK(dcp_env_str(DCP_ENV_NODE_FILE, &f->path)); /* "" is refused there */
    if (!f->path) return DCP_OK;
    if (!f->path[0]) return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is empty", f->field);
    dcp_perf_model_default(&f->perf);
    const dcp_status_t st = dcp_node_file_read(f->path, &f->devs, &f->nics, &f->perf);
    if (st != DCP_OK) {
        char why[400];
        dcp_error_save(why, sizeof why);
        return dcp_set_error(st, "%s: %s", f->field, why);
    }
    return DCP_OK;
}

/* The node file's figures in place of hwloc's, once every rank is known to have loaded the
 * same and the file's devices are the job's ranks per node. */
static dcp_status_t apply_node_file(dcp_job_t *job, const dcp_peer_table_t *t, const node_file_t *f)
{
    for (int32_t r = 1; r < t->size; r++)
        if (t->peer[r].figures != t->peer[0].figures)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "%s: ranks price the job differently: rank 0 with %s, rank %d "
                                 "with %s (every rank must load the same node file)",
                                 f->path ? f->field : "config.node_file",
                                 t->peer[0].figures ? "a node file's figures" : "hwloc's", r,
                                 t->peer[r].figures ? "a node file's figures" : "hwloc's");
    if (!f->path) return DCP_OK;
    if (!job->cluster)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s '%s': no cluster to price: %s", f->field,
                             f->path, job->cluster_why);
    if (f->devs != job->cluster->devs_per_node)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "%s '%s': devices %d, but this job has %d ranks per node (%d "
                             "nodes): the file describes another machine",
                             f->field, f->path, f->devs, job->cluster->devs_per_node,
                             job->cluster->num_nodes);
    char field[300];
    snprintf(field, sizeof field, "%s '%.200s'", f->field, f->path);
    DCP_CHECK(dcp_cluster_set_nics(job->cluster, f->nics, field));
    job->cluster->perf = f->perf;
    return DCP_OK;
}

/* Nodes by identity (host name and boot id); the cluster when ranks are placed node by node,
 * evenly. */
static dcp_status_t build_cluster(dcp_job_t *job, const dcp_peer_table_t *t)
{
    const dcp_peer_t *all = t->peer;
    const int32_t n = t->size;
    /* runs of ranks on one node: each node one run, every run as long */
    int32_t nodes = 0, per = 0, blocked = 1;
    for (int32_t r = 0; r < n;) {
        int32_t e = r;
        while (e < n && dcp_peers_same_node(t, e, r)) e++;
        for (int32_t q = 0; q < r; q++) blocked &= !dcp_peers_same_node(t, q, r);
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
    /* the network figures where every node knows them: the slowest node's; NICs where every
     * node has the same */
    double inter = 0, lat = 0;
    int known = 1, same_nics = all[0].nics > 0;
    for (int32_t r = 0; r < n; r++) {
        known &= all[r].inter_gbps > 0;
        same_nics &= all[r].nics == all[0].nics;
        if (inter == 0 || all[r].inter_gbps < inter) inter = all[r].inter_gbps;
        if (all[r].lat_us > lat) lat = all[r].lat_us;
    }
    if (known) {
        job->cluster->perf.inter_gbps = inter;
        job->cluster->perf.lat_us = lat;
    }
    /* (hwloc's NICs fit only a job with a rank per GPU; otherwise one per device) */
    if (same_nics && all[0].gpus == per)
        (void)dcp_cluster_set_nics(job->cluster, all[0].nics, "discovery"); /* a regular count */
    return DCP_OK;
}

dcp_status_t dcp_job_choose_engines(const dcp_peer_table_t *t, int gpu, const char *intra,
                                    const char *inter, dcp_engine_kind_t kind_out[DCP_LINK_COUNT],
                                    const char *why_out[DCP_LINK_COUNT])
{
    int ucx_cuda = 1;
    for (int32_t r = 0; r < t->size; r++) ucx_cuda &= t->peer[r].ucx_cuda;
    /* host buffers (the CPU executor) or device buffers (NCCL is loaded at run time: a GPU
     * context without it fails when the engine is created) */
    dcp_engine_env_t env = {
        .nic = dcp_peers_nic(t), .gpu_buffers = gpu, .have_nccl = gpu, .ucx_cuda = gpu && ucx_cuda};
    env.override[DCP_LINK_INTRA] = intra;
    env.override[DCP_LINK_INTER] = inter;
    if (!intra) DCP_CHECK(dcp_env_str(DCP_ENV_TRANSPORT_INTRA, &env.override[DCP_LINK_INTRA]));
    if (!inter) DCP_CHECK(dcp_env_str(DCP_ENV_TRANSPORT_INTER, &env.override[DCP_LINK_INTER]));
    dcp_engine_kind_t kind[DCP_LINK_COUNT];
    const char *why[DCP_LINK_COUNT];
    for (int l = 0; l < DCP_LINK_COUNT; l++)
        DCP_CHECK(dcp_engine_choose(&env, (dcp_link_class_t)l, &kind[l], &why[l]));
    for (int l = 0; l < DCP_LINK_COUNT; l++) {
        kind_out[l] = kind[l];
        if (why_out) why_out[l] = why[l];
    }
    return DCP_OK;
}

dcp_status_t dcp_job_engines_for_node(const dcp_node_topo_t *node,
                                      dcp_engine_kind_t kind_out[DCP_LINK_COUNT],
                                      const char *why_out[DCP_LINK_COUNT], int *ucx_cuda_out)
{
    dcp_peer_t me;
    memset(&me, 0, sizeof me);
    me.nic = dcp_node_nic_kind(node);
    me.gpus = node->num_gpus;
    me.ucx_cuda = dcp_ucx_supports_cuda();
    const dcp_peer_table_t t = {0, 1, &me};
    DCP_CHECK(dcp_job_choose_engines(&t, node->num_gpus > 0, NULL, NULL, kind_out, why_out));
    if (ucx_cuda_out) *ucx_cuda_out = me.ucx_cuda;
    return DCP_OK;
}

/* The engine of each link class, and NCCL's communicator lent only to NCCL. */
static dcp_status_t choose(const dcp_context_config_t *config, const dcp_peer_table_t *t,
                           dcp_job_t *job)
{
    const char *why[DCP_LINK_COUNT];
    DCP_CHECK(dcp_job_choose_engines(t, job->device >= 0, config->transport_intra,
                                     config->transport_inter, job->engine_kind, why));
    for (int l = 0; l < DCP_LINK_COUNT; l++)
        dcp_log(DCP_LOG_INFO, DCP_LOG_INIT, t->rank, "%s links: engine %s (%s)",
                l == DCP_LINK_INTRA ? "intra-node" : "inter-node",
                dcp_engine_kind_name(job->engine_kind[l]), why[l]);
    const int nccl =
        job->engine_kind[0] == DCP_ENGINE_NCCL || job->engine_kind[1] == DCP_ENGINE_NCCL;
    if (config->nccl_comm && !nccl)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "config.nccl_comm is set but no link uses NCCL (NCCL runs on GPU "
                             "contexts: config.device \"cuda\")");
    return DCP_OK;
}

/* Staging for device memory over a UCX without CUDA: the device table's page-locked host
 * memory and copies on a stream of the job's GPU. */
typedef struct {
    const dcp_device_t *dev;
    void *stream;
} stager_t;

static void *stage_alloc(void *user, size_t bytes)
{
    return ((stager_t *)user)->dev->host_alloc(bytes);
}
static void stage_free(void *user, void *ptr)
{
    ((stager_t *)user)->dev->host_free(ptr);
}
static dcp_status_t stage_copy(void *user, void *dst, const void *src, size_t bytes)
{
    const stager_t *s = user;
    return s->dev->copy(dst, src, bytes, s->stream);
}
static dcp_status_t stage_sync(void *user)
{
    const stager_t *s = user;
    return s->dev->stream_sync(s->stream);
}
static void stage_release(void *user)
{
    stager_t *s = user;
    if (s->stream) s->dev->stream_destroy(s->stream);
    free(s);
}

dcp_status_t dcp_job_staged_engine(int32_t device, dcp_engine_t *ucx, dcp_engine_t **out)
{
    stager_t *s = NULL;
    dcp_status_t st = dcp_calloc(&s, 1, sizeof *s, "job: stager");
    if (st == DCP_OK) {
        s->dev = dcp_device_of(device);
        st = s->dev->stream_create(device, &s->stream);
    }
    if (st != DCP_OK) {
        if (s) stage_release(s);
        dcp_engine_destroy(ucx);
        return st;
    }
    const dcp_stager_t stager = {stage_alloc, stage_free, stage_copy, stage_sync, stage_release, s};
    return dcp_staged_engine_create(ucx, &stager, out);
}

static dcp_status_t create_engine(const dcp_context_config_t *config, const dcp_peer_table_t *t,
                                  dcp_engine_kind_t kind, dcp_job_t *job, dcp_engine_t **out)
{
    const dcp_bootstrap_t *bs = config->bootstrap;
    if (kind == DCP_ENGINE_NCCL)
        return dcp_nccl_engine_create_on(bs, t, job->device, config->nccl_comm,
                                         config->transfer_stream, job->timeout_s, out);
    int ucx_cuda = 1;
    for (int32_t r = 0; r < t->size; r++) ucx_cuda &= t->peer[r].ucx_cuda;
    if (kind == DCP_ENGINE_UCX && job->device >= 0 && !ucx_cuda) {
        /* device memory over a UCX that cannot move it: staged through host memory */
        dcp_engine_t *ucx = NULL;
        DCP_CHECK(dcp_ucx_engine_create_on(bs, t, &ucx));
        return dcp_job_staged_engine(job->device, ucx, out);
    }
    if (kind == DCP_ENGINE_UCX && job->device >= 0) {
        /* device memory moved by UCX itself: its launches ordered by the ops' ready events,
         * so that a job of NCCL and UCX legs queues its launches without a host wait */
        DCP_CHECK(dcp_ucx_engine_create_on(bs, t, out));
        dcp_ucx_engine_order_by(*out, dcp_device_of(job->device)->event_query);
        return DCP_OK;
    }
    if (kind == DCP_ENGINE_UCX) return dcp_ucx_engine_create_on(bs, t, out);
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "transport %s: no such engine for process ranks",
                         dcp_engine_kind_name(kind));
}

/* Link classes of a job: the two of transport/select.h and, in a hybrid job, the ranks of
 * one process (threads, the in-process engine over the hybrid's hub). */
enum { LINK_PROCESS = DCP_LINK_COUNT, LINK_CLASSES };

/* `threads`: ranks per process of a hybrid job (global rank = process x threads + local),
 * 0 otherwise. */
static int link_class(const dcp_peer_table_t *t, int32_t threads, int32_t a, int32_t b)
{
    if (threads > 0 && a / threads == b / threads) return LINK_PROCESS;
    return dcp_peers_link(t, a, b);
}

static const char *const labels[LINK_CLASSES] = {"intra-node links", "inter-node links",
                                                 "threads of this process"};

/* One engine per link class in use, behind a routing engine when there are several. Every
 * rank creates the same engines in the same order (engine creation is collective): the
 * classes in use are those of the whole job. */
static dcp_status_t create_engines(const dcp_context_config_t *config, const dcp_peer_table_t *t,
                                   dcp_job_t *job)
{
    dcp_inproc_hub_t *hub = NULL;
    int32_t local = 0;
    const int hybrid = dcp_hybrid_of(config->bootstrap, &hub, &local);
    const int32_t threads = hybrid ? dcp_inproc_hub_size(hub) : 0;
    if (hybrid && job->device >= 0)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "config.device: a job of processes x threads runs on the CPU");
    int used[LINK_CLASSES] = {0}, any = 0;
    for (int32_t a = 0; a < t->size; a++)
        for (int32_t b = a + 1; b < t->size; b++) used[link_class(t, threads, a, b)] = any = 1;
    if (!any) used[DCP_LINK_INTRA] = 1; /* one rank */
    dcp_engine_t *engines[LINK_CLASSES] = {NULL};
    int32_t index[LINK_CLASSES] = {-1, -1, -1}, n = 0;
    dcp_status_t st = DCP_OK;
    for (int l = 0; l < LINK_CLASSES && st == DCP_OK; l++) {
        if (!used[l]) continue;
        if (l == DCP_LINK_INTER && index[DCP_LINK_INTRA] >= 0 &&
            job->engine_kind[DCP_LINK_INTER] == job->engine_kind[DCP_LINK_INTRA]) {
            index[l] = index[DCP_LINK_INTRA]; /* one engine serves both */
            continue;
        }
        st = l == LINK_PROCESS ? dcp_inproc_engine_create(hub, local, &engines[n])
                               : create_engine(config, t, job->engine_kind[l], job, &engines[n]);
        if (st == DCP_OK) index[l] = n++;
    }
    if (st != DCP_OK || n == 1) {
        for (int32_t i = 0; st != DCP_OK && i < n; i++) dcp_engine_destroy(engines[i]);
        if (st == DCP_OK && !hybrid) job->engine = engines[0];
        if (st == DCP_OK && !hybrid) return DCP_OK;
        if (st != DCP_OK) return st;
    }
    uint8_t *of = NULL;
    int32_t *peer = NULL;
    st = dcp_calloc(&of, t->size, 1, "job");
    if (st == DCP_OK) st = dcp_calloc(&peer, t->size, sizeof *peer, "job");
    for (int32_t p = 0; st == DCP_OK && p < t->size; p++) {
        const int l = p == t->rank ? -1 : link_class(t, threads, t->rank, p);
        of[p] = l < 0 ? 0 : (uint8_t)index[l];
        /* ranks of one process are consecutive: the hub counts from the process's first */
        peer[p] = l == LINK_PROCESS ? p - (t->rank - local) : p;
    }
    if (st == DCP_OK)
        st = dcp_route_engine_create(t->rank, t->size, n, engines, labels, of, peer, &job->engine);
    else
        for (int32_t i = 0; i < n; i++) dcp_engine_destroy(engines[i]);
    free(of);
    free(peer);
    return st;
}

static dcp_status_t attach(const dcp_context_config_t *config, dcp_job_t *job)
{
    const dcp_bootstrap_t *bs = config->bootstrap;
    if (!bs->allgather || bs->size < 1 || bs->rank < 0 || bs->rank >= bs->size)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.bootstrap: rank %d of %d, allgather %s",
                             bs->rank, bs->size, bs->allgather ? "set" : "NULL");
    dcp_peer_t me;
    dcp_peer_describe_self(dcp_ucx_supports_cuda(), &me);
    /* a rank whose node file fails still joins the gather, and fails at the agreement below */
    node_file_t file;
    const dcp_status_t st_file = load_node_file(config, &file);
    if (st_file == DCP_OK && file.path) me.figures = figures_digest(&file);
    DCP_CHECK(dcp_peers_gather(bs, &me, &job->peers));
    dcp_status_t st = st_file;
    if (st == DCP_OK) st = build_cluster(job, &job->peers);
    if (st == DCP_OK) st = apply_node_file(job, &job->peers, &file);
    /* the GPU: by the rank's place among the ranks of its host */
    if (st == DCP_OK)
        st = dcp_device_parse(config->device, dcp_peers_local_index(&job->peers, bs->rank),
                              "config.device", &job->device);
    if (st == DCP_OK) st = choose(config, &job->peers, job);
    /* ranks may have been given different settings: all go on, or none */
    DCP_CHECK(dcp_bootstrap_agree(bs, st, "device and engine choice"));
    if (job->device >= 0) { /* the GPU column of the table: NCCL's one-rank-per-GPU check */
        char busid[32] = "";
        st = dcp_nccl_gpu_busid(job->device, busid, sizeof busid);
        DCP_CHECK(dcp_bootstrap_agree(bs, st, "GPU bus id"));
        DCP_CHECK(dcp_peers_set_device(bs, job->device, busid, &job->peers));
    }
    return create_engines(config, &job->peers, job);
}

dcp_status_t dcp_job_attach(const dcp_context_config_t *config, double timeout_s,
                            dcp_job_t *job_out)
{
    dcp_job_t job = {.device = -1, .timeout_s = timeout_s};
    const dcp_status_t st = attach(config, &job);
    if (st != DCP_OK) {
        dcp_cluster_destroy(job.cluster);
        dcp_peers_free(&job.peers);
        return st;
    }
    *job_out = job;
    return DCP_OK;
}
