#include "partition/place/refine_fm.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Moves without a new best before a pass stops: FM_WINDOW + nv / 100. */
#define FM_WINDOW 64
/* Passes at most (each ends at its best prefix, so more only cost time). */
#define FM_PASSES 8
/* A pass that gains less than this share of all passes' gain is the last: gains shrink
 * about 2-4x a pass, and passes 5-8 of a 1M-token plan on 32x8 (90 ms each) found 7% of
 * its gain. */
#define FM_TAIL 0.05
/* Gains below this (seconds) are rounding: one byte over a 1 TB/s link is 1e-12 s. */
#define FM_EPS 1e-13

typedef struct {
    double gain;
    int64_t v;
} entry_t;

typedef struct {
    dcp_refiner_t *r;
    int64_t ncomp, nv; /* vertices: computation blocks 0..ncomp-1, then token blocks */
    uint8_t *locked;   /* [nv]: moved in this pass */
    double *key;       /* [nv]: gain of v's live heap entry, NAN when it has none */
    entry_t *heap;
    int64_t heap_n, heap_cap;
    int64_t *log_v; /* moves of this pass, in order */
    int32_t *log_from;
    int64_t log_n;
} fm_t;

/* Max-heap on gain; equal gains pop the lower vertex first, so runs are deterministic. */
static int above(const entry_t *a, const entry_t *b)
{
    return a->gain > b->gain || (a->gain == b->gain && a->v < b->v);
}

static dcp_status_t heap_push(fm_t *f, double gain, int64_t v)
{
    DCP_CHECK(dcp_reserve(&f->heap, &f->heap_cap, f->heap_n + 1, sizeof *f->heap, "fm heap"));
    int64_t i = f->heap_n++;
    const entry_t e = {gain, v};
    while (i > 0 && above(&e, &f->heap[(i - 1) / 2])) {
        f->heap[i] = f->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    f->heap[i] = e;
    return DCP_OK;
}

static entry_t heap_pop(fm_t *f)
{
    const entry_t top = f->heap[0], last = f->heap[--f->heap_n];
    int64_t i = 0;
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= f->heap_n) break;
        if (c + 1 < f->heap_n && above(&f->heap[c + 1], &f->heap[c])) c++;
        if (!above(&f->heap[c], &last)) break;
        f->heap[i] = f->heap[c];
        i = c;
    }
    if (f->heap_n > 0) f->heap[i] = last;
    return top;
}

/* What computation block c's leaving its rank saves: the nets it alone reads there. No
 * move of c gains more, so this bounds its gain. */
static double comp_save(const dcp_refiner_t *r, int64_t c)
{
    int64_t nets[DCP_MAX_COMP_NETS];
    const int n = dcp_comp_nets(r->b, c, nets);
    const int32_t from = r->exec[c];
    double save = 0;
    for (int k = 0; k < n; k++) {
        const int32_t o = r->owner[dcp_net_block(r->g, nets[k])];
        if (from != o && *dcp_refiner_cell(r, nets[k], from) == 1)
            save += (double)r->g->weight[nets[k]] * dcp_refiner_inv_bw(r, o, from);
    }
    return save;
}

static uint64_t bit_of(int32_t rank, int32_t word)
{
    return rank / 64 == word ? (uint64_t)1 << (rank % 64) : 0;
}

/* The best move of computation block c: the highest gain among the ranks it is connected
 * to (owner or reader of one of its nets) that have room; 0 when there is none. Leaving its
 * rank saves the same on every target, so targets differ only in what they add: each net the
 * target neither owns nor reads, over the net owner's link. Candidates come from the nets'
 * reader masks, so the cost is in the ranks connected, not in all ranks; a target that adds
 * nothing is the best there is. Ties go to the lowest rank. */
static int best_comp_move(const dcp_refiner_t *r, int64_t c, double *gain, int32_t *to)
{
    int64_t nets[DCP_MAX_COMP_NETS];
    const int n = dcp_comp_nets(r->b, c, nets);
    const int32_t from = r->exec[c];
    int32_t o[DCP_MAX_COMP_NETS];
    const uint64_t *m[DCP_MAX_COMP_NETS];
    double w[DCP_MAX_COMP_NETS];
    for (int i = 0; i < n; i++) {
        o[i] = r->owner[dcp_net_block(r->g, nets[i])];
        m[i] = dcp_refiner_mask(r, nets[i]);
        w[i] = (double)r->g->weight[nets[i]];
    }
    double least = INFINITY;
    for (int32_t wd = 0; wd < r->words && least > 0; wd++) {
        uint64_t mi[DCP_MAX_COMP_NETS], any = 0;
        for (int i = 0; i < n; i++) any |= mi[i] = m[i][wd] | bit_of(o[i], wd);
        for (uint64_t set = any; set && least > 0; set &= set - 1) {
            const int32_t p = wd * 64 + __builtin_ctzll(set);
            if (p == from || !dcp_refiner_comp_fits(r, c, p)) continue;
            const uint64_t b = (uint64_t)1 << (p % 64);
            double add = 0;
            for (int i = 0; i < n; i++) add += mi[i] & b ? 0 : w[i] * dcp_refiner_inv_bw(r, o[i], p);
            if (add < least) {
                least = add;
                *to = p;
            }
        }
    }
    *gain = comp_save(r, c) - least;
    return least < INFINITY;
}

/* The best move of token block t: the highest gain among the ranks that read one of its
 * nets and have room. Returns 0 when there is none. */
static int best_blk_move(const dcp_refiner_t *r, int32_t t, double *gain, int32_t *to)
{
    const int32_t from = r->owner[t], hb = r->b->head_blocks;
    const int64_t bytes = dcp_refiner_blk_bytes(r, t);
    const double now = dcp_refiner_blk_cost(r, t, from);
    int found = 0;
    for (int32_t wd = 0; wd < r->words; wd++) {
        uint64_t set = 0;
        for (int32_t side = 0; side < r->g->num_sides; side++)
            for (int32_t h = 0; h < hb; h++) set |= dcp_refiner_mask(r, dcp_blk_net(r->g, side, t, h))[wd];
        for (; set; set &= set - 1) {
            const int32_t p = wd * 64 + __builtin_ctzll(set);
            if (p == from || (double)(r->mem[p] + bytes) > r->bound_mem) continue;
            const double g = now - dcp_refiner_blk_cost(r, t, p);
            if (!found || g > *gain) {
                *gain = g;
                *to = p;
                found = 1;
            }
        }
    }
    return found;
}

static int best_move(const fm_t *f, int64_t v, double *gain, int32_t *to)
{
    return v < f->ncomp ? best_comp_move(f->r, v, gain, to)
                        : best_blk_move(f->r, (int32_t)(v - f->ncomp), gain, to);
}

static int32_t where(const fm_t *f, int64_t v)
{
    return v < f->ncomp ? f->r->exec[v] : f->r->owner[v - f->ncomp];
}

static void apply(fm_t *f, int64_t v, int32_t to)
{
    if (v < f->ncomp)
        dcp_refiner_comp_move(f->r, v, to);
    else
        dcp_refiner_blk_move(f->r, (int32_t)(v - f->ncomp), to);
}

/* Pushes vertex v, unless it moved in this pass: a token block with its best gain, a
 * computation block with the bound on its gain (comp_save), which costs no scan of the
 * ranks; the pop finds its exact gain, and only for the vertices that reach the top. */
static dcp_status_t refresh(fm_t *f, int64_t v)
{
    if (f->locked[v]) return DCP_OK;
    double g;
    int32_t to;
    if (v < f->ncomp)
        g = comp_save(f->r, v);
    else if (!best_move(f, v, &g, &to))
        return DCP_OK;
    if (g == f->key[v]) return DCP_OK; /* its live entry already says so */
    f->key[v] = g;
    return heap_push(f, g, v);
}

/* Pushes the members and the owner block of net e again. */
static dcp_status_t refresh_net(fm_t *f, int64_t e)
{
    const dcp_hypergraph_t *g = f->r->g;
    for (int64_t i = g->net_off[e]; i < g->net_off[e + 1]; i++)
        DCP_CHECK(refresh(f, g->members[i]));
    return refresh(f, f->ncomp + dcp_net_block(g, e));
}

/* Vertices whose gains moving v from rank `from` may have changed. A computation block's
 * move changes its nets' other gains only where a count on `from` fell to 0 or 1, or one on
 * its new rank rose to 1 or 2; a token block's move changes the gain of every member of its
 * nets (their owner moved). */
static dcp_status_t refresh_around(fm_t *f, int64_t v, int32_t from)
{
    const dcp_refiner_t *r = f->r;
    if (v < f->ncomp) {
        int64_t nets[DCP_MAX_COMP_NETS];
        const int n = dcp_comp_nets(r->b, v, nets);
        const int32_t to = r->exec[v];
        for (int k = 0; k < n; k++)
            if (*dcp_refiner_cell(r, nets[k], from) <= 1 || *dcp_refiner_cell(r, nets[k], to) <= 2)
                DCP_CHECK(refresh_net(f, nets[k]));
        return DCP_OK;
    }
    const int32_t t = (int32_t)(v - f->ncomp);
    for (int32_t side = 0; side < r->g->num_sides; side++)
        for (int32_t h = 0; h < r->b->head_blocks; h++)
            DCP_CHECK(refresh_net(f, dcp_blk_net(r->g, side, t, h)));
    return DCP_OK;
}

/* One pass; *gain_out is what it kept (>= 0: moves after the best prefix are undone). */
static dcp_status_t pass(fm_t *f, double *gain_out)
{
    memset(f->locked, 0, (size_t)f->nv);
    for (int64_t v = 0; v < f->nv; v++) f->key[v] = NAN;
    f->heap_n = f->log_n = 0;
    for (int64_t v = 0; v < f->nv; v++) DCP_CHECK(refresh(f, v));
    const int64_t window = FM_WINDOW + f->nv / 100;
    double sum = 0, best = 0;
    int64_t best_n = 0;
    while (f->heap_n > 0 && f->log_n - best_n < window) {
        const entry_t e = heap_pop(f);
        double g;
        int32_t to;
        if (f->locked[e.v] || e.gain != f->key[e.v]) continue; /* moved, or a superseded entry */
        f->key[e.v] = NAN;
        if (!best_move(f, e.v, &g, &to)) continue;
        if (g < e.gain - FM_EPS) { /* stale: its gain fell since it was pushed */
            f->key[e.v] = g;
            DCP_CHECK(heap_push(f, g, e.v));
            continue;
        }
        const int32_t from = where(f, e.v);
        f->log_v[f->log_n] = e.v;
        f->log_from[f->log_n++] = from;
        apply(f, e.v, to);
        f->locked[e.v] = 1;
        sum += g;
        if (sum > best + FM_EPS) {
            best = sum;
            best_n = f->log_n;
        }
        DCP_CHECK(refresh_around(f, e.v, from));
    }
    while (f->log_n > best_n) { /* back to the best prefix */
        f->log_n--;
        apply(f, f->log_v[f->log_n], f->log_from[f->log_n]);
    }
    *gain_out = best;
    return DCP_OK;
}

dcp_status_t dcp_refine_fm(dcp_refiner_t *r)
{
    fm_t f = {.r = r, .ncomp = r->g->num_comps, .nv = r->g->num_comps + r->b->num_blocks};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&f.locked, f.nv, 1, "fm"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&f.key, f.nv, sizeof *f.key, "fm"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&f.log_v, f.nv, sizeof *f.log_v, "fm"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&f.log_from, f.nv, sizeof *f.log_from, "fm"), st, out);
    double total = 0;
    for (int i = 0; i < FM_PASSES; i++) {
        double gain = 0; /* (set by pass(); GCC at -O1 cannot see it) */
        DCP_CHECK_GOTO(pass(&f, &gain), st, out);
        total += gain;
        if (gain <= FM_EPS || gain < FM_TAIL * total) break;
    }
out:
    free(f.locked);
    free(f.key);
    free(f.log_v);
    free(f.log_from);
    free(f.heap);
    return st;
}
