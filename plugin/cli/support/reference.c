#include "plugin/cli/support/reference.h"

#include "include/base/error.h"
#include "include/base/half.h"
#include "include/base/mask_rule.h"
#include "include/base/shape.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* What both passes know of the batch: its sequences, shape and inputs, and the counter the
 * workers claim items from. */
typedef struct {
    const dcp_seq_info_t *seqs;
    int32_t num_seqs;
    int64_t *seq_start; /* first token of each sequence */
    int32_t max_len;
    int32_t hq, hkv, d, dv; /* Q/K and V/O head dims */
    double scale, softcap;  /* softcap 0: off */
    const float *sinks;     /* [hq] or NULL */
    dcp_dtype_t dtype;
    const float *q, *k, *v;
    atomic_long next; /* next work item */
} ref_batch_t;

typedef struct {
    ref_batch_t b; /* items: (sequence, head) */
    double *o, *lse;
    float *o_low;     /* the plain low-precision computation, or NULL */
    double *item_max; /* [items]: each item's largest allowed score, or NULL */
} ref_job_t;

/* The score of query row qr against key row kr: scaled, then capped (c tanh(s / c)); *raw_ok
 * is 0 when the scaled score was not finite (a cap would hide an infinity). */
static double ref_score(const ref_batch_t *b, const float *qr, const float *kr, int *raw_ok)
{
    double acc = 0;
    for (int32_t x = 0; x < b->d; x++) acc += (double)qr[x] * (double)kr[x];
    acc *= b->scale;
    *raw_ok = isfinite(acc);
    return b->softcap > 0 ? b->softcap * tanh(acc / b->softcap) : acc;
}

/* The same in fp32, as a plain low-precision kernel computes it. */
static float ref_score_low(const ref_batch_t *b, const float *qr, const float *kr)
{
    float acc = 0.0f;
    for (int32_t x = 0; x < b->d; x++) acc += qr[x] * kr[x];
    acc *= (float)b->scale;
    const float c = (float)b->softcap;
    return c > 0.0f ? c * tanhf(acc / c) : acc;
}

/* Query i of sequence s, head h: two passes over the allowed keys (max, then sums); a sink
 * adds exp(sink) to the denominator and nothing to the output. */
static void ref_query(const ref_job_t *j, int32_t s, int32_t h, int32_t i, double *score,
                      float *acc_low)
{
    const ref_batch_t *b = &j->b;
    const int64_t base = b->seq_start[s];
    const int32_t kvh = h / (b->hq / b->hkv), d = b->d, dv = b->dv;
    const float *qr = b->q + ((base + i) * b->hq + h) * d;
    int32_t rg[4];
    dcp_mask_keys(&b->seqs[s].mask, b->seqs[s].len, i, rg);
    double m = -INFINITY;
    int bad = 0; /* a NaN or Inf score: the row's O and LSE are NaN (dcp.h, dcp_tensors_t) */
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            int ok;
            score[key] = ref_score(b, qr, b->k + ((base + key) * b->hkv + kvh) * d, &ok);
            bad |= !ok;
            if (score[key] > m) m = score[key];
        }
    double *item_max = j->item_max ? &j->item_max[(int64_t)s * b->hq + h] : NULL;
    if (item_max && m > *item_max) *item_max = m;
    double *orow = j->o + ((base + i) * b->hq + h) * dv;
    for (int32_t x = 0; x < dv; x++) orow[x] = 0;
    double *lrow = j->lse + (base + i) * b->hq + h;
    float *olow = j->o_low ? j->o_low + ((base + i) * b->hq + h) * dv : NULL;
    if (olow)
        for (int32_t x = 0; x < dv; x++) olow[x] = acc_low[x] = 0.0f;
    const double sink = b->sinks ? (double)b->sinks[h] : -INFINITY;
    if (rg[0] == rg[1] && rg[2] == rg[3]) { /* no allowed key: O = 0, and the sink's LSE */
        *lrow = sink;
        return;
    }
    if (bad) {
        for (int32_t x = 0; x < dv; x++) orow[x] = NAN;
        if (olow)
            for (int32_t x = 0; x < dv; x++) olow[x] = NAN;
        *lrow = NAN;
        return;
    }
    if (sink > m) m = sink;
    double sum = exp(sink - m);
    float sum_low = (float)sum;
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            const double p = exp(score[key] - m);
            sum += p;
            const float *vr = b->v + ((base + key) * b->hkv + kvh) * dv;
            for (int32_t x = 0; x < dv; x++) orow[x] += p * (double)vr[x];
            if (!olow) continue;
            /* as a plain low-precision kernel: P stored in the input type, fp32 sums */
            const float pl = dcp_round_to(b->dtype, (float)p);
            sum_low += (float)p;
            for (int32_t x = 0; x < dv; x++) acc_low[x] += pl * vr[x];
        }
    for (int32_t x = 0; x < dv; x++) {
        orow[x] /= sum;
        bad |= !isfinite(orow[x]); /* a NaN or Inf value */
    }
    *lrow = bad ? NAN : m + log(sum);
    if (bad)
        for (int32_t x = 0; x < dv; x++) orow[x] = NAN;
    if (olow)
        for (int32_t x = 0; x < dv; x++) olow[x] = dcp_round_to(b->dtype, acc_low[x] / sum_low);
}

static void *ref_worker(void *arg)
{
    ref_job_t *j = arg;
    double *score = malloc((size_t)j->b.max_len * sizeof *score);
    float *acc_low = malloc((size_t)j->b.dv * sizeof *acc_low);
    if (!score || !acc_low) {
        free(score);
        free(acc_low);
        return (void *)1;
    }
    for (;;) {
        const long item = atomic_fetch_add(&j->b.next, 1);
        if (item >= (long)j->b.num_seqs * j->b.hq) break;
        const int32_t s = (int32_t)(item / j->b.hq), h = (int32_t)(item % j->b.hq);
        for (int32_t i = 0; i < j->b.seqs[s].len; i++) ref_query(j, s, h, i, score, acc_low);
    }
    free(score);
    free(acc_low);
    return NULL;
}

/* Checks the arguments both passes share and fills *b (b->seq_start: the caller frees it). */
static dcp_status_t ref_batch_init(ref_batch_t *b, const char *what, const dcp_seq_info_t *seqs,
                                   int32_t num_seqs, const dcp_attn_shape_t *shape, const float *q,
                                   const float *k, const float *v, const float *sinks)
{
    if (!seqs || !shape || !q || !k || !v || num_seqs < 1 || shape->num_heads < 1 ||
        shape->num_kv_heads < 1 || shape->head_dim < 1 || shape->head_dim_v < 0 ||
        !(shape->softcap >= 0) || shape->num_heads % shape->num_kv_heads != 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: bad arguments", what);
    b->seqs = seqs;
    b->num_seqs = num_seqs;
    b->hq = shape->num_heads;
    b->hkv = shape->num_kv_heads;
    b->d = shape->head_dim;
    b->dv = dcp_shape_dv(shape);
    b->scale = shape->scale > 0 ? shape->scale : 1.0 / sqrt((double)shape->head_dim);
    b->softcap = shape->softcap;
    b->sinks = sinks;
    b->dtype = shape->dtype;
    b->q = q;
    b->k = k;
    b->v = v;
    atomic_init(&b->next, 0);
    DCP_CHECK(dcp_calloc(&b->seq_start, num_seqs, sizeof(int64_t), what));
    b->max_len = 0;
    for (int32_t s = 0; s < num_seqs; s++) {
        b->seq_start[s] = s ? b->seq_start[s - 1] + seqs[s - 1].len : 0;
        if (seqs[s].len > b->max_len) b->max_len = seqs[s].len;
    }
    return DCP_OK;
}

/* Runs fn(job) on `threads` threads (the caller's among them, 1..64); true if any returned
 * non-NULL (no memory). Work items are claimed from an atomic counter in the job, and each
 * item is computed by one thread in a fixed order, so results do not depend on threads. */
static int run_workers(void *(*fn)(void *), void *job, int32_t threads)
{
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    pthread_t tid[64];
    int32_t started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&tid[started], NULL, fn, job) != 0) break;
    int failed = fn(job) != NULL;
    for (int32_t t = 0; t < started; t++) {
        void *ret;
        pthread_join(tid[t], &ret);
        failed |= ret != NULL;
    }
    return failed;
}

dcp_status_t dcpt_reference_attention_x(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                        const dcp_attn_shape_t *shape, const float *q,
                                        const float *k, const float *v,
                                        const dcpt_ref_extra_t *extra, double *o, double *lse,
                                        float *o_low, int32_t threads)
{
    if (!o || !lse) return dcp_set_error(DCP_ERR_INVALID_ARG, "reference: bad arguments");
    const dcpt_ref_extra_t none = {NULL, NULL, NULL};
    if (!extra) extra = &none;
    ref_job_t j = {.o = o, .lse = lse, .o_low = o_low};
    DCP_CHECK(ref_batch_init(&j.b, "reference", seqs, num_seqs, shape, q, k, v, extra->sinks));
    const int64_t items = (int64_t)num_seqs * j.b.hq;
    dcp_status_t st = DCP_OK;
    if (extra->max_logit) {
        st = dcp_calloc(&j.item_max, items, sizeof *j.item_max, "reference");
        for (int64_t i = 0; st == DCP_OK && i < items; i++) j.item_max[i] = -INFINITY;
    }
    if (st == DCP_OK && run_workers(ref_worker, &j, threads))
        st = dcp_set_error(DCP_ERR_NO_MEMORY, "reference: no memory for scores");
    for (int32_t h = 0; st == DCP_OK && extra->max_logit && h < j.b.hq; h++) {
        double mx = -INFINITY;
        for (int32_t s = 0; s < num_seqs; s++) mx = fmax(mx, j.item_max[(int64_t)s * j.b.hq + h]);
        extra->max_logit[h] = mx;
    }
    free(j.item_max);
    free(j.b.seq_start);
    return st;
}

dcp_status_t dcpt_reference_attention(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                      const dcp_attn_shape_t *shape, const float *q, const float *k,
                                      const float *v, double *o, double *lse, float *o_low,
                                      int32_t threads)
{
    return dcpt_reference_attention_x(seqs, num_seqs, shape, q, k, v, NULL, o, lse, o_low, threads);
}

int dcpt_lowp_rule_holds(dcp_dtype_t dtype, double max_abs_err, double low_abs_err, double ref_max,
                         double lse_err)
{
    const double step = ldexp(ref_max, dtype == DCP_DTYPE_BF16 ? -8 : -11);
    return max_abs_err <= 2 * low_abs_err + step && lse_err <= 1e-3;
}

/* ---- backward ---------------------------------------------------------------------------- */

typedef struct {
    ref_batch_t b; /* items: (sequence, KV head) */
    const float *dout;
    double *dq, *dk, *dv;
    float *dq_low, *dk_low, *dv_low; /* each may be NULL */
    int low;                         /* any of them given: run the plain computation */
    double *item_dsinks;             /* [items x rep]: each item's heads' share, or NULL */
} bwd_job_t;

/* A worker's scratch: scores of one query (double and plain), one output row, and the
 * plain computation's fp32 sums of dQ (one row) and dK, dV (a whole sequence). */
typedef struct {
    double *score, *o;
    float *score_low, *o_low, *dq_low, *dk_low, *dv_low;
} bwd_scratch_t;

static double dot_f64(const float *a, const float *b, int32_t n)
{
    double s = 0;
    for (int32_t x = 0; x < n; x++) s += (double)a[x] * (double)b[x];
    return s;
}

static float dot_f32(const float *a, const float *b, int32_t n)
{
    float s = 0.0f;
    for (int32_t x = 0; x < n; x++) s += a[x] * b[x];
    return s;
}

/* d(capped score) / d(scaled score) at the capped score y: 1 - tanh^2 = 1 - (y / c)^2. */
static double cap_slope(double softcap, double y)
{
    return softcap > 0 ? 1.0 - (y / softcap) * (y / softcap) : 1.0;
}

/* The plain low-precision backward of query i: fp32 scores, LSE and O (rounded to the
 * dtype, as the forward publishes it), delta from that O, P and dS rounded to the dtype
 * before their products, fp32 sums. dK is summed unscaled, as dS^T Q. */
static void bwd_query_low(const bwd_job_t *j, bwd_scratch_t *w, const int32_t rg[4],
                          const float *qr, const float *gr, int64_t base, int32_t kvh, int32_t h)
{
    const ref_batch_t *b = &j->b;
    const int32_t d = b->d, dv = b->dv;
    float m = -INFINITY;
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            w->score_low[key] = ref_score_low(b, qr, b->k + ((base + key) * b->hkv + kvh) * d);
            if (w->score_low[key] > m) m = w->score_low[key];
        }
    for (int32_t x = 0; x < d; x++) w->dq_low[x] = 0.0f;
    for (int32_t x = 0; x < dv; x++) w->o_low[x] = 0.0f;
    if (m == -INFINITY) return;
    const float sink = b->sinks ? b->sinks[h] : -INFINITY;
    if (sink > m) m = sink;
    float sum = expf(sink - m);
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            const float p = expf(w->score_low[key] - m);
            const float pl = dcp_round_to(b->dtype, p);
            const float *vr = b->v + ((base + key) * b->hkv + kvh) * dv;
            sum += p;
            for (int32_t x = 0; x < dv; x++) w->o_low[x] += pl * vr[x];
        }
    for (int32_t x = 0; x < dv; x++) w->o_low[x] = dcp_round_to(b->dtype, w->o_low[x] / sum);
    const float lse = m + logf(sum), delta = dot_f32(gr, w->o_low, dv);
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            const float *kr = b->k + ((base + key) * b->hkv + kvh) * d;
            const float *vr = b->v + ((base + key) * b->hkv + kvh) * dv;
            const float p = expf(w->score_low[key] - lse);
            const float ds =
                p * (dot_f32(gr, vr, dv) - delta) * (float)cap_slope(b->softcap, w->score_low[key]);
            const float pl = dcp_round_to(b->dtype, p), dsl = dcp_round_to(b->dtype, ds);
            float *dk = w->dk_low + (size_t)key * d, *dvr = w->dv_low + (size_t)key * dv;
            for (int32_t x = 0; x < dv; x++) dvr[x] += pl * gr[x];
            for (int32_t x = 0; x < d; x++) {
                dk[x] += dsl * qr[x];
                w->dq_low[x] += dsl * kr[x];
            }
        }
}

/* Query i of sequence s, head h, in double: its forward (LSE, O, delta = dO.O), then its
 * share of every gradient; adds into the item's dK, dV rows, writes its dQ row, and adds
 * -exp(sink - LSE) delta to *dsink. */
static void bwd_query(const bwd_job_t *j, bwd_scratch_t *w, int32_t s, int32_t h, int32_t i,
                      double *dsink)
{
    const ref_batch_t *b = &j->b;
    const int64_t base = b->seq_start[s];
    const int32_t kvh = h / (b->hq / b->hkv), d = b->d, dv = b->dv;
    const float *qr = b->q + ((base + i) * b->hq + h) * d,
                *gr = j->dout + ((base + i) * b->hq + h) * dv;
    double *dq = j->dq + ((base + i) * b->hq + h) * d;
    int32_t rg[4];
    dcp_mask_keys(&b->seqs[s].mask, b->seqs[s].len, i, rg);
    if (j->low) {
        bwd_query_low(j, w, rg, qr, gr, base, kvh, h);
        float *dql = j->dq_low ? j->dq_low + ((base + i) * b->hq + h) * d : NULL;
        if (dql)
            for (int32_t x = 0; x < d; x++)
                dql[x] = dcp_round_to(b->dtype, (float)b->scale * w->dq_low[x]);
    }
    double m = -INFINITY;
    int bad = 0;
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            int ok;
            w->score[key] = ref_score(b, qr, b->k + ((base + key) * b->hkv + kvh) * d, &ok);
            bad |= !ok;
            if (w->score[key] > m) m = w->score[key];
        }
    for (int32_t x = 0; x < d; x++) dq[x] = 0;
    for (int32_t x = 0; x < dv; x++) w->o[x] = 0;
    if (rg[0] == rg[1] && rg[2] == rg[3]) return; /* no allowed key: no gradient, O = 0 */
    if (bad) m = NAN; /* as the forward: a NaN LSE, which reaches every gradient of the row */
    const double sink = b->sinks ? (double)b->sinks[h] : -INFINITY;
    if (sink > m) m = sink;
    double sum = exp(sink - m);
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) sum += exp(w->score[key] - m);
    const double lse = m + log(sum);
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            const double p = exp(w->score[key] - lse);
            const float *vr = b->v + ((base + key) * b->hkv + kvh) * dv;
            for (int32_t x = 0; x < dv; x++) w->o[x] += p * (double)vr[x];
        }
    double delta = 0;
    for (int32_t x = 0; x < dv; x++) delta += (double)gr[x] * w->o[x];
    if (b->sinks) *dsink -= exp(sink - lse) * delta;
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            const int64_t kv = (base + key) * b->hkv + kvh;
            const float *kr = b->k + kv * d, *vr = b->v + kv * dv;
            const double p = exp(w->score[key] - lse);
            const double ds =
                p * (dot_f64(gr, vr, dv) - delta) * cap_slope(b->softcap, w->score[key]);
            for (int32_t x = 0; x < dv; x++) j->dv[kv * dv + x] += p * (double)gr[x];
            for (int32_t x = 0; x < d; x++) {
                j->dk[kv * d + x] += b->scale * ds * (double)qr[x];
                dq[x] += b->scale * ds * (double)kr[x];
            }
        }
}

/* Work item: one sequence and one KV head, with every query head that shares the KV head,
 * so that the item alone writes its dK, dV rows. */
static void bwd_item(const bwd_job_t *j, bwd_scratch_t *w, int32_t s, int32_t kvh)
{
    const ref_batch_t *b = &j->b;
    const int64_t base = b->seq_start[s];
    const int32_t len = b->seqs[s].len, d = b->d, dv = b->dv, rep = b->hq / b->hkv;
    for (int32_t key = 0; key < len; key++) {
        const int64_t kv = (base + key) * b->hkv + kvh;
        for (int32_t x = 0; x < d; x++) j->dk[kv * d + x] = 0;
        for (int32_t x = 0; x < dv; x++) j->dv[kv * dv + x] = 0;
    }
    if (j->low) {
        for (int64_t e = 0; e < (int64_t)len * d; e++) w->dk_low[e] = 0.0f;
        for (int64_t e = 0; e < (int64_t)len * dv; e++) w->dv_low[e] = 0.0f;
    }
    for (int32_t h = kvh * rep; h < (kvh + 1) * rep; h++) {
        double dsink = 0;
        for (int32_t i = 0; i < len; i++) bwd_query(j, w, s, h, i, &dsink);
        if (j->item_dsinks)
            j->item_dsinks[((int64_t)s * b->hkv + kvh) * rep + (h - kvh * rep)] = dsink;
    }
    if (!j->low) return;
    for (int32_t key = 0; key < len; key++) {
        const int64_t kv = (base + key) * b->hkv + kvh;
        for (int32_t x = 0; x < d; x++) {
            const float dk = (float)b->scale * w->dk_low[(size_t)key * d + x];
            if (j->dk_low) j->dk_low[kv * d + x] = dcp_round_to(b->dtype, dk);
        }
        for (int32_t x = 0; x < dv; x++)
            if (j->dv_low)
                j->dv_low[kv * dv + x] = dcp_round_to(b->dtype, w->dv_low[(size_t)key * dv + x]);
    }
}

static void *bwd_worker(void *arg)
{
    bwd_job_t *j = arg;
    const size_t n = (size_t)j->b.max_len, d = (size_t)j->b.d, dv = (size_t)j->b.dv;
    const size_t wide = d > dv ? d : dv;
    /* the plain dK, dV sums of a sequence */
    const size_t rows_k = j->low ? n * d : 1, rows_v = j->low ? n * dv : 1;
    bwd_scratch_t w = {malloc(n * sizeof(double)),    malloc(wide * sizeof(double)),
                       malloc(n * sizeof(float)),     malloc(wide * sizeof(float)),
                       malloc(wide * sizeof(float)),  malloc(rows_k * sizeof(float)),
                       malloc(rows_v * sizeof(float))};
    void *ret = (void *)1;
    if (w.score && w.o && w.score_low && w.o_low && w.dq_low && w.dk_low && w.dv_low) {
        ret = NULL;
        for (;;) {
            const long item = atomic_fetch_add(&j->b.next, 1);
            if (item >= (long)j->b.num_seqs * j->b.hkv) break;
            bwd_item(j, &w, (int32_t)(item / j->b.hkv), (int32_t)(item % j->b.hkv));
        }
    }
    free(w.score), free(w.o), free(w.score_low), free(w.o_low);
    free(w.dq_low), free(w.dk_low), free(w.dv_low);
    return ret;
}

dcp_status_t dcpt_reference_backward_x(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                       const dcp_attn_shape_t *shape, const float *q,
                                       const float *k, const float *v, const float *dout,
                                       const dcpt_ref_extra_t *extra, double *dq, double *dk,
                                       double *dv, float *dq_low, float *dk_low, float *dv_low,
                                       int32_t threads)
{
    if (!dout || !dq || !dk || !dv)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "reference backward: bad arguments");
    const dcpt_ref_extra_t none = {NULL, NULL, NULL};
    if (!extra) extra = &none;
    if (extra->dsinks && !extra->sinks)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "reference backward: dsinks without sinks");
    bwd_job_t j = {.dout = dout,
                   .dq = dq,
                   .dk = dk,
                   .dv = dv,
                   .dq_low = dq_low,
                   .dk_low = dk_low,
                   .dv_low = dv_low,
                   .low = dq_low || dk_low || dv_low};
    DCP_CHECK(
        ref_batch_init(&j.b, "reference backward", seqs, num_seqs, shape, q, k, v, extra->sinks));
    dcp_status_t st = DCP_OK;
    if (extra->dsinks)
        st = dcp_calloc(&j.item_dsinks, (int64_t)num_seqs * j.b.hq, sizeof *j.item_dsinks,
                        "reference backward");
    if (st == DCP_OK && run_workers(bwd_worker, &j, threads))
        st = dcp_set_error(DCP_ERR_NO_MEMORY, "reference backward: no memory for scratch");
    /* items hold their heads in order (item (s, kvh), head kvh x rep + i): per head, the
     * sequences' shares summed in sequence order */
    for (int32_t h = 0; st == DCP_OK && extra->dsinks && h < j.b.hq; h++) {
        double sum = 0;
        for (int32_t s = 0; s < num_seqs; s++) sum += j.item_dsinks[(int64_t)s * j.b.hq + h];
        extra->dsinks[h] = sum;
    }
    free(j.item_dsinks);
    free(j.b.seq_start);
    return st;
}

dcp_status_t dcpt_reference_backward(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                     const dcp_attn_shape_t *shape, const float *q, const float *k,
                                     const float *v, const float *dout, double *dq, double *dk,
                                     double *dv, float *dq_low, float *dk_low, float *dv_low,
                                     int32_t threads)
{
    return dcpt_reference_backward_x(seqs, num_seqs, shape, q, k, v, dout, NULL, dq, dk, dv, dq_low,
                                     dk_low, dv_low, threads);
}

int dcpt_lowp_grad_rule_holds(dcp_dtype_t dtype, double max_abs_err, double low_abs_err,
                              double ref_max)
{
    const int bits = dtype == DCP_DTYPE_BF16 ? 8 : dtype == DCP_DTYPE_FP16 ? 11 : 24;
    return max_abs_err <= 3 * low_abs_err + ldexp(ref_max, -bits);
}
