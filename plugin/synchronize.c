/*
 * GPU work that outlives its call. A call on a GPU returns once its work is queued, so a hang
 * (a peer that never comes to a transfer, a stream held by other work, a dead link) shows
 * after the call: the context remembers when its last call returned, and the next call (its
 * health check), a barrier, or dcp_context_synchronize() looks whether that work has finished
 * (an event query: no wait), whether the stamps of earlier calls that have landed agree
 * (plugin/stamp.h), and, when the work has been unfinished longer than the context's timeout,
 * fails with DCP_ERR_TIMEOUT naming the peers the call exchanges blocks with. The failure is
 * relayed like any other (dcp_context_health, here with the engine's health, above context.c):
 * the engine is aborted, which aborts an NCCL communicator dcp created and never one that was
 * lent.
 */
#include "include/base/error.h"
#include "include/base/poll.h"
#include "include/base/timeout.h"
#include "plugin/context.h"

#include <math.h>
#include <stdio.h>

static const char *const pass_name[DCP_PASS_COUNT] = {"forward", "backward"};

void dcp_context_queued(dcp_context_t *ctx, dcp_pass_t pass)
{
    if (ctx->dev->host_memory) return; /* the CPU's work is done when the call returns */
    ctx->queued_at = dcp_now();
    ctx->queued_call = ctx->calls;
    ctx->queued_pass = pass;
}

/* The peers of the unfinished call, for messages ("ranks 1, 3 (nccl)"). */
static const char *peers_text(const dcp_context_t *ctx, char *buf, size_t cap)
{
    int32_t n = 0;
    const int32_t *peers = dcp_stamps_last_peers(ctx, &n);
    if (n == 0) {
        snprintf(buf, cap,
                 "it exchanges no blocks, so the work queued on its streams (or on the "
                 "caller's stream before it) is what has not finished");
        return buf;
    }
    size_t used = (size_t)snprintf(buf, cap, "it exchanges blocks with rank%s ", n > 1 ? "s" : "");
    for (int32_t k = 0; k < n && used + 24 < cap; k++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%d", k ? ", " : "", peers[k]);
    if (used < cap)
        snprintf(buf + used, cap - used,
                 " over %s: one of them has not reached that call or has failed, or a link or "
                 "the GPU is stuck",
                 ctx->engine->ops->name);
    return buf;
}

/* The last call's work has been unfinished for `late` s. */
static dcp_status_t overdue(const dcp_context_t *ctx, double late, int failed)
{
    char who[320];
    return dcp_set_error(DCP_ERR_TIMEOUT,
                         "rank %d: its %s call %llu has not finished on GPU %d %.1f s after it "
                         "returned (%s; the context's timeout is %.0f s); %s",
                         ctx->rank, pass_name[ctx->queued_pass & 1],
                         (unsigned long long)ctx->queued_call, ctx->device, late,
                         failed ? "the context has failed" : "the context goes on", ctx->timeout_s,
                         peers_text(ctx, who, sizeof who));
}

dcp_status_t dcp_context_watch(dcp_context_t *ctx)
{
    DCP_CHECK(dcp_stamps_check(ctx, 0, 0));
    if (ctx->queued_at == 0) return DCP_OK;
    int state = 1;
    DCP_CHECK(ctx->dev->event_query(ctx->exit, &state));
    if (state != 0) { /* done (or captured into a graph: nothing ran) */
        ctx->queued_at = 0;
        return DCP_OK;
    }
    const double late = dcp_now() - ctx->queued_at;
    return late > ctx->timeout_s ? overdue(ctx, late, 1) : DCP_OK;
}

dcp_status_t dcp_context_health(dcp_context_t *ctx)
{
    dcp_status_t st = ctx->engine->ops->health(ctx->engine);
    if (st == DCP_OK) st = dcp_context_watch(ctx);
    if (st == DCP_OK) return DCP_OK;
    char why[1024];
    dcp_error_save(why, sizeof why);
    ctx->engine->ops->abort(ctx->engine, why);
    return dcp_set_error(st, "%s", why);
}

dcp_status_t dcp_context_synchronize(dcp_context_t *ctx, double timeout_s)
{
    if (!ctx) return dcp_set_error(DCP_ERR_INVALID_ARG, "ctx is NULL");
    if (!(timeout_s >= 0) || !isfinite(timeout_s))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "timeout_s = %g: a number of seconds >= 0 (0: the context's)",
                             timeout_s);
    const double deadline =
        dcp_now() + (timeout_s > 0 ? dcp_timeout_clamp(timeout_s) : ctx->timeout_s);
    /* the health check first in every round: past the context's timeout it fails (relayed)
     * before this wait's own deadline can say the context goes on */
    for (dcp_poll_t poll = dcp_poll_start();; dcp_poll_pause(&poll)) {
        DCP_CHECK(dcp_context_health(ctx));
        if (ctx->queued_at == 0) break;
        const double now = dcp_now();
        if (now > deadline && now - ctx->queued_at <= ctx->timeout_s)
            return overdue(ctx, now - ctx->queued_at, 0);
    }
    /* the work is done; the stamps' copies back run on the transfer stream, just behind */
    const dcp_status_t st = dcp_stamps_check(ctx, 1, deadline);
    if (st == DCP_OK) return DCP_OK;
    char why[1024];
    dcp_error_save(why, sizeof why);
    ctx->engine->ops->abort(ctx->engine, why);
    return dcp_set_error(st, "%s", why);
}
