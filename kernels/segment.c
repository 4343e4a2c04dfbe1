/*
 * The segmenter's programs (kernels/segment.h): the segments of a launch (segment_cut.c) as
 * the dense calls, gathers, own-kernel sub-groups, merges and adds that run them. Everything
 * here is host-side bookkeeping over descriptors; no data moves.
 */
#include "kernels/segment.h"

#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

int32_t dcp_seg_cap(int32_t batch)
{
    int32_t cap = 8;
    while (cap < batch && cap < (1 << 30)) cap *= 2;
    return cap;
}

/* ---- the program of a launch --------------------------------------------------------------- */

/* An entry of a dense call: one dense segment, its rows and keys in its call's tensors. */
typedef struct {
    const dcp_seg_t *seg;
    int32_t call; /* the launch's call index */
    int64_t cq, ckv; /* rows before it in its call */
} entry_t;

/* A masked sub-group's partial staged in SEG32, merged into its group like an entry. */
typedef struct {
    int64_t group;
    int32_t r0, r1;
    dcp_view_t o, lse;
} part_t;

/* Elements per row of each packed tensor: Q and dQ, O and dO, K and dK, V and dV (heads x the
 * head dim of each), and the statistics (query heads). */
typedef struct {
    int64_t q, o, k, v, st;
} widths_t;

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

/* The pieces of line keys [k0, k1): tile line->tile[i], its keys [a, b), for i from
 * piece_first(line, k0) while piece_next says so. */
static int32_t piece_first(const dcp_seg_line_t *line, int32_t k0)
{
    int32_t i = 0;
    while (i < line->n && line->u0[i + 1] <= k0) i++;
    return i;
}

static int piece_at(const dcp_seg_line_t *line, int32_t i, int32_t k0, int32_t k1, int32_t *a,
                    int32_t *b)
{
    if (i >= line->n || line->u0[i] >= k1) return 0;
    *a = (k0 > line->u0[i] ? k0 : line->u0[i]) - line->u0[i];
    *b = (k1 < line->u0[i + 1] ? k1 : line->u0[i + 1]) - line->u0[i];
    return 1;
}

/* The offsets of entry k of a call whose rows start at rows q and kv of its tensors. */
static void set_offsets(int32_t *in, int64_t cap, int64_t k, int64_t rq, int64_t rkv,
                        const widths_t *w)
{
    in[dcp_seg_int_array(cap, DCP_SEG_OFF_Q) + k] = (int32_t)(rq * w->q);
    in[dcp_seg_int_array(cap, DCP_SEG_OFF_O) + k] = (int32_t)(rq * w->o);
    in[dcp_seg_int_array(cap, DCP_SEG_OFF_K) + k] = (int32_t)(rkv * w->k);
    in[dcp_seg_int_array(cap, DCP_SEG_OFF_V) + k] = (int32_t)(rkv * w->v);
    in[dcp_seg_int_array(cap, DCP_SEG_OFF_ST) + k] = (int32_t)(rq * w->st);
}

/* The lengths and ragged offsets of a call (dcp_dense_call_t.ints); its entries are
 * ents[e] with ents[e].call == c. */
static dcp_status_t call_ints(dcp_seg_prog_t *p, dcp_dense_call_t *call, int32_t c,
                              const entry_t *ents, int64_t nents, const widths_t *w)
{
    const int64_t wq = w->q > w->o ? w->q : w->o, wk = w->k > w->v ? w->k : w->v;
    if (call->rows_q * wq > INT32_MAX || call->rows_kv * wk > INT32_MAX)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "segmenter: a dense call of %lld query and %lld key rows exceeds "
                             "32-bit ragged offsets",
                             (long long)call->rows_q, (long long)call->rows_kv);
    const int64_t cap = call->cap, nint = dcp_seg_int_array(cap, DCP_SEG_INT_ARRAYS);
    call->ints = p->n_ints;
    DCP_CHECK(
        dcp_reserve(&p->ints, &p->cap_ints, p->n_ints + nint, sizeof *p->ints, "segment lengths"));
    int32_t *in = p->ints + p->n_ints;
    p->n_ints += nint;
    int64_t k = 0;
    for (int64_t e = 0; e < nents; e++) {
        if (ents[e].call != c) continue;
        in[dcp_seg_int_array(cap, DCP_SEG_SEQ_Q) + k] = ents[e].seg->r1 - ents[e].seg->r0;
        in[dcp_seg_int_array(cap, DCP_SEG_SEQ_KV) + k] = ents[e].seg->k1 - ents[e].seg->k0;
        set_offsets(in, cap, k, ents[e].cq, ents[e].ckv, w);
        k++;
    }
    for (; k <= cap; k++) { /* the empty entries past the batch, and the end offsets */
        if (k < cap)
            in[dcp_seg_int_array(cap, DCP_SEG_SEQ_Q) + k] =
                in[dcp_seg_int_array(cap, DCP_SEG_SEQ_KV) + k] = 0;
        set_offsets(in, cap, k, call->rows_q, call->rows_kv, w);
    }
    return DCP_OK;
}

/* Forward: the merges of group gi's partials (entries and staged masked sub-groups) into its
 * output, one item per run of rows with the same partials. */
static dcp_status_t group_merges(dcp_seg_prog_t *p, dcp_seg_launch_t *l, int64_t gi,
                                 const dcp_tile_group_t *g, const entry_t *ents, int64_t e0,
                                 int64_t e1, const part_t *parts, int64_t nparts, const widths_t *w,
                                 int32_t *cut)
{
    int nc = 0;
    cut[nc++] = 0;
    cut[nc++] = g->q_len;
    for (int64_t e = e0; e < e1; e++) {
        cut[nc++] = ents[e].seg->r0;
        cut[nc++] = ents[e].seg->r1;
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
    const dcp_dense_call_t *calls = p->calls + l->call_first;
    for (int a = 0; a + 1 < nc; a++) {
        const int32_t x0 = cut[a], x1 = cut[a + 1];
        if (x0 == x1) continue;
        const int64_t first_src = p->n_merge_srcs;
        const int64_t nsrc_most = (e1 - e0) + nparts;
        DCP_CHECK(dcp_reserve(&p->merge_srcs, &p->cap_merge_srcs, p->n_merge_srcs + nsrc_most,
                              sizeof *p->merge_srcs, "segment merges"));
        for (int64_t e = e0; e < e1; e++) {
            const entry_t *x = &ents[e];
            if (x->seg->r0 > x0 || x->seg->r1 < x1) continue;
            const dcp_dense_call_t *call = &calls[x->call];
            const int64_t row = x->cq + (x0 - x->seg->r0);
            p->merge_srcs[p->n_merge_srcs++] =
                (dcp_merge_src_t){seg_view(DCP_BUF_SEG, call->o + row * w->o, w->o),
                                  seg_view(DCP_BUF_SEG32, call->stats + row * w->st, w->st)};
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

/* The calls of a launch: one per (class, window) of its dense segments, in that order, each
 * entry given its call. */
static dcp_status_t make_calls(dcp_seg_prog_t *p, dcp_seg_launch_t *l, entry_t *ents, int64_t nents)
{
    l->call_first = p->n_calls;
    for (int64_t e = 0; e < nents; e++) {
        const dcp_seg_t *s = ents[e].seg;
        int64_t c = 0; /* the calls stay sorted by (class, window): insert in place */
        dcp_dense_call_t *calls = p->calls + l->call_first;
        while (c < l->call_count && (calls[c].cls < s->cls ||
                                     (calls[c].cls == s->cls && calls[c].window < s->window)))
            c++;
        if (c == l->call_count || calls[c].cls != s->cls || calls[c].window != s->window) {
            DCP_CHECK(dcp_reserve(&p->calls, &p->cap_calls, p->n_calls + 1, sizeof *p->calls,
                                  "dense calls"));
            calls = p->calls + l->call_first;
            memmove(calls + c + 1, calls + c, (size_t)(l->call_count - c) * sizeof *calls);
            memset(&calls[c], 0, sizeof calls[c]);
            calls[c].cls = s->cls;
            calls[c].window = s->window;
            calls[c].launch = (int32_t)(l - p->launches);
            l->call_count++;
            p->n_calls++;
            for (int64_t f = 0; f < e; f++) /* entries of the calls after c move up one */
                if (ents[f].call >= c) ents[f].call++;
        }
        ents[e].call = (int32_t)c;
    }
    return DCP_OK;
}

/* Lays out the calls' tensors in SEG and SEG32, one call after another, and their ints. */
static dcp_status_t layout_calls(dcp_seg_prog_t *p, dcp_seg_launch_t *l, entry_t *ents,
                                 int64_t nents, int bwd, const widths_t *w, int64_t *seg,
                                 int64_t *seg32)
{
    for (int32_t c = 0; c < l->call_count; c++) {
        dcp_dense_call_t *call = &p->calls[l->call_first + c];
        for (int64_t e = 0; e < nents; e++) {
            if (ents[e].call != c) continue;
            const dcp_seg_t *s = ents[e].seg;
            const int32_t rows = s->r1 - s->r0, keys = s->k1 - s->k0;
            ents[e].cq = call->rows_q;
            ents[e].ckv = call->rows_kv;
            call->rows_q += rows;
            call->rows_kv += keys;
            call->pairs += s->pairs;
            call->max_q = rows > call->max_q ? rows : call->max_q;
            call->max_kv = keys > call->max_kv ? keys : call->max_kv;
            call->batch++;
        }
        call->cap = dcp_seg_cap(call->batch);
        const int64_t rq = call->rows_q, rkv = call->rows_kv;
        call->q = *seg;
        call->k = call->q + rq * w->q;
        call->v = call->k + rkv * w->k;
        call->o = call->v + rkv * w->v;
        *seg = call->o + rq * w->o;
        if (bwd) {
            call->dout = *seg;
            call->dq = call->dout + rq * w->o;
            call->dk = call->dq + rq * w->q;
            call->dv = call->dk + rkv * w->k;
            *seg = call->dv + rkv * w->v;
        }
        call->stats = *seg32;
        *seg32 += rq * w->st;
        DCP_CHECK(call_ints(p, call, c, ents, nents, w));
    }
    return DCP_OK;
}

/* The gathers of entry x into its call's tensors (and, backward, its O' rows). */
static dcp_status_t entry_gathers(dcp_seg_prog_t *p, dcp_seg_launch_t *l, const entry_t *x,
                                  const dcp_tile_group_t *g, const dcp_seg_line_t *line,
                                  const dcp_tile_t *tiles, int bwd, const widths_t *w)
{
    const dcp_dense_call_t *call = &p->calls[l->call_first + x->call];
    const dcp_seg_t *s = x->seg;
    const int32_t rows = s->r1 - s->r0;
    DCP_CHECK(add_copy(p, view_at(g->q, s->r0),
                       seg_view(DCP_BUF_SEG, call->q + x->cq * w->q, w->q), rows, w->q,
                       &l->gather_rows));
    if (bwd) {
        DCP_CHECK(add_copy(p, view_at(g->dout, s->r0),
                           seg_view(DCP_BUF_SEG, call->dout + x->cq * w->o, w->o), rows, w->o,
                           &l->gather_rows));
        DCP_CHECK(add_copy(p, view_at(g->lse, s->r0),
                           seg_view(DCP_BUF_SEG32, call->stats + x->cq * w->st, w->st), rows,
                           w->st, &l->gather_rows));
        DCP_CHECK(dcp_reserve(&p->deltas, &p->cap_deltas, p->n_deltas + 1, sizeof *p->deltas,
                              "segment deltas"));
        p->deltas[p->n_deltas++] = (dcp_delta_out_item_t){
            seg_view(DCP_BUF_SEG, call->dout + x->cq * w->o, w->o), view_at(g->delta, s->r0),
            seg_view(DCP_BUF_SEG, call->o + x->cq * w->o, w->o), rows};
        l->delta_count++;
        if (rows > l->delta_rows) l->delta_rows = rows;
    }
    int64_t kv = x->ckv;
    int32_t a, b;
    for (int32_t i = piece_first(line, s->k0); piece_at(line, i, s->k0, s->k1, &a, &b); i++) {
        const dcp_tile_t *t = &tiles[line->tile[i]];
        DCP_CHECK(add_copy(p, view_at(t->k, a), seg_view(DCP_BUF_SEG, call->k + kv * w->k, w->k),
                           b - a, w->k, &l->gather_rows));
        DCP_CHECK(add_copy(p, view_at(t->v, a), seg_view(DCP_BUF_SEG, call->v + kv * w->v, w->v),
                           b - a, w->v, &l->gather_rows));
        kv += b - a;
    }
    return DCP_OK;
}

/* Backward: the adds of entry x's dQ, dK and dV into the group's and the tiles' rows. */
static dcp_status_t entry_adds(dcp_seg_prog_t *p, dcp_seg_launch_t *l, const entry_t *x,
                               const dcp_tile_group_t *g, const dcp_seg_line_t *line,
                               const dcp_tile_t *tiles, const widths_t *w)
{
    const dcp_dense_call_t *call = &p->calls[l->call_first + x->call];
    const dcp_seg_t *s = x->seg;
    DCP_CHECK(add_copy(p, seg_view(DCP_BUF_SEG, call->dq + x->cq * w->q, w->q),
                       view_at(g->dq, s->r0), s->r1 - s->r0, w->q, &l->merge_rows));
    int64_t kv = x->ckv;
    int32_t a, b;
    for (int32_t i = piece_first(line, s->k0); piece_at(line, i, s->k0, s->k1, &a, &b); i++) {
        const dcp_tile_t *t = &tiles[line->tile[i]];
        DCP_CHECK(add_copy(p, seg_view(DCP_BUF_SEG, call->dk + kv * w->k, w->k), view_at(t->dk, a),
                           b - a, w->k, &l->merge_rows));
        DCP_CHECK(add_copy(p, seg_view(DCP_BUF_SEG, call->dv + kv * w->v, w->v), view_at(t->dv, a),
                           b - a, w->v, &l->merge_rows));
        kv += b - a;
    }
    return DCP_OK;
}

/* dcp's own kernel over group gi's MASKED segments (segs[i, j), those of one row range
 * consecutive): one sub-group per row range, of its segments' trimmed tiles. Forward: a group
 * whose one sub-group covers all its rows writes its output directly; other sub-groups stage
 * their partial in SEG32 (*seg32 grows), and a group that starts from nothing (accumulate 0)
 * is reset first (a sub-group of no tiles writes O = 0, LSE = -inf). Backward: every
 * sub-group adds into the group's dQ and the tiles' dK, dV directly. */
static dcp_status_t group_own(dcp_seg_prog_t *p, dcp_seg_launch_t *l, int64_t gi,
                              const dcp_tile_group_t *g, const dcp_seg_t *segs, int64_t i, int64_t j,
                              const dcp_seg_line_t *line, const dcp_tile_t *tiles, int bwd,
                              const widths_t *w, int64_t *seg32, part_t **parts,
                              int64_t *nparts, int64_t *cap_parts)
{
    int any = 0, all_rows = 1;
    for (int64_t k = i; k < j; k++)
        if (segs[k].cls == DCP_SEG_MASKED) {
            any = 1;
            all_rows &= segs[k].r0 == 0 && segs[k].r1 == g->q_len;
        }
    const int direct = !bwd && any && all_rows;
    if (!bwd && g->accumulate == 0 && !direct)
        DCP_CHECK(add_own_group(p, l, g, 0, g->q_len, NULL, NULL, 0, p->n_own_tiles, 0));
    for (int64_t k = i; k < j;) {
        if (segs[k].cls != DCP_SEG_MASKED) {
            k++;
            continue;
        }
        const int32_t r0 = segs[k].r0, r1 = segs[k].r1;
        const int64_t first_tile = p->n_own_tiles;
        for (; k < j && segs[k].cls == DCP_SEG_MASKED && segs[k].r0 == r0 && segs[k].r1 == r1; k++) {
            int32_t a, b;
            for (int32_t t = piece_first(line, segs[k].k0);
                 piece_at(line, t, segs[k].k0, segs[k].k1, &a, &b); t++)
                DCP_CHECK(add_own_tile(p, &tiles[line->tile[t]], a, b));
        }
        const int64_t ntiles = p->n_own_tiles - first_tile;
        if (bwd || direct) {
            DCP_CHECK(add_own_group(p, l, g, r0, r1, NULL, NULL, bwd ? 0 : g->accumulate,
                                    first_tile, ntiles));
            continue;
        }
        const int32_t rows = r1 - r0;
        const dcp_view_t o = seg_view(DCP_BUF_SEG32, *seg32, w->o);
        const dcp_view_t lse = seg_view(DCP_BUF_SEG32, *seg32 + rows * w->o, w->st);
        *seg32 += rows * (w->o + w->st);
        DCP_CHECK(add_own_group(p, l, g, r0, r1, &o, &lse, 0, first_tile, ntiles));
        DCP_CHECK(dcp_reserve(parts, cap_parts, *nparts + 1, sizeof **parts, "segment partials"));
        (*parts)[(*nparts)++] = (part_t){gi, r0, r1, o, lse};
    }
    return DCP_OK;
}

dcp_status_t dcp_seg_prog_add(dcp_seg_prog_t *prog, const dcp_seg_shape_t *shape,
                              const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles, int64_t *launch_out)
{
    const int64_t hq = shape->q_heads, hkv = shape->kv_heads, d = shape->head_dim,
                  dv = shape->head_dim_v > 0 ? shape->head_dim_v : d;
    const widths_t w = {hq * d, hq * dv, hkv * d, hkv * dv, hq};
    const int bwd = shape->backward;
    dcp_seg_t *segs = NULL;
    entry_t *ents = NULL;
    part_t *parts = NULL;
    dcp_seg_line_t line;
    memset(&line, 0, sizeof line);
    int64_t ns = 0, nents = 0, nparts = 0, cap_parts = 0;
    int64_t *seg_first = NULL, *ent_first = NULL;
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
    l->call_first = prog->n_calls;
    const int64_t own_tile0 = prog->n_own_tiles;
    DCP_CHECK_GOTO(
        dcp_seg_cut(seqs, groups, num_groups, tiles, shape->min_rows, shape->dense, &segs, &ns), st,
        out);
    DCP_CHECK_GOTO(dcp_calloc(&ents, ns + 1, sizeof *ents, "segments"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&cut, 2 * ns + 4, sizeof *cut, "segments"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&seg_first, num_groups + 1, sizeof *seg_first, "segments"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&ent_first, num_groups + 1, sizeof *ent_first, "segments"), st, out);
    /* segments come group by group: seg_first[g] is group g's first; the entries are the
     * dense ones, in the same order */
    for (int64_t i = 0, gi = 0; gi <= num_groups; gi++) {
        while (i < ns && segs[i].group < gi) i++;
        seg_first[gi] = i;
    }
    dcp_seg_add_pairs(segs, ns, prog->pairs);
    for (int64_t i = 0; i < ns; i++)
        if (segs[i].cls != DCP_SEG_MASKED) ents[nents++] = (entry_t){&segs[i], 0, 0, 0};
    for (int64_t gi = 0, e = 0, i = 0; gi <= num_groups; gi++) {
        for (; i < seg_first[gi]; i++) e += segs[i].cls != DCP_SEG_MASKED;
        ent_first[gi] = e;
    }
    DCP_CHECK_GOTO(make_calls(prog, l, ents, nents), st, out);
    DCP_CHECK_GOTO(layout_calls(prog, l, ents, nents, bwd, &w, &seg, &seg32), st, out);

    for (int64_t gi = 0; gi < num_groups; gi++) { /* gathers, then the own kernel's groups */
        const dcp_tile_group_t *g = &groups[gi];
        DCP_CHECK_GOTO(dcp_seg_line(g, tiles, &line), st, out);
        for (int64_t e = ent_first[gi]; e < ent_first[gi + 1]; e++)
            DCP_CHECK_GOTO(entry_gathers(prog, l, &ents[e], g, &line, tiles, bwd, &w), st,
                           out);
    }
    l->gather_count = prog->n_copies - l->gather_first;
    for (int64_t gi = 0; gi < num_groups; gi++) {
        DCP_CHECK_GOTO(dcp_seg_line(&groups[gi], tiles, &line), st, out);
        DCP_CHECK_GOTO(group_own(prog, l, gi, &groups[gi], segs, seg_first[gi], seg_first[gi + 1],
                                 &line, tiles, bwd, &w, &seg32, &parts, &nparts, &cap_parts),
                       st, out);
    }
    if (!bwd) { /* every partial merged into its group */
        for (int64_t gi = 0; gi < num_groups; gi++)
            DCP_CHECK_GOTO(group_merges(prog, l, gi, &groups[gi], ents, ent_first[gi],
                                        ent_first[gi + 1], parts, nparts, &w, cut),
                           st, out);
    } else { /* the dense gradients added into the groups' dQ and the tiles' dK, dV rows */
        l->acc_first = prog->n_copies;
        for (int64_t gi = 0; gi < num_groups; gi++) {
            DCP_CHECK_GOTO(dcp_seg_line(&groups[gi], tiles, &line), st, out);
            for (int64_t e = ent_first[gi]; e < ent_first[gi + 1]; e++)
                DCP_CHECK_GOTO(entry_adds(prog, l, &ents[e], &groups[gi], &line, tiles, &w),
                               st, out);
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
    free(segs);
    free(ents);
    free(parts);
    free(cut);
    free(seg_first);
    free(ent_first);
    dcp_seg_line_free(&line);
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
    free(prog->calls);
    memset(prog, 0, sizeof *prog);
}

dcp_seg_arrays_t dcp_seg_host_arrays(const dcp_seg_prog_t *prog)
{
    return (dcp_seg_arrays_t){prog->own_groups, prog->own_tiles,  prog->copies, prog->merges,
                              prog->merge_srcs, prog->deltas, prog->ints};
}

static dcp_status_t cpu_run(void *state, const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                            int64_t call, const int32_t *ints)
{
    (void)state, (void)ints;
    const dcp_dense_call_t *c = &prog->calls[call];
    return prog->launches[c->launch].backward ? dcp_dense_cpu_bwd(env, c, prog->ints)
                                              : dcp_dense_cpu_fwd(env, c, prog->ints);
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
    for (int64_t c = l->call_first; c < l->call_first + l->call_count; c++)
        DCP_CHECK(dense->run(dense->state, &env, prog, c, a->ints));
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
