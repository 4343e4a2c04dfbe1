/*
 * The attention engine proven on the CPU: the segmenter's pieces cover a
 * tile's allowed pairs exactly, in the classes they claim (brute force over every pair); the
 * cuDNN data path (cut, ragged packing, dense calls of the CPU twin of cuDNN's SDPA, merges,
 * the backward's O from delta and its adds) gives the O, LSE, dQ, dK and dV the plain tile
 * list gives, for every mask kind and strategy, odd lengths, head groups, GQA and several
 * minimum dense run lengths, fp32 and bf16 storage; the cuDNN version policy; the engine
 * choice on CPU contexts; and, where a cuDNN library loads (no GPU needed), the descriptors
 * of the dense calls the policy allows finalized by the real library.
 */
#include "include/base/mask_rule.h"
#include "kernels/cpu.h"
#include "kernels/cuda/device.h"
#include "kernels/segment.h"
#include "partition/plan/plan.h"
#include "plugin/attn_engine.h"
#include "plugin/cli/support/harness.h"
#include "plugin/cli/support/tile_case.h"
#include "plugin/context.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether query q of the sequence may attend key k. */
static int allowed(const dcp_seq_info_t *s, int32_t q, int32_t k)
{
    int32_t r[4];
    dcp_mask_keys(&s->mask, s->len, q, r);
    return (k >= r[0] && k < r[1]) || (k >= r[2] && k < r[3]);
}

/* The absolute key of line key u of a group. */
static int32_t line_abs(const dcp_seg_line_t *line, const dcp_tile_t *tiles, int32_t u)
{
    int32_t i = 0;
    while (line->u0[i + 1] <= u) i++;
    return tiles[line->tile[i]].kv_pos + (u - line->u0[i]);
}

/* The segments of one group against the mask, pair by pair: dense segments hold allowed pairs
 * only, in exactly their class's shape, and every row of one sees a key; every allowed pair
 * of the group's tiles is in exactly one segment. */
static void check_group(const dcp_seq_info_t *seq, const dcp_tile_group_t *g,
                        const dcp_tile_t *tiles, const dcp_seg_t *sg, int64_t n, int32_t min_rows,
                        int32_t dense)
{
    dcp_seg_line_t line;
    memset(&line, 0, sizeof line);
    CU_ASSERT_EQUAL_FATAL(dcp_seg_line(g, tiles, &line), DCP_OK);
    const int32_t U = line.u0[line.n];
    uint8_t *cover = calloc((size_t)g->q_len * U + 1, 1);
    int64_t pairs = 0, want = 0;
    for (int64_t i = 0; i < n; i++) {
        const dcp_seg_t *p = &sg[i];
        CU_ASSERT(p->r0 >= 0 && p->r0 < p->r1 && p->r1 <= g->q_len);
        CU_ASSERT_FATAL(p->k0 >= 0 && p->k0 < p->k1 && p->k1 <= U);
        const int dense_cls = p->cls != DCP_SEG_MASKED;
        if (dense_cls) {
            CU_ASSERT(p->r1 - p->r0 >= min_rows);
            CU_ASSERT(dense & DCP_SEG_BIT(p->cls));
        }
        const int windowed = p->cls == DCP_SEG_BAND || p->cls == DCP_SEG_LEFT;
        CU_ASSERT(windowed ? p->window >= 1 : p->window == 0);
        const int32_t sq = p->r1 - p->r0, skv = p->k1 - p->k0;
        int64_t mine = 0;
        for (int32_t r = p->r0; r < p->r1; r++) {
            int64_t row = 0;
            for (int32_t k = p->k0; k < p->k1; k++) {
                const int ok = allowed(seq, g->q_pos + r, line_abs(&line, tiles, k));
                if (dense_cls)
                    CU_ASSERT_EQUAL(ok, dcp_seg_sees(p->cls, p->window, r - p->r0, k - p->k0, sq,
                                                     skv));
                if (!ok) continue;
                row++;
                CU_ASSERT_EQUAL(cover[(size_t)r * U + k], 0);
                cover[(size_t)r * U + k] = 1;
            }
            if (dense_cls) CU_ASSERT(row > 0);
            mine += row;
        }
        CU_ASSERT_EQUAL(mine, p->pairs);
        pairs += p->pairs;
    }
    for (int32_t r = 0; r < g->q_len; r++)
        for (int32_t k = 0; k < U; k++) {
            const int ok = allowed(seq, g->q_pos + r, line_abs(&line, tiles, k));
            want += ok;
            CU_ASSERT_EQUAL(cover[(size_t)r * U + k], ok);
        }
    CU_ASSERT_EQUAL(pairs, want);
    free(cover);
    dcp_seg_line_free(&line);
}

/* Random groups of random masks, against tiles in any order with gaps between them: every
 * segment checked pair by pair, for several minimum run lengths and class sets (an engine may
 * lack classes). */
static void test_cut_is_exact(void)
{
    dcpt_rng_t rng = {7};
    const int32_t mins[3] = {1, 3, 16};
    const int32_t sets[4] = {DCP_SEG_ALL_DENSE,
                             DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL),
                             DCP_SEG_BIT(DCP_SEG_FULL), 0};
    int64_t by_class[DCP_SEG_CLASSES] = {0};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 8; rep++) {
            const int32_t len = 40 + (int32_t)dcpt_rng_range(&rng, 0, 259);
            int32_t *store = NULL;
            dcp_seq_info_t seq = {len, t_random_mask(&rng, (dcp_mask_kind_t)kind, len, &store)};
            /* one group of a random query range against up to five key ranges, some left out
             * (another rank's), in shuffled order */
            const int32_t q0 = (int32_t)dcpt_rng_range(&rng, 0, len - 1);
            const int32_t q1 = q0 + 1 + (int32_t)dcpt_rng_range(&rng, 0, len - q0 - 1);
            dcp_tile_t tiles[5];
            int nt = 0;
            for (int32_t k0 = 0; k0 < len && nt < 5;) {
                const int32_t k1 = k0 + 1 + (int32_t)dcpt_rng_range(&rng, 0, (len - k0 - 1) / 2);
                if (rep % 2 == 0 || dcpt_rng_range(&rng, 0, 3) != 0) {
                    memset(&tiles[nt], 0, sizeof tiles[nt]);
                    tiles[nt].kv_pos = k0;
                    tiles[nt].kv_len = k1 - k0;
                    nt++;
                }
                k0 = k1;
            }
            if (nt == 0) {
                free(store);
                continue;
            }
            for (int i = nt - 1; i > 0; i--) { /* a group's tiles come in any order */
                const int j = (int)dcpt_rng_range(&rng, 0, i);
                const dcp_tile_t t = tiles[i];
                tiles[i] = tiles[j];
                tiles[j] = t;
            }
            dcp_tile_group_t g;
            memset(&g, 0, sizeof g);
            g.q_pos = q0;
            g.q_len = q1 - q0;
            g.num_tiles = nt;
            for (int mi = 0; mi < 3; mi++)
                for (int si = 0; si < 4; si++) {
                    dcp_seg_t *sg = NULL;
                    int64_t n = 0;
                    CU_ASSERT_EQUAL_FATAL(dcp_seg_cut(&seq, &g, 1, tiles, mins[mi], sets[si], &sg, &n),
                                          DCP_OK);
                    check_group(&seq, &g, tiles, sg, n, mins[mi], sets[si]);
                    for (int64_t i = 0; i < n; i++) {
                        CU_ASSERT_EQUAL(sg[i].group, 0);
                        by_class[sg[i].cls] += sg[i].pairs;
                    }
                    free(sg);
                }
            free(store);
        }
    /* every class occurs: the brute force above is not vacuous */
    for (int c = 0; c < DCP_SEG_CLASSES; c++) {
        CU_ASSERT(by_class[c] > 0);
        if (by_class[c] == 0) fprintf(stderr, "segment: no %s segment cut\n", dcp_seg_class_name(c));
    }
    dcp_seg_t *sg = NULL;
    int64_t n = 0;
    CU_ASSERT_EQUAL(dcp_seg_cut(NULL, NULL, 0, NULL, 0, 0, &sg, &n), DCP_ERR_INVALID_ARG);
}

/* Tiles of one group that share keys are refused by name. */
static void test_line_refuses_overlap(void)
{
    dcp_tile_t t[2];
    memset(t, 0, sizeof t);
    t[0].kv_pos = 0;
    t[0].kv_len = 10;
    t[1].kv_pos = 8;
    t[1].kv_len = 4;
    dcp_tile_group_t g;
    memset(&g, 0, sizeof g);
    g.num_tiles = 2;
    dcp_seg_line_t line;
    memset(&line, 0, sizeof line);
    CU_ASSERT_EQUAL(dcp_seg_line(&g, t, &line), DCP_ERR_INTERNAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "share keys"));
    t[1].kv_pos = 10;
    CU_ASSERT_EQUAL(dcp_seg_line(&g, t, &line), DCP_OK);
    CU_ASSERT_EQUAL(line.u0[2], 14);
    dcp_seg_line_free(&line);
}

static dcp_plan_t *plan_for(const dcpt_harness_t *h, const char *cluster, dcp_strategy_t s,
                            int32_t block, int32_t head_blocks)
{
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s;
    o.block_size = block;
    o.head_blocks = head_blocks;
    const dcp_batch_t b = dcpt_harness_batch(h);
    return t_plan_shape(b.lengths, b.num_seqs, b.masks, cluster, &h->shape, &o);
}

/* One plan run with the twin and compared with the plain tile list's result on the CPU
 * (dcpt_harness_repeat: within 2 tol of each other, and each within tol of the reference,
 * or FlashAttention's bound for bf16); the dense share of rank 0 returned in pairs. */
static void expect_twin_matches(dcpt_harness_t *h, const dcp_plan_t *p, int32_t min_rows,
                                const char *what, int64_t pairs[DCP_SEG_CLASSES])
{
    char rows[16];
    snprintf(rows, sizeof rows, "%d", min_rows);
    setenv("DCP_ATTN_MIN_ROWS", rows, 1);
    h->attn_engine = "twin";
    dcpt_harness_repeat_t rep;
    const dcp_status_t st = dcpt_harness_repeat(h, p, 1, 30.0, 1e-5, "cpu", &rep);
    dcpt_harness_result_t r;
    const dcp_status_t st2 = dcpt_harness_run(h, p, 0, 1, 30.0, 1e-5, "cpu", &r);
    unsetenv("DCP_ATTN_MIN_ROWS");
    h->attn_engine = NULL;
    CU_ASSERT_EQUAL(st, DCP_OK);
    CU_ASSERT_EQUAL(st2, DCP_OK);
    CU_ASSERT_EQUAL(rep.runs, 1);
    CU_ASSERT_EQUAL(rep.mismatches, 0);
    CU_ASSERT(r.passed);
    CU_ASSERT_STRING_EQUAL(r.engine_name, "twin");
    for (int c = 0; c < DCP_SEG_CLASSES; c++) pairs[c] += r.engine.pairs[c];
    if (st != DCP_OK || rep.mismatches || !r.passed)
        fprintf(stderr,
                "segment twin %s (min rows %d): %s; diff o %.3g lse %.3g dq %.3g dk %.3g dv "
                "%.3g (allowed %.3g %.3g %.3g %.3g %.3g)\n",
                what, min_rows, st ? dcp_last_error() : "ok", rep.max_diff[0], rep.max_diff[1],
                rep.max_diff[2], rep.max_diff[3], rep.max_diff[4], rep.allowed[0], rep.allowed[1],
                rep.allowed[2], rep.allowed[3], rep.allowed[4]);
}

/* Every mask kind x ring, zigzag, lpt, metis on 4 ranks (2x2), odd lengths with 1-token
 * sequences, GQA 2 and 4 with 1 and 2 head groups, minimum dense runs of 1, 5 and 64 rows,
 * fp32: the twin's outputs and gradients are the tile list's. */
static void test_twin_matches_tile_list(void)
{
    const int32_t len[5] = {157, 1, 300, 63, 1};
    const dcp_attn_shape_t shapes[2] = {{4, 2, 16, DCP_DTYPE_FP32, 0.0f},
                                        {8, 2, 16, DCP_DTYPE_FP32, 0.0f}};
    const char *specs[DCP_MASK_KIND_COUNT - 1] = {"full",        "causal",        "window:37",
                                                  "lambda:4:40", "blockwise:16:2",
                                                  "shared-question:0.2:3"};
    const int32_t mins[3] = {1, 5, 64};
    int64_t pairs[DCP_SEG_CLASSES] = {0};
    dcpt_rng_t rng = {3};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
        dcp_mask_t m[5];
        int32_t *store[5] = {NULL};
        for (int s = 0; s < 5; s++) {
            if (kind == DCP_MASK_CUSTOM)
                m[s] = t_random_mask(&rng, DCP_MASK_CUSTOM, len[s], &store[s]);
            else
                CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[kind], &m[s]), DCP_OK);
        }
        dcpt_harness_t *h = NULL;
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 5, m, &shapes[kind % 2], 40 + kind, &h), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 50 + kind), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
        for (int s = DCP_STRATEGY_RING; s <= DCP_STRATEGY_METIS; s++) {
            dcp_plan_t *p = plan_for(h, "2x2", (dcp_strategy_t)s, 32, 1 + (s + kind) % 2);
            CU_ASSERT_PTR_NOT_NULL_FATAL(p);
            char what[64];
            snprintf(what, sizeof what, "mask kind %d strategy %s", kind,
                     dcp_strategy_name((dcp_strategy_t)s));
            expect_twin_matches(h, p, mins[(s + kind) % 3], what, pairs);
            dcp_plan_destroy(p);
        }
        dcpt_harness_destroy(h);
        for (int s = 0; s < 5; s++) free(store[s]);
    }
    /* the dense path ran: every class went to the twin */
    for (int c = 0; c < DCP_SEG_CLASSES; c++) CU_ASSERT(pairs[c] > 0);
}

/* bf16 storage: the twin rounds O and the dense gradients to bf16 as cuDNN does; the result
 * still meets FlashAttention's bound against the reference, and the plain path's. */
static void test_twin_bf16(void)
{
    const int32_t len[3] = {257, 130, 77};
    const dcp_attn_shape_t shape = {4, 1, 32, DCP_DTYPE_BF16, 0.0f};
    const char *specs[2] = {"causal", "lambda:8:64"};
    int64_t pairs[DCP_SEG_CLASSES] = {0};
    for (int k = 0; k < 2; k++) {
        dcp_mask_t m[3];
        for (int s = 0; s < 3; s++) CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[k], &m[s]), DCP_OK);
        dcpt_harness_t *h = NULL;
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 3, m, &shape, 9 + k, &h), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 19 + k), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
        dcp_plan_t *p = plan_for(h, "1x2", DCP_STRATEGY_ZIGZAG, 64, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        expect_twin_matches(h, p, 16, specs[k], pairs);
        dcp_plan_destroy(p);
        dcpt_harness_destroy(h);
    }
    CU_ASSERT(pairs[DCP_SEG_FULL] + pairs[DCP_SEG_CAUSAL] > 0);
}

/* A value head dim of its own (MLA): the twin packs V, O, dO and dV rows D_v wide and gives
 * the tile list's O, LSE and gradients, every mask kind on two strategies, fp32 and bf16. */
static void test_twin_mla(void)
{
    const int32_t len[4] = {211, 1, 130, 77};
    const dcp_attn_shape_t shapes[2] = {
        {.num_heads = 4, .num_kv_heads = 2, .head_dim = 24, .dtype = DCP_DTYPE_FP32, .head_dim_v = 16},
        {.num_heads = 4, .num_kv_heads = 1, .head_dim = 16, .dtype = DCP_DTYPE_BF16, .head_dim_v = 24}};
    const char *specs[4] = {"causal", "window:37", "lambda:4:40", "shared-question:0.2:3"};
    int64_t pairs[DCP_SEG_CLASSES] = {0};
    for (int k = 0; k < 4; k++) {
        dcp_mask_t m[4];
        for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[k], &m[i]), DCP_OK);
        dcpt_harness_t *h = NULL;
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 4, m, &shapes[k % 2], 60 + k, &h), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 70 + k), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
        const dcp_strategy_t s = k % 2 ? DCP_STRATEGY_ZIGZAG : DCP_STRATEGY_METIS;
        dcp_plan_t *p = plan_for(h, "2x2", s, 32, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        expect_twin_matches(h, p, 8, specs[k], pairs);
        dcp_plan_destroy(p);
        dcpt_harness_destroy(h);
    }
    CU_ASSERT(pairs[DCP_SEG_CAUSAL] > 0 && pairs[DCP_SEG_BAND] + pairs[DCP_SEG_LEFT] > 0);
}

/* A plan with a softcap runs on dcp's kernels on every engine: the twin (cuDNN's stand-in)
 * takes none of its pairs, its note says why, and the result still meets the reference; the
 * same plan without a softcap runs its dense segments on the twin. */
static void test_softcap_runs_own(void)
{
    const int32_t len[3] = {157, 64, 90};
    dcp_mask_t m[3];
    for (int s = 0; s < 3; s++) CU_ASSERT_EQUAL_FATAL(dcp_mask_parse("causal", &m[s]), DCP_OK);
    for (int capped = 1; capped >= 0; capped--) {
        const dcp_attn_shape_t shape = {.num_heads = 4, .num_kv_heads = 2, .head_dim = 16,
                                        .dtype = DCP_DTYPE_FP32,
                                        .softcap = capped ? 5.0f : 0.0f};
        dcpt_harness_t *h = NULL;
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 3, m, &shape, 80 + capped, &h), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 90 + capped), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
        dcp_plan_t *p = plan_for(h, "1x2", DCP_STRATEGY_ZIGZAG, 32, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        h->attn_engine = "twin";
        setenv("DCP_ATTN_MIN_ROWS", "8", 1); /* zigzag's chunks here are 40 rows or fewer */
        dcpt_harness_result_t r;
        CU_ASSERT_EQUAL(dcpt_harness_run(h, p, 0, 1, 30.0, 1e-5, "cpu", &r), DCP_OK);
        unsetenv("DCP_ATTN_MIN_ROWS");
        h->attn_engine = NULL;
        CU_ASSERT(r.passed);
        CU_ASSERT_STRING_EQUAL(r.engine_name, "twin");
        int64_t dense = 0;
        for (int c = 0; c < DCP_ATTN_CLASS_MASKED; c++) dense += r.engine.pairs[c] + r.engine.pairs_bwd[c];
        if (capped) {
            CU_ASSERT_EQUAL(dense, 0);
            CU_ASSERT_PTR_NOT_NULL(strstr(r.engine_note, "softcap"));
        } else {
            CU_ASSERT(dense > 0);
            CU_ASSERT_PTR_NULL(strstr(r.engine_note, "softcap"));
        }
        dcp_plan_destroy(p);
        dcpt_harness_destroy(h);
    }
}

/* Whether rows [0, ra) of view a (width wa) and rows [0, rb) of b (width wb) share an element:
 * row by row, exact for strided views. */
static int rows_meet(dcp_view_t a, int64_t ra, int64_t wa, dcp_view_t b, int64_t rb, int64_t wb)
{
    if (a.buf != b.buf) return 0;
    for (int64_t x = 0; x < ra; x++)
        for (int64_t y = 0; y < rb; y++) {
            const int64_t p = a.off + x * a.stride, q = b.off + y * b.stride;
            if (p < q + wb && q < p + wa) return 1;
        }
    return 0;
}

static int tile_cmp(const void *x, const void *y)
{
    const dcp_tile_t *a = x, *b = y;
    const int64_t ka[4] = {a->dk.off, a->k.off, a->kv_len, a->kv_pos},
                  kb[4] = {b->dk.off, b->k.off, b->kv_len, b->kv_pos};
    for (int i = 0; i < 4; i++)
        if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

static int copy_cmp(const void *x, const void *y)
{
    const dcp_copy_item_t *a = x, *b = y;
    const int64_t ka[5] = {a->dst.buf, a->dst.off, a->src.buf, a->src.off, a->rows},
                  kb[5] = {b->dst.buf, b->dst.off, b->src.buf, b->src.off, b->rows};
    for (int i = 0; i < 5; i++)
        if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

/* The waves of one deterministic backward launch d hold what dcp_seg_waves promises, and the
 * launch does the same work as x, the same launch built without waves: the same own tiles
 * against the same rows, the same adds. The launch's waves are added to *waves. */
static void check_waves(const dcp_seg_prog_t *pd, const dcp_seg_launch_t *d,
                        const dcp_seg_prog_t *px, const dcp_seg_launch_t *x, int64_t qw, int64_t kw,
                        int64_t *waves)
{
    const dcp_tile_group_t *g = pd->own_groups + d->own_first;
    for (int64_t w = 0, b = 0; b < d->own_count; w++) {
        const int64_t e = dcp_seg_wave_end(pd, d, 0, w);
        CU_ASSERT_FATAL(e > b && e <= d->own_count);
        for (int64_t i = b; i < e; i++) {
            if (i > 0) CU_ASSERT_EQUAL(g[i].first_tile, g[i - 1].first_tile + g[i - 1].num_tiles);
            for (int64_t j = i + 1; j < e; j++)
                CU_ASSERT(!rows_meet(g[i].dq, g[i].q_len, qw, g[j].dq, g[j].q_len, qw));
        }
        const int64_t t0 = g[b].first_tile, t1 = g[e - 1].first_tile + g[e - 1].num_tiles;
        for (int64_t i = t0; i < t1; i++)
            for (int64_t j = i + 1; j < t1; j++) {
                const dcp_tile_t *t = &pd->own_tiles[i], *u = &pd->own_tiles[j];
                if (rows_meet(t->dk, t->kv_len, kw, u->dk, u->kv_len, kw) ||
                    rows_meet(t->dv, t->kv_len, kw, u->dv, u->kv_len, kw))
                    CU_ASSERT(dcp_tile_same_grads(t, u));
            }
        (*waves)++;
        b = e;
    }
    const dcp_copy_item_t *c = pd->copies + d->acc_first;
    for (int64_t w = 0, b = 0; b < d->acc_count; w++) {
        const int64_t e = dcp_seg_wave_end(pd, d, 1, w);
        CU_ASSERT_FATAL(e > b && e <= d->acc_count);
        for (int64_t i = b; i < e; i++)
            for (int64_t j = i + 1; j < e; j++)
                CU_ASSERT(!rows_meet(c[i].dst, c[i].rows, c[i].row_elems, c[j].dst, c[j].rows,
                                     c[j].row_elems));
        (*waves)++;
        b = e;
    }
    /* the same work: pairs of own rows and keys, the multiset of own tiles and of adds */
    int64_t pairs[2] = {0, 0};
    const dcp_seg_prog_t *ps[2] = {pd, px};
    const dcp_seg_launch_t *ls[2] = {d, x};
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < ls[k]->own_count; i++) {
            const dcp_tile_group_t *h = &ps[k]->own_groups[ls[k]->own_first + i];
            for (int32_t t = 0; t < h->num_tiles; t++)
                pairs[k] += (int64_t)h->q_len * ps[k]->own_tiles[h->first_tile + t].kv_len;
        }
    CU_ASSERT_EQUAL(pairs[0], pairs[1]);
    CU_ASSERT_EQUAL(d->acc_count, x->acc_count);
    const int64_t nt[2] = {pd->n_own_tiles, px->n_own_tiles};
    CU_ASSERT_EQUAL_FATAL(nt[0], nt[1]);
    dcp_tile_t *tiles[2];
    dcp_copy_item_t *adds[2];
    for (int k = 0; k < 2; k++) {
        tiles[k] = malloc((size_t)(nt[k] + 1) * sizeof *tiles[k]);
        adds[k] = malloc((size_t)(ls[k]->acc_count + 1) * sizeof *adds[k]);
        if (nt[k] > 0) {
            memcpy(tiles[k], ps[k]->own_tiles, (size_t)nt[k] * sizeof *tiles[k]);
            qsort(tiles[k], (size_t)nt[k], sizeof *tiles[k], tile_cmp);
        }
        if (ls[k]->acc_count > 0) {
            memcpy(adds[k], ps[k]->copies + ls[k]->acc_first,
                   (size_t)ls[k]->acc_count * sizeof *adds[k]);
            qsort(adds[k], (size_t)ls[k]->acc_count, sizeof *adds[k], copy_cmp);
        }
    }
    CU_ASSERT(memcmp(tiles[0], tiles[1], (size_t)nt[0] * sizeof *tiles[0]) == 0);
    CU_ASSERT(memcmp(adds[0], adds[1], (size_t)d->acc_count * sizeof *adds[0]) == 0);
    for (int k = 0; k < 2; k++) {
        free(tiles[k]);
        free(adds[k]);
    }
}

/* Deterministic mode: every backward launch of every rank, for each mask kind on
 * two strategies, built in waves (dcp_seg_waves) keeps its writers apart wave by wave and does
 * the launch's work; the twin then runs the waves and gives the tile list's gradients, the
 * same bits run to run. A group whose own tiles overlap is split, one tile a wave. */
static void test_deterministic_waves(void)
{
    const int32_t len[4] = {301, 1, 190, 77};
    const dcp_attn_shape_t shape = {4, 2, 16, DCP_DTYPE_FP32, 0.0f};
    const char *specs[5] = {"causal", "window:37", "lambda:4:40", "blockwise:16:2",
                            "shared-question:0.2:3"};
    const dcp_strategy_t strategies[2] = {DCP_STRATEGY_ZIGZAG, DCP_STRATEGY_METIS};
    int64_t launches = 0, waves = 0, pairs[DCP_SEG_CLASSES] = {0};
    for (int kind = 0; kind < 5; kind++) {
        dcp_mask_t m[4];
        for (int s = 0; s < 4; s++)
            CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[kind], &m[s]), DCP_OK);
        dcpt_harness_t *h = NULL;
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 4, m, &shape, 70 + kind, &h), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 80 + kind), DCP_OK);
        CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
        for (int si = 0; si < 2; si++) {
            dcp_plan_t *p = plan_for(h, "2x2", strategies[si], 32, 1 + kind % 2);
            CU_ASSERT_PTR_NOT_NULL_FATAL(p);
            const int32_t min_rows = 1 + 4 * (kind % 2);
            for (int32_t r = 0; r < p->num_ranks; r++)
                for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, r);
                     i < dcp_plan_prog_end(p, DCP_PASS_BWD, r); i++) {
                    const dcp_instr_t *in = &p->instrs[i];
                    if (in->op != DCP_OP_ATTN) continue;
                    dcp_seg_prog_t pr[2];
                    int64_t at[2];
                    for (int det = 0; det < 2; det++) {
                        memset(&pr[det], 0, sizeof pr[det]);
                        pr[det].launches = calloc(1, sizeof *pr[det].launches);
                        const dcp_seg_shape_t sh = {.q_heads = p->qpg,
                                                    .kv_heads = p->kvpg,
                                                    .head_dim = p->shape.head_dim,
                                                    .min_rows = min_rows,
                                                    .dense = DCP_SEG_ALL_DENSE,
                                                    .backward = 1,
                                                    .deterministic = 1 - det};
                        CU_ASSERT_EQUAL_FATAL(dcp_seg_prog_add(&pr[det], &sh, p->seqs,
                                                               p->groups + in->first, in->count,
                                                               p->tiles, &at[det]),
                                              DCP_OK);
                    }
                    CU_ASSERT_EQUAL(pr[1].launches[0].own_waves + pr[1].launches[0].acc_waves, 0);
                    check_waves(&pr[0], &pr[0].launches[0], &pr[1], &pr[1].launches[0],
                                (int64_t)p->qpg * p->shape.head_dim,
                                (int64_t)p->kvpg * p->shape.head_dim, &waves);
                    launches++;
                    for (int det = 0; det < 2; det++) dcp_seg_prog_free(&pr[det]);
                }
            h->deterministic = 1;
            expect_twin_matches(h, p, min_rows, specs[kind], pairs);
            dcpt_harness_repeat_t rep;
            h->attn_engine = "twin";
            CU_ASSERT_EQUAL(dcpt_harness_repeat(h, p, 2, 30.0, 1e-5, "cpu", &rep), DCP_OK);
            CU_ASSERT_EQUAL(rep.unequal_bwd, 0);
            CU_ASSERT_EQUAL(rep.unequal_fwd, 0);
            /* the engine reports its backward's waves in this mode only */
            for (int det = 1; det >= 0; det--) {
                h->deterministic = det;
                dcpt_harness_result_t r;
                CU_ASSERT_EQUAL(dcpt_harness_run(h, p, 0, 1, 30.0, 1e-5, "cpu", &r), DCP_OK);
                CU_ASSERT(r.engine.bwd_launches > 0);
                if (det) CU_ASSERT(r.engine.bwd_waves >= r.engine.bwd_launches);
                if (!det) CU_ASSERT_EQUAL(r.engine.bwd_waves, 0);
            }
            h->attn_engine = NULL;
            dcp_plan_destroy(p);
        }
        dcpt_harness_destroy(h);
    }
    /* not vacuous: some launch needed more than one wave of a kind */
    CU_ASSERT(launches > 0);
    CU_ASSERT(waves > 2 * launches);
    CU_ASSERT(pairs[DCP_SEG_MASKED] > 0 && pairs[DCP_SEG_FULL] + pairs[DCP_SEG_CAUSAL] > 0);
    CU_ASSERT(pairs[DCP_SEG_BAND] + pairs[DCP_SEG_LEFT] > 0);

    /* one group of two tiles whose dK and dV rows overlap by half: split, a wave each */
    enum { KW = 8, ROWS = 16 };
    const dcp_seq_info_t seq = {64, {.kind = DCP_MASK_FULL}};
    dcp_tile_t t[2];
    memset(t, 0, sizeof t);
    for (int i = 0; i < 2; i++) {
        t[i].kv_pos = 16 * i;
        t[i].kv_len = ROWS;
        t[i].k = t[i].v = (dcp_view_t){(int64_t)16 * i * KW, KW, DCP_BUF_K};
        t[i].dk = (dcp_view_t){(int64_t)(ROWS / 2) * i * KW, KW, DCP_BUF_DK};
        t[i].dv = (dcp_view_t){(int64_t)(ROWS / 2) * i * KW, KW, DCP_BUF_DV};
    }
    dcp_tile_group_t g;
    memset(&g, 0, sizeof g);
    g.q_len = 32;
    g.num_tiles = 2;
    g.dq = (dcp_view_t){0, KW, DCP_BUF_DQ};
    dcp_seg_prog_t pr;
    memset(&pr, 0, sizeof pr);
    pr.launches = calloc(1, sizeof *pr.launches);
    const dcp_seg_shape_t sh = {.q_heads = 1, .kv_heads = 1, .head_dim = KW, .min_rows = 1,
                                .backward = 1, .deterministic = 1};
    int64_t at;
    CU_ASSERT_EQUAL_FATAL(dcp_seg_prog_add(&pr, &sh, &seq, &g, 1, t, &at), DCP_OK);
    const dcp_seg_launch_t *l = &pr.launches[at];
    CU_ASSERT_EQUAL(l->own_count, 2);
    CU_ASSERT_EQUAL(l->own_waves, 2);
    CU_ASSERT_EQUAL(dcp_seg_wave_end(&pr, l, 0, 0), 1);
    CU_ASSERT_EQUAL(pr.own_groups[0].num_tiles, 1);
    CU_ASSERT_EQUAL(pr.own_tiles[pr.own_groups[1].first_tile].kv_pos, 16);
    dcp_seg_prog_free(&pr);
    /* the same tiles with one destination share a wave */
    t[1].dk = t[0].dk;
    t[1].dv = t[0].dv;
    memset(&pr, 0, sizeof pr);
    pr.launches = calloc(1, sizeof *pr.launches);
    CU_ASSERT_EQUAL_FATAL(dcp_seg_prog_add(&pr, &sh, &seq, &g, 1, t, &at), DCP_OK);
    CU_ASSERT_EQUAL(pr.launches[at].own_count, 1);
    CU_ASSERT_EQUAL(pr.launches[at].own_waves, 1);
    dcp_seg_prog_free(&pr);
}

/* rowsum(dO * o) = delta per (row, head), for dO of any scale, and o = 0 where dO is. */
static void test_delta_out(void)
{
    enum { ROWS = 3, H = 2, D = 8 };
    float dout[ROWS * H * D], o[ROWS * H * D], delta[ROWS * H];
    dcpt_rng_t rng = {5};
    const float scales[ROWS] = {1.0f, 1e-30f, 0.0f};
    for (int r = 0; r < ROWS; r++)
        for (int x = 0; x < H * D; x++)
            dout[r * H * D + x] = scales[r] * (float)dcpt_rng_normal(&rng);
    for (int i = 0; i < ROWS * H; i++) delta[i] = (float)dcpt_rng_normal(&rng);
    dcp_kernel_env_t env;
    memset(&env, 0, sizeof env);
    env.bufs[DCP_BUF_SEG] = dout;
    env.bufs[DCP_BUF_SEG32] = o;
    env.bufs[DCP_BUF_DELTA] = delta;
    env.q_heads = H;
    env.head_dim = D;
    env.dtype = DCP_DTYPE_FP32;
    const dcp_delta_out_item_t it = {{0, H * D, DCP_BUF_SEG}, {0, H, DCP_BUF_DELTA},
                                     {0, H * D, DCP_BUF_SEG32}, ROWS};
    CU_ASSERT_EQUAL(dcp_kernels_cpu.delta_out(&env, &it, 1), DCP_OK);
    for (int r = 0; r < ROWS; r++)
        for (int h = 0; h < H; h++) {
            double s = 0;
            for (int x = 0; x < D; x++) {
                const int i = (r * H + h) * D + x;
                CU_ASSERT(isfinite(o[i]));
                s += (double)dout[i] * o[i];
                if (scales[r] == 0.0f) CU_ASSERT_EQUAL(o[i], 0.0f);
            }
            if (scales[r] == 1.0f) CU_ASSERT_DOUBLE_EQUAL(s, delta[r * H + h], 1e-5);
        }
}

/* Bytes of array i of a program (the order of dcp_seg_arrays_t). */
static size_t prog_array(const dcp_seg_prog_t *g, const dcp_seg_arrays_t *a, int i,
                         const void **ptr_out)
{
    const void *p[7] = {a->own_groups, a->own_tiles, a->copies, a->merges,
                        a->merge_srcs, a->deltas,    a->ints};
    const size_t n[7] = {(size_t)g->n_own_groups * sizeof *g->own_groups,
                         (size_t)g->n_own_tiles * sizeof *g->own_tiles,
                         (size_t)g->n_copies * sizeof *g->copies,
                         (size_t)g->n_merges * sizeof *g->merges,
                         (size_t)g->n_merge_srcs * sizeof *g->merge_srcs,
                         (size_t)g->n_deltas * sizeof *g->deltas,
                         (size_t)g->n_ints * sizeof *g->ints};
    *ptr_out = p[i];
    return n[i];
}

/* dcp_attn_upload, the one placement of a segment program (a context's binding and
 * dcp-kernel-bench): on the CPU the program's own arrays; on a GPU (where there is one) a
 * device copy that reads back byte for byte, every array of a forward and a backward program
 * with masked, dense, merged and delta parts. */
static void test_upload_places_programs(void)
{
    dcp_mask_t m;
    CU_ASSERT_EQUAL_FATAL(dcp_mask_parse("lambda:8:100", &m), DCP_OK);
    dcpt_tile_case_t tc;
    CU_ASSERT_EQUAL_FATAL(dcpt_tile_case_build(&m, 300, 64, 4, 2, 16, &tc), DCP_OK);
    const int gpus = dcp_cuda_device_count();
    for (int bwd = 0; bwd < 2; bwd++) {
        dcp_seg_prog_t g;
        memset(&g, 0, sizeof g);
        g.launches = calloc(1, sizeof *g.launches);
        const dcp_seg_shape_t sh = {.q_heads = 4,
                                    .kv_heads = 2,
                                    .head_dim = 16,
                                    .min_rows = 24,
                                    .dense = DCP_SEG_ALL_DENSE,
                                    .backward = bwd};
        int64_t at;
        CU_ASSERT_EQUAL_FATAL(
            dcp_seg_prog_add(&g, &sh, &tc.seq, tc.groups, tc.num_groups, tc.tiles, &at), DCP_OK);
        CU_ASSERT(g.n_own_groups > 0 && g.n_copies > 0 && g.n_ints > 0); /* both parts */
        CU_ASSERT(bwd ? g.n_deltas > 0 : g.n_merges > 0 && g.n_merge_srcs > 0);
        const dcp_seg_arrays_t host = dcp_seg_host_arrays(&g);
        for (int32_t device = -1; device < (gpus > 0 ? 1 : 0); device++) {
            const dcp_device_t *dev = dcp_device_of(device);
            void *stream = NULL;
            if (device >= 0) CU_ASSERT_EQUAL_FATAL(dev->stream_create(device, &stream), DCP_OK);
            dcp_dev_blob_t blob;
            memset(&blob, 0, sizeof blob);
            dcp_seg_arrays_t a;
            memset(&a, 0, sizeof a);
            CU_ASSERT_EQUAL_FATAL(dcp_attn_upload(&g, device, stream, &blob, &a), DCP_OK);
            CU_ASSERT_EQUAL_FATAL(dev->stream_sync(stream), DCP_OK);
            if (device < 0) CU_ASSERT_EQUAL(memcmp(&a, &host, sizeof a), 0); /* the same arrays */
            CU_ASSERT((device < 0) == (blob.mem == NULL));
            for (int i = 0; i < 7; i++) {
                const void *want, *got;
                const size_t n = prog_array(&g, &host, i, &want);
                prog_array(&g, &a, i, &got);
                if (n == 0) continue;
                void *back = malloc(n);
                CU_ASSERT_EQUAL_FATAL(dev->copy(back, got, n, NULL), DCP_OK);
                CU_ASSERT_EQUAL_FATAL(dev->stream_sync(NULL), DCP_OK);
                CU_ASSERT_EQUAL(memcmp(back, want, n), 0);
                free(back);
            }
            dcp_dev_blob_free(&blob, dev);
            if (stream) dev->stream_destroy(stream);
        }
        dcp_seg_prog_free(&g);
    }
    dcpt_tile_case_free(&tc);
}

/* dcp_plan_attn_pairs, the segmenter's tally (dcp_seg_tally) over a plan: every allowed pair
 * counted once per pass (their sum is the plan's FLOPs over 4 D Hq), and, for a plan of one
 * rank, exactly what a twin context's engine ran (dcp_attn_engine_info_t.pairs), forward and
 * backward, at the engine's default and at another minimum run. */
static void test_plan_attn_pairs(void)
{
    const int32_t len[3] = {300, 1, 157};
    dcp_mask_t masks[3];
    const char *specs[3] = {"causal", "full", "lambda:4:40"};
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(specs[i], &masks[i]), DCP_OK);
    const dcp_attn_shape_t shape = {4, 2, 16, DCP_DTYPE_FP32, 0.0f};
    dcpt_harness_t *h = NULL;
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_create(len, 3, masks, &shape, 7, &h), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_enable_backward(h, 8), DCP_OK);
    CU_ASSERT_EQUAL_FATAL(dcpt_harness_reference(h, 2, NULL, 0), DCP_OK);
    const char *clusters[2] = {"1x1", "2x2"};
    for (int ci = 0; ci < 2; ci++) {
        dcp_plan_t *p = plan_for(h, clusters[ci], DCP_STRATEGY_ZIGZAG, 32, 1);
        dcp_plan_stats_t ps;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_get_stats(p, &ps), DCP_OK);
        const int32_t rows[2] = {0, 5};
        for (int ri = 0; ri < 2; ri++) {
            int64_t pairs[2][DCP_ATTN_CLASSES];
            memset(pairs, 0xff, sizeof pairs);
            CU_ASSERT_EQUAL_FATAL(dcp_plan_attn_pairs(p, rows[ri], pairs), DCP_OK);
            int64_t sum[2] = {0, 0};
            for (int pass = 0; pass < 2; pass++)
                for (int c = 0; c < DCP_ATTN_CLASSES; c++) sum[pass] += pairs[pass][c];
            CU_ASSERT_EQUAL(sum[0] * 4 * 16 * 4, ps.total_flops);
            CU_ASSERT_EQUAL(sum[1], sum[0]);
            if (rows[ri] == 0) /* blocks of 32 rows: every run under the default 64 is masked */
                CU_ASSERT_EQUAL(pairs[0][DCP_ATTN_CLASS_MASKED], sum[0]);
            if (rows[ri] == 5) /* the diagonal, whole tiles; only the 1-token sequence masked */
                CU_ASSERT(pairs[0][DCP_ATTN_CLASS_CAUSAL] > 0 &&
                          pairs[0][DCP_ATTN_CLASS_FULL] > 0 &&
                          pairs[0][DCP_ATTN_CLASS_MASKED] == 1);
            if (ci != 0) continue;
            /* one rank: the twin's own cut of the same launches (min rows as the engine's) */
            int64_t ran[DCP_SEG_CLASSES] = {0};
            expect_twin_matches(h, p, rows[ri] ? rows[ri] : 64, "pairs", ran);
            for (int c = 0; c < DCP_ATTN_CLASSES; c++) CU_ASSERT_EQUAL(ran[c], pairs[0][c]);
        }
        int64_t keep[2][DCP_ATTN_CLASSES];
        memset(keep, 0x5a, sizeof keep);
        int64_t out[2][DCP_ATTN_CLASSES];
        memcpy(out, keep, sizeof out);
        CU_ASSERT_EQUAL(dcp_plan_attn_pairs(NULL, 0, out), DCP_ERR_INVALID_ARG);
        CU_ASSERT_EQUAL(dcp_plan_attn_pairs(p, -1, out), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "min_rows"));
        CU_ASSERT_EQUAL(memcmp(out, keep, sizeof out), 0); /* nothing written on failure */
        dcp_plan_destroy(p);
    }
    dcpt_harness_destroy(h);
}

/* The engine choice of CPU contexts: cudnn and auto run dcp's kernels and say why, twin is
 * the twin, bad names are refused naming the field or the variable. */
static void test_engine_choice_on_cpu(void)
{
    dcp_group_t *g = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_group_create(1, &g), DCP_OK);
    const char *names[4] = {"cudnn", "auto", "twin", "own"};
    const char *want[4] = {"own", "own", "twin", "own"};
    for (int i = 0; i < 4; i++) {
        const dcp_context_config_t cfg = {.group = g, .attn_engine = names[i]};
        dcp_context_t *ctx = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_context_create(&cfg, &ctx), DCP_OK);
        dcp_attn_engine_info_t info;
        CU_ASSERT_EQUAL(dcp_context_attn_engine(ctx, &info), DCP_OK);
        CU_ASSERT_STRING_EQUAL(info.engine, want[i]);
        CU_ASSERT_STRING_EQUAL(info.requested, names[i]);
        if (i < 2) CU_ASSERT_PTR_NOT_NULL(strstr(info.note, "CPU"));
        CU_ASSERT_EQUAL(info.cudnn_version, 0);
        dcp_context_destroy(ctx);
    }
    dcp_context_config_t bad = {.group = g, .attn_engine = "flash"};
    dcp_context_t *ctx = NULL;
    CU_ASSERT_EQUAL(dcp_context_create(&bad, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "config.attn_engine"));
    bad.attn_engine = NULL;
    setenv("DCP_ATTN_ENGINE", "fast", 1);
    CU_ASSERT_EQUAL(dcp_context_create(&bad, &ctx), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "$DCP_ATTN_ENGINE"));
    setenv("DCP_ATTN_ENGINE", "twin", 1);
    CU_ASSERT_EQUAL_FATAL(dcp_context_create(&bad, &ctx), DCP_OK);
    dcp_attn_engine_info_t info;
    CU_ASSERT_EQUAL(dcp_context_attn_engine(ctx, &info), DCP_OK);
    CU_ASSERT_STRING_EQUAL(info.engine, "twin");
    dcp_context_destroy(ctx);
    unsetenv("DCP_ATTN_ENGINE");
    CU_ASSERT_EQUAL(dcp_context_attn_engine(NULL, &info), DCP_ERR_INVALID_ARG);
    dcp_group_destroy(g);
}

int dcp_suite_segment(void)
{
    static const dcp_test_t tests[] = {
        {"cut_is_exact", test_cut_is_exact},
        {"line_refuses_overlap", test_line_refuses_overlap},
        {"twin_matches_tile_list", test_twin_matches_tile_list},
        {"twin_bf16", test_twin_bf16},
        {"twin_mla", test_twin_mla},
        {"deterministic_waves", test_deterministic_waves},
        {"delta_out", test_delta_out},
        {"engine_choice_on_cpu", test_engine_choice_on_cpu},
        {"softcap_runs_own", test_softcap_runs_own},
        {"upload_places_programs", test_upload_places_programs},
        {"plan_attn_pairs", test_plan_attn_pairs},
        {NULL, NULL},
    };
    return dcp_add_suite("segment", tests);
}
