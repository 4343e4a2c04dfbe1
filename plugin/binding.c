/* Binding a context to a plan: buffers, descriptors and events sized from it. */
#include "plugin/binding.h"

#include "include/base/error.h"
#include "include/base/log.h"
#include "partition/plan/plan.h"
#include "plugin/context.h"

#include <stdlib.h>
#include <string.h>

/* Work buffer b of at least `bytes`, registered with the engine. The old buffer may still
 * be in use by queued work: the caller has waited for the context's stream. */
static dcp_status_t reserve(dcp_context_t *ctx, int32_t b, size_t bytes)
{
    dcp_binding_t *bd = &ctx->bound;
    if (bd->work[b]) ctx->engine->ops->mem_deregister(ctx->engine, bd->work[b]);
    ctx->dev->free(bd->work[b]);
    bd->work[b] = NULL;
    bd->work_cap[b] = 0;
    /* 64-byte alignment for vector loads; sizes rounded to match */
    const size_t size = (bytes + 63) / 64 * 64;
    void *p = ctx->dev->alloc(ctx->device, size);
    if (!p)
        return dcp_set_error(DCP_ERR_NO_MEMORY,
                             "context: cannot allocate %zu bytes for buffer %d on %s of rank %d",
                             size, b, ctx->dev->name, ctx->rank);
    const dcp_status_t st = ctx->engine->ops->mem_register(ctx->engine, p, size);
    if (st != DCP_OK) {
        ctx->dev->free(p);
        return st;
    }
    bd->work[b] = p;
    bd->work_cap[b] = size;
    return DCP_OK;
}

static dcp_status_t buffers(dcp_context_t *ctx, const dcp_plan_t *p)
{
    dcp_binding_t *bd = &ctx->bound;
    size_t need[DCP_BUF_COUNT] = {0};
    int grow = 0;
    for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++) {
        need[b] = (size_t)dcp_plan_buf_elems(p, ctx->rank, b) * dcp_plan_elem_bytes(p, b);
        grow |= need[b] > bd->work_cap[b];
    }
    if (!grow) return DCP_OK;
    /* calls are stream-ordered: the last one's work may still use the buffers */
    DCP_CHECK(ctx->dev->stream_sync(ctx->stream));
    for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++)
        if (need[b] > bd->work_cap[b]) DCP_CHECK(reserve(ctx, b, need[b]));
    return DCP_OK;
}

/* Events of the pool [*num, n) created; the pool only grows. */
static dcp_status_t events(const dcp_context_t *ctx, void ***pool, int64_t *num, int64_t *cap,
                           int64_t n)
{
    DCP_CHECK(dcp_reserve(pool, cap, n, sizeof **pool, "context events"));
    for (; *num < n; ++*num) DCP_CHECK(ctx->dev->event_create(ctx->device, &(*pool)[*num]));
    return DCP_OK;
}

/* The plan-wide comm indices [lo, hi) the rank's launches of both passes of every layer kind
 * use, and the most ops of one launch. */
static void comm_range(const dcp_plan_t *p, int32_t rank, int64_t *lo, int64_t *hi, int64_t *most)
{
    *lo = INT64_MAX, *hi = 0, *most = 0;
    const int32_t nr = p->num_ranks;
    for (int64_t prog = 0; prog < (int64_t)p->num_kinds * DCP_PASS_COUNT; prog++)
        for (int64_t i = p->prog_off[prog * nr + rank]; i < p->prog_off[prog * nr + rank + 1];
             i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_COMM_LAUNCH) continue;
            if (in->first < *lo) *lo = in->first;
            if (in->first + in->count > *hi) *hi = in->first + in->count;
            if (in->count > *most) *most = in->count;
        }
    if (*lo > *hi) *lo = *hi = 0;
}

/* The log's word on a plan the context binds (PLAN): the plan's shape and this rank's share. */
static void log_plan(const dcp_context_t *ctx, const dcp_plan_t *p)
{
    if (!dcp_log_on(DCP_LOG_INFO, DCP_LOG_PLAN)) return;
    const dcp_plan_stats_t *s = &p->stats;
    int64_t bytes = 0;
    for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++)
        bytes += dcp_plan_buf_elems(p, ctx->rank, b) * dcp_plan_elem_bytes(p, b);
    dcp_log(DCP_LOG_INFO, DCP_LOG_PLAN, ctx->rank,
            "plan %llu bound: strategy %s%s, %d ranks on %d node%s, %d token blocks, %lld "
            "computation blocks, %d phases; forward moves %lld bytes (%lld between nodes), "
            "backward %lld; this rank: %lld tokens, %lld bytes of work buffers",
            (unsigned long long)p->serial, dcp_strategy_name(s->strategy),
            s->fallback ? " (lpt in its place)" : "", p->num_ranks, p->num_nodes,
            p->num_nodes == 1 ? "" : "s", s->num_token_blocks, (long long)s->num_comp_blocks,
            p->num_phases, (long long)s->comm_bytes, (long long)s->inter_node_bytes,
            (long long)s->bwd_comm_bytes, (long long)p->rank_tokens[ctx->rank], (long long)bytes);
}

dcp_status_t dcp_binding_bind(dcp_context_t *ctx, const dcp_plan_t *plan)
{
    /* the layer kinds of a plan share one binding (their views carry the plan's serial) */
    const dcp_plan_t *p = dcp_plan_root(plan);
    dcp_binding_t *bd = &ctx->bound;
    if (bd->serial == p->serial) return DCP_OK;
    bd->serial = 0; /* until everything below is in place */
    log_plan(ctx, p);
    DCP_CHECK(buffers(ctx, p));
    int64_t lo, hi, most;
    comm_range(p, ctx->rank, &lo, &hi, &most);
    DCP_CHECK(events(ctx, &bd->ready, &bd->num_ready, &bd->ready_cap, p->num_phases));
    DCP_CHECK(events(ctx, &bd->done, &bd->num_done, &bd->done_cap, hi - lo));
    bd->comm_lo = lo;
    DCP_CHECK(dcp_reserve(&bd->reqs, &bd->reqs_cap, p->num_phases, sizeof *bd->reqs, "context"));
    for (int32_t s = 0; s < p->num_phases; s++) bd->reqs[s] = NULL;
    DCP_CHECK(dcp_reserve(&bd->ops, &bd->ops_cap, most, sizeof *bd->ops, "context"));
    if (!ctx->dev->host_memory)
        DCP_CHECK(dcp_dev_plan_sync(&bd->dev_plan, p, ctx->dev, ctx->device, ctx->stream));
    DCP_CHECK(dcp_attn_bind(ctx, p));
    bd->serial = p->serial;
    return DCP_OK;
}

void dcp_binding_release(dcp_context_t *ctx)
{
    dcp_binding_t *bd = &ctx->bound;
    const dcp_device_t *dev = ctx->dev;
    (void)dev->stream_sync(ctx->stream);
    for (int b = 0; b < DCP_BUF_COUNT; b++)
        if (bd->work[b]) ctx->engine->ops->mem_deregister(ctx->engine, bd->work[b]);
    dcp_dev_plan_free(&bd->dev_plan, dev);
    for (int64_t i = 0; i < bd->num_ready; i++) dev->event_destroy(bd->ready[i]);
    for (int64_t i = 0; i < bd->num_done; i++) dev->event_destroy(bd->done[i]);
    free(bd->ready);
    free(bd->done);
    free(bd->reqs);
    free(bd->ops);
}

void dcp_binding_free_buffers(dcp_context_t *ctx)
{
    for (int b = 0; b < DCP_BUF_COUNT; b++) ctx->dev->free(ctx->bound.work[b]);
    memset(&ctx->bound, 0, sizeof ctx->bound);
}
