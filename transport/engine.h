/*
 * The block-transfer engine interface. An engine moves contiguous regions between ranks:
 * launch() starts a group of sends and receives at once and returns a request; test() and
 * wait() complete it. Messages are matched by (peer, tag). Engines: in-process (threads of
 * one process) here; UCX and NCCL behind the same table.
 *
 * Stream order (ranks on GPUs): an op may carry two events of the rank's device. `ready`
 * marks the kernels that wrote (send) or last read (receive) its region: the engine starts
 * moving bytes only after it. `done` is recorded where the bytes have moved, on whatever
 * stream moved them. wait() with a stream then orders later work on that stream after
 * every op's completion instead of waiting on the host, where the engine can (NCCL,
 * in-process device copies); host-memory engines (UCX) complete on the host either way.
 * The events are the caller's and must not be recorded again before the wait returns.
 *
 * Ownership: a launched region must stay valid and untouched until its request completes.
 * wait() frees the request on success; on failure the request stays alive and the caller
 * must cancel() it, which withdraws what can be withdrawn and frees the request. What could
 * not be withdrawn (a send to a dead peer) may reference its region until the engine is
 * destroyed.
 */
#ifndef DCP_TRANSPORT_ENGINE_H
#define DCP_TRANSPORT_ENGINE_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

/* Tag spaces: bit 63 the engines' own control messages (launch() refuses it), bit 62 the
 * context's barriers, bit 61 call stamps (plugin/stamp.h; the sender's rank in the low 32
 * bits): host memory where the engine carries it (host_stamps), else with bit 60 set the
 * context's device memory (DCP_TAG_NOTICE: stamps that also carry abort notices); below them
 * a plan's block transfers (bit 61 clear). */
#define DCP_TAG_CONTROL (1ull << 63)
#define DCP_TAG_SYNC    (1ull << 62)
#define DCP_TAG_STAMP   (1ull << 61)
#define DCP_TAG_NOTICE  (DCP_TAG_STAMP | 1ull << 60)

/* A block transfer's tag: 29 bits of the plan's fingerprint (ranks that run different plans
 * do not match each other's blocks) and the transfer's index. */
static inline uint64_t dcp_tag_data(uint32_t fingerprint, uint32_t transfer)
{
    return (uint64_t)(fingerprint & 0x1fffffffu) << 32 | transfer;
}

static inline int dcp_tag_is_stamp(uint64_t tag)
{
    return (tag & (DCP_TAG_CONTROL | DCP_TAG_SYNC | DCP_TAG_STAMP)) == DCP_TAG_STAMP;
}

/* A stamp in host memory (an engine that moves device memory leaves its pointer alone). */
static inline int dcp_tag_is_host_stamp(uint64_t tag)
{
    return dcp_tag_is_stamp(tag) && (tag & DCP_TAG_NOTICE) != DCP_TAG_NOTICE;
}

/* The longest failure reason an abort carries to the peers (bytes, with the terminator). */
#define DCP_ABORT_REASON_CAP 256

typedef struct {
    int32_t peer;
    int32_t send; /* 1: send ptr[0..bytes) to peer; 0: receive into it from peer */
    uint64_t tag;
    void *ptr;
    size_t bytes;
    void *ready; /* event after which the region may be read or written; NULL: now */
    void *done;  /* event recorded when the bytes have moved; NULL: none */
} dcp_xfer_op_t;

typedef struct dcp_engine dcp_engine_t;
typedef struct dcp_xfer_req dcp_xfer_req_t;

typedef struct {
    const char *name;
    /* Makes [ptr, ptr + bytes) usable for transfers (pins or maps it where needed). */
    dcp_status_t (*mem_register)(dcp_engine_t *e, void *ptr, size_t bytes);
    void (*mem_deregister)(dcp_engine_t *e, void *ptr);
    dcp_status_t (*launch)(dcp_engine_t *e, const dcp_xfer_op_t *ops, int64_t n,
                           dcp_xfer_req_t **req_out);
    dcp_status_t (*test)(dcp_engine_t *e, dcp_xfer_req_t *req, int *done_out);
    /* stream NULL: returns when every op is complete. Otherwise returns when later work on
     * `stream` (a stream of the rank's device) is ordered after every op's completion. */
    dcp_status_t (*wait)(dcp_engine_t *e, dcp_xfer_req_t *req, double timeout_s, void *stream);
    void (*cancel)(dcp_engine_t *e, dcp_xfer_req_t *req);
    /* Tells the peers that this rank has failed, and why (`reason`, may be NULL; the first
     * DCP_ABORT_REASON_CAP - 1 bytes travel): their waits end with DCP_ERR_PEER naming this
     * rank and the reason. */
    void (*abort)(dcp_engine_t *e, const char *reason);
    /* DCP_ERR_PEER when some rank of the group has failed, else DCP_OK. */
    dcp_status_t (*health)(dcp_engine_t *e);
    void (*destroy)(dcp_engine_t *e);
} dcp_engine_ops_t;

/* Every engine starts with this header. */
struct dcp_engine {
    const dcp_engine_ops_t *ops;
    int32_t rank, size;
    /* 1: ops honour their ready events and wait() orders streams (NCCL, in-process device
     * copies). 0: the caller makes the regions ready before launch() (a host wait) and the
     * ops are complete when wait() returns. */
    int32_t stream_ordered;
    /* 1: transfers move only while someone calls into the engine (UCX: its worker's
     * progress), so the executor drives test() on the requests in flight while it computes.
     * 0: they move by themselves (a copy at match time, a GPU stream). */
    int32_t needs_progress;
    /* 1: the engine moves host memory beside the blocks and its abort() tells the peers why
     * (in-process, UCX): call stamps are host memory, checked on the host. 0 (NCCL, or a
     * routing engine with an NCCL leg): neither; the context's stamps travel in its device
     * memory and carry the abort notices themselves (plugin/stamp.h). */
    int32_t host_stamps;
};

static inline void dcp_engine_destroy(dcp_engine_t *e)
{
    if (e) e->ops->destroy(e);
}

#endif
