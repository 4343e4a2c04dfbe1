/* Token blocks and tiles. */
#include "partition/model/blocks.h"
#include "partition/model/mask.h"
#include "tests/unit/mask_bf.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>

static const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};

static void init(dcp_blocks_t *b, const int32_t *len, int32_t n, const dcp_mask_t *masks,
                 int32_t block, int32_t chunks)
{
    const dcp_batch_t batch = {.num_seqs = n, .lengths = len, .masks = masks};
    *b = (dcp_blocks_t){0};
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_init(b, &batch, &shape, block, 1), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_cut(b, chunks), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcp_blocks_tiles(b), DCP_OK);
}

/* B-aligned cutting: L = 1, L < B, L = B, L not a multiple of B. */
static void test_aligned_blocks(void)
{
    const int32_t len[5] = {1, 5, 16, 17, 40};
    dcp_mask_t m[5];
    for (int i = 0; i < 5; i++) m[i] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    dcp_blocks_t b;
    init(&b, len, 5, m, 16, 0);
    const int32_t want_len[] = {1, 5, 16, 16, 1, 16, 16, 8};
    const int32_t want_start[] = {0, 0, 0, 0, 16, 0, 16, 32};
    CU_ASSERT_EQUAL_FATAL(b.num_blocks, 8);
    for (int t = 0; t < 8; t++) {
        CU_ASSERT_EQUAL(b.blk_len[t], want_len[t]);
        CU_ASSERT_EQUAL(b.blk_start[t], want_start[t]);
    }
    CU_ASSERT_EQUAL(b.seq_blk[3], 3);
    CU_ASSERT_EQUAL(b.seq_blk[5], 8);
    dcp_blocks_release(&b);
}

static void expect_blocks(const dcp_blocks_t *b, int32_t s, const int32_t *start,
                          const int32_t *len, int32_t n)
{
    CU_ASSERT_EQUAL_FATAL(b->seq_blk[s + 1] - b->seq_blk[s], n);
    for (int32_t t = 0; t < n; t++) {
        CU_ASSERT_EQUAL(b->blk_start[b->seq_blk[s] + t], start[t]);
        CU_ASSERT_EQUAL(b->blk_len[b->seq_blk[s] + t], len[t]);
    }
}

/* Structure cuts: a blockwise sequence of more than two blocks is cut at the end of its sink
 * block and at the start of its test block, a lambda one at the end of its sink; blocks of B
 * run on from each cut; sequences of at most 2B and masks without structure keep B-aligned
 * blocks. */
static void test_structure_cuts(void)
{
    int32_t c[DCP_MASK_MAX_CUTS];
    const dcp_mask_t bw = {.kind = DCP_MASK_BLOCKWISE, .block = 256, .k = 2};
    const dcp_mask_t lam = {.kind = DCP_MASK_LAMBDA, .sink = 64, .window = 512};
    CU_ASSERT_EQUAL(dcp_mask_cuts(&bw, 1000, c), 2);
    CU_ASSERT(c[0] == 256 && c[1] == 768);
    CU_ASSERT_EQUAL(dcp_mask_cuts(&bw, 600, c), 2);
    CU_ASSERT(c[0] == 256 && c[1] == 512);
    CU_ASSERT_EQUAL(dcp_mask_cuts(&bw, 512, c), 0); /* two blocks: causal */
    CU_ASSERT_EQUAL(dcp_mask_cuts(&lam, 1000, c), 1);
    CU_ASSERT_EQUAL(c[0], 64);
    CU_ASSERT_EQUAL(dcp_mask_cuts(&lam, 64, c), 0);
    const dcp_mask_t nosink = {.kind = DCP_MASK_LAMBDA, .sink = 0, .window = 512};
    CU_ASSERT_EQUAL(dcp_mask_cuts(&nosink, 1000, c), 0);
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dcp_mask_cuts(&causal, 1000, c), 0);

    const int32_t len[4] = {5000, 2048, 3000, 5000};
    const dcp_mask_t m[4] = {bw, bw, lam, causal};
    dcp_blocks_t b;
    init(&b, len, 4, m, 1024, 0);
    expect_blocks(&b, 0, (const int32_t[]){0, 256, 1280, 2304, 3328, 4352, 4864},
                  (const int32_t[]){256, 1024, 1024, 1024, 1024, 512, 136}, 7);
    expect_blocks(&b, 1, (const int32_t[]){0, 1024}, (const int32_t[]){1024, 1024}, 2);
    expect_blocks(&b, 2, (const int32_t[]){0, 64, 1088, 2112},
                  (const int32_t[]){64, 1024, 1024, 888}, 4);
    expect_blocks(&b, 3, (const int32_t[]){0, 1024, 2048, 3072, 4096},
                  (const int32_t[]){1024, 1024, 1024, 1024, 904}, 5);
    /* the test block's rows read every key: its tiles with the middle keys hold 136 x 1024 pairs */
    const int64_t t = dcp_blocks_find_tile(&b, 6, 2);
    CU_ASSERT_FATAL(t >= 0);
    CU_ASSERT_EQUAL(b.tile_pairs[t], 136 * 1024);
    CU_ASSERT_EQUAL(b.tile_full[t], 1);
    /* a middle query block reads only the sink block of the first 1024 keys */
    CU_ASSERT(dcp_blocks_find_tile(&b, 4, 0) >= 0);
    CU_ASSERT_EQUAL(b.tile_full[dcp_blocks_find_tile(&b, 4, 0)], 1);
    dcp_blocks_release(&b);
}

/* Chunked cutting (ring, zigzag): floor(c * L / chunks) boundaries, empty chunks skipped,
 * chunks longer than B cut again. */
static void test_chunked_blocks(void)
{
    const int32_t len[2] = {10, 3};
    const dcp_mask_t m[2] = {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};
    dcp_blocks_t b;
    init(&b, len, 2, m, 2, 4);
    /* L = 10, 4 chunks: [0,2) [2,5) [5,7) [7,10) -> blocks of <= 2 */
    const int32_t want_start[] = {0, 2, 4, 5, 7, 9, 0, 1, 2};
    const int32_t want_chunk[] = {0, 1, 1, 2, 3, 3, 1, 2, 3};
    CU_ASSERT_EQUAL_FATAL(b.num_blocks, 9);
    for (int t = 0; t < 9; t++) {
        CU_ASSERT_EQUAL(b.blk_start[t], want_start[t]);
        CU_ASSERT_EQUAL(b.blk_chunk[t], want_chunk[t]);
    }
    dcp_blocks_release(&b);
}

/* Tiles: exactly the (q block, kv block) pairs with allowed pairs, with exact counts and
 * full flags, for every mask and random batches. */
static void test_tiles_exact(void)
{
    dcpt_rng_t rng = {21};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 8; rep++) {
            int32_t len[4];
            dcp_mask_t m[4];
            int32_t *store[4];
            for (int s = 0; s < 4; s++) {
                len[s] = (int32_t)dcpt_rng_range(&rng, 1, 90);
                m[s] = t_random_mask(&rng, (dcp_mask_kind_t)kind, len[s], &store[s]);
            }
            const int32_t block = (int32_t)dcpt_rng_range(&rng, 1, 20);
            dcp_blocks_t b;
            init(&b, len, 4, m, block, rep % 2 ? 3 : 0);
            int64_t t = 0;
            for (int32_t tq = 0; tq < b.num_blocks; tq++)
                for (int32_t tk = 0; tk < b.num_blocks; tk++) {
                    if (b.blk_seq[tq] != b.blk_seq[tk]) continue;
                    const int32_t s = b.blk_seq[tq], L = len[s];
                    int64_t pairs = 0;
                    for (int32_t i = b.blk_start[tq]; i < b.blk_start[tq] + b.blk_len[tq]; i++)
                        for (int32_t j = b.blk_start[tk]; j < b.blk_start[tk] + b.blk_len[tk]; j++)
                            pairs += bf_allowed(&m[s], L, i, j);
                    if (pairs == 0) continue;
                    /* tiles are sorted by (q block, kv block): the next one must be this */
                    CU_ASSERT_FATAL(t < b.num_tiles);
                    CU_ASSERT_EQUAL(b.tile_q[t], tq);
                    CU_ASSERT_EQUAL(b.tile_kv[t], tk);
                    CU_ASSERT_EQUAL(b.tile_pairs[t], pairs);
                    CU_ASSERT_EQUAL(b.tile_full[t],
                                    pairs == (int64_t)b.blk_len[tq] * b.blk_len[tk]);
                    t++;
                }
            CU_ASSERT_EQUAL(t, b.num_tiles);
            /* the envelope bound the planner checks its limit with holds, within a few
             * blocks per query block (two ranges may meet one KV block) */
            int64_t bound = -1;
            CU_ASSERT_EQUAL(dcp_blocks_tile_bound(&b, &bound), DCP_OK);
            CU_ASSERT(bound >= b.num_tiles);
            CU_ASSERT(bound <= b.num_tiles + 2 * (int64_t)b.num_blocks);
            dcp_blocks_release(&b);
            for (int s = 0; s < 4; s++) free(store[s]);
        }
}

static void test_bad_batches_name_the_field(void)
{
    const int32_t len[2] = {5, 0};
    const dcp_mask_t m[2] = {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}};
    const dcp_batch_t batch = {.num_seqs = 2, .lengths = len, .masks = m};
    dcp_blocks_t b = {0};
    CU_ASSERT_EQUAL(dcp_blocks_init(&b, &batch, &shape, 16, 1), DCP_ERR_INVALID_ARG);
    CU_ASSERT_STRING_EQUAL(dcp_last_error(), "batch.lengths[1] = 0, must be >= 1");
    dcp_attn_shape_t bad = shape;
    bad.num_kv_heads = 3;
    const int32_t ok_len[2] = {5, 6};
    const dcp_batch_t ok = {.num_seqs = 2, .lengths = ok_len, .masks = m};
    CU_ASSERT_EQUAL(dcp_blocks_init(&b, &ok, &bad, 16, 1), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_blocks_init(&b, &ok, &shape, 0, 1), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_blocks_init(&b, &ok, &shape, 16, 3), DCP_ERR_INVALID_ARG);
    dcp_blocks_release(&b);
}

int dcp_suite_blocks(void)
{
    static const dcp_test_t tests[] = {
        {"aligned_blocks", test_aligned_blocks},
        {"chunked_blocks", test_chunked_blocks},
        {"structure_cuts", test_structure_cuts},
        {"tiles_exact", test_tiles_exact},
        {"bad_batches_name_the_field", test_bad_batches_name_the_field},
        {NULL, NULL},
    };
    return dcp_add_suite("blocks", tests);
}
