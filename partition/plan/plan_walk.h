/*
 * A read-only walk over a plan for pictures and reports (dcp-plan --svg): the facts a tool
 * needs beside dcp_plan_get_stats()/dcp_plan_get_rank_stats(), through functions, so that no
 * tool reads dcp_plan_t's fields or knows its program encoding. Everything is of the forward
 * program; the plan must outlive the calls, which may run on any thread.
 */
#ifndef DCP_PARTITION_PLAN_WALK_H
#define DCP_PARTITION_PLAN_WALK_H

#include "include/dcp.h"

typedef struct {
    int32_t num_ranks, num_nodes, devs_per_node; /* rank r is device r % G of node r / G */
    int32_t num_seqs, num_blocks;                /* token blocks, sorted by (sequence, start) */
} dcp_plan_walk_shape_t;

void dcp_plan_walk_shape(const dcp_plan_t *p, dcp_plan_walk_shape_t *out);

/* Length in tokens of sequence `seq`. */
int32_t dcp_plan_walk_seq_len(const dcp_plan_t *p, int32_t seq);

/* Token block t (in [0, num_blocks)): its sequence and the rank that owns its rows. */
void dcp_plan_walk_block(const dcp_plan_t *p, int32_t t, int32_t *seq_out, int32_t *owner_out);

/* Calls fn once per computed tile: the rank that computes it, its head group, and its query
 * and KV token blocks (plan-wide block indices). */
typedef void (*dcp_plan_tile_fn)(void *arg, int32_t rank, int32_t head_group, int32_t q_block,
                                 int32_t kv_block);
void dcp_plan_walk_tiles(const dcp_plan_t *p, dcp_plan_tile_fn fn, void *arg);

/* Calls fn once per block sent: sender, receiver and bytes. */
typedef void (*dcp_plan_send_fn)(void *arg, int32_t from, int32_t to, int64_t bytes);
void dcp_plan_walk_sends(const dcp_plan_t *p, dcp_plan_send_fn fn, void *arg);

#endif
