/*
 * Scheduling (DCP's divisions). Each rank's computation blocks are split into T divisions:
 * with T > 1, division 0 holds the blocks whose inputs are all local, and the others are
 * spread over divisions 1..T-1 with balanced FLOPs, ordered so that blocks reading the same
 * remote input sit together. Communication runs in global steps shared by all ranks: step d
 * (0 <= d < T) brings every input that some rank's division d reads first, so it can run
 * while division d-1 computes; step T returns partial outputs to their query owners. A step
 * is launched as one phase, or as several congestion-free rounds (partition/rounds.h).
 *
 * The backward pass runs on the same placement, divisions and order: step d brings Q + dO,
 * LSE + delta and K + V for division d, and step T returns the fp32 dQ partials to the
 * query owners and the dK + dV partials to the KV owners. Each pass has its own schedule.
 */
#ifndef DCP_PARTITION_SCHEDULE_H
#define DCP_PARTITION_SCHEDULE_H

#include "partition/place.h"

typedef struct {
    int32_t src, dst;
    int32_t step;  /* 0..T-1: inputs of division `step`; T: partial outputs */
    int32_t phase; /* the launch it belongs to: its step, or a round of its step */
    int32_t kind;  /* dcp_xfer_kind_t */
    int32_t block; /* token block */
    int32_t head_group;
    int32_t first_div; /* Q/KV: divisions reading it at dst; PART: writing it at src */
    int32_t last_div;
    int64_t bytes;
} dcp_transfer_t;

typedef struct {
    int32_t num_ranks, num_divs;
    dcp_pass_t pass;
    int32_t num_phases;
    int32_t *phase_first; /* [T + 2]: phases of step s are [phase_first[s], phase_first[s+1]) */
    int32_t *comp_div;    /* [comps]: division of each computation block */
    int64_t *rank_off;    /* [R + 1]: rank r runs order[rank_off[r] .. rank_off[r + 1]) */
    int64_t *order;       /* computation blocks by (executor, division, q block, head, kv block) */
    int32_t num_xfers;
    dcp_transfer_t *xfers; /* sorted by (phase, src, dst, kind, block, head group) */
    int32_t *by_holder;    /* transfer ids by (holder, kind, block, head); holder: dst of an
                              input, src of a partial */
} dcp_schedule_t;

/* With DCP_COMM_DIVISIONS each step with transfers is one phase; with DCP_COMM_ROUNDS each
 * step's transfers are coloured into congestion-free rounds, `coalesce` rounds a phase. */
dcp_status_t dcp_schedule_build(const dcp_blocks_t *b, const dcp_placement_t *p, int32_t num_ranks,
                                int32_t num_divs, dcp_comm_schedule_t comm, int32_t coalesce,
                                dcp_pass_t pass, dcp_schedule_t *s);

/* The transfer a rank holds for (kind, block, head group), or -1. */
int32_t dcp_schedule_find(const dcp_schedule_t *s, int32_t holder, int32_t kind, int32_t block,
                          int32_t head_group);

void dcp_schedule_release(dcp_schedule_t *s);

#endif
