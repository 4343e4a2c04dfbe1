#include "plugin/cli/mpi_launch.h"

#include "include/base/error.h"

#include <mpi.h>
#include <stdlib.h>

int dcp_mpi_launched(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK",
                                 "MV2_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i])) return 1;
    return 0;
}

int dcp_mpi_local_rank(void)
{
    static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                                 "PMI_LOCAL_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v) return atoi(v);
    }
    return 0;
}

dcp_status_t dcp_mpi_start(int *argc, char ***argv, dcp_bootstrap_t *bootstrap_out)
{
    const int rc = MPI_Init(argc, argv);
    if (rc != MPI_SUCCESS) return dcp_set_error(DCP_ERR_SYSTEM, "MPI_Init returned %d", rc);
    /* errors come back as codes, so that a failed collective is reported, not fatal */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    return dcp_bootstrap_mpi(bootstrap_out);
}

void dcp_mpi_stop(int failed, int code)
{
    int init = 0, done = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&done);
    if (!init || done) return;
    if (failed)
        MPI_Abort(MPI_COMM_WORLD, code);
    else
        MPI_Finalize();
}
