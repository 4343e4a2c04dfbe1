/*
 * Program emission: turns a schedule into one program per rank, assigning buffer slots.
 *
 * Rank r's program, for T divisions, with one phase per step (DCP_COMM_DIVISIONS):
 *
 *     LAUNCH(0)
 *     for d in 0..T-1:  LAUNCH(d+1) if d+1 < T;  WAIT(d);  ATTN(division d)
 *     LAUNCH(T); WAIT(T); REDUCE; COPY(accumulators -> caller O, LSE)
 *
 * and with rounds (DCP_COMM_ROUNDS), where step s has phases s.0 .. s.k-1:
 *
 *     LAUNCH(0.j); WAIT(0.j) for each j
 *     for d in 0..T-1:  for j:  LAUNCH(d+1.j); ATTN(piece j of division d); WAIT(d+1.j)
 *     LAUNCH(T.j); WAIT(T.j) for each j;  REDUCE; COPY
 *
 * The backward program has the same shape: its launches carry Q + dO, LSE + delta and K + V
 * in, its ATTN computes gradients, its last step returns dQ and dK + dV partials, its
 * REDUCEs sum them in fp32 and its COPY publishes dQ, dK, dV. (delta = rowsum(dO * O) of
 * the local rows is computed by the executor before the program starts.)
 *
 * LAUNCH(p) packs the blocks r sends in phase p into staging slots (one COPY) and starts
 * those sends with the receives r expects in p (one COMM_LAUNCH); launches and waits
 * without operations are left out. Every rank launches and waits in increasing phase
 * order, so no rank waits on a phase that a peer has not launched.
 */
#ifndef DCP_PARTITION_PROGRAM_H
#define DCP_PARTITION_PROGRAM_H

#include "partition/plan.h"
#include "partition/schedule.h"

/* Fills the programs of both passes of layer kind `kind`, their items and the work buffer
 * sizes of p, from one schedule per pass (s[DCP_PASS_FWD], s[DCP_PASS_BWD]) of that kind's
 * blocks b and placement pl. Kinds are emitted in order, 0 first (which sizes the program
 * table for p->num_kinds kinds); their transfers and phases are numbered on from the last
 * kind's, and the kind's pass ranges go to its view. The blocks, owners and derived local
 * rows (p->blk_row) must already be in p; the buffers are as large as the largest kind needs. */
dcp_status_t dcp_program_emit(dcp_plan_t *p, int32_t kind, const dcp_blocks_t *b,
                              const dcp_placement_t *pl,
                              const dcp_schedule_t *const s[DCP_PASS_COUNT]);

#endif
