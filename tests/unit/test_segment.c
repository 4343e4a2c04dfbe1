/*
 * The attention engine proven on the CPU (issue 27, item 2): the segmenter's pieces cover a
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
#include "kernels/cudnn.h"
#include "kernels/segment.h"
#include "plugin/cli/harness.h"
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

/* The pieces of one tile against the mask, pair by pair: FULL and CAUSAL pieces hold only
 * allowed pairs in exactly their shape, every allowed pair is in exactly one piece. */
static void check_tile(const dcp_seq_info_t *seq, const dcp_tile_group_t *g, const dcp_tile_t *t,
                       const dcp_seg_piece_t *pc, int64_t n, int32_t min_rows, int32_t dense)
{
    uint8_t *cover = calloc((size_t)g->q_len * t->kv_len, 1);
    int64_t pairs = 0, want = 0;
    for (int64_t i = 0; i < n; i++) {
        const dcp_seg_piece_t *p = &pc[i];
        CU_ASSERT(p->r0 >= 0 && p->r0 < p->r1 && p->r1 <= g->q_len);
        CU_ASSERT(p->k0 >= 0 && p->k0 < p->k1 && p->k1 <= t->kv_len);
        if (p->cls != DCP_SEG_MASKED) {
            CU_ASSERT(p->r1 - p->r0 >= min_rows);
            CU_ASSERT(dense & DCP_SEG_BIT(p->cls));
        }
        const int32_t sq = p->r1 - p->r0, skv = p->k1 - p->k0;
        if (p->cls == DCP_SEG_CAUSAL) CU_ASSERT(skv >= sq);
        int64_t mine = 0;
        for (int32_t r = p->r0; r < p->r1; r++)
            for (int32_t k = p->k0; k < p->k1; k++) {
                const int ok = allowed(seq, g->q_pos + r, t->kv_pos + k);
                const int x = r - p->r0, y = k - p->k0;
                if (p->cls == DCP_SEG_FULL) CU_ASSERT(ok);
                if (p->cls == DCP_SEG_CAUSAL) CU_ASSERT_EQUAL(ok, y <= x + skv - sq);
                if (!ok) continue;
                mine++;
                CU_ASSERT_EQUAL(cover[(size_t)r * t->kv_len + k], 0);
                cover[(size_t)r * t->kv_len + k] = 1;
            }
        CU_ASSERT_EQUAL(mine, p->pairs);
        pairs += p->pairs;
    }
    for (int32_t r = 0; r < g->q_len; r++)
        for (int32_t k = 0; k < t->kv_len; k++) {
            const int ok = allowed(seq, g->q_pos + r, t->kv_pos + k);
            want += ok;
            CU_ASSERT_EQUAL(cover[(size_t)r * t->kv_len + k], ok);
        }
    CU_ASSERT_EQUAL(pairs, want);
    free(cover);
}

/* Random tiles of random masks: every piece checked pair by pair, for several minimum run
 * lengths and class sets (the policy can leave causal to dcp's kernels). */
static void test_cut_is_exact(void)
{
    dcpt_rng_t rng = {7};
    const int32_t mins[3] = {1, 3, 16};
    const int32_t sets[3] = {DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL),
                             DCP_SEG_BIT(DCP_SEG_FULL), 0};
    int64_t by_class[DCP_SEG_CLASSES] = {0, 0, 0};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 6; rep++) {
            const int32_t len = 40 + (int32_t)dcpt_rng_range(&rng, 0, 159);
            int32_t *store = NULL;
            dcp_seq_info_t seq = {len, t_random_mask(&rng, (dcp_mask_kind_t)kind, len, &store)};
            /* one group of a random query range against random key ranges */
            const int32_t q0 = (int32_t)dcpt_rng_range(&rng, 0, len - 1);
            const int32_t q1 = q0 + 1 + (int32_t)dcpt_rng_range(&rng, 0, len - q0 - 1);
            dcp_tile_t tiles[3];
            int nt = 0;
            for (int32_t k0 = 0; k0 < len && nt < 3; nt++) {
                const int32_t k1 = k0 + 1 + (int32_t)dcpt_rng_range(&rng, 0, len - k0 - 1);
                memset(&tiles[nt], 0, sizeof tiles[nt]);
                tiles[nt].kv_pos = k0;
                tiles[nt].kv_len = k1 - k0;
                k0 = k1;
            }
            dcp_tile_group_t g;
            memset(&g, 0, sizeof g);
            g.q_pos = q0;
            g.q_len = q1 - q0;
            g.first_tile = 0;
            g.num_tiles = nt;
            for (int mi = 0; mi < 3; mi++)
                for (int si = 0; si < 3; si++) {
                    dcp_seg_piece_t *pc = NULL;
                    int64_t n = 0;
                    CU_ASSERT_EQUAL_FATAL(dcp_seg_cut(&seq, &g, 1, tiles, mins[mi], sets[si], &pc, &n),
                                          DCP_OK);
                    int64_t first = 0;
                    for (int t = 0; t < nt; t++) {
                        int64_t m = 0;
                        while (first + m < n && pc[first + m].tile == t) m++;
                        check_tile(&seq, &g, &tiles[t], pc + first, m, mins[mi], sets[si]);
                        first += m;
                    }
                    CU_ASSERT_EQUAL(first, n);
                    for (int64_t i = 0; i < n; i++) by_class[pc[i].cls] += pc[i].pairs;
                    free(pc);
                }
            free(store);
        }
    /* every class occurs: the brute force above is not vacuous */
    for (int c = 0; c < DCP_SEG_CLASSES; c++) CU_ASSERT(by_class[c] > 0);
    dcp_seg_piece_t *pc = NULL;
    int64_t n = 0;
    CU_ASSERT_EQUAL(dcp_seg_cut(NULL, NULL, 0, NULL, 0, 0, &pc, &n), DCP_ERR_INVALID_ARG);
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
                                const char *what, int64_t pairs[3])
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
    for (int c = 0; c < 3; c++) pairs[c] += r.engine.pairs[c];
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
    int64_t pairs[3] = {0, 0, 0};
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
    /* the dense path ran: full and causal segments went to the twin */
    CU_ASSERT(pairs[DCP_SEG_FULL] > 0);
    CU_ASSERT(pairs[DCP_SEG_CAUSAL] > 0);
    CU_ASSERT(pairs[DCP_SEG_MASKED] > 0);
}

/* bf16 storage: the twin rounds O and the dense gradients to bf16 as cuDNN does; the result
 * still meets FlashAttention's bound against the reference, and the plain path's. */
static void test_twin_bf16(void)
{
    const int32_t len[3] = {257, 130, 77};
    const dcp_attn_shape_t shape = {4, 1, 32, DCP_DTYPE_BF16, 0.0f};
    const char *specs[2] = {"causal", "lambda:8:64"};
    int64_t pairs[3] = {0, 0, 0};
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

/* Which classes each cuDNN version runs, and the versions refused by name. */
static void test_cudnn_policy(void)
{
    const char *why;
    const int32_t both = DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL);
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91000, 0, &why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "9.10.0"));
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91001, 1, &why), 0);
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91400, 0, &why), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "9.15.0"));
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91500, 0, &why), DCP_SEG_BIT(DCP_SEG_FULL));
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91900, 0, &why), DCP_SEG_BIT(DCP_SEG_FULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "9.21.0"));
    CU_ASSERT_EQUAL(dcp_cudnn_policy(91900, 1, &why), 0);
    CU_ASSERT_EQUAL(dcp_cudnn_policy(92100, 0, &why), both);
    CU_ASSERT_EQUAL(dcp_cudnn_policy(92700, 1, &why), 0);
    CU_ASSERT_EQUAL(dcp_cudnn_policy(92800, 1, &why), both);
    /* the engine's classes: the policy, or every class when ungated (never a refused one) */
    unsetenv("DCP_CUDNN_UNGATED");
    CU_ASSERT_EQUAL(dcp_cudnn_classes(91900, 1, &why), 0);
    setenv("DCP_CUDNN_UNGATED", "0", 1);
    CU_ASSERT_EQUAL(dcp_cudnn_classes(91900, 1, &why), 0);
    setenv("DCP_CUDNN_UNGATED", "1", 1);
    CU_ASSERT_EQUAL(dcp_cudnn_classes(91900, 1, &why), both);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "DCP_CUDNN_UNGATED"));
    CU_ASSERT_EQUAL(dcp_cudnn_classes(91000, 0, &why), 0);
    unsetenv("DCP_CUDNN_UNGATED");
    char v[16];
    dcp_cudnn_version_string(91501, v, sizeof v);
    CU_ASSERT_STRING_EQUAL(v, "9.15.1");
}

/* Where a cuDNN library loads (no GPU needed), the descriptors of every dense call its
 * version runs finalize: attribute names, types, dims, strides and ragged offsets as the
 * real library checks them. */
static void test_cudnn_descriptors(void)
{
    int64_t v = 0;
    int checked = 0;
    for (int bwd = 0; bwd < 2; bwd++)
        for (int causal = 0; causal < 2; causal++) {
            const dcp_status_t st =
                dcp_cudnn_check_descriptors(bwd, causal, DCP_DTYPE_BF16, 8, 2, 128, &v);
            if (v == 0) {
                CU_ASSERT_EQUAL(st, DCP_ERR_UNSUPPORTED); /* no library: says so */
                continue;
            }
            const char *why;
            if (!(dcp_cudnn_policy(v, bwd, &why) & DCP_SEG_BIT(causal))) continue;
            CU_ASSERT_EQUAL(st, DCP_OK);
            if (st != DCP_OK) fprintf(stderr, "cudnn %lld descriptors: %s\n", (long long)v, dcp_last_error());
            checked++;
        }
    const char *why;
    if (v == 0)
        printf("\nsegment: no cuDNN library loads here; descriptors not checked\n");
    else if (dcp_cudnn_policy(v, 0, &why))
        CU_ASSERT(checked > 0);
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
        {"twin_matches_tile_list", test_twin_matches_tile_list},
        {"twin_bf16", test_twin_bf16},
        {"delta_out", test_delta_out},
        {"cudnn_policy", test_cudnn_policy},
        {"cudnn_descriptors", test_cudnn_descriptors},
        {"engine_choice_on_cpu", test_engine_choice_on_cpu},
        {NULL, NULL},
    };
    return dcp_add_suite("segment", tests);
}
