#include "tests/unit/suites.h"

#include <CUnit/CUnit.h>

int dcp_add_suite(const char *name, const dcp_test_t *tests)
{
    CU_pSuite s = CU_add_suite(name, NULL, NULL);
    if (!s) return 1;
    for (const dcp_test_t *t = tests; t->name; t++)
        if (!CU_add_test(s, t->name, t->fn)) return 1;
    return 0;
}
