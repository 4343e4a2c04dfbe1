/* The block model of one batch: the validated, owned copy of the batch and shape, its token
 * blocks, and the sizes of what travels between ranks. Its tiles: tiles.c; coarser models:
 * coarsen.c. */
#include "partition/model/blocks.h"

#include "include/base/error.h"
#include "include/base/shape.h"
#include "partition/model/mask.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
    if (s->head_dim_v < 0 || s->head_dim_v > 4096)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "shape.head_dim_v = %d, must be in [0, 4096] (0: head_dim)",
                             s->head_dim_v);
    const int64_t widest = s->head_dim > dcp_shape_dv(s) ? s->head_dim : dcp_shape_dv(s);
    if ((int64_t)s->num_heads * widest > (1 << 24))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "shape: num_heads x head_dim = %lld elements per token is too large",
                             (long long)s->num_heads * widest);
    if (s->dtype != DCP_DTYPE_FP32 && s->dtype != DCP_DTYPE_BF16 && s->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "shape.dtype = %d is not a dcp_dtype_t",
                             (int)s->dtype);
    if (!(s->scale >= 0.0f) || !isfinite(s->scale))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "shape.scale = %g, must be finite and >= 0",
                             (double)s->scale);
    if (!(s->softcap >= 0.0f) || !isfinite(s->softcap))
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "shape.softcap = %g, must be finite and >= 0 (0: off)",
                             (double)s->softcap);
    if (head_blocks < 1 || s->num_kv_heads % head_blocks != 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.head_blocks = %d, must divide num_kv_heads = %d", head_blocks,
                             s->num_kv_heads);
    return DCP_OK;
}

/* Most layers of one kind (dcp_layer_kind_t.layers): weights stay far inside int64. */
#define DCP_MAX_KIND_LAYERS 1024

/* The layer kinds of a batch: the masks field and the kinds agree, counts are in range. */
static dcp_status_t check_kinds(const dcp_batch_t *batch)
{
    if (batch->num_kinds == 0) {
        if (!batch->masks) return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.masks is NULL");
        return DCP_OK;
    }
    if (batch->num_kinds < 0 || batch->num_kinds > DCP_MAX_KINDS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.num_kinds = %d, must be in [0, %d]",
                             batch->num_kinds, DCP_MAX_KINDS);
    if (batch->masks)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "batch.masks is set with batch.num_kinds = %d: the kinds carry the "
                             "masks, so masks must be NULL",
                             batch->num_kinds);
    if (!batch->kinds) return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.kinds is NULL");
    for (int32_t k = 0; k < batch->num_kinds; k++) {
        if (!batch->kinds[k].masks)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.kinds[%d].masks is NULL", k);
        if (batch->kinds[k].layers < 1 || batch->kinds[k].layers > DCP_MAX_KIND_LAYERS)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "batch.kinds[%d].layers = %d, must be in [1, %d]", k,
                                 batch->kinds[k].layers, DCP_MAX_KIND_LAYERS);
    }
    return DCP_OK;
}

/* The masks of every kind, for sequence s of length len; CUSTOM ranges counted into *custom. */
static dcp_status_t check_seq_masks(const dcp_batch_t *batch, int32_t s, int32_t len,
                                    int64_t *custom)
{
    for (int32_t k = 0; k < dcp_batch_kinds(batch); k++) {
        const dcp_mask_t *m = &dcp_batch_masks(batch, k)[s];
        char field[64];
        if (batch->num_kinds > 0)
            snprintf(field, sizeof field, "batch.kinds[%d].masks[%d]", k, s);
        else
            snprintf(field, sizeof field, "batch.masks[%d]", s);
        DCP_CHECK(dcp_mask_validate(m, len, field));
        if (m->kind == DCP_MASK_CUSTOM) *custom += 4 * (int64_t)len;
    }
    return DCP_OK;
}

/* *custom_out: the CUSTOM range values of every kind. */
static dcp_status_t check_batch(const dcp_batch_t *batch, int64_t *total_out, int64_t *custom_out)
{
    if (batch->num_seqs < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.num_seqs = %d, must be >= 1",
                             batch->num_seqs);
    if (!batch->lengths) return dcp_set_error(DCP_ERR_INVALID_ARG, "batch.lengths is NULL");
    DCP_CHECK(check_kinds(batch));
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
        DCP_CHECK(check_seq_masks(batch, s, len, &custom));
    }
    *total_out = total;
    *custom_out = custom;
    return DCP_OK;
}

/* The up-front size limits that keep every count of a plan inside int64 (DCP_MAX_FLOPS,
 * DCP_MAX_BATCH_BYTES): FLOPs are at most sum of L^2 x 2 (D + D_v) x Hq forward, 2.5 x that
 * backward; byte counts at most the batch's bytes times the ranks a net spans (< 2^17). */
static dcp_status_t check_size(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               int64_t total)
{
    double pairs = 0; /* exact in double well past the limit: L^2 < 2^62 */
    for (int32_t s = 0; s < batch->num_seqs; s++)
        pairs += (double)batch->lengths[s] * (double)batch->lengths[s];
    const double flops = pairs * (double)dcp_shape_pair_flops(shape) * shape->num_heads;
    if (flops > (double)DCP_MAX_FLOPS)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "batch: up to %.3g forward FLOPs (sequence lengths squared x 2 x "
                             "(head_dim %d + head_dim_v %d) x num_heads %d), more than the "
                             "limit 2^61",
                             flops, shape->head_dim, dcp_shape_dv(shape), shape->num_heads);
    if (dcp_shape_token_bytes(shape, total) > DCP_MAX_BATCH_BYTES)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "batch: %lld tokens of %lld bytes (Q, K, V, O, LSE), more than the "
                             "limit 2^44 bytes",
                             (long long)total, (long long)dcp_shape_token_bytes(shape, 1));
    return DCP_OK;
}

static dcp_status_t check_args(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               int32_t block_size, int32_t head_blocks, int64_t *total_out,
                               int64_t *custom_out)
{
    if (!batch || !shape)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", batch ? "shape" : "batch");
    if (block_size < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.block_size = %d, must be >= 1",
                             block_size);
    DCP_CHECK(check_shape(shape, head_blocks));
    DCP_CHECK(check_batch(batch, total_out, custom_out));
    return check_size(batch, shape, *total_out);
}

dcp_status_t dcp_blocks_check(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              int32_t block_size, int32_t head_blocks)
{
    int64_t total, custom;
    return check_args(batch, shape, block_size, head_blocks, &total, &custom);
}

/* Kind k's masks of the batch into seqs[num_seqs], CUSTOM ranges copied to ranges + *used. */
static void copy_masks(const dcp_batch_t *batch, int32_t k, dcp_seq_info_t *seqs, int32_t *ranges,
                       int64_t *used)
{
    const dcp_mask_t *masks = dcp_batch_masks(batch, k);
    for (int32_t s = 0; s < batch->num_seqs; s++) {
        seqs[s].len = batch->lengths[s];
        seqs[s].mask = masks[s];
        if (masks[s].kind == DCP_MASK_CUSTOM) {
            const int64_t n = 4 * (int64_t)batch->lengths[s];
            memcpy(ranges + *used, masks[s].ranges, (size_t)n * sizeof(int32_t));
            seqs[s].mask.ranges = ranges + *used;
            *used += n;
        } else {
            seqs[s].mask.ranges = NULL;
        }
    }
}

/* A batch of K >= 2 kinds: every kind's sequences and ranges, and the layer counts. */
static dcp_status_t copy_kinds(dcp_blocks_t *b, const dcp_batch_t *batch, int64_t custom)
{
    const int32_t nk = batch->num_kinds, n = batch->num_seqs;
    DCP_CHECK(dcp_calloc(&b->kind_seqs, (int64_t)nk * n, sizeof *b->kind_seqs, "layer kinds"));
    DCP_CHECK(dcp_calloc(&b->kind_ranges, custom, sizeof(int32_t), "layer kinds"));
    int64_t used = 0;
    for (int32_t k = 0; k < nk; k++) {
        copy_masks(batch, k, b->kind_seqs + (int64_t)k * n, b->kind_ranges, &used);
        b->kind_layers[k] = batch->kinds[k].layers;
    }
    b->kind_ints = used;
    b->num_kinds = nk;
    return DCP_OK;
}

dcp_status_t dcp_blocks_init(dcp_blocks_t *b, const dcp_batch_t *batch,
                             const dcp_attn_shape_t *shape, int32_t block_size, int32_t head_blocks)
{
    int64_t total = 0, custom = 0;
    DCP_CHECK(check_args(batch, shape, block_size, head_blocks, &total, &custom));

    /* seqs hold kind 0's masks: the only ones of a batch of one kind */
    int64_t custom0 = 0;
    const dcp_mask_t *masks0 = dcp_batch_masks(batch, 0);
    for (int32_t s = 0; s < batch->num_seqs; s++)
        if (masks0[s].kind == DCP_MASK_CUSTOM) custom0 += 4 * (int64_t)batch->lengths[s];
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&b->seqs, batch->num_seqs, sizeof *b->seqs, "batch copy"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&b->custom_ranges, custom0, sizeof(int32_t), "custom ranges"), st,
                   err);
    int64_t used = 0;
    copy_masks(batch, 0, b->seqs, b->custom_ranges, &used);
    if (dcp_batch_kinds(batch) > 1) DCP_CHECK_GOTO(copy_kinds(b, batch, custom), st, err);
    b->num_seqs = batch->num_seqs;
    b->custom_ints = custom0;
    b->total_tokens = total;
    b->shape = *shape;
    if (b->shape.scale == 0.0f) b->shape.scale = (float)(1.0 / sqrt((double)shape->head_dim));
    b->shape.head_dim_v = dcp_shape_dv(shape);
    b->shape.softcap = shape->softcap == 0.0f ? 0.0f : shape->softcap; /* never -0.0 */
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
    const int64_t hq = shape->num_heads, hkv = shape->num_kv_heads;
    const int64_t dqk = shape->head_dim, dv = dcp_shape_dv(shape);
    const int64_t es = shape->dtype == DCP_DTYPE_FP32 ? 4 : 2;
    return len * ((hq + hkv) * (dqk + dv) * es + 4 * hq);
}

int64_t dcp_blocks_xfer_elems(const dcp_blocks_t *b, dcp_xfer_kind_t kind, int64_t len)
{
    const int64_t dqk = b->shape.head_dim, dv = dcp_shape_dv(&b->shape);
    switch (kind) {
    case DCP_XFER_Q:
    case DCP_XFER_DQ:
        return len * b->qpg * dqk;
    case DCP_XFER_KV:
    case DCP_XFER_DKV:
        return len * b->kvpg * (dqk + dv);
    case DCP_XFER_PART:
        return len * b->qpg * (dv + 1);
    case DCP_XFER_BQ:
        return len * b->qpg * (dqk + dv);
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

void dcp_blocks_release(dcp_blocks_t *b)
{
    free(b->seqs);
    free(b->custom_ranges);
    free(b->blk_seq);
    free(b->blk_start);
    free(b->blk_len);
    free(b->blk_chunk);
    free(b->seq_blk);
    free(b->tile_q);
    free(b->tile_kv);
    free(b->tile_pairs);
    free(b->tile_full);
    free(b->kind_seqs);
    free(b->kind_ranges);
    free(b->kind_pairs);
    *b = (dcp_blocks_t){0};
}

/* Blocks of one run [start, end) of a sequence, appended at *n (or only counted). */
static void cut_run(dcp_blocks_t *b, int32_t seq, int32_t chunk, int64_t start, int64_t end,
                    int32_t *n)
{
    for (int64_t p = start; p < end; p += b->block_size) {
        if (b->blk_seq) {
            b->blk_seq[*n] = seq;
            b->blk_start[*n] = (int32_t)p;
            b->blk_len[*n] = (int32_t)(end - p < b->block_size ? end - p : b->block_size);
            b->blk_chunk[*n] = chunk;
        }
        (*n)++;
    }
}

/* Sequence s of an unchunked model: blocks of B tokens from the sequence start, and from
 * each of its masks' structure cuts (dcp_mask_cuts) when it spans more than two blocks, so
 * that a sink or a block of rows that read the whole prefix travels alone. */
static void cut_at_structure(dcp_blocks_t *b, int32_t s, int32_t *n)
{
    const int32_t len = b->seqs[s].len;
    int32_t cuts[DCP_MAX_KINDS * DCP_MASK_MAX_CUTS + 1], nc = 0;
    if (len > 2 * (int64_t)b->block_size)
        for (int32_t k = 0; k < dcp_blocks_kinds(b); k++) {
            const dcp_seq_info_t *q =
                b->num_kinds > 1 ? &b->kind_seqs[k * b->num_seqs + s] : &b->seqs[s];
            nc += dcp_mask_cuts(&q->mask, len, cuts + nc);
        }
    /* sorted, unique, then len */
    for (int32_t i = 1; i < nc; i++)
        for (int32_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            const int32_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    cuts[nc++] = len;
    int64_t start = 0;
    for (int32_t i = 0; i < nc; i++)
        if (cuts[i] > start) {
            cut_run(b, s, 0, start, cuts[i], n);
            start = cuts[i];
        }
}

/* One pass counts (arrays NULL), the second fills. */
static void cut_all(dcp_blocks_t *b, int32_t chunks, int32_t *n)
{
    *n = 0;
    for (int32_t s = 0; s < b->num_seqs; s++) {
        const int64_t len = b->seqs[s].len;
        if (b->seq_blk) b->seq_blk[s] = *n;
        if (chunks == 0) {
            cut_at_structure(b, s, n);
            continue;
        }
        for (int32_t c = 0; c < chunks; c++)
            cut_run(b, s, c, c * len / chunks, (c + 1) * len / chunks, n);
    }
    if (b->seq_blk) b->seq_blk[b->num_seqs] = *n;
}

dcp_status_t dcp_blocks_cut(dcp_blocks_t *b, int32_t chunks)
{
    if (chunks < 0)
        return dcp_set_error(DCP_ERR_INTERNAL, "blocks: %d chunks per sequence", chunks);
    int32_t n;
    cut_all(b, chunks, &n);
    DCP_CHECK(dcp_calloc(&b->seq_blk, b->num_seqs + 1, sizeof(int32_t), "token blocks"));
    DCP_CHECK(dcp_calloc(&b->blk_seq, n, sizeof(int32_t), "token blocks"));
    DCP_CHECK(dcp_calloc(&b->blk_start, n, sizeof(int32_t), "token blocks"));
    DCP_CHECK(dcp_calloc(&b->blk_len, n, sizeof(int32_t), "token blocks"));
    DCP_CHECK(dcp_calloc(&b->blk_chunk, n, sizeof(int32_t), "token blocks"));
    cut_all(b, chunks, &b->num_blocks);
    return DCP_OK;
}

dcp_status_t dcp_runs_push(dcp_runs_t *r, int32_t seq, int32_t start, int32_t end, int32_t tag)
{
    if (end <= start) return DCP_OK;
    if (r->n == r->cap) {
        int64_t cap = r->cap;
        int32_t **arr[4] = {&r->seq, &r->start, &r->end, &r->tag};
        for (int i = 0; i < 4; i++) {
            cap = r->cap;
            DCP_CHECK(dcp_reserve(arr[i], &cap, r->n + 1, sizeof(int32_t), "token runs"));
        }
        r->cap = cap;
    }
    r->seq[r->n] = seq;
    r->start[r->n] = start;
    r->end[r->n] = end;
    r->tag[r->n] = tag;
    r->n++;
    return DCP_OK;
}

void dcp_runs_release(dcp_runs_t *r)
{
    free(r->seq);
    free(r->start);
    free(r->end);
    free(r->tag);
    *r = (dcp_runs_t){0};
}

typedef struct {
    int32_t seq, start, end, tag;
} run_t;

static int run_cmp(const void *a, const void *b)
{
    const run_t *x = a, *y = b;
    if (x->seq != y->seq) return x->seq < y->seq ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

dcp_status_t dcp_blocks_cut_runs(dcp_blocks_t *b, const dcp_runs_t *runs)
{
    run_t *r;
    DCP_CHECK(dcp_calloc(&r, runs->n, sizeof *r, "token runs"));
    for (int64_t i = 0; i < runs->n; i++)
        r[i] = (run_t){runs->seq[i], runs->start[i], runs->end[i], runs->tag[i]};
    qsort(r, (size_t)runs->n, sizeof *r, run_cmp);
    dcp_status_t st = DCP_OK;
    /* every sequence tiled, in order: each run starts where the one before it ended */
    int32_t seq = 0, pos = 0;
    int tiled = 1;
    for (int64_t i = 0; i < runs->n && tiled; i++) {
        if (r[i].seq != seq && pos == b->seqs[seq].len) seq++, pos = 0;
        tiled = r[i].seq == seq && r[i].start == pos && r[i].end <= b->seqs[seq].len;
        if (tiled) pos = r[i].end;
    }
    if (!tiled || seq != b->num_seqs - 1 || pos != b->seqs[seq].len)
        st = dcp_set_error(DCP_ERR_INTERNAL, "blocks: runs leave sequence %d open at %d", seq, pos);
    int32_t n = 0;
    for (int pass = 0; pass < 2 && st == DCP_OK; pass++) { /* count, then fill */
        n = 0;
        for (int64_t i = 0; i < runs->n; i++) {
            if (b->seq_blk && (i == 0 || r[i - 1].seq != r[i].seq)) b->seq_blk[r[i].seq] = n;
            cut_run(b, r[i].seq, r[i].tag, r[i].start, r[i].end, &n);
        }
        if (pass == 1) break;
        int32_t **arr[4] = {&b->blk_seq, &b->blk_start, &b->blk_len, &b->blk_chunk};
        for (int a = 0; a < 4 && st == DCP_OK; a++)
            st = dcp_calloc(arr[a], n, sizeof(int32_t), "token blocks");
        if (st == DCP_OK)
            st = dcp_calloc(&b->seq_blk, b->num_seqs + 1, sizeof(int32_t), "token blocks");
    }
    if (st == DCP_OK) {
        b->seq_blk[b->num_seqs] = n;
        b->num_blocks = n;
    }
    free(r);
    return st;
}
