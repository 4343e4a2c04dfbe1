/* Collectives over a bootstrap (dcp_bootstrap_t, the caller's allgather) that every engine
 * and job set-up uses: an allgather whose failure is reported, and a vote that makes a
 * failure on one rank a failure on all, so that no rank is left waiting in a collective
 * that the others have abandoned. */
#ifndef DCP_TRANSPORT_BOOTSTRAP_H
#define DCP_TRANSPORT_BOOTSTRAP_H

#include "include/dcp.h"

#include <stddef.h>

/* The bootstrap's allgather; a failure gets a message naming `what`. */
dcp_status_t dcp_bootstrap_allgather(const dcp_bootstrap_t *bs, const void *send, void *recv,
                                     size_t bytes, const char *what);

/* Collective: every rank gives its status; a failing rank returns its own (message kept),
 * the others the first failure in rank order, saying which rank failed at `what`.
 * Only running out of memory for the vote itself (4 bytes a rank) leaves the others. */
dcp_status_t dcp_bootstrap_agree(const dcp_bootstrap_t *bs, dcp_status_t mine, const char *what);

#endif
