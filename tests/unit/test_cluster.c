#include "topo/cluster.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <string.h>

static void test_spec_shapes_and_figures(void)
{
    dcp_cluster_t *c = NULL;
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("4x8", &c), DCP_OK);
    CU_ASSERT_EQUAL(dcp_cluster_num_ranks(c), 32);
    CU_ASSERT_EQUAL(dcp_cluster_num_nodes(c), 4);
    CU_ASSERT_EQUAL(dcp_cluster_node_of(c, 15), 1);
    dcp_cluster_destroy(c);
    CU_ASSERT_EQUAL_FATAL(dcp_cluster_from_spec("2x4:intra=300:inter=6.25:lat=5", &c), DCP_OK);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.inter_gbps, 6.25, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.intra_gbps, 300, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(c->perf.lat_us, 5, 1e-12);
    dcp_cluster_destroy(c);
    dcp_cluster_destroy(NULL);
}

static void test_bad_specs_rejected(void)
{
    const char *bad[] = {"",
                         "8",
                         "x4",
                         "2x",
                         "0x4",
                         "2x0",
                         "2y4",
                         "2x4x1",
                         "-1x4",
                         "2x4:",
                         "2x4:intra",
                         "2x4:intra=-1",
                         "2x4:intra=abc",
                         "2x4:speed=3",
                         "70000x1",
                         "2x4:inter=inf"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dcp_cluster_t *c = (dcp_cluster_t *)&c; /* sentinel: must stay untouched */
        CU_ASSERT_EQUAL(dcp_cluster_from_spec(bad[i], &c), DCP_ERR_INVALID_ARG);
        CU_ASSERT_PTR_EQUAL(c, (dcp_cluster_t *)&c);
        CU_ASSERT_PTR_NOT_NULL(strstr(dcp_last_error(), "cluster"));
    }
    CU_ASSERT_EQUAL(dcp_cluster_from_spec(NULL, NULL), DCP_ERR_INVALID_ARG);
}

int dcp_suite_cluster(void)
{
    static const dcp_test_t tests[] = {
        {"spec_shapes_and_figures", test_spec_shapes_and_figures},
        {"bad_specs_rejected", test_bad_specs_rejected},
        {NULL, NULL},
    };
    return dcp_add_suite("cluster", tests);
}
