#include "partition/model/mask.h"

#include "include/base/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- validation ------------------------------------------------------------------------ */

dcp_status_t dcp_mask_validate(const dcp_mask_t *m, int32_t len, const char *field)
{
    if (!m) return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: mask is NULL", field);
    switch (m->kind) {
    case DCP_MASK_FULL:
    case DCP_MASK_CAUSAL:
        return DCP_OK;
    case DCP_MASK_WINDOW:
    case DCP_MASK_LAMBDA:
        if (m->window < 1)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.window = %d, must be >= 1", field,
                                 m->window);
        if (m->kind == DCP_MASK_LAMBDA && m->sink < 0)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.sink = %d, must be >= 0", field, m->sink);
        return DCP_OK;
    case DCP_MASK_BLOCKWISE:
        if (m->block < 1)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.block = %d, must be >= 1", field,
                                 m->block);
        if (m->k < 0)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.k = %d, must be >= 0", field, m->k);
        return DCP_OK;
    case DCP_MASK_SHARED_QUESTION:
        if (!(m->question_frac >= 0.0 && m->question_frac <= 1.0))
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.question_frac = %g, must be in [0, 1]",
                                 field, m->question_frac);
        if (m->answers < 1)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.answers = %d, must be >= 1", field,
                                 m->answers);
        return DCP_OK;
    case DCP_MASK_CUSTOM:
        if (m->num_rows != len)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "%s.num_rows = %d, a custom mask needs one row of ranges per "
                                 "query: %d",
                                 field, m->num_rows, len);
        if (!m->ranges)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.ranges is NULL for a custom mask", field);
        for (int64_t i = 0; i < len; i++) {
            const int32_t *r = m->ranges + 4 * i;
            for (int j = 0; j < 4; j += 2)
                if (r[j] < 0 || r[j] > r[j + 1] || r[j + 1] > len)
                    return dcp_set_error(DCP_ERR_INVALID_ARG,
                                         "%s.ranges[%lld] = [%d, %d), need 0 <= s <= e <= %d",
                                         field, (long long)(4 * i + j), r[j], r[j + 1], len);
        }
        return DCP_OK;
    default:
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s.kind = %d is not a mask kind", field,
                             (int)m->kind);
    }
}

/* ---- exact pair counts ------------------------------------------------------------------ */

/* sum over i in [u, v) of max(0, a + s*i), s in {-1, 0, 1}. */
static int64_t sum_positive(int64_t u, int64_t v, int64_t a, int32_t s)
{
    if (u >= v) return 0;
    if (s == 0) return a > 0 ? (v - u) * a : 0;
    if (s > 0) {
        int64_t first = u > 1 - a ? u : 1 - a; /* a + i > 0 from i = 1 - a on */
        if (first >= v) return 0;
        return ((a + first) + (a + v - 1)) * (v - first) / 2;
    }
    int64_t stop = v < a ? v : a; /* a - i > 0 below i = a */
    if (u >= stop) return 0;
    return ((a - u) + (a - stop + 1)) * (stop - u) / 2;
}

/* sum over i in [x0, x1) of |[lo(i), hi(i)) n [ks, ke)|. min(hi(i), ke) and max(lo(i), ks)
 * change form once each (at i = ke - hi_c and i = ks - lo_c); between those points the
 * summand is linear with slope -1, 0 or 1. */
static int64_t count_interval(const dcp_lin_iv_t *iv, int64_t x0, int64_t x1, int64_t ks,
                              int64_t ke)
{
    int64_t cut[4] = {x0, x1, x1, x1};
    int n = 2;
    const int64_t bh = ke - iv->hi_c, bl = ks - iv->lo_c;
    if (iv->hi_s && bh > x0 && bh < x1) cut[n++] = bh;
    if (iv->lo_s && bl > x0 && bl < x1) cut[n++] = bl;
    for (int a = 1; a < n; a++) /* tiny insertion sort */
        for (int b = a; b > 0 && cut[b] < cut[b - 1]; b--) {
            int64_t t = cut[b];
            cut[b] = cut[b - 1];
            cut[b - 1] = t;
        }
    int64_t total = 0;
    for (int p = 0; p + 1 < n; p++) {
        const int64_t u = cut[p], v = cut[p + 1];
        if (u >= v) continue;
        int64_t hi_a, lo_a;
        int32_t hi_s = 0, lo_s = 0;
        if (iv->hi_s && u < bh) {
            hi_a = iv->hi_c;
            hi_s = 1;
        } else {
            hi_a = iv->hi_s ? ke : (iv->hi_c < ke ? iv->hi_c : ke);
        }
        if (iv->lo_s && u >= bl) {
            lo_a = iv->lo_c;
            lo_s = 1;
        } else {
            lo_a = iv->lo_s ? ks : (iv->lo_c > ks ? iv->lo_c : ks);
        }
        total += sum_positive(u, v, hi_a - lo_a, hi_s - lo_s);
    }
    return total;
}

int64_t dcp_mask_pairs(const dcp_mask_t *m, int32_t len, int32_t q0, int32_t q1, int32_t k0,
                       int32_t k1)
{
    int64_t total = 0;
    for (int32_t i = q0; i < q1;) {
        dcp_mask_seg_t s;
        dcp_mask_segment_at(m, len, i, &s);
        const int32_t end = s.i1 < q1 ? s.i1 : q1;
        for (int32_t j = 0; j < s.n; j++) total += count_interval(&s.iv[j], i, end, k0, k1);
        i = end;
    }
    return total;
}

dcp_tile_class_t dcp_mask_classify(const dcp_mask_t *m, int32_t len, int32_t q0, int32_t q1,
                                   int32_t k0, int32_t k1, int64_t *pairs_out)
{
    const int64_t pairs = dcp_mask_pairs(m, len, q0, q1, k0, k1);
    *pairs_out = pairs;
    if (pairs == 0) return DCP_TILE_EMPTY;
    return pairs == (int64_t)(q1 - q0) * (k1 - k0) ? DCP_TILE_FULL : DCP_TILE_PARTIAL;
}

/* ---- key envelopes ---------------------------------------------------------------------- */

static int range_cmp(const void *a, const void *b)
{
    const dcp_range_t *x = a, *y = b;
    return x->lo != y->lo ? (x->lo < y->lo ? -1 : 1) : (x->hi < y->hi ? -1 : x->hi > y->hi);
}

int dcp_mask_cuts(const dcp_mask_t *m, int32_t len, int32_t cuts[DCP_MASK_MAX_CUTS])
{
    int64_t c[DCP_MASK_MAX_CUTS];
    int n = 0;
    if (m->kind == DCP_MASK_LAMBDA) {
        c[n++] = m->sink;
    } else if (m->kind == DCP_MASK_BLOCKWISE) {
        const int64_t nblk = ((int64_t)len + m->block - 1) / m->block;
        if (nblk > 2) { /* with two blocks or fewer the mask is causal */
            c[n++] = m->block;
            c[n++] = (nblk - 1) * m->block;
        }
    }
    int out = 0;
    for (int j = 0; j < n; j++)
        if (c[j] > 0 && c[j] < len && (out == 0 || c[j] > cuts[out - 1]))
            cuts[out++] = (int32_t)c[j];
    return out;
}

dcp_status_t dcp_mask_envelope(const dcp_mask_t *m, int32_t len, int32_t q0, int32_t q1,
                               dcp_range_t **ranges, int64_t *cap, int64_t *count_out)
{
    int64_t n = 0;
    for (int32_t i = q0; i < q1;) {
        dcp_mask_seg_t s;
        dcp_mask_segment_at(m, len, i, &s);
        const int32_t end = s.i1 < q1 ? s.i1 : q1;
        DCP_CHECK(dcp_reserve(ranges, cap, n + s.n, sizeof **ranges, "mask envelope"));
        for (int32_t j = 0; j < s.n; j++) {
            /* slopes are >= 0: the lowest start is at i, the highest end at end - 1 */
            int64_t lo = s.iv[j].lo_c + s.iv[j].lo_s * (int64_t)i;
            int64_t hi = s.iv[j].hi_c + s.iv[j].hi_s * (int64_t)(end - 1);
            lo = lo < 0 ? 0 : lo;
            hi = hi > len ? len : hi;
            if (lo < hi) (*ranges)[n++] = (dcp_range_t){(int32_t)lo, (int32_t)hi};
        }
        i = end;
    }
    if (n > 1) qsort(*ranges, (size_t)n, sizeof **ranges, range_cmp);
    int64_t w = 0;
    for (int64_t r = 0; r < n; r++) {
        if (w > 0 && (*ranges)[r].lo <= (*ranges)[w - 1].hi) {
            if ((*ranges)[r].hi > (*ranges)[w - 1].hi) (*ranges)[w - 1].hi = (*ranges)[r].hi;
        } else {
            (*ranges)[w++] = (*ranges)[r];
        }
    }
    *count_out = w;
    return DCP_OK;
}

/* ---- public API ------------------------------------------------------------------------- */

static dcp_status_t check_query_args(const dcp_mask_t *m, int32_t len)
{
    if (len < 1) return dcp_set_error(DCP_ERR_INVALID_ARG, "len = %d, must be >= 1", len);
    return dcp_mask_validate(m, len, "mask");
}

dcp_status_t dcp_mask_allowed(const dcp_mask_t *mask, int32_t len, int32_t query,
                              int32_t ranges_out[4])
{
    DCP_CHECK(check_query_args(mask, len));
    if (query < 0 || query >= len)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "query = %d, must be in [0, %d)", query, len);
    if (!ranges_out) return dcp_set_error(DCP_ERR_INVALID_ARG, "ranges_out is NULL");
    dcp_mask_keys(mask, len, query, ranges_out);
    return DCP_OK;
}

dcp_status_t dcp_mask_count_pairs(const dcp_mask_t *mask, int32_t len, int32_t q0, int32_t q1,
                                  int32_t k0, int32_t k1, int64_t *pairs_out)
{
    DCP_CHECK(check_query_args(mask, len));
    if (q0 < 0 || q0 > q1 || q1 > len)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "queries [%d, %d) not within [0, %d]", q0, q1,
                             len);
    if (k0 < 0 || k0 > k1 || k1 > len)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "keys [%d, %d) not within [0, %d]", k0, k1, len);
    if (!pairs_out) return dcp_set_error(DCP_ERR_INVALID_ARG, "pairs_out is NULL");
    *pairs_out = dcp_mask_pairs(mask, len, q0, q1, k0, k1);
    return DCP_OK;
}
