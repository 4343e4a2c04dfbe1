/* For dcp's tools: whether an MPI launcher started this process, and MPI set-up around the
 * MPI bootstrap. Tool code (it may end the job), linked only into the tools that run under
 * mpirun; the libraries never abort.
 *
 * No step of a tool's job waits forever on a rank that died, stopped or never started:
 * MPI_Init and MPI_Finalize run under a watchdog ($DCP_TIMEOUT_S or 60 s), the bootstrap's
 * collectives are timed (dcp_bootstrap_mpi), and a tool that failed ends its own process
 * (with status `code`) instead of waiting for the launcher. */
#ifndef DCPT_CLI_MPI_LAUNCH_H
#define DCPT_CLI_MPI_LAUNCH_H

#include "include/dcp.h"

/* 1 when mpirun/mpiexec/srun (Open MPI, MPICH-style PMI, PMIx) started this process. */
int dcpt_mpi_launched(void);

/* Ends the process (status 2, naming the variables it read) when it is one of several tasks of
 * a Slurm job step that no process-management interface reached (srun --mpi=none, or a site
 * whose MpiDefault is none): each task would otherwise run a job of its own. Call before any
 * work; returns otherwise. */
void dcpt_mpi_require_pmi(const char *tool);

/* This process's rank among those of its node, from the launcher's environment (Open MPI,
 * MPICH/Hydra, Slurm); 0 when none says. */
int dcpt_mpi_local_rank(void);

/* MPI_Init (under the watchdog) and the bootstrap over MPI_COMM_WORLD. The bootstrap must
 * stay where it is until dcpt_mpi_stop(): the end-of-job vote runs over it. */
dcp_status_t dcpt_mpi_start(int *argc, char ***argv, dcp_bootstrap_t *bootstrap_out);

/* Healthy (failed = 0): a last vote over the bootstrap, so that a rank that died or stopped
 * is named instead of hanging MPI_Finalize, then MPI_Finalize (under the watchdog). After a
 * failure, or when the vote fails: the process exits with `code` (stdout and stderr
 * flushed) without MPI_Finalize, and the launcher ends the rest of the job; under Open MPI's
 * recovery mode the other ranks end by their own timeouts. Returns only when healthy. */
void dcpt_mpi_stop(int failed, int code);

/* For dcpt_args_set_fail_hook: under an MPI launcher, MPI_Init (under the watchdog), so that
 * the job's start-up completes, then exit(2) at once without MPI_Finalize: the other ranks'
 * first collective then names this rank (DCP_ERR_TIMEOUT) instead of hanging in MPI_Init. */
void dcpt_mpi_fail_early(void);

/* Fault injection for tests/mpi/kill.sh: with DCP_FAULT=RANK:PHASE:ACTION in the
 * environment, rank RANK does ACTION (kill: SIGKILL itself, stop: SIGSTOP itself, exit:
 * exit at once with status 3) on reaching PHASE. Phases: "init" (after MPI_Init), "context"
 * (inside context creation: its second bootstrap collective), and the names the tools pass
 * here ("plan", "forward", "between", "destroy" in dcp-attn-test). With DCP_FAULT_STAMP=FILE
 * it first writes the wall-clock time to FILE. Nothing happens without DCP_FAULT; a DCP_FAULT
 * not of that form fails dcpt_mpi_start by name. */
void dcpt_mpi_fault_point(const char *phase);

/* Whether DCP_FAULT is RANK:PHASE:ACTION with these three (faults a tool injects itself, such
 * as dcp-transport-bench's "check:flip"). */
int dcpt_mpi_fault_is(int rank, const char *phase, const char *action);

#endif
