/* Output of the tools: aligned tables for people, JSON lines for scripts. */
#ifndef DCP_CLI_REPORT_H
#define DCP_CLI_REPORT_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *head; /* column title, units in parentheses */
    int width;        /* negative: left-aligned */
} dcp_col_t;

void dcp_table_header(FILE *f, const dcp_col_t *cols, int n);
/* cells[i] is printed in column i. */
void dcp_table_row(FILE *f, const dcp_col_t *cols, int n, char cells[][32]);

/* Sorts v[0..n) in place and returns its median (the upper one for even n); n >= 1. */
double dcp_median(double *v, int64_t n);

/* One JSON object on one line. Non-finite numbers become null. */
typedef struct {
    FILE *f;
    int fields;
} dcp_json_t;

void dcp_json_begin(dcp_json_t *j, FILE *f);
void dcp_json_str(dcp_json_t *j, const char *key, const char *value);
void dcp_json_int(dcp_json_t *j, const char *key, int64_t value);
void dcp_json_num(dcp_json_t *j, const char *key, double value);
void dcp_json_bool(dcp_json_t *j, const char *key, int value);
void dcp_json_end(dcp_json_t *j);

#endif
