/* The promises of dcp_plan_deserialize() checked on one input, and the seed plans. */
#include "tests/fuzz/plan_input.h"

#include "include/base/error.h"
#include "partition/plan/plan.h"
#include "partition/plan/wire.h"

#include <stdlib.h>
#include <string.h>

const char *dcpt_plan_run_anyway(const dcp_plan_t *q)
{
    if (q->num_ranks > 4) return NULL;
    dcp_grad_tensors_t io[4];
    dcp_tensors_t fwd[4];
    float *mem[4][9] = {{0}};
    const int64_t hq = q->shape.num_heads, hkv = q->shape.num_kv_heads, d = q->shape.head_dim;
    const int64_t w[9] = {hq * d, hkv * d, hkv * d, hq * d, hq, hq * d, hq * d, hkv * d, hkv * d};
    const char *broken = NULL;
    for (int32_t r = 0; r < q->num_ranks; r++) {
        /* fp32 elements: room for every dtype */
        const int64_t t = q->rank_tokens[r] + 1;
        for (int j = 0; j < 9; j++) {
            mem[r][j] = calloc((size_t)(t * w[j]), sizeof(float));
            if (!mem[r][j]) broken = "tensors of an accepted plan could not be allocated";
        }
        io[r] = (dcp_grad_tensors_t){{mem[r][0], mem[r][1], mem[r][2], mem[r][3], mem[r][4], 0.0f},
                                     mem[r][5],
                                     mem[r][6],
                                     mem[r][7],
                                     mem[r][8]};
        fwd[r] = io[r].fwd;
    }
    /* every layer kind's programs, through its view */
    for (int32_t k = 0; k < q->num_kinds && !broken; k++)
        for (int pass = 0; pass < 2 && !broken; pass++) {
            const dcp_plan_t *v = dcp_plan_view_const(q, k);
            const dcp_status_t st = pass == 0 ? dcp_forward_inproc(v, fwd, 5.0, NULL)
                                              : dcp_backward_inproc(v, io, 5.0, NULL);
            if (st == DCP_ERR_INTERNAL || st == DCP_ERR_SYSTEM || st == DCP_ERR_NO_MEMORY)
                broken = pass == 0
                             ? "an accepted plan's forward broke (internal, system or memory)"
                             : "an accepted plan's backward broke (internal, system or memory)";
        }
    for (int32_t r = 0; r < q->num_ranks; r++)
        for (int j = 0; j < 9; j++) free(mem[r][j]);
    return broken;
}

static const char *check_accepted(const dcp_plan_t *q, const uint8_t *bytes, size_t size,
                                  int64_t run_max_tokens)
{
    if (dcp_plan_check_inputs(q) != DCP_OK || dcp_plan_check_programs(q) != DCP_OK)
        return "an accepted plan fails the validator when checked again";
    size_t n = 0;
    if (dcp_plan_serialize(q, NULL, 0, &n) != DCP_OK) return "an accepted plan cannot be sized";
    if (n != size) return "an accepted plan serializes to a different length (not canonical)";
    uint8_t *again = malloc(n);
    if (!again) return NULL; /* the fuzzer's own memory, not the plan's */
    const int same = dcp_plan_serialize(q, again, n, &n) == DCP_OK && !memcmp(again, bytes, n);
    free(again);
    if (!same) return "an accepted plan serializes to different bytes (not canonical)";
    dcp_plan_stats_t st;
    if (dcp_plan_get_stats(q, &st) != DCP_OK) return "an accepted plan has no statistics";
    int64_t most = 0;
    for (int32_t r = 0; r < st.num_ranks; r++) {
        int32_t spans = -1;
        int64_t tokens = -1;
        dcp_rank_stats_t rs;
        if (dcp_plan_local_layout(q, r, NULL, 0, &spans, &tokens) != DCP_OK || spans < 0 ||
            tokens < 0 || dcp_plan_get_rank_stats(q, r, &rs) != DCP_OK)
            return "an accepted plan has no layout or statistics for a rank";
        if (tokens > most) most = tokens;
    }
    if (run_max_tokens > 0 && st.num_ranks <= 4 && most <= run_max_tokens)
        return dcpt_plan_run_anyway(q);
    return NULL;
}

const char *dcpt_plan_input_check(const uint8_t *bytes, size_t size, int64_t run_max_tokens,
                                  dcpt_plan_verdict_t *verdict_out)
{
    dcp_plan_t *q = NULL;
    const dcp_status_t st = dcp_plan_deserialize(bytes, size, &q);
    if (st != DCP_OK) {
        *verdict_out = DCPT_PLAN_REJECTED;
        if (q) return "a refused plan wrote plan_out";
        return st == DCP_ERR_PLAN_CORRUPT ? NULL
                                          : "plan bytes refused with a status other "
                                            "than DCP_ERR_PLAN_CORRUPT";
    }
    *verdict_out = DCPT_PLAN_ACCEPTED;
    const char *broken = check_accepted(q, bytes, size, run_max_tokens);
    dcp_plan_destroy(q);
    return broken;
}

void dcpt_plan_reseal(uint8_t *b, size_t n)
{
    const uint64_t body = n - DCPT_PLAN_HEADER;
    const uint32_t crc = dcp_crc32c(b + DCPT_PLAN_HEADER, body);
    for (int i = 0; i < 8; i++) b[16 + i] = (uint8_t)(body >> (8 * i));
    for (int i = 0; i < 4; i++) b[24 + i] = (uint8_t)(crc >> (8 * i));
}

/* ---- seeds ---------------------------------------------------------------------------- */

typedef struct {
    const char *cluster;
    dcp_strategy_t strategy;
    int mix; /* which batch */
    dcp_dtype_t dtype;
    dcp_comm_schedule_t schedule;
    int kinds; /* layer kinds: 1, or the batch's masks then a window and a causal kind */
} seed_t;

static const seed_t seeds[] = {
    {"1x1", DCP_STRATEGY_RING, 0, DCP_DTYPE_FP32, DCP_COMM_DIVISIONS, 1},
    {"1x2", DCP_STRATEGY_RING, 0, DCP_DTYPE_FP32, DCP_COMM_DIVISIONS, 1},
    {"1x2", DCP_STRATEGY_ZIGZAG, 1, DCP_DTYPE_BF16, DCP_COMM_DIVISIONS, 1},
    {"2x2", DCP_STRATEGY_ZIGZAG, 2, DCP_DTYPE_FP32, DCP_COMM_ROUNDS, 1},
    {"2x2", DCP_STRATEGY_LPT, 1, DCP_DTYPE_FP16, DCP_COMM_DIVISIONS, 1},
    {"2x2", DCP_STRATEGY_LPT, 2, DCP_DTYPE_FP32, DCP_COMM_ROUNDS, 1},
    {"2x2", DCP_STRATEGY_METIS, 0, DCP_DTYPE_FP32, DCP_COMM_DIVISIONS, 1},
    {"2x2", DCP_STRATEGY_METIS, 1, DCP_DTYPE_BF16, DCP_COMM_ROUNDS, 1},
    {"1x4", DCP_STRATEGY_METIS, 2, DCP_DTYPE_FP32, DCP_COMM_DIVISIONS, 1},
    {"1x3", DCP_STRATEGY_LPT, 0, DCP_DTYPE_FP32, DCP_COMM_DIVISIONS, 1},
    {"2x2", DCP_STRATEGY_METIS, 1, DCP_DTYPE_BF16, DCP_COMM_ROUNDS, 2},
    {"1x3", DCP_STRATEGY_LPT, 0, DCP_DTYPE_FP32, DCP_COMM_DIVISIONS, 3},
};
enum { NUM_SEEDS = sizeof seeds / sizeof seeds[0] };

static dcp_status_t plan_seed(const seed_t *s, int32_t *ranges, dcp_plan_t **plan_out)
{
    static const int32_t len0[3] = {70, 1, 33}, len1[4] = {96, 37, 5, 50}, len2[2] = {128, 64};
    const dcp_mask_t m0[3] = {
        {.kind = DCP_MASK_CAUSAL}, {.kind = DCP_MASK_FULL}, {.kind = DCP_MASK_WINDOW, .window = 9}};
    const dcp_mask_t m1[4] = {
        {.kind = DCP_MASK_LAMBDA, .sink = 4, .window = 30},
        {.kind = DCP_MASK_CUSTOM, .ranges = ranges, .num_rows = 37},
        {.kind = DCP_MASK_CAUSAL},
        {.kind = DCP_MASK_SHARED_QUESTION, .question_frac = 0.2, .answers = 3}};
    const dcp_mask_t m2[2] = {{.kind = DCP_MASK_BLOCKWISE, .block = 16, .k = 1},
                              {.kind = DCP_MASK_CAUSAL}};
    dcp_batch_t batches[3] = {{.num_seqs = 3, .lengths = len0, .masks = m0},
                              {.num_seqs = 4, .lengths = len1, .masks = m1},
                              {.num_seqs = 2, .lengths = len2, .masks = m2}};
    dcp_mask_t window[4], causal[4];
    for (int i = 0; i < 4; i++) {
        window[i] = (dcp_mask_t){.kind = DCP_MASK_WINDOW, .window = 7};
        causal[i] = (dcp_mask_t){.kind = DCP_MASK_CAUSAL};
    }
    const dcp_layer_kind_t kinds[3] = {{batches[s->mix].masks, 1}, {window, 3}, {causal, 2}};
    if (s->kinds > 1) {
        batches[s->mix].masks = NULL;
        batches[s->mix].num_kinds = s->kinds;
        batches[s->mix].kinds = kinds;
    }
    const dcp_attn_shape_t shape = {4, 2, 8, s->dtype, 0.0f};
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.strategy = s->strategy;
    o.block_size = 16;
    o.head_blocks = s->mix == 1 ? 2 : 1;
    o.divisions = 2 + s->mix;
    o.comm_schedule = s->schedule;
    o.coalesce = 2;
    dcp_cluster_t *c = NULL;
    DCP_CHECK(dcp_cluster_from_spec(s->cluster, &c));
    const dcp_status_t st = dcp_plan_create(&batches[s->mix], &shape, &o, c, plan_out);
    dcp_cluster_destroy(c);
    return st;
}

int dcpt_plan_seeds(uint8_t ***bytes_out, size_t **sizes_out)
{
    int32_t ranges[4 * 37];
    for (int i = 0; i < 37; i++) {
        ranges[4 * i] = 0, ranges[4 * i + 1] = i / 2 + 1;
        ranges[4 * i + 2] = i, ranges[4 * i + 3] = i + 1;
    }
    uint8_t **bytes = calloc(NUM_SEEDS, sizeof *bytes);
    size_t *sizes = calloc(NUM_SEEDS, sizeof *sizes);
    int n = 0;
    for (; bytes && sizes && n < NUM_SEEDS; n++) {
        dcp_plan_t *p = NULL;
        if (plan_seed(&seeds[n], ranges, &p) != DCP_OK) break;
        int ok = dcp_plan_serialize(p, NULL, 0, &sizes[n]) == DCP_OK &&
                 (bytes[n] = malloc(sizes[n])) != NULL &&
                 dcp_plan_serialize(p, bytes[n], sizes[n], &sizes[n]) == DCP_OK;
        dcp_plan_destroy(p);
        if (!ok) break;
    }
    if (n < NUM_SEEDS) {
        dcpt_plan_seeds_free(bytes, sizes, NUM_SEEDS);
        return 0;
    }
    *bytes_out = bytes;
    *sizes_out = sizes;
    return n;
}

void dcpt_plan_seeds_free(uint8_t **bytes, size_t *sizes, int n)
{
    for (int i = 0; bytes && i < n; i++) free(bytes[i]);
    free(bytes);
    free(sizes);
}
