/* The transport failure walk (tests/README.md "Failure walks"): every engine call of a training
 * step that can fail on its own (include/base/test_hook.h: a UCX send or receive posted, a UCX
 * operation completed later or when posted, an in-process block copy) fails in turn (make test:
 * a seeded sample; DCP_WALK=full: every one on threads, a larger sample on processes). Every
 * rank must end within the timeout, each failed one naming the rank and the call that failed,
 * and nothing may be left behind. Ranks as threads over the in-process engine, as threads with
 * a UCX worker each, as processes over UCX, and as processes of two threads (both engines,
 * routed). */
#include "include/base/env.h"
#include "include/base/error.h"
#include "tests/unit/suites.h"
#include "tests/unit/walk.h"

#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANKS     4
#define TIMEOUT_S 3.0

/* One run of four ranks into out[]; a failure before the ranks ran is returned. */
typedef dcp_status_t (*ranks_fn)(const t_walk_batch_t *b, t_rank_result_t *out);

static dcp_status_t run_inproc(const t_walk_batch_t *b, t_rank_result_t *out)
{
    return t_group_pass(b, "2x2", RANKS, TIMEOUT_S, out);
}

static dcp_status_t run_ucx_threads(const t_walk_batch_t *b, t_rank_result_t *out)
{
    (void)b; /* the ranks plan the walks' batch on the cluster their contexts found */
    const t_proc_job_t job = {RANKS, 1, -1, 0, 0, TIMEOUT_S};
    t_job_result_t *r = calloc(1, sizeof *r);
    if (!r || t_threads_run(&job, r) != 0) {
        free(r);
        return dcp_set_error(DCP_ERR_INTERNAL, "cannot start the rank threads");
    }
    memcpy(out, r->rank, RANKS * sizeof *out);
    free(r);
    return DCP_OK;
}

static const char *const site_names[DCP_FAULT_COUNT] = {
    "ucx send", "ucx receive", "ucx completion", "ucx completion when posted", "in-process copy"};

static void walk_threads(const char *name, ranks_fn run, int64_t sample)
{
    t_walk_batch_t b;
    t_walk_batch_init(&b, DCP_STRATEGY_METIS);
    b.opts.divisions = 2;
    t_rank_result_t r[RANKS];
    char why[512];
    dcp_test_alloc_track(1);
    dcp_test_fault_at(0);
    memset(r, 0, sizeof r);
    CU_ASSERT_EQUAL_FATAL(run(&b, r), DCP_OK);
    const int64_t total = dcp_test_fault_count();
    int64_t reached[DCP_FAULT_COUNT]; /* the clean run's calls of each kind */
    for (int k = 0; k < DCP_FAULT_COUNT; k++) reached[k] = dcp_test_fault_count_site(k);
    uint64_t clean[RANKS];
    for (int32_t k = 0; k < RANKS; k++) {
        if (r[k].st != DCP_OK)
            fprintf(stderr, "walk %s: clean run: rank %d: %s\n", name, k, r[k].msg);
        CU_ASSERT_EQUAL_FATAL(r[k].st, DCP_OK);
        clean[k] = r[k].digest;
    }
    CU_ASSERT_EQUAL(dcp_test_alloc_live_blocks(), 0);
    int64_t *ns = calloc((size_t)total + 1, sizeof *ns);
    const uint64_t seed = t_walk_seed() ^ t_digest(0, name, strlen(name));
    /* a negative sample: that many in full walks too */
    const int64_t count = sample < 0 ? t_walk_pick_sample(total, -sample, seed, ns)
                                     : t_walk_pick(total, sample, seed, ns);
    int64_t runs = 0, named = 0, absorbed = 0, by_site[DCP_FAULT_COUNT] = {0};
    double slowest = 0;
    int bad = 0;
    for (int64_t i = 0; i < count && bad < 5; i++) {
        const int64_t before = dcp_test_alloc_live_blocks(); /* 0 unless a run leaked */
        dcp_test_fault_at(ns[i]);
        memset(r, 0, sizeof r);
        const double t0 = dcp_now();
        const dcp_status_t st = run(&b, r);
        slowest = dcp_now() - t0 > slowest ? dcp_now() - t0 : slowest;
        dcp_fault_site_t site = DCP_FAULT_COUNT;
        const int fired = dcp_test_fault_fired(&site);
        const double fired_at = dcp_test_fired_time();
        dcp_test_fault_at(0);
        const int64_t leaked = dcp_test_alloc_live_blocks() - before;
        if (!fired) continue;
        runs++;
        if (site < DCP_FAULT_COUNT) by_site[site]++;
        why[0] = '\0';
        if (st != DCP_OK)
            snprintf(why, sizeof why, "the run failed before its ranks: %s", dcp_last_error());
        else
            t_judge_ranks(r, RANKS, 0, RANKS, 1, TIMEOUT_S, fired_at, why, sizeof why);
        int all_ok = 1, same = 1;
        for (int32_t k = 0; k < RANKS; k++) {
            all_ok &= r[k].st == DCP_OK;
            same &= r[k].digest == clean[k];
        }
        if (!why[0] && all_ok && !same)
            snprintf(why, sizeof why, "every rank completed, with another result");
        if (!why[0] && leaked)
            snprintf(why, sizeof why, "%lld blocks left behind", (long long)leaked);
        named += !why[0] && !all_ok;
        absorbed += !why[0] && all_ok;
        if (why[0] || dcp_env_int_value(DCP_ENV_WALK_VERBOSE)) {
            bad += why[0] != '\0';
            fprintf(stderr, "walk %s: call %lld of %lld (%s): %s\n", name, (long long)ns[i],
                    (long long)total, site < DCP_FAULT_COUNT ? site_names[site] : "?", why);
            for (int32_t k = 0; k < RANKS; k++)
                fprintf(stderr, "  rank %d: %s after %.2f s: %s\n", k, dcp_status_string(r[k].st),
                        r[k].secs, r[k].msg);
            dcp_test_alloc_live_print(stderr, 8);
        }
        CU_ASSERT(why[0] == '\0');
    }
    /* a full walk fails every call: each kind of call the clean run made has failed */
    for (int k = 0; k < DCP_FAULT_COUNT && t_walk_full() && sample >= 0; k++) {
        if (reached[k] > 0 && by_site[k] == 0)
            fprintf(stderr, "walk %s: no %s failed (the clean run made %lld)\n", name,
                    site_names[k], (long long)reached[k]);
        CU_ASSERT(reached[k] == 0 || by_site[k] > 0);
    }
    printf("  walk %-22s %6lld transport calls (%lld sends, %lld receives, %lld completions, "
           "%lld completions when posted, %lld copies); %5lld runs failed: %5lld named, %4lld "
           "absorbed (%lld sends, %lld receives, %lld completions, %lld when posted, %lld "
           "copies)%s; slowest run %.2f s\n",
           name, (long long)total, (long long)reached[DCP_FAULT_UCX_SEND],
           (long long)reached[DCP_FAULT_UCX_RECV], (long long)reached[DCP_FAULT_UCX_COMPLETE],
           (long long)reached[DCP_FAULT_UCX_AT_ONCE], (long long)reached[DCP_FAULT_INPROC_COPY],
           (long long)runs, (long long)named, (long long)absorbed,
           (long long)by_site[DCP_FAULT_UCX_SEND], (long long)by_site[DCP_FAULT_UCX_RECV],
           (long long)by_site[DCP_FAULT_UCX_COMPLETE], (long long)by_site[DCP_FAULT_UCX_AT_ONCE],
           (long long)by_site[DCP_FAULT_INPROC_COPY],
           t_walk_full() && sample >= 0 ? "" : " (sampled)", slowest);
    fflush(stdout);
    free(ns);
    dcp_test_alloc_track(0);
}

static void test_inproc_threads(void)
{
    walk_threads("in-process threads", run_inproc, 10);
}

static void test_ucx_threads(void)
{
    walk_threads("ucx ranks as threads", run_ucx_threads, T_PROC_RUNS(3, 2));
}

static void test_processes(void)
{
    t_job_walk("ucx processes", 4, 1, 1, t_walk_full() ? 60 : T_PROC_RUNS(2, 1));
}

static void test_hybrid(void)
{
    t_job_walk("2 processes x 2 threads", 2, 2, 1, t_walk_full() ? 60 : T_PROC_RUNS(2, 1));
}

int dcp_suite_xfer_walk(void)
{
    static const dcp_test_t tests[] = {
        {"inproc_threads", test_inproc_threads},
        {"ucx_threads", test_ucx_threads},
        {"processes", test_processes},
        {"hybrid", test_hybrid},
        {NULL, NULL},
    };
    return dcp_add_suite("xfer_walk", tests);
}
