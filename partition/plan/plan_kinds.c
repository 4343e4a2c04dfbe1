/*
 * The layer kinds of a plan: one view per kind after the first, made when the plan is made
 * or loaded. A view is a dcp_plan_t whose shared fields (blocks, owners, rows, buffers, items,
 * the serial that contexts bind by) are the plan's, copied in by dcp_plan_kinds_sync() once
 * they are final, and whose own fields are its kind's: masks, pass ranges, programs (prog_off
 * points at them), statistics, fingerprint. Executor, cost model, simulator and statistics
 * read one kind's programs through its view unchanged.
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

void dcp_plan_kinds_free(dcp_plan_t *p)
{
    if (!p->views) return;
    for (int32_t k = 1; k < p->num_kinds; k++) {
        dcp_plan_t *v = p->views[k];
        if (!v) continue;
        free(v->seqs);
        free(v->custom_ranges);
        free(v->rank_stats);
        free(v);
    }
    free(p->views);
    p->views = NULL;
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

dcp_status_t dcp_plan_kinds_stats(dcp_plan_t *p)
{
    double model = 0;
    for (int32_t k = 0; k < p->num_kinds; k++) {
        dcp_plan_t *v = dcp_plan_view(p, k);
        DCP_CHECK(dcp_plan_derive_stats(v));
        model += v->layers * (v->stats.predicted_ms + v->stats.bwd_predicted_ms);
    }
    for (int32_t k = 0; k < p->num_kinds; k++) {
        dcp_plan_stats_t *st = &dcp_plan_view(p, k)->stats;
        st->num_kinds = p->num_kinds;
        st->kind = k;
        st->layers = dcp_plan_view(p, k)->layers;
        st->model_step_ms = model;
    }
    return DCP_OK;
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
