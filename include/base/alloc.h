/*
 * dcp's allocator: every host allocation of the library goes through these three functions
 * (and device memory, page-locked memory, streams and events through the device tables of
 * kernels/device.h), so that a failure is always a named DCP_ERR_NO_MEMORY and the failure
 * walks (include/base/test_hook.h) can fail each allocation in turn. Memory is released with
 * free().
 */
#ifndef DCP_BASE_ALLOC_H
#define DCP_BASE_ALLOC_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Zeroed allocation of n elements of `size` bytes with an overflow check; `what` names the
 * allocation in the error message. n == 0 yields a valid, freeable pointer. Exported from
 * libdcp.so though not in dcp.h: libdcp_mpi, linked beside it, allocates through it. */
DCP_API dcp_status_t dcp_calloc(void *ptr_out, int64_t n, size_t size, const char *what);

/* Grows *ptr (an array of `size`-byte elements with capacity *cap) to hold at least `need`
 * elements, doubling; new elements are zeroed. On failure *ptr and *cap are unchanged. */
dcp_status_t dcp_reserve(void *ptr_inout, int64_t *cap, int64_t need, size_t size,
                         const char *what);

/* Resizes *ptr (an array of `size`-byte elements, or NULL) to exactly n >= 1 elements,
 * keeping its first elements; elements past the old size are not initialised. On failure
 * *ptr is unchanged (and still owned by the caller). */
dcp_status_t dcp_resize(void *ptr_inout, int64_t n, size_t size, const char *what);

#ifdef __cplusplus
}
#endif

#endif
