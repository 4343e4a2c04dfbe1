/*
 * The exact mask semantics (partition/README.md, Masks), in one place, for host and device code.
 *
 * Every mask is piecewise linear in the query index: the queries of a sequence fall into
 * segments [i0, i1), and within a segment the allowed keys of query i are at most two
 * disjoint ascending intervals whose ends move with slope 0 or 1:
 *
 *     [lo_c + lo_s * i, hi_c + hi_s * i)
 *
 * The per-query key ranges (kernels), exact pair counts of a tile in O(segments) time
 * (planner) and the key envelope of a query block (block generation) all derive from
 * dcp_mask_segment_at(), so they cannot disagree. Masks must have been validated
 * (partition/model/mask.h) before they reach these functions.
 */
#ifndef DCP_BASE_MASK_RULE_H
#define DCP_BASE_MASK_RULE_H

#include "include/base/hd.h"
#include "include/dcp.h"

#include <math.h>
#include <stdint.h>

typedef struct {
    int64_t lo_c, hi_c;
    int32_t lo_s, hi_s; /* 0 or 1 */
} dcp_lin_iv_t;

typedef struct {
    int32_t i0, i1; /* the queries [i0, i1) that share this form */
    int32_t n;      /* intervals in iv, 0..2; iv[0] ends at or before iv[1] starts */
    dcp_lin_iv_t iv[2];
} dcp_mask_seg_t;

DCP_HD dcp_lin_iv_t dcp_lin_iv(int64_t lo_c, int32_t lo_s, int64_t hi_c, int32_t hi_s)
{
    dcp_lin_iv_t iv;
    iv.lo_c = lo_c;
    iv.lo_s = lo_s;
    iv.hi_c = hi_c;
    iv.hi_s = hi_s;
    return iv;
}

/* Shared-question: the question length floor(L * p), clamped to [0, L]. */
DCP_HD int64_t dcp_mask_question_len(const dcp_mask_t *m, int32_t len)
{
    double q = floor((double)len * m->question_frac);
    if (q < 0) return 0;
    if (q > (double)len) return len;
    return (int64_t)q;
}

/* Custom masks: the two caller ranges of query i as disjoint ascending intervals (empty
 * ones dropped, overlapping or touching ones merged). */
DCP_HD void dcp_mask_custom_seg(const int32_t *r, dcp_mask_seg_t *s)
{
    int64_t a0 = r[0], a1 = r[1], b0 = r[2], b1 = r[3];
    s->n = 0;
    if (a0 >= a1) {
        a0 = b0;
        a1 = b1;
        b0 = b1 = 0;
    }
    if (a0 >= a1) return;
    if (b0 < b1) {
        if (b0 <= a1 && a0 <= b1) { /* overlap or touch: one interval */
            a0 = a0 < b0 ? a0 : b0;
            a1 = a1 > b1 ? a1 : b1;
        } else {
            if (b0 < a0) {
                int64_t t0 = a0, t1 = a1;
                a0 = b0;
                a1 = b1;
                b0 = t0;
                b1 = t1;
            }
            s->iv[1] = dcp_lin_iv(b0, 0, b1, 0);
            s->n = 2;
        }
    }
    s->iv[0] = dcp_lin_iv(a0, 0, a1, 0);
    if (s->n == 0) s->n = 1;
}

/* The segment of query i (0 <= i < len). */
DCP_HD void dcp_mask_segment_at(const dcp_mask_t *m, int32_t len, int32_t i, dcp_mask_seg_t *s)
{
    const int64_t L = len;
    s->i0 = 0;
    s->i1 = len;
    s->n = 1;
    s->iv[0] = dcp_lin_iv(0, 0, 1, 1); /* causal: [0, i+1) */
    switch (m->kind) {
    case DCP_MASK_FULL:
        s->iv[0] = dcp_lin_iv(0, 0, L, 0);
        break;
    case DCP_MASK_CAUSAL:
        break;
    case DCP_MASK_WINDOW: {
        const int64_t w = m->window;
        if (i < w) {
            s->i1 = (int32_t)(w < L ? w : L);
        } else {
            s->i0 = (int32_t)w;
            s->iv[0] = dcp_lin_iv(1 - w, 1, 1, 1);
        }
        break;
    }
    case DCP_MASK_LAMBDA: {
        /* Up to query S+W-1 the window reaches the sink: one interval [0, i+1). */
        const int64_t e = (int64_t)m->sink + m->window;
        if (i < e) {
            s->i1 = (int32_t)(e < L ? e : L);
        } else {
            s->i0 = (int32_t)e;
            s->n = 2;
            s->iv[0] = dcp_lin_iv(0, 0, m->sink, 0);
            s->iv[1] = dcp_lin_iv(1 - (int64_t)m->window, 1, 1, 1);
        }
        break;
    }
    case DCP_MASK_BLOCKWISE: {
        const int64_t b = m->block, k = m->k;
        const int64_t nblk = (L + b - 1) / b;
        if (nblk <= 2) break; /* only the first and the test block: causal */
        const int64_t last = (nblk - 1) * b;
        /* Middle queries before (k+1)b see [0, b) u [b, i+1) = [0, i+1). */
        const int64_t mid = (k + 1) * b < last ? (k + 1) * b : last;
        if (i < mid) {
            s->i1 = (int32_t)mid;
        } else if (i < last) {
            s->i0 = (int32_t)mid;
            s->i1 = (int32_t)last;
            s->n = 2;
            s->iv[0] = dcp_lin_iv(0, 0, b, 0);
            s->iv[1] = dcp_lin_iv(-k * b, 1, 1, 1);
        } else {
            s->i0 = (int32_t)last;
        }
        break;
    }
    case DCP_MASK_SHARED_QUESTION: {
        const int64_t q = dcp_mask_question_len(m, len);
        const int64_t a = m->answers;
        const int64_t per = (L - q) / a;
        if (i < q) {
            s->i1 = (int32_t)q;
        } else if (per == 0) {
            s->i0 = (int32_t)q; /* [0, q) u [q, i+1) */
        } else {
            int64_t r = (i - q) / per;
            if (r > a - 1) r = a - 1;
            const int64_t st = q + r * per;
            s->i0 = (int32_t)st;
            s->i1 = (int32_t)(r == a - 1 ? L : st + per);
            s->n = 2;
            s->iv[0] = dcp_lin_iv(0, 0, q, 0);
            s->iv[1] = dcp_lin_iv(st, 0, 1, 1);
        }
        break;
    }
    case DCP_MASK_CUSTOM:
        s->i0 = i;
        s->i1 = i + 1;
        dcp_mask_custom_seg(m->ranges + 4 * (int64_t)i, s);
        break;
    default:
        s->n = 0;
        break;
    }
}

/* Allowed keys of query i as {s0, e0, s1, e1}: disjoint, ascending, within [0, len]; an
 * absent second range is the empty [e0, e0). */
DCP_HD void dcp_mask_keys(const dcp_mask_t *m, int32_t len, int32_t i, int32_t r[4])
{
    dcp_mask_seg_t s;
    dcp_mask_segment_at(m, len, i, &s);
    int64_t v[4] = {0, 0, 0, 0};
    /* a constant trip count: s.iv and v stay in registers on the GPU (a loop to s.n indexes
     * them at run time, which puts them in local memory) */
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int32_t j = 0; j < 2; j++) {
        if (j >= s.n) break;
        int64_t lo = s.iv[j].lo_c + s.iv[j].lo_s * (int64_t)i;
        int64_t hi = s.iv[j].hi_c + s.iv[j].hi_s * (int64_t)i;
        lo = lo < 0 ? 0 : (lo > len ? len : lo);
        hi = hi < lo ? lo : (hi > len ? len : hi);
        v[2 * j] = lo;
        v[2 * j + 1] = hi;
    }
    if (s.n < 2) v[2] = v[3] = v[1];
    for (int j = 0; j < 4; j++) r[j] = (int32_t)v[j];
}

#endif
