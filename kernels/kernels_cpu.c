#include "kernels/cpu.h"

const dcp_kernels_t dcp_kernels_cpu = {
    .name = "cpu",
    .attn_fwd = dcp_cpu_attn_fwd,
    .merge = dcp_cpu_merge,
    .copy = dcp_cpu_copy,
    .attn_bwd = dcp_cpu_attn_bwd,
    .bwd_delta = dcp_cpu_bwd_delta,
    .accumulate = dcp_cpu_accumulate,
    .delta_out = dcp_cpu_delta_out,
};
