#include "kernels/cuda/ops.h"

extern "C" const dcp_kernels_t dcp_kernels_cuda = {
    "cuda",
    dcp_cuda_attn_fwd,
    dcp_cuda_merge,
    dcp_cuda_copy,
};
