/*
 * Call stamps: ranks that disagree stop at once and say so.
 *
 * At every forward and backward call a rank sends its stamp (the plan's checksum, the pass,
 * its context's call count, the call's softmax scale) to every rank it exchanges blocks with
 * in that pass and to its two
 * ring neighbours, and receives theirs, in the call's first exchange. Ranks that run
 * different plans, or different calls (one skipped a step, one runs its backward while the
 * others run a forward), find a stamp that is not theirs: the call fails naming both ranks
 * and both plans, and the abort carries that text to every peer, so the whole job stops
 * within a message's latency instead of waiting out the timeout. The ring neighbours make
 * the check reach every rank: two ranks that run different plans may have no transfer
 * between them, but somewhere along the ring two neighbours differ.
 *
 * Stamps are host memory on every engine (tag space DCP_TAG_STAMP, the sender's rank in the
 * tag, matched first posted first served); NCCL moves device memory only and skips them, so a
 * receive it skipped stays zero and is not compared.
 */
#ifndef DCP_PLUGIN_STAMP_H
#define DCP_PLUGIN_STAMP_H

#include "include/base/descr.h"
#include "include/dcp.h"
#include "transport/engine.h"

#include <stdint.h>

typedef struct {
    uint32_t magic;    /* DCP_STAMP_MAGIC; 0 in a receive no engine filled */
    uint32_t checksum; /* dcp_plan_checksum() */
    uint64_t call;     /* the sender context's forward and backward calls before this one */
    int32_t pass;      /* dcp_pass_t */
    int32_t rank;      /* the sender */
    float scale;       /* the call's softmax scale (the plan's when the call gives none) */
    uint32_t flags;    /* what the call adds that every rank must join: DCP_STAMP_* */
} dcp_stamp_t;

/* The call reduces the max logit over every rank (plugin/variants.h). */
#define DCP_STAMP_MAX_LOGIT 1u

typedef struct {
    uint64_t serial;                /* the plan the peer lists were made for; 0: none */
    int32_t kind;                   /* and its layer kind (partition/plan.h) */
    int32_t *peers[DCP_PASS_COUNT]; /* per pass, ascending, without this rank */
    int32_t npeers[DCP_PASS_COUNT];
    dcp_stamp_t mine;
    dcp_stamp_t *theirs; /* one per peer of the exchange in flight */
    dcp_xfer_op_t *ops;  /* 2 per peer */
    dcp_xfer_req_t *req; /* the exchange in flight; NULL: none */
    int32_t n;           /* its peers */
    int32_t cap;
} dcp_stamps_t;

typedef struct dcp_context dcp_context_t;
typedef struct dcp_plan dcp_plan_t;

/* Starts the exchange of this call's stamps (the context's call count is this call's;
 * `scale` the softmax scale the call computes with, `flags` its DCP_STAMP_* bits). */
dcp_status_t dcp_stamps_launch(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                               float scale, uint32_t flags);

/* Waits for the exchange in flight (a no-op when none) and compares every stamp with this
 * rank's: DCP_ERR_INVALID_ARG naming both ranks and plans at the first difference. */
dcp_status_t dcp_stamps_settle(dcp_context_t *ctx);

/* Withdraws the exchange in flight after a failure. */
void dcp_stamps_cancel(dcp_context_t *ctx);

void dcp_stamps_free(dcp_stamps_t *s);

#endif
