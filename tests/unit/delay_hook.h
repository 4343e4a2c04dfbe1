/* The test binary's side of include/base/test_hook.h: delays at the runtime's ordering
 * points, off until a test turns them on, and per-thread counts of the counted events. */
#ifndef DCP_TESTS_DELAY_HOOK_H
#define DCP_TESTS_DELAY_HOOK_H

#include <stdint.h>

/* From now on every delay point of every thread sleeps a random 0 .. max_us microseconds
 * (drawn per thread from `seed`), or not at all when max_us is 0. */
void t_delays_set(uint64_t seed, int32_t max_us);

/* Delay points passed since the program started (all threads). */
int64_t t_delays_seen(void);

/* DCP_TEST_COUNT(site) events of the calling thread since it started. */
int64_t t_counted(int site);

#endif
