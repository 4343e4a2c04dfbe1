/* dcp_test_delay(): seeded random sleeps at the runtime's ordering points (see
 * include/base/test_hook.h), so that transfers land, and peers overtake each other, at the
 * moments a GPU's asynchronous streams would make them. */
#include "include/base/test_hook.h"
#include "tests/unit/delay_hook.h"

#include <stdatomic.h>
#include <time.h>

static atomic_int_fast64_t g_seed;
static atomic_int g_max_us;
static atomic_int_fast64_t g_seen;
static atomic_int_fast64_t g_threads;

static _Thread_local uint64_t t_state;
static _Thread_local int64_t t_epoch = -1;

void t_delays_set(uint64_t seed, int32_t max_us)
{
    atomic_store(&g_seed, (int_fast64_t)seed);
    atomic_store(&g_max_us, max_us);
}

int64_t t_delays_seen(void)
{
    return atomic_load(&g_seen);
}

static uint64_t next(void)
{
    t_state ^= t_state << 13;
    t_state ^= t_state >> 7;
    t_state ^= t_state << 17;
    return t_state;
}

void dcp_test_delay(dcp_delay_site_t site)
{
    atomic_fetch_add(&g_seen, 1);
    const int max_us = atomic_load(&g_max_us);
    if (max_us <= 0) return;
    const int64_t seed = atomic_load(&g_seed);
    if (t_epoch != seed) { /* a new seed: this thread draws a stream of its own */
        t_epoch = seed;
        t_state = (uint64_t)seed * 0x9e3779b97f4a7c15ull +
                  (uint64_t)atomic_fetch_add(&g_threads, 1) * 0xbf58476d1ce4e5b9ull + 1;
    }
    /* half the points go straight through, so that both orders of every pair occur */
    const uint64_t r = next();
    if ((r >> 60) < 8) return;
    const long us = (long)(r % (uint64_t)max_us) * (site == DCP_DELAY_COPY ? 2 : 1);
    const struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static _Thread_local int64_t t_counts[DCP_COUNT_SITES];

void dcp_test_count(dcp_count_site_t site)
{
    if ((unsigned)site < DCP_COUNT_SITES) t_counts[site]++;
}

int64_t t_counted(int site)
{
    return (unsigned)site < DCP_COUNT_SITES ? t_counts[site] : -1;
}
