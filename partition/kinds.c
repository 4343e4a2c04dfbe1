/* A placement of one batch taken from another batch's plan: the baseline a joint plan of
 * layer kinds is measured against (dcp_plan_create_on, planner.c). */
#include "partition/kinds.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

/* One computation block of a plan's forward programs and the rank that computes it. */
typedef struct {
    int32_t q, kv, h, rank;
} comp_at_t;

static int comp_at_cmp(const void *a, const void *b)
{
    const comp_at_t *x = a, *y = b;
    if (x->q != y->q) return x->q < y->q ? -1 : 1;
    if (x->kv != y->kv) return x->kv < y->kv ? -1 : 1;
    return (x->h > y->h) - (x->h < y->h);
}

/* Every computation block of base's forward programs (each kind's), sorted. */
static dcp_status_t comps_of(const dcp_plan_t *base, comp_at_t **out, int64_t *n_out)
{
    int64_t n = 0, cap = 0;
    comp_at_t *c = NULL;
    for (int32_t k = 0; k < base->num_kinds; k++) {
        const dcp_plan_t *v = dcp_plan_view_const(base, k);
        for (int32_t r = 0; r < v->num_ranks; r++)
            for (int64_t i = dcp_plan_prog_begin(v, DCP_PASS_FWD, r);
                 i < dcp_plan_prog_end(v, DCP_PASS_FWD, r); i++) {
                const dcp_instr_t *in = &v->instrs[i];
                if (in->op != DCP_OP_ATTN) continue;
                for (int64_t g = in->first; g < in->first + in->count; g++) {
                    const dcp_tile_group_t *gr = &v->groups[g];
                    for (int32_t t = gr->first_tile; t < gr->first_tile + gr->num_tiles; t++) {
                        if (dcp_reserve(&c, &cap, n + 1, sizeof *c, "placement") != DCP_OK) {
                            free(c);
                            return DCP_ERR_NO_MEMORY;
                        }
                        c[n++] = (comp_at_t){gr->q_block, v->tiles[t].kv_block, gr->head_group, r};
                    }
                }
            }
    }
    if (n > 1) qsort(c, (size_t)n, sizeof *c, comp_at_cmp);
    *out = c;
    *n_out = n;
    return DCP_OK;
}

/* The union model's placement from base: owners, and each tile's head groups where base
 * computes them (else at the query owner). */
static dcp_status_t place_from(const dcp_plan_t *base, dcp_placed_t *x)
{
    const dcp_blocks_t *b = &x->b;
    const int32_t hb = b->head_blocks;
    comp_at_t *c = NULL;
    int64_t n = 0;
    DCP_CHECK(comps_of(base, &c, &n));
    memcpy(x->pl.blk_owner, base->blk_owner, (size_t)b->num_blocks * sizeof(int32_t));
    for (int64_t t = 0; t < b->num_tiles; t++)
        for (int32_t h = 0; h < hb; h++) {
            const comp_at_t key = {b->tile_q[t], b->tile_kv[t], h, 0};
            const comp_at_t *at = n ? bsearch(&key, c, (size_t)n, sizeof *c, comp_at_cmp) : NULL;
            x->pl.comp_exec[t * hb + h] = at ? at->rank : base->blk_owner[b->tile_q[t]];
        }
    x->pl.fallback = base->fallback;
    free(c);
    return DCP_OK;
}

dcp_status_t dcp_kinds_place_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                                const dcp_cluster_t *cluster, dcp_placed_t *x)
{
    if (!base || !batch || !cluster)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL",
                             !base ? "base" : !batch ? "batch" : "cluster");
    if (cluster->num_ranks != base->num_ranks)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cluster: %d ranks, the base plan has %d",
                             cluster->num_ranks, base->num_ranks);
    x->opts = base->opts;
    dcp_blocks_t *b = &x->b;
    DCP_CHECK(dcp_blocks_init(b, batch, &base->shape, base->opts.block_size, base->opts.head_blocks));
    if (b->num_seqs != base->num_seqs)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "batch: %d sequences, the base plan has %d",
                             b->num_seqs, base->num_seqs);
    for (int32_t s = 0; s < b->num_seqs; s++)
        if (b->seqs[s].len != base->seqs[s].len)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "batch.lengths[%d] = %d, the base plan's is %d", s,
                                 b->seqs[s].len, base->seqs[s].len);
    const int32_t nb = base->num_blocks;
    int32_t **to[4] = {&b->blk_seq, &b->blk_start, &b->blk_len, &b->blk_chunk};
    for (int i = 0; i < 4; i++) DCP_CHECK(dcp_calloc(to[i], nb, sizeof(int32_t), "placement"));
    DCP_CHECK(dcp_calloc(&b->seq_blk, b->num_seqs + 1, sizeof(int32_t), "placement"));
    memcpy(b->blk_seq, base->blk_seq, (size_t)nb * sizeof(int32_t));
    memcpy(b->blk_start, base->blk_start, (size_t)nb * sizeof(int32_t));
    memcpy(b->blk_len, base->blk_len, (size_t)nb * sizeof(int32_t));
    b->num_blocks = nb;
    for (int32_t t = 0; t < nb; t++) b->seq_blk[base->blk_seq[t] + 1] = t + 1;
    for (int32_t s = 0; s < b->num_seqs; s++)
        if (b->seq_blk[s + 1] < b->seq_blk[s]) b->seq_blk[s + 1] = b->seq_blk[s];
    x->num_kinds = dcp_blocks_kinds(b);
    if (x->num_kinds > 1) {
        for (int32_t k = 0; k < x->num_kinds; k++) DCP_CHECK(dcp_kinds_model(b, k, &x->kb[k]));
        DCP_CHECK(dcp_kinds_union(b, x->kb));
    } else {
        DCP_CHECK(dcp_blocks_tiles(b));
    }
    DCP_CHECK(dcp_calloc(&x->pl.blk_owner, nb, sizeof(int32_t), "placement"));
    DCP_CHECK(dcp_calloc(&x->pl.comp_exec, b->num_tiles * b->head_blocks, sizeof(int32_t),
                         "placement"));
    DCP_CHECK(place_from(base, x));
    for (int32_t k = 0; k < x->num_kinds && x->num_kinds > 1; k++)
        DCP_CHECK(dcp_kinds_project(b, &x->pl, &x->kb[k], &x->kpl[k]));
    return DCP_OK;
}
