#include "topo/kernel_table.h"

#include "include/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

dcp_status_t dcp_kernel_table_add(dcp_kernel_table_t *t, double edge, double eff, const char *where)
{
    if (!(edge > 0) || !(eff > 0) || !isfinite(edge) || !isfinite(eff))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "%s: kernel needs a tile edge and an efficiency, both > 0", where);
    if (t->n == DCP_MAX_KERNEL_POINTS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: too many kernel points (at most %d)", where,
                             DCP_MAX_KERNEL_POINTS);
    if (t->n > 0 && edge <= t->tile_tokens[t->n - 1])
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: kernel tile edges must increase", where);
    if (eff > 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: a kernel efficiency is at most 1", where);
    t->tile_tokens[t->n] = edge;
    t->efficiency[t->n++] = eff;
    return DCP_OK;
}

/* Strictly a finite number spanning the whole token; 0 (and *out untouched) otherwise. */
static int number(const char *tok, double *out)
{
    if (!tok) return 0;
    char *end;
    errno = 0;
    const double v = strtod(tok, &end);
    if (end == tok || *end != '\0' || errno != 0 || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

dcp_status_t dcp_kernel_table_parse(dcp_kernel_table_t *t, const char *edge, const char *eff,
                                    const char *where)
{
    double e = 0, v = 0;
    if (!number(edge, &e) || !number(eff, &v)) e = v = 0; /* refused below, with the grammar */
    return dcp_kernel_table_add(t, e, v, where);
}

dcp_status_t dcp_kernel_table_read(const char *path, dcp_kernel_table_t *t_out)
{
    FILE *f = fopen(path, "r");
    if (!f) return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table '%s': cannot open", path);
    dcp_kernel_table_t t = {0};
    char text[512], where[4200];
    dcp_status_t st = DCP_OK;
    for (int line = 1; st == DCP_OK && fgets(text, sizeof text, f); line++) {
        snprintf(where, sizeof where, "kernel table '%s', line %d", path, line);
        if (!strchr(text, '\n') && !feof(f)) {
            st = dcp_set_error(DCP_ERR_INVALID_ARG, "%s: longer than 511 characters", where);
            break;
        }
        char *hash = strchr(text, '#'), *save = NULL;
        if (hash) *hash = '\0';
        const char *a = strtok_r(text, " \t\r\n", &save);
        if (!a) continue;
        const char *b = strtok_r(NULL, " \t\r\n", &save);
        if (strtok_r(NULL, " \t\r\n", &save))
            st = dcp_set_error(DCP_ERR_INVALID_ARG, "%s: expected 'EDGE EFF', two numbers", where);
        else
            st = dcp_kernel_table_parse(&t, a, b, where);
    }
    const int unreadable = ferror(f);
    fclose(f);
    if (st != DCP_OK) return st;
    if (unreadable)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table '%s': cannot be read (a folder?)",
                             path);
    if (t.n == 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "kernel table '%s': no 'EDGE EFF' lines", path);
    *t_out = t;
    return DCP_OK;
}

void dcp_kernel_table_write(FILE *f, const dcp_kernel_table_t *t, const char *key)
{
    for (int32_t i = 0; i < t->n; i++) /* %.10g: edges up to 2^30 stay whole */
        fprintf(f, "%s%s%.10g %.6g\n", key ? key : "", key ? " " : "", t->tile_tokens[i],
                t->efficiency[i]);
}
