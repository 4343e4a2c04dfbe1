/*
 * Fused blockwise masked attention forward for sm_80 and later (mma.sync, bf16/fp16 in,
 * fp32 accumulation), one launch per tile-group list.
 *
 * Grid: (tile group, query row block, query head). A CTA owns BM = 128 query rows of one
 * head and streams the group's KV tiles through shared memory in chunks of BN keys,
 * double-buffered with cp.async: the next needed chunk loads while the current one is
 * computed. Two shapes (template MT, the 16-row m-tiles of a warp): FlashAttention-2's, 4
 * warps of 32 rows, two CTAs per SM, BN = 32, each K and V fragment read from shared memory
 * feeding both m-tiles (half the ldmatrix traffic per FLOP), Q fragments read from shared
 * memory per chunk at head dim 128 to fit the registers (MT = 2, the default: 1.17-1.33x the
 * other's TFLOP/s on an H100 for full, causal and lambda tiles); or 8 warps of 16 rows, one
 * CTA per SM, BN = 64, Q fragments in registers (MT = 1; DCP_ATTN_WARP_ROWS=16). Per chunk
 * the CTA decides, from every row's allowed key ranges (include/base/mask_rule.h, evaluated
 * analytically per row, or read from a custom mask's range array):
 *   - skip: no row sees a key of the chunk, so its K/V are never loaded;
 *   - full: every row sees every key, so no mask arithmetic runs;
 *   - partial: scores outside a row's ranges become -inf.
 * Tiles the planner marked full skip the range evaluation altogether, and a warp whose 16
 * or 32 rows see nothing of a chunk the CTA needs skips its MMAs. The online softmax runs in the
 * log2 domain; the output is normalised at the end and stored in fp32 or the input type
 * (by the output buffer), merged by LSE with what is there when the group accumulates.
 *
 * Head dims (template DK for Q and K, DV for V and O): 64, 96, 128, 192 and 256, and MLA's
 * 192/128. Past 128 (where two m-tiles' S, O and Q reads would spill) the CTA takes the other
 * shape, 16 rows a warp; where a chunk of 64 keys would not fit sm_80's shared memory beside
 * Q (DK + DV > 384), its chunks are 32 keys; Q fragments stay in registers only at DK <= 128
 * with one m-tile (or DK <= 64). The variants run in kernels of their own (VAR, one m-tile a
 * warp), so that the plain ones keep their registers: a softcap c makes each scaled score
 * c tanh(s / c) before the mask (tested for NaN or Inf before it, which tanh would hide), and
 * with p.max_logit each warp maxes its rows' running maxima (the largest allowed score each
 * saw, capped) into its query head's entry, one atomic a warp.
 *
 * Non-finite inputs (dcp.h, dcp_tensors_t): each row keeps whether it has an allowed key at
 * all and whether an allowed score was NaN or +-Inf; at the store a row without allowed keys
 * is (0, -inf) whatever the MMAs left in it, and a row with a non-finite score, sum or output
 * (a NaN or Inf value) is (NaN, NaN). The MMAs multiply masked probabilities (0) by the
 * chunk's values, so a NaN in a masked key's value may also reach rows that share its chunk.
 */
#include "kernels/cuda/device.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/mask_rule.h"
#include "kernels/lse.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

namespace dcp_cuda
{

constexpr int BM = 128, PAD = 8;

/* The geometry of a launch: MT m-tiles of 16 rows per warp, 8 / MT warps covering BM rows,
 * chunks of BN keys (32 with two m-tiles, as FlashAttention-2 at head dim 128 on sm_80, so S
 * and O fit the registers; 32 with one where 64 keys' K and V would not fit sm_80's shared
 * memory beside Q), padded smem rows (ldmatrix rows hit distinct banks). */
template <int DK, int DV, int MT> struct Cfg {
    static_assert(MT == 1 || (DK <= 128 && DV <= 128), "two m-tiles fit the registers to 128");
    static constexpr int WARPS = 8 / MT, THREADS = WARPS * 32;
    static constexpr int BN = MT == 2 ? 32 : (DK + DV > 384 ? 32 : 64);
    static constexpr int LDK = DK + PAD, LDV = DV + PAD;
    /* Q's fragments in registers for the whole row block, or read from shared memory at each
     * chunk where the registers hold O and S */
    static constexpr bool QREG = (MT == 1 && DK <= 128) || DK <= 64;
    /* Q, then K and V of two chunk buffers */
    static constexpr size_t smem_bytes = (size_t)(BM * LDK + 2 * BN * (LDK + LDV)) * 2;
};

struct AttnParams {
    void *bufs[DCP_BUF_ALL];
    const dcp_seq_info_t *seqs;
    const dcp_tile_group_t *groups;
    const dcp_tile_t *tiles;
    int32_t rep;      /* query heads per KV head */
    int32_t q_heads;  /* query heads of a head group: group g's head j is g x q_heads + j */
    float scale_log2; /* softmax scale x log2(e) */
    /* softcap c > 0: a score s (scaled) becomes c tanh(s / c), computed as
     * cap_log2 x tanh(raw x cap_scale) in the log2 domain; 0: off */
    float softcap, cap_scale, cap_log2;
    float *max_logit; /* per query head of the shape, or NULL (kernel.h) */
};

/* A row's allowed keys inside one tile, [lo0, hi0) u [lo1, hi1), tile-local and clamped to
 * [0, kv_len); a row past the group's queries sees nothing. */
struct Range {
    int lo0, hi0, lo1, hi1;
};

__device__ __forceinline__ bool rg_sees(const Range &r, int c0, int c1)
{
    return (r.lo0 < c1 && c0 < r.hi0) || (r.lo1 < c1 && c0 < r.hi1);
}

__device__ __forceinline__ bool rg_sees_all(const Range &r, int c0, int c1)
{
    return (r.lo0 <= c0 && c1 <= r.hi0) || (r.lo1 <= c0 && c1 <= r.hi1);
}

__device__ __forceinline__ bool rg_allowed(const Range &r, int key)
{
    return (key >= r.lo0 && key < r.hi0) || (key >= r.lo1 && key < r.hi1);
}

/* Row x of a thread (x < 2 MT: rows g and g + 8 of each of its warp's m-tiles) is
 * row0 + row_off(x). */
__device__ __forceinline__ constexpr int row_off(int x) { return 16 * (x >> 1) + 8 * (x & 1); }

/* The ranges of query row `row` of group g in tile t. */
__device__ __forceinline__ Range row_range(const dcp_seq_info_t &seq, const dcp_tile_group_t &g,
                                           const dcp_tile_t &t, int row)
{
    int rg[4] = {0, 0, 0, 0};
    if (row < g.q_len) dcp_mask_keys(&seq.mask, seq.len, g.q_pos + row, rg);
    int v[4];
#pragma unroll
    for (int j = 0; j < 2; j++) {
        int a = rg[2 * j] - t.kv_pos, b = rg[2 * j + 1] - t.kv_pos;
        a = a < 0 ? 0 : (a > t.kv_len ? t.kv_len : a);
        b = b < a ? a : (b > t.kv_len ? t.kv_len : b);
        v[2 * j] = a;
        v[2 * j + 1] = b;
    }
    return Range{v[0], v[1], v[2], v[3]};
}

/* The whole tile for a valid row, nothing past the group's queries. */
__device__ __forceinline__ Range row_full(const dcp_tile_group_t &g, const dcp_tile_t &t, int row)
{
    const int e = row < g.q_len ? t.kv_len : 0;
    return Range{0, e, e, e};
}

/* Which of a thread's keys of a chunk one row sees: ok(k) for the thread's key
 * c0 + 2 t4 + k (k = n * 8 + e, a constant after unrolling), any: some key of the chunk. */
struct KeysRange { /* the row's ranges, relative to the thread's first key */
    Range r;
    bool any;
    __device__ __forceinline__ bool ok(int k) const { return rg_allowed(r, k); }
};
struct KeysBits { /* bit k: key c0 + 2 t4 + k (chunks of 32 keys) */
    unsigned b;
    bool any;
    __device__ __forceinline__ bool ok(int k) const { return (b >> k) & 1u; }
};

/* Bit k set when key c0 + k (k < 32) lies in [lo, hi). */
__device__ __forceinline__ unsigned range_bits(int lo, int hi, int c0)
{
    lo -= c0;
    hi -= c0;
    lo = lo < 0 ? 0 : (lo > 32 ? 32 : lo);
    hi = hi < lo ? lo : (hi > 32 ? 32 : hi);
    const unsigned below_hi = hi >= 32 ? 0xffffffffu : (1u << hi) - 1u;
    const unsigned below_lo = lo >= 32 ? 0xffffffffu : (1u << lo) - 1u;
    return below_hi & ~below_lo;
}

/* The ranges of a thread's 2 MT rows in the current tile. MT = 1: the thread holds both of
 * its rows'. MT = 2: a thread's four rows are its quad's four rows, and lane t of the quad
 * holds row t's (a quarter of the registers); keys(x) makes row x's keys of a chunk a 32-bit
 * word in that lane and shuffles it, so the whole warp calls it together. own_sees and
 * own_sees_all test the rows the thread holds: an OR or AND of them over a warp or a block
 * covers every row. */
template <int MT> struct Rows;

template <> struct Rows<1> {
    Range r[2];
    __device__ __forceinline__ void tile(const dcp_seq_info_t &seq, const dcp_tile_group_t &g,
                                         const dcp_tile_t &t, int r0, int row0)
    {
        r[0] = row_range(seq, g, t, r0 + row0);
        r[1] = row_range(seq, g, t, r0 + row0 + 8);
    }
    __device__ __forceinline__ void full(const dcp_tile_group_t &g, const dcp_tile_t &t, int r0,
                                         int row0)
    {
        r[0] = row_full(g, t, r0 + row0);
        r[1] = row_full(g, t, r0 + row0 + 8);
    }
    __device__ __forceinline__ KeysRange keys(int x, int c0, int c1) const
    {
        const int k0 = c0 + 2 * (threadIdx.x & 3);
        const Range &q = r[x];
        return KeysRange{Range{q.lo0 - k0, q.hi0 - k0, q.lo1 - k0, q.hi1 - k0},
                         rg_sees(q, c0, c1)};
    }
    __device__ __forceinline__ bool own_sees(int c0, int c1) const
    {
        return rg_sees(r[0], c0, c1) || rg_sees(r[1], c0, c1);
    }
    /* every row the thread holds sees all of [c0, c1) or is past q_len */
    __device__ __forceinline__ bool own_sees_all(int c0, int c1, int rows_left) const
    {
        return (0 >= rows_left || rg_sees_all(r[0], c0, c1)) &&
               (8 >= rows_left || rg_sees_all(r[1], c0, c1));
    }
};

template <> struct Rows<2> {
    static_assert(Cfg<128, 128, 2>::BN == 32, "a row's keys of a chunk are one 32-bit word");
    Range mine; /* row (lane & 3) of the thread's four */
    __device__ __forceinline__ static int own_off() { return row_off(threadIdx.x & 3); }
    __device__ __forceinline__ void tile(const dcp_seq_info_t &seq, const dcp_tile_group_t &g,
                                         const dcp_tile_t &t, int r0, int row0)
    {
        mine = row_range(seq, g, t, r0 + row0 + own_off());
    }
    __device__ __forceinline__ void full(const dcp_tile_group_t &g, const dcp_tile_t &t, int r0,
                                         int row0)
    {
        mine = row_full(g, t, r0 + row0 + own_off());
    }
    /* chunks of 32 keys: row x's keys as one word, made by its lane and shuffled */
    __device__ __forceinline__ KeysBits keys(int x, int c0, int) const
    {
        const unsigned own = range_bits(mine.lo0, mine.hi0, c0) | range_bits(mine.lo1, mine.hi1, c0);
        const unsigned b = __shfl_sync(0xffffffffu, own, ((threadIdx.x & 31) & ~3) | x);
        return KeysBits{b >> (2 * (threadIdx.x & 3)), b != 0};
    }
    __device__ __forceinline__ bool own_sees(int c0, int c1) const
    {
        return rg_sees(mine, c0, c1);
    }
    __device__ __forceinline__ bool own_sees_all(int c0, int c1, int rows_left) const
    {
        return own_off() >= rows_left || rg_sees_all(mine, c0, c1);
    }
};

/* A position in the group's key stream: chunk [c0, c0 + BN) of tile ti. */
struct Cursor {
    int ti, c0, full;
};

/* Moves c (and R, the ranges of c's tile) forward to the first chunk some row of the CTA
 * sees; false at the end of the group's tiles. Block-uniform: every thread calls it. */
template <int MT, int BN>
__device__ bool find_chunk(const AttnParams &p, const dcp_tile_group_t &g,
                           const dcp_seq_info_t &seq, int r0, int row0, bool rows_valid, Cursor &c,
                           Rows<MT> &R)
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
            if (c.c0 == 0) R.full(g, t, r0, row0); /* the whole tile for every valid row */
            return true;
        }
        if (c.c0 == 0) R.tile(seq, g, t, r0, row0);
        const int c1 = c.c0 + nc;
        const bool sees = R.own_sees(c.c0, c1);
        if (__syncthreads_or(rows_valid && sees)) {
            const bool all = R.own_sees_all(c.c0, c1, g.q_len - r0 - row0);
            c.full = __syncthreads_and(all) && nc == BN;
            return true;
        }
        c.c0 += BN;
    }
    return false;
}

/* rows [0, n) of a [rows, D] view into smem [BM or BN][LD]; rows past n become zeros. */
template <typename T, int D, int LD, int ROWS, int THREADS>
__device__ __forceinline__ void load_rows(T *s, const T *src, int64_t stride, int n)
{
    constexpr int VEC = 8, PER_ROW = D / VEC;
    for (int i = threadIdx.x; i < ROWS * PER_ROW; i += THREADS) {
        const int r = i / PER_ROW, col = (i % PER_ROW) * VEC;
        const bool ok = r < n;
        cp_async16(s + r * LD + col, ok ? src + r * stride + col : src, ok ? 16 : 0);
    }
}

template <typename T, int DK, int DV, int MT>
__device__ __forceinline__ void load_chunk(const AttnParams &p, const Cursor &c, int kvh, T *Ks,
                                           T *Vs)
{
    using C = Cfg<DK, DV, MT>;
    const dcp_tile_t &t = p.tiles[c.ti];
    const int n = min(C::BN, t.kv_len - c.c0);
    const T *k = (const T *)p.bufs[t.k.buf] + t.k.off + (int64_t)kvh * DK;
    const T *v = (const T *)p.bufs[t.v.buf] + t.v.off + (int64_t)kvh * DV;
    load_rows<T, DK, C::LDK, C::BN, C::THREADS>(Ks, k + (int64_t)c.c0 * t.k.stride, t.k.stride, n);
    load_rows<T, DV, C::LDV, C::BN, C::THREADS>(Vs, v + (int64_t)c.c0 * t.v.stride, t.v.stride, n);
}

/* The per-thread state of the online softmax: 2 MT rows, D/8 output n-tiles per m-tile. */
template <int D, int MT> struct Acc {
    float o[MT][D / 8][4];
    float m[2 * MT], l[2 * MT]; /* running max (log2 domain), this thread's part of the sum */
    /* bit x: row x has an allowed key in some chunk; bit 8 + x: an allowed score this thread
     * computed for row x was NaN or +-Inf (one register, not 4 MT predicates) */
    unsigned flags;
    __device__ __forceinline__ bool seen(int x) const { return (flags >> x) & 1u; }
    __device__ __forceinline__ bool bad(int x) const { return (flags >> (8 + x)) & 1u; }
};

/* Q fragments of the warp's m-tiles: kept in registers for the row block (QREG), or read
 * from shared memory at each chunk (FlashAttention-2's shape at head dim 128, where the
 * registers hold O and S). */
template <int DK, int DV, int MT> struct QFrag {
    static constexpr bool QREG = Cfg<DK, DV, MT>::QREG;
    uint32_t f[QREG ? MT : 1][QREG ? DK / 16 : 1][4];
};

/* Fragment kk of m-tile mt of the warp's Q rows, from shared memory. */
template <typename T, int LD, int MT>
__device__ __forceinline__ void q_frag(uint32_t (&r)[4], const T *Qs, int mt, int kk)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = warp * 16 * MT + mt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    const int col = kk * 16 + ((lane >> 4) & 1) * 8;
    ldmatrix_x4(r, Qs + row * LD + col);
}

/* The score a kernel keeps of a raw q.k (log2 domain): scaled, and capped where a VAR kernel
 * runs with a softcap. */
template <bool VAR> __device__ __forceinline__ float logit2(const AttnParams &p, float raw)
{
    if constexpr (VAR) {
        if (p.softcap > 0.0f) return p.cap_log2 * tanhf(raw * p.cap_scale);
    }
    return raw * p.scale_log2;
}

template <typename T, int DK, int DV, int MT, bool VAR>
__device__ __forceinline__ void attend_chunk(const AttnParams &p, const Cursor &c,
                                             const Rows<MT> &R, const QFrag<DK, DV, MT> &qf,
                                             const T *Qs, const T *Ks, const T *Vs, Acc<DV, MT> &a)
{
    using C = Cfg<DK, DV, MT>;
    constexpr int LDK = C::LDK, LDV = C::LDV, BN = C::BN;
    const int lane = threadIdx.x & 31;
    if (!c.full && !__any_sync(0xffffffffu, R.own_sees(c.c0, c.c0 + BN)))
        return; /* none of this warp's rows sees the chunk */

    /* S = Q K^T: each K fragment feeds every m-tile */
    float s[MT][BN / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < BN / 8; n++) s[mt][n][0] = s[mt][n][1] = s[mt][n][2] = s[mt][n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < DK / 16; kk++) {
        uint32_t qs[C::QREG ? 1 : MT][4];
        if constexpr (!C::QREG) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) q_frag<T, LDK, MT>(qs[mt], Qs, mt, kk);
        }
#pragma unroll
        for (int np = 0; np < BN / 16; np++) {
            uint32_t b[4];
            const int key = np * 16 + (lane & 7) + ((lane >> 4) & 1) * 8;
            const int col = kk * 16 + ((lane >> 3) & 1) * 8;
            ldmatrix_x4(b, Ks + key * LDK + col);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const uint32_t *q;
                if constexpr (C::QREG)
                    q = qf.f[mt][kk];
                else
                    q = qs[mt];
                mma16816<T>(s[mt][2 * np], q, b[0], b[1]);
                mma16816<T>(s[mt][2 * np + 1], q, b[2], b[3]);
            }
        }
    }

    float alpha[2 * MT];
#pragma unroll
    for (int x = 0; x < 2 * MT; x++) {
        const int mt = x >> 1, h = x & 1;
        float mx = -INFINITY;
        bool bad = false;
        decltype(R.keys(x, 0, 0)) keys = {};
        if (!c.full) keys = R.keys(x, c.c0, c.c0 + BN); /* c.full is block-uniform */
        if (c.full || keys.any) a.flags |= 1u << x;
#pragma unroll
        for (int n = 0; n < BN / 8; n++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float raw = s[mt][n][2 * h + e];
                float v = logit2<VAR>(p, raw);
                if (!c.full && !keys.ok(n * 8 + e))
                    v = -INFINITY;
                else /* NaN or +-Inf, before a cap could hide it */
                    bad |= !(fabsf(raw * p.scale_log2) <= 3.402823466e38f);
                s[mt][n][2 * h + e] = v;
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
                const float pe = fast_exp2(s[mt][n][2 * h + e] - m_use);
                s[mt][n][2 * h + e] = pe;
                sum += pe;
            }
        a.l[x] = a.l[x] * alpha[x] + sum;
        if (bad) a.flags |= 1u << (8 + x);
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int n = 0; n < DV / 8; n++) {
            a.o[mt][n][0] *= alpha[2 * mt];
            a.o[mt][n][1] *= alpha[2 * mt];
            a.o[mt][n][2] *= alpha[2 * mt + 1];
            a.o[mt][n][3] *= alpha[2 * mt + 1];
        }

    /* O += P V: P from S's registers, each V fragment feeds every m-tile */
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            pa[mt][0] = pack2<T>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
            pa[mt][1] = pack2<T>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
            pa[mt][2] = pack2<T>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
            pa[mt][3] = pack2<T>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
        }
#pragma unroll
        for (int np = 0; np < DV / 16; np++) {
            uint32_t b[4];
            const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = np * 16 + ((lane >> 4) & 1) * 8;
            ldmatrix_x4_trans(b, Vs + key * LDV + col);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma16816<T>(a.o[mt][2 * np], pa[mt], b[0], b[1]);
                mma16816<T>(a.o[mt][2 * np + 1], pa[mt], b[2], b[3]);
            }
        }
    }
}

/* 1 when some output element of row x held by this thread is NaN or +-Inf. */
template <int D, int MT>
__device__ __forceinline__ bool out_nonfinite(const Acc<D, MT> &a, int x)
{
    const int mt = x >> 1, h = x & 1;
    bool hit = false;
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        hit |= !(fabsf(a.o[mt][n][2 * h]) <= 3.402823466e38f) |
               !(fabsf(a.o[mt][n][2 * h + 1]) <= 3.402823466e38f);
    return hit;
}

/* Normalises the thread's 2 MT rows and stores them (merging with the stored partial when
 * the group accumulates); rows past the group's queries are not written. A row without an
 * allowed key adds (0, -inf); a row that met a non-finite value stores (NaN, NaN). */
template <typename T, int D, int MT>
__device__ __forceinline__ void store_rows(const AttnParams &p, const dcp_tile_group_t &g, int h,
                                           int r0, int row0, Acc<D, MT> &a)
{
    const int lane = threadIdx.x & 31, t4 = lane & 3;
    const bool o_fp32 = dcp_buf_is_fp32(g.o.buf);
#pragma unroll
    for (int mt = 0; mt < MT; mt++) { /* one m-tile's two rows at a time: fewer registers */
        float w_old[2], w_new[2], lse[2];
        float *lse_p[2];
        bool poison[2];
#pragma unroll
        for (int hx = 0; hx < 2; hx++) {
            const int x = 2 * mt + hx;
            w_old[hx] = 0.0f;
            float l = a.l[x];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            int bad = a.bad(x) || out_nonfinite<D, MT>(a, x);
            bad |= __shfl_xor_sync(0xffffffffu, bad, 1);
            bad |= __shfl_xor_sync(0xffffffffu, bad, 2);
            const int row = r0 + row0 + row_off(x);
            float mine = -INFINITY;
            w_new[hx] = 0.0f;
            if (a.seen(x)) { /* the quad's four threads agree: the ranges are the row's */
                mine = (a.m[x] + log2f(l)) * 0.69314718055994531f;
                w_new[hx] = 1.0f / l;
                if (bad || !isfinite(mine)) mine = w_new[hx] = NAN;
            }
            poison[hx] = mine != mine;
            lse[hx] = mine;
            lse_p[hx] = (float *)p.bufs[g.lse.buf] + g.lse.off + (int64_t)row * g.lse.stride + h;
            if (g.accumulate && row < g.q_len) {
                const float two[2] = {*lse_p[hx], mine};
                float w[2];
                lse[hx] = dcp_lse_weights(two, 2, w);
                w_old[hx] = w[0];
                w_new[hx] *= w[1];
            }
        }
        __syncwarp(); /* every lane has read the stored LSE before lane t4 == 0 overwrites it */
#pragma unroll
        for (int hx = 0; hx < 2; hx++) {
            const int x = 2 * mt + hx, row = r0 + row0 + row_off(x);
            if (row >= g.q_len) continue;
            if (t4 == 0) *lse_p[hx] = lse[hx];
            const int64_t base = g.o.off + (int64_t)row * g.o.stride + (int64_t)h * D;
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                const int col = n * 8 + 2 * t4;
                /* without allowed keys nothing is added, whatever 0 x NaN left in o */
                float o0 = a.seen(x) ? a.o[mt][n][2 * hx] * w_new[hx] : 0.0f;
                float o1 = a.seen(x) ? a.o[mt][n][2 * hx + 1] * w_new[hx] : 0.0f;
                if (poison[hx]) o0 = o1 = NAN;
                if (o_fp32) {
                    float2 *dst = (float2 *)((float *)p.bufs[g.o.buf] + base + col);
                    if (g.accumulate) {
                        const float2 old = *dst;
                        o0 += w_old[hx] * old.x;
                        o1 += w_old[hx] * old.y;
                    }
                    *dst = make_float2(o0, o1);
                } else {
                    T *dst = (T *)p.bufs[g.o.buf] + base + col;
                    if (g.accumulate) {
                        o0 += w_old[hx] * to_f32<T>(dst[0]);
                        o1 += w_old[hx] * to_f32<T>(dst[1]);
                    }
                    *(uint32_t *)dst = pack2<T>(o0, o1);
                }
            }
        }
    }
}

/* fp32 *addr = max(*addr, v), device-wide; a NaN v is dropped. Ordered as integers: a float
 * >= 0 orders like its bits as int, one < 0 inversely to its bits as unsigned; the entries
 * start at -inf. */
__device__ __forceinline__ void atomic_max_f32(float *addr, float v)
{
    if (!(v == v)) return;
    if (v >= 0.0f)
        atomicMax(reinterpret_cast<int *>(addr), __float_as_int(v + 0.0f)); /* -0 as +0 */
    else
        atomicMin(reinterpret_cast<unsigned *>(addr), __float_as_uint(v));
}

/* The largest running maximum of the warp's valid rows that saw a key, in natural units,
 * into the max logit of query head g x q_heads + h. The quad's threads share each row's. */
template <int DV, int MT>
__device__ __forceinline__ void max_logit_rows(const AttnParams &p, const dcp_tile_group_t &g,
                                               int h, int r0, int row0, const Acc<DV, MT> &a)
{
    float mx = -INFINITY;
#pragma unroll
    for (int x = 0; x < 2 * MT; x++)
        if (a.seen(x) && r0 + row0 + row_off(x) < g.q_len) mx = fmaxf(mx, a.m[x]);
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0 && mx > -INFINITY)
        atomic_max_f32(p.max_logit + (int64_t)g.head_group * p.q_heads + h,
                       mx * 0.69314718055994531f);
}

template <typename T, int DK, int DV, int MT, bool VAR>
__global__ void __launch_bounds__(Cfg<DK, DV, MT>::THREADS, MT)
    attn_fwd_kernel(const __grid_constant__ AttnParams p)
{
    using C = Cfg<DK, DV, MT>;
    constexpr int THREADS = C::THREADS, BN = C::BN;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T *Qs = reinterpret_cast<T *>(smem_raw);
    /* K and V of chunk buffer b at Ks + b * K_BUF, Vs + b * V_BUF (arithmetic, not an
     * array indexed at run time, which would live in local memory) */
    constexpr int K_BUF = BN * C::LDK, V_BUF = BN * C::LDV;
    T *const Ks = Qs + BM * C::LDK, *const Vs = Ks + 2 * K_BUF;

    const dcp_tile_group_t &g = p.groups[blockIdx.x];
    const dcp_seq_info_t &seq = p.seqs[g.seq];
    const int h = blockIdx.z, kvh = h / p.rep;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = warp * 16 * MT + (lane >> 2);

    for (int r0 = blockIdx.y * BM; r0 < g.q_len; r0 += gridDim.y * BM) {
        __syncthreads(); /* the previous row block is done with shared memory */
        const T *q =
            (const T *)p.bufs[g.q.buf] + g.q.off + (int64_t)r0 * g.q.stride + (int64_t)h * DK;
        load_rows<T, DK, C::LDK, BM, THREADS>(Qs, q, g.q.stride, min(BM, g.q_len - r0));
        cp_async_commit();

        const bool rows_valid = r0 + warp * 16 * MT < g.q_len;
        Cursor cur = {g.first_tile, 0, 0};
        Rows<MT> R;
        bool found = find_chunk<MT, BN>(p, g, seq, r0, row0, rows_valid, cur, R);
        if (found) {
            load_chunk<T, DK, DV, MT>(p, cur, kvh, Ks, Vs);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();

        QFrag<DK, DV, MT> qf;
        if constexpr (C::QREG) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < DK / 16; kk++)
                    q_frag<T, C::LDK, MT>(qf.f[mt][kk], Qs, mt, kk);
        }
        Acc<DV, MT> a;
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < DV / 8; n++)
                a.o[mt][n][0] = a.o[mt][n][1] = a.o[mt][n][2] = a.o[mt][n][3] = 0.0f;
#pragma unroll
        for (int x = 0; x < 2 * MT; x++) {
            a.m[x] = -INFINITY;
            a.l[x] = 0.0f;
        }
        a.flags = 0;

        int buf = 0;
        while (found) {
            Cursor nxt = cur;
            nxt.c0 += BN;
            Rows<MT> Rn = R;
            const bool more = find_chunk<MT, BN>(p, g, seq, r0, row0, rows_valid, nxt, Rn);
            if (more) {
                load_chunk<T, DK, DV, MT>(p, nxt, kvh, Ks + (buf ^ 1) * K_BUF,
                                          Vs + (buf ^ 1) * V_BUF);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            attend_chunk<T, DK, DV, MT, VAR>(p, cur, R, qf, Qs, Ks + buf * K_BUF, Vs + buf * V_BUF,
                                             a);
            __syncthreads();
            cur = nxt;
            R = Rn;
            found = more;
            buf ^= 1;
        }
        store_rows<T, DV, MT>(p, g, h, r0, row0, a);
        if constexpr (VAR) {
            if (p.max_logit) max_logit_rows<DV, MT>(p, g, h, r0, row0, a);
        }
    }
}

template <typename T, int DK, int DV, int MT, bool VAR>
static cudaError_t launch(const AttnParams &p, int64_t num_groups, int32_t max_rows,
                          int32_t q_heads, cudaStream_t stream)
{
    using C = Cfg<DK, DV, MT>;
    const size_t smem = C::smem_bytes;
    cudaError_t e = cudaFuncSetAttribute(attn_fwd_kernel<T, DK, DV, MT, VAR>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    const int row_blocks = (max_rows + BM - 1) / BM;
    const dim3 grid((unsigned)num_groups, (unsigned)(row_blocks < 65535 ? row_blocks : 65535),
                    (unsigned)q_heads);
    attn_fwd_kernel<T, DK, DV, MT, VAR><<<grid, C::THREADS, smem, stream>>>(p);
    return cudaGetLastError();
}

/* Two m-tiles a warp (32 rows) where asked and S, O and Q's reads fit their registers (head dims
 * to 128; MLA's 192/128 spills there), else one. The variants
 * (a softcap's tanh, the max logit's reduction) run in kernels of their own (VAR), one m-tile
 * a warp, where the registers hold them beside S and O: the plain kernels stay as they were. */
template <typename T, int DK, int DV>
static cudaError_t launch_shape(const AttnParams &p, int64_t num_groups, int32_t max_rows,
                                int32_t q_heads, cudaStream_t stream, int warp_rows)
{
    if (p.softcap > 0.0f || p.max_logit)
        return launch<T, DK, DV, 1, true>(p, num_groups, max_rows, q_heads, stream);
    if constexpr (DK <= 128 && DV <= 128) {
        if (warp_rows == 32)
            return launch<T, DK, DV, 2, false>(p, num_groups, max_rows, q_heads, stream);
    }
    return launch<T, DK, DV, 1, false>(p, num_groups, max_rows, q_heads, stream);
}

/* The head dims dcp builds (kernel.h, dcp_cuda_dims_ok), for one element type. */
template <typename T>
static cudaError_t launch_dims(const AttnParams &p, int32_t dk, int32_t dv, int64_t num_groups,
                               int32_t max_rows, int32_t q_heads, cudaStream_t s, int wr)
{
    if (dk == 192 && dv == 128)
        return launch_shape<T, 192, 128>(p, num_groups, max_rows, q_heads, s, wr);
    switch (dk) {
    case 64:
        return launch_shape<T, 64, 64>(p, num_groups, max_rows, q_heads, s, wr);
    case 96:
        return launch_shape<T, 96, 96>(p, num_groups, max_rows, q_heads, s, wr);
    case 128:
        return launch_shape<T, 128, 128>(p, num_groups, max_rows, q_heads, s, wr);
    case 192:
        return launch_shape<T, 192, 192>(p, num_groups, max_rows, q_heads, s, wr);
    default:
        return launch_shape<T, 256, 256>(p, num_groups, max_rows, q_heads, s, wr);
    }
}

} // namespace dcp_cuda

using namespace dcp_cuda;

extern "C" int dcp_cuda_attn_warp_rows(void)
{
    /* 32 or 16; a value that does not read gives 32 (context creation refuses it by name) */
    return (int)dcp_env_int_value(DCP_ENV_ATTN_WARP_ROWS);
}

extern "C" dcp_status_t dcp_cuda_attn_fwd(const dcp_kernel_env_t *env,
                                          const dcp_tile_group_t *groups, int64_t num_groups,
                                          const dcp_tile_t *tiles)
{
    if (num_groups == 0) return DCP_OK;
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda attention: dtype %d, the GPU kernels run bf16 and fp16",
                             (int)env->dtype);
    const int32_t dk = env->head_dim, dv = dcp_env_dv(env);
    if (!dcp_cuda_dims_ok(dk, dv))
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cuda attention: head dims %d/%d, the GPU kernels run 64, 96, 128, "
                             "192, 256 and 192/128",
                             dk, dv);
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
    p.q_heads = env->q_heads;
    p.scale_log2 = env->scale * 1.4426950408889634f;
    p.softcap = env->softcap > 0.0f ? env->softcap : 0.0f;
    p.cap_scale = p.softcap > 0.0f ? env->scale / p.softcap : 0.0f;
    p.cap_log2 = p.softcap * 1.4426950408889634f;
    p.max_logit = env->max_logit;
    cudaStream_t s = (cudaStream_t)env->stream;
    const bool bf = env->dtype == DCP_DTYPE_BF16;
    const int wr = dcp_cuda_attn_warp_rows();
    const int64_t ng = num_groups;
    const int32_t mr = env->max_rows, qh = env->q_heads;
    const cudaError_t e = bf ? launch_dims<__nv_bfloat16>(p, dk, dv, ng, mr, qh, s, wr)
                             : launch_dims<__half>(p, dk, dv, ng, mr, qh, s, wr);
    if (e != cudaSuccess)
        return dcp_set_error(DCP_ERR_SYSTEM, "cuda attention launch: %s", cudaGetErrorString(e));
    return DCP_OK;
}
