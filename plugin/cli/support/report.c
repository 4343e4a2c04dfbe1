#include "plugin/cli/support/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dcpt_median(double *v, int64_t n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

dcpt_stats_t dcpt_stats(double *v, int64_t n)
{
    if (n < 1) return (dcpt_stats_t){NAN, NAN, NAN, 0};
    const double m = dcpt_median(v, n);
    return (dcpt_stats_t){m, v[0], v[n - 1], n};
}

void dcpt_table_header(FILE *f, const dcpt_col_t *cols, int n)
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

void dcpt_table_row(FILE *f, const dcpt_col_t *cols, int n, char cells[][32])
{
    for (int i = 0; i < n; i++) fprintf(f, "%s%*s", i ? "  " : "", cols[i].width, cells[i]);
    fputc('\n', f);
}

/* Table columns of the fields: a STATS field takes two. */
#define MAX_COLS 64

static int columns(const dcpt_field_t *fields, int n, dcpt_col_t *cols)
{
    int c = 0;
    for (int i = 0; i < n && c < MAX_COLS - 1; i++) {
        if (!fields[i].head) continue;
        cols[c++] = (dcpt_col_t){fields[i].head, fields[i].width};
        if (fields[i].kind == DCPT_F_STATS) {
            const int w = abs(fields[i].width);
            cols[c++] = (dcpt_col_t){"min-max", w + 2 > 13 ? w + 2 : 13};
        }
    }
    return c;
}

void dcpt_report_header(FILE *f, const dcpt_field_t *fields, int n)
{
    dcpt_col_t cols[MAX_COLS];
    dcpt_table_header(f, cols, columns(fields, n, cols));
}

static void num_cell(char *cell, const char *fmt, double scale, double v)
{
    if (isfinite(v))
        snprintf(cell, 32, fmt ? fmt : "%.3f", v * (scale != 0 ? scale : 1));
    else
        snprintf(cell, 32, "-");
}

static void table_row(FILE *f, const dcpt_field_t *fields, int n, const void *row)
{
    dcpt_col_t cols[MAX_COLS];
    char cells[MAX_COLS][32];
    const int nc = columns(fields, n, cols);
    int c = 0;
    for (int i = 0; i < n && c < nc; i++) {
        const dcpt_field_t *x = &fields[i];
        const char *p = (const char *)row + x->offset;
        if (!x->head) continue;
        switch (x->kind) {
        case DCPT_F_STR:
            snprintf(cells[c++], 32, "%s", *(const char *const *)p ? *(const char *const *)p : "-");
            break;
        case DCPT_F_INT:
            snprintf(cells[c++], 32, "%lld", (long long)*(const int64_t *)p);
            break;
        case DCPT_F_I32:
            snprintf(cells[c++], 32, "%d", *(const int32_t *)p);
            break;
        case DCPT_F_NUM:
            num_cell(cells[c++], x->fmt, x->scale, *(const double *)p);
            break;
        case DCPT_F_BOOL:
            snprintf(cells[c++], 32, "%s", *(const int *)p ? "yes" : "no");
            break;
        case DCPT_F_STATS: {
            const dcpt_stats_t *s = (const dcpt_stats_t *)p;
            char lo[32], hi[32];
            num_cell(cells[c++], x->fmt, x->scale, s->median);
            num_cell(lo, x->fmt, x->scale, s->min);
            num_cell(hi, x->fmt, x->scale, s->max);
            snprintf(cells[c++], 32, "%.15s-%.15s", lo, hi);
            break;
        }
        }
    }
    dcpt_table_row(f, cols, nc, cells);
}

static void json_row(FILE *f, const dcpt_field_t *fields, int n, const void *row,
                     void (*extra)(dcpt_json_t *j, const void *ctx), const void *ctx)
{
    dcpt_json_t j;
    dcpt_json_begin(&j, f);
    if (extra) extra(&j, ctx);
    for (int i = 0; i < n; i++) {
        const dcpt_field_t *x = &fields[i];
        const char *p = (const char *)row + x->offset;
        if (!x->key) continue;
        switch (x->kind) {
        case DCPT_F_STR:
            dcpt_json_str(&j, x->key, *(const char *const *)p);
            break;
        case DCPT_F_INT:
            dcpt_json_int(&j, x->key, *(const int64_t *)p);
            break;
        case DCPT_F_I32:
            dcpt_json_int(&j, x->key, *(const int32_t *)p);
            break;
        case DCPT_F_NUM:
            dcpt_json_num(&j, x->key, *(const double *)p);
            break;
        case DCPT_F_BOOL:
            dcpt_json_bool(&j, x->key, *(const int *)p);
            break;
        case DCPT_F_STATS: {
            const dcpt_stats_t *s = (const dcpt_stats_t *)p;
            char key[64];
            dcpt_json_num(&j, x->key, s->median);
            snprintf(key, sizeof key, "%s_min", x->key);
            dcpt_json_num(&j, key, s->min);
            snprintf(key, sizeof key, "%s_max", x->key);
            dcpt_json_num(&j, key, s->max);
            break;
        }
        }
    }
    dcpt_json_end(&j);
}

void dcpt_report_row(FILE *f, int json, const dcpt_field_t *fields, int n, const void *row,
                     void (*extra)(dcpt_json_t *j, const void *ctx), const void *ctx)
{
    if (json)
        json_row(f, fields, n, row, extra, ctx);
    else
        table_row(f, fields, n, row);
    fflush(f);
}
