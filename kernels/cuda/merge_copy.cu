/*
 * The memory-bound kernels: n-way LSE merge of partial outputs and fused gather/scatter of
 * many row ranges, each one launch per item list. Grid: (item, row slice); rows are
 * visited grid-stride so any row count is covered.
 */
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

#include "include/base/error.h"

#include <cuda_runtime.h>

namespace dcp_cuda
{

constexpr int MC_THREADS = 256;

struct MergeParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_merge_item_t *items;
    const dcp_merge_src_t *srcs;
    int32_t heads, d;
    dcp_dtype_t dtype; /* the plan's: sources outside fp32 buffers hold it (engine staging) */
};

/* Element x of a source row: fp32, or the plan dtype in the attention engine's staging. */
__device__ __forceinline__ float src_elem(const MergeParams &p, const dcp_view_t &v, int64_t i)
{
    if (dcp_buf_is_fp32(v.buf)) return ((const float *)p.bufs[v.buf])[i];
    if (p.dtype == DCP_DTYPE_BF16) return to_f32(((const __nv_bfloat16 *)p.bufs[v.buf])[i]);
    return to_f32(((const __half *)p.bufs[v.buf])[i]);
}

/* One warp per (row, head): the merged LSE from every source's, then the weighted O. The
 * guards of DESIGN.md: all -inf gives LSE -inf and O = 0; a -inf source weighs 0. A NaN
 * LSE anywhere (a partial that met NaN or Inf inputs) makes the max, and so the merged LSE
 * and O, NaN: fmaxf would drop it and could turn a poisoned row into an empty one. */
__global__ void __launch_bounds__(MC_THREADS) merge_kernel(const MergeParams p)
{
    const dcp_merge_item_t &m = p.items[blockIdx.x];
    const dcp_merge_src_t *src = p.srcs + m.first_src;
    const int lane = threadIdx.x & 31, warps = MC_THREADS / 32;
    const int64_t pairs = (int64_t)m.rows * p.heads;
    for (int64_t i = (int64_t)blockIdx.y * warps + (threadIdx.x >> 5); i < pairs;
         i += (int64_t)gridDim.y * warps) {
        const int r = (int)(i / p.heads), h = (int)(i % p.heads);
        float *ld = (float *)p.bufs[m.lse.buf] + m.lse.off + (int64_t)r * m.lse.stride + h;
        float *od = (float *)p.bufs[m.o.buf] + m.o.off + (int64_t)r * m.o.stride + (int64_t)h * p.d;
        float mx = *ld;
        for (int k = 0; k < m.num_src; k++) {
            const float *ls = (const float *)p.bufs[src[k].lse.buf];
            const float l = ls[src[k].lse.off + (int64_t)r * src[k].lse.stride + h];
            mx = (l > mx || l != l) && mx == mx ? l : mx; /* NaN sticks */
        }
        if (mx == -INFINITY) { /* nothing anywhere: the empty partial */
            for (int x = lane; x < p.d; x += 32) od[x] = 0.0f;
            if (lane == 0) *ld = -INFINITY;
            continue;
        }
        float sum = expf(*ld - mx);
        for (int k = 0; k < m.num_src; k++) {
            const float *ls = (const float *)p.bufs[src[k].lse.buf];
            sum += expf(ls[src[k].lse.off + (int64_t)r * src[k].lse.stride + h] - mx);
        }
        const float lse = mx + logf(sum);
        const float w0 = expf(*ld - lse);
        __syncwarp(); /* every lane has read *ld */
        for (int x = lane; x < p.d; x += 32) {
            float o = w0 * od[x];
            for (int k = 0; k < m.num_src; k++) {
                const float *ls = (const float *)p.bufs[src[k].lse.buf];
                const float w = expf(ls[src[k].lse.off + (int64_t)r * src[k].lse.stride + h] - lse);
                if (w == 0.0f) continue;
                o += w * src_elem(p, src[k].o,
                                  src[k].o.off + (int64_t)r * src[k].o.stride + (int64_t)h * p.d + x);
            }
            od[x] = o;
        }
        if (lane == 0) *ld = lse;
    }
}

struct CopyParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_copy_item_t *items;
    dcp_dtype_t dtype; /* the plan's: bf16 or fp16 */
};

template <typename T>
__device__ __forceinline__ void copy_row_convert(T *dst, const float *src, int n)
{
    for (int x = threadIdx.x; x < n; x += MC_THREADS) dst[x] = from_f32<T>(src[x]);
}

/* Rows of one item per pass: 16-byte moves when both sides allow them, element moves
 * otherwise; fp32 -> bf16/fp16 where the destination holds the plan type (the outputs). */
__global__ void __launch_bounds__(MC_THREADS) copy_kernel(const CopyParams p)
{
    const dcp_copy_item_t &c = p.items[blockIdx.x];
    const int64_t ses = dcp_buf_elem_bytes(c.src.buf, p.dtype);
    const int64_t des = dcp_buf_elem_bytes(c.dst.buf, p.dtype);
    const char *sb = (const char *)p.bufs[c.src.buf] + c.src.off * ses;
    char *db = (char *)p.bufs[c.dst.buf] + c.dst.off * des;
    for (int r = blockIdx.y; r < c.rows; r += gridDim.y) {
        const char *s = sb + (int64_t)r * c.src.stride * ses;
        char *d = db + (int64_t)r * c.dst.stride * des;
        if (ses == des) {
            const int64_t bytes = (int64_t)c.row_elems * ses;
            if ((((uintptr_t)s | (uintptr_t)d | (uintptr_t)bytes) & 15) == 0) {
                for (int64_t x = threadIdx.x; x < bytes / 16; x += MC_THREADS)
                    ((uint4 *)d)[x] = ((const uint4 *)s)[x];
            } else if (ses == 4) {
                for (int64_t x = threadIdx.x; x < c.row_elems; x += MC_THREADS)
                    ((float *)d)[x] = ((const float *)s)[x];
            } else {
                for (int64_t x = threadIdx.x; x < c.row_elems; x += MC_THREADS)
                    ((uint16_t *)d)[x] = ((const uint16_t *)s)[x];
            }
        } else if (p.dtype == DCP_DTYPE_BF16) {
            copy_row_convert<__nv_bfloat16>((__nv_bfloat16 *)d, (const float *)s, c.row_elems);
        } else {
            copy_row_convert<__half>((__half *)d, (const float *)s, c.row_elems);
        }
    }
}

static unsigned row_slices(int32_t max_rows, int per)
{
    const int n = (max_rows + per - 1) / per;
    return (unsigned)(n < 1 ? 1 : (n > 65535 ? 65535 : n));
}

static dcp_status_t launched(const char *what)
{
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda %s launch: %s", what, cudaGetErrorString(e));
    return DCP_OK;
}

} // namespace dcp_cuda

using namespace dcp_cuda;

extern "C" dcp_status_t dcp_cuda_merge(const dcp_kernel_env_t *env, const dcp_merge_item_t *items,
                                       int64_t num_items, const dcp_merge_src_t *srcs)
{
    if (num_items == 0) return DCP_OK;
    if (num_items > 0x7fffffff)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cuda merge: %lld items", (long long)num_items);
    MergeParams p;
    for (int b = 0; b < DCP_BUF_ALL; b++) p.bufs[b] = env->bufs[b];
    p.items = items;
    p.srcs = srcs;
    p.heads = env->q_heads;
    p.d = env->head_dim;
    p.dtype = env->dtype;
    const unsigned ys = row_slices(env->max_rows * env->q_heads, MC_THREADS / 32);
    merge_kernel<<<dim3((unsigned)num_items, ys), MC_THREADS, 0, (cudaStream_t)env->stream>>>(p);
    return launched("merge");
}

extern "C" dcp_status_t dcp_cuda_copy(const dcp_kernel_env_t *env, const dcp_copy_item_t *items,
                                      int64_t num_items)
{
    if (num_items == 0) return DCP_OK;
    if (num_items > 0x7fffffff)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "cuda copy: %lld items", (long long)num_items);
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda copy: dtype %d, the GPU kernels run bf16 and fp16",
                             (int)env->dtype);
    CopyParams p;
    for (int b = 0; b < DCP_BUF_ALL; b++) p.bufs[b] = env->bufs[b];
    p.items = items;
    p.dtype = env->dtype;
    const unsigned ys = row_slices(env->max_rows, 1);
    copy_kernel<<<dim3((unsigned)num_items, ys), MC_THREADS, 0, (cudaStream_t)env->stream>>>(p);
    return launched("copy");
}
