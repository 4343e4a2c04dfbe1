/*
 * A hybrid job: several processes, each driving several in-process ranks (threads), as one
 * job of processes x threads ranks. The process bootstrap (one rank per process) is turned
 * into a bootstrap of the job's ranks: global rank = process rank x threads + local rank.
 * Its allgather gathers the threads' bytes inside the process, lets one thread run the
 * process allgather with the whole process's part, and hands every thread the result. The
 * contexts created on it take the in-process engine (the hybrid's hub) for ranks of the same
 * process and the job's engines for the others, behind the routing engine (plugin/job.c).
 * After a failure (the process allgather's, or a thread of the process that did not come
 * within the timeout) every later allgather fails at once with it.
 */
#ifndef DCP_PLUGIN_HYBRID_H
#define DCP_PLUGIN_HYBRID_H

#include "include/dcp.h"
#include "transport/inproc.h"

typedef struct dcp_hybrid dcp_hybrid_t;

/* `procs` (borrowed for the hybrid's lifetime) is the process bootstrap; `threads` ranks per
 * process. Only the process allgather is used, by one thread at a time. */
dcp_status_t dcp_hybrid_create(const dcp_bootstrap_t *procs, int32_t threads,
                               dcp_hybrid_t **hybrid_out);
/* Every context on it must have been destroyed. */
void dcp_hybrid_destroy(dcp_hybrid_t *h);

/* Local rank `local`'s bootstrap (owned by the hybrid). */
const dcp_bootstrap_t *dcp_hybrid_bootstrap(dcp_hybrid_t *h, int32_t local);

/* When bs is a hybrid's: its hub (the process's threads) and the rank's local rank, 1;
 * otherwise 0. */
int dcp_hybrid_of(const dcp_bootstrap_t *bs, dcp_inproc_hub_t **hub_out, int32_t *local_out);

#endif
