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
    int32_t head_dim;           /* of Q and K rows (and of dQ, dK) */
    int32_t head_dim_v;         /* of V, O and dO rows (and of dV); 0: head_dim (dcp_env_dv) */
    float scale;
    float softcap; /* > 0: scores are softcap x tanh(scale q.k / softcap) before the mask */
    /* forward, when not NULL: per query head of the whole shape (head group g's head j is
     * g x q_heads + j), the largest score (after scale and softcap) of an allowed pair the
     * launch computes is max-ed into it; fp32, where the kernels compute (device memory on a
     * GPU), starting at -inf */
    float *max_logit;
    dcp_dtype_t dtype; /* element type of Q, K, V, O and staging buffers */
    int32_t max_rows;  /* most rows of an item of the launch (GPU grid height) */
    void *stream;      /* CUDA stream (NULL on CPU) */
    int32_t deterministic; /* 1: the backward's sums run in a fixed order, so gradients are
                              bitwise equal run to run (the CPU kernels always are) */
} dcp_kernel_env_t;

/* The value head dim of an environment. */
static inline int32_t dcp_env_dv(const dcp_kernel_env_t *env)
{
    return env->head_dim_v > 0 ? env->head_dim_v : env->head_dim;
}

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
    /* bufs[DCP_BUF_DELTA][i] = sum over x < head_dim_v of dO[i, x] * O[i, x] for i < rows,
     * rows = local tokens x all query heads; O and dO in the plan dtype, fp32 arithmetic */
    dcp_status_t (*bwd_delta)(const dcp_kernel_env_t *env, int64_t rows);
    dcp_status_t (*accumulate)(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                               int64_t num_items);
    /* DCP_OK when these kernels run plans of this shape (head dims, dtype), else
     * DCP_ERR_UNSUPPORTED naming the field (checked before a call exchanges anything) */
    dcp_status_t (*check_shape)(const dcp_attn_shape_t *shape);
    dcp_status_t (*delta_out)(const dcp_kernel_env_t *env, const dcp_delta_out_item_t *items,
                              int64_t num_items);
    /* Learnable sinks after the merge (kernels/README.md, Numerics), over `tokens` local rows of
     * `heads` query heads: ACC_O *= sigmoid(ACC_LSE - s_h), ACC_LSE = logaddexp(ACC_LSE, s_h),
     * s = sinks[heads] (fp32, where the kernels compute). */
    dcp_status_t (*sinks_fwd)(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                              const float *sinks);
    /* dsinks[h] = -sum over the local rows t of exp(s_h - LSE[t, h]) delta[t, h], from the
     * caller's LSE (bufs[DCP_BUF_LSE], the forward's, sinks included) and bufs[DCP_BUF_DELTA];
     * every element written (0 without rows), each a sum in row order. */
    dcp_status_t (*sinks_bwd)(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                              const float *sinks, float *dsinks);
    /* dst[i] = max(dst[i], src[i]) for i < n (fp32; a NaN in src is ignored): the max logit's
     * reduction between ranks. */
    dcp_status_t (*max_f32)(const dcp_kernel_env_t *env, float *dst, const float *src, int32_t n);
} dcp_kernels_t;

/* The head dims dcp's CUDA kernels are built for (attn_fwd.cu, attn_bwd.cu): query/key head
 * dim x value head dim. */
static inline int dcp_cuda_dims_ok(int32_t head_dim, int32_t head_dim_v)
{
    if (head_dim == 192 && head_dim_v == 128) return 1; /* MLA (DeepSeek-V3, Kimi K2) */
    return head_dim == head_dim_v && (head_dim == 64 || head_dim == 96 || head_dim == 128 ||
                                      head_dim == 192 || head_dim == 256);
}

/* The CUDA kernels' shapes, for builds with and without nvcc. */
static inline dcp_status_t dcp_cuda_shape_check(const dcp_attn_shape_t *shape)
{
    if (shape->dtype == DCP_DTYPE_FP32)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "plan dtype: the GPU executor runs bf16 and fp16 plans");
    const int32_t dv = shape->head_dim_v > 0 ? shape->head_dim_v : shape->head_dim;
    if (!dcp_cuda_dims_ok(shape->head_dim, dv))
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "plan head_dim = %d, head_dim_v = %d: the CUDA kernels run head "
                             "dims 64, 96, 128, 192 and 256 (value dim the same) and 192 with "
                             "value dim 128",
                             shape->head_dim, dv);
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
