/* Validation of a batch and an attention shape, and the owned copy the plan keeps. */
#include "partition/blocks.h"

#include "include/base/error.h"
#include "partition/mask.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static dcp_status_t check_shape(const dcp_attn_shape_t *s, int32_t head_blocks)
{
    if (s->num_heads < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "shape.num_heads = %d, must be >= 1",
                             s->num_heads);
    if (s->num_kv_heads < 1 || s->num_heads % s->num_kv_heads != 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "shape.num_kv_heads = %d, must be >= 1 and divide num_heads = %d",
                             s->num_kv_heads, s->num_heads);
    if (s->head_dim < 1 || s->head_dim > 4096)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "shape.head_dim = %d, must be in [1, 4096]",
                             s->head_dim);
    if ((int64_t)s->num_heads * s->head_dim > (1 << 24))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "shape: num_heads x head_dim = %lld elements per token is too large",
                             (long long)s->num_heads * s->head_dim);
    if (s->dtype != DCP_DTYPE_FP32 && s->dtype != DCP_DTYPE_BF16 && s->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "shape.dtype = %d is not a dcp_dtype_t",
                             (int)s->dtype);
    if (!(s->scale >= 0.0f) || !isfinite(s->scale))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "shape.scale = %g, must be finite and >= 0",
                             (double)s->scale);
    if (head_blocks < 1 || s->num_kv_heads % head_blocks != 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.head_blocks = %d, must divide num_kv_heads = %d", head_blocks,
                             s->num_kv_heads);
    return DCP_OK;
}

static dcp_status_t check_batch(const dcp_batch_t *batch, int64_t *total_out, int64_t *custom_out)
{
    if (batch->num_seqs < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.num_seqs = %d, must be >= 1",
                             batch->num_seqs);
    if (!batch->lengths || !batch->masks)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.%s is NULL",
                             batch->lengths ? "masks" : "lengths");
    int64_t total = 0, custom = 0;
    for (int32_t s = 0; s < batch->num_seqs; s++) {
        const int32_t len = batch->lengths[s];
        if (len < 1)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.lengths[%d] = %d, must be >= 1", s,
                                 len);
        total += len;
        if (total > DCP_MAX_TOKENS)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "batch: %lld tokens up to sequence %d exceed the limit %d",
                                 (long long)total, s, DCP_MAX_TOKENS);
        char field[48];
        snprintf(field, sizeof field, "batch.masks[%d]", s);
        DCP_CHECK(dcp_mask_validate(&batch->masks[s], len, field));
        if (batch->masks[s].kind == DCP_MASK_CUSTOM) custom += 4 * (int64_t)len;
    }
    *total_out = total;
    *custom_out = custom;
    return DCP_OK;
}

dcp_status_t dcp_blocks_init(dcp_blocks_t *b, const dcp_batch_t *batch,
                             const dcp_attn_shape_t *shape, int32_t block_size, int32_t head_blocks)
{
    if (!batch || !shape)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", batch ? "shape" : "batch");
    if (block_size < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.block_size = %d, must be >= 1",
                             block_size);
    DCP_CHECK(check_shape(shape, head_blocks));
    int64_t total = 0, custom = 0;
    DCP_CHECK(check_batch(batch, &total, &custom));

    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&b->seqs, batch->num_seqs, sizeof *b->seqs, "batch copy"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&b->custom_ranges, custom, sizeof(int32_t), "custom ranges"), st,
                   err);
    int64_t used = 0;
    for (int32_t s = 0; s < batch->num_seqs; s++) {
        b->seqs[s].len = batch->lengths[s];
        b->seqs[s].mask = batch->masks[s];
        if (batch->masks[s].kind == DCP_MASK_CUSTOM) {
            const int64_t n = 4 * (int64_t)batch->lengths[s];
            memcpy(b->custom_ranges + used, batch->masks[s].ranges, (size_t)n * sizeof(int32_t));
            b->seqs[s].mask.ranges = b->custom_ranges + used;
            used += n;
        } else {
            b->seqs[s].mask.ranges = NULL;
        }
    }
    b->num_seqs = batch->num_seqs;
    b->custom_ints = custom;
    b->total_tokens = total;
    b->shape = *shape;
    if (b->shape.scale == 0.0f) b->shape.scale = (float)(1.0 / sqrt((double)shape->head_dim));
    b->head_blocks = head_blocks;
    b->qpg = shape->num_heads / head_blocks;
    b->kvpg = shape->num_kv_heads / head_blocks;
    b->elem_bytes = shape->dtype == DCP_DTYPE_FP32 ? 4 : 2;
    b->block_size = block_size;
    return DCP_OK;
err:
    dcp_blocks_release(b);
    return st;
}

int64_t dcp_shape_token_bytes(const dcp_attn_shape_t *shape, int64_t len)
{
    const int64_t hq = shape->num_heads, hkv = shape->num_kv_heads, d = shape->head_dim;
    const int64_t es = shape->dtype == DCP_DTYPE_FP32 ? 4 : 2;
    return len * ((2 * hq * d + 2 * hkv * d) * es + 4 * hq);
}

int64_t dcp_blocks_xfer_elems(const dcp_blocks_t *b, dcp_xfer_kind_t kind, int64_t len)
{
    const int64_t d = b->shape.head_dim;
    switch (kind) {
    case DCP_XFER_Q:
    case DCP_XFER_DQ:
        return len * b->qpg * d;
    case DCP_XFER_KV:
    case DCP_XFER_DKV:
        return 2 * len * b->kvpg * d;
    case DCP_XFER_PART:
        return len * b->qpg * (d + 1);
    case DCP_XFER_BQ:
        return 2 * len * b->qpg * d;
    case DCP_XFER_BSTAT:
        return 2 * len * b->qpg;
    case DCP_XFER_KIND_COUNT:
        break;
    }
    return 0;
}

int64_t dcp_blocks_xfer_bytes(const dcp_blocks_t *b, dcp_xfer_kind_t kind, int64_t len)
{
    return dcp_blocks_xfer_elems(b, kind, len) * (dcp_xfer_is_fp32(kind) ? 4 : b->elem_bytes);
}

int64_t dcp_blocks_net_bytes(const dcp_blocks_t *b, int query_side, int64_t len)
{
    static const dcp_xfer_kind_t q[] = {DCP_XFER_Q, DCP_XFER_PART, DCP_XFER_BQ, DCP_XFER_BSTAT,
                                        DCP_XFER_DQ};
    static const dcp_xfer_kind_t kv[] = {DCP_XFER_KV, DCP_XFER_KV, DCP_XFER_DKV};
    const dcp_xfer_kind_t *k = query_side ? q : kv;
    const int n = query_side ? 5 : 3;
    int64_t bytes = 0;
    for (int i = 0; i < n; i++) bytes += dcp_blocks_xfer_bytes(b, k[i], len);
    return bytes;
}
