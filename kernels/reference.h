/* Single-device attention in double precision: the reference every distributed result is
 * checked against. Tensors are the whole batch in THD layout, sequences concatenated. */
#ifndef DCP_KERNELS_REFERENCE_H
#define DCP_KERNELS_REFERENCE_H

#include "include/base/descr.h"

/* o: [tokens, Hq, D], lse: [tokens, Hq] (natural log; -inf and O = 0 for a query with no
 * allowed key). `shape->scale` 0 means 1/sqrt(D). Runs on `threads` threads (>= 1).
 * With o_low (same layout), also the plain computation in shape->dtype that the GPU
 * kernels' error is judged against (FlashAttention's rule): probabilities rounded to the
 * dtype before P.V, fp32 sums, the output rounded to the dtype. */
dcp_status_t dcp_reference_attention(const dcp_seq_info_t *seqs, int32_t num_seqs,
                                     const dcp_attn_shape_t *shape, const float *q, const float *k,
                                     const float *v, double *o, double *lse, float *o_low,
                                     int32_t threads);

/* FlashAttention's rule for a bf16/fp16 result: its max |O - O_ref| is at most twice that of
 * the plain computation (o_low above) plus one rounding step of max |O_ref| (2^-8 bf16, 2^-11
 * fp16), and its LSE error (relative, over finite LSE) is at most 1e-3. */
int dcp_lowp_rule_holds(dcp_dtype_t dtype, double max_abs_err, double low_abs_err, double ref_max,
                        double lse_err);

#endif
