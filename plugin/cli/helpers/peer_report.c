#include "plugin/cli/helpers/peer_report.h"

#include "plugin/cli/support/report.h"

#include <math.h>
#include <stdlib.h>

static const dcpt_col_t cols[] = {
    {"strategy", -10},   {"batches", 7},     {"step(ms)", 9}, {"x-default", 9}, {"worst", 7},
    {"exposed(ms)", 11}, {"exposed(%)", 10}, {"worst(%)", 8}, {"plan(ms)", 9},
};
#define NCOLS ((int)(sizeof cols / sizeof cols[0]))

void dcpt_peer_table(FILE *f, const char *const *labels, const dcpt_peer_batch_t *const *rows,
                     int32_t n, int32_t def, int32_t batches)
{
    double *ms = calloc((size_t)batches + 1, sizeof *ms);
    if (!ms) return;
    dcpt_table_header(f, cols, NCOLS);
    for (int32_t s = 0; s < n; s++) {
        int32_t k = 0, both = 0;
        double step = 0, exposed = 0, share = 0, worst_share = 0, logr = 0, worst = INFINITY;
        for (int32_t b = 0; b < batches; b++) {
            const dcpt_peer_batch_t *x = &rows[s][b], *d = &rows[def][b];
            if (!x->set) continue;
            step += x->step_ms;
            exposed += x->exposed_ms;
            const double sh = x->step_ms > 0 ? x->exposed_ms / x->step_ms : 0;
            share += sh;
            worst_share = fmax(worst_share, sh);
            ms[k++] = x->plan_ms;
            if (d->set && d->step_ms > 0 && x->step_ms > 0) {
                const double r = x->step_ms / d->step_ms;
                logr += log(r);
                worst = fmin(worst, r);
                both++;
            }
        }
        if (!k) continue;
        char cell[NCOLS][32];
        snprintf(cell[0], 32, "%s", labels[s]);
        snprintf(cell[1], 32, "%d", k);
        snprintf(cell[2], 32, "%.3f", step / k);
        snprintf(cell[3], 32, "-");
        snprintf(cell[4], 32, "-");
        if (both) {
            snprintf(cell[3], 32, "%.3f", exp(logr / both));
            snprintf(cell[4], 32, "%.3f", worst);
        }
        snprintf(cell[5], 32, "%.3f", exposed / k);
        snprintf(cell[6], 32, "%.1f", 100 * share / k);
        snprintf(cell[7], 32, "%.1f", 100 * worst_share);
        snprintf(cell[8], 32, "%.1f", dcpt_median(ms, k));
        dcpt_table_row(f, cols, NCOLS, cell);
    }
    free(ms);
}
