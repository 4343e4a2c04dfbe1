/*
 * A kernel workload without a plan: one sequence of `total` tokens under a mask, cut into
 * tile x tile (query block, key block) tiles, one tile group per query block holding every
 * key block with an allowed pair (tiles whose pairs are all allowed marked full). Q, K and V
 * sit in DCP_BUF_Q/K/V as [total, heads, D]; O and LSE go to DCP_BUF_ACC_O / ACC_LSE (fp32).
 * The backward reads LSE from ACC_LSE, dO from DCP_BUF_DO and delta from DCP_BUF_DELTA
 * (bwd_delta fills it from DCP_BUF_DO and DCP_BUF_O, both in the dtype), and adds dQ, dK, dV
 * into ACC_DQ / ACC_DK / ACC_DV (fp32, [total, heads, D]).
 * What dcp-kernel-bench times and what the kernel suites check, on CPU and GPU alike.
 */
#ifndef DCPT_CLI_TILE_CASE_H
#define DCPT_CLI_TILE_CASE_H

#include "include/base/descr.h"

typedef struct {
    dcp_seq_info_t seq;
    int32_t total, tile, hq, hkv, d;
    dcp_tile_group_t *groups;
    dcp_tile_t *tiles;
    int64_t num_groups, num_tiles;
    int64_t pairs;      /* allowed (query, key) pairs */
    int64_t full_tiles; /* tiles with every pair allowed */
} dcpt_tile_case_t;

/* mask must be valid for `total` (CUSTOM ranges borrowed). */
dcp_status_t dcpt_tile_case_build(const dcp_mask_t *mask, int32_t total, int32_t tile, int32_t hq,
                                  int32_t hkv, int32_t d, dcpt_tile_case_t *out);
void dcpt_tile_case_free(dcpt_tile_case_t *c);

/* Forward FLOPs: 4 x D x query heads per allowed pair (the backward counts 2.5x). */
static inline double dcpt_tile_case_flops(const dcpt_tile_case_t *c)
{
    return 4.0 * c->d * c->hq * (double)c->pairs;
}

#endif
