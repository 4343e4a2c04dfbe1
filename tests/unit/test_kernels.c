/* CPU kernels against the double-precision reference: masked attention over tile lists
 * (every mask, ragged tiles, 1-token sequences, fully masked rows, GQA 1/2/4, head groups,
 * accumulation), the n-way LSE merge and the strided copy; NaN and Inf inputs reach exactly
 * the outputs that read them, as NaN in O and LSE, through launches and merges. */
#include "include/base/half.h"
#include "kernels/cpu.h"
#include "kernels/lse.h"
#include "partition/model/mask.h"
#include "plugin/cli/support/reference.h"
#include "plugin/cli/support/tile_case.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t len, hq, hkv, d, hb;
    float *q, *k, *v, *o, *lse;
    double *ro, *rlse;
    dcp_seq_info_t seq;
    dcp_kernel_env_t env;
} kcase_t;

static void kcase_init(kcase_t *c, int32_t len, int32_t hq, int32_t hkv, int32_t d, int32_t hb,
                       dcp_mask_t mask, uint64_t seed)
{
    *c = (kcase_t){.len = len, .hq = hq, .hkv = hkv, .d = d, .hb = hb};
    dcpt_rng_t rng = {seed};
    const size_t nq = (size_t)len * hq * d, nk = (size_t)len * hkv * d;
    c->q = malloc(nq * sizeof(float));
    c->k = malloc(nk * sizeof(float));
    c->v = malloc(nk * sizeof(float));
    c->o = malloc(nq * sizeof(float));
    c->lse = malloc((size_t)len * hq * sizeof(float));
    c->ro = malloc(nq * sizeof(double));
    c->rlse = malloc((size_t)len * hq * sizeof(double));
    for (size_t i = 0; i < nq; i++) c->q[i] = (float)dcpt_rng_normal(&rng);
    for (size_t i = 0; i < nk; i++) c->k[i] = (float)dcpt_rng_normal(&rng);
    for (size_t i = 0; i < nk; i++) c->v[i] = (float)dcpt_rng_normal(&rng);
    c->seq = (dcp_seq_info_t){len, mask};
    const dcp_attn_shape_t shape = {hq, hkv, d, DCP_DTYPE_FP32, 0.0f};
    CU_ASSERT_EQUAL(
        dcpt_reference_attention(&c->seq, 1, &shape, c->q, c->k, c->v, c->ro, c->rlse, NULL, 2),
        DCP_OK);
    c->env = (dcp_kernel_env_t){.seqs = &c->seq,
                                .q_heads = hq / hb,
                                .kv_heads = hkv / hb,
                                .head_dim = d,
                                .scale = (float)(1.0 / sqrt((double)d)),
                                .dtype = DCP_DTYPE_FP32};
    c->env.bufs[DCP_BUF_Q] = c->q;
    c->env.bufs[DCP_BUF_K] = c->k;
    c->env.bufs[DCP_BUF_V] = c->v;
    c->env.bufs[DCP_BUF_ACC_O] = c->o;
    c->env.bufs[DCP_BUF_ACC_LSE] = c->lse;
    for (size_t i = 0; i < nq; i++) c->o[i] = NAN;
    for (size_t i = 0; i < (size_t)len * hq; i++) c->lse[i] = NAN;
}

static void kcase_free(kcase_t *c)
{
    free(c->q), free(c->k), free(c->v), free(c->o), free(c->lse), free(c->ro), free(c->rlse);
}

/* Tile group of queries [q0, q1), head group h, over KV tiles of `kb` keys from k0 to k1. */
static int64_t build_group(const kcase_t *c, int32_t q0, int32_t q1, int32_t h, int32_t k0,
                           int32_t k1, int32_t kb, int32_t accumulate, dcp_tile_group_t *g,
                           dcp_tile_t *tiles)
{
    const int64_t qpg = c->hq / c->hb, kvpg = c->hkv / c->hb, d = c->d;
    *g = (dcp_tile_group_t){.q = {((int64_t)q0 * c->hq + h * qpg) * d, c->hq * c->d, DCP_BUF_Q},
                            .o = {((int64_t)q0 * c->hq + h * qpg) * d, c->hq * c->d, DCP_BUF_ACC_O},
                            .lse = {(int64_t)q0 * c->hq + h * qpg, c->hq, DCP_BUF_ACC_LSE},
                            .q_pos = q0,
                            .q_len = q1 - q0,
                            .accumulate = accumulate};
    int64_t n = 0;
    for (int32_t k = k0; k < k1; k += kb) {
        const int32_t ke = k + kb < k1 ? k + kb : k1;
        int64_t pairs;
        const dcp_tile_class_t cls = dcp_mask_classify(&c->seq.mask, c->len, q0, q1, k, ke, &pairs);
        if (cls == DCP_TILE_EMPTY) continue;
        const int64_t off = ((int64_t)k * c->hkv + h * kvpg) * d;
        tiles[n++] = (dcp_tile_t){.k = {off, c->hkv * c->d, DCP_BUF_K},
                                  .v = {off, c->hkv * c->d, DCP_BUF_V},
                                  .kv_pos = k,
                                  .kv_len = ke - k,
                                  .full = cls == DCP_TILE_FULL};
    }
    g->num_tiles = (int32_t)n;
    return n;
}

/* Max |O - ref| / max |ref| and max LSE error over all heads of queries [q0, q1). */
static void compare(const kcase_t *c, int32_t q0, int32_t q1, double *rel, double *lse_err,
                    int *bad)
{
    double err = 0, ref = 1e-30;
    *lse_err = 0;
    *bad = 0;
    for (int64_t i = (int64_t)q0 * c->hq; i < (int64_t)q1 * c->hq; i++) {
        if (isinf(c->rlse[i])) {
            *bad += !(isinf(c->lse[i]) && c->lse[i] < 0);
            for (int32_t x = 0; x < c->d; x++) *bad += c->o[i * c->d + x] != 0.0f;
            continue;
        }
        *bad += !isfinite(c->lse[i]);
        *lse_err = fmax(*lse_err, fabs(c->lse[i] - c->rlse[i]) / fmax(1.0, fabs(c->rlse[i])));
        for (int32_t x = 0; x < c->d; x++) {
            const double o = c->o[i * c->d + x], r = c->ro[i * c->d + x];
            *bad += isnan(o);
            err = fmax(err, fabs(o - r));
            ref = fmax(ref, fabs(r));
        }
    }
    *rel = err / ref;
}

static void run_case(int32_t len, int32_t hq, int32_t hkv, int32_t d, int32_t hb, dcp_mask_t mask,
                     int32_t qb, int32_t kb, uint64_t seed)
{
    kcase_t c;
    kcase_init(&c, len, hq, hkv, d, hb, mask, seed);
    const int32_t nqb = (len + qb - 1) / qb;
    dcp_tile_group_t *g = calloc((size_t)nqb * hb, sizeof *g);
    dcp_tile_t *tiles = calloc((size_t)nqb * hb * (len / kb + 2), sizeof *tiles);
    int64_t ng = 0, nt = 0;
    for (int32_t b = 0; b < nqb; b++)
        for (int32_t h = 0; h < hb; h++) {
            nt += build_group(&c, b * qb, (b + 1) * qb < len ? (b + 1) * qb : len, h, 0, len, kb, 0,
                              &g[ng], tiles + nt);
            g[ng].first_tile = (int32_t)(nt - g[ng].num_tiles);
            ng++;
        }
    /* a group left without tiles (a fully masked query block) must come out as O = 0,
     * LSE = -inf, like any row without allowed keys */
    CU_ASSERT_EQUAL(dcp_cpu_attn_fwd(&c.env, g, ng, tiles), DCP_OK);
    double rel, lse_err;
    int bad;
    compare(&c, 0, len, &rel, &lse_err, &bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rel <= 1e-5);
    CU_ASSERT(lse_err <= 1e-5);
    if (bad || rel > 1e-5 || lse_err > 1e-5)
        fprintf(stderr,
                "kernel case len %d heads %d/%d d %d hb %d mask %d: rel %.3g lse %.3g bad %d\n",
                len, hq, hkv, d, hb, mask.kind, rel, lse_err, bad);
    free(g);
    free(tiles);
    kcase_free(&c);
}

static void test_attention_every_mask(void)
{
    dcpt_rng_t rng = {51};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 3; rep++) {
            const int32_t len = (int32_t)dcpt_rng_range(&rng, 1, 230);
            int32_t *store;
            const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, len, &store);
            run_case(len, 4, 2, 16, 1, m, (int32_t)dcpt_rng_range(&rng, 1, 70),
                     (int32_t)dcpt_rng_range(&rng, 1, 90), dcpt_rng_next(&rng));
            free(store);
        }
}

static void test_attention_gqa_and_head_groups(void)
{
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    run_case(97, 4, 4, 32, 1, causal, 32, 40, 1);   /* MHA */
    run_case(97, 4, 2, 32, 1, causal, 32, 40, 2);   /* GQA 2 */
    run_case(97, 8, 2, 64, 1, causal, 50, 33, 3);   /* GQA 4 */
    run_case(97, 8, 2, 64, 2, causal, 50, 33, 4);   /* GQA 4, two head groups */
    run_case(130, 8, 8, 128, 4, causal, 64, 64, 5); /* D = 128, four head groups */
    run_case(1, 4, 2, 16, 1, causal, 16, 16, 6);    /* a 1-token sequence */
}

/* Queries with no allowed key: O = 0 and LSE = -inf (custom ranges all empty for odd i). */
static void test_fully_masked_rows(void)
{
    const int32_t len = 40;
    int32_t *r = calloc(4 * len, sizeof *r);
    for (int32_t i = 0; i < len; i += 2) r[4 * i + 1] = i + 1;
    const dcp_mask_t m = {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = len};
    run_case(len, 4, 2, 16, 1, m, 16, 16, 7);
    run_case(len, 4, 2, 16, 1, m, 1, 7, 8);
    free(r);
}

/* Queries [0, 120) of head group 0 against keys [0, 60) in one launch, then against keys
 * [60, 120) in a second that accumulates; KV tiles of kb keys. */
static void run_two_launches(kcase_t *c, int32_t kb)
{
    dcp_tile_group_t g;
    dcp_tile_t tiles[16];
    build_group(c, 0, 120, 0, 0, 60, kb, 0, &g, tiles);
    CU_ASSERT_EQUAL(dcp_cpu_attn_fwd(&c->env, &g, 1, tiles), DCP_OK);
    build_group(c, 0, 120, 0, 60, 120, kb, 1, &g, tiles);
    CU_ASSERT_EQUAL(dcp_cpu_attn_fwd(&c->env, &g, 1, tiles), DCP_OK);
}

/* Two launches, the second accumulating, equal one launch over all tiles. */
static void test_accumulate_equals_single_pass(void)
{
    const dcp_mask_t m = {.kind = DCP_MASK_LAMBDA, .sink = 5, .window = 30};
    kcase_t c;
    kcase_init(&c, 120, 4, 2, 16, 1, m, 9);
    run_two_launches(&c, 25);
    double rel, lse_err;
    int bad;
    compare(&c, 0, 120, &rel, &lse_err, &bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rel <= 1e-5 && lse_err <= 1e-5);
    kcase_free(&c);
}

/* Partials over disjoint key ranges, merged n-way into an empty destination. */
static void test_merge_of_partials(void)
{
    const dcp_mask_t m = {.kind = DCP_MASK_CAUSAL};
    kcase_t c;
    const int32_t len = 90, hq = 4, d = 16, parts = 3;
    kcase_init(&c, len, hq, 2, d, 1, m, 10);
    float *part = malloc((size_t)parts * len * hq * (d + 1) * sizeof(float));
    c.env.bufs[DCP_BUF_PART] = part;
    dcp_merge_src_t src[3];
    for (int p = 0; p < parts; p++) {
        dcp_tile_group_t g;
        dcp_tile_t tiles[8];
        build_group(&c, 0, len, 0, p * 30, p * 30 + 30, 16, 0, &g, tiles);
        const int64_t base = (int64_t)p * len * hq * (d + 1);
        g.o = (dcp_view_t){base, hq * d, DCP_BUF_PART};
        g.lse = (dcp_view_t){base + (int64_t)len * hq * d, hq, DCP_BUF_PART};
        src[p] = (dcp_merge_src_t){g.o, g.lse};
        CU_ASSERT_EQUAL(dcp_cpu_attn_fwd(&c.env, &g, 1, tiles), DCP_OK);
    }
    for (int64_t i = 0; i < (int64_t)len * hq * d; i++) c.o[i] = 0.0f;
    for (int64_t i = 0; i < (int64_t)len * hq; i++) c.lse[i] = -INFINITY;
    const dcp_merge_item_t item = {
        {0, hq * d, DCP_BUF_ACC_O}, {0, hq, DCP_BUF_ACC_LSE}, len, 0, parts};
    CU_ASSERT_EQUAL(dcp_cpu_merge(&c.env, &item, 1, src), DCP_OK);
    double rel, lse_err;
    int bad;
    compare(&c, 0, len, &rel, &lse_err, &bad);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rel <= 1e-5 && lse_err <= 1e-5);
    free(part);
    kcase_free(&c);
}

static void test_copy_strided(void)
{
    float src[6 * 8], dst[4 * 5];
    for (int i = 0; i < 48; i++) src[i] = (float)i;
    for (int i = 0; i < 20; i++) dst[i] = -1;
    dcp_kernel_env_t env = {.dtype = DCP_DTYPE_FP32};
    env.bufs[DCP_BUF_Q] = src;
    env.bufs[DCP_BUF_STAGE] = dst;
    const dcp_copy_item_t item = {{3, 8, DCP_BUF_Q}, {1, 5, DCP_BUF_STAGE}, 4, 3};
    CU_ASSERT_EQUAL(dcp_cpu_copy(&env, &item, 1), DCP_OK);
    for (int r = 0; r < 4; r++)
        for (int x = 0; x < 5; x++) {
            const float want = (x >= 1 && x < 4) ? (float)(3 + r * 8 + x - 1) : -1.0f;
            CU_ASSERT_EQUAL(dst[r * 5 + x], want);
        }
    /* 2-byte storage: bf16 rows move as they are; fp32 accumulators are rounded into O */
    uint16_t hsrc[6 * 8], hdst[4 * 5];
    for (int i = 0; i < 48; i++) hsrc[i] = (uint16_t)(0x3f80 + i);
    for (int i = 0; i < 20; i++) hdst[i] = 0xffff;
    env.dtype = DCP_DTYPE_BF16;
    env.bufs[DCP_BUF_Q] = hsrc;
    env.bufs[DCP_BUF_STAGE] = hdst;
    CU_ASSERT_EQUAL(dcp_cpu_copy(&env, &item, 1), DCP_OK);
    for (int r = 0; r < 4; r++)
        for (int x = 0; x < 5; x++)
            CU_ASSERT_EQUAL(hdst[r * 5 + x],
                            (x >= 1 && x < 4) ? (uint16_t)(0x3f80 + 3 + r * 8 + x - 1) : 0xffff);
    const dcp_copy_item_t publish = {{3, 8, DCP_BUF_ACC_O}, {1, 5, DCP_BUF_O}, 4, 3};
    for (int i = 0; i < 48; i++) src[i] = 1.0f + (float)i / 300.0f;
    env.bufs[DCP_BUF_ACC_O] = src;
    env.bufs[DCP_BUF_O] = hdst;
    const dcp_dtype_t types[2] = {DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (int t = 0; t < 2; t++) {
        env.dtype = types[t];
        CU_ASSERT_EQUAL(dcp_cpu_copy(&env, &publish, 1), DCP_OK);
        for (int r = 0; r < 4; r++)
            for (int x = 1; x < 4; x++) {
                const float v = src[3 + r * 8 + x - 1];
                CU_ASSERT_EQUAL(hdst[r * 5 + x], t ? dcp_f32_to_fp16(v) : dcp_f32_to_bf16(v));
            }
    }
    env.dtype = (dcp_dtype_t)7;
    CU_ASSERT_EQUAL(dcp_cpu_copy(&env, &item, 1), DCP_ERR_INVALID_ARG);
}

/* bf16/fp16 conversions: known values, every fp16 value round-trips, rounding to nearest
 * even, and (where the compiler has _Float16) agreement with it on random floats. */
static void test_half_conversions(void)
{
    CU_ASSERT_EQUAL(dcp_f32_to_bf16(1.0f), 0x3f80);
    CU_ASSERT_EQUAL(dcp_f32_to_bf16(1.00390625f), 0x3f80); /* halfway: to even */
    CU_ASSERT_EQUAL(dcp_f32_to_bf16(1.01171875f), 0x3f82); /* halfway: to even (up) */
    CU_ASSERT_EQUAL(dcp_f32_to_fp16(1.0f), 0x3c00);
    CU_ASSERT_EQUAL(dcp_f32_to_fp16(65504.0f), 0x7bff);
    CU_ASSERT_EQUAL(dcp_f32_to_fp16(65520.0f), 0x7c00); /* overflow to infinity */
    CU_ASSERT_EQUAL(dcp_f32_to_fp16(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(dcp_f32_to_fp16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    CU_ASSERT(isnan(dcp_bf16_to_f32(dcp_f32_to_bf16(NAN))));
    CU_ASSERT(isnan(dcp_fp16_to_f32(dcp_f32_to_fp16(NAN))));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = dcp_fp16_to_f32((uint16_t)h);
        if (!isnan(f)) bad += dcp_f32_to_fp16(f) != h;
        const float g = dcp_bf16_to_f32((uint16_t)h);
        if (!isnan(g)) bad += dcp_f32_to_bf16(g) != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
#ifdef __FLT16_MAX__
    dcpt_rng_t rng = {3};
    for (int i = 0; i < 200000; i++) {
        const float f = dcp_bits_f32((uint32_t)dcpt_rng_next(&rng));
        if (isnan(f)) continue;
        const _Float16 r = (_Float16)f;
        uint16_t rb;
        memcpy(&rb, &r, 2);
        bad += rb != dcp_f32_to_fp16(f);
    }
    CU_ASSERT_EQUAL(bad, 0);
#endif
}

/* The plan-free tile cases of dcp-kernel-bench and the GPU suite: their pairs are the mask's,
 * and the CPU kernels over them match the reference for every mask. */
static void test_tile_cases(void)
{
    dcpt_rng_t rng = {12};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
        const int32_t total = (int32_t)dcpt_rng_range(&rng, 1, 300), tile = 64;
        int32_t *store;
        const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, total, &store);
        dcpt_tile_case_t tc;
        CU_ASSERT_EQUAL_FATAL(dcpt_tile_case_build(&m, total, tile, 4, 2, 16, &tc), DCP_OK);
        int64_t pairs;
        CU_ASSERT_EQUAL(dcp_mask_count_pairs(&m, total, 0, total, 0, total, &pairs), DCP_OK);
        CU_ASSERT_EQUAL(tc.pairs, pairs);
        CU_ASSERT_EQUAL(tc.num_groups, (total + tile - 1) / tile);
        kcase_t c;
        kcase_init(&c, total, 4, 2, 16, 1, m, dcpt_rng_next(&rng));
        CU_ASSERT_EQUAL(dcp_cpu_attn_fwd(&c.env, tc.groups, tc.num_groups, tc.tiles), DCP_OK);
        double rel, lse_err;
        int bad;
        compare(&c, 0, total, &rel, &lse_err, &bad);
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT(rel <= 1e-5 && lse_err <= 1e-5);
        kcase_free(&c);
        dcpt_tile_case_free(&tc);
        free(store);
    }
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    dcpt_tile_case_t tc;
    CU_ASSERT_EQUAL(dcpt_tile_case_build(&causal, 100, 0, 4, 2, 16, &tc), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcpt_tile_case_build(&causal, 100, 10, 3, 2, 16, &tc), DCP_ERR_INVALID_ARG);
}

/* The plain low-precision computation the GPU's error is judged against: fp32 gives the
 * reference back; bf16 and fp16 differ from it by their rounding, fp16 less than bf16. */
static void test_plain_low_precision_reference(void)
{
    const int32_t len = 200;
    const dcp_seq_info_t seq = {len, {.kind = DCP_MASK_CAUSAL}};
    dcpt_rng_t rng = {8};
    const int64_t n = (int64_t)len * 4 * 32;
    float *q = malloc(n * 4), *k = malloc(n / 2 * 4), *v = malloc(n / 2 * 4), *low = malloc(n * 4);
    double *o = malloc(n * 8), *lse = malloc(len * 4 * 8);
    for (int64_t i = 0; i < n; i++)
        q[i] = dcp_round_to(DCP_DTYPE_BF16, (float)dcpt_rng_normal(&rng));
    for (int64_t i = 0; i < n / 2; i++)
        k[i] = dcp_round_to(DCP_DTYPE_BF16, (float)dcpt_rng_normal(&rng));
    for (int64_t i = 0; i < n / 2; i++)
        v[i] = dcp_round_to(DCP_DTYPE_BF16, (float)dcpt_rng_normal(&rng));
    const dcp_dtype_t types[3] = {DCP_DTYPE_FP32, DCP_DTYPE_FP16, DCP_DTYPE_BF16};
    double err[3];
    for (int t = 0; t < 3; t++) {
        const dcp_attn_shape_t shape = {4, 2, 32, types[t], 0.0f};
        CU_ASSERT_EQUAL(dcpt_reference_attention(&seq, 1, &shape, q, k, v, o, lse, low, 1), DCP_OK);
        err[t] = 0;
        for (int64_t i = 0; i < n; i++) err[t] = fmax(err[t], fabs(low[i] - o[i]));
    }
    CU_ASSERT(err[0] < 1e-5);
    CU_ASSERT(err[1] > err[0] && err[1] < 1e-2);
    CU_ASSERT(err[2] > err[1] && err[2] < 5e-2);
    /* the rule built on it: twice the plain error plus one rounding step of the type */
    CU_ASSERT(dcpt_lowp_rule_holds(DCP_DTYPE_BF16, 0.01, 0.005, 1.0, 1e-4));
    CU_ASSERT(!dcpt_lowp_rule_holds(DCP_DTYPE_BF16, 0.02, 0.005, 1.0, 1e-4));
    CU_ASSERT(dcpt_lowp_rule_holds(DCP_DTYPE_BF16, 0.0105, 0.005, 1.0, 0.0));
    CU_ASSERT(!dcpt_lowp_rule_holds(DCP_DTYPE_FP16, 0.0105, 0.005, 1.0, 0.0));
    CU_ASSERT(!dcpt_lowp_rule_holds(DCP_DTYPE_BF16, 0.0, 0.005, 1.0, 2e-3));
    free(q), free(k), free(v), free(low), free(o), free(lse);
}

/* ---- non-finite inputs (dcp.h, dcp_tensors_t) ----------------------------------------- */

/* Query block and KV tile groups over the whole sequence, head group 0 of 1: tiles of 16
 * keys, so that a causal mask gives full tiles below the diagonal and partial ones on it. */
static void run_all_tiles(kcase_t *c, int32_t qb, int32_t kb)
{
    const int32_t nqb = (c->len + qb - 1) / qb;
    dcp_tile_group_t *g = calloc((size_t)nqb, sizeof *g);
    dcp_tile_t *tiles = calloc((size_t)nqb * (c->len / kb + 2), sizeof *tiles);
    int64_t nt = 0;
    for (int32_t b = 0; b < nqb; b++) {
        nt += build_group(c, b * qb, (b + 1) * qb < c->len ? (b + 1) * qb : c->len, 0, 0, c->len,
                          kb, 0, &g[b], tiles + nt);
        g[b].first_tile = (int32_t)(nt - g[b].num_tiles);
    }
    CU_ASSERT_EQUAL(dcp_cpu_attn_fwd(&c->env, g, nqb, tiles), DCP_OK);
    free(g);
    free(tiles);
}

/* Rows (query, head) that read token t0 of `input` (0 Q, 1 K, 2 V) at head hx. */
static int reads(const kcase_t *c, int input, int32_t t0, int32_t hx, int32_t i, int32_t h)
{
    if (input == 0) return i == t0 && h == hx;
    if (h / (c->hq / c->hkv) != hx) return 0;
    int32_t rg[4];
    CU_ASSERT_EQUAL(dcp_mask_allowed(&c->seq.mask, c->len, i, rg), DCP_OK);
    return (t0 >= rg[0] && t0 < rg[1]) || (t0 >= rg[2] && t0 < rg[3]);
}

/* Counts rows whose O and LSE are not what `reads` says: all NaN for a row that reads the
 * bad value, the reference's (finite, or 0 and -inf without keys) for the others. */
static int nonfinite_wrong(const kcase_t *c, int input, int32_t t0, int32_t hx)
{
    int wrong = 0;
    for (int32_t i = 0; i < c->len; i++)
        for (int32_t h = 0; h < c->hq; h++) {
            const int64_t r = (int64_t)i * c->hq + h;
            const float *o = c->o + r * c->d;
            int nan = isnan(c->lse[r]);
            for (int32_t x = 0; x < c->d; x++) nan += isnan(o[x]);
            if (reads(c, input, t0, hx, i, h)) {
                wrong += nan != c->d + 1;
                continue;
            }
            if (isinf(c->rlse[r])) {
                wrong += !(isinf(c->lse[r]) && c->lse[r] < 0);
                for (int32_t x = 0; x < c->d; x++) wrong += o[x] != 0.0f;
                continue;
            }
            wrong += nan != 0 || fabs(c->lse[r] - c->rlse[r]) > 1e-4;
            for (int32_t x = 0; x < c->d; x++) wrong += fabs(o[x] - c->ro[r * c->d + x]) > 1e-4;
        }
    return wrong;
}

/* NaN, +Inf and -Inf in one element of Q, K or V: every row that reads it (its query; a
 * query that may attend the key) gets O = NaN and LSE = NaN, on full and partial tiles; rows
 * that do not read it (masked keys included) are untouched; rows without keys stay (0, -inf). */
static void test_nonfinite_inputs_propagate(void)
{
    const float values[3] = {NAN, INFINITY, -INFINITY};
    int32_t *r = calloc(4 * 70, sizeof *r); /* custom: odd rows see nothing, even a prefix */
    for (int32_t i = 0; i < 70; i += 2) r[4 * i + 1] = i + 1;
    const dcp_mask_t masks[3] = {{.kind = DCP_MASK_CAUSAL},
                                 {.kind = DCP_MASK_WINDOW, .window = 9},
                                 {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = 70}};
    for (int m = 0; m < 3; m++)
        for (int input = 0; input < 3; input++)
            for (int vi = 0; vi < 3; vi++) {
                kcase_t c;
                kcase_init(&c, 70, 4, 2, 16, 1, masks[m], 60 + m);
                const int32_t t0 = 20, hx = input == 0 ? 3 : 1;
                float *x = input == 0 ? c.q : input == 1 ? c.k : c.v;
                x[((int64_t)t0 * (input == 0 ? c.hq : c.hkv) + hx) * c.d + 5] = values[vi];
                run_all_tiles(&c, 16, 16);
                const int wrong = nonfinite_wrong(&c, input, t0, hx);
                CU_ASSERT_EQUAL(wrong, 0);
                if (wrong)
                    fprintf(stderr, "non-finite %g in %c, mask %d: %d rows wrong\n", values[vi],
                            "QKV"[input], m, wrong);
                kcase_free(&c);
            }
    free(r);
}

/* Scores that are all -inf (a -Inf query element against keys positive in that element)
 * are a non-finite input, not a fully masked row: NaN, never (0, -inf). And V all NaN leaves
 * rows without keys at (0, -inf). */
static void test_nonfinite_not_taken_for_masked(void)
{
    kcase_t c;
    kcase_init(&c, 50, 2, 2, 8, 1, (dcp_mask_t){.kind = DCP_MASK_CAUSAL}, 70);
    for (int32_t t = 0; t < 50; t++) c.k[((int64_t)t * 2 + 1) * 8 + 3] = 1.0f;
    const dcp_attn_shape_t shape = {2, 2, 8, DCP_DTYPE_FP32, 0.0f};
    CU_ASSERT_EQUAL(
        dcpt_reference_attention(&c.seq, 1, &shape, c.q, c.k, c.v, c.ro, c.rlse, NULL, 1), DCP_OK);
    c.q[((int64_t)30 * 2 + 1) * 8 + 3] = -INFINITY;
    run_all_tiles(&c, 16, 16);
    CU_ASSERT(isnan(c.lse[30 * 2 + 1]));
    CU_ASSERT(isnan(c.o[(30 * 2 + 1) * 8]));
    CU_ASSERT_EQUAL(nonfinite_wrong(&c, 0, 30, 1), 0);
    kcase_free(&c);
    int32_t *r = calloc(4 * 40, sizeof *r);
    for (int32_t i = 0; i < 40; i += 2) r[4 * i + 1] = i + 1;
    kcase_init(&c, 40, 2, 1, 8, 1,
               (dcp_mask_t){.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = 40}, 71);
    for (int64_t i = 0; i < 40 * 8; i++) c.v[i] = NAN;
    run_all_tiles(&c, 16, 16);
    int wrong = 0;
    for (int32_t i = 0; i < 40; i++)
        for (int32_t h = 0; h < 2; h++) {
            const int64_t row = (int64_t)i * 2 + h;
            if (i % 2) {
                wrong += !(isinf(c.lse[row]) && c.lse[row] < 0);
                for (int x = 0; x < 8; x++) wrong += c.o[row * 8 + x] != 0.0f;
            } else {
                wrong += !isnan(c.lse[row]);
                for (int x = 0; x < 8; x++) wrong += !isnan(c.o[row * 8 + x]);
            }
        }
    CU_ASSERT_EQUAL(wrong, 0);
    kcase_free(&c);
    free(r);
}

/* A NaN partial stays NaN through an accumulating launch and through the n-way merge, also
 * beside empty (-inf) partials, where a max that skips NaN would make the row look empty. */
static void test_nonfinite_partials_merge_to_nan(void)
{
    const float l0[3] = {NAN, -INFINITY, -INFINITY}, l1[3] = {-INFINITY, NAN, 2.0f};
    float w[3];
    CU_ASSERT(isnan(dcp_lse_weights(l0, 3, w)) && isnan(w[0]) && isnan(w[2]));
    CU_ASSERT(isnan(dcp_lse_weights(l1, 3, w)) && isnan(w[1]));
    /* accumulate: keys [0, 60) in one launch (a NaN key at 10), [60, 120) in the next */
    const dcp_mask_t full = {.kind = DCP_MASK_FULL};
    kcase_t c;
    kcase_init(&c, 120, 2, 1, 8, 1, full, 72);
    c.k[10 * 8 + 2] = NAN;
    run_two_launches(&c, 30);
    int bad = 0;
    for (int64_t i = 0; i < 120 * 2; i++) bad += !isnan(c.lse[i]) + !isnan(c.o[i * 8 + 7]);
    CU_ASSERT_EQUAL(bad, 0);
    /* merge: partial 0 NaN, partial 1 empty, destination empty */
    float part[2][3 * 9];
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 27; i++) part[p][i] = p ? 0.0f : 1.0f;
    part[0][24] = NAN, part[0][25] = part[0][26] = 0.5f; /* LSE of rows 0..2 */
    part[1][24] = part[1][25] = part[1][26] = -INFINITY; /* empty */
    float o[3 * 8], lse[3] = {-INFINITY, -INFINITY, -INFINITY};
    for (int i = 0; i < 24; i++) o[i] = 0.0f;
    dcp_kernel_env_t env = {.q_heads = 1, .kv_heads = 1, .head_dim = 8, .dtype = DCP_DTYPE_FP32};
    env.bufs[DCP_BUF_ACC_O] = o;
    env.bufs[DCP_BUF_ACC_LSE] = lse;
    env.bufs[DCP_BUF_PART] = part;
    const dcp_merge_src_t src[2] = {{{0, 8, DCP_BUF_PART}, {24, 1, DCP_BUF_PART}},
                                    {{27, 8, DCP_BUF_PART}, {27 + 24, 1, DCP_BUF_PART}}};
    const dcp_merge_item_t item = {{0, 8, DCP_BUF_ACC_O}, {0, 1, DCP_BUF_ACC_LSE}, 3, 0, 2};
    CU_ASSERT_EQUAL(dcp_cpu_merge(&env, &item, 1, src), DCP_OK);
    CU_ASSERT(isnan(lse[0]) && isnan(o[0]) && isnan(o[7]));
    CU_ASSERT(lse[1] == 0.5f && o[8] == 1.0f && lse[2] == 0.5f);
    kcase_free(&c);
}

int dcp_suite_kernels(void)
{
    static const dcp_test_t tests[] = {
        {"attention_every_mask", test_attention_every_mask},
        {"attention_gqa_and_head_groups", test_attention_gqa_and_head_groups},
        {"fully_masked_rows", test_fully_masked_rows},
        {"accumulate_equals_single_pass", test_accumulate_equals_single_pass},
        {"merge_of_partials", test_merge_of_partials},
        {"copy_strided", test_copy_strided},
        {"half_conversions", test_half_conversions},
        {"tile_cases", test_tile_cases},
        {"plain_low_precision_reference", test_plain_low_precision_reference},
        {"nonfinite_inputs_propagate", test_nonfinite_inputs_propagate},
        {"nonfinite_not_taken_for_masked", test_nonfinite_not_taken_for_masked},
        {"nonfinite_partials_merge_to_nan", test_nonfinite_partials_merge_to_nan},
        {NULL, NULL},
    };
    return dcp_add_suite("kernels", tests);
}
