/* dcp_group_t: the in-process rank group (a hub the ranks' engines share). */
#include "include/base/error.h"
#include "plugin/context.h"

#include <stdlib.h>

dcp_status_t dcp_group_create(int32_t num_ranks, dcp_group_t **group_out)
{
    if (!group_out) return dcp_set_error(DCP_ERR_INVALID_ARG, "group_out is NULL");
    dcp_group_t *g;
    DCP_CHECK(dcp_calloc(&g, 1, sizeof *g, "group"));
    const dcp_status_t st = dcp_inproc_hub_create(num_ranks, &g->hub);
    if (st != DCP_OK) {
        free(g);
        return st;
    }
    *group_out = g;
    return DCP_OK;
}

void dcp_group_destroy(dcp_group_t *group)
{
    if (!group) return;
    dcp_inproc_hub_destroy(group->hub);
    free(group);
}
