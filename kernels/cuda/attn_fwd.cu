/*
 * Fused blockwise masked attention forward for sm_80 and later (mma.sync, bf16/fp16 in,
 * fp32 accumulation), one launch per tile-group list.
 *
 * Grid: (tile group, query row block, query head). A CTA of 8 warps owns BM = 128 query
 * rows of one head (16 per warp) and streams the group's KV tiles through shared memory in
 * chunks of BN = 64 keys, double-buffered with cp.async: the next needed chunk loads while
 * the current one is computed. Per chunk the CTA decides, from every row's allowed key
 * ranges (include/base/mask_rule.h, evaluated analytically per row, or read from a custom
 * mask's range array):
 *   - skip: no row sees a key of the chunk, so its K/V are never loaded;
 *   - full: every row sees every key, so no mask arithmetic runs;
 *   - partial: scores outside a row's ranges become -inf.
 * Tiles the planner marked full skip the range evaluation altogether, and a warp whose 16
 * rows see nothing of a chunk the CTA needs skips its MMAs. The online softmax runs in the
 * log2 domain; the output is normalised at the end and stored in fp32 or the input type
 * (by the output buffer), merged by LSE with what is there when the group accumulates.
 *
 * Non-finite inputs (dcp.h, dcp_tensors_t): each row keeps whether it has an allowed key at
 * all and whether an allowed score was NaN or +-Inf; at the store a row without allowed keys
 * is (0, -inf) whatever the MMAs left in it, and a row with a non-finite score, sum or output
 * (a NaN or Inf value) is (NaN, NaN). The MMAs multiply masked probabilities (0) by the
 * chunk's values, so a NaN in a masked key's value may also reach rows that share its chunk.
 */
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

#include "include/base/error.h"
#include "include/base/mask_rule.h"
#include "kernels/lse.h"

#include <cuda_runtime.h>

namespace dcp_cuda
{

constexpr int BM = 128, BN = 64, WARPS = 8, THREADS = WARPS * 32, PAD = 8;

template <int D> struct AttnGeom {
    static constexpr int LD = D + PAD; /* padded smem row: ldmatrix rows hit distinct banks */
    static constexpr size_t smem_bytes = (size_t)(BM + 4 * BN) * LD * 2;
};

struct AttnParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_seq_info_t *seqs;
    const dcp_tile_group_t *groups;
    const dcp_tile_t *tiles;
    int32_t rep;      /* query heads per KV head */
    float scale_log2; /* softmax scale x log2(e) */
};

/* Allowed keys of a thread's two rows (g and g + 8 of its warp) inside one tile, tile-local
 * and clamped to [0, kv_len); a row past the group's queries sees nothing. */
struct Rows {
    int lo[2][2], hi[2][2];
};

__device__ __forceinline__ void tile_rows(Rows &R, const dcp_seq_info_t &seq,
                                          const dcp_tile_group_t &g, const dcp_tile_t &t, int r0,
                                          int row0)
{
    for (int x = 0; x < 2; x++) {
        const int row = r0 + row0 + 8 * x;
        int rg[4] = {0, 0, 0, 0};
        if (row < g.q_len) dcp_mask_keys(&seq.mask, seq.len, g.q_pos + row, rg);
        for (int j = 0; j < 2; j++) {
            int a = rg[2 * j] - t.kv_pos, b = rg[2 * j + 1] - t.kv_pos;
            a = a < 0 ? 0 : (a > t.kv_len ? t.kv_len : a);
            b = b < a ? a : (b > t.kv_len ? t.kv_len : b);
            R.lo[x][j] = a;
            R.hi[x][j] = b;
        }
    }
}

__device__ __forceinline__ bool sees(const Rows &R, int x, int c0, int c1)
{
    return (R.lo[x][0] < c1 && c0 < R.hi[x][0]) || (R.lo[x][1] < c1 && c0 < R.hi[x][1]);
}

__device__ __forceinline__ bool sees_all(const Rows &R, int x, int c0, int c1)
{
    return (R.lo[x][0] <= c0 && c1 <= R.hi[x][0]) || (R.lo[x][1] <= c0 && c1 <= R.hi[x][1]);
}

__device__ __forceinline__ bool allowed(const Rows &R, int x, int key)
{
    return (key >= R.lo[x][0] && key < R.hi[x][0]) || (key >= R.lo[x][1] && key < R.hi[x][1]);
}

/* A position in the group's key stream: chunk [c0, c0 + BN) of tile ti. */
struct Cursor {
    int ti, c0, full;
};

/* Moves c (and R, the ranges of c's tile) forward to the first chunk some row of the CTA
 * sees; false at the end of the group's tiles. Block-uniform: every thread calls it. */
__device__ bool find_chunk(const AttnParams &p, const dcp_tile_group_t &g,
                           const dcp_seq_info_t &seq, int r0, int row0, bool rows_valid, Cursor &c,
                           Rows &R)
{
    const int end = g.first_tile + g.num_tiles;
    while (c.ti < end) {
        const dcp_tile_t &t = p.tiles[c.ti];
        if (c.c0 >= t.kv_len) {
            c.ti++;
            c.c0 = 0;
            continue;
        }
        const int nc = min(BN, t.kv_len - c.c0);
        if (t.full) {
            c.full = nc == BN;
            if (c.c0 == 0) { /* the whole tile for every valid row */
                for (int x = 0; x < 2; x++) {
                    R.lo[x][0] = 0;
                    R.hi[x][0] = r0 + row0 + 8 * x < g.q_len ? t.kv_len : 0;
                    R.lo[x][1] = R.hi[x][1] = R.hi[x][0];
                }
            }
            return true;
        }
        if (c.c0 == 0) tile_rows(R, seq, g, t, r0, row0);
        const int c1 = c.c0 + nc;
        const int mine = rows_valid && (sees(R, 0, c.c0, c1) || sees(R, 1, c.c0, c1));
        if (__syncthreads_or(mine)) {
            const bool all0 = r0 + row0 >= g.q_len || sees_all(R, 0, c.c0, c1);
            const bool all1 = r0 + row0 + 8 >= g.q_len || sees_all(R, 1, c.c0, c1);
            c.full = __syncthreads_and(all0 && all1) && nc == BN;
            return true;
        }
        c.c0 += BN;
    }
    return false;
}

/* rows [0, n) of a [rows, D] view into smem [BM or BN][LD]; rows past n become zeros. */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_rows(T *s, const T *src, int64_t stride, int n)
{
    constexpr int LD = AttnGeom<D>::LD, VEC = 8, PER_ROW = D / VEC;
    for (int i = threadIdx.x; i < ROWS * PER_ROW; i += THREADS) {
        const int r = i / PER_ROW, col = (i % PER_ROW) * VEC;
        const bool ok = r < n;
        cp_async16(s + r * LD + col, ok ? src + r * stride + col : src, ok ? 16 : 0);
    }
}

template <typename T, int D>
__device__ __forceinline__ void load_chunk(const AttnParams &p, const Cursor &c, int kvh, T *Ks,
                                           T *Vs)
{
    const dcp_tile_t &t = p.tiles[c.ti];
    const int n = min(BN, t.kv_len - c.c0);
    const T *k = (const T *)p.bufs[t.k.buf] + t.k.off + (int64_t)kvh * D;
    const T *v = (const T *)p.bufs[t.v.buf] + t.v.off + (int64_t)kvh * D;
    load_rows<T, D, BN>(Ks, k + (int64_t)c.c0 * t.k.stride, t.k.stride, n);
    load_rows<T, D, BN>(Vs, v + (int64_t)c.c0 * t.v.stride, t.v.stride, n);
}

/* The per-thread state of the online softmax: two rows, D/8 output n-tiles. */
template <int D> struct Acc {
    float o[D / 8][4];
    float m[2], l[2]; /* running max (log2 domain) and this thread's part of the row sum */
    bool seen[2];     /* the row has an allowed key in some chunk */
    bool bad[2];      /* an allowed score this thread computed was NaN or +-Inf */
};

template <typename T, int D>
__device__ __forceinline__ void attend_chunk(const AttnParams &p, const Cursor &c, const Rows &R,
                                             const uint32_t (&qf)[D / 16][4], const T *Ks,
                                             const T *Vs, Acc<D> &a)
{
    constexpr int LD = AttnGeom<D>::LD;
    const int lane = threadIdx.x & 31, t4 = lane & 3;
    if (!c.full &&
        !__any_sync(0xffffffffu, sees(R, 0, c.c0, c.c0 + BN) || sees(R, 1, c.c0, c.c0 + BN)))
        return; /* none of this warp's rows sees the chunk */

    float s[BN / 8][4];
#pragma unroll
    for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
        for (int np = 0; np < BN / 16; np++) {
            uint32_t b[4];
            const int key = np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
            const int col = kk * 16 + ((lane >> 3) & 1) * 8;
            ldmatrix_x4(b, Ks + key * LD + col);
            mma16816<T>(s[2 * np], qf[kk], b[0], b[1]);
            mma16816<T>(s[2 * np + 1], qf[kk], b[2], b[3]);
        }
    }

    float alpha[2];
#pragma unroll
    for (int x = 0; x < 2; x++) {
        float mx = -INFINITY;
        a.seen[x] |= c.full || sees(R, x, c.c0, c.c0 + BN);
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                float v = s[n][2 * x + e] * p.scale_log2;
                if (!c.full && !allowed(R, x, c.c0 + n * 8 + 2 * t4 + e))
                    v = -INFINITY;
                else
                    a.bad[x] |= !(fabsf(v) <= 3.402823466e38f); /* NaN or +-Inf */
                s[n][2 * x + e] = v;
                mx = fmaxf(mx, v);
            }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(a.m[x], mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new; /* no key yet: p = 0 */
        alpha[x] = fast_exp2(a.m[x] - m_use);
        a.m[x] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float pe = fast_exp2(s[n][2 * x + e] - m_use);
                s[n][2 * x + e] = pe;
                sum += pe;
            }
        a.l[x] = a.l[x] * alpha[x] + sum;
    }
#pragma unroll
    for (int n = 0; n < D / 8; n++) {
        a.o[n][0] *= alpha[0];
        a.o[n][1] *= alpha[0];
        a.o[n][2] *= alpha[1];
        a.o[n][3] *= alpha[1];
    }

#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        const uint32_t pa[4] = {pack2<T>(s[2 * kk][0], s[2 * kk][1]),
                                pack2<T>(s[2 * kk][2], s[2 * kk][3]),
                                pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int np = 0; np < D / 16; np++) {
            uint32_t b[4];
            const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = np * 16 + ((lane >> 4) & 1) * 8;
            ldmatrix_x4_trans(b, Vs + key * LD + col);
            mma16816<T>(a.o[2 * np], pa, b[0], b[1]);
            mma16816<T>(a.o[2 * np + 1], pa, b[2], b[3]);
        }
    }
}

/* 1 when some output element of row x held by this thread is NaN or +-Inf. */
template <int D> __device__ __forceinline__ bool out_nonfinite(const Acc<D> &a, int x)
{
    bool hit = false;
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        hit |= !(fabsf(a.o[n][2 * x]) <= 3.402823466e38f) |
               !(fabsf(a.o[n][2 * x + 1]) <= 3.402823466e38f);
    return hit;
}

/* Normalises the thread's two rows and stores them (merging with the stored partial when
 * the group accumulates); rows past the group's queries are not written. A row without an
 * allowed key adds (0, -inf); a row that met a non-finite value stores (NaN, NaN). */
template <typename T, int D>
__device__ __forceinline__ void store_rows(const AttnParams &p, const dcp_tile_group_t &g, int h,
                                           int r0, int row0, Acc<D> &a)
{
    const int lane = threadIdx.x & 31, t4 = lane & 3;
    const bool o_fp32 = dcp_buf_is_fp32(g.o.buf);
    float w_old[2] = {0.0f, 0.0f}, w_new[2], lse[2];
    float *lse_p[2];
    bool poison[2];
#pragma unroll
    for (int x = 0; x < 2; x++) {
        float l = a.l[x];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        int bad = a.bad[x] || out_nonfinite<D>(a, x);
        bad |= __shfl_xor_sync(0xffffffffu, bad, 1);
        bad |= __shfl_xor_sync(0xffffffffu, bad, 2);
        const int row = r0 + row0 + 8 * x;
        float mine = -INFINITY;
        w_new[x] = 0.0f;
        if (a.seen[x]) { /* the quad's four threads agree: the ranges are the row's */
            mine = (a.m[x] + log2f(l)) * 0.69314718055994531f;
            w_new[x] = 1.0f / l;
            if (bad || !isfinite(mine)) mine = w_new[x] = NAN;
        }
        poison[x] = mine != mine;
        lse[x] = mine;
        lse_p[x] = (float *)p.bufs[g.lse.buf] + g.lse.off + (int64_t)row * g.lse.stride + h;
        if (g.accumulate && row < g.q_len) {
            const float two[2] = {*lse_p[x], mine};
            float w[2];
            lse[x] = dcp_lse_weights(two, 2, w);
            w_old[x] = w[0];
            w_new[x] *= w[1];
        }
    }
    __syncwarp(); /* every lane has read the stored LSE before lane t4 == 0 overwrites it */
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int row = r0 + row0 + 8 * x;
        if (row >= g.q_len) continue;
        if (t4 == 0) *lse_p[x] = lse[x];
        const int64_t base = g.o.off + (int64_t)row * g.o.stride + (int64_t)h * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            const int col = n * 8 + 2 * t4;
            /* without allowed keys nothing is added, whatever 0 x NaN left in o */
            float o0 = a.seen[x] ? a.o[n][2 * x] * w_new[x] : 0.0f;
            float o1 = a.seen[x] ? a.o[n][2 * x + 1] * w_new[x] : 0.0f;
            if (poison[x]) o0 = o1 = NAN;
            if (o_fp32) {
                float2 *dst = (float2 *)((float *)p.bufs[g.o.buf] + base + col);
                if (g.accumulate) {
                    const float2 old = *dst;
                    o0 += w_old[x] * old.x;
                    o1 += w_old[x] * old.y;
                }
                *dst = make_float2(o0, o1);
            } else {
                T *dst = (T *)p.bufs[g.o.buf] + base + col;
                if (g.accumulate) {
                    o0 += w_old[x] * to_f32<T>(dst[0]);
                    o1 += w_old[x] * to_f32<T>(dst[1]);
                }
                *(uint32_t *)dst = pack2<T>(o0, o1);
            }
        }
    }
}

template <typename T, int D>
__global__ void __launch_bounds__(THREADS, 1) attn_fwd_kernel(const __grid_constant__ AttnParams p)
{
    constexpr int LD = AttnGeom<D>::LD;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Qs = reinterpret_cast<T *>(smem_raw);
    /* K and V of chunk buffer b at Ks + b * KV_BUF, Vs + b * KV_BUF (arithmetic, not an
     * array indexed at run time, which would live in local memory) */
    constexpr int KV_BUF = BN * LD;
    T *const Ks = Qs + BM * LD, *const Vs = Qs + (BM + 2 * BN) * LD;

    const dcp_tile_group_t &g = p.groups[blockIdx.x];
    const dcp_seq_info_t &seq = p.seqs[g.seq];
    const int h = blockIdx.z, kvh = h / p.rep;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = warp * 16 + (lane >> 2);

    for (int r0 = blockIdx.y * BM; r0 < g.q_len; r0 += gridDim.y * BM) {
        __syncthreads(); /* the previous row block is done with shared memory */
        const T *q =
            (const T *)p.bufs[g.q.buf] + g.q.off + (int64_t)r0 * g.q.stride + (int64_t)h * D;
        load_rows<T, D, BM>(Qs, q, g.q.stride, min(BM, g.q_len - r0));
        cp_async_commit();

        const bool rows_valid = r0 + warp * 16 < g.q_len;
        Cursor cur = {g.first_tile, 0, 0};
        Rows R;
        bool found = find_chunk(p, g, seq, r0, row0, rows_valid, cur, R);
        if (found) {
            load_chunk<T, D>(p, cur, kvh, Ks, Vs);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        uint32_t qf[D / 16][4];
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = kk * 16 + ((lane >> 4) & 1) * 8;
            ldmatrix_x4(qf[kk], Qs + row * LD + col);
        }
        Acc<D> a;
#pragma unroll
        for (int n = 0; n < D / 8; n++) a.o[n][0] = a.o[n][1] = a.o[n][2] = a.o[n][3] = 0.0f;
        a.m[0] = a.m[1] = -INFINITY;
        a.l[0] = a.l[1] = 0.0f;
        a.seen[0] = a.seen[1] = a.bad[0] = a.bad[1] = false;

        int buf = 0;
        while (found) {
            Cursor nxt = cur;
            nxt.c0 += BN;
            Rows Rn = R;
            const bool more = find_chunk(p, g, seq, r0, row0, rows_valid, nxt, Rn);
            if (more) {
                load_chunk<T, D>(p, nxt, kvh, Ks + (buf ^ 1) * KV_BUF, Vs + (buf ^ 1) * KV_BUF);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            attend_chunk<T, D>(p, cur, R, qf, Ks + buf * KV_BUF, Vs + buf * KV_BUF, a);
            __syncthreads();
            cur = nxt;
            R = Rn;
            found = more;
            buf ^= 1;
        }
        store_rows<T, D>(p, g, h, r0, row0, a);
    }
}

template <typename T, int D>
static cudaError_t launch(const AttnParams &p, int64_t num_groups, int32_t max_rows,
                          int32_t q_heads, cudaStream_t stream)
{
    const size_t smem = AttnGeom<D>::smem_bytes;
    cudaError_t e = cudaFuncSetAttribute(attn_fwd_kernel<T, D>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const int row_blocks = (max_rows + BM - 1) / BM;
    const dim3 grid((unsigned)num_groups, (unsigned)(row_blocks < 65535 ? row_blocks : 65535),
                    (unsigned)q_heads);
    attn_fwd_kernel<T, D><<<grid, THREADS, smem, stream>>>(p);
    return cudaGetLastError();
}

} // namespace dcp_cuda

using namespace dcp_cuda;

extern "C" dcp_status_t dcp_cuda_attn_fwd(const dcp_kernel_env_t *env,
                                          const dcp_tile_group_t *groups, int64_t num_groups,
                                          const dcp_tile_t *tiles)
{
    if (num_groups == 0) return DCP_OK;
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda attention: dtype %d, the GPU kernels run bf16 and fp16",
                             (int)env->dtype);
    if (env->head_dim != 64 && env->head_dim != 128)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda attention: head_dim %d, the GPU kernels run 64 and 128",
                             env->head_dim);
    if (num_groups > 0x7fffffff || env->q_heads > 65535 || env->max_rows < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cuda attention: %lld groups x %d heads (max_rows %d) out of range",
                             (long long)num_groups, env->q_heads, env->max_rows);
    AttnParams p;
    for (int b = 0; b < DCP_BUF_ALL; b++) p.bufs[b] = env->bufs[b];
    p.seqs = env->seqs;
    p.groups = groups;
    p.tiles = tiles;
    p.rep = env->q_heads / env->kv_heads;
    p.scale_log2 = env->scale * 1.4426950408889634f;
    cudaStream_t s = (cudaStream_t)env->stream;
    const bool bf = env->dtype == DCP_DTYPE_BF16;
    cudaError_t e;
    if (env->head_dim == 64)
        e = bf ? launch<__nv_bfloat16, 64>(p, num_groups, env->max_rows, env->q_heads, s)
               : launch<__half, 64>(p, num_groups, env->max_rows, env->q_heads, s);
    else
        e = bf ? launch<__nv_bfloat16, 128>(p, num_groups, env->max_rows, env->q_heads, s)
               : launch<__half, 128>(p, num_groups, env->max_rows, env->q_heads, s);
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda attention launch: %s", cudaGetErrorString(e));
    return DCP_OK;
}
