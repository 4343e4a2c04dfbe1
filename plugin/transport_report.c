/* dcp_context_transport_report(): one line on how a context's engines move and order its
 * transfers, written once at creation (and logged there: DCP_DEBUG=INFO, include/base/log.h). */
#include "include/base/log.h"
#include "include/dcp.h"
#include "plugin/context.h"
#include "transport/route.h"

#include <stdio.h>

/* The engines (each with the links it serves, behind a routing engine). */
static size_t engines_text(const dcp_engine_t *e, char *buf, size_t cap)
{
    const dcp_engine_t *leg = NULL;
    const char *label = NULL;
    const int32_t n = dcp_route_leg(e, 0, &leg, &label);
    if (n == 0) return (size_t)snprintf(buf, cap, "engine %s", e->ops->name);
    size_t used = (size_t)snprintf(buf, cap, "engines");
    for (int32_t i = 0; i < n && used < cap; i++) {
        dcp_route_leg(e, i, &leg, &label);
        used += (size_t)snprintf(buf + used, cap - used, "%s %s (%s)", i ? "," : "", leg->ops->name,
                                 label);
    }
    return used;
}

/* The first engine (a leg of a routing engine, or e itself) that is not stream-ordered. */
static const dcp_engine_t *unordered(const dcp_engine_t *e, const char **label_out)
{
    const dcp_engine_t *leg = NULL;
    const char *label = NULL;
    const int32_t n = dcp_route_leg(e, 0, &leg, &label);
    *label_out = "every link";
    for (int32_t i = 0; i < n; i++) {
        dcp_route_leg(e, i, &leg, &label);
        if (!leg->stream_ordered) {
            *label_out = label;
            return leg;
        }
    }
    return e->stream_ordered ? NULL : e;
}

void dcp_context_describe_transport(dcp_context_t *ctx)
{
    char *buf = ctx->transport_note;
    const size_t cap = sizeof ctx->transport_note;
    size_t used = engines_text(ctx->engine, buf, cap);
    const char *label = NULL;
    const dcp_engine_t *slow = unordered(ctx->engine, &label);
    if (used < cap && !slow)
        used += (size_t)snprintf(buf + used, cap - used,
                                 "; launches stream-ordered (no host synchronisation)");
    else if (used < cap)
        used += (size_t)snprintf(buf + used, cap - used,
                                 "; the host waits for the compute stream before each launch: "
                                 "%s (%s) completes on the host",
                                 slow->ops->name, label);
    if (used < cap && ctx->dev->host_memory)
        used += (size_t)snprintf(buf + used, cap - used, " (the CPU: every step done on return)");
    if (used < cap)
        snprintf(buf + used, cap - used, "; call stamps %s",
                 ctx->stamps.device ? "and abort notices in device memory" : "in host memory");
    dcp_log(DCP_LOG_INFO, DCP_LOG_INIT, ctx->rank, "%s", buf);
}

const char *dcp_context_transport_report(const dcp_context_t *ctx)
{
    return ctx ? ctx->transport_note : "";
}
