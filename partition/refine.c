#include "partition/refine.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>

/* Dense per-(net, rank) counts cost nets x ranks integers; beyond this, skip refinement. */
#define REFINE_MAX_CELLS ((int64_t)64 << 20)

typedef struct {
    const dcp_blocks_t *b;
    const dcp_hypergraph_t *g;
    int32_t nr, devs;
    double ib_intra, ib_inter; /* seconds per byte */
    int32_t *owner, *exec;
    int32_t *cnt; /* [net * nr + rank] */
    int64_t *flops, *mem;
    double bound_flops, bound_mem;
} refiner_t;

static double inv_bw(const refiner_t *r, int32_t a, int32_t b)
{
    return a / r->devs == b / r->devs ? r->ib_intra : r->ib_inter;
}

static int32_t *cell(const refiner_t *r, int64_t net, int32_t rank)
{
    return &r->cnt[net * r->nr + rank];
}

static int64_t comp_flops(const refiner_t *r, int64_t c)
{
    return dcp_blocks_comp_flops(r->b, c / r->b->head_blocks);
}

static int64_t blk_bytes(const refiner_t *r, int32_t t)
{
    return dcp_blocks_token_bytes(r->b, r->b->blk_len[t]);
}

/* Change of cost when computation block c moves from its rank to rank `to`. */
static double comp_move_cost(const refiner_t *r, int64_t c, int32_t to)
{
    const int32_t from = r->exec[c];
    int64_t nets[2];
    dcp_comp_nets(r->b, c, nets);
    double d = 0;
    for (int k = 0; k < 2; k++) {
        const int32_t o = r->owner[dcp_net_block(r->g, nets[k])];
        const double w = (double)r->g->weight[nets[k]];
        if (from != o && *cell(r, nets[k], from) == 1) d -= w * inv_bw(r, o, from);
        if (to != o && *cell(r, nets[k], to) == 0) d += w * inv_bw(r, o, to);
    }
    return d;
}

static void comp_move(refiner_t *r, int64_t c, int32_t to)
{
    int64_t nets[2];
    dcp_comp_nets(r->b, c, nets);
    const int32_t from = r->exec[c];
    for (int k = 0; k < 2; k++) {
        (*cell(r, nets[k], from))--;
        (*cell(r, nets[k], to))++;
    }
    const int64_t f = comp_flops(r, c);
    r->flops[from] -= f;
    r->flops[to] += f;
    r->exec[c] = to;
}

/* Cost of the nets of token block t if its owner were `o`. */
static double blk_cost(const refiner_t *r, int32_t t, int32_t o)
{
    double cost = 0;
    const int32_t hb = r->b->head_blocks, nb = r->b->num_blocks;
    for (int kind = 0; kind < 2; kind++)
        for (int32_t h = 0; h < hb; h++) {
            const int64_t e = ((int64_t)kind * nb + t) * hb + h;
            for (int32_t p = 0; p < r->nr; p++)
                if (p != o && *cell(r, e, p) > 0) cost += (double)r->g->weight[e] * inv_bw(r, o, p);
        }
    return cost;
}

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

static void repair_compute(refiner_t *r)
{
    const int64_t ncomp = r->g->num_comps;
    for (int64_t guard = 0; guard < ncomp; guard++) {
        const int32_t a = argmax(r->flops, r->nr);
        if ((double)r->flops[a] <= r->bound_flops) return;
        const int32_t node0 = a / r->devs * r->devs;
        const int32_t near = argmin_in(r->flops, node0, node0 + r->devs),
                      far = argmin_in(r->flops, 0, r->nr);
        int64_t best_c = -1;
        int32_t best_to = -1;
        double best = INFINITY;
        for (int64_t c = 0; c < ncomp; c++) {
            if (r->exec[c] != a) continue;
            const int64_t t = c / r->b->head_blocks, f = comp_flops(r, c);
            const int32_t cand[4] = {r->owner[r->b->tile_q[t]], r->owner[r->b->tile_kv[t]], near,
                                     far};
            for (int i = 0; i < 4; i++) {
                const int32_t to = cand[i];
                if (to == a || (double)(r->flops[to] + f) > r->bound_flops) continue;
                const double d = comp_move_cost(r, c, to);
                if (d < best) {
                    best = d;
                    best_c = c;
                    best_to = to;
                }
            }
        }
        if (best_c < 0) return; /* nothing fits anywhere: leave it to validation */
        comp_move(r, best_c, best_to);
    }
}

static void move_block(refiner_t *r, int32_t t, int32_t to)
{
    r->mem[r->owner[t]] -= blk_bytes(r, t);
    r->mem[to] += blk_bytes(r, t);
    r->owner[t] = to;
}

/* The cheapest way to take bytes off rank a: move one of its blocks to a rank with room, or,
 * where no block fits anywhere (blocks are coarse), swap one for a smaller block of another
 * rank. Returns 0 when neither exists. */
static int shed_memory(refiner_t *r, int32_t a, double bound)
{
    int32_t best_t = -1, best_to = -1, best_u = -1;
    double best = INFINITY;
    for (int32_t t = 0; t < r->b->num_blocks; t++) {
        if (r->owner[t] != a) continue;
        const double now = blk_cost(r, t, a);
        for (int32_t to = 0; to < r->nr; to++) {
            if (to == a || (double)(r->mem[to] + blk_bytes(r, t)) > bound) continue;
            const double d = blk_cost(r, t, to) - now;
            if (d < best) {
                best = d;
                best_t = t;
                best_to = to;
            }
        }
    }
    if (best_t >= 0) {
        move_block(r, best_t, best_to);
        return 1;
    }
    for (int32_t t = 0; t < r->b->num_blocks; t++) {
        if (r->owner[t] != a) continue;
        const double now_t = blk_cost(r, t, a);
        for (int32_t u = 0; u < r->b->num_blocks; u++) {
            const int32_t to = r->owner[u];
            const int64_t gain = blk_bytes(r, t) - blk_bytes(r, u);
            if (to == a || gain <= 0 || (double)(r->mem[to] + gain) > bound) continue;
            const double d = blk_cost(r, t, to) - now_t + blk_cost(r, u, a) - blk_cost(r, u, to);
            if (d < best) {
                best = d;
                best_t = t;
                best_u = u;
                best_to = to;
            }
        }
    }
    if (best_t < 0) return 0;
    move_block(r, best_t, best_to);
    move_block(r, best_u, a);
    return 1;
}

static void repair_memory(refiner_t *r, int64_t cap)
{
    const double bound = cap > 0 && (double)cap < r->bound_mem ? (double)cap : r->bound_mem;
    for (int32_t guard = 0; guard < 4 * r->b->num_blocks; guard++) {
        const int32_t a = argmax(r->mem, r->nr);
        if ((double)r->mem[a] <= bound || !shed_memory(r, a, bound)) return;
    }
}

static void reduce_traffic(refiner_t *r)
{
    for (int pass = 0; pass < 2; pass++) {
        int moved = 0;
        for (int64_t c = 0; c < r->g->num_comps; c++) {
            const int64_t t = c / r->b->head_blocks, f = comp_flops(r, c);
            const int32_t cand[2] = {r->owner[r->b->tile_q[t]], r->owner[r->b->tile_kv[t]]};
            int32_t best_to = -1;
            double best = 0;
            for (int i = 0; i < 2; i++) {
                const int32_t to = cand[i];
                if (to == r->exec[c] || (double)(r->flops[to] + f) > r->bound_flops) continue;
                const double d = comp_move_cost(r, c, to);
                if (d < best) {
                    best = d;
                    best_to = to;
                }
            }
            if (best_to >= 0) {
                comp_move(r, c, best_to);
                moved = 1;
            }
        }
        if (!moved) break;
    }
}

/* Moves token blocks to the rank where their nets cost least (exact: every net's readers
 * counted per rank), under the memory bound; each move strictly lowers the cost. Candidate
 * ranks are those that read one of the block's nets. */
static void reduce_owner_traffic(refiner_t *r, int64_t cap)
{
    const double bound = cap > 0 && (double)cap < r->bound_mem ? (double)cap : r->bound_mem;
    const int32_t hb = r->b->head_blocks, nb = r->b->num_blocks;
    for (int pass = 0; pass < 2; pass++) {
        int moved = 0;
        for (int32_t t = 0; t < nb; t++) {
            const int32_t from = r->owner[t];
            const double now = blk_cost(r, t, from);
            if (now <= 0) continue;
            int32_t best_to = -1;
            double best = now;
            for (int32_t to = 0; to < r->nr; to++) {
                if (to == from || (double)(r->mem[to] + blk_bytes(r, t)) > bound) continue;
                int reads = 0;
                for (int kind = 0; kind < 2 && !reads; kind++)
                    for (int32_t h = 0; h < hb && !reads; h++)
                        reads = *cell(r, ((int64_t)kind * nb + t) * hb + h, to) > 0;
                if (!reads) continue;
                const double c = blk_cost(r, t, to);
                if (c < best) {
                    best = c;
                    best_to = to;
                }
            }
            if (best_to >= 0) {
                move_block(r, t, best_to);
                moved = 1;
            }
        }
        if (!moved) break;
    }
}

dcp_status_t dcp_refine(const dcp_blocks_t *b, const dcp_hypergraph_t *g, const dcp_place_in_t *in,
                        double tol, dcp_placement_t *p)
{
    const dcp_cluster_t *c = in->cluster;
    refiner_t r = {.b = b,
                   .g = g,
                   .nr = c->num_ranks,
                   .devs = c->devs_per_node,
                   .ib_intra = 1e-9 / c->perf.intra_gbps,
                   .ib_inter = 1e-9 / c->perf.inter_gbps,
                   .owner = p->blk_owner,
                   .exec = p->comp_exec};
    if (g->num_nets * r.nr > REFINE_MAX_CELLS) return DCP_OK;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&r.cnt, g->num_nets * r.nr, sizeof(int32_t), "refine"), st, out);
    DCP_CHECK_GOTO(dcp_place_loads(b, p, r.nr, &r.flops, &r.mem), st, out);
    for (int64_t cc = 0; cc < g->num_comps; cc++) {
        int64_t nets[2];
        dcp_comp_nets(b, cc, nets);
        (*cell(&r, nets[0], r.exec[cc]))++;
        (*cell(&r, nets[1], r.exec[cc]))++;
    }
    dcp_place_bounds(b, r.nr, tol, 1, &r.bound_flops, &r.bound_mem);
    repair_compute(&r);
    repair_memory(&r, in->opts->mem_cap_bytes);
    reduce_traffic(&r);
    reduce_owner_traffic(&r, in->opts->mem_cap_bytes);
    reduce_traffic(&r);
    reduce_owner_traffic(&r, in->opts->mem_cap_bytes);
    st = DCP_OK;
out:
    free(r.cnt);
    free(r.flops);
    free(r.mem);
    return st;
}
