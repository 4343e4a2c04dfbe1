/* dcp_forward_inproc: every rank of a plan as a thread of this process. */
#include "include/base/error.h"
#include "partition/plan.h"
#include "plugin/context.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const dcp_plan_t *plan;
    const dcp_tensors_t *io;
    dcp_group_t *group;
    int32_t rank;
    double timeout_s;
    const char *device;
    dcp_status_t status;
    char error[512];
} rank_job_t;

static void *rank_main(void *arg)
{
    rank_job_t *j = arg;
    dcp_context_t *ctx = NULL;
    const dcp_context_config_t cfg = {
        .rank = j->rank, .group = j->group, .timeout_s = j->timeout_s, .device = j->device};
    j->status = dcp_context_create(&cfg, &ctx);
    if (j->status == DCP_OK) j->status = dcp_forward(ctx, j->plan, &j->io[j->rank]);
    if (j->status != DCP_OK) dcp_error_save(j->error, sizeof j->error);
    dcp_context_destroy(ctx);
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

dcp_status_t dcp_forward_inproc(const dcp_plan_t *plan, const dcp_tensors_t *io, double timeout_s,
                                const char *device)
{
    if (!plan || !io) return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "io" : "plan");
    const int32_t n = plan->num_ranks;
    dcp_group_t *group;
    DCP_CHECK(dcp_group_create(n, &group));
    rank_job_t *jobs;
    pthread_t *tid;
    dcp_status_t st = dcp_calloc(&jobs, n, sizeof *jobs, "rank threads");
    if (st != DCP_OK) {
        dcp_group_destroy(group);
        return st;
    }
    st = dcp_calloc(&tid, n, sizeof *tid, "rank threads");
    if (st != DCP_OK) {
        free(jobs);
        dcp_group_destroy(group);
        return st;
    }
    int32_t started = 0;
    for (int32_t r = 0; r < n; r++) {
        jobs[r] = (rank_job_t){plan, io, group, r, timeout_s, device, DCP_OK, ""};
        if (r == 0) continue; /* rank 0 runs on the calling thread */
        if (pthread_create(&tid[r], NULL, rank_main, &jobs[r]) != 0) {
            jobs[r].status = dcp_set_error(DCP_ERR_SYSTEM, "cannot start the thread of rank %d", r);
            dcp_error_save(jobs[r].error, sizeof jobs[r].error);
            break;
        }
        started = r;
    }
    if (started == n - 1) {
        rank_main(&jobs[0]);
    } else { /* ranks that started will time out or see the failure: tell them now */
        dcp_engine_t *e;
        if (dcp_inproc_engine_create(group->hub, 0, &e) == DCP_OK) {
            e->ops->abort(e);
            dcp_engine_destroy(e);
        }
    }
    for (int32_t r = 1; r <= started; r++) pthread_join(tid[r], NULL);
    const rank_job_t *bad = first_failure(jobs, n);
    st = DCP_OK;
    if (bad) st = dcp_set_error(bad->status, "rank %d: %s", bad->rank, bad->error);
    free(tid);
    free(jobs);
    dcp_group_destroy(group);
    return st;
}
