/*
 * The attention variants' row kernels on the GPU (kernel.h): learnable sinks after the merge
 * and their gradient, and the max logit's reduction between ranks; the CPU's are
 * kernels/variants_cpu.c, with the same arithmetic.
 *
 * sinks_fwd: one thread per (row, head) of the fp32 accumulators, grid-stride; a row's O is
 * scaled by exp(L - L') with L' = logaddexp(L, s). sinks_bwd: one block per head, its threads
 * striding over the rows and a fixed tree over the block, so the sum's order is the same on
 * every run (no atomics). max_f32: one thread per element.
 */
#include "kernels/cuda/ops.h"

#include "include/base/error.h"

#include <cuda_runtime.h>

namespace dcp_cuda::variants
{

constexpr int THREADS = 256;

__global__ void __launch_bounds__(THREADS)
    sinks_fwd_kernel(float *o, float *lse, const float *sinks, int64_t rows, int heads, int dv)
{
    for (int64_t i = blockIdx.x * (int64_t)THREADS + threadIdx.x; i < rows * heads;
         i += (int64_t)gridDim.x * THREADS) {
        const float l = lse[i], s = sinks[i % heads];
        /* a row without keys (L = -inf) keeps O = 0 and gets L' = s; a NaN row stays NaN */
        const float m = l > s ? l : s;
        const float l2 = l == -INFINITY ? s : m + logf(expf(l - m) + expf(s - m));
        const float w = l == -INFINITY ? 0.0f : expf(l - l2);
        float *row = o + i * dv;
        for (int x = 0; x < dv; x++) row[x] *= w;
        lse[i] = l2;
    }
}

__global__ void __launch_bounds__(THREADS)
    sinks_bwd_kernel(const float *lse, const float *delta, const float *sinks, float *dsinks,
                     int64_t rows, int heads)
{
    __shared__ float part[THREADS];
    const int h = blockIdx.x;
    const float s = sinks[h];
    float sum = 0.0f;
    for (int64_t r = threadIdx.x; r < rows; r += THREADS)
        sum += expf(s - lse[r * heads + h]) * delta[r * heads + h];
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if ((int)threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
        __syncthreads();
    }
    if (threadIdx.x == 0) dsinks[h] = -part[0];
}

__global__ void __launch_bounds__(THREADS) max_kernel(float *dst, const float *src, int n)
{
    const int i = blockIdx.x * THREADS + threadIdx.x;
    if (i < n) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
}

static dcp_status_t launched(const char *what)
{
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda %s launch: %s", what, cudaGetErrorString(e));
    return DCP_OK;
}

} // namespace dcp_cuda::variants

using namespace dcp_cuda::variants;

extern "C" dcp_status_t dcp_cuda_sinks_fwd(const dcp_kernel_env_t *env, int64_t tokens,
                                           int32_t heads, const float *sinks)
{
    if (tokens == 0) return DCP_OK;
    float *o = (float *)env->bufs[DCP_BUF_ACC_O], *lse = (float *)env->bufs[DCP_BUF_ACC_LSE];
    if (!o || !lse || !sinks || heads < 1 || tokens < 0)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cuda sinks: accumulators or sinks missing");
    const int64_t want = (tokens * heads + THREADS - 1) / THREADS, cap = 1 << 16;
    sinks_fwd_kernel<<<(unsigned)(want < cap ? want : cap), THREADS, 0,
                       (cudaStream_t)env->stream>>>(o, lse, sinks, tokens, heads, dcp_env_dv(env));
    return launched("sinks");
}

extern "C" dcp_status_t dcp_cuda_sinks_bwd(const dcp_kernel_env_t *env, int64_t tokens,
                                           int32_t heads, const float *sinks, float *dsinks)
{
    const float *lse = (const float *)env->bufs[DCP_BUF_LSE],
                *delta = (const float *)env->bufs[DCP_BUF_DELTA];
    if (!sinks || !dsinks || heads < 1 || tokens < 0 || (tokens > 0 && (!lse || !delta)))
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cuda sinks backward: inputs missing");
    sinks_bwd_kernel<<<(unsigned)heads, THREADS, 0, (cudaStream_t)env->stream>>>(
        lse, delta, sinks, dsinks, tokens, heads);
    return launched("sinks backward");
}

extern "C" dcp_status_t dcp_cuda_max_f32(const dcp_kernel_env_t *env, float *dst, const float *src,
                                         int32_t n)
{
    if (n <= 0) return DCP_OK;
    max_kernel<<<(unsigned)((n + THREADS - 1) / THREADS), THREADS, 0, (cudaStream_t)env->stream>>>(
        dst, src, n);
    return launched("max");
}
