/*
 * Fiduccia-Mattheyses refinement of a placement, k-way, on the block hypergraph with exact
 * connectivity gains in link time (partition/place/refiner.h) under every balance constraint (the
 * FLOPs of each layer kind, memory).
 *
 * A pass moves vertices (computation blocks and token blocks) one at a time, best gain
 * first, each at most once, and keeps moving through moves that cost (negative gain) so
 * that it can climb out of the local minima a greedy pass stops in; at the end it rolls
 * back to the best prefix, so a pass never makes the placement worse. Moves only go to
 * ranks with room under the strict bounds, and only to ranks the vertex is connected to:
 * a computation block to the owner or a reader of its Q or KV net, a token block to a
 * reader of one of its nets. Gains are kept in a max-heap and checked when popped (lazy
 * FM): a vertex whose gain a move may have changed is pushed again with its new gain. A
 * pass stops early after FM_WINDOW + nv / 100 moves without a new best; passes repeat
 * until one gains nothing.
 */
#ifndef DCP_PARTITION_REFINE_FM_H
#define DCP_PARTITION_REFINE_FM_H

#include "partition/place/refiner.h"

dcp_status_t dcp_refine_fm(dcp_refiner_t *r);

#endif
