#include "kernels/reference.h"

#include "include/base/error.h"
#include "include/base/half.h"
#include "include/base/mask_rule.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct {
    const dcp_seq_info_t *seqs;
    int32_t num_seqs;
    int64_t *seq_start;
    int32_t hq, hkv, d;
    double scale;
    const float *q, *k, *v;
    double *o, *lse;
    float *o_low; /* the plain low-precision computation, or NULL */
    dcp_dtype_t dtype;
    atomic_long next; /* next (sequence, head) work item */
    int32_t max_len;
} ref_job_t;

/* Query i of sequence s, head h: two passes over the allowed keys (max, then sums). */
static void ref_query(const ref_job_t *j, int32_t s, int32_t h, int32_t i, double *score,
                      float *acc_low)
{
    const int64_t base = j->seq_start[s];
    const int32_t kvh = h / (j->hq / j->hkv), d = j->d;
    const float *qr = j->q + ((base + i) * j->hq + h) * d;
    int32_t rg[4];
    dcp_mask_keys(&j->seqs[s].mask, j->seqs[s].len, i, rg);
    double m = -INFINITY;
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            const float *kr = j->k + ((base + key) * j->hkv + kvh) * d;
            double acc = 0;
            for (int32_t x = 0; x < d; x++) acc += (double)qr[x] * (double)kr[x];
            score[key] = acc * j->scale;
            if (score[key] > m) m = score[key];
        }
    double *orow = j->o + ((base + i) * j->hq + h) * d;
    for (int32_t x = 0; x < d; x++) orow[x] = 0;
    double *lrow = j->lse + (base + i) * j->hq + h;
    float *olow = j->o_low ? j->o_low + ((base + i) * j->hq + h) * d : NULL;
    if (olow)
        for (int32_t x = 0; x < d; x++) olow[x] = acc_low[x] = 0.0f;
    if (m == -INFINITY) {
        *lrow = -INFINITY;
        return;
    }
    double sum = 0;
    float sum_low = 0.0f;
    for (int r = 0; r < 2; r++)
        for (int32_t key = rg[2 * r]; key < rg[2 * r + 1]; key++) {
            const double p = exp(score[key] - m);
            sum += p;
            const float *vr = j->v + ((base + key) * j->hkv + kvh) * d;
            for (int32_t x = 0; x < d; x++) orow[x] += p * (double)vr[x];
            if (!olow) continue;
            /* as a plain low-precision kernel: P stored in the input type, fp32 sums */
            const float pl = dcp_round_to(j->dtype, (float)p);
            sum_low += (float)p;
            for (int32_t x = 0; x < d; x++) acc_low[x] += pl * vr[x];
        }
    for (int32_t x = 0; x < d; x++) orow[x] /= sum;
    *lrow = m + log(sum);
    if (olow)
        for (int32_t x = 0; x < d; x++) olow[x] = dcp_round_to(j->dtype, acc_low[x] / sum_low);
}

static void *ref_worker(void *arg)
{
    ref_job_t *j = arg;
    double *score = malloc((size_t)j->max_len * sizeof *score);
    float *acc_low = malloc((size_t)j->d * sizeof *acc_low);
    if (!score || !acc_low) {
        free(score);
        free(acc_low);
        return (void *)1;
    }
    for (;;) {
        const long item = atomic_fetch_add(&j->next, 1);
        if (item >= (long)j->num_seqs * j->hq) break;
        const int32_t s = (int32_t)(item / j->hq), h = (int32_t)(item % j->hq);
        for (int32_t i = 0; i < j->seqs[s].len; i++) ref_query(j, s, h, i, score, acc_low);
    }
    free(score);
    free(acc_low);
    return NULL;
}

dcp_status_t dcp_reference_attention(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                     const dcp_attn_shape_t *shape, const float *q, const float *k,
                                     const float *v, double *o, double *lse, float *o_low,
                                     int32_t threads)
{
    if (!seqs || !shape || !q || !k || !v || !o || !lse || num_seqs < 1 ||
        shape->num_kv_heads < 1 || shape->num_heads % shape->num_kv_heads != 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "reference: bad arguments");
    ref_job_t j = {.seqs = seqs,
                   .num_seqs = num_seqs,
                   .hq = shape->num_heads,
                   .hkv = shape->num_kv_heads,
                   .d = shape->head_dim,
                   .scale = shape->scale > 0 ? shape->scale : 1.0 / sqrt((double)shape->head_dim),
                   .q = q,
                   .k = k,
                   .v = v,
                   .o = o,
                   .lse = lse,
                   .o_low = o_low,
                   .dtype = shape->dtype};
    atomic_init(&j.next, 0);
    DCP_CHECK(dcp_calloc(&j.seq_start, num_seqs, sizeof(int64_t), "reference"));
    for (int32_t s = 0; s < num_seqs; s++) {
        j.seq_start[s] = s ? j.seq_start[s - 1] + seqs[s - 1].len : 0;
        if (seqs[s].len > j.max_len) j.max_len = seqs[s].len;
    }
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    pthread_t tid[64];
    int32_t started = 0;
    for (; started < threads - 1; started++)
        if (pthread_create(&tid[started], NULL, ref_worker, &j) != 0) break;
    int failed = ref_worker(&j) != NULL;
    for (int32_t t = 0; t < started; t++) {
        void *ret;
        pthread_join(tid[t], &ret);
        failed |= ret != NULL;
    }
    free(j.seq_start);
    if (failed) return dcp_set_error(DCP_ERR_NO_MEMORY, "reference: no memory for scores");
    return DCP_OK;
}

int dcp_lowp_rule_holds(dcp_dtype_t dtype, double max_abs_err, double low_abs_err, double ref_max,
                        double lse_err)
{
    const double step = ldexp(ref_max, dtype == DCP_DTYPE_BF16 ? -8 : -11);
    return max_abs_err <= 2 * low_abs_err + step && lse_err <= 1e-3;
}
