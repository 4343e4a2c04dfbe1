/*
 * Scheduling (DCP's divisions). Each rank's computation blocks are split into T divisions:
 * with T > 1, the blocks whose inputs are all local fill the first divisions (one, or two
 * from T = 3 on, so that an input forwarded through a hub (dcp_schedule_relay) has a step to
 * reach the hub in and one to reach its other readers in) and, from T = 5 on, the last one
 * (so that the partials of the last remote division leave while it computes); the others
 * hold the remote blocks, FLOP-balanced: those that read from other nodes in the middle,
 * between the two halves of those that read only inside the rank's node, and ordered so that
 * blocks reading the same remote input sit together. Communication runs in global steps shared by
 * all ranks: step d (0 <= d < T) brings every input that some rank's division d reads first, so it
 * runs while division d - 1 computes, and every step d returns the partial outputs that division d
 * - 2 wrote last (a partial is done once the division that writes it last is, and the programs
 * launch step d + 1 before they compute division d): the last division's go in step T + 1,
 * and a hub's merged partial one step after the last it merges (up to T + 2). A step is
 * launched as one phase, or as several congestion-free rounds (partition/program/rounds.h).
 *
 * The backward pass runs on the same placement, divisions and order: its steps bring Q + dO,
 * LSE + delta and K + V, and return the fp32 dQ partials to the query owners and the dK + dV
 * partials to the KV owners. Each pass has its own schedule.
 */
#ifndef DCP_PARTITION_SCHEDULE_H
#define DCP_PARTITION_SCHEDULE_H

#include "partition/place/place.h"

/* How a transfer travels (dcp_schedule_relay): straight from the owner or to it, or as one
 * of two hops through a hub on the holder's node. Inputs: hop 1 brings the block from its
 * owner to the hub, a reader on another node, and hop 2 forwards it from the hub's receive
 * slot to each other reader on that node. Partials: hop 1 brings each writer's partial to
 * the hub, a writer on the same node, which merges them into its own, and hop 2 takes that
 * one partial to the owner. */
enum { DCP_HOP_DIRECT = 0, DCP_HOP_FIRST = 1, DCP_HOP_SECOND = 2 };

typedef struct {
    int32_t src, dst;
    int32_t step;  /* 0..T + 2: inputs of division `step`; a partial sent after division
                      step - 2 wrote it last (a hub's: after the last partial it merges) */
    int32_t phase; /* the launch it belongs to: its step, or a round of its step */
    int32_t kind;  /* dcp_xfer_kind_t */
    int32_t block; /* token block */
    int32_t head_group;
    int32_t first_div; /* Q/KV: divisions reading it at dst; PART: writing it at src */
    int32_t last_div;  /* an input's hub keeps it until its last forward: the later of the two */
    int32_t hop;       /* DCP_HOP_* */
    int64_t bytes;
} dcp_transfer_t;

typedef struct {
    int32_t num_ranks, num_divs;
    dcp_pass_t pass;
    dcp_comm_schedule_t comm; /* how steps became phases */
    int32_t coalesce;
    int32_t num_phases;
    int32_t *phase_first; /* [T + 4]: phases of step s (0..T+2) are [phase_first[s],
                             phase_first[s+1]) */
    int32_t *comp_div;    /* [comps]: division of each computation block */
    int64_t *rank_off;    /* [R + 1]: rank r runs order[rank_off[r] .. rank_off[r + 1]) */
    int64_t *order;       /* computation blocks by (executor, division, q block, head, kv block) */
    int32_t num_xfers;
    dcp_transfer_t *xfers; /* sorted by (phase, src, dst, kind, block, head group) */
    int32_t *by_holder;    /* transfer ids by (holder, kind, block, head); holder: dst of an
                              input, src of a partial */
} dcp_schedule_t;

/* How a rank's computation blocks fill its divisions. DCP_ORDER_DEFAULT: as the comment at
 * the top says, the local tail computing half of the rank's local FLOPs. DCP_ORDER_LONG_TAIL:
 * the forward's remote blocks that read from another node but return no partial there (their
 * query block is the rank's own or its node's) come after all other remote blocks, so that
 * the partials that cross nodes are written earlier and the inputs that cross them are read
 * last, and the local tail computes 0.7 of the local FLOPs in both passes, so that more local
 * work hides the last remote division's partials. Neither is faster on every batch; the
 * planner builds the plan it chose both ways and keeps the one the simulator runs faster. */
typedef enum { DCP_ORDER_DEFAULT = 0, DCP_ORDER_LONG_TAIL = 1 } dcp_order_t;

/* With DCP_COMM_DIVISIONS each step with transfers is one phase; with DCP_COMM_ROUNDS each
 * step's transfers are coloured into congestion-free rounds, `coalesce` rounds a phase. */
/* `devs_per_node` ranks make a node (< 1: one node). */
dcp_status_t dcp_schedule_build(const dcp_blocks_t *b, const dcp_placement_t *p, int32_t num_ranks,
                                int32_t devs_per_node, int32_t num_divs, dcp_comm_schedule_t comm,
                                int32_t coalesce, dcp_pass_t pass, dcp_order_t order,
                                dcp_schedule_t *s);

/* Relays a divisions schedule's transfers between nodes (DCP_HOP_*): for each block, head
 * group and kind, the holders on one node other than the owner's share one transfer
 * between the nodes, through a hub, and the rest moves inside their node; bytes on the
 * network links fall by the holders per node, and the owner's link and the hub's carry one
 * block each. Where a hop would have to arrive before the second division it is not made
 * (the first division's inputs cannot be forwarded in time). Rewrites the transfers' ends,
 * steps and phases in place; `devs_per_node` ranks make a node. */
dcp_status_t dcp_schedule_relay(int32_t devs_per_node, dcp_schedule_t *s);

/* The transfer a rank holds for (kind, block, head group), or -1. */
int32_t dcp_schedule_find(const dcp_schedule_t *s, int32_t holder, int32_t kind, int32_t block,
                          int32_t head_group);

void dcp_schedule_release(dcp_schedule_t *s);

#endif
