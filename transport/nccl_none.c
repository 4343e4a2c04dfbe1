/* Builds without CUDA: no NCCL engine (bad arguments are still named as such). */
#include "include/base/error.h"
#include "transport/nccl.h"

dcp_status_t dcp_nccl_engine_create(const dcp_bootstrap_t *bootstrap, int device, void *lent_comm,
                                    void *lent_stream, dcp_engine_t **engine_out)
{
    return dcp_nccl_engine_create_on(bootstrap, NULL, device, lent_comm, lent_stream, 0,
                                     engine_out);
}

dcp_status_t dcp_nccl_gpu_busid(int device, char *busid, size_t capacity)
{
    (void)device;
    if (capacity) busid[0] = '\0';
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "nccl: this build of dcp has no CUDA");
}

dcp_status_t dcp_nccl_engine_create_on(const dcp_bootstrap_t *bootstrap,
                                       const dcp_peer_table_t *peers, int device, void *lent_comm,
                                       void *lent_stream, double timeout_s,
                                       dcp_engine_t **engine_out)
{
    (void)peers, (void)device, (void)lent_comm, (void)lent_stream, (void)timeout_s;
    if (!bootstrap || !bootstrap->allgather || !engine_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "nccl: %s is NULL",
                             !engine_out ? "engine_out" : "bootstrap.allgather");
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "nccl: this build of dcp has no CUDA");
}

dcp_status_t dcp_nccl_test_comm_create(int device, void **comm_out,
                                       dcp_nccl_test_comm_t **handle_out)
{
    (void)device, (void)comm_out, (void)handle_out;
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "nccl: this build of dcp has no CUDA");
}

void dcp_nccl_test_comm_destroy(dcp_nccl_test_comm_t *handle)
{
    (void)handle;
}
