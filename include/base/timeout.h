/*
 * Timeouts: one clamp for every wait of dcp. A caller's timeout may be any finite double
 * (dcp_context_config_t.timeout_s, $DCP_TIMEOUT_S, a tool's --timeout); turned into an
 * absolute deadline it must stay representable, so it is clamped to DCP_TIMEOUT_MAX_S
 * (about 31.7 years: "forever" for a training job) before anything adds it to a clock.
 */
#ifndef DCP_BASE_TIMEOUT_H
#define DCP_BASE_TIMEOUT_H

#include <math.h>
#include <time.h>

#define DCP_TIMEOUT_MAX_S 1e9

/* timeout_s clamped into [0, DCP_TIMEOUT_MAX_S]; NaN and negative values give 0. */
static inline double dcp_timeout_clamp(double timeout_s)
{
    if (!(timeout_s > 0)) return 0;
    return timeout_s < DCP_TIMEOUT_MAX_S ? timeout_s : DCP_TIMEOUT_MAX_S;
}

/* The CLOCK_MONOTONIC deadline timeout_s (clamped) from now, for pthread_cond_timedwait on a
 * condition variable whose clock is CLOCK_MONOTONIC, or for comparing with clock_gettime. */
static inline struct timespec dcp_deadline_after(double timeout_s)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    const double s = dcp_timeout_clamp(timeout_s), whole = floor(s);
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((s - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return t;
}

#endif
