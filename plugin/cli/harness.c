#include "plugin/cli/harness.h"

#include "include/base/error.h"
#include "include/base/half.h"
#include "kernels/cuda/device.h"
#include "kernels/reference.h"
#include "plugin/cli/report.h"
#include "plugin/cli/rng.h"
#include "plugin/context.h"
#include "transport/bootstrap.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void dcp_harness_destroy(dcp_harness_t *h)
{
    if (!h) return;
    free(h->lengths);
    free(h->masks);
    free(h->seq_start);
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->ref_o);
    free(h->ref_lse);
    free(h->low_o);
    free(h->ref_done);
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
    DCP_CHECK_GOTO(dcp_calloc(&h->seq_start, num_seqs, sizeof *h->seq_start, "harness"), st, err);
    memcpy(h->lengths, lengths, (size_t)num_seqs * sizeof *lengths);
    memcpy(h->masks, masks, (size_t)num_seqs * sizeof *masks);
    for (int32_t s = 0; s < num_seqs; s++) {
        h->seq_start[s] = h->tokens;
        h->tokens += lengths[s];
    }
    const int64_t nq = h->tokens * shape->num_heads * shape->head_dim;
    const int64_t nkv = h->tokens * shape->num_kv_heads * shape->head_dim;
    DCP_CHECK_GOTO(dcp_calloc(&h->q, nq, sizeof(float), "harness Q"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&h->k, nkv, sizeof(float), "harness K"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&h->v, nkv, sizeof(float), "harness V"), st, err);
    dcp_rng_t rng = {seed};
    for (int64_t i = 0; i < nq; i++) h->q[i] = (float)dcp_rng_normal(&rng);
    for (int64_t i = 0; i < nkv; i++) h->k[i] = (float)dcp_rng_normal(&rng);
    for (int64_t i = 0; i < nkv; i++) h->v[i] = (float)dcp_rng_normal(&rng);
    /* inputs exactly representable in the plan dtype: the reference sees what the GPU sees */
    for (int64_t i = 0; i < nq; i++) h->q[i] = dcp_round_to(shape->dtype, h->q[i]);
    for (int64_t i = 0; i < nkv; i++) h->k[i] = dcp_round_to(shape->dtype, h->k[i]);
    for (int64_t i = 0; i < nkv; i++) h->v[i] = dcp_round_to(shape->dtype, h->v[i]);
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

/* The sequences with rows on `rank` of `plan`, marked in want[]. */
static dcp_status_t seqs_of_rank(const dcp_plan_t *plan, int32_t rank, uint8_t *want)
{
    int32_t nspans;
    DCP_CHECK(dcp_plan_local_layout(plan, rank, NULL, 0, &nspans, NULL));
    dcp_token_span_t *spans = NULL;
    DCP_CHECK(dcp_calloc(&spans, nspans, sizeof *spans, "harness"));
    const dcp_status_t st = dcp_plan_local_layout(plan, rank, spans, nspans, NULL, NULL);
    for (int32_t i = 0; st == DCP_OK && i < nspans; i++) want[spans[i].seq] = 1;
    free(spans);
    return st;
}

dcp_status_t dcp_harness_reference(dcp_harness_t *h, int32_t threads, const dcp_plan_t *plan,
                                   int32_t rank)
{
    const int64_t hq = h->shape.num_heads, d = h->shape.head_dim, hkv = h->shape.num_kv_heads;
    if (!h->ref_o) {
        DCP_CHECK(dcp_calloc(&h->ref_o, h->tokens * hq * d, sizeof(double), "reference O"));
        DCP_CHECK(dcp_calloc(&h->ref_lse, h->tokens * hq, sizeof(double), "reference LSE"));
        DCP_CHECK(dcp_calloc(&h->ref_done, h->num_seqs, 1, "reference"));
        if (h->shape.dtype != DCP_DTYPE_FP32)
            DCP_CHECK(dcp_calloc(&h->low_o, h->tokens * hq * d, sizeof(float), "plain O"));
    }
    uint8_t *want = NULL;
    DCP_CHECK(dcp_calloc(&want, h->num_seqs, 1, "reference"));
    dcp_status_t st = DCP_OK;
    if (plan)
        st = seqs_of_rank(plan, rank, want);
    else
        memset(want, 1, (size_t)h->num_seqs);
    dcp_seq_info_t *seqs = NULL;
    if (st == DCP_OK) st = dcp_calloc(&seqs, h->num_seqs, sizeof *seqs, "reference");
    /* runs of consecutive sequences still to do, one call each (a sequence's reference
     * depends on it alone) */
    for (int32_t s = 0; st == DCP_OK && s < h->num_seqs;) {
        int32_t e = s;
        while (e < h->num_seqs && want[e] && !h->ref_done[e]) {
            seqs[e - s] = (dcp_seq_info_t){h->lengths[e], h->masks[e]};
            e++;
        }
        if (e == s) {
            s++;
            continue;
        }
        const int64_t t = h->seq_start[s];
        st = dcp_reference_attention(seqs, e - s, &h->shape, h->q + t * hq * d, h->k + t * hkv * d,
                                     h->v + t * hkv * d, h->ref_o + t * hq * d, h->ref_lse + t * hq,
                                     h->low_o ? h->low_o + t * hq * d : NULL, threads);
        if (st == DCP_OK) memset(h->ref_done + s, 1, (size_t)(e - s));
        s = e;
    }
    free(seqs);
    free(want);
    return st;
}

/* Per-rank tensors of ranks [lo, hi), and where each local row comes from in the batch. */
typedef struct {
    dcp_tensors_t *io;
    float **bufs;   /* 5 per rank: q, k, v, o, lse (host, fp32) */
    void **store;   /* 5 per rank: the same in the plan dtype (lse fp32) where the rank
                       computes: device memory on a GPU, host memory for 2-byte types on the
                       CPU; NULL where the fp32 host buffers serve directly */
    int32_t *gpu;   /* each rank's GPU, -1: the CPU */
    int64_t **rows; /* global row of each local row */
    int64_t *ntok;
    int32_t n, lo, hi;
    int64_t width[5]; /* elements per row of q, k, v, o, lse */
    dcp_dtype_t dtype;
} rank_io_t;

static void rank_io_free(rank_io_t *r)
{
    for (int32_t i = 0; r->store && i < 5 * r->n; i++) dcp_mem_free(r->gpu[i / 5], r->store[i]);
    free(r->store);
    free(r->gpu);
    for (int32_t i = 0; r->bufs && i < 5 * r->n; i++) free(r->bufs[i]);
    for (int32_t i = 0; r->rows && i < r->n; i++) free(r->rows[i]);
    free(r->io);
    free(r->bufs);
    free(r->rows);
    free(r->ntok);
}

static dcp_status_t rank_io_fill(const dcp_harness_t *h, const dcp_plan_t *plan, rank_io_t *r,
                                 int32_t rank)
{
    int32_t nspans;
    DCP_CHECK(dcp_plan_local_layout(plan, rank, NULL, 0, &nspans, &r->ntok[rank]));
    dcp_token_span_t *spans = NULL;
    DCP_CHECK(dcp_calloc(&spans, nspans, sizeof *spans, "harness"));
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_plan_local_layout(plan, rank, spans, nspans, NULL, NULL), st, out);
    const int64_t nt = r->ntok[rank], *widths = r->width;
    for (int j = 0; j < 5; j++)
        DCP_CHECK_GOTO(
            dcp_calloc(&r->bufs[5 * rank + j], nt * widths[j], sizeof(float), "rank tensors"), st,
            out);
    DCP_CHECK_GOTO(dcp_calloc(&r->rows[rank], nt, sizeof(int64_t), "harness"), st, out);
    int64_t row = 0;
    for (int32_t i = 0; i < nspans; i++)
        for (int32_t t = 0; t < spans[i].len; t++)
            r->rows[rank][row++] = h->seq_start[spans[i].seq] + spans[i].start + t;
    const float *src[3] = {h->q, h->k, h->v};
    for (int64_t i = 0; i < nt; i++)
        for (int j = 0; j < 3; j++)
            memcpy(r->bufs[5 * rank + j] + i * widths[j], src[j] + r->rows[rank][i] * widths[j],
                   (size_t)widths[j] * sizeof(float));
    float **b = &r->bufs[5 * rank];
    r->io[rank] = (dcp_tensors_t){b[0], b[1], b[2], b[3], b[4]};
out:
    free(spans);
    return st;
}

/* Tensor j of a rank (q, k, v, o, lse) is buffer DCP_BUF_Q + j of the kernels. */
static size_t elem_bytes(const rank_io_t *r, int j)
{
    return (size_t)dcp_buf_elem_bytes(DCP_BUF_Q + j, r->dtype);
}

/* bytes between host memory and a rank's store (device memory on a GPU). */
static dcp_status_t copy_bytes(const rank_io_t *r, int32_t rank, void *dst, const void *src,
                               size_t bytes)
{
    if (r->gpu[rank] >= 0) return dcp_cuda_memcpy(dst, src, bytes, NULL);
    if (bytes) memcpy(dst, src, bytes);
    return DCP_OK;
}

/* Host tensor j of a rank into its store (2-byte types packed on the way), or back. */
static dcp_status_t move(rank_io_t *r, int32_t rank, int j, int to_store)
{
    const int64_t n = r->ntok[rank] * r->width[j];
    float *host = r->bufs[5 * rank + j];
    void *st_buf = r->store[5 * rank + j];
    if (elem_bytes(r, j) == 4)
        return to_store ? copy_bytes(r, rank, st_buf, host, (size_t)n * 4)
                        : copy_bytes(r, rank, host, st_buf, (size_t)n * 4);
    uint16_t *tmp;
    DCP_CHECK(dcp_calloc(&tmp, n, sizeof *tmp, "harness staging"));
    if (to_store) dcp_pack_half(r->dtype, host, tmp, n);
    dcp_status_t st = to_store ? copy_bytes(r, rank, st_buf, tmp, (size_t)n * 2)
                               : copy_bytes(r, rank, tmp, st_buf, (size_t)n * 2);
    if (st == DCP_OK && !to_store) dcp_unpack_half(r->dtype, tmp, host, n);
    free(tmp);
    return st;
}

/* A rank on a GPU, or with 2-byte storage, gets its tensors in the plan dtype where it
 * computes; io points at them. */
static dcp_status_t rank_io_to_store(rank_io_t *r, int32_t rank)
{
    void **d = &r->store[5 * rank];
    const int gpu = r->gpu[rank];
    for (int j = 0; j < 5; j++) {
        const size_t bytes = (size_t)(r->ntok[rank] * r->width[j]) * elem_bytes(r, j);
        if (!(d[j] = dcp_mem_alloc(gpu, bytes ? bytes : 16)))
            return dcp_set_error(DCP_ERR_NO_MEMORY, "harness: %zu bytes on %s %d", bytes,
                                 gpu >= 0 ? "GPU" : "rank", gpu >= 0 ? gpu : rank);
        if (j < 3) DCP_CHECK(move(r, rank, j, 1));
    }
    r->io[rank] = (dcp_tensors_t){d[0], d[1], d[2], d[3], d[4]};
    return DCP_OK;
}

static int has_store(const rank_io_t *r, int32_t rank)
{
    return r->gpu[rank] >= 0 || r->dtype != DCP_DTYPE_FP32;
}

/* Tensors of ranks [lo, hi): on `device` as the contexts place in-process ranks, or, for
 * this process's rank of a job, on job_gpu (-1: the CPU). */
static dcp_status_t rank_io_build(const dcp_harness_t *h, const dcp_plan_t *plan, int32_t lo,
                                  int32_t hi, const char *device, int32_t job_gpu, rank_io_t *r)
{
    dcp_plan_stats_t ps;
    DCP_CHECK(dcp_plan_get_stats(plan, &ps));
    if (lo < 0 || hi > ps.num_ranks || lo >= hi)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "harness: ranks [%d, %d) of a %d-rank plan", lo,
                             hi, ps.num_ranks);
    r->n = ps.num_ranks;
    r->lo = lo;
    r->hi = hi;
    DCP_CHECK(dcp_calloc(&r->io, r->n, sizeof *r->io, "harness"));
    DCP_CHECK(dcp_calloc(&r->bufs, 5 * r->n, sizeof *r->bufs, "harness"));
    DCP_CHECK(dcp_calloc(&r->rows, r->n, sizeof *r->rows, "harness"));
    DCP_CHECK(dcp_calloc(&r->ntok, r->n, sizeof *r->ntok, "harness"));
    DCP_CHECK(dcp_calloc(&r->store, 5 * r->n, sizeof *r->store, "harness"));
    DCP_CHECK(dcp_calloc(&r->gpu, r->n, sizeof *r->gpu, "harness"));
    const int64_t hq = h->shape.num_heads, hkv = h->shape.num_kv_heads, d = h->shape.head_dim;
    const int64_t widths[5] = {hq * d, hkv * d, hkv * d, hq * d, hq};
    memcpy(r->width, widths, sizeof widths);
    r->dtype = h->shape.dtype;
    for (int32_t rank = lo; rank < hi; rank++) {
        DCP_CHECK(rank_io_fill(h, plan, r, rank));
        if (job_gpu >= 0)
            r->gpu[rank] = job_gpu;
        else
            DCP_CHECK(dcp_context_parse_device(device, rank, &r->gpu[rank]));
        if (has_store(r, rank)) DCP_CHECK(rank_io_to_store(r, rank));
    }
    return DCP_OK;
}

/* Outputs are poisoned with NaN before every run, so an unwritten element cannot pass. */
static dcp_status_t poison(const dcp_harness_t *h, rank_io_t *r)
{
    const int64_t hq = h->shape.num_heads, d = h->shape.head_dim;
    for (int32_t rank = r->lo; rank < r->hi; rank++) {
        for (int64_t i = 0; i < r->ntok[rank] * hq * d; i++) r->bufs[5 * rank + 3][i] = NAN;
        for (int64_t i = 0; i < r->ntok[rank] * hq; i++) r->bufs[5 * rank + 4][i] = NAN;
        if (!has_store(r, rank)) continue;
        DCP_CHECK(move(r, rank, 3, 1));
        DCP_CHECK(move(r, rank, 4, 1));
    }
    return DCP_OK;
}

/* The outputs of ranks with a store back in the host buffers the checks read. */
static dcp_status_t fetch(rank_io_t *r)
{
    for (int32_t rank = r->lo; rank < r->hi; rank++) {
        if (!has_store(r, rank)) continue;
        DCP_CHECK(move(r, rank, 3, 0));
        DCP_CHECK(move(r, rank, 4, 0));
    }
    return DCP_OK;
}

/* What one rank's outputs show; reduced over the ranks into a result. */
typedef struct {
    double max_abs, ref_max, max_lse, low_abs;
    int64_t bad;
    uint64_t digest; /* FNV-1a over the rank's O then LSE bytes */
    int32_t checked;
} rank_check_t;

static void check_rank(const dcp_harness_t *h, const rank_io_t *r, int32_t rank, rank_check_t *c)
{
    const int64_t hq = h->shape.num_heads, d = h->shape.head_dim;
    const float *out = r->bufs[5 * rank + 3], *lse = r->bufs[5 * rank + 4];
    uint64_t x = 0xcbf29ce484222325ull;
    for (int j = 0; j < 2; j++) {
        const unsigned char *b = (const unsigned char *)(j == 0 ? out : lse);
        const int64_t n = r->ntok[rank] * hq * (j == 0 ? d : 1) * (int64_t)sizeof(float);
        for (int64_t i = 0; i < n; i++) x = (x ^ b[i]) * 0x100000001b3ull;
    }
    *c = (rank_check_t){.digest = x, .checked = h->ref_o != NULL};
    if (!h->ref_o) return;
    for (int64_t i = 0; i < r->ntok[rank]; i++) {
        const int64_t g = r->rows[rank][i];
        for (int64_t hh = 0; hh < hq; hh++) {
            const double lref = h->ref_lse[g * hq + hh];
            const double l = lse[i * hq + hh];
            if (isnan(l) || isinf(lref) != isinf(l) || (isinf(l) && l > 0)) {
                c->bad++;
            } else if (!isinf(lref)) {
                c->max_lse = fmax(c->max_lse, fabs(l - lref) / fmax(1.0, fabs(lref)));
            }
            for (int64_t e = 0; e < d; e++) {
                const double o = out[(i * hq + hh) * d + e];
                const double oref = h->ref_o[(g * hq + hh) * d + e];
                c->ref_max = fmax(c->ref_max, fabs(oref));
                if (isnan(o))
                    c->bad++;
                else
                    c->max_abs = fmax(c->max_abs, fabs(o - oref));
                if (h->low_o)
                    c->low_abs = fmax(c->low_abs, fabs(h->low_o[(g * hq + hh) * d + e] - oref));
            }
        }
    }
}

/* The result of all ranks' checks, in rank order. */
static void reduce(const rank_check_t *c, int32_t n, double tol, dcp_dtype_t dtype,
                   dcp_harness_result_t *res)
{
    double ref_max = 0;
    uint64_t x = 0xcbf29ce484222325ull;
    for (int32_t r = 0; r < n; r++) {
        res->max_abs_err = fmax(res->max_abs_err, c[r].max_abs);
        res->max_lse_err = fmax(res->max_lse_err, c[r].max_lse);
        res->bad_values += c[r].bad;
        res->low_abs_err = fmax(res->low_abs_err, c[r].low_abs);
        ref_max = fmax(ref_max, c[r].ref_max);
        for (int b = 0; b < 8; b++) x = (x ^ ((c[r].digest >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    }
    res->digest = x;
    res->max_rel_err = ref_max > 0 ? res->max_abs_err / ref_max : res->max_abs_err;
    if (dtype == DCP_DTYPE_FP32) {
        res->passed = c[0].checked && res->bad_values == 0 && res->max_rel_err <= tol &&
                      res->max_lse_err <= tol;
        return;
    }
    res->passed =
        c[0].checked && res->bad_values == 0 &&
        dcp_lowp_rule_holds(dtype, res->max_abs_err, res->low_abs_err, ref_max, res->max_lse_err);
}

dcp_status_t dcp_harness_run(const dcp_harness_t *h, const dcp_plan_t *plan, int32_t warmup,
                             int32_t iters, double timeout_s, double tol, const char *device,
                             dcp_harness_result_t *result_out)
{
    if (iters < 1) iters = 1;
    rank_io_t r = {0};
    double *times = NULL;
    rank_check_t *checks = NULL;
    dcp_status_t st;
    dcp_plan_stats_t ps;
    DCP_CHECK(dcp_plan_get_stats(plan, &ps));
    dcp_group_t *group = NULL;
    dcp_context_t **ctx = NULL; /* kept across the runs, as a training loop keeps them */
    DCP_CHECK_GOTO(rank_io_build(h, plan, 0, ps.num_ranks, device, -1, &r), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&times, iters, sizeof *times, "harness"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&checks, r.n, sizeof *checks, "harness"), st, out);
    DCP_CHECK_GOTO(dcp_inproc_contexts_create(r.n, timeout_s, device, &group, &ctx), st, out);
    for (int32_t i = 0; i < warmup + iters; i++) {
        DCP_CHECK_GOTO(poison(h, &r), st, out);
        const double t0 = dcp_now();
        DCP_CHECK_GOTO(dcp_forward_group(ctx, r.n, plan, r.io), st, out);
        if (i >= warmup) times[i - warmup] = (dcp_now() - t0) * 1e3;
    }
    DCP_CHECK_GOTO(fetch(&r), st, out);
    dcp_harness_result_t res = {0};
    res.exec_ms = dcp_median(times, iters);
    for (int32_t rank = 0; rank < r.n; rank++) check_rank(h, &r, rank, &checks[rank]);
    reduce(checks, r.n, tol, h->shape.dtype, &res);
    *result_out = res;
out:
    if (group) dcp_inproc_contexts_destroy(r.n, group, ctx);
    free(checks);
    free(times);
    rank_io_free(&r);
    return st;
}

dcp_status_t dcp_harness_run_rank(const dcp_harness_t *h, const dcp_plan_t *plan,
                                  dcp_context_t *ctx, const dcp_bootstrap_t *bootstrap,
                                  int32_t warmup, int32_t iters, double tol,
                                  dcp_harness_result_t *result_out)
{
    if (iters < 1) iters = 1;
    const int32_t me = bootstrap->rank;
    rank_io_t r = {0};
    double *times = NULL;
    rank_check_t *checks = NULL;
    dcp_status_t st = rank_io_build(h, plan, me, me + 1, NULL, ctx->device, &r);
    if (st == DCP_OK) st = dcp_calloc(&times, iters, sizeof *times, "harness");
    if (st == DCP_OK) st = dcp_calloc(&checks, bootstrap->size, sizeof *checks, "harness");
    DCP_CHECK_GOTO(dcp_bootstrap_agree(bootstrap, st, "harness set-up"), st, out);
    /* timed from a common start to the last rank's end; through the engine, which fails
     * on a dead peer where the bootstrap's collective would wait for ever */
    for (int32_t i = 0; i < warmup + iters; i++) {
        DCP_CHECK_GOTO(poison(h, &r), st, out);
        DCP_CHECK_GOTO(dcp_context_barrier(ctx), st, out);
        const double t0 = dcp_now();
        DCP_CHECK_GOTO(dcp_forward(ctx, plan, &r.io[me]), st, out);
        DCP_CHECK_GOTO(dcp_context_barrier(ctx), st, out);
        if (i >= warmup) times[i - warmup] = (dcp_now() - t0) * 1e3;
    }
    DCP_CHECK_GOTO(fetch(&r), st, out);
    rank_check_t mine;
    check_rank(h, &r, me, &mine);
    DCP_CHECK_GOTO(bootstrap->allgather(bootstrap->state, &mine, checks, sizeof mine), st, out);
    dcp_harness_result_t res = {0};
    res.exec_ms = dcp_median(times, iters);
    reduce(checks, bootstrap->size, tol, h->shape.dtype, &res);
    *result_out = res;
out:
    free(checks);
    free(times);
    rank_io_free(&r);
    return st;
}
