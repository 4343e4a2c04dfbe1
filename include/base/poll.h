/*
 * Bounded polling: how a rank waits for transfers that only move while it polls (UCX) or
 * for peers it cannot block on. A wait spins for its first DCP_POLL_SPIN_S (yielding the core
 * to ranks that share it), then sleeps between polls, each sleep twice the last up to
 * DCP_POLL_SLEEP_MAX_S: a rank that waits seconds for a slow or failed peer costs a few
 * percent of a core instead of all of it, and notices completion at most that late (measured: a
 * rank waiting 4 s for a stopped peer used 3.99 s of CPU before, 0.25 s over UCX TCP and 0.09 s
 * over shared memory now).
 */
#ifndef DCP_BASE_POLL_H
#define DCP_BASE_POLL_H

#include "include/base/error.h"

#include <sched.h>
#include <stdint.h>
#include <time.h>

#define DCP_POLL_SPIN_S      1e-3
#define DCP_POLL_SLEEP_MIN_S 1e-5
#define DCP_POLL_SLEEP_MAX_S 2.5e-4

typedef struct {
    double start;   /* when the wait began */
    double sleep_s; /* the next sleep; 0 while spinning */
    uint32_t polls;
} dcp_poll_t;

static inline dcp_poll_t dcp_poll_start(void)
{
    return (dcp_poll_t){dcp_now(), 0.0, 0};
}

/* Called between two polls of a wait that is not done yet. */
static inline void dcp_poll_pause(dcp_poll_t *p)
{
    if (++p->polls < 32) return; /* a short spin first: completions right after a launch */
    if (p->sleep_s == 0.0) {
        if (dcp_now() - p->start < DCP_POLL_SPIN_S) {
            sched_yield();
            return;
        }
        p->sleep_s = DCP_POLL_SLEEP_MIN_S;
    }
    const struct timespec t = {0, (long)(p->sleep_s * 1e9)};
    nanosleep(&t, NULL);
    p->sleep_s = p->sleep_s * 2 < DCP_POLL_SLEEP_MAX_S ? p->sleep_s * 2 : DCP_POLL_SLEEP_MAX_S;
}

#endif
