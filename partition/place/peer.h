/*
 * What the peer policies (DCP_STRATEGY_PACKED and after) share: the attention work of a run of
 * queries, documents packed into groups of ranks, zigzag chunks, and token streams cut into
 * pieces. Each policy builds runs of tokens tagged with their owner rank (dcp_runs_t) and
 * dcp_blocks_cut_runs makes the blocks.
 */
#ifndef DCP_PARTITION_PEER_H
#define DCP_PARTITION_PEER_H

#include "partition/model/blocks.h"
#include "partition/place/place.h"

/* Allowed (query, key) pairs of queries [q0, q1) of sequence s, over all its keys; with layer
 * kinds, each kind's pairs times its layers, summed. The work the policies balance. */
double dcp_peer_pairs(const dcp_blocks_t *b, int32_t s, int32_t q0, int32_t q1);

/* Documents to `groups` groups by the longest-first rule of lpt (place_lpt.c) on whole
 * documents: in decreasing order of max(tokens / mean, pairs / mean) (ties: the earlier
 * document), each to the group whose max(tokens / mean, pairs / mean) is lowest (ties: the
 * lower group). group_of[num_seqs]. */
dcp_status_t dcp_peer_pack(const dcp_blocks_t *b, int32_t groups, int32_t *group_of);

/* Sequence s in 2n zigzag chunks (floor(c L / 2n) boundaries): chunk c on ranks[c] for c < n,
 * else ranks[2n - 1 - c] (TransformerEngine's THD load balancing). */
dcp_status_t dcp_peer_zigzag(const dcp_blocks_t *b, int32_t s, const int32_t *ranks, int32_t n,
                             dcp_runs_t *runs);

/* A token stream (runs in stream order, tags ignored) cut into consecutive pieces of `piece`
 * tokens (the last shorter): every run of it split at piece boundaries and pushed to out with
 * its piece's index as tag. *pieces_out: the number of pieces. */
dcp_status_t dcp_peer_pieces(const dcp_runs_t *stream, int64_t piece, dcp_runs_t *out,
                             int32_t *pieces_out);

/* The tokens of a stream of runs. */
int64_t dcp_peer_stream_tokens(const dcp_runs_t *stream);

/* Every block's owner from its tag (blk_chunk), the shared `place` of the peer policies that
 * compute where the queries live. */
dcp_status_t dcp_peer_place_at_query(const dcp_place_in_t *in, dcp_placement_t *out);

#endif
