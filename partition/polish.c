/*
 * The planner's last choices on the placement it chose (polish.h).
 */
#include "partition/polish.h"

#include "include/base/error.h"
#include "partition/kinds.h"
#include "partition/model/hypergraph.h"
#include "partition/place/refine_even.h"
#include "partition/plan/cost.h"
#include "partition/sim/simulate.h"

#include <math.h>
#include <stdlib.h>

/* The division counts that options.divisions = 0 chooses among. Few divisions leave a
 * rank's first and last kernels waiting on whole transfers; many make small kernels and
 * launches. On the 64 batches of overlap_bench.sh at 8x8 h100-ib (8 a row), the simulator
 * put batches of many short sequences at their fastest with 6 and those with long sequences
 * with 12-16: 890 ms with 8 everywhere, 833 ms with the fastest of these three, 824 ms of 4,
 * 6, 8, 12 and 16 (with a last rank more often idle) at 5/3 the cost. */
static const int32_t division_choices[] = {6, DCP_DIVISIONS_COMPARED, 12};

dcp_status_t dcp_polish_divisions(const dcp_batch_t *batch, const dcp_cluster_t *cluster,
                                  dcp_candidate_t *c)
{
    dcp_placed_t x = {0};
    dcp_status_t st = dcp_kinds_place_on(dcp_plan_root(c->plan), batch, cluster, &x);
    for (size_t i = 0; i < sizeof division_choices / sizeof division_choices[0] && st == DCP_OK;
         i++) {
        if (division_choices[i] == DCP_DIVISIONS_COMPARED) continue;
        dcp_plan_t *p = NULL;
        st = dcp_plan_divided(&x, cluster, division_choices[i], DCP_ORDER_DEFAULT, &p);
        if (st == DCP_OK) st = dcp_candidate_keep(c, p, cluster);
    }
    if (st == DCP_OK) {
        dcp_plan_t *p = NULL;
        st = dcp_plan_divided(&x, cluster, c->plan->opts.divisions, DCP_ORDER_LONG_TAIL, &p);
        if (st == DCP_OK) st = dcp_candidate_keep(c, p, cluster);
        if (st == DCP_OK && c->plan == p) c->order = DCP_ORDER_LONG_TAIL;
    }
    dcp_placed_release(&x);
    return st;
}

/* Seconds each rank of plan p spends in a training step's copies, merges and sums, timed as
 * the simulator times them ([num_ranks], malloc'ed). */
static dcp_status_t memory_seconds(const dcp_plan_t *p, const dcp_cluster_t *cluster,
                                   double **sec_out)
{
    dcp_sim_kernels_t k;
    dcp_sim_kernels_from_perf(&cluster->perf, &k);
    double *sec;
    DCP_CHECK(dcp_calloc(&sec, p->num_ranks, sizeof *sec, "memory seconds"));
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++)
        for (int32_t r = 0; r < p->num_ranks; r++)
            for (int64_t i = dcp_plan_prog_begin(p, (dcp_pass_t)pass, r);
                 i < dcp_plan_prog_end(p, (dcp_pass_t)pass, r); i++) {
                const dcp_instr_t *in = &p->instrs[i];
                if (in->op != DCP_OP_COPY && in->op != DCP_OP_REDUCE) continue;
                const int merge = in->op == DCP_OP_REDUCE && in->arg == DCP_PASS_FWD;
                sec[r] +=
                    dcp_cost_memory_bytes(p, in) / ((merge ? k.merge_gbps : k.copy_gbps) * 1e9);
            }
    *sec_out = sec;
    return DCP_OK;
}

/* Seconds each computation block of blocks b computes in a training step, its tile timed as
 * the cost model times it (dcp_cost_attn_floor), forward and backward ([comps], malloc'ed). */
static dcp_status_t comp_seconds(const dcp_blocks_t *b, const dcp_cluster_t *cluster,
                                 double **sec_out)
{
    const dcp_perf_model_t *m = &cluster->perf;
    const double step = 1.0 + 2.5 / m->bwd_speed;
    double *sec;
    DCP_CHECK(dcp_calloc(&sec, b->num_tiles * b->head_blocks, sizeof *sec, "comp seconds"));
    for (int64_t t = 0; t < b->num_tiles; t++) {
        const double edge = sqrt((double)b->blk_len[b->tile_q[t]] * b->blk_len[b->tile_kv[t]]);
        const double s = step * (double)dcp_blocks_comp_flops(b, t) /
                         (m->peak_tflops * 1e12 * dcp_cost_efficiency(m, edge));
        for (int32_t h = 0; h < b->head_blocks; h++) sec[t * b->head_blocks + h] = s;
    }
    *sec_out = sec;
    return DCP_OK;
}

/* How far dcp_refine_even() evens the ranks' kernel time: within 1% of the mean. */
#define EVEN_TOL 0.01

/* The plan of plan p's placement evened (dcp_refine_even; across nodes too with `across`;
 * with `memory`, each rank's load counting p's copies, merges and sums), with p's divisions
 * and order, then its owners spread over the nodes' links as METIS's are
 * (dcp_place_spread_links); *q_out = NULL where nothing moved. */
static dcp_status_t even_plan(const dcp_batch_t *batch, const dcp_cluster_t *cluster,
                              const dcp_plan_t *p, dcp_order_t order, int across, int memory,
                              dcp_plan_t **q_out)
{
    dcp_placed_t x = {0};
    dcp_hypergraph_t g = {0};
    double *comp = NULL, *fixed = NULL;
    int moved = 0;
    *q_out = NULL;
    dcp_status_t st = dcp_kinds_place_on(p, batch, cluster, &x);
    if (st == DCP_OK) st = dcp_hypergraph_build(&x.b, &g);
    if (st == DCP_OK) st = comp_seconds(&x.b, cluster, &comp);
    if (st == DCP_OK && memory) st = memory_seconds(p, cluster, &fixed);
    if (st == DCP_OK) {
        const dcp_place_in_t in = {&x.b, cluster, &x.opts};
        st = dcp_refine_even(&x.b, &g, &in, EVEN_TOL, across, comp, fixed, &x.pl, &moved);
    }
    if (st == DCP_OK && moved) st = dcp_place_spread_links(&x.b, cluster, &x.pl);
    if (st == DCP_OK && moved) st = dcp_plan_divided(&x, cluster, p->opts.divisions, order, q_out);
    free(comp);
    free(fixed);
    dcp_hypergraph_release(&g);
    dcp_placed_release(&x);
    return st;
}

/* Tokens a rank holds, in blocks, from which the candidate that evens the nodes too is built,
 * and the share of its step the incumbent's slowest ranks wait on transfers from which the
 * one that leaves copies, merges and sums out of the loads is (see dcp_polish_even). */
#define EVEN_ACROSS_BLOCKS 8
#define EVEN_EXPOSED       0.08

dcp_status_t dcp_polish_even(const dcp_batch_t *batch, const dcp_cluster_t *cluster,
                             dcp_candidate_t *c)
{
    dcp_plan_t *p = c->plan;
    if (p->num_kinds > 1 || !p->opts.hierarchy ||
        (p->opts.strategy != DCP_STRATEGY_METIS && p->opts.strategy != DCP_STRATEGY_NODES))
        return DCP_OK; /* zigzag's and head parallelism's owners are their definition */
    const int64_t tokens = p->stats.total_tokens;
    const double exposed = c->ms > 0 ? c->exposed_ms / c->ms : 0;
    dcp_status_t st = DCP_OK;
    /* (across, memory): inside with memory always; across where a rank holds many blocks;
     * inside without memory where the incumbent's slowest rank waits for transfers long */
    const int variants[3][3] = {
        {0, 1, 1},
        {1, 1,
         cluster->num_nodes > 1 &&
             tokens >= (int64_t)EVEN_ACROSS_BLOCKS * p->opts.block_size * cluster->num_ranks},
        {0, 0, exposed > EVEN_EXPOSED}};
    dcp_candidate_t best = *c;
    for (int v = 0; v < 3 && st == DCP_OK; v++) {
        if (!variants[v][2]) continue;
        dcp_plan_t *q = NULL;
        double ms = 0, q_exposed = 0;
        st = even_plan(batch, cluster, p, c->order, variants[v][0], variants[v][1], &q);
        if (st == DCP_OK && q) st = dcp_sim_model_step(q, cluster, &ms, &q_exposed);
        if (st == DCP_OK && q && ms < best.ms) {
            if (best.plan != p) dcp_plan_destroy(best.plan);
            best = (dcp_candidate_t){q, ms, c->order, q_exposed};
        } else {
            dcp_plan_destroy(q);
        }
    }
    if (st != DCP_OK) {
        if (best.plan != p) dcp_plan_destroy(best.plan);
        return st;
    }
    if (best.plan != p) dcp_plan_destroy(p);
    *c = best;
    return DCP_OK;
}

dcp_status_t dcp_polish_query_runs(const dcp_batch_t *batch, const dcp_cluster_t *cluster,
                                   dcp_candidate_t *c)
{
    if (cluster->num_nodes < 2 || c->order == DCP_ORDER_QUERY_RUNS) return DCP_OK;
    dcp_placed_t x = {0};
    dcp_plan_t *p = NULL;
    double ms = 0, exposed = 0;
    dcp_status_t st = dcp_kinds_place_on(dcp_plan_root(c->plan), batch, cluster, &x);
    if (st == DCP_OK)
        st = dcp_plan_divided(&x, cluster, c->plan->opts.divisions, DCP_ORDER_QUERY_RUNS, &p);
    if (st == DCP_OK) st = dcp_sim_model_step(p, cluster, &ms, &exposed);
    if (st == DCP_OK && ms < c->ms && exposed <= c->exposed_ms) {
        dcp_plan_destroy(c->plan);
        *c = (dcp_candidate_t){p, ms, DCP_ORDER_QUERY_RUNS, exposed};
    } else {
        dcp_plan_destroy(p);
    }
    dcp_placed_release(&x);
    return st;
}
