/* The CUDA kernels behind dcp_kernels_cuda (bf16 and fp16 plans). Descriptors, sequence
 * table and buffers are device memory; every launch goes on env->stream. */
#ifndef DCP_KERNELS_CUDA_OPS_H
#define DCP_KERNELS_CUDA_OPS_H

#include "kernels/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

dcp_status_t dcp_cuda_attn_fwd(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                               int64_t num_groups, const dcp_tile_t *tiles);
dcp_status_t dcp_cuda_merge(const dcp_kernel_env_t *env, const dcp_merge_item_t *items,
                            int64_t num_items, const dcp_merge_src_t *srcs);
dcp_status_t dcp_cuda_copy(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                           int64_t num_items);

/* The backward (attn_bwd.cu): dQ, dK, dV of every tile added with fp32 atomics into the
 * groups' dq and the tiles' dk, dv; with env->deterministic, each destination element once,
 * its terms summed in tile order. The groups' tiles must be consecutive (group i + 1 starts
 * where group i ends), as plans emit them; head dims as dcp_cuda_dims_ok() (kernel.h). */
dcp_status_t dcp_cuda_attn_bwd(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                               int64_t num_groups, const dcp_tile_t *tiles);
/* delta = rowsum(dO * O) into bufs[DCP_BUF_DELTA] (grad.cu). */
dcp_status_t dcp_cuda_bwd_delta(const dcp_kernel_env_t *env, int64_t rows);
/* fp32 dst rows += src rows (fp32, or the plan dtype in the engine's staging); items may
 * share destination rows (atomic adds). */
dcp_status_t dcp_cuda_accumulate(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                                 int64_t num_items);
/* The engine's O from delta (kernel.h, dcp_delta_out_item_t; grad.cu). */
dcp_status_t dcp_cuda_delta_out(const dcp_kernel_env_t *env, const dcp_delta_out_item_t *items,
                                int64_t num_items);
/* The variants' row kernels (kernel.h; variants.cu). */
dcp_status_t dcp_cuda_sinks_fwd(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                                const float *sinks);
dcp_status_t dcp_cuda_sinks_bwd(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                                const float *sinks, float *dsinks);
dcp_status_t dcp_cuda_max_f32(const dcp_kernel_env_t *env, float *dst, const float *src, int32_t n);

#ifdef __cplusplus
}
#endif

#endif
