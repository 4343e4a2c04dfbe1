/* Placement refinement (partition/place/refine.h, refine_fm.h, refiner.h): balance repair, FM
 * passes that climb out of local minima, and the refiner's counts kept exact by every move
 * and every rollback. */
#include "include/base/error.h"
#include "partition/model/hypergraph.h"
#include "partition/place/place.h"
#include "partition/place/refine.h"
#include "partition/place/refine_fm.h"
#include "partition/place/refiner.h"
#include "plugin/cli/support/rng.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};

static void blocks_of(dcp_blocks_t *b, const int32_t *len, int32_t n, int32_t block, int32_t hb)
{
    dcp_mask_t *m = calloc((size_t)n, sizeof *m);
    for (int32_t i = 0; i < n; i++) m[i].kind = DCP_MASK_CAUSAL;
    const dcp_batch_t batch = {.num_seqs = n, .lengths = len, .masks = m};
    *b = (dcp_blocks_t){0};
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_init(b, &batch, &shape, block, hb), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_cut(b, 0), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_tiles(b), DCP_OK);
    free(m);
}

/* Link seconds of a placement, from scratch: every net's distinct reading ranks other than
 * its owner's, each over the owner's link to it. */
static double link_seconds(const dcp_refiner_t *r)
{
    const dcp_hypergraph_t *g = r->g;
    double s = 0;
    for (int64_t e = 0; e < g->num_nets; e++) {
        const int32_t o = r->owner[dcp_net_block(g, e)];
        for (int32_t p = 0; p < r->nr; p++) {
            int reads = 0;
            for (int64_t i = g->net_off[e]; i < g->net_off[e + 1] && !reads; i++)
                reads = r->exec[g->members[i]] == p;
            if (reads && p != o) s += (double)g->weight[e] * dcp_refiner_inv_bw(r, o, p);
        }
    }
    return s;
}

/* The refiner's counts and loads equal a recount of its placement. */
static int consistent(const dcp_refiner_t *r)
{
    const dcp_hypergraph_t *g = r->g;
    for (int64_t e = 0; e < g->num_nets; e++) {
        int32_t readers = 0;
        for (int32_t p = 0; p < r->nr; p++) {
            int32_t n = 0;
            for (int64_t i = g->net_off[e]; i < g->net_off[e + 1]; i++)
                n += r->exec[g->members[i]] == p;
            if (n != *dcp_refiner_cell(r, e, p)) return 0;
            readers += n > 0;
        }
        if (readers != r->readers[e]) return 0;
    }
    int64_t *f, *m;
    const dcp_placement_t p = {r->owner, r->exec, 0};
    if (dcp_place_loads(r->b, &p, r->nr, &f, &m) != DCP_OK) return 0;
    int ok = !memcmp(f, r->flops, (size_t)r->nr * sizeof *f) &&
             !memcmp(m, r->mem, (size_t)r->nr * sizeof *m);
    free(f);
    free(m);
    return ok;
}

/* A local minimum no single move leaves: KV(0), owned on rank 0, is read on rank 1 by two
 * computation blocks whose query blocks live on rank 1, and rank 1 has no room for block 0.
 * Moving either computation block alone reads its Q net remotely and saves nothing (the
 * other still reads KV(0)); moving both saves the heavy KV net. FM takes the losing move
 * first and keeps the pair; a greedy pass stays. */
static void test_fm_climbs_out_of_local_minimum(void)
{
    const int32_t len[1] = {48};
    dcp_blocks_t b;
    blocks_of(&b, len, 1, 16, 1); /* tiles (0,0) (1,0) (1,1) (2,0) (2,1) (2,2) */
    CU_ASSERT_EQUAL_FATAL(b.num_tiles, 6);
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    for (int64_t e = 0; e < g.num_nets; e++) g.weight[e] = 10; /* Q(0..2), KV(0..2) */
    g.weight[3] = 100;                                         /* KV(0) */
    dcp_cluster_t *c;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    const dcp_place_in_t in = {&b, c, &o};
    int32_t owner[3] = {0, 1, 1}, exec[6] = {0, 1, 1, 1, 1, 1};
    dcp_placement_t p = {owner, exec, 0};
    dcp_refiner_t r;
    int ok;
    CU_ASSERT_EQUAL_FATAL(dcp_refiner_init(&r, &b, &g, &in, 0.4, &p, &ok), DCP_OK);
    CU_ASSERT_FATAL(ok);
    const double before = link_seconds(&r);
    CU_ASSERT_DOUBLE_EQUAL(before, 100 * r.ib_intra, 1e-15);
    /* no single feasible move gains */
    for (int64_t cc = 0; cc < 6; cc++)
        for (int32_t to = 0; to < 2; to++)
            if (to != exec[cc] && dcp_refiner_comp_fits(&r, cc, to))
                CU_ASSERT(dcp_refiner_comp_delta(&r, cc, to) >= 0);
    for (int32_t t = 0; t < 3; t++)
        for (int32_t to = 0; to < 2; to++)
            if (to != owner[t] && (double)(r.mem[to] + dcp_refiner_blk_bytes(&r, t)) <= r.bound_mem)
                CU_ASSERT(dcp_refiner_blk_cost(&r, t, to) >= dcp_refiner_blk_cost(&r, t, owner[t]));
    CU_ASSERT_EQUAL(dcp_refine_fm(&r), DCP_OK);
    CU_ASSERT(consistent(&r));
    CU_ASSERT_DOUBLE_EQUAL(link_seconds(&r), 20 * r.ib_intra, 1e-15); /* Q(1), Q(2) on rank 0 */
    CU_ASSERT_EQUAL(exec[1], 0);
    CU_ASSERT_EQUAL(exec[3], 0);
    for (int32_t k = 0; k < 2; k++) {
        CU_ASSERT((double)r.flops[k] <= r.bound_flops[0]);
        CU_ASSERT((double)r.mem[k] <= r.bound_mem);
    }
    dcp_refiner_release(&r);
    dcp_hypergraph_release(&g);
    dcp_cluster_destroy(c);
    dcp_blocks_release(&b);
}

/* From random placements of a long-tailed batch on 2x4 ranks with two head groups: FM never
 * raises the link time, never moves load onto a rank beyond its bound, ends on counts equal
 * to a recount (moves and rollbacks alike), and lowers the link time of most starts. */
static void test_fm_random_starts(void)
{
    const int32_t len[6] = {2000, 900, 500, 300, 120, 40};
    dcp_blocks_t b;
    blocks_of(&b, len, 6, 128, 2);
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    dcp_cluster_t *c;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    const dcp_place_in_t in = {&b, c, &o};
    int32_t *owner = calloc((size_t)b.num_blocks, sizeof *owner);
    int32_t *exec = calloc((size_t)g.num_comps, sizeof *exec);
    dcpt_rng_t rng = {7};
    int improved = 0;
    const int starts = 20;
    for (int s = 0; s < starts; s++) {
        for (int32_t t = 0; t < b.num_blocks; t++) owner[t] = (int32_t)dcpt_rng_range(&rng, 0, 7);
        for (int64_t cc = 0; cc < g.num_comps; cc++)
            exec[cc] = dcpt_rng_range(&rng, 0, 3) ? owner[b.tile_q[cc / 2]]
                                                  : (int32_t)dcpt_rng_range(&rng, 0, 7);
        dcp_placement_t p = {owner, exec, 0};
        dcp_refiner_t r;
        int ok;
        CU_ASSERT_EQUAL_FATAL(dcp_refiner_init(&r, &b, &g, &in, 0.3, &p, &ok), DCP_OK);
        CU_ASSERT_FATAL(ok);
        int64_t f0[8], m0[8];
        memcpy(f0, r.flops, sizeof f0);
        memcpy(m0, r.mem, sizeof m0);
        const double before = link_seconds(&r);
        CU_ASSERT_EQUAL(dcp_refine_fm(&r), DCP_OK);
        const double after = link_seconds(&r);
        CU_ASSERT(after <= before * (1 + 1e-12));
        improved += after < before * 0.99;
        CU_ASSERT(consistent(&r));
        for (int32_t k = 0; k < 8; k++) { /* a rank only gains load up to its bound */
            CU_ASSERT(r.flops[k] <= f0[k] || (double)r.flops[k] <= r.bound_flops[0]);
            CU_ASSERT(r.mem[k] <= m0[k] || (double)r.mem[k] <= r.bound_mem);
        }
        dcp_refiner_release(&r);
    }
    CU_ASSERT(improved >= starts * 3 / 4);
    free(owner);
    free(exec);
    dcp_hypergraph_release(&g);
    dcp_cluster_destroy(c);
    dcp_blocks_release(&b);
}

/* Refinement (computation blocks towards their inputs, token blocks towards their readers by
 * the exact connectivity of their nets) never adds traffic to a placement that is within
 * bounds, and keeps it within bounds: two sequences computed on one rank each, with one block
 * of each owned by the other rank. */
static void test_refine_never_adds_traffic(void)
{
    const int32_t len[2] = {32, 32};
    dcp_blocks_t b;
    blocks_of(&b, len, 2, 16, 1); /* blocks a0 a1 | b0 b1 */
    dcp_cluster_t *c;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    const dcp_place_in_t in = {&b, c, &o};
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    int32_t owner[4] = {0, 1, 1, 0};
    int32_t *exec = calloc((size_t)g.num_comps, sizeof *exec);
    for (int64_t cc = 0; cc < g.num_comps; cc++) exec[cc] = b.blk_seq[b.tile_q[cc]];
    dcp_placement_t p = {owner, exec, 0};
    int64_t before, after, inter;
    CU_ASSERT_EQUAL(dcp_hypergraph_traffic(&g, owner, exec, 2, 2, &before, &inter), DCP_OK);
    CU_ASSERT(before > 0);
    CU_ASSERT_EQUAL(dcp_refine(&b, &g, &in, 1.0, &p), DCP_OK); /* room for 4 blocks a rank */
    CU_ASSERT_EQUAL(dcp_hypergraph_traffic(&g, owner, exec, 2, 2, &after, &inter), DCP_OK);
    CU_ASSERT(after < before);
    int64_t *fl, *mem;
    CU_ASSERT_EQUAL_FATAL(dcp_place_loads(&b, &p, 2, &fl, &mem), DCP_OK);
    double fb, mb;
    dcp_place_bounds(&b, 2, 1.0, 1, &fb, &mb);
    for (int r = 0; r < 2; r++) CU_ASSERT((double)fl[r] <= fb && (double)mem[r] <= mb);
    free(fl);
    free(mem);
    /* within the strict 5% bound no single move fits: the placement stays as it was */
    int32_t owner2[4] = {0, 1, 1, 0};
    for (int64_t cc = 0; cc < g.num_comps; cc++) exec[cc] = b.blk_seq[b.tile_q[cc]];
    dcp_placement_t p2 = {owner2, exec, 0};
    CU_ASSERT_EQUAL(dcp_refine(&b, &g, &in, 0.05, &p2), DCP_OK);
    int64_t kept;
    CU_ASSERT_EQUAL(dcp_hypergraph_traffic(&g, owner2, exec, 2, 2, &kept, &inter), DCP_OK);
    CU_ASSERT(kept <= before);
    free(exec);
    dcp_hypergraph_release(&g);
    dcp_cluster_destroy(c);
    dcp_blocks_release(&b);
}

int dcp_suite_refine(void)
{
    static const dcp_test_t tests[] = {
        {"fm_climbs_out_of_local_minimum", test_fm_climbs_out_of_local_minimum},
        {"fm_random_starts", test_fm_random_starts},
        {"refine_never_adds_traffic", test_refine_never_adds_traffic},
        {NULL, NULL},
    };
    return dcp_add_suite("refine", tests);
}
