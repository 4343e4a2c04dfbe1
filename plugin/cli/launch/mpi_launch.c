#include "plugin/cli/launch/mpi_launch.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/timeout.h"
#include "plugin/cli/support/job.h"

#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dcpt_mpi_launched(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                 "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

static int env_int(const char *const *vars, size_t n, int fallback)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(vars[i]);
        if (v) return atoi(v);
    }
    return fallback;
}

void dcpt_mpi_require_pmi(const char *tool)
{
    const char *id = getenv("SLURM_PROCID"), *tasks = getenv("SLURM_STEP_NUM_TASKS");
    if (!id || !tasks || atoi(tasks) < 2 || dcpt_mpi_launched()) return;
    fprintf(stderr,
            "%s: Slurm task %s of %s (SLURM_PROCID, SLURM_STEP_NUM_TASKS) has no process-"
            "management interface: srun gave it neither PMIx (PMIX_RANK) nor PMI-2 (PMI_RANK, "
            "PMI_SIZE), so every task would run a job of its own. Run srun --mpi=pmix (Open "
            "MPI, and MPICH built with PMIx) or --mpi=pmi2 (MPICH); srun --mpi=list shows what "
            "this Slurm has\n",
            tool, id, tasks);
    exit(2);
}

/* The processes the launcher started, from its environment (0 when none says): a world of
 * another size means that MPI did not speak the launcher's PMI and started alone. */
static int launched_size(const char **var_out)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v) {
            *var_out = vars[i];
            return atoi(v);
        }
    }
    return 0;
}

int dcpt_mpi_local_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                 "PMI_LOCAL_RANK"};
    return env_int(vars, sizeof vars / sizeof vars[0], 0);
}

/* This process's rank in the job from the launcher's environment (known before MPI_Init). */
static int world_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"};
    return env_int(vars, sizeof vars / sizeof vars[0], -1);
}

/* ---- the watchdog of MPI calls that cannot time out by themselves ------------------------ */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    double seconds;
    const char *what;
} watchdog_t;

static void *watchdog_main(void *arg)
{
    watchdog_t *w = arg;
    const struct timespec until = dcp_deadline_after(w->seconds);
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &until) != 0) break;
    const int done = w->done;
    pthread_mutex_unlock(&w->mu);
    if (!done) {
        fprintf(stderr,
                "rank %d: %s did not end within %g s: a rank of the job died, stopped or never "
                "started (DCP_ERR_TIMEOUT)\n",
                world_rank(), w->what, w->seconds);
        fflush(NULL);
        _exit(1);
    }
    return NULL;
}

/* Starts a watchdog of `what`; 0 when no thread could be started (then there is none). */
static int watchdog_arm(watchdog_t *w, pthread_t *tid, const char *what)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &a);
    pthread_condattr_destroy(&a);
    const dcp_bootstrap_t none = {0};
    w->done = 0;
    w->seconds = dcpt_job_timeout(&none); /* $DCP_TIMEOUT_S or 60 s */
    w->what = what;
    return pthread_create(tid, NULL, watchdog_main, w) == 0;
}

static void watchdog_disarm(watchdog_t *w, pthread_t tid, int armed)
{
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (armed) pthread_join(tid, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}

/* ---- fault injection --------------------------------------------------------------------- */

typedef struct {
    int rank;
    char phase[32], action[16];
} fault_t;

/* $DCP_FAULT read: 1 when it is set and of the form RANK:PHASE:ACTION, 0 otherwise. */
static int read_fault(fault_t *f)
{
    const char *spec = dcp_env_str_value(DCP_ENV_FAULT);
    int n = 0;
    return spec && sscanf(spec, "%d:%31[^:]:%15[^:]%n", &f->rank, f->phase, f->action, &n) == 3 &&
           spec[n] == '\0' && f->rank >= 0;
}

/* Tool settings that do not read fail the tool's start by name. */
static dcp_status_t check_settings(void)
{
    DCP_CHECK(dcp_env_check(DCP_ENV_TOOL));
    fault_t f;
    if (dcp_env_raw(DCP_ENV_FAULT) && !read_fault(&f))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "$DCP_FAULT = \"%.60s\": RANK:PHASE:ACTION",
                             dcp_env_raw(DCP_ENV_FAULT));
    return DCP_OK;
}

int dcpt_mpi_fault_is(int rank, const char *phase, const char *action)
{
    fault_t f;
    return read_fault(&f) && f.rank == rank && !strcmp(f.phase, phase) && !strcmp(f.action, action);
}

void dcpt_mpi_fault_point(const char *phase)
{
    fault_t fault;
    if (!read_fault(&fault) || fault.rank != world_rank() || strcmp(fault.phase, phase) != 0)
        return;
    const int rank = fault.rank;
    const char *action = fault.action;
    fprintf(stderr, "rank %d: fault injected at %s: %s\n", rank, phase, action);
    fflush(NULL);
    const char *stamp = dcp_env_str_value(DCP_ENV_FAULT_STAMP); /* when, for the test's clock */
    FILE *f = stamp ? fopen(stamp, "w") : NULL;
    if (f) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        fprintf(f, "%lld.%09ld\n", (long long)now.tv_sec, now.tv_nsec);
        fclose(f);
    }
    if (!strcmp(action, "kill")) raise(SIGKILL);
    if (!strcmp(action, "stop")) raise(SIGSTOP);
    if (!strcmp(action, "exit")) _exit(3);
}

/* The tool's bootstrap: the MPI one, and the "context" fault point at its second
 * collective (inside dcp_context_create, which runs several). */
static dcp_bootstrap_t mpi_bs;
static const dcp_bootstrap_t *job_bs; /* the caller's copy, for the end-of-job vote */
static int collectives;

static dcp_status_t counted_allgather(void *state, const void *send, void *recv, size_t bytes,
                                      double timeout_s, int32_t *failed_rank_out)
{
    if (++collectives == 2) dcpt_mpi_fault_point("context");
    return mpi_bs.allgather_timed(state, send, recv, bytes, timeout_s, failed_rank_out);
}

dcp_status_t dcpt_mpi_start(int *argc, char ***argv, dcp_bootstrap_t *bootstrap_out)
{
    DCP_CHECK(check_settings());
    watchdog_t w;
    pthread_t tid;
    const int armed = watchdog_arm(&w, &tid, "MPI_Init");
    const int rc = MPI_Init(argc, argv);
    watchdog_disarm(&w, tid, armed);
    if (rc != MPI_SUCCESS) return dcp_set_error(DCP_ERR_SYSTEM, "MPI_Init returned %d", rc);
    /* errors come back as codes, so that a failed collective is reported, not fatal */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int size = 0;
    const char *var = NULL;
    const int want = launched_size(&var);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (want > 0 && size != want) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING] = "";
        int len = 0;
        MPI_Get_library_version(lib, &len);
        lib[strcspn(lib, "\n")] = '\0';
        for (char *c = lib; *c; c++) *c = *c == '\t' ? ' ' : *c;
        return dcp_set_error(DCP_ERR_SYSTEM,
                             "MPI_COMM_WORLD has %d rank(s) but the launcher started %d (%s): this "
                             "MPI (%s) did not speak the launcher's process-management interface "
                             "(%s) and started alone; under srun use the --mpi= plugin it was "
                             "built for (Open MPI: pmix; MPICH: pmi2, or pmix where built with it)",
                             size, want, var, lib,
                             getenv("PMIX_RANK")  ? "PMIx"
                             : getenv("PMI_FD")   ? "PMI-2"
                             : getenv("PMI_RANK") ? "PMI"
                                                  : "none");
    }
    dcpt_mpi_fault_point("init");
    DCP_CHECK(dcp_bootstrap_mpi(&mpi_bs));
    *bootstrap_out = mpi_bs;
    if (dcp_env_raw(DCP_ENV_FAULT)) bootstrap_out->allgather_timed = counted_allgather;
    job_bs = bootstrap_out;
    return DCP_OK;
}

void dcpt_mpi_fail_early(void)
{
    int init = 0;
    MPI_Initialized(&init);
    if (dcpt_mpi_launched() && !init) {
        watchdog_t w;
        pthread_t tid;
        const int armed = watchdog_arm(&w, &tid, "MPI_Init");
        MPI_Init(NULL, NULL);
        watchdog_disarm(&w, tid, armed);
    }
    fflush(NULL);
    _exit(2);
}

void dcpt_mpi_stop(int failed, int code)
{
    int init = 0, done = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&done);
    if (!init || done) {
        if (failed) _exit(code);
        return;
    }
    if (!failed && job_bs) {
        const dcp_status_t st = dcpt_job_agree(job_bs, DCP_OK, "the end of the job");
        if (st != DCP_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", job_bs->rank, dcp_status_string(st),
                    dcp_last_error());
            failed = 1;
            code = 1;
        }
    }
    if (failed) { /* a peer may be gone: MPI_Finalize and MPI_Abort could wait for it */
        fflush(NULL);
        _exit(code);
    }
    watchdog_t w;
    pthread_t tid;
    const int armed = watchdog_arm(&w, &tid, "MPI_Finalize");
    MPI_Finalize();
    watchdog_disarm(&w, tid, armed);
}
