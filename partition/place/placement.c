/* What the strategies share about a placement: computation at the query owner, each rank's
 * load, the balance bounds, the memory cap, each block's query FLOPs. */
#include "partition/place/place.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>

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
