/*
 * The deterministic backward's waves (segment.h, dcp_seg_waves): a backward launch of the
 * attention engine adds into the gradients from its own kernel (masked sub-groups of trimmed
 * tiles, several per plan group and plan tile, whose rows may overlap) and from its adds of
 * the dense calls' partials (one per entry and piece, overlapping likewise). With atomics
 * the sums are right in any order but their bits are not fixed; here the writers are cut
 * into waves, one kernel launch each, in which none overlaps another, so every element takes
 * at most one add per launch.
 *
 * Each writer (a unit: an own group, or an add) is a set of spans, the buffer elements from
 * its first row's first to its last row's last. Spans are sorted by (buffer, start) and swept
 * once, which yields every overlapping pair at O(n log n) plus the pairs; a pair conflicts
 * when its rows share an element (exact for strided rows: the head groups of one row range
 * interleave without meeting), except two tiles with the very same gradient destination
 * (dcp's deterministic kernel adds those in tile order itself). Units then take the first
 * wave none of their earlier conflicts holds, in program order.
 */
#include "kernels/segment.h"

#include "include/base/descr.h"
#include "include/base/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t buf;
    int64_t lo, hi;              /* elements [lo, hi) of buffer buf */
    int64_t stride, rows, width; /* rows at lo + r x stride, width elements each */
    int64_t unit;                /* the writer */
    const dcp_tile_t *tile;      /* a tile's dK or dV rows, else NULL */
} span_t;

typedef struct {
    int64_t later, earlier; /* units that may not share a wave */
} conflict_t;

static span_t span_of(dcp_view_t v, int64_t rows, int64_t width, int64_t unit, const dcp_tile_t *t)
{
    return (span_t){v.buf, v.off, v.off + (rows - 1) * v.stride + width, v.stride, rows, width,
                    unit,  t};
}

static int64_t floor_div(int64_t a, int64_t b) /* b > 0 */
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* Whether the rows of two spans share an element. With one stride S >= both widths, row x of
 * a and row y of b meet when d - wa < k S < d + wb (k = x - y, d = b.lo - a.lo), for some k
 * in [-(rows_b - 1), rows_a - 1]; spans of other shapes are taken to meet. */
static int rows_meet(const span_t *a, const span_t *b)
{
    const int64_t s = a->stride;
    if (b->stride != s || s < a->width || s < b->width || s <= 0) return 1;
    const int64_t d = b->lo - a->lo;
    int64_t k0 = floor_div(d - a->width, s) + 1, k1 = floor_div(d + b->width - 1, s);
    if (k0 < -(b->rows - 1)) k0 = -(b->rows - 1);
    if (k1 > a->rows - 1) k1 = a->rows - 1;
    return k0 <= k1;
}

static int span_cmp(const void *x, const void *y)
{
    const span_t *a = x, *b = y;
    if (a->buf != b->buf) return a->buf < b->buf ? -1 : 1;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->unit < b->unit ? -1 : a->unit > b->unit;
}

static int conflict_cmp(const void *x, const void *y)
{
    const conflict_t *a = x, *b = y;
    if (a->later != b->later) return a->later < b->later ? -1 : 1;
    return a->earlier < b->earlier ? -1 : a->earlier > b->earlier;
}

/* One destination: the same dK and dV rows, strides and keys. */
static int same_destination(const dcp_tile_t *a, const dcp_tile_t *b)
{
    return dcp_tile_same_grads(a, b) && a->dk.stride == b->dk.stride &&
           a->dv.stride == b->dv.stride;
}

/* Every pair of overlapping spans of different units that may not share a wave, as
 * (later, earlier) in *out (malloc'ed, sorted by later unit); self[u] (when given) is set
 * where two spans of unit u overlap without one destination. Sorts s. */
static dcp_status_t sweep(span_t *s, int64_t n, uint8_t *self, conflict_t **out, int64_t *n_out)
{
    conflict_t *c = NULL;
    int64_t nc = 0, cap = 0;
    qsort(s, (size_t)n, sizeof *s, span_cmp);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n && s[j].buf == s[i].buf && s[j].lo < s[i].hi; j++) {
            if (s[i].tile && s[j].tile && same_destination(s[i].tile, s[j].tile)) continue;
            if (!rows_meet(&s[i], &s[j])) continue;
            if (s[i].unit == s[j].unit) {
                if (self && s[i].tile && s[j].tile) self[s[i].unit] = 1;
                continue;
            }
            if (dcp_reserve(&c, &cap, nc + 1, sizeof *c, "deterministic waves") != DCP_OK) {
                free(c);
                return DCP_ERR_NO_MEMORY;
            }
            const int64_t a = s[i].unit, b = s[j].unit;
            c[nc++] = (conflict_t){a > b ? a : b, a > b ? b : a};
        }
    if (nc > 1) qsort(c, (size_t)nc, sizeof *c, conflict_cmp);
    *out = c;
    *n_out = nc;
    return DCP_OK;
}

/* wave[u] for units [0, n): the first wave that none of u's earlier conflicts holds; the
 * number of waves in *nwaves. */
static dcp_status_t first_fit(int64_t n, const conflict_t *c, int64_t nc, int64_t *wave,
                              int64_t *nwaves)
{
    int64_t *stamp = NULL; /* stamp[w] = u + 1: wave w holds a conflict of unit u */
    DCP_CHECK(dcp_calloc(&stamp, n + 1, sizeof *stamp, "deterministic waves"));
    int64_t k = 0, most = 0;
    for (int64_t u = 0; u < n; u++) {
        for (; k < nc && c[k].later == u; k++) stamp[wave[c[k].earlier]] = u + 1;
        int64_t w = 0;
        while (stamp[w] == u + 1) w++;
        wave[u] = w;
        if (w + 1 > most) most = w + 1;
    }
    free(stamp);
    *nwaves = most;
    return DCP_OK;
}

/* order[] = units [0, n) by wave, program order within one; the waves' ends appended to
 * prog.wave_ends from *first. */
static dcp_status_t order_waves(dcp_seg_prog_t *prog, const int64_t *wave, int64_t n,
                                int64_t nwaves, int64_t *order, int64_t *first)
{
    DCP_CHECK(dcp_reserve(&prog->wave_ends, &prog->cap_wave_ends, prog->n_wave_ends + nwaves,
                          sizeof *prog->wave_ends, "deterministic waves"));
    *first = prog->n_wave_ends;
    int64_t k = 0;
    for (int64_t w = 0; w < nwaves; w++) {
        for (int64_t u = 0; u < n; u++)
            if (wave[u] == w) order[k++] = u;
        prog->wave_ends[prog->n_wave_ends++] = k;
    }
    return DCP_OK;
}

/* The launch's own groups as units (a group whose tiles overlap without one destination split
 * into one unit per tile), in waves, written back with their tiles in wave order. */
static dcp_status_t own_waves(dcp_seg_prog_t *prog, dcp_seg_launch_t *l, int64_t qw, int64_t kw,
                              int64_t tile0)
{
    const int64_t ng = l->own_count, nt = prog->n_own_tiles - tile0;
    dcp_tile_group_t *u = NULL, *g = prog->own_groups + l->own_first;
    dcp_tile_t *tiles = NULL;
    span_t *s = NULL;
    conflict_t *c = NULL;
    uint8_t *self = NULL;
    int64_t *wave = NULL, *order = NULL, nu = 0, nc = 0, nw = 0;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&u, ng + nt + 1, sizeof *u, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&tiles, nt + 1, sizeof *tiles, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&s, ng + 3 * nt + 1, sizeof *s, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&self, ng + 1, 1, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&wave, ng + nt + 1, sizeof *wave, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&order, ng + nt + 1, sizeof *order, "deterministic waves"), st, out);
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: the groups, to find the ones to split; pass 1: the units */
        nu = 0;
        for (int64_t i = 0; i < ng; i++) {
            if (pass == 0 || !self[i]) {
                u[nu++] = g[i];
                continue;
            }
            for (int32_t t = 0; t < g[i].num_tiles; t++) {
                u[nu] = g[i];
                u[nu].first_tile = g[i].first_tile + t;
                u[nu++].num_tiles = 1;
            }
        }
        int64_t n = 0;
        for (int64_t i = 0; i < nu; i++) {
            s[n++] = span_of(u[i].dq, u[i].q_len, qw, i, NULL);
            for (int32_t t = 0; t < u[i].num_tiles; t++) {
                const dcp_tile_t *x = &prog->own_tiles[u[i].first_tile + t];
                s[n++] = span_of(x->dk, x->kv_len, kw, i, x);
                s[n++] = span_of(x->dv, x->kv_len, kw, i, x);
            }
        }
        free(c);
        c = NULL;
        DCP_CHECK_GOTO(sweep(s, n, pass == 0 ? self : NULL, &c, &nc), st, out);
        if (pass == 0 && !memchr(self, 1, (size_t)ng)) break; /* nothing to split */
    }
    DCP_CHECK_GOTO(first_fit(nu, c, nc, wave, &nw), st, out);
    DCP_CHECK_GOTO(order_waves(prog, wave, nu, nw, order, &l->own_wave_first), st, out);
    l->own_waves = nw;
    /* the units in wave order, each with its tiles after the previous unit's */
    int64_t nt2 = 0;
    for (int64_t k = 0; k < nu; k++) {
        const dcp_tile_group_t *x = &u[order[k]];
        if (x->num_tiles > 0)
            memcpy(&tiles[nt2], &prog->own_tiles[x->first_tile],
                   (size_t)x->num_tiles * sizeof *tiles);
        order[k] = nt2; /* reused: the unit's new first tile */
        nt2 += x->num_tiles;
    }
    DCP_CHECK_GOTO(dcp_reserve(&prog->own_groups, &prog->cap_own_groups, l->own_first + nu,
                               sizeof *prog->own_groups, "segment groups"),
                   st, out);
    g = prog->own_groups + l->own_first;
    for (int64_t w = 0, k = 0; w < nw; w++)
        for (int64_t i = 0; i < nu; i++)
            if (wave[i] == w) {
                g[k] = u[i];
                g[k].first_tile = (int32_t)(tile0 + order[k]);
                k++;
            }
    if (nt > 0) memcpy(prog->own_tiles + tile0, tiles, (size_t)nt * sizeof *tiles);
    prog->n_own_groups = l->own_first + nu;
    l->own_count = nu;
    st = DCP_OK;
out:
    free(u);
    free(tiles);
    free(s);
    free(c);
    free(self);
    free(wave);
    free(order);
    return st;
}

/* The launch's adds (copy items [acc_first, acc_first + acc_count)) in waves, reordered. */
static dcp_status_t acc_waves(dcp_seg_prog_t *prog, dcp_seg_launch_t *l)
{
    const int64_t n = l->acc_count;
    dcp_copy_item_t *items = prog->copies + l->acc_first, *sorted = NULL;
    span_t *s = NULL;
    conflict_t *c = NULL;
    int64_t *wave = NULL, *order = NULL, nc = 0, nw = 0;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&s, n + 1, sizeof *s, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&sorted, n + 1, sizeof *sorted, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&wave, n + 1, sizeof *wave, "deterministic waves"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&order, n + 1, sizeof *order, "deterministic waves"), st, out);
    for (int64_t i = 0; i < n; i++)
        s[i] = span_of(items[i].dst, items[i].rows, items[i].row_elems, i, NULL);
    DCP_CHECK_GOTO(sweep(s, n, NULL, &c, &nc), st, out);
    DCP_CHECK_GOTO(first_fit(n, c, nc, wave, &nw), st, out);
    DCP_CHECK_GOTO(order_waves(prog, wave, n, nw, order, &l->acc_wave_first), st, out);
    l->acc_waves = nw;
    for (int64_t k = 0; k < n; k++) sorted[k] = items[order[k]];
    memcpy(items, sorted, (size_t)n * sizeof *items);
    st = DCP_OK;
out:
    free(s);
    free(sorted);
    free(c);
    free(wave);
    free(order);
    return st;
}

dcp_status_t dcp_seg_waves(dcp_seg_prog_t *prog, dcp_seg_launch_t *l, const dcp_seg_shape_t *shape,
                           int64_t own_tile0)
{
    const int64_t qw = (int64_t)shape->q_heads * shape->head_dim,
                  kw = (int64_t)shape->kv_heads * shape->head_dim;
    if (!l->backward) return DCP_OK;
    if (l->own_count > 0) DCP_CHECK(own_waves(prog, l, qw, kw, own_tile0));
    if (l->acc_count > 0) DCP_CHECK(acc_waves(prog, l));
    return DCP_OK;
}

int64_t dcp_seg_wave_end(const dcp_seg_prog_t *prog, const dcp_seg_launch_t *l, int acc, int64_t w)
{
    const int64_t waves = acc ? l->acc_waves : l->own_waves;
    if (waves == 0) return acc ? l->acc_count : l->own_count;
    return prog->wave_ends[(acc ? l->acc_wave_first : l->own_wave_first) + w];
}
