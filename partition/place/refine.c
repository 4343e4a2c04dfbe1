#include "partition/place/refine.h"
#include "partition/place/refine_fm.h"
#include "partition/place/refiner.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>

static int32_t argmax(const int64_t *v, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* Least loaded rank among [lo, hi). */
static int32_t argmin_in(const int64_t *v, int32_t lo, int32_t hi)
{
    int32_t best = lo;
    for (int32_t i = lo + 1; i < hi; i++)
        if (v[i] < v[best]) best = i;
    return best;
}

/* 1 when swapping computation blocks c (on rank a) and d (on rank b) relieves kind k on a and
 * every kind's load that the swap raises, on either rank, stays within its bound. */
static int swap_fits(const dcp_refiner_t *r, int32_t k, int64_t c, int32_t a, int64_t d, int32_t b)
{
    if (dcp_refiner_comp_flops(r, d, k) >= dcp_refiner_comp_flops(r, c, k)) return 0;
    for (int32_t j = 0; j < r->kinds; j++) {
        const int64_t dj = dcp_refiner_comp_flops(r, c, j) - dcp_refiner_comp_flops(r, d, j);
        const int64_t *f = r->flops + (int64_t)j * r->nr;
        if (dj > 0 && (double)(f[b] + dj) > r->bound_flops[j]) return 0;
        if (dj < 0 && (double)(f[a] - dj) > r->bound_flops[j]) return 0;
    }
    return 1;
}

/* With layer kinds, a block that relieves kind k on rank a may fit nowhere whole: its other
 * kinds' FLOPs would pass their bounds on every target once repair has filled them (a
 * diagonal tile of a causal and a window kind carries both). Swapping it for a block of the
 * target that weighs less in kind k moves only the difference; the cheapest such swap with
 * one of the candidate targets. Returns 1 when it swapped. */
static int swap_compute(dcp_refiner_t *r, int32_t k, int32_t a, const int32_t *cand, int ncand)
{
    const int64_t ncomp = r->g->num_comps;
    int64_t best_c = -1, best_d = -1;
    int32_t best_b = -1;
    double best = INFINITY;
    for (int i = 0; i < ncand; i++) {
        const int32_t b = cand[i];
        if (b == a) continue;
        for (int64_t c = 0; c < ncomp; c++) {
            if (r->exec[c] != a || dcp_refiner_comp_flops(r, c, k) == 0) continue;
            const double dc = dcp_refiner_comp_delta(r, c, b);
            if (dc >= best) continue;
            for (int64_t d = 0; d < ncomp; d++) {
                if (r->exec[d] != b || !swap_fits(r, k, c, a, d, b)) continue;
                const double cost = dc + dcp_refiner_comp_delta(r, d, a);
                if (cost < best) best = cost, best_c = c, best_d = d, best_b = b;
            }
        }
    }
    if (best_c < 0) return 0;
    dcp_refiner_comp_move(r, best_c, best_b);
    dcp_refiner_comp_move(r, best_d, a);
    return 1;
}

/* Kind k's compute repair (the model's only kind when it has one): computation blocks with
 * pairs in kind k leave its busiest rank for ranks where they fit every kind's bound, or,
 * with several kinds, are swapped for lighter ones there (swap_compute). */
static void repair_compute(dcp_refiner_t *r, int32_t k)
{
    const int64_t ncomp = r->g->num_comps;
    const int64_t *flops = r->flops + (int64_t)k * r->nr;
    for (int64_t guard = 0; guard < ncomp; guard++) {
        const int32_t a = argmax(flops, r->nr);
        if ((double)flops[a] <= r->bound_flops[k]) return;
        const int32_t node0 = a / r->devs * r->devs;
        const int32_t near = argmin_in(flops, node0, node0 + r->devs),
                      far = argmin_in(flops, 0, r->nr);
        int64_t best_c = -1;
        int32_t best_to = -1;
        double best = INFINITY;
        for (int64_t c = 0; c < ncomp; c++) {
            if (r->exec[c] != a || dcp_refiner_comp_flops(r, c, k) == 0) continue;
            const int64_t t = c / r->b->head_blocks;
            const int32_t cand[4] = {r->owner[r->b->tile_q[t]], r->owner[r->b->tile_kv[t]], near,
                                     far};
            for (int i = 0; i < 4; i++) {
                const int32_t to = cand[i];
                if (to == a || !dcp_refiner_comp_fits(r, c, to)) continue;
                const double d = dcp_refiner_comp_delta(r, c, to);
                if (d < best) {
                    best = d;
                    best_c = c;
                    best_to = to;
                }
            }
        }
        if (best_c >= 0) {
            dcp_refiner_comp_move(r, best_c, best_to);
            continue;
        }
        /* one kind keeps the plans it always had: no swaps */
        const int32_t targets[2] = {near, far};
        if (r->kinds == 1 || !swap_compute(r, k, a, targets, 2))
            return; /* nothing fits anywhere: leave it to validation */
    }
}

/* The cheapest way to take bytes off rank a: move one of its blocks to a rank with room, or,
 * where no block fits anywhere (blocks are coarse), swap one for a smaller block of another
 * rank. Returns 0 when neither exists. */
static int shed_memory(dcp_refiner_t *r, int32_t a)
{
    const double bound = r->bound_mem;
    int32_t best_t = -1, best_to = -1, best_u = -1;
    double best = INFINITY;
    for (int32_t t = 0; t < r->b->num_blocks; t++) {
        if (r->owner[t] != a) continue;
        const double now = dcp_refiner_blk_cost(r, t, a);
        for (int32_t to = 0; to < r->nr; to++) {
            if (to == a || (double)(r->mem[to] + dcp_refiner_blk_bytes(r, t)) > bound) continue;
            const double d = dcp_refiner_blk_cost(r, t, to) - now;
            if (d < best) {
                best = d;
                best_t = t;
                best_to = to;
            }
        }
    }
    if (best_t >= 0) {
        dcp_refiner_blk_move(r, best_t, best_to);
        return 1;
    }
    for (int32_t t = 0; t < r->b->num_blocks; t++) {
        if (r->owner[t] != a) continue;
        const double now_t = dcp_refiner_blk_cost(r, t, a);
        for (int32_t u = 0; u < r->b->num_blocks; u++) {
            const int32_t to = r->owner[u];
            const int64_t gain = dcp_refiner_blk_bytes(r, t) - dcp_refiner_blk_bytes(r, u);
            if (to == a || gain <= 0 || (double)(r->mem[to] + gain) > bound) continue;
            const double d = dcp_refiner_blk_cost(r, t, to) - now_t +
                             dcp_refiner_blk_cost(r, u, a) - dcp_refiner_blk_cost(r, u, to);
            if (d < best) {
                best = d;
                best_t = t;
                best_u = u;
                best_to = to;
            }
        }
    }
    if (best_t < 0) return 0;
    dcp_refiner_blk_move(r, best_t, best_to);
    dcp_refiner_blk_move(r, best_u, a);
    return 1;
}

static void repair_memory(dcp_refiner_t *r)
{
    for (int32_t guard = 0; guard < 4 * r->b->num_blocks; guard++) {
        const int32_t a = argmax(r->mem, r->nr);
        if ((double)r->mem[a] <= r->bound_mem || !shed_memory(r, a)) return;
    }
}

dcp_status_t dcp_refine(const dcp_blocks_t *b, const dcp_hypergraph_t *g, const dcp_place_in_t *in,
                        double tol, dcp_placement_t *p)
{
    dcp_refiner_t r;
    int ok;
    DCP_CHECK(dcp_refiner_init(&r, b, g, in, tol, p, &ok));
    if (!ok) return DCP_OK;
    /* with several kinds, a kind's swaps can push another past its bound: a second round */
    for (int32_t round = 0; round < (r.kinds > 1 ? 2 : 1); round++)
        for (int32_t k = 0; k < r.kinds; k++)
            if (dcp_blocks_balances(b, k)) repair_compute(&r, k);
    repair_memory(&r);
    const dcp_status_t st = dcp_refine_fm(&r);
    dcp_refiner_release(&r);
    return st;
}
