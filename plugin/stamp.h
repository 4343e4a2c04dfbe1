/*
 * Call stamps: ranks that disagree stop and say so, and a rank that fails tells its peers why,
 * whatever engine carries the blocks.
 *
 * At every forward and backward call a rank sends its stamp (the plan's checksum, the pass,
 * its context's call count, the call's softmax scale) to every rank it exchanges blocks with
 * in that pass and to its two ring neighbours, and receives theirs, before the call's first
 * block transfer. Ranks that run different plans, or different calls (one skipped a step, one
 * runs its backward while the others run a forward), find a stamp that is not theirs: the call
 * fails naming both ranks and both plans, and the failure reaches the peers. The ring
 * neighbours make the check reach every rank: two ranks that run different plans may have no
 * transfer between them, but somewhere along the ring two neighbours differ.
 *
 * An exchange runs in two stages, each its own launch: the ring neighbours, then the other
 * peers. The ring stage matches whatever plans the ranks run (every rank has the same two
 * neighbours), so where the second stage cannot match (the ranks' plans name different
 * peers) the first still ends and is compared.
 *
 * Two channels, by what the engine carries (dcp_engine_t.host_stamps):
 *  - host: the stamps are host memory (tag space DCP_TAG_STAMP, the sender's rank in the
 *    tag), waited for on the host at the call's first COMM_WAIT and compared there, before
 *    its blocks are waited for; a failing rank's abort notice travels through the engine.
 *  - device (NCCL, and a routing engine with an NCCL leg: whichever leg reaches a peer
 *    carries its stamps): the stamps live in the context's device memory (DCP_TAG_NOTICE) and
 *    travel as ordinary ops, queued on the GPU with no host wait; the received ones are copied
 *    back to page-locked memory on the transfer stream, and compared by the first call (or
 *    dcp_context_synchronize) that finds the copy done, at the latest when their slot comes
 *    round again (DCP_STAMP_SLOTS calls later), where a call waits for them. The engine has
 *    no notices of its own, so a stamp carries one: a rank that fails before its stamps go
 *    out sends a notice in their place (failed, with the reason), which ends its peers' next
 *    check with DCP_ERR_PEER naming it and the reason.
 */
#ifndef DCP_PLUGIN_STAMP_H
#define DCP_PLUGIN_STAMP_H

#include "include/base/descr.h"
#include "include/dcp.h"
#include "transport/engine.h"

#include <stdint.h>

typedef struct {
    uint32_t magic;    /* DCP_STAMP_MAGIC */
    uint32_t checksum; /* dcp_plan_checksum() */
    uint64_t call;     /* the sender context's forward and backward calls before this one */
    int32_t pass;      /* dcp_pass_t */
    int32_t rank;      /* the sender */
    float scale;       /* the call's softmax scale (the plan's when the call gives none) */
    uint32_t failed;   /* 1: a notice: the sender failed, `reason` says why */
    char reason[DCP_ABORT_REASON_CAP];
    uint32_t flags; /* what the call adds that every rank must join: DCP_STAMP_* */
} dcp_stamp_t;

/* The call reduces the max logit over every rank (plugin/variants.h). */
#define DCP_STAMP_MAX_LOGIT 1u

/* Exchanges whose received stamps may wait for their check (device channel). */
#define DCP_STAMP_SLOTS 4

/* One exchange: this rank's stamp, then the peers', in host memory and (device channel) in
 * device memory; the peers ring stage first. */
typedef struct {
    dcp_stamp_t *host; /* [1 + cap] */
    dcp_stamp_t *dev;  /* [1 + cap]; the device channel's, else == host */
    int32_t *peers;    /* [cap] */
    int32_t cap;
    int32_t n, nring; /* peers, and those of the ring stage (the first nring) */
    void **done;      /* device channel: [2 cap] each op's arrival (send k: 2k, receive
                         k: 2k + 1), the engines' done events */
    void *landed[2];  /* device channel: stage s's stamps are back in host memory */
    int32_t todo[2];  /* stage s launched (1), copied back (2), compared or dropped (0) */
} dcp_stamp_slot_t;

typedef struct {
    int device;                     /* the device channel (set once, at context creation) */
    uint64_t serial;                /* the plan the peer lists were made for; 0: none */
    int32_t kind;                   /* and its layer kind (partition/plan/plan.h) */
    int32_t *peers[DCP_PASS_COUNT]; /* per pass, ascending, without this rank */
    int32_t npeers[DCP_PASS_COUNT];
    int32_t last_pass; /* the pass of the last exchange launched */
    dcp_stamp_slot_t slot[DCP_STAMP_SLOTS];
    uint64_t launched;      /* context call count + 1 of the last exchange; 0: none */
    int32_t cur;            /* the slot of the exchange in flight */
    dcp_xfer_req_t *req[2]; /* its stages in flight; NULL: none */
    dcp_xfer_op_t *ops;     /* scratch of one stage: 2 per peer */
    int64_t ops_cap;
    void *ready; /* device channel: this rank's stamp is on the device */
} dcp_stamps_t;

typedef struct dcp_context dcp_context_t;
typedef struct dcp_plan dcp_plan_t;

/* Chooses the channel for the context's engine (host_stamps). */
void dcp_stamps_init(dcp_context_t *ctx);

/* Starts the exchange of this call's stamps (the context's call count is this call's;
 * `scale` the softmax scale the call computes with, `flags` its DCP_STAMP_* bits). */
dcp_status_t dcp_stamps_launch(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                               float scale, uint32_t flags);

/* Completes the exchange in flight (a no-op when none): the host channel waits for it and
 * compares; the device channel queues the copy back and compares what has landed. A
 * difference: DCP_ERR_INVALID_ARG naming both ranks and plans; a peer's notice: DCP_ERR_PEER
 * naming it and its reason. */
dcp_status_t dcp_stamps_settle(dcp_context_t *ctx);

/* Device channel: compares the exchanges of earlier calls whose stamps have landed (wait 0),
 * or waits for them until `deadline` (dcp_now() seconds) and compares them all (wait 1;
 * DCP_ERR_TIMEOUT naming the peers whose stamps did not come). DCP_OK on the host channel. */
dcp_status_t dcp_stamps_check(dcp_context_t *ctx, int wait, double deadline);

/* Device channel, after a failure of this call (plan p, may be NULL, and pass) before its
 * stamps went out, or of dcp_context_abort() (p NULL: the peers of the last exchange): sends
 * this rank's notice with `reason` in place of its stamps and lets it travel for up to about
 * a second. A no-op on the host channel (the engine's abort carries the reason). */
void dcp_stamps_notify(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass,
                       const char *reason);

/* The peers of the last exchange (NULL, 0: none), for messages. */
const int32_t *dcp_stamps_last_peers(const dcp_context_t *ctx, int32_t *n_out);

/* Withdraws the exchange in flight after a failure and drops the unchecked ones. */
void dcp_stamps_cancel(dcp_context_t *ctx);

/* Frees everything (after the engine is gone: it may hold transfers into the stamps). */
void dcp_stamps_free(dcp_context_t *ctx);

#endif
