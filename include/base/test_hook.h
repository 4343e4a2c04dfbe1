/*
 * Test hooks. Delay injection for the ordering tests: DCP_TEST_DELAY(site) marks a point of the
 * runtime where another thread may overtake this one (before a kernel instruction, a transfer
 * launch or wait, an in-process block copy). In the library it compiles to nothing; the
 * test binary builds the files that hold such points again with -DDCP_TEST_HOOKS and
 * supplies dcp_test_delay() (tests/unit/delay_hook.c), which sleeps for seeded random
 * times so that the interleavings a GPU's asynchronous streams produce also happen on the
 * CPU executor. Counting: DCP_TEST_COUNT(site) marks an event a test counts per thread
 * (tests/unit/delay_hook.c supplies dcp_test_count() as well).
 */
#ifndef DCP_BASE_TEST_HOOK_H
#define DCP_BASE_TEST_HOOK_H

typedef enum {
    DCP_DELAY_KERNEL, /* before a kernel instruction runs */
    DCP_DELAY_LAUNCH, /* before a transfer launch */
    DCP_DELAY_WAIT,   /* before a transfer wait */
    DCP_DELAY_COPY,   /* before an in-process block copy */
    DCP_DELAY_COUNT
} dcp_delay_site_t;

/* Events the tests count (DCP_TEST_COUNT(site), per thread): a host synchronisation is the
 * calling thread waiting for a device's queued work (a stream or event synchronisation, or
 * an event query that had to wait), which a stream-ordered call avoids. */
typedef enum { DCP_COUNT_HOST_SYNC, DCP_COUNT_SITES } dcp_count_site_t;

#ifdef DCP_TEST_HOOKS
void dcp_test_delay(dcp_delay_site_t site);
void dcp_test_count(dcp_count_site_t site);
#define DCP_TEST_DELAY(site) dcp_test_delay(site)
#define DCP_TEST_COUNT(site) dcp_test_count(site)
#else
#define DCP_TEST_DELAY(site) ((void)0)
#define DCP_TEST_COUNT(site) ((void)0)
#endif

#endif
