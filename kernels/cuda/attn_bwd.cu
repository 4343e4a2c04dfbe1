/*
 * Fused blockwise masked attention backward for sm_80 and later (mma.sync, bf16/fp16 in,
 * fp32 accumulation), FlashAttention-2's structure: parallel over keys, a loop over queries,
 * from the final forward LSE and delta = rowsum(dO * O) (DESIGN.md, "Backward pass").
 *
 * Work. A launch's tile groups own consecutive tiles, [groups[0].first_tile, end of the last
 * group). Each tile's keys are cut into chunks of BN = 64; a work item is (tile, chunk slot
 * s): chunks s, s + S, s + 2S, ... of the tile, with S = ceil(max_rows / BN) slots per tile
 * (plan tiles are about as long as their query blocks, so usually one chunk per item).
 * Grid: (work slots, KV head of the head group); a CTA strides over the items and finds an
 * item's group by binary search on first_tile. The host cannot count the tiles (descriptors
 * are device memory), so it sizes x from the groups, the slots and the SM count.
 *
 * A chunk. A CTA of 8 warps keeps K and V of its 64 keys (one KV head) in shared memory and
 * their dK, dV in registers (fp32) while it loops over the group's query rows in blocks of
 * BM = 64 and, for each block, over the query heads of the KV head (GQA). Per (row block,
 * head) step, Q and dO rows (cp.async, double-buffered: the next step's rows load while this
 * one computes), LSE and delta:
 *   A  S = Q K^T and dP = dO V^T [BM x BN]     warps: 4 query slices x 2 key halves
 *      P = exp(scale S - LSE) (0 where masked or LSE = -inf), dS = P (dP - delta),
 *      both rounded to T into shared memory
 *   B  dV += P^T dO, dK += dS^T Q [BN x D]     warps: 4 key slices x 2 halves of D
 *   C  dQ = scale dS K [BM x D]                warps: 4 query slices x 2 halves of D,
 *      added to the group's dq with fp32 atomics
 * At the end of the chunk, scale dK and dV are added into the tile's dk, dv with fp32
 * atomics: several groups of a launch may share a tile's destination, and destinations are
 * zeroed by the executor, so the kernel always adds. Atomics that race make the last bits
 * vary run to run; env->deterministic runs the deterministic pair of kernels instead (below,
 * before the launch), which add each destination element once per launch.
 *
 * Masks. Per (row block, chunk) the CTA classifies as the forward does (include/base/
 * mask_rule.h, each thread evaluating its two rows): skip (no row sees a key of the chunk:
 * no loads, no MMAs), full (every row of the block sees every key, and both are whole: no
 * mask arithmetic) or partial (P = 0 outside a row's ranges; ragged row blocks and chunks
 * are partial, so padding never contributes). Tiles the planner marked full skip the range
 * evaluation. A warp whose rows see none of its keys skips its MMAs in A and C.
 *
 * Non-finite values: P and dS are computed from the final LSE and delta as they are, so a
 * NaN LSE (a forward row that met NaN or Inf, dcp.h) or a NaN in Q, K, V or dO reaches the
 * gradients of the pairs that read it; masked pairs are exact zeros. The MMAs of phases B
 * and C multiply those zeros by the tile's rows, so a NaN may also reach gradients that share
 * its 64 x 64 step without depending on it.
 */
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

#include "include/base/error.h"
#include "include/base/mask_rule.h"

#include <cuda_runtime.h>

namespace dcp_cuda::bwd
{

constexpr int BM = 64, BN = 64, WARPS = 8, THREADS = WARPS * 32, PAD = 8;
constexpr int LDP = BN + PAD; /* padded row of P and dS in shared memory */

template <int D> struct Geom {
    static constexpr int LD =
        D + PAD; /* padded row of K, V, Q, dO: ldmatrix rows hit distinct banks */
    static constexpr int HALF = D / 2;  /* columns of D per warp in phases B and C */
    static constexpr int NT = HALF / 8; /* mma n-tiles over those columns */
    static constexpr size_t smem_bytes = (size_t)(2 * BN + 4 * BM) * LD * 2 +
                                         (size_t)2 * BM * LDP * 2 + (size_t)4 * BM * 4 + THREADS;
};

struct BwdParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_seq_info_t *seqs;
    const dcp_tile_group_t *groups;
    const dcp_tile_t *tiles;
    int32_t num_groups;
    int32_t slots;    /* chunk slots per tile */
    int32_t rep;      /* query heads per KV head */
    float scale;      /* softmax scale */
    float scale_log2; /* softmax scale x log2(e) */
};

/* Shared memory of a CTA: the chunk's K and V, two buffers of a step's Q, dO, LSE, delta,
 * the step's P and dS, and the deterministic kernel's flags. Buffer b's pointers are computed
 * (q(b), ...), not read from arrays indexed at run time, which would live in local memory. */
template <typename T, int D> struct Smem {
    static constexpr int LD = Geom<D>::LD;
    T *k, *v, *q0, *p, *ds;
    float *stats; /* lse[0], lse[1], delta[0], delta[1]: BM floats each */
    unsigned char *flags; /* the deterministic dK/dV kernel's window of tile matches */

    __device__ explicit Smem(unsigned char *raw)
    {
        T *e = reinterpret_cast<T *>(raw);
        k = e;
        v = k + BN * LD;
        q0 = v + BN * LD; /* q[0], q[1], dout[0], dout[1]: BM rows each */
        p = q0 + 4 * BM * LD;
        ds = p + BM * LDP;
        stats = reinterpret_cast<float *>(ds + BM * LDP);
        flags = reinterpret_cast<unsigned char *>(stats + 4 * BM);
    }
    __device__ __forceinline__ T *q(int b) const { return q0 + b * (BM * LD); }
    __device__ __forceinline__ T *dout(int b) const { return q0 + (2 + b) * (BM * LD); }
    __device__ __forceinline__ float *lse(int b) const { return stats + b * BM; }
    __device__ __forceinline__ float *delta(int b) const { return stats + (2 + b) * BM; }
};

/* 4 bytes global -> shared (L1-cached); src_bytes 0 writes a zero. */
__device__ __forceinline__ void cp_async4(void *smem, const void *gmem, int src_bytes)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
                 "r"(src_bytes));
}

/* dst[0..1] += (a, b) in fp32, device-wide atomic; one 8-byte atomic where the GPU has them. */
__device__ __forceinline__ void atomic_add2(float *dst, float a, float b)
{
#if __CUDA_ARCH__ >= 900
    if (((uintptr_t)dst & 7) == 0) {
        atomicAdd(reinterpret_cast<float2 *>(dst), make_float2(a, b));
        return;
    }
#endif
    atomicAdd(dst, a);
    atomicAdd(dst + 1, b);
}

/* Allowed keys of a thread's two rows (row0 and row0 + 8 of the row block) inside one tile,
 * tile-local and clamped to [0, kv_len); a row past the group's queries sees nothing. The
 * same rule as the forward's (attn_fwd.cu). */
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

/* The whole tile for a valid row, nothing for a row past the group's queries. */
__device__ __forceinline__ void tile_rows_full(Rows &R, const dcp_tile_group_t &g,
                                               const dcp_tile_t &t, int r0, int row0)
{
    for (int x = 0; x < 2; x++) {
        R.lo[x][0] = 0;
        R.hi[x][0] = r0 + row0 + 8 * x < g.q_len ? t.kv_len : 0;
        R.lo[x][1] = R.hi[x][1] = R.hi[x][0];
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

/* A step of a chunk's loop: row block [r0, r0 + BM) of the group, query head j of the KV
 * head; full: no mask arithmetic. */
struct Step {
    int r0, j, full;
};

/* Keys [c0, c0 + nc) of tile t, rows and head of the CTA. */
struct Chunk {
    const dcp_tile_group_t *g;
    const dcp_tile_t *t;
    const dcp_seq_info_t *seq;
    int c0, nc, kvh;
};

/* The thread's rows within a row block: its phase A / C warp's query slice, lanes' g and
 * g + 8. */
__device__ __forceinline__ int thread_row0()
{
    return ((threadIdx.x >> 5) & 3) * 16 + ((threadIdx.x & 31) >> 2);
}

/* Moves s (and R, the ranges of s's row block) forward to the first row block from s.r0 on
 * in which some row sees a key of the chunk; false past the group's queries. Block-uniform:
 * every thread calls it. */
__device__ bool find_rows(const Chunk &c, Step &s, Rows &R)
{
    const dcp_tile_group_t &g = *c.g;
    const int row0 = thread_row0(), c1 = c.c0 + c.nc;
    for (; s.r0 < g.q_len; s.r0 += BM) {
        if (c.t->full) { /* every valid row sees every key */
            tile_rows_full(R, g, *c.t, s.r0, row0);
            s.full = c.nc == BN && s.r0 + BM <= g.q_len;
            return true;
        }
        tile_rows(R, *c.seq, g, *c.t, s.r0, row0);
        if (__syncthreads_or(sees(R, 0, c.c0, c1) || sees(R, 1, c.c0, c1))) {
            /* rows past q_len see nothing, so a ragged block is never full */
            s.full = __syncthreads_and(sees_all(R, 0, c.c0, c1) && sees_all(R, 1, c.c0, c1)) &&
                     c.nc == BN;
            return true;
        }
    }
    return false;
}

/* rows [0, n) of a [rows, D] view into smem [ROWS][LD]; rows past n become zeros. */
template <typename T, int D, int ROWS>
__device__ __forceinline__ void load_rows(T *s, const T *src, int64_t stride, int n)
{
    constexpr int LD = Geom<D>::LD, VEC = 8, PER_ROW = D / VEC;
    for (int i = threadIdx.x; i < ROWS * PER_ROW; i += THREADS) {
        const int r = i / PER_ROW, col = (i % PER_ROW) * VEC;
        const bool ok = r < n;
        cp_async16(s + r * LD + col, ok ? src + r * stride + col : src, ok ? 16 : 0);
    }
}

template <typename T, int D>
__device__ __forceinline__ void load_kv(const BwdParams &p, const Chunk &c, const Smem<T, D> &sm)
{
    const dcp_tile_t &t = *c.t;
    const T *k =
        (const T *)p.bufs[t.k.buf] + t.k.off + (int64_t)c.c0 * t.k.stride + (int64_t)c.kvh * D;
    const T *v =
        (const T *)p.bufs[t.v.buf] + t.v.off + (int64_t)c.c0 * t.v.stride + (int64_t)c.kvh * D;
    load_rows<T, D, BN>(sm.k, k, t.k.stride, c.nc);
    load_rows<T, D, BN>(sm.v, v, t.v.stride, c.nc);
}

/* Q, dO, LSE and delta of step s into buffer b; rows past q_len read as zeros. */
template <typename T, int D>
__device__ __forceinline__ void load_step(const BwdParams &p, const Chunk &c, const Step &s,
                                          const Smem<T, D> &sm, int b)
{
    const dcp_tile_group_t &g = *c.g;
    const int h = c.kvh * p.rep + s.j, n = min(BM, g.q_len - s.r0);
    const T *q = (const T *)p.bufs[g.q.buf] + g.q.off + (int64_t)s.r0 * g.q.stride + (int64_t)h * D;
    const T *d =
        (const T *)p.bufs[g.dout.buf] + g.dout.off + (int64_t)s.r0 * g.dout.stride + (int64_t)h * D;
    load_rows<T, D, BM>(sm.q(b), q, g.q.stride, n);
    load_rows<T, D, BM>(sm.dout(b), d, g.dout.stride, n);
    const int i = threadIdx.x;
    if (i < 2 * BM) { /* one LSE or delta element per thread */
        const dcp_view_t &vw = i < BM ? g.lse : g.delta;
        const int r = i % BM;
        const float *src = (const float *)p.bufs[vw.buf] + vw.off + h;
        float *dst = (i < BM ? sm.lse(b) : sm.delta(b)) + r;
        cp_async4(dst, r < n ? src + (int64_t)(s.r0 + r) * vw.stride : src, r < n ? 4 : 0);
    }
}

/* dK and dV of the chunk's keys: the thread's part of its warp's 16 keys x D/2 columns. */
template <int D> struct KVAcc {
    float dk[Geom<D>::NT][4], dv[Geom<D>::NT][4];
};

/* Phase A: P and dS of the step into shared memory (rows of the block x keys of the chunk). */
template <typename T, int D>
__device__ __forceinline__ void scores(const BwdParams &p, const Chunk &c, const Step &s,
                                       const Rows &R, const Smem<T, D> &sm, int b)
{
    constexpr int LD = Geom<D>::LD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
    const int qs = warp & 3, kh = warp >> 2; /* 16 query rows, 32 keys */
    const int k0 = kh * 32;
    const T *Q = sm.q(b), *dO = sm.dout(b);

    float sc[4][4], dp[4][4];
#pragma unroll
    for (int n = 0; n < 4; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) sc[n][e] = dp[n][e] = 0.0f;
    const bool mine =
        s.full || sees(R, 0, c.c0 + k0, c.c0 + k0 + 32) || sees(R, 1, c.c0 + k0, c.c0 + k0 + 32);
    if (__any_sync(0xffffffffu, mine)) {
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t qa[4], da[4];
            const int row = qs * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = kk * 16 + ((lane >> 4) & 1) * 8;
            ldmatrix_x4(qa, Q + row * LD + col);
            ldmatrix_x4(da, dO + row * LD + col);
#pragma unroll
            for (int np = 0; np < 2; np++) {
                uint32_t kb[4], vb[4];
                const int key = k0 + np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
                const int kc = kk * 16 + ((lane >> 3) & 1) * 8;
                ldmatrix_x4(kb, sm.k + key * LD + kc);
                ldmatrix_x4(vb, sm.v + key * LD + kc);
                mma16816<T>(sc[2 * np], qa, kb[0], kb[1]);
                mma16816<T>(sc[2 * np + 1], qa, kb[2], kb[3]);
                mma16816<T>(dp[2 * np], da, vb[0], vb[1]);
                mma16816<T>(dp[2 * np + 1], da, vb[2], vb[3]);
            }
        }
    }

#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int r = qs * 16 + (lane >> 2) + 8 * x;
        const float lse = sm.lse(b)[r], delta = sm.delta(b)[r];
        /* a row without keys (LSE -inf) has P = 0: exp2(... - inf), never inf or NaN */
        const float lse2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
#pragma unroll
        for (int n = 0; n < 4; n++) {
            float pe[2], ds[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = k0 + n * 8 + 2 * t4 + e;
                /* masked pairs give exact zeros, not 0 x (a NaN in dP or delta) */
                const bool ok = s.full || allowed(R, x, c.c0 + key);
                pe[e] = ok ? fast_exp2(fmaf(sc[n][2 * x + e], p.scale_log2, -lse2)) : 0.0f;
                ds[e] = ok ? pe[e] * (dp[n][2 * x + e] - delta) : 0.0f;
            }
            const int at = r * LDP + k0 + n * 8 + 2 * t4;
            *reinterpret_cast<uint32_t *>(sm.p + at) = pack2<T>(pe[0], pe[1]);
            *reinterpret_cast<uint32_t *>(sm.ds + at) = pack2<T>(ds[0], ds[1]);
        }
    }
}

/* Phase B: dV += P^T dO and dK += dS^T Q for the warp's 16 keys and half of D. */
template <typename T, int D>
__device__ __forceinline__ void kv_grads(const Smem<T, D> &sm, int b, KVAcc<D> &a)
{
    constexpr int LD = Geom<D>::LD;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ks = warp & 3, d0 = (warp >> 2) * Geom<D>::HALF;
    const T *Q = sm.q(b), *dO = sm.dout(b);
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        /* A = P^T (keys x queries): the transposed 8x8 blocks of P (queries x keys) */
        uint32_t pa[4], sa[4];
        const int q = kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
        const int key = ks * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4_trans(pa, sm.p + q * LDP + key);
        ldmatrix_x4_trans(sa, sm.ds + q * LDP + key);
#pragma unroll
        for (int np = 0; np < Geom<D>::NT / 2; np++) {
            uint32_t ob[4], qb[4];
            const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = d0 + np * 16 + ((lane >> 4) & 1) * 8;
            ldmatrix_x4_trans(ob, dO + r * LD + col);
            ldmatrix_x4_trans(qb, Q + r * LD + col);
            mma16816<T>(a.dv[2 * np], pa, ob[0], ob[1]);
            mma16816<T>(a.dv[2 * np + 1], pa, ob[2], ob[3]);
            mma16816<T>(a.dk[2 * np], sa, qb[0], qb[1]);
            mma16816<T>(a.dk[2 * np + 1], sa, qb[2], qb[3]);
        }
    }
}

/* Phase C's product: acc += dS K for the warp's 16 rows and half of D (unscaled). */
template <typename T, int D>
__device__ __forceinline__ void dq_product(const Smem<T, D> &sm, float (&acc)[Geom<D>::NT][4])
{
    constexpr int LD = Geom<D>::LD, NT = Geom<D>::NT;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int qs = warp & 3, d0 = (warp >> 2) * Geom<D>::HALF;
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        uint32_t a[4];
        const int row = qs * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(a, sm.ds + row * LDP + kk * 16 + ((lane >> 4) & 1) * 8);
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t kb[4];
            const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = d0 + np * 16 + ((lane >> 4) & 1) * 8;
            ldmatrix_x4_trans(kb, sm.k + key * LD + col);
            mma16816<T>(acc[2 * np], a, kb[0], kb[1]);
            mma16816<T>(acc[2 * np + 1], a, kb[2], kb[3]);
        }
    }
}

/* Adds scale x acc (the thread's part of Phase C's layout) into the group's dq at row block
 * r0, query head h; the thread's row x only where keep[x], never past q_len. */
template <int D>
__device__ __forceinline__ void add_dq(const BwdParams &p, const dcp_tile_group_t &g, int r0, int h,
                                       const float (&acc)[Geom<D>::NT][4], bool keep0, bool keep1)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
    const int qs = warp & 3, d0 = (warp >> 2) * Geom<D>::HALF;
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int row = r0 + qs * 16 + (lane >> 2) + 8 * x;
        if (row >= g.q_len || !(x ? keep1 : keep0)) continue;
        float *dst = (float *)p.bufs[g.dq.buf] + g.dq.off + (int64_t)row * g.dq.stride +
                     (int64_t)h * D + d0 + 2 * t4;
#pragma unroll
        for (int n = 0; n < Geom<D>::NT; n++)
            atomic_add2(dst + n * 8, p.scale * acc[n][2 * x], p.scale * acc[n][2 * x + 1]);
    }
}

template <int D> __device__ __forceinline__ void zero_dq(float (&acc)[Geom<D>::NT][4])
{
#pragma unroll
    for (int n = 0; n < Geom<D>::NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* Phase C: dQ = scale dS K for the warp's 16 rows and half of D, added to the group's dq. */
template <typename T, int D>
__device__ __forceinline__ void q_grads(const BwdParams &p, const Chunk &c, const Step &s,
                                        const Rows &R, const Smem<T, D> &sm)
{
    const int c1 = c.c0 + c.nc;
    const bool sees0 = s.full || sees(R, 0, c.c0, c1), sees1 = s.full || sees(R, 1, c.c0, c1);
    if (!__any_sync(0xffffffffu, sees0 || sees1)) return; /* dS is 0 on all 16 rows */
    float dq[Geom<D>::NT][4];
    zero_dq<D>(dq);
    dq_product<T, D>(sm, dq);
    add_dq<D>(p, *c.g, s.r0, c.kvh * p.rep + s.j, dq, sees0, sees1);
}

/* Adds the chunk's dK (x scale) and dV into the tile's dk, dv; keys past kv_len are not
 * written. */
template <int D>
__device__ __forceinline__ void store_kv(const BwdParams &p, const Chunk &c, const KVAcc<D> &a)
{
    const dcp_tile_t &t = *c.t;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
    const int ks = warp & 3, d0 = (warp >> 2) * Geom<D>::HALF;
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int key = c.c0 + ks * 16 + (lane >> 2) + 8 * x;
        if (key >= t.kv_len) continue;
        const int64_t col = (int64_t)c.kvh * D + d0 + 2 * t4;
        float *dk = (float *)p.bufs[t.dk.buf] + t.dk.off + (int64_t)key * t.dk.stride + col;
        float *dv = (float *)p.bufs[t.dv.buf] + t.dv.off + (int64_t)key * t.dv.stride + col;
#pragma unroll
        for (int n = 0; n < Geom<D>::NT; n++) {
            atomic_add2(dk + n * 8, p.scale * a.dk[n][2 * x], p.scale * a.dk[n][2 * x + 1]);
            atomic_add2(dv + n * 8, a.dv[n][2 * x], a.dv[n][2 * x + 1]);
        }
    }
}

/* Every step of chunk c with an allowed pair, its dK and dV added into a; with DQ, its dQ
 * into the group's dq as well. False when no row sees a key of the chunk. Block-uniform. */
template <typename T, int D, bool DQ>
__device__ bool chunk_steps(const BwdParams &p, const Chunk &c, const Smem<T, D> &sm, KVAcc<D> &a)
{
    Step cur = {0, 0, 0};
    Rows R;
    /* the previous chunk ended on a barrier: shared memory is free */
    if (!find_rows(c, cur, R)) return false;
    load_kv<T, D>(p, c, sm);
    load_step<T, D>(p, c, cur, sm, 0);
    cp_async_commit();

    int b = 0;
    for (bool have = true; have; b ^= 1) {
        Step nxt = cur;
        Rows Rn = R;
        bool more = true;
        if (++nxt.j == p.rep) {
            nxt.j = 0;
            nxt.r0 += BM;
            more = find_rows(c, nxt, Rn);
        }
        if (more) {
            load_step<T, D>(p, c, nxt, sm, b ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* step cur's rows (and the chunk's K, V) are in shared memory */
        scores<T, D>(p, c, cur, R, sm, b);
        __syncthreads(); /* P and dS complete */
        kv_grads<T, D>(sm, b, a);
        if (DQ) q_grads<T, D>(p, c, cur, R, sm);
        __syncthreads(); /* buffer b, P and dS are free again */
        cur = nxt;
        R = Rn;
        have = more;
    }
    return true;
}

template <int D> __device__ __forceinline__ void zero_kv(KVAcc<D> &a)
{
#pragma unroll
    for (int n = 0; n < Geom<D>::NT; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) a.dk[n][e] = a.dv[n][e] = 0.0f;
}

/* The group owning tile ti: the last with first_tile <= ti (groups' tiles are consecutive),
 * -1 when ti lies in none (a launch that breaks that rule loses tiles, never reads out of
 * bounds). */
__device__ __forceinline__ int find_group(const BwdParams &p, int ti)
{
    int lo = 0, hi = p.num_groups - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (p.groups[mid].first_tile <= ti)
            lo = mid;
        else
            hi = mid - 1;
    }
    const dcp_tile_group_t &g = p.groups[lo];
    return ti >= g.first_tile && ti < g.first_tile + g.num_tiles ? lo : -1;
}

template <typename T, int D>
__global__ void __launch_bounds__(THREADS, 1) attn_bwd_kernel(const __grid_constant__ BwdParams p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<T, D> sm(smem_raw);
    const dcp_tile_group_t &last = p.groups[p.num_groups - 1];
    const int first = p.groups[0].first_tile;
    const int64_t items = (int64_t)(last.first_tile + last.num_tiles - first) * p.slots;
    for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
        const int ti = first + (int)(w / p.slots), slot = (int)(w % p.slots);
        const int gi = find_group(p, ti);
        if (gi < 0) continue;
        Chunk c;
        c.g = &p.groups[gi];
        c.t = &p.tiles[ti];
        c.seq = &p.seqs[c.g->seq];
        c.kvh = blockIdx.y;
        for (c.c0 = slot * BN; c.c0 < c.t->kv_len; c.c0 += p.slots * BN) {
            c.nc = min(BN, c.t->kv_len - c.c0);
            KVAcc<D> a;
            zero_kv<D>(a);
            if (chunk_steps<T, D, true>(p, c, sm, a)) store_kv<D>(p, c, a);
        }
    }
}

/* The deterministic backward: the same arithmetic in a fixed order, no sum racing another.
 *   dK, dV (det_kv_kernel): an item (tile, chunk slot) runs only for the first tile of its
 *     destination (dcp_tile_same_grads) and walks every tile of the launch with that
 *     destination in tile order, into one register accumulator, added to dk, dv once.
 *   dQ (det_q_kernel): a CTA per (group, row block, query head) walks the group's tiles and
 *     their chunks in order, recomputing phase A (S, dP, dS) for phase C's dS K into
 *     registers, added to dq once.
 * Each destination element takes one add per launch, and launches are stream-ordered, so
 * the bits are the same on every run. The price: phase A twice (7 matrix products a step
 * where the atomic kernel does 5), K and V loaded without overlap in the dQ kernel, and a
 * destination's tiles on one CTA. */

/* Block-uniform: true when no tile in [first, ti) adds into tile ti's destination. */
__device__ bool first_of_dst(const BwdParams &p, int first, int ti)
{
    bool seen = false;
    for (int tj = first + (int)threadIdx.x; tj < ti && !seen; tj += THREADS)
        seen = dcp_tile_same_grads(&p.tiles[tj], &p.tiles[ti]);
    return !__syncthreads_or(seen);
}

template <typename T, int D>
__global__ void __launch_bounds__(THREADS, 1) det_kv_kernel(const __grid_constant__ BwdParams p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<T, D> sm(smem_raw);
    const dcp_tile_group_t &last = p.groups[p.num_groups - 1];
    const int first = p.groups[0].first_tile, end = last.first_tile + last.num_tiles;
    const int64_t items = (int64_t)(end - first) * p.slots;
    for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
        const int ti = first + (int)(w / p.slots), slot = (int)(w % p.slots);
        const dcp_tile_t *head = &p.tiles[ti];
        if (slot * BN >= head->kv_len || !first_of_dst(p, first, ti)) continue;
        Chunk c;
        c.kvh = blockIdx.y;
        for (c.c0 = slot * BN; c.c0 < head->kv_len; c.c0 += p.slots * BN) {
            c.nc = min(BN, head->kv_len - c.c0);
            KVAcc<D> a;
            zero_kv<D>(a);
            bool ran = false;
            /* the destination's tiles, a window of THREADS at a time, in tile order */
            for (int base = ti; base < end; base += THREADS) {
                const int tj = base + (int)threadIdx.x;
                sm.flags[threadIdx.x] = tj < end && dcp_tile_same_grads(&p.tiles[tj], head);
                __syncthreads();
                for (int x = 0; x < THREADS && base + x < end; x++) {
                    const int gi = sm.flags[x] ? find_group(p, base + x) : -1;
                    if (gi < 0) continue;
                    c.g = &p.groups[gi];
                    c.t = &p.tiles[base + x];
                    c.seq = &p.seqs[c.g->seq];
                    ran |= chunk_steps<T, D, false>(p, c, sm, a);
                }
                __syncthreads(); /* every thread has read the window's flags */
            }
            c.t = head;
            if (ran) store_kv<D>(p, c, a);
        }
    }
}

/* dQ of row block s.r0, query head kvh x rep + s.j of group c.g: every tile's chunks in
 * order, one add at the end. Block-uniform. */
template <typename T, int D>
__device__ void dq_rows(const BwdParams &p, Chunk &c, Step s, const Smem<T, D> &sm)
{
    const dcp_tile_group_t &g = *c.g;
    const int row0 = thread_row0();
    load_step<T, D>(p, c, s, sm, 0);
    cp_async_commit();
    float acc[Geom<D>::NT][4];
    zero_dq<D>(acc);
    bool any0 = false, any1 = false; /* the thread's rows saw a key */
    for (int ti = g.first_tile; ti < g.first_tile + g.num_tiles; ti++) {
        c.t = &p.tiles[ti];
        Rows R;
        if (c.t->full)
            tile_rows_full(R, g, *c.t, s.r0, row0);
        else
            tile_rows(R, *c.seq, g, *c.t, s.r0, row0);
        for (c.c0 = 0; c.c0 < c.t->kv_len; c.c0 += BN) {
            c.nc = min(BN, c.t->kv_len - c.c0);
            const int c1 = c.c0 + c.nc;
            const bool s0 = sees(R, 0, c.c0, c1), s1 = sees(R, 1, c.c0, c1);
            if (!__syncthreads_or(s0 || s1)) continue;
            if (c.t->full) /* rows past q_len see nothing: a ragged block is not full */
                s.full = c.nc == BN && s.r0 + BM <= g.q_len;
            else
                s.full = __syncthreads_and(sees_all(R, 0, c.c0, c1) && sees_all(R, 1, c.c0, c1)) &&
                         c.nc == BN;
            load_kv<T, D>(p, c, sm);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads(); /* the rows and the chunk's K, V are in shared memory */
            scores<T, D>(p, c, s, R, sm, 0);
            __syncthreads(); /* P and dS complete */
            if (__any_sync(0xffffffffu, s0 || s1)) dq_product<T, D>(sm, acc);
            any0 |= s0;
            any1 |= s1;
            __syncthreads(); /* K, V and dS are free again */
        }
    }
    cp_async_wait<0>(); /* the rows' loads, where no chunk waited for them */
    __syncthreads();
    add_dq<D>(p, g, s.r0, c.kvh * p.rep + s.j, acc, any0, any1);
}

/* Items (group, row-block slot): slot's row blocks BM = BN rows apart by p.slots; y the
 * query head. */
template <typename T, int D>
__global__ void __launch_bounds__(THREADS, 1) det_q_kernel(const __grid_constant__ BwdParams p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<T, D> sm(smem_raw);
    const int h = blockIdx.y;
    const int64_t items = (int64_t)p.num_groups * p.slots;
    for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
        const dcp_tile_group_t &g = p.groups[w / p.slots];
        Chunk c;
        c.g = &g;
        c.seq = &p.seqs[g.seq];
        c.kvh = h / p.rep;
        for (Step s = {(int)(w % p.slots) * BM, h % p.rep, 0}; s.r0 < g.q_len; s.r0 += p.slots * BM)
            dq_rows<T, D>(p, c, s, sm);
    }
}

template <typename K>
static cudaError_t start(K kernel, const BwdParams &p, dim3 grid, size_t smem, cudaStream_t stream)
{
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    kernel<<<grid, THREADS, smem, stream>>>(p);
    return cudaGetLastError();
}

/* The atomic kernel, or the deterministic pair: grid x items (gx for tiles' chunks, gq for
 * the dQ kernel's row blocks), y the KV heads or, for dQ, the query heads. */
template <typename T, int D>
static cudaError_t launch(const BwdParams &p, unsigned gx, unsigned gq, unsigned kv_heads,
                          unsigned q_heads, bool deterministic, cudaStream_t stream)
{
    const size_t smem = Geom<D>::smem_bytes;
    if (!deterministic) return start(attn_bwd_kernel<T, D>, p, dim3(gx, kv_heads), smem, stream);
    cudaError_t e = start(det_kv_kernel<T, D>, p, dim3(gx, kv_heads), smem, stream);
    return e == cudaSuccess ? start(det_q_kernel<T, D>, p, dim3(gq, q_heads), smem, stream) : e;
}

} // namespace dcp_cuda::bwd

using namespace dcp_cuda::bwd;

extern "C" dcp_status_t dcp_cuda_attn_bwd(const dcp_kernel_env_t *env,
                                          const dcp_tile_group_t *groups, int64_t num_groups,
                                          const dcp_tile_t *tiles)
{
    if (num_groups == 0) return DCP_OK;
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda attention backward: dtype %d, the GPU kernels run bf16 and fp16",
                             (int)env->dtype);
    if (env->head_dim != 64 && env->head_dim != 128)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda attention backward: head_dim %d, the GPU kernels run 64 and 128",
                             env->head_dim);
    if (num_groups > 0x7fffffff || env->kv_heads < 1 || env->q_heads < env->kv_heads ||
        env->q_heads > 65535 || env->q_heads % env->kv_heads != 0 || env->max_rows < 1)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "cuda attention backward: %lld groups, heads %d/%d, max_rows %d",
                             (long long)num_groups, env->q_heads, env->kv_heads, env->max_rows);
    BwdParams p;
    for (int b = 0; b < DCP_BUF_ALL; b++) p.bufs[b] = env->bufs[b];
    p.seqs = env->seqs;
    p.groups = groups;
    p.tiles = tiles;
    p.num_groups = (int32_t)num_groups;
    p.slots = (env->max_rows + BN - 1) / BN;
    p.rep = env->q_heads / env->kv_heads;
    p.scale = env->scale;
    p.scale_log2 = env->scale * 1.4426950408889634f;

    /* One item per CTA if every group had one tile, and at least two CTAs per SM. */
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda attention backward: %s", cudaGetErrorString(e));
    int64_t x = num_groups * p.slots, xq = x;
    const int64_t floor_x = (2 * (int64_t)sms + env->kv_heads - 1) / env->kv_heads;
    x = x > floor_x ? x : floor_x;
    x = x < 0x7fffffff ? x : 0x7fffffff;
    xq = xq < 0x7fffffff ? xq : 0x7fffffff;

    cudaStream_t s = (cudaStream_t)env->stream;
    const bool bf = env->dtype == DCP_DTYPE_BF16, det = env->deterministic != 0;
    const unsigned gx = (unsigned)x, gq = (unsigned)xq, hk = (unsigned)env->kv_heads,
                   hq = (unsigned)env->q_heads;
    if (env->head_dim == 64)
        e = bf ? launch<__nv_bfloat16, 64>(p, gx, gq, hk, hq, det, s)
               : launch<__half, 64>(p, gx, gq, hk, hq, det, s);
    else
        e = bf ? launch<__nv_bfloat16, 128>(p, gx, gq, hk, hq, det, s)
               : launch<__half, 128>(p, gx, gq, hk, hq, det, s);
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda attention backward launch: %s",
                             cudaGetErrorString(e));
    return DCP_OK;
}
