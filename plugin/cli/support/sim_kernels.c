#include "plugin/cli/support/sim_kernels.h"

#include "include/base/error.h"
#include "plugin/cli/support/report.h"
#include "topo/cluster.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_ATTN, K_BWD, K_MERGE, K_COPY, K_COUNT };
static const char *kinds[K_COUNT] = {"attn", "bwd", "merge", "copy"};

typedef struct {
    int32_t kind, tile, head_dim;
    double value; /* TFLOP/s (attn, bwd) or GB/s (merge, copy) */
} row_t;

/* The text after `"key": ` in a JSON line, or NULL. */
static const char *field(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(line, pat);
    if (!at) return NULL;
    at += strlen(pat);
    while (*at == ' ') at++;
    return at;
}

/* A positive int at `at` (a JSON number, then ',', '}' or space), or -1. */
static long positive_int(const char *at)
{
    char *end;
    const long v = strtol(at, &end, 10);
    return end != at && (*end == ',' || *end == '}' || *end == ' ') && v > 0 && v <= INT32_MAX ? v
                                                                                               : -1;
}

/* 1: a row (r filled); 0: a line that is no row, or a row without a figure (the bench writes
 * "error" or null for a case that did not run); -1: a row that does not read. */
static int parse_row(const char *line, row_t *r)
{
    const char *k = field(line, "kernel");
    if (!k) return 0;
    const char *e = field(line, "error"); /* the bench writes "error": null on good rows */
    if (e && strncmp(e, "null", 4)) return 0;
    r->kind = -1;
    for (int i = 0; i < K_COUNT; i++)
        if (!strncmp(k, "\"", 1) && !strncmp(k + 1, kinds[i], strlen(kinds[i])) &&
            k[1 + strlen(kinds[i])] == '"')
            r->kind = i;
    const char *t = field(line, "tile"), *d = field(line, "head_dim");
    const char *v = field(line, r->kind == K_MERGE || r->kind == K_COPY ? "gbps" : "tflops");
    if (r->kind < 0 || !t || !d || !v) return -1;
    const long tile = positive_int(t), dim = positive_int(d);
    if (tile < 0 || dim < 0) return -1;
    r->tile = (int32_t)tile;
    r->head_dim = (int32_t)dim;
    if (!strncmp(v, "null", 4)) return 0; /* no figure */
    char *end;
    r->value = strtod(v, &end);
    return end != v && r->value > 0 && isfinite(r->value) ? 1 : -1;
}

/* Median of the rows of `kind` (and tile, where tile > 0), preferring head_dim; -1 if none. */
static double median_of(const row_t *rows, int64_t n, int32_t kind, int32_t tile, int32_t head_dim,
                        double *scratch)
{
    for (int pass = 0; pass < 2; pass++) {
        int64_t m = 0;
        for (int64_t i = 0; i < n; i++)
            if (rows[i].kind == kind && (tile <= 0 || rows[i].tile == tile) &&
                (pass == 1 || rows[i].head_dim == head_dim))
                scratch[m++] = rows[i].value;
        if (m) return dcpt_median(scratch, m);
    }
    return -1;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static dcp_status_t load_rows(const char *path, row_t **rows_out, int64_t *n_out)
{
    FILE *f = fopen(path, "r");
    if (!f) return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table '%s': cannot open", path);
    row_t *rows = NULL;
    int64_t n = 0, cap = 0;
    char line[4096];
    int64_t line_no = 0;
    dcp_status_t st = DCP_OK;
    while (st == DCP_OK && fgets(line, sizeof line, f)) {
        line_no++;
        row_t r;
        const int got = parse_row(line, &r);
        if (got < 0) {
            st = dcp_set_error(DCP_ERR_INVALID_ARG,
                               "kernel table '%s' line %lld: a kernel row without a known "
                               "kernel, a whole tile and head_dim > 0, and a figure > 0 (or "
                               "null)",
                               path, (long long)line_no);
            break;
        }
        if (!got) continue;
        st = dcp_reserve(&rows, &cap, n + 1, sizeof *rows, "kernel table rows");
        if (st == DCP_OK) rows[n++] = r;
    }
    fclose(f);
    if (st != DCP_OK) {
        free(rows);
        return st;
    }
    *rows_out = rows;
    *n_out = n;
    return DCP_OK;
}

dcp_status_t dcpt_sim_kernels_read(const char *path, int32_t head_dim, dcp_sim_kernels_t *k_out)
{
    row_t *rows = NULL;
    int64_t n = 0;
    DCP_CHECK(load_rows(path, &rows, &n));
    double *scratch = calloc((size_t)n + 1, sizeof *scratch);
    dcp_sim_kernels_t k = {0};
    dcp_status_t st = DCP_OK;
    /* tiles that both attention kernels have, increasing */
    for (int64_t i = 0; scratch && i < n; i++) scratch[i] = rows[i].tile;
    const int64_t ntiles = n;
    double *tiles = scratch ? malloc(((size_t)n + 1) * sizeof *tiles) : NULL;
    if (tiles) {
        memcpy(tiles, scratch, (size_t)n * sizeof *tiles);
        qsort(tiles, (size_t)n, sizeof *tiles, cmp_double);
    }
    for (int64_t i = 0; tiles && st == DCP_OK && i < ntiles; i++) {
        if (i > 0 && tiles[i] == tiles[i - 1]) continue;
        const int32_t tile = (int32_t)tiles[i];
        const double f = median_of(rows, n, K_ATTN, tile, head_dim, scratch);
        const double b = median_of(rows, n, K_BWD, tile, head_dim, scratch);
        if (f <= 0 || b <= 0) continue;
        if (k.n == DCP_MAX_KERNEL_POINTS)
            st = dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table '%s': more than %d tile sizes",
                               path, DCP_MAX_KERNEL_POINTS);
        else {
            k.tile[k.n] = tile;
            k.fwd_tflops[k.n] = f;
            k.bwd_tflops[k.n++] = b;
        }
    }
    free(tiles);
    if (scratch) {
        k.merge_gbps = median_of(rows, n, K_MERGE, 0, head_dim, scratch);
        k.copy_gbps = median_of(rows, n, K_COPY, 0, head_dim, scratch);
    }
    if (!scratch)
        st = dcp_set_error(DCP_ERR_NO_MEMORY, "kernel table '%s': scratch", path);
    else if (st == DCP_OK && (k.n == 0 || k.merge_gbps <= 0 || k.copy_gbps <= 0))
        st = dcp_set_error(DCP_ERR_INVALID_ARG,
                           "kernel table '%s': needs dcp-kernel-bench --json rows of kernels attn "
                           "and bwd at a common tile, merge and copy (found %d tiles, merge %s, "
                           "copy %s)",
                           path, k.n, k.merge_gbps > 0 ? "yes" : "no",
                           k.copy_gbps > 0 ? "yes" : "no");
    free(scratch);
    free(rows);
    if (st == DCP_OK) st = dcp_sim_kernels_check(&k);
    if (st == DCP_OK) *k_out = k;
    return st;
}

dcp_status_t dcpt_kernels_load(const char *name, int32_t head_dim, dcp_sim_kernels_t *k_out)
{
    static const char *const builtin[] = {"h100", "a100", "h100-dcp", "h100-cudnn"};
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (!strcmp(name, builtin[i])) return dcp_sim_kernels_builtin(name, k_out);
    return dcpt_sim_kernels_read(name, head_dim, k_out);
}

dcp_status_t dcpt_kernels_to_cluster(const dcp_sim_kernels_t *k, dcp_cluster_t *cluster)
{
    double eff[DCP_MAX_KERNEL_POINTS];
    const double peak = cluster->perf.peak_tflops;
    for (int32_t i = 0; i < k->n; i++) eff[i] = fmin(1.0, k->fwd_tflops[i] / peak);
    DCP_CHECK(dcp_cluster_set_kernel_table(cluster, k->n, k->tile, eff));
    cluster->perf.bwd_speed = k->bwd_tflops[k->n - 1] / k->fwd_tflops[k->n - 1];
    return DCP_OK;
}
