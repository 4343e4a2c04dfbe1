#include "plugin/cli/support/harness.h"

#include "include/base/error.h"
#include "include/base/half.h"
#include "include/base/shape.h"
#include "kernels/device.h"
#include "plugin/cli/support/reference.h"
#include "plugin/cli/support/report.h"
#include "plugin/cli/support/rng.h"
#include "plugin/context.h"
#include "transport/bootstrap.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dcpt_harness_destroy(dcpt_harness_t *h)
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
    free(h->dout);
    free(h->ref_dq);
    free(h->ref_dk);
    free(h->ref_dv);
    free(h->low_dq);
    free(h->low_dk);
    free(h->low_dv);
    free(h->sinks);
    free(h->ref_max_logit);
    free(h->ref_seq_max);
    free(h);
}

dcp_status_t dcpt_harness_create(const int32_t *lengths, int32_t num_seqs, const dcp_mask_t *masks,
                                 const dcp_attn_shape_t *shape, uint64_t seed,
                                 dcpt_harness_t **harness_out)
{
    dcpt_harness_t *h = NULL;
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
    const int64_t nv = h->tokens * shape->num_kv_heads * dcp_shape_dv(shape);
    DCP_CHECK_GOTO(dcp_calloc(&h->q, nq, sizeof(float), "harness Q"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&h->k, nkv, sizeof(float), "harness K"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&h->v, nv, sizeof(float), "harness V"), st, err);
    dcpt_rng_t rng = {seed};
    for (int64_t i = 0; i < nq; i++) h->q[i] = (float)dcpt_rng_normal(&rng);
    for (int64_t i = 0; i < nkv; i++) h->k[i] = (float)dcpt_rng_normal(&rng);
    for (int64_t i = 0; i < nv; i++) h->v[i] = (float)dcpt_rng_normal(&rng);
    /* inputs exactly representable in the plan dtype: the reference sees what the GPU sees */
    for (int64_t i = 0; i < nq; i++) h->q[i] = dcp_round_to(shape->dtype, h->q[i]);
    for (int64_t i = 0; i < nkv; i++) h->k[i] = dcp_round_to(shape->dtype, h->k[i]);
    for (int64_t i = 0; i < nv; i++) h->v[i] = dcp_round_to(shape->dtype, h->v[i]);
    *harness_out = h;
    return DCP_OK;
err:
    dcpt_harness_destroy(h);
    return st;
}

dcp_status_t dcpt_harness_enable_backward(dcpt_harness_t *h, uint64_t seed)
{
    if (h->dout) return DCP_OK;
    if (h->ref_o)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "harness: backward enabled after the reference");
    const int64_t nq = h->tokens * h->shape.num_heads * dcp_shape_dv(&h->shape); /* like O */
    DCP_CHECK(dcp_calloc(&h->dout, nq, sizeof(float), "harness dO"));
    dcpt_rng_t rng = {seed ^ 0x9E3779B97F4A7C15ull};
    for (int64_t i = 0; i < nq; i++)
        h->dout[i] = dcp_round_to(h->shape.dtype, (float)dcpt_rng_normal(&rng));
    return DCP_OK;
}

dcp_status_t dcpt_harness_enable_sinks(dcpt_harness_t *h, uint64_t seed)
{
    if (h->sinks) return DCP_OK;
    if (h->ref_o)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "harness: sinks enabled after the reference");
    DCP_CHECK(dcp_calloc(&h->sinks, h->shape.num_heads, sizeof(float), "harness sinks"));
    dcpt_rng_t rng = {seed ^ 0x5DEECE66Dull};
    for (int32_t i = 0; i < h->shape.num_heads; i++) h->sinks[i] = (float)dcpt_rng_normal(&rng);
    return DCP_OK;
}

dcp_status_t dcpt_harness_enable_max_logit(dcpt_harness_t *h)
{
    if (h->ref_o)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "harness: max logit enabled after the reference");
    h->max_logit = 1;
    return DCP_OK;
}

dcp_batch_t dcpt_harness_batch(const dcpt_harness_t *h)
{
    return (dcp_batch_t){.num_seqs = h->num_seqs, .lengths = h->lengths, .masks = h->masks};
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

dcp_status_t dcpt_harness_reference(dcpt_harness_t *h, int32_t threads, const dcp_plan_t *plan,
                                    int32_t rank)
{
    const int64_t hq = h->shape.num_heads, d = h->shape.head_dim, hkv = h->shape.num_kv_heads;
    const int64_t dv = dcp_shape_dv(&h->shape);
    if (!h->ref_o) {
        DCP_CHECK(dcp_calloc(&h->ref_o, h->tokens * hq * dv, sizeof(double), "reference O"));
        DCP_CHECK(dcp_calloc(&h->ref_lse, h->tokens * hq, sizeof(double), "reference LSE"));
        DCP_CHECK(dcp_calloc(&h->ref_done, h->num_seqs, 1, "reference"));
        if (h->max_logit) {
            DCP_CHECK(dcp_calloc(&h->ref_max_logit, hq, sizeof(double), "reference max logit"));
            DCP_CHECK(dcp_calloc(&h->ref_seq_max, h->num_seqs * hq, sizeof(double),
                                 "reference max logit"));
        }
        if (h->shape.dtype != DCP_DTYPE_FP32)
            DCP_CHECK(dcp_calloc(&h->low_o, h->tokens * hq * dv, sizeof(float), "plain O"));
        if (h->dout) {
            const int64_t nq = h->tokens * hq * d, nkv = h->tokens * hkv * d;
            const int64_t nv = h->tokens * hkv * dv;
            DCP_CHECK(dcp_calloc(&h->ref_dq, nq, sizeof(double), "reference dQ"));
            DCP_CHECK(dcp_calloc(&h->ref_dk, nkv, sizeof(double), "reference dK"));
            DCP_CHECK(dcp_calloc(&h->ref_dv, nv, sizeof(double), "reference dV"));
            if (h->shape.dtype != DCP_DTYPE_FP32) {
                DCP_CHECK(dcp_calloc(&h->low_dq, nq, sizeof(float), "plain dQ"));
                DCP_CHECK(dcp_calloc(&h->low_dk, nkv, sizeof(float), "plain dK"));
                DCP_CHECK(dcp_calloc(&h->low_dv, nv, sizeof(float), "plain dV"));
            }
        }
    }
    uint8_t *want = NULL;
    DCP_CHECK(dcp_calloc(&want, h->num_seqs, 1, "reference"));
    dcp_status_t st = DCP_OK;
    if (plan && !h->max_logit) /* the max logit is the whole batch's */
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
        const int64_t t = h->seq_start[s], qo = t * hq * d, ko = t * hkv * d;
        const int64_t oo = t * hq * dv, vo = t * hkv * dv; /* O, dO; V, dV */
        /* the run's max logit, kept by each of its sequences: the largest over sequences is
         * the batch's */
        const dcpt_ref_extra_t extra = {h->sinks, h->ref_seq_max ? h->ref_seq_max + s * hq : NULL,
                                        NULL};
        st = dcpt_reference_attention_x(seqs, e - s, &h->shape, h->q + qo, h->k + ko, h->v + vo,
                                        &extra, h->ref_o + oo, h->ref_lse + t * hq,
                                        h->low_o ? h->low_o + oo : NULL, threads);
        for (int32_t x = s + 1; st == DCP_OK && h->ref_seq_max && x < e; x++)
            memcpy(h->ref_seq_max + x * hq, h->ref_seq_max + s * hq, (size_t)hq * sizeof(double));
        if (st == DCP_OK && h->dout)
            st = dcpt_reference_backward_x(
                seqs, e - s, &h->shape, h->q + qo, h->k + ko, h->v + vo, h->dout + oo, &extra,
                h->ref_dq + qo, h->ref_dk + ko, h->ref_dv + vo, h->low_dq ? h->low_dq + qo : NULL,
                h->low_dk ? h->low_dk + ko : NULL, h->low_dv ? h->low_dv + vo : NULL, threads);
        if (st == DCP_OK) memset(h->ref_done + s, 1, (size_t)(e - s));
        s = e;
    }
    for (int64_t x = 0; st == DCP_OK && h->ref_max_logit && x < hq; x++) {
        h->ref_max_logit[x] = -INFINITY;
        for (int32_t q = 0; q < h->num_seqs; q++)
            h->ref_max_logit[x] = fmax(h->ref_max_logit[x], h->ref_seq_max[q * hq + x]);
    }
    free(seqs);
    free(want);
    return st;
}

/* A rank's tensors: tensor j is buffer DCP_BUF_Q + j of the kernels (q, k, v, o, lse, dout,
 * dq, dk, dv). The forward reads 0-2 and writes 3-4; the backward reads 0-5, writes 6-8. */
enum { T_O = 3, T_LSE = 4, T_DO = 5, T_DQ = 6, NT = 9 };

static int is_output(int j)
{
    return j == T_O || j == T_LSE || j >= T_DQ;
}

/* Per-rank tensors of ranks [lo, hi), and where each local row comes from in the batch. */
typedef struct {
    dcp_tensors_t *io;
    dcp_grad_tensors_t *gio;
    float **bufs;   /* NT per rank (host, fp32) */
    void **store;   /* NT per rank: the same in the plan dtype (lse fp32) where the rank
                       computes: device memory on a GPU, host memory for 2-byte types on the
                       CPU; NULL where the fp32 host buffers serve directly */
    int32_t *gpu;   /* each rank's GPU, -1: the CPU */
    int64_t **rows; /* global row of each local row */
    int64_t *ntok;
    int32_t n, lo, hi;
    int nt;            /* tensors in use: 5 (forward only) or NT */
    int64_t width[NT]; /* elements per row of each tensor */
    dcp_dtype_t dtype;
    /* the variants' per-head tensors, V_NUM per rank (sinks, max logit, dsinks: Hq fp32
     * each; NULL where not in use): host, and on the rank's GPU (NULL on the CPU) */
    float **vhost, **vdev;
    int32_t heads;
} rank_io_t;

enum { V_SINKS = 0, V_MAX = 1, V_DSINKS = 2, V_NUM = 3 };

static void rank_io_free(rank_io_t *r)
{
    for (int32_t i = 0; r->vhost && i < V_NUM * r->n; i++) {
        free(r->vhost[i]);
        if (r->vdev && r->vdev[i]) dcp_device_of(r->gpu[i / V_NUM])->free(r->vdev[i]);
    }
    free(r->vhost);
    free(r->vdev);
    for (int32_t i = 0; r->store && r->gpu && i < NT * r->n; i++)
        dcp_device_of(r->gpu[i / NT])->free(r->store[i]);
    free(r->store);
    free(r->gpu);
    for (int32_t i = 0; r->bufs && i < NT * r->n; i++) free(r->bufs[i]);
    for (int32_t i = 0; r->rows && i < r->n; i++) free(r->rows[i]);
    free(r->io);
    free(r->gio);
    free(r->bufs);
    free(r->rows);
    free(r->ntok);
}

static dcp_status_t rank_io_fill(const dcpt_harness_t *h, const dcp_plan_t *plan, rank_io_t *r,
                                 int32_t rank)
{
    int32_t nspans;
    DCP_CHECK(dcp_plan_local_layout(plan, rank, NULL, 0, &nspans, &r->ntok[rank]));
    dcp_token_span_t *spans = NULL;
    DCP_CHECK(dcp_calloc(&spans, nspans, sizeof *spans, "harness"));
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_plan_local_layout(plan, rank, spans, nspans, NULL, NULL), st, out);
    const int64_t nt = r->ntok[rank], *widths = r->width;
    for (int j = 0; j < r->nt; j++)
        DCP_CHECK_GOTO(
            dcp_calloc(&r->bufs[NT * rank + j], nt * widths[j], sizeof(float), "rank tensors"), st,
            out);
    DCP_CHECK_GOTO(dcp_calloc(&r->rows[rank], nt, sizeof(int64_t), "harness"), st, out);
    int64_t row = 0;
    for (int32_t i = 0; i < nspans; i++)
        for (int32_t t = 0; t < spans[i].len; t++)
            r->rows[rank][row++] = h->seq_start[spans[i].seq] + spans[i].start + t;
    const float *src[NT] = {h->q, h->k, h->v, [T_DO] = h->dout};
    for (int64_t i = 0; i < nt; i++)
        for (int j = 0; j < r->nt; j++)
            if (src[j])
                memcpy(r->bufs[NT * rank + j] + i * widths[j],
                       src[j] + r->rows[rank][i] * widths[j], (size_t)widths[j] * sizeof(float));
    r->io[rank] =
        (dcp_tensors_t){r->bufs[NT * rank],     r->bufs[NT * rank + 1], r->bufs[NT * rank + 2],
                        r->bufs[NT * rank + 3], r->bufs[NT * rank + 4], 0.0f};
    float **b = &r->bufs[NT * rank];
    r->gio[rank] = (dcp_grad_tensors_t){r->io[rank], b[5], b[6], b[7], b[8]};
out:
    free(spans);
    return st;
}

/* Bytes per element of tensor j in the plan dtype. */
static size_t elem_bytes(const rank_io_t *r, int j)
{
    return (size_t)dcp_buf_elem_bytes(DCP_BUF_Q + j, r->dtype);
}

/* bytes between host memory and a rank's store (device memory on a GPU). */
static dcp_status_t copy_bytes(const rank_io_t *r, int32_t rank, void *dst, const void *src,
                               size_t bytes)
{
    const dcp_device_t *dev = dcp_device_of(r->gpu[rank]);
    DCP_CHECK(dev->copy(dst, src, bytes, NULL));
    return dev->stream_sync(NULL);
}

/* Host tensor j of a rank into its store (2-byte types packed on the way), or back. */
static dcp_status_t move(rank_io_t *r, int32_t rank, int j, int to_store)
{
    const int64_t n = r->ntok[rank] * r->width[j];
    float *host = r->bufs[NT * rank + j];
    void *st_buf = r->store[NT * rank + j];
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
    void **d = &r->store[NT * rank];
    const int gpu = r->gpu[rank];
    for (int j = 0; j < r->nt; j++) {
        const size_t bytes = (size_t)(r->ntok[rank] * r->width[j]) * elem_bytes(r, j);
        if (!(d[j] = dcp_device_of(gpu)->alloc(gpu, bytes ? bytes : 16)))
            return dcp_set_error(DCP_ERR_NO_MEMORY, "harness: %zu bytes on %s %d", bytes,
                                 gpu >= 0 ? "GPU" : "rank", gpu >= 0 ? gpu : rank);
        if (!is_output(j)) DCP_CHECK(move(r, rank, j, 1));
    }
    r->io[rank] = (dcp_tensors_t){d[0], d[1], d[2], d[3], d[4], 0.0f};
    r->gio[rank] = (dcp_grad_tensors_t){r->io[rank], d[5], d[6], d[7], d[8]};
    return DCP_OK;
}

static int has_store(const rank_io_t *r, int32_t rank)
{
    return r->gpu[rank] >= 0 || r->dtype != DCP_DTYPE_FP32;
}

/* Variant tensor v of a rank where it computes: the GPU copy, or the host one. */
static float *var_at(const rank_io_t *r, int32_t rank, int v)
{
    return r->vdev[V_NUM * rank + v] ? r->vdev[V_NUM * rank + v] : r->vhost[V_NUM * rank + v];
}

/* Variant tensor v of a rank between host and GPU (a no-op on the CPU). */
static dcp_status_t var_move(rank_io_t *r, int32_t rank, int v, int to_dev)
{
    float *host = r->vhost[V_NUM * rank + v], *dev = r->vdev[V_NUM * rank + v];
    if (!host || !dev) return DCP_OK;
    const size_t bytes = (size_t)r->heads * sizeof(float);
    return to_dev ? copy_bytes(r, rank, dev, host, bytes) : copy_bytes(r, rank, host, dev, bytes);
}

/* The variants a harness asks for, on a rank: its sinks (and their gradient with a backward),
 * its max logit; io and gio point at them. */
static dcp_status_t rank_io_variants(const dcpt_harness_t *h, rank_io_t *r, int32_t rank)
{
    const int want[V_NUM] = {h->sinks != NULL, h->max_logit, h->sinks && h->dout};
    const int gpu = r->gpu[rank];
    for (int v = 0; v < V_NUM; v++) {
        if (!want[v]) continue;
        float **host = &r->vhost[V_NUM * rank + v];
        DCP_CHECK(dcp_calloc(host, r->heads, sizeof(float), "harness variants"));
        if (v == V_SINKS) memcpy(*host, h->sinks, (size_t)r->heads * sizeof(float));
        if (gpu < 0) continue;
        if (!(r->vdev[V_NUM * rank + v] =
                  dcp_device_of(gpu)->alloc(gpu, (size_t)r->heads * sizeof(float))))
            return dcp_set_error(DCP_ERR_NO_MEMORY, "harness: variants on GPU %d", gpu);
        if (v == V_SINKS) DCP_CHECK(var_move(r, rank, v, 1));
    }
    dcp_tensors_t *io = &r->io[rank];
    io->sinks = want[V_SINKS] ? var_at(r, rank, V_SINKS) : NULL;
    io->max_logit = want[V_MAX] ? var_at(r, rank, V_MAX) : NULL;
    r->gio[rank].fwd = *io;
    r->gio[rank].dsinks = want[V_DSINKS] ? var_at(r, rank, V_DSINKS) : NULL;
    return DCP_OK;
}

/* Tensors of ranks [lo, hi): on `device` as the contexts place in-process ranks, or, for
 * this process's rank of a job, on job_gpu (-1: the CPU). */
static dcp_status_t rank_io_build(const dcpt_harness_t *h, const dcp_plan_t *plan, int32_t lo,
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
    DCP_CHECK(dcp_calloc(&r->gio, r->n, sizeof *r->gio, "harness"));
    DCP_CHECK(dcp_calloc(&r->bufs, NT * r->n, sizeof *r->bufs, "harness"));
    DCP_CHECK(dcp_calloc(&r->rows, r->n, sizeof *r->rows, "harness"));
    DCP_CHECK(dcp_calloc(&r->ntok, r->n, sizeof *r->ntok, "harness"));
    DCP_CHECK(dcp_calloc(&r->store, NT * r->n, sizeof *r->store, "harness"));
    DCP_CHECK(dcp_calloc(&r->gpu, r->n, sizeof *r->gpu, "harness"));
    DCP_CHECK(dcp_calloc(&r->vhost, V_NUM * r->n, sizeof *r->vhost, "harness"));
    DCP_CHECK(dcp_calloc(&r->vdev, V_NUM * r->n, sizeof *r->vdev, "harness"));
    r->heads = h->shape.num_heads;
    const int64_t hq = h->shape.num_heads, hkv = h->shape.num_kv_heads, d = h->shape.head_dim;
    const int64_t dv = dcp_shape_dv(&h->shape);
    const int64_t widths[NT] = {hq * d,  hkv * d, hkv * dv, hq * dv, hq,
                                hq * dv, hq * d,  hkv * d,  hkv * dv};
    memcpy(r->width, widths, sizeof widths);
    r->nt = h->dout ? NT : 5;
    r->dtype = h->shape.dtype;
    for (int32_t rank = lo; rank < hi; rank++) {
        DCP_CHECK(rank_io_fill(h, plan, r, rank));
        if (job_gpu >= 0)
            r->gpu[rank] = job_gpu;
        else
            DCP_CHECK(dcp_device_parse(device, rank, "device", &r->gpu[rank]));
        if (has_store(r, rank)) DCP_CHECK(rank_io_to_store(r, rank));
        DCP_CHECK(rank_io_variants(h, r, rank));
    }
    return DCP_OK;
}

/* Outputs are poisoned with NaN before every run, so an unwritten element cannot pass. */
static dcp_status_t poison(rank_io_t *r)
{
    for (int32_t rank = r->lo; rank < r->hi; rank++) {
        for (int j = 0; j < r->nt; j++) {
            if (!is_output(j)) continue;
            for (int64_t i = 0; i < r->ntok[rank] * r->width[j]; i++)
                r->bufs[NT * rank + j][i] = NAN;
            if (has_store(r, rank)) DCP_CHECK(move(r, rank, j, 1));
        }
        for (int v = V_MAX; v <= V_DSINKS; v++) {
            float *host = r->vhost[V_NUM * rank + v];
            for (int32_t i = 0; host && i < r->heads; i++) host[i] = NAN;
            DCP_CHECK(var_move(r, rank, v, 1));
        }
    }
    return DCP_OK;
}

/* The outputs of ranks with a store back in the host buffers the checks read. */
static dcp_status_t fetch(rank_io_t *r)
{
    for (int32_t rank = r->lo; rank < r->hi; rank++) {
        for (int j = 0; j < r->nt && has_store(r, rank); j++)
            if (is_output(j)) DCP_CHECK(move(r, rank, j, 0));
        for (int v = V_MAX; v <= V_DSINKS; v++) DCP_CHECK(var_move(r, rank, v, 0));
    }
    return DCP_OK;
}

/* What one rank's outputs show; reduced over the ranks into a result. */
typedef struct {
    double max_abs, ref_max, max_lse, low_abs;
    double g_abs[3], g_ref[3], g_low[3]; /* dQ, dK, dV */
    double ml_err;             /* max logit: max |x - ref| / max(1, |ref|) over the heads */
    double ds_err;             /* dsinks: max |x - ref| / the rank's scale over the heads */
    int64_t bad, g_bad, v_bad; /* v_bad: a NaN or a wrong infinity in max logit or dsinks */
    uint64_t digest; /* FNV-1a over the rank's output bytes (O, LSE, dQ, dK, dV) */
    int32_t checked;
} rank_check_t;

/* One gradient tensor of a rank against the reference rows (and the plain computation). */
static void check_grad(const rank_io_t *r, int32_t rank, int j, const double *ref, const float *low,
                       rank_check_t *c)
{
    const int g = j - T_DQ;
    const int64_t w = r->width[j];
    const float *out = r->bufs[NT * rank + j];
    for (int64_t i = 0; i < r->ntok[rank]; i++) {
        const int64_t row = r->rows[rank][i];
        for (int64_t e = 0; e < w; e++) {
            const double x = out[i * w + e], xr = ref[row * w + e];
            c->g_ref[g] = fmax(c->g_ref[g], fabs(xr));
            if (isnan(x))
                c->g_bad++;
            else
                c->g_abs[g] = fmax(c->g_abs[g], fabs(x - xr));
            if (low) c->g_low[g] = fmax(c->g_low[g], fabs(low[row * w + e] - xr));
        }
    }
}

/* The max logit against the batch's reference, and dsinks against the reference over the
 * rank's own rows: -sum exp(s - LSE) delta from the reference's LSE, O and dO. The scale of a
 * head's dsinks is sum exp(s - LSE) sum |dO O| over those rows, a bound of every term's size:
 * the error is judged relative to it (the sum may cancel). */
static void check_variants(const dcpt_harness_t *h, const rank_io_t *r, int32_t rank,
                           rank_check_t *c)
{
    const int64_t hq = h->shape.num_heads, dv = dcp_shape_dv(&h->shape);
    const float *ml = r->vhost[V_NUM * rank + V_MAX], *ds = r->vhost[V_NUM * rank + V_DSINKS];
    for (int64_t x = 0; ml && h->ref_max_logit && x < hq; x++) {
        const double ref = h->ref_max_logit[x], got = ml[x];
        if (isnan(got) || isinf(ref) != isinf(got) || (isinf(got) && got != ref))
            c->v_bad++;
        else if (!isinf(ref))
            c->ml_err = fmax(c->ml_err, fabs(got - ref) / fmax(1.0, fabs(ref)));
    }
    if (!ds || !h->sinks || !h->dout) return;
    for (int64_t x = 0; x < hq; x++) {
        double ref = 0, scale = 0;
        for (int64_t i = 0; i < r->ntok[rank]; i++) {
            const int64_t g = r->rows[rank][i];
            const double lse = h->ref_lse[g * hq + x];
            if (!isfinite(lse)) continue;
            const double p = exp((double)h->sinks[x] - lse);
            double delta = 0, mag = 0;
            for (int64_t e = 0; e < dv; e++) {
                const double t =
                    (double)h->dout[(g * hq + x) * dv + e] * h->ref_o[(g * hq + x) * dv + e];
                delta += t;
                mag += fabs(t);
            }
            ref -= p * delta;
            scale += p * mag;
        }
        if (isnan(ds[x]))
            c->v_bad++;
        else
            c->ds_err = fmax(c->ds_err, fabs(ds[x] - ref) / fmax(scale, 1e-30));
    }
}

static void check_rank(const dcpt_harness_t *h, const rank_io_t *r, int32_t rank, rank_check_t *c)
{
    const int64_t hq = h->shape.num_heads, d = dcp_shape_dv(&h->shape); /* O rows */
    const float *out = r->bufs[NT * rank + T_O], *lse = r->bufs[NT * rank + T_LSE];
    uint64_t x = 0xcbf29ce484222325ull;
    for (int j = 0; j < r->nt; j++) {
        if (!is_output(j)) continue;
        const unsigned char *b = (const unsigned char *)r->bufs[NT * rank + j];
        const int64_t n = r->ntok[rank] * r->width[j] * (int64_t)sizeof(float);
        for (int64_t i = 0; i < n; i++) x = (x ^ b[i]) * 0x100000001b3ull;
    }
    for (int v = V_MAX; v <= V_DSINKS; v++) {
        const unsigned char *b = (const unsigned char *)r->vhost[V_NUM * rank + v];
        for (size_t i = 0; b && i < (size_t)r->heads * sizeof(float); i++)
            x = (x ^ b[i]) * 0x100000001b3ull;
    }
    *c = (rank_check_t){.digest = x, .checked = h->ref_o != NULL};
    if (!h->ref_o) return;
    check_variants(h, r, rank, c);
    if (h->ref_dq) {
        const double *ref[3] = {h->ref_dq, h->ref_dk, h->ref_dv};
        const float *low[3] = {h->low_dq, h->low_dk, h->low_dv};
        for (int g = 0; g < 3; g++) check_grad(r, rank, T_DQ + g, ref[g], low[g], c);
    }
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
                   dcpt_harness_result_t *res)
{
    double ref_max = 0;
    uint64_t x = 0xcbf29ce484222325ull;
    for (int32_t r = 0; r < n; r++) {
        res->max_abs_err = fmax(res->max_abs_err, c[r].max_abs);
        res->max_lse_err = fmax(res->max_lse_err, c[r].max_lse);
        res->bad_values += c[r].bad;
        res->low_abs_err = fmax(res->low_abs_err, c[r].low_abs);
        res->max_logit_err = fmax(res->max_logit_err, c[r].ml_err);
        res->dsinks_err = fmax(res->dsinks_err, c[r].ds_err);
        res->variant_bad += c[r].v_bad;
        ref_max = fmax(ref_max, c[r].ref_max);
        for (int b = 0; b < 8; b++) x = (x ^ ((c[r].digest >> (8 * b)) & 0xff)) * 0x100000001b3ull;
    }
    res->digest = x;
    res->max_rel_err = ref_max > 0 ? res->max_abs_err / ref_max : res->max_abs_err;
    /* the max logit as the LSE (1e-3 relative in bf16/fp16); dsinks: LSE's 1e-3 and a rounding
     * step of O, twice, of the scale (fp32: tol) */
    const double step = dtype == DCP_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    const double ml_tol = dtype == DCP_DTYPE_FP32 ? tol : 1e-3;
    const double ds_tol = dtype == DCP_DTYPE_FP32 ? tol : 2 * (1e-3 + step);
    if (dtype == DCP_DTYPE_FP32)
        res->passed = c[0].checked && res->bad_values == 0 && res->max_rel_err <= tol &&
                      res->max_lse_err <= tol;
    else
        res->passed = c[0].checked && res->bad_values == 0 &&
                      dcpt_lowp_rule_holds(dtype, res->max_abs_err, res->low_abs_err, ref_max,
                                           res->max_lse_err);
    res->passed &= res->variant_bad == 0 && res->max_logit_err <= ml_tol;
    if (!res->bwd_run) return;
    res->bwd_passed = c[0].checked;
    for (int g = 0; g < 3; g++) {
        double gref = 0;
        for (int32_t r = 0; r < n; r++) {
            res->max_abs_err_grad[g] = fmax(res->max_abs_err_grad[g], c[r].g_abs[g]);
            res->low_abs_err_grad[g] = fmax(res->low_abs_err_grad[g], c[r].g_low[g]);
            gref = fmax(gref, c[r].g_ref[g]);
            res->bwd_bad_values += g == 0 ? c[r].g_bad : 0;
        }
        const double abs = res->max_abs_err_grad[g];
        res->max_rel_err_grad[g] = gref > 0 ? abs / gref : abs;
        res->bwd_passed &=
            dtype == DCP_DTYPE_FP32
                ? res->max_rel_err_grad[g] <= tol
                : dcpt_lowp_grad_rule_holds(dtype, abs, res->low_abs_err_grad[g], gref);
    }
    res->bwd_passed &= res->bwd_bad_values == 0 && res->dsinks_err <= ds_tol;
    res->passed &= res->bwd_passed;
}

void dcpt_harness_engine(const dcp_context_t *ctx, dcpt_harness_result_t *res)
{
    if (dcp_context_attn_engine(ctx, &res->engine) != DCP_OK) return;
    snprintf(res->engine_name, sizeof res->engine_name, "%s", res->engine.engine);
    snprintf(res->engine_note, sizeof res->engine_note, "%s", res->engine.note);
    res->engine.engine = res->engine_name;
    res->engine.note = res->engine_note;
    res->engine.requested = "";
}

/* Host seconds a context's calls have spent blocked in their transfer waits so far. */
static double waited(const dcp_context_t *ctx)
{
    dcp_context_stats_t s = {0};
    (void)dcp_context_get_stats(ctx, &s); /* never fails on a live context */
    return s.wait_blocked_s;
}

dcp_status_t dcpt_harness_run(const dcpt_harness_t *h, const dcp_plan_t *plan, int32_t warmup,
                              int32_t iters, double timeout_s, double tol, const char *device,
                              dcpt_harness_result_t *result_out)
{
    if (iters < 1) iters = 1;
    rank_io_t r = {0};
    double *times = NULL; /* [5 * iters]: forward, backward, their host times, waits */
    rank_check_t *checks = NULL;
    dcp_status_t st;
    dcp_plan_stats_t ps;
    DCP_CHECK(dcp_plan_get_stats(plan, &ps));
    dcp_group_t *group = NULL;
    dcp_context_t **ctx = NULL; /* kept across the runs, as a training loop keeps them */
    DCP_CHECK_GOTO(rank_io_build(h, plan, 0, ps.num_ranks, device, -1, &r), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&times, 5 * iters, sizeof *times, "harness"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&checks, r.n, sizeof *checks, "harness"), st, out);
    const dcp_context_config_t base = {.timeout_s = timeout_s,
                                       .device = device,
                                       .attn_engine = h->attn_engine,
                                       .deterministic = h->deterministic};
    DCP_CHECK_GOTO(dcp_inproc_contexts_create(r.n, &base, &group, &ctx), st, out);
    for (int32_t i = 0; i < warmup + iters; i++) {
        DCP_CHECK_GOTO(poison(&r), st, out);
        double t0 = dcp_now();
        double host[2] = {0, 0}, wait = 0;
        for (int32_t k = 0; k < r.n; k++) wait -= waited(ctx[k]);
        DCP_CHECK_GOTO(dcp_forward_group(ctx, r.n, plan, r.io, &host[0]), st, out);
        const double t1 = dcp_now();
        for (int32_t k = 0; k < r.n; k++) wait += waited(ctx[k]);
        if (h->dout) DCP_CHECK_GOTO(dcp_backward_group(ctx, r.n, plan, r.gio, &host[1]), st, out);
        if (i < warmup) continue;
        times[i - warmup] = (t1 - t0) * 1e3;
        times[iters + i - warmup] = (dcp_now() - t1) * 1e3;
        times[2 * iters + i - warmup] = host[0] * 1e3;
        times[3 * iters + i - warmup] = host[1] * 1e3;
        times[4 * iters + i - warmup] = wait / r.n * 1e6; /* the ranks' mean */
    }
    DCP_CHECK_GOTO(fetch(&r), st, out);
    dcpt_harness_result_t res = {.bwd_run = h->dout != NULL};
    res.exec_ms = dcpt_stats(times, iters);
    res.bwd_exec_ms = dcpt_stats(times + iters, h->dout ? iters : 0);
    res.host_us = dcpt_stats(times + 2 * iters, iters);
    res.bwd_host_us = dcpt_stats(times + 3 * iters, h->dout ? iters : 0);
    res.wait_us = dcpt_stats(times + 4 * iters, iters);
    for (int32_t rank = 0; rank < r.n; rank++) check_rank(h, &r, rank, &checks[rank]);
    reduce(checks, r.n, tol, h->shape.dtype, &res);
    dcpt_harness_engine(ctx[0], &res);
    *result_out = res;
out:
    if (group) dcp_inproc_contexts_destroy(r.n, group, ctx);
    free(checks);
    free(times);
    rank_io_free(&r);
    return st;
}

/* One run of every rank of `plan` on fresh contexts and fresh tensors on `device`: the
 * forward (and the backward when enabled), outputs fetched into r's host buffers. */
static dcp_status_t run_fresh(const dcpt_harness_t *h, const dcp_plan_t *plan, double timeout_s,
                              const char *device, const char *engine, rank_io_t *r)
{
    dcp_plan_stats_t ps;
    DCP_CHECK(dcp_plan_get_stats(plan, &ps));
    DCP_CHECK(rank_io_build(h, plan, 0, ps.num_ranks, device, -1, r));
    dcp_group_t *group = NULL;
    dcp_context_t **ctx = NULL;
    const dcp_context_config_t base = {.timeout_s = timeout_s,
                                       .device = device,
                                       .attn_engine = engine,
                                       .deterministic = h->deterministic};
    DCP_CHECK(dcp_inproc_contexts_create(r->n, &base, &group, &ctx));
    dcp_status_t st = poison(r);
    if (st == DCP_OK) st = dcp_forward_group(ctx, r->n, plan, r->io, NULL);
    if (st == DCP_OK && h->dout) st = dcp_backward_group(ctx, r->n, plan, r->gio, NULL);
    if (st == DCP_OK) st = fetch(r);
    dcp_inproc_contexts_destroy(r->n, group, ctx);
    return st;
}

/* Largest |a - b| of output tensor j over every rank (LSE: relative to max(1, |b|)); a NaN on
 * one side only, or an infinity that differs, counts as infinite. */
static double output_diff(const rank_io_t *a, const rank_io_t *b, int j)
{
    double d = 0;
    for (int32_t rank = 0; rank < a->n; rank++) {
        const float *x = a->bufs[NT * rank + j], *y = b->bufs[NT * rank + j];
        for (int64_t i = 0; i < a->ntok[rank] * a->width[j]; i++) {
            const double u = x[i], v = y[i];
            if (isnan(u) || isnan(v) || isinf(u) || isinf(v)) {
                if (!(isnan(u) && isnan(v)) && u != v) d = INFINITY;
                continue;
            }
            d = fmax(d, fabs(u - v) / (j == T_LSE ? fmax(1.0, fabs(v)) : 1.0));
        }
    }
    return d;
}

/* 1 when output tensor j of a and b holds the same bits on every rank. */
static int output_same_bits(const rank_io_t *a, const rank_io_t *b, int j)
{
    for (int32_t rank = 0; rank < a->n; rank++)
        if (memcmp(a->bufs[NT * rank + j], b->bufs[NT * rank + j],
                   (size_t)(a->ntok[rank] * a->width[j]) * sizeof(float)))
            return 0;
    return 1;
}

dcp_status_t dcpt_harness_repeat(const dcpt_harness_t *h, const dcp_plan_t *plan, int32_t runs,
                                 double timeout_s, double tol, const char *device,
                                 dcpt_harness_repeat_t *result_out)
{
    if (!h->ref_o)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "harness repeat: the reference is not computed");
    dcpt_harness_repeat_t res = {.first_mismatch = -1};
    rank_io_t cpu = {0};
    rank_check_t *checks = NULL;
    dcp_status_t st = run_fresh(h, plan, timeout_s, "cpu", "own", &cpu);
    if (st == DCP_OK) st = dcp_calloc(&checks, cpu.n, sizeof *checks, "harness");
    /* the bounds, from the CPU result's own check: the reference's peaks and the plain
     * low-precision errors */
    if (st == DCP_OK) {
        dcpt_harness_result_t c = {.bwd_run = h->dout != NULL};
        double ref_max = 0, gref[3] = {0, 0, 0};
        for (int32_t rank = 0; rank < cpu.n; rank++) {
            check_rank(h, &cpu, rank, &checks[rank]);
            ref_max = fmax(ref_max, checks[rank].ref_max);
            for (int g = 0; g < 3; g++) gref[g] = fmax(gref[g], checks[rank].g_ref[g]);
        }
        reduce(checks, cpu.n, tol, h->shape.dtype, &c);
        const int lowp = h->shape.dtype != DCP_DTYPE_FP32;
        const int bits = h->shape.dtype == DCP_DTYPE_BF16 ? 8 : 11;
        res.allowed[0] = 2 * (lowp ? 2 * c.low_abs_err + ldexp(ref_max, -bits) : tol * ref_max);
        res.allowed[1] = lowp ? 2e-3 : 2 * tol;
        for (int g = 0; g < 3; g++)
            res.allowed[2 + g] =
                2 * (lowp ? 3 * c.low_abs_err_grad[g] + ldexp(gref[g], -bits) : tol * gref[g]);
    }
    const int outs[5] = {T_O, T_LSE, T_DQ, T_DQ + 1, T_DQ + 2};
    const int nout = h->dout ? 5 : 2;
    rank_io_t first = {0};
    for (int32_t i = 0; st == DCP_OK && i < runs; i++) {
        rank_io_t r = {0};
        st = run_fresh(h, plan, timeout_s, device, h->attn_engine, &r);
        if (st == DCP_OK) {
            dcpt_harness_result_t c = {.bwd_run = h->dout != NULL};
            for (int32_t rank = 0; rank < r.n; rank++) check_rank(h, &r, rank, &checks[rank]);
            reduce(checks, r.n, tol, h->shape.dtype, &c);
            int bad = !c.passed;
            res.failed_checks += !c.passed;
            for (int k = 0; k < nout; k++) {
                const double d = output_diff(&r, &cpu, outs[k]);
                res.max_diff[k] = fmax(res.max_diff[k], d);
                bad |= !(d <= res.allowed[k]);
            }
            res.runs++;
            res.mismatches += bad;
            if (bad && res.first_mismatch < 0) res.first_mismatch = i;
            if (i > 0) {
                int same[2] = {1, 1}; /* forward, backward */
                for (int k = 0; k < nout; k++)
                    same[k >= 2] &= output_same_bits(&r, &first, outs[k]);
                res.unequal_fwd += !same[0];
                res.unequal_bwd += !same[1];
            }
        }
        if (st == DCP_OK && i == 0) {
            first = r; /* kept for the bitwise comparisons */
            continue;
        }
        rank_io_free(&r);
    }
    if (st == DCP_OK) *result_out = res;
    free(checks);
    rank_io_free(&first);
    rank_io_free(&cpu);
    return st;
}

dcp_status_t dcpt_harness_run_rank(const dcpt_harness_t *h, const dcp_plan_t *plan,
                                   dcp_context_t *ctx, const dcp_bootstrap_t *bootstrap,
                                   int32_t warmup, int32_t iters, double tol,
                                   dcpt_harness_result_t *result_out)
{
    if (iters < 1) iters = 1;
    const int32_t me = bootstrap->rank;
    rank_io_t r = {0};
    double *times = NULL;
    rank_check_t *checks = NULL;
    dcp_status_t st = rank_io_build(h, plan, me, me + 1, NULL, dcp_context_device(ctx), &r);
    if (st == DCP_OK) st = dcp_calloc(&times, 5 * iters, sizeof *times, "harness");
    const dcp_device_t *dev = dcp_device_of(dcp_context_device(ctx));
    if (st == DCP_OK) st = dcp_calloc(&checks, bootstrap->size, sizeof *checks, "harness");
    DCP_CHECK_GOTO(dcp_bootstrap_agree(bootstrap, st, "harness set-up"), st, out);
    /* timed from a common start to the last rank's end; through the engine, which fails
     * on a dead peer where the bootstrap's collective would wait for ever */
    for (int32_t i = 0; i < warmup + iters; i++) {
        DCP_CHECK_GOTO(poison(&r), st, out);
        DCP_CHECK_GOTO(dcp_context_barrier(ctx), st, out);
        /* calls are stream-ordered: each is timed to the end of its work on this rank */
        double t0 = dcp_now();
        const double w0 = waited(ctx);
        DCP_CHECK_GOTO(dcp_forward(ctx, plan, &r.io[me], NULL), st, out);
        const double host = dcp_now() - t0;
        if (i >= warmup) times[4 * iters + i - warmup] = (waited(ctx) - w0) * 1e6;
        DCP_CHECK_GOTO(dev->stream_sync(NULL), st, out);
        DCP_CHECK_GOTO(dcp_context_barrier(ctx), st, out);
        if (i >= warmup) times[i - warmup] = (dcp_now() - t0) * 1e3;
        if (i >= warmup) times[2 * iters + i - warmup] = host * 1e6;
        if (!h->dout) continue;
        t0 = dcp_now();
        DCP_CHECK_GOTO(dcp_backward(ctx, plan, &r.gio[me], NULL), st, out);
        const double bwd_host = dcp_now() - t0;
        DCP_CHECK_GOTO(dev->stream_sync(NULL), st, out);
        DCP_CHECK_GOTO(dcp_context_barrier(ctx), st, out);
        if (i >= warmup) times[iters + i - warmup] = (dcp_now() - t0) * 1e3;
        if (i >= warmup) times[3 * iters + i - warmup] = bwd_host * 1e6;
    }
    DCP_CHECK_GOTO(fetch(&r), st, out);
    rank_check_t mine;
    check_rank(h, &r, me, &mine);
    DCP_CHECK_GOTO(bootstrap->allgather(bootstrap->state, &mine, checks, sizeof mine), st, out);
    dcpt_harness_result_t res = {.bwd_run = h->dout != NULL};
    res.exec_ms = dcpt_stats(times, iters);
    res.bwd_exec_ms = dcpt_stats(times + iters, h->dout ? iters : 0);
    res.host_us = dcpt_stats(times + 2 * iters, iters); /* this rank's */
    res.bwd_host_us = dcpt_stats(times + 3 * iters, h->dout ? iters : 0);
    res.wait_us = dcpt_stats(times + 4 * iters, iters); /* this rank's */
    reduce(checks, bootstrap->size, tol, h->shape.dtype, &res);
    dcpt_harness_engine(ctx, &res);
    *result_out = res;
out:
    free(checks);
    free(times);
    rank_io_free(&r);
    return st;
}
