/*
 * The kernel API. One table of operations per device (CPU here, CUDA in kernels/cuda/),
 * each running a whole instruction's item list in one call:
 *   attn_fwd  fused masked attention over tile groups, producing partial O and LSE
 *             (online softmax; full tiles skip mask evaluation; GQA within a head group);
 *   merge     n-way LSE merge of partial outputs into a destination;
 *   copy      gather/scatter of rows between buffers;
 *   attn_bwd  the backward of fused masked attention over tile groups (descr.h): dQ, dK, dV
 *             of every tile added in fp32, from the final forward LSE and delta;
 *   bwd_delta delta = rowsum(dO * O) of a rank's local rows, the backward's pre-pass;
 *   accumulate  fp32 dst rows += src rows (REDUCE of partial gradients; the attention engine's
 *             dense gradients come in the plan dtype); consecutive items with the same
 *             destination rows are one sum, their sources added first (descr.h);
 *   delta_out the O a dense backward takes, made from delta (kernels/segment.h).
 * Descriptors (include/base/descr.h) address a rank's buffers through env->bufs; on a GPU
 * the descriptor arrays and sequence table live in device memory.
 */
#ifndef DCP_KERNELS_KERNEL_H
#define DCP_KERNELS_KERNEL_H

#include "include/base/descr.h"
#include "include/base/error.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    void *bufs[DCP_BUF_ALL];  /* base of each buffer of the rank (NULL if empty) */
    const dcp_seq_info_t *seqs; /* masks and lengths, indexed by tile group seq */
    int32_t q_heads, kv_heads;  /* heads per head group */
    int32_t head_dim;
    float scale;
    dcp_dtype_t dtype; /* element type of Q, K, V, O and staging buffers */
    int32_t max_rows;  /* most rows of an item of the launch (GPU grid height) */
    void *stream;      /* CUDA stream (NULL on CPU) */
    int32_t deterministic; /* 1: the backward's sums run in a fixed order, so gradients are
                              bitwise equal run to run (the CPU kernels always are) */
} dcp_kernel_env_t;

/* rows rows of o (plan dtype) written so that rowsum(dout * o) = delta per (row, head):
 * o = delta x dout / |dout|^2 (0 where dout is 0), the O of a dense backward that takes O
 * where dcp ships delta (kernels/segment.h). Views: dout, o [rows, heads, D]; delta
 * [rows, heads] fp32. */
typedef struct {
    dcp_view_t dout, delta, o;
    int32_t rows;
} dcp_delta_out_item_t;

typedef struct {
    const char *name;
    dcp_status_t (*attn_fwd)(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                             int64_t num_groups, const dcp_tile_t *tiles);
    dcp_status_t (*merge)(const dcp_kernel_env_t *env, const dcp_merge_item_t *items,
                          int64_t num_items, const dcp_merge_src_t *srcs);
    dcp_status_t (*copy)(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                         int64_t num_items);
    dcp_status_t (*attn_bwd)(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                             int64_t num_groups, const dcp_tile_t *tiles);
    /* bufs[DCP_BUF_DELTA][i] = sum over x < head_dim of dO[i, x] * O[i, x] for i < rows,
     * rows = local tokens x all query heads; O and dO in the plan dtype, fp32 arithmetic */
    dcp_status_t (*bwd_delta)(const dcp_kernel_env_t *env, int64_t rows);
    dcp_status_t (*accumulate)(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                               int64_t num_items);
    /* DCP_OK when these kernels run plans of this head dim and dtype, else
     * DCP_ERR_UNSUPPORTED naming the field (checked before a call exchanges anything) */
    dcp_status_t (*check_shape)(int32_t head_dim, dcp_dtype_t dtype);
    dcp_status_t (*delta_out)(const dcp_kernel_env_t *env, const dcp_delta_out_item_t *items,
                              int64_t num_items);
} dcp_kernels_t;

/* The CUDA kernels' shapes (attn_fwd.cu, attn_bwd.cu), for builds with and without nvcc. */
static inline dcp_status_t dcp_cuda_shape_check(int32_t head_dim, dcp_dtype_t dtype)
{
    if (dtype == DCP_DTYPE_FP32)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "plan dtype: the GPU executor runs bf16 and fp16 plans");
    if (head_dim != 64 && head_dim != 128)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "plan head_dim = %d: the CUDA kernels run 64 and 128", head_dim);
    return DCP_OK;
}

/* Kernels on the calling thread: fp32 arithmetic over fp32, bf16 or fp16 storage. */
extern const dcp_kernels_t dcp_kernels_cpu;

/* bf16/fp16 kernels queued on env->stream (kernels/cuda/); without CUDA in the build every
 * entry fails with DCP_ERR_UNSUPPORTED. */
extern const dcp_kernels_t dcp_kernels_cuda;

#ifdef __cplusplus
}
#endif

#endif
