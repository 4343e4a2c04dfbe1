/*
 * The segmenter's cut (kernels/segment.h): each group's rows against its key line, in dense
 * runs of one class and MASKED rectangles. Host-side bookkeeping over descriptors only.
 *
 * Per group: every row's allowed keys as at most two line ranges (its layers); per layer, the
 * rows in maximal runs whose range moves as one dense class allows (greedy, rows ascending);
 * runs too short or of a class the engine lacks become MASKED and join their masked
 * neighbours; the MASKED rectangles of all layers, cut at every run boundary, give the own
 * kernel's row ranges, each with the union of its runs' key hulls. A hull that would reach a
 * key of the same row's dense run (possible with custom ranges only) makes that row MASKED in
 * every layer, and the group is cut again.
 */
#include "kernels/segment.h"

#include "include/base/error.h"
#include "include/base/mask_rule.h"

#include <stdlib.h>
#include <string.h>

const char *dcp_seg_class_name(int cls)
{
    static const char *const names[DCP_SEG_CLASSES] = {"full", "causal", "band", "left", "masked"};
    return cls >= 0 && cls < DCP_SEG_CLASSES ? names[cls] : "?";
}

/* ---- the key line ------------------------------------------------------------------------- */

dcp_status_t dcp_seg_line(const dcp_tile_group_t *g, const dcp_tile_t *tiles, dcp_seg_line_t *line)
{
    const int32_t n = g->num_tiles;
    DCP_CHECK(dcp_reserve(&line->tile, &line->cap_tile, n + 1, sizeof *line->tile, "key line"));
    DCP_CHECK(dcp_reserve(&line->u0, &line->cap_u0, n + 1, sizeof *line->u0, "key line"));
    line->n = n;
    for (int32_t i = 0; i < n; i++) { /* insertion sort by position: a group has few tiles */
        const int32_t t = g->first_tile + i;
        int32_t j = i;
        for (; j > 0 && tiles[line->tile[j - 1]].kv_pos > tiles[t].kv_pos; j--)
            line->tile[j] = line->tile[j - 1];
        line->tile[j] = t;
    }
    int64_t u = 0;
    for (int32_t i = 0; i < n; i++) {
        const dcp_tile_t *t = &tiles[line->tile[i]];
        if (i > 0) {
            const dcp_tile_t *p = &tiles[line->tile[i - 1]];
            if ((int64_t)p->kv_pos + p->kv_len > t->kv_pos)
                return dcp_set_error(DCP_ERR_INTERNAL,
                                     "segmenter: tiles %d and %d of a group share keys (%d+%d, %d)",
                                     line->tile[i - 1], line->tile[i], p->kv_pos, p->kv_len,
                                     t->kv_pos);
        }
        line->u0[i] = (int32_t)u;
        u += t->kv_len;
    }
    if (u > INT32_MAX)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "segmenter: a group of %lld keys", (long long)u);
    line->u0[n] = (int32_t)u;
    return DCP_OK;
}

void dcp_seg_line_free(dcp_seg_line_t *line)
{
    if (!line) return;
    free(line->tile);
    free(line->u0);
    memset(line, 0, sizeof *line);
}

/* The line key of sequence position p: the keys the line holds before p. */
static int32_t line_key(const dcp_seg_line_t *line, const dcp_tile_t *tiles, int64_t p)
{
    int32_t lo = 0, hi = line->n; /* the first tile that ends after p */
    while (lo < hi) {
        const int32_t mid = (lo + hi) / 2;
        const dcp_tile_t *t = &tiles[line->tile[mid]];
        if ((int64_t)t->kv_pos + t->kv_len <= p)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == line->n) return line->u0[line->n];
    const dcp_tile_t *t = &tiles[line->tile[lo]];
    return line->u0[lo] + (p > t->kv_pos ? (int32_t)(p - t->kv_pos) : 0);
}

/* ---- rows and runs ---------------------------------------------------------------------------- */

typedef struct {
    int32_t n; /* layers: 0..2 */
    int32_t lo[2], hi[2];
} row_t;

/* The line ranges of every row of g (touching ranges joined). */
static void row_ranges(const dcp_seq_info_t *seq, const dcp_tile_group_t *g,
                       const dcp_tile_t *tiles, const dcp_seg_line_t *line, row_t *rows)
{
    for (int32_t r = 0; r < g->q_len; r++) {
        int32_t rg[4];
        dcp_mask_keys(&seq->mask, seq->len, g->q_pos + r, rg);
        row_t *w = &rows[r];
        w->n = 0;
        for (int j = 0; j < 2; j++) {
            if (rg[2 * j] >= rg[2 * j + 1]) continue;
            const int32_t a = line_key(line, tiles, rg[2 * j]), b = line_key(line, tiles, rg[2 * j + 1]);
            if (a >= b) continue;
            if (w->n > 0 && w->hi[w->n - 1] >= a) {
                w->hi[w->n - 1] = b > w->hi[w->n - 1] ? b : w->hi[w->n - 1];
                continue;
            }
            w->lo[w->n] = a;
            w->hi[w->n] = b;
            w->n++;
        }
    }
}

/* A run of rows of one layer: FULL/LEFT keep the end (dhi 0), CAUSAL/BAND move it one key a
 * row (dhi 1); LEFT and BAND start moving the start once (rising). */
typedef struct {
    int32_t r0, r1;
    int32_t lo0, hi0, lo, hi; /* the first and the last row's range */
    int32_t dhi;              /* -1 while one row */
    int32_t rising, masked;
    int32_t k0, k1;           /* masked: the hull */
    int64_t pairs;
} run_t;

typedef struct {
    run_t *v;
    int64_t n, cap;
} runs_t;

static int run_takes(const run_t *u, const row_t *w, int L, int32_t r)
{
    if (u->masked || u->r1 != r) return 0;
    const int32_t dh = w->hi[L] - u->hi, dl = w->lo[L] - u->lo;
    if (dh < 0 || dh > 1 || dl < 0 || dl > 1) return 0;
    if (u->dhi >= 0 && dh != u->dhi) return 0;
    return !(u->rising && dl == 0);
}

static int run_class(const run_t *u)
{
    if (u->masked) return DCP_SEG_MASKED;
    if (u->dhi == 1) return u->rising ? DCP_SEG_BAND : DCP_SEG_CAUSAL;
    return u->rising ? DCP_SEG_LEFT : DCP_SEG_FULL;
}

/* The runs of layer L over the rows, appended to *out; run_of[r] gets row r's run (-1: none).
 * A forced row is a one-row MASKED run. */
static dcp_status_t layer_runs(const row_t *rows, int32_t nrows, const uint8_t *forced, int L,
                               runs_t *out, int64_t *run_of)
{
    int64_t open = -1;
    for (int32_t r = 0; r < nrows; r++) {
        run_of[r] = -1;
        const row_t *w = &rows[r];
        if (w->n <= L) {
            open = -1;
            continue;
        }
        const int32_t span = w->hi[L] - w->lo[L];
        if (open >= 0 && !forced[r] && run_takes(&out->v[open], w, L, r)) {
            run_t *u = &out->v[open];
            const int32_t dh = w->hi[L] - u->hi, dl = w->lo[L] - u->lo;
            if (u->dhi < 0) u->dhi = dh;
            u->rising |= dl;
            u->lo = w->lo[L];
            u->hi = w->hi[L];
            u->r1 = r + 1;
            u->pairs += span;
            run_of[r] = open;
            continue;
        }
        DCP_CHECK(dcp_reserve(&out->v, &out->cap, out->n + 1, sizeof *out->v, "segment runs"));
        open = out->n++;
        out->v[open] = (run_t){r,         r + 1,     w->lo[L], w->hi[L], w->lo[L], w->hi[L], -1, 0,
                               forced[r], w->lo[L], w->hi[L], span};
        run_of[r] = open;
        if (forced[r]) open = -1;
    }
    return DCP_OK;
}

/* Runs [first, n) of one layer: too short or of a class the engine lacks become MASKED, with
 * their hull, and MASKED runs on consecutive rows join. run_of follows the joins. */
static void demote_and_join(runs_t *rs, int64_t first, int32_t min_rows, int32_t dense,
                            int64_t *run_of, int32_t nrows)
{
    int64_t w = first;
    int64_t *map = run_of; /* old index -> new, through the rows' entries */
    for (int64_t i = first; i < rs->n; i++) {
        run_t u = rs->v[i];
        const int cls = run_class(&u);
        if (!u.masked && (u.r1 - u.r0 < min_rows || !(dense & DCP_SEG_BIT(cls)))) {
            u.masked = 1;
            u.k0 = u.lo0 < u.lo ? u.lo0 : u.lo;
            u.k1 = u.hi0 > u.hi ? u.hi0 : u.hi;
        }
        int64_t to = w;
        if (u.masked && w > first && rs->v[w - 1].masked && rs->v[w - 1].r1 == u.r0) {
            run_t *p = &rs->v[w - 1];
            p->r1 = u.r1;
            p->k0 = u.k0 < p->k0 ? u.k0 : p->k0;
            p->k1 = u.k1 > p->k1 ? u.k1 : p->k1;
            p->pairs += u.pairs;
            to = w - 1;
        } else {
            rs->v[w++] = u;
        }
        for (int32_t r = u.r0; r < u.r1; r++)
            if (map[r] == i) map[r] = to;
    }
    rs->n = w;
    (void)nrows;
}

/* ---- the cut of one group ------------------------------------------------------------------ */

typedef struct {
    row_t *rows;
    uint8_t *forced;
    int64_t *run_of; /* [2][nrows] */
    int32_t *cut;
    runs_t runs;
    dcp_seg_line_t line;
    int64_t cap_rows, cap_forced, cap_run_of, cap_cut;
} scratch_t;

static void scratch_free(scratch_t *s)
{
    free(s->rows);
    free(s->forced);
    free(s->run_of);
    free(s->cut);
    free(s->runs.v);
    dcp_seg_line_free(&s->line);
}

static dcp_status_t push_seg(dcp_seg_t **segs, int64_t *n, int64_t *cap, const dcp_seg_t *s)
{
    DCP_CHECK(dcp_reserve(segs, cap, *n + 1, sizeof **segs, "segments"));
    (*segs)[(*n)++] = *s;
    return DCP_OK;
}

/* Whether a MASKED run's hull reaches a key of a dense run of one of its rows; those rows are
 * forced MASKED (in every layer). */
static int force_conflicts(scratch_t *s, int32_t nrows)
{
    int any = 0;
    for (int L = 0; L < 2; L++)
        for (int32_t r = 0; r < nrows; r++) {
            const int64_t m = s->run_of[L * nrows + r];
            if (m < 0 || !s->runs.v[m].masked || s->forced[r]) continue;
            const int O = 1 - L;
            const int64_t d = s->run_of[O * nrows + r];
            if (d < 0 || s->runs.v[d].masked) continue;
            const row_t *w = &s->rows[r];
            if (w->lo[O] < s->runs.v[m].k1 && s->runs.v[m].k0 < w->hi[O]) {
                s->forced[r] = 1;
                any = 1;
            }
        }
    return any;
}

/* The allowed pairs of row r inside line keys [k0, k1). */
static int64_t row_pairs_in(const row_t *w, int32_t k0, int32_t k1)
{
    int64_t n = 0;
    for (int j = 0; j < w->n; j++) {
        const int32_t a = w->lo[j] > k0 ? w->lo[j] : k0, b = w->hi[j] < k1 ? w->hi[j] : k1;
        if (a < b) n += b - a;
    }
    return n;
}

static int cmp_i32(const void *x, const void *y)
{
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

typedef struct {
    int32_t k0, k1;
} iv_t;

static int cmp_iv(const void *x, const void *y)
{
    const iv_t *a = x, *b = y;
    return a->k0 != b->k0 ? (a->k0 < b->k0 ? -1 : 1) : (a->k1 < b->k1 ? -1 : a->k1 > b->k1);
}

static dcp_status_t cut_group(scratch_t *s, const dcp_seq_info_t *seq, const dcp_tile_group_t *g,
                              int32_t gi, const dcp_tile_t *tiles, int32_t min_rows, int32_t dense,
                              dcp_seg_t **segs, int64_t *n, int64_t *cap)
{
    const int32_t nrows = g->q_len;
    DCP_CHECK(dcp_seg_line(g, tiles, &s->line));
    DCP_CHECK(dcp_reserve(&s->rows, &s->cap_rows, nrows + 1, sizeof *s->rows, "segment rows"));
    DCP_CHECK(dcp_reserve(&s->forced, &s->cap_forced, nrows + 1, 1, "segment rows"));
    DCP_CHECK(dcp_reserve(&s->run_of, &s->cap_run_of, 2 * (int64_t)nrows + 1, sizeof *s->run_of,
                          "segment rows"));
    memset(s->forced, 0, (size_t)nrows);
    row_ranges(seq, g, tiles, &s->line, s->rows);
    do {
        s->runs.n = 0;
        for (int L = 0; L < 2; L++) {
            const int64_t first = s->runs.n;
            DCP_CHECK(layer_runs(s->rows, nrows, s->forced, L, &s->runs, s->run_of + L * nrows));
            demote_and_join(&s->runs, first, min_rows, dense, s->run_of + L * nrows, nrows);
        }
    } while (force_conflicts(s, nrows));

    /* the dense runs, layer by layer */
    int64_t nmasked = 0;
    for (int64_t i = 0; i < s->runs.n; i++) {
        const run_t *u = &s->runs.v[i];
        if (u->masked) {
            nmasked++;
            continue;
        }
        const int cls = run_class(u);
        const dcp_seg_t seg = {gi,      u->r0, u->r1, u->lo0, u->dhi == 1 ? u->hi : u->hi0,
                               cls,     cls == DCP_SEG_BAND || cls == DCP_SEG_LEFT ? u->hi - u->lo : 0,
                               u->pairs};
        DCP_CHECK(push_seg(segs, n, cap, &seg));
    }
    if (nmasked == 0) return DCP_OK;
    /* the MASKED rectangles: rows cut at every masked run's ends, each row range with the
     * union of the hulls of the masked runs that cover it */
    DCP_CHECK(dcp_reserve(&s->cut, &s->cap_cut, 2 * nmasked + 1, sizeof *s->cut, "segment rows"));
    int64_t nc = 0;
    for (int64_t i = 0; i < s->runs.n; i++)
        if (s->runs.v[i].masked) {
            s->cut[nc++] = s->runs.v[i].r0;
            s->cut[nc++] = s->runs.v[i].r1;
        }
    qsort(s->cut, (size_t)nc, sizeof *s->cut, cmp_i32);
    iv_t *iv = NULL;
    int64_t cap_iv = 0;
    dcp_status_t st = DCP_OK;
    for (int64_t c = 0; c + 1 < nc && st == DCP_OK; c++) {
        const int32_t a = s->cut[c], b = s->cut[c + 1];
        if (a == b) continue;
        int64_t ni = 0;
        for (int64_t i = 0; i < s->runs.n; i++) {
            const run_t *u = &s->runs.v[i];
            if (!u->masked || u->r0 > a || u->r1 < b) continue;
            DCP_CHECK_GOTO(dcp_reserve(&iv, &cap_iv, ni + 1, sizeof *iv, "segment rows"), st, out);
            iv[ni++] = (iv_t){u->k0, u->k1};
        }
        if (ni > 1) qsort(iv, (size_t)ni, sizeof *iv, cmp_iv);
        for (int64_t i = 0; i < ni;) {
            iv_t m = iv[i++];
            while (i < ni && iv[i].k0 <= m.k1) {
                m.k1 = iv[i].k1 > m.k1 ? iv[i].k1 : m.k1;
                i++;
            }
            int64_t pairs = 0;
            for (int32_t r = a; r < b; r++) pairs += row_pairs_in(&s->rows[r], m.k0, m.k1);
            const dcp_seg_t seg = {gi, a, b, m.k0, m.k1, DCP_SEG_MASKED, 0, pairs};
            DCP_CHECK_GOTO(push_seg(segs, n, cap, &seg), st, out);
        }
    }
out:
    free(iv);
    return st;
}

dcp_status_t dcp_seg_cut(const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                         int64_t num_groups, const dcp_tile_t *tiles, int32_t min_rows,
                         int32_t dense, dcp_seg_t **segs_out, int64_t *n_out)
{
    if (min_rows < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "segmenter: min_rows %d, must be >= 1", min_rows);
    scratch_t s;
    memset(&s, 0, sizeof s);
    dcp_seg_t *segs = NULL;
    int64_t n = 0, cap = 0;
    dcp_status_t st = DCP_OK;
    for (int64_t gi = 0; gi < num_groups && st == DCP_OK; gi++)
        st = cut_group(&s, &seqs[groups[gi].seq], &groups[gi], (int32_t)gi, tiles, min_rows, dense,
                       &segs, &n, &cap);
    if (st == DCP_OK && !segs) st = dcp_calloc(&segs, 1, sizeof *segs, "segments");
    scratch_free(&s);
    if (st != DCP_OK) {
        free(segs);
        return st;
    }
    *segs_out = segs;
    *n_out = n;
    return DCP_OK;
}

void dcp_seg_add_pairs(const dcp_seg_t *segs, int64_t n, int64_t pairs[DCP_SEG_CLASSES])
{
    for (int64_t i = 0; i < n; i++) pairs[segs[i].cls] += segs[i].pairs;
}

dcp_status_t dcp_seg_tally(const dcp_seq_info_t *seqs, const dcp_tile_group_t *groups,
                           int64_t num_groups, const dcp_tile_t *tiles, int32_t min_rows,
                           int32_t dense, int64_t pairs[DCP_SEG_CLASSES])
{
    dcp_seg_t *segs = NULL;
    int64_t n = 0;
    DCP_CHECK(dcp_seg_cut(seqs, groups, num_groups, tiles, min_rows, dense, &segs, &n));
    dcp_seg_add_pairs(segs, n, pairs);
    free(segs);
    return DCP_OK;
}
