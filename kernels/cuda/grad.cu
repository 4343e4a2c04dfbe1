/*
 * The backward's memory-bound kernels: delta = rowsum(dO * O), its pre-pass, and the fp32
 * accumulation of partial gradients (REDUCE), one launch each.
 *
 * delta: one warp per row, grid-stride over the rows; lanes read pairs of elements where the
 * buffers allow it. accumulate: grid (item, row slice), rows visited grid-stride so any row
 * count is covered; the block of a sum's first item adds all of its sources (the partials
 * of one block from several ranks, descr.h), the others return.
 */
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

#include "include/base/error.h"

#include <cuda_runtime.h>

namespace dcp_cuda::grad
{

constexpr int THREADS = 256, WARPS = THREADS / 32;

/* Two consecutive elements of T as floats (4-byte aligned). */
template <typename T> __device__ __forceinline__ float2 load2(const T *p);

template <> __device__ __forceinline__ float2 load2<__nv_bfloat16>(const __nv_bfloat16 *p)
{
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(p));
}

template <> __device__ __forceinline__ float2 load2<__half>(const __half *p)
{
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
}

/* delta[r] = sum over x < d of dO[r, x] * O[r, x] (fp32); pairs: d even, bases 4-aligned. */
template <typename T>
__global__ void __launch_bounds__(THREADS)
    delta_kernel(const T *dout, const T *o, float *delta, int64_t rows, int d, int pairs)
{
    const int lane = threadIdx.x & 31;
    for (int64_t r = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5); r < rows;
         r += (int64_t)gridDim.x * WARPS) {
        const T *a = dout + r * d, *b = o + r * d;
        float s = 0.0f;
        if (pairs) {
            for (int x = 2 * lane; x < d; x += 64) {
                const float2 u = load2<T>(a + x), v = load2<T>(b + x);
                s = fmaf(u.x, v.x, s);
                s = fmaf(u.y, v.y, s);
            }
        } else {
            for (int x = lane; x < d; x += 32) s = fmaf(to_f32<T>(a[x]), to_f32<T>(b[x]), s);
        }
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
        if (lane == 0) delta[r] = s;
    }
}

/* dst[0..3] += v, device-wide atomic; one 16-byte atomic where the GPU has them. */
__device__ __forceinline__ void atomic_add4(float *dst, float4 v)
{
#if __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float4 *>(dst), v);
#else
    atomicAdd(dst, v.x);
    atomicAdd(dst + 1, v.y);
    atomicAdd(dst + 2, v.z);
    atomicAdd(dst + 3, v.w);
#endif
}

struct AccParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_copy_item_t *items;
    int64_t num_items;
    dcp_dtype_t dtype; /* the plan's: the type of the engine's staging (DCP_BUF_SEG) */
};

/* Element i of item c's source as fp32 (fp32 rows, or the plan dtype for the engine's
 * staging). */
__device__ __forceinline__ float src_at(const AccParams &p, const dcp_copy_item_t &c, int64_t i)
{
    const void *b = p.bufs[c.src.buf];
    if (dcp_buf_is_fp32(c.src.buf)) return ((const float *)b)[i];
    if (p.dtype == DCP_DTYPE_BF16) return to_f32<__nv_bfloat16>(((const __nv_bfloat16 *)b)[i]);
    return to_f32<__half>(((const __half *)b)[i]);
}

/* 1 when every source row of items [i, j) and dst row 0 allow 16-byte fp32 steps (strides
 * and offsets in elements of 4 bytes: multiples of 4 keep every row aligned). */
__device__ __forceinline__ bool vec4_ok(const AccParams &p, int64_t i, int64_t j, const float *db)
{
    const dcp_copy_item_t &c = p.items[i];
    if ((c.row_elems & 3) || (c.dst.stride & 3) || ((uintptr_t)db & 15)) return false;
    for (int64_t m = i; m < j; m++) {
        const dcp_copy_item_t &s = p.items[m];
        if (!dcp_buf_is_fp32(s.src.buf) || (s.src.stride & 3) ||
            ((uintptr_t)((const float *)p.bufs[s.src.buf] + s.src.off) & 15))
            return false;
    }
    return true;
}

/* One sum per block row: the items [i, j) that write the same rows (descr.h), their sources
 * added in item order, then added to the destination rows. The add is atomic because the
 * attention engine's sums may overlap one another's rows; a plan's never do (plan_check), so
 * a plan's REDUCE gives the same bits on every run. */
__global__ void __launch_bounds__(THREADS) accumulate_kernel(const AccParams p)
{
    const int64_t i = blockIdx.x;
    if (i > 0 && dcp_copy_same_dst(&p.items[i - 1], &p.items[i])) return; /* an earlier sum's */
    int64_t j = i + 1;
    while (j < p.num_items && dcp_copy_same_dst(&p.items[j - 1], &p.items[j])) j++;
    const dcp_copy_item_t &c = p.items[i];
    float *db = (float *)p.bufs[c.dst.buf] + c.dst.off;
    const bool vec = vec4_ok(p, i, j, db);
    for (int r = blockIdx.y; r < c.rows; r += gridDim.y) {
        float *d = db + (int64_t)r * c.dst.stride;
        if (vec) {
            for (int x = threadIdx.x; x < c.row_elems / 4; x += THREADS) {
                float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                for (int64_t m = i; m < j; m++) {
                    const dcp_copy_item_t &s = p.items[m];
                    const float4 v =
                        reinterpret_cast<const float4 *>((const float *)p.bufs[s.src.buf] +
                                                         s.src.off + (int64_t)r * s.src.stride)[x];
                    acc.x += v.x, acc.y += v.y, acc.z += v.z, acc.w += v.w;
                }
                atomic_add4(d + 4 * x, acc);
            }
            continue;
        }
        for (int x = threadIdx.x; x < c.row_elems; x += THREADS) {
            float acc = 0.0f;
            for (int64_t m = i; m < j; m++)
                acc += src_at(p, p.items[m],
                              p.items[m].src.off + (int64_t)r * p.items[m].src.stride + x);
            atomicAdd(d + x, acc);
        }
    }
}

struct DeltaOutParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_delta_out_item_t *items;
    int32_t heads, d;
};

/* One warp per (row, head) of an item: o = (delta / m) u / |u|^2, u = dO / m, m = max |dO|,
 * so that no square underflows or overflows; 0 where dO is 0 (kernel.h). */
template <typename T>
__global__ void __launch_bounds__(THREADS) delta_out_kernel(const DeltaOutParams p)
{
    const dcp_delta_out_item_t &it = p.items[blockIdx.x];
    const int lane = threadIdx.x & 31;
    const int64_t pairs = (int64_t)it.rows * p.heads;
    for (int64_t i = (int64_t)blockIdx.y * WARPS + (threadIdx.x >> 5); i < pairs;
         i += (int64_t)gridDim.y * WARPS) {
        const int r = (int)(i / p.heads), h = (int)(i % p.heads);
        const T *g = (const T *)p.bufs[it.dout.buf] + it.dout.off + (int64_t)r * it.dout.stride +
                     (int64_t)h * p.d;
        T *o = (T *)p.bufs[it.o.buf] + it.o.off + (int64_t)r * it.o.stride + (int64_t)h * p.d;
        const float dl =
            ((const float *)p.bufs[it.delta.buf])[it.delta.off + (int64_t)r * it.delta.stride + h];
        float m = 0.0f;
        for (int x = lane; x < p.d; x += 32) m = fmaxf(m, fabsf(to_f32<T>(g[x])));
#pragma unroll
        for (int k = 16; k > 0; k >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, k));
        float n2 = 0.0f;
        for (int x = lane; x < p.d; x += 32) {
            const float u = m > 0.0f ? to_f32<T>(g[x]) / m : 0.0f;
            n2 = fmaf(u, u, n2);
        }
#pragma unroll
        for (int k = 16; k > 0; k >>= 1) n2 += __shfl_xor_sync(0xffffffffu, n2, k);
        const float f = m > 0.0f && n2 > 0.0f ? dl / m / n2 : 0.0f;
        for (int x = lane; x < p.d; x += 32)
            o[x] = from_f32<T>(m > 0.0f ? f * (to_f32<T>(g[x]) / m) : 0.0f);
    }
}

static dcp_status_t launched(const char *what)
{
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda %s launch: %s", what, cudaGetErrorString(e));
    return DCP_OK;
}

} // namespace dcp_cuda::grad

using namespace dcp_cuda::grad;

extern "C" dcp_status_t dcp_cuda_bwd_delta(const dcp_kernel_env_t *env, int64_t rows)
{
    if (rows == 0) return DCP_OK;
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda delta: dtype %d, the GPU kernels run bf16 and fp16",
                             (int)env->dtype);
    const int32_t d = dcp_env_dv(env); /* O and dO rows */
    if (rows < 0 || d < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cuda delta: %lld rows of head_dim_v %d",
                             (long long)rows, d);
    const void *dout = env->bufs[DCP_BUF_DO], *o = env->bufs[DCP_BUF_O];
    float *delta = (float *)env->bufs[DCP_BUF_DELTA];
    const int pairs = d % 2 == 0 && (((uintptr_t)dout | (uintptr_t)o) & 3) == 0;
    const int64_t want = (rows + WARPS - 1) / WARPS, cap = 1 << 20; /* grid-stride past cap */
    const unsigned blocks = (unsigned)(want < cap ? want : cap);
    cudaStream_t s = (cudaStream_t)env->stream;
    if (env->dtype == DCP_DTYPE_BF16)
        delta_kernel<__nv_bfloat16><<<blocks, THREADS, 0, s>>>(
            (const __nv_bfloat16 *)dout, (const __nv_bfloat16 *)o, delta, rows, d, pairs);
    else
        delta_kernel<__half><<<blocks, THREADS, 0, s>>>((const __half *)dout, (const __half *)o,
                                                        delta, rows, d, pairs);
    return launched("delta");
}

extern "C" dcp_status_t dcp_cuda_accumulate(const dcp_kernel_env_t *env,
                                            const dcp_copy_item_t *items, int64_t num_items)
{
    if (num_items == 0) return DCP_OK;
    if (num_items > 0x7fffffff)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cuda accumulate: %lld items",
                             (long long)num_items);
    AccParams p;
    for (int b = 0; b < DCP_BUF_ALL; b++) p.bufs[b] = env->bufs[b];
    p.items = items;
    p.num_items = num_items;
    p.dtype = env->dtype;
    const int32_t rows = env->max_rows < 1 ? 1 : env->max_rows;
    const unsigned ys = (unsigned)(rows < 65535 ? rows : 65535);
    accumulate_kernel<<<dim3((unsigned)num_items, ys), THREADS, 0, (cudaStream_t)env->stream>>>(p);
    return launched("accumulate");
}

extern "C" dcp_status_t dcp_cuda_delta_out(const dcp_kernel_env_t *env,
                                           const dcp_delta_out_item_t *items, int64_t num_items)
{
    if (num_items == 0) return DCP_OK;
    if (num_items > 0x7fffffff)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cuda delta out: %lld items",
                             (long long)num_items);
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda delta out: dtype %d, the GPU kernels run bf16 and fp16",
                             (int)env->dtype);
    DeltaOutParams p;
    for (int b = 0; b < DCP_BUF_ALL; b++) p.bufs[b] = env->bufs[b];
    p.items = items;
    p.heads = env->q_heads;
    p.d = dcp_env_dv(env); /* O and dO rows */
    const int64_t want =
        ((int64_t)(env->max_rows < 1 ? 1 : env->max_rows) * p.heads + WARPS - 1) / WARPS;
    const unsigned ys = (unsigned)(want < 65535 ? want : 65535);
    cudaStream_t s = (cudaStream_t)env->stream;
    if (env->dtype == DCP_DTYPE_BF16)
        delta_out_kernel<__nv_bfloat16><<<dim3((unsigned)num_items, ys), THREADS, 0, s>>>(p);
    else
        delta_out_kernel<__half><<<dim3((unsigned)num_items, ys), THREADS, 0, s>>>(p);
    return launched("delta out");
}
