/*
 * The segmenter (kernels/segment.h): a tile list cut into FULL, CAUSAL and MASKED pieces,
 * and the program that runs them with dense calls for the first two and dcp's own kernels
 * for the rest. Everything here is host-side bookkeeping over descriptors; no data moves.
 */
#include "kernels/segment.h"

#include "include/base/error.h"
#include "include/base/mask_rule.h"

#include <stdlib.h>
#include <string.h>

const char *dcp_seg_class_name(int cls)
{
    static const char *const names[DCP_SEG_CLASSES] = {"full", "causal", "masked"};
    return cls >= 0 && cls < DCP_SEG_CLASSES ? names[cls] : "?";
}

int32_t dcp_seg_cap(int32_t batch)
{
    int32_t cap = 8;
    while (cap < batch && cap < (1 << 30)) cap *= 2;
    return cap;
}

/* ---- the cut ------------------------------------------------------------------------------ */

/* A run of rows of one tile: FULL ([lo, hi) for every row), CAUSAL (row r0 + x sees
 * [lo, b0 + x), hi the last row's end) or MASKED ([lo, hi) the hull of its rows' keys). */
typedef struct {
    int32_t cls, r0, r1, lo, hi, b0;
    int64_t pairs;
} run_t;

typedef struct {
    run_t *runs;
    int64_t n, cap;
} runs_t;

static dcp_status_t push_run(runs_t *v, const run_t *r)
{
    if (r->r1 <= r->r0) return DCP_OK;
    DCP_CHECK(dcp_reserve(&v->runs, &v->cap, v->n + 1, sizeof *v->runs, "segment runs"));
    v->runs[v->n++] = *r;
    return DCP_OK;
}

/* The runs of tile t for group g, rows ascending. A row's allowed keys inside the tile are at
 * most two ranges; one range extends the current run when the run's shape continues (same
 * start; the same end for FULL, an end one further for CAUSAL, a one-row run being either),
 * two make the row MASKED, none end the run. */
static dcp_status_t tile_runs(const dcp_seq_info_t *seq, const dcp_tile_group_t *g,
                              const dcp_tile_t *t, runs_t *out)
{
    out->n = 0;
    if (t->full) {
        const run_t r = {DCP_SEG_FULL, 0, g->q_len, 0, t->kv_len, t->kv_len,
                         (int64_t)g->q_len * t->kv_len};
        return push_run(out, &r);
    }
    run_t cur = {0};
    int open = 0;
    for (int32_t r = 0; r < g->q_len; r++) {
        int32_t rg[4], a[2], b[2], n = 0;
        dcp_mask_keys(&seq->mask, seq->len, g->q_pos + r, rg);
        for (int j = 0; j < 2; j++) {
            int32_t x = rg[2 * j] - t->kv_pos, y = rg[2 * j + 1] - t->kv_pos;
            x = x < 0 ? 0 : (x > t->kv_len ? t->kv_len : x);
            y = y < x ? x : (y > t->kv_len ? t->kv_len : y);
            if (x < y) {
                a[n] = x;
                b[n] = y;
                n++;
            }
        }
        if (n == 0) {
            if (open) DCP_CHECK(push_run(out, &cur));
            open = 0;
            continue;
        }
        const int64_t pairs = (int64_t)(b[0] - a[0]) + (n == 2 ? b[1] - a[1] : 0);
        if (n == 2) {
            if (open && cur.cls == DCP_SEG_MASKED && cur.r1 == r) {
                cur.lo = a[0] < cur.lo ? a[0] : cur.lo;
                cur.hi = b[1] > cur.hi ? b[1] : cur.hi;
            } else {
                if (open) DCP_CHECK(push_run(out, &cur));
                cur = (run_t){DCP_SEG_MASKED, r, r, a[0], b[1], b[1], 0};
                open = 1;
            }
            cur.r1 = r + 1;
            cur.pairs += pairs;
            continue;
        }
        const int continues = open && cur.r1 == r && cur.cls != DCP_SEG_MASKED && cur.lo == a[0];
        const int one_row = cur.r1 - cur.r0 == 1;
        if (continues && cur.cls == DCP_SEG_FULL && b[0] == cur.hi) {
            /* FULL goes on */
        } else if (continues && b[0] == cur.hi + 1 && (cur.cls == DCP_SEG_CAUSAL || one_row)) {
            cur.cls = DCP_SEG_CAUSAL;
            cur.hi = b[0];
        } else {
            if (open) DCP_CHECK(push_run(out, &cur));
            cur = (run_t){DCP_SEG_FULL, r, r, a[0], b[0], b[0], 0};
            open = 1;
        }
        cur.r1 = r + 1;
        cur.pairs += pairs;
    }
    if (open) DCP_CHECK(push_run(out, &cur));
    return DCP_OK;
}

/* Dense runs shorter than min_rows or of a class the dense engine does not take become MASKED;
 * MASKED runs on consecutive rows join. */
static void demote_and_join(runs_t *v, int32_t min_rows, int32_t dense)
{
    int64_t w = 0;
    for (int64_t i = 0; i < v->n; i++) {
        run_t r = v->runs[i];
        if (r.cls != DCP_SEG_MASKED && (r.r1 - r.r0 < min_rows || !(dense & DCP_SEG_BIT(r.cls))))
            r.cls = DCP_SEG_MASKED;
        if (w > 0 && r.cls == DCP_SEG_MASKED && v->runs[w - 1].cls == DCP_SEG_MASKED &&
            v->runs[w - 1].r1 == r.r0) {
            run_t *p = &v->runs[w - 1];
            p->r1 = r.r1;
            p->lo = r.lo < p->lo ? r.lo : p->lo;
            p->hi = r.hi > p->hi ? r.hi : p->hi;
            p->pairs += r.pairs;
            continue;
        }
        v->runs[w++] = r;
    }
    v->n = w;
}

dcp_status_t dcp_seg_cut(const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                         int64_t num_groups, const dcp_tile_t *tiles, int32_t min_rows,
                         int32_t dense, dcp_seg_piece_t **pieces_out, int64_t *n_out)
{
    if (min_rows < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "segmenter: min_rows %d, must be >= 1", min_rows);
    runs_t runs = {0};
    dcp_seg_piece_t *pieces = NULL;
    int64_t n = 0, cap = 0;
    dcp_status_t st = DCP_OK;
    for (int64_t gi = 0; gi < num_groups && st == DCP_OK; gi++) {
        const dcp_tile_group_t *g = &groups[gi];
        for (int32_t ti = g->first_tile; ti < g->first_tile + g->num_tiles; ti++) {
            DCP_CHECK_GOTO(tile_runs(&seqs[g->seq], g, &tiles[ti], &runs), st, out);
            demote_and_join(&runs, min_rows, dense);
            DCP_CHECK_GOTO(dcp_reserve(&pieces, &cap, n + runs.n, sizeof *pieces, "segments"), st,
                           out);
            for (int64_t i = 0; i < runs.n; i++) {
                const run_t *r = &runs.runs[i];
                pieces[n++] = (dcp_seg_piece_t){(int32_t)gi, ti,  r->r0, r->r1, r->lo,
                                                r->hi,       r->cls, r->pairs};
            }
        }
    }
out:
    free(runs.runs);
    if (st != DCP_OK) {
        free(pieces);
        return st;
    }
    if (!pieces) DCP_CHECK(dcp_calloc(&pieces, 1, sizeof *pieces, "segments"));
    *pieces_out = pieces;
    *n_out = n;
    return DCP_OK;
}

/* ---- the program of a launch --------------------------------------------------------------- */

/* An entry of a dense call: rows [r0, r1) of a group, its FULL pieces of exactly those rows
 * and at most one CAUSAL piece (keys last). */
typedef struct {
    int32_t group, r0, r1, cls;
    int32_t kv_rows;
    int64_t cq, ckv; /* rows before it in its call */
} entry_t;

/* A masked sub-group's partial staged in SEG32, merged into its group like an entry. */
typedef struct {
    int64_t group;
    int32_t r0, r1;
    dcp_view_t o, lse;
} part_t;

static dcp_view_t view_at(dcp_view_t v, int64_t rows)
{
    v.off += rows * v.stride;
    return v;
}

static dcp_view_t seg_view(int buf, int64_t off, int64_t stride)
{
    return (dcp_view_t){off, (int32_t)stride, buf};
}

static dcp_status_t add_copy(dcp_seg_prog_t *p, dcp_view_t src, dcp_view_t dst, int32_t rows,
                             int64_t row_elems, int32_t *most_rows)
{
    DCP_CHECK(dcp_reserve(&p->copies, &p->cap_copies, p->n_copies + 1, sizeof *p->copies,
                          "segment copies"));
    p->copies[p->n_copies++] = (dcp_copy_item_t){src, dst, rows, (int32_t)row_elems};
    if (rows > *most_rows) *most_rows = rows;
    return DCP_OK;
}

/* A sub-group of g: rows [r0, r1), its output o/lse where given (else g's rows), its tiles
 * [first_tile, first_tile + num_tiles) of own_tiles. */
static dcp_status_t add_own_group(dcp_seg_prog_t *p, dcp_seg_launch_t *l, const dcp_tile_group_t *g,
                                  int32_t r0, int32_t r1, const dcp_view_t *o,
                                  const dcp_view_t *lse, int32_t accumulate, int64_t first_tile,
                                  int64_t num_tiles)
{
    DCP_CHECK(dcp_reserve(&p->own_groups, &p->cap_own_groups, p->n_own_groups + 1,
                          sizeof *p->own_groups, "segment groups"));
    dcp_tile_group_t s = *g;
    s.q = view_at(g->q, r0);
    s.o = o ? *o : view_at(g->o, r0);
    s.lse = lse ? *lse : view_at(g->lse, r0);
    s.dout = view_at(g->dout, r0);
    s.delta = view_at(g->delta, r0);
    s.dq = view_at(g->dq, r0);
    s.q_pos = g->q_pos + r0;
    s.q_len = r1 - r0;
    s.first_tile = (int32_t)first_tile;
    s.num_tiles = (int32_t)num_tiles;
    s.accumulate = accumulate;
    p->own_groups[p->n_own_groups++] = s;
    l->own_count++;
    if (s.q_len > l->own_rows) l->own_rows = s.q_len;
    return DCP_OK;
}

/* Keys [k0, k1) of tile t as a tile of their own (the mask decides inside). */
static dcp_status_t add_own_tile(dcp_seg_prog_t *p, const dcp_tile_t *t, int32_t k0, int32_t k1)
{
    DCP_CHECK(dcp_reserve(&p->own_tiles, &p->cap_own_tiles, p->n_own_tiles + 1,
                          sizeof *p->own_tiles, "segment tiles"));
    dcp_tile_t s = *t;
    s.k = view_at(t->k, k0);
    s.v = view_at(t->v, k0);
    s.dk = view_at(t->dk, k0);
    s.dv = view_at(t->dv, k0);
    s.kv_pos = t->kv_pos + k0;
    s.kv_len = k1 - k0;
    s.full = 0;
    p->own_tiles[p->n_own_tiles++] = s;
    return DCP_OK;
}

/* Assigns every dense piece of one group (pieces [i, j)) to an entry: the first entry of the
 * same rows, a CAUSAL piece only to one without a CAUSAL piece yet. piece_entry[k] gets the
 * entry index (-1 for MASKED pieces). */
static dcp_status_t assign_entries(const dcp_seg_piece_t *pc, int64_t i, int64_t j,
                                   int64_t *piece_entry, entry_t **ents, int64_t *nents,
                                   int64_t *cap)
{
    const int64_t first = *nents;
    for (int64_t k = i; k < j; k++) {
        piece_entry[k] = -1;
        if (pc[k].cls == DCP_SEG_MASKED) continue;
        int64_t e = first;
        while (e < *nents && !((*ents)[e].r0 == pc[k].r0 && (*ents)[e].r1 == pc[k].r1 &&
                               !(pc[k].cls == DCP_SEG_CAUSAL && (*ents)[e].cls == DCP_SEG_CAUSAL)))
            e++;
        if (e == *nents) {
            DCP_CHECK(dcp_reserve(ents, cap, e + 1, sizeof **ents, "segment entries"));
            (*ents)[e] = (entry_t){pc[k].group, pc[k].r0, pc[k].r1, DCP_SEG_FULL, 0, 0, 0};
            (*nents)++;
        }
        if (pc[k].cls == DCP_SEG_CAUSAL) (*ents)[e].cls = DCP_SEG_CAUSAL;
        (*ents)[e].kv_rows += pc[k].k1 - pc[k].k0;
        piece_entry[k] = e;
    }
    return DCP_OK;
}

/* The pieces of entry e in key order: its FULL pieces (piece order), then its CAUSAL one. */
static int64_t entry_pieces(const dcp_seg_piece_t *pc, const int64_t *piece_entry, int64_t i,
                            int64_t j, int64_t e, int64_t *list)
{
    int64_t n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int64_t k = i; k < j; k++)
            if (piece_entry[k] == e && (pc[k].cls == DCP_SEG_CAUSAL) == pass) list[n++] = k;
    return n;
}

/* The lengths and ragged offsets of call c (dcp_dense_call_t.ints). */
static dcp_status_t call_ints(dcp_seg_prog_t *p, dcp_dense_call_t *call, const entry_t *ents,
                              int64_t nents, int64_t qw, int64_t kw, int64_t hq)
{
    if (call->rows_q * qw > INT32_MAX || call->rows_kv * kw > INT32_MAX)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "segmenter: a dense call of %lld query and %lld key rows exceeds "
                             "32-bit ragged offsets",
                             (long long)call->rows_q, (long long)call->rows_kv);
    const int64_t cap = call->cap, nint = 2 * cap + 3 * (cap + 1);
    call->ints = p->n_ints;
    DCP_CHECK(
        dcp_reserve(&p->ints, &p->cap_ints, p->n_ints + nint, sizeof *p->ints, "segment lengths"));
    int32_t *seq_q = p->ints + p->n_ints, *seq_kv = seq_q + cap, *off_q = seq_kv + cap,
            *off_kv = off_q + cap + 1, *off_st = off_kv + cap + 1;
    p->n_ints += nint;
    int64_t k = 0;
    for (int64_t e = 0; e < nents; e++) {
        if (ents[e].cls != call->cls) continue;
        seq_q[k] = ents[e].r1 - ents[e].r0;
        seq_kv[k] = ents[e].kv_rows;
        off_q[k] = (int32_t)(ents[e].cq * qw);
        off_kv[k] = (int32_t)(ents[e].ckv * kw);
        off_st[k] = (int32_t)(ents[e].cq * hq);
        k++;
    }
    for (; k <= cap; k++) { /* the empty entries past the batch, and the end offsets */
        if (k < cap) seq_q[k] = seq_kv[k] = 0;
        off_q[k] = (int32_t)(call->rows_q * qw);
        off_kv[k] = (int32_t)(call->rows_kv * kw);
        off_st[k] = (int32_t)(call->rows_q * hq);
    }
    return DCP_OK;
}

/* Forward: the merges of group gi's partials (entries and staged masked sub-groups) into its
 * output, one item per run of rows with the same partials. */
static dcp_status_t group_merges(dcp_seg_prog_t *p, dcp_seg_launch_t *l, int64_t gi,
                                 const dcp_tile_group_t *g, const entry_t *ents, int64_t e0,
                                 int64_t e1, const part_t *parts, int64_t nparts, int64_t qw,
                                 int64_t hq, int32_t *cut)
{
    int nc = 0;
    cut[nc++] = 0;
    cut[nc++] = g->q_len;
    for (int64_t e = e0; e < e1; e++) {
        cut[nc++] = ents[e].r0;
        cut[nc++] = ents[e].r1;
    }
    for (int64_t k = 0; k < nparts; k++)
        if (parts[k].group == gi) {
            cut[nc++] = parts[k].r0;
            cut[nc++] = parts[k].r1;
        }
    for (int a = 1; a < nc; a++) /* insertion sort: a group has few partials */
        for (int c = a; c > 0 && cut[c - 1] > cut[c]; c--) {
            const int32_t t = cut[c];
            cut[c] = cut[c - 1];
            cut[c - 1] = t;
        }
    for (int a = 0; a + 1 < nc; a++) {
        const int32_t x0 = cut[a], x1 = cut[a + 1];
        if (x0 == x1) continue;
        const int64_t first_src = p->n_merge_srcs;
        const int64_t nsrc_most = (e1 - e0) + nparts;
        DCP_CHECK(dcp_reserve(&p->merge_srcs, &p->cap_merge_srcs, p->n_merge_srcs + nsrc_most,
                              sizeof *p->merge_srcs, "segment merges"));
        for (int64_t e = e0; e < e1; e++) {
            const entry_t *x = &ents[e];
            if (x->r0 > x0 || x->r1 < x1) continue;
            const dcp_dense_call_t *call = &l->call[x->cls];
            const int64_t row = x->cq + (x0 - x->r0);
            p->merge_srcs[p->n_merge_srcs++] =
                (dcp_merge_src_t){seg_view(DCP_BUF_SEG, call->o + row * qw, qw),
                                  seg_view(DCP_BUF_SEG32, call->stats + row * hq, hq)};
        }
        for (int64_t k = 0; k < nparts; k++)
            if (parts[k].group == gi && parts[k].r0 <= x0 && parts[k].r1 >= x1)
                p->merge_srcs[p->n_merge_srcs++] = (dcp_merge_src_t){
                    view_at(parts[k].o, x0 - parts[k].r0), view_at(parts[k].lse, x0 - parts[k].r0)};
        const int64_t nsrc = p->n_merge_srcs - first_src;
        if (nsrc == 0) continue;
        DCP_CHECK(dcp_reserve(&p->merges, &p->cap_merges, p->n_merges + 1, sizeof *p->merges,
                              "segment merges"));
        p->merges[p->n_merges++] = (dcp_merge_item_t){view_at(g->o, x0), view_at(g->lse, x0),
                                                      x1 - x0, (int32_t)first_src, (int32_t)nsrc};
        l->merge_count++;
        if (x1 - x0 > l->merge_rows) l->merge_rows = x1 - x0;
    }
    return DCP_OK;
}

/* Lays out the two calls' tensors in SEG and SEG32 (call 0's, then call 1's) and their ints. */
static dcp_status_t layout_calls(dcp_seg_prog_t *p, dcp_seg_launch_t *l, entry_t *ents,
                                 int64_t nents, int bwd, int64_t qw, int64_t kw, int64_t hq,
                                 int64_t *seg, int64_t *seg32)
{
    for (int c = 0; c < 2; c++) {
        dcp_dense_call_t *call = &l->call[c];
        call->cls = c;
        for (int64_t e = 0; e < nents; e++) {
            if (ents[e].cls != c) continue;
            const int32_t rows = ents[e].r1 - ents[e].r0;
            ents[e].cq = call->rows_q;
            ents[e].ckv = call->rows_kv;
            call->rows_q += rows;
            call->rows_kv += ents[e].kv_rows;
            call->max_q = rows > call->max_q ? rows : call->max_q;
            call->max_kv = ents[e].kv_rows > call->max_kv ? ents[e].kv_rows : call->max_kv;
            call->batch++;
        }
        if (call->batch == 0) continue;
        call->cap = dcp_seg_cap(call->batch);
        const int64_t nq = call->rows_q * qw, nkv = call->rows_kv * kw;
        call->q = *seg;
        call->k = call->q + nq;
        call->v = call->k + nkv;
        call->o = call->v + nkv;
        *seg = call->o + nq;
        if (bwd) {
            call->dout = *seg;
            call->dq = call->dout + nq;
            call->dk = call->dq + nq;
            call->dv = call->dk + nkv;
            *seg = call->dv + nkv;
        }
        call->stats = *seg32;
        *seg32 += call->rows_q * hq;
        DCP_CHECK(call_ints(p, call, ents, nents, qw, kw, hq));
    }
    return DCP_OK;
}

dcp_status_t dcp_seg_prog_add(dcp_seg_prog_t *prog, const dcp_seg_shape_t *shape,
                              const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles, int64_t *launch_out)
{
    const int64_t hq = shape->q_heads, hkv = shape->kv_heads, d = shape->head_dim;
    const int64_t qw = hq * d, kw = hkv * d;
    const int bwd = shape->backward;
    dcp_seg_piece_t *pc = NULL;
    entry_t *ents = NULL;
    part_t *parts = NULL;
    int64_t np = 0, nents = 0, cap_ents = 0, nparts = 0, cap_parts = 0;
    int64_t *piece_entry = NULL, *ent_first = NULL, *gp_first = NULL, *list = NULL;
    int32_t *cut = NULL;
    int64_t seg = 0, seg32 = 0;
    dcp_status_t st;
    dcp_seg_launch_t *l = &prog->launches[prog->num_launches];
    memset(l, 0, sizeof *l);
    l->backward = bwd;
    l->own_first = prog->n_own_groups;
    l->gather_first = prog->n_copies;
    l->delta_first = prog->n_deltas;
    l->merge_first = prog->n_merges;
    const int64_t own_tile0 = prog->n_own_tiles;
    DCP_CHECK_GOTO(
        dcp_seg_cut(seqs, groups, num_groups, tiles, shape->min_rows, shape->dense, &pc, &np), st,
        out);
    for (int64_t i = 0; i < np; i++) prog->pairs[pc[i].cls] += pc[i].pairs;
    DCP_CHECK_GOTO(dcp_calloc(&piece_entry, np + 1, sizeof *piece_entry, "segments"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&list, np + 1, sizeof *list, "segments"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&cut, 2 * np + 4, sizeof *cut, "segments"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&ent_first, num_groups + 1, sizeof *ent_first, "segments"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&gp_first, num_groups + 1, sizeof *gp_first, "segments"), st, out);
    /* pieces come group by group: gp_first[g] is group g's first */
    for (int64_t i = 0, gi = 0; gi <= num_groups; gi++) {
        while (i < np && pc[i].group < gi) i++;
        gp_first[gi] = i;
    }
    for (int64_t gi = 0; gi < num_groups; gi++) {
        ent_first[gi] = nents;
        DCP_CHECK_GOTO(assign_entries(pc, gp_first[gi], gp_first[gi + 1], piece_entry, &ents,
                                      &nents, &cap_ents),
                       st, out);
    }
    ent_first[num_groups] = nents;
    DCP_CHECK_GOTO(layout_calls(prog, l, ents, nents, bwd, qw, kw, hq, &seg, &seg32), st, out);

    /* gathers into the packed tensors, and the backward's O' rows */
    for (int64_t gi = 0; gi < num_groups; gi++)
        for (int64_t e = ent_first[gi]; e < ent_first[gi + 1]; e++) {
            const entry_t *x = &ents[e];
            const dcp_tile_group_t *g = &groups[gi];
            const dcp_dense_call_t *call = &l->call[x->cls];
            const int32_t rows = x->r1 - x->r0;
            DCP_CHECK_GOTO(add_copy(prog, view_at(g->q, x->r0),
                                    seg_view(DCP_BUF_SEG, call->q + x->cq * qw, qw), rows, qw,
                                    &l->gather_rows),
                           st, out);
            if (bwd) {
                DCP_CHECK_GOTO(add_copy(prog, view_at(g->dout, x->r0),
                                        seg_view(DCP_BUF_SEG, call->dout + x->cq * qw, qw), rows,
                                        qw, &l->gather_rows),
                               st, out);
                DCP_CHECK_GOTO(add_copy(prog, view_at(g->lse, x->r0),
                                        seg_view(DCP_BUF_SEG32, call->stats + x->cq * hq, hq),
                                        rows, hq, &l->gather_rows),
                               st, out);
                DCP_CHECK_GOTO(dcp_reserve(&prog->deltas, &prog->cap_deltas, prog->n_deltas + 1,
                                           sizeof *prog->deltas, "segment deltas"),
                               st, out);
                prog->deltas[prog->n_deltas++] = (dcp_delta_out_item_t){
                    seg_view(DCP_BUF_SEG, call->dout + x->cq * qw, qw), view_at(g->delta, x->r0),
                    seg_view(DCP_BUF_SEG, call->o + x->cq * qw, qw), rows};
                l->delta_count++;
                if (rows > l->delta_rows) l->delta_rows = rows;
            }
            const int64_t n = entry_pieces(pc, piece_entry, gp_first[gi], gp_first[gi + 1], e, list);
            int64_t kv = x->ckv;
            for (int64_t j = 0; j < n; j++) {
                const dcp_seg_piece_t *pe = &pc[list[j]];
                const dcp_tile_t *t = &tiles[pe->tile];
                const int32_t kr = pe->k1 - pe->k0;
                DCP_CHECK_GOTO(add_copy(prog, view_at(t->k, pe->k0),
                                        seg_view(DCP_BUF_SEG, call->k + kv * kw, kw), kr, kw,
                                        &l->gather_rows),
                               st, out);
                DCP_CHECK_GOTO(add_copy(prog, view_at(t->v, pe->k0),
                                        seg_view(DCP_BUF_SEG, call->v + kv * kw, kw), kr, kw,
                                        &l->gather_rows),
                               st, out);
                kv += kr;
            }
        }
    l->gather_count = prog->n_copies - l->gather_first;

    /* dcp's own kernel over the MASKED pieces: one sub-group per distinct row range of a
     * group, of its pieces' trimmed tiles. Forward: a group whose one sub-group covers all its
     * rows writes its output directly; other sub-groups stage their partial in SEG32, and a
     * group that starts from nothing (accumulate 0) is reset first (a sub-group of no tiles
     * writes O = 0, LSE = -inf). Backward: every sub-group adds into the group's dQ and the
     * tiles' dK, dV directly. */
    for (int64_t gi = 0; gi < num_groups; gi++) {
        const dcp_tile_group_t *g = &groups[gi];
        const int64_t i = gp_first[gi], j = gp_first[gi + 1];
        int any = 0, all_rows = 1;
        for (int64_t k = i; k < j; k++)
            if (pc[k].cls == DCP_SEG_MASKED) {
                any = 1;
                all_rows &= pc[k].r0 == 0 && pc[k].r1 == g->q_len;
            }
        const int direct = !bwd && any && all_rows;
        if (!bwd && g->accumulate == 0 && !direct)
            DCP_CHECK_GOTO(add_own_group(prog, l, g, 0, g->q_len, NULL, NULL, 0, prog->n_own_tiles,
                                         0),
                           st, out);
        for (int64_t k = i; k < j; k++) {
            if (pc[k].cls != DCP_SEG_MASKED) continue;
            int seen = 0;
            for (int64_t m = i; m < k && !seen; m++)
                seen = pc[m].cls == DCP_SEG_MASKED && pc[m].r0 == pc[k].r0 && pc[m].r1 == pc[k].r1;
            if (seen) continue;
            const int64_t first_tile = prog->n_own_tiles;
            for (int64_t m = k; m < j; m++)
                if (pc[m].cls == DCP_SEG_MASKED && pc[m].r0 == pc[k].r0 && pc[m].r1 == pc[k].r1)
                    DCP_CHECK_GOTO(add_own_tile(prog, &tiles[pc[m].tile], pc[m].k0, pc[m].k1), st,
                                   out);
            const int64_t ntiles = prog->n_own_tiles - first_tile;
            if (bwd || direct) {
                DCP_CHECK_GOTO(add_own_group(prog, l, g, pc[k].r0, pc[k].r1, NULL, NULL,
                                             bwd ? 0 : g->accumulate, first_tile, ntiles),
                               st, out);
                continue;
            }
            const int32_t rows = pc[k].r1 - pc[k].r0;
            const dcp_view_t o = seg_view(DCP_BUF_SEG32, seg32, qw);
            const dcp_view_t lse = seg_view(DCP_BUF_SEG32, seg32 + rows * qw, hq);
            seg32 += rows * (qw + hq);
            DCP_CHECK_GOTO(
                add_own_group(prog, l, g, pc[k].r0, pc[k].r1, &o, &lse, 0, first_tile, ntiles), st,
                out);
            DCP_CHECK_GOTO(dcp_reserve(&parts, &cap_parts, nparts + 1, sizeof *parts,
                                       "segment partials"),
                           st, out);
            parts[nparts++] = (part_t){gi, pc[k].r0, pc[k].r1, o, lse};
        }
    }

    if (!bwd) { /* every partial merged into its group */
        for (int64_t gi = 0; gi < num_groups; gi++)
            DCP_CHECK_GOTO(group_merges(prog, l, gi, &groups[gi], ents, ent_first[gi],
                                        ent_first[gi + 1], parts, nparts, qw, hq, cut),
                           st, out);
    } else { /* the dense gradients added into the groups' dQ and the tiles' dK, dV rows */
        l->acc_first = prog->n_copies;
        for (int64_t gi = 0; gi < num_groups; gi++)
            for (int64_t e = ent_first[gi]; e < ent_first[gi + 1]; e++) {
                const entry_t *x = &ents[e];
                const dcp_dense_call_t *call = &l->call[x->cls];
                DCP_CHECK_GOTO(add_copy(prog, seg_view(DCP_BUF_SEG, call->dq + x->cq * qw, qw),
                                        view_at(groups[gi].dq, x->r0), x->r1 - x->r0, qw,
                                        &l->merge_rows),
                               st, out);
                const int64_t n =
                    entry_pieces(pc, piece_entry, gp_first[gi], gp_first[gi + 1], e, list);
                int64_t kv = x->ckv;
                for (int64_t j = 0; j < n; j++) {
                    const dcp_seg_piece_t *pe = &pc[list[j]];
                    const dcp_tile_t *t = &tiles[pe->tile];
                    const int32_t kr = pe->k1 - pe->k0;
                    DCP_CHECK_GOTO(add_copy(prog, seg_view(DCP_BUF_SEG, call->dk + kv * kw, kw),
                                            view_at(t->dk, pe->k0), kr, kw, &l->merge_rows),
                                   st, out);
                    DCP_CHECK_GOTO(add_copy(prog, seg_view(DCP_BUF_SEG, call->dv + kv * kw, kw),
                                            view_at(t->dv, pe->k0), kr, kw, &l->merge_rows),
                                   st, out);
                    kv += kr;
                }
            }
        l->acc_count = prog->n_copies - l->acc_first;
    }
    if (bwd && shape->deterministic)
        DCP_CHECK_GOTO(dcp_seg_waves(prog, l, shape, own_tile0), st, out);
    l->seg_elems = seg;
    l->seg32_elems = seg32;
    if (seg > prog->seg_elems) prog->seg_elems = seg;
    if (seg32 > prog->seg32_elems) prog->seg32_elems = seg32;
    *launch_out = prog->num_launches++;
    st = DCP_OK;
out:
    free(pc);
    free(ents);
    free(parts);
    free(piece_entry);
    free(list);
    free(cut);
    free(ent_first);
    free(gp_first);
    return st;
}

void dcp_seg_prog_free(dcp_seg_prog_t *prog)
{
    if (!prog) return;
    free(prog->launches);
    free(prog->own_groups);
    free(prog->own_tiles);
    free(prog->copies);
    free(prog->merges);
    free(prog->merge_srcs);
    free(prog->deltas);
    free(prog->ints);
    free(prog->wave_ends);
    memset(prog, 0, sizeof *prog);
}

dcp_seg_arrays_t dcp_seg_host_arrays(const dcp_seg_prog_t *prog)
{
    return (dcp_seg_arrays_t){prog->own_groups, prog->own_tiles,  prog->copies, prog->merges,
                              prog->merge_srcs, prog->deltas, prog->ints};
}

static dcp_status_t cpu_run(void *state, const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                            int64_t launch, int cls, const int32_t *ints)
{
    (void)state, (void)ints;
    const dcp_seg_launch_t *l = &prog->launches[launch];
    return l->backward ? dcp_dense_cpu_bwd(env, &l->call[cls], prog->ints)
                       : dcp_dense_cpu_fwd(env, &l->call[cls], prog->ints);
}

const dcp_dense_engine_t dcp_dense_cpu = {"twin", NULL, cpu_run};

dcp_status_t dcp_seg_run(const dcp_kernels_t *k, const dcp_dense_engine_t *dense,
                         const dcp_kernel_env_t *env_in, const dcp_seg_prog_t *prog,
                         const dcp_seg_arrays_t *a, int64_t launch)
{
    if (launch < 0 || launch >= prog->num_launches)
        return dcp_set_error(DCP_ERR_INTERNAL, "segment program: launch %lld of %lld",
                             (long long)launch, (long long)prog->num_launches);
    const dcp_seg_launch_t *l = &prog->launches[launch];
    dcp_kernel_env_t env = *env_in;
    if (l->gather_count > 0) {
        env.max_rows = l->gather_rows;
        DCP_CHECK(k->copy(&env, a->copies + l->gather_first, l->gather_count));
    }
    if (l->delta_count > 0) {
        env.max_rows = l->delta_rows;
        DCP_CHECK(k->delta_out(&env, a->deltas + l->delta_first, l->delta_count));
    }
    if (l->own_count > 0) {
        env.max_rows = l->own_rows;
        const dcp_tile_group_t *g = a->own_groups + l->own_first;
        if (!l->backward) DCP_CHECK(k->attn_fwd(&env, g, l->own_count, a->own_tiles));
        for (int64_t w = 0, b = 0; l->backward && b < l->own_count; w++) { /* its waves */
            const int64_t e = dcp_seg_wave_end(prog, l, 0, w);
            DCP_CHECK(k->attn_bwd(&env, g + b, e - b, a->own_tiles));
            b = e;
        }
    }
    for (int c = 0; c < 2; c++) {
        if (l->call[c].batch == 0) continue;
        DCP_CHECK(dense->run(dense->state, &env, prog, launch, c, a->ints));
    }
    if (l->merge_count > 0) {
        env.max_rows = l->merge_rows;
        DCP_CHECK(k->merge(&env, a->merges + l->merge_first, l->merge_count, a->merge_srcs));
    }
    env.max_rows = l->merge_rows;
    for (int64_t w = 0, b = 0; b < l->acc_count; w++) { /* the adds' waves */
        const int64_t e = dcp_seg_wave_end(prog, l, 1, w);
        DCP_CHECK(k->accumulate(&env, a->copies + l->acc_first + b, e - b));
        b = e;
    }
    return DCP_OK;
}
