/*
 * Fused masked attention backward on the CPU (kernels/README.md, "Backward pass"): fp32 math over
 * fp32, bf16 or fp16 storage of Q, dO, K and V; LSE, delta and the gradients are fp32.
 *
 * For each tile group, query head and block of QB query rows, the group's KV tiles are
 * streamed in chunks of KB keys. With the final LSE and delta of each row, every chunk is
 * independent of the others:
 *
 *     P = exp(scale q.k - LSE)   dP = dO.v   dS = P (dP - delta)
 *     dV += P^T dO    dK += scale dS^T Q    dQ += scale dS K
 *
 * so no score matrix larger than QB x KB exists. With a softcap c the score is
 * c tanh(scale q.k / c) and dS takes the factor 1 - tanh^2. Q, K, dQ and dK rows have d_qk
 * elements, V, dO and dV rows d_v. Rows with LSE = -inf (no allowed key) take
 * no part; any other value, NaN included, is used as it is, so bad inputs show in the
 * gradients. Masked pairs are skipped rather than multiplied by zero, so a NaN in one row's
 * dO reaches exactly the gradients that row contributes to. Full tiles never evaluate the
 * mask; partial tiles compute every row's allowed keys once per tile and skip chunks no row
 * may see. Sums run in the order of the plain loops; four terms are added per pass over a
 * destination row (axpy4) to save stores, which does not change the result.
 */
#include "kernels/cpu.h"
#include "kernels/cpu_rows.h"

#include "include/base/error.h"
#include "include/base/mask_rule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The helpers of the multiversioned tile loop are inlined into each of its versions, so
 * that they are compiled for its instruction set too. */
#if defined(__GNUC__)
#define DCP_CPU_INLINE inline __attribute__((always_inline))
#else
#define DCP_CPU_INLINE inline
#endif

#define QB DCP_CPU_QB
#define KB 64

typedef struct {
    int32_t d, dv;     /* Q/K and V/dO elements per head */
    float softcap;     /* 0: off */
    dcp_dtype_t dtype; /* storage of Q, dO, K and V where their buffers are not fp32 */
    float *qs;         /* [QB][d] scale * q */
    float *dob;        /* [QB][dv] dO rows */
    float *dqa;        /* [QB][d] dQ / scale over the group's tiles */
    float *kt, *vt;    /* [d][KB], [dv][KB] transposed key and value chunks */
    float *kc;         /* [KB][d] key chunk widened to fp32 (2-byte storage only) */
    float p[QB][KB];   /* P of the chunk */
    float ds[QB][KB];  /* dP, then dS */
    float lse[QB], delta[QB];
    dcp_cpu_rows_t rows; /* allowed keys of each row, tile-local; empty: no part */
} bwd_scratch_t;

/* y += a * x over n elements. */
static DCP_CPU_INLINE void axpy1(float *restrict y, float a, const float *restrict x, int32_t n)
{
    for (int32_t e = 0; e < n; e++) y[e] += a * x[e];
}

/* y += a[0] x0 + a[1] x1 + a[2] x2 + a[3] x3, added left to right: the same sums as four
 * axpy1 calls in that order, in one pass over y. */
static DCP_CPU_INLINE void axpy4(float *restrict y, const float *a, const float *restrict x0,
                                 const float *restrict x1, const float *restrict x2,
                                 const float *restrict x3, int32_t n)
{
    const float a0 = a[0], a1 = a[1], a2 = a[2], a3 = a[3];
    for (int32_t e = 0; e < n; e++) y[e] = y[e] + a0 * x0[e] + a1 * x1[e] + a2 * x2[e] + a3 * x3[e];
}

/* Allowed keys of rows [r0, r0 + nr) inside the tile (rows with LSE = -inf: none); returns
 * the key span they cover (empty: klo >= khi). */
static void row_ranges(bwd_scratch_t *w, const dcp_seq_info_t *seq, const dcp_tile_group_t *g,
                       const dcp_tile_t *t, int32_t r0, int32_t nr, int32_t *klo, int32_t *khi)
{
    *klo = t->kv_len;
    *khi = 0;
    for (int32_t i = 0; i < nr; i++) {
        int32_t rg[4] = {t->kv_pos, t->kv_pos + t->kv_len, 0, 0};
        if (w->lse[i] == -INFINITY)
            rg[1] = rg[0];
        else if (!t->full)
            dcp_mask_keys(&seq->mask, seq->len, g->q_pos + r0 + i, rg);
        dcp_cpu_row_set(&w->rows, i, rg, t->kv_pos, t->kv_len, klo, khi);
    }
}

/* K and V of keys [c0, c0 + nc) transposed into kt, vt; returns the K rows as fp32 (in
 * place for fp32 storage, else widened into kc) and their stride. */
static DCP_CPU_INLINE const float *pack_chunk(bwd_scratch_t *w, const dcp_kernel_env_t *env,
                                              const dcp_tile_t *t, int32_t kvh, int32_t c0,
                                              int32_t nc, int64_t *stride_out)
{
    const int32_t d = w->d, dv = w->dv;
    const dcp_dtype_t kty = dcp_buf_dtype(t->k.buf, w->dtype),
                      vty = dcp_buf_dtype(t->v.buf, w->dtype);
    const void *kb = env->bufs[t->k.buf], *vb = env->bufs[t->v.buf];
    const int64_t k0 = t->k.off + (int64_t)kvh * d + (int64_t)c0 * t->k.stride,
                  v0 = t->v.off + (int64_t)kvh * dv + (int64_t)c0 * t->v.stride;
    for (int32_t c = 0; c < nc; c++) {
        const int64_t kr = k0 + (int64_t)c * t->k.stride, vr = v0 + (int64_t)c * t->v.stride;
        if (kty == DCP_DTYPE_FP32) {
            const float *kf = (const float *)kb + kr;
            for (int32_t x = 0; x < d; x++) w->kt[(size_t)x * KB + c] = kf[x];
        } else {
            float *kw = w->kc + (size_t)c * d;
            for (int32_t x = 0; x < d; x++) kw[x] = dcp_cpu_load(kb, kty, kr + x);
            for (int32_t x = 0; x < d; x++) w->kt[(size_t)x * KB + c] = kw[x];
        }
        for (int32_t x = 0; x < dv; x++) w->vt[(size_t)x * KB + c] = dcp_cpu_load(vb, vty, vr + x);
    }
    if (kty == DCP_DTYPE_FP32) {
        *stride_out = t->k.stride;
        return (const float *)kb + k0;
    }
    *stride_out = d;
    return w->kc;
}

/* y[0..nc) = sum over x < n of a[x] t[x][0..nc): the product of a row with a transposed
 * chunk, four rows of t a pass. */
static DCP_CPU_INLINE void row_times_chunk(float *y, const float *a, const float *t, int32_t n,
                                           int32_t nc)
{
    for (int32_t c = 0; c < nc; c++) y[c] = 0.0f;
    int32_t x = 0;
    for (; x + 4 <= n; x += 4) {
        const float *tx = t + (size_t)x * KB;
        axpy4(y, a + x, tx, tx + KB, tx + 2 * KB, tx + 3 * KB, nc);
    }
    for (; x < n; x++) axpy1(y, a[x], t + (size_t)x * KB, nc);
}

/* P and dS of row i against the chunk's nc keys, masked or not: the products below read
 * only the allowed ones. */
static DCP_CPU_INLINE void row_scores(bwd_scratch_t *w, int32_t i, int32_t nc)
{
    float *s = w->p[i], *dp = w->ds[i];
    row_times_chunk(s, w->qs + (size_t)i * w->d, w->kt, w->d, nc);
    row_times_chunk(dp, w->dob + (size_t)i * w->dv, w->vt, w->dv, nc);
    const float l = w->lse[i], dl = w->delta[i], cap = w->softcap;
    if (cap > 0.0f) { /* s = cap tanh(x / cap): dS/dx = 1 - tanh^2 */
        const float inv = 1.0f / cap;
        for (int32_t c = 0; c < nc; c++) {
            const float t = tanhf(s[c] * inv), p = expf(cap * t - l);
            s[c] = p;
            dp[c] = p * (dp[c] - dl) * (1.0f - t * t);
        }
        return;
    }
    for (int32_t c = 0; c < nc; c++) {
        const float p = expf(s[c] - l);
        s[c] = p;
        dp[c] = p * (dp[c] - dl);
    }
}

/* dQ of row i += dS K over the row's allowed keys in the chunk. */
static DCP_CPU_INLINE void row_dq(bwd_scratch_t *w, int32_t i, int32_t c0, int32_t nc,
                                  const float *k, int64_t ks)
{
    const int32_t d = w->d;
    float *dq = w->dqa + (size_t)i * d;
    const float *ds = w->ds[i];
    for (int j = 0; j < 2; j++) {
        const int32_t a = (w->rows.lo[i][j] > c0 ? w->rows.lo[i][j] : c0) - c0,
                      b = (w->rows.hi[i][j] < c0 + nc ? w->rows.hi[i][j] : c0 + nc) - c0;
        int32_t c = a;
        for (; c + 4 <= b; c += 4)
            axpy4(dq, ds + c, k + c * ks, k + (c + 1) * ks, k + (c + 2) * ks, k + (c + 3) * ks, d);
        for (; c < b; c++) axpy1(dq, ds[c], k + c * ks, d);
    }
}

/* dV, dK of key c0 + c += P^T dO, dS^T (scale Q) over the rows that see it (all: every row
 * sees every key of the chunk). */
static DCP_CPU_INLINE void key_dkv(bwd_scratch_t *w, int32_t nr, int32_t c0, int32_t c, int all,
                                   float *dk, float *dv)
{
    const int32_t d = w->d, e = w->dv, key = c0 + c;
    int32_t i = 0;
    for (; i + 4 <= nr; i += 4) {
        if (all ||
            (dcp_cpu_row_has(&w->rows, i, key) && dcp_cpu_row_has(&w->rows, i + 1, key) &&
             dcp_cpu_row_has(&w->rows, i + 2, key) && dcp_cpu_row_has(&w->rows, i + 3, key))) {
            const float pa[4] = {w->p[i][c], w->p[i + 1][c], w->p[i + 2][c], w->p[i + 3][c]};
            const float da[4] = {w->ds[i][c], w->ds[i + 1][c], w->ds[i + 2][c], w->ds[i + 3][c]};
            const float *o = w->dob + (size_t)i * e, *q = w->qs + (size_t)i * d;
            axpy4(dv, pa, o, o + e, o + 2 * e, o + 3 * e, e);
            axpy4(dk, da, q, q + d, q + 2 * d, q + 3 * d, d);
            continue;
        }
        for (int32_t u = i; u < i + 4; u++)
            if (dcp_cpu_row_has(&w->rows, u, key)) {
                axpy1(dv, w->p[u][c], w->dob + (size_t)u * e, e);
                axpy1(dk, w->ds[u][c], w->qs + (size_t)u * d, d);
            }
    }
    for (; i < nr; i++)
        if (dcp_cpu_row_has(&w->rows, i, key)) {
            axpy1(dv, w->p[i][c], w->dob + (size_t)i * e, e);
            axpy1(dk, w->ds[i][c], w->qs + (size_t)i * d, d);
        }
}

/* One KV tile against query rows [r0, r0 + nr) of the head whose KV head is kvh. */
DCP_CPU_MULTIVERSION
static void tile_bwd(bwd_scratch_t *w, const dcp_kernel_env_t *env, const dcp_seq_info_t *seq,
                     const dcp_tile_group_t *g, const dcp_tile_t *t, int32_t kvh, int32_t r0,
                     int32_t nr)
{
    float *dk = (float *)env->bufs[t->dk.buf] + t->dk.off + (int64_t)kvh * w->d,
          *dv = (float *)env->bufs[t->dv.buf] + t->dv.off + (int64_t)kvh * w->dv;
    int32_t klo, khi;
    row_ranges(w, seq, g, t, r0, nr, &klo, &khi);
    for (int32_t c0 = klo; c0 < khi; c0 += KB) {
        const int32_t nc = khi - c0 < KB ? khi - c0 : KB;
        int any = 0;
        for (int32_t i = 0; i < nr && !any; i++) any = dcp_cpu_row_sees(&w->rows, i, c0, c0 + nc);
        if (!any) continue;
        int all = 1;
        for (int32_t i = 0; i < nr && all; i++) all = dcp_cpu_row_covers(&w->rows, i, c0, c0 + nc);
        int64_t ks;
        const float *k = pack_chunk(w, env, t, kvh, c0, nc, &ks);
        for (int32_t i = 0; i < nr; i++) {
            if (!dcp_cpu_row_sees(&w->rows, i, c0, c0 + nc)) continue;
            row_scores(w, i, nc);
            row_dq(w, i, c0, nc, k, ks);
        }
        for (int32_t c = 0; c < nc; c++)
            key_dkv(w, nr, c0, c, all, dk + (int64_t)(c0 + c) * t->dk.stride,
                    dv + (int64_t)(c0 + c) * t->dv.stride);
    }
}

/* Loads rows [r0, r0 + nr) of head j: scaled Q, dO, LSE and delta; clears their dQ. */
static void load_rows(bwd_scratch_t *w, const dcp_kernel_env_t *env, const dcp_tile_group_t *g,
                      int32_t j, int32_t r0, int32_t nr)
{
    const int32_t d = w->d, dv = w->dv;
    const dcp_dtype_t qty = dcp_buf_dtype(g->q.buf, w->dtype),
                      oty = dcp_buf_dtype(g->dout.buf, w->dtype);
    const void *q = env->bufs[g->q.buf], *dout = env->bufs[g->dout.buf];
    const float *lse = (const float *)env->bufs[g->lse.buf] + g->lse.off + j,
                *delta = (const float *)env->bufs[g->delta.buf] + g->delta.off + j;
    for (int32_t i = 0; i < nr; i++) {
        const int64_t qr = g->q.off + (int64_t)(r0 + i) * g->q.stride + (int64_t)j * d,
                      orow = g->dout.off + (int64_t)(r0 + i) * g->dout.stride + (int64_t)j * dv;
        for (int32_t x = 0; x < d; x++)
            w->qs[(size_t)i * d + x] = dcp_cpu_load(q, qty, qr + x) * env->scale;
        for (int32_t x = 0; x < dv; x++)
            w->dob[(size_t)i * dv + x] = dcp_cpu_load(dout, oty, orow + x);
        w->lse[i] = lse[(int64_t)(r0 + i) * g->lse.stride];
        w->delta[i] = delta[(int64_t)(r0 + i) * g->delta.stride];
    }
    memset(w->dqa, 0, (size_t)nr * d * sizeof(float));
}

static void run_group(bwd_scratch_t *w, const dcp_kernel_env_t *env, const dcp_tile_group_t *g,
                      const dcp_tile_t *tiles)
{
    const dcp_seq_info_t *seq = &env->seqs[g->seq];
    const int32_t d = w->d, rep = env->q_heads / env->kv_heads;
    float *dq = (float *)env->bufs[g->dq.buf] + g->dq.off;
    for (int32_t j = 0; j < env->q_heads; j++)
        for (int32_t r0 = 0; r0 < g->q_len; r0 += QB) {
            const int32_t nr = g->q_len - r0 < QB ? g->q_len - r0 : QB;
            load_rows(w, env, g, j, r0, nr);
            for (int32_t t = g->first_tile; t < g->first_tile + g->num_tiles; t++)
                tile_bwd(w, env, seq, g, &tiles[t], j / rep, r0, nr);
            for (int32_t i = 0; i < nr; i++) {
                float *dst = dq + (int64_t)(r0 + i) * g->dq.stride + (int64_t)j * d;
                const float *src = w->dqa + (size_t)i * d;
                for (int32_t x = 0; x < d; x++) dst[x] += env->scale * src[x];
            }
        }
}

/* LSE, delta and the gradients must be fp32 views: checked before anything is written. */
static dcp_status_t check_views(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                                int64_t num_groups, const dcp_tile_t *tiles)
{
    if (!dcp_cpu_dtype_ok(env->dtype))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu attention backward: dtype %d",
                             (int)env->dtype);
    if (env->q_heads < 1 || env->kv_heads < 1 || env->q_heads % env->kv_heads != 0 ||
        env->head_dim < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cpu attention backward: %d query heads, %d KV heads, D %d",
                             env->q_heads, env->kv_heads, env->head_dim);
    for (int64_t i = 0; i < num_groups; i++) {
        const dcp_tile_group_t *g = &groups[i];
        if (!dcp_buf_is_fp32(g->lse.buf) || !dcp_buf_is_fp32(g->delta.buf) ||
            !dcp_buf_is_fp32(g->dq.buf))
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "cpu attention backward: group %lld: LSE (buffer %d), delta "
                                 "(%d) and dQ (%d) must be fp32 buffers",
                                 (long long)i, g->lse.buf, g->delta.buf, g->dq.buf);
        for (int32_t t = g->first_tile; t < g->first_tile + g->num_tiles; t++)
            if (!dcp_buf_is_fp32(tiles[t].dk.buf) || !dcp_buf_is_fp32(tiles[t].dv.buf))
                return dcp_set_error(DCP_ERR_INVALID_ARG,
                                     "cpu attention backward: tile %d: dK (buffer %d) and dV "
                                     "(%d) must be fp32 buffers",
                                     t, tiles[t].dk.buf, tiles[t].dv.buf);
    }
    return DCP_OK;
}

dcp_status_t dcp_cpu_attn_bwd(const dcp_kernel_env_t *env, const dcp_tile_group_t *groups,
                              int64_t num_groups, const dcp_tile_t *tiles)
{
    DCP_CHECK(check_views(env, groups, num_groups, tiles));
    bwd_scratch_t *w;
    DCP_CHECK(dcp_calloc(&w, 1, sizeof *w, "attention backward scratch"));
    const int32_t d = env->head_dim, dv = dcp_env_dv(env);
    w->d = d;
    w->dv = dv;
    w->softcap = env->softcap;
    w->dtype = env->dtype;
    dcp_status_t st = DCP_OK;
    float **bufs[6] = {&w->qs, &w->dob, &w->dqa, &w->kt, &w->vt, &w->kc};
    const int64_t elems[6] = {QB * d, QB * dv, QB * d, KB * d, KB * dv, KB * d};
    for (int b = 0; b < 6; b++)
        DCP_CHECK_GOTO(dcp_calloc(bufs[b], elems[b], sizeof(float), "attention backward scratch"),
                       st, out);
    for (int64_t g = 0; g < num_groups; g++) run_group(w, env, &groups[g], tiles);
out:
    for (int b = 0; b < 6; b++) free(*bufs[b]);
    free(w);
    return st;
}
