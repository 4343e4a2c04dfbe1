/* dcp_context_t: one rank's engine endpoint, kernels and reusable work buffers. */
#include "plugin/context.h"

#include "include/base/error.h"
#include "kernels/cuda/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double dcp_context_default_timeout(void)
{
    const char *env = getenv("DCP_TIMEOUT_S");
    if (env) {
        char *end;
        const double v = strtod(env, &end);
        if (end != env && *end == '\0' && isfinite(v) && v > 0) return v;
    }
    return 60.0;
}

/* Threads of one process: the in-process engine over the group's hub, on every link. */
static dcp_status_t attach_group(dcp_context_t *ctx, const dcp_context_config_t *config)
{
    const char *names[DCP_LINK_COUNT] = {config->transport_intra, config->transport_inter};
    for (int l = 0; l < DCP_LINK_COUNT; l++) {
        const dcp_engine_env_t env = {.threads = 1, .override = {names[0], names[1]}};
        DCP_CHECK(dcp_engine_choose(&env, (dcp_link_class_t)l, &ctx->engine_kind[l], NULL));
    }
    snprintf(ctx->cluster_why, sizeof ctx->cluster_why,
             "the ranks are threads: plan with a cluster of the caller's choosing");
    ctx->rank = config->rank;
    return dcp_inproc_engine_create(config->group->hub, config->rank, &ctx->engine);
}

dcp_status_t dcp_context_parse_device(const char *device, int32_t local_rank, int32_t *device_out)
{
    if (!device || strcmp(device, "cpu") == 0) {
        *device_out = -1;
        return DCP_OK;
    }
    if (strncmp(device, "cuda", 4) != 0 || (device[4] != '\0' && device[4] != ':'))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "config.device = \"%s\": expected \"cpu\", \"cuda\" or \"cuda:N\"",
                             device);
    const int n = dcp_cuda_device_count();
    if (n == 0)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "config.device = \"%s\": %s", device,
                             dcp_cuda_built() ? "no CUDA device is visible"
                                              : "this build has no CUDA (nvcc was not found)");
    if (device[4] == '\0') {
        *device_out = local_rank % n;
        return DCP_OK;
    }
    char *end;
    const long v = strtol(device + 5, &end, 10);
    if (end == device + 5 || *end != '\0' || v < 0 || v >= n)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "config.device = \"%s\": this process sees %d CUDA device(s)", device,
                             n);
    *device_out = (int32_t)v;
    return DCP_OK;
}

static dcp_status_t device_copy(void *user, void *dst, const void *src, size_t bytes)
{
    return dcp_cuda_memcpy(dst, src, bytes, ((dcp_context_t *)user)->xfer_stream);
}

/* A GPU context: its streams, and in-process copies through the transfer stream. */
static dcp_status_t attach_device(dcp_context_t *ctx, const dcp_context_config_t *config)
{
    DCP_CHECK(dcp_cuda_stream_create(ctx->device, &ctx->stream));
    DCP_CHECK(dcp_cuda_stream_create(ctx->device, &ctx->xfer_stream));
    if (!(ctx->sync_dev = dcp_cuda_alloc(ctx->device, 2)))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "context: barrier bytes on GPU %d", ctx->device);
    ctx->kernels = &dcp_kernels_cuda;
    if (config->group) dcp_inproc_engine_set_copy(ctx->engine, device_copy, ctx);
    return DCP_OK;
}

static void release(dcp_context_t *ctx)
{
    dcp_dev_plan_free(&ctx->dev_plan);
    dcp_cuda_free(ctx->sync_dev);
    dcp_cuda_stream_destroy(ctx->stream);
    dcp_cuda_stream_destroy(ctx->xfer_stream);
    dcp_cluster_destroy(ctx->cluster);
    free(ctx->ops);
    free(ctx);
}

dcp_status_t dcp_context_create(const dcp_context_config_t *config, dcp_context_t **ctx_out)
{
    if (!config || !ctx_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", config ? "ctx_out" : "config");
    if (!config->group == !config->bootstrap)
        return dcp_set_error(
            DCP_ERR_INVALID_ARG,
            "config: give exactly one of group (threads) and bootstrap (processes)");
    if (!(config->timeout_s >= 0) || !isfinite(config->timeout_s))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.timeout_s = %g, must be >= 0",
                             config->timeout_s);
    dcp_context_t *ctx;
    DCP_CHECK(dcp_calloc(&ctx, 1, sizeof *ctx, "context"));
    ctx->kernels = &dcp_kernels_cpu;
    ctx->device = -1;
    dcp_status_t st = DCP_OK;
    if (config->group) { /* a process's ranks pick their GPU in dcp_job_attach */
        st = dcp_context_parse_device(config->device, config->rank, &ctx->device);
        if (st == DCP_OK) st = attach_group(ctx, config);
    } else {
        st = dcp_job_attach(ctx, config);
    }
    if (st == DCP_OK && ctx->device >= 0) st = attach_device(ctx, config);
    if (st != DCP_OK) {
        dcp_engine_destroy(ctx->engine);
        release(ctx);
        return st;
    }
    ctx->timeout_s = config->timeout_s > 0 ? config->timeout_s : dcp_context_default_timeout();
    *ctx_out = ctx;
    return DCP_OK;
}

void dcp_context_destroy(dcp_context_t *ctx)
{
    if (!ctx) return;
    for (int b = 0; b < DCP_BUF_COUNT; b++)
        if (ctx->work[b]) ctx->engine->ops->mem_deregister(ctx->engine, ctx->work[b]);
    /* the engine first: after a failure it may still hold transfers into the buffers */
    dcp_engine_destroy(ctx->engine);
    for (int b = 0; b < DCP_BUF_COUNT; b++) dcp_mem_free(ctx->device, ctx->work[b]);
    release(ctx);
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

dcp_status_t dcp_context_reserve(dcp_context_t *ctx, int32_t b, size_t bytes)
{
    if (bytes <= ctx->work_cap[b]) return DCP_OK;
    const int gpu = ctx->device >= 0;
    if (ctx->work[b]) ctx->engine->ops->mem_deregister(ctx->engine, ctx->work[b]);
    dcp_mem_free(ctx->device, ctx->work[b]);
    ctx->work[b] = NULL;
    ctx->work_cap[b] = 0;
    /* 64-byte alignment for vector loads; sizes rounded to match */
    const size_t size = (bytes + 63) / 64 * 64;
    void *p = dcp_mem_alloc(ctx->device, size);
    if (!p)
        return dcp_set_error(DCP_ERR_NO_MEMORY,
                             "context: cannot allocate %zu bytes for buffer %d on %s %d", size, b,
                             gpu ? "GPU" : "rank", gpu ? ctx->device : ctx->rank);
    const dcp_status_t st = ctx->engine->ops->mem_register(ctx->engine, p, size);
    if (st != DCP_OK) {
        dcp_mem_free(ctx->device, p);
        return st;
    }
    ctx->work[b] = p;
    ctx->work_cap[b] = size;
    return DCP_OK;
}
