/*
 * The cost model: predicted attention time of every rank of a plan on the plan's cluster
 * model (topo/cluster.h). It runs every rank's program on a model of the machine:
 *  - ATTN: each tile takes its FLOPs / (peak x efficiency(tile)), where efficiency is the
 *    kernel curve at the tile's geometric-mean edge sqrt(q_len x kv_len);
 *  - COPY, REDUCE: bytes read and written / device memory bandwidth;
 *  - a phase's transfers start when every rank taking part has launched it and last as long
 *    as the busiest link of the rank or its peers: bytes / bandwidth per link class (the
 *    intra- and inter-node links of a device work in parallel, each direction apart) plus
 *    one latency; WAIT blocks until then.
 * So divisions overlap their transfers with compute exactly as the program orders them.
 */
#ifndef DCP_PARTITION_COST_H
#define DCP_PARTITION_COST_H

#include "partition/plan/plan.h"

#include <math.h>

/* The smallest tile a fused attention kernel computes without padding, in tokens a side:
 * FlashAttention-2/3 and cuDNN run 64-128 query rows x 64-176 keys a thread block for head
 * dim 128, dcp's CUDA kernels 128 x 32-64. A tile with a shorter edge still costs a block. */
#define DCP_COST_MIN_TILE 64.0

/* A kernel curve's rate (efficiency, or FLOP/s) on a tile whose geometric-mean edge is
 * `edge`: log-linear through (x[i], y[i]), i < n (x increasing, > 0), and flat past its last
 * point and down to q = min(x[0], DCP_COST_MIN_TILE); below q the kernel pads the tile to a
 * q x q block, so the rate falls with the tile's area, y(q) (edge / q)^2. (Clamped flat down
 * to one token, the curve priced a tile of 11 x 11 tokens at the 64 x 64 rate per pair: a
 * zigzag plan cutting 29 short documents into 64 chunks each was predicted 12% faster than
 * METIS's plan of the same batch, which the simulator put 6% slower.) */
double dcp_cost_curve(int32_t n, const double *x, const double *y, double edge);

/* The smallest edge a curve through points x[0..] prices without padding: min(x[0],
 * DCP_COST_MIN_TILE). */
static inline double dcp_cost_min_tile(const double *x)
{
    return fmin(x[0], DCP_COST_MIN_TILE);
}

/* FLOP/s that a kernel reaches on a tile whose geometric-mean edge is `edge` tokens, forward
 * (bwd = 0) or backward (bwd = 1); ctx is the caller's table. */
typedef double (*dcp_cost_rate_fn)(const void *ctx, double edge, int bwd);

/* Seconds an ATTN instruction computes at `rate`: each tile's FLOPs (its exact allowed pairs
 * x 2 (D + D_v) x query heads of the group; 2.5x that backward) over rate(edge) of its
 * geometric-mean edge sqrt(q_len x kv_len). */
double dcp_cost_attn_seconds(const dcp_plan_t *p, const dcp_instr_t *in, dcp_cost_rate_fn rate,
                             const void *ctx);

/* Bytes a COPY or REDUCE instruction reads and writes (a backward sum reads every source and
 * reads and writes its destination once; a forward merge reads every source's O + LSE and
 * the destination's, writes one). */
double dcp_cost_memory_bytes(const dcp_plan_t *p, const dcp_instr_t *in);

/* Fraction of peak on a tile whose geometric-mean edge is `tokens` (dcp_cost_curve of the
 * perf model's kernel table). */
double dcp_cost_efficiency(const dcp_perf_model_t *m, double tokens);

/* Writes every rank's predicted time of the pass's program in milliseconds to
 * ms_out[num_ranks]. The plan must be valid; rows and buffers must be derived. */
dcp_status_t dcp_cost_predict(const dcp_plan_t *p, dcp_pass_t pass, double *ms_out);

#endif
