#include "plugin/cli/helpers/seg_share.h"

#include "include/base/error.h"
#include "kernels/segment.h"
#include "partition/plan.h"

#include <stdlib.h>

dcp_status_t dcpt_seg_pairs(const dcp_plan_t *p, int32_t min_rows,
                            double pairs_out[2][DCP_ATTN_CLASSES])
{
    for (int pass = 0; pass < 2; pass++)
        for (int32_t r = 0; r < p->num_ranks; r++)
            for (int64_t i = dcp_plan_prog_begin(p, (dcp_pass_t)pass, r);
                 i < dcp_plan_prog_end(p, (dcp_pass_t)pass, r); i++) {
                const dcp_instr_t *in = &p->instrs[i];
                if (in->op != DCP_OP_ATTN) continue;
                dcp_seg_t *sg = NULL;
                int64_t n = 0;
                DCP_CHECK(dcp_seg_cut(p->seqs, p->groups + in->first, in->count, p->tiles,
                                      min_rows, DCP_SEG_ALL_DENSE, &sg, &n));
                for (int64_t k = 0; k < n; k++) pairs_out[pass][sg[k].cls] += (double)sg[k].pairs;
                free(sg);
            }
    return DCP_OK;
}
