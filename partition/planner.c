/*
 * The planning pipeline: batch -> blocks -> placement -> one schedule per pass -> programs of
 * both passes -> a finished plan (partition/plan.c). Both passes share the placement, whose
 * vertex and net weights count a whole training step, so one plan serves forward and
 * backward.
 */
#include "include/base/error.h"
#include "partition/cost.h"
#include "partition/place.h"
#include "partition/plan.h"
#include "partition/program.h"
#include "partition/wire.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void dcp_plan_options_default(dcp_plan_options_t *opts_out)
{
    if (!opts_out) return;
    *opts_out = (dcp_plan_options_t){
        .block_size = 1024,
        .head_blocks = 1,
        .divisions = 4,
        .strategy = DCP_STRATEGY_METIS,
        .eps_inter = 0.05,
        .eps_intra = 0.05,
        .mem_cap_bytes = 0,
        .seed = 0,
        .expansion = DCP_EXPAND_CLIQUE,
        .net_cap = 12,
        .refine = 1,
        .comm_schedule = DCP_COMM_DIVISIONS,
        .coalesce = 1,
        .metis_tries = 2,
    };
}

/* Largest division count accepted; more would only add empty launches. */
#define DCP_MAX_DIVISIONS 1024

static dcp_status_t check_options(const dcp_plan_options_t *o)
{
    if (o->divisions < 1 || o->divisions > DCP_MAX_DIVISIONS)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.divisions = %d, must be in [1, %d]",
                             o->divisions, DCP_MAX_DIVISIONS);
    if (!dcp_strategy_ops(o->strategy) && o->strategy != DCP_STRATEGY_AUTO)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.strategy = %d is not a strategy",
                             (int)o->strategy);
    if (!(o->eps_inter >= 0) || !isfinite(o->eps_inter))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.eps_inter = %g, must be >= 0",
                             o->eps_inter);
    if (!(o->eps_intra >= 0) || !isfinite(o->eps_intra))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.eps_intra = %g, must be >= 0",
                             o->eps_intra);
    if (o->mem_cap_bytes < 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.mem_cap_bytes = %lld, must be >= 0",
                             (long long)o->mem_cap_bytes);
    if (o->expansion != DCP_EXPAND_CLIQUE && o->expansion != DCP_EXPAND_STAR)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.expansion = %d is not a dcp_expansion_t",
                             (int)o->expansion);
    if (o->net_cap < 0 || o->net_cap == 1 || o->net_cap > 4096)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.net_cap = %d, must be 0 (no cap) or in [2, 4096]",
                             o->net_cap);
    if (o->refine != 0 && o->refine != 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.refine = %d, must be 0 or 1", o->refine);
    if (o->comm_schedule != DCP_COMM_DIVISIONS && o->comm_schedule != DCP_COMM_ROUNDS)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.comm_schedule = %d is not a dcp_comm_schedule_t",
                             (int)o->comm_schedule);
    if (o->coalesce < 1 || o->coalesce > 65536)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.coalesce = %d, must be in [1, 65536]",
                             o->coalesce);
    if (o->metis_tries < 1 || o->metis_tries > DCP_MAX_METIS_TRIES)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.metis_tries = %d, must be in [1, %d]",
                             o->metis_tries, DCP_MAX_METIS_TRIES);
    return DCP_OK;
}

static dcp_status_t copy_i32(int32_t **dst, const int32_t *src, int64_t n, const char *what)
{
    DCP_CHECK(dcp_calloc(dst, n, sizeof(int32_t), what));
    if (n > 0) memcpy(*dst, src, (size_t)n * sizeof(int32_t));
    return DCP_OK;
}

/* Copies the inputs and the token blocks with their owners into the plan. */
static dcp_status_t plan_take_inputs(dcp_plan_t *p, const dcp_blocks_t *b,
                                     const dcp_placement_t *pl)
{
    p->shape = b->shape;
    p->qpg = b->qpg;
    p->kvpg = b->kvpg;
    p->num_seqs = b->num_seqs;
    DCP_CHECK(dcp_calloc(&p->seqs, b->num_seqs, sizeof *p->seqs, "plan sequences"));
    memcpy(p->seqs, b->seqs, (size_t)b->num_seqs * sizeof *p->seqs);
    DCP_CHECK(copy_i32(&p->custom_ranges, b->custom_ranges, b->custom_ints, "plan ranges"));
    p->custom_ints = b->custom_ints;
    for (int32_t s = 0; s < p->num_seqs; s++)
        if (p->seqs[s].mask.kind == DCP_MASK_CUSTOM)
            p->seqs[s].mask.ranges = p->custom_ranges + (b->seqs[s].mask.ranges - b->custom_ranges);
    p->num_blocks = b->num_blocks;
    DCP_CHECK(copy_i32(&p->blk_seq, b->blk_seq, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_start, b->blk_start, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_len, b->blk_len, b->num_blocks, "plan blocks"));
    DCP_CHECK(copy_i32(&p->blk_owner, pl->blk_owner, b->num_blocks, "plan blocks"));
    return DCP_OK;
}

/* The second half: schedules of both passes, programs, the finished plan. */
static dcp_status_t plan_build(dcp_plan_t *p, const dcp_placed_t *x, const dcp_cluster_t *cluster)
{
    dcp_schedule_t s[DCP_PASS_COUNT] = {{0}};
    const dcp_schedule_t *const sp[DCP_PASS_COUNT] = {&s[0], &s[1]};
    dcp_status_t st;
    for (int k = 0; k < DCP_PASS_COUNT; k++)
        DCP_CHECK_GOTO(dcp_schedule_build(&x->b, &x->pl, cluster->num_ranks, p->opts.divisions,
                                          p->opts.comm_schedule, p->opts.coalesce, (dcp_pass_t)k,
                                          &s[k]),
                       st, out);
    p->fallback = x->pl.fallback;
    DCP_CHECK_GOTO(plan_take_inputs(p, &x->b, &x->pl), st, out);
    DCP_CHECK_GOTO(dcp_plan_derive_rows(p), st, out);
    DCP_CHECK_GOTO(dcp_program_emit(p, &x->b, &x->pl, sp), st, out);
    DCP_CHECK_GOTO(dcp_plan_finish(p, 0), st, out);
out:
    for (int k = 0; k < DCP_PASS_COUNT; k++) dcp_schedule_release(&s[k]);
    return st;
}

static dcp_status_t plan_placed(const dcp_placed_t *x, const dcp_cluster_t *cluster,
                                dcp_plan_t **plan_out)
{
    dcp_plan_t *p;
    DCP_CHECK(dcp_plan_alloc(&p));
    p->num_ranks = cluster->num_ranks;
    p->num_nodes = cluster->num_nodes;
    p->devs_per_node = cluster->devs_per_node;
    p->perf = cluster->perf;
    p->opts = x->opts;
    const dcp_status_t st = plan_build(p, x, cluster);
    if (st != DCP_OK) {
        dcp_plan_destroy(p);
        return st;
    }
    *plan_out = p;
    return DCP_OK;
}

static dcp_status_t plan_one(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                             const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                             dcp_plan_t **plan_out)
{
    dcp_placed_t x = {0};
    dcp_status_t st = dcp_place_batch(batch, shape, o, cluster, &x);
    if (st == DCP_OK) st = plan_placed(&x, cluster, plan_out);
    dcp_placed_release(&x);
    return st;
}

/* Predicted time of a training step's attention: the forward and the backward. */
static double step_ms(const dcp_plan_t *p)
{
    return p->stats.predicted_ms + p->stats.bwd_predicted_ms;
}

/* 1 when plan a is predicted no slower than plan b, forward and training step alike. */
static int no_slower(const dcp_plan_t *a, const dcp_plan_t *b)
{
    return a->stats.predicted_ms <= b->stats.predicted_ms && step_ms(a) <= step_ms(b);
}

/* Keeps in *best the plan predicted faster per training step, *best on a tie, and destroys
 * the other. */
static void keep_faster(dcp_plan_t **best, dcp_plan_t *p)
{
    if (!*best || step_ms(p) < step_ms(*best)) {
        dcp_plan_destroy(*best);
        *best = p;
    } else {
        dcp_plan_destroy(p);
    }
}

/* Lower bounds of the forward and training-step times the cost model can predict for a
 * baseline's plans (dcp_cost_chunked_floor, dcp_cost_floor). */
typedef struct {
    double fwd, step;
} floor_t;

/* 1 when a placement with floor f cannot make a plan predicted faster than p, forward or
 * step (with a margin for the floor's rounding: it sums in another order than the
 * prediction). */
static int floor_not_faster(floor_t f, const dcp_plan_t *p)
{
    const double m = 1.0 - 1e-9;
    return f.fwd * m >= p->stats.predicted_ms && f.step * m >= step_ms(p);
}

/* METIS's plan: options.metis_tries placements with seeds seed, seed + 1, ..., and the plan
 * predicted fastest per training step (ties: the earlier seed). One METIS run's predicted
 * step varies by 10-20% with its seed, and a try costs a few milliseconds once the device
 * level partitions rows (place_metis.c), so trying two and keeping the better is the cheapest
 * quality there is. The plan's options carry the seed that made it. */
static dcp_status_t plan_metis_tries(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                     const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                                     dcp_plan_t **plan_out)
{
    dcp_plan_t *best = NULL;
    for (int32_t k = 0; k < o->metis_tries; k++) {
        dcp_plan_options_t t = *o;
        t.seed = o->seed + (uint64_t)k;
        dcp_plan_t *p = NULL;
        const dcp_status_t st = plan_one(batch, shape, &t, cluster, &p);
        if (st != DCP_OK) {
            dcp_plan_destroy(best);
            return st;
        }
        keep_faster(&best, p);
    }
    *plan_out = best;
    return DCP_OK;
}

/* DCP_STRATEGY_METIS, never predicted slower than the zigzag baseline, forward or training
 * step: METIS's plan is kept only when it is no slower than zigzag's on both, else zigzag's
 * plan is returned. Zigzag is built only where it might win, in steps of rising cost:
 *  1. its chunked floor (dcp_cost_chunked_floor: O(sequences), from the batch alone) -
 *     zigzag's thin chunks of short sequences compute at low efficiency, so on most batches
 *     this alone rules it out and zigzag is never placed;
 *  2. its placement's floor (dcp_cost_floor: compute and link time);
 *  3. its plan.
 * Each floor is a lower bound of what the cost model can predict for zigzag, so a skipped
 * step could never have changed the choice. */
static dcp_status_t plan_metis(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                               dcp_plan_t **plan_out)
{
    dcp_plan_t *plan[2] = {NULL, NULL}; /* METIS, zigzag */
    DCP_CHECK(plan_metis_tries(batch, shape, o, cluster, &plan[0]));
    const double f =
        dcp_cost_chunked_floor(plan[0], dcp_strategy_zigzag.chunks(cluster->num_ranks));
    /* the backward's tiles: 2.5x the forward's FLOPs, at bwd_speed x its rate */
    floor_t fl = {f, (1.0 + 2.5 / cluster->perf.bwd_speed) * f};
    dcp_status_t st = DCP_OK;
    if (!floor_not_faster(fl, plan[0])) {
        dcp_plan_options_t zo = *o;
        zo.strategy = DCP_STRATEGY_ZIGZAG;
        dcp_placed_t x = {0};
        double fwd = 0, bwd = 0;
        st = dcp_place_batch(batch, shape, &zo, cluster, &x);
        if (st == DCP_OK) st = dcp_cost_floor(&x.b, &x.pl, cluster, &fwd, &bwd);
        if (st == DCP_OK) {
            fl = (floor_t){fmax(fl.fwd, fwd), fmax(fl.step, fwd + bwd)};
            if (!floor_not_faster(fl, plan[0])) st = plan_placed(&x, cluster, &plan[1]);
        } else if (st == DCP_ERR_CAPACITY) {
            st = DCP_OK; /* zigzag does not fit the cap or the planning limit */
        }
        dcp_placed_release(&x);
    }
    if (st != DCP_OK) {
        dcp_plan_destroy(plan[0]);
        dcp_plan_destroy(plan[1]);
        return st;
    }
    const int keep = !plan[1] || no_slower(plan[0], plan[1]) ? 0 : 1;
    dcp_plan_destroy(plan[1 - keep]);
    *plan_out = plan[keep];
    return DCP_OK;
}

/* DCP_STRATEGY_AUTO: every concrete strategy at block sizes B/2, B and 2B; the plan with
 * the lowest predicted step time wins (ties: the earlier candidate). */
static dcp_status_t plan_auto(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                              dcp_plan_t **plan_out)
{
    const int32_t blocks[3] = {o->block_size / 2 > 0 ? o->block_size / 2 : 1, o->block_size,
                               o->block_size <= INT32_MAX / 2 ? 2 * o->block_size : o->block_size};
    dcp_plan_t *best = NULL;
    for (int s = 0; s < DCP_STRATEGY_COUNT; s++)
        for (int b = 0; b < 3; b++) {
            if (b > 0 && blocks[b] == blocks[b - 1]) continue;
            dcp_plan_options_t c = *o;
            c.strategy = (dcp_strategy_t)s;
            c.block_size = blocks[b];
            dcp_plan_t *p = NULL;
            const dcp_status_t st = plan_one(batch, shape, &c, cluster, &p);
            if (st == DCP_ERR_CAPACITY) continue; /* this candidate does not fit: others may */
            if (st != DCP_OK) {
                dcp_plan_destroy(best);
                return st;
            }
            keep_faster(&best, p);
        }
    if (!best)
        return dcp_set_error(DCP_ERR_CAPACITY,
                             "options.mem_cap_bytes = %lld: no strategy fits the batch",
                             (long long)o->mem_cap_bytes);
    *plan_out = best;
    return DCP_OK;
}

dcp_status_t dcp_plan_check_args(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                 const dcp_plan_options_t *opts)
{
    DCP_CHECK(check_options(opts));
    return dcp_blocks_check(batch, shape, opts->block_size, opts->head_blocks);
}

dcp_status_t dcp_plan_create(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                             const dcp_plan_options_t *opts, const dcp_cluster_t *cluster,
                             dcp_plan_t **plan_out)
{
    const double t0 = dcp_now();
    if (!cluster || !plan_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", cluster ? "plan_out" : "cluster");
    dcp_plan_options_t o;
    if (opts)
        o = *opts;
    else
        dcp_plan_options_default(&o);
    DCP_CHECK(check_options(&o));
    dcp_plan_t *p = NULL;
    if (o.strategy == DCP_STRATEGY_AUTO)
        DCP_CHECK(plan_auto(batch, shape, &o, cluster, &p));
    else if (o.strategy == DCP_STRATEGY_METIS)
        DCP_CHECK(plan_metis(batch, shape, &o, cluster, &p));
    else
        DCP_CHECK(plan_one(batch, shape, &o, cluster, &p));
    p->stats.plan_ms = (dcp_now() - t0) * 1e3;
    *plan_out = p;
    return DCP_OK;
}
