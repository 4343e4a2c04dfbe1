/* dcp_context_t: one rank's engine endpoint, kernels and reusable work buffers. */
#include "plugin/context.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>

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

dcp_status_t dcp_context_create(const dcp_context_config_t *config, dcp_context_t **ctx_out)
{
    if (!config || !ctx_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", config ? "ctx_out" : "config");
    if (!config->group) return dcp_set_error(DCP_ERR_INVALID_ARG, "config.group is NULL");
    if (!(config->timeout_s >= 0) || !isfinite(config->timeout_s))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "config.timeout_s = %g, must be >= 0",
                             config->timeout_s);
    dcp_context_t *ctx;
    DCP_CHECK(dcp_calloc(&ctx, 1, sizeof *ctx, "context"));
    const dcp_status_t st =
        dcp_inproc_engine_create(config->group->hub, config->rank, &ctx->engine);
    if (st != DCP_OK) {
        free(ctx);
        return st;
    }
    ctx->rank = config->rank;
    ctx->kernels = &dcp_kernels_cpu;
    ctx->timeout_s = config->timeout_s > 0 ? config->timeout_s : dcp_context_default_timeout();
    *ctx_out = ctx;
    return DCP_OK;
}

void dcp_context_destroy(dcp_context_t *ctx)
{
    if (!ctx) return;
    for (int b = 0; b < DCP_BUF_COUNT; b++) {
        if (ctx->work[b]) ctx->engine->ops->mem_deregister(ctx->engine, ctx->work[b]);
        free(ctx->work[b]);
    }
    free(ctx->ops);
    dcp_engine_destroy(ctx->engine);
    free(ctx);
}

dcp_status_t dcp_context_reserve(dcp_context_t *ctx, int32_t b, size_t bytes)
{
    if (bytes <= ctx->work_cap[b]) return DCP_OK;
    if (ctx->work[b]) ctx->engine->ops->mem_deregister(ctx->engine, ctx->work[b]);
    free(ctx->work[b]);
    ctx->work[b] = NULL;
    ctx->work_cap[b] = 0;
    /* 64-byte alignment for vector loads; sizes rounded to match */
    const size_t size = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, size);
    if (!p)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "context: cannot allocate %zu bytes for buffer %d",
                             size, b);
    const dcp_status_t st = ctx->engine->ops->mem_register(ctx->engine, p, size);
    if (st != DCP_OK) {
        free(p);
        return st;
    }
    ctx->work[b] = p;
    ctx->work_cap[b] = size;
    return DCP_OK;
}
