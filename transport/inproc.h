/*
 * The in-process engine: ranks are threads of one process sharing a hub. Each rank has a
 * mailbox holding the sends posted to it and the receives it posted that are still
 * unmatched; whichever side posts second moves the bytes (under the receiver's mailbox
 * lock, so that cancellation can never race a copy) and completes both requests.
 *
 * On the host the bytes are copied there and then. Ranks on GPUs set a mover: the copy is
 * queued on the matching rank's transfer stream after both ops' ready events and both done
 * events are recorded after it, so no thread waits for a GPU; a wait with a stream waits on
 * the host only for the peers to post, then orders the stream after the done events.
 */
#ifndef DCP_TRANSPORT_INPROC_H
#define DCP_TRANSPORT_INPROC_H

#include "transport/engine.h"

typedef struct dcp_inproc_hub dcp_inproc_hub_t;

dcp_status_t dcp_inproc_hub_create(int32_t size, dcp_inproc_hub_t **hub_out);
/* All engines on the hub must have been destroyed. */
void dcp_inproc_hub_destroy(dcp_inproc_hub_t *hub);
int32_t dcp_inproc_hub_size(const dcp_inproc_hub_t *hub);

/* Rank `rank`'s endpoint on the hub. One engine per rank at a time. */
dcp_status_t dcp_inproc_engine_create(dcp_inproc_hub_t *hub, int32_t rank,
                                      dcp_engine_t **engine_out);

/* How a rank's thread moves the bytes of the matches it completes, when not by memcpy. */
typedef struct {
    /* Queues the copy of send->bytes from send->ptr to recv->ptr after both ops' ready
     * events and records both ops' done events after it. `same_device`: both ranks compute
     * on the mover's device; otherwise the events of one side belong to another device,
     * which the mover's stream cannot record, and the copy must be done when it returns. */
    dcp_status_t (*copy)(void *user, const dcp_xfer_op_t *send, const dcp_xfer_op_t *recv,
                         int same_device);
    /* Later work on `stream` waits for `done`. */
    dcp_status_t (*order)(void *user, void *stream, void *done);
    void *user;
} dcp_inproc_mover_t;

/* Sets the mover (copied) of a rank computing on `device` and makes the engine
 * stream-ordered. */
void dcp_inproc_engine_set_mover(dcp_engine_t *engine, const dcp_inproc_mover_t *mover,
                                 int32_t device);

#endif
