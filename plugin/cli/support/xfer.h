/*
 * Block transfers as the tools drive them, below the plans that dcp_forward() runs: the
 * engine of a context (dcp-calibrate measures the links its job uses), or an engine of a
 * named kind over a bootstrap (dcp-transport-bench times each one, as ucx_perftest times
 * UCX's). A send and a receive match by (peer, tag). The tools' one way to the transport
 * engines.
 */
#ifndef DCPT_SUPPORT_XFER_H
#define DCPT_SUPPORT_XFER_H

#include "include/dcp.h"

#include <stddef.h>
#include <stdint.h>

typedef struct dcpt_xfer dcpt_xfer_t;

typedef enum {
    DCPT_XFER_UCX = 0,    /* UCX: host memory, or device memory where UCX was built with CUDA */
    DCPT_XFER_STAGED = 1, /* device memory over UCX through page-locked host memory */
    DCPT_XFER_NCCL = 2,   /* NCCL: device memory */
    DCPT_XFER_INPROC = 3, /* threads of one process (a dcpt_threads_t bootstrap): host memory */
    DCPT_XFER_KINDS = 4
} dcpt_xfer_kind_t;

/* "ucx", "staged", "nccl", "inproc". */
const char *dcpt_xfer_kind_name(dcpt_xfer_kind_t kind);

typedef struct {
    int32_t peer;
    int32_t send; /* 1: send buf[0, bytes) to peer; 0: receive into it from peer */
    uint64_t tag; /* below 2^60: the tags above are the engines' and the contexts' own */
    void *buf;
    size_t bytes;
} dcpt_xfer_op_t;

/* An engine of `kind` for this rank of `bs` (collective over it, as the engines' set-up is),
 * moving memory of `gpu` (-1: host memory; the staged and NCCL engines need a GPU). Failed
 * transfers are withdrawn; the peers learn of a failure from dcpt_xfer_abort(). */
dcp_status_t dcpt_xfer_open(dcpt_xfer_kind_t kind, const dcp_bootstrap_t *bs, int32_t gpu,
                            dcpt_xfer_t **xfer_out);

/* The engine of a context, borrowed (the context must outlive it and run no call meanwhile):
 * its transfers wait at most the context's timeout, and a failed one tells the peers, as a
 * failed call of the context does. */
dcp_status_t dcpt_xfer_of_context(dcp_context_t *ctx, dcpt_xfer_t **xfer_out);

/* Makes [buf, buf + bytes) usable for transfers; and releases it. */
dcp_status_t dcpt_xfer_register(dcpt_xfer_t *x, void *buf, size_t bytes);
void dcpt_xfer_deregister(dcpt_xfer_t *x, void *buf);

/* Starts the n ops as one group and waits for all of them, at most timeout_s (0: the
 * context's timeout for a context's engine, else 60 s). The buffers must stay untouched until
 * it returns; on failure what could be withdrawn is, and a context's engine tells the peers. */
dcp_status_t dcpt_xfer_run(dcpt_xfer_t *x, const dcpt_xfer_op_t *ops, int64_t n, double timeout_s);

/* Tells every peer that this rank has failed, and why: their transfers end with DCP_ERR_PEER. */
void dcpt_xfer_abort(dcpt_xfer_t *x, const char *reason);

/* Destroys an engine dcpt_xfer_open() made; a context's stays the context's. NULL: no-op. */
void dcpt_xfer_close(dcpt_xfer_t *x);

/* 1 when this UCX moves CUDA device memory (built with CUDA). */
int dcpt_xfer_ucx_cuda(void);

#endif
