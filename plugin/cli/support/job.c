#include "plugin/cli/support/job.h"

#include "include/base/error.h"
#include "kernels/device.h"
#include "plugin/hybrid.h"
#include "transport/bootstrap.h"
#include "transport/peers.h"

#include <stdlib.h>
#include <string.h>

dcp_status_t dcpt_job_allgather(const dcp_bootstrap_t *bs, const void *send, void *recv,
                                size_t bytes, const char *what)
{
    return dcp_bootstrap_allgather(bs, send, recv, bytes, what);
}

dcp_status_t dcpt_job_agree(const dcp_bootstrap_t *bs, dcp_status_t mine, const char *what)
{
    return dcp_bootstrap_agree(bs, mine, what);
}

double dcpt_job_timeout(const dcp_bootstrap_t *bs)
{
    return dcp_bootstrap_timeout(bs);
}

/* The set is the library's hybrid job under the tools' name. */
dcp_status_t dcpt_threads_create(const dcp_bootstrap_t *procs, int32_t threads,
                                 dcpt_threads_t **threads_out)
{
    dcp_hybrid_t *h = NULL;
    DCP_CHECK(dcp_hybrid_create(procs, threads, &h));
    *threads_out = (dcpt_threads_t *)h;
    return DCP_OK;
}

void dcpt_threads_destroy(dcpt_threads_t *t)
{
    dcp_hybrid_destroy((dcp_hybrid_t *)t);
}

const dcp_bootstrap_t *dcpt_threads_bootstrap(dcpt_threads_t *t, int32_t local)
{
    return dcp_hybrid_bootstrap((dcp_hybrid_t *)t, local);
}

void dcpt_placement_free(dcpt_placement_t *p)
{
    if (!p) return;
    free(p->node);
    free(p->local);
    free(p->host);
    memset(p, 0, sizeof *p);
}

dcp_status_t dcpt_job_placement(const dcp_bootstrap_t *bs, dcpt_placement_t *out)
{
    dcp_peer_t me, *all = NULL;
    memset(&me, 0, sizeof me);
    dcp_peer_identify(NULL, &me);
    dcpt_placement_t p = {.size = bs->size};
    dcp_status_t st = dcp_calloc(&all, bs->size, sizeof *all, "job peers");
    if (st == DCP_OK) st = dcp_calloc(&p.node, bs->size, sizeof *p.node, "job placement");
    if (st == DCP_OK) st = dcp_calloc(&p.local, bs->size, sizeof *p.local, "job placement");
    if (st == DCP_OK) st = dcp_calloc(&p.host, bs->size, sizeof *p.host, "job placement");
    if (st == DCP_OK) st = dcp_bootstrap_allgather(bs, &me, all, sizeof me, "job peers");
    const dcp_peer_table_t t = {bs->rank, bs->size, all};
    for (int32_t q = 0; st == DCP_OK && q < bs->size; q++) {
        memcpy(p.host[q], all[q].host, sizeof p.host[q]);
        int32_t first = 0;
        while (first < q && !dcp_peers_same_node(&t, first, q)) first++;
        p.node[q] = first == q ? p.nodes++ : p.node[first];
        p.local[q] = dcp_peers_local_index(&t, q);
    }
    free(all);
    if (st != DCP_OK) {
        dcpt_placement_free(&p);
        return st;
    }
    *out = p;
    return DCP_OK;
}

dcp_status_t dcpt_device_parse(const char *name, int32_t local_rank, const char *field,
                               int32_t *device_out)
{
    return dcp_device_parse(name, local_rank, field, device_out);
}
