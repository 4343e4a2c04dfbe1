/* The CPU kernels behind dcp_kernels_cpu: fp32 arithmetic over fp32, bf16 or fp16 storage. */
#ifndef DCP_KERNELS_CPU_H
#define DCP_KERNELS_CPU_H

#include "include/base/half.h"
#include "kernels/kernel.h"

dcp_status_t dcp_cpu_attn_fwd(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles);
dcp_status_t dcp_cpu_merge(const dcp_kernel_env_t *env, const dcp_merge_item_t *items,
                           int64_t num_items, const dcp_merge_src_t *srcs);
dcp_status_t dcp_cpu_copy(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                          int64_t num_items);

/* The backward of dcp_cpu_attn_fwd (kernel.h, descr.h): adds dQ into each group's dq and
 * dK, dV into each tile's dk, dv (fp32 views, never overwritten). */
dcp_status_t dcp_cpu_attn_bwd(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles);
/* delta = rowsum(dO * O) over `rows` rows of head_dim elements (kernel.h). */
dcp_status_t dcp_cpu_bwd_delta(const dcp_kernel_env_t *env, int64_t rows);
/* fp32 dst rows += src rows (fp32, or the plan dtype in the engine's staging). */
dcp_status_t dcp_cpu_accumulate(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                                int64_t num_items);
/* The engine's O from delta (kernel.h, dcp_delta_out_item_t). */
dcp_status_t dcp_cpu_delta_out(const dcp_kernel_env_t *env, const dcp_delta_out_item_t *items,
                               int64_t num_items);

/* The variants' row kernels (kernel.h: sinks_fwd, sinks_bwd, max_f32). */
dcp_status_t dcp_cpu_sinks_fwd(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                               const float *sinks);
dcp_status_t dcp_cpu_sinks_bwd(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                               const float *sinks, float *dsinks);
dcp_status_t dcp_cpu_max_f32(const dcp_kernel_env_t *env, float *dst, const float *src, int32_t n);

/* Element i of a buffer of storage type `dtype` as fp32, and a store rounded to it. */
static inline float dcp_cpu_load(const void *base, dcp_dtype_t dtype, int64_t i)
{
    if (dtype == DCP_DTYPE_FP32) return ((const float *)base)[i];
    return dcp_half_to_f32(dtype, ((const uint16_t *)base)[i]);
}

/* True for the element types the CPU kernels store: fp32, bf16 and fp16. */
static inline int dcp_cpu_dtype_ok(dcp_dtype_t dtype)
{
    return dtype == DCP_DTYPE_FP32 || dtype == DCP_DTYPE_BF16 || dtype == DCP_DTYPE_FP16;
}

/* The loops of the attention kernels are written to vectorise; on x86-64 GCC builds a
 * baseline, an AVX2 and an AVX-512 version of their hot functions and picks one at load
 * time, so one binary runs everywhere and uses the wide units where they exist. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DCP_CPU_MULTIVERSION                                                                       \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DCP_CPU_MULTIVERSION
#endif

#endif
