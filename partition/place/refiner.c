#include "partition/place/refiner.h"

#include "include/base/error.h"

#include <stdlib.h>

static void reader_on(dcp_refiner_t *r, int64_t e, int32_t rank)
{
    r->readers[e]++;
    r->rmask[e * r->words + rank / 64] |= (uint64_t)1 << (rank % 64);
}

static void reader_off(dcp_refiner_t *r, int64_t e, int32_t rank)
{
    r->readers[e]--;
    r->rmask[e * r->words + rank / 64] &= ~((uint64_t)1 << (rank % 64));
}

dcp_status_t dcp_refiner_init(dcp_refiner_t *r, const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                              const dcp_place_in_t *in, double tol, dcp_placement_t *p, int *ok_out)
{
    const dcp_cluster_t *c = in->cluster;
    *ok_out = 0;
    if (g->num_nets * c->num_ranks > DCP_REFINE_MAX_CELLS) return DCP_OK;
    dcp_refiner_t x = {.b = b,
                       .g = g,
                       .nr = c->num_ranks,
                       .devs = c->devs_per_node,
                       .ib_intra = 1e-9 / c->perf.intra_gbps,
                       .ib_inter = 1e-9 / c->perf.inter_gbps,
                       .words = (c->num_ranks + 63) / 64,
                       .kinds = dcp_blocks_kinds(b),
                       .owner = p->blk_owner,
                       .exec = p->comp_exec};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&x.cnt, g->num_nets * x.nr, sizeof(int32_t), "refine"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&x.readers, g->num_nets, sizeof(int32_t), "refine"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&x.rmask, g->num_nets * x.words, sizeof(uint64_t), "refine"), st,
                   err);
    DCP_CHECK_GOTO(dcp_place_loads(b, p, x.nr, &x.flops, &x.mem), st, err);
    for (int64_t cc = 0; cc < g->num_comps; cc++) {
        int64_t nets[DCP_MAX_COMP_NETS];
        const int n = dcp_comp_nets(b, cc, nets);
        for (int k = 0; k < n; k++)
            if ((*dcp_refiner_cell(&x, nets[k], x.exec[cc]))++ == 0)
                reader_on(&x, nets[k], x.exec[cc]);
    }
    dcp_place_bounds(b, x.nr, tol, 1, x.bound_flops, &x.bound_mem);
    const int64_t cap = in->opts->mem_cap_bytes;
    if (cap > 0 && (double)cap < x.bound_mem) x.bound_mem = (double)cap;
    *r = x;
    *ok_out = 1;
    return DCP_OK;
err:
    dcp_refiner_release(&x);
    return st;
}

void dcp_refiner_release(dcp_refiner_t *r)
{
    free(r->cnt);
    free(r->readers);
    free(r->rmask);
    r->rmask = NULL;
    free(r->flops);
    free(r->mem);
    r->cnt = r->readers = NULL;
    r->flops = r->mem = NULL;
}

double dcp_refiner_comp_delta(const dcp_refiner_t *r, int64_t c, int32_t to)
{
    const int32_t from = r->exec[c];
    int64_t nets[DCP_MAX_COMP_NETS];
    const int n = dcp_comp_nets(r->b, c, nets);
    double d = 0;
    for (int k = 0; k < n; k++) {
        const int32_t o = r->owner[dcp_net_block(r->g, nets[k])];
        const double w = (double)r->g->weight[nets[k]];
        if (from != o && *dcp_refiner_cell(r, nets[k], from) == 1)
            d -= w * dcp_refiner_inv_bw(r, o, from);
        if (to != o && *dcp_refiner_cell(r, nets[k], to) == 0)
            d += w * dcp_refiner_inv_bw(r, o, to);
    }
    return d;
}

void dcp_refiner_comp_move(dcp_refiner_t *r, int64_t c, int32_t to)
{
    int64_t nets[DCP_MAX_COMP_NETS];
    const int n = dcp_comp_nets(r->b, c, nets);
    const int32_t from = r->exec[c];
    for (int k = 0; k < n; k++) {
        if (--(*dcp_refiner_cell(r, nets[k], from)) == 0) reader_off(r, nets[k], from);
        if ((*dcp_refiner_cell(r, nets[k], to))++ == 0) reader_on(r, nets[k], to);
    }
    for (int32_t k = 0; k < r->kinds; k++) {
        const int64_t f = dcp_refiner_comp_flops(r, c, k);
        r->flops[(int64_t)k * r->nr + from] -= f;
        r->flops[(int64_t)k * r->nr + to] += f;
    }
    r->exec[c] = to;
}

/* A net's cost with owner o: its readers other than o, each over o's link to it. Only o's
 * node is scanned: the readers outside it are the rest of the net's reader count. */
static double net_cost(const dcp_refiner_t *r, int64_t e, int32_t o)
{
    const int32_t n0 = o / r->devs * r->devs;
    int32_t near = 0;
    for (int32_t p = n0; p < n0 + r->devs; p++) near += *dcp_refiner_cell(r, e, p) > 0;
    near -= *dcp_refiner_cell(r, e, o) > 0;
    const int32_t far = r->readers[e] - near - (*dcp_refiner_cell(r, e, o) > 0);
    return (double)r->g->weight[e] * (near * r->ib_intra + far * r->ib_inter);
}

double dcp_refiner_blk_cost(const dcp_refiner_t *r, int32_t t, int32_t o)
{
    double cost = 0;
    for (int32_t side = 0; side < r->g->num_sides; side++)
        for (int32_t h = 0; h < r->b->head_blocks; h++)
            cost += net_cost(r, dcp_blk_net(r->g, side, t, h), o);
    return cost;
}

void dcp_refiner_blk_move(dcp_refiner_t *r, int32_t t, int32_t to)
{
    const int64_t bytes = dcp_refiner_blk_bytes(r, t);
    r->mem[r->owner[t]] -= bytes;
    r->mem[to] += bytes;
    r->owner[t] = to;
}

int dcp_refiner_blk_read_by(const dcp_refiner_t *r, int32_t t, int32_t rank)
{
    const uint64_t bit = (uint64_t)1 << (rank % 64);
    for (int32_t side = 0; side < r->g->num_sides; side++)
        for (int32_t h = 0; h < r->b->head_blocks; h++)
            if (dcp_refiner_mask(r, dcp_blk_net(r->g, side, t, h))[rank / 64] & bit) return 1;
    return 0;
}
