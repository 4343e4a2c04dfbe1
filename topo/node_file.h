/* Node files: a node's measured cost-model figures (dcp-calibrate's output), named by a
 * cluster spec as Nx@FILE. Format in node_file.c. */
#ifndef DCP_TOPO_NODE_FILE_H
#define DCP_TOPO_NODE_FILE_H

#include "topo/perf_model.h"

/* 1 when `path` is readable and is not XML (an hwloc capture starts with '<'). */
int dcp_node_file_is(const char *path);

/* Reads a node file over *perf (figures it does not give stay): devices per node, NICs per
 * node (devices when not given) and the figures. Nothing is written on failure. */
dcp_status_t dcp_node_file_read(const char *path, int32_t *devs_out, int32_t *nics_out,
                                dcp_perf_model_t *perf);

#endif
