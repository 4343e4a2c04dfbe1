/* The failure walks' side of include/base/test_hook.h: the allocation failure hook (the Nth
 * allocation of the process fails), the live blocks of dcp's allocator, the call sites the
 * allocations came from, and the transport fault hook (the Nth engine call that can fail does).
 * Everything is off until a walk turns it on. The functions are exported (default visibility)
 * so that the hooked libdcp.so the Python walk loads offers them to ctypes too.
 *
 * Live blocks: the allocator and the device tables report every block they make
 * (DCP_TEST_ALLOC_MADE); the program is linked with -Wl,--wrap=free, so every free() of its own
 * objects (the library's) comes here first and drops the block, and the CUDA table's releases
 * (cudaFree, cudaFreeHost) drop theirs (DCP_TEST_ALLOC_FREED). Blocks the library made and
 * never released are what is live. */
#ifndef DCP_TESTS_FAULT_HOOK_H
#define DCP_TESTS_FAULT_HOOK_H

#include "include/base/test_hook.h"

#include <stdint.h>
#include <stdio.h>

#define DCP_TEST_EXPORT __attribute__((visibility("default")))

/* From now on the nth allocation (n >= 1, counted from this call, over every thread of the
 * process) fails; n = 0: none fails (only counted). */
DCP_TEST_EXPORT void dcp_test_alloc_fail_at(int64_t n);
/* From now on the first allocation made at `site` (a site of dcp_test_site()) fails; NULL:
 * none. Resets the count and the fired flag as dcp_test_alloc_fail_at() does. */
DCP_TEST_EXPORT void dcp_test_alloc_fail_site(const void *site);
/* Allocations asked for since the last dcp_test_alloc_fail_at(). */
DCP_TEST_EXPORT int64_t dcp_test_alloc_count(void);
/* 1 once the nth allocation was reached (and failed); its site in *site_out (may be NULL). */
DCP_TEST_EXPORT int dcp_test_alloc_fired(const void **site_out);
/* When the injected allocation failure (else transport fault) fired, on dcp_now()'s clock
 * (CLOCK_MONOTONIC, one for all processes); 0 while none has. */
DCP_TEST_EXPORT double dcp_test_fired_time(void);

/* Live-block tracking on (1) or off (0; blocks already tracked are still dropped when freed). */
DCP_TEST_EXPORT void dcp_test_alloc_track(int on);
/* Bytes and blocks the library made that are not freed, among those made while tracking. */
DCP_TEST_EXPORT int64_t dcp_test_alloc_live_bytes(void);
DCP_TEST_EXPORT int64_t dcp_test_alloc_live_blocks(void);
/* Prints up to `most` live blocks (size and site) to f, one a line. */
DCP_TEST_EXPORT void dcp_test_alloc_live_print(FILE *f, int most);

/* Distinct allocation sites (return addresses of allocating calls) seen since the last
 * reset, recorded while site recording is on; up to DCP_TEST_SITES_MAX. */
#define DCP_TEST_SITES_MAX 8192
DCP_TEST_EXPORT void dcp_test_sites_record(int on);
DCP_TEST_EXPORT void dcp_test_sites_reset(void);
DCP_TEST_EXPORT int64_t dcp_test_sites_count(void);
DCP_TEST_EXPORT const void *dcp_test_site(int64_t i);

/* Transport faults: from now on the nth engine call that can fail (DCP_FAULT_*, counted from
 * this call over every thread) fails; 0: none. */
DCP_TEST_EXPORT void dcp_test_fault_at(int64_t n);
DCP_TEST_EXPORT int64_t dcp_test_fault_count(void);
/* ... of one kind. */
DCP_TEST_EXPORT int64_t dcp_test_fault_count_site(dcp_fault_site_t site);
/* 1 once the nth call was reached (and failed); which kind of call in *site_out. */
DCP_TEST_EXPORT int dcp_test_fault_fired(dcp_fault_site_t *site_out);

#endif
