/*
 * The kernel table: the cost model's kernel efficiency curve as points, each a tile edge in
 * tokens and the fraction of the device's peak a kernel reaches there (dcp_perf_model_t's
 * eff_tokens and eff_value). One grammar for a point, read and written here only:
 *   a table file   lines `EDGE EFF` (dcp-kernel-bench --write-table writes one; dcp-plan
 *                  --kernel-table and dcp_cluster_load_kernel_table() read it);
 *   a node file    lines `kernel EDGE EFF` among its other keys (topo/node_file.c reads them,
 *                  dcp-calibrate writes them).
 * EDGE and EFF are numbers; edges are > 0 and increase line by line; EFF is in (0, 1]; '#'
 * starts a comment to the end of the line.
 */
#ifndef DCP_TOPO_KERNEL_TABLE_H
#define DCP_TOPO_KERNEL_TABLE_H

#include "topo/cluster.h"

#include <stdio.h>

typedef struct {
    int32_t n;
    double tile_tokens[DCP_MAX_KERNEL_POINTS]; /* increasing, > 0 */
    double efficiency[DCP_MAX_KERNEL_POINTS];  /* in (0, 1] */
} dcp_kernel_table_t;

/* Appends the point (edge, eff). `where` starts the message ("node file 'a.node', line 3"). */
dcp_status_t dcp_kernel_table_add(dcp_kernel_table_t *t, double edge, double eff,
                                  const char *where);

/* Appends the point given as its two tokens (either may be NULL: missing). */
dcp_status_t dcp_kernel_table_parse(dcp_kernel_table_t *t, const char *edge, const char *eff,
                                    const char *where);

/* Reads a table file: at least one point. Nothing is written on failure; messages name the file
 * and the line. */
dcp_status_t dcp_kernel_table_read(const char *path, dcp_kernel_table_t *t_out);

/* Writes the points, one line each: `EDGE EFF`, or `KEY EDGE EFF` when key is not NULL. */
void dcp_kernel_table_write(FILE *f, const dcp_kernel_table_t *t, const char *key);

#endif
