/*
 * The attention variants of a call outside the tile kernels (plugin/variants.h).
 *
 * Sinks change no placement and no kernel: after the merge each row's (O, LSE) takes the sink
 * as one more softmax term without a value, and the backward on the corrected O and LSE is the
 * usual one, with d s_h = -sum over rows of exp(s_h - LSE') delta on top (kernels/README.md,
 * Numerics).
 *
 * The max logit: the forward kernels max each score of an allowed pair into this rank's Hq
 * floats; the ranks then reduce them with a dissemination all-reduce over the context's
 * engine, as the barrier does (ceil(log2 R) rounds; in round k rank r sends its maxima to
 * r + 2^k and takes the maxima of r - 2^k, so that after the last round every rank holds the
 * maximum of all, max being idempotent). Hq x 4 bytes a round: less than the bootstrap's
 * allgather (R x Hq x 4 bytes to every rank) from 3 ranks on, and no collective of the host
 * framework inside a step. The plan's own transfers cannot carry it: a rank's partials travel
 * to the owners of the rows, not to every rank.
 */
#include "plugin/variants.h"

#include "include/base/error.h"
#include "partition/plan/plan.h"
#include "plugin/context.h"

#include <math.h>

static dcp_status_t check_ptr(const dcp_context_t *ctx, const void *ptr, const char *name)
{
    if (ctx->dev->host_memory) return DCP_OK;
    if (!ctx->dev->addressable(ptr, ctx->device))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s on rank %d is not device memory of GPU %d",
                             name, ctx->rank, ctx->device);
    if ((uintptr_t)ptr % 4 != 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s on rank %d is not 4-byte aligned", name,
                             ctx->rank);
    return DCP_OK;
}

dcp_status_t dcp_variants_check(const dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                                const dcp_call_variants_t *v)
{
    (void)p;
    const int fwd = pass == DCP_PASS_FWD;
    if (v->sinks) DCP_CHECK(check_ptr(ctx, v->sinks, fwd ? "io.sinks" : "io.fwd.sinks"));
    if (fwd && v->max_logit) DCP_CHECK(check_ptr(ctx, v->max_logit, "io.max_logit"));
    if (!fwd && v->dsinks) {
        if (!v->sinks)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "io.dsinks is set on rank %d but io.fwd.sinks is NULL: the "
                                 "sinks' gradient needs the sinks",
                                 ctx->rank);
        DCP_CHECK(check_ptr(ctx, v->dsinks, "io.dsinks"));
    }
    return DCP_OK;
}

/* Room for `heads` maxima of this rank and of a peer. */
static dcp_status_t reserve(dcp_context_t *ctx, int32_t heads)
{
    dcp_variants_t *vs = &ctx->variants;
    if (vs->cap >= heads) return DCP_OK;
    DCP_CHECK(ctx->dev->stream_sync(ctx->stream)); /* queued work may still use the old one */
    ctx->dev->free(vs->mem);
    vs->cap = 0;
    if (!(vs->mem = ctx->dev->alloc(ctx->device, 2 * (size_t)heads * sizeof(float))))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "max logit: %d heads on rank %d", heads, ctx->rank);
    vs->cap = heads;
    return DCP_OK;
}

dcp_status_t dcp_variants_start(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                                const dcp_call_variants_t *v, dcp_kernel_env_t *env)
{
    env->max_logit = NULL;
    if (pass != DCP_PASS_FWD || !v->max_logit) return DCP_OK;
    const int32_t heads = p->shape.num_heads;
    DCP_CHECK(reserve(ctx, heads));
    DCP_CHECK(ctx->dev->fill_f32(ctx->variants.mem, heads, -INFINITY, ctx->stream));
    env->max_logit = ctx->variants.mem;
    return DCP_OK;
}

/* The dissemination all-reduce (max) of this rank's maxima, then the result to `out`. */
static dcp_status_t reduce_max(dcp_context_t *ctx, const dcp_kernel_env_t *env, int32_t heads,
                               float *out)
{
    dcp_engine_t *e = ctx->engine;
    const int32_t n = e->size, r = e->rank;
    float *mine = ctx->variants.mem, *theirs = mine + ctx->variants.cap;
    const size_t bytes = (size_t)heads * sizeof(float);
    /* the kernels' maxima are in memory before the engine reads them (a host wait: the
     * engine moves them with no event) */
    DCP_CHECK(ctx->dev->stream_sync(ctx->stream));
    for (int32_t k = 1, round = 0; k < n; k <<= 1, round++) {
        /* the barrier's tag space, its own part of it: bit 60, the call, the round */
        const uint64_t tag =
            DCP_TAG_SYNC | 1ull << 60 | (ctx->calls & 0xffffffffu) << 8 | (uint64_t)round;
        const dcp_xfer_op_t ops[2] = {{(r + k) % n, 1, tag, mine, bytes, NULL, NULL},
                                      {(r - k + n) % n, 0, tag, theirs, bytes, NULL, NULL}};
        dcp_xfer_req_t *req = NULL;
        DCP_CHECK(e->ops->launch(e, ops, 2, &req));
        const dcp_status_t st = e->ops->wait(e, req, ctx->timeout_s, NULL);
        if (st != DCP_OK) {
            e->ops->cancel(e, req);
            return st;
        }
        DCP_CHECK(ctx->dev->kernels->max_f32(env, mine, theirs, heads));
        DCP_CHECK(ctx->dev->stream_sync(ctx->stream)); /* before the next round sends it */
    }
    return ctx->dev->copy(out, mine, bytes, ctx->stream);
}

dcp_status_t dcp_variants_finish(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                                 const dcp_call_variants_t *v, const dcp_kernel_env_t *env)
{
    const int64_t tokens = p->rank_tokens[ctx->rank];
    const int32_t heads = p->shape.num_heads;
    const dcp_kernels_t *k = ctx->dev->kernels;
    if (pass == DCP_PASS_BWD)
        return v->dsinks ? k->sinks_bwd(env, tokens, heads, v->sinks, v->dsinks) : DCP_OK;
    if (v->sinks && tokens > 0) DCP_CHECK(k->sinks_fwd(env, tokens, heads, v->sinks));
    if (!v->max_logit) return DCP_OK;
    /* a rank that asks for the max logit where a peer does not is named by the stamps, not
     * left waiting for that peer's round */
    DCP_CHECK(dcp_stamps_settle(ctx));
    return reduce_max(ctx, env, heads, v->max_logit);
}

void dcp_variants_free(dcp_context_t *ctx)
{
    ctx->dev->free(ctx->variants.mem);
    ctx->variants.mem = NULL;
    ctx->variants.cap = 0;
}
