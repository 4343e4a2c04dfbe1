/*
 * Program emission: turns a schedule into one program per rank, assigning buffer slots.
 *
 * Rank r's program, for T divisions:
 *
 *     LAUNCH(0)
 *     for d in 0..T-1:  LAUNCH(d+1) if d+1 < T;  WAIT(d);  ATTN(division d)
 *     LAUNCH(T); WAIT(T); REDUCE; COPY(accumulators -> caller O, LSE)
 *
 * where LAUNCH(s) packs the blocks r sends in step s into staging slots (one COPY) and
 * starts those sends with the receives r expects in step s (one COMM_LAUNCH); launches and
 * waits without operations are left out. Every rank runs launches and waits in the same
 * step order, so no rank waits on a step that its peer has not launched.
 */
#ifndef DCP_PARTITION_PROGRAM_H
#define DCP_PARTITION_PROGRAM_H

#include "partition/plan.h"
#include "partition/schedule.h"

/* Fills the programs, items and work buffer sizes of p. The blocks, owners and derived
 * local rows (p->blk_row) must already be in p. */
dcp_status_t dcp_program_emit(dcp_plan_t *p, const dcp_blocks_t *b, const dcp_placement_t *pl,
                              const dcp_schedule_t *s);

#endif
