/* The masks of partition/README.md as a brute-force (query, key) predicate, written from the
 * table and independently of include/base/mask_rule.h, to test it against. */
#ifndef DCP_TESTS_MASK_BF_H
#define DCP_TESTS_MASK_BF_H

#include "include/dcp.h"

#include <math.h>

static inline int bf_allowed(const dcp_mask_t *m, int L, int i, int j)
{
    if (j < 0 || j >= L) return 0;
    switch (m->kind) {
    case DCP_MASK_FULL:
        return 1;
    case DCP_MASK_CAUSAL:
        return j <= i;
    case DCP_MASK_WINDOW:
        return j <= i && j >= i - m->window + 1;
    case DCP_MASK_LAMBDA:
        return (j < m->sink && j < i + 1) || (j <= i && j >= i - m->window + 1);
    case DCP_MASK_BLOCKWISE: {
        const long b = m->block, c = i / b, n = (L + b - 1) / b;
        if (c == 0 || c == n - 1) return j <= i;
        const long lo = b > i - m->k * b ? b : i - m->k * b;
        return j < b || (j >= lo && j <= i);
    }
    case DCP_MASK_SHARED_QUESTION: {
        const long q = (long)floor((double)L * m->question_frac);
        const long per = (L - q) / m->answers;
        if (i < q) return j <= i;
        long st = q;
        if (per != 0) {
            long r = (i - q) / per;
            if (r > m->answers - 1) r = m->answers - 1;
            st = q + r * per;
        }
        return j < q || (j >= st && j <= i);
    }
    case DCP_MASK_CUSTOM: {
        const int *r = m->ranges + 4 * i;
        return (j >= r[0] && j < r[1]) || (j >= r[2] && j < r[3]);
    }
    default:
        return 0;
    }
}

#endif
