/*
 * A placement made a plan (every layer kind's schedules and programs, finished) and plans
 * judged by the step-time simulator (candidate.h).
 */
#include "partition/candidate.h"

#include "include/base/error.h"
#include "partition/program/program.h"
#include "partition/sim/simulate.h"

#include <stdlib.h>
#include <string.h>

static dcp_status_t copy_i32(int32_t **dst, const int32_t *src, int64_t n, const char *what)
{
    DCP_CHECK(dcp_calloc(dst, n, sizeof(int32_t), what));
    if (n > 0) memcpy(*dst, src, (size_t)n * sizeof(int32_t));
    return DCP_OK;
}

/* Kind k's sequences (its masks, CUSTOM ranges copied) into its object v. */
static dcp_status_t take_seqs(dcp_plan_t *v, const dcp_blocks_t *b)
{
    DCP_CHECK(dcp_calloc(&v->seqs, b->num_seqs, sizeof *v->seqs, "plan sequences"));
    memcpy(v->seqs, b->seqs, (size_t)b->num_seqs * sizeof *v->seqs);
    DCP_CHECK(copy_i32(&v->custom_ranges, b->custom_ranges, b->custom_ints, "plan ranges"));
    v->custom_ints = b->custom_ints;
    for (int32_t s = 0; s < b->num_seqs; s++)
        if (v->seqs[s].mask.kind == DCP_MASK_CUSTOM)
            v->seqs[s].mask.ranges = v->custom_ranges + (b->seqs[s].mask.ranges - b->custom_ranges);
    return DCP_OK;
}

/* Copies the inputs (every kind's masks and layer count) and the token blocks with their
 * owners into the plan. */
static dcp_status_t plan_take_inputs(dcp_plan_t *p, const dcp_placed_t *x)
{
    const dcp_blocks_t *b = &x->b;
    p->shape = b->shape;
    p->qpg = b->qpg;
    p->kvpg = b->kvpg;
    p->num_seqs = b->num_seqs;
    for (int32_t k = 0; k < p->num_kinds; k++) {
        dcp_plan_t *v = dcp_plan_view(p, k);
        DCP_CHECK(take_seqs(v, dcp_placed_blocks(x, k)));
        v->layers = p->num_kinds > 1 ? b->kind_layers[k] : 1;
    }
    p->num_blocks = b->num_blocks;
    DCP_CHECK(copy_i32(&p->blk_seq, b->blk_seq, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_start, b->blk_start, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_len, b->blk_len, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_owner, x->pl.blk_owner, b->num_blocks, "plan blocks"));
    return DCP_OK;
}

/* Layer kind k's schedules of both passes (in order `order`) and its programs, on its model
 * b and placement pl (the schedule and program builders run once per kind, on the shared
 * placement). */
static dcp_status_t plan_kind(dcp_plan_t *p, int32_t k, const dcp_blocks_t *b,
                              const dcp_placement_t *pl, const dcp_cluster_t *cluster,
                              dcp_order_t order)
{
    dcp_schedule_t s[DCP_PASS_COUNT] = {{0}};
    const dcp_schedule_t *const sp[DCP_PASS_COUNT] = {&s[0], &s[1]};
    dcp_status_t st;
    for (int i = 0; i < DCP_PASS_COUNT; i++) {
        DCP_CHECK_GOTO(dcp_schedule_build(b, pl, cluster->num_ranks, cluster->devs_per_node,
                                          p->opts.divisions, p->opts.comm_schedule,
                                          p->opts.coalesce, (dcp_pass_t)i, order, &s[i]),
                       st, out);
        DCP_CHECK_GOTO(dcp_schedule_relay(cluster->devs_per_node, &s[i]), st, out);
    }
    st = dcp_program_emit(p, k, b, pl, sp);
out:
    for (int i = 0; i < DCP_PASS_COUNT; i++) dcp_schedule_release(&s[i]);
    return st;
}

/* The second half: schedules and programs of every kind, the finished plan. */
static dcp_status_t plan_build(dcp_plan_t *p, const dcp_placed_t *x, const dcp_cluster_t *cluster,
                               dcp_order_t order)
{
    DCP_CHECK(dcp_plan_kinds_alloc(p, x->num_kinds > 1 ? x->num_kinds : 1));
    p->fallback = x->pl.fallback;
    DCP_CHECK(plan_take_inputs(p, x));
    DCP_CHECK(dcp_plan_derive_rows(p));
    for (int32_t k = 0; k < p->num_kinds; k++)
        DCP_CHECK(
            plan_kind(p, k, dcp_placed_blocks(x, k), dcp_placed_placement(x, k), cluster, order));
    return dcp_plan_finish(p, 0);
}

dcp_status_t dcp_plan_divided(const dcp_placed_t *x, const dcp_cluster_t *cluster,
                              int32_t divisions, dcp_order_t order, dcp_plan_t **plan_out)
{
    dcp_plan_t *p;
    DCP_CHECK(dcp_plan_alloc(&p));
    p->num_ranks = cluster->num_ranks;
    p->num_nodes = cluster->num_nodes;
    p->devs_per_node = cluster->devs_per_node;
    p->perf = cluster->perf;
    p->opts = x->opts;
    p->opts.divisions = divisions;
    const dcp_status_t st = plan_build(p, x, cluster, order);
    if (st != DCP_OK) {
        dcp_plan_destroy(p);
        return st;
    }
    *plan_out = p;
    return DCP_OK;
}

dcp_status_t dcp_plan_placed(const dcp_placed_t *x, const dcp_cluster_t *cluster,
                             dcp_plan_t **plan_out)
{
    const int32_t d = x->opts.divisions > 0 ? x->opts.divisions : DCP_DIVISIONS_COMPARED;
    return dcp_plan_divided(x, cluster, d, DCP_ORDER_DEFAULT, plan_out);
}

dcp_status_t dcp_candidate_keep(dcp_candidate_t *best, dcp_plan_t *p, const dcp_cluster_t *cluster)
{
    double ms = 0, exposed = 0;
    const dcp_status_t st = dcp_sim_model_step(p, cluster, &ms, &exposed);
    if (st == DCP_OK && (!best->plan || ms < best->ms)) {
        dcp_plan_destroy(best->plan);
        *best = (dcp_candidate_t){p, ms, DCP_ORDER_DEFAULT, exposed};
    } else {
        dcp_plan_destroy(p);
    }
    return st;
}
