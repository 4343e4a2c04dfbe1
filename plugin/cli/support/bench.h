/*
 * The shared harness of dcp's performance tools (the shape of nccl-tests' common.cu): one
 * header line with the configuration and the timing rule, warm-up runs, timed iterations
 * summarised as median with min and max, and a table with units or one JSON object per row
 * (plugin/cli/support/report.h). Each bench supplies its own cases and its table of fields.
 */
#ifndef DCPT_CLI_BENCH_H
#define DCPT_CLI_BENCH_H

#include "include/dcp.h"
#include "plugin/cli/support/report.h"

typedef struct {
    const char *tool;
    int json;              /* JSON lines instead of the header and the table */
    int64_t warmup, iters; /* unrecorded runs, then recorded ones */
    const dcpt_field_t *fields;
    int num_fields;
} dcpt_bench_t;

/* One measurement (run `i`, 0-based, warm-up runs first): its sample in the bench's unit. */
typedef dcp_status_t (*dcpt_sample_fn)(void *arg, int64_t i, double *sample_out);

/* b->warmup unrecorded calls, then b->iters recorded ones; their median, min and max. */
dcp_status_t dcpt_bench_time(const dcpt_bench_t *b, dcpt_sample_fn fn, void *arg,
                             dcpt_stats_t *out);

/* The header line (nothing with json):
 *   # <tool>: <configuration>; median [min-max] of <iters> after <warmup> warm-up
 * The table's head follows from dcpt_bench_table(). */
void dcpt_bench_header(const dcpt_bench_t *b, const char *config_fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The column titles of the bench's fields (nothing with json). */
void dcpt_bench_table(const dcpt_bench_t *b);

/* One row of the bench's fields (see dcpt_report_row). */
void dcpt_bench_row(const dcpt_bench_t *b, const void *row,
                    void (*extra)(dcpt_json_t *j, const void *ctx), const void *ctx);

#endif
