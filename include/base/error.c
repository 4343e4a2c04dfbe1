#include "include/base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DCP_ERROR_CAP 512

static _Thread_local char dcp_error_text[DCP_ERROR_CAP];

const char *dcp_status_string(dcp_status_t status)
{
    switch (status) {
    case DCP_OK:
        return "DCP_OK";
    case DCP_ERR_INVALID_ARG:
        return "DCP_ERR_INVALID_ARG";
    case DCP_ERR_NO_MEMORY:
        return "DCP_ERR_NO_MEMORY";
    case DCP_ERR_PLAN_CORRUPT:
        return "DCP_ERR_PLAN_CORRUPT";
    case DCP_ERR_CAPACITY:
        return "DCP_ERR_CAPACITY";
    case DCP_ERR_UNSUPPORTED:
        return "DCP_ERR_UNSUPPORTED";
    case DCP_ERR_TIMEOUT:
        return "DCP_ERR_TIMEOUT";
    case DCP_ERR_PEER:
        return "DCP_ERR_PEER";
    case DCP_ERR_SYSTEM:
        return "DCP_ERR_SYSTEM";
    case DCP_ERR_INTERNAL:
        return "DCP_ERR_INTERNAL";
    }
    return "DCP_ERR_UNKNOWN";
}

const char *dcp_last_error(void)
{
    return dcp_error_text;
}

dcp_status_t dcp_set_error(dcp_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dcp_error_text, sizeof dcp_error_text, fmt, ap);
    va_end(ap);
    return status;
}

void dcp_error_save(char *buf, size_t capacity)
{
    if (capacity == 0) return;
    snprintf(buf, capacity, "%s", dcp_error_text);
}

double dcp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
