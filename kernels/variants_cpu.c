/* The attention variants' row kernels on the CPU (kernel.h): learnable sinks after the merge
 * (kernels/README.md, Numerics) and their gradient, and the max logit's reduction between ranks. */
#include "kernels/cpu.h"

#include "include/base/error.h"

#include <math.h>

dcp_status_t dcp_cpu_sinks_fwd(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                               const float *sinks)
{
    if (tokens == 0) return DCP_OK;
    float *o = env->bufs[DCP_BUF_ACC_O], *lse = env->bufs[DCP_BUF_ACC_LSE];
    if (!o || !lse || !sinks || heads < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu sinks: accumulators or sinks missing");
    const int64_t dv = dcp_env_dv(env);
    for (int64_t t = 0; t < tokens; t++)
        for (int32_t h = 0; h < heads; h++) {
            float *l = &lse[t * heads + h], *row = o + (t * heads + h) * dv;
            const float s = sinks[h];
            /* L' = logaddexp(L, s); O' = O exp(L - L') = O sigmoid(L - s). A row without keys
             * (L = -inf) keeps O = 0 and gets L' = s; a NaN row stays NaN. */
            const float m = *l > s ? *l : s;
            const float l2 = *l == -INFINITY ? s : m + logf(expf(*l - m) + expf(s - m));
            const float w = *l == -INFINITY ? 0.0f : expf(*l - l2);
            for (int64_t x = 0; x < dv; x++) row[x] *= w;
            *l = l2;
        }
    return DCP_OK;
}

dcp_status_t dcp_cpu_sinks_bwd(const dcp_kernel_env_t *env, int64_t tokens, int32_t heads,
                               const float *sinks, float *dsinks)
{
    const float *lse = env->bufs[DCP_BUF_LSE], *delta = env->bufs[DCP_BUF_DELTA];
    if (!sinks || !dsinks || heads < 1 || (tokens > 0 && (!lse || !delta)))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cpu sinks backward: inputs missing");
    for (int32_t h = 0; h < heads; h++) {
        float sum = 0.0f;
        for (int64_t t = 0; t < tokens; t++)
            sum += expf(sinks[h] - lse[t * heads + h]) * delta[t * heads + h];
        dsinks[h] = -sum;
    }
    return DCP_OK;
}

dcp_status_t dcp_cpu_max_f32(const dcp_kernel_env_t *env, float *dst, const float *src, int32_t n)
{
    (void)env;
    for (int32_t i = 0; i < n; i++) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
    return DCP_OK;
}
