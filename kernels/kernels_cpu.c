#include "kernels/cpu.h"

/* The CPU kernels run every head dim and dtype (fp32 arithmetic). */
static dcp_status_t dcp_cpu_check_shape(const dcp_attn_shape_t *shape)
{
    (void)shape;
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
    .delta_out = dcp_cpu_delta_out,
    .sinks_fwd = dcp_cpu_sinks_fwd,
    .sinks_bwd = dcp_cpu_sinks_bwd,
    .max_f32 = dcp_cpu_max_f32,
};
