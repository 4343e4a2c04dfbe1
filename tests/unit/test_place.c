/* Placement strategies: every block placed, computation at the query owner, the memory cap,
 * the baselines' layouts, LPT's balance, determinism, the strategies' names. */
#include "partition/model/hypergraph.h"
#include "partition/place/place.h"
#include "partition/plan/plan.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

static const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};

typedef struct {
    dcp_blocks_t b;
    dcp_placement_t p;
    dcp_cluster_t *c;
    dcp_plan_options_t o;
} placed_t;

static dcp_status_t place(placed_t *x, const int32_t *len, int32_t n, dcp_mask_kind_t kind,
                          const char *cluster, dcp_strategy_t s, int32_t block, int64_t cap)
{
    dcp_mask_t *m = calloc((size_t)n, sizeof *m);
    for (int32_t i = 0; i < n; i++) m[i].kind = kind;
    const dcp_batch_t batch = {.num_seqs = n, .lengths = len, .masks = m};
    memset(x, 0, sizeof *x);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec(cluster, &x->c), DCP_OK);
    dcp_plan_options_default(&x->o);
    x->o.strategy = s;
    x->o.mem_cap_bytes = cap;
    const dcp_strategy_ops_t *ops = dcp_strategy_ops(s);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_init(&x->b, &batch, &shape, block, 1), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_cut(&x->b, ops->chunks(x->c->num_ranks)), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_tiles(&x->b), DCP_OK);
    x->p.blk_owner = calloc((size_t)x->b.num_blocks, sizeof(int32_t));
    x->p.comp_exec = calloc((size_t)(x->b.num_tiles * x->b.head_blocks), sizeof(int32_t));
    const dcp_place_in_t in = {&x->b, x->c, &x->o};
    const dcp_status_t st = ops->place(&in, &x->p);
    free(m);
    return st;
}

static void unplace(placed_t *x)
{
    free(x->p.blk_owner);
    free(x->p.comp_exec);
    dcp_blocks_release(&x->b);
    dcp_cluster_destroy(x->c);
}

static int64_t max_rank_bytes(const placed_t *x)
{
    int64_t mem[64] = {0}, most = 0;
    for (int32_t t = 0; t < x->b.num_blocks; t++)
        mem[x->p.blk_owner[t]] += dcp_blocks_token_bytes(&x->b, x->b.blk_len[t]);
    for (int r = 0; r < x->c->num_ranks; r++) most = mem[r] > most ? mem[r] : most;
    return most;
}

static void test_every_block_placed_at_query_owner(void)
{
    const int32_t len[6] = {1, 300, 17, 64, 1, 129};
    const char *clusters[] = {"1x1", "1x2", "1x3", "2x4"};
    for (int s = 0; s < DCP_STRATEGY_COUNT; s++)
        for (int c = 0; c < 4; c++) {
            placed_t x;
            CU_ASSERT_EQUAL_FATAL(
                place(&x, len, 6, DCP_MASK_CAUSAL, clusters[c], (dcp_strategy_t)s, 32, 0), DCP_OK);
            for (int32_t t = 0; t < x.b.num_blocks; t++)
                CU_ASSERT(x.p.blk_owner[t] >= 0 && x.p.blk_owner[t] < x.c->num_ranks);
            for (int64_t t = 0; t < x.b.num_tiles; t++) {
                CU_ASSERT(x.p.comp_exec[t] >= 0 && x.p.comp_exec[t] < x.c->num_ranks);
                if (s != DCP_STRATEGY_METIS) /* the baselines compute at the query owner */
                    CU_ASSERT_EQUAL(x.p.comp_exec[t], x.p.blk_owner[x.b.tile_q[t]]);
            }
            unplace(&x);
        }
}

/* Ring: chunk r on rank r. Zigzag: rank r holds chunks r and 2R-1-r. */
static void test_baseline_layouts(void)
{
    const int32_t len[1] = {64};
    placed_t x;
    CU_ASSERT_EQUAL_FATAL(place(&x, len, 1, DCP_MASK_CAUSAL, "1x4", DCP_STRATEGY_RING, 64, 0),
                          DCP_OK);
    CU_ASSERT_EQUAL_FATAL(x.b.num_blocks, 4);
    for (int t = 0; t < 4; t++) CU_ASSERT_EQUAL(x.p.blk_owner[t], t);
    unplace(&x);
    CU_ASSERT_EQUAL_FATAL(place(&x, len, 1, DCP_MASK_CAUSAL, "1x4", DCP_STRATEGY_ZIGZAG, 64, 0),
                          DCP_OK);
    const int32_t want[8] = {0, 1, 2, 3, 3, 2, 1, 0};
    CU_ASSERT_EQUAL_FATAL(x.b.num_blocks, 8);
    for (int t = 0; t < 8; t++) {
        CU_ASSERT_EQUAL(x.p.blk_owner[t], want[t]);
        CU_ASSERT_EQUAL(x.b.blk_len[t], 8);
    }
    unplace(&x);
}

/* 16 equal sequences of one block on 8 ranks: LPT balances memory and compute exactly. */
static void test_lpt_balances_equal_blocks(void)
{
    int32_t len[16];
    for (int i = 0; i < 16; i++) len[i] = 32;
    placed_t x;
    CU_ASSERT_EQUAL_FATAL(place(&x, len, 16, DCP_MASK_CAUSAL, "2x4", DCP_STRATEGY_LPT, 32, 0),
                          DCP_OK);
    int count[8] = {0};
    for (int32_t t = 0; t < x.b.num_blocks; t++) count[x.p.blk_owner[t]]++;
    for (int r = 0; r < 8; r++) CU_ASSERT_EQUAL(count[r], 2);
    unplace(&x);
}

/* LPT stays under a feasible cap; too small a cap, for LPT or ring, is DCP_ERR_CAPACITY. */
static void test_memory_cap(void)
{
    const int32_t len[5] = {700, 33, 1, 250, 96};
    placed_t x;
    CU_ASSERT_EQUAL_FATAL(place(&x, len, 5, DCP_MASK_CAUSAL, "1x4", DCP_STRATEGY_LPT, 64, 0),
                          DCP_OK);
    int64_t total = 0;
    for (int32_t t = 0; t < x.b.num_blocks; t++)
        total += dcp_blocks_token_bytes(&x.b, x.b.blk_len[t]);
    unplace(&x);
    const int64_t cap = total / 4 + dcp_shape_token_bytes(&shape, 64);
    CU_ASSERT_EQUAL_FATAL(place(&x, len, 5, DCP_MASK_CAUSAL, "1x4", DCP_STRATEGY_LPT, 64, cap),
                          DCP_OK);
    CU_ASSERT(max_rank_bytes(&x) <= cap);
    unplace(&x);
    CU_ASSERT_EQUAL(place(&x, len, 5, DCP_MASK_CAUSAL, "1x4", DCP_STRATEGY_LPT, 64, total / 8),
                    DCP_ERR_CAPACITY);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "mem_cap_bytes"));
    unplace(&x);
    CU_ASSERT_EQUAL(place(&x, len, 5, DCP_MASK_CAUSAL, "1x4", DCP_STRATEGY_RING, 64, total / 8),
                    DCP_ERR_CAPACITY);
    unplace(&x);
}

/* The same inputs give byte-identical plans. */
static void test_plans_are_deterministic(void)
{
    const int32_t len[5] = {700, 33, 1, 250, 96};
    dcp_mask_t m[5];
    for (int i = 0; i < 5; i++)
        m[i] = (dcp_mask_t){.kind = DCP_MASK_LAMBDA, .sink = 4, .window = 40};
    for (int s = 0; s < DCP_STRATEGY_COUNT; s++) {
        dcp_plan_t *a = t_plan(len, 5, m, "2x4", (dcp_strategy_t)s, 32, 3, 2);
        dcp_plan_t *b = t_plan(len, 5, m, "2x4", (dcp_strategy_t)s, 32, 3, 2);
        size_t na, nb;
        CU_ASSERT_EQUAL(dcp_plan_serialize(a, NULL, 0, &na), DCP_OK);
        CU_ASSERT_EQUAL(dcp_plan_serialize(b, NULL, 0, &nb), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(na, nb);
        char *ba = malloc(na), *bb = malloc(nb);
        CU_ASSERT_EQUAL(dcp_plan_serialize(a, ba, na, &na), DCP_OK);
        CU_ASSERT_EQUAL(dcp_plan_serialize(b, bb, nb, &nb), DCP_OK);
        CU_ASSERT_EQUAL(memcmp(ba, bb, na), 0);
        free(ba);
        free(bb);
        dcp_plan_destroy(a);
        dcp_plan_destroy(b);
    }
}

/* The static baselines cut every sequence into R (2R) chunks, so many sequences on many
 * ranks make millions of tiny computation blocks: they are refused up front with
 * DCP_ERR_CAPACITY naming the strategy and the limit, and the default planner still plans
 * the batch (its zigzag comparison is skipped). */
static void test_plan_size_limit(void)
{
    enum { N = 200 };
    int32_t len[N];
    dcp_mask_t m[N];
    for (int i = 0; i < N; i++) {
        len[i] = 600;
        m[i] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    }
    const dcp_batch_t batch = {.num_seqs = N, .lengths = len, .masks = m};
    dcp_cluster_t *c;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("32x8", &c), DCP_OK);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.head_blocks = 2;
    const dcp_strategy_t base[2] = {DCP_STRATEGY_RING, DCP_STRATEGY_ZIGZAG};
    for (int i = 0; i < 2; i++) {
        o.strategy = base[i];
        dcp_plan_t *p = NULL;
        CU_ASSERT_EQUAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_ERR_CAPACITY);
        CU_ASSERT_PTR_NULL(p);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), dcp_strategy_name(base[i])));
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "limit 2^22"));
    }
    o.strategy = DCP_STRATEGY_METIS;
    o.hierarchy = 0; /* METIS's global plan, without the candidates of the default's search */
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    CU_ASSERT(p && p->stats.strategy == DCP_STRATEGY_METIS);
    dcp_plan_destroy(p);
    dcp_cluster_destroy(c);
}

/* Bytes leaving each rank's node from blocks it owns (heat[r]): per net, its bytes times the
 * other nodes that read it. */
static void leaving_bytes(const placed_t *x, int64_t *heat)
{
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&x->b, &g), DCP_OK);
    const int32_t devs = x->c->devs_per_node;
    memset(heat, 0, (size_t)x->c->num_ranks * sizeof *heat);
    for (int64_t e = 0; e < g.num_nets; e++) {
        const int32_t o = x->p.blk_owner[dcp_net_block(&g, e)];
        uint8_t seen[64] = {0};
        for (int64_t i = g.net_off[e]; i < g.net_off[e + 1]; i++) {
            const int32_t n = x->p.comp_exec[g.members[i]] / devs;
            if (n == o / devs || seen[n]) continue;
            seen[n] = 1;
            heat[o] += g.weight[e];
        }
    }
    dcp_hypergraph_release(&g);
}

/* A long causal sequence whose first half rank 0 owns, its second half on node 1: every
 * block of the first half leaves for node 1 through rank 0's link. Spreading swaps them with
 * the short sequences' blocks on ranks 1-3: node 0's busiest link carries less, and no byte
 * between nodes, owned byte or computation block moves. */
static void test_links_spread(void)
{
    const int32_t len[7] = {2048, 256, 256, 256, 256, 256, 256};
    placed_t x;
    CU_ASSERT_EQUAL_FATAL(place(&x, len, 7, DCP_MASK_CAUSAL, "2x4", DCP_STRATEGY_LPT, 64, 0),
                          DCP_OK);
    CU_ASSERT_EQUAL_FATAL(x.b.num_blocks, 32 + 6 * 4);
    for (int32_t t = 0; t < x.b.num_blocks; t++) {
        const int32_t seq = x.b.blk_seq[t];
        x.p.blk_owner[t] = seq > 0 ? (seq <= 3 ? seq : seq + 1) : t < 16 ? 0 : 4 + t % 4;
    }
    dcp_place_at_query_owner(&x.b, &x.p);
    const int64_t nc = x.b.num_tiles * x.b.head_blocks;
    int32_t *exec = malloc((size_t)nc * sizeof *exec);
    memcpy(exec, x.p.comp_exec, (size_t)nc * sizeof *exec);
    int64_t before[8], after[8], total0, inter0, total1, inter1, *flops0, *mem0, *flops1, *mem1;
    leaving_bytes(&x, before);
    dcp_hypergraph_t g;
    CU_ASSERT_EQUAL_FATAL(dcp_hypergraph_build(&x.b, &g), DCP_OK);
    CU_ASSERT_EQUAL(
        dcp_hypergraph_traffic(&g, x.p.blk_owner, x.p.comp_exec, 8, 4, &total0, &inter0), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_place_loads(&x.b, &x.p, 8, &flops0, &mem0), DCP_OK);
    CU_ASSERT(before[0] > 0 && before[1] == 0 && before[2] == 0 && before[3] == 0);

    CU_ASSERT_EQUAL_FATAL(dcp_place_spread_links(&x.b, x.c, &x.p), DCP_OK);
    leaving_bytes(&x, after);
    CU_ASSERT(after[0] < before[0]);
    int64_t most = 0, sum0 = 0, sum1 = 0;
    for (int r = 0; r < 4; r++) {
        most = after[r] > most ? after[r] : most;
        sum0 += before[r];
        sum1 += after[r];
    }
    CU_ASSERT_EQUAL(sum1, sum0);            /* the node's bytes, over more links */
    CU_ASSERT(most <= sum0 / 4 + sum0 / 8); /* near an even share of four links */
    CU_ASSERT_EQUAL(
        dcp_hypergraph_traffic(&g, x.p.blk_owner, x.p.comp_exec, 8, 4, &total1, &inter1), DCP_OK);
    CU_ASSERT_EQUAL(inter1, inter0);
    CU_ASSERT_EQUAL(memcmp(exec, x.p.comp_exec, (size_t)nc * sizeof *exec), 0);
    CU_ASSERT_EQUAL_FATAL(dcp_place_loads(&x.b, &x.p, 8, &flops1, &mem1), DCP_OK);
    CU_ASSERT_EQUAL(memcmp(mem0, mem1, 8 * sizeof *mem0), 0);
    CU_ASSERT_EQUAL(memcmp(flops0, flops1, 8 * sizeof *flops0), 0);
    free(flops0);
    free(mem0);
    free(flops1);
    free(mem1);
    free(exec);
    dcp_hypergraph_release(&g);
    unplace(&x);
}

/* The names (strategy_name.c) and the strategy table (place.c) are two lists: every strategy
 * of the table has a name that parses back to it, and an id without a strategy has none. */
static void test_strategy_names(void)
{
    int named = 0;
    for (int i = -1; i <= DCP_STRATEGY_PEER_END; i++) {
        const dcp_strategy_t id = (dcp_strategy_t)i;
        const char *name = dcp_strategy_name(id);
        const dcp_strategy_ops_t *ops = dcp_strategy_ops(id);
        if (!ops) {
            CU_ASSERT_STRING_EQUAL(name, "unknown");
            continue;
        }
        CU_ASSERT_EQUAL(ops->id, id);
        CU_ASSERT_STRING_NOT_EQUAL(name, "unknown");
        dcp_strategy_t back = DCP_STRATEGY_AUTO;
        CU_ASSERT_EQUAL(dcp_strategy_parse(name, &back), DCP_OK);
        CU_ASSERT_EQUAL(back, id);
        named++;
    }
    CU_ASSERT_EQUAL(named, 10);
    CU_ASSERT_STRING_EQUAL(dcp_strategy_name(DCP_STRATEGY_AUTO), "auto");
}

int dcp_suite_place(void)
{
    static const dcp_test_t tests[] = {
        {"every_block_placed_at_query_owner", test_every_block_placed_at_query_owner},
        {"baseline_layouts", test_baseline_layouts},
        {"lpt_balances_equal_blocks", test_lpt_balances_equal_blocks},
        {"memory_cap", test_memory_cap},
        {"plans_are_deterministic", test_plans_are_deterministic},
        {"plan_size_limit", test_plan_size_limit},
        {"links_spread", test_links_spread},
        {"strategy_names", test_strategy_names},
        {NULL, NULL},
    };
    return dcp_add_suite("place", tests);
}
