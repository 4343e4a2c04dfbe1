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

#include "partition/place/place.h"
#include "partition/plan/plan.h"

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

/* The least forward time that the cost model can predict for any plan on placement `pl` of
 * blocks `b`: the busiest rank's tiles, each timed as dcp_cost_predict() times it, with
 * nothing else (ms). The backward's floor is 2.5 times it (2.5x the FLOPs on the same tiles),
 * so a training step's is 3.5 times it. */
dcp_status_t dcp_cost_attn_floor(const dcp_blocks_t *b, const dcp_placement_t *pl,
                                 int32_t num_ranks, const dcp_perf_model_t *perf, double *ms_out);

/* Lower bounds of the forward and the backward time the cost model can predict for any plan
 * on placement `pl` (ms; the backward's on the same placement). Each rank computes at least
 * its tiles (2.5x the FLOPs backward) and moves at least its transfers - the Q, KV and
 * partial transfers of every net it reads or owns, in both directions and both link classes -
 * and no more than two of a rank's launches are in flight at once in its programs (launch
 * d+1 goes out before waiting for d; launch d+2 only after that wait), each lasting at least
 * the rank's busiest link in it: so a pass takes at least max(compute, busiest link's total /
 * 2) on every rank. Cheap (no schedule or program is built), so the planner can skip a
 * candidate plan that cannot win. */
dcp_status_t dcp_cost_floor(const dcp_blocks_t *b, const dcp_placement_t *pl,
                            const dcp_cluster_t *cluster, double *fwd_ms_out, double *bwd_ms_out);

/* A lower bound of the forward time the cost model can predict for any plan of p's batch,
 * shape, block size and cluster whose sequences are cut into `chunks` chunks each (0: not
 * cut) and the chunks into token blocks, as ring and zigzag cut them (ms; the backward's is
 * 2.5 times it). Every tile of sequence s then has an edge of at most E_s = min(block,
 * ceil(L_s / chunks)) tokens, so it computes at no more than the curve's best efficiency on
 * [1, E_s]; the busiest rank computes at least the mean of all tiles so timed. O(sequences):
 * no blocks, tiles or placement, so the planner can rule a baseline out without building
 * it. */
double dcp_cost_chunked_floor(const dcp_plan_t *p, int32_t chunks);

#endif
