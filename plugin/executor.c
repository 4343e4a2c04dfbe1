/*
 * The executor: runs one rank's program of a plan, forward or backward, with the context's
 * device (kernels, streams, events) and engine.
 * Instructions run in order; COMM_LAUNCH starts a step's transfers and COMM_WAIT completes
 * them, so the transfers of one division overlap the kernels of the previous one. On any
 * failure the rank tells its peers (engine abort), withdraws its outstanding transfers and
 * returns without having touched the caller's O and LSE (those are written by the last
 * COPY only).
 *
 * Order, written once for every device (on the CPU the streams are NULL and the events do
 * nothing, because each step is done when its call returns):
 *  - the kernels queue on the context's stream, after an event of the caller's stream
 *    (entry): the inputs are read after the caller's earlier work;
 *  - COMM_LAUNCH records ready[phase] on the stream: the blocks the phase sends were written
 *    and the slots it receives into were last read by the kernels queued before it; the
 *    engine moves bytes only after that event (NCCL on its stream, in-process copies on the
 *    copying rank's transfer stream), beside the kernels queued after the launch;
 *  - COMM_WAIT makes the stream wait for the ops' done events: the kernels after it read
 *    what arrived, and reuse what was sent, only once the bytes have moved;
 *  - the caller's stream waits for the stream's last work (exit): outputs are ready for
 *    the caller's later work, and the call returns without waiting for the GPU.
 * Engines that are not stream-ordered (UCX on host memory) get a host wait for the
 * stream before each launch instead, and complete on the host (DCP_TEST_COUNT counts these
 * host synchronisations for the tests; a UCX that moves device memory orders its launches by
 * the ready events instead, transport/ucx.h). The call's stamps go out before its first
 * transfer and are checked at its first COMM_WAIT (plugin/stamp.h); a GPU call's queued work
 * is watched by the context's next call (plugin/synchronize.c).
 *
 * Progress has an owner: the executor. Engines whose transfers move only while called
 * (UCX: a rendezvous block is fetched inside the receiver's worker progress) get their
 * requests in flight tested between instructions and between slices of every ATTN
 * instruction (DCP_PROGRESS_GROUPS tile groups a slice), so that a division's blocks move
 * while the previous division computes and its COMM_WAIT finds them there. A progress
 * thread was the other choice; it needs the UCX worker shared between threads (a lock on
 * every call) and, on ranks that share cores, takes cycles from the kernels it is meant to
 * hide behind; slices on the computing thread cost one worker poll each.
 * $DCP_PROGRESS=none turns it off (for measuring what it gains).
 *
 * Each call and each instruction is a range of the device table (NVTX on CUDA: "dcp forward",
 * "dcp backward COMM_WAIT", ..., the payload the call's number or the step's division or
 * round), so that Nsight Systems shows dcp's steps above its kernels and transfers.
 */
#include "include/base/error.h"
#include "include/base/test_hook.h"
#include "partition/plan/plan.h"
#include "plugin/context.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Tile groups an ATTN slice computes between two rounds of progress. */
#define DCP_PROGRESS_GROUPS 4

/* The caller's tensors of one call, by buffer (NULL where the pass does not use one). */
typedef struct {
    const void *ptr[DCP_BUF_FIRST_WORK];
} caller_bufs_t;

static caller_bufs_t forward_bufs(const dcp_tensors_t *io)
{
    caller_bufs_t c = {{NULL}};
    c.ptr[DCP_BUF_Q] = io->q;
    c.ptr[DCP_BUF_K] = io->k;
    c.ptr[DCP_BUF_V] = io->v;
    c.ptr[DCP_BUF_O] = io->o;
    c.ptr[DCP_BUF_LSE] = io->lse;
    return c;
}

static caller_bufs_t backward_bufs(const dcp_grad_tensors_t *io)
{
    caller_bufs_t c = forward_bufs(&io->fwd);
    c.ptr[DCP_BUF_DO] = io->dout;
    c.ptr[DCP_BUF_DQ] = io->dq;
    c.ptr[DCP_BUF_DK] = io->dk;
    c.ptr[DCP_BUF_DV] = io->dv;
    return c;
}

static const char *const buf_name[DCP_BUF_FIRST_WORK] = {
    [DCP_BUF_Q] = "fwd.q", [DCP_BUF_K] = "fwd.k",     [DCP_BUF_V] = "fwd.v",
    [DCP_BUF_O] = "fwd.o", [DCP_BUF_LSE] = "fwd.lse", [DCP_BUF_DO] = "dout",
    [DCP_BUF_DQ] = "dq",   [DCP_BUF_DK] = "dk",       [DCP_BUF_DV] = "dv"};

static dcp_status_t check_call(const dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                               const caller_bufs_t *io, float scale, const dcp_call_variants_t *v)
{
    if (!(scale >= 0.0f) || !isfinite(scale))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "io.softmax_scale = %g, must be finite and >= 0 (0: the plan's)",
                             (double)scale);
    if (p->num_ranks != ctx->engine->size)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "plan: %d ranks, the group has %d", p->num_ranks,
                             ctx->engine->size);
    const int gpu = !ctx->dev->host_memory;
    DCP_CHECK(ctx->dev->kernels->check_shape(&p->shape));
    DCP_CHECK(dcp_variants_check(ctx, p, pass, v));
    if (p->rank_tokens[ctx->rank] == 0) return DCP_OK;
    const int nbufs = pass == DCP_PASS_FWD ? DCP_BUF_LSE + 1 : DCP_BUF_FIRST_WORK;
    for (int i = 0; i < nbufs; i++) {
        /* the forward's names have no "fwd." prefix: its io is the dcp_tensors_t itself */
        const char *name = pass == DCP_PASS_FWD ? buf_name[i] + 4 : buf_name[i];
        if (!io->ptr[i])
            return dcp_set_error(DCP_ERR_INVALID_ARG, "io.%s is NULL on rank %d with %lld tokens",
                                 name, ctx->rank, (long long)p->rank_tokens[ctx->rank]);
        if (!gpu) continue;
        if (!ctx->dev->addressable(io->ptr[i], ctx->device))
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "io.%s on rank %d is not device memory of GPU %d", name, ctx->rank,
                                 ctx->device);
        const int align = i == DCP_BUF_LSE ? 4 : 16;
        if ((uintptr_t)io->ptr[i] % align != 0)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "io.%s on rank %d is not %d-byte aligned",
                                 name, ctx->rank, align);
    }
    return DCP_OK;
}

/* n floats of buffer b set to `value`. */
static dcp_status_t fill(dcp_context_t *ctx, const dcp_plan_t *p, const dcp_kernel_env_t *env,
                         int b, float value)
{
    return ctx->dev->fill_f32(env->bufs[b], dcp_plan_buf_elems(p, ctx->rank, b), value,
                              ctx->stream);
}

/* The state a pass starts from. Forward: every accumulator the empty partial (O = 0,
 * LSE = -inf). Backward: gradient accumulators and partial slots zero (kernels only add to
 * them; partial slots are never reused within a backward), then delta of the local rows. */
static dcp_status_t start_pass(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                               const dcp_kernel_env_t *env)
{
    if (pass == DCP_PASS_FWD) {
        DCP_CHECK(fill(ctx, p, env, DCP_BUF_ACC_O, 0.0f));
        return fill(ctx, p, env, DCP_BUF_ACC_LSE, -INFINITY);
    }
    static const int zeroed[] = {DCP_BUF_ACC_DQ, DCP_BUF_ACC_DK, DCP_BUF_ACC_DV, DCP_BUF_PART};
    for (size_t i = 0; i < sizeof zeroed / sizeof zeroed[0]; i++)
        DCP_CHECK(fill(ctx, p, env, zeroed[i], 0.0f));
    const int64_t rows = p->rank_tokens[ctx->rank] * p->shape.num_heads;
    return rows > 0 ? ctx->dev->kernels->bwd_delta(env, rows) : DCP_OK;
}

/* Binds the plan, orders the context's stream after the caller's, and builds the kernels'
 * view of the buffers. */
static dcp_status_t prepare(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                            const caller_bufs_t *io, float scale, const dcp_call_variants_t *v,
                            void *caller, dcp_kernel_env_t *env)
{
    memset(env, 0, sizeof *env);
    DCP_CHECK(ctx->dev->set_device(ctx->device));
    DCP_CHECK(ctx->dev->event_record(ctx->entry, caller));
    DCP_CHECK(ctx->dev->stream_wait(ctx->stream, ctx->entry));
    DCP_CHECK(dcp_binding_bind(ctx, p));
    for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++)
        env->bufs[b] = dcp_plan_buf_elems(p, ctx->rank, b) > 0 ? ctx->bound.work[b] : NULL;
    for (int b = 0; b < DCP_BUF_FIRST_WORK; b++) env->bufs[b] = (void *)io->ptr[b];
    env->stream = ctx->stream;
    /* a layer kind's masks: its view's, or its run of the device copy (kind by kind) */
    env->seqs = ctx->dev->host_memory ? p->seqs
                                      : ctx->bound.dev_plan.seqs + (int64_t)p->kind * p->num_seqs;
    env->q_heads = p->qpg;
    env->kv_heads = p->kvpg;
    env->head_dim = p->shape.head_dim;
    env->head_dim_v = dcp_shape_dv(&p->shape);
    env->softcap = p->shape.softcap;
    env->scale = scale > 0.0f ? scale : p->shape.scale;
    env->dtype = p->shape.dtype;
    env->deterministic = ctx->attn.deterministic;
    DCP_CHECK(dcp_variants_start(ctx, p, pass, v, env));
    return start_pass(ctx, p, pass, env);
}

/* The descriptor arrays the kernels read: the plan's, or its device copy (with the grid
 * height of each instruction's launch). */
typedef struct {
    const dcp_tile_group_t *groups;
    const dcp_tile_t *tiles;
    const dcp_merge_item_t *merges;
    const dcp_merge_src_t *srcs;
    const dcp_copy_item_t *copies;
    const int32_t *rows;
} descr_t;

static descr_t descriptors(const dcp_context_t *ctx, const dcp_plan_t *p)
{
    if (ctx->dev->host_memory)
        return (descr_t){p->groups, p->tiles, p->merges, p->merge_srcs, p->copies, NULL};
    const dcp_dev_plan_t *d = &ctx->bound.dev_plan;
    return (descr_t){d->groups, d->tiles, d->merges, d->srcs, d->copies, d->rows};
}

/* A phase's transfers, after the kernels queued so far (ready event or host wait). */
static dcp_status_t launch(dcp_context_t *ctx, const dcp_plan_t *p, const dcp_kernel_env_t *env,
                           const dcp_instr_t *in)
{
    dcp_binding_t *bd = &ctx->bound;
    void *ready = bd->ready[in->arg];
    if (ctx->engine->stream_ordered) {
        DCP_CHECK(ctx->dev->event_record(ready, ctx->stream));
    } else {
        DCP_TEST_COUNT(DCP_COUNT_HOST_SYNC);
        DCP_CHECK(ctx->dev->stream_sync(ctx->stream));
    }
    for (int64_t i = 0; i < in->count; i++) {
        const dcp_comm_op_t *op = &p->comm[in->first + i];
        const size_t es = (size_t)dcp_plan_elem_bytes(p, op->buf);
        bd->ops[i] = (dcp_xfer_op_t){
            .peer = op->peer,
            .send = op->send,
            .tag = dcp_tag_data(p->fingerprint, (uint32_t)op->transfer),
            .ptr = (char *)env->bufs[op->buf] + (size_t)op->off * es,
            .bytes = (size_t)op->elems * es,
            .ready = ctx->engine->stream_ordered ? ready : NULL,
            .done = ctx->engine->stream_ordered ? bd->done[in->first + i - bd->comm_lo] : NULL,
        };
    }
    return ctx->engine->ops->launch(ctx->engine, bd->ops, in->count, &bd->reqs[in->arg]);
}

/* One round of progress: every request in flight tested (the engine moves what it can). */
static dcp_status_t progress(dcp_context_t *ctx, const dcp_plan_t *p)
{
    for (int32_t s = 0; s < p->num_phases; s++) {
        int done = 0;
        if (ctx->bound.reqs[s])
            DCP_CHECK(ctx->engine->ops->test(ctx->engine, ctx->bound.reqs[s], &done));
    }
    return DCP_OK;
}

/* An ATTN instruction: the attention engine's segment program where it has one (attn_engine.h),
 * else the tile list in slices with progress between them when the transfer engine needs it.
 * A forward that returns the max logit runs the tile list: the engine's graphs do not give it. */
static dcp_status_t attn(dcp_context_t *ctx, const dcp_plan_t *p, int fwd,
                         const dcp_kernel_env_t *env, const descr_t *d, const dcp_instr_t *in)
{
    const int64_t launch = env->max_logit ? -1
                                          : dcp_attn_launch(ctx, fwd ? DCP_PASS_FWD : DCP_PASS_BWD,
                                                            (int64_t)(in - p->instrs));
    if (launch >= 0) {
        DCP_CHECK(dcp_attn_run(ctx, fwd ? DCP_PASS_FWD : DCP_PASS_BWD, launch, env));
        return ctx->drive_progress ? progress(ctx, p) : DCP_OK;
    }
    const dcp_kernels_t *k = ctx->dev->kernels;
    const int64_t slice = ctx->drive_progress ? DCP_PROGRESS_GROUPS : in->count;
    for (int64_t g = 0; g < in->count; g += slice) {
        const int64_t n = in->count - g < slice ? in->count - g : slice;
        DCP_CHECK((fwd ? k->attn_fwd : k->attn_bwd)(env, d->groups + in->first + g, n, d->tiles));
        if (ctx->drive_progress) DCP_CHECK(progress(ctx, p));
    }
    return DCP_OK;
}

/* One instruction. */
static dcp_status_t step(dcp_context_t *ctx, const dcp_plan_t *p, int fwd,
                         const dcp_kernel_env_t *env, const descr_t *d, const dcp_instr_t *in)
{
    const dcp_kernels_t *k = ctx->dev->kernels;
    switch (in->op) {
    case DCP_OP_ATTN:
        return attn(ctx, p, fwd, env, d, in);
    case DCP_OP_REDUCE:
        if (fwd) return k->merge(env, d->merges + in->first, in->count, d->srcs);
        return k->accumulate(env, d->copies + in->first, in->count);
    case DCP_OP_COPY:
        return k->copy(env, d->copies + in->first, in->count);
    case DCP_OP_COMM_LAUNCH:
        return launch(ctx, p, env, in);
    case DCP_OP_COMM_WAIT: {
        const double t0 = dcp_now();
        /* the stamps came with the first launch: a peer running another plan or call
         * is named here, before its blocks are waited for */
        DCP_CHECK(dcp_stamps_settle(ctx));
        DCP_CHECK(ctx->engine->ops->wait(ctx->engine, ctx->bound.reqs[in->arg], ctx->timeout_s,
                                         ctx->engine->stream_ordered ? ctx->stream : NULL));
        ctx->bound.reqs[in->arg] = NULL;
        ctx->wait_blocked_s += dcp_now() - t0;
        return DCP_OK;
    }
    default:
        return dcp_set_error(DCP_ERR_INTERNAL, "executor: opcode %d", in->op);
    }
}

/* The names Nsight Systems shows for the executor's steps (the device table's ranges), by
 * pass and opcode; the payload is the step's division or round. */
static const char *const pass_range[DCP_PASS_COUNT] = {"dcp forward", "dcp backward"};
static const char *const step_range[DCP_PASS_COUNT][DCP_OP_COMM_WAIT + 1] = {
    {"dcp forward ?", "dcp forward ATTN", "dcp forward REDUCE", "dcp forward COPY",
     "dcp forward COMM_LAUNCH", "dcp forward COMM_WAIT"},
    {"dcp backward ?", "dcp backward ATTN", "dcp backward REDUCE", "dcp backward COPY",
     "dcp backward COMM_LAUNCH", "dcp backward COMM_WAIT"},
};

static dcp_status_t run_program(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                                const dcp_kernel_env_t *env_in, const dcp_call_variants_t *v,
                                void *caller)
{
    const descr_t d = descriptors(ctx, p);
    dcp_kernel_env_t launch_env = *env_in;
    const dcp_kernel_env_t *env = &launch_env;
    const int fwd = pass == DCP_PASS_FWD;
    const uint32_t flags = fwd && v->max_logit ? DCP_STAMP_MAX_LOGIT : 0;
    DCP_CHECK(dcp_stamps_launch(ctx, p, pass, env_in->scale, flags));
    const int64_t end = dcp_plan_prog_end(p, pass, ctx->rank);
    /* the variants finish before the outputs are published: the last COPY of a rank with
     * rows (emit_copy_out), else the program's end */
    int finished = 0;
    /* the division or round of the steps: a launch's and a wait's own, and for kernels that of
     * the last wait before them (the blocks they read arrived with it) */
    const int32_t *phase_step = dcp_plan_root(p)->phase_step;
    int64_t division = 0;
    for (int64_t i = dcp_plan_prog_begin(p, pass, ctx->rank); i < end; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        launch_env.max_rows = d.rows ? d.rows[i] : 0;
        if (i == end - 1 && in->op == DCP_OP_COPY && p->rank_tokens[ctx->rank] > 0) {
            DCP_CHECK(dcp_variants_finish(ctx, p, pass, v, env));
            finished = 1;
        }
        DCP_TEST_DELAY(in->op == DCP_OP_COMM_LAUNCH ? DCP_DELAY_LAUNCH
                       : in->op == DCP_OP_COMM_WAIT ? DCP_DELAY_WAIT
                                                    : DCP_DELAY_KERNEL);
        const int comm = in->op == DCP_OP_COMM_LAUNCH || in->op == DCP_OP_COMM_WAIT;
        if (comm && phase_step) division = phase_step[in->arg];
        const int named = in->op >= DCP_OP_ATTN && in->op <= DCP_OP_COMM_WAIT;
        ctx->dev->range_push(step_range[pass][named ? in->op : 0], division);
        const dcp_status_t st = step(ctx, p, fwd, env, &d, in);
        ctx->dev->range_pop();
        DCP_CHECK(st);
        if (ctx->drive_progress && in->op != DCP_OP_ATTN) DCP_CHECK(progress(ctx, p));
    }
    if (!finished) DCP_CHECK(dcp_variants_finish(ctx, p, pass, v, env));
    DCP_CHECK(dcp_stamps_settle(ctx)); /* a rank without transfers checks its neighbours */
    /* the caller's later work runs after the outputs are written */
    DCP_CHECK(ctx->dev->event_record(ctx->exit, ctx->stream));
    DCP_CHECK(ctx->dev->stream_wait(caller, ctx->exit));
    dcp_context_queued(ctx, pass);
    return DCP_OK;
}

/* Every failure of a rank, bad arguments included, is announced to its peers: they are
 * inside the same collective and would otherwise wait for this rank until the timeout. */
static dcp_status_t run_pass(dcp_context_t *ctx, const dcp_plan_t *plan, dcp_pass_t pass,
                             const caller_bufs_t *io, float scale, const dcp_call_variants_t *v,
                             void *caller)
{
    dcp_kernel_env_t env;
    ctx->dev->range_push(pass_range[pass], ctx->calls); /* the call's number */
    dcp_status_t st = check_call(ctx, plan, pass, io, scale, v);
    if (st == DCP_OK) st = prepare(ctx, plan, pass, io, scale, v, caller, &env);
    if (st == DCP_OK) st = run_program(ctx, plan, pass, &env, v, caller);
    ctx->dev->range_pop();
    if (st != DCP_OK) /* before its stamps went out: a notice in their place (stamp.h) */
        dcp_stamps_notify(ctx, plan, pass, dcp_last_error());
    ctx->calls++;
    if (st != DCP_OK) {
        ctx->engine->ops->abort(ctx->engine, dcp_last_error());
        dcp_stamps_cancel(ctx);
        /* queued work may still read the requests' regions: let it finish first */
        (void)ctx->dev->stream_sync(ctx->stream);
        (void)ctx->dev->stream_sync(ctx->xfer_stream);
        const int bound = ctx->bound.serial == plan->serial;
        for (int32_t s = 0; bound && s < plan->num_phases; s++) {
            ctx->engine->ops->cancel(ctx->engine, ctx->bound.reqs[s]);
            ctx->bound.reqs[s] = NULL;
        }
    }
    return st;
}

/* Arguments that cannot reach the peers' collective (no context) fail locally; the rest go
 * through run_pass. */
static dcp_status_t enter(dcp_context_t *ctx, const dcp_plan_t *plan, dcp_pass_t pass,
                          const void *io, const void *stream)
{
    if (!ctx) return dcp_set_error(DCP_ERR_INVALID_ARG, "ctx is NULL");
    DCP_CHECK(dcp_context_health(ctx));
    const char *bad = !plan                             ? "plan is NULL"
                      : !io                             ? "io is NULL"
                      : stream && ctx->dev->host_memory ? "stream is not NULL on a CPU context"
                                                        : NULL;
    if (!bad) return DCP_OK;
    dcp_set_error(DCP_ERR_INVALID_ARG, "%s", bad);
    dcp_stamps_notify(ctx, plan, pass, bad);
    ctx->engine->ops->abort(ctx->engine, bad);
    return DCP_ERR_INVALID_ARG;
}

dcp_status_t dcp_forward(dcp_context_t *ctx, const dcp_plan_t *plan, const dcp_tensors_t *io,
                         void *stream)
{
    DCP_CHECK(enter(ctx, plan, DCP_PASS_FWD, io, stream));
    const caller_bufs_t bufs = forward_bufs(io);
    const dcp_call_variants_t v = {io->sinks, io->max_logit, NULL};
    return run_pass(ctx, plan, DCP_PASS_FWD, &bufs, io->softmax_scale, &v, stream);
}

dcp_status_t dcp_backward(dcp_context_t *ctx, const dcp_plan_t *plan, const dcp_grad_tensors_t *io,
                          void *stream)
{
    DCP_CHECK(enter(ctx, plan, DCP_PASS_BWD, io, stream));
    const caller_bufs_t bufs = backward_bufs(io);
    const dcp_call_variants_t v = {io->fwd.sinks, NULL, io->dsinks};
    return run_pass(ctx, plan, DCP_PASS_BWD, &bufs, io->fwd.softmax_scale, &v, stream);
}
