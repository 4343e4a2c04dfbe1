/*
 * A communicator an embedding framework lends to the NCCL engine (dcp_context_config_t.
 * nccl_comm), checked against the bootstrap before anything is sent on it: every rank's must
 * hold the bootstrap's ranks (its size), in the bootstrap's order (the rank it gives this
 * rank), each on the device the rank computes on; and either every rank lends one or none
 * does (ranks that would make their own communicator run collectives the lending ones never
 * join). The facts are read from NCCL by the engine (transport/nccl.c) and compared here, with
 * no NCCL in sight, so that the refusals are tested on any machine.
 */
#ifndef DCP_TRANSPORT_LENT_H
#define DCP_TRANSPORT_LENT_H

#include "include/dcp.h"

#include <stdint.h>

/* What NCCL says of a lent communicator (ncclCommCount, ncclCommUserRank, ncclCommCuDevice);
 * count < 0: it could not be read. */
typedef struct {
    int32_t count, rank, device;
} dcp_lent_comm_t;

/* Collective over the bootstrap: `mine` describes this rank's lent communicator (NULL: it
 * lends none) and `device` is the CUDA device the rank computes on. Every rank returns the
 * same result: DCP_OK, or DCP_ERR_INVALID_ARG naming the first rank (in rank order) whose
 * communicator is refused and the field that differs. */
dcp_status_t dcp_lent_comm_check(const dcp_bootstrap_t *bs, const dcp_lent_comm_t *mine,
                                 int32_t device);

#endif
