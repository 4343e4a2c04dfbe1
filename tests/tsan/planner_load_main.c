/* The planner service's load suite alone (tests/unit/test_planner_load.c), for make test-tsan:
 * the library and this program built with ThreadSanitizer. Exits non-zero on any failure. */
#include "tests/unit/suites.h"

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 2;
    if (dcp_suite_planner_load() != 0) {
        CU_cleanup_registry();
        return 2;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    const CU_ErrorCode rc = CU_basic_run_tests();
    const unsigned failures = CU_get_number_of_failures();
    CU_cleanup_registry();
    return rc != CUE_SUCCESS || failures > 0;
}
