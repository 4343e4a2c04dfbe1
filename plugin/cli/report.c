#include "plugin/cli/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dcp_median(double *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

void dcp_table_header(FILE *f, const dcp_col_t *cols, int n)
{
    int total = 0;
    for (int i = 0; i < n; i++) {
        const int w = cols[i].width < 0 ? -cols[i].width : cols[i].width;
        fprintf(f, "%s%*s", i ? "  " : "", cols[i].width, cols[i].head);
        total += w + (i ? 2 : 0);
    }
    fputc('\n', f);
    for (int i = 0; i < total; i++) fputc('-', f);
    fputc('\n', f);
}

void dcp_table_row(FILE *f, const dcp_col_t *cols, int n, char cells[][32])
{
    for (int i = 0; i < n; i++) fprintf(f, "%s%*s", i ? "  " : "", cols[i].width, cells[i]);
    fputc('\n', f);
}

static void key(dcp_json_t *j, const char *k)
{
    fprintf(j->f, "%s\"%s\": ", j->fields++ ? ", " : "{", k);
}

void dcp_json_begin(dcp_json_t *j, FILE *f)
{
    j->f = f;
    j->fields = 0;
}

void dcp_json_str(dcp_json_t *j, const char *k, const char *value)
{
    key(j, k);
    fputc('"', j->f);
    for (const char *p = value; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', j->f);
        if ((unsigned char)*p < 0x20)
            fprintf(j->f, "\\u%04x", *p);
        else
            fputc(*p, j->f);
    }
    fputc('"', j->f);
}

void dcp_json_int(dcp_json_t *j, const char *k, int64_t value)
{
    key(j, k);
    fprintf(j->f, "%lld", (long long)value);
}

void dcp_json_num(dcp_json_t *j, const char *k, double value)
{
    key(j, k);
    if (isfinite(value))
        fprintf(j->f, "%.6g", value);
    else
        fputs("null", j->f);
}

void dcp_json_bool(dcp_json_t *j, const char *k, int value)
{
    key(j, k);
    fputs(value ? "true" : "false", j->f);
}

void dcp_json_end(dcp_json_t *j)
{
    fputs(j->fields ? "}\n" : "{}\n", j->f);
    fflush(j->f);
}
