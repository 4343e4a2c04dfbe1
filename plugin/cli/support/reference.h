/* Single-device attention in double precision: the reference every distributed result is
 * checked against. Tensors are the whole batch in THD layout, sequences concatenated. */
#ifndef DCPT_SUPPORT_REFERENCE_H
#define DCPT_SUPPORT_REFERENCE_H

#include "include/base/descr.h"

/* What the reference adds to plain attention; each field may be NULL. sinks [Hq]: a learnable
 * sink logit per query head in every row's denominator, carrying no value (GPT-OSS). Outputs:
 * max_logit [Hq], the forward's largest score of an allowed pair per query head over the
 * batch (after scale and softcap, sinks excluded; -inf for a head without one); dsinks [Hq],
 * the backward's gradient of the loss with respect to the sinks. The softcap and the value
 * head dim come with the shape. */
typedef struct {
    const float *sinks;
    double *max_logit;
    double *dsinks;
} dcpt_ref_extra_t;

/* o: [tokens, Hq, D_v], lse: [tokens, Hq] (natural log; -inf and O = 0 for a query with no
 * allowed key, the sink's logit with sinks). `shape->scale` 0 means 1/sqrt(D); a softcap c
 * makes every scaled score c tanh(s / c). Runs on `threads` threads (>= 1).
 * With o_low (same layout), also the plain computation in shape->dtype that the GPU
 * kernels' error is judged against (FlashAttention's rule): probabilities rounded to the
 * dtype before P.V, fp32 sums, the output rounded to the dtype. */
dcp_status_t dcpt_reference_attention(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                      const dcp_attn_shape_t *shape, const float *q, const float *k,
                                      const float *v, double *o, double *lse, float *o_low,
                                      int32_t threads);
/* The same with `extra` (NULL: none). */
dcp_status_t dcpt_reference_attention_x(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                        const dcp_attn_shape_t *shape, const float *q,
                                        const float *k, const float *v,
                                        const dcpt_ref_extra_t *extra, double *o, double *lse,
                                        float *o_low, int32_t threads);

/* FlashAttention's rule for a bf16/fp16 result: its max |O - O_ref| is at most twice that of
 * the plain computation (o_low above) plus one rounding step of max |O_ref| (2^-8 bf16, 2^-11
 * fp16), and its LSE error (relative, over finite LSE) is at most 1e-3. */
int dcpt_lowp_rule_holds(dcp_dtype_t dtype, double max_abs_err, double low_abs_err, double ref_max,
                         double lse_err);

/* The backward of the attention above, in double precision: given dO (`dout`, layout of
 * o), dq [tokens, Hq, D], dk [tokens, Hkv, D] and dv [tokens, Hkv, D_v] (each KV head's
 * gradient summed over the query heads that share it). O and LSE come from its own double forward,
 * so the result is exact up to double rounding; queries with no allowed key get dQ = 0 and add
 * nothing. dq_low, dk_low, dv_low (each may be NULL; layouts of dq, dk, dv) receive the plain
 * computation in shape->dtype that FlashAttention's rule compares a low-precision backward
 * against: fp32 scores, LSE and sums; O and the outputs rounded to the dtype; delta from that
 * O; P and dS rounded to the dtype before their products (fp32 dtype: plain fp32). Runs on
 * `threads` threads; the result does not depend on their number. */
dcp_status_t dcpt_reference_backward(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                     const dcp_attn_shape_t *shape, const float *q, const float *k,
                                     const float *v, const float *dout, double *dq, double *dk,
                                     double *dv, float *dq_low, float *dk_low, float *dv_low,
                                     int32_t threads);
/* The same with `extra` (NULL: none): its sinks in the forward it recomputes, and dsinks
 * (which needs sinks), each head's sum over every query row in sequence order. */
dcp_status_t dcpt_reference_backward_x(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                       const dcp_attn_shape_t *shape, const float *q,
                                       const float *k, const float *v, const float *dout,
                                       const dcpt_ref_extra_t *extra, double *dq, double *dk,
                                       double *dv, float *dq_low, float *dk_low, float *dv_low,
                                       int32_t threads);

/* FlashAttention-2's rule for a gradient (dQ, dK or dV) in bf16/fp16: its max |g - g_ref| is
 * at most three times that of the plain computation (the *_low outputs above) plus one
 * rounding step of max |g_ref| (2^-8 bf16, 2^-11 fp16; 2^-24 fp32). */
int dcpt_lowp_grad_rule_holds(dcp_dtype_t dtype, double max_abs_err, double low_abs_err,
                              double ref_max);

#endif
