/*
 * The layer kinds of a plan: one view per kind after the first, made when the plan is made
 * or loaded (and freed with it, plan.c). A view is a dcp_plan_t whose shared fields (blocks,
 * owners, rows, buffers, items, the serial that contexts bind by) are the plan's, copied in by
 * dcp_plan_kinds_sync() once they are final, and whose own fields are its kind's: masks, pass
 * ranges, programs (prog_off points at them), statistics, fingerprint. Executor, cost model,
 * simulator and statistics read one kind's programs through its view unchanged. Also: the cost
 * of going from one plan's token layout to another's (dcp_kinds_relayout_ms).
 */
#include "include/base/error.h"
#include "partition/plan/plan.h"

#include <stdlib.h>
#include <string.h>

dcp_status_t dcp_plan_kinds_alloc(dcp_plan_t *p, int32_t num_kinds)
{
    p->num_kinds = num_kinds;
    if (num_kinds < 2) return DCP_OK;
    DCP_CHECK(dcp_calloc(&p->views, num_kinds, sizeof *p->views, "plan kinds"));
    p->views[0] = p;
    for (int32_t k = 1; k < num_kinds; k++) {
        DCP_CHECK(dcp_plan_alloc(&p->views[k]));
        p->views[k]->kind = k;
        p->views[k]->root = p;
        p->views[k]->num_kinds = num_kinds;
        p->views[k]->layers = 1;
    }
    return DCP_OK;
}

void dcp_plan_kinds_sync(dcp_plan_t *p)
{
    for (int32_t k = 1; k < p->num_kinds && p->views; k++) {
        dcp_plan_t *v = p->views[k];
        const dcp_plan_t own = *v;
        *v = *p;
        v->seqs = own.seqs;
        v->custom_ranges = own.custom_ranges;
        v->custom_ints = own.custom_ints;
        memcpy(v->pass_xfer, own.pass_xfer, sizeof v->pass_xfer);
        memcpy(v->pass_phase, own.pass_phase, sizeof v->pass_phase);
        v->rank_stats = own.rank_stats;
        v->stats = own.stats;
        v->kind = k;
        v->layers = own.layers;
        v->views = NULL;
        v->root = p;
        v->prog_off = p->prog_off + (int64_t)k * DCP_PASS_COUNT * p->num_ranks;
        /* ranks that run different kinds of one plan must not pair their transfers */
        v->fingerprint = p->fingerprint ^ ((uint32_t)k * 0x85EBCA6Bu);
    }
}

dcp_status_t dcp_plan_kind(const dcp_plan_t *plan, int32_t kind, const dcp_plan_t **view_out)
{
    if (!plan || !view_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", plan ? "view_out" : "plan");
    const dcp_plan_t *r = dcp_plan_root(plan);
    if (kind < 0 || kind >= r->num_kinds)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "kind = %d, the plan has %d layer kind%s", kind,
                             r->num_kinds, r->num_kinds == 1 ? "" : "s");
    *view_out = r->views ? r->views[kind] : r;
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
