/* The simulator's kernel table from the JSON lines of dcp-kernel-bench. */
#ifndef DCP_CLI_SIM_KERNELS_H
#define DCP_CLI_SIM_KERNELS_H

#include "partition/simulate.h"

/* Reads `path` (dcp-kernel-bench --json output): per tile edge, the median TFLOP/s of the
 * "attn" rows and of the "bwd" rows (rows of head dim `head_dim` where there are any, else
 * all), over the tiles both have; the median GB/s of the "merge" and of the "copy" rows.
 * Rows with an error or no figure are skipped; a row that does not read (an unknown kernel,
 * a tile or head dim that is no positive integer, a figure <= 0) fails naming its line, as a
 * file without the rows it needs fails naming what is missing. */
dcp_status_t dcpt_sim_kernels_read(const char *path, int32_t head_dim, dcp_sim_kernels_t *k_out);

#endif
