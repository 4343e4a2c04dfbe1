/* For dcp's tools: whether an MPI launcher started this process, and MPI set-up around the
 * MPI bootstrap. Tool code (it may end the job), linked only into the tools that run under
 * mpirun; the libraries never abort. */
#ifndef DCP_CLI_MPI_LAUNCH_H
#define DCP_CLI_MPI_LAUNCH_H

#include "include/dcp.h"

/* 1 when mpirun/mpiexec/srun (Open MPI, MPICH-style PMI, PMIx) started this process. */
int dcp_mpi_launched(void);

/* This process's rank among those of its node, from the launcher's environment (Open MPI,
 * MPICH/Hydra, Slurm); 0 when none says. */
int dcp_mpi_local_rank(void);

/* MPI_Init and the bootstrap over MPI_COMM_WORLD. */
dcp_status_t dcp_mpi_start(int *argc, char ***argv, dcp_bootstrap_t *bootstrap_out);

/* MPI_Finalize when healthy; after a failure MPI_Abort(code), so that the launcher ends the
 * job instead of waiting on ranks that will never finalize. */
void dcp_mpi_stop(int failed, int code);

#endif
