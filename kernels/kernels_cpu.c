#include "kernels/cpu.h"

/* The CPU kernels run every head dim and dtype (fp32 arithmetic). */
static dcp_status_t dcp_cpu_check_shape(int32_t head_dim, dcp_dtype_t dtype)
{
    (void)head_dim, (void)dtype;
    return DCP_OK;
}

const dcp_kernels_t dcp_kernels_cpu = {
    .name = "cpu",
    .attn_fwd = dcp_cpu_attn_fwd,
    .merge = dcp_cpu_merge,
    .copy = dcp_cpu_copy,
    .attn_bwd = dcp_cpu_attn_bwd,
    .bwd_delta = dcp_cpu_bwd_delta,
    .accumulate = dcp_cpu_accumulate,
    .check_shape = dcp_cpu_check_shape,
};
