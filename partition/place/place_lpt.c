/*
 * FCP's longest-processing-time block distributor. Token blocks are taken in decreasing
 * order of max(m/m_avg, c/c_avg) (m: bytes, c: FLOPs of the block's queries) and each goes
 * to the rank with the lowest load max(M_r/m_avg, C_r/c_avg) whose memory stays under the
 * cap; ties go to the lower rank, so the result is deterministic. Computation runs at the
 * query's owner. With layer kinds (partition/model/blocks.h) each kind's FLOPs are one more c.
 */
#include "partition/place/place.h"

#include "include/base/error.h"

#include <stdlib.h>

typedef struct {
    double key;
    int32_t block;
} lpt_item_t;

static int lpt_cmp(const void *a, const void *b)
{
    const lpt_item_t *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->block > y->block) - (x->block < y->block);
}

static int32_t lpt_chunks(int32_t num_ranks)
{
    (void)num_ranks;
    return 0;
}

/* max(m/m_avg, c_k/c_avg_k over the balanced kinds k): a block's key, or a rank's load. */
static double lpt_load(double m, const int64_t *c, int64_t stride, const double *c_avg,
                       int32_t nk)
{
    double load = m;
    for (int32_t k = 0; k < nk; k++) {
        if (!c_avg[k]) continue; /* a kind left unbalanced */
        const double ck = (double)c[k * stride] / c_avg[k];
        load = load > ck ? load : ck;
    }
    return load;
}

static dcp_status_t lpt_place(const dcp_place_in_t *in, dcp_placement_t *out)
{
    const dcp_blocks_t *b = in->blocks;
    const int32_t nr = in->cluster->num_ranks, nk = dcp_blocks_kinds(b), nb = b->num_blocks;
    const int64_t cap = in->opts->mem_cap_bytes;
    int64_t *flops = NULL, *mem_r = NULL, *flops_r = NULL;
    lpt_item_t *items = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_place_query_flops(b, &flops), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&items, nb, sizeof *items, "lpt order"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&mem_r, nr, sizeof *mem_r, "lpt loads"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&flops_r, (int64_t)nk * nr, sizeof *flops_r, "lpt loads"), st, out);

    /* with layer kinds (blocks.h), every kind's FLOPs are a load of their own */
    double m_tot = 0, c_avg[DCP_MAX_KINDS];
    for (int32_t t = 0; t < nb; t++) m_tot += (double)dcp_blocks_token_bytes(b, b->blk_len[t]);
    for (int32_t k = 0; k < nk; k++) {
        double c_tot = 0;
        for (int32_t t = 0; t < nb; t++) c_tot += (double)flops[(int64_t)k * nb + t];
        c_avg[k] = !dcp_blocks_balances(b, k) ? 0 : c_tot > 0 ? c_tot / nr : 1;
    }
    const double m_avg = m_tot > 0 ? m_tot / nr : 1;
    for (int32_t t = 0; t < nb; t++) {
        const double m = (double)dcp_blocks_token_bytes(b, b->blk_len[t]) / m_avg;
        items[t] = (lpt_item_t){lpt_load(m, flops + t, nb, c_avg, nk), t};
    }
    qsort(items, (size_t)nb, sizeof *items, lpt_cmp);

    for (int32_t i = 0; i < nb; i++) {
        const int32_t t = items[i].block;
        const int64_t bytes = dcp_blocks_token_bytes(b, b->blk_len[t]);
        int32_t best = -1;
        double best_load = 0;
        for (int32_t r = 0; r < nr; r++) {
            if (cap > 0 && mem_r[r] + bytes > cap) continue;
            const double load = lpt_load((double)mem_r[r] / m_avg, flops_r + r, nr, c_avg, nk);
            if (best < 0 || load < best_load) {
                best = r;
                best_load = load;
            }
        }
        if (best < 0) {
            st = dcp_set_error(DCP_ERR_CAPACITY,
                               "options.mem_cap_bytes = %lld: lpt finds no rank for token block "
                               "%d (%lld bytes)",
                               (long long)cap, t, (long long)bytes);
            goto out;
        }
        out->blk_owner[t] = best;
        mem_r[best] += bytes;
        for (int32_t k = 0; k < nk; k++)
            flops_r[(int64_t)k * nr + best] += flops[(int64_t)k * nb + t];
    }
    dcp_place_at_query_owner(b, out);
    st = DCP_OK;
out:
    free(flops);
    free(items);
    free(mem_r);
    free(flops_r);
    return st;
}

const dcp_strategy_ops_t dcp_strategy_lpt = {
    .id = DCP_STRATEGY_LPT, .chunks = lpt_chunks, .place = lpt_place};
