/*
 * Congestion-free rounds (FCP). The transfers of one step form a bipartite multigraph,
 * senders on one side and receivers on the other. Colouring its edges so that no two edges
 * of a colour share a sender or a receiver makes every colour a round in which each rank
 * sends at most one block and receives at most one. Bipartite graphs need exactly
 * Delta = max degree colours (König); the alternating-path method below finds such a
 * colouring in O(edges x ranks).
 */
#ifndef DCP_PARTITION_ROUNDS_H
#define DCP_PARTITION_ROUNDS_H

#include "include/dcp.h"

/* Edge i goes from src[i] to dst[i] (ranks in [0, num_ranks), src != dst). Writes each
 * edge's colour in [0, Delta) to colour_out and Delta to *colours_out. */
dcp_status_t dcp_rounds_colour(int64_t n, const int32_t *src, const int32_t *dst, int32_t num_ranks,
                               int32_t *colour_out, int32_t *colours_out);

#endif
