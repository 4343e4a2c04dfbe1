/* The plan format: round trip, and corrupted bytes of every kind rejected. */
#include "partition/plan.h"
#include "partition/wire.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

static uint8_t *bytes_of(const dcp_plan_t *p, size_t *n)
{
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, NULL, 0, n), DCP_OK);
    uint8_t *b = malloc(*n);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_serialize(p, b, *n, n), DCP_OK);
    return b;
}

static dcp_plan_t *sample_plan(void)
{
    const int32_t len[4] = {200, 1, 37, 90};
    int32_t *ranges = malloc(4 * 37 * sizeof *ranges);
    for (int i = 0; i < 37; i++) {
        ranges[4 * i] = 0, ranges[4 * i + 1] = i / 2 + 1, ranges[4 * i + 2] = i,
                   ranges[4 * i + 3] = i + 1;
    }
    const dcp_mask_t m[4] = {
        {.kind = DCP_MASK_LAMBDA, .sink = 4, .window = 30},
        {.kind = DCP_MASK_CAUSAL},
        {.kind = DCP_MASK_CUSTOM, .ranges = ranges},
        {.kind = DCP_MASK_SHARED_QUESTION, .question_frac = 0.2, .answers = 3}};
    const dcp_batch_t batch = {4, len, m};
    const dcp_attn_shape_t shape = {4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 16;
    o.head_blocks = 2;
    o.divisions = 3;
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x2", &c), DCP_OK);
    dcp_plan_t *p = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_create(&batch, &shape, &o, c, &p), DCP_OK);
    dcp_cluster_destroy(c);
    free(ranges); /* the plan keeps its own copy */
    return p;
}

static void test_round_trip(void)
{
    dcp_plan_t *p = sample_plan();
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    dcp_plan_t *q = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_plan_deserialize(b, n, &q), DCP_OK);
    size_t n2;
    uint8_t *b2 = bytes_of(q, &n2);
    CU_ASSERT_EQUAL(n, n2);
    CU_ASSERT_EQUAL(memcmp(b, b2, n), 0);
    dcp_plan_stats_t s1, s2;
    dcp_plan_get_stats(p, &s1);
    dcp_plan_get_stats(q, &s2);
    CU_ASSERT_EQUAL(s1.comm_bytes, s2.comm_bytes);
    CU_ASSERT_EQUAL(s1.total_flops, s2.total_flops);
    CU_ASSERT_EQUAL(s1.num_comp_blocks, s2.num_comp_blocks);
    CU_ASSERT_EQUAL(s1.max_buffer_bytes, s2.max_buffer_bytes);
    CU_ASSERT_DOUBLE_EQUAL(s1.compute_imbalance, s2.compute_imbalance, 0);
    CU_ASSERT(s1.plan_ms > 0);
    CU_ASSERT_EQUAL(s2.plan_ms, 0); /* not part of the bytes: plans are byte-identical */
    CU_ASSERT_EQUAL(p->fingerprint, q->fingerprint);
    for (int32_t r = 0; r < 4; r++) {
        dcp_token_span_t a[64], bsp[64];
        int32_t na, nb;
        int64_t ta, tb;
        CU_ASSERT_EQUAL(dcp_plan_local_layout(p, r, a, 64, &na, &ta), DCP_OK);
        CU_ASSERT_EQUAL(dcp_plan_local_layout(q, r, bsp, 64, &nb, &tb), DCP_OK);
        CU_ASSERT(na == nb && ta == tb && !memcmp(a, bsp, (size_t)na * sizeof *a));
    }
    free(b);
    free(b2);
    dcp_plan_destroy(p);
    dcp_plan_destroy(q);
}

static void expect_corrupt(const uint8_t *b, size_t n)
{
    dcp_plan_t *q = (dcp_plan_t *)&q; /* sentinel */
    CU_ASSERT_EQUAL(dcp_plan_deserialize(b, n, &q), DCP_ERR_PLAN_CORRUPT);
    CU_ASSERT_PTR_EQUAL(q, (dcp_plan_t *)&q);
}

static void test_truncations_rejected(void)
{
    dcp_plan_t *p = sample_plan();
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    for (size_t cut = 0; cut < n; cut += 1 + cut / 7) expect_corrupt(b, cut);
    expect_corrupt(b, n - 1);
    uint8_t *longer = malloc(n + 8);
    memcpy(longer, b, n);
    memset(longer + n, 0, 8);
    expect_corrupt(longer, n + 8);
    free(longer);
    free(b);
    dcp_plan_destroy(p);
}

static void test_bit_flips_rejected(void)
{
    dcp_plan_t *p = sample_plan();
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    dcp_rng_t rng = {41};
    for (int rep = 0; rep < 400; rep++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        const int flips = rep < 300 ? 1 : (int)dcp_rng_range(&rng, 2, 16);
        for (int f = 0; f < flips; f++) {
            const size_t at = (size_t)dcp_rng_range(&rng, 0, (int64_t)n - 1);
            c[at] ^= (uint8_t)(1u << dcp_rng_range(&rng, 0, 7));
        }
        if (memcmp(c, b, n) != 0) expect_corrupt(c, n);
        free(c);
    }
    free(b);
    dcp_plan_destroy(p);
}

/* Bytes with a valid checksum but inconsistent content: the validator must catch them. */
static void reseal(uint8_t *b, size_t n)
{
    const uint32_t crc = dcp_crc32c(b + 32, n - 32);
    for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(crc >> (8 * i));
}

/* Runs both passes of an accepted plan on tensors of exactly the sizes it asks for. */
static void run_anyway(const dcp_plan_t *q)
{
    dcp_grad_tensors_t io[4];
    float *mem[4][9];
    const int64_t hq = q->shape.num_heads, hkv = q->shape.num_kv_heads, d = q->shape.head_dim;
    for (int32_t r = 0; r < q->num_ranks && r < 4; r++) {
        const int64_t t = q->rank_tokens[r] + 1;
        const int64_t w[9] = {hq * d, hkv * d, hkv * d, hq * d, hq,
                              hq * d, hq * d,  hkv * d, hkv * d};
        for (int j = 0; j < 9; j++) mem[r][j] = calloc((size_t)(t * w[j]), sizeof(float));
        io[r] = (dcp_grad_tensors_t){{mem[r][0], mem[r][1], mem[r][2], mem[r][3], mem[r][4]},
                                     mem[r][5],
                                     mem[r][6],
                                     mem[r][7],
                                     mem[r][8]};
    }
    dcp_tensors_t fwd[4];
    for (int32_t r = 0; r < q->num_ranks && r < 4; r++) fwd[r] = io[r].fwd;
    for (int pass = 0; pass < 2 && q->num_ranks <= 4; pass++) {
        const dcp_status_t st = pass == 0 ? dcp_forward_inproc(q, fwd, 5.0, NULL)
                                          : dcp_backward_inproc(q, io, 5.0, NULL);
        CU_ASSERT(st == DCP_OK || st == DCP_ERR_UNSUPPORTED || st == DCP_ERR_INVALID_ARG);
        if (!(st == DCP_OK || st == DCP_ERR_UNSUPPORTED || st == DCP_ERR_INVALID_ARG))
            fprintf(stderr, "altered plan ran to %s: %s\n", dcp_status_string(st),
                    dcp_last_error());
    }
    for (int32_t r = 0; r < q->num_ranks && r < 4; r++)
        for (int j = 0; j < 9; j++) free(mem[r][j]);
}

static void test_resealed_garbage_rejected(void)
{
    dcp_plan_t *p = sample_plan();
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    dcp_rng_t rng = {42};
    int accepted = 0;
    for (int rep = 0; rep < 3000; rep++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        const size_t at = 32 + (size_t)dcp_rng_range(&rng, 0, (int64_t)n - 33);
        c[at] = (uint8_t)dcp_rng_next(&rng);
        reseal(c, n);
        dcp_plan_t *q = NULL;
        const dcp_status_t st = dcp_plan_deserialize(c, n, &q);
        CU_ASSERT(st == DCP_OK || st == DCP_ERR_PLAN_CORRUPT);
        if (st == DCP_OK) {
            /* a change the validator accepts must still be a consistent plan, and one that
             * runs to an end (any status) without touching memory it does not own */
            CU_ASSERT_EQUAL(dcp_plan_check_inputs(q), DCP_OK);
            CU_ASSERT_EQUAL(dcp_plan_check_programs(q), DCP_OK);
            if (accepted++ < 40) run_anyway(q);
            dcp_plan_destroy(q);
        }
        free(c);
    }
    /* most single-byte changes break some invariant; a few (a float bit, an unused
     * option value) may legitimately survive */
    CU_ASSERT(accepted < 3000 / 4);
    free(b);
    dcp_plan_destroy(p);
}

/* Plans of another format version are refused by name (version 1 had no backward). */
static void test_old_version_refused(void)
{
    dcp_plan_t *p = sample_plan();
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    b[8] = 1; /* u32 version, little-endian, after the 8-byte magic */
    b[9] = b[10] = b[11] = 0;
    dcp_plan_t *q = NULL;
    CU_ASSERT_EQUAL(dcp_plan_deserialize(b, n, &q), DCP_ERR_PLAN_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "version 1"));
    CU_ASSERT_PTR_NULL(q);
    free(b);
    dcp_plan_destroy(p);
}

/* A backward program that names a forward transfer (its own pass's ids are distinct) or a
 * buffer of the other pass is corrupt. */
static void test_backward_program_checked(void)
{
    dcp_plan_t *p = sample_plan();
    CU_ASSERT_EQUAL_FATAL(dcp_plan_check_programs(p), DCP_OK);
    int64_t op = -1, grp = -1;
    for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, 0);
         i < dcp_plan_prog_end(p, DCP_PASS_BWD, 0); i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op == DCP_OP_COMM_LAUNCH && op < 0) op = in->first;
        if (in->op == DCP_OP_ATTN && grp < 0) grp = in->first;
    }
    CU_ASSERT_FATAL(op >= 0 && grp >= 0);
    const int32_t id = p->comm[op].transfer;
    CU_ASSERT(id >= p->pass_xfer[DCP_PASS_BWD]);
    p->comm[op].transfer = 0; /* a forward transfer id */
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    p->comm[op].transfer = id;
    const dcp_view_t dq = p->groups[grp].dq;
    p->groups[grp].dq.buf = DCP_BUF_ACC_O; /* the forward's accumulator */
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    p->groups[grp].dq = dq;
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_OK);
    dcp_plan_destroy(p);
}

static void test_serialize_arguments(void)
{
    dcp_plan_t *p = sample_plan();
    size_t n = 0, got = 12345;
    CU_ASSERT_EQUAL(dcp_plan_serialize(p, NULL, 0, &n), DCP_OK);
    uint8_t *b = calloc(n, 1);
    CU_ASSERT_EQUAL(dcp_plan_serialize(p, b, n - 1, &got), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(got, 12345);
    for (size_t i = 0; i < n; i++) CU_ASSERT_EQUAL_FATAL(b[i], 0); /* nothing written */
    CU_ASSERT_EQUAL(dcp_plan_serialize(NULL, b, n, &got), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_plan_deserialize(NULL, 10, &p), DCP_ERR_INVALID_ARG);
    free(b);
    dcp_plan_destroy(p);
}

int dcp_suite_plan_io(void)
{
    static const dcp_test_t tests[] = {
        {"round_trip", test_round_trip},
        {"truncations_rejected", test_truncations_rejected},
        {"bit_flips_rejected", test_bit_flips_rejected},
        {"resealed_garbage_rejected", test_resealed_garbage_rejected},
        {"serialize_arguments", test_serialize_arguments},
        {"old_version_refused", test_old_version_refused},
        {"backward_program_checked", test_backward_program_checked},
        {NULL, NULL},
    };
    return dcp_add_suite("plan_io", tests);
}
