/* A bounded mutation run over the seed plans (the in-tree twin of tests/fuzz/plan_fuzz.c):
 * bit flips, byte and integer-field overwrites with edge values, truncation, moves and
 * splices between seeds, mostly with the checksum and payload length re-sealed so that the
 * changes reach the validator. Every outcome must keep dcp_plan_deserialize()'s promises
 * (tests/fuzz/plan_input.h); accepted plans that are small enough run both passes. */
#include "tests/fuzz/plan_input.h"
#include "tests/unit/suites.h"
#include "tests/unit/testlib.h"

#include <CUnit/CUnit.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    MUTATIONS_PER_SEED = 1500,
    MAX_RUNS = 200,      /* the first accepted mutants run both passes */
    RUN_MAX_TOKENS = 512 /* when no rank has more rows */
};

static void put_le(uint8_t *b, size_t at, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) b[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *b, size_t at, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)b[at + (size_t)i] << (8 * i);
    return v;
}

static int64_t edge_value(dcpt_rng_t *rng, int64_t old)
{
    static const int64_t edges[] = {0,
                                    1,
                                    -1,
                                    2,
                                    3,
                                    16,
                                    255,
                                    65536,
                                    INT32_MAX,
                                    INT32_MIN,
                                    (int64_t)1 << 31,
                                    (int64_t)1 << 40,
                                    INT64_MAX,
                                    INT64_MIN};
    const int64_t pick = dcpt_rng_range(rng, 0, (int64_t)(sizeof edges / sizeof edges[0]) + 1);
    if (pick == (int64_t)(sizeof edges / sizeof edges[0])) return old + 1;
    if (pick > (int64_t)(sizeof edges / sizeof edges[0])) return old - 1;
    return edges[pick];
}

/* One mutant of seed `s` (others[] for splices) in out (capacity cap); returns its size. */
static size_t mutate(dcpt_rng_t *rng, const uint8_t *s, size_t n, const uint8_t *other,
                     size_t other_n, uint8_t *out, size_t cap)
{
    size_t m = n;
    memcpy(out, s, n);
    const size_t body = n - DCPT_PLAN_HEADER;
    const size_t at = DCPT_PLAN_HEADER + (size_t)dcpt_rng_range(rng, 0, (int64_t)body - 1);
    switch (dcpt_rng_range(rng, 0, 6)) {
    case 0: /* a bit */
        out[at] ^= (uint8_t)(1u << dcpt_rng_range(rng, 0, 7));
        break;
    case 1: /* a byte */
        out[at] = (uint8_t)dcpt_rng_next(rng);
        break;
    case 2: { /* an aligned int32 field */
        const size_t a = at & ~(size_t)3;
        if (a + 4 <= n) put_le(out, a, (uint64_t)edge_value(rng, (int32_t)get_le(out, a, 4)), 4);
        break;
    }
    case 3: { /* an aligned int64 field */
        const size_t a = at & ~(size_t)7;
        if (a >= DCPT_PLAN_HEADER && a + 8 <= n)
            put_le(out, a, (uint64_t)edge_value(rng, (int64_t)get_le(out, a, 8)), 8);
        break;
    }
    case 4: /* truncation */
        m = at;
        break;
    case 5: { /* a run of bytes moved within the plan */
        const size_t len = (size_t)dcpt_rng_range(rng, 1, 64);
        const size_t from = DCPT_PLAN_HEADER + (size_t)dcpt_rng_range(rng, 0, (int64_t)body - 1);
        if (from + len <= n && at + len <= n) memmove(out + at, s + from, len);
        break;
    }
    default: { /* the head of this seed, the tail of another */
        const size_t cut = (size_t)dcpt_rng_range(rng, DCPT_PLAN_HEADER, (int64_t)other_n);
        const size_t tail = other_n - cut;
        if (at + tail <= cap) {
            memcpy(out + at, other + cut, tail);
            m = at + tail;
        }
        break;
    }
    }
    if (m < DCPT_PLAN_HEADER) m = DCPT_PLAN_HEADER;
    if (dcpt_rng_range(rng, 0, 15) != 0) dcpt_plan_reseal(out, m);
    return m;
}

static void test_mutated_seed_plans_keep_promises(void)
{
    uint8_t **seed = NULL;
    size_t *size = NULL;
    const int n = dcpt_plan_seeds(&seed, &size);
    CU_ASSERT_FATAL(n > 0);
    size_t cap = 0;
    for (int i = 0; i < n; i++) cap += size[i];
    uint8_t *buf = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    dcpt_rng_t rng = {20261125};
    long accepted = 0, rejected = 0, broken = 0;
    for (int i = 0; i < n; i++) {
        dcpt_plan_verdict_t v;
        CU_ASSERT_PTR_NULL(dcpt_plan_input_check(seed[i], size[i], RUN_MAX_TOKENS, &v));
        CU_ASSERT_EQUAL(v, DCPT_PLAN_ACCEPTED); /* every seed is a valid plan */
        for (int k = 0; k < MUTATIONS_PER_SEED; k++) {
            const int j = (int)dcpt_rng_range(&rng, 0, n - 1);
            const size_t m = mutate(&rng, seed[i], size[i], seed[j], size[j], buf, cap);
            const char *why =
                dcpt_plan_input_check(buf, m, accepted < MAX_RUNS ? RUN_MAX_TOKENS : 0, &v);
            if (why && broken++ < 5)
                fprintf(stderr, "plan_fuzz: seed %d mutant %d (%zu bytes): %s\n", i, k, m, why);
            accepted += v == DCPT_PLAN_ACCEPTED;
            rejected += v == DCPT_PLAN_REJECTED;
        }
    }
    CU_ASSERT_EQUAL(broken, 0);
    /* the mutations reach the validator: most are refused, some survive (an unused float
     * bit, an equivalent field) and are checked as plans */
    CU_ASSERT(rejected > accepted);
    CU_ASSERT(accepted > 0);
    free(buf);
    dcpt_plan_seeds_free(seed, size, n);
}

int dcp_suite_plan_fuzz(void)
{
    static const dcp_test_t tests[] = {
        {"mutated_seed_plans_keep_promises", test_mutated_seed_plans_keep_promises},
        {NULL, NULL},
    };
    return dcp_add_suite("plan_fuzz", tests);
}
