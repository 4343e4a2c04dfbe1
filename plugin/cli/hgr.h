/* Export of a batch's block hypergraph in hMETIS format, so that external hypergraph
 * partitioners can be compared with dcp's strategies on the same instance. */
#ifndef DCP_CLI_HGR_H
#define DCP_CLI_HGR_H

#include "include/dcp.h"

/* Writes the hypergraph of `batch` cut into blocks of opts->block_size (head groups as in
 * opts) to `path`:
 *   % comment lines describing the instance
 *   <nets> <vertices> 11
 *   one line per net: <bytes> <owner vertex> <member vertices...>   (1-based)
 *   one line per vertex: <FLOPs> <bytes>   (two constraints, as multi-constraint
 *                                           partitioners read them)
 * Vertices 1..nb are token blocks, nb+1.. computation blocks; nets with no member are left
 * out. */
dcp_status_t dcp_hgr_write(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                           const dcp_plan_options_t *opts, const char *path);

#endif
