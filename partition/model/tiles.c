/* The tiles of a block model: the (query block, KV block) pairs with an allowed pair and
 * their exact pair counts, made from the masks' envelopes; in a union model of layer kinds,
 * the merge of every kind's own model (dcp_kinds_model). */
#include "partition/model/blocks.h"

#include "include/base/error.h"
#include "partition/model/mask.h"

#include <stdlib.h>
#include <string.h>

/* First block of sequence s whose tokens reach past key position `pos`. */
static int32_t block_at(const dcp_blocks_t *b, int32_t s, int32_t pos)
{
    int32_t lo = b->seq_blk[s], hi = b->seq_blk[s + 1] - 1;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo + 1) / 2;
        if (b->blk_start[mid] <= pos)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

dcp_status_t dcp_blocks_push_tile(dcp_blocks_t *b, int32_t q, int32_t kv, int64_t pairs, int full)
{
    if (b->num_tiles >= b->tile_cap) {
        int64_t cap = b->tile_cap;
        DCP_CHECK(dcp_reserve(&b->tile_q, &cap, b->num_tiles + 1, sizeof(int32_t), "tiles"));
        cap = b->tile_cap;
        DCP_CHECK(dcp_reserve(&b->tile_kv, &cap, b->num_tiles + 1, sizeof(int32_t), "tiles"));
        cap = b->tile_cap;
        DCP_CHECK(dcp_reserve(&b->tile_pairs, &cap, b->num_tiles + 1, sizeof(int64_t), "tiles"));
        cap = b->tile_cap;
        DCP_CHECK(dcp_reserve(&b->tile_full, &cap, b->num_tiles + 1, sizeof(uint8_t), "tiles"));
        b->tile_cap = cap;
    }
    b->tile_q[b->num_tiles] = q;
    b->tile_kv[b->num_tiles] = kv;
    b->tile_pairs[b->num_tiles] = pairs;
    b->tile_full[b->num_tiles] = (uint8_t)full;
    b->num_tiles++;
    return DCP_OK;
}

dcp_status_t dcp_blocks_tiles(dcp_blocks_t *b)
{
    if (b->num_kinds > 1) return dcp_kinds_tiles(b);
    dcp_range_t *env = NULL;
    int64_t env_cap = 0, env_n = 0;
    dcp_status_t st = DCP_OK;
    b->num_tiles = 0;
    for (int32_t s = 0; s < b->num_seqs && st == DCP_OK; s++) {
        const dcp_seq_info_t *seq = &b->seqs[s];
        for (int32_t tq = b->seq_blk[s]; tq < b->seq_blk[s + 1] && st == DCP_OK; tq++) {
            const int32_t q0 = b->blk_start[tq], q1 = q0 + b->blk_len[tq];
            DCP_CHECK_GOTO(dcp_mask_envelope(&seq->mask, seq->len, q0, q1, &env, &env_cap, &env_n),
                           st, out);
            int32_t last = -1; /* two envelope ranges may meet the same KV block */
            for (int64_t r = 0; r < env_n; r++) {
                const int32_t first = block_at(b, s, env[r].lo);
                for (int32_t tk = first; tk < b->seq_blk[s + 1] && b->blk_start[tk] < env[r].hi;
                     tk++) {
                    if (tk <= last) continue;
                    last = tk;
                    const int32_t k0 = b->blk_start[tk], k1 = k0 + b->blk_len[tk];
                    int64_t pairs;
                    const dcp_tile_class_t cls =
                        dcp_mask_classify(&seq->mask, seq->len, q0, q1, k0, k1, &pairs);
                    if (cls == DCP_TILE_EMPTY) continue;
                    DCP_CHECK_GOTO(dcp_blocks_push_tile(b, tq, tk, pairs, cls == DCP_TILE_FULL), st,
                                   out);
                }
            }
        }
    }
out:
    free(env);
    return st;
}

/* The bound of dcp_blocks_tile_bound for the masks of seqs[num_seqs], added to *tiles. */
static dcp_status_t tile_bound(const dcp_blocks_t *b, const dcp_seq_info_t *seqs, int64_t *tiles_io)
{
    dcp_range_t *env = NULL;
    int64_t env_cap = 0, env_n = 0, tiles = 0;
    dcp_status_t st = DCP_OK;
    for (int32_t s = 0; s < b->num_seqs && st == DCP_OK; s++) {
        const dcp_seq_info_t *seq = &seqs[s];
        for (int32_t tq = b->seq_blk[s]; tq < b->seq_blk[s + 1] && st == DCP_OK; tq++) {
            const int32_t q0 = b->blk_start[tq], q1 = q0 + b->blk_len[tq];
            st = dcp_mask_envelope(&seq->mask, seq->len, q0, q1, &env, &env_cap, &env_n);
            for (int64_t r = 0; r < env_n && st == DCP_OK; r++)
                if (env[r].hi > env[r].lo)
                    tiles += block_at(b, s, env[r].hi - 1) - block_at(b, s, env[r].lo) + 1;
        }
    }
    free(env);
    if (st == DCP_OK) *tiles_io += tiles;
    return st;
}

dcp_status_t dcp_blocks_tile_bound(const dcp_blocks_t *b, int64_t *tiles_out)
{
    int64_t tiles = 0;
    if (b->num_kinds <= 1) DCP_CHECK(tile_bound(b, b->seqs, &tiles));
    for (int32_t k = 0; k < b->num_kinds && b->num_kinds > 1; k++)
        DCP_CHECK(tile_bound(b, b->kind_seqs + (int64_t)k * b->num_seqs, &tiles));
    *tiles_out = tiles;
    return DCP_OK;
}

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

int64_t dcp_blocks_find_tile(const dcp_blocks_t *b, int32_t q, int32_t kv)
{
    int64_t lo = 0, hi = b->num_tiles;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (b->tile_q[mid] < q || (b->tile_q[mid] == q && b->tile_kv[mid] < kv))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < b->num_tiles && b->tile_q[lo] == q && b->tile_kv[lo] == kv ? lo : -1;
}
