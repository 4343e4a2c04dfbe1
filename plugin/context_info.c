/* Read-only facts about a context, for callers that allocate its inputs (dcp.h). */
#include "include/dcp.h"
#include "plugin/context.h"

int32_t dcp_context_device(const dcp_context_t *ctx)
{
    return ctx ? ctx->device : -1;
}
