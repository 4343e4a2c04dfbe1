/*
 * The staging engine: device memory over an engine that moves host memory only (UCX built
 * without CUDA, as Debian's is). Sends are copied into page-locked host buffers (all of a
 * launch queued at once, one wait for them, then the inner sends); receives land in host
 * buffers and each one's copy to the device is queued as soon as it has arrived, so the
 * copies of early blocks overlap the transfers of later ones; wait() returns when the last
 * copy is done. Host buffers are kept in a small pool and reused across launches.
 *
 * The copies go through a stager the caller lends (the plugin fills it from the device
 * table, kernels/device.h; the CPU table, whose copies are memcpy, stands in for a GPU in
 * the tests).
 */
#ifndef DCP_TRANSPORT_STAGED_H
#define DCP_TRANSPORT_STAGED_H

#include "transport/engine.h"

typedef struct {
    /* page-locked host memory, NULL on failure; and its release */
    void *(*host_alloc)(void *user, size_t bytes);
    void (*host_free)(void *user, void *ptr);
    /* bytes from src to dst, queued on the stager's stream */
    dcp_status_t (*copy)(void *user, void *dst, const void *src, size_t bytes);
    /* waits on the host for every copy queued so far */
    dcp_status_t (*sync)(void *user);
    /* called once when the engine is destroyed (may be NULL) */
    void (*release)(void *user);
    void *user;
} dcp_stager_t;

/* Takes ownership of `inner` (a host-memory engine) and of the stager's user state (copied
 * table; release called): both are released with this engine, or here on failure. The staging
 * engine is not stream-ordered: the caller makes regions ready before launch and they are complete
 * when wait() returns. */
dcp_status_t dcp_staged_engine_create(dcp_engine_t *inner, const dcp_stager_t *stager,
                                      dcp_engine_t **engine_out);

#endif
