/*
 * Output files written whole or not at all: the text goes to a temporary file beside the
 * target (PATH.tmp.PID), which replaces PATH by rename() only when every write and the close
 * succeeded; on any failure it is removed, so a failed run never leaves a truncated or empty
 * output behind, nor clobbers an older complete one.
 */
#ifndef DCP_BASE_OUT_FILE_H
#define DCP_BASE_OUT_FILE_H

#include "include/dcp.h"

#include <stdio.h>

typedef struct {
    FILE *f;         /* write here; NULL when closed or never opened */
    char path[4096]; /* the target */
    char tmp[4160];  /* the temporary file */
} dcp_out_file_t;

/* Opens the temporary file of `path`; `what` names the output in the error. */
dcp_status_t dcp_out_file_open(dcp_out_file_t *o, const char *path, const char *what);

/* Closes o. With st == DCP_OK and every write successful, renames the temporary file over the
 * target and returns DCP_OK; otherwise removes it and returns st, or the write error when st
 * is DCP_OK. A closed or never opened o is a no-op returning st. */
dcp_status_t dcp_out_file_close(dcp_out_file_t *o, dcp_status_t st, const char *what);

#endif
