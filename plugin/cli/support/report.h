/* Output of the tools: aligned tables for people, JSON lines for scripts, both from one
 * description of a row (a table of fields), so that a column and its JSON key cannot drift
 * apart. */
#ifndef DCPT_CLI_REPORT_H
#define DCPT_CLI_REPORT_H

#include "plugin/cli/support/json.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *head; /* column title, units in parentheses */
    int width;        /* negative: left-aligned */
} dcpt_col_t;

void dcpt_table_header(FILE *f, const dcpt_col_t *cols, int n);
/* cells[i] is printed in column i. */
void dcpt_table_row(FILE *f, const dcpt_col_t *cols, int n, char cells[][32]);

/* Median, min and max of repeated measurements. */
typedef struct {
    double median, min, max;
    int64_t n;
} dcpt_stats_t;

/* Sorts v[0..n) in place and returns its median (the upper one for even n); n >= 1. */
double dcpt_median(double *v, int64_t n);
/* Sorts v[0..n) and summarises it; n == 0 gives NaNs (shown "-", null in JSON). */
dcpt_stats_t dcpt_stats(double *v, int64_t n);

typedef enum {
    DCPT_F_STR,   /* const char * (NULL: "-", null) */
    DCPT_F_INT,   /* int64_t */
    DCPT_F_I32,   /* int32_t */
    DCPT_F_NUM,   /* double (non-finite: "-", null) */
    DCPT_F_BOOL,  /* int */
    DCPT_F_STATS, /* dcpt_stats_t: the median in its column, "min-max" in the next (head
                     "min-max"); JSON: key (median), key_min, key_max */
} dcpt_field_kind_t;

/* One value of a row struct, as a table column and/or a JSON member. */
typedef struct {
    const char *head; /* column title with units; NULL: JSON only */
    int width;        /* negative: left-aligned */
    const char *key;  /* JSON key; NULL: table only */
    dcpt_field_kind_t kind;
    const char *fmt; /* NUM, STATS: printf format of the table cell (default "%.3f") */
    size_t offset;   /* of the value in the row struct */
    double scale;    /* NUM, STATS: the table shows value x scale (0: 1); JSON is unscaled */
} dcpt_field_t;

#define DCPT_FIELD(head, width, key, kind, fmt, type, member)                                      \
    {                                                                                              \
        head, width, key, kind, fmt, offsetof(type, member), 0                                     \
    }

/* Header and rows of a table of `fields` (JSON-only fields left out). */
void dcpt_report_header(FILE *f, const dcpt_field_t *fields, int n);
/* One row: a table line, or with `json` one JSON object of the fields with a key
 * (`extra`, when not NULL, adds members first: for fields that are not in the row struct). */
void dcpt_report_row(FILE *f, int json, const dcpt_field_t *fields, int n, const void *row,
                     void (*extra)(dcpt_json_t *j, const void *ctx), const void *ctx);

#endif
