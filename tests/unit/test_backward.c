/* The attention backward: the double-precision reference against finite differences of the
 * reference forward (every mask, GQA 1 and 2), then the CPU kernels (bwd_delta, attn_bwd)
 * over tile cases against the reference: every mask, ragged tiles, GQA 1/4, head groups,
 * fp32 to 1e-5 and bf16/fp16 by FlashAttention's rule, fully masked rows, NaN propagation
 * (dO, and NaN or Inf in Q, K, V through the forward's LSE), accumulation into the destinations;
 * bwd_delta and accumulate on hand-checked rows. */
#include "include/base/half.h"
#include "kernels/cpu.h"
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

static void fill_normal(dcpt_rng_t *rng, float *x, int64_t n, dcp_dtype_t dtype)
{
    for (int64_t i = 0; i < n; i++) x[i] = dcp_round_to(dtype, (float)dcpt_rng_normal(rng));
}

/* Max |x - ref| and max |ref| over n elements; NaN or infinite x are counted in *bad. */
static void max_err(const float *x, const double *ref, int64_t n, double *err, double *ref_max,
                    int *bad)
{
    *err = 0;
    *ref_max = 0;
    for (int64_t i = 0; i < n; i++) {
        *bad += !isfinite(x[i]);
        *err = fmax(*err, fabs(x[i] - ref[i]));
        *ref_max = fmax(*ref_max, fabs(ref[i]));
    }
}

/* ---- the reference against finite differences ------------------------------------------ */

typedef struct {
    const dcp_seq_info_t *seqs;
    int32_t num_seqs;
    dcp_attn_shape_t shape;
    float *q, *k, *v, *g;
    double *o, *lse;
    int64_t nq;
} fd_case_t;

/* loss = sum(O * G) from the double forward. */
static double fd_loss(const fd_case_t *c)
{
    CU_ASSERT_EQUAL(dcpt_reference_attention(c->seqs, c->num_seqs, &c->shape, c->q, c->k, c->v,
                                             c->o, c->lse, NULL, 1),
                    DCP_OK);
    double loss = 0;
    for (int64_t i = 0; i < c->nq; i++) loss += c->o[i] * (double)c->g[i];
    return loss;
}

/* Central difference of the loss in x[e], over the step the float actually takes. */
static double fd_grad(const fd_case_t *c, float *x, int64_t e)
{
    const float x0 = x[e], h = 0x1p-12f;
    x[e] = x0 + h;
    const double up = x[e], lp = fd_loss(c);
    x[e] = x0 - h;
    const double dn = x[e], lm = fd_loss(c);
    x[e] = x0;
    return (lp - lm) / (up - dn);
}

/* Max |analytic - numeric| over every element of x, and max |analytic|. */
static void fd_compare(const fd_case_t *c, float *x, const double *grad, int64_t n, double *err,
                       double *grad_max)
{
    *err = 0;
    *grad_max = 0;
    for (int64_t e = 0; e < n; e++) {
        *err = fmax(*err, fabs(grad[e] - fd_grad(c, x, e)));
        *grad_max = fmax(*grad_max, fabs(grad[e]));
    }
}

/* Two short sequences under masks of one kind (THD: concatenated), hq query heads sharing
 * hkv KV heads; dq, dk, dv of every element checked against central differences. */
static void fd_check(dcp_mask_kind_t kind, int32_t hq, int32_t hkv, uint64_t seed)
{
    dcpt_rng_t rng = {seed};
    const int32_t d = 4;
    int32_t *store[2];
    dcp_seq_info_t seqs[2];
    int64_t tokens = 0;
    for (int s = 0; s < 2; s++) {
        const int32_t len = (int32_t)dcpt_rng_range(&rng, 5, 12);
        seqs[s] = (dcp_seq_info_t){len, t_random_mask(&rng, kind, len, &store[s])};
        tokens += len;
    }
    const int64_t nq = tokens * hq * d, nkv = tokens * hkv * d;
    fd_case_t c = {
        .seqs = seqs, .num_seqs = 2, .shape = {hq, hkv, d, DCP_DTYPE_FP32, 0.0f}, .nq = nq};
    c.q = malloc(nq * sizeof(float));
    c.g = malloc(nq * sizeof(float));
    c.k = malloc(nkv * sizeof(float));
    c.v = malloc(nkv * sizeof(float));
    c.o = malloc(nq * sizeof(double));
    c.lse = malloc(tokens * hq * sizeof(double));
    double *dq = malloc(nq * sizeof(double)), *dk = malloc(nkv * sizeof(double)),
           *dv = malloc(nkv * sizeof(double));
    float *lq = malloc(nq * sizeof(float)), *lk = malloc(nkv * sizeof(float)),
          *lv = malloc(nkv * sizeof(float));
    fill_normal(&rng, c.q, nq, DCP_DTYPE_FP32);
    fill_normal(&rng, c.g, nq, DCP_DTYPE_FP32);
    fill_normal(&rng, c.k, nkv, DCP_DTYPE_FP32);
    fill_normal(&rng, c.v, nkv, DCP_DTYPE_FP32);
    CU_ASSERT_EQUAL(
        dcpt_reference_backward(seqs, 2, &c.shape, c.q, c.k, c.v, c.g, dq, dk, dv, lq, lk, lv, 3),
        DCP_OK);
    double err[3], gmax[3];
    fd_compare(&c, c.q, dq, nq, &err[0], &gmax[0]);
    fd_compare(&c, c.k, dk, nkv, &err[1], &gmax[1]);
    fd_compare(&c, c.v, dv, nkv, &err[2], &gmax[2]);
    /* and the plain computation in fp32 is the double one up to fp32 rounding */
    double lerr[3], lmax[3];
    int bad = 0;
    max_err(lq, dq, nq, &lerr[0], &lmax[0], &bad);
    max_err(lk, dk, nkv, &lerr[1], &lmax[1], &bad);
    max_err(lv, dv, nkv, &lerr[2], &lmax[2], &bad);
    CU_ASSERT_EQUAL(bad, 0);
    for (int t = 0; t < 3; t++) {
        const int ok = err[t] <= 1e-6 * fmax(1.0, gmax[t]) &&
                       (gmax[t] > 0 || kind != DCP_MASK_CAUSAL) && /* no vacuous pass */
                       lerr[t] <= 1e-5 * fmax(1e-30, lmax[t]);
        CU_ASSERT(ok);
        if (!ok)
            fprintf(stderr,
                    "reference gradient %c, mask %d, heads %d/%d: fd err %.3g (max %.3g), "
                    "fp32 err %.3g\n",
                    "qkv"[t], kind, hq, hkv, err[t], gmax[t], lerr[t]);
    }
    free(c.q), free(c.g), free(c.k), free(c.v), free(c.o), free(c.lse);
    free(dq), free(dk), free(dv), free(lq), free(lk), free(lv);
    free(store[0]), free(store[1]);
}

static void test_reference_matches_finite_differences(void)
{
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++) {
        fd_check((dcp_mask_kind_t)kind, 2, 2, 100 + kind);
        fd_check((dcp_mask_kind_t)kind, 2, 1, 200 + kind);
    }
}

/* ---- the CPU kernels over tile cases ---------------------------------------------------- */

/* A tile case (plugin/cli/support/tile_case.h) split into hb head groups, with its inputs in the
 * dtype and the buffers of the forward and the backward. */
typedef struct {
    dcpt_tile_case_t tc;
    int32_t hb;
    dcp_tile_group_t *groups;
    dcp_tile_t *tiles;
    int64_t ng, nt, nq, nkv, rows;
    dcp_dtype_t dtype;
    float *q, *k, *v, *g;         /* inputs as floats, values of the dtype */
    void *sq, *sk, *sv, *sg, *so; /* their storage in the dtype, and the published O */
    float *acc_o, *lse, *delta;   /* forward output and delta */
    float *dq, *dk, *dv;          /* gradients (fp32) */
    double *rdq, *rdk, *rdv;      /* the double reference */
    float *ldq, *ldk, *ldv;       /* the plain computation in the dtype */
    dcp_kernel_env_t env;
} bcase_t;

static void *storage(const float *x, int64_t n, dcp_dtype_t dtype)
{
    if (dtype == DCP_DTYPE_FP32) {
        float *s = malloc(n * sizeof(float));
        memcpy(s, x, n * sizeof(float));
        return s;
    }
    uint16_t *s = malloc(n * sizeof(uint16_t));
    dcp_pack_half(dtype, x, s, n);
    return s;
}

static void bcase_init(bcase_t *c, const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq,
                       int32_t hkv, int32_t d, int32_t hb, dcp_dtype_t dtype, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    CU_ASSERT_EQUAL_FATAL(dcpt_tile_case_build(mask, total, tile, hq, hkv, d, &c->tc), DCP_OK);
    c->hb = hb;
    c->dtype = dtype;
    c->nq = (int64_t)total * hq * d;
    c->nkv = (int64_t)total * hkv * d;
    c->rows = (int64_t)total * hq;
    /* head group h: the tile case's views moved by h groups of heads */
    c->ng = c->tc.num_groups * hb;
    c->nt = c->tc.num_tiles * hb;
    c->groups = malloc(c->ng * sizeof *c->groups);
    c->tiles = malloc((c->nt + 1) * sizeof *c->tiles);
    const int64_t qpg = hq / hb, kvpg = hkv / hb;
    for (int32_t h = 0; h < hb; h++) {
        for (int64_t i = 0; i < c->tc.num_groups; i++) {
            dcp_tile_group_t g = c->tc.groups[i];
            g.q.off += h * qpg * d, g.o.off += h * qpg * d, g.dout.off += h * qpg * d;
            g.dq.off += h * qpg * d, g.lse.off += h * qpg, g.delta.off += h * qpg;
            g.first_tile += (int32_t)(h * c->tc.num_tiles);
            g.head_group = h;
            c->groups[h * c->tc.num_groups + i] = g;
        }
        for (int64_t i = 0; i < c->tc.num_tiles; i++) {
            dcp_tile_t t = c->tc.tiles[i];
            t.k.off += h * kvpg * d, t.v.off += h * kvpg * d;
            t.dk.off += h * kvpg * d, t.dv.off += h * kvpg * d;
            c->tiles[h * c->tc.num_tiles + i] = t;
        }
    }
    dcpt_rng_t rng = {seed};
    c->q = malloc(c->nq * sizeof(float));
    c->g = malloc(c->nq * sizeof(float));
    c->k = malloc(c->nkv * sizeof(float));
    c->v = malloc(c->nkv * sizeof(float));
    fill_normal(&rng, c->q, c->nq, dtype);
    fill_normal(&rng, c->k, c->nkv, dtype);
    fill_normal(&rng, c->v, c->nkv, dtype);
    fill_normal(&rng, c->g, c->nq, dtype);
    c->sq = storage(c->q, c->nq, dtype);
    c->sk = storage(c->k, c->nkv, dtype);
    c->sv = storage(c->v, c->nkv, dtype);
    c->sg = storage(c->g, c->nq, dtype);
    c->so = calloc(c->nq, dtype == DCP_DTYPE_FP32 ? 4 : 2);
    c->acc_o = calloc(c->nq, sizeof(float));
    c->lse = calloc(c->rows, sizeof(float));
    c->delta = calloc(c->rows, sizeof(float));
    c->dq = calloc(c->nq, sizeof(float));
    c->dk = calloc(c->nkv, sizeof(float));
    c->dv = calloc(c->nkv, sizeof(float));
    c->rdq = malloc(c->nq * sizeof(double));
    c->rdk = malloc(c->nkv * sizeof(double));
    c->rdv = malloc(c->nkv * sizeof(double));
    c->ldq = malloc(c->nq * sizeof(float));
    c->ldk = malloc(c->nkv * sizeof(float));
    c->ldv = malloc(c->nkv * sizeof(float));
    c->env = (dcp_kernel_env_t){.seqs = &c->tc.seq,
                                .q_heads = hq / hb,
                                .kv_heads = hkv / hb,
                                .head_dim = d,
                                .scale = (float)(1.0 / sqrt((double)d)),
                                .dtype = dtype};
    void **b = c->env.bufs;
    b[DCP_BUF_Q] = c->sq, b[DCP_BUF_K] = c->sk, b[DCP_BUF_V] = c->sv, b[DCP_BUF_DO] = c->sg;
    b[DCP_BUF_O] = c->so, b[DCP_BUF_ACC_O] = c->acc_o, b[DCP_BUF_ACC_LSE] = c->lse;
    b[DCP_BUF_DELTA] = c->delta;
    b[DCP_BUF_ACC_DQ] = c->dq, b[DCP_BUF_ACC_DK] = c->dk, b[DCP_BUF_ACC_DV] = c->dv;
}

static void bcase_free(bcase_t *c)
{
    dcpt_tile_case_free(&c->tc);
    free(c->groups), free(c->tiles);
    free(c->q), free(c->k), free(c->v), free(c->g);
    free(c->sq), free(c->sk), free(c->sv), free(c->sg), free(c->so);
    free(c->acc_o), free(c->lse), free(c->delta), free(c->dq), free(c->dk), free(c->dv);
    free(c->rdq), free(c->rdk), free(c->rdv), free(c->ldq), free(c->ldk), free(c->ldv);
}

/* The forward, O published in the dtype (as the executor does), then delta. */
static void bcase_forward(bcase_t *c)
{
    CU_ASSERT_EQUAL(dcp_cpu_attn_fwd(&c->env, c->groups, c->ng, c->tiles), DCP_OK);
    if (c->dtype == DCP_DTYPE_FP32)
        memcpy(c->so, c->acc_o, c->nq * sizeof(float));
    else
        dcp_pack_half(c->dtype, c->acc_o, c->so, c->nq);
    CU_ASSERT_EQUAL(dcp_cpu_bwd_delta(&c->env, c->rows), DCP_OK);
}

/* The backward into gradients that start at `start`. */
static void bcase_backward(bcase_t *c, float start)
{
    for (int64_t i = 0; i < c->nq; i++) c->dq[i] = start;
    for (int64_t i = 0; i < c->nkv; i++) c->dk[i] = c->dv[i] = start;
    CU_ASSERT_EQUAL(dcp_cpu_attn_bwd(&c->env, c->groups, c->ng, c->tiles), DCP_OK);
}

static void bcase_reference(bcase_t *c)
{
    const dcp_attn_shape_t shape = {c->tc.hq, c->tc.hkv, c->tc.d, c->dtype, 0.0f};
    CU_ASSERT_EQUAL(dcpt_reference_backward(&c->tc.seq, 1, &shape, c->q, c->k, c->v, c->g, c->rdq,
                                            c->rdk, c->rdv, c->ldq, c->ldk, c->ldv, 2),
                    DCP_OK);
}

/* Gradients (less `start`) against the reference: fp32 to 1e-5 of max |ref|, bf16/fp16 by
 * FlashAttention's rule against the plain computation. */
static int bcase_check(const bcase_t *c, float start, const char *what)
{
    const float *got[3] = {c->dq, c->dk, c->dv}, *low[3] = {c->ldq, c->ldk, c->ldv};
    const double *ref[3] = {c->rdq, c->rdk, c->rdv};
    const int64_t n[3] = {c->nq, c->nkv, c->nkv};
    int ok = 1;
    for (int t = 0; t < 3; t++) {
        float *x = malloc(n[t] * sizeof(float));
        for (int64_t i = 0; i < n[t]; i++) x[i] = got[t][i] - start;
        double err, ref_max, low_err, low_max;
        int bad = 0, lbad = 0;
        max_err(x, ref[t], n[t], &err, &ref_max, &bad);
        max_err(low[t], ref[t], n[t], &low_err, &low_max, &lbad);
        const int pass =
            bad == 0 && (c->dtype == DCP_DTYPE_FP32
                             ? err <= 1e-5 * ref_max
                             : dcpt_lowp_grad_rule_holds(c->dtype, err, low_err, ref_max));
        if (!pass)
            fprintf(stderr,
                    "backward %s: d%c total %d tile %d heads %d/%d hb %d D %d dtype %d mask %d: "
                    "err %.3g (plain %.3g) of max %.3g, bad %d\n",
                    what, "qkv"[t], c -> tc.total, c->tc.tile, c->tc.hq, c->tc.hkv, c->hb, c->tc.d,
                    c->dtype, c->tc.seq.mask.kind, err, low_err, ref_max, bad);
        ok &= pass;
        free(x);
    }
    return ok;
}

static int run_bcase(const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq, int32_t hkv,
                     int32_t d, int32_t hb, dcp_dtype_t dtype, uint64_t seed, const char *what)
{
    bcase_t c;
    bcase_init(&c, mask, total, tile, hq, hkv, d, hb, dtype, seed);
    bcase_forward(&c);
    bcase_backward(&c, 0.0f);
    bcase_reference(&c);
    const int ok = bcase_check(&c, 0.0f, what);
    bcase_free(&c);
    return ok;
}

/* Every mask, ragged tiles (tile edges that are not multiples of the kernel's row and key
 * blocks), GQA 1 and 4, a head dim with a remainder of its 4-wide loops. */
static void every_mask(dcp_dtype_t dtype, uint64_t seed)
{
    dcpt_rng_t rng = {seed};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 2; rep++) {
            const int32_t total = (int32_t)dcpt_rng_range(&rng, 1, 260);
            int32_t *store;
            const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, total, &store);
            const int32_t tile = (int32_t)dcpt_rng_range(&rng, 7, 110);
            CU_ASSERT(run_bcase(&m, total, tile, rep ? 4 : 2, rep ? 1 : 2, rep ? 18 : 16, 1, dtype,
                                dcpt_rng_next(&rng), "every mask"));
            free(store);
        }
}

static void test_every_mask_fp32(void)
{
    every_mask(DCP_DTYPE_FP32, 31);
}

static void test_every_mask_bf16(void)
{
    every_mask(DCP_DTYPE_BF16, 32);
}

static void test_gqa_head_groups_fp16(void)
{
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL}, full = {.kind = DCP_MASK_FULL};
    CU_ASSERT(run_bcase(&causal, 200, 100, 8, 2, 64, 1, DCP_DTYPE_FP32, 1, "gqa 4"));
    CU_ASSERT(run_bcase(&causal, 200, 100, 8, 2, 64, 2, DCP_DTYPE_FP32, 2, "two head groups"));
    CU_ASSERT(run_bcase(&full, 150, 64, 4, 4, 128, 4, DCP_DTYPE_FP32, 3, "D 128, four groups"));
    CU_ASSERT(run_bcase(&causal, 1, 16, 4, 2, 16, 1, DCP_DTYPE_FP32, 4, "one token"));
    CU_ASSERT(run_bcase(&causal, 170, 70, 8, 2, 64, 2, DCP_DTYPE_FP16, 5, "fp16"));
    CU_ASSERT(run_bcase(&causal, 170, 70, 8, 2, 64, 2, DCP_DTYPE_BF16, 6, "bf16 head groups"));
}

/* Rows without allowed keys (custom ranges empty for odd queries) get dQ = 0 and add
 * nothing; so does a row whose LSE says -inf inside a full tile; nothing becomes NaN. */
static void test_fully_masked_rows(void)
{
    const int32_t len = 90;
    int32_t *r = calloc(4 * len, sizeof *r);
    for (int32_t i = 0; i < len; i += 2) r[4 * i + 1] = i + 1;
    const dcp_mask_t m = {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = len};
    const dcp_dtype_t types[2] = {DCP_DTYPE_FP32, DCP_DTYPE_BF16};
    for (int t = 0; t < 2; t++) {
        bcase_t c;
        bcase_init(&c, &m, len, 40, 4, 2, 16, 1, types[t], 11);
        bcase_forward(&c);
        bcase_backward(&c, 0.0f);
        bcase_reference(&c);
        CU_ASSERT(bcase_check(&c, 0.0f, "fully masked rows"));
        int nonzero = 0;
        for (int32_t i = 1; i < len; i += 2)
            for (int64_t x = 0; x < 4 * 16; x++) nonzero += c.dq[(int64_t)i * 4 * 16 + x] != 0.0f;
        CU_ASSERT_EQUAL(nonzero, 0);
        bcase_free(&c);
    }
    free(r);
    /* a full mask, and row 5 of head 1 told LSE = -inf */
    const dcp_mask_t full = {.kind = DCP_MASK_FULL};
    bcase_t c;
    bcase_init(&c, &full, 40, 40, 2, 2, 8, 1, DCP_DTYPE_FP32, 12);
    bcase_forward(&c);
    c.lse[5 * 2 + 1] = -INFINITY;
    bcase_backward(&c, 0.0f);
    int bad = 0, nonzero = 0;
    for (int64_t i = 0; i < c.nq; i++) bad += !isfinite(c.dq[i]);
    for (int64_t i = 0; i < c.nkv; i++) bad += !isfinite(c.dk[i]) + !isfinite(c.dv[i]);
    for (int x = 0; x < 8; x++) nonzero += c.dq[(5 * 2 + 1) * 8 + x] != 0.0f;
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(nonzero, 0);
    bcase_free(&c);
}

/* A NaN in one row's dO reaches exactly what that row contributes to: its dQ, the dK of
 * the keys it sees and the dV of those keys in the NaN's column; nothing else. */
static void test_nan_in_dout_propagates(void)
{
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    const int32_t len = 100, hq = 4, hkv = 2, d = 16, row = 37, head = 3, kvh = head / 2;
    bcase_t c;
    bcase_init(&c, &causal, len, 48, hq, hkv, d, 1, DCP_DTYPE_FP32, 13);
    ((float *)c.sg)[((int64_t)row * hq + head) * d + 2] = NAN;
    bcase_forward(&c);
    CU_ASSERT(isnan(c.delta[row * hq + head]));
    bcase_backward(&c, 0.0f);
    int wrong = 0;
    for (int32_t i = 0; i < len; i++)
        for (int32_t h = 0; h < hq; h++)
            for (int32_t x = 0; x < d; x++)
                wrong += isnan(c.dq[((int64_t)i * hq + h) * d + x]) != (i == row && h == head);
    for (int32_t key = 0; key < len; key++)
        for (int32_t h = 0; h < hkv; h++)
            for (int32_t x = 0; x < d; x++) {
                const int64_t e = ((int64_t)key * hkv + h) * d + x;
                const int seen = key <= row && h == kvh;
                wrong += isnan(c.dk[e]) != seen;
                wrong += isnan(c.dv[e]) != (seen && x == 2);
            }
    CU_ASSERT_EQUAL(wrong, 0);
    bcase_free(&c);
}

/* NaN and Inf in one element of Q, K or V (fp32 and bf16 storage): the forward rows that
 * read it get LSE = NaN (dcp.h), so the backward's P is NaN on them and dQ of exactly those
 * rows, and dK, dV of exactly the keys those rows see, become NaN (every element); every
 * other gradient stays finite. */
static void test_nonfinite_inputs_propagate(void)
{
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    const int32_t len = 80, hq = 4, hkv = 2, d = 16, t0 = 33;
    const float values[2] = {NAN, INFINITY};
    for (int ty = 0; ty < 2; ty++)
        for (int input = 0; input < 3; input++)
            for (int vi = 0; vi < 2; vi++) {
                const dcp_dtype_t dtype = ty ? DCP_DTYPE_BF16 : DCP_DTYPE_FP32;
                const int32_t hx = input == 0 ? 2 : 1, rep = hq / hkv;
                bcase_t c;
                bcase_init(&c, &causal, len, 32, hq, hkv, d, 1, dtype, 80 + input);
                void *x = input == 0 ? c.sq : input == 1 ? c.sk : c.sv;
                const int64_t e = ((int64_t)t0 * (input == 0 ? hq : hkv) + hx) * d + 4;
                if (ty)
                    ((uint16_t *)x)[e] = dcp_f32_to_bf16(values[vi]);
                else
                    ((float *)x)[e] = values[vi];
                bcase_forward(&c);
                bcase_backward(&c, 0.0f);
                /* the rows that read it: its query, or the queries at or after t0 (causal) */
                int wrong = 0;
                int32_t last = -1; /* the last row of a poisoned head: keys <= it are NaN */
                for (int32_t i = 0; i < len; i++)
                    for (int32_t h = 0; h < hq; h++) {
                        const int p = input == 0 ? i == t0 && h == hx : i >= t0 && h / rep == hx;
                        const int64_t r = (int64_t)i * hq + h;
                        wrong += (isnan(c.lse[r]) != p);
                        for (int32_t y = 0; y < d; y++)
                            wrong += p ? !isnan(c.dq[r * d + y]) : !isfinite(c.dq[r * d + y]);
                        if (p && i > last) last = i;
                    }
                const int32_t kvh = input == 0 ? hx / rep : hx;
                for (int32_t key = 0; key < len; key++)
                    for (int32_t h = 0; h < hkv; h++)
                        for (int32_t y = 0; y < d; y++) {
                            const int64_t k = ((int64_t)key * hkv + h) * d + y;
                            const int p = h == kvh && key <= last;
                            wrong += p ? !isnan(c.dk[k]) + !isnan(c.dv[k])
                                       : !isfinite(c.dk[k]) + !isfinite(c.dv[k]);
                        }
                CU_ASSERT_EQUAL(wrong, 0);
                if (wrong)
                    fprintf(stderr, "backward, %g in %c (%s): %d values wrong\n", values[vi],
                            "QKV"[input], ty ? "bf16" : "fp32", wrong);
                bcase_free(&c);
            }
}

/* Gradients add to what the destinations hold (several groups may share a tile's dK/dV). */
static void test_adds_into_destinations(void)
{
    const dcp_mask_t m = {.kind = DCP_MASK_LAMBDA, .sink = 7, .window = 40};
    bcase_t c;
    bcase_init(&c, &m, 130, 50, 4, 2, 32, 1, DCP_DTYPE_FP32, 14);
    bcase_forward(&c);
    bcase_backward(&c, 0.5f);
    bcase_reference(&c);
    CU_ASSERT(bcase_check(&c, 0.5f, "adds"));
    bcase_free(&c);
}

/* Views of the wrong element type and unknown dtypes are refused before anything is written. */
static void test_rejects_bad_arguments(void)
{
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    bcase_t c;
    bcase_init(&c, &causal, 64, 32, 2, 2, 8, 1, DCP_DTYPE_BF16, 15);
    bcase_forward(&c);
    c.groups[1].dq.buf = DCP_BUF_DQ; /* the caller's dQ: plan dtype */
    for (int64_t i = 0; i < c.nq; i++) c.dq[i] = 0.0f;
    CU_ASSERT_EQUAL(dcp_cpu_attn_bwd(&c.env, c.groups, c.ng, c.tiles), DCP_ERR_INVALID_ARG);
    int touched = 0;
    for (int64_t i = 0; i < c.nq; i++) touched += c.dq[i] != 0.0f;
    CU_ASSERT_EQUAL(touched, 0);
    c.groups[1].dq.buf = DCP_BUF_ACC_DQ;
    c.tiles[0].dv.buf = DCP_BUF_RKV;
    CU_ASSERT_EQUAL(dcp_cpu_attn_bwd(&c.env, c.groups, c.ng, c.tiles), DCP_ERR_INVALID_ARG);
    c.tiles[0].dv.buf = DCP_BUF_ACC_DV;
    c.env.dtype = (dcp_dtype_t)7;
    CU_ASSERT_EQUAL(dcp_cpu_attn_bwd(&c.env, c.groups, c.ng, c.tiles), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_cpu_bwd_delta(&c.env, c.rows), DCP_ERR_INVALID_ARG);
    bcase_free(&c);
    const dcp_copy_item_t item = {{0, 4, DCP_BUF_PART}, {0, 4, DCP_BUF_DK}, 1, 4};
    const dcp_kernel_env_t env = {.dtype = DCP_DTYPE_BF16};
    CU_ASSERT_EQUAL(dcp_cpu_accumulate(&env, &item, 1), DCP_ERR_INVALID_ARG);
}

/* ---- row kernels, by hand ---------------------------------------------------------------- */

static void test_bwd_delta_by_hand(void)
{
    /* two rows of three: 0.5 + 0.5 + 6 = 7 and -2 + 2 + 0.5 = 0.5, exact in every type */
    const float dout[6] = {1, 2, 3, -1, 0.5f, 4}, o[6] = {0.5f, 0.25f, 2, 2, 4, 0.125f};
    const dcp_dtype_t types[3] = {DCP_DTYPE_FP32, DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (int t = 0; t < 3; t++) {
        void *sd = storage(dout, 6, types[t]), *so = storage(o, 6, types[t]);
        float delta[3] = {-1, -1, -1};
        dcp_kernel_env_t env = {.head_dim = 3, .dtype = types[t]};
        env.bufs[DCP_BUF_DO] = sd;
        env.bufs[DCP_BUF_O] = so;
        env.bufs[DCP_BUF_DELTA] = delta;
        CU_ASSERT_EQUAL(dcp_cpu_bwd_delta(&env, 2), DCP_OK);
        CU_ASSERT_EQUAL(delta[0], 7.0f);
        CU_ASSERT_EQUAL(delta[1], 0.5f);
        CU_ASSERT_EQUAL(delta[2], -1.0f); /* past the rows: untouched */
        CU_ASSERT_EQUAL(dcp_cpu_bwd_delta(&env, 0), DCP_OK);
        env.bufs[DCP_BUF_O] = NULL;
        CU_ASSERT_EQUAL(dcp_cpu_bwd_delta(&env, 2), DCP_ERR_INVALID_ARG);
        free(sd), free(so);
    }
}

static void test_accumulate_by_hand(void)
{
    float src[4 * 6], dst[3 * 5], part[8];
    for (int i = 0; i < 24; i++) src[i] = (float)i;
    for (int i = 0; i < 15; i++) dst[i] = 100.0f;
    for (int i = 0; i < 8; i++) part[i] = 0.25f * (float)i;
    dcp_kernel_env_t env = {.dtype = DCP_DTYPE_BF16}; /* fp32 buffers whatever the plan's type */
    env.bufs[DCP_BUF_PART] = src;
    env.bufs[DCP_BUF_ACC_DK] = dst;
    env.bufs[DCP_BUF_RSTAT] = part;
    /* rows 1..3 of src from column 2, three elements, into dst rows 0..2 from column 1; then
     * two elements of RSTAT into dst row 2, columns 3 and 4 */
    const dcp_copy_item_t items[2] = {{{6 + 2, 6, DCP_BUF_PART}, {1, 5, DCP_BUF_ACC_DK}, 3, 3},
                                      {{4, 2, DCP_BUF_RSTAT}, {13, 5, DCP_BUF_ACC_DK}, 1, 2}};
    CU_ASSERT_EQUAL(dcp_cpu_accumulate(&env, items, 2), DCP_OK);
    for (int r = 0; r < 3; r++)
        for (int x = 0; x < 5; x++) {
            float want = 100.0f;
            if (x >= 1 && x < 4) want += (float)((r + 1) * 6 + 2 + x - 1);
            if (r == 2 && x >= 3) want += 0.25f * (float)(4 + x - 3);
            CU_ASSERT_EQUAL(dst[r * 5 + x], want);
        }
    CU_ASSERT_EQUAL(dcp_cpu_accumulate(&env, items, 0), DCP_OK);
}

/* Consecutive items with the same destination rows are one sum: dst += (s1 + s2 + s3), the
 * sources added first, in item order. 1e8 + 3 rounds back to 1e8 in fp32 (the spacing there is
 * 8), so adding the three one at a time would leave 1e8; their sum 9 lands on 1e8 + 8. A next
 * item with other rows is a sum of its own. */
static void test_accumulate_sums_a_run(void)
{
    float src[4] = {3.0f, 3.0f, 3.0f, 5.0f}, dst[2] = {1e8f, 1e8f};
    dcp_kernel_env_t env = {.dtype = DCP_DTYPE_BF16};
    env.bufs[DCP_BUF_PART] = src;
    env.bufs[DCP_BUF_ACC_DQ] = dst;
    const dcp_copy_item_t items[4] = {{{0, 1, DCP_BUF_PART}, {0, 1, DCP_BUF_ACC_DQ}, 1, 1},
                                      {{1, 1, DCP_BUF_PART}, {0, 1, DCP_BUF_ACC_DQ}, 1, 1},
                                      {{2, 1, DCP_BUF_PART}, {0, 1, DCP_BUF_ACC_DQ}, 1, 1},
                                      {{3, 1, DCP_BUF_PART}, {1, 1, DCP_BUF_ACC_DQ}, 1, 1}};
    CU_ASSERT(dcp_copy_same_dst(&items[0], &items[2]));
    CU_ASSERT(!dcp_copy_same_dst(&items[2], &items[3]));
    CU_ASSERT_EQUAL(dcp_cpu_accumulate(&env, items, 4), DCP_OK);
    CU_ASSERT_EQUAL(dst[0], 100000008.0f);
    CU_ASSERT_EQUAL(dst[1], 1e8f + 8.0f); /* 1e8 + 5 rounds up on its own */
    dst[0] = 1e8f;
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(dcp_cpu_accumulate(&env, &items[i], 1), DCP_OK);
    CU_ASSERT_EQUAL(dst[0], 1e8f); /* three sums of one source each */
}

/* The gradient rule: three times the plain error plus one rounding step of the type. */
static void test_grad_rule(void)
{
    CU_ASSERT(dcpt_lowp_grad_rule_holds(DCP_DTYPE_BF16, 0.015, 0.005, 0.0));
    CU_ASSERT(!dcpt_lowp_grad_rule_holds(DCP_DTYPE_BF16, 0.016, 0.005, 0.0));
    CU_ASSERT(dcpt_lowp_grad_rule_holds(DCP_DTYPE_BF16, 0.0185, 0.005, 1.0));
    CU_ASSERT(!dcpt_lowp_grad_rule_holds(DCP_DTYPE_FP16, 0.0185, 0.005, 1.0));
    CU_ASSERT(!dcpt_lowp_grad_rule_holds(DCP_DTYPE_BF16, NAN, 0.005, 1.0));
}

int dcp_suite_backward(void)
{
    static const dcp_test_t tests[] = {
        {"reference_matches_finite_differences", test_reference_matches_finite_differences},
        {"every_mask_fp32", test_every_mask_fp32},
        {"every_mask_bf16", test_every_mask_bf16},
        {"gqa_head_groups_fp16", test_gqa_head_groups_fp16},
        {"fully_masked_rows", test_fully_masked_rows},
        {"nan_in_dout_propagates", test_nan_in_dout_propagates},
        {"nonfinite_inputs_propagate", test_nonfinite_inputs_propagate},
        {"adds_into_destinations", test_adds_into_destinations},
        {"rejects_bad_arguments", test_rejects_bad_arguments},
        {"bwd_delta_by_hand", test_bwd_delta_by_hand},
        {"accumulate_by_hand", test_accumulate_by_hand},
        {"accumulate_sums_a_run", test_accumulate_sums_a_run},
        {"grad_rule", test_grad_rule},
        {NULL, NULL},
    };
    return dcp_add_suite("backward", tests);
}
