#include "transport/peers.h"

#include "include/base/error.h"
#include "topo/node.h"
#include "topo/node_figures.h"
#include "transport/bootstrap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The first line of a small file, without its newline; 0 when it cannot be read or is empty. */
static int first_line(const char *path, char *buf, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const int ok = fgets(buf, (int)n, f) != NULL;
    fclose(f);
    if (!ok) return 0;
    buf[strcspn(buf, "\r\n")] = '\0';
    return buf[0] != '\0';
}

void dcp_peer_identify(const char *boot_id_path, dcp_peer_t *me)
{
    memset(me->host, 0, sizeof me->host);
    if (gethostname(me->host, sizeof me->host - 1) != 0) snprintf(me->host, sizeof me->host, "?");
    memset(me->boot, 0, sizeof me->boot);
    char *b = me->boot;
    const size_t n = sizeof me->boot;
    const int found = boot_id_path ? first_line(boot_id_path, b, n)
                                   : first_line("/proc/sys/kernel/random/boot_id", b, n) ||
                                         first_line("/etc/machine-id", b, n);
    if (!found) memset(b, 0, n);
}

void dcp_peer_describe_self(int ucx_cuda, dcp_peer_t *me)
{
    memset(me, 0, sizeof *me);
    dcp_peer_identify(NULL, me);
    me->pid = (int64_t)getpid();
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) == 0) me->pidns = (uint64_t)st.st_ino;
    me->nic = DCP_NIC_ETH;
    me->device = -1;
    me->ucx_cuda = ucx_cuda != 0;
    dcp_node_topo_t *node = NULL;
    if (dcp_calloc(&node, 1, sizeof *node, "node") == DCP_OK &&
        dcp_node_discover(NULL, NULL, 0, node) == DCP_OK) {
        me->gpus = node->num_gpus;
        me->nic = dcp_node_nic_kind(node);
        me->nics = dcp_node_model_nics(node);
        dcp_perf_model_t perf = {0};
        dcp_node_figures(node, &perf);
        me->inter_gbps = perf.inter_gbps;
        me->lat_us = perf.lat_us;
    }
    free(node);
}

dcp_status_t dcp_peers_gather(const dcp_bootstrap_t *bs, const dcp_peer_t *me,
                              dcp_peer_table_t *table_out)
{
    dcp_peer_table_t t = {.rank = bs->rank, .size = bs->size};
    DCP_CHECK(dcp_calloc(&t.peer, bs->size, sizeof *t.peer, "peer table"));
    const dcp_status_t st = dcp_bootstrap_allgather(bs, me, t.peer, sizeof *me, "peer table");
    if (st != DCP_OK) {
        free(t.peer);
        return st;
    }
    *table_out = t;
    return DCP_OK;
}

dcp_status_t dcp_peers_set_device(const dcp_bootstrap_t *bs, int32_t device, const char *busid,
                                  dcp_peer_table_t *table)
{
    typedef struct {
        int32_t device;
        char busid[32];
    } gpu_t;
    gpu_t me = {.device = device}, *all = NULL;
    snprintf(me.busid, sizeof me.busid, "%s", busid ? busid : "");
    DCP_CHECK(dcp_calloc(&all, bs->size, sizeof *all, "peer table"));
    const dcp_status_t st = dcp_bootstrap_allgather(bs, &me, all, sizeof me, "peer GPUs");
    for (int32_t r = 0; st == DCP_OK && r < bs->size; r++) {
        table->peer[r].device = all[r].device;
        memcpy(table->peer[r].busid, all[r].busid, sizeof all[r].busid);
    }
    free(all);
    return st;
}

int32_t dcp_peers_local_index(const dcp_peer_table_t *t, int32_t r)
{
    int32_t local = 0;
    for (int32_t q = 0; q < r; q++) local += dcp_peers_same_node(t, q, r);
    return local;
}

int dcp_peers_same_node(const dcp_peer_table_t *t, int32_t a, int32_t b)
{
    return !strcmp(t->peer[a].host, t->peer[b].host) && !strcmp(t->peer[a].boot, t->peer[b].boot);
}

int dcp_peers_same_pidns(const dcp_peer_table_t *t, int32_t a, int32_t b)
{
    return dcp_peers_same_node(t, a, b) && t->peer[a].pidns == t->peer[b].pidns;
}

dcp_link_class_t dcp_peers_link(const dcp_peer_table_t *t, int32_t a, int32_t b)
{
    return dcp_peers_same_node(t, a, b) ? DCP_LINK_INTRA : DCP_LINK_INTER;
}

dcp_nic_kind_t dcp_peers_nic(const dcp_peer_table_t *t)
{
    int32_t nic = DCP_NIC_ETH;
    for (int32_t r = 0; r < t->size; r++)
        if (t->peer[r].nic < nic) nic = t->peer[r].nic;
    return (dcp_nic_kind_t)nic;
}

dcp_status_t dcp_peers_check_gpus(const dcp_peer_table_t *t, const char *engine)
{
    for (int32_t a = 0; a < t->size; a++)
        for (int32_t b = a + 1; b < t->size; b++)
            if (t->peer[a].busid[0] && dcp_peers_same_node(t, a, b) &&
                !strcmp(t->peer[a].busid, t->peer[b].busid))
                return dcp_set_error(DCP_ERR_UNSUPPORTED,
                                     "%s: ranks %d and %d both use GPU %s on host %s (one rank "
                                     "per GPU)",
                                     engine, a, b, t->peer[a].busid, t->peer[a].host);
    return DCP_OK;
}

void dcp_peers_free(dcp_peer_table_t *t)
{
    if (!t) return;
    free(t->peer);
    t->peer = NULL;
}
