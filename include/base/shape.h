/* The attention shape's derived sizes, one definition for the planner, the kernels and the
 * tools: query/key and value head dims may differ (MLA), and every byte and FLOP count
 * follows from these. */
#ifndef DCP_BASE_SHAPE_H
#define DCP_BASE_SHAPE_H

#include "include/base/hd.h"
#include "include/dcp.h"

#include <stdint.h>

/* The value head dim: head_dim_v, or head_dim where it is 0. V, O, dO and dV rows have it;
 * Q, K, dQ and dK rows have head_dim. */
DCP_HD int32_t dcp_shape_dv(const dcp_attn_shape_t *s)
{
    return s->head_dim_v > 0 ? s->head_dim_v : s->head_dim;
}

/* Forward FLOPs of one allowed (query, key) pair of one query head: 2 d_qk for its score,
 * 2 d_v for its share of P V (4 D when the dims agree). */
DCP_HD int64_t dcp_shape_pair_flops(const dcp_attn_shape_t *s)
{
    return 2 * ((int64_t)s->head_dim + dcp_shape_dv(s));
}

/* The backward's: 2.5 x the forward's (scores recomputed, dV, dP, dQ, dK). */
DCP_HD int64_t dcp_shape_pair_flops_bwd(const dcp_attn_shape_t *s)
{
    return 5 * ((int64_t)s->head_dim + dcp_shape_dv(s));
}

#endif
