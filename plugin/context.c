/* dcp_context_t: one rank's engine endpoint, kernels and reusable work buffers. */
#include "plugin/context.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/log.h"
#include "include/base/test_hook.h"
#include "include/base/timeout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dcp_status_t dcp_context_default_timeout(double *timeout_s_out)
{
    return dcp_env_seconds(DCP_ENV_TIMEOUT_S, timeout_s_out);
}

/* Streams are lent to CUDA contexts only. */
static dcp_status_t check_streams(const dcp_context_config_t *config, int32_t device)
{
    if ((config->compute_stream || config->transfer_stream) && dcp_device_of(device)->host_memory)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "config.%s is set on a CPU context (streams are lent to CUDA "
                             "contexts)",
                             config->compute_stream ? "compute_stream" : "transfer_stream");
    return DCP_OK;
}

/* Threads of one process: the in-process engine over the group's hub, on every link. */
static dcp_status_t attach_group(dcp_context_t *ctx, const dcp_context_config_t *config)
{
    const char *names[DCP_LINK_COUNT] = {config->transport_intra, config->transport_inter};
    for (int l = 0; l < DCP_LINK_COUNT; l++) {
        const dcp_engine_env_t env = {.threads = 1, .override = {names[0], names[1]}};
        const char *why = NULL;
        DCP_CHECK(dcp_engine_choose(&env, (dcp_link_class_t)l, &ctx->engine_kind[l], &why));
        dcp_log(DCP_LOG_INFO, DCP_LOG_INIT, config->rank, "%s links: engine %s (%s)",
                l == DCP_LINK_INTRA ? "intra-node" : "inter-node",
                dcp_engine_kind_name(ctx->engine_kind[l]), why);
    }
    if (config->nccl_comm)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "config.nccl_comm is set on in-process ranks (they copy blocks "
                             "between themselves; NCCL serves process ranks)");
    if (config->node_file)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "config.node_file is set on in-process ranks (they plan with the "
                             "caller's cluster: name the file in its spec, \"Nx@%.200s\")",
                             config->node_file);
    snprintf(ctx->cluster_why, sizeof ctx->cluster_why,
             "the ranks are threads: plan with a cluster of the caller's choosing");
    DCP_CHECK(dcp_device_parse(config->device, config->rank, "config.device", &ctx->device));
    /* before the engine: a rank refused here has not joined its peers */
    DCP_CHECK(check_streams(config, ctx->device));
    return dcp_inproc_engine_create(config->group->hub, config->rank, &ctx->engine);
}

/* Process ranks: the job's engine, cluster and device. */
static dcp_status_t attach_job(dcp_context_t *ctx, const dcp_context_config_t *config)
{
    dcp_job_t job;
    DCP_CHECK(dcp_job_attach(config, ctx->timeout_s, &job));
    ctx->engine = job.engine;
    ctx->peers = job.peers;
    memcpy(ctx->engine_kind, job.engine_kind, sizeof ctx->engine_kind);
    ctx->cluster = job.cluster;
    memcpy(ctx->cluster_why, job.cluster_why, sizeof ctx->cluster_why);
    ctx->device = job.device;
    return DCP_OK;
}

/* In-process copies of ranks on GPUs: queued on the copying rank's transfer stream after
 * both sides' ready events, the done events recorded after them. Between two GPUs (whose
 * events a stream of one cannot record), and for ops without events (the barrier's), the
 * copy is finished before it returns: the done events keep an older record, which a wait
 * passes at once. */
static dcp_status_t mover_copy(void *user, const dcp_xfer_op_t *send, const dcp_xfer_op_t *recv,
                               int same_device)
{
    const dcp_context_t *ctx = user;
    const dcp_device_t *dev = ctx->dev;
    void *s = ctx->xfer_stream;
    if (send->ready) DCP_CHECK(dev->stream_wait(s, send->ready));
    if (recv->ready) DCP_CHECK(dev->stream_wait(s, recv->ready));
    DCP_CHECK(dev->copy(recv->ptr, send->ptr, send->bytes, s));
    const int ordered = same_device && send->done && recv->done;
    if (!ordered) DCP_TEST_COUNT(DCP_COUNT_HOST_SYNC);
    if (!ordered) return dev->stream_sync(s);
    DCP_CHECK(dev->event_record(send->done, s));
    return dev->event_record(recv->done, s);
}

static dcp_status_t mover_order(void *user, void *stream, void *done)
{
    return ((const dcp_context_t *)user)->dev->stream_wait(stream, done);
}

/* A context on a GPU: its streams (the caller's where lent), the events that order them with
 * the caller's stream, the barrier's bytes, and in-process copies through a mover. */
static dcp_status_t attach_device(dcp_context_t *ctx, const dcp_context_config_t *config)
{
    const dcp_device_t *dev = ctx->dev;
    DCP_CHECK(dev->set_device(ctx->device));
    ctx->stream = config->compute_stream;
    ctx->xfer_stream = config->transfer_stream;
    ctx->owns_stream = !ctx->stream;
    ctx->owns_xfer_stream = !ctx->xfer_stream;
    if (ctx->owns_stream) DCP_CHECK(dev->stream_create(ctx->device, &ctx->stream));
    if (ctx->owns_xfer_stream) DCP_CHECK(dev->stream_create(ctx->device, &ctx->xfer_stream));
    DCP_CHECK(dev->event_create(ctx->device, &ctx->entry));
    DCP_CHECK(dev->event_create(ctx->device, &ctx->exit));
    if (!(ctx->sync_dev = dev->alloc(ctx->device, 2)))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "context: barrier bytes on GPU %d", ctx->device);
    if (config->group) {
        const dcp_inproc_mover_t mover = {mover_copy, mover_order, ctx};
        dcp_inproc_engine_set_mover(ctx->engine, &mover, ctx->device);
    }
    return DCP_OK;
}

static void release(dcp_context_t *ctx)
{
    const dcp_device_t *dev = ctx->dev;
    dev->free(ctx->sync_dev);
    dev->event_destroy(ctx->entry);
    dev->event_destroy(ctx->exit);
    if (ctx->owns_stream) dev->stream_destroy(ctx->stream);
    if (ctx->owns_xfer_stream) dev->stream_destroy(ctx->xfer_stream);
    dcp_cluster_destroy(ctx->cluster);
    dcp_peers_free(&ctx->peers);
    free(ctx);
}

/* The library settings taken from the environment, in the log (ENV). */
static void log_settings(int32_t rank)
{
    if (!dcp_log_on(DCP_LOG_INFO, DCP_LOG_ENV)) return;
    for (int i = 0; i < DCP_ENV_COUNT; i++) {
        const dcp_env_row_t *row = dcp_env_row((dcp_env_id_t)i);
        const char *v = dcp_env_raw((dcp_env_id_t)i);
        if (row->scope == DCP_ENV_LIBRARY && v)
            dcp_log(DCP_LOG_INFO, DCP_LOG_ENV, rank, "%s set by environment to %s", row->name, v);
    }
}

static dcp_status_t check_config(const dcp_context_config_t *config)
{
    if (!config->group == !config->bootstrap)
        return dcp_set_error(
            DCP_ERR_INVALID_ARG,
            "config: give exactly one of group (threads) and bootstrap (processes)");
    if (!(config->timeout_s >= 0) || !isfinite(config->timeout_s))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.timeout_s = %g, must be >= 0",
                             config->timeout_s);
    return DCP_OK;
}

static dcp_status_t create(const dcp_context_config_t *config, dcp_engine_wrap_fn wrap, void *user,
                           dcp_context_t **ctx_out)
{
    if (!config || !ctx_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", config ? "ctx_out" : "config");
    DCP_CHECK(check_config(config));
    dcp_context_t *ctx;
    DCP_CHECK(dcp_calloc(&ctx, 1, sizeof *ctx, "context"));
    ctx->device = -1;
    ctx->rank = config->group ? config->rank : config->bootstrap->rank;
    double timeout_s = config->timeout_s;
    /* every library setting first: a bad one fails here by name, before any collective */
    dcp_status_t st = dcp_env_check(DCP_ENV_LIBRARY);
    if (st == DCP_OK) log_settings(ctx->rank);
    if (st == DCP_OK && !(timeout_s > 0)) st = dcp_context_default_timeout(&timeout_s);
    ctx->timeout_s = dcp_timeout_clamp(timeout_s);
    if (st == DCP_OK) st = config->group ? attach_group(ctx, config) : attach_job(ctx, config);
    if (st == DCP_OK && wrap) {
        dcp_engine_t *inner = ctx->engine;
        ctx->engine = NULL;
        st = wrap(user, ctx->rank, inner, &ctx->engine);
    }
    ctx->dev = dcp_device_of(ctx->device);
    if (st == DCP_OK) st = check_streams(config, ctx->device);
    if (st == DCP_OK && !ctx->dev->host_memory) st = attach_device(ctx, config);
    if (st == DCP_OK) st = dcp_attn_init(ctx, config);
    if (st != DCP_OK) {
        /* the peers' creation has succeeded: they learn of this rank's failure at their
         * first call, instead of waiting for it until the timeout (UCX's close, a transfer) */
        if (ctx->engine) ctx->engine->ops->abort(ctx->engine, dcp_last_error());
        dcp_engine_destroy(ctx->engine);
        release(ctx);
        return st;
    }
    /* (the settings were read on entry) */
    ctx->drive_progress =
        ctx->engine->needs_progress && strcmp(dcp_env_str_value(DCP_ENV_PROGRESS), "none") != 0;
    dcp_stamps_init(ctx);
    dcp_context_describe_transport(ctx);
    *ctx_out = ctx;
    return DCP_OK;
}

dcp_status_t dcp_context_create(const dcp_context_config_t *config, dcp_context_t **ctx_out)
{
    return create(config, NULL, NULL, ctx_out);
}

dcp_status_t dcp_context_create_wrapped(const dcp_context_config_t *config, dcp_engine_wrap_fn wrap,
                                        void *user, dcp_context_t **ctx_out)
{
    if (config && !config->group)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "context: a wrapped engine needs a group");
    return create(config, wrap, user, ctx_out);
}

void dcp_context_destroy(dcp_context_t *ctx)
{
    if (!ctx) return;
    dcp_stamps_cancel(ctx);
    dcp_attn_release(ctx);
    dcp_binding_release(ctx);
    /* the engine first: after a failure it may still hold transfers into the buffers */
    dcp_engine_destroy(ctx->engine);
    dcp_binding_free_buffers(ctx);
    dcp_stamps_free(ctx);
    dcp_variants_free(ctx);
    release(ctx);
}

dcp_status_t dcp_context_check_shape(const dcp_context_t *ctx, const dcp_attn_shape_t *shape)
{
    if (!ctx || !shape)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", ctx ? "shape" : "ctx");
    return ctx->dev->kernels->check_shape(shape);
}

dcp_status_t dcp_context_abort(dcp_context_t *ctx, const char *reason)
{
    if (!ctx) return dcp_set_error(DCP_ERR_INVALID_ARG, "ctx is NULL");
    dcp_stamps_notify(ctx, NULL, DCP_PASS_FWD, reason);
    ctx->engine->ops->abort(ctx->engine, reason);
    return DCP_OK;
}

dcp_status_t dcp_context_cluster(const dcp_context_t *ctx, const dcp_cluster_t **cluster_out)
{
    if (!ctx || !cluster_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", ctx ? "cluster_out" : "ctx");
    if (!ctx->cluster) return dcp_set_error(DCP_ERR_UNSUPPORTED, "context: %s", ctx->cluster_why);
    *cluster_out = ctx->cluster;
    return DCP_OK;
}

const char *dcp_context_transport(const dcp_context_t *ctx, int inter_node)
{
    return ctx ? dcp_engine_kind_name(
                     ctx->engine_kind[inter_node ? DCP_LINK_INTER : DCP_LINK_INTRA])
               : "none";
}
