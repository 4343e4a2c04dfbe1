/* The static baselines: ring (R contiguous chunks per sequence, chunk r on rank r) and
 * zigzag (2R chunks, rank r holds chunks r and 2R-1-r). Computation runs at the query's
 * owner, as in ring attention and TransformerEngine's context parallelism. */
#include "partition/place/place.h"

static int32_t ring_chunks(int32_t num_ranks)
{
    return num_ranks;
}

static int32_t zigzag_chunks(int32_t num_ranks)
{
    return 2 * num_ranks;
}

static dcp_status_t place_chunks(const dcp_place_in_t *in, dcp_placement_t *out, int zigzag)
{
    const dcp_blocks_t *b = in->blocks;
    const int32_t r = in->cluster->num_ranks;
    for (int32_t t = 0; t < b->num_blocks; t++) {
        const int32_t c = b->blk_chunk[t];
        out->blk_owner[t] = zigzag && c >= r ? 2 * r - 1 - c : c;
    }
    dcp_place_at_query_owner(b, out);
    return dcp_place_check_cap(in, out);
}

static dcp_status_t ring_place(const dcp_place_in_t *in, dcp_placement_t *out)
{
    return place_chunks(in, out, 0);
}

static dcp_status_t zigzag_place(const dcp_place_in_t *in, dcp_placement_t *out)
{
    return place_chunks(in, out, 1);
}

const dcp_strategy_ops_t dcp_strategy_ring = {
    .id = DCP_STRATEGY_RING, .chunks = ring_chunks, .place = ring_place};
const dcp_strategy_ops_t dcp_strategy_zigzag = {
    .id = DCP_STRATEGY_ZIGZAG, .chunks = zigzag_chunks, .place = zigzag_place};
