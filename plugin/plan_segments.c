/* A plan's attention per segment class (dcp.h dcp_plan_attn_pairs): the segmenter's tally
 * (kernels/segment.h) over every ATTN instruction of every rank's programs. */
#include "include/base/error.h"
#include "include/dcp.h"
#include "kernels/segment.h"
#include "partition/plan/plan.h"

dcp_status_t dcp_plan_attn_pairs(const dcp_plan_t *p, int32_t min_rows,
                                 int64_t pairs_out[2][DCP_ATTN_CLASSES])
{
    if (!p || !pairs_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "plan segments: %s is NULL",
                             p ? "pairs_out" : "plan");
    if (min_rows < 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "plan segments: min_rows = %d, must be >= 0",
                             min_rows);
    int64_t pairs[2][DCP_ATTN_CLASSES] = {{0}};
    for (int pass = 0; pass < 2; pass++)
        for (int32_t r = 0; r < p->num_ranks; r++)
            for (int64_t i = dcp_plan_prog_begin(p, (dcp_pass_t)pass, r);
                 i < dcp_plan_prog_end(p, (dcp_pass_t)pass, r); i++) {
                const dcp_instr_t *in = &p->instrs[i];
                if (in->op != DCP_OP_ATTN) continue;
                DCP_CHECK(dcp_seg_tally(p->seqs, p->groups + in->first, in->count, p->tiles,
                                        min_rows > 0 ? min_rows : 64, DCP_SEG_ALL_DENSE,
                                        pairs[pass]));
            }
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < DCP_ATTN_CLASSES; c++) pairs_out[pass][c] = pairs[pass][c];
    return DCP_OK;
}
