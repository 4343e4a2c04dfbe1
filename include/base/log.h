/*
 * dcp's log, opt-in as NCCL_DEBUG is: nothing is printed unless $DCP_DEBUG says so.
 *   DCP_DEBUG=WARN   where dcp fell back (cuDNN missing, a class cuDNN could not build)
 *   DCP_DEBUG=INFO   also, once per event and never per tile: the engine of each link class
 *                    and the transport report (INIT), the settings taken from the environment
 *                    (ENV), each plan a context binds (PLAN), its attention segments per class
 *                    and engine (ATTN), the cuDNN plans built or reused (CUDNN)
 * $DCP_DEBUG_SUBSYS keeps some subjects (INIT,PLAN,...; default ALL); $DCP_DEBUG_FILE sends the
 * lines to a file instead of stderr (appended; %h the host name, %p the process id). A line:
 *   dcp:<pid>:<rank> INFO PLAN <message>
 * (rank "-" where the caller has none). Each line is written with one write(2), so the lines of
 * ranks that share a file or a terminal do not mix; no state is kept between calls.
 */
#ifndef DCP_BASE_LOG_H
#define DCP_BASE_LOG_H

#include "include/base/error.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DCP_LOG_WARN = 1, DCP_LOG_INFO = 2 } dcp_log_level_t;

/* The subjects: the values of $DCP_DEBUG_SUBSYS's words (include/base/env.c). */
typedef enum {
    DCP_LOG_INIT = 1,
    DCP_LOG_ENV = 2,
    DCP_LOG_PLAN = 4,
    DCP_LOG_ATTN = 8,
    DCP_LOG_CUDNN = 16
} dcp_log_subsys_t;

/* Whether a line of `level` about `subsys` would be printed: callers that build a message at
 * some cost ask first. */
int dcp_log_on(dcp_log_level_t level, dcp_log_subsys_t subsys);

/* Prints one line (a newline is added) when dcp_log_on(level, subsys). */
void dcp_log(dcp_log_level_t level, dcp_log_subsys_t subsys, int32_t rank, const char *fmt, ...)
    DCP_PRINTF(4, 5);

#ifdef __cplusplus
}
#endif

#endif
