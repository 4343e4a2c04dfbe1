/*
 * The in-process engine: ranks are threads of one process sharing a hub. Each rank has a
 * mailbox holding the sends posted to it and the receives it posted that are still
 * unmatched; whichever side posts second copies the bytes (under the receiver's mailbox
 * lock, so that cancellation can never race a copy) and completes both requests.
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

/* How this rank's thread moves the bytes of the matches it completes (memcpy unless set):
 * ranks on GPUs copy device memory on their transfer stream. The copy must be finished when
 * it returns. */
typedef dcp_status_t (*dcp_inproc_copy_fn)(void *user, void *dst, const void *src, size_t bytes);
void dcp_inproc_engine_set_copy(dcp_engine_t *engine, dcp_inproc_copy_fn copy, void *user);

#endif
