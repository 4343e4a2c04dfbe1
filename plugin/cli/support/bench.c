#include "plugin/cli/support/bench.h"

#include "include/base/error.h"

#include <stdarg.h>
#include <stdlib.h>

dcp_status_t dcpt_bench_time(const dcpt_bench_t *b, dcpt_sample_fn fn, void *arg, dcpt_stats_t *out)
{
    const int64_t iters = b->iters < 1 ? 1 : b->iters;
    double *t = NULL;
    DCP_CHECK(dcp_calloc(&t, iters, sizeof *t, "bench samples"));
    dcp_status_t st = DCP_OK;
    for (int64_t i = 0; st == DCP_OK && i < b->warmup + iters; i++) {
        double sample = 0;
        st = fn(arg, i, &sample);
        if (i >= b->warmup) t[i - b->warmup] = sample;
    }
    if (st == DCP_OK) *out = dcpt_stats(t, iters);
    free(t);
    return st;
}

void dcpt_bench_header(const dcpt_bench_t *b, const char *config_fmt, ...)
{
    if (b->json) return;
    printf("# %s: ", b->tool);
    va_list ap;
    va_start(ap, config_fmt);
    vprintf(config_fmt, ap);
    va_end(ap);
    printf("; median [min-max] of %lld after %lld warm-up\n", (long long)b->iters,
           (long long)b->warmup);
    fflush(stdout);
}

void dcpt_bench_row(const dcpt_bench_t *b, const void *row,
                    void (*extra)(dcpt_json_t *j, const void *ctx), const void *ctx)
{
    dcpt_report_row(stdout, b->json, b->fields, b->num_fields, row, extra, ctx);
}

void dcpt_bench_table(const dcpt_bench_t *b)
{
    if (b->json) return;
    dcpt_report_header(stdout, b->fields, b->num_fields);
    fflush(stdout);
}
