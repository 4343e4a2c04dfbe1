/*
 * The dense calls of the attention engine on the CPU (kernels/segment.h): what cuDNN's
 * ragged SDPA computes from the same packed buffers, lengths and offsets, so that the
 * segmenter's cut, packing and merges are proven without a GPU. fp32 arithmetic over the plan
 * dtype; the outputs rounded to the plan dtype as cuDNN writes them, the statistics fp32.
 * Written for clarity, not speed: the tests run small launches.
 */
#include "kernels/cpu.h"
#include "kernels/segment.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A call's per-entry lengths and offsets (dcp_seg_int_array's layout). */
typedef struct {
    const int32_t *seq_q, *seq_kv, *off_q, *off_o, *off_k, *off_v, *off_st;
} ints_t;

static ints_t call_ints(const dcp_dense_call_t *call, const int32_t *ints)
{
    const int32_t *b = ints + call->ints;
    const int64_t cap = call->cap;
    return (ints_t){b + dcp_seg_int_array(cap, DCP_SEG_SEQ_Q),
                    b + dcp_seg_int_array(cap, DCP_SEG_SEQ_KV),
                    b + dcp_seg_int_array(cap, DCP_SEG_OFF_Q),
                    b + dcp_seg_int_array(cap, DCP_SEG_OFF_O),
                    b + dcp_seg_int_array(cap, DCP_SEG_OFF_K),
                    b + dcp_seg_int_array(cap, DCP_SEG_OFF_V),
                    b + dcp_seg_int_array(cap, DCP_SEG_OFF_ST)};
}

static void store(void *base, dcp_dtype_t dtype, int64_t i, float v)
{
    if (dtype == DCP_DTYPE_FP32)
        ((float *)base)[i] = v;
    else
        ((uint16_t *)base)[i] = dcp_half_from_f32(dtype, v);
}

static dcp_status_t check_call(const dcp_kernel_env_t *env, const dcp_dense_call_t *call,
                               const char *what)
{
    if (!dcp_cpu_dtype_ok(env->dtype))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: dtype %d", what, (int)env->dtype);
    if (call->batch > 0 && (!env->bufs[DCP_BUF_SEG] || !env->bufs[DCP_BUF_SEG32]))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s: the engine buffers are missing", what);
    return DCP_OK;
}

/* The scaled score of row x, head h against key y of an entry (Q and K at q0, k0). */
static float score(const dcp_kernel_env_t *env, const void *seg, int64_t q0, int64_t k0, int32_t x,
                   int32_t y, int32_t h)
{
    const int32_t hq = env->q_heads, rep = env->q_heads / env->kv_heads, d = env->head_dim;
    const int64_t qr = q0 + ((int64_t)x * hq + h) * d,
                  kr = k0 + ((int64_t)y * env->kv_heads + h / rep) * d;
    float dot = 0.0f;
    for (int32_t c = 0; c < d; c++)
        dot += dcp_cpu_load(seg, env->dtype, qr + c) * dcp_cpu_load(seg, env->dtype, kr + c);
    return dot * env->scale;
}

dcp_status_t dcp_dense_cpu_fwd(const dcp_kernel_env_t *env, const dcp_dense_call_t *call,
                               const int32_t *ints)
{
    DCP_CHECK(check_call(env, call, "dense forward"));
    const ints_t in = call_ints(call, ints);
    const int32_t hq = env->q_heads, hkv = env->kv_heads, rep = hq / hkv, dv = dcp_env_dv(env);
    const dcp_dtype_t ty = env->dtype;
    void *seg = env->bufs[DCP_BUF_SEG];
    float *st = (float *)env->bufs[DCP_BUF_SEG32] + call->stats;
    float *s = NULL, *acc = NULL;
    DCP_CHECK(dcp_calloc(&s, call->max_kv + 1, sizeof *s, "dense scratch"));
    dcp_status_t rc = dcp_calloc(&acc, dv, sizeof *acc, "dense scratch");
    for (int32_t e = 0; rc == DCP_OK && e < call->batch; e++) {
        const int32_t sq = in.seq_q[e], skv = in.seq_kv[e];
        const int64_t q0 = call->q + in.off_q[e], k0 = call->k + in.off_k[e],
                      v0 = call->v + in.off_v[e], o0 = call->o + in.off_o[e];
        for (int32_t h = 0; h < hq; h++)
            for (int32_t x = 0; x < sq; x++) {
                float mx = -INFINITY;
                for (int32_t y = 0; y < skv; y++) {
                    s[y] = -INFINITY;
                    if (!dcp_seg_sees(call->cls, call->window, x, y, sq, skv)) continue;
                    s[y] = score(env, seg, q0, k0, x, y, h);
                    mx = s[y] > mx ? s[y] : mx;
                }
                float sum = 0.0f;
                memset(acc, 0, (size_t)dv * sizeof *acc);
                for (int32_t y = 0; y < skv; y++) {
                    if (s[y] == -INFINITY) continue;
                    const float p = expf(s[y] - mx);
                    const int64_t vr = v0 + ((int64_t)y * hkv + h / rep) * dv;
                    sum += p;
                    for (int32_t c = 0; c < dv; c++) acc[c] += p * dcp_cpu_load(seg, ty, vr + c);
                }
                const int64_t orow = o0 + ((int64_t)x * hq + h) * dv;
                for (int32_t c = 0; c < dv; c++) store(seg, ty, orow + c, acc[c] / sum);
                st[in.off_st[e] + (int64_t)x * hq + h] = mx + logf(sum);
            }
    }
    free(s);
    free(acc);
    return rc;
}

dcp_status_t dcp_dense_cpu_bwd(const dcp_kernel_env_t *env, const dcp_dense_call_t *call,
                               const int32_t *ints)
{
    DCP_CHECK(check_call(env, call, "dense backward"));
    const ints_t in = call_ints(call, ints);
    const int32_t hq = env->q_heads, hkv = env->kv_heads, rep = hq / hkv, d = env->head_dim,
                  dv = dcp_env_dv(env);
    const dcp_dtype_t ty = env->dtype;
    void *seg = env->bufs[DCP_BUF_SEG];
    const float *st = (const float *)env->bufs[DCP_BUF_SEG32] + call->stats;
    float *dq = NULL, *dk = NULL, *dvs = NULL;
    dcp_status_t rc = DCP_OK;
    for (int32_t e = 0; rc == DCP_OK && e < call->batch; e++) {
        const int32_t sq = in.seq_q[e], skv = in.seq_kv[e];
        /* fp32 sums of the entry: dQ [sq, hq, d], dK [skv, hkv, d], dV [skv, hkv, dv] */
        free(dq);
        free(dk);
        free(dvs);
        dq = dk = dvs = NULL;
        rc = dcp_calloc(&dq, (int64_t)sq * hq * d + 1, sizeof *dq, "dense scratch");
        if (rc == DCP_OK) rc = dcp_calloc(&dk, (int64_t)skv * hkv * d + 1, sizeof *dk, "dense scratch");
        if (rc == DCP_OK)
            rc = dcp_calloc(&dvs, (int64_t)skv * hkv * dv + 1, sizeof *dvs, "dense scratch");
        if (rc != DCP_OK) break;
        const int64_t q0 = call->q + in.off_q[e], k0 = call->k + in.off_k[e],
                      v0 = call->v + in.off_v[e], o0 = call->o + in.off_o[e],
                      g0 = call->dout + in.off_o[e];
        for (int32_t h = 0; h < hq; h++) {
            const int32_t kh = h / rep;
            for (int32_t x = 0; x < sq; x++) {
                const int64_t qr = q0 + ((int64_t)x * hq + h) * d;
                const int64_t orow = o0 + ((int64_t)x * hq + h) * dv,
                              grow = g0 + ((int64_t)x * hq + h) * dv;
                float delta = 0.0f; /* rowsum(dO * O), as the engine computes it from O */
                for (int32_t c = 0; c < dv; c++)
                    delta += dcp_cpu_load(seg, ty, grow + c) * dcp_cpu_load(seg, ty, orow + c);
                const float lse = st[in.off_st[e] + (int64_t)x * hq + h];
                for (int32_t y = 0; y < skv; y++) {
                    if (!dcp_seg_sees(call->cls, call->window, x, y, sq, skv)) continue;
                    const int64_t kr = k0 + ((int64_t)y * hkv + kh) * d,
                                  vr = v0 + ((int64_t)y * hkv + kh) * dv;
                    float dp = 0.0f;
                    for (int32_t c = 0; c < dv; c++)
                        dp += dcp_cpu_load(seg, ty, grow + c) * dcp_cpu_load(seg, ty, vr + c);
                    const float p = expf(score(env, seg, q0, k0, x, y, h) - lse);
                    const float ds = p * (dp - delta) * env->scale;
                    float *dqr = dq + ((int64_t)x * hq + h) * d;
                    float *dkr = dk + ((int64_t)y * hkv + kh) * d,
                          *dvr = dvs + ((int64_t)y * hkv + kh) * dv;
                    for (int32_t c = 0; c < dv; c++) dvr[c] += p * dcp_cpu_load(seg, ty, grow + c);
                    for (int32_t c = 0; c < d; c++) {
                        dqr[c] += ds * dcp_cpu_load(seg, ty, kr + c);
                        dkr[c] += ds * dcp_cpu_load(seg, ty, qr + c);
                    }
                }
            }
        }
        for (int64_t i = 0; i < (int64_t)sq * hq * d; i++)
            store(seg, ty, call->dq + in.off_q[e] + i, dq[i]);
        for (int64_t i = 0; i < (int64_t)skv * hkv * d; i++)
            store(seg, ty, call->dk + in.off_k[e] + i, dk[i]);
        for (int64_t i = 0; i < (int64_t)skv * hkv * dv; i++)
            store(seg, ty, call->dv + in.off_v[e] + i, dvs[i]);
    }
    free(dq);
    free(dk);
    free(dvs);
    return rc;
}
