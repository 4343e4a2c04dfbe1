/*
 * The executor: runs one rank's program of a plan with the context's kernels and engine.
 * Instructions run in order; COMM_LAUNCH starts a step's transfers and COMM_WAIT completes
 * them, so the transfers of one division overlap the kernels of the previous one. On any
 * failure the rank tells its peers (engine abort), withdraws its outstanding transfers and
 * returns without having touched the caller's O and LSE (those are written by the last
 * COPY only).
 */
#include "include/base/error.h"
#include "partition/plan.h"
#include "plugin/context.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static dcp_status_t check_call(const dcp_context_t *ctx, const dcp_plan_t *p,
                               const dcp_tensors_t *io)
{
    if (!p || !io) return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", !p ? "plan" : "io");
    if (p->num_ranks != ctx->engine->size)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "plan: %d ranks, the group has %d", p->num_ranks,
                             ctx->engine->size);
    if (p->shape.dtype != DCP_DTYPE_FP32)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "plan dtype: the CPU executor runs fp32 plans only");
    if (p->rank_tokens[ctx->rank] > 0 && (!io->q || !io->k || !io->v || !io->o || !io->lse))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "io.%s is NULL on rank %d with %lld tokens",
                             !io->q   ? "q"
                             : !io->k ? "k"
                             : !io->v ? "v"
                             : !io->o ? "o"
                                      : "lse",
                             ctx->rank, (long long)p->rank_tokens[ctx->rank]);
    return DCP_OK;
}

/* Sizes the work buffers for this plan and builds the kernels' view of the buffers. */
static dcp_status_t prepare(dcp_context_t *ctx, const dcp_plan_t *p, const dcp_tensors_t *io,
                            dcp_kernel_env_t *env)
{
    memset(env, 0, sizeof *env);
    for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++) {
        const int64_t n = dcp_plan_buf_elems(p, ctx->rank, b);
        DCP_CHECK(dcp_context_reserve(ctx, b, (size_t)n * dcp_plan_elem_bytes(p, b)));
        env->bufs[b] = n > 0 ? ctx->work[b] : NULL;
    }
    env->bufs[DCP_BUF_Q] = (void *)io->q;
    env->bufs[DCP_BUF_K] = (void *)io->k;
    env->bufs[DCP_BUF_V] = (void *)io->v;
    env->bufs[DCP_BUF_O] = io->o;
    env->bufs[DCP_BUF_LSE] = io->lse;
    env->seqs = p->seqs;
    env->q_heads = p->qpg;
    env->kv_heads = p->kvpg;
    env->head_dim = p->shape.head_dim;
    env->scale = p->shape.scale;
    env->dtype = p->shape.dtype;
    /* accumulators start as the empty partial: O = 0, LSE = -inf */
    const int64_t no = dcp_plan_buf_elems(p, ctx->rank, DCP_BUF_ACC_O);
    const int64_t nl = dcp_plan_buf_elems(p, ctx->rank, DCP_BUF_ACC_LSE);
    if (no > 0) memset(env->bufs[DCP_BUF_ACC_O], 0, (size_t)no * sizeof(float));
    float *lse = env->bufs[DCP_BUF_ACC_LSE];
    for (int64_t i = 0; i < nl; i++) lse[i] = -INFINITY;
    return DCP_OK;
}

static dcp_status_t launch(dcp_context_t *ctx, const dcp_plan_t *p, const dcp_kernel_env_t *env,
                           const dcp_instr_t *in, dcp_xfer_req_t **req_out)
{
    DCP_CHECK(dcp_reserve(&ctx->ops, &ctx->ops_cap, in->count, sizeof *ctx->ops, "launch"));
    for (int64_t i = 0; i < in->count; i++) {
        const dcp_comm_op_t *op = &p->comm[in->first + i];
        const size_t es = (size_t)dcp_plan_elem_bytes(p, op->buf);
        ctx->ops[i] = (dcp_xfer_op_t){
            .peer = op->peer,
            .send = op->send,
            .tag = dcp_tag_data(p->fingerprint, (uint32_t)op->transfer),
            .ptr = (char *)env->bufs[op->buf] + (size_t)op->off * es,
            .bytes = (size_t)op->elems * es,
        };
    }
    return ctx->engine->ops->launch(ctx->engine, ctx->ops, in->count, req_out);
}

static dcp_status_t run_program(dcp_context_t *ctx, const dcp_plan_t *p,
                                const dcp_kernel_env_t *env, dcp_xfer_req_t **reqs)
{
    const dcp_kernels_t *k = ctx->kernels;
    for (int64_t i = p->prog_off[ctx->rank]; i < p->prog_off[ctx->rank + 1]; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        switch (in->op) {
        case DCP_OP_ATTN:
            DCP_CHECK(k->attn_fwd(env, p->groups + in->first, in->count, p->tiles));
            break;
        case DCP_OP_REDUCE:
            DCP_CHECK(k->merge(env, p->merges + in->first, in->count, p->merge_srcs));
            break;
        case DCP_OP_COPY:
            DCP_CHECK(k->copy(env, p->copies + in->first, in->count));
            break;
        case DCP_OP_COMM_LAUNCH:
            DCP_CHECK(launch(ctx, p, env, in, &reqs[in->arg]));
            break;
        case DCP_OP_COMM_WAIT:
            DCP_CHECK(ctx->engine->ops->wait(ctx->engine, reqs[in->arg], ctx->timeout_s));
            reqs[in->arg] = NULL;
            break;
        default:
            return dcp_set_error(DCP_ERR_INTERNAL, "executor: opcode %d", in->op);
        }
    }
    return DCP_OK;
}

/* Every failure of a rank, bad arguments included, is announced to its peers: they are
 * inside the same collective and would otherwise wait for this rank until the timeout. */
dcp_status_t dcp_forward(dcp_context_t *ctx, const dcp_plan_t *plan, const dcp_tensors_t *io)
{
    if (!ctx) return dcp_set_error(DCP_ERR_INVALID_ARG, "ctx is NULL");
    dcp_status_t st = ctx->engine->ops->health(ctx->engine);
    if (st != DCP_OK) return st;
    dcp_xfer_req_t **reqs = NULL;
    dcp_kernel_env_t env;
    st = check_call(ctx, plan, io);
    if (st == DCP_OK) st = dcp_calloc(&reqs, plan->num_phases, sizeof *reqs, "executor");
    if (st == DCP_OK) st = prepare(ctx, plan, io, &env);
    if (st == DCP_OK) st = run_program(ctx, plan, &env, reqs);
    if (st != DCP_OK) {
        ctx->engine->ops->abort(ctx->engine);
        for (int32_t s = 0; reqs && s < plan->num_phases; s++)
            ctx->engine->ops->cancel(ctx->engine, reqs[s]);
    }
    free(reqs);
    return st;
}
