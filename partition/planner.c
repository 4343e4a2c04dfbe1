/*
 * The planning pipeline: batch -> blocks -> placement -> one schedule per pass -> programs of
 * both passes -> a finished plan (partition/plan/plan_finish.c). Both passes share the
 * placement, whose vertex and net weights count a whole training step, so one plan serves
 * forward and backward. A batch of layer kinds (partition/model/blocks.h) is placed once and
 * scheduled per kind; plans are compared by the model's step: layers x each kind's forward +
 * backward, summed. Here: the options, the strategies' candidates and the floors that screen
 * them; a placement made a plan and judged in candidate.c; the last choices on the chosen
 * placement (divisions, orders, evened placements) in polish.c.
 */
#include "include/base/error.h"
#include "partition/candidate.h"
#include "partition/cost_floor.h"
#include "partition/kinds.h"
#include "partition/model/mask.h"
#include "partition/place/place.h"
#include "partition/plan/plan.h"
#include "partition/planner.h"
#include "partition/polish.h"
#include "partition/sim/simulate.h"

#include <math.h>
#include <stdlib.h>

void dcp_plan_options_default(dcp_plan_options_t *opts_out)
{
    if (!opts_out) return;
    *opts_out = (dcp_plan_options_t){
        .block_size = 1024,
        .head_blocks = 1,
        .divisions = 0,
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
        .hierarchy = 1,
    };
}

/* Largest division count accepted; more would only add empty launches. */
#define DCP_MAX_DIVISIONS 1024

static dcp_status_t check_options(const dcp_plan_options_t *o)
{
    if (o->divisions < 0 || o->divisions > DCP_MAX_DIVISIONS)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.divisions = %d, must be 0 (chosen per batch) or in [1, %d]",
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
    if (o->strategy_arg < 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "options.strategy_arg = %d, must be >= 0 (0: the policy's default)",
                             o->strategy_arg);
    if (o->hierarchy != 0 && o->hierarchy != 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.hierarchy = %d, must be 0 or 1",
                             o->hierarchy);
    if (o->metis_tries < 1 || o->metis_tries > DCP_MAX_METIS_TRIES)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "options.metis_tries = %d, must be in [1, %d]",
                             o->metis_tries, DCP_MAX_METIS_TRIES);
    return DCP_OK;
}

/* A plan with strategy o->strategy, the layer kinds in free_kinds left unbalanced. */
static dcp_status_t plan_free(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                              uint32_t free_kinds, dcp_plan_t **plan_out)
{
    dcp_placed_t x = {0};
    dcp_status_t st = dcp_place_batch_free(batch, shape, o, cluster, free_kinds, &x);
    if (st == DCP_OK) st = dcp_plan_placed(&x, cluster, plan_out);
    dcp_placed_release(&x);
    return st;
}

static dcp_status_t plan_one(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                             const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                             dcp_plan_t **plan_out)
{
    return plan_free(batch, shape, o, cluster, 0, plan_out);
}

/* Predicted time of a training step's attention: the forward and the backward, summed over
 * the model's layers (with one kind: the plan's forward + backward). */
static double step_ms(const dcp_plan_t *p)
{
    return p->stats.model_step_ms;
}

/* 1 when a baseline whose plans' training step the cost model predicts at no less than
 * `floor` ms (dcp_cost_chunked_floor, dcp_cost_floor) cannot make a plan predicted faster
 * than p (with a margin for the floor's rounding: it sums in another order than the
 * prediction). */
static int floor_not_faster(double floor, const dcp_plan_t *p)
{
    return floor * (1.0 - 1e-9) >= step_ms(p);
}

/* The training step's floor from a forward floor: the backward's tiles have 2.5x the
 * forward's FLOPs, at bwd_speed x its rate. */
static double step_floor(double fwd_floor, const dcp_cluster_t *cluster)
{
    return (1.0 + 2.5 / cluster->perf.bwd_speed) * fwd_floor;
}

/* The training step's dcp_cost_chunked_floor of the model: layers x each kind's, summed
 * over kinds. */
static double model_chunked_floor(const dcp_plan_t *p, int32_t chunks, const dcp_cluster_t *cluster)
{
    double ms = 0;
    for (int32_t k = 0; k < p->num_kinds; k++) {
        const dcp_plan_t *v = p->views ? p->views[k] : p;
        ms += v->layers * step_floor(dcp_cost_chunked_floor(v, chunks), cluster);
    }
    return ms;
}

/* Zigzag's placement floors (dcp_cost_floor) raise *fl, the floor of the training step of
 * the plans zigzag can make, against plan p. One kind: its placement, kept in x for the plan.
 * Several: the model's floor, layers x each kind's, summed; each kind placed alone (zigzag's owners
 * follow the lengths, not the masks), the chunked floor standing in for the kinds not placed yet,
 * and no further kind placed once the floor rules zigzag out (x stays empty). */
static dcp_status_t zigzag_floors(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                  const dcp_plan_options_t *zo, const dcp_cluster_t *cluster,
                                  const dcp_plan_t *p, double *fl, dcp_placed_t *x)
{
    double fwd = 0, bwd = 0;
    if (p->num_kinds == 1) {
        DCP_CHECK(dcp_place_batch(batch, shape, zo, cluster, x));
        DCP_CHECK(dcp_cost_floor(&x->b, &x->pl, cluster, &fwd, &bwd));
        *fl = fmax(*fl, fwd + bwd);
        return DCP_OK;
    }
    double lb[DCP_MAX_KINDS]; /* per kind: step floor, layers x */
    const int32_t chunks = dcp_strategy_zigzag.chunks(cluster->num_ranks);
    for (int32_t k = 0; k < p->num_kinds; k++) {
        const dcp_plan_t *v = p->views[k];
        lb[k] = v->layers * step_floor(dcp_cost_chunked_floor(v, chunks), cluster);
    }
    for (int32_t k = 0; k < p->num_kinds && !floor_not_faster(*fl, p); k++) {
        const dcp_batch_t one = {
            .num_seqs = batch->num_seqs, .lengths = batch->lengths, .masks = batch->kinds[k].masks};
        dcp_placed_t y = {0};
        dcp_status_t st = dcp_place_batch(&one, shape, zo, cluster, &y);
        if (st == DCP_OK) st = dcp_cost_floor(&y.b, &y.pl, cluster, &fwd, &bwd);
        dcp_placed_release(&y);
        DCP_CHECK(st);
        const int32_t layers = p->views[k]->layers;
        lb[k] = fmax(lb[k], layers * (fwd + bwd));
        double sum = 0;
        for (int32_t j = 0; j < p->num_kinds; j++) sum += lb[j];
        *fl = fmax(*fl, sum);
    }
    return DCP_OK;
}

/* Every layer kind but the one with the most work (layers x allowed pairs, summed over the
 * sequences), as a free_kinds mask; 0 for a batch of one kind. */
static uint32_t light_kinds(const dcp_batch_t *batch)
{
    const int32_t nk = dcp_batch_kinds(batch);
    if (nk < 2) return 0;
    int32_t heavy = 0;
    double most = -1;
    for (int32_t k = 0; k < nk; k++) {
        double pairs = 0;
        for (int32_t s = 0; s < batch->num_seqs; s++) {
            const int32_t len = batch->lengths[s];
            pairs += (double)dcp_mask_pairs(&batch->kinds[k].masks[s], len, 0, len, 0, len);
        }
        if (batch->kinds[k].layers * pairs > most) most = batch->kinds[k].layers * pairs, heavy = k;
    }
    return ((1u << nk) - 1) & ~(1u << heavy);
}

/* METIS's plan: options.metis_tries placements with seeds seed, seed + 1, ..., and the plan
 * the simulator runs fastest per training step (dcp_candidate_keep; ties: the earlier seed).
 * One METIS run's step varies by 10-20% with its seed, and a try costs a few milliseconds once
 * the device level partitions rows (place_metis.c), so trying two and keeping the better is the
 * cheapest quality there is. The plan's options carry the seed that made it.
 * With layer kinds, every second try balances only the kind with the most work and leaves the
 * others where their traffic is least: a kind whose layers are light (a short window) pays
 * more for moving its blocks to balance a little compute than it saves (on 4x8, 128K tokens,
 * Gemma 3's 5 windows of 1024 per causal layer, balancing the windows too made the model's
 * predicted step 12% slower than the causal-only placement); the model's step picks. */
static dcp_status_t plan_metis_tries(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                     const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                                     dcp_candidate_t *out)
{
    dcp_candidate_t best = {NULL, 0};
    for (int32_t k = 0; k < o->metis_tries; k++) {
        dcp_plan_options_t t = *o;
        t.seed = o->seed + (uint64_t)k;
        dcp_plan_t *p = NULL;
        /* the first try has checked the batch: its masks can be counted */
        const uint32_t free_kinds = k % 2 ? light_kinds(batch) : 0;
        dcp_status_t st = plan_free(batch, shape, &t, cluster, free_kinds, &p);
        if (st == DCP_OK) st = dcp_candidate_keep(&best, p, cluster);
        if (st != DCP_OK) {
            dcp_plan_destroy(best.plan);
            return st;
        }
    }
    *out = best;
    return DCP_OK;
}

/* The cost model's floor of the training step on placement x (dcp_cost_floor), ms. */
static dcp_status_t step_floor_of(const dcp_placed_t *x, const dcp_cluster_t *cluster,
                                  double *ms_out)
{
    double fwd = 0, bwd = 0;
    DCP_CHECK(dcp_cost_floor(&x->b, &x->pl, cluster, &fwd, &bwd));
    *ms_out = fwd + bwd;
    return DCP_OK;
}

/* Placement x's plan kept in *best where the simulator runs it faster, built only where the
 * cost model's floor of its step (dcp_cost_floor) is under *best's simulated step. */
static dcp_status_t screen(const dcp_placed_t *x, const dcp_cluster_t *cluster,
                           dcp_candidate_t *best)
{
    double fl;
    DCP_CHECK(step_floor_of(x, cluster, &fl));
    if (fl * (1.0 - 1e-9) >= best->ms) return DCP_OK;
    dcp_plan_t *p = NULL;
    DCP_CHECK(dcp_plan_placed(x, cluster, &p));
    return dcp_candidate_keep(best, p, cluster);
}

/* How far apart whole documents packed into the cluster's nodes leave the nodes' loads
 * (dcp_nodes_imbalance). */
static dcp_status_t nodes_imbalance(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                    const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                                    double *imbalance_out)
{
    dcp_blocks_t b = {0};
    dcp_status_t st = dcp_blocks_init(&b, batch, shape, o->block_size, o->head_blocks);
    if (st == DCP_OK) st = dcp_nodes_imbalance(&b, cluster, imbalance_out);
    dcp_blocks_release(&b);
    return st;
}

/* The hierarchical candidates that the peer policies suggest, each screened (screen). The
 * first is packed DP x CP's (DCP_STRATEGY_NODES, place_hier.c): documents packed into nodes,
 * then METIS on each node's devices; its packing may leave the nodes' loads apart only by less
 * than the incumbent's simulated step exceeds the cost model's floor of its compute alone
 * (dcp_cost_attn_floor: the share of the step lost to transfers and waits, which traffic
 * kept inside the nodes could win back). (With the incumbent's whole floor, its transfers'
 * link time counted as if no placement could save it, a network as slow as the emulated
 * cluster's 100 Mbit/s links never let the candidate be built, where it halves the step.)
 * Where the packing leaves the nodes uneven, the second is the same packing with head
 * parallelism inside each node (DCP_STRATEGY_ULYSSES with a node per group): every device of
 * the busiest node then takes an equal share of every tile, where METIS on the node's coarse
 * rows is a few percent apart and cannot move work to another node. On the 36 batches of the
 * partition/README.md's comparison at FA2 rates it was built on 2, won on both (4.66 vs 4.94 ms,
 * 27.59 against 29.93 ms); tried on the 16 whose packing was even, it lost on all 16
 * (1.11-1.76x the incumbent's step: the re-layout's copies and transfers outweigh a balance
 * METIS already has), as it lost on 24 of 24 inside the nodes of METIS's own plan. The plan
 * kept names its placement (stats.strategy). A batch of layer kinds, or a cluster of one node,
 * has none. */
static dcp_status_t hier_candidates(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                    const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                                    dcp_candidate_t *best)
{
    if (dcp_batch_kinds(batch) > 1 || cluster->num_nodes < 2) return DCP_OK;
    double imbalance = 0, incumbent = 0;
    DCP_CHECK(nodes_imbalance(batch, shape, o, cluster, &imbalance));
    const int uneven = imbalance > 1 + o->eps_inter;
    dcp_placed_t x = {0};
    dcp_status_t st = DCP_OK;
    if (uneven) { /* worth it only where the incumbent loses more than the imbalance costs */
        double fwd = 0;
        st = dcp_kinds_place_on(dcp_plan_root(best->plan), batch, cluster, &x);
        if (st == DCP_OK)
            st = dcp_cost_attn_floor(&x.b, &x.pl, cluster->num_ranks, &cluster->perf, &fwd);
        dcp_placed_release(&x);
        incumbent = step_floor(fwd, cluster);
        if (st != DCP_OK || !(incumbent > 0) || imbalance > best->ms / incumbent) return st;
    }
    for (int k = 0; k < 2 && st == DCP_OK; k++) {
        const int32_t g = cluster->devs_per_node;
        if (k == 1 && (!uneven || g < 2 || shape->num_kv_heads % g)) break;
        dcp_plan_options_t co = *o;
        co.strategy = k == 0 ? DCP_STRATEGY_NODES : DCP_STRATEGY_ULYSSES;
        co.strategy_arg = k == 0 ? 0 : g;
        st = dcp_place_batch(batch, shape, &co, cluster, &x);
        if (st == DCP_OK && !x.pl.fallback) st = screen(&x, cluster, best);
        if (st == DCP_ERR_CAPACITY) st = DCP_OK; /* this candidate does not fit the cap */
        dcp_placed_release(&x);
    }
    return st;
}

/* DCP_STRATEGY_METIS, kept against the zigzag baseline: where zigzag's plan might be faster
 * per training step (forward + backward, what the METIS tries minimise too), it is built and
 * the simulator keeps the faster of the two (METIS's on a tie). (Asking both the forward and
 * the step to be no slower built and returned zigzag's plan where only its forward was
 * faster: on a long-tailed 4x8 batch, 0.68 against 0.74 ms, at a step 25% slower, 2.51
 * against 2.00 ms, and 340 ms of planning.) Zigzag is built only where the cost model cannot
 * rule it out, in steps of rising cost:
 *  1. its chunked floor (dcp_cost_chunked_floor: O(sequences), from the batch alone) -
 *     zigzag's thin chunks of short sequences compute at low efficiency, so on most batches
 *     this alone rules it out and zigzag is never placed;
 *  2. its placement's floor (dcp_cost_floor: compute and link time);
 *  3. its plan.
 * Each floor is a lower bound of what the cost model can predict for zigzag: a skipped plan
 * is one the cost model would have predicted no faster than METIS's. */
static dcp_status_t plan_metis(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                               dcp_candidate_t *out)
{
    dcp_candidate_t best;
    DCP_CHECK(plan_metis_tries(batch, shape, o, cluster, &best));
    dcp_status_t st = o->hierarchy ? hier_candidates(batch, shape, o, cluster, &best) : DCP_OK;
    const dcp_plan_t *mp = best.plan;
    double fl = model_chunked_floor(mp, dcp_strategy_zigzag.chunks(cluster->num_ranks), cluster);
    if (st == DCP_OK && !floor_not_faster(fl, mp)) {
        dcp_plan_options_t zo = *o;
        zo.strategy = DCP_STRATEGY_ZIGZAG;
        dcp_placed_t x = {0};
        dcp_plan_t *zz = NULL;
        st = zigzag_floors(batch, shape, &zo, cluster, mp, &fl, &x);
        if (st == DCP_OK && !floor_not_faster(fl, mp) && mp->num_kinds > 1)
            st = dcp_place_batch(batch, shape, &zo, cluster, &x); /* every kind, for the plan */
        if (st == DCP_OK) {
            if (!floor_not_faster(fl, mp)) st = dcp_plan_placed(&x, cluster, &zz);
            if (st == DCP_OK && zz) st = dcp_candidate_keep(&best, zz, cluster);
        } else if (st == DCP_ERR_CAPACITY) {
            st = DCP_OK; /* zigzag does not fit the cap or the planning limit */
        }
        dcp_placed_release(&x);
    }
    if (st != DCP_OK) {
        dcp_plan_destroy(best.plan);
        return st;
    }
    *out = best;
    return DCP_OK;
}

/* DCP_STRATEGY_AUTO: every concrete strategy at block sizes B/2, B and 2B; the plan the
 * simulator runs fastest per training step wins (ties: the earlier candidate). */
static dcp_status_t plan_auto(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                              dcp_candidate_t *out)
{
    const int32_t blocks[3] = {o->block_size / 2 > 0 ? o->block_size / 2 : 1, o->block_size,
                               o->block_size <= INT32_MAX / 2 ? 2 * o->block_size : o->block_size};
    dcp_candidate_t best = {NULL, 0};
    for (int s = 0; s < DCP_STRATEGY_COUNT; s++)
        for (int b = 0; b < 3; b++) {
            if (b > 0 && blocks[b] == blocks[b - 1]) continue;
            dcp_plan_options_t c = *o;
            c.strategy = (dcp_strategy_t)s;
            c.block_size = blocks[b];
            dcp_plan_t *p = NULL;
            dcp_status_t st = plan_one(batch, shape, &c, cluster, &p);
            if (st == DCP_ERR_CAPACITY) continue; /* this candidate does not fit: others may */
            if (st == DCP_OK) st = dcp_candidate_keep(&best, p, cluster);
            if (st != DCP_OK) {
                dcp_plan_destroy(best.plan);
                return st;
            }
        }
    if (!best.plan)
        return dcp_set_error(DCP_ERR_CAPACITY,
                             "options.mem_cap_bytes = %lld: no strategy fits the batch",
                             (long long)o->mem_cap_bytes);
    *out = best;
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
    dcp_candidate_t c = {NULL, NAN};
    if (o.strategy == DCP_STRATEGY_AUTO)
        DCP_CHECK(plan_auto(batch, shape, &o, cluster, &c));
    else if (o.strategy == DCP_STRATEGY_METIS)
        DCP_CHECK(plan_metis(batch, shape, &o, cluster, &c));
    else
        DCP_CHECK(plan_one(batch, shape, &o, cluster, &c.plan));
    dcp_status_t st = DCP_OK;
    if (o.divisions == 0 && isnan(c.ms))
        st = dcp_sim_model_step(c.plan, cluster, &c.ms, &c.exposed_ms);
    if (o.divisions == 0 && st == DCP_OK) st = dcp_polish_divisions(batch, cluster, &c);
    if (o.strategy == DCP_STRATEGY_METIS && st == DCP_OK) st = dcp_polish_even(batch, cluster, &c);
    if (o.divisions == 0 && st == DCP_OK) st = dcp_polish_query_runs(batch, cluster, &c);
    if (st != DCP_OK) {
        dcp_plan_destroy(c.plan);
        return st;
    }
    dcp_plan_t *p = c.plan;
    const double ms = (dcp_now() - t0) * 1e3;
    for (int32_t k = 0; k < p->num_kinds; k++) dcp_plan_view(p, k)->stats.plan_ms = ms;
    *plan_out = p;
    return DCP_OK;
}

dcp_status_t dcp_plan_create_on(const dcp_plan_t *base, const dcp_batch_t *batch,
                                const dcp_cluster_t *cluster, dcp_plan_t **plan_out)
{
    const double t0 = dcp_now();
    if (!base || !plan_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", base ? "plan_out" : "base");
    dcp_placed_t x = {0};
    dcp_plan_t *p = NULL;
    dcp_status_t st = dcp_kinds_place_on(dcp_plan_root(base), batch, cluster, &x);
    if (st == DCP_OK) st = dcp_plan_placed(&x, cluster, &p);
    dcp_placed_release(&x);
    if (st != DCP_OK) return st;
    const double ms = (dcp_now() - t0) * 1e3;
    for (int32_t k = 0; k < p->num_kinds; k++) dcp_plan_view(p, k)->stats.plan_ms = ms;
    *plan_out = p;
    return DCP_OK;
}
