/* The strategy table, and a batch cut, placed and projected onto its layer kinds by the
 * strategy its options name. */
#include "partition/place/place.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

static const dcp_strategy_ops_t *const strategies[DCP_STRATEGY_PEER_END] = {
    [DCP_STRATEGY_RING] = &dcp_strategy_ring,   [DCP_STRATEGY_ZIGZAG] = &dcp_strategy_zigzag,
    [DCP_STRATEGY_LPT] = &dcp_strategy_lpt,     [DCP_STRATEGY_METIS] = &dcp_strategy_metis,
    [DCP_STRATEGY_NODES] = &dcp_strategy_nodes, [DCP_STRATEGY_PACKED] = &dcp_strategy_packed,
    [DCP_STRATEGY_DYNCP] = &dcp_strategy_dyncp, [DCP_STRATEGY_ULYSSES] = &dcp_strategy_ulysses,
    [DCP_STRATEGY_USP] = &dcp_strategy_usp,     [DCP_STRATEGY_MAGI] = &dcp_strategy_magi,
};

const dcp_strategy_ops_t *dcp_strategy_ops(dcp_strategy_t id)
{
    return (unsigned)id < DCP_STRATEGY_PEER_END ? strategies[id] : NULL;
}

dcp_status_t dcp_place_batch(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                             const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                             dcp_placed_t *x)
{
    return dcp_place_batch_free(batch, shape, o, cluster, 0, x);
}

dcp_status_t dcp_place_prepare(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                               uint32_t free_kinds, dcp_placed_t *x)
{
    const dcp_strategy_ops_t *ops = dcp_strategy_ops(o->strategy);
    if (!ops)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.strategy = %d is not a placement",
                             (int)o->strategy);
    dcp_blocks_t *b = &x->b;
    x->opts = *o;
    if (ops->resolve) DCP_CHECK(ops->resolve(batch, shape, cluster, &x->opts));
    o = &x->opts;
    DCP_CHECK(dcp_blocks_init(b, batch, shape, o->block_size, o->head_blocks));
    if (ops->cut)
        DCP_CHECK(ops->cut(b, cluster, o));
    else
        DCP_CHECK(dcp_blocks_cut(b, ops->chunks(cluster->num_ranks)));
    b->free_kinds = b->num_kinds > 1 ? free_kinds : 0;
    int64_t bound;
    DCP_CHECK(dcp_blocks_tile_bound(b, &bound));
    if (bound * b->head_blocks > DCP_MAX_COMP_BLOCKS)
        return dcp_set_error(DCP_ERR_CAPACITY,
                             "%s: up to %lld computation blocks (%d token blocks on %d ranks, %d "
                             "head groups), more than the planning limit 2^22",
                             dcp_strategy_name(o->strategy), (long long)(bound * b->head_blocks),
                             b->num_blocks, cluster->num_ranks, b->head_blocks);
    x->num_kinds = dcp_blocks_kinds(b);
    if (x->num_kinds > 1) { /* each kind's tiles once: they make the union's and are kept */
        for (int32_t k = 0; k < x->num_kinds; k++) DCP_CHECK(dcp_kinds_model(b, k, &x->kb[k]));
        DCP_CHECK(dcp_kinds_union(b, x->kb));
    } else {
        DCP_CHECK(dcp_blocks_tiles(b));
    }
    DCP_CHECK(dcp_calloc(&x->pl.blk_owner, b->num_blocks, sizeof(int32_t), "placement"));
    DCP_CHECK(
        dcp_calloc(&x->pl.comp_exec, b->num_tiles * b->head_blocks, sizeof(int32_t), "placement"));
    return DCP_OK;
}

dcp_status_t dcp_kinds_project(const dcp_blocks_t *u, const dcp_placement_t *pu,
                               const dcp_blocks_t *m, dcp_placement_t *out)
{
    const int32_t hb = m->head_blocks;
    DCP_CHECK(dcp_calloc(&out->blk_owner, m->num_blocks, sizeof(int32_t), "layer kind placement"));
    DCP_CHECK(
        dcp_calloc(&out->comp_exec, m->num_tiles * hb, sizeof(int32_t), "layer kind placement"));
    memcpy(out->blk_owner, pu->blk_owner, (size_t)m->num_blocks * sizeof(int32_t));
    /* both tile lists are sorted by (q, kv) and m's are among u's: one walk finds them all */
    int64_t ut = 0;
    for (int64_t t = 0; t < m->num_tiles; t++) {
        while (ut < u->num_tiles &&
               (u->tile_q[ut] < m->tile_q[t] ||
                (u->tile_q[ut] == m->tile_q[t] && u->tile_kv[ut] < m->tile_kv[t])))
            ut++;
        if (ut == u->num_tiles || u->tile_q[ut] != m->tile_q[t] || u->tile_kv[ut] != m->tile_kv[t])
            return dcp_set_error(DCP_ERR_INTERNAL, "layer kinds: tile %lld is in no union tile",
                                 (long long)t);
        for (int32_t h = 0; h < hb; h++) out->comp_exec[t * hb + h] = pu->comp_exec[ut * hb + h];
    }
    out->fallback = pu->fallback;
    return DCP_OK;
}

dcp_status_t dcp_place_project(dcp_placed_t *x)
{
    for (int32_t k = 0; k < x->num_kinds && x->num_kinds > 1; k++)
        DCP_CHECK(dcp_kinds_project(&x->b, &x->pl, &x->kb[k], &x->kpl[k]));
    return DCP_OK;
}

dcp_status_t dcp_place_batch_free(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                  const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                                  uint32_t free_kinds, dcp_placed_t *x)
{
    DCP_CHECK(dcp_place_prepare(batch, shape, o, cluster, free_kinds, x));
    const dcp_place_in_t in = {&x->b, cluster, &x->opts};
    DCP_CHECK(dcp_strategy_ops(o->strategy)->place(&in, &x->pl));
    /* the baselines' owners are their definition; METIS's only balance bytes and FLOPs */
    if ((o->strategy == DCP_STRATEGY_METIS || o->strategy == DCP_STRATEGY_NODES) && !x->pl.fallback)
        DCP_CHECK(dcp_place_spread_links(&x->b, cluster, &x->pl));
    return dcp_place_project(x);
}

void dcp_placed_release(dcp_placed_t *x)
{
    for (int32_t k = 0; k < DCP_MAX_KINDS; k++) {
        free(x->kpl[k].blk_owner);
        free(x->kpl[k].comp_exec);
        dcp_blocks_release(&x->kb[k]);
    }
    free(x->pl.blk_owner);
    free(x->pl.comp_exec);
    dcp_blocks_release(&x->b);
    *x = (dcp_placed_t){0};
}
