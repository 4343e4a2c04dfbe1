/* Masks: per-query ranges, exact pair counts, tile classes and envelopes against a
 * brute-force predicate; the text form; validation. */
#include "partition/model/mask.h"
#include "tests/unit/mask_bf.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int32_t edge_lengths[] = {1, 2, 3, 7, 16, 17, 64, 100, 257};

static int64_t bf_pairs(const dcp_mask_t *m, int L, int q0, int q1, int k0, int k1)
{
    int64_t n = 0;
    for (int i = q0; i < q1; i++)
        for (int j = k0; j < k1; j++) n += bf_allowed(m, L, i, j);
    return n;
}

/* Every (kind, random parameters, length): the query ranges equal the brute-force set. */
static void test_ranges_match_bruteforce(void)
{
    dcpt_rng_t rng = {11};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (size_t li = 0; li < sizeof edge_lengths / sizeof *edge_lengths; li++)
            for (int rep = 0; rep < 6; rep++) {
                const int32_t L = edge_lengths[li];
                int32_t *store;
                const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, L, &store);
                for (int32_t i = 0; i < L; i++) {
                    int32_t r[4];
                    CU_ASSERT_EQUAL_FATAL(dcp_mask_allowed(&m, L, i, r), DCP_OK);
                    CU_ASSERT(0 <= r[0] && r[0] <= r[1] && r[1] <= r[2] && r[2] <= r[3] &&
                              r[3] <= L);
                    for (int32_t j = 0; j < L; j++) {
                        const int in = (j >= r[0] && j < r[1]) || (j >= r[2] && j < r[3]);
                        if (in != bf_allowed(&m, L, i, j)) {
                            CU_FAIL("query range differs from the brute-force predicate");
                            fprintf(stderr, "kind %d L %d i %d j %d\n", kind, L, i, j);
                            free(store);
                            return;
                        }
                    }
                }
                free(store);
            }
}

/* Random tiles, empty ones included: exact pair counts and the class that follows. */
static void test_pair_counts_match_bruteforce(void)
{
    dcpt_rng_t rng = {12};
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 120; rep++) {
            const int32_t L = (int32_t)dcpt_rng_range(&rng, 1, 200);
            int32_t *store;
            const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, L, &store);
            int32_t q0 = (int32_t)dcpt_rng_range(&rng, 0, L),
                    q1 = (int32_t)dcpt_rng_range(&rng, 0, L);
            int32_t k0 = (int32_t)dcpt_rng_range(&rng, 0, L),
                    k1 = (int32_t)dcpt_rng_range(&rng, 0, L);
            if (q0 > q1) {
                int32_t t = q0;
                q0 = q1;
                q1 = t;
            }
            if (k0 > k1) {
                int32_t t = k0;
                k0 = k1;
                k1 = t;
            }
            int64_t pairs = -1;
            CU_ASSERT_EQUAL(dcp_mask_count_pairs(&m, L, q0, q1, k0, k1, &pairs), DCP_OK);
            const int64_t want = bf_pairs(&m, L, q0, q1, k0, k1);
            CU_ASSERT_EQUAL(pairs, want);
            if (q1 > q0 && k1 > k0) {
                int64_t p2;
                const dcp_tile_class_t c = dcp_mask_classify(&m, L, q0, q1, k0, k1, &p2);
                CU_ASSERT_EQUAL(p2, want);
                CU_ASSERT_EQUAL(c, want == 0                                ? DCP_TILE_EMPTY
                                   : want == (int64_t)(q1 - q0) * (k1 - k0) ? DCP_TILE_FULL
                                                                            : DCP_TILE_PARTIAL);
            }
            free(store);
        }
}

/* The named edges of the issue: L = 1, L < B, window > L, shared-question with m == 0,
 * lambda with S > L, blockwise with one or two blocks. */
static void test_edges(void)
{
    int64_t n;
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    for (int kind = 0; kind < DCP_MASK_CUSTOM; kind++) { /* L = 1: the one pair is allowed */
        dcp_mask_t m = {.kind = (dcp_mask_kind_t)kind,
                        .window = 1,
                        .sink = 0,
                        .block = 1,
                        .answers = 1,
                        .question_frac = 0.2};
        CU_ASSERT_EQUAL(dcp_mask_count_pairs(&m, 1, 0, 1, 0, 1, &n), DCP_OK);
        CU_ASSERT_EQUAL(n, 1);
    }
    const dcp_mask_t window = {.kind = DCP_MASK_WINDOW, .window = 1000};
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&window, 50, 0, 50, 0, 50, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, 50 * 51 / 2); /* window > L is causal */
    const dcp_mask_t sq = {.kind = DCP_MASK_SHARED_QUESTION, .question_frac = 0.2, .answers = 4};
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&sq, 3, 0, 3, 0, 3, &n), DCP_OK); /* q = 0, m = 0 */
    CU_ASSERT_EQUAL(n, 6);
    CU_ASSERT_EQUAL(n, bf_pairs(&sq, 3, 0, 3, 0, 3));
    const dcp_mask_t lam = {.kind = DCP_MASK_LAMBDA, .sink = 500, .window = 4};
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&lam, 40, 0, 40, 0, 40, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, 40 * 41 / 2); /* sink beyond L: causal */
    const dcp_mask_t bw = {.kind = DCP_MASK_BLOCKWISE, .block = 256, .k = 2};
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&bw, 300, 0, 300, 0, 300, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, 300 * 301 / 2); /* first and test block only: causal */
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&causal, 5, 2, 2, 0, 5, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, 0); /* empty tile */
}

/* Closed forms at lengths where a per-token loop would be slow and int32 would overflow. */
static void test_counts_closed_form_large(void)
{
    const int32_t L = 2000000000;
    int64_t n;
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL}, full = {.kind = DCP_MASK_FULL};
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&causal, L, 0, L, 0, L, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, (int64_t)L * (L + 1) / 2);
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&full, L, 0, L, 0, L, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, (int64_t)L * L);
    const dcp_mask_t win = {.kind = DCP_MASK_WINDOW, .window = 4096};
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&win, L, 0, L, 0, L, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, (int64_t)4096 * 4097 / 2 + (int64_t)(L - 4096) * 4096);
    const dcp_mask_t lam = {.kind = DCP_MASK_LAMBDA, .sink = 64, .window = 4096};
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&lam, L, 0, L, 0, L, &n), DCP_OK);
    const int64_t e = 64 + 4096; /* queries < e see [0, i+1); later ones S + W keys */
    CU_ASSERT_EQUAL(n, e * (e + 1) / 2 + (int64_t)(L - e) * (64 + 4096));
}

/* The envelope of a query block contains every key any of its queries may see. */
static void test_envelope_covers_allowed_keys(void)
{
    dcpt_rng_t rng = {13};
    dcp_range_t *env = NULL;
    int64_t cap = 0, n = 0;
    for (int kind = 0; kind < DCP_MASK_KIND_COUNT; kind++)
        for (int rep = 0; rep < 60; rep++) {
            const int32_t L = (int32_t)dcpt_rng_range(&rng, 1, 150);
            int32_t *store;
            const dcp_mask_t m = t_random_mask(&rng, (dcp_mask_kind_t)kind, L, &store);
            const int32_t q0 = (int32_t)dcpt_rng_range(&rng, 0, L - 1);
            const int32_t q1 = (int32_t)dcpt_rng_range(&rng, q0 + 1, L);
            CU_ASSERT_EQUAL_FATAL(dcp_mask_envelope(&m, L, q0, q1, &env, &cap, &n), DCP_OK);
            for (int64_t r = 1; r < n; r++) CU_ASSERT(env[r - 1].hi < env[r].lo);
            for (int32_t i = q0; i < q1; i++)
                for (int32_t j = 0; j < L; j++) {
                    if (!bf_allowed(&m, L, i, j)) continue;
                    int covered = 0;
                    for (int64_t r = 0; r < n; r++) covered |= j >= env[r].lo && j < env[r].hi;
                    CU_ASSERT(covered);
                }
            free(store);
        }
    free(env);
}

static void test_parse_and_format(void)
{
    const struct {
        const char *in, *out;
    } ok[] = {{"full", "full"},
              {"causal", "causal"},
              {"window:128", "window:128"},
              {"window", "window:4096"},
              {"lambda", "lambda:64:4096"},
              {"lambda:4:20", "lambda:4:20"},
              {"blockwise", "blockwise:256:2"},
              {"blockwise:8:0", "blockwise:8:0"},
              {"shared-question", "shared-question:0.2:4"},
              {"shared-question:0.5:3", "shared-question:0.5:3"},
              {"shared-question:0.10:3", "shared-question:0.1:3"},
              /* the text reads back as the same mask: no digit of p is lost */
              {"shared-question:0.123456789:3", "shared-question:0.123456789:3"},
              {"shared-question:0.30000000000000004:2", "shared-question:0.30000000000000004:2"}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        dcp_mask_t m, back;
        char buf[64];
        CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(ok[i].in, &m), DCP_OK);
        CU_ASSERT_EQUAL(dcp_mask_format(&m, buf, sizeof buf), DCP_OK);
        CU_ASSERT_STRING_EQUAL(buf, ok[i].out);
        CU_ASSERT_EQUAL_FATAL(dcp_mask_parse(buf, &back), DCP_OK);
        CU_ASSERT(back.kind == m.kind && back.window == m.window && back.sink == m.sink &&
                  back.block == m.block && back.k == m.k && back.answers == m.answers &&
                  back.question_frac == m.question_frac);
    }
    const char *bad[] = {"",
                         "diagonal",
                         "window:0",
                         "window:-3",
                         "window:x",
                         "window:4:5",
                         "lambda:4",
                         "lambda:-1:5",
                         "blockwise:0:2",
                         "blockwise:4:-1",
                         "shared-question:1.5:4",
                         "shared-question:0.2:0",
                         "shared-question:nan:2",
                         "window:2147483648",
                         "causal:3",
                         "custom"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dcp_mask_t m = {.kind = DCP_MASK_FULL, .window = 77};
        CU_ASSERT_EQUAL(dcp_mask_parse(bad[i], &m), DCP_ERR_INVALID_ARG);
        CU_ASSERT_EQUAL(m.window, 77); /* untouched on failure */
        CU_ASSERT(strlen(dcp_last_error()) > 0);
    }
    dcp_mask_t m;
    CU_ASSERT_EQUAL(dcp_mask_parse("shared-question:0.5:0.5", &m), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "parameter 2 ('0.5') is not an integer"));
    CU_ASSERT_EQUAL(dcp_mask_parse("window:2147483648", &m), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "parameter 1 ('2147483648')"));
    char tiny[4];
    CU_ASSERT_EQUAL(dcp_mask_parse("lambda:64:4096", &m), DCP_OK);
    CU_ASSERT_EQUAL(dcp_mask_format(&m, tiny, sizeof tiny), DCP_ERR_INVALID_ARG);
}

static void test_validation_names_the_field(void)
{
    const dcp_mask_t w = {.kind = DCP_MASK_WINDOW, .window = 0};
    CU_ASSERT_EQUAL(dcp_mask_validate(&w, 10, "batch.masks[2]"), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "batch.masks[2].window"));
    const int32_t r[8] = {0, 1, 0, 0, 1, 5, 0, 0}; /* query 1: [1, 5) beyond L = 2 */
    const dcp_mask_t c = {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = 2};
    CU_ASSERT_EQUAL(dcp_mask_validate(&c, 2, "m"), DCP_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "m.ranges[4]"));
    const dcp_mask_t nan = {.kind = DCP_MASK_SHARED_QUESTION, .question_frac = NAN, .answers = 1};
    CU_ASSERT_EQUAL(dcp_mask_validate(&nan, 10, "m"), DCP_ERR_INVALID_ARG);
    const dcp_mask_t bogus = {.kind = (dcp_mask_kind_t)42};
    CU_ASSERT_EQUAL(dcp_mask_validate(&bogus, 10, "m"), DCP_ERR_INVALID_ARG);
    int32_t out[4];
    const dcp_mask_t causal = {.kind = DCP_MASK_CAUSAL};
    CU_ASSERT_EQUAL(dcp_mask_allowed(&causal, 10, 10, out), DCP_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(dcp_mask_allowed(&causal, 0, 0, out), DCP_ERR_INVALID_ARG);
    int64_t n;
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&causal, 10, 3, 2, 0, 1, &n), DCP_ERR_INVALID_ARG);
}

/* A custom table's row count is checked against the sequence before a range is read:
 * tables of exactly num_rows rows (heap, so ASan sees a read past them) that are short,
 * long or empty are refused by name from every entry point. */
static void test_custom_row_count_checked(void)
{
    const int32_t len = 3000;
    const int32_t rows[3] = {len - 1, len + 1, 0};
    for (int c = 0; c < 3; c++) {
        int32_t *r = rows[c] ? malloc((size_t)rows[c] * 4 * sizeof *r) : NULL;
        for (int32_t i = 0; i < rows[c]; i++)
            r[4 * i] = 0, r[4 * i + 1] = i < len ? i + 1 : len, r[4 * i + 2] = r[4 * i + 3] = 0;
        const dcp_mask_t m = {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = rows[c]};
        char want[64];
        snprintf(want, sizeof want, "batch.masks[1].num_rows = %d", rows[c]);
        const int32_t lengths[2] = {10, len};
        const dcp_mask_t masks[2] = {{.kind = DCP_MASK_CAUSAL}, m};
        const dcp_batch_t batch = {.num_seqs = 2, .lengths = lengths, .masks = masks};
        const dcp_attn_shape_t shape = {2, 1, 8, DCP_DTYPE_FP32, 0.0f};
        dcp_cluster_t *cl = NULL;
        CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("1x2", &cl), DCP_OK);
        dcp_plan_t *plan = NULL;
        CU_ASSERT_EQUAL(dcp_plan_create(&batch, &shape, NULL, cl, &plan), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NULL(plan);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), want));
        dcp_planner_t *pl = NULL;
        uint64_t t = 0;
        CU_ASSERT_EQUAL_FATAL(dcp_planner_create(NULL, cl, &pl), DCP_OK);
        CU_ASSERT_EQUAL(dcp_planner_submit(pl, &batch, &shape, NULL, &t), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), want));
        dcp_planner_destroy(pl);
        int32_t out[4];
        int64_t n;
        CU_ASSERT_EQUAL(dcp_mask_allowed(&m, len, len - 1, out), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "num_rows"));
        CU_ASSERT_EQUAL(dcp_mask_count_pairs(&m, len, 0, len, 0, len, &n), DCP_ERR_INVALID_ARG);
        dcp_cluster_destroy(cl);
        free(r);
    }
}

/* Overlapping, touching, reversed and empty custom ranges count each key once. */
static void test_custom_ranges_normalised(void)
{
    const int32_t r[40] = {2, 6, 4, 9, /* overlap -> [2, 9) */ 5, 7, 0, 2, /* reversed order */
                           3, 3, 1, 4, /* first empty */ 0,       5, 5, 8 /* touching -> [0, 8) */};
    const dcp_mask_t m = {.kind = DCP_MASK_CUSTOM, .ranges = r, .num_rows = 10};
    int64_t n;
    CU_ASSERT_EQUAL(dcp_mask_count_pairs(&m, 10, 0, 4, 0, 10, &n), DCP_OK);
    CU_ASSERT_EQUAL(n, 7 + 4 + 3 + 8);
    int32_t out[4];
    CU_ASSERT_EQUAL(dcp_mask_allowed(&m, 10, 1, out), DCP_OK);
    CU_ASSERT(out[0] == 0 && out[1] == 2 && out[2] == 5 && out[3] == 7);
}

int dcp_suite_mask(void)
{
    static const dcp_test_t tests[] = {
        {"ranges_match_bruteforce", test_ranges_match_bruteforce},
        {"pair_counts_match_bruteforce", test_pair_counts_match_bruteforce},
        {"edges", test_edges},
        {"counts_closed_form_large", test_counts_closed_form_large},
        {"envelope_covers_allowed_keys", test_envelope_covers_allowed_keys},
        {"parse_and_format", test_parse_and_format},
        {"validation_names_the_field", test_validation_names_the_field},
        {"custom_ranges_normalised", test_custom_ranges_normalised},
        {"custom_row_count_checked", test_custom_row_count_checked},
        {NULL, NULL},
    };
    return dcp_add_suite("mask", tests);
}
