/*
 * Head parallelism: DeepSpeed Ulysses and USP (Ulysses inside zigzag ring attention).
 *
 * ulysses: the ranks form groups of C consecutive ranks (options.strategy_arg, default a node:
 * DP x Ulysses, Ulysses inside the node as DeepSpeed's sequence-parallel groups are laid out);
 * whole documents go to groups by peer.h's longest-first balancer; a group's documents, in
 * batch order, form its token stream, cut into C contiguous shards of ceil(T / C) tokens (as
 * torch.chunk splits the sequence dimension), shard i on the group's rank i. Attention runs
 * head-parallel: head group h (of C; options.head_blocks = C) of every tile is computed on
 * the group's rank h, so each rank's Q, K, V of head group h travel to rank h and the output
 * back (the all-to-all before and after attention). The KV heads must divide among the C ranks
 * (DeepSpeed's and TransformerEngine's a2a condition); when they do not, the policy is refused.
 *
 * usp: Ulysses of degree U (options.strategy_arg; default the largest divisor of the KV heads
 * that fits a node and divides the ranks) on consecutive ranks, ring attention over the
 * P = R / U ring positions: every document in 2P zigzag chunks, ring position p holding chunks
 * p and 2P-1-p of every document (in batch order, front chunk then back), that stream cut
 * into U contiguous shards for the position's ranks, and head group h of a tile computed on
 * rank h of the query owner's ring position (yunchang's LongContextAttention with zigzag
 * extraction; MagiAttention's USP baseline, exps/dist_attn/baselines/shard.py, zigzag_dispatch).
 */
#include "partition/place/peer.h"

#include "include/base/error.h"

#include <stdlib.h>

/* Ranks per head-parallel group: the KV heads must divide among them. */
static dcp_status_t check_heads(const char *policy, const dcp_attn_shape_t *shape,
                                const dcp_cluster_t *c, int32_t size)
{
    if (c->num_ranks % size)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.strategy_arg = %d: %s groups of %d ranks do not divide the "
                             "cluster's %d ranks",
                             size, policy, size, c->num_ranks);
    if (shape->num_kv_heads % size)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "%s: shape.num_kv_heads = %d does not divide among the %d ranks of a "
                             "head-parallel group (options.strategy_arg; a group size that divides "
                             "the KV heads, or usp:U for more ranks, runs)",
                             policy, shape->num_kv_heads, size);
    return DCP_OK;
}

static dcp_status_t ulysses_resolve(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                    const dcp_cluster_t *c, dcp_plan_options_t *o)
{
    (void)batch;
    if (!o->strategy_arg) o->strategy_arg = c->devs_per_node;
    DCP_CHECK(check_heads("ulysses", shape, c, o->strategy_arg));
    o->head_blocks = o->strategy_arg;
    return DCP_OK;
}

static dcp_status_t usp_resolve(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                const dcp_cluster_t *c, dcp_plan_options_t *o)
{
    (void)batch;
    if (!o->strategy_arg) {
        o->strategy_arg = 1;
        for (int32_t u = 1; u <= c->devs_per_node; u++)
            if (shape->num_kv_heads % u == 0 && c->num_ranks % u == 0) o->strategy_arg = u;
    }
    DCP_CHECK(check_heads("usp", shape, c, o->strategy_arg));
    o->head_blocks = o->strategy_arg;
    return DCP_OK;
}

/* A stream cut into `parts` shards of ceil(T / parts) tokens, shard i tagged base + i. */
static dcp_status_t shard(const dcp_runs_t *stream, int32_t parts, int32_t base, dcp_runs_t *runs)
{
    const int64_t tokens = dcp_peer_stream_tokens(stream);
    if (!tokens) return DCP_OK;
    const int64_t from = runs->n;
    int32_t pieces;
    DCP_CHECK(dcp_peer_pieces(stream, (tokens + parts - 1) / parts, runs, &pieces));
    for (int64_t i = from; i < runs->n; i++) runs->tag[i] += base;
    return DCP_OK;
}

static dcp_status_t ulysses_cut(dcp_blocks_t *b, const dcp_cluster_t *c,
                                const dcp_plan_options_t *o)
{
    const int32_t size = o->strategy_arg, groups = c->num_ranks / size;
    int32_t *group_of = NULL;
    dcp_runs_t runs = {0}, stream = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&group_of, b->num_seqs, sizeof *group_of, "ulysses"), st, out);
    DCP_CHECK_GOTO(dcp_peer_pack(b, groups, group_of), st, out);
    for (int32_t g = 0; g < groups; g++) {
        stream.n = 0;
        for (int32_t s = 0; s < b->num_seqs; s++)
            if (group_of[s] == g)
                DCP_CHECK_GOTO(dcp_runs_push(&stream, s, 0, b->seqs[s].len, 0), st, out);
        DCP_CHECK_GOTO(shard(&stream, size, g * size, &runs), st, out);
    }
    st = dcp_blocks_cut_runs(b, &runs);
out:
    dcp_runs_release(&runs);
    dcp_runs_release(&stream);
    free(group_of);
    return st;
}

static dcp_status_t usp_cut(dcp_blocks_t *b, const dcp_cluster_t *c, const dcp_plan_options_t *o)
{
    const int32_t u = o->strategy_arg, ring = c->num_ranks / u;
    const int64_t chunks = 2 * (int64_t)ring;
    dcp_runs_t runs = {0}, stream = {0};
    dcp_status_t st = DCP_OK;
    for (int32_t p = 0; p < ring && st == DCP_OK; p++) {
        stream.n = 0;
        for (int32_t s = 0; s < b->num_seqs && st == DCP_OK; s++) {
            const int64_t len = b->seqs[s].len, back = chunks - 1 - p;
            st = dcp_runs_push(&stream, s, (int32_t)(p * len / chunks),
                               (int32_t)((p + 1) * len / chunks), 0);
            if (st == DCP_OK)
                st = dcp_runs_push(&stream, s, (int32_t)(back * len / chunks),
                                   (int32_t)((back + 1) * len / chunks), 0);
        }
        if (st == DCP_OK) st = shard(&stream, u, p * u, &runs);
    }
    if (st == DCP_OK) st = dcp_blocks_cut_runs(b, &runs);
    dcp_runs_release(&runs);
    dcp_runs_release(&stream);
    return st;
}

/* Owners from the tags; head group h of a tile on rank h of its query owner's group. */
static dcp_status_t head_place(const dcp_place_in_t *in, dcp_placement_t *out)
{
    const dcp_blocks_t *b = in->blocks;
    const int32_t hb = b->head_blocks;
    for (int32_t t = 0; t < b->num_blocks; t++) out->blk_owner[t] = b->blk_chunk[t];
    for (int64_t t = 0; t < b->num_tiles; t++) {
        const int32_t q = out->blk_owner[b->tile_q[t]], base = q - q % hb;
        for (int32_t h = 0; h < hb; h++) out->comp_exec[t * hb + h] = base + h;
    }
    return dcp_place_check_cap(in, out);
}

const dcp_strategy_ops_t dcp_strategy_ulysses = {.id = DCP_STRATEGY_ULYSSES,
                                                 .place = head_place,
                                                 .resolve = ulysses_resolve,
                                                 .cut = ulysses_cut};
const dcp_strategy_ops_t dcp_strategy_usp = {
    .id = DCP_STRATEGY_USP, .place = head_place, .resolve = usp_resolve, .cut = usp_cut};
