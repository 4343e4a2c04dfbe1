/*
 * The UCX engine (UCP tag matching), one worker per rank, host memory. Worker addresses are
 * exchanged over the bootstrap; every transfer is a tagged send or receive progressed
 * explicitly by test/wait. Failures reach the peers two ways: endpoints use UCX's peer
 * error handling (a dead peer's operations complete with an error), and a rank that fails
 * on its own sends an abort notice that every peer keeps a receive posted for.
 */
#ifndef DCP_TRANSPORT_UCX_H
#define DCP_TRANSPORT_UCX_H

#include "transport/engine.h"
#include "transport/peers.h"

/* Collective over the bootstrap (and so is the engine's destroy while it is healthy). The
 * bootstrap is borrowed for the engine's lifetime. */
dcp_status_t dcp_ucx_engine_create(const dcp_bootstrap_t *bootstrap, dcp_engine_t **engine_out);

/* The same with the job's peer table (which ranks share a node and pid namespace: liveness
 * checks and error-handling mode), which the engine then does not gather; NULL: gathered
 * here. */
dcp_status_t dcp_ucx_engine_create_on(const dcp_bootstrap_t *bootstrap,
                                      const dcp_peer_table_t *peers, dcp_engine_t **engine_out);

/* Orders the engine's launches by their ops' ready events instead of a host wait before each
 * launch (a UCX that moves device memory: built with CUDA): an op whose ready event
 * `ready_query` (the device table's event_query, kernels/device.h) says is not reached yet is
 * held, and posted by a later test() or wait() once it is, so a launch never waits. The engine
 * then says it is stream-ordered; its waits still complete on the host (UCX has no stream),
 * which orders the work queued after them. NULL: back to posting at once. */
void dcp_ucx_engine_order_by(dcp_engine_t *engine,
                             dcp_status_t (*ready_query)(void *event, int *state_out));

/* Whether this UCX build moves CUDA device memory (a UCP context asked for its memory
 * types); Debian's UCX does not, and GPU jobs that choose UCX then wrap it in the staging
 * engine (transport/staged.h). */
int dcp_ucx_supports_cuda(void);

#endif
