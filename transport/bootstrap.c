#include "transport/bootstrap.h"

#include "include/base/error.h"

#include <stdlib.h>

dcp_status_t dcp_bootstrap_allgather(const dcp_bootstrap_t *bs, const void *send, void *recv,
                                     size_t bytes, const char *what)
{
    const dcp_status_t st = bs->allgather(bs->state, send, recv, bytes);
    if (st != DCP_OK)
        return dcp_set_error(st, "bootstrap: the allgather of %s failed on rank %d (%s)", what,
                             bs->rank, dcp_status_string(st));
    return DCP_OK;
}

dcp_status_t dcp_bootstrap_agree(const dcp_bootstrap_t *bs, dcp_status_t mine, const char *what)
{
    int32_t *all = NULL;
    DCP_CHECK(dcp_calloc(&all, bs->size, sizeof *all, "bootstrap vote"));
    const int32_t s = (int32_t)mine;
    dcp_status_t st = dcp_bootstrap_allgather(bs, &s, all, sizeof s, what);
    if (st == DCP_OK && mine != DCP_OK) st = mine; /* a failing rank keeps its own message */
    for (int32_t r = 0; st == DCP_OK && r < bs->size; r++)
        if (all[r] != DCP_OK)
            st = dcp_set_error((dcp_status_t)all[r], "%s failed on rank %d (%s)", what, r,
                               dcp_status_string((dcp_status_t)all[r]));
    free(all);
    return st;
}
