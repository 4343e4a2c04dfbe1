#include "topo/cluster.h"

#include "include/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DCP_DEFAULT_INTRA_GBPS 300.0
#define DCP_DEFAULT_INTER_GBPS 25.0
#define DCP_DEFAULT_LAT_US     5.0

dcp_status_t dcp_cluster_create(int32_t nodes, int32_t devs, dcp_cluster_t **cluster_out)
{
    if (nodes < 1 || devs < 1 || (int64_t)nodes * devs > DCP_MAX_RANKS)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cluster: %d nodes x %d devices, need >= 1 each and at most %d ranks",
                             nodes, devs, DCP_MAX_RANKS);
    dcp_cluster_t *c = NULL;
    DCP_CHECK(dcp_calloc(&c, 1, sizeof *c, "cluster"));
    c->num_nodes = nodes;
    c->devs_per_node = devs;
    c->num_ranks = nodes * devs;
    c->intra_gbps = DCP_DEFAULT_INTRA_GBPS;
    c->inter_gbps = DCP_DEFAULT_INTER_GBPS;
    c->lat_us = DCP_DEFAULT_LAT_US;
    *cluster_out = c;
    return DCP_OK;
}

/* Parses a positive integer that spans [s, end) exactly. */
static int parse_count(const char *s, const char *end, int32_t *out)
{
    if (s == end) return 0;
    long v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (*p - '0');
        if (v > DCP_MAX_RANKS) return 0;
    }
    *out = (int32_t)v;
    return v >= 1;
}

static dcp_status_t parse_figure(const char *spec, const char *kv, const char *end,
                                 dcp_cluster_t *c)
{
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster spec '%s': '%.*s' is not key=value",
                             spec, (int)(end - kv), kv);
    char num[64];
    size_t n = (size_t)(end - eq - 1);
    if (n == 0 || n >= sizeof num)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster spec '%s': bad value for '%.*s'", spec,
                             (int)(eq - kv), kv);
    memcpy(num, eq + 1, n);
    num[n] = '\0';
    char *stop;
    errno = 0;
    double v = strtod(num, &stop);
    if (*stop != '\0' || errno != 0 || !isfinite(v) || v <= 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cluster spec '%s': '%.*s' needs a positive number, got '%s'", spec,
                             (int)(eq - kv), kv, num);
    size_t klen = (size_t)(eq - kv);
    if (klen == 5 && !memcmp(kv, "intra", 5))
        c->intra_gbps = v;
    else if (klen == 5 && !memcmp(kv, "inter", 5))
        c->inter_gbps = v;
    else if (klen == 3 && !memcmp(kv, "lat", 3))
        c->lat_us = v;
    else
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cluster spec '%s': unknown key '%.*s' (intra, inter, lat)", spec,
                             (int)klen, kv);
    return DCP_OK;
}

dcp_status_t dcp_cluster_from_spec(const char *spec, dcp_cluster_t **cluster_out)
{
    if (!spec || !cluster_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster: spec and cluster_out must be non-NULL");
    const char *colon = strchr(spec, ':');
    const char *shape_end = colon ? colon : spec + strlen(spec);
    const char *x = memchr(spec, 'x', (size_t)(shape_end - spec));
    int32_t nodes, devs;
    if (!x || !parse_count(spec, x, &nodes) || !parse_count(x + 1, shape_end, &devs))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cluster spec '%s': expected NxG[:intra=GBps][:inter=GBps][:lat=us]",
                             spec);
    dcp_cluster_t *c = NULL;
    DCP_CHECK(dcp_cluster_create(nodes, devs, &c));
    dcp_status_t st = DCP_OK;
    for (const char *kv = colon; kv && st == DCP_OK;) {
        kv++;
        const char *next = strchr(kv, ':');
        st = parse_figure(spec, kv, next ? next : kv + strlen(kv), c);
        kv = next;
    }
    if (st != DCP_OK) {
        free(c);
        return st;
    }
    *cluster_out = c;
    return DCP_OK;
}

void dcp_cluster_destroy(dcp_cluster_t *cluster)
{
    free(cluster);
}

int32_t dcp_cluster_num_ranks(const dcp_cluster_t *cluster)
{
    return cluster ? cluster->num_ranks : 0;
}

int32_t dcp_cluster_num_nodes(const dcp_cluster_t *cluster)
{
    return cluster ? cluster->num_nodes : 0;
}
