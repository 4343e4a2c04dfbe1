/* dcp_forward_inproc and dcp_backward_inproc: every rank of a plan as a thread of this
 * process; and the runner they share with tools that keep their contexts across batches. */
#include "include/base/error.h"
#include "partition/plan/plan.h"
#include "plugin/context.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    dcp_context_t *ctx;
    const dcp_plan_t *plan;
    const dcp_tensors_t *io;       /* forward */
    const dcp_grad_tensors_t *gio; /* backward */
    int32_t rank;
    dcp_status_t status;
    double host_ms; /* from the call's entry to its return */
    char error[512];
} rank_job_t;

/* One rank's call on the legacy default stream, then a wait for its work: the group's
 * callers read the outputs when it returns. */
static void *rank_main(void *arg)
{
    rank_job_t *j = arg;
    const double t0 = dcp_now();
    j->status = j->gio ? dcp_backward(j->ctx, j->plan, j->gio, NULL)
                       : dcp_forward(j->ctx, j->plan, j->io, NULL);
    j->host_ms = (dcp_now() - t0) * 1e3;
    if (j->status == DCP_OK) j->status = j->ctx->dev->stream_sync(NULL);
    if (j->status != DCP_OK) dcp_error_save(j->error, sizeof j->error);
    return NULL;
}

/* The failure to report: a rank's own error rather than the PEER/TIMEOUT it caused. */
static const rank_job_t *first_failure(const rank_job_t *jobs, int32_t n)
{
    const rank_job_t *pick = NULL;
    for (int32_t r = 0; r < n; r++) {
        if (jobs[r].status == DCP_OK) continue;
        const int secondary = jobs[r].status == DCP_ERR_PEER || jobs[r].status == DCP_ERR_TIMEOUT;
        if (!pick ||
            (!secondary && (pick->status == DCP_ERR_PEER || pick->status == DCP_ERR_TIMEOUT)))
            pick = &jobs[r];
    }
    return pick;
}

/* Exactly one of io (forward) and gio (backward) is non-NULL. */
static dcp_status_t run_group(dcp_context_t *const *ctx, int32_t n, const dcp_plan_t *plan,
                              const dcp_tensors_t *io, const dcp_grad_tensors_t *gio,
                              double *host_ms_out)
{
    rank_job_t *jobs;
    pthread_t *tid;
    DCP_CHECK(dcp_calloc(&jobs, n, sizeof *jobs, "rank threads"));
    dcp_status_t st = dcp_calloc(&tid, n, sizeof *tid, "rank threads");
    if (st != DCP_OK) {
        free(jobs);
        return st;
    }
    int32_t started = 0;
    for (int32_t r = 0; r < n; r++) {
        jobs[r] = (rank_job_t){ctx[r], plan, io ? &io[r] : NULL, gio ? &gio[r] : NULL, r, DCP_OK,
                               0.0,    ""};
        if (r == 0) continue; /* rank 0 runs on the calling thread */
        if (pthread_create(&tid[r], NULL, rank_main, &jobs[r]) != 0) {
            jobs[r].status = dcp_set_error(DCP_ERR_SYSTEM, "cannot start the thread of rank %d", r);
            dcp_error_save(jobs[r].error, sizeof jobs[r].error);
            break;
        }
        started = r;
    }
    if (started == n - 1)
        rank_main(&jobs[0]);
    else /* ranks that started would time out: tell them now */
        ctx[0]->engine->ops->abort(ctx[0]->engine, dcp_last_error());
    for (int32_t r = 1; r <= started; r++) pthread_join(tid[r], NULL);
    const rank_job_t *bad = first_failure(jobs, n);
    for (int32_t r = 0; host_ms_out && r < n; r++)
        if (r == 0 || jobs[r].host_ms > *host_ms_out) *host_ms_out = jobs[r].host_ms;
    st = DCP_OK;
    if (bad) st = dcp_set_error(bad->status, "rank %d: %s", bad->rank, bad->error);
    free(tid);
    free(jobs);
    return st;
}

dcp_status_t dcp_forward_group(dcp_context_t *const *ctx, int32_t n, const dcp_plan_t *plan,
                               const dcp_tensors_t *io, double *host_ms_out)
{
    return run_group(ctx, n, plan, io, NULL, host_ms_out);
}

dcp_status_t dcp_backward_group(dcp_context_t *const *ctx, int32_t n, const dcp_plan_t *plan,
                                const dcp_grad_tensors_t *io, double *host_ms_out)
{
    return run_group(ctx, n, plan, NULL, io, host_ms_out);
}

dcp_status_t dcp_inproc_contexts_create(int32_t n, const dcp_context_config_t *base,
                                        dcp_group_t **group_out, dcp_context_t ***ctx_out)
{
    dcp_group_t *group;
    DCP_CHECK(dcp_group_create(n, &group));
    dcp_context_t **ctx = NULL; /* destroy takes a partial set: none when this fails */
    dcp_status_t st = dcp_calloc(&ctx, n, sizeof *ctx, "contexts");
    for (int32_t r = 0; st == DCP_OK && r < n; r++) {
        dcp_context_config_t cfg = *base;
        cfg.rank = r;
        cfg.group = group;
        cfg.bootstrap = NULL;
        st = dcp_context_create(&cfg, &ctx[r]);
    }
    if (st != DCP_OK) {
        dcp_inproc_contexts_destroy(n, group, ctx);
        return st;
    }
    *group_out = group;
    *ctx_out = ctx;
    return DCP_OK;
}

void dcp_inproc_contexts_destroy(int32_t n, dcp_group_t *group, dcp_context_t **ctx)
{
    for (int32_t r = 0; ctx && r < n; r++) dcp_context_destroy(ctx[r]);
    free(ctx);
    dcp_group_destroy(group);
}

static dcp_status_t run_inproc(const dcp_plan_t *plan, const dcp_tensors_t *io,
                               const dcp_grad_tensors_t *gio, double timeout_s, const char *device)
{
    if (!plan || (!io && !gio))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "io" : "plan");
    dcp_group_t *group;
    dcp_context_t **ctx;
    const dcp_context_config_t base = {.timeout_s = timeout_s, .device = device};
    DCP_CHECK(dcp_inproc_contexts_create(plan->num_ranks, &base, &group, &ctx));
    const dcp_status_t st = run_group(ctx, plan->num_ranks, plan, io, gio, NULL);
    dcp_inproc_contexts_destroy(plan->num_ranks, group, ctx);
    return st;
}

dcp_status_t dcp_forward_inproc(const dcp_plan_t *plan, const dcp_tensors_t *io, double timeout_s,
                                const char *device)
{
    return run_inproc(plan, io, NULL, timeout_s, device);
}

dcp_status_t dcp_backward_inproc(const dcp_plan_t *plan, const dcp_grad_tensors_t *io,
                                 double timeout_s, const char *device)
{
    return run_inproc(plan, NULL, io, timeout_s, device);
}
