/* An engine that stands in for NCCL where the CPU can show what NCCL does: over an in-process
 * engine of its own hub, it moves what its launches give it and is stream-ordered (or, with
 * `ordered` 0, completes on the host as UCX without CUDA does), but it refuses call stamps in
 * host memory, as the NCCL engine does (host_stamps 0), and carries no notices of its own:
 * abort() marks it failed and tells no peer, health() reports only its own failure. It
 * counts the call stamps it carried. */
#ifndef DCP_TESTS_NCCL_LIKE_H
#define DCP_TESTS_NCCL_LIKE_H

#include "transport/engine.h"
#include "transport/inproc.h"

dcp_status_t t_nccl_like_create(dcp_inproc_hub_t *hub, int32_t rank, int ordered,
                                dcp_engine_t **engine_out);

/* Call stamps (ops of tag space DCP_TAG_STAMP) the engine carried so far. */
int64_t t_nccl_like_stamps(const dcp_engine_t *e);

#endif
