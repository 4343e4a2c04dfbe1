/*
 * The memory-bound kernels: n-way LSE merge of partial outputs and fused gather/scatter of
 * many row ranges, each one launch per item list. Grid: (item, slice); every loop is
 * grid-stride, so any row count is covered.
 *
 * Both move 16 bytes per lane per load where the views allow it (fp32 x 4, or 4 elements of
 * the plan's 2-byte type), and issue a thread's loads before its first store or add, so
 * that many loads are in flight per warp; element steps remain for views that do not align.
 */
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

#include "include/base/error.h"

#include <cuda_runtime.h>

namespace dcp_cuda
{

constexpr int MC_THREADS = 256, MC_WARPS = MC_THREADS / 32;
constexpr int COPY_UNROLL = 4; /* 16-byte moves in flight per thread */

/* Whether a view's rows start at multiples of `align` bytes: its base, offset and stride. */
__device__ __forceinline__ bool view_aligned(const void *base, const dcp_view_t &v, int es,
                                             int align)
{
    return (((uintptr_t)base + (uint64_t)v.off * es) % align) == 0 &&
           ((uint64_t)v.stride * es) % align == 0;
}

struct MergeParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_merge_item_t *items;
    const dcp_merge_src_t *srcs;
    int32_t heads, d;
    dcp_dtype_t dtype; /* the plan's: sources outside fp32 buffers hold it (engine staging) */
};

/* V consecutive elements of a source's O at element i as floats: fp32, or the plan dtype in
 * the attention engine's staging. V = 4 needs 16-byte (fp32) or 8-byte alignment. */
template <int V>
__device__ __forceinline__ void src_elems(const MergeParams &p, int buf, int64_t i, float (&v)[V])
{
    const void *b = p.bufs[buf];
    if (dcp_buf_is_fp32(buf)) {
        if constexpr (V == 4) {
            const float4 x = *(const float4 *)((const float *)b + i);
            v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
        } else {
            v[0] = ((const float *)b)[i];
        }
        return;
    }
    if constexpr (V == 4) {
        const uint2 x = *(const uint2 *)((const uint16_t *)b + i);
        const uint16_t h[4] = {(uint16_t)(x.x & 0xffffu), (uint16_t)(x.x >> 16),
                               (uint16_t)(x.y & 0xffffu), (uint16_t)(x.y >> 16)};
#pragma unroll
        for (int j = 0; j < 4; j++)
            v[j] = p.dtype == DCP_DTYPE_BF16 ? __uint_as_float((uint32_t)h[j] << 16)
                                             : __half2float(__ushort_as_half(h[j]));
    } else {
        const uint16_t x = ((const uint16_t *)b)[i];
        v[0] = p.dtype == DCP_DTYPE_BF16 ? __uint_as_float((uint32_t)x << 16)
                                         : __half2float(__ushort_as_half(x));
    }
}

/* The larger, NaN winning: a NaN LSE (a partial that met NaN or Inf inputs) makes the merged
 * LSE and O NaN; fmaxf would drop it and could turn a poisoned row into an empty one. */
__device__ __forceinline__ float max_nan(float a, float b)
{
    return (a != a || b != b) ? NAN : fmaxf(a, b);
}

__device__ __forceinline__ float src_lse(const MergeParams &p, const dcp_merge_src_t &s, int r,
                                         int h)
{
    return ((const float *)p.bufs[s.lse.buf])[s.lse.off + (int64_t)r * s.lse.stride + h];
}

/* 1 when every O view of the item takes 4-element steps: d a multiple of 4 and each row of
 * the destination (fp32) and of every source at a 16-byte (fp32) or 8-byte boundary. */
__device__ __forceinline__ bool merge_vec_ok(const MergeParams &p, const dcp_merge_item_t &m)
{
    bool ok = (p.d & 3) == 0 && view_aligned(p.bufs[m.o.buf], m.o, 4, 16);
    for (int k = threadIdx.x & 31; k < m.num_src; k += 32) {
        const dcp_view_t &o = p.srcs[m.first_src + k].o;
        const int es = dcp_buf_is_fp32(o.buf) ? 4 : 2;
        ok = ok && view_aligned(p.bufs[o.buf], o, es, 4 * es);
    }
    return __all_sync(0xffffffffu, ok);
}

/* Elements [x, x + V) of (row r, head h) of a source's O. */
template <int V>
__device__ __forceinline__ void src_o(const MergeParams &p, const dcp_merge_src_t &s, int r, int h,
                                      int x, float (&v)[V])
{
    src_elems<V>(p, s.o.buf, s.o.off + (int64_t)r * s.o.stride + (int64_t)h * p.d + x, v);
}

/* The merged LSE of (row r, head h): the destination's own LSE and every source's, lane k
 * reading source k (k + 32, ... in further rounds). -inf when every one is -inf; NaN when
 * any is NaN. The whole warp calls it. */
__device__ __forceinline__ float merged_lse(const MergeParams &p, const dcp_merge_item_t &m,
                                            const dcp_merge_src_t *src, int r, int h, float own)
{
    const int lane = threadIdx.x & 31;
    float mx = own;
    for (int k = lane; k < m.num_src; k += 32) mx = max_nan(mx, src_lse(p, src[k], r, h));
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, s));
    if (mx == -INFINITY) return mx;
    float sum = lane == 0 ? expf(own - mx) : 0.0f;
    for (int k = lane; k < m.num_src; k += 32) sum += expf(src_lse(p, src[k], r, h) - mx);
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
    return mx + logf(sum);
}

/* One (row, head) of an item, V elements a lane per step of 32 V. Each step issues its loads
 * first: the destination's elements and the first G partials' (a -inf partial's are loaded
 * but never added: its O may hold anything), then the weights are computed while they are in
 * flight, then o = w0 o + sum_k w_k o_k, the further partials G at a time. The guards of
 * kernels/README.md (Numerics): all -inf gives LSE -inf and O = 0; a -inf partial weighs 0. */
template <int V>
__device__ __forceinline__ void merge_row(const MergeParams &p, const dcp_merge_item_t &m,
                                          const dcp_merge_src_t *src, int r, int h)
{
    constexpr int G = 4;
    const int lane = threadIdx.x & 31, n = m.num_src;
    float *ld = (float *)p.bufs[m.lse.buf] + m.lse.off + (int64_t)r * m.lse.stride + h;
    float *od = (float *)p.bufs[m.o.buf] + m.o.off + (int64_t)r * m.o.stride + (int64_t)h * p.d;
    const float own = *ld;
    float lse = -INFINITY;
    for (int xb = 0; xb < p.d; xb += 32 * V) { /* warp-uniform: the LSE's shuffles */
        const int x = xb + lane * V;
        const bool mine = x < p.d;
        float o[V], v[G][V];
        if (mine) {
            if constexpr (V == 4) {
                const float4 y = *(const float4 *)(od + x);
                o[0] = y.x, o[1] = y.y, o[2] = y.z, o[3] = y.w;
            } else {
                o[0] = od[x];
            }
#pragma unroll
            for (int j = 0; j < G; j++)
                if (j < n) src_o<V>(p, src[j], r, h, x, v[j]);
        }
        lse = merged_lse(p, m, src, r, h, own);
        const float w0 = expf(own - lse);
        const bool add = mine && lse != -INFINITY;
        if (add)
#pragma unroll
            for (int e = 0; e < V; e++) o[e] *= w0;
        for (int k0 = 0; k0 < n; k0 += 32) { /* warp-uniform too: the weights' shuffles */
            const int kn = min(32, n - k0);
            const float wl = lane < kn ? expf(src_lse(p, src[k0 + lane], r, h) - lse) : 0.0f;
            for (int k = 0; k < kn; k += G) {
                float w[G];
#pragma unroll
                for (int j = 0; j < G; j++) {
                    w[j] = __shfl_sync(0xffffffffu, wl, (k + j) & 31);
                    if (!add || k + j >= kn)
                        w[j] = 0.0f;
                    else if (k0 + k > 0 && w[j] != 0.0f) /* the first G are loaded */
                        src_o<V>(p, src[k0 + k + j], r, h, x, v[j]);
                }
#pragma unroll
                for (int j = 0; j < G; j++)
                    if (w[j] != 0.0f)
#pragma unroll
                        for (int e = 0; e < V; e++) o[e] = fmaf(w[j], v[j][e], o[e]);
            }
        }
        if (!mine) continue;
        if (lse == -INFINITY) /* nothing anywhere: the empty partial */
#pragma unroll
            for (int e = 0; e < V; e++) o[e] = 0.0f;
        if constexpr (V == 4)
            *(float4 *)(od + x) = make_float4(o[0], o[1], o[2], o[3]);
        else
            od[x] = o[0];
    }
    if (lane == 0) *ld = lse;
}

/* One warp per (row, head), grid-stride over the item's rows x heads. Three blocks an SM: the
 * registers of a group of loads in flight (ptxas would otherwise spill to keep four). */
__global__ void __launch_bounds__(MC_THREADS, 3) merge_kernel(const MergeParams p)
{
    const dcp_merge_item_t &m = p.items[blockIdx.x];
    const dcp_merge_src_t *src = p.srcs + m.first_src;
    const bool vec = merge_vec_ok(p, m);
    const int64_t pairs = (int64_t)m.rows * p.heads;
    for (int64_t i = (int64_t)blockIdx.y * MC_WARPS + (threadIdx.x >> 5); i < pairs;
         i += (int64_t)gridDim.y * MC_WARPS) {
        const int r = (int)(i / p.heads), h = (int)(i % p.heads);
        if (vec)
            merge_row<4>(p, m, src, r, h);
        else
            merge_row<1>(p, m, src, r, h);
    }
}

struct CopyParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_copy_item_t *items;
    dcp_dtype_t dtype; /* the plan's: bf16 or fp16 */
};

/* A walk over an item's rows x units (units of a row: 16-byte vectors or elements), the
 * thread's positions first + j step for j = 0, 1, ...: (row, unit) kept incrementally, so
 * no division per move. */
struct Walk {
    int64_t r, x;        /* the current position */
    int64_t dr, dx, per; /* step = dr rows + dx units; units per row */
    __device__ __forceinline__ Walk(int64_t first, int64_t step, int64_t per_row)
        : r(first / per_row), x(first % per_row), dr(step / per_row), dx(step % per_row),
          per(per_row)
    {
    }
    __device__ __forceinline__ void next()
    {
        r += dr;
        x += dx;
        if (x >= per) x -= per, r++;
    }
};

/* An item's rows x units (16-byte vectors or elements; `per` units a row), source units S
 * turned into destination units U by conv: COPY_UNROLL loads in flight per thread before
 * their stores. Strides in bytes. */
template <typename S, typename U, typename Conv>
__device__ __forceinline__ void copy_units(const char *sb, int64_t sstride, char *db,
                                           int64_t dstride, int64_t rows, int64_t per, Conv conv)
{
    Walk w((int64_t)blockIdx.y * MC_THREADS + threadIdx.x, (int64_t)gridDim.y * MC_THREADS, per);
    while (w.r < rows) {
        S v[COPY_UNROLL];
        int64_t r[COPY_UNROLL], x[COPY_UNROLL];
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; u++) {
            r[u] = w.r, x[u] = w.x;
            if (r[u] < rows) v[u] = ((const S *)(sb + r[u] * sstride))[x[u]];
            w.next();
        }
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; u++)
            if (r[u] < rows) ((U *)(db + r[u] * dstride))[x[u]] = conv(v[u]);
    }
}

template <typename T> struct Same {
    __device__ __forceinline__ T operator()(T v) const
    {
        return v;
    }
};

template <typename T> struct Round1 { /* fp32 -> T */
    __device__ __forceinline__ T operator()(float v) const
    {
        return from_f32<T>(v);
    }
};

template <typename T> struct Round4 { /* 4 x fp32 -> 4 x T in 8 bytes */
    __device__ __forceinline__ uint2 operator()(float4 v) const
    {
        return make_uint2(pack2<T>(v.x, v.y), pack2<T>(v.z, v.w));
    }
};

template <typename T>
__device__ __forceinline__ void copy_round(const char *s, int64_t ss, char *d, int64_t ds,
                                           const dcp_copy_item_t &c, bool vec)
{
    if (vec)
        copy_units<float4, uint2>(s, ss, d, ds, c.rows, c.row_elems / 4, Round4<T>());
    else
        copy_units<float, T>(s, ss, d, ds, c.rows, c.row_elems, Round1<T>());
}

/* One item per blockIdx.x, its rows x units spread over the blocks of y: 16-byte moves when
 * both sides allow them, element moves otherwise; fp32 -> bf16/fp16 where the destination
 * holds the plan type (the outputs). */
__global__ void __launch_bounds__(MC_THREADS) copy_kernel(const CopyParams p)
{
    const dcp_copy_item_t &c = p.items[blockIdx.x];
    if (c.rows <= 0 || c.row_elems <= 0) return; /* nothing to move (and no units to walk) */
    const int ses = dcp_buf_elem_bytes(c.src.buf, p.dtype);
    const int des = dcp_buf_elem_bytes(c.dst.buf, p.dtype);
    const char *s = (const char *)p.bufs[c.src.buf] + (int64_t)c.src.off * ses;
    char *d = (char *)p.bufs[c.dst.buf] + (int64_t)c.dst.off * des;
    const int64_t ss = (int64_t)c.src.stride * ses, ds = (int64_t)c.dst.stride * des;
    if (ses == des) {
        const int64_t bytes = (int64_t)c.row_elems * ses;
        if ((((uintptr_t)s | (uintptr_t)d | (uint64_t)ss | (uint64_t)ds | (uint64_t)bytes) & 15) ==
            0)
            copy_units<uint4, uint4>(s, ss, d, ds, c.rows, bytes / 16, Same<uint4>());
        else if (ses == 4)
            copy_units<float, float>(s, ss, d, ds, c.rows, c.row_elems, Same<float>());
        else
            copy_units<uint16_t, uint16_t>(s, ss, d, ds, c.rows, c.row_elems, Same<uint16_t>());
        return;
    }
    const bool vec = (c.row_elems & 3) == 0 && (((uintptr_t)s | (uint64_t)ss) & 15) == 0 &&
                     (((uintptr_t)d | (uint64_t)ds) & 7) == 0;
    if (p.dtype == DCP_DTYPE_BF16)
        copy_round<__nv_bfloat16>(s, ss, d, ds, c, vec);
    else
        copy_round<__half>(s, ss, d, ds, c, vec);
}

/* Blocks of y for n units of work at `per` units a block, at least 1, at most 65535. */
static unsigned slices(int64_t n, int64_t per)
{
    const int64_t s = (n + per - 1) / per;
    return (unsigned)(s < 1 ? 1 : (s > 65535 ? 65535 : s));
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
    p.d = dcp_env_dv(env); /* O rows */
    p.dtype = env->dtype;
    const unsigned ys = slices((int64_t)env->max_rows * env->q_heads, MC_WARPS);
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
    /* as many blocks as the widest rows (the plan type's, all heads) need for COPY_UNROLL
     * 16-byte moves a thread: fp32 rows give a thread more, narrower ones fewer */
    const int64_t heads = env->q_heads > env->kv_heads ? env->q_heads : env->kv_heads;
    const int64_t wide = env->head_dim > dcp_env_dv(env) ? env->head_dim : dcp_env_dv(env);
    const int64_t units = (heads * wide * 2 + 15) / 16;
    const unsigned ys = slices((int64_t)env->max_rows * units, (int64_t)MC_THREADS * COPY_UNROLL);
    copy_kernel<<<dim3((unsigned)num_items, ys), MC_THREADS, 0, (cudaStream_t)env->stream>>>(p);
    return launched("copy");
}
