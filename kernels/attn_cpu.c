/*
 * Fused masked attention forward on the CPU: fp32 arithmetic over fp32, bf16 or fp16 storage
 * (2-byte rows are widened as they are packed, so the loops below only ever see fp32).
 *
 * For each tile group, query head and block of QB query rows, the group's KV tiles are
 * streamed in chunks of KB keys with an online softmax, so no score matrix larger than
 * QB x KB exists. K chunks are packed transposed so that both inner loops (scores over
 * keys, P.V over the head dimension) are unit-stride and vectorise without fast-math.
 * Full tiles never evaluate the mask. Partial tiles compute every row's allowed key ranges
 * once (include/base/mask_rule.h), visit only the key span those ranges cover, and skip
 * chunks no row may see. Q and K rows have d_qk elements, V and O rows d_v (MLA's differ).
 * With a softcap c, each scaled score s becomes c tanh(s / c) before the mask; the row's
 * running maximum is then that of the capped scores, and the largest of a head's rows is
 * what the max logit takes (env->max_logit).
 *
 * Non-finite inputs (dcp.h, dcp_tensors_t): a row keeps whether it has an allowed key at all
 * and whether any allowed score, or its output sum, was not finite. A row without allowed
 * keys comes out as O = 0, LSE = -inf, whatever masked keys hold; a row that read a NaN or
 * Inf (in its query, or the key or value of a key it may attend) comes out as O = NaN,
 * LSE = NaN, so that a diverging run is seen and never taken for a fully masked row. Masked
 * keys are skipped, never multiplied by zero, so their values reach no row.
 */
#include "kernels/cpu.h"
#include "kernels/cpu_rows.h"

#include "include/base/error.h"
#include "include/base/half.h"
#include "include/base/mask_rule.h"
#include "kernels/lse.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QB DCP_CPU_QB
#define KB 64

typedef struct {
    int32_t d, dv;     /* Q/K and V/O elements per head */
    float softcap;     /* 0: off */
    dcp_dtype_t dtype; /* storage of Q, K, V and of non-fp32 outputs */
    float *qs;         /* [QB][d] scaled query rows */
    float *acc;        /* [QB][dv] unnormalised output */
    float *kt;         /* [d][KB] transposed key chunk */
    float *vc;         /* [KB][dv] value chunk widened to fp32 (2-byte storage only) */
    float s[QB][KB];
    float m[QB], l[QB];
    uint8_t seen[QB];    /* the row has an allowed key in the group */
    uint8_t bad[QB];     /* an allowed score of the row was NaN or +-Inf */
    dcp_cpu_rows_t rows; /* allowed keys of each row, tile-local */
} attn_scratch_t;

static inline void store_elem(void *base, dcp_dtype_t dtype, int64_t i, float v)
{
    if (dtype == DCP_DTYPE_FP32)
        ((float *)base)[i] = v;
    else
        ((uint16_t *)base)[i] = dcp_half_from_f32(dtype, v);
}

/* Allowed keys of rows [r0, r0 + nr) inside the tile; returns the covering key span. */
static void row_ranges(attn_scratch_t *w, const dcp_seq_info_t *seq, const dcp_tile_group_t *g,
                       const dcp_tile_t *t, int32_t r0, int32_t nr, int32_t *klo, int32_t *khi)
{
    *klo = t->kv_len;
    *khi = 0;
    for (int32_t i = 0; i < nr; i++) {
        int32_t rg[4];
        dcp_mask_keys(&seq->mask, seq->len, g->q_pos + r0 + i, rg);
        dcp_cpu_row_set(&w->rows, i, rg, t->kv_pos, t->kv_len, klo, khi);
    }
}

/* 1 when some x[0..n) is NaN or +-Inf (an integer test, so that it vectorises). */
static inline int any_nonfinite(const float *x, int32_t n)
{
    uint32_t hit = 0;
    for (int32_t c = 0; c < n; c++) {
        uint32_t u;
        memcpy(&u, &x[c], sizeof u);
        hit |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return hit != 0;
}

/* Online-softmax update of row i with the scores w->s[i][0..nc) of keys v[0..nc), the
 * chunk's keys [c0, c0 + nc) of a tile (full: every key allowed). A weight that is 0 is
 * skipped only for a masked key: an allowed key's value is always read, so that a NaN or
 * Inf in it shows even when its weight underflowed. */
static void softmax_update(attn_scratch_t *w, int32_t i, int32_t nc, const float *v,
                           int32_t v_stride, int full, int32_t c0)
{
    float *s = w->s[i];
    float mx = -INFINITY;
    for (int32_t c = 0; c < nc; c++) mx = s[c] > mx ? s[c] : mx;
    if (mx == -INFINITY) return;
    const float m_new = mx > w->m[i] ? mx : w->m[i];
    const float alpha = expf(w->m[i] - m_new); /* 0 when m was -inf */
    float sum = 0.0f;
    for (int32_t c = 0; c < nc; c++) {
        s[c] = expf(s[c] - m_new);
        sum += s[c];
    }
    const int32_t dv = w->dv;
    float *acc = w->acc + (size_t)i * dv;
    w->l[i] = w->l[i] * alpha + sum;
    w->m[i] = m_new;
    if (alpha != 1.0f)
        for (int32_t x = 0; x < dv; x++) acc[x] *= alpha;
    for (int32_t c = 0; c < nc; c++) {
        const float p = s[c];
        if (p == 0.0f && !full && !dcp_cpu_row_has(&w->rows, i, c0 + c)) continue;
        const float *vr = v + (size_t)c * v_stride;
        for (int32_t x = 0; x < dv; x++) acc[x] += p * vr[x];
    }
}

/* The softcap of a row's scores s[0..nc) (after the non-finite test: tanh would hide an
 * infinity). */
static void cap_scores(float *s, int32_t nc, float c)
{
    const float inv = 1.0f / c;
    for (int32_t k = 0; k < nc; k++) s[k] = c * tanhf(s[k] * inv);
}

/* The loops below are written to vectorise; on x86-64 GCC builds a baseline, an AVX2+FMA
 * and an AVX-512 version of the tile loop and picks one at load time, so one binary runs
 * everywhere and uses the wide units where they exist. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DCP_MULTIVERSION                                                                           \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DCP_MULTIVERSION
#endif

/* One KV tile against query rows [r0, r0 + nr) of head j. */
DCP_MULTIVERSION
static void attend_tile(attn_scratch_t *w, const dcp_kernel_env_t *env, const dcp_seq_info_t *seq,
                        const dcp_tile_group_t *g, const dcp_tile_t *t, int32_t kvh, int32_t r0,
                        int32_t nr)
{
    const int32_t d = w->d, dv = w->dv;
    const dcp_dtype_t kt_ty = dcp_buf_dtype(t->k.buf, w->dtype),
                      vt_ty = dcp_buf_dtype(t->v.buf, w->dtype);
    const int64_t k0 = t->k.off + (int64_t)kvh * d, v0 = t->v.off + (int64_t)kvh * dv;
    const void *kb = env->bufs[t->k.buf], *vb = env->bufs[t->v.buf];
    int32_t klo = 0, khi = t->kv_len;
    if (!t->full) row_ranges(w, seq, g, t, r0, nr, &klo, &khi);
    for (int32_t c0 = klo; c0 < khi; c0 += KB) {
        const int32_t nc = khi - c0 < KB ? khi - c0 : KB;
        int any = t->full;
        for (int32_t i = 0; i < nr && !any; i++) any = dcp_cpu_row_sees(&w->rows, i, c0, c0 + nc);
        if (!any) continue;
        for (int32_t c = 0; c < nc; c++) {
            const int64_t kr = k0 + (int64_t)(c0 + c) * t->k.stride;
            if (kt_ty == DCP_DTYPE_FP32) {
                const float *kf = (const float *)kb + kr;
                for (int32_t x = 0; x < d; x++) w->kt[(size_t)x * KB + c] = kf[x];
            } else {
                for (int32_t x = 0; x < d; x++)
                    w->kt[(size_t)x * KB + c] = dcp_cpu_load(kb, kt_ty, kr + x);
            }
        }
        /* values: fp32 rows are read in place, 2-byte rows widened once per chunk */
        const float *v = w->vc;
        int32_t v_stride = dv;
        if (vt_ty == DCP_DTYPE_FP32) {
            v = (const float *)vb + v0 + (int64_t)c0 * t->v.stride;
            v_stride = t->v.stride;
        } else {
            for (int32_t c = 0; c < nc; c++)
                for (int32_t x = 0; x < dv; x++)
                    w->vc[(size_t)c * dv + x] =
                        dcp_cpu_load(vb, vt_ty, v0 + (int64_t)(c0 + c) * t->v.stride + x);
        }
        for (int32_t i = 0; i < nr; i++) {
            float *s = w->s[i];
            if (!t->full && !dcp_cpu_row_sees(&w->rows, i, c0, c0 + nc)) continue;
            for (int32_t c = 0; c < nc; c++) s[c] = 0.0f;
            const float *q = w->qs + (size_t)i * d;
            for (int32_t x = 0; x < d; x++) {
                const float qx = q[x];
                const float *kt = w->kt + (size_t)x * KB;
                for (int32_t c = 0; c < nc; c++) s[c] += qx * kt[c];
            }
            w->seen[i] = 1; /* the row sees some key of the chunk */
            if (t->full) {
                w->bad[i] |= any_nonfinite(s, nc);
                if (w->softcap > 0.0f) cap_scores(s, nc, w->softcap);
            } else {
                for (int32_t c = 0; c < nc; c++)
                    if (dcp_cpu_row_has(&w->rows, i, c0 + c)) w->bad[i] |= any_nonfinite(&s[c], 1);
                if (w->softcap > 0.0f) cap_scores(s, nc, w->softcap);
                for (int32_t c = 0; c < nc; c++)
                    if (!dcp_cpu_row_has(&w->rows, i, c0 + c)) s[c] = -INFINITY;
            }
            softmax_update(w, i, nc, v, v_stride, t->full, c0);
        }
    }
}

/* Normalises rows [r0, r0 + nr) of head j and stores or merges them into the output: a row
 * without allowed keys as (0, -inf), a row that met a non-finite value as (NaN, NaN). */
static void store_rows(const attn_scratch_t *w, const dcp_kernel_env_t *env,
                       const dcp_tile_group_t *g, int32_t j, int32_t r0, int32_t nr)
{
    const int32_t d = w->dv;
    const dcp_dtype_t oty = dcp_buf_dtype(g->o.buf, w->dtype);
    void *o = env->bufs[g->o.buf];
    float *lse = (float *)env->bufs[g->lse.buf] + g->lse.off + j;
    for (int32_t i = 0; i < nr; i++) {
        const int64_t orow = g->o.off + (int64_t)j * d + (int64_t)(r0 + i) * g->o.stride;
        float *lrow = lse + (size_t)(r0 + i) * g->lse.stride;
        const float *acc = w->acc + (size_t)i * d;
        float l_new = -INFINITY, inv = 0.0f;
        if (w->seen[i]) {
            l_new = w->m[i] + logf(w->l[i]);
            inv = 1.0f / w->l[i];
            if (w->bad[i] || !isfinite(l_new) || any_nonfinite(acc, d)) l_new = inv = NAN;
        }
        float wt[2] = {0.0f, 1.0f};
        if (g->accumulate) {
            const float l2[2] = {*lrow, l_new};
            *lrow = dcp_lse_weights(l2, 2, wt);
        } else {
            *lrow = l_new;
        }
        if (oty == DCP_DTYPE_FP32) {
            float *of = (float *)o + orow;
            for (int32_t x = 0; x < d; x++)
                of[x] = (g->accumulate ? wt[0] * of[x] : 0.0f) + wt[1] * acc[x] * inv;
            continue;
        }
        for (int32_t x = 0; x < d; x++) {
            const float old = g->accumulate ? wt[0] * dcp_cpu_load(o, oty, orow + x) : 0.0f;
            store_elem(o, oty, orow + x, old + wt[1] * acc[x] * inv);
        }
    }
}

static void run_group(attn_scratch_t *w, const dcp_kernel_env_t *env, const dcp_tile_group_t *g,
                      const dcp_tile_t *tiles)
{
    const dcp_seq_info_t *seq = &env->seqs[g->seq];
    const int32_t d = w->d, rep = env->q_heads / env->kv_heads;
    const dcp_dtype_t qty = dcp_buf_dtype(g->q.buf, w->dtype);
    const void *q = env->bufs[g->q.buf];
    for (int32_t j = 0; j < env->q_heads; j++) {
        for (int32_t r0 = 0; r0 < g->q_len; r0 += QB) {
            const int32_t nr = g->q_len - r0 < QB ? g->q_len - r0 : QB;
            for (int32_t i = 0; i < nr; i++) {
                const int64_t qr = g->q.off + (int64_t)(r0 + i) * g->q.stride + (int64_t)j * d;
                for (int32_t x = 0; x < d; x++)
                    w->qs[(size_t)i * d + x] = dcp_cpu_load(q, qty, qr + x) * env->scale;
                w->m[i] = -INFINITY;
                w->l[i] = 0.0f;
                w->seen[i] = w->bad[i] = 0;
            }
            memset(w->acc, 0, (size_t)nr * w->dv * sizeof(float));
            for (int32_t t = g->first_tile; t < g->first_tile + g->num_tiles; t++)
                attend_tile(w, env, seq, g, &tiles[t], j / rep, r0, nr);
            store_rows(w, env, g, j, r0, nr);
            if (env->max_logit) { /* a row's m is the largest allowed (capped) score it saw */
                float *mx = &env->max_logit[(int64_t)g->head_group * env->q_heads + j];
                for (int32_t i = 0; i < nr; i++) *mx = w->m[i] > *mx ? w->m[i] : *mx;
            }
        }
    }
}

dcp_status_t dcp_cpu_attn_fwd(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles)
{
    if (env->dtype != DCP_DTYPE_FP32 && env->dtype != DCP_DTYPE_BF16 &&
        env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu attention: dtype %d", (int)env->dtype);
    attn_scratch_t *w;
    DCP_CHECK(dcp_calloc(&w, 1, sizeof *w, "attention scratch"));
    const int32_t d = env->head_dim, dv = dcp_env_dv(env);
    w->d = d;
    w->dv = dv;
    w->softcap = env->softcap;
    w->dtype = env->dtype;
    dcp_status_t st = DCP_OK;
    DCP_CHECK_GOTO(dcp_calloc(&w->qs, (int64_t)QB * d, sizeof(float), "attention scratch"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&w->acc, (int64_t)QB * dv, sizeof(float), "attention scratch"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&w->kt, (int64_t)KB * d, sizeof(float), "attention scratch"), st,
                   out);
    DCP_CHECK_GOTO(dcp_calloc(&w->vc, (int64_t)KB * dv, sizeof(float), "attention scratch"), st,
                   out);
    for (int64_t g = 0; g < num_groups; g++) run_group(w, env, &groups[g], tiles);
out:
    free(w->qs);
    free(w->acc);
    free(w->kt);
    free(w->vc);
    free(w);
    return st;
}
