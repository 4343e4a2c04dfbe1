/* The MPI bootstrap (libdcp_mpi): an allgather over MPI_COMM_WORLD. Kept out of libdcp so
 * that embedding dcp does not pull in MPI. */
#include "include/base/error.h"
#include "include/dcp.h"

#include <limits.h>
#include <mpi.h>

static dcp_status_t mpi_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    (void)state;
    if (bytes > INT_MAX)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "mpi bootstrap: %zu bytes per rank", bytes);
    const int rc =
        MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS)
        return dcp_set_error(DCP_ERR_SYSTEM, "mpi bootstrap: MPI_Allgather returned %d", rc);
    return DCP_OK;
}

dcp_status_t dcp_bootstrap_mpi(dcp_bootstrap_t *bootstrap_out)
{
    if (!bootstrap_out) return dcp_set_error(DCP_ERR_INVALID_ARG, "bootstrap_out is NULL");
    int init = 0, rank = 0, size = 0;
    MPI_Initialized(&init);
    if (!init) return dcp_set_error(DCP_ERR_INVALID_ARG, "mpi bootstrap: MPI is not initialised");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    *bootstrap_out = (dcp_bootstrap_t){rank, size, mpi_allgather, NULL};
    return DCP_OK;
}
