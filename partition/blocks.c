/* Token blocks and tiles of a batch. */
#include "partition/blocks.h"

#include "include/base/error.h"
#include "partition/mask.h"

#include <stdlib.h>

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

/* One pass counts (arrays NULL), the second fills. */
static void cut_all(dcp_blocks_t *b, int32_t chunks, int32_t *n)
{
    *n = 0;
    for (int32_t s = 0; s < b->num_seqs; s++) {
        const int64_t len = b->seqs[s].len;
        if (b->seq_blk) b->seq_blk[s] = *n;
        if (chunks == 0) {
            cut_run(b, s, 0, 0, len, n);
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

static dcp_status_t push_tile(dcp_blocks_t *b, int32_t q, int32_t kv, int64_t pairs, int full)
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
                    DCP_CHECK_GOTO(push_tile(b, tq, tk, pairs, cls == DCP_TILE_FULL), st, out);
                }
            }
        }
    }
out:
    free(env);
    return st;
}
