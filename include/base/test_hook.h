/*
 * Test hooks. In the library they compile to nothing; the test binary (and the failure walks'
 * builds: the soak program, the hooked libdcp.so the Python walk loads) builds the files that
 * hold hook points again with -DDCP_TEST_HOOKS and supplies the functions below.
 *
 * Delays (tests/unit/delay_hook.c): DCP_TEST_DELAY(site) marks a point of the runtime where
 * another thread may overtake this one (before a kernel instruction, a transfer launch or
 * wait, an in-process block copy); the hook sleeps for seeded random times so that the
 * interleavings a GPU's asynchronous streams produce also happen on the CPU executor.
 *
 * Counting (tests/unit/delay_hook.c): DCP_TEST_COUNT(site) marks an event a test counts per
 * thread.
 *
 * Allocation failures (tests/unit/fault_hook.c): every allocation of the library (alloc.h,
 * the device tables' memory, page-locked memory, streams, events and timers, the NCCL
 * engine's stream and events) asks DCP_TEST_ALLOC_FAILS(site) first and fails as a real one
 * would when it says so; a block it
 * made is reported with DCP_TEST_ALLOC_MADE(old, ptr, bytes, site) (old: the address of the
 * block a resize replaced, or 0), so that the hook knows dcp's live blocks; host blocks are
 * dropped by the test programs' free() (-Wl,--wrap=free), the CUDA table's blocks (device and
 * page-locked memory, timers) by DCP_TEST_ALLOC_FREED(ptr) in its release. `site` is the return
 * address of the allocating call: it tells the library's call sites apart.
 *
 * Transport faults (tests/unit/fault_hook.c): DCP_TEST_FAULT(site) at each engine call that
 * can fail on its own (a UCX send or receive posted, a UCX operation completed later or when
 * posted, an in-process block copy) makes that call fail as the transport would.
 */
#ifndef DCP_BASE_TEST_HOOK_H
#define DCP_BASE_TEST_HOOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DCP_DELAY_KERNEL, /* before a kernel instruction runs */
    DCP_DELAY_LAUNCH, /* before a transfer launch */
    DCP_DELAY_WAIT,   /* before a transfer wait */
    DCP_DELAY_COPY,   /* before an in-process block copy */
    DCP_DELAY_COUNT
} dcp_delay_site_t;

typedef enum {
    DCP_FAULT_UCX_SEND,     /* ucp_tag_send_nbx of a launch returns an error */
    DCP_FAULT_UCX_RECV,     /* ucp_tag_recv_nbx of a launch returns an error */
    DCP_FAULT_UCX_COMPLETE, /* a UCX operation completes with an error (worker progress) */
    DCP_FAULT_UCX_AT_ONCE,  /* a UCX operation that completed when posted reports an error */
    DCP_FAULT_INPROC_COPY,  /* the in-process block copy of a matched pair fails: the rank
                               that copies reports the error to both */
    DCP_FAULT_COUNT
} dcp_fault_site_t;

/* Events the tests count (DCP_TEST_COUNT(site), per thread): a host synchronisation is the
 * calling thread waiting for a device's queued work (a stream or event synchronisation, or
 * an event query that had to wait), which a stream-ordered call avoids. */
typedef enum { DCP_COUNT_HOST_SYNC, DCP_COUNT_SITES } dcp_count_site_t;

#ifdef DCP_TEST_HOOKS
void dcp_test_delay(dcp_delay_site_t site);
void dcp_test_count(dcp_count_site_t site);
int dcp_test_alloc_fails(const void *site);
void dcp_test_alloc_made(uintptr_t old, const void *ptr, size_t bytes, const void *site);
void dcp_test_alloc_freed(const void *ptr);
int dcp_test_fault(dcp_fault_site_t site);
#define DCP_TEST_DELAY(site)                       dcp_test_delay(site)
#define DCP_TEST_COUNT(site)                       dcp_test_count(site)
#define DCP_TEST_ALLOC_FAILS(site)                 dcp_test_alloc_fails(site)
#define DCP_TEST_ALLOC_MADE(old, ptr, bytes, site) dcp_test_alloc_made(old, ptr, bytes, site)
#define DCP_TEST_ALLOC_FREED(ptr)                  dcp_test_alloc_freed(ptr)
#define DCP_TEST_FAULT(site)                       dcp_test_fault(site)
#else
#define DCP_TEST_DELAY(site)                       ((void)0)
#define DCP_TEST_COUNT(site)                       ((void)0)
#define DCP_TEST_ALLOC_FAILS(site)                 ((void)(site), 0)
#define DCP_TEST_ALLOC_MADE(old, ptr, bytes, site) ((void)(old), (void)(site))
#define DCP_TEST_ALLOC_FREED(ptr)                  ((void)(ptr))
#define DCP_TEST_FAULT(site)                       0
#endif

/* The site an allocation function reports: its caller's return address. */
#define DCP_ALLOC_SITE() ((const void *)__builtin_return_address(0))

#ifdef __cplusplus
}
#endif

#endif
