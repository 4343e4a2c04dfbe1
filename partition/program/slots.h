/*
 * Buffer slots. Each work buffer of a rank is one contiguous array; a block lives in a slot
 * of it from its first write to its last read, and slots are reused once their block is
 * dead. Slots are allocated first-fit over the holes left by freed slots, in program order,
 * so the buffer size is the high-water mark of live bytes plus fragmentation.
 */
#ifndef DCP_PARTITION_SLOTS_H
#define DCP_PARTITION_SLOTS_H

#include "partition/plan/plan.h" /* DCP_SLOT_ALIGN */

#include <stdint.h>

typedef struct {
    int64_t off, len;
} dcp_hole_t;

typedef struct {
    dcp_hole_t *holes; /* sorted by offset, never adjacent */
    int64_t num_holes, cap;
    int64_t top; /* elements ever used: the buffer size */
} dcp_slots_t;

dcp_status_t dcp_slots_alloc(dcp_slots_t *a, int64_t elems, int64_t *off_out);
dcp_status_t dcp_slots_free(dcp_slots_t *a, int64_t off, int64_t elems);
void dcp_slots_release(dcp_slots_t *a);

#endif
