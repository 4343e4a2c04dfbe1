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
    DCP_BUF_O,       /* caller's O rows [tokens, Hq, D], written once at the end */
    DCP_BUF_LSE,     /* caller's LSE [tokens, Hq] fp32, written once at the end */
    DCP_BUF_ACC_O,   /* fp32 accumulator of local outputs, layout of O */
    DCP_BUF_ACC_LSE, /* fp32 accumulator of local LSE, layout of LSE */
    DCP_BUF_STAGE,   /* packed local blocks waiting to be sent (plan dtype) */
    DCP_BUF_RQ,      /* received Q blocks [rows, Hq/hb, D] (plan dtype) */
    DCP_BUF_RKV,     /* received K/V blocks: K rows then V rows (plan dtype) */
    DCP_BUF_PART,    /* fp32 partial outputs: O [rows, Hq/hb, D] then LSE [rows, Hq/hb] */
    DCP_BUF_COUNT
} dcp_buf_t;

/* Buffers dcp allocates itself (the others belong to the caller). */
#define DCP_BUF_FIRST_WORK DCP_BUF_ACC_O

/* True when buffer b holds fp32 regardless of the plan dtype. */
DCP_HD int dcp_buf_is_fp32(int b)
{
    return b == DCP_BUF_LSE || b == DCP_BUF_ACC_O || b == DCP_BUF_ACC_LSE || b == DCP_BUF_PART;
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

typedef struct {
    int64_t off;    /* element offset of row 0, first head of the group */
    int32_t stride; /* elements between consecutive rows */
    int32_t buf;    /* dcp_buf_t */
} dcp_view_t;

/* One KV block of a tile group. */
typedef struct {
    dcp_view_t k, v;
    int32_t kv_block; /* token block id (plan-wide) */
    int32_t kv_pos;   /* position of row 0 within the sequence */
    int32_t kv_len;   /* rows, >= 1 */
    int32_t full;     /* 1: every (query, key) pair is allowed, no mask evaluation */
} dcp_tile_t;

/* One output block: the queries of one token block for one head group, attended against
 * tiles [first_tile, first_tile + num_tiles). Groups of one launch have distinct outputs. */
typedef struct {
    dcp_view_t q, o, lse;
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

/* rows x row_elems elements from src to dst (same element type). */
typedef struct {
    dcp_view_t src, dst;
    int32_t rows, row_elems;
} dcp_copy_item_t;

/* What a kernel needs to know of a sequence to evaluate its mask. */
typedef struct {
    int32_t len;
    dcp_mask_t mask;
} dcp_seq_info_t;

#endif
