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
    /* both tile lists are sorted by (q, kv) and m's are among u's: one walk finds them all */
    int64_t ut = 0;
    for (int64_t t = 0; t < m->num_tiles; t++) {
        while (ut < u->num_tiles && (u->tile_q[ut] < m->tile_q[t] ||
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

/* The token block of plan p holding position `pos` of sequence s, from block t on (blocks are
 * sorted by (sequence, start)). */
static int32_t block_holding(const dcp_plan_t *p, int32_t t, int32_t s, int32_t pos)
{
    while (p->blk_seq[t] != s || p->blk_start[t] + p->blk_len[t] <= pos) t++;
    return t;
}

dcp_status_t dcp_kinds_relayout_ms(const dcp_plan_t *a, const dcp_plan_t *b, int64_t row_bytes,
                                   double *ms_out)
{
    a = dcp_plan_root(a), b = dcp_plan_root(b);
    if (a->num_ranks != b->num_ranks || a->num_seqs != b->num_seqs)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "relayout: the plans are of other batches");
    for (int32_t s = 0; s < a->num_seqs; s++)
        if (a->seqs[s].len != b->seqs[s].len)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "relayout: sequence %d differs in length",
                                 s);
    const int32_t nr = a->num_ranks, devs = a->devs_per_node;
    double *v = NULL; /* [rank][send intra, send inter, recv intra, recv inter] bytes */
    DCP_CHECK(dcp_calloc(&v, 4 * (int64_t)nr, sizeof *v, "relayout"));
    int moved = 0;
    for (int32_t t = 0, u = 0; t < a->num_blocks; t++) {
        const int32_t s = a->blk_seq[t], end = a->blk_start[t] + a->blk_len[t];
        for (int32_t pos = a->blk_start[t]; pos < end;) {
            u = block_holding(b, u, s, pos);
            const int32_t stop = b->blk_start[u] + b->blk_len[u] < end
                                     ? b->blk_start[u] + b->blk_len[u]
                                     : end;
            const int32_t from = a->blk_owner[t], to = b->blk_owner[u];
            if (from != to) {
                const double bytes = (double)(stop - pos) * (double)row_bytes;
                const int inter = from / devs != to / devs;
                v[4 * (int64_t)from + inter] += bytes;
                v[4 * (int64_t)to + 2 + inter] += bytes;
                moved = 1;
            }
            pos = stop;
        }
    }
    const double bw[2] = {a->perf.intra_gbps * 1e9, a->perf.inter_gbps * 1e9};
    double worst = 0;
    for (int32_t r = 0; r < nr; r++)
        for (int k = 0; k < 4; k++) {
            const double sec = v[4 * (int64_t)r + k] / bw[k % 2];
            worst = sec > worst ? sec : worst;
        }
    free(v);
    *ms_out = moved ? worst * 1e3 + a->perf.lat_us * 1e-3 : 0.0;
    return DCP_OK;
}
