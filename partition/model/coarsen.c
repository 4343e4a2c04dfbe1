/* Coarse block models: groups of consecutive blocks of a fine model as the blocks of another,
 * with the groups' tiles (multilevel placement, partition/place/place_metis.c). */
#include "partition/model/blocks.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

/* The sequences, shape and sizes of `from`, copied (CUSTOM ranges included). */
static dcp_status_t copy_inputs(const dcp_blocks_t *from, dcp_blocks_t *to)
{
    DCP_CHECK(dcp_calloc(&to->seqs, from->num_seqs, sizeof *to->seqs, "coarse blocks"));
    memcpy(to->seqs, from->seqs, (size_t)from->num_seqs * sizeof *to->seqs);
    DCP_CHECK(dcp_calloc(&to->custom_ranges, from->custom_ints, sizeof(int32_t), "coarse blocks"));
    if (from->custom_ints > 0)
        memcpy(to->custom_ranges, from->custom_ranges, (size_t)from->custom_ints * sizeof(int32_t));
    for (int32_t s = 0; s < from->num_seqs; s++)
        if (from->seqs[s].mask.kind == DCP_MASK_CUSTOM)
            to->seqs[s].mask.ranges =
                to->custom_ranges + (from->seqs[s].mask.ranges - from->custom_ranges);
    if (from->num_kinds > 1) {
        const int64_t n = (int64_t)from->num_kinds * from->num_seqs;
        DCP_CHECK(dcp_calloc(&to->kind_seqs, n, sizeof *to->kind_seqs, "coarse blocks"));
        memcpy(to->kind_seqs, from->kind_seqs, (size_t)n * sizeof *to->kind_seqs);
        DCP_CHECK(dcp_calloc(&to->kind_ranges, from->kind_ints, sizeof(int32_t), "coarse blocks"));
        if (from->kind_ints > 0)
            memcpy(to->kind_ranges, from->kind_ranges, (size_t)from->kind_ints * sizeof(int32_t));
        for (int64_t i = 0; i < n; i++)
            if (from->kind_seqs[i].mask.kind == DCP_MASK_CUSTOM)
                to->kind_seqs[i].mask.ranges =
                    to->kind_ranges + (from->kind_seqs[i].mask.ranges - from->kind_ranges);
        to->kind_ints = from->kind_ints;
        to->num_kinds = from->num_kinds;
        to->free_kinds = from->free_kinds;
        memcpy(to->kind_layers, from->kind_layers, sizeof to->kind_layers);
    }
    to->num_seqs = from->num_seqs;
    to->custom_ints = from->custom_ints;
    to->total_tokens = from->total_tokens;
    to->shape = from->shape;
    to->head_blocks = from->head_blocks;
    to->qpg = from->qpg;
    to->kvpg = from->kvpg;
    to->elem_bytes = from->elem_bytes;
    to->block_size = from->block_size;
    return DCP_OK;
}

/* Groups of `factor[s]` fine blocks: one pass counts (arrays NULL), the second fills. */
static void group_all(const dcp_blocks_t *f, const int32_t *factor, dcp_blocks_t *c,
                      int32_t *coarse_of)
{
    int32_t n = 0;
    for (int32_t s = 0; s < f->num_seqs; s++) {
        if (c->seq_blk) c->seq_blk[s] = n;
        for (int32_t t = f->seq_blk[s]; t < f->seq_blk[s + 1]; t += factor[s], n++) {
            const int32_t end =
                t + factor[s] < f->seq_blk[s + 1] ? t + factor[s] : f->seq_blk[s + 1];
            if (!c->blk_seq) continue;
            c->blk_seq[n] = s;
            c->blk_start[n] = f->blk_start[t];
            c->blk_len[n] = f->blk_start[end - 1] + f->blk_len[end - 1] - f->blk_start[t];
            for (int32_t u = t; u < end; u++) coarse_of[u] = n;
        }
    }
    if (c->seq_blk) c->seq_blk[f->num_seqs] = n;
    c->num_blocks = n;
}

dcp_status_t dcp_blocks_coarsen(const dcp_blocks_t *fine, const int32_t *factor,
                                dcp_blocks_t *coarse, int32_t **coarse_of_out)
{
    int32_t *coarse_of = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(copy_inputs(fine, coarse), st, err);
    group_all(fine, factor, coarse, NULL);
    const int32_t n = coarse->num_blocks;
    DCP_CHECK_GOTO(dcp_calloc(&coarse->seq_blk, fine->num_seqs + 1, sizeof(int32_t), "coarse"), st,
                   err);
    DCP_CHECK_GOTO(dcp_calloc(&coarse->blk_seq, n, sizeof(int32_t), "coarse blocks"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&coarse->blk_start, n, sizeof(int32_t), "coarse blocks"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&coarse->blk_len, n, sizeof(int32_t), "coarse blocks"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&coarse->blk_chunk, n, sizeof(int32_t), "coarse blocks"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&coarse_of, fine->num_blocks, sizeof(int32_t), "coarse blocks"), st,
                   err);
    group_all(fine, factor, coarse, coarse_of);
    DCP_CHECK_GOTO(dcp_blocks_tiles(coarse), st, err);
    *coarse_of_out = coarse_of;
    return DCP_OK;
err:
    free(coarse_of);
    dcp_blocks_release(coarse);
    return st;
}
