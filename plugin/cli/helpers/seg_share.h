/* What share of a plan's attention each segment class holds (kernels/segment.h): the
 * allowed pairs of the full, causal, band, left and masked segments of every rank's launches,
 * forward and backward, cut as an engine that takes every dense class would cut them. The
 * tools report it (dcp-plan --segments) for the repository's length distributions. */
#ifndef DCPT_CLI_SEG_SHARE_H
#define DCPT_CLI_SEG_SHARE_H

#include "include/dcp.h"

/* pairs_out[pass][c] += the pairs of class c (DCP_ATTN_CLASS_*) of pass `pass` (0 forward,
 * 1 backward) over every rank of the plan, dense runs shorter than min_rows counted as
 * masked. */
dcp_status_t dcpt_seg_pairs(const dcp_plan_t *plan, int32_t min_rows,
                            double pairs_out[2][DCP_ATTN_CLASSES]);

#endif
