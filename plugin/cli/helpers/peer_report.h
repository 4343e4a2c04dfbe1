/* dcp-plan's comparison of the default with the peer policies, batch by batch. */
#ifndef DCPT_CLI_PEER_REPORT_H
#define DCPT_CLI_PEER_REPORT_H

#include <stdint.h>
#include <stdio.h>

/* One strategy's simulated figures on one batch (set: 0 when it did not run there). */
typedef struct {
    int set;
    double step_ms;    /* simulated forward + backward */
    double exposed_ms; /* communication the slowest rank waited for, both passes */
    double plan_ms;
} dcpt_peer_batch_t;

/* The table: per strategy, its mean step, its step over the default's (strategy `def`) as the
 * geometric mean over the batches both ran and the worst batch (the smallest ratio: where the
 * default is closest to losing, below 1 where it lost), its exposed communication (ms and
 * share of its step, mean and worst batch) and median planning time. rows[s][b]: strategy s,
 * batch b. */
void dcpt_peer_table(FILE *f, const char *const *labels, const dcpt_peer_batch_t *const *rows,
                     int32_t n, int32_t def, int32_t batches);

#endif
