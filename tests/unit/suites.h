/* Suite registration functions, one per module (tests/unit/test_<module>.c) plus the
 * end-to-end suite. Each returns 0 on success. */
#ifndef DCP_TESTS_SUITES_H
#define DCP_TESTS_SUITES_H

typedef int (*dcp_suite_fn)(void);

int dcp_suite_mask(void);
int dcp_suite_cluster(void);
int dcp_suite_blocks(void);
int dcp_suite_place(void);
int dcp_suite_schedule(void);
int dcp_suite_plan_io(void);
int dcp_suite_plan_fuzz(void);
int dcp_suite_plan_service(void);
int dcp_suite_planner_load(void);
int dcp_suite_alloc_walk(void);
int dcp_suite_xfer_walk(void);
int dcp_suite_planner(void);
int dcp_suite_kernels(void);
int dcp_suite_backward(void);
int dcp_suite_nonfinite(void);
int dcp_suite_faults(void);
int dcp_suite_transport(void);
int dcp_suite_route(void);
int dcp_suite_staged(void);
int dcp_suite_api(void);
int dcp_suite_e2e(void);
int dcp_suite_variants(void);
int dcp_suite_ordering(void);
int dcp_suite_gpu(void);
int dcp_suite_metis(void);
int dcp_suite_refine(void);
int dcp_suite_export(void);
int dcp_suite_rounds(void);
int dcp_suite_cost(void);
int dcp_suite_simulate(void);
int dcp_suite_topo(void);
int dcp_suite_ucx(void);
int dcp_suite_kinds(void);
int dcp_suite_peers(void);
int dcp_suite_disagree(void);
int dcp_suite_segment(void);
int dcp_suite_cudnn(void);
int dcp_suite_stamps(void);
int dcp_suite_lent(void);
int dcp_suite_env(void);

/* Adds a suite with the given tests (NULL-terminated name/function pairs). */
typedef struct {
    const char *name;
    void (*fn)(void);
} dcp_test_t;

int dcp_add_suite(const char *name, const dcp_test_t *tests);

#endif
