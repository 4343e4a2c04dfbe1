#include "transport/inproc.h"

#include "include/base/error.h"
#include "include/base/test_hook.h"
#include "include/base/timeout.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct dcp_xfer_req {
    int64_t remaining; /* operations not yet matched; guarded by the hub's done_mu */
    int64_t n;
    dcp_xfer_op_t *ops;
    int mismatch; /* a peer posted a different size for one of the tags */
    int copy_failed;
    /* the first op that failed: its peer, direction, and the rank that copied its bytes */
    int32_t bad_peer, bad_send, copier;
};

typedef struct {
    int32_t src;
    dcp_xfer_op_t op; /* as its rank posted it */
    dcp_xfer_req_t *req;
} pending_t;

typedef struct {
    pthread_mutex_t mu;
    pending_t *sends; /* posted to this rank, unmatched */
    pending_t *recvs; /* posted by this rank, unmatched */
    int64_t nsends, nrecvs, cap_sends, cap_recvs;
} mailbox_t;

struct dcp_inproc_hub {
    int32_t size;
    mailbox_t *box;
    pthread_mutex_t done_mu;
    pthread_cond_t done_cv;
    atomic_int failed_rank;            /* -1 while every rank is healthy */
    char reason[DCP_ABORT_REASON_CAP]; /* why it failed; written once, under done_mu */
    int32_t *device; /* where each rank computes (movers' devices; -1: the host) */
};

typedef struct {
    dcp_engine_t base;
    dcp_inproc_hub_t *hub;
    dcp_inproc_mover_t mover; /* copy NULL: memcpy */
} inproc_engine_t;

dcp_status_t dcp_inproc_hub_create(int32_t size, dcp_inproc_hub_t **hub_out)
{
    if (size < 1) return dcp_set_error(DCP_ERR_INVALID_ARG, "num_ranks = %d, must be >= 1", size);
    dcp_inproc_hub_t *h;
    DCP_CHECK(dcp_calloc(&h, 1, sizeof *h, "in-process hub"));
    dcp_status_t st = dcp_calloc(&h->box, size, sizeof *h->box, "in-process hub");
    if (st == DCP_OK) st = dcp_calloc(&h->device, size, sizeof *h->device, "in-process hub");
    if (st != DCP_OK) {
        free(h->box);
        free(h);
        return st;
    }
    for (int32_t r = 0; r < size; r++) h->device[r] = -1;
    h->size = size;
    for (int32_t r = 0; r < size; r++) pthread_mutex_init(&h->box[r].mu, NULL);
    pthread_mutex_init(&h->done_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&h->failed_rank, -1);
    *hub_out = h;
    return DCP_OK;
}

void dcp_inproc_hub_destroy(dcp_inproc_hub_t *hub)
{
    if (!hub) return;
    for (int32_t r = 0; r < hub->size; r++) {
        pthread_mutex_destroy(&hub->box[r].mu);
        free(hub->box[r].sends);
        free(hub->box[r].recvs);
    }
    pthread_mutex_destroy(&hub->done_mu);
    pthread_cond_destroy(&hub->done_cv);
    free(hub->box);
    free(hub->device);
    free(hub);
}

int32_t dcp_inproc_hub_size(const dcp_inproc_hub_t *hub)
{
    return hub->size;
}

/* Marks operation `op` of req done; the caller (rank `copier`) holds the mailbox lock the op
 * lived in. */
static void complete(dcp_inproc_hub_t *h, dcp_xfer_req_t *req, const dcp_xfer_op_t *op,
                     int32_t copier, int mismatch, int copy_failed)
{
    pthread_mutex_lock(&h->done_mu);
    req->remaining--;
    if ((mismatch || copy_failed) && !req->mismatch && !req->copy_failed) {
        req->bad_peer = op->peer;
        req->bad_send = op->send;
        req->copier = copier;
    }
    req->mismatch |= mismatch;
    req->copy_failed |= copy_failed;
    pthread_cond_broadcast(&h->done_cv);
    pthread_mutex_unlock(&h->done_mu);
}

static int64_t find(const pending_t *list, int64_t n, int32_t src, uint64_t tag)
{
    for (int64_t i = 0; i < n; i++)
        if (list[i].src == src && list[i].op.tag == tag) return i;
    return -1;
}

/* Keeps the order of the rest: operations with one (source, tag) match first posted, first
 * matched, as UCX and NCCL match them (call stamps reuse their tag call after call). */
static void remove_at(pending_t *list, int64_t *n, int64_t i)
{
    memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
    --*n;
}

/* Posts one operation of rank `self`: matches it against the peer's pending side, or
 * queues it. Matching copies and completes both requests under the receiver's lock. */
static dcp_status_t post(inproc_engine_t *ie, const dcp_xfer_op_t *op, dcp_xfer_req_t *req)
{
    dcp_inproc_hub_t *h = ie->hub;
    const int32_t self = ie->base.rank;
    const int32_t dst = op->send ? op->peer : self, src = op->send ? self : op->peer;
    mailbox_t *b = &h->box[dst];
    dcp_status_t st = DCP_OK;
    pthread_mutex_lock(&b->mu);
    pending_t *other = op->send ? b->recvs : b->sends;
    int64_t *nother = op->send ? &b->nrecvs : &b->nsends;
    const int64_t i = find(other, *nother, src, op->tag);
    if (i >= 0) {
        const pending_t m = other[i];
        remove_at(other, nother, i);
        const int mismatch = m.op.bytes != op->bytes;
        int copy_failed = 0;
        if (!mismatch) {
            const dcp_xfer_op_t *send = op->send ? op : &m.op, *recv = op->send ? &m.op : op;
            DCP_TEST_DELAY(DCP_DELAY_COPY);
            if (DCP_TEST_FAULT(DCP_FAULT_INPROC_COPY))
                copy_failed = 1;
            else if (ie->mover.copy && !dcp_tag_is_host_stamp(op->tag)) /* stamps: host memory */
                copy_failed = ie->mover.copy(ie->mover.user, send, recv,
                                             h->device[src] == h->device[dst]) != DCP_OK;
            else if (op->bytes > 0)
                memcpy(recv->ptr, send->ptr, op->bytes);
        }
        complete(h, m.req, &m.op, self, mismatch, copy_failed);
        complete(h, req, op, self, mismatch, copy_failed);
    } else {
        pending_t **list = op->send ? &b->sends : &b->recvs;
        int64_t *n = op->send ? &b->nsends : &b->nrecvs;
        int64_t *cap = op->send ? &b->cap_sends : &b->cap_recvs;
        st = dcp_reserve(list, cap, *n + 1, sizeof **list, "in-process mailbox");
        if (st == DCP_OK) (*list)[(*n)++] = (pending_t){src, *op, req};
    }
    pthread_mutex_unlock(&b->mu);
    return st;
}

/* Withdraws every unmatched operation of req from the mailboxes. */
static void withdraw(dcp_inproc_hub_t *h, int32_t self, dcp_xfer_req_t *req)
{
    for (int64_t k = 0; k < req->n; k++) {
        const dcp_xfer_op_t *op = &req->ops[k];
        mailbox_t *b = &h->box[op->send ? op->peer : self];
        pthread_mutex_lock(&b->mu);
        pending_t *list = op->send ? b->sends : b->recvs;
        int64_t *n = op->send ? &b->nsends : &b->nrecvs;
        for (int64_t i = 0; i < *n;)
            if (list[i].req == req)
                remove_at(list, n, i);
            else
                i++;
        pthread_mutex_unlock(&b->mu);
    }
}

static void free_req(dcp_xfer_req_t *req)
{
    if (!req) return;
    free(req->ops);
    free(req);
}

static dcp_status_t ip_launch(dcp_engine_t *e, const dcp_xfer_op_t *ops, int64_t n,
                              dcp_xfer_req_t **req_out)
{
    inproc_engine_t *ie = (inproc_engine_t *)e;
    for (int64_t k = 0; k < n; k++)
        if (ops[k].peer < 0 || ops[k].peer >= e->size || ops[k].peer == e->rank)
            return dcp_set_error(DCP_ERR_INVALID_ARG, "inproc: op %lld has peer %d of %d ranks",
                                 (long long)k, ops[k].peer, e->size);
    dcp_xfer_req_t *req;
    DCP_CHECK(dcp_calloc(&req, 1, sizeof *req, "transfer request"));
    dcp_status_t st = dcp_calloc(&req->ops, n, sizeof *req->ops, "transfer request");
    if (st != DCP_OK) {
        free(req);
        return st;
    }
    if (n > 0) memcpy(req->ops, ops, (size_t)n * sizeof *ops);
    req->n = n;
    req->remaining = n;
    for (int64_t k = 0; k < n; k++) {
        st = post(ie, &ops[k], req);
        if (st != DCP_OK) {
            withdraw(ie->hub, e->rank, req);
            free_req(req);
            return st;
        }
    }
    *req_out = req;
    return DCP_OK;
}

static dcp_status_t req_status(const dcp_engine_t *e, const dcp_xfer_req_t *req)
{
    if (!req->mismatch && !req->copy_failed) return DCP_OK;
    const char *call = req->bad_send ? "send to" : "receive from";
    if (req->mismatch)
        return dcp_set_error(DCP_ERR_INTERNAL,
                             "inproc: rank %d's %s rank %d: the two ranks posted different "
                             "sizes for one tag",
                             e->rank, call, req->bad_peer);
    return dcp_set_error(DCP_ERR_SYSTEM,
                         "inproc: rank %d's %s rank %d failed: the block copy (made by rank %d) "
                         "reported an error",
                         e->rank, call, req->bad_peer, req->copier);
}

static dcp_status_t ip_test(dcp_engine_t *e, dcp_xfer_req_t *req, int *done_out)
{
    inproc_engine_t *ie = (inproc_engine_t *)e;
    pthread_mutex_lock(&ie->hub->done_mu);
    const int done = req->remaining == 0;
    pthread_mutex_unlock(&ie->hub->done_mu);
    *done_out = done;
    return done ? req_status(e, req) : DCP_OK;
}

/* The peers' threads must post before a request completes: that part waits on the host.
 * With a mover the bytes may still be moving on a stream; `stream` is ordered after them. */
static dcp_status_t ip_wait(dcp_engine_t *e, dcp_xfer_req_t *req, double timeout_s, void *stream)
{
    inproc_engine_t *ie = (inproc_engine_t *)e;
    dcp_inproc_hub_t *h = ie->hub;
    const struct timespec deadline = dcp_deadline_after(timeout_s);
    dcp_status_t st = DCP_OK;
    pthread_mutex_lock(&h->done_mu);
    while (req->remaining > 0) {
        const int failed = atomic_load(&h->failed_rank);
        if (failed >= 0) {
            st = dcp_set_error(DCP_ERR_PEER, "inproc: rank %d failed (%s); rank %d stops waiting",
                               failed, h->reason, e->rank);
            break;
        }
        if (pthread_cond_timedwait(&h->done_cv, &h->done_mu, &deadline) == ETIMEDOUT &&
            req->remaining > 0) {
            st = dcp_set_error(DCP_ERR_TIMEOUT,
                               "inproc: rank %d waited %.1f s for %lld of %lld transfers", e->rank,
                               timeout_s, (long long)req->remaining, (long long)req->n);
            break;
        }
    }
    pthread_mutex_unlock(&h->done_mu);
    if (st == DCP_OK) st = req_status(e, req);
    for (int64_t k = 0; st == DCP_OK && stream && ie->mover.order && k < req->n; k++)
        if (req->ops[k].done) st = ie->mover.order(ie->mover.user, stream, req->ops[k].done);
    if (st == DCP_OK) free_req(req);
    return st;
}

static void ip_cancel(dcp_engine_t *e, dcp_xfer_req_t *req)
{
    if (!req) return;
    withdraw(((inproc_engine_t *)e)->hub, e->rank, req);
    free_req(req);
}

/* The first failure is kept with its reason (a rank that fails because of it keeps it). */
static void ip_abort(dcp_engine_t *e, const char *reason)
{
    dcp_inproc_hub_t *h = ((inproc_engine_t *)e)->hub;
    pthread_mutex_lock(&h->done_mu);
    int expected = -1;
    if (atomic_compare_exchange_strong(&h->failed_rank, &expected, e->rank))
        snprintf(h->reason, sizeof h->reason, "%s", reason && *reason ? reason : "no reason given");
    pthread_cond_broadcast(&h->done_cv);
    pthread_mutex_unlock(&h->done_mu);
}

static dcp_status_t ip_health(dcp_engine_t *e)
{
    dcp_inproc_hub_t *h = ((inproc_engine_t *)e)->hub;
    if (atomic_load(&h->failed_rank) < 0) return DCP_OK;
    pthread_mutex_lock(&h->done_mu); /* the reason is complete once failed_rank is set */
    const dcp_status_t st = dcp_set_error(DCP_ERR_PEER, "inproc: rank %d of the group failed (%s)",
                                          atomic_load(&h->failed_rank), h->reason);
    pthread_mutex_unlock(&h->done_mu);
    return st;
}

static dcp_status_t ip_register(dcp_engine_t *e, void *ptr, size_t bytes)
{
    (void)e, (void)ptr, (void)bytes; /* threads share one address space */
    return DCP_OK;
}

static void ip_deregister(dcp_engine_t *e, void *ptr)
{
    (void)e, (void)ptr;
}

static void ip_destroy(dcp_engine_t *e)
{
    free(e);
}

static const dcp_engine_ops_t inproc_ops = {
    .name = "inproc",
    .mem_register = ip_register,
    .mem_deregister = ip_deregister,
    .launch = ip_launch,
    .test = ip_test,
    .wait = ip_wait,
    .cancel = ip_cancel,
    .abort = ip_abort,
    .health = ip_health,
    .destroy = ip_destroy,
};

dcp_status_t dcp_inproc_engine_create(dcp_inproc_hub_t *hub, int32_t rank,
                                      dcp_engine_t **engine_out)
{
    if (!hub || !engine_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "inproc: hub and engine_out must be non-NULL");
    if (rank < 0 || rank >= hub->size)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "rank = %d, must be in [0, %d)", rank, hub->size);
    inproc_engine_t *ie;
    DCP_CHECK(dcp_calloc(&ie, 1, sizeof *ie, "in-process engine"));
    ie->base = (dcp_engine_t){&inproc_ops, rank, hub->size, 0, 0, 1};
    ie->hub = hub;
    *engine_out = &ie->base;
    return DCP_OK;
}

void dcp_inproc_engine_set_mover(dcp_engine_t *engine, const dcp_inproc_mover_t *mover,
                                 int32_t device)
{
    inproc_engine_t *ie = (inproc_engine_t *)engine;
    ie->mover = *mover;
    ie->hub->device[engine->rank] = device;
    engine->stream_ordered = 1;
}
