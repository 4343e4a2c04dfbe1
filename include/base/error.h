/* Status recording and clocks shared by every layer; checked allocation (include/base/alloc.h)
 * comes with them. */
#ifndef DCP_BASE_ERROR_H
#define DCP_BASE_ERROR_H

#include "include/base/alloc.h"
#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define DCP_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define DCP_PRINTF(f, a)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Records `fmt` as the calling thread's last error and returns `status`. The function that
 * first sees a failure calls it; callers only propagate. Exported from libdcp.so though not
 * in dcp.h: libdcp_mpi, linked beside it, reports through it. */
DCP_API dcp_status_t dcp_set_error(dcp_status_t status, const char *fmt, ...) DCP_PRINTF(2, 3);

/* Copies the calling thread's last error text into buf (for handing it across threads). */
void dcp_error_save(char *buf, size_t capacity);

#define DCP_CHECK(call)                                                                            \
    do {                                                                                           \
        dcp_status_t dcp_st_ = (call);                                                             \
        if (dcp_st_ != DCP_OK) return dcp_st_;                                                     \
    } while (0)

#define DCP_CHECK_GOTO(call, st, label)                                                            \
    do {                                                                                           \
        (st) = (call);                                                                             \
        if ((st) != DCP_OK) goto label;                                                            \
    } while (0)

/* Monotonic clock in seconds. */
double dcp_now(void);

#ifdef __cplusplus
}
#endif

#endif
