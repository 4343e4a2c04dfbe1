/* The strategy table and what strategies share. */
#include "partition/place.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

static const dcp_strategy_ops_t *const strategies[DCP_STRATEGY_COUNT] = {
    [DCP_STRATEGY_RING] = &dcp_strategy_ring,
    [DCP_STRATEGY_ZIGZAG] = &dcp_strategy_zigzag,
    [DCP_STRATEGY_LPT] = &dcp_strategy_lpt,
    [DCP_STRATEGY_METIS] = &dcp_strategy_metis,
};

const dcp_strategy_ops_t *dcp_strategy_ops(dcp_strategy_t id)
{
    return (unsigned)id < DCP_STRATEGY_COUNT ? strategies[id] : NULL;
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
    for (int i = 0; i < DCP_STRATEGY_COUNT; i++)
        if (!strcmp(name, strategies[i]->name)) {
            *strategy_out = (dcp_strategy_t)i;
            return DCP_OK;
        }
    if (!strcmp(name, "auto")) {
        *strategy_out = DCP_STRATEGY_AUTO;
        return DCP_OK;
    }
    return dcp_set_error(DCP_ERR_INVALID_ARG,
                         "strategy '%s': unknown (ring, zigzag, lpt, metis, auto)", name);
}

void dcp_place_at_query_owner(const dcp_blocks_t *b, dcp_placement_t *p)
{
    for (int64_t t = 0; t < b->num_tiles; t++)
        for (int32_t h = 0; h < b->head_blocks; h++)
            p->comp_exec[t * b->head_blocks + h] = p->blk_owner[b->tile_q[t]];
}

dcp_status_t dcp_place_check_cap(const dcp_place_in_t *in, const dcp_placement_t *p)
{
    const int64_t cap = in->opts->mem_cap_bytes;
    if (cap <= 0) return DCP_OK;
    const dcp_blocks_t *b = in->blocks;
    int64_t *mem;
    DCP_CHECK(dcp_calloc(&mem, in->cluster->num_ranks, sizeof *mem, "memory per rank"));
    for (int32_t t = 0; t < b->num_blocks; t++)
        mem[p->blk_owner[t]] += dcp_blocks_token_bytes(b, b->blk_len[t]);
    dcp_status_t st = DCP_OK;
    for (int32_t r = 0; r < in->cluster->num_ranks && st == DCP_OK; r++)
        if (mem[r] > cap)
            st = dcp_set_error(
                DCP_ERR_CAPACITY, "options.mem_cap_bytes = %lld: %s places %lld bytes on rank %d",
                (long long)cap, dcp_strategy_name(in->opts->strategy), (long long)mem[r], r);
    free(mem);
    return st;
}

dcp_status_t dcp_place_query_flops(const dcp_blocks_t *b, int64_t **flops_out)
{
    int64_t *f;
    DCP_CHECK(dcp_calloc(&f, b->num_blocks, sizeof *f, "block flops"));
    for (int64_t t = 0; t < b->num_tiles; t++)
        f[b->tile_q[t]] += dcp_blocks_comp_flops(b, t) * b->head_blocks;
    *flops_out = f;
    return DCP_OK;
}
