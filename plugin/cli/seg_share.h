/* What share of a plan's attention each segment class holds (kernels/segment.h): the
 * allowed pairs of the full, causal and masked segments of every rank's forward launches,
 * cut as an engine that takes both dense classes would cut them. The tools report it
 * (dcp-plan --segments) for the repository's length distributions. */
#ifndef DCPT_CLI_SEG_SHARE_H
#define DCPT_CLI_SEG_SHARE_H

#include "include/dcp.h"

/* pairs_out[c] += the pairs of class c (full, causal, masked) over every rank of the plan,
 * dense runs shorter than min_rows counted as masked. */
dcp_status_t dcpt_seg_pairs(const dcp_plan_t *plan, int32_t min_rows, double pairs_out[3]);

#endif
