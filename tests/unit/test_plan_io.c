/* The plan format: round trip, corrupted bytes of every kind rejected, hostile counts
 * refused without allocating what they claim, and one byte string per plan. */
#include "include/base/error.h"
#include "partition/plan/cost.h"
#include "partition/plan/plan.h"
#include "partition/plan/wire.h"
#include "partition/program/slots.h"
#include "tests/fuzz/plan_input.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

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
        {.kind = DCP_MASK_CUSTOM, .ranges = ranges, .num_rows = 37},
        {.kind = DCP_MASK_SHARED_QUESTION, .question_frac = 0.2, .answers = 3}};
    const dcp_batch_t batch = {.num_seqs = 4, .lengths = len, .masks = m};
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
    dcpt_rng_t rng = {41};
    for (int rep = 0; rep < 400; rep++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        const int flips = rep < 300 ? 1 : (int)dcpt_rng_range(&rng, 2, 16);
        for (int f = 0; f < flips; f++) {
            const size_t at = (size_t)dcpt_rng_range(&rng, 0, (int64_t)n - 1);
            c[at] ^= (uint8_t)(1u << dcpt_rng_range(&rng, 0, 7));
        }
        if (memcmp(c, b, n) != 0) expect_corrupt(c, n);
        free(c);
    }
    free(b);
    dcp_plan_destroy(p);
}

static void test_resealed_garbage_rejected(void)
{
    dcp_plan_t *p = sample_plan();
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    dcpt_rng_t rng = {42};
    int accepted = 0;
    for (int rep = 0; rep < 3000; rep++) {
        uint8_t *c = malloc(n);
        memcpy(c, b, n);
        const size_t at = 32 + (size_t)dcpt_rng_range(&rng, 0, (int64_t)n - 33);
        c[at] = (uint8_t)dcpt_rng_next(&rng);
        dcpt_plan_reseal(c, n);
        dcp_plan_t *q = NULL;
        const dcp_status_t st = dcp_plan_deserialize(c, n, &q);
        CU_ASSERT(st == DCP_OK || st == DCP_ERR_PLAN_CORRUPT);
        if (st == DCP_OK) {
            /* a change the validator accepts must still be a consistent plan, and one that
             * runs to an end (any status) without touching memory it does not own */
            CU_ASSERT_EQUAL(dcp_plan_check_inputs(q), DCP_OK);
            CU_ASSERT_EQUAL(dcp_plan_check_programs(q), DCP_OK);
            if (accepted++ < 40) CU_ASSERT_PTR_NULL(dcpt_plan_run_anyway(q));
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
    /* versions 4 and 5 had no softcap or value head dim: refused as an older format, before
     * their META section could be read as another shape */
    for (uint8_t v = 4; v <= 5; v++) {
        b[8] = v;
        CU_ASSERT_EQUAL(dcp_plan_deserialize(b, n, &q), DCP_ERR_PLAN_CORRUPT);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), v == 4 ? "version 4" : "version 5"));
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "older"));
        CU_ASSERT_PTR_NULL(q);
    }
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

/* The backward's sums (ring: each rank's KV block goes round, so its dK + dV come back from
 * every other rank): in each REDUCE the items of one destination are consecutive, one sum
 * (descr.h), which the cost model prices as every source read once and the destination read
 * and written once; a plan whose sums of one destination are split apart is corrupt. */
static void test_backward_sums_one_per_destination(void)
{
    const int32_t len[1] = {512};
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    dcp_plan_t *p = t_plan(len, 1, &causal, "1x4", DCP_STRATEGY_RING, 64, 3, 1);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_check_programs(p), DCP_OK);
    int64_t longest = 0, split = -1;
    for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, 0);
         i < dcp_plan_prog_end(p, DCP_PASS_BWD, p->num_ranks - 1); i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op != DCP_OP_REDUCE) continue;
        double want = 0;
        for (int64_t k = in->first, run = 0; k < in->first + in->count; k++) {
            const dcp_copy_item_t *c = &p->copies[k];
            const int next = k > in->first && dcp_copy_same_dst(c - 1, c);
            run = next ? run + 1 : 1;
            if (run > longest) longest = run;
            if (run >= 2 && k + 1 < in->first + in->count && !dcp_copy_same_dst(c, c + 1) &&
                split < 0)
                split = k; /* the last source of a sum, another sum after it */
            want += (next ? 1.0 : 3.0) * 4.0 * c->rows * c->row_elems;
            for (int64_t j = in->first; j < k - run + 1; j++) /* no earlier sum has its rows */
                CU_ASSERT(!dcp_copy_same_dst(&p->copies[j], c));
        }
        CU_ASSERT_DOUBLE_EQUAL(dcp_cost_memory_bytes(p, in), want, 0.5);
    }
    CU_ASSERT(longest >= 3); /* partials from three ranks, summed at once */
    CU_ASSERT_FATAL(split >= 0);
    /* that last source swapped with the next sum's first: its sum is split in two */
    const dcp_copy_item_t keep = p->copies[split];
    p->copies[split] = p->copies[split + 1];
    p->copies[split + 1] = keep;
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "share a destination"));
    p->copies[split + 1] = p->copies[split];
    p->copies[split] = keep;
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_OK);
    dcp_plan_destroy(p);
}

/* Tiles of one backward launch that add into the same dK rows (several query blocks against
 * one KV block) share the dV rows too, which the deterministic kernels' per-destination sums
 * rely on (dcp_tile_same_grads); a tile that shares only its dK rows is corrupt. */
static void test_backward_tiles_share_whole_destinations(void)
{
    const int32_t len[1] = {512};
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    dcp_plan_t *p = t_plan(len, 1, &causal, "1x2", DCP_STRATEGY_LPT, 64, 1, 1);
    CU_ASSERT_EQUAL_FATAL(dcp_plan_check_programs(p), DCP_OK);
    int64_t a = -1, b = -1, other = -1;
    for (int64_t i = dcp_plan_prog_begin(p, DCP_PASS_BWD, 0);
         i < dcp_plan_prog_end(p, DCP_PASS_BWD, 0) && a < 0; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        if (in->op != DCP_OP_ATTN) continue;
        const dcp_tile_group_t *g0 = &p->groups[in->first], *g1 = g0 + in->count - 1;
        for (int64_t x = g0->first_tile; x < g1->first_tile + g1->num_tiles && a < 0; x++)
            for (int64_t y = x + 1; y < g1->first_tile + g1->num_tiles; y++) {
                if (dcp_tile_same_grads(&p->tiles[x], &p->tiles[y]) && a < 0) a = x, b = y;
                if (p->tiles[x].dv.off != p->tiles[y].dv.off &&
                    p->tiles[x].dv.buf == p->tiles[y].dv.buf)
                    other = y;
            }
    }
    CU_ASSERT_FATAL(a >= 0 && other >= 0 && p->tiles[other].dv.off != p->tiles[b].dv.off);
    CU_ASSERT(p->tiles[a].dk.stride == p->tiles[b].dk.stride);
    const dcp_view_t dv = p->tiles[b].dv;
    p->tiles[b].dv = p->tiles[other].dv; /* the same dK rows, another block's dV rows */
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "gradient destination"));
    p->tiles[b].dv = dv;
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

/* ---- hostile bytes: bounded memory, canonical form ---------------------------------------- */

#define XFERS_AT 148 /* i32 transfer count: header 32, META tag, 29 fields before it */

static void put_i32(uint8_t *b, size_t at, int32_t v)
{
    for (int i = 0; i < 4; i++) b[at + (size_t)i] = (uint8_t)((uint32_t)v >> (8 * i));
}

static int32_t get_i32(const uint8_t *b, size_t at)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b[at + (size_t)i] << (8 * i);
    return (int32_t)v;
}

/* Peak resident memory of this process so far, in MB. */
static double peak_mb(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss / 1024.0;
}

/* A small plan (about 2 KB) claiming 2^31 - 1, 2^27 and 2^25 transfers, resealed: refused at
 * once, before anything proportional to the claim is allocated (it used to cost 40 bytes a
 * transfer, 5 GB and 27 s at 2^27). */
static void test_huge_transfer_count_refused(void)
{
    const int32_t len[1] = {256};
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    dcp_plan_t *p = t_plan(len, 1, &causal, "1x2", DCP_STRATEGY_ZIGZAG, 64, 1, 1);
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    CU_ASSERT(n < 8192);
    CU_ASSERT_EQUAL_FATAL(get_i32(b, XFERS_AT), p->num_xfers);
    const int32_t claims[3] = {INT32_MAX, 1 << 27, 1 << 25};
    const double before = peak_mb();
    for (int i = 0; i < 3; i++) {
        put_i32(b, XFERS_AT, claims[i]);
        dcpt_plan_reseal(b, n);
        dcp_plan_t *q = NULL;
        CU_ASSERT_EQUAL(dcp_plan_deserialize(b, n, &q), DCP_ERR_PLAN_CORRUPT);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "transfers"));
        CU_ASSERT_PTR_NULL(q);
    }
    CU_ASSERT(peak_mb() - before < 16.0); /* refused before the pairing table exists */
    free(b);
    dcp_plan_destroy(p);
}

/* A plan whose work buffers would pass 2^36 bytes on a rank, or whose buffers are larger than
 * its programs address, is refused; so is one with more than 2^26 ranks x phases. */
static void test_work_buffers_bounded(void)
{
    dcp_plan_t *p = sample_plan();
    int64_t *e = &p->buf_elems[DCP_BUF_PART]; /* rank 0's partials */
    const int64_t keep = *e;
    *e = (int64_t)1 << 35; /* fp32: 2^37 bytes */
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "work buffers"));
    *e = keep + 4 * DCP_SLOT_ALIGN;
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    *e = keep;
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_OK);
    const int32_t phases = p->num_phases;
    p->num_phases = 1 << 25; /* x 4 ranks */
    CU_ASSERT_EQUAL(dcp_plan_check_inputs(p), DCP_ERR_PLAN_CORRUPT);
    p->num_phases = phases;
    CU_ASSERT_EQUAL(dcp_plan_check_inputs(p), DCP_OK);
    dcp_plan_destroy(p);
}

/* The offset of sequence s's record in the SEQS section (44 bytes each, after the custom
 * ranges and the sequence count). */
static size_t seq_record(const uint8_t *b, size_t n, const dcp_plan_t *p, int32_t s)
{
    size_t at = 32;
    while (at + 4 <= n && !(get_i32(b, at) == 0x4154454e)) at++; /* "NETA": SEC_SEQS */
    CU_ASSERT_FATAL(at + 4 <= n);
    return at + 4 + 8 + 4 * (size_t)p->custom_ints + 8 + 44 * (size_t)s;
}

/* One plan, one byte string: a field its mask kind does not read, a range offset of a mask
 * without ranges, custom ranges out of sequence order, -0.0, an unused item and a full tile
 * not marked full are all refused; a plan made from masks with junk in unused fields
 * serializes to the same bytes as one made from clean masks. */
static void test_plan_bytes_canonical(void)
{
    dcp_plan_t *p = sample_plan(); /* sequences: lambda, causal, custom, shared-question */
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    uint8_t *c = malloc(n);
    struct {
        int32_t seq, field; /* i32 field of the record: 0 len, 1 kind, 2 window, 3 sink, 4 block */
        int32_t value;
    } edits[] = {{1, 2, 7}, {0, 4, 3}, {3, 3, 1}, {2, 2, 5}};
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        memcpy(c, b, n);
        put_i32(c, seq_record(c, n, p, edits[i].seq) + 4 * (size_t)edits[i].field, edits[i].value);
        dcpt_plan_reseal(c, n);
        expect_corrupt(c, n);
    }
    /* offsets: causal's must be -1, custom's must be where its ranges start (0) */
    memcpy(c, b, n);
    put_i32(c, seq_record(c, n, p, 1) + 36, 0);
    put_i32(c, seq_record(c, n, p, 1) + 40, 0);
    dcpt_plan_reseal(c, n);
    expect_corrupt(c, n);
    memcpy(c, b, n);
    put_i32(c, seq_record(c, n, p, 2) + 36, 4);
    dcpt_plan_reseal(c, n);
    expect_corrupt(c, n);
    free(c);
    free(b);
    /* the same plan with junk in the fields the masks do not read */
    const int32_t len[2] = {120, 70};
    const dcp_mask_t clean[2] = {{.kind = DCP_MASK_CAUSAL},
                                 {.kind = DCP_MASK_WINDOW, .window = 20}};
    const dcp_mask_t junk[2] = {{.kind = DCP_MASK_CAUSAL, .window = 9, .question_frac = -0.0},
                                {.kind = DCP_MASK_WINDOW, .window = 20, .sink = 4, .answers = 2}};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = 32;
    o.eps_intra = -0.0;
    dcp_plan_t *a = t_plan_opts(len, 2, clean, "2x2", &o),
               *j = t_plan_opts(len, 2, junk, "2x2", &o);
    size_t na, nj;
    uint8_t *ba = bytes_of(a, &na), *bj = bytes_of(j, &nj);
    CU_ASSERT(na == nj && memcmp(ba, bj, na) == 0);
    dcp_plan_t *q = NULL;
    CU_ASSERT_EQUAL(dcp_plan_deserialize(bj, nj, &q), DCP_OK);
    dcp_plan_destroy(q);
    free(ba), free(bj);
    dcp_plan_destroy(a), dcp_plan_destroy(j);
    /* items: one not named by any instruction, a full tile not marked full */
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_OK);
    p->num_comm++; /* a stray comm op past the last launch's */
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    p->num_comm--;
    int64_t full = -1;
    for (int64_t t = 0; t < p->num_tiles && full < 0; t++)
        if (p->tiles[t].full) full = t;
    CU_ASSERT_FATAL(full >= 0);
    p->tiles[full].full = 0;
    CU_ASSERT_EQUAL(dcp_plan_check_programs(p), DCP_ERR_PLAN_CORRUPT);
    p->tiles[full].full = 1;
    dcp_plan_destroy(p);
}

/* Every accepted single-byte change of a resealed 2 KB-scale plan stays within a few MB:
 * what loading hostile bytes can cost is bounded by their size. */
static void test_resealed_garbage_memory_bounded(void)
{
    const int32_t len[2] = {200, 57};
    const dcp_mask_t m[2] = {{.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_FULL}};
    dcp_plan_t *p = t_plan(len, 2, m, "1x2", DCP_STRATEGY_LPT, 64, 2, 1);
    size_t n;
    uint8_t *b = bytes_of(p, &n);
    dcpt_rng_t rng = {43};
    const double before = peak_mb();
    uint8_t *c = malloc(n);
    for (int rep = 0; rep < 4000; rep++) {
        memcpy(c, b, n);
        for (int k = 0; k < 4; k++) { /* a whole field: 4 bytes of a random value */
            const size_t at = 32 + (size_t)dcpt_rng_range(&rng, 0, (int64_t)n - 33);
            c[at] = (uint8_t)dcpt_rng_next(&rng);
        }
        dcpt_plan_reseal(c, n);
        dcp_plan_t *q = NULL;
        if (dcp_plan_deserialize(c, n, &q) == DCP_OK) dcp_plan_destroy(q);
    }
#if !defined(__SANITIZE_ADDRESS__)
    /* (under ASan freed memory sits in its quarantine, so RSS measures that, not dcp) */
    CU_ASSERT(peak_mb() - before < 16.0);
#else
    (void)before;
#endif
    free(c);
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
        {"backward_sums_one_per_destination", test_backward_sums_one_per_destination},
        {"backward_tiles_share_whole_destinations", test_backward_tiles_share_whole_destinations},
        {"huge_transfer_count_refused", test_huge_transfer_count_refused},
        {"work_buffers_bounded", test_work_buffers_bounded},
        {"plan_bytes_canonical", test_plan_bytes_canonical},
        {"resealed_garbage_memory_bounded", test_resealed_garbage_memory_bounded},
        {NULL, NULL},
    };
    return dcp_add_suite("plan_io", tests);
}
