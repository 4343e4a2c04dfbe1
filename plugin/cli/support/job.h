/*
 * A job's ranks, as the multi-rank tools (dcp-attn-test, dcp-calibrate, dcp-transport-bench)
 * and the harness drive them: the bootstrap's collectives, timed as the library's are (a dead
 * or stopped rank ends them with DCP_ERR_TIMEOUT or DCP_ERR_PEER naming it, not a hang); jobs
 * of processes x threads (several in-process ranks per process, --ranks-per-process); where
 * each rank runs (node, place on it, host); and the place of computation a device name means.
 * The tools' one way to the library's bootstrap, hybrid-job and peer-table code.
 */
#ifndef DCPT_SUPPORT_JOB_H
#define DCPT_SUPPORT_JOB_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

/* The bootstrap's allgather (bytes from every rank, rank r's at offset r x bytes), timed where
 * the bootstrap is; a failure's message names `what` and the rank that did not take part. */
dcp_status_t dcpt_job_allgather(const dcp_bootstrap_t *bs, const void *send, void *recv,
                                size_t bytes, const char *what);

/* Collective vote: every rank gives its status; a failing rank returns its own (its message
 * kept), the others the first failure in rank order, naming that rank and `what`. */
dcp_status_t dcpt_job_agree(const dcp_bootstrap_t *bs, dcp_status_t mine, const char *what);

/* The bootstrap's collective timeout in seconds: its timeout_s, else $DCP_TIMEOUT_S, else 60. */
double dcpt_job_timeout(const dcp_bootstrap_t *bs);

/* A job of processes x threads: `threads` in-process ranks per process of `procs` (borrowed
 * while the set lives), global rank = process rank x threads + local rank. Contexts created on
 * its bootstraps move blocks between the threads of a process in process, and over the job's
 * engines between processes. Every context on it must be destroyed before it. */
typedef struct dcpt_threads dcpt_threads_t;

dcp_status_t dcpt_threads_create(const dcp_bootstrap_t *procs, int32_t threads,
                                 dcpt_threads_t **threads_out);
void dcpt_threads_destroy(dcpt_threads_t *t);

/* Local rank `local`'s bootstrap, owned by the set. */
const dcp_bootstrap_t *dcpt_threads_bootstrap(dcpt_threads_t *t, int32_t local);

/* Where every rank of a job runs, as the library finds nodes (host name and boot id). */
typedef struct {
    int32_t size, nodes;
    int32_t *node;    /* [size]: the node, numbered by first appearance in rank order */
    int32_t *local;   /* [size]: the rank's place among its node's ranks, in rank order */
    char (*host)[64]; /* [size]: its host name */
} dcpt_placement_t;

/* Collective over `bs`. On failure nothing is left to free. */
dcp_status_t dcpt_job_placement(const dcp_bootstrap_t *bs, dcpt_placement_t *out);
void dcpt_placement_free(dcpt_placement_t *p);

/* A place of computation by name, as dcp_context_config_t.device takes it: NULL or "cpu" -> -1;
 * "cuda" -> local_rank % the GPUs visible; "cuda:N" -> N. Errors name `field`;
 * DCP_ERR_UNSUPPORTED where no GPU is usable. */
dcp_status_t dcpt_device_parse(const char *name, int32_t local_rank, const char *field,
                               int32_t *device_out);

#endif
