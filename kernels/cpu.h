/* The CPU (fp32) kernels behind dcp_kernels_cpu. */
#ifndef DCP_KERNELS_CPU_H
#define DCP_KERNELS_CPU_H

#include "kernels/kernel.h"

dcp_status_t dcp_cpu_attn_fwd(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles);
dcp_status_t dcp_cpu_merge(const dcp_kernel_env_t *env, const dcp_merge_item_t *items,
                           int64_t num_items, const dcp_merge_src_t *srcs);
dcp_status_t dcp_cpu_copy(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                          int64_t num_items);

#endif
