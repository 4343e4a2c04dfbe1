/* The METIS strategy: expansion weights, banded large nets, one-part clusters without METIS,
 * validation with lpt as the fallback, and what it buys over lpt. */
#include "include/base/error.h"
#include "partition/model/hypergraph.h"
#include "partition/place/metis_graph.h"
#include "partition/place/place.h"
#include "partition/place/place_metis.h"
#include "partition/plan/plan.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

static const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};

static void blocks_of(dcp_blocks_t *b, const int32_t *len, int32_t n, dcp_mask_kind_t kind,
                      int32_t block)
{
    dcp_mask_t *m = calloc((size_t)n, sizeof *m);
    for (int32_t i = 0; i < n; i++) m[i].kind = kind;
    const dcp_batch_t batch = {.num_seqs = n, .lengths = len, .masks = m};
    *b = (dcp_blocks_t){0};
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_init(b, &batch, &shape, block, 1), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_cut(b, 0), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_tiles(b), DCP_OK);
    free(m);
}

static idx_t edge_weight(const dcp_metis_graph_t *m, idx_t u, idx_t v)
{
    for (idx_t i = m->xadj[u]; i < m->xadj[u + 1]; i++)
        if (m->adjncy[i] == v) return m->adjwgt[i];
    return 0;
}

/* Three causal blocks, one head group: nets and the clique weights w / (|e| - 1). */
static void test_clique_weights(void)
{
    const int32_t len[1] = {48};
    dcp_blocks_t b;
    blocks_of(&b, len, 1, DCP_MASK_CAUSAL, 16);
    CU_ASSERT_EQUAL_FATAL(b.num_tiles, 6); /* (0,0) (1,0) (1,1) (2,0) (2,1) (2,2) */
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    /* KV(0) is read by tiles (0,0), (1,0), (2,0): net of 4 vertices with its owner */
    const int64_t kv0 = (3 + 0) * 1 + 0;
    CU_ASSERT_EQUAL(g.net_off[kv0 + 1] - g.net_off[kv0], 3);
    /* a step's bytes: K, V twice (forward, backward) and the fp32 dK, dV partial back */
    CU_ASSERT_EQUAL(g.weight[kv0], 2 * dcp_blocks_xfer_bytes(&b, DCP_XFER_KV, 16) +
                                       dcp_blocks_xfer_bytes(&b, DCP_XFER_DKV, 16));
    CU_ASSERT_EQUAL(g.weight[0], dcp_blocks_xfer_bytes(&b, DCP_XFER_Q, 16) +
                                     dcp_blocks_xfer_bytes(&b, DCP_XFER_PART, 16) +
                                     dcp_blocks_xfer_bytes(&b, DCP_XFER_BQ, 16) +
                                     dcp_blocks_xfer_bytes(&b, DCP_XFER_BSTAT, 16) +
                                     dcp_blocks_xfer_bytes(&b, DCP_XFER_DQ, 16));
    const int64_t nv = 3 + 6;
    int32_t *local = malloc(nv * sizeof *local);
    for (int64_t v = 0; v < nv; v++) local[v] = (int32_t)v;
    dcp_metis_graph_t m;
    CU_ASSERT_EQUAL_FATAL(
        dcp_metis_graph_build(&b, &g, local, (int32_t)nv, DCP_EXPAND_CLIQUE, 0, &m), DCP_OK);
    /* vertices: blocks 0-2, then tiles in order; tile (2,0) is vertex 3 + 3 = 6, (2,1) is 7 */
    const idx_t kv_only = edge_weight(&m, 4, 6); /* (1,0)-(2,0): share KV(0) only, k = 4 */
    const idx_t q_only = edge_weight(&m, 6, 7);  /* (2,0)-(2,1): share Q(2) only, k = 4 */
    CU_ASSERT(kv_only > 0 && q_only > 0);
    /* both nets have 4 vertices, so the ratio of the weights is the ratio of net weights */
    const double ratio = (double)q_only / (double)kv_only;
    const double expect = (double)g.weight[2] / (double)g.weight[kv0];
    CU_ASSERT_DOUBLE_EQUAL(ratio, expect, expect * 1e-3);
    /* the diagonal tile (1,1) is in Q(1) and KV(1): its edge to block 1 carries both nets */
    const idx_t both = edge_weight(&m, 1, 5);
    const double w_q1 = (double)g.weight[1] / 2, w_kv1 = (double)g.weight[3 + 1] / 2;
    const double scale = (double)kv_only / ((double)g.weight[kv0] / 3);
    CU_ASSERT_DOUBLE_EQUAL((double)both, (w_q1 + w_kv1) * scale, (w_q1 + w_kv1) * scale * 1e-5);
    /* vertex weights: FLOPs on tiles only, bytes on blocks only */
    for (idx_t v = 0; v < m.nv; v++) {
        CU_ASSERT((v < 3) == (m.vwgt[2 * v] == 0));
        CU_ASSERT((v < 3) == (m.vwgt[2 * v + 1] > 0));
    }
    dcp_metis_graph_release(&m);
    free(local);
    dcp_hypergraph_release(&g);
    dcp_blocks_release(&b);
}

/* The same three blocks with each row - a query block and its tiles - as one vertex, as the
 * device level builds them: weights add, a net counts a shared vertex once (so a net whose
 * vertices all share one vertex adds no edge), and no vertex is joined to itself. */
static void test_shared_vertices(void)
{
    const int32_t len[1] = {48};
    dcp_blocks_t b;
    blocks_of(&b, len, 1, DCP_MASK_CAUSAL, 16);
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    /* rows: block 0 + (0,0); block 1 + (1,0) (1,1); block 2 + (2,0) (2,1) (2,2) */
    const int32_t local[9] = {0, 1, 2, 0, 1, 1, 2, 2, 2};
    dcp_metis_graph_t m;
    CU_ASSERT_EQUAL_FATAL(dcp_metis_graph_build(&b, &g, local, 3, DCP_EXPAND_CLIQUE, 0, &m),
                          DCP_OK);
    CU_ASSERT_EQUAL(m.nv, 3);
    CU_ASSERT_EQUAL(m.edges, 3); /* rows 0-1, 0-2, 1-2 */
    for (idx_t v = 0; v < m.nv; v++)
        for (idx_t i = m.xadj[v]; i < m.xadj[v + 1]; i++) CU_ASSERT(m.adjncy[i] != v);
    /* row 2 holds 3 tiles of 16 x 16 (2 full, 1 causal) against row 0's one causal tile */
    const double causal = 16 * 17 / 2, full = 256;
    CU_ASSERT_DOUBLE_EQUAL((double)m.vwgt[2 * 2] / (double)m.vwgt[0], (2 * full + causal) / causal,
                           1e-3 * (2 * full + causal) / causal);
    CU_ASSERT_EQUAL(m.vwgt[1], m.vwgt[2 * 2 + 1]); /* one block of bytes each */
    /* KV(0) spans rows 0, 1, 2 (three distinct vertices: weight / 2 per pair); KV(1) rows 1
     * and 2 (weight / 1); the Q nets lie inside their rows */
    const double w0 = (double)g.weight[3] / 2, w1 = (double)g.weight[4];
    CU_ASSERT_DOUBLE_EQUAL((double)edge_weight(&m, 1, 2) / (double)edge_weight(&m, 0, 1),
                           (w0 + w1) / w0, 1e-3 * (w0 + w1) / w0);
    CU_ASSERT_EQUAL(edge_weight(&m, 0, 1), edge_weight(&m, 0, 2));
    dcp_metis_graph_release(&m);
    dcp_hypergraph_release(&g);
    dcp_blocks_release(&b);
}

/* A long causal sequence: KV(0) has one member per query block. With a cap the graph has
 * O(members x cap) edges instead of a quadratic clique. */
static void test_large_nets_are_banded(void)
{
    const int32_t len[1] = {64 * 200};
    dcp_blocks_t b;
    blocks_of(&b, len, 1, DCP_MASK_CAUSAL, 64);
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    const int64_t nv = b.num_blocks + g.num_comps;
    int32_t *local = malloc(nv * sizeof *local);
    for (int64_t v = 0; v < nv; v++) local[v] = (int32_t)v;
    dcp_metis_graph_t full, band;
    CU_ASSERT_EQUAL_FATAL(
        dcp_metis_graph_build(&b, &g, local, (int32_t)nv, DCP_EXPAND_CLIQUE, 0, &full), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(
        dcp_metis_graph_build(&b, &g, local, (int32_t)nv, DCP_EXPAND_CLIQUE, 16, &band), DCP_OK);
    /* every net has at most 201 vertices: a band of 8 neighbours plus the owner star */
    CU_ASSERT(band.edges <= g.num_nets * 201 * 9 / 2 + 1);
    CU_ASSERT(band.edges * 5 < full.edges);
    dcp_metis_graph_t star;
    CU_ASSERT_EQUAL_FATAL(
        dcp_metis_graph_build(&b, &g, local, (int32_t)nv, DCP_EXPAND_STAR, 0, &star), DCP_OK);
    CU_ASSERT_PTR_NOT_NULL(star.vsize);
    CU_ASSERT(star.vsize[0] > 0 && star.vsize[b.num_blocks] == 0);
    dcp_metis_graph_release(&full);
    dcp_metis_graph_release(&band);
    dcp_metis_graph_release(&star);
    free(local);
    dcp_hypergraph_release(&g);
    dcp_blocks_release(&b);
}

static dcp_plan_t *plan_with(const int32_t *len, int32_t n, const char *spec, const char *cluster,
                             dcp_strategy_t s, int32_t block, dcp_expansion_t how, int32_t refine)
{
    dcp_mask_t *m = calloc((size_t)n, sizeof *m);
    for (int32_t i = 0; i < n; i++) dcp_mask_parse(spec, &m[i]);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s;
    o.block_size = block;
    o.expansion = how;
    o.refine = refine;
    dcp_plan_t *p = t_plan_opts(len, n, m, cluster, &o);
    free(m);
    return p;
}

/* A strategy's own placement of a causal batch on a cluster spec (block 256; refine as
 * given), without the planner's comparison with zigzag (relays between nodes make zigzag the
 * faster plan on batches this small). Release with dcp_placed_release(). */
static void place_with(const int32_t *len, int32_t n, const char *cluster, dcp_strategy_t s,
                       dcp_expansion_t how, int32_t refine, dcp_placed_t *x)
{
    dcp_mask_t *m = calloc((size_t)n, sizeof *m);
    for (int32_t i = 0; i < n; i++) dcp_mask_parse("causal", &m[i]);
    const dcp_batch_t batch = {.num_seqs = n, .lengths = len, .masks = m};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s;
    o.block_size = 256;
    o.expansion = how;
    o.refine = refine;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &c), DCP_OK);
    *x = (dcp_placed_t){0};
    CU_ASSERT_EQUAL_FATAL(dcp_place_batch(&batch, &shape, &o, c, x), DCP_OK);
    dcp_cluster_destroy(c);
    free(m);
}

/* Bytes a placement moves in a training step, and the part between nodes of 4 devices. */
static void traffic_of(const dcp_placed_t *x, int32_t ranks, int64_t *total, int64_t *inter)
{
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&x->b, &g), DCP_OK);
    CU_ASSERT_EQUAL(
        dcp_hypergraph_traffic(&g, x->pl.blk_owner, x->pl.comp_exec, ranks, 4, total, inter),
        DCP_OK);
    dcp_hypergraph_release(&g);
}

/* Unrefined METIS output is out of bounds on this batch: validation rejects it and lpt
 * places instead; with refinement (the default) METIS's result stands, balanced. */
static void test_invalid_result_falls_back_to_lpt(void)
{
    const int32_t len[12] = {6000, 3000, 2500, 1800, 900, 700, 500, 300, 120, 60, 20, 1};
    dcp_placed_t raw, lpt, ref;
    place_with(len, 12, "2x4", DCP_STRATEGY_METIS, DCP_EXPAND_CLIQUE, 0, &raw);
    place_with(len, 12, "2x4", DCP_STRATEGY_LPT, DCP_EXPAND_CLIQUE, 0, &lpt);
    CU_ASSERT_EQUAL(raw.pl.fallback, 1);
    /* it is lpt's placement */
    CU_ASSERT_EQUAL_FATAL(raw.b.num_blocks, lpt.b.num_blocks);
    CU_ASSERT_EQUAL(memcmp(raw.pl.blk_owner, lpt.pl.blk_owner, (size_t)raw.b.num_blocks * 4), 0);
    CU_ASSERT_EQUAL(
        memcmp(raw.pl.comp_exec, lpt.pl.comp_exec, (size_t)raw.b.num_tiles * raw.b.head_blocks * 4),
        0);
    place_with(len, 12, "2x4", DCP_STRATEGY_METIS, DCP_EXPAND_CLIQUE, 1, &ref);
    CU_ASSERT_EQUAL(ref.pl.fallback, 0);
    int64_t *flops = NULL, *mem = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_place_loads(&ref.b, &ref.pl, 8, &flops, &mem), DCP_OK);
    int64_t fmax = 0, mmax = 0, fsum = 0, msum = 0;
    for (int r = 0; r < 8; r++) {
        fmax = flops[r] > fmax ? flops[r] : fmax;
        mmax = mem[r] > mmax ? mem[r] : mmax;
        fsum += flops[r];
        msum += mem[r];
    }
    CU_ASSERT((double)fmax / ((double)fsum / 8) - 1 <= 0.05 + 1e-9);
    CU_ASSERT((double)mmax / ((double)msum / 8) - 1 <= 0.05 + 1e-9);
    free(flops);
    free(mem);
    dcp_placed_release(&raw);
    dcp_placed_release(&lpt);
    dcp_placed_release(&ref);
    /* sequences that fit whole on ranks stay whole: no traffic at all */
    const int32_t many[8] = {512, 512, 512, 512, 512, 512, 512, 512};
    dcp_plan_t *p =
        plan_with(many, 8, "causal", "1x4", DCP_STRATEGY_METIS, 64, DCP_EXPAND_CLIQUE, 1);
    CU_ASSERT_EQUAL(p->stats.fallback, 0);
    CU_ASSERT_EQUAL(p->stats.comm_bytes, 0);
    dcp_plan_destroy(p);
}

/* One node of one device: no METIS call, everything on rank 0, no traffic. */
static void test_single_part_needs_no_metis(void)
{
    const int32_t len[3] = {300, 1, 77};
    dcp_plan_t *p =
        plan_with(len, 3, "lambda:4:30", "1x1", DCP_STRATEGY_METIS, 32, DCP_EXPAND_CLIQUE, 1);
    CU_ASSERT_EQUAL(p->stats.fallback, 0);
    CU_ASSERT_EQUAL(p->stats.comm_bytes, 0);
    dcp_plan_destroy(p);
}

/* METIS prints its refusals on stdout: hidden while a test provokes them. */
static int stdout_hide(void)
{
    fflush(stdout);
    const int saved = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    close(null);
    return saved;
}

static void stdout_restore(int saved)
{
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
}

/* Partitioners that drive the METIS strategy's placement: the real METIS asked for zero
 * parts (which it refuses: METIS_ERROR_INPUT), and one whose result breaks an invariant. */
static dcp_status_t refusing_metis(dcp_metis_graph_t *m, int32_t nparts, double eps,
                                   dcp_metis_method_t how, const dcp_plan_options_t *o, idx_t *part,
                                   int *refused)
{
    (void)nparts;
    return dcp_metis_partition(m, 0, eps, how, o, part, refused);
}

static dcp_status_t broken_metis(dcp_metis_graph_t *m, int32_t nparts, double eps,
                                 dcp_metis_method_t how, const dcp_plan_options_t *o, idx_t *part,
                                 int *refused)
{
    DCP_CHECK(dcp_metis_partition(m, nparts, eps, how, o, part, refused));
    part[m->nv - 1] = nparts; /* a vertex in no part */
    return DCP_OK;
}

/* A METIS refusal is its own outcome: no error, the method loses, and with every method
 * refusing lpt places the batch (fallback set); a broken result (DCP_ERR_INTERNAL) is never
 * swallowed into that fallback. */
static void test_refusal_falls_back_internal_propagates(void)
{
    const int32_t len[6] = {3000, 1800, 900, 500, 120, 7};
    dcp_blocks_t b;
    blocks_of(&b, len, 6, DCP_MASK_CAUSAL, 128);
    dcp_cluster_t *c;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4", &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    const dcp_place_in_t in = {&b, c, &o};
    const int64_t nc = b.num_tiles * b.head_blocks;
    dcp_placement_t p = {calloc((size_t)b.num_blocks, 4), calloc((size_t)nc, 4), 0};
    dcp_placement_t l = {calloc((size_t)b.num_blocks, 4), calloc((size_t)nc, 4), 0};

    /* the real METIS refuses zero parts, quietly */
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    int32_t *local = malloc((size_t)(b.num_blocks + nc) * sizeof *local);
    for (int64_t v = 0; v < b.num_blocks + nc; v++) local[v] = (int32_t)v;
    dcp_metis_graph_t m;
    CU_ASSERT_EQUAL_FATAL(dcp_metis_graph_build(&b, &g, local, (int32_t)(b.num_blocks + nc),
                                                DCP_EXPAND_CLIQUE, 12, &m),
                          DCP_OK);
    idx_t *part = calloc((size_t)m.nv, sizeof *part);
    int refused = 0;
    const int saved = stdout_hide();
    const dcp_status_t st = dcp_metis_partition(&m, 0, 0.05, DCP_METIS_KWAY, &o, part, &refused);
    const dcp_status_t st_place = dcp_metis_place_with(&in, refusing_metis, &p);
    stdout_restore(saved);
    CU_ASSERT_EQUAL(st, DCP_OK);
    CU_ASSERT_EQUAL(refused, 1);
    CU_ASSERT_EQUAL(dcp_metis_partition(&m, 8, 0.05, DCP_METIS_RB, &o, part, &refused), DCP_OK);
    CU_ASSERT_EQUAL(refused, 0);

    /* refusal: lpt's placement, marked as a fallback */
    CU_ASSERT_EQUAL(st_place, DCP_OK);
    CU_ASSERT_EQUAL(p.fallback, 1);
    CU_ASSERT_EQUAL(dcp_strategy_lpt.place(&in, &l), DCP_OK);
    CU_ASSERT_EQUAL(memcmp(p.blk_owner, l.blk_owner, (size_t)b.num_blocks * 4), 0);
    CU_ASSERT_EQUAL(memcmp(p.comp_exec, l.comp_exec, (size_t)nc * 4), 0);

    /* an invariant break propagates, naming the vertex */
    p.fallback = 0;
    CU_ASSERT_EQUAL(dcp_metis_place_with(&in, broken_metis, &p), DCP_ERR_INTERNAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "vertex"));
    CU_ASSERT_EQUAL(p.fallback, 0);

    /* the real partitioner: a valid METIS placement */
    CU_ASSERT_EQUAL(dcp_metis_place_with(&in, dcp_metis_partition, &p), DCP_OK);
    CU_ASSERT_EQUAL(p.fallback, 0);
    free(part);
    dcp_metis_graph_release(&m);
    free(local);
    dcp_hypergraph_release(&g);
    free(p.blk_owner);
    free(p.comp_exec);
    free(l.blk_owner);
    free(l.comp_exec);
    dcp_cluster_destroy(c);
    dcp_blocks_release(&b);
}

/* On long-tailed batches METIS's placement moves less data than lpt's and keeps more of it
 * inside nodes than zigzag's, with either expansion (the clique one without a fallback).
 * Placements, not plans: the planner returns zigzag's plan wherever it is predicted faster,
 * which on a batch this small and relays between nodes it is. */
static void test_metis_moves_less_than_lpt(void)
{
    const int32_t len[12] = {6000, 3000, 2500, 1800, 900, 700, 500, 300, 120, 60, 20, 1};
    for (int how = 0; how < 2; how++) {
        dcp_placed_t m, l, z;
        place_with(len, 12, "2x4", DCP_STRATEGY_METIS, (dcp_expansion_t)how, 1, &m);
        place_with(len, 12, "2x4", DCP_STRATEGY_LPT, (dcp_expansion_t)how, 1, &l);
        place_with(len, 12, "2x4", DCP_STRATEGY_ZIGZAG, (dcp_expansion_t)how, 1, &z);
        int64_t mt, mi, lt, li, zt, zi;
        traffic_of(&m, 8, &mt, &mi);
        traffic_of(&l, 8, &lt, &li);
        traffic_of(&z, 8, &zt, &zi);
        CU_ASSERT(mt < lt);
        CU_ASSERT(mi < zi);
        if (how == DCP_EXPAND_CLIQUE) CU_ASSERT_EQUAL(m.pl.fallback, 0);
        dcp_placed_release(&m);
        dcp_placed_release(&l);
        dcp_placed_release(&z);
    }
}

/* The device level's vertices: on a node, a row's computation blocks (every head group) in
 * runs of 16 tiles share a vertex, rows never share one, a token block joins its row's last
 * run there (or stands alone), and nothing of another node has a vertex. */
static void test_device_row_vertices(void)
{
    const int32_t len[3] = {40 * 64, 5 * 64, 70};
    dcp_mask_t m[3] = {
        {.kind = DCP_MASK_FULL}, {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};
    const dcp_batch_t batch = {.num_seqs = 3, .lengths = len, .masks = m};
    dcp_blocks_t b = {0};
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_init(&b, &batch, &shape, 64, 2), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_cut(&b, 0), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_tiles(&b), DCP_OK);
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&b, &g), DCP_OK);
    const int64_t nv = b.num_blocks + g.num_comps;
    int32_t *node_of = malloc((size_t)nv * sizeof *node_of), *local = malloc((size_t)nv * 4);
    /* node 1 holds odd token blocks, and the tiles of odd KV blocks (both head groups) */
    for (int32_t t = 0; t < b.num_blocks; t++) node_of[t] = t % 2;
    for (int64_t c = 0; c < g.num_comps; c++) node_of[b.num_blocks + c] = b.tile_kv[c / 2] % 2;
    for (int32_t node = 0; node < 2; node++) {
        const int32_t n = dcp_metis_row_vertices(&b, &g, node_of, node, local);
        int32_t *row_of = malloc((size_t)n * sizeof *row_of);
        for (int32_t i = 0; i < n; i++) row_of[i] = -1;
        for (int64_t v = 0; v < nv; v++) {
            CU_ASSERT((local[v] >= 0) == (node_of[v] == node));
            CU_ASSERT(local[v] < n);
        }
        int32_t q = -1, on = 0, vertex = -1;
        for (int64_t t = 0; t < b.num_tiles; t++) {
            const int32_t *l = &local[b.num_blocks + t * 2];
            if (l[0] < 0) continue;
            CU_ASSERT_EQUAL(l[0], l[1]); /* both head groups */
            if (b.tile_q[t] != q) q = b.tile_q[t], on = 0;
            if (on++ % 16 == 0) { /* a new run: a vertex no other row or run has */
                CU_ASSERT_NOT_EQUAL(l[0], vertex);
                CU_ASSERT_EQUAL(row_of[l[0]], -1);
                row_of[l[0]] = q;
                vertex = l[0];
            }
            CU_ASSERT_EQUAL(l[0], vertex);
        }
        /* a token block: with its row's last run on the node, alone otherwise */
        for (int32_t t = 0; t < b.num_blocks; t++) {
            if (node_of[t] != node) continue;
            const int32_t r = row_of[local[t]];
            CU_ASSERT(r == t || r == -1);
        }
        free(row_of);
    }
    /* sequence 0's 40 full rows have 20 tiles on each node: two runs per row and node */
    const int32_t n0 = dcp_metis_row_vertices(&b, &g, node_of, 0, local);
    CU_ASSERT(n0 >= 40 * 2);
    free(node_of);
    free(local);
    dcp_hypergraph_release(&g);
    dcp_blocks_release(&b);
}

int dcp_suite_metis(void)
{
    static const dcp_test_t tests[] = {
        {"clique_weights", test_clique_weights},
        {"shared_vertices", test_shared_vertices},
        {"large_nets_are_banded", test_large_nets_are_banded},
        {"invalid_result_falls_back_to_lpt", test_invalid_result_falls_back_to_lpt},
        {"single_part_needs_no_metis", test_single_part_needs_no_metis},
        {"metis_moves_less_than_lpt", test_metis_moves_less_than_lpt},
        {"device_row_vertices", test_device_row_vertices},
        {"refusal_falls_back_internal_propagates", test_refusal_falls_back_internal_propagates},
        {NULL, NULL},
    };
    return dcp_add_suite("metis", tests);
}
