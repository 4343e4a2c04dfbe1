#include "partition/place/refine_even.h"
#include "partition/place/refine_fm.h"
#include "partition/place/refiner.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A rank's computation blocks: those moved in are appended, those moved out stay and are
 * skipped (their executor is no longer the rank). */
typedef struct {
    int64_t *c;
    int64_t n, cap;
} comp_list_t;

typedef struct {
    dcp_refiner_t *r;
    const double *comp_s; /* [comps]: seconds a step of each computation block */
    comp_list_t *lists;   /* [nr] */
    double *load;         /* [nr]: seconds of kernels a training step */
    uint8_t *stuck;       /* [nr]: no block of the rank fits anywhere */
    int64_t moves;
} even_t;

/* The most loaded of v[lo..hi) not marked in skip (NULL: none), or -1. */
static int32_t most_in(const double *v, const uint8_t *skip, int32_t lo, int32_t hi)
{
    int32_t best = -1;
    for (int32_t i = lo; i < hi; i++)
        if (!(skip && skip[i]) && (best < 0 || v[i] > v[best])) best = i;
    return best;
}

static int32_t least_in(const double *v, int32_t lo, int32_t hi)
{
    int32_t best = lo;
    for (int32_t i = lo + 1; i < hi; i++)
        if (v[i] < v[best]) best = i;
    return best;
}

static dcp_status_t move(even_t *e, int64_t c, int32_t to, double s)
{
    comp_list_t *l = &e->lists[to];
    DCP_CHECK(dcp_reserve(&l->c, &l->cap, l->n + 1, sizeof *l->c, "even"));
    l->c[l->n++] = c;
    e->load[e->r->exec[c]] -= s;
    e->load[to] += s;
    dcp_refiner_comp_move(e->r, c, to);
    e->moves++;
    return DCP_OK;
}

/* Where the moves may go: ranks under `target`; inside a's node, or (node_target > 0) on
 * other nodes, whose nodes stay under node_target. */
typedef struct {
    double target, node_target;
    const double *node_load; /* [nodes], with node_target > 0 */
} bounds_t;

/* 1 when moving s seconds of kernels off rank a to rank `to` keeps `to` within the bounds. */
static int move_fits(const even_t *e, int32_t a, int32_t to, double s, const bounds_t *x)
{
    const int32_t devs = e->r->devs;
    if (to < 0 || to == a || e->load[to] + s > x->target) return 0;
    if (x->node_target > 0)
        return to / devs != a / devs && x->node_load[to / devs] + s <= x->node_target;
    return to / devs == a / devs;
}

/* The move off rank a that costs least link time per second of kernels moved, to the block's
 * Q or KV owner or to `extra`, within the bounds. *c_out = -1 when none fits; ties keep the
 * first block in a's list and the first target. */
static void best_move(const even_t *e, int32_t a, int32_t extra, const bounds_t *x, int64_t *c_out,
                      int32_t *to_out, double *s_out)
{
    const dcp_refiner_t *r = e->r;
    const int32_t hb = r->b->head_blocks;
    double best = INFINITY;
    *c_out = -1;
    for (int64_t i = 0; i < e->lists[a].n; i++) {
        const int64_t c = e->lists[a].c[i], t = c / hb;
        if (r->exec[c] != a || dcp_refiner_comp_flops(r, c, 0) == 0) continue;
        const double s = e->comp_s[c];
        const int32_t cand[3] = {r->owner[r->b->tile_q[t]], r->owner[r->b->tile_kv[t]], extra};
        for (int k = 0; k < 3; k++) {
            if (!move_fits(e, a, cand[k], s, x)) continue;
            const double score = dcp_refiner_comp_delta(r, c, cand[k]) / s;
            if (score < best) best = score, *c_out = c, *to_out = cand[k], *s_out = s;
        }
    }
}

/* Inside node `node`: its busiest rank gives blocks to ranks of the node under `target`. */
static dcp_status_t even_inside(even_t *e, int32_t node, double target)
{
    const int32_t lo = node * e->r->devs, hi = lo + e->r->devs;
    const bounds_t x = {target, 0, NULL};
    for (int64_t guard = 0; guard < e->r->g->num_comps; guard++) {
        const int32_t a = most_in(e->load, e->stuck, lo, hi);
        if (a < 0 || e->load[a] <= target) break;
        int64_t c;
        int32_t to;
        double s;
        best_move(e, a, least_in(e->load, lo, hi), &x, &c, &to, &s);
        if (c < 0)
            e->stuck[a] = 1;
        else
            DCP_CHECK(move(e, c, to, s));
    }
    return DCP_OK;
}

/* Between nodes: while the busiest node passes node_target, its busiest rank gives blocks to
 * ranks of other nodes under both targets. */
static dcp_status_t even_across(even_t *e, double target, double node_target)
{
    const int32_t devs = e->r->devs, nodes = e->r->nr / devs;
    double *node_load;
    uint8_t *node_stuck = NULL;
    dcp_status_t st;
    DCP_CHECK(dcp_calloc(&node_load, nodes, sizeof *node_load, "even"));
    DCP_CHECK_GOTO(dcp_calloc(&node_stuck, nodes, sizeof *node_stuck, "even"), st, out);
    const bounds_t x = {target, node_target, node_load};
    for (int64_t guard = 0; guard < e->r->g->num_comps; guard++) {
        memset(node_load, 0, (size_t)nodes * sizeof *node_load);
        for (int32_t i = 0; i < e->r->nr; i++) node_load[i / devs] += e->load[i];
        const int32_t n = most_in(node_load, node_stuck, 0, nodes);
        if (n < 0 || node_load[n] <= node_target) break;
        const int32_t a = most_in(e->load, e->stuck, n * devs, (n + 1) * devs);
        if (a < 0) {
            node_stuck[n] = 1;
            continue;
        }
        const int32_t ln = least_in(node_load, 0, nodes);
        int64_t c;
        int32_t to;
        double s;
        best_move(e, a, least_in(e->load, ln * devs, (ln + 1) * devs), &x, &c, &to, &s);
        if (c < 0)
            e->stuck[a] = 1;
        else
            DCP_CHECK_GOTO(move(e, c, to, s), st, out);
    }
    memset(e->stuck, 0, (size_t)e->r->nr * sizeof *e->stuck); /* the nodes' turn: all again */
    st = DCP_OK;
out:
    free(node_load);
    free(node_stuck);
    return st;
}

static int64_t most_flops(const int64_t *f, int32_t n)
{
    int64_t m = 0;
    for (int32_t i = 0; i < n; i++) m = f[i] > m ? f[i] : m;
    return m;
}

dcp_status_t dcp_refine_even(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                             const dcp_place_in_t *in, double tol, int across, const double *comp_s,
                             const double *fixed_s, dcp_placement_t *p, int *moved_out)
{
    *moved_out = 0;
    if (dcp_blocks_kinds(b) > 1 || !dcp_blocks_balances(b, 0)) return DCP_OK;
    dcp_refiner_t r;
    int ok;
    DCP_CHECK(dcp_refiner_init(&r, b, g, in, in->opts->eps_intra, p, &ok));
    if (!ok) return DCP_OK;
    const int32_t nr = r.nr, devs = r.devs, nodes = nr / devs;
    even_t e = {.r = &r, .comp_s = comp_s};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&e.lists, nr, sizeof *e.lists, "even"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.load, nr, sizeof *e.load, "even"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&e.stuck, nr, sizeof *e.stuck, "even"), st, out);
    for (int64_t c = 0; c < g->num_comps; c++) {
        comp_list_t *l = &e.lists[r.exec[c]];
        DCP_CHECK_GOTO(dcp_reserve(&l->c, &l->cap, l->n + 1, sizeof *l->c, "even"), st, out);
        l->c[l->n++] = c;
        e.load[r.exec[c]] += comp_s[c];
    }
    double total = 0;
    for (int32_t i = 0; i < nr; i++) {
        e.load[i] += fixed_s ? fixed_s[i] : 0;
        total += e.load[i];
    }
    if (across && nodes > 1)
        DCP_CHECK_GOTO(even_across(&e, (1 + tol) * total / nr, (1 + tol) * total / nodes), st, out);
    for (int32_t n = 0; n < nodes; n++) {
        double node = 0;
        for (int32_t i = n * devs; i < (n + 1) * devs; i++) node += e.load[i];
        DCP_CHECK_GOTO(even_inside(&e, n, (1 + tol) * fmax(total / nr, node / devs)), st, out);
    }
    st = DCP_OK;
    if (e.moves > 0) {
        *moved_out = 1;
        /* FM keeps every rank's FLOPs under eps_intra's bound and the busiest rank's after
         * the moves */
        r.bound_flops[0] = fmin(r.bound_flops[0], (double)most_flops(r.flops, nr));
        st = dcp_refine_fm(&r);
    }
out:
    for (int32_t i = 0; e.lists && i < nr; i++) free(e.lists[i].c);
    free(e.lists);
    free(e.load);
    free(e.stuck);
    dcp_refiner_release(&r);
    return st;
}
