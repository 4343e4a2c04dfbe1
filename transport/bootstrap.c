#include "transport/bootstrap.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/timeout.h"

#include <stdlib.h>

double dcp_bootstrap_timeout(const dcp_bootstrap_t *bs)
{
    if (bs->timeout_s > 0) return dcp_timeout_clamp(bs->timeout_s);
    /* a bad value: 60 s here; context creation refuses it */
    return dcp_timeout_clamp(dcp_env_seconds_value(DCP_ENV_TIMEOUT_S));
}

dcp_status_t dcp_bootstrap_allgather(const dcp_bootstrap_t *bs, const void *send, void *recv,
                                     size_t bytes, const char *what)
{
    if (!bs->allgather_timed) {
        const dcp_status_t st = bs->allgather(bs->state, send, recv, bytes);
        if (st != DCP_OK)
            return dcp_set_error(st, "bootstrap: the allgather of %s failed on rank %d (%s)", what,
                                 bs->rank, dcp_status_string(st));
        return DCP_OK;
    }
    const double timeout = dcp_bootstrap_timeout(bs);
    int32_t failed = -1;
    const dcp_status_t st = bs->allgather_timed(bs->state, send, recv, bytes, timeout, &failed);
    if (st == DCP_OK) return DCP_OK;
    char why[256];
    dcp_error_save(why, sizeof why);
    if (failed >= 0 && failed < bs->size)
        return dcp_set_error(st, "%s: rank %d failed or stopped (%s on rank %d, timeout %g s: %s)",
                             what, failed, dcp_status_string(st), bs->rank, timeout, why);
    return dcp_set_error(st, "bootstrap: the allgather of %s failed on rank %d (%s: %s)", what,
                         bs->rank, dcp_status_string(st), why);
}

/* Ranks whose vote needs no allocation: a vote that cannot be held leaves the others waiting
 * until the timeout, and this rank's next collective meets theirs out of step. */
#define AGREE_ON_STACK 1024

dcp_status_t dcp_bootstrap_agree(const dcp_bootstrap_t *bs, dcp_status_t mine, const char *what)
{
    int32_t stack[AGREE_ON_STACK], *all = stack;
    if (bs->size > AGREE_ON_STACK)
        DCP_CHECK(dcp_calloc(&all, bs->size, sizeof *all, "bootstrap vote"));
    const int32_t s = (int32_t)mine;
    dcp_status_t st = dcp_bootstrap_allgather(bs, &s, all, sizeof s, what);
    if (st == DCP_OK && mine != DCP_OK) st = mine; /* a failing rank keeps its own message */
    for (int32_t r = 0; st == DCP_OK && r < bs->size; r++)
        if (all[r] != DCP_OK)
            st = dcp_set_error((dcp_status_t)all[r], "%s failed on rank %d (%s)", what, r,
                               dcp_status_string((dcp_status_t)all[r]));
    if (all != stack) free(all);
    return st;
}
