/*
 * Ranks as processes for the failure walks: this test program started again once per process
 * (dcp-tests --walk-rank FILE P), the processes joined by a timed allgather over a shared file
 * mapping (a rank that fails or dies is named by the others within the timeout), each process
 * one rank or, in a hybrid job, several ranks as threads (plugin/hybrid.h). Every rank creates
 * its context over the bootstrap (UCX between processes), plans the walks' batch on the
 * cluster its context discovered, runs forward and backward (t_rank_pass) and destroys
 * everything; one process, the victim, fails its Nth allocation or transport call.
 */
#ifndef DCP_TESTS_WALK_PROCS_H
#define DCP_TESTS_WALK_PROCS_H

#include "include/dcp.h"
#include "include/base/test_hook.h"

#include <stdint.h>

#define T_MAX_PROCS 8
#define T_MAX_RANKS 16

typedef struct {
    int32_t procs, threads;     /* processes, ranks per process (a hybrid job when > 1) */
    int32_t victim;             /* the process whose Nth call fails, -1: none */
    int64_t alloc_at, fault_at; /* its Nth allocation / transport call fails (0: none) */
    double timeout_s;           /* the contexts' and the bootstrap's */
} t_proc_job_t;

typedef struct {
    dcp_status_t st; /* the rank's first failure, else DCP_OK */
    char msg[384];
    double secs;     /* from its process's start to the rank's end */
    double ended_at; /* when it ended, on dcp_now()'s clock (one for all processes) */
    uint64_t digest;
    int ended;
} t_rank_result_t;

typedef struct {
    int exit_status;    /* the process's wait status (0: it exited by itself with 0) */
    int64_t allocs;     /* allocations it asked for */
    int64_t faults;     /* transport calls that could fail */
    int fired;          /* its injected failure happened */
    double fired_at;    /* when, on dcp_now()'s clock */
    int32_t fault_site; /* which kind of transport call (dcp_fault_site_t) */
    int64_t leaked;     /* blocks of dcp's allocator left once everything was destroyed */
} t_proc_result_t;

typedef struct {
    t_rank_result_t rank[T_MAX_RANKS];
    t_proc_result_t proc[T_MAX_PROCS];
    int hung;    /* processes had to be killed */
    double secs; /* the job's wall time */
} t_job_result_t;

/* Runs one job and fills *out; 0 when it could be started. */
int t_procs_run(const t_proc_job_t *job, t_job_result_t *out);

/* The same job in this process: every process a thread, which runs its rank, or (threads > 1)
 * makes its hybrid and runs its ranks on threads of their own; each rank has its own context
 * (and UCX worker) over the same bootstrap. The failure counters are this process's, set by
 * the caller, and out->proc is left zero. */
int t_threads_run(const t_proc_job_t *job, t_job_result_t *out);

/* The entry of a rank process (the runner calls it for --walk-rank). */
int t_rank_proc_main(int argc, char **argv);

#endif
