/*
 * Placement strategies. Every strategy produces the same thing: the owner rank of every
 * token block and the executor rank of every computation block (tile * head_blocks + h),
 * within the per-rank memory cap.
 */
#ifndef DCP_PARTITION_PLACE_H
#define DCP_PARTITION_PLACE_H

#include "partition/model/blocks.h"
#include "topo/cluster.h"

typedef struct {
    const dcp_blocks_t *blocks;
    const dcp_cluster_t *cluster;
    const dcp_plan_options_t *opts;
} dcp_place_in_t;

typedef struct {
    int32_t *blk_owner; /* [num_blocks], allocated by the caller */
    int32_t *comp_exec; /* [num_tiles * head_blocks], allocated by the caller */
    int32_t fallback;   /* set when a strategy had to fall back to lpt */
} dcp_placement_t;

typedef struct {
    dcp_strategy_t id; /* its name: dcp_strategy_name(id) (strategy_name.c) */
    /* Chunks per sequence the blocks must be cut into before placing (0: blocks of B and
     * structure cuts, dcp_blocks_cut); NULL for a strategy that cuts itself (`cut`). */
    int32_t (*chunks)(int32_t num_ranks);
    dcp_status_t (*place)(const dcp_place_in_t *in, dcp_placement_t *out);
    /* The peer policies' (NULL for dcp's own strategies). resolve: sets o->strategy_arg's
     * default and what the policy fixes (head_blocks) for this batch and cluster, and refuses
     * (DCP_ERR_INVALID_ARG) what the policy cannot run. cut: cuts b's sequences into blocks
     * (dcp_blocks_cut_runs) with each block's owner rank as its blk_chunk. */
    dcp_status_t (*resolve)(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                            const dcp_cluster_t *c, dcp_plan_options_t *o);
    dcp_status_t (*cut)(dcp_blocks_t *b, const dcp_cluster_t *c, const dcp_plan_options_t *o);
} dcp_strategy_ops_t;

/* A batch cut into blocks the way a strategy asks and placed by it: the first half of
 * planning, shared by the planner and the hypergraph export (partition/export.h), so both
 * see the same blocks. */
typedef struct {
    dcp_plan_options_t opts;
    dcp_blocks_t b; /* a union model when the batch has K >= 2 layer kinds (blocks.h) */
    dcp_placement_t pl;
    int32_t num_kinds;                  /* K >= 2: each kind's model and placement below */
    dcp_blocks_t kb[DCP_MAX_KINDS];     /* kind k's model (dcp_kinds_model) */
    dcp_placement_t kpl[DCP_MAX_KINDS]; /* the placement projected onto it */
} dcp_placed_t;

/* Kind k's model and placement of x: b and pl themselves for a batch of one kind. */
static inline const dcp_blocks_t *dcp_placed_blocks(const dcp_placed_t *x, int32_t k)
{
    return x->num_kinds > 1 ? &x->kb[k] : &x->b;
}

static inline const dcp_placement_t *dcp_placed_placement(const dcp_placed_t *x, int32_t k)
{
    return x->num_kinds > 1 ? &x->kpl[k] : &x->pl;
}

/* Cuts `batch` into blocks for strategy o->strategy (a concrete one, not AUTO) and places
 * them on `cluster`. x must be zeroed; release it with dcp_placed_release() on success and
 * failure alike. */
dcp_status_t dcp_place_batch(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                             const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                             dcp_placed_t *x);

/* The same with the layer kinds in free_kinds (bit k: kind k) left unbalanced: the planner's
 * candidate that balances only the kind with the most work (partition/planner.c). */
dcp_status_t dcp_place_batch_free(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                  const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                                  uint32_t free_kinds, dcp_placed_t *x);
void dcp_placed_release(dcp_placed_t *x);

/* dcp_place_batch_free's first half: x's options resolved, the batch cut into blocks as
 * o->strategy cuts it, the tiles, and a zeroed placement for the caller to fill (x.pl); then
 * dcp_place_project() gives each layer kind its part of it. */
dcp_status_t dcp_place_prepare(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                               const dcp_plan_options_t *o, const dcp_cluster_t *cluster,
                               uint32_t free_kinds, dcp_placed_t *x);
dcp_status_t dcp_place_project(dcp_placed_t *x);

/* Kind model m's placement from the union model's placement pu: the same owners, and each of
 * m's computation blocks on the rank of the union tile it lies in. out's arrays are allocated
 * here (release with free). */
dcp_status_t dcp_kinds_project(const dcp_blocks_t *u, const dcp_placement_t *pu,
                               const dcp_blocks_t *m, dcp_placement_t *out);

/* The strategy table entry, or NULL for an unknown id (place.c). */
const dcp_strategy_ops_t *dcp_strategy_ops(dcp_strategy_t id);

/* The imbalance of whole documents packed into the cluster's nodes as DCP_STRATEGY_NODES
 * packs them (place_hier.c): the most of any node over the mean, in tokens or in attention
 * pairs, whichever is more. b needs its sequences only (dcp_blocks_init). */
dcp_status_t dcp_nodes_imbalance(const dcp_blocks_t *b, const dcp_cluster_t *cluster,
                                 double *imbalance_out);

/* Strategies in one file each. */
extern const dcp_strategy_ops_t dcp_strategy_ring;
extern const dcp_strategy_ops_t dcp_strategy_zigzag;
extern const dcp_strategy_ops_t dcp_strategy_lpt;
extern const dcp_strategy_ops_t dcp_strategy_metis;
extern const dcp_strategy_ops_t dcp_strategy_nodes;
extern const dcp_strategy_ops_t dcp_strategy_packed;
extern const dcp_strategy_ops_t dcp_strategy_dyncp;
extern const dcp_strategy_ops_t dcp_strategy_ulysses;
extern const dcp_strategy_ops_t dcp_strategy_usp;
extern const dcp_strategy_ops_t dcp_strategy_magi;

/* 1 for the peer policies (DCP_STRATEGY_PACKED and after). */
static inline int dcp_strategy_is_peer(dcp_strategy_t id)
{
    return id >= DCP_STRATEGY_PACKED && id < DCP_STRATEGY_PEER_END;
}

/* Shared by strategies (placement.c): every computation block runs where its query block
 * lives. */
void dcp_place_at_query_owner(const dcp_blocks_t *b, dcp_placement_t *p);

/* Fails with DCP_ERR_CAPACITY when some rank owns more than the cap (0 = no cap). */
dcp_status_t dcp_place_check_cap(const dcp_place_in_t *in, const dcp_placement_t *p);

/* Per-rank FLOPs and owned bytes of a placement (malloc'ed: FLOPs [K x num_ranks], kind k's
 * at k x num_ranks, K the model's kinds; bytes [num_ranks]). */
dcp_status_t dcp_place_loads(const dcp_blocks_t *b, const dcp_placement_t *p, int32_t num_ranks,
                             int64_t **flops_out, int64_t **mem_out);

/* The most a rank may hold within tolerance tol: (1 + tol) x the mean (`strict`), or, when
 * not strict, the mean plus the largest single block if that is more - blocks can be too
 * coarse for the strict bound (80 blocks on 32 ranks cannot come closer than one block to
 * the mean), so validation accepts it while repair still aims at the strict one. */
void dcp_place_bounds(const dcp_blocks_t *b, int32_t num_ranks, double tol, int strict,
                      double *flops_bound, double *mem_bound);
/* (flops_bound has one entry per kind of the model: every kind is balanced on its own, since
 * layers of different kinds run one after another; a kind the planner leaves free gets
 * INFINITY.) */

/* Spreads the owners of the blocks that leave their node most (a long sequence's hot blocks)
 * over the network links of the node: equal-length blocks swap owners between ranks of one
 * node while that lowers the node's busiest link (place_links.c). No byte between nodes,
 * FLOP or owned byte of any rank changes. */
dcp_status_t dcp_place_spread_links(const dcp_blocks_t *b, const dcp_cluster_t *c,
                                    dcp_placement_t *pl);

/* Forward FLOPs of every token block's queries over all head groups ([K x num_blocks], kind
 * k's at k x num_blocks). */
dcp_status_t dcp_place_query_flops(const dcp_blocks_t *b, int64_t **flops_out);

#endif
