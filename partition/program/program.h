/*
 * Program emission: turns a schedule into one program per rank, assigning buffer slots.
 *
 * Rank r's program, for T divisions, with one phase per step (DCP_COMM_DIVISIONS):
 *
 *     LAUNCH(0)
 *     for d in 0..T-1:  LAUNCH(d+1);  WAIT(d);  MERGE(hub, d);  ATTN(division d)
 *     MERGE(accumulators, partials so far)
 *     for s in T, T+1:  WAIT(s);  MERGE(hub, s);  LAUNCH(s+1);  MERGE(accumulators, s)
 *     WAIT(T+2);  MERGE(accumulators, T+2);  COPY(accumulators -> caller O, LSE)
 *
 * where a rank that forwards in step d + 1 what step d brings it (a hub's input, or the
 * partial it merges in MERGE(hub, d) from the ones its node sent it) waits for step d first
 * and launches d + 1 after the merge; the accumulators take the partials that came early
 * while the last ones are on their way. With rounds (DCP_COMM_ROUNDS), where step s has
 * phases s.0 .. s.k-1:
 *
 *     LAUNCH(0.j); WAIT(0.j) for each j
 *     for d in 0..T-1:  for j:  LAUNCH(d+1.j); ATTN(piece j of division d); WAIT(d+1.j)
 *     LAUNCH(s.j); WAIT(s.j) for each j and s in T..T+2;  MERGE(accumulators); COPY
 *
 * The backward program has the same shape: its launches carry Q + dO, LSE + delta and K + V
 * in, its ATTN computes gradients, its partials are dQ and dK + dV, its merges (REDUCE) sum
 * them in fp32 and its COPY publishes dQ, dK, dV. (delta = rowsum(dO * O) of the local rows
 * is computed by the executor before the program starts.)
 *
 * LAUNCH(p) packs the blocks r sends in phase p into staging slots (one COPY; a hub forwards
 * from the slot it received in) and starts those sends with the receives r expects in p
 * (one COMM_LAUNCH); launches, waits and merges without operations are left out. Every rank
 * launches and waits in increasing phase order, and launches a phase before it waits for
 * any later one, so no rank waits on a phase that a peer has not launched.
 */
#ifndef DCP_PARTITION_PROGRAM_H
#define DCP_PARTITION_PROGRAM_H

#include "partition/plan/plan.h"
#include "partition/program/schedule.h"

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
