#include "plugin/cli/seg_share.h"

#include "include/base/error.h"
#include "kernels/segment.h"
#include "partition/plan.h"

#include <stdlib.h>

dcp_status_t dcpt_seg_pairs(const dcp_plan_t *p, int32_t min_rows, double pairs_out[3])
{
    const int32_t both = DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL);
    for (int32_t r = 0; r < p->num_ranks; r++)
        for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_FWD, r);
             i < dcp_plan_prog_end(p, DCP_PASS_FWD, r); i++) {
            const dcp_instr_t *in = &p->instrs[i];
            if (in->op != DCP_OP_ATTN) continue;
            dcp_seg_piece_t *pc = NULL;
            int64_t n = 0;
            DCP_CHECK(dcp_seg_cut(p->seqs, p->groups + in->first, in->count, p->tiles, min_rows,
                                  both, &pc, &n));
            for (int64_t k = 0; k < n; k++) pairs_out[pc[k].cls] += (double)pc[k].pairs;
            free(pc);
        }
    return DCP_OK;
}
