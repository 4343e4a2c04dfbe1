/* Read-only facts about a context, for callers that allocate its inputs (dcp.h). */
#include "include/dcp.h"
#include "include/base/error.h"
#include "plugin/context.h"

int32_t dcp_context_device(const dcp_context_t *ctx)
{
    return ctx ? ctx->device : -1;
}

dcp_status_t dcp_context_get_stats(const dcp_context_t *ctx, dcp_context_stats_t *stats_out)
{
    if (!ctx || !stats_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "context stats: %s is NULL",
                             ctx ? "stats_out" : "ctx");
    *stats_out = (dcp_context_stats_t){(int64_t)ctx->calls, ctx->wait_blocked_s};
    return DCP_OK;
}
