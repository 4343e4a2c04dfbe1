/*
 * The test runner: every CUnit suite of dcp in one binary.
 *   dcp-tests [-s SUITE] [-t TEST] [-l] [-v]
 * -s and -t run one suite or one test (by name); -l lists them; -v prints every test. The
 * report is one line per suite (tests, assertions, seconds) and, for a failure, the test
 * and each failed assertion with its file and line. The exit status is non-zero when any
 * assertion fails, any suite's setup fails, or CUnit itself reports an error.
 */
#include "include/base/env.h"
#include "include/dcp.h"
#include "tests/unit/suites.h"
#include "tests/unit/walk_procs.h"

#include <CUnit/CUnit.h>
#include <CUnit/TestRun.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const dcp_suite_fn suites[] = {
    dcp_suite_mask,     dcp_suite_cluster,   dcp_suite_blocks,    dcp_suite_place,
    dcp_suite_schedule, dcp_suite_plan_io,   dcp_suite_plan_fuzz, dcp_suite_plan_service,
    dcp_suite_planner,  dcp_suite_kernels,   dcp_suite_segment,   dcp_suite_cudnn,
    dcp_suite_backward,
    dcp_suite_nonfinite,
    dcp_suite_faults,   dcp_suite_transport, dcp_suite_route,     dcp_suite_staged,
    dcp_suite_api,      dcp_suite_metis,     dcp_suite_refine,    dcp_suite_export,
    dcp_suite_rounds,   dcp_suite_cost,      dcp_suite_simulate,  dcp_suite_topo,
    dcp_suite_ucx,      dcp_suite_disagree,  dcp_suite_stamps,    dcp_suite_lent,
    dcp_suite_e2e,      dcp_suite_kinds,     dcp_suite_ordering,  dcp_suite_peers,
    dcp_suite_gpu,      dcp_suite_variants,  dcp_suite_planner_load, dcp_suite_alloc_walk,
    dcp_suite_xfer_walk, dcp_suite_env,
};

static struct {
    int verbose;
    unsigned tests, failed_tests, asserts_at_start;
    struct timespec start;
} report;

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static void suite_start(const CU_pSuite suite)
{
    (void)suite;
    report.tests = report.failed_tests = 0;
    report.asserts_at_start = CU_get_number_of_asserts();
    clock_gettime(CLOCK_MONOTONIC, &report.start);
}

static void test_complete(const CU_pTest test, const CU_pSuite suite, const CU_pFailureRecord f)
{
    report.tests++;
    if (f) report.failed_tests++;
    if (report.verbose || f)
        printf("  %s/%s: %s\n", suite->pName, test->pName, f ? "FAILED" : "ok");
    for (CU_pFailureRecord r = f; r; r = r->pNext)
        printf("    %s:%u: %s\n", r->strFileName ? r->strFileName : "?", r->uiLineNumber,
               r->strCondition ? r->strCondition : "?");
    fflush(stdout);
}

static void suite_complete(const CU_pSuite suite, const CU_pFailureRecord f)
{
    (void)f;
    printf("%-14s %3u tests %9u asserts %7.2f s  %s\n", suite->pName, report.tests,
           CU_get_number_of_asserts() - report.asserts_at_start, seconds_since(&report.start),
           report.failed_tests ? "FAILED" : "passed");
    fflush(stdout);
}

static void suite_init_failed(const CU_pSuite suite)
{
    printf("%-14s set-up FAILED\n", suite->pName);
}

static void list(void)
{
    for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext) {
        printf("%s\n", s->pName);
        for (CU_pTest t = s->pTest; t; t = t->pNext) printf("  %s\n", t->pName);
    }
}

int main(int argc, char **argv)
{
    /* a rank process of the failure walks (tests/unit/walk_procs.h) */
    if (argc > 1 && !strcmp(argv[1], "--walk-rank")) return t_rank_proc_main(argc, argv);
    const char *suite = NULL, *test = NULL;
    int do_list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc)
            suite = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            test = argv[++i];
        else if (!strcmp(argv[i], "-l"))
            do_list = 1;
        else if (!strcmp(argv[i], "-v"))
            report.verbose = 1;
        else {
            fprintf(stderr, "usage: %s [-s SUITE] [-t TEST] [-l] [-v]\n", argv[0]);
            return 2;
        }
    }
    /* the test settings (DCP_WALK, ...) read or the run does not start */
    if (dcp_env_check(DCP_ENV_TEST) != DCP_OK) {
        fprintf(stderr, "dcp-tests: %s\n", dcp_last_error());
        return 2;
    }
    if (CU_initialize_registry() != CUE_SUCCESS) return 2;
    for (size_t i = 0; i < sizeof suites / sizeof suites[0]; i++)
        if (suites[i]() != 0) {
            fprintf(stderr, "registering a suite failed: %s\n", CU_get_error_msg());
            CU_cleanup_registry();
            return 2;
        }
    if (do_list) {
        list();
        CU_cleanup_registry();
        return 0;
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CU_set_suite_start_handler(suite_start);
    CU_set_test_complete_handler(test_complete);
    CU_set_suite_complete_handler(suite_complete);
    CU_set_suite_init_failure_handler(suite_init_failed);
    /* one CUnit run, so that its failure counts cover everything that ran */
    CU_ErrorCode rc;
    if (!suite && !test) {
        rc = CU_run_all_tests();
    } else {
        CU_pSuite s = NULL;
        CU_pTest t = NULL;
        for (CU_pSuite c = CU_get_registry()->pSuite; c && !t; c = c->pNext) {
            if (suite && strcmp(c->pName, suite) != 0) continue;
            s = c;
            t = test ? CU_get_test(c, test) : NULL;
            if (!test) break;
        }
        if (!s || (test && !t)) {
            fprintf(stderr, "no suite or test matches (-l lists them)\n");
            CU_cleanup_registry();
            return 2;
        }
        rc = t ? CU_run_test(s, t) : CU_run_suite(s);
    }
    const unsigned failures = CU_get_number_of_failures();
    const unsigned suite_fails = CU_get_number_of_suites_failed();
    printf("dcp-tests: %u tests, %u asserts, %.1f s: %u assertion failures, %u suites failed to "
           "initialise\n",
           CU_get_number_of_tests_run(), CU_get_number_of_asserts(), seconds_since(&t0), failures,
           suite_fails);
    CU_cleanup_registry();
    return (rc != CUE_SUCCESS || failures > 0 || suite_fails > 0) ? 1 : 0;
}
