/*
 * Node files: a node's cost-model figures as measured on the cluster itself (dcp-calibrate
 * writes them), read where a cluster spec names one ("2x@calib.node"). Text, one
 * `key value...` per line, '#' to the end of a line a comment:
 *
 *   devices G         ranks per node (required)
 *   nics N            the node's network adapters: 1..G the devices share, or a multiple of G
 *                     (each device drives N / G of its own, inter sums them); default G
 *   intra X           GB/s per direction per device inside the node
 *   inter X           GB/s per direction per device to other nodes
 *   lat X             microseconds per transfer
 *   tflops X          a device's forward attention peak, TFLOP/s
 *   hbm X             GB/s of the device's copies and merges
 *   bwd X             the backward's FLOP/s over the forward's on the same tile
 *   kernel EDGE EFF   a point of the kernel curve (tile edge in tokens, fraction of tflops;
 *                     topo/kernel_table.h); any kernel line replaces the default curve
 *
 * Figures not given keep the defaults (dcp_perf_model_default). Every error names the file
 * and the line.
 */
#include "topo/node_file.h"

#include "include/base/error.h"
#include "topo/kernel_table.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Strictly a positive finite number spanning the whole token. */
static int number(const char *tok, double *out)
{
    if (!tok) return 0;
    char *end;
    errno = 0;
    const double v = strtod(tok, &end);
    if (*end != '\0' || errno != 0 || !isfinite(v) || v <= 0) return 0;
    *out = v;
    return 1;
}

static dcp_status_t bad(const char *path, int line, const char *what)
{
    return dcp_set_error(DCP_ERR_INVALID_ARG, "node file '%s', line %d: %s", path, line, what);
}

/* One line's key and values into the figures (the kernel points into *kt). */
static dcp_status_t parse_line(const char *path, int line, char *text, int32_t *devs, int32_t *nics,
                               dcp_perf_model_t *m, dcp_kernel_table_t *kt)
{
    char *save = NULL;
    const char *key = strtok_r(text, " \t\r\n", &save);
    if (!key) return DCP_OK;
    const char *a = strtok_r(NULL, " \t\r\n", &save), *b = strtok_r(NULL, " \t\r\n", &save);
    const int wants_two = !strcmp(key, "kernel");
    if (strtok_r(NULL, " \t\r\n", &save) || (!wants_two && b))
        return bad(path, line, "too many values");
    if (wants_two) {
        char where[4200];
        snprintf(where, sizeof where, "node file '%s', line %d", path, line);
        return dcp_kernel_table_parse(kt, a, b, where);
    }
    double v = 0;
    if (!number(a, &v)) return bad(path, line, "needs one positive number");
    if (!strcmp(key, "devices") || !strcmp(key, "nics")) {
        if (v != floor(v) || v > 65536) return bad(path, line, "needs a whole number of devices");
        *(key[0] == 'd' ? devs : nics) = (int32_t)v;
        return DCP_OK;
    }
    static const char *keys[] = {"intra", "inter", "lat", "tflops", "hbm", "bwd"};
    double *dst[] = {&m->intra_gbps,  &m->inter_gbps, &m->lat_us,
                     &m->peak_tflops, &m->hbm_gbps,   &m->bwd_speed};
    for (int i = 0; i < 6; i++)
        if (!strcmp(key, keys[i])) {
            *dst[i] = v;
            return DCP_OK;
        }
    char msg[96];
    snprintf(msg, sizeof msg, "unknown key '%.32s'", key);
    return bad(path, line, msg);
}

int dcp_node_file_is(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int c;
    do c = fgetc(f);
    while (c == ' ' || c == '\t' || c == '\n' || c == '\r');
    fclose(f);
    return c != EOF && c != '<';
}

dcp_status_t dcp_node_file_read(const char *path, int32_t *devs_out, int32_t *nics_out,
                                dcp_perf_model_t *perf)
{
    FILE *f = fopen(path, "r");
    if (!f) return dcp_set_error(DCP_ERR_INVALID_ARG, "node file '%s': cannot open", path);
    dcp_perf_model_t m = *perf;
    int32_t devs = 0, nics = 0;
    dcp_kernel_table_t kt = {0};
    char text[512];
    dcp_status_t st = DCP_OK;
    for (int line = 1; st == DCP_OK && fgets(text, sizeof text, f); line++) {
        if (!strchr(text, '\n') && !feof(f)) {
            st = bad(path, line, "longer than 511 characters");
            break;
        }
        char *hash = strchr(text, '#');
        if (hash) *hash = '\0';
        st = parse_line(path, line, text, &devs, &nics, &m, &kt);
    }
    fclose(f);
    if (st != DCP_OK) return st;
    if (devs < 1) return dcp_set_error(DCP_ERR_INVALID_ARG, "node file '%s': no 'devices' line", path);
    if (nics > devs && nics % devs != 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "node file '%s': nics %d for devices %d: 1..%d NICs the devices "
                             "share, or a multiple of %d (each device its own)",
                             path, nics, devs, devs, devs);
    if (kt.n > 0) {
        m.eff_n = kt.n;
        memcpy(m.eff_tokens, kt.tile_tokens, (size_t)kt.n * sizeof *kt.tile_tokens);
        memcpy(m.eff_value, kt.efficiency, (size_t)kt.n * sizeof *kt.efficiency);
    }
    char field[300];
    snprintf(field, sizeof field, "node file '%s'", path);
    DCP_CHECK(dcp_perf_model_check(&m, field));
    *devs_out = devs;
    *nics_out = nics > 0 ? nics : devs;
    *perf = m;
    return DCP_OK;
}
