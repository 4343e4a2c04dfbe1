/* Placement strategies: every block placed, computation at the query owner, the memory cap,
 * the baselines' layouts, LPT's balance, determinism. */
#include "partition/place.h"
#include "partition/plan.h"
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
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    CU_ASSERT(p && p->stats.strategy == DCP_STRATEGY_METIS);
    dcp_plan_destroy(p);
    dcp_cluster_destroy(c);
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
        {NULL, NULL},
    };
    return dcp_add_suite("place", tests);
}
