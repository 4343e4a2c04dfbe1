/*
 * The block model of one batch: sequences, token blocks and tiles.
 *
 * A token block is a contiguous run of at most B tokens of one sequence. A tile is a
 * (query block, KV block) pair of one sequence with at least one allowed pair; computation
 * block c = tile * head_blocks + h is that tile for head group h. Tiles are sorted by
 * (query block, KV block); token blocks by (sequence, start).
 */
#ifndef DCP_PARTITION_BLOCKS_H
#define DCP_PARTITION_BLOCKS_H

#include "include/base/descr.h"
#include "include/base/shape.h"

#include <stdint.h>

/* Largest sequence and total token count a plan accepts (positions are int32). */
#define DCP_MAX_TOKENS INT32_MAX
/* Largest forward FLOP bound (sum of L^2 x 2 (D + D_v) x Hq) and batch size in bytes (Q, K, V, O,
 * LSE of every token) a plan accepts: with 2.5x for the backward and a net spanning up to
 * 2^16 ranks, every FLOP and byte count of a plan fits int64 (bounded here, once). */
#define DCP_MAX_FLOPS       ((int64_t)1 << 61)
#define DCP_MAX_BATCH_BYTES ((int64_t)1 << 44)
/* Largest number of computation blocks (tiles x head groups) a plan is built from. A plan
 * costs a few hundred bytes to about 1 KB per computation block (its transfers, tiles and
 * program items), so this bounds planning memory to a few GB. The static baselines cut
 * every sequence into R or 2R chunks, so a batch of many sequences on many ranks reaches it
 * (32x8 ranks, 1M tokens of the built-in histogram); they are refused with
 * DCP_ERR_CAPACITY before any tile is made. */
#define DCP_MAX_COMP_BLOCKS ((int64_t)1 << 22)

typedef struct {
    /* sequences: an owned copy of the batch; CUSTOM ranges point into custom_ranges */
    int32_t num_seqs;
    dcp_seq_info_t *seqs;
    int32_t *custom_ranges;
    int64_t custom_ints;
    int64_t total_tokens;

    /* attention shape */
    dcp_attn_shape_t shape;         /* scale resolved (never 0) */
    int32_t head_blocks, qpg, kvpg; /* head groups; query and KV heads per group */
    int32_t elem_bytes;             /* bytes per Q/K/V/O element */
    int32_t block_size;

    /* token blocks */
    int32_t num_blocks;
    int32_t *blk_seq, *blk_start, *blk_len;
    int32_t *blk_chunk; /* strategy chunk the block was cut from (0 when unchunked) */
    int32_t *seq_blk;   /* [num_seqs + 1]: blocks of sequence s are seq_blk[s]..seq_blk[s+1] */

    /* tiles */
    int64_t num_tiles;
    int32_t *tile_q, *tile_kv;
    int64_t *tile_pairs;
    uint8_t *tile_full;
    int64_t tile_cap;

    /* Layer kinds (below: dcp_kinds_model). num_kinds <= 1: one kind, seqs' masks, and nothing
     * below is set. K >= 2: a union model that placement sees - kind_seqs[k * num_seqs + s] is
     * sequence s in kind k (seqs is kind 0's), a tile is in the model when some kind has an
     * allowed pair in it, kind_pairs[t * K + k] are its pairs in kind k, tile_pairs[t] the
     * most of any kind and tile_full[t] set when it is full in every kind. */
    int32_t num_kinds;
    uint32_t free_kinds; /* kinds placement leaves unbalanced (bit k: kind k), 0: none */
    int32_t kind_layers[DCP_MAX_KINDS];
    dcp_seq_info_t *kind_seqs;
    int32_t *kind_ranges; /* every kind's CUSTOM ranges, kind by kind */
    int64_t kind_ints;
    int64_t *kind_pairs;
} dcp_blocks_t;

/* The kinds of a batch (1 when it names none) and the masks of kind k. */
static inline int32_t dcp_batch_kinds(const dcp_batch_t *batch)
{
    return batch->num_kinds > 1 ? batch->num_kinds : 1;
}

static inline const dcp_mask_t *dcp_batch_masks(const dcp_batch_t *batch, int32_t k)
{
    return batch->num_kinds > 0 ? batch->kinds[k].masks : batch->masks;
}

/* The kinds of a block model (1 for a model of one kind). */
static inline int32_t dcp_blocks_kinds(const dcp_blocks_t *b)
{
    return b->num_kinds > 1 ? b->num_kinds : 1;
}

/* 1 when placement balances kind k's FLOPs (every kind, unless the planner frees some). */
static inline int dcp_blocks_balances(const dcp_blocks_t *b, int32_t k)
{
    return !((b->free_kinds >> k) & 1u);
}

/* Validates batch and shape as dcp_blocks_init() does, without copying them. */
dcp_status_t dcp_blocks_check(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                              int32_t block_size, int32_t head_blocks);

/* Validates batch and shape and copies them into b (which must be zeroed): a batch of K >= 2
 * layer kinds gives a union model (kind_seqs set, tiles by dcp_blocks_tiles). */
dcp_status_t dcp_blocks_init(dcp_blocks_t *b, const dcp_batch_t *batch,
                             const dcp_attn_shape_t *shape, int32_t block_size,
                             int32_t head_blocks);

/* Cuts every sequence into token blocks. chunks == 0: blocks of B tokens from the sequence
 * start and, in a sequence of more than 2B tokens, from each of its masks' structure cuts
 * (dcp_mask_cuts: a lambda or blockwise sink, a blockwise test block); chunks > 0: first
 * `chunks` near-equal contiguous chunks (floor(c * L / chunks) boundaries, empty chunks
 * skipped), then each chunk into blocks of at most B. */
dcp_status_t dcp_blocks_cut(dcp_blocks_t *b, int32_t chunks);

/* Runs of tokens that a strategy places as a whole: run i is [start[i], end[i]) of sequence
 * seq[i], with the strategy's tag (the owner rank, for the peer policies). Pushed in any
 * order; together they must tile every sequence. */
typedef struct {
    int64_t n, cap;
    int32_t *seq, *start, *end, *tag;
} dcp_runs_t;

/* Appends a run (an empty one is skipped). */
dcp_status_t dcp_runs_push(dcp_runs_t *r, int32_t seq, int32_t start, int32_t end, int32_t tag);
void dcp_runs_release(dcp_runs_t *r);

/* Cuts every sequence of b (zeroed blocks) at its runs, each run into blocks of at most B
 * from its start; blk_chunk is the run's tag. Fails with DCP_ERR_INTERNAL when the runs do not
 * tile the sequences. */
dcp_status_t dcp_blocks_cut_runs(dcp_blocks_t *b, const dcp_runs_t *runs);

/* A coarser model of an unchunked block model: sequence s's blocks are grouped
 * `factor[s]` consecutive blocks at a time (factor 1: unchanged), and its tiles are those
 * of the groups. `coarse` (zeroed) gets its own copy of the sequences; coarse_of_out (malloc'ed,
 * [fine->num_blocks]) maps every fine block to the coarse block holding it, so a fine tile
 * (q, kv) lies within the coarse tile (coarse_of[q], coarse_of[kv]), which exists. */
dcp_status_t dcp_blocks_coarsen(const dcp_blocks_t *fine, const int32_t *factor,
                                dcp_blocks_t *coarse, int32_t **coarse_of_out);

/* The index of tile (q, kv), or -1 when that pair has no allowed pair (binary search: tiles
 * are sorted by (q, kv)). */
int64_t dcp_blocks_find_tile(const dcp_blocks_t *b, int32_t q, int32_t kv);

/* Enumerates the tiles with at least one allowed pair, with exact pair counts (of every kind,
 * in a union model of layer kinds: dcp_kinds_tiles). */
dcp_status_t dcp_blocks_tiles(dcp_blocks_t *b);

/*
 * Layer kinds. A batch may name K >= 2 kinds of attention layer, each with its own mask per
 * sequence and a layer count; one placement of token blocks serves them all, and each kind
 * gets its own schedules and programs on it.
 *
 * Placement sees one union model (num_kinds = K): the token blocks, and a tile wherever some
 * kind has an allowed pair, weighing each kind apart (kind_pairs: one balance constraint per
 * kind, partition/place/place.h; one net per kind and side, weighted by the kind's layer
 * count, partition/model/hypergraph.h). A tile's computation blocks of every kind run on the
 * rank the union model gives it: they read the same query and key blocks. Scheduling then sees
 * each kind as a model of its own (dcp_kinds_model) with the placement projected onto it
 * (dcp_kinds_project, partition/place/place.h), so the schedule and program builders run
 * unchanged, once per kind.
 */

/* Kind k of union model u as a model of one kind: u's sequences with kind k's masks, u's token
 * blocks, and kind k's tiles. out must be zeroed; release it with dcp_blocks_release(). */
dcp_status_t dcp_kinds_model(const dcp_blocks_t *u, int32_t k, dcp_blocks_t *out);

/* The tiles of union model u (u->num_kinds >= 2) from its kinds' models models[K] (each from
 * dcp_kinds_model): a tile of any kind, its pairs in each kind. */
dcp_status_t dcp_kinds_union(dcp_blocks_t *u, const dcp_blocks_t *models);

/* The tiles of union model u, its kinds' models made and dropped on the way (dcp_blocks_tiles
 * of a union model, a coarse one's too). */
dcp_status_t dcp_kinds_tiles(dcp_blocks_t *u);

/* Appends tile (q, kv) with its pair count and full mark, growing the tile arrays. */
dcp_status_t dcp_blocks_push_tile(dcp_blocks_t *b, int32_t q, int32_t kv, int64_t pairs, int full);

/* An upper bound on the tiles dcp_blocks_tiles() would make, from the masks' envelopes
 * alone (no tile is classified or stored): O(blocks x log blocks). A union model of layer
 * kinds gives the sum over its kinds (the tiles of every kind's programs). */
dcp_status_t dcp_blocks_tile_bound(const dcp_blocks_t *b, int64_t *tiles_out);

void dcp_blocks_release(dcp_blocks_t *b);

/* Bytes `len` tokens occupy at their owner: Q, K, V, O and LSE of every head. */
int64_t dcp_shape_token_bytes(const dcp_attn_shape_t *shape, int64_t len);

static inline int64_t dcp_blocks_token_bytes(const dcp_blocks_t *b, int64_t len)
{
    return dcp_shape_token_bytes(&b->shape, len);
}

/* Forward FLOPs of one computation block of tile t (one head group); in a union model of
 * layer kinds, the most of any kind. */
static inline int64_t dcp_blocks_comp_flops(const dcp_blocks_t *b, int64_t t)
{
    return b->tile_pairs[t] * dcp_shape_pair_flops(&b->shape) * b->qpg;
}

/* Forward FLOPs of one computation block of tile t in layer kind k (k = 0 in a model of one
 * kind): what each kind's balance constraint weighs. */
static inline int64_t dcp_blocks_kind_flops(const dcp_blocks_t *b, int64_t t, int32_t k)
{
    const int64_t pairs = b->num_kinds > 1 ? b->kind_pairs[t * b->num_kinds + k] : b->tile_pairs[t];
    return pairs * dcp_shape_pair_flops(&b->shape) * b->qpg;
}

/* The kinds of transferred block (one token block, one head group). Inputs travel from
 * the owner of the token block to the rank that computes with it; partials travel back
 * from that rank to the owner after the last division.
 *   forward:  Q (Q rows), KV (K then V rows), PART (fp32 O then LSE rows)
 *   backward: BQ (Q then dO rows), BSTAT (fp32 LSE then delta rows), KV,
 *             DQ (fp32 dQ rows), DKV (fp32 dK then dV rows) */
typedef enum {
    DCP_XFER_Q = 0,
    DCP_XFER_KV = 1,
    DCP_XFER_PART = 2,
    DCP_XFER_BQ = 3,
    DCP_XFER_BSTAT = 4,
    DCP_XFER_DQ = 5,
    DCP_XFER_DKV = 6,
    DCP_XFER_KIND_COUNT = 7
} dcp_xfer_kind_t;

/* 1 for the partials that return to the owner (the computing rank holds them). */
static inline int dcp_xfer_is_partial(int32_t kind)
{
    return kind == DCP_XFER_PART || kind == DCP_XFER_DQ || kind == DCP_XFER_DKV;
}

/* 1 for the kinds that travel in fp32 whatever the plan dtype. */
static inline int dcp_xfer_is_fp32(int32_t kind)
{
    return kind == DCP_XFER_BSTAT || dcp_xfer_is_partial(kind);
}

/* 1 for the kinds that carry the query side of a token block (Q, PART and their backward
 * twins); 0 for the key/value side (KV, DKV). */
static inline int dcp_xfer_is_query_side(int32_t kind)
{
    return kind != DCP_XFER_KV && kind != DCP_XFER_DKV;
}

int64_t dcp_blocks_xfer_elems(const dcp_blocks_t *b, dcp_xfer_kind_t kind, int64_t len);
int64_t dcp_blocks_xfer_bytes(const dcp_blocks_t *b, dcp_xfer_kind_t kind, int64_t len);

/* Hypergraph net weights: bytes that cross between ranks over a whole training step (forward
 * and backward) per extra rank a net spans: the query side (Q, O/LSE partial, Q + dO,
 * LSE + delta, dQ partial) or the key/value side (K + V twice, dK + dV partial). */
int64_t dcp_blocks_net_bytes(const dcp_blocks_t *b, int query_side, int64_t len);

#endif
