/* NaN and Inf inputs end to end (dcp.h, dcp_tensors_t): a planned batch on in-process ranks
 * (dcp_forward_inproc, dcp_backward_inproc) with one non-finite element in Q, K or V. The
 * query rows that read it get O = NaN and LSE = NaN, whichever rank computed, merged or
 * published them; dQ of those rows and dK, dV of the keys they see become NaN; everything
 * else is bit-identical to the clean run. */
#include "include/dcp.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HQ = 4, HKV = 2, D = 8, NSEQ = 2, RANKS = 4, L0 = 150, L1 = 90 };
static const int32_t lens[NSEQ] = {L0, L1};

/* The whole batch in THD layout (sequences concatenated) and its outputs. */
typedef struct {
    int64_t tokens;
    float *q, *k, *v, *g; /* inputs and dO */
    float *o, *lse;       /* forward outputs */
    float *dq, *dk, *dv;  /* gradients */
} batch_t;

static void batch_init(batch_t *b, uint64_t seed)
{
    b->tokens = lens[0] + lens[1];
    const int64_t nq = b->tokens * HQ * D, nkv = b->tokens * HKV * D;
    float **all[9] = {&b->q, &b->k, &b->v, &b->g, &b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    const int64_t n[9] = {nq, nkv, nkv, nq, nq, b->tokens * HQ, nq, nkv, nkv};
    dcpt_rng_t rng = {seed};
    for (int j = 0; j < 9; j++) {
        *all[j] = calloc((size_t)n[j], sizeof(float));
        for (int64_t i = 0; j < 4 && i < n[j]; i++) (*all[j])[i] = (float)dcpt_rng_normal(&rng);
    }
}

static void batch_free(batch_t *b)
{
    free(b->q), free(b->k), free(b->v), free(b->g), free(b->o), free(b->lse);
    free(b->dq), free(b->dk), free(b->dv);
}

/* Rank-local copies of the batch in the plan's layout: scatter, run both passes, gather. */
static void run_plan(const dcp_plan_t *p, batch_t *b)
{
    const int64_t width[9] = {HQ * D, HKV * D, HKV * D, HQ * D, HQ * D,
                              HQ,     HQ * D,  HKV * D, HKV * D};
    float **glob[9] = {&b->q, &b->k, &b->v, &b->g, &b->o, &b->lse, &b->dq, &b->dk, &b->dv};
    float *mem[RANKS][9];
    dcp_tensors_t fwd[RANKS];
    dcp_grad_tensors_t bwd[RANKS];
    dcp_token_span_t spans[RANKS][64];
    int32_t nspans[RANKS];
    for (int32_t r = 0; r < RANKS; r++) {
        int64_t n;
        CU_ASSERT_EQUAL_FATAL(dcp_plan_local_layout(p, r, spans[r], 64, &nspans[r], &n), DCP_OK);
        for (int j = 0; j < 9; j++) mem[r][j] = calloc((size_t)(n + 1) * width[j], sizeof(float));
        int64_t row = 0;
        for (int32_t s = 0; s < nspans[r]; s++) {
            const dcp_token_span_t *sp = &spans[r][s];
            const int64_t at = (sp->seq ? lens[0] : 0) + sp->start;
            for (int j = 0; j < 4; j++)
                memcpy(mem[r][j] + row * width[j], *glob[j] + at * width[j],
                       (size_t)sp->len * width[j] * sizeof(float));
            row += sp->len;
        }
        fwd[r] = (dcp_tensors_t){mem[r][0], mem[r][1], mem[r][2], mem[r][4], mem[r][5], 0.0f};
        bwd[r] = (dcp_grad_tensors_t){fwd[r], mem[r][3], mem[r][6], mem[r][7], mem[r][8]};
    }
    CU_ASSERT_EQUAL(dcp_forward_inproc(p, fwd, 30.0, NULL), DCP_OK);
    CU_ASSERT_EQUAL(dcp_backward_inproc(p, bwd, 30.0, NULL), DCP_OK);
    for (int32_t r = 0; r < RANKS; r++) {
        int64_t row = 0;
        for (int32_t s = 0; s < nspans[r]; s++) {
            const dcp_token_span_t *sp = &spans[r][s];
            const int64_t at = (sp->seq ? lens[0] : 0) + sp->start;
            for (int j = 4; j < 9; j++)
                memcpy(*glob[j] + at * width[j], mem[r][j] + row * width[j],
                       (size_t)sp->len * width[j] * sizeof(float));
            row += sp->len;
        }
        for (int j = 0; j < 9; j++) free(mem[r][j]);
    }
}

/* Query i of sequence s may attend key t. */
static int attends(const dcp_mask_t *m, int32_t s, int32_t i, int32_t t)
{
    int32_t rg[4];
    CU_ASSERT_EQUAL(dcp_mask_allowed(&m[s], lens[s], i, rg), DCP_OK);
    return (t >= rg[0] && t < rg[1]) || (t >= rg[2] && t < rg[3]);
}

/* Values of row `r` (width w) that are wrong: all NaN if poisoned, else equal to clean. */
static int row_wrong(const float *got, const float *clean, int64_t r, int64_t w, int poisoned)
{
    int wrong = 0;
    for (int64_t x = r * w; x < (r + 1) * w; x++)
        wrong += poisoned ? !isnan(got[x]) : memcmp(&got[x], &clean[x], sizeof(float)) != 0;
    return wrong;
}

/* One non-finite value at token t0 of sequence 0, head hx of `input` (0 Q, 1 K, 2 V). */
static int check_case(const dcp_plan_t *p, const dcp_mask_t *m, const batch_t *clean, int input,
                      float value, int32_t t0, int32_t hx)
{
    batch_t b;
    batch_init(&b, 5);
    float *x = input == 0 ? b.q : input == 1 ? b.k : b.v;
    x[((int64_t)t0 * (input == 0 ? HQ : HKV) + hx) * D + 3] = value;
    run_plan(p, &b);
    int wrong = 0;
    int seen[L0][HKV]; /* keys of sequence 0 a poisoned row attends */
    memset(seen, 0, sizeof seen);
    for (int32_t s = 0; s < NSEQ; s++)
        for (int32_t i = 0; i < lens[s]; i++)
            for (int32_t h = 0; h < HQ; h++) {
                const int64_t r = ((s ? lens[0] : 0) + (int64_t)i) * HQ + h;
                int pz = 0;
                if (s == 0)
                    pz = input == 0 ? i == t0 && h == hx
                                    : h / (HQ / HKV) == hx && attends(m, 0, i, t0);
                wrong +=
                    row_wrong(b.o, clean->o, r, D, pz) + row_wrong(b.lse, clean->lse, r, 1, pz);
                wrong += row_wrong(b.dq, clean->dq, r, D, pz);
                for (int32_t t = 0; pz && t < lens[0]; t++)
                    seen[t][h / (HQ / HKV)] |= attends(m, 0, i, t);
            }
    for (int64_t t = 0; t < b.tokens; t++)
        for (int32_t h = 0; h < HKV; h++) {
            const int pz = t < lens[0] && seen[t][h];
            const int64_t r = t * HKV + h;
            wrong += row_wrong(b.dk, clean->dk, r, D, pz) + row_wrong(b.dv, clean->dv, r, D, pz);
        }
    batch_free(&b);
    return wrong;
}

/* Every input, NaN and +Inf, causal and window masks, two strategies (one keeps blocks at
 * their query's rank, one moves computation and merges partials). */
static void test_nonfinite_end_to_end(void)
{
    const dcp_strategy_t strategies[2] = {DCP_STRATEGY_ZIGZAG, DCP_STRATEGY_METIS};
    const dcp_mask_t masks[2][NSEQ] = {
        {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_CAUSAL}},
        {{.kind = DCP_MASK_LAMBDA, .sink = 4, .window = 40}, {.kind = DCP_MASK_FULL}}};
    const float values[2] = {NAN, INFINITY};
    for (int mi = 0; mi < 2; mi++)
        for (int si = 0; si < 2; si++) {
            dcp_plan_options_t o;
            dcp_plan_options_default(&o);
            o.strategy = strategies[si];
            o.block_size = 32;
            o.divisions = 2;
            const dcp_attn_shape_t shape = {HQ, HKV, D, DCP_DTYPE_FP32, 0.0f};
            dcp_plan_t *p = t_plan_shape(lens, NSEQ, masks[mi], "2x2", &shape, &o);
            batch_t clean;
            batch_init(&clean, 5);
            run_plan(p, &clean);
            for (int input = 0; input < 3; input++)
                for (int vi = 0; vi < 2; vi++) {
                    const int wrong =
                        check_case(p, masks[mi], &clean, input, values[vi], 70, input == 0 ? 2 : 1);
                    CU_ASSERT_EQUAL(wrong, 0);
                    if (wrong)
                        fprintf(stderr, "end to end: %g in %c, mask set %d, %s: %d wrong\n",
                                values[vi], "QKV"[input], mi, dcp_strategy_name(strategies[si]),
                                wrong);
                }
            batch_free(&clean);
            dcp_plan_destroy(p);
        }
}

int dcp_suite_nonfinite(void)
{
    static const dcp_test_t tests[] = {
        {"end_to_end", test_nonfinite_end_to_end},
        {NULL, NULL},
    };
    return dcp_add_suite("nonfinite", tests);
}
