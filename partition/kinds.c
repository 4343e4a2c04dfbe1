/* Layer kinds in planning: the union model's tiles and each kind's own model and placement. */
#include "partition/kinds.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

dcp_status_t dcp_kinds_model(const dcp_blocks_t *u, int32_t k, dcp_blocks_t *out)
{
    const int32_t n = u->num_seqs, nb = u->num_blocks;
    int32_t *lengths = NULL;
    dcp_mask_t *masks = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&lengths, n, sizeof *lengths, "layer kind"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&masks, n, sizeof *masks, "layer kind"), st, out);
    for (int32_t s = 0; s < n; s++) {
        const dcp_seq_info_t *q = &u->kind_seqs[(int64_t)k * n + s];
        lengths[s] = q->len;
        masks[s] = q->mask;
    }
    const dcp_batch_t batch = {.num_seqs = n, .lengths = lengths, .masks = masks};
    DCP_CHECK_GOTO(dcp_blocks_init(out, &batch, &u->shape, u->block_size, u->head_blocks), st,
                   out);
    /* the union model's cut, copied: whatever chunks the strategy asked for */
    int32_t **to[5] = {&out->blk_seq, &out->blk_start, &out->blk_len, &out->blk_chunk,
                       &out->seq_blk};
    int32_t *const from[5] = {u->blk_seq, u->blk_start, u->blk_len, u->blk_chunk, u->seq_blk};
    for (int i = 0; i < 5; i++) {
        const int64_t m = i == 4 ? n + 1 : nb;
        DCP_CHECK_GOTO(dcp_calloc(to[i], m, sizeof(int32_t), "layer kind"), st, out);
        memcpy(*to[i], from[i], (size_t)m * sizeof(int32_t));
    }
    out->num_blocks = nb;
    st = dcp_blocks_tiles(out);
out:
    if (st != DCP_OK) dcp_blocks_release(out);
    free(lengths);
    free(masks);
    return st;
}

/* The next tile of the merge: the smallest (q, kv) at any kind's cursor, or 0 when done. */
static int next_tile(const dcp_blocks_t *models, int32_t nk, const int64_t *at, int32_t *q,
                     int32_t *kv)
{
    int found = 0;
    for (int32_t k = 0; k < nk; k++) {
        const dcp_blocks_t *m = &models[k];
        if (at[k] >= m->num_tiles) continue;
        const int32_t mq = m->tile_q[at[k]], mk = m->tile_kv[at[k]];
        if (!found || mq < *q || (mq == *q && mk < *kv)) {
            *q = mq;
            *kv = mk;
            found = 1;
        }
    }
    return found;
}

dcp_status_t dcp_kinds_union(dcp_blocks_t *u, const dcp_blocks_t *models)
{
    const int32_t nk = u->num_kinds;
    int64_t at[DCP_MAX_KINDS] = {0}, total = 0;
    for (int32_t k = 0; k < nk; k++) total += models[k].num_tiles;
    u->num_tiles = 0;
    int64_t cap = 0;
    DCP_CHECK(dcp_reserve(&u->kind_pairs, &cap, total * nk, sizeof *u->kind_pairs, "layer kinds"));
    int32_t q = 0, kv = 0;
    while (next_tile(models, nk, at, &q, &kv)) {
        int64_t most = 0;
        int full = 1;
        int64_t *pairs = u->kind_pairs + u->num_tiles * nk;
        for (int32_t k = 0; k < nk; k++) {
            const dcp_blocks_t *m = &models[k];
            pairs[k] = 0;
            if (at[k] < m->num_tiles && m->tile_q[at[k]] == q && m->tile_kv[at[k]] == kv) {
                pairs[k] = m->tile_pairs[at[k]];
                full &= m->tile_full[at[k]];
                at[k]++;
            } else {
                full = 0; /* empty in this kind */
            }
            if (pairs[k] > most) most = pairs[k];
        }
        DCP_CHECK(dcp_blocks_push_tile(u, q, kv, most, full));
    }
    return DCP_OK;
}

dcp_status_t dcp_kinds_tiles(dcp_blocks_t *u)
{
    dcp_blocks_t models[DCP_MAX_KINDS];
    memset(models, 0, sizeof models);
    dcp_status_t st = DCP_OK;
    for (int32_t k = 0; k < u->num_kinds && st == DCP_OK; k++)
        st = dcp_kinds_model(u, k, &models[k]);
    if (st == DCP_OK) st = dcp_kinds_union(u, models);
    for (int32_t k = 0; k < u->num_kinds; k++) dcp_blocks_release(&models[k]);
    return st;
}

dcp_status_t dcp_kinds_project(const dcp_blocks_t *u, const dcp_placement_t *pu,
                               const dcp_blocks_t *m, dcp_placement_t *out)
{
    const int32_t hb = m->head_blocks;
    DCP_CHECK(dcp_calloc(&out->blk_owner, m->num_blocks, sizeof(int32_t), "layer kind placement"));
    DCP_CHECK(dcp_calloc(&out->comp_exec, m->num_tiles * hb, sizeof(int32_t),
                         "layer kind placement"));
    memcpy(out->blk_owner, pu->blk_owner, (size_t)m->num_blocks * sizeof(int32_t));
    for (int64_t t = 0; t < m->num_tiles; t++) {
        const int64_t ut = dcp_blocks_find_tile(u, m->tile_q[t], m->tile_kv[t]);
        if (ut < 0)
            return dcp_set_error(DCP_ERR_INTERNAL, "layer kinds: tile %lld is in no union tile",
                                 (long long)t);
        for (int32_t h = 0; h < hb; h++) out->comp_exec[t * hb + h] = pu->comp_exec[ut * hb + h];
    }
    out->fallback = pu->fallback;
    return DCP_OK;
}
