#include "tests/unit/walk_procs.h"

#include "include/base/error.h"
#include "plugin/hybrid.h"
#include "tests/unit/fault_hook.h"
#include "tests/unit/walk.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Bytes one process gives to one allgather (a hybrid process: all its threads'). */
#define CAP (64 << 10)

typedef struct {
    t_proc_job_t job;
    /* when every process had started: the ranks' times count from here (one clock for all) */
    _Atomic double start;
    atomic_int ready; /* processes started so far */
    atomic_int_fast64_t arrived[T_MAX_PROCS], departed[T_MAX_PROCS];
    t_rank_result_t rank[T_MAX_RANKS];
    t_proc_result_t proc[T_MAX_PROCS];
    char data[2][T_MAX_PROCS * CAP];
} shared_t;

/* ---- the bootstrap --------------------------------------------------------------------- */

/* A process's side of the bootstrap. After a failure every later allgather of the process
 * fails at once with it, as the MPI bootstrap's do (dcp.h allows it): a failed job costs its
 * ranks one timeout, not one per collective of their set-up. */
typedef struct {
    shared_t *sh;
    int32_t proc;
    int64_t round;
    int32_t failed; /* the process that did not take part, -1 while none */
    char why[256];
} boot_t;

static void pause_us(long us)
{
    const struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

/* Waits until every process's counter is at least `round`; the first one that is not, at the
 * deadline, or -1. */
static int32_t wait_all(const atomic_int_fast64_t *counter, int32_t n, int64_t round,
                        double deadline)
{
    for (int spins = 0;; spins++) {
        int32_t late = -1;
        for (int32_t q = n - 1; q >= 0; q--)
            if (atomic_load(&counter[q]) < round) late = q;
        if (late < 0) return -1;
        if (dcp_now() > deadline) return late;
        if (spins > 100) pause_us(50);
    }
}

static dcp_status_t boot_allgather_timed(void *state, const void *send, void *recv, size_t bytes,
                                         double timeout_s, int32_t *failed_rank_out)
{
    boot_t *b = state;
    shared_t *sh = b->sh;
    const int32_t n = sh->job.procs;
    *failed_rank_out = -1;
    if (b->failed >= 0) {
        *failed_rank_out = b->failed;
        return dcp_set_error(DCP_ERR_TIMEOUT, "%s", b->why);
    }
    if (bytes > CAP)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "walk bootstrap: %zu bytes, room for %d", bytes,
                             CAP);
    const int64_t k = ++b->round;
    char *buf = sh->data[k & 1];
    const double deadline = dcp_now() + timeout_s;
    /* buffer k & 1 held round k - 2: every process has read it */
    int32_t late = wait_all(sh->departed, n, k - 2, deadline);
    if (late < 0) {
        memcpy(buf + (size_t)b->proc * bytes, send, bytes);
        atomic_store(&sh->arrived[b->proc], k);
        late = wait_all(sh->arrived, n, k, deadline);
    }
    if (late >= 0) {
        *failed_rank_out = b->failed = late;
        snprintf(b->why, sizeof b->why,
                 "walk bootstrap: process %d did not take part in allgather %lld within %.1f s",
                 late, (long long)k, timeout_s);
        return dcp_set_error(DCP_ERR_TIMEOUT, "%s", b->why);
    }
    memcpy(recv, buf, (size_t)n * bytes);
    atomic_store(&sh->departed[b->proc], k);
    return DCP_OK;
}

static dcp_status_t boot_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    int32_t failed = -1;
    return boot_allgather_timed(state, send, recv, bytes, ((boot_t *)state)->sh->job.timeout_s,
                                &failed);
}

/* ---- a rank ------------------------------------------------------------------------------ */

typedef struct {
    shared_t *sh;
    const dcp_bootstrap_t *bs;
    int32_t rank;
} rank_arg_t;

static void *rank_main(void *arg)
{
    const rank_arg_t *a = arg;
    shared_t *sh = a->sh;
    t_rank_result_t *res = &sh->rank[a->rank];
    const dcp_context_config_t cfg = {.bootstrap = a->bs, .timeout_s = sh->job.timeout_s};
    dcp_context_t *ctx = NULL;
    dcp_plan_t *plan = NULL;
    dcp_status_t st = dcp_context_create(&cfg, &ctx);
    const dcp_cluster_t *c = NULL;
    if (st == DCP_OK) st = dcp_context_cluster(ctx, &c);
    if (st == DCP_OK) {
        t_walk_batch_t b;
        t_walk_batch_init(&b, DCP_STRATEGY_LPT);
        b.opts.divisions = 2;
        st = dcp_plan_create(&b.batch, &b.shape, &b.opts, c, &plan);
        /* a rank that cannot plan tells its peers, which are about to wait for it */
        if (st != DCP_OK) dcp_context_abort(ctx, dcp_last_error());
    }
    if (st == DCP_OK) st = t_rank_pass(ctx, plan, a->rank, &res->digest);
    res->st = st;
    if (st != DCP_OK) dcp_error_save(res->msg, sizeof res->msg);
    res->ended_at = dcp_now();
    res->secs = res->ended_at - sh->start;
    dcp_plan_destroy(plan);
    dcp_context_destroy(ctx);
    res->ended = 1;
    return NULL;
}

/* Every rank of a process whose set-up failed ends with that failure. */
static void all_failed(shared_t *sh, int32_t proc, dcp_status_t st)
{
    const int32_t t = sh->job.threads;
    for (int32_t l = 0; l < t; l++) {
        t_rank_result_t *res = &sh->rank[proc * t + l];
        res->st = st;
        dcp_error_save(res->msg, sizeof res->msg);
        res->ended_at = dcp_now();
        res->secs = res->ended_at - sh->start;
        res->ended = 1;
    }
}

/* A process's ranks over its bootstrap: itself, or (a hybrid job) its threads' ranks over a
 * hybrid (plugin/hybrid.h), each on a thread of its own. */
static void run_process(shared_t *sh, const dcp_bootstrap_t *bs, int32_t proc)
{
    const t_proc_job_t *job = &sh->job;
    if (job->threads == 1) {
        const rank_arg_t a = {sh, bs, proc};
        rank_main((void *)&a);
        return;
    }
    dcp_hybrid_t *h = NULL;
    const dcp_status_t st = dcp_hybrid_create(bs, job->threads, &h);
    if (st != DCP_OK) {
        all_failed(sh, proc, st);
    } else {
        rank_arg_t a[T_MAX_RANKS];
        pthread_t tid[T_MAX_RANKS];
        for (int32_t l = 0; l < job->threads; l++) {
            a[l] = (rank_arg_t){sh, dcp_hybrid_bootstrap(h, l), proc * job->threads + l};
            pthread_create(&tid[l], NULL, rank_main, &a[l]);
        }
        for (int32_t l = 0; l < job->threads; l++) pthread_join(tid[l], NULL);
    }
    dcp_hybrid_destroy(h);
}

int t_rank_proc_main(int argc, char **argv)
{
    if (argc != 4) return 2;
    const int fd = open(argv[2], O_RDWR);
    if (fd < 0) return 2;
    shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (sh == MAP_FAILED) return 2;
    const int32_t proc = atoi(argv[3]);
    const t_proc_job_t *job = &sh->job;
    /* the processes start together, so that a slow start (ASan, a loaded machine) is not
     * taken for a rank that fails to come: the timeouts count from here */
    if (atomic_fetch_add(&sh->ready, 1) + 1 == job->procs) atomic_store(&sh->start, dcp_now());
    for (const double until = dcp_now() + 60;
         atomic_load(&sh->ready) < job->procs && dcp_now() < until;)
        pause_us(1000);
    if (atomic_load(&sh->start) == 0.0) atomic_store(&sh->start, dcp_now()); /* one never came */
    dcp_test_alloc_track(1);
    dcp_test_alloc_fail_at(proc == job->victim ? job->alloc_at : 0);
    dcp_test_fault_at(proc == job->victim ? job->fault_at : 0);
    boot_t boot = {sh, proc, 0, -1, ""};
    const dcp_bootstrap_t bs = {proc,  job->procs,           boot_allgather,
                                &boot, boot_allgather_timed, job->timeout_s};
    run_process(sh, &bs, proc);
    t_proc_result_t *pr = &sh->proc[proc];
    pr->allocs = dcp_test_alloc_count();
    pr->faults = dcp_test_fault_count();
    dcp_fault_site_t site = DCP_FAULT_COUNT;
    pr->fired = dcp_test_alloc_fired(NULL) || dcp_test_fault_fired(&site);
    pr->fault_site = (int32_t)site;
    pr->fired_at = dcp_test_fired_time();
    pr->leaked = dcp_test_alloc_live_blocks();
    if (pr->leaked) dcp_test_alloc_live_print(stderr, 8);
    munmap(sh, sizeof *sh);
    return 0;
}

/* ---- the job ----------------------------------------------------------------------------- */

/* UCX reports what an injected failure leaves behind (requests not returned to its pools, a
 * dead peer's shared segment): the walks judge the outcome themselves, so UCX says only what
 * is fatal, unless the caller chose a level. */
static void quiet_ucx(void)
{
    setenv("UCX_LOG_LEVEL", "fatal", 0);
}

int t_procs_run(const t_proc_job_t *job, t_job_result_t *out)
{
    memset(out, 0, sizeof *out);
    quiet_ucx();
    if (job->procs < 1 || job->procs > T_MAX_PROCS || job->threads < 1 ||
        job->procs * job->threads > T_MAX_RANKS)
        return -1;
    char path[] = "/tmp/dcp-walk-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return -1;
    shared_t *sh = MAP_FAILED;
    if (ftruncate(fd, sizeof *sh) == 0)
        sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (sh == MAP_FAILED) {
        unlink(path);
        return -1;
    }
    sh->job = *job;
    char exe[4096];
    const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[len > 0 ? len : 0] = '\0';
    pid_t pid[T_MAX_PROCS] = {0};
    int started = 0;
    for (int32_t p = 0; p < job->procs; p++) {
        char index[16];
        snprintf(index, sizeof index, "%d", p);
        char *argv[] = {exe, "--walk-rank", path, index, NULL};
        if (posix_spawn(&pid[p], exe, NULL, NULL, argv, environ) != 0) break;
        started++;
    }
    /* the ranks end by themselves within a few timeouts; past that they hang */
    const double deadline = dcp_now() + 4 * job->timeout_s + 30;
    int left = started;
    while (left > 0) {
        for (int32_t p = 0; p < started; p++) {
            int status = 0;
            if (pid[p] > 0 && waitpid(pid[p], &status, WNOHANG) == pid[p]) {
                sh->proc[p].exit_status = status;
                pid[p] = 0;
                left--;
            }
        }
        if (left == 0) break;
        if (dcp_now() > deadline) {
            out->hung = 1;
            for (int32_t p = 0; p < started; p++)
                if (pid[p] > 0) {
                    kill(pid[p], SIGKILL);
                    waitpid(pid[p], &sh->proc[p].exit_status, 0);
                }
            break;
        }
        pause_us(5000);
    }
    out->secs = sh->start > 0 ? dcp_now() - sh->start : 0;
    memcpy(out->rank, sh->rank, sizeof out->rank);
    memcpy(out->proc, sh->proc, sizeof out->proc);
    for (int32_t p = started; p < job->procs; p++) out->proc[p].exit_status = -1;
    munmap(sh, sizeof *sh);
    unlink(path);
    return started == job->procs ? 0 : -1;
}

typedef struct {
    shared_t *sh;
    const dcp_bootstrap_t *bs;
    int32_t proc;
} proc_arg_t;

static void *process_main(void *arg)
{
    const proc_arg_t *a = arg;
    run_process(a->sh, a->bs, a->proc);
    return NULL;
}

int t_threads_run(const t_proc_job_t *job, t_job_result_t *out)
{
    memset(out, 0, sizeof *out);
    if (job->procs < 1 || job->procs > T_MAX_PROCS || job->threads < 1 ||
        job->procs * job->threads > T_MAX_RANKS)
        return -1;
    quiet_ucx();
    shared_t *sh = calloc(1, sizeof *sh);
    if (!sh) return -1;
    sh->job = *job;
    sh->start = dcp_now();
    boot_t boot[T_MAX_PROCS];
    dcp_bootstrap_t bs[T_MAX_PROCS];
    proc_arg_t a[T_MAX_PROCS];
    pthread_t tid[T_MAX_PROCS];
    for (int32_t p = 0; p < job->procs; p++) {
        boot[p] = (boot_t){sh, p, 0, -1, ""};
        bs[p] = (dcp_bootstrap_t){p,        job->procs,           boot_allgather,
                                  &boot[p], boot_allgather_timed, job->timeout_s};
        a[p] = (proc_arg_t){sh, &bs[p], p};
        pthread_create(&tid[p], NULL, process_main, &a[p]);
    }
    for (int32_t p = 0; p < job->procs; p++) pthread_join(tid[p], NULL);
    out->secs = dcp_now() - sh->start;
    memcpy(out->rank, sh->rank, sizeof out->rank);
    free(sh);
    return 0;
}
