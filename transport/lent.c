/* A lent NCCL communicator against the bootstrap (transport/lent.h). */
#include "transport/lent.h"

#include "include/base/error.h"
#include "transport/bootstrap.h"

#include <stdlib.h>

typedef struct {
    int32_t lent; /* 1: the rank lends a communicator */
    dcp_lent_comm_t comm;
    int32_t device; /* where the rank computes */
} facts_t;

/* The first refusal among every rank's facts, the same on every rank. */
static dcp_status_t judge(const facts_t *all, int32_t size)
{
    for (int32_t r = 1; r < size; r++)
        if (all[r].lent != all[0].lent)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "config.nccl_comm is set on rank %d but not on rank %d: lend a "
                                 "communicator on every rank or on none",
                                 all[0].lent ? 0 : r, all[0].lent ? r : 0);
    for (int32_t r = 0; all[0].lent && r < size; r++) {
        const facts_t *f = &all[r];
        if (f->comm.count < 0)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "config.nccl_comm of rank %d: NCCL cannot read it (not a live "
                                 "ncclComm_t?)",
                                 r);
        if (f->comm.count != size)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "config.nccl_comm of rank %d has %d ranks, the bootstrap %d: it "
                                 "must hold exactly the bootstrap's ranks",
                                 r, f->comm.count, size);
        if (f->comm.rank != r)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "config.nccl_comm of rank %d gives it rank %d: the communicator "
                                 "must number the ranks as the bootstrap does",
                                 r, f->comm.rank);
        if (f->comm.device != f->device)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "config.nccl_comm of rank %d is on GPU %d, the rank computes on "
                                 "GPU %d",
                                 r, f->comm.device, f->device);
    }
    return DCP_OK;
}

dcp_status_t dcp_lent_comm_check(const dcp_bootstrap_t *bs, const dcp_lent_comm_t *mine,
                                 int32_t device)
{
    facts_t me = {mine != NULL, mine ? *mine : (dcp_lent_comm_t){0, 0, 0}, device}, *all = NULL;
    DCP_CHECK(dcp_calloc(&all, bs->size, sizeof *all, "lent communicator check"));
    dcp_status_t st = dcp_bootstrap_allgather(bs, &me, all, sizeof me, "lent communicator facts");
    if (st == DCP_OK) st = judge(all, bs->size);
    free(all);
    return st;
}
