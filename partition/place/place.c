/* The strategy table and what strategies share. */
#include "partition/place/place.h"

#include "include/base/error.h"
#include "partition/kinds.h"

#include <math.h>
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

const char *dcp_strategy_name(dcp_strategy_t strategy)
{
    if (strategy == DCP_STRATEGY_AUTO) return "auto";
    const dcp_strategy_ops_t *ops = dcp_strategy_ops(strategy);
    return ops ? ops->name : "unknown";
}

dcp_status_t dcp_strategy_parse(const char *name, dcp_strategy_t *strategy_out)
{
    if (!name || !strategy_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "strategy: name and strategy_out must be non-NULL");
    for (int i = 0; i < DCP_STRATEGY_PEER_END; i++)
        if (strategies[i] && !strcmp(name, strategies[i]->name)) {
            *strategy_out = (dcp_strategy_t)i;
            return DCP_OK;
        }
    if (!strcmp(name, "auto")) {
        *strategy_out = DCP_STRATEGY_AUTO;
        return DCP_OK;
    }
    return dcp_set_error(DCP_ERR_INVALID_ARG,
                         "strategy '%s': unknown (ring, zigzag, lpt, metis, auto, nodes; peers: "
                         "packed, dyncp, ulysses, usp, magi)",
                         name);
}

dcp_status_t dcp_strategy_parse_spec(const char *spec, dcp_strategy_t *strategy_out,
                                     int32_t *arg_out)
{
    if (!spec || !strategy_out || !arg_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "strategy: spec, strategy_out and arg_out must be non-NULL");
    const char *colon = strchr(spec, ':');
    char name[32];
    const size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    if (n >= sizeof name)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "strategy '%s': unknown name", spec);
    memcpy(name, spec, n);
    name[n] = 0;
    dcp_strategy_t s;
    DCP_CHECK(dcp_strategy_parse(name, &s));
    long arg = 0;
    if (colon) {
        char *end;
        arg = strtol(colon + 1, &end, 10);
        if (!dcp_strategy_is_peer(s))
            return dcp_set_error(DCP_ERR_INVALID_ARG, "strategy '%s': %s takes no parameter", spec,
                                 name);
        if (end == colon + 1 || *end || arg < 1 || arg > INT32_MAX)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "strategy '%s': the parameter after ':' must be a whole number "
                                 ">= 1",
                                 spec);
    }
    *strategy_out = s;
    *arg_out = (int32_t)arg;
    return DCP_OK;
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
                             ops->name, (long long)(bound * b->head_blocks), b->num_blocks,
                             cluster->num_ranks, b->head_blocks);
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

void dcp_place_at_query_owner(const dcp_blocks_t *b, dcp_placement_t *p)
{
    for (int64_t t = 0; t < b->num_tiles; t++)
        for (int32_t h = 0; h < b->head_blocks; h++)
            p->comp_exec[t * b->head_blocks + h] = p->blk_owner[b->tile_q[t]];
}

dcp_status_t dcp_place_loads(const dcp_blocks_t *b, const dcp_placement_t *p, int32_t num_ranks,
                             int64_t **flops_out, int64_t **mem_out)
{
    const int32_t nk = dcp_blocks_kinds(b);
    int64_t *f = NULL, *m = NULL;
    DCP_CHECK(dcp_calloc(&f, (int64_t)nk * num_ranks, sizeof *f, "loads"));
    const dcp_status_t st = dcp_calloc(&m, num_ranks, sizeof *m, "loads");
    if (st != DCP_OK) {
        free(f);
        return st;
    }
    for (int64_t c = 0; c < b->num_tiles * b->head_blocks; c++)
        for (int32_t k = 0; k < nk; k++)
            f[(int64_t)k * num_ranks + p->comp_exec[c]] +=
                dcp_blocks_kind_flops(b, c / b->head_blocks, k);
    for (int32_t t = 0; t < b->num_blocks; t++)
        m[p->blk_owner[t]] += dcp_blocks_token_bytes(b, b->blk_len[t]);
    *flops_out = f;
    *mem_out = m;
    return DCP_OK;
}

void dcp_place_bounds(const dcp_blocks_t *b, int32_t num_ranks, double tol, int strict,
                      double *flops_bound, double *mem_bound)
{
    double tm = 0, mm = 0;
    for (int32_t t = 0; t < b->num_blocks; t++) {
        const double m = (double)dcp_blocks_token_bytes(b, b->blk_len[t]);
        tm += m;
        mm = m > mm ? m : mm;
    }
    const double am = tm / num_ranks;
    *mem_bound = (1.0 + tol) * am;
    if (!strict && am + mm > *mem_bound) *mem_bound = am + mm;
    for (int32_t k = 0; k < dcp_blocks_kinds(b); k++) {
        flops_bound[k] = INFINITY; /* a kind left free has no bound */
        if (!dcp_blocks_balances(b, k)) continue;
        double tf = 0, mf = 0;
        for (int64_t t = 0; t < b->num_tiles; t++) {
            const double f = (double)dcp_blocks_kind_flops(b, t, k);
            tf += f * b->head_blocks;
            mf = f > mf ? f : mf;
        }
        const double af = tf / num_ranks;
        flops_bound[k] = (1.0 + tol) * af;
        if (!strict && af + mf > flops_bound[k]) flops_bound[k] = af + mf;
    }
}

dcp_status_t dcp_place_check_cap(const dcp_place_in_t *in, const dcp_placement_t *p)
{
    const int64_t cap = in->opts->mem_cap_bytes;
    if (cap <= 0) return DCP_OK;
    int64_t *flops, *mem;
    DCP_CHECK(dcp_place_loads(in->blocks, p, in->cluster->num_ranks, &flops, &mem));
    dcp_status_t st = DCP_OK;
    for (int32_t r = 0; r < in->cluster->num_ranks && st == DCP_OK; r++)
        if (mem[r] > cap)
            st = dcp_set_error(
                DCP_ERR_CAPACITY, "options.mem_cap_bytes = %lld: %s places %lld bytes on rank %d",
                (long long)cap, dcp_strategy_name(in->opts->strategy), (long long)mem[r], r);
    free(flops);
    free(mem);
    return st;
}

dcp_status_t dcp_place_query_flops(const dcp_blocks_t *b, int64_t **flops_out)
{
    const int32_t nk = dcp_blocks_kinds(b);
    int64_t *f;
    DCP_CHECK(dcp_calloc(&f, (int64_t)nk * b->num_blocks, sizeof *f, "block flops"));
    for (int64_t t = 0; t < b->num_tiles; t++)
        for (int32_t k = 0; k < nk; k++)
            f[(int64_t)k * b->num_blocks + b->tile_q[t]] +=
                dcp_blocks_kind_flops(b, t, k) * b->head_blocks;
    *flops_out = f;
    return DCP_OK;
}
