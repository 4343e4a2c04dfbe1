/* GPU suite: registered only when a CUDA device is visible. */
#include "kernels/cuda/device.h"
#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>
#include <stdio.h>

/* The build's device code (sm_80 / sm_90a) loads and runs on this GPU. */
static void test_device_code_runs(void)
{
    CU_ASSERT_EQUAL(dcp_cuda_selftest(), 1);
}

int dcp_suite_gpu(void)
{
    const int n = dcp_cuda_device_count();
    if (n < 1) {
        printf("gpu: no CUDA device visible; the GPU suite is not registered\n");
        return 0;
    }
    static const dcp_test_t tests[] = {
        {"device_code_runs", test_device_code_runs},
        {NULL, NULL},
    };
    return dcp_add_suite("gpu", tests);
}
