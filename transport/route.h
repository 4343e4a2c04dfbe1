/*
 * The routing engine: one engine per link class in use (for example NCCL inside a node and
 * UCX between nodes, or the in-process engine between threads of a process and UCX between
 * processes), behind the one engine interface. A launch is split by peer, each part going
 * to the engine that serves that peer, as one request; waits complete every part (polling
 * all engines while more than one is in flight, so that none starves), aborts and cancels
 * reach every engine, and every error names the engine and the link class it serves (the
 * engines' own messages name the peer).
 */
#ifndef DCP_TRANSPORT_ROUTE_H
#define DCP_TRANSPORT_ROUTE_H

#include "transport/engine.h"

#define DCP_ROUTE_MAX 4

/* Takes ownership of engines[0..n) (1 <= n <= DCP_ROUTE_MAX), which must all serve `rank` of
 * `size` ranks unless `engine_peer` is given; they are destroyed with the routing engine, or
 * here on failure. engine_of[p] (copied) is the index of the engine that moves blocks to and
 * from peer p; engine_peer[p] (copied; NULL: p) is p's rank in that engine (an in-process
 * engine of a hybrid job counts the process's threads only);
 * labels[i] (static strings) name what engine i serves, e.g. "inter-node links". The
 * routing engine is stream-ordered when every engine is, and needs progress when any does. */
dcp_status_t dcp_route_engine_create(int32_t rank, int32_t size, int32_t n,
                                     dcp_engine_t *const *engines, const char *const *labels,
                                     const uint8_t *engine_of, const int32_t *engine_peer,
                                     dcp_engine_t **engine_out);

/* Engine i of a routing engine and the label of the links it serves (i in [0, count));
 * returns the count of legs (0 and nothing written when e is not a routing engine). */
int32_t dcp_route_leg(const dcp_engine_t *e, int32_t i, const dcp_engine_t **leg_out,
                      const char **label_out);

#endif
