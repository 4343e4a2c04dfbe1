/*
 * Descriptors a plan hands to the kernels: the contract between partition/ (which writes
 * them into rank programs) and kernels/ (which runs them). Plain data, host and device.
 *
 * A rank works on a fixed set of buffers (dcp_buf_t). A view addresses rows of one block
 * inside a buffer: element `off` is row 0 of the block's first head; row r starts at
 * off + r * stride. Heads of one head group are contiguous within a row ([heads, D]).
 */
#ifndef DCP_BASE_DESCR_H
#define DCP_BASE_DESCR_H

#include "include/base/hd.h"
#include "include/dcp.h"

#include <stdint.h>

typedef enum {
    DCP_BUF_Q = 0,   /* caller's local Q rows [tokens, Hq, D] (plan dtype, read-only) */
    DCP_BUF_K,       /* caller's local K rows [tokens, Hkv, D] */
    DCP_BUF_V,       /* caller's local V rows [tokens, Hkv, D] */
    DCP_BUF_O,       /* caller's O rows [tokens, Hq, D]: forward output, backward input */
    DCP_BUF_LSE,     /* caller's LSE [tokens, Hq] fp32: forward output, backward input */
    DCP_BUF_DO,      /* caller's dO rows [tokens, Hq, D] (backward input) */
    DCP_BUF_DQ,      /* caller's dQ rows [tokens, Hq, D], written once at the end */
    DCP_BUF_DK,      /* caller's dK rows [tokens, Hkv, D], written once at the end */
    DCP_BUF_DV,      /* caller's dV rows [tokens, Hkv, D], written once at the end */
    DCP_BUF_ACC_O,   /* fp32 accumulator of local outputs, layout of O */
    DCP_BUF_ACC_LSE, /* fp32 accumulator of local LSE, layout of LSE */
    DCP_BUF_DELTA,   /* fp32 rowsum(dO * O) of local rows, layout of LSE */
    DCP_BUF_ACC_DQ,  /* fp32 accumulator of local dQ, layout of Q */
    DCP_BUF_ACC_DK,  /* fp32 accumulator of local dK, layout of K */
    DCP_BUF_ACC_DV,  /* fp32 accumulator of local dV, layout of V */
    DCP_BUF_STAGE,   /* packed local blocks waiting to be sent (plan dtype): Q, K+V, Q+dO */
    DCP_BUF_STAGE32, /* packed fp32 local rows waiting to be sent: LSE then delta */
    DCP_BUF_RQ,      /* received Q blocks [rows, Hq/hb, D]; backward: Q rows then dO rows */
    DCP_BUF_RKV,     /* received K/V blocks: K rows then V rows (plan dtype) */
    DCP_BUF_RSTAT,   /* received fp32 LSE rows then delta rows [rows, Hq/hb] each */
    DCP_BUF_PART,    /* fp32 partials. Forward: O [rows, Hq/hb, D] then LSE [rows, Hq/hb].
                        Backward: dQ [rows, Hq/hb, D], or dK then dV [rows, Hkv/hb, D] each */
    DCP_BUF_COUNT
} dcp_buf_t;

/* Buffers dcp allocates itself (the others belong to the caller); from DCP_BUF_STAGE on,
 * their sizes are planned (slots), before it they follow from the local token count. */
#define DCP_BUF_FIRST_WORK DCP_BUF_ACC_O

/* The attention engine's staging (kernels/segment.h), after the plan's buffers and never in a
 * plan (its views and sizes are the engine's, made when a plan is bound): the packed rows of
 * dense segments as cuDNN's ragged SDPA takes them, in the plan dtype (SEG), and their
 * softmax statistics and the masked segments' partial outputs, fp32 (SEG32). Kernels address
 * bufs[0, DCP_BUF_ALL). */
#define DCP_BUF_SEG   ((int)DCP_BUF_COUNT)
#define DCP_BUF_SEG32 ((int)DCP_BUF_COUNT + 1)
#define DCP_BUF_ALL   ((int)DCP_BUF_COUNT + 2)

/* True when buffer b holds fp32 regardless of the plan dtype. */
DCP_HD int dcp_buf_is_fp32(int b)
{
    return b == DCP_BUF_LSE || (b >= DCP_BUF_ACC_O && b <= DCP_BUF_ACC_DV) ||
           b == DCP_BUF_STAGE32 || b == DCP_BUF_RSTAT || b == DCP_BUF_PART || b == DCP_BUF_SEG32;
}

/* The element type of buffer b under a plan of `dtype`, and its size in bytes. */
DCP_HD dcp_dtype_t dcp_buf_dtype(int b, dcp_dtype_t dtype)
{
    return dcp_buf_is_fp32(b) ? DCP_DTYPE_FP32 : dtype;
}

DCP_HD int dcp_buf_elem_bytes(int b, dcp_dtype_t dtype)
{
    return dcp_buf_dtype(b, dtype) == DCP_DTYPE_FP32 ? 4 : 2;
}

/* The two passes a plan carries a program of per rank. */
typedef enum { DCP_PASS_FWD = 0, DCP_PASS_BWD = 1, DCP_PASS_COUNT = 2 } dcp_pass_t;

typedef struct {
    int64_t off;    /* element offset of row 0, first head of the group */
    int32_t stride; /* elements between consecutive rows */
    int32_t buf;    /* dcp_buf_t */
} dcp_view_t;

/* One KV block of a tile group. The backward also reads dk, dv: fp32 rows that its kernels
 * add this tile's dK and dV to (ACC_DK/ACC_DV or a PART slot); the forward ignores them. */
typedef struct {
    dcp_view_t k, v;
    dcp_view_t dk, dv;
    int32_t kv_block; /* token block id (plan-wide) */
    int32_t kv_pos;   /* position of row 0 within the sequence */
    int32_t kv_len;   /* rows, >= 1 */
    int32_t full;     /* 1: every (query, key) pair is allowed, no mask evaluation */
} dcp_tile_t;

/* 1 when two tiles of a backward launch add into the same dK and dV rows. Tiles of one
 * launch that share a dk or a dv view share both views, their strides and the KV block
 * (plan_check); other destinations are other blocks' rows (ACC_DK/ACC_DV of a local block,
 * or a PART slot of its own). Summing each destination's tiles in tile order is therefore a
 * fixed order: the deterministic backward (kernels/cuda/attn_bwd.cu). */
DCP_HD int dcp_tile_same_grads(const dcp_tile_t *a, const dcp_tile_t *b)
{
    return a->dk.buf == b->dk.buf && a->dk.off == b->dk.off && a->dv.buf == b->dv.buf &&
           a->dv.off == b->dv.off && a->kv_len == b->kv_len;
}

/* One output block: the queries of one token block for one head group, attended against
 * tiles [first_tile, first_tile + num_tiles). Groups of one launch have distinct outputs and
 * own consecutive runs of tiles (group i + 1's run starts where group i's ends).
 *
 * Forward: reads q, writes (or LSE-merges, with accumulate) o and lse.
 * Backward: reads q, dout (dO rows, plan dtype), lse and delta (fp32, the final forward LSE
 * and rowsum(dO * O)); adds the group's dQ into dq (fp32) and each tile's dK, dV into the
 * tile's dk, dv (fp32). o and accumulate are unused: gradients always add to zeroed
 * accumulators, since several groups of one launch may share a tile's dk/dv. */
typedef struct {
    dcp_view_t q, o, lse;
    dcp_view_t dout, delta, dq;
    int32_t q_block, head_group, seq;
    int32_t q_pos, q_len;
    int32_t first_tile, num_tiles;
    int32_t accumulate; /* 1: merge with the (O, LSE) already in o/lse; 0: overwrite */
} dcp_tile_group_t;

/* n-way merge of partial (O, LSE) sources [first_src, first_src + num_src) into dst. */
typedef struct {
    dcp_view_t o, lse;
    int32_t rows;
    int32_t first_src, num_src;
} dcp_merge_item_t;

typedef struct {
    dcp_view_t o, lse;
} dcp_merge_src_t;

/* rows x row_elems elements from src to dst: the same element type, or fp32 into the plan's
 * 2-byte type (rounded). The backward's REDUCE uses the same items to add fp32 src rows
 * into fp32 dst rows: consecutive items with the same destination rows (dcp_copy_same_dst)
 * make one sum, dst += (src_1 + ... + src_k) added in item order, so the destination is read
 * and written once however many partials it takes. */
typedef struct {
    dcp_view_t src, dst;
    int32_t rows, row_elems;
} dcp_copy_item_t;

/* 1 when two items write the same destination rows (one sum of a REDUCE when consecutive). */
DCP_HD int dcp_copy_same_dst(const dcp_copy_item_t *a, const dcp_copy_item_t *b)
{
    return a->dst.buf == b->dst.buf && a->dst.off == b->dst.off && a->dst.stride == b->dst.stride &&
           a->rows == b->rows && a->row_elems == b->row_elems;
}

/* What a kernel needs to know of a sequence to evaluate its mask. */
typedef struct {
    int32_t len;
    dcp_mask_t mask;
} dcp_seq_info_t;

#endif
