#include "plugin/cli/harness.h"

#include "include/base/error.h"
#include "kernels/reference.h"
#include "plugin/cli/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void dcp_harness_destroy(dcp_harness_t *h)
{
    if (!h) return;
    free(h->lengths);
    free(h->masks);
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->ref_o);
    free(h->ref_lse);
    free(h);
}

dcp_status_t dcp_harness_create(const int32_t *lengths, int32_t num_seqs, const dcp_mask_t *masks,
                                const dcp_attn_shape_t *shape, uint64_t seed,
                                dcp_harness_t **harness_out)
{
    dcp_harness_t *h = NULL;
    DCP_CHECK(dcp_calloc(&h, 1, sizeof *h, "harness"));
    dcp_status_t st;
    h->num_seqs = num_seqs;
    h->shape = *shape;
    if (h->shape.scale == 0.0f) h->shape.scale = (float)(1.0 / sqrt((double)shape->head_dim));
    DCP_CHECK_GOTO(dcp_calloc(&h->lengths, num_seqs, sizeof *h->lengths, "harness"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&h->masks, num_seqs, sizeof *h->masks, "harness"), st, err);
    memcpy(h->lengths, lengths, (size_t)num_seqs * sizeof *lengths);
    memcpy(h->masks, masks, (size_t)num_seqs * sizeof *masks);
    for (int32_t s = 0; s < num_seqs; s++) h->tokens += lengths[s];
    const int64_t nq = h->tokens * shape->num_heads * shape->head_dim;
    const int64_t nkv = h->tokens * shape->num_kv_heads * shape->head_dim;
    DCP_CHECK_GOTO(dcp_calloc(&h->q, nq, sizeof(float), "harness Q"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&h->k, nkv, sizeof(float), "harness K"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&h->v, nkv, sizeof(float), "harness V"), st, err);
    dcp_rng_t rng = {seed};
    for (int64_t i = 0; i < nq; i++) h->q[i] = (float)dcp_rng_normal(&rng);
    for (int64_t i = 0; i < nkv; i++) h->k[i] = (float)dcp_rng_normal(&rng);
    for (int64_t i = 0; i < nkv; i++) h->v[i] = (float)dcp_rng_normal(&rng);
    *harness_out = h;
    return DCP_OK;
err:
    dcp_harness_destroy(h);
    return st;
}

dcp_batch_t dcp_harness_batch(const dcp_harness_t *h)
{
    return (dcp_batch_t){h->num_seqs, h->lengths, h->masks};
}

dcp_status_t dcp_harness_reference(dcp_harness_t *h, int32_t threads)
{
    dcp_seq_info_t *seqs = NULL;
    DCP_CHECK(dcp_calloc(&seqs, h->num_seqs, sizeof *seqs, "reference"));
    for (int32_t s = 0; s < h->num_seqs; s++)
        seqs[s] = (dcp_seq_info_t){h->lengths[s], h->masks[s]};
    const int64_t no = h->tokens * h->shape.num_heads * h->shape.head_dim;
    dcp_status_t st;
    free(h->ref_o);
    free(h->ref_lse);
    h->ref_o = NULL;
    h->ref_lse = NULL;
    DCP_CHECK_GOTO(dcp_calloc(&h->ref_o, no, sizeof(double), "reference O"), st, out);
    DCP_CHECK_GOTO(
        dcp_calloc(&h->ref_lse, h->tokens * h->shape.num_heads, sizeof(double), "reference LSE"),
        st, out);
    st = dcp_reference_attention(seqs, h->num_seqs, &h->shape, h->q, h->k, h->v, h->ref_o,
                                 h->ref_lse, threads);
out:
    free(seqs);
    return st;
}

/* Per-rank tensors, and where each local row comes from in the whole batch. */
typedef struct {
    dcp_tensors_t *io;
    float **bufs;   /* 5 per rank: q, k, v, o, lse */
    int64_t **rows; /* global row of each local row */
    int64_t *ntok;
    int32_t n;
} rank_io_t;

static void rank_io_free(rank_io_t *r)
{
    for (int32_t i = 0; r->bufs && i < 5 * r->n; i++) free(r->bufs[i]);
    for (int32_t i = 0; r->rows && i < r->n; i++) free(r->rows[i]);
    free(r->io);
    free(r->bufs);
    free(r->rows);
    free(r->ntok);
}

static dcp_status_t rank_io_build(const dcp_harness_t *h, const dcp_plan_t *plan, rank_io_t *r)
{
    dcp_plan_stats_t ps;
    DCP_CHECK(dcp_plan_get_stats(plan, &ps));
    r->n = ps.num_ranks;
    int64_t *seq_start = NULL;
    dcp_token_span_t *spans = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&r->io, r->n, sizeof *r->io, "harness"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&r->bufs, 5 * r->n, sizeof *r->bufs, "harness"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&r->rows, r->n, sizeof *r->rows, "harness"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&r->ntok, r->n, sizeof *r->ntok, "harness"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&seq_start, h->num_seqs, sizeof *seq_start, "harness"), st, out);
    for (int32_t s = 1; s < h->num_seqs; s++) seq_start[s] = seq_start[s - 1] + h->lengths[s - 1];
    const int64_t hq = h->shape.num_heads, hkv = h->shape.num_kv_heads, d = h->shape.head_dim;
    for (int32_t rank = 0; rank < r->n; rank++) {
        int32_t nspans;
        DCP_CHECK_GOTO(dcp_plan_local_layout(plan, rank, NULL, 0, &nspans, &r->ntok[rank]), st,
                       out);
        free(spans);
        spans = NULL;
        DCP_CHECK_GOTO(dcp_calloc(&spans, nspans, sizeof *spans, "harness"), st, out);
        DCP_CHECK_GOTO(dcp_plan_local_layout(plan, rank, spans, nspans, NULL, NULL), st, out);
        const int64_t nt = r->ntok[rank];
        const int64_t widths[5] = {hq * d, hkv * d, hkv * d, hq * d, hq};
        for (int j = 0; j < 5; j++)
            DCP_CHECK_GOTO(
                dcp_calloc(&r->bufs[5 * rank + j], nt * widths[j], sizeof(float), "rank tensors"),
                st, out);
        DCP_CHECK_GOTO(dcp_calloc(&r->rows[rank], nt, sizeof(int64_t), "harness"), st, out);
        int64_t row = 0;
        for (int32_t i = 0; i < nspans; i++)
            for (int32_t t = 0; t < spans[i].len; t++)
                r->rows[rank][row++] = seq_start[spans[i].seq] + spans[i].start + t;
        const float *src[3] = {h->q, h->k, h->v};
        for (int64_t i = 0; i < nt; i++)
            for (int j = 0; j < 3; j++)
                memcpy(r->bufs[5 * rank + j] + i * widths[j], src[j] + r->rows[rank][i] * widths[j],
                       (size_t)widths[j] * sizeof(float));
        r->io[rank] =
            (dcp_tensors_t){r->bufs[5 * rank], r->bufs[5 * rank + 1], r->bufs[5 * rank + 2],
                            r->bufs[5 * rank + 3], r->bufs[5 * rank + 4]};
    }
    st = DCP_OK;
out:
    free(seq_start);
    free(spans);
    return st;
}

/* Outputs are poisoned with NaN before every run, so an unwritten element cannot pass. */
static void poison(const dcp_harness_t *h, rank_io_t *r)
{
    const int64_t hq = h->shape.num_heads, d = h->shape.head_dim;
    for (int32_t rank = 0; rank < r->n; rank++) {
        for (int64_t i = 0; i < r->ntok[rank] * hq * d; i++) r->bufs[5 * rank + 3][i] = NAN;
        for (int64_t i = 0; i < r->ntok[rank] * hq; i++) r->bufs[5 * rank + 4][i] = NAN;
    }
}

static void compare(const dcp_harness_t *h, const rank_io_t *r, double tol,
                    dcp_harness_result_t *res)
{
    const int64_t hq = h->shape.num_heads, d = h->shape.head_dim;
    double ref_max = 0;
    for (int64_t i = 0; i < h->tokens * hq * d; i++)
        if (fabs(h->ref_o[i]) > ref_max) ref_max = fabs(h->ref_o[i]);
    for (int32_t rank = 0; rank < r->n; rank++)
        for (int64_t i = 0; i < r->ntok[rank]; i++) {
            const int64_t g = r->rows[rank][i];
            for (int64_t hh = 0; hh < hq; hh++) {
                const double lref = h->ref_lse[g * hq + hh];
                const double l = r->bufs[5 * rank + 4][i * hq + hh];
                if (isnan(l) || isinf(lref) != isinf(l) || (isinf(l) && l > 0)) {
                    res->bad_values++;
                } else if (!isinf(lref)) {
                    const double e = fabs(l - lref) / fmax(1.0, fabs(lref));
                    if (e > res->max_lse_err) res->max_lse_err = e;
                }
                for (int64_t x = 0; x < d; x++) {
                    const double o = r->bufs[5 * rank + 3][(i * hq + hh) * d + x];
                    const double oref = h->ref_o[(g * hq + hh) * d + x];
                    if (isnan(o)) {
                        res->bad_values++;
                        continue;
                    }
                    if (fabs(o - oref) > res->max_abs_err) res->max_abs_err = fabs(o - oref);
                }
            }
        }
    res->max_rel_err = ref_max > 0 ? res->max_abs_err / ref_max : res->max_abs_err;
    res->passed = res->bad_values == 0 && res->max_rel_err <= tol && res->max_lse_err <= tol;
}

/* FNV-1a over the output bytes of every rank, in rank order. */
static uint64_t digest(const dcp_harness_t *h, const rank_io_t *r)
{
    uint64_t x = 0xcbf29ce484222325ull;
    const int64_t hq = h->shape.num_heads, d = h->shape.head_dim;
    for (int32_t rank = 0; rank < r->n; rank++)
        for (int j = 3; j < 5; j++) {
            const unsigned char *b = (const unsigned char *)r->bufs[5 * rank + j];
            const int64_t n = r->ntok[rank] * hq * (j == 3 ? d : 1) * (int64_t)sizeof(float);
            for (int64_t i = 0; i < n; i++) x = (x ^ b[i]) * 0x100000001b3ull;
        }
    return x;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

dcp_status_t dcp_harness_run(const dcp_harness_t *h, const dcp_plan_t *plan, int32_t warmup,
                             int32_t iters, double timeout_s, double tol,
                             dcp_harness_result_t *result_out)
{
    if (iters < 1) iters = 1;
    rank_io_t r = {0};
    double *times = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(rank_io_build(h, plan, &r), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&times, iters, sizeof *times, "harness"), st, out);
    for (int32_t i = 0; i < warmup + iters; i++) {
        poison(h, &r);
        const double t0 = dcp_now();
        DCP_CHECK_GOTO(dcp_forward_inproc(plan, r.io, timeout_s), st, out);
        if (i >= warmup) times[i - warmup] = (dcp_now() - t0) * 1e3;
    }
    qsort(times, (size_t)iters, sizeof *times, cmp_double);
    dcp_harness_result_t res = {0};
    res.exec_ms = times[iters / 2];
    res.digest = digest(h, &r);
    if (h->ref_o) compare(h, &r, tol, &res);
    *result_out = res;
out:
    free(times);
    rank_io_free(&r);
    return st;
}
