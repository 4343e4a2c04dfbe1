/*
 * The plan: token blocks with owners and local rows, and one program per rank.
 *
 * Programs are stored plan-wide, one per (pass, rank): program i = pass * R + r runs
 * instrs[prog_off[i] .. prog_off[i+1]), and each instruction names a range of its kind's item
 * array (tile groups for ATTN, merge items for a forward REDUCE, copy items for COPY and for
 * a backward REDUCE, comm ops for COMM_LAUNCH). Transfer ids and phases are numbered
 * plan-wide too, the forward's first: pass k owns transfers [pass_xfer[k], pass_xfer[k+1])
 * and phases [pass_phase[k], pass_phase[k+1]), so the two passes never share a tag. Derived
 * data (local rows, caller buffer sizes, statistics) is recomputed from the stored data by
 * dcp_plan_finish(), after planning and after loading bytes alike, so it cannot disagree.
 *
 * Layer kinds (plan_kinds.c): a plan of K >= 2 kinds holds one program pair per kind
 * on its one placement, program (k * 2 + pass) * R + r, transfers and phases numbered on
 * across kinds (kind 0's first). Kind k >= 1 is a view: a dcp_plan_t that shares the plan's
 * arrays (its prog_off starts at kind k's programs) and has its own masks, pass ranges and
 * statistics, so everything that runs or reads one kind's programs takes the view as a plan.
 */
#ifndef DCP_PARTITION_PLAN_H
#define DCP_PARTITION_PLAN_H

#include "include/base/descr.h"
#include "include/base/shape.h"
#include "topo/cluster.h"

#include <stdatomic.h>
#include <stdint.h>

typedef enum {
    DCP_OP_ATTN = 1,        /* fused masked attention over groups [first, first+count) */
    DCP_OP_REDUCE = 2,      /* forward: LSE merges [first, first+count); backward: fp32 sums,
                               copy items [first, first+count) with distinct destinations */
    DCP_OP_COPY = 3,        /* copies [first, first+count) */
    DCP_OP_COMM_LAUNCH = 4, /* start comm ops [first, first+count) as one group, id = arg */
    DCP_OP_COMM_WAIT = 5    /* wait for the launch with id = arg */
} dcp_opcode_t;

typedef struct {
    int32_t op;
    int32_t arg; /* ATTN, REDUCE: the pass (dcp_pass_t); LAUNCH/WAIT: the phase */
    int64_t first;
    int64_t count;
} dcp_instr_t;

typedef struct {
    int32_t peer;
    int32_t send;     /* 1: send the region to peer; 0: receive it from peer */
    int32_t transfer; /* plan-wide transfer id: the tag both sides use */
    int32_t buf;      /* dcp_buf_t */
    int64_t off, elems;
} dcp_comm_op_t;

struct dcp_plan {
    /* inputs */
    int32_t num_ranks, num_nodes, devs_per_node;
    dcp_attn_shape_t shape; /* scale resolved */
    dcp_plan_options_t opts;
    int32_t qpg, kvpg; /* query and KV heads per head group (derived) */
    int32_t num_seqs;
    dcp_seq_info_t *seqs; /* CUSTOM ranges point into custom_ranges */
    int32_t *custom_ranges;
    int64_t custom_ints;

    /* token blocks, sorted by (sequence, start) */
    int32_t num_blocks;
    int32_t *blk_seq, *blk_start, *blk_len, *blk_owner;

    /* programs */
    int32_t num_xfers;  /* transfer ids (tags) are in [0, num_xfers) */
    int32_t num_phases; /* launches are numbered 0 .. num_phases - 1 in global order */
    int32_t pass_xfer[DCP_PASS_COUNT + 1];  /* transfer ids of each pass */
    int32_t pass_phase[DCP_PASS_COUNT + 1]; /* phases of each pass */
    int32_t *phase_step;   /* [num_phases]: the step (0..T) of its pass each phase belongs to */
    int32_t fallback;      /* the strategy fell back to lpt */
    dcp_perf_model_t perf; /* the cluster figures the cost model uses */
    int64_t *work_elems;   /* [R * DCP_BUF_COUNT]; only the planned work buffers are stored */
    int64_t *prog_off;     /* [2KR + 1]: program (kind * 2 + pass) * R + r; a view's points
                              at its kind's first */
    dcp_instr_t *instrs;
    dcp_tile_group_t *groups;
    dcp_tile_t *tiles;
    dcp_merge_item_t *merges;
    dcp_merge_src_t *merge_srcs;
    dcp_copy_item_t *copies;
    dcp_comm_op_t *comm;
    int64_t num_instrs, num_groups, num_tiles, num_merges, num_merge_srcs, num_copies, num_comm;

    /* derived by dcp_plan_finish() */
    int64_t *blk_row;     /* [num_blocks]: first local row at the owner */
    int64_t *rank_tokens; /* [R]: local rows */
    int64_t *buf_elems;   /* [R * DCP_BUF_COUNT]: every buffer's size in elements */
    dcp_rank_stats_t *rank_stats;
    dcp_plan_stats_t stats;
    uint64_t serial;      /* unique per plan object in this process (device caches key on it) */
    uint32_t fingerprint; /* hash of owners and comm ops: ranks running different plans
                             use different tags, so they fail instead of mixing blocks */

    /* layer kinds (a view owns seqs, custom_ranges, its pass ranges, rank_stats and stats) */
    int32_t num_kinds;       /* program pairs the plan holds (>= 1) */
    int32_t kind;            /* the kind this object runs: 0 for a plan, k for its view */
    int32_t layers;          /* model layers of this kind (1 in a plan of one kind) */
    dcp_plan_t **views;      /* K >= 2: [K], views[0] the plan itself; NULL with one kind */
    const dcp_plan_t *root;  /* a view's plan; NULL for a plan */
    /* (1 << 32) | dcp_plan_checksum() once computed (at load, or at the first call that
     * asks); 0 before. Atomic: threads sharing the plan may compute it at once. A view's is
     * its own (its plan's, with its kind). */
    atomic_uint_fast64_t checksum_memo;
};

/* Element count of buffer b on rank r. */
static inline int64_t dcp_plan_buf_elems(const dcp_plan_t *p, int32_t r, int32_t b)
{
    return p->buf_elems[(int64_t)r * DCP_BUF_COUNT + b];
}

/* The plan a view belongs to (the plan itself for a plan), and its kind k's object. */
static inline const dcp_plan_t *dcp_plan_root(const dcp_plan_t *p)
{
    return p->root ? p->root : p;
}

static inline dcp_plan_t *dcp_plan_view(dcp_plan_t *p, int32_t k)
{
    return p->views ? p->views[k] : p;
}

static inline const dcp_plan_t *dcp_plan_view_const(const dcp_plan_t *p, int32_t k)
{
    return p->views ? p->views[k] : p;
}

/* First and end instruction of rank r's program of `pass` (of the object's kind). */
static inline int64_t dcp_plan_prog_begin(const dcp_plan_t *p, dcp_pass_t pass, int32_t r)
{
    return p->prog_off[(int64_t)pass * p->num_ranks + r];
}

static inline int64_t dcp_plan_prog_end(const dcp_plan_t *p, dcp_pass_t pass, int32_t r)
{
    return p->prog_off[(int64_t)pass * p->num_ranks + r + 1];
}

/* Elements per head of a row of caller buffer or accumulator b: head_dim on the query/key
 * side (Q, K, dQ, dK), head_dim_v on the value side (V, O, dO, dV); 1 for the per-head
 * statistics (LSE, delta). */
static inline int32_t dcp_plan_head_width(const dcp_plan_t *p, int32_t b)
{
    switch (b) {
    case DCP_BUF_Q:
    case DCP_BUF_K:
    case DCP_BUF_DQ:
    case DCP_BUF_DK:
    case DCP_BUF_ACC_DQ:
    case DCP_BUF_ACC_DK:
        return p->shape.head_dim;
    case DCP_BUF_V:
    case DCP_BUF_O:
    case DCP_BUF_DO:
    case DCP_BUF_DV:
    case DCP_BUF_ACC_O:
    case DCP_BUF_ACC_DV:
        return dcp_shape_dv(&p->shape);
    default:
        return 1;
    }
}

/* Bytes per element of buffer b. */
static inline int32_t dcp_plan_elem_bytes(const dcp_plan_t *p, int32_t b)
{
    return dcp_buf_elem_bytes(b, p->shape.dtype);
}

/* Most METIS placements one plan may try (options.metis_tries). */
#define DCP_MAX_METIS_TRIES 64

/* Most bytes of work buffers (accumulators, staging, received blocks, partials) one rank of
 * a plan may need: dcp_plan_create() refuses to make a larger plan (DCP_ERR_CAPACITY) and
 * dcp_plan_deserialize() to load one (DCP_ERR_PLAN_CORRUPT). */
#define DCP_PLAN_MAX_WORK_BYTES ((int64_t)1 << 36)

/* Work buffers are cut into slots whose offsets and sizes are multiples of this many elements
 * (aligned vector loads; partition/program/slots.h), so a buffer's size is one too. */
#define DCP_SLOT_ALIGN 64

/* Bytes of work buffers rank r allocates to run the plan (needs derived buffer sizes). */
static inline int64_t dcp_plan_work_bytes(const dcp_plan_t *p, int32_t r)
{
    int64_t bytes = 0;
    for (int b = DCP_BUF_FIRST_WORK; b < DCP_BUF_COUNT; b++)
        bytes += dcp_plan_buf_elems(p, r, b) * dcp_plan_elem_bytes(p, b);
    return bytes;
}

/* Local rows of every block and token counts of every rank (needs valid blocks). */
dcp_status_t dcp_plan_derive_rows(dcp_plan_t *p);

/* Derives rows, buffer sizes and statistics from the stored data (plan_finish.c). With
 * `validate`, first checks the stored data as untrusted (dcp_plan_check_inputs, then
 * dcp_plan_check_programs once sizes are known) and fails with DCP_ERR_PLAN_CORRUPT on any
 * violation; without (a plan just made), fails with DCP_ERR_CAPACITY where a rank's work buffers
 * would pass DCP_PLAN_MAX_WORK_BYTES. */
dcp_status_t dcp_plan_finish(dcp_plan_t *p, int validate);

/* Validation, split where derived sizes become available (plan_check.c). Inputs: shape,
 * options, sequences, masks (every kind's), blocks and array sizes. Programs: every
 * instruction, item range, view, region, tag and the send/receive pairing, against the
 * derived sizes, every kind's through its view (the views must be synced). */
dcp_status_t dcp_plan_check_inputs(const dcp_plan_t *p);
dcp_status_t dcp_plan_check_programs(const dcp_plan_t *p);

/* Statistics from the programs (plan_stats.c); rows and buffers must be derived. */
dcp_status_t dcp_plan_derive_stats(dcp_plan_t *p);
/* Statistics of every kind and the model's step (after dcp_plan_kinds_sync). */
dcp_status_t dcp_plan_kinds_stats(dcp_plan_t *p);

dcp_status_t dcp_plan_alloc(dcp_plan_t **plan_out);

/* Frees what p's layer kinds' views own, and the views (plan.c: dcp_plan_destroy). */
void dcp_plan_kinds_free(dcp_plan_t *p);

/* Layer kinds (plan_kinds.c). Allocates the views of kinds 1 .. K-1 of p (K >= 2), empty but
 * for their kind and root. */
dcp_status_t dcp_plan_kinds_alloc(dcp_plan_t *p, int32_t num_kinds);
/* Gives every view the plan's shared data (after the plan's rows and buffers are derived):
 * its arrays, sizes and serial, its kind's programs, the fingerprint with its kind. */
void dcp_plan_kinds_sync(dcp_plan_t *p);

/* The cost model's time (ms) of moving every token whose owner differs between the local
 * layouts of plans a and b (the same lengths on the same cluster) to its owner in b, row_bytes
 * a token: each rank's bytes sent and received per link class over the cluster model's
 * bandwidths (a device's links work in parallel, each direction apart, as dcp_cost_predict
 * times a phase), the busiest rank's time plus one latency; 0 when nothing moves. The price of
 * giving each layer kind its own placement: an all-to-all re-layout wherever the model goes
 * from a layer of one kind to one of another (dcp-plan --layers --compare). */
dcp_status_t dcp_kinds_relayout_ms(const dcp_plan_t *a, const dcp_plan_t *b, int64_t row_bytes,
                                   double *ms_out);

#endif
