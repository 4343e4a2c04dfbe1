#include "kernels/cuda/ops.h"

/* Positional: the field order of dcp_kernels_t (kernel.h). */
extern "C" const dcp_kernels_t dcp_kernels_cuda = {
    "cuda",
    dcp_cuda_attn_fwd,
    dcp_cuda_merge,
    dcp_cuda_copy,
    dcp_cuda_attn_bwd,
    dcp_cuda_bwd_delta,
    dcp_cuda_accumulate,
    dcp_cuda_shape_check,
    dcp_cuda_delta_out,
    dcp_cuda_sinks_fwd,
    dcp_cuda_sinks_bwd,
    dcp_cuda_max_f32,
};
