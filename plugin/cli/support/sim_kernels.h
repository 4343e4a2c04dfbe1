/* The simulator's kernel table from the JSON lines of dcp-kernel-bench. */
#ifndef DCP_CLI_SIM_KERNELS_H
#define DCP_CLI_SIM_KERNELS_H

#include "partition/sim/simulate.h"

/* Reads `path` (dcp-kernel-bench --json output): per tile edge, the median TFLOP/s of the
 * "attn" rows and of the "bwd" rows (rows of head dim `head_dim` where there are any, else
 * all), over the tiles both have; the median GB/s of the "merge" and of the "copy" rows.
 * Rows with an error or no figure are skipped; a row that does not read (an unknown kernel,
 * a tile or head dim that is no positive integer, a figure <= 0) fails naming its line, as a
 * file without the rows it needs fails naming what is missing. */
dcp_status_t dcpt_sim_kernels_read(const char *path, int32_t head_dim, dcp_sim_kernels_t *k_out);

/* A built-in table by name (dcp_sim_kernels_builtin: h100, a100, h100-dcp, h100-cudnn), else
 * the file `name` as dcpt_sim_kernels_read() reads it. */
dcp_status_t dcpt_kernels_load(const char *name, int32_t head_dim, dcp_sim_kernels_t *k_out);

/* Gives the cluster's cost model the table's kernels, so that plans are made for the kernels
 * they are simulated with: its efficiency curve is the forward TFLOP/s over the cluster's peak
 * at the table's tiles (at most 1), its backward speed the backward's over the forward's at the
 * largest tile. Not while the cluster plans. */
dcp_status_t dcpt_kernels_to_cluster(const dcp_sim_kernels_t *k, dcp_cluster_t *cluster);

#endif
