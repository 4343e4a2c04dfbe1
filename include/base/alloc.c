/* dcp's allocator (alloc.h), with the allocation hook points of include/base/test_hook.h. The
 * functions are never inlined, so that each one's return address is its caller's call site. */
#include "include/base/alloc.h"

#include "include/base/error.h"
#include "include/base/test_hook.h"

#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) dcp_status_t dcp_calloc(void *ptr_out, int64_t n, size_t size,
                                                  const char *what)
{
    const void *site = DCP_ALLOC_SITE();
    if (n < 0 || (size != 0 && (uint64_t)n > SIZE_MAX / size))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "%s: %lld elements of %zu bytes overflow", what,
                             (long long)n, size);
    const size_t count = n > 0 ? (size_t)n : 1, each = size > 0 ? size : 1;
    void *p = DCP_TEST_ALLOC_FAILS(site) ? NULL : calloc(count, each);
    if (!p)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "%s: cannot allocate %lld x %zu bytes", what,
                             (long long)n, size);
    DCP_TEST_ALLOC_MADE(0, p, count * each, site);
    *(void **)ptr_out = p;
    return DCP_OK;
}

__attribute__((noinline)) dcp_status_t dcp_reserve(void *ptr_inout, int64_t *cap, int64_t need,
                                                   size_t size, const char *what)
{
    const void *site = DCP_ALLOC_SITE();
    if (need <= *cap) return DCP_OK;
    /* doubling, or exactly `need` where that is more: a large reservation made at once (a
     * plan's tiles) then neither zeroes nor faults in up to twice the pages it uses */
    int64_t ncap = *cap > 0 ? 2 * *cap : 16;
    if (ncap < need) ncap = need;
    if ((uint64_t)ncap > SIZE_MAX / size)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "%s: %lld elements overflow", what,
                             (long long)ncap);
    void *old = *(void **)ptr_inout;
    /* the hook drops the old block by its address (volatile: not a use of the freed pointer) */
    volatile uintptr_t old_at = (uintptr_t)old;
    void *p = DCP_TEST_ALLOC_FAILS(site) ? NULL : realloc(old, (size_t)ncap * size);
    if (!p)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "%s: cannot grow to %lld elements", what,
                             (long long)ncap);
    DCP_TEST_ALLOC_MADE(old_at, p, (size_t)ncap * size, site);
    memset((char *)p + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
    *(void **)ptr_inout = p;
    *cap = ncap;
    return DCP_OK;
}

__attribute__((noinline)) dcp_status_t dcp_resize(void *ptr_inout, int64_t n, size_t size,
                                                  const char *what)
{
    const void *site = DCP_ALLOC_SITE();
    if (n < 1 || size == 0 || (uint64_t)n > SIZE_MAX / size)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "%s: %lld elements of %zu bytes", what,
                             (long long)n, size);
    void *old = *(void **)ptr_inout;
    volatile uintptr_t old_at = (uintptr_t)old;
    void *p = DCP_TEST_ALLOC_FAILS(site) ? NULL : realloc(old, (size_t)n * size);
    if (!p)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "%s: cannot allocate %lld x %zu bytes", what,
                             (long long)n, size);
    DCP_TEST_ALLOC_MADE(old_at, p, (size_t)n * size, site);
    *(void **)ptr_inout = p;
    return DCP_OK;
}
