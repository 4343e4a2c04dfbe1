/*
 * Fused blockwise masked attention backward for sm_80 and later (mma.sync, bf16/fp16 in,
 * fp32 accumulation), FlashAttention-2's structure: parallel over keys, a loop over queries,
 * from the final forward LSE and delta = rowsum(dO * O) (kernels/README.md, "Backward pass").
 *
 * Work. A launch's tile groups own consecutive tiles, [groups[0].first_tile, end of the last
 * group). Each tile's keys are cut into chunks of BN = 64 (32 at DK + DV > 256, below); a
 * work item is (tile, chunk slot s): chunks s, s + S, s + 2S, ... of the tile, with
 * S = ceil(max_rows / BN) slots per tile (plan tiles are about as long as their query blocks,
 * so usually one chunk per item).
 * Grid: (work slots, KV head of the head group); a CTA strides over the items and finds an
 * item's group by binary search on first_tile. The host cannot count the tiles (descriptors
 * are device memory), so it sizes x from the groups, the slots and the SM count.
 *
 * A chunk. A CTA of 8 warps keeps K and V of its BN keys (one KV head) in shared memory and
 * their dK, dV in registers (fp32) while it loops over the group's query rows in blocks of
 * BM = 64 and, for each block, over the query heads of the KV head (GQA). Per (row block,
 * head) step, Q and dO rows (cp.async, double-buffered: the next step's rows load while this
 * one computes), LSE and delta:
 *   A  S = Q K^T and dP = dO V^T [BM x BN]     warps: 4 query slices x 2 key halves
 *      P = exp(scale S - LSE) (0 where masked or LSE = -inf), dS = P (dP - delta),
 *      both rounded to T into shared memory
 *   B  dV += P^T dO, dK += dS^T Q [BN x D]     warps: BN/16 key slices x 8/(BN/16) parts of D
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
 * Head dims (template DK for Q, K, dQ, dK; DV for V, dO, dV): 64, 96, 128, 192, 256 and MLA's
 * 192/128. The CTA's dK and dV accumulators hold BN x (DK + DV) floats: at DK + DV > 256 a
 * chunk is BN = 32 keys (phase B's warps then 2 key slices x 4 column parts) so that they fit
 * the registers; where two buffers of a step's Q and dO would not fit sm_80's shared memory,
 * the step's rows load into one, after the previous step is done with it. A softcap c
 * recomputes the capped score c tanh(s / c) and multiplies dS by 1 - tanh^2.
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

constexpr int BM = 64, WARPS = 8, THREADS = WARPS * 32, PAD = 8;

/* Keys of a chunk: 64, or 32 past DK + DV = 256, where the CTA's BN x (DK + DV) fp32 dK and
 * dV, phase C's dQ and a softcap's tanh would spill at 64. */
constexpr int chunk_keys(int dk, int dv)
{
    return dk + dv > 256 ? 32 : 64;
}

/* The geometry of a launch's head dims. Padded rows (ldmatrix rows hit distinct banks) of
 * K, Q, dQ (LDK), V, dO (LDV), P and dS (LDP). Phase A: 4 query slices x 2 key halves of KH
 * keys; phase B: KS key slices of 16 x CS column parts (NTK, NTV n-tiles of dK, dV a warp);
 * phase C: 4 query slices x 2 halves of DK (NTQ n-tiles). */
template <int DK, int DV> struct Geom {
    static constexpr int BN = chunk_keys(DK, DV);
    static constexpr int LDK = DK + PAD, LDV = DV + PAD, LDP = BN + PAD;
    static constexpr int KH = BN / 2, KS = BN / 16, CS = WARPS / KS;
    static constexpr int NTK = DK / CS / 8, NTV = DV / CS / 8, NTQ = DK / 2 / 8;
    static_assert(DK % (16 * CS) == 0 && DV % (16 * CS) == 0 && DK % 32 == 0,
                  "the warps' columns are whole 16-column ldmatrix steps");
    static constexpr size_t bytes(int nbuf)
    {
        return (size_t)(BN * (LDK + LDV) + nbuf * BM * (LDK + LDV)) * 2 + (size_t)2 * BM * LDP * 2 +
               (size_t)4 * BM * 4 + THREADS;
    }
    /* buffers of a step's Q and dO: two (the next step's load beside this one's work) where
     * they fit sm_80's 163 KB of shared memory, else one */
    static constexpr int NBUF = bytes(2) <= 160 * 1024 ? 2 : 1;
    static constexpr size_t smem_bytes = bytes(NBUF);
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
    /* softcap c > 0: the score is c tanh(s / c) = cap_log2 tanh(raw cap_scale) in the log2
     * domain; 0: off */
    float softcap, cap_scale, cap_log2;
};

/* Shared memory of a CTA: the chunk's K and V, NBUF buffers of a step's Q, dO, LSE, delta,
 * the step's P and dS, and the deterministic kernel's flags. Buffer b's pointers are computed
 * (q(b), ...), not read from arrays indexed at run time, which would live in local memory. */
template <typename T, int DK, int DV> struct Smem {
    using G = Geom<DK, DV>;
    T *k, *v, *q0, *p, *ds;
    float *stats; /* lse[0], lse[1], delta[0], delta[1]: BM floats each */
    unsigned char *flags; /* the deterministic dK/dV kernel's window of tile matches */

    __device__ explicit Smem(unsigned char *raw)
    {
        T *e = reinterpret_cast<T *>(raw);
        k = e;
        v = k + G::BN * G::LDK;
        q0 = v + G::BN * G::LDV; /* q[0 .. NBUF), then dout[0 .. NBUF): BM rows each */
        p = q0 + G::NBUF * BM * (G::LDK + G::LDV);
        ds = p + BM * G::LDP;
        stats = reinterpret_cast<float *>(ds + BM * G::LDP);
        flags = reinterpret_cast<unsigned char *>(stats + 4 * BM);
    }
    __device__ __forceinline__ T *q(int b) const
    {
        return q0 + b * (BM * G::LDK);
    }
    __device__ __forceinline__ T *dout(int b) const
    {
        return q0 + G::NBUF * BM * G::LDK + b * (BM * G::LDV);
    }
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

/* Keys [c0, c0 + nc) of tile t (nc <= BN), rows and head of the CTA. */
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
template <int BN> __device__ bool find_rows(const Chunk &c, Step &s, Rows &R)
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
template <typename T, int D, int LD, int ROWS>
__device__ __forceinline__ void load_rows(T *s, const T *src, int64_t stride, int n)
{
    constexpr int VEC = 8, PER_ROW = D / VEC;
    for (int i = threadIdx.x; i < ROWS * PER_ROW; i += THREADS) {
        const int r = i / PER_ROW, col = (i % PER_ROW) * VEC;
        const bool ok = r < n;
        cp_async16(s + r * LD + col, ok ? src + r * stride + col : src, ok ? 16 : 0);
    }
}

template <typename T, int DK, int DV>
__device__ __forceinline__ void load_kv(const BwdParams &p, const Chunk &c,
                                        const Smem<T, DK, DV> &sm)
{
    using G = Geom<DK, DV>;
    const dcp_tile_t &t = *c.t;
    const T *k =
        (const T *)p.bufs[t.k.buf] + t.k.off + (int64_t)c.c0 * t.k.stride + (int64_t)c.kvh * DK;
    const T *v =
        (const T *)p.bufs[t.v.buf] + t.v.off + (int64_t)c.c0 * t.v.stride + (int64_t)c.kvh * DV;
    load_rows<T, DK, G::LDK, G::BN>(sm.k, k, t.k.stride, c.nc);
    load_rows<T, DV, G::LDV, G::BN>(sm.v, v, t.v.stride, c.nc);
}

/* Q, dO, LSE and delta of step s into buffer b; rows past q_len read as zeros. */
template <typename T, int DK, int DV>
__device__ __forceinline__ void load_step(const BwdParams &p, const Chunk &c, const Step &s,
                                          const Smem<T, DK, DV> &sm, int b)
{
    using G = Geom<DK, DV>;
    const dcp_tile_group_t &g = *c.g;
    const int h = c.kvh * p.rep + s.j, n = min(BM, g.q_len - s.r0);
    const T *q =
        (const T *)p.bufs[g.q.buf] + g.q.off + (int64_t)s.r0 * g.q.stride + (int64_t)h * DK;
    const T *d = (const T *)p.bufs[g.dout.buf] + g.dout.off + (int64_t)s.r0 * g.dout.stride +
                 (int64_t)h * DV;
    load_rows<T, DK, G::LDK, BM>(sm.q(b), q, g.q.stride, n);
    load_rows<T, DV, G::LDV, BM>(sm.dout(b), d, g.dout.stride, n);
    const int i = threadIdx.x;
    if (i < 2 * BM) { /* one LSE or delta element per thread */
        const dcp_view_t &vw = i < BM ? g.lse : g.delta;
        const int r = i % BM;
        const float *src = (const float *)p.bufs[vw.buf] + vw.off + h;
        float *dst = (i < BM ? sm.lse(b) : sm.delta(b)) + r;
        cp_async4(dst, r < n ? src + (int64_t)(s.r0 + r) * vw.stride : src, r < n ? 4 : 0);
    }
}

/* dK and dV of the chunk's keys: the thread's part of its warp's 16 keys x DK / CS and
 * DV / CS columns. */
template <int DK, int DV> struct KVAcc {
    float dk[Geom<DK, DV>::NTK][4], dv[Geom<DK, DV>::NTV][4];
};

/* acc[n] += A B^T over `kdim` columns, A 16 rows of a (row-major, stride lda), B the 2 NP x 8
 * rows of b from key0 on (stride ldb): phase A's products. */
template <typename T, int KDIM, int NP>
__device__ __forceinline__ void rows_times_keys(float (&acc)[2 * NP][4], const T *a, int lda,
                                                const T *b, int ldb, int row0, int key0)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < KDIM / 16; kk++) {
        uint32_t fa[4];
        const int row = row0 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(fa, a + row * lda + kk * 16 + ((lane >> 4) & 1) * 8);
#pragma unroll
        for (int np = 0; np < NP; np++) {
            uint32_t fb[4];
            const int key = key0 + np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
            ldmatrix_x4(fb, b + key * ldb + kk * 16 + ((lane >> 3) & 1) * 8);
            mma16816<T>(acc[2 * np], fa, fb[0], fb[1]);
            mma16816<T>(acc[2 * np + 1], fa, fb[2], fb[3]);
        }
    }
}

/* Phase A: P and dS of the step into shared memory (rows of the block x keys of the chunk). */
template <typename T, int DK, int DV>
__device__ __forceinline__ void scores(const BwdParams &p, const Chunk &c, const Step &s,
                                       const Rows &R, const Smem<T, DK, DV> &sm, int b)
{
    using G = Geom<DK, DV>;
    constexpr int KH = G::KH, NN = KH / 8; /* a warp's keys and their n-tiles */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
    const int qs = warp & 3, kh = warp >> 2; /* 16 query rows, KH keys */
    const int k0 = kh * KH;
    const T *Q = sm.q(b), *dO = sm.dout(b);

    float sc[NN][4], dp[NN][4];
#pragma unroll
    for (int n = 0; n < NN; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) sc[n][e] = dp[n][e] = 0.0f;
    const bool mine =
        s.full || sees(R, 0, c.c0 + k0, c.c0 + k0 + KH) || sees(R, 1, c.c0 + k0, c.c0 + k0 + KH);
    if (__any_sync(0xffffffffu, mine)) {
        rows_times_keys<T, DK, NN / 2>(sc, Q, G::LDK, sm.k, G::LDK, qs * 16, k0);
        rows_times_keys<T, DV, NN / 2>(dp, dO, G::LDV, sm.v, G::LDV, qs * 16, k0);
    }

#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int r = qs * 16 + (lane >> 2) + 8 * x;
        const float lse = sm.lse(b)[r], delta = sm.delta(b)[r];
        /* a row without keys (LSE -inf) has P = 0: exp2(... - inf), never inf or NaN */
        const float lse2 = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
#pragma unroll
        for (int n = 0; n < NN; n++) {
            float pe[2], ds[2];
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int key = k0 + n * 8 + 2 * t4 + e;
                /* masked pairs give exact zeros, not 0 x (a NaN in dP or delta) */
                const bool ok = s.full || allowed(R, x, c.c0 + key);
                float logit = sc[n][2 * x + e] * p.scale_log2, slope = 1.0f;
                if (p.softcap > 0.0f) { /* d(c tanh(s / c)) / ds = 1 - tanh^2 */
                    const float th = tanhf(sc[n][2 * x + e] * p.cap_scale);
                    logit = p.cap_log2 * th;
                    slope = 1.0f - th * th;
                }
                pe[e] = ok ? fast_exp2(logit - lse2) : 0.0f;
                ds[e] = ok ? pe[e] * (dp[n][2 * x + e] - delta) * slope : 0.0f;
            }
            const int at = r * G::LDP + k0 + n * 8 + 2 * t4;
            *reinterpret_cast<uint32_t *>(sm.p + at) = pack2<T>(pe[0], pe[1]);
            *reinterpret_cast<uint32_t *>(sm.ds + at) = pack2<T>(ds[0], ds[1]);
        }
    }
}

/* acc[2 NP] += A^T B over the BM query rows, A^T the 16 keys from key0 on of a (queries x
 * keys, stride LDP; its transposed 8x8 blocks), B NP 16-column steps of b from col0 on
 * (stride ldb): phase B's products. */
template <typename T, int LDP, int NP>
__device__ __forceinline__ void keys_times_rows(float (&acc)[2 * NP][4], const T *a, int key0,
                                                const T *b, int ldb, int col0)
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < BM / 16; kk++) {
        uint32_t fa[4];
        const int q = kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
        ldmatrix_x4_trans(fa, a + q * LDP + key0 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int np = 0; np < NP; np++) {
            uint32_t fb[4];
            const int r = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldmatrix_x4_trans(fb, b + r * ldb + col0 + np * 16 + ((lane >> 4) & 1) * 8);
            mma16816<T>(acc[2 * np], fa, fb[0], fb[1]);
            mma16816<T>(acc[2 * np + 1], fa, fb[2], fb[3]);
        }
    }
}

/* Phase B: dV += P^T dO and dK += dS^T Q for the warp's 16 keys and column part. */
template <typename T, int DK, int DV>
__device__ __forceinline__ void kv_grads(const Smem<T, DK, DV> &sm, int b, KVAcc<DK, DV> &a)
{
    using G = Geom<DK, DV>;
    const int warp = threadIdx.x >> 5;
    const int ks = warp % G::KS, part = warp / G::KS;
    keys_times_rows<T, G::LDP, G::NTV / 2>(a.dv, sm.p, ks * 16, sm.dout(b), G::LDV,
                                           part * (DV / G::CS));
    keys_times_rows<T, G::LDP, G::NTK / 2>(a.dk, sm.ds, ks * 16, sm.q(b), G::LDK,
                                           part * (DK / G::CS));
}

/* Phase C's product: acc += dS K for the warp's 16 rows and half of DK (unscaled). */
template <typename T, int DK, int DV>
__device__ __forceinline__ void dq_product(const Smem<T, DK, DV> &sm,
                                           float (&acc)[Geom<DK, DV>::NTQ][4])
{
    using G = Geom<DK, DV>;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int qs = warp & 3, d0 = (warp >> 2) * (DK / 2);
#pragma unroll
    for (int kk = 0; kk < G::BN / 16; kk++) {
        uint32_t a[4];
        const int row = qs * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(a, sm.ds + row * G::LDP + kk * 16 + ((lane >> 4) & 1) * 8);
#pragma unroll
        for (int np = 0; np < G::NTQ / 2; np++) {
            uint32_t kb[4];
            const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = d0 + np * 16 + ((lane >> 4) & 1) * 8;
            ldmatrix_x4_trans(kb, sm.k + key * G::LDK + col);
            mma16816<T>(acc[2 * np], a, kb[0], kb[1]);
            mma16816<T>(acc[2 * np + 1], a, kb[2], kb[3]);
        }
    }
}

/* Adds scale x acc (the thread's part of Phase C's layout) into the group's dq at row block
 * r0, query head h; the thread's row x only where keep[x], never past q_len. */
template <int DK, int DV>
__device__ __forceinline__ void add_dq(const BwdParams &p, const dcp_tile_group_t &g, int r0, int h,
                                       const float (&acc)[Geom<DK, DV>::NTQ][4], bool keep0,
                                       bool keep1)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, t4 = lane & 3;
    const int qs = warp & 3, d0 = (warp >> 2) * (DK / 2);
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int row = r0 + qs * 16 + (lane >> 2) + 8 * x;
        if (row >= g.q_len || !(x ? keep1 : keep0)) continue;
        float *dst = (float *)p.bufs[g.dq.buf] + g.dq.off + (int64_t)row * g.dq.stride +
                     (int64_t)h * DK + d0 + 2 * t4;
#pragma unroll
        for (int n = 0; n < Geom<DK, DV>::NTQ; n++)
            atomic_add2(dst + n * 8, p.scale * acc[n][2 * x], p.scale * acc[n][2 * x + 1]);
    }
}

template <int N> __device__ __forceinline__ void zero_acc(float (&acc)[N][4])
{
#pragma unroll
    for (int n = 0; n < N; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
}

/* Phase C: dQ = scale dS K for the warp's 16 rows and half of DK, added to the group's dq. */
template <typename T, int DK, int DV>
__device__ __forceinline__ void q_grads(const BwdParams &p, const Chunk &c, const Step &s,
                                        const Rows &R, const Smem<T, DK, DV> &sm)
{
    const int c1 = c.c0 + c.nc;
    const bool sees0 = s.full || sees(R, 0, c.c0, c1), sees1 = s.full || sees(R, 1, c.c0, c1);
    if (!__any_sync(0xffffffffu, sees0 || sees1)) return; /* dS is 0 on all 16 rows */
    float dq[Geom<DK, DV>::NTQ][4];
    zero_acc(dq);
    dq_product<T, DK, DV>(sm, dq);
    add_dq<DK, DV>(p, *c.g, s.r0, c.kvh * p.rep + s.j, dq, sees0, sees1);
}

/* The thread's rows of acc (its warp's 16 keys, n-tiles of a column part from col on) added
 * into a gradient view, times `f`; keys past kv_len are not written. */
template <int NT>
__device__ __forceinline__ void add_keys(const BwdParams &p, const Chunk &c, const dcp_view_t &v,
                                         int64_t col, const float (&acc)[NT][4], float f)
{
    const int lane = threadIdx.x & 31, t4 = lane & 3;
#pragma unroll
    for (int x = 0; x < 2; x++) {
        const int key = c.c0 + (lane >> 2) + 8 * x;
        if (key >= c.t->kv_len) continue;
        float *dst = (float *)p.bufs[v.buf] + v.off + (int64_t)key * v.stride + col + 2 * t4;
#pragma unroll
        for (int n = 0; n < NT; n++)
            atomic_add2(dst + n * 8, f * acc[n][2 * x], f * acc[n][2 * x + 1]);
    }
}

/* Adds the chunk's dK (x scale) and dV into the tile's dk, dv; keys past kv_len are not
 * written. */
template <int DK, int DV>
__device__ __forceinline__ void store_kv(const BwdParams &p, const Chunk &c, const KVAcc<DK, DV> &a)
{
    using G = Geom<DK, DV>;
    const int warp = threadIdx.x >> 5;
    const int ks = warp % G::KS, part = warp / G::KS;
    Chunk w = c; /* the warp's 16 keys */
    w.c0 = c.c0 + ks * 16;
    add_keys<G::NTK>(p, w, c.t->dk, (int64_t)c.kvh * DK + part * (DK / G::CS), a.dk, p.scale);
    add_keys<G::NTV>(p, w, c.t->dv, (int64_t)c.kvh * DV + part * (DV / G::CS), a.dv, 1.0f);
}

/* Every step of chunk c with an allowed pair, its dK and dV added into a; with DQ, its dQ
 * into the group's dq as well. False when no row sees a key of the chunk. Block-uniform.
 * With two buffers the next step's rows load while this one computes; with one, after. */
template <typename T, int DK, int DV, bool DQ>
__device__ bool chunk_steps(const BwdParams &p, const Chunk &c, const Smem<T, DK, DV> &sm,
                            KVAcc<DK, DV> &a)
{
    constexpr int BN = Geom<DK, DV>::BN, NBUF = Geom<DK, DV>::NBUF;
    Step cur = {0, 0, 0};
    Rows R;
    /* the previous chunk ended on a barrier: shared memory is free */
    if (!find_rows<BN>(c, cur, R)) return false;
    load_kv<T, DK, DV>(p, c, sm);
    load_step<T, DK, DV>(p, c, cur, sm, 0);
    cp_async_commit();

    int b = 0;
    for (bool have = true; have; b = (b + 1) % NBUF) {
        Step nxt = cur;
        Rows Rn = R;
        bool more = true;
        if (++nxt.j == p.rep) {
            nxt.j = 0;
            nxt.r0 += BM;
            more = find_rows<BN>(c, nxt, Rn);
        }
        if (NBUF == 2 && more) {
            load_step<T, DK, DV>(p, c, nxt, sm, b ^ 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* step cur's rows (and the chunk's K, V) are in shared memory */
        scores<T, DK, DV>(p, c, cur, R, sm, b);
        __syncthreads(); /* P and dS complete */
        kv_grads<T, DK, DV>(sm, b, a);
        if (DQ) q_grads<T, DK, DV>(p, c, cur, R, sm);
        __syncthreads(); /* buffer b, P and dS are free again */
        if (NBUF == 1 && more) {
            load_step<T, DK, DV>(p, c, nxt, sm, 0);
            cp_async_commit();
        }
        cur = nxt;
        R = Rn;
        have = more;
    }
    return true;
}

template <int DK, int DV> __device__ __forceinline__ void zero_kv(KVAcc<DK, DV> &a)
{
    zero_acc(a.dk);
    zero_acc(a.dv);
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

template <typename T, int DK, int DV>
__global__ void __launch_bounds__(THREADS, 1) attn_bwd_kernel(const __grid_constant__ BwdParams p)
{
    constexpr int BN = Geom<DK, DV>::BN;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<T, DK, DV> sm(smem_raw);
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
            KVAcc<DK, DV> a;
            zero_kv(a);
            if (chunk_steps<T, DK, DV, true>(p, c, sm, a)) store_kv<DK, DV>(p, c, a);
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

template <typename T, int DK, int DV>
__global__ void __launch_bounds__(THREADS, 1) det_kv_kernel(const __grid_constant__ BwdParams p)
{
    constexpr int BN = Geom<DK, DV>::BN;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<T, DK, DV> sm(smem_raw);
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
            KVAcc<DK, DV> a;
            zero_kv(a);
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
                    ran |= chunk_steps<T, DK, DV, false>(p, c, sm, a);
                }
                __syncthreads(); /* every thread has read the window's flags */
            }
            c.t = head;
            if (ran) store_kv<DK, DV>(p, c, a);
        }
    }
}

/* dQ of row block s.r0, query head kvh x rep + s.j of group c.g: every tile's chunks in
 * order, one add at the end. Block-uniform. */
template <typename T, int DK, int DV>
__device__ void dq_rows(const BwdParams &p, Chunk &c, Step s, const Smem<T, DK, DV> &sm)
{
    constexpr int BN = Geom<DK, DV>::BN;
    const dcp_tile_group_t &g = *c.g;
    const int row0 = thread_row0();
    load_step<T, DK, DV>(p, c, s, sm, 0);
    cp_async_commit();
    float acc[Geom<DK, DV>::NTQ][4];
    zero_acc(acc);
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
            load_kv<T, DK, DV>(p, c, sm);
            cp_async_commit();
            cp_async_wait<0>();
            __syncthreads(); /* the rows and the chunk's K, V are in shared memory */
            scores<T, DK, DV>(p, c, s, R, sm, 0);
            __syncthreads(); /* P and dS complete */
            if (__any_sync(0xffffffffu, s0 || s1)) dq_product<T, DK, DV>(sm, acc);
            any0 |= s0;
            any1 |= s1;
            __syncthreads(); /* K, V and dS are free again */
        }
    }
    cp_async_wait<0>(); /* the rows' loads, where no chunk waited for them */
    __syncthreads();
    add_dq<DK, DV>(p, g, s.r0, c.kvh * p.rep + s.j, acc, any0, any1);
}

/* Items (group, row-block slot): slot's row blocks BM rows apart by p.slots (a slot per BN
 * rows of the longest group: some slots find no rows where BN < BM); y the query head. */
template <typename T, int DK, int DV>
__global__ void __launch_bounds__(THREADS, 1) det_q_kernel(const __grid_constant__ BwdParams p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const Smem<T, DK, DV> sm(smem_raw);
    const int h = blockIdx.y;
    const int64_t items = (int64_t)p.num_groups * p.slots;
    for (int64_t w = blockIdx.x; w < items; w += gridDim.x) {
        const dcp_tile_group_t &g = p.groups[w / p.slots];
        Chunk c;
        c.g = &g;
        c.seq = &p.seqs[g.seq];
        c.kvh = h / p.rep;
        for (Step s = {(int)(w % p.slots) * BM, h % p.rep, 0}; s.r0 < g.q_len; s.r0 += p.slots * BM)
            dq_rows<T, DK, DV>(p, c, s, sm);
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
template <typename T, int DK, int DV>
static cudaError_t launch(const BwdParams &p, unsigned gx, unsigned gq, unsigned kv_heads,
                          unsigned q_heads, bool deterministic, cudaStream_t stream)
{
    const size_t smem = Geom<DK, DV>::smem_bytes;
    if (!deterministic)
        return start(attn_bwd_kernel<T, DK, DV>, p, dim3(gx, kv_heads), smem, stream);
    cudaError_t e = start(det_kv_kernel<T, DK, DV>, p, dim3(gx, kv_heads), smem, stream);
    return e == cudaSuccess ? start(det_q_kernel<T, DK, DV>, p, dim3(gq, q_heads), smem, stream)
                            : e;
}

/* The head dims dcp builds (kernel.h, dcp_cuda_dims_ok), for one element type. */
template <typename T>
static cudaError_t launch_dims(const BwdParams &p, int32_t dk, int32_t dv, unsigned gx, unsigned gq,
                               unsigned hk, unsigned hq, bool det, cudaStream_t s)
{
    if (dk == 192 && dv == 128) return launch<T, 192, 128>(p, gx, gq, hk, hq, det, s);
    switch (dk) {
    case 64:
        return launch<T, 64, 64>(p, gx, gq, hk, hq, det, s);
    case 96:
        return launch<T, 96, 96>(p, gx, gq, hk, hq, det, s);
    case 128:
        return launch<T, 128, 128>(p, gx, gq, hk, hq, det, s);
    case 192:
        return launch<T, 192, 192>(p, gx, gq, hk, hq, det, s);
    default:
        return launch<T, 256, 256>(p, gx, gq, hk, hq, det, s);
    }
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
    const int32_t dk = env->head_dim, dv = dcp_env_dv(env);
    if (!dcp_cuda_dims_ok(dk, dv))
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda attention backward: head dims %d/%d, the GPU kernels run 64, "
                             "96, 128, 192, 256 and 192/128",
                             dk, dv);
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
    const int bn = chunk_keys(dk, dv);
    p.slots = (env->max_rows + bn - 1) / bn;
    p.rep = env->q_heads / env->kv_heads;
    p.scale = env->scale;
    p.scale_log2 = env->scale * 1.4426950408889634f;
    p.softcap = env->softcap > 0.0f ? env->softcap : 0.0f;
    p.cap_scale = p.softcap > 0.0f ? env->scale / p.softcap : 0.0f;
    p.cap_log2 = p.softcap * 1.4426950408889634f;

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
    e = bf ? launch_dims<__nv_bfloat16>(p, dk, dv, gx, gq, hk, hq, det, s)
           : launch_dims<__half>(p, dk, dv, gx, gq, hk, hq, det, s);
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda attention backward launch: %s",
                             cudaGetErrorString(e));
    return DCP_OK;
}
