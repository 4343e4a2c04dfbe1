/* Collectives over a bootstrap (dcp_bootstrap_t, the caller's allgather) that every engine
 * and job set-up uses: an allgather whose failure is reported (with a deadline and the
 * failed rank's name when the bootstrap is timed), and a vote that makes a failure on one
 * rank a failure on all, so that no rank is left waiting in a collective that the others
 * have abandoned. */
#ifndef DCP_TRANSPORT_BOOTSTRAP_H
#define DCP_TRANSPORT_BOOTSTRAP_H

#include "include/dcp.h"

#include <stddef.h>

/* The bootstrap's collective timeout: its timeout_s, else $DCP_TIMEOUT_S, else 60 s,
 * clamped (include/base/timeout.h). */
double dcp_bootstrap_timeout(const dcp_bootstrap_t *bs);

/* The bootstrap's allgather, timed when it has allgather_timed (which then ends within
 * dcp_bootstrap_timeout()); a failure gets a message naming `what` and the rank that did
 * not take part. */
dcp_status_t dcp_bootstrap_allgather(const dcp_bootstrap_t *bs, const void *send, void *recv,
                                     size_t bytes, const char *what);

/* Collective: every rank gives its status; a failing rank returns its own (message kept),
 * the others the first failure in rank order, saying which rank failed at `what`.
 * It allocates nothing up to 1024 ranks; beyond, running out of memory for the vote itself
 * (4 bytes a rank) leaves the others. */
dcp_status_t dcp_bootstrap_agree(const dcp_bootstrap_t *bs, dcp_status_t mine, const char *what);

#endif
