#include "topo/cluster.h"

#include "include/base/error.h"
#include "topo/device_kernels.h"
#include "topo/kernel_table.h"
#include "topo/node_figures.h"
#include "topo/node_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int positive(double v)
{
    return isfinite(v) && v > 0;
}

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
    c->nics_per_node = devs;
    c->nics_per_dev = 1;
    dcp_perf_model_default(&c->perf);
    *cluster_out = c;
    return DCP_OK;
}

dcp_status_t dcp_cluster_set_nics(dcp_cluster_t *c, int32_t nics, const char *field)
{
    const int32_t g = c->devs_per_node;
    if (nics < 1 || (nics > g && nics % g != 0) || nics / g > 64)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "%s: %d NICs for %d devices per node: the devices share 1..%d NICs, "
                             "or each drives the same number (a multiple of %d, at most %d)",
                             field, nics, g, g, g, 64 * g);
    c->nics_per_node = nics > g ? g : nics;
    c->nics_per_dev = nics > g ? nics / g : 1;
    return DCP_OK;
}

/* Machine presets: devices per node, link figures and the device, whose kernel figures
 * (topo/device_kernels.h) give the peak and the kernel curve. */
typedef struct {
    const char *name;
    int32_t devs, nics;
    double intra, inter, lat, hbm;
    const char *device;
} preset_t;

static const preset_t presets[] = {
    /* p4d.24xlarge: 8 x A100-SXM4-40GB, NVSwitch 600 GB/s both ways; 4 x 100 Gb/s EFA =
     * 50 GB/s per node = 6.25 per device; HBM2 1555 GB/s */
    {"a100-efa", 8, 4, 300.0, 6.25, 15.0, 1555.0, "a100"},
    /* p4de.24xlarge, DCP's testbed (SOSP'25 micro-benchmarks): the same node with A100-SXM4-80GB
     * (HBM2e 2039 GB/s) */
    {"p4de", 8, 4, 300.0, 6.25, 15.0, 2039.0, "a100"},
    /* DGX H100: NVLink4 900 GB/s both ways; one 400 Gb/s ConnectX-7 (InfiniBand NDR) per GPU
     * = 50 GB/s per device */
    {"h100-ib", 8, 8, 450.0, 50.0, 3.0, 3350.0, "h100"},
    /* p5.48xlarge: 8 x H100-80GB (HBM3 3350 GB/s) on NVSwitch; 32 x 100 Gb/s EFA (3200 Gbps),
     * four beside each GPU: 4 x 12.5 = 50 GB/s per device, EFA's latency */
    {"p5", 8, 32, 450.0, 50.0, 15.0, 3350.0, "h100"},
    /* 8 x A100-SXM4-40GB on NVLink3 behind a single 100 Gb/s NIC per node = 12.5 GB/s
     * shared by 8 devices: four times less network per GPU than a p4d/p4de */
    {"a100-1nic", 8, 1, 300.0, 1.5625, 5.0, 1555.0, "a100"},
};

/* Parses a positive integer that spans [s, end) exactly. */
/* The decimal count in [s, end): its value (saturated past DCP_MAX_RANKS), or -1 when it is
 * not digits. */
static int64_t parse_count(const char *s, const char *end)
{
    if (s == end) return -1;
    int64_t v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        v = v * 10 + (*p - '0');
        if (v > DCP_MAX_RANKS) v = DCP_MAX_RANKS + 1;
    }
    return v;
}

static const preset_t *find_preset(const char *s, const char *end)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strlen(presets[i].name) == (size_t)(end - s) &&
            !memcmp(presets[i].name, s, (size_t)(end - s)))
            return &presets[i];
    return NULL;
}

static dcp_status_t parse_figure(const char *spec, const char *kv, const char *end,
                                 dcp_cluster_t *c)
{
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster spec '%s': '%.*s' is not key=value",
                             spec, (int)(end - kv), kv);
    char num[64];
    const size_t n = (size_t)(end - eq - 1);
    if (n == 0 || n >= sizeof num)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster spec '%s': bad value for '%.*s'", spec,
                             (int)(eq - kv), kv);
    memcpy(num, eq + 1, n);
    num[n] = '\0';
    char *stop;
    errno = 0;
    const double v = strtod(num, &stop);
    if (*stop != '\0' || errno != 0 || !positive(v))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cluster spec '%s': '%.*s' needs a positive number, got '%s'", spec,
                             (int)(eq - kv), kv, num);
    const size_t klen = (size_t)(eq - kv);
    if (klen == 4 && !memcmp(kv, "nics", 4)) {
        char field[200];
        snprintf(field, sizeof field, "cluster spec '%.100s': nics=%.60s", spec, num);
        if (v != floor(v) || v > 65536)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: not a whole number of NICs", field);
        return dcp_cluster_set_nics(c, (int32_t)v, field);
    }
    static const char *keys[] = {"intra", "inter", "lat", "tflops", "hbm", "bwd"};
    double *dst[] = {&c->perf.intra_gbps, &c->perf.inter_gbps, &c->perf.lat_us,
                     &c->perf.peak_tflops, &c->perf.hbm_gbps, &c->perf.bwd_speed};
    for (int i = 0; i < 6; i++)
        if (strlen(keys[i]) == klen && !memcmp(kv, keys[i], klen)) {
            *dst[i] = v;
            return DCP_OK;
        }
    return dcp_set_error(
        DCP_ERR_INVALID_ARG,
        "cluster spec '%s': unknown key '%.*s' (intra, inter, lat, tflops, hbm, bwd, nics)", spec,
        (int)klen, kv);
}

dcp_status_t dcp_cluster_from_spec(const char *spec, dcp_cluster_t **cluster_out)
{
    if (!spec || !cluster_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster: spec and cluster_out must be non-NULL");
    const char *colon = strchr(spec, ':');
    const char *shape_end = colon ? colon : spec + strlen(spec);
    const char *x = memchr(spec, 'x', (size_t)(shape_end - spec));
    int32_t devs = 0;
    const preset_t *pre = x ? find_preset(x + 1, shape_end) : NULL;
    const int file = x && x[1] == '@';
    const int64_t nodes = x ? parse_count(spec, x) : -1,
                  g = x && !pre && !file ? parse_count(x + 1, shape_end) : 1;
    if (nodes < 0 || g < 0)
        return dcp_set_error(
            DCP_ERR_INVALID_ARG,
            "cluster spec '%s': expected NxG, NxPRESET (a100-efa, p4de, h100-ib, p5, a100-1nic) or "
            "Nx@NODE (an hwloc XML capture or a dcp-calibrate node file) "
            "[:intra=GBps][:inter=GBps][:lat=us][:tflops=T][:hbm=GBps][:bwd=X][:nics=N]",
            spec);
    const int64_t per_node = pre ? pre->devs : g;
    if (nodes < 1 || per_node < 1 || nodes * per_node > DCP_MAX_RANKS)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cluster spec '%s': N nodes x G devices needs N >= 1, G >= 1 and "
                             "at most %d ranks in all",
                             spec, DCP_MAX_RANKS);
    devs = (int32_t)per_node;
    dcp_perf_model_t node_perf;
    dcp_perf_model_default(&node_perf);
    int32_t nics = 0; /* a node file's or a capture's; 0: one per device */
    if (file) {
        char path[4096];
        const size_t n = (size_t)(shape_end - x - 2);
        if (n == 0 || n >= sizeof path)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster spec '%s': bad file name", spec);
        memcpy(path, x + 2, n);
        path[n] = '\0';
        /* an hwloc capture is XML; anything else is read as a node file (dcp-calibrate) */
        if (dcp_node_file_is(path))
            DCP_CHECK(dcp_node_file_read(path, &devs, &nics, &node_perf));
        else
            DCP_CHECK(dcp_node_figures_from_xml(path, &devs, &nics, &node_perf));
    }
    dcp_cluster_t *c = NULL;
    DCP_CHECK(dcp_cluster_create((int32_t)nodes, devs, &c));
    c->perf = node_perf;
    dcp_status_t st = DCP_OK;
    if (nics > 0) st = dcp_cluster_set_nics(c, nics, "cluster spec: the node's NICs");
    if (pre) {
        st = dcp_cluster_set_nics(c, pre->nics, "preset");
        c->perf.intra_gbps = pre->intra;
        c->perf.inter_gbps = pre->inter;
        c->perf.lat_us = pre->lat;
        c->perf.hbm_gbps = pre->hbm;
        dcp_device_kernels_perf(dcp_device_kernels(pre->device), &c->perf);
    }
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

dcp_status_t dcp_cluster_set_kernel_table(dcp_cluster_t *cluster, int32_t n,
                                          const double *tile_tokens, const double *efficiency)
{
    if (!cluster || !tile_tokens || !efficiency)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table: NULL argument");
    dcp_perf_model_t m = cluster->perf;
    if (n < 1 || n > DCP_MAX_KERNEL_POINTS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table: n = %d, need 1..%d", n,
                             DCP_MAX_KERNEL_POINTS);
    m.eff_n = n;
    memcpy(m.eff_tokens, tile_tokens, (size_t)n * sizeof *tile_tokens);
    memcpy(m.eff_value, efficiency, (size_t)n * sizeof *efficiency);
    DCP_CHECK(dcp_perf_model_check(&m, "kernel table"));
    cluster->perf = m;
    return DCP_OK;
}

dcp_status_t dcp_cluster_load_kernel_table(dcp_cluster_t *cluster, const char *path)
{
    if (!cluster || !path) return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table: NULL argument");
    dcp_kernel_table_t t;
    DCP_CHECK(dcp_kernel_table_read(path, &t));
    return dcp_cluster_set_kernel_table(cluster, t.n, t.tile_tokens, t.efficiency);
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
