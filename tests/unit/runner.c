/*
 * The test runner: every CUnit suite of dcp in one binary.
 *   dcp-tests [-s SUITE] [-t TEST] [-l]
 * -s and -t run one suite or one test (by name); -l lists them. The exit status is non-zero
 * when any assertion fails, any suite's setup fails, or CUnit itself reports an error.
 */
#include "tests/unit/suites.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>

static const dcp_suite_fn suites[] = {
    dcp_suite_mask,      dcp_suite_cluster,  dcp_suite_blocks,       dcp_suite_place,
    dcp_suite_schedule,  dcp_suite_plan_io,  dcp_suite_plan_service, dcp_suite_planner,
    dcp_suite_kernels,   dcp_suite_backward, dcp_suite_nonfinite,    dcp_suite_faults,
    dcp_suite_transport, dcp_suite_route,    dcp_suite_staged,       dcp_suite_api,
    dcp_suite_metis,     dcp_suite_rounds,   dcp_suite_cost,         dcp_suite_topo,
    dcp_suite_ucx,       dcp_suite_e2e,      dcp_suite_ordering,     dcp_suite_gpu,
};

static void list(void)
{
    for (CU_pSuite s = CU_get_registry()->pSuite; s; s = s->pNext) {
        printf("%s\n", s->pName);
        for (CU_pTest t = s->pTest; t; t = t->pNext) printf("  %s\n", t->pName);
    }
}

int main(int argc, char **argv)
{
    const char *suite = NULL, *test = NULL;
    int do_list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-s") && i + 1 < argc)
            suite = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            test = argv[++i];
        else if (!strcmp(argv[i], "-l"))
            do_list = 1;
        else {
            fprintf(stderr, "usage: %s [-s SUITE] [-t TEST] [-l]\n", argv[0]);
            return 2;
        }
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
    CU_basic_set_mode(CU_BRM_VERBOSE);
    /* one CUnit run, so that its failure counts cover everything that ran */
    CU_ErrorCode rc;
    if (!suite && !test) {
        rc = CU_basic_run_tests();
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
        rc = t ? CU_basic_run_test(s, t) : CU_basic_run_suite(s);
    }
    const unsigned failures = CU_get_number_of_failures();
    const unsigned suite_fails = CU_get_number_of_suites_failed();
    printf("\n%u assertion failures, %u suites failed to initialise\n", failures, suite_fails);
    CU_cleanup_registry();
    return (rc != CUE_SUCCESS || failures > 0 || suite_fails > 0) ? 1 : 0;
}
