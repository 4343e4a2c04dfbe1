#include "transport/staged.h"

#include "include/base/error.h"
#include "include/base/poll.h"

#include <stdlib.h>
#include <string.h>

/* Host buffers kept for reuse: at most this many (a launch in flight holds one). */
#define POOL 16

typedef struct {
    void *ptr;
    size_t cap;
    int busy;
} buf_t;

typedef struct {
    dcp_engine_t base;
    dcp_engine_t *inner;
    dcp_stager_t st;
    buf_t pool[POOL];
} staged_engine_t;

struct dcp_xfer_req {
    int64_t n;
    dcp_xfer_req_t **sub; /* one inner request per op, NULL once complete */
    dcp_xfer_op_t *ops;   /* the caller's ops */
    size_t *off;          /* each op's place in the host buffer */
    buf_t *buf;
};

static dcp_status_t take(staged_engine_t *e, size_t bytes, buf_t **out)
{
    buf_t *spare = NULL;
    for (int i = 0; i < POOL; i++) {
        buf_t *b = &e->pool[i];
        if (b->busy) continue;
        if (b->cap >= bytes) {
            b->busy = 1;
            *out = b;
            return DCP_OK;
        }
        if (!spare) spare = b;
    }
    if (!spare)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "staged: more than %d launches in flight", POOL);
    if (spare->ptr) e->st.host_free(e->st.user, spare->ptr);
    spare->cap = 0;
    if (!(spare->ptr = e->st.host_alloc(e->st.user, bytes ? bytes : 1)))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "staged: %zu bytes of page-locked host memory",
                             bytes);
    spare->cap = bytes;
    spare->busy = 1;
    *out = spare;
    return DCP_OK;
}

static void free_req(dcp_xfer_req_t *r)
{
    if (!r) return;
    if (r->buf) r->buf->busy = 0;
    free(r->sub);
    free(r->ops);
    free(r->off);
    free(r);
}

static void staged_cancel(dcp_engine_t *base, dcp_xfer_req_t *r)
{
    staged_engine_t *e = (staged_engine_t *)base;
    if (!r) return;
    for (int64_t k = 0; k < r->n; k++)
        if (r->sub[k]) e->inner->ops->cancel(e->inner, r->sub[k]);
    (void)e->st.sync(e->st.user); /* no copy may still touch the buffer */
    free_req(r);
}

static dcp_status_t staged_launch(dcp_engine_t *base, const dcp_xfer_op_t *ops, int64_t n,
                                  dcp_xfer_req_t **req_out)
{
    staged_engine_t *e = (staged_engine_t *)base;
    dcp_xfer_req_t *r = NULL;
    dcp_status_t st;
    DCP_CHECK(dcp_calloc(&r, 1, sizeof *r, "staged request"));
    r->n = n;
    size_t total = 0;
    DCP_CHECK_GOTO(dcp_calloc(&r->sub, n, sizeof *r->sub, "staged request"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&r->ops, n, sizeof *r->ops, "staged request"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&r->off, n, sizeof *r->off, "staged request"), st, err);
    for (int64_t k = 0; k < n; k++) {
        r->ops[k] = ops[k];
        r->off[k] = total;
        total += (ops[k].bytes + 63) & ~(size_t)63;
    }
    DCP_CHECK_GOTO(take(e, total, &r->buf), st, err);
    char *host = r->buf->ptr;
    int sends = 0;
    for (int64_t k = 0; k < n; k++)
        if (ops[k].send && ops[k].bytes && !dcp_tag_is_host_stamp(ops[k].tag)) {
            DCP_CHECK_GOTO(e->st.copy(e->st.user, host + r->off[k], ops[k].ptr, ops[k].bytes), st,
                           err);
            sends = 1;
        }
    if (sends) DCP_CHECK_GOTO(e->st.sync(e->st.user), st, err);
    for (int64_t k = 0; k < n; k++) {
        dcp_xfer_op_t op = ops[k];
        if (!dcp_tag_is_host_stamp(op.tag)) op.ptr = host + r->off[k]; /* stamps: host memory */
        op.ready = op.done = NULL;
        DCP_CHECK_GOTO(e->inner->ops->launch(e->inner, &op, 1, &r->sub[k]), st, err);
    }
    *req_out = r;
    return DCP_OK;
err:
    staged_cancel(base, r);
    return st;
}

/* Op k's inner request is done: freed, and a receive's copy to the device queued. */
static dcp_status_t complete(staged_engine_t *e, dcp_xfer_req_t *r, int64_t k)
{
    DCP_CHECK(e->inner->ops->wait(e->inner, r->sub[k], 0, NULL));
    r->sub[k] = NULL;
    const dcp_xfer_op_t *op = &r->ops[k];
    if (op->send || !op->bytes || dcp_tag_is_host_stamp(op->tag)) return DCP_OK;
    return e->st.copy(e->st.user, op->ptr, (char *)r->buf->ptr + r->off[k], op->bytes);
}

/* Completes what has arrived; *left_out: the ops still in flight. */
static dcp_status_t harvest(staged_engine_t *e, dcp_xfer_req_t *r, int64_t *left_out)
{
    int64_t left = 0;
    for (int64_t k = 0; k < r->n; k++) {
        if (!r->sub[k]) continue;
        int done = 0;
        DCP_CHECK(e->inner->ops->test(e->inner, r->sub[k], &done));
        if (done)
            DCP_CHECK(complete(e, r, k));
        else
            left++;
    }
    *left_out = left;
    return DCP_OK;
}

static dcp_status_t staged_test(dcp_engine_t *base, dcp_xfer_req_t *r, int *done_out)
{
    int64_t left = 0;
    DCP_CHECK(harvest((staged_engine_t *)base, r, &left));
    *done_out = left == 0;
    return DCP_OK;
}

static dcp_status_t staged_wait(dcp_engine_t *base, dcp_xfer_req_t *r, double timeout_s,
                                void *stream)
{
    (void)stream; /* complete on the host: the copies are done when this returns */
    staged_engine_t *e = (staged_engine_t *)base;
    const double deadline = dcp_now() + timeout_s;
    for (dcp_poll_t poll = dcp_poll_start();; dcp_poll_pause(&poll)) {
        int64_t left = 0;
        DCP_CHECK(harvest(e, r, &left));
        if (left == 0) break;
        DCP_CHECK(e->inner->ops->health(e->inner));
        if (dcp_now() > deadline) /* the first op still in flight times out in its engine */
            for (int64_t k = 0; k < r->n; k++)
                if (r->sub[k]) {
                    DCP_CHECK(complete(e, r, k));
                    break;
                }
    }
    DCP_CHECK(e->st.sync(e->st.user));
    free_req(r);
    return DCP_OK;
}

static dcp_status_t staged_register(dcp_engine_t *base, void *ptr, size_t bytes)
{
    (void)base, (void)ptr, (void)bytes; /* device regions never reach the inner engine */
    return DCP_OK;
}

static void staged_deregister(dcp_engine_t *base, void *ptr)
{
    (void)base, (void)ptr;
}

static void staged_abort(dcp_engine_t *base, const char *reason)
{
    staged_engine_t *e = (staged_engine_t *)base;
    e->inner->ops->abort(e->inner, reason);
}

static dcp_status_t staged_health(dcp_engine_t *base)
{
    staged_engine_t *e = (staged_engine_t *)base;
    return e->inner->ops->health(e->inner);
}

static void staged_destroy(dcp_engine_t *base)
{
    staged_engine_t *e = (staged_engine_t *)base;
    dcp_engine_destroy(e->inner); /* first: after a failure it may still use the buffers */
    for (int i = 0; i < POOL; i++)
        if (e->pool[i].ptr) e->st.host_free(e->st.user, e->pool[i].ptr);
    if (e->st.release) e->st.release(e->st.user);
    free(e);
}

static const dcp_engine_ops_t staged_ops = {
    .name = "staged",
    .mem_register = staged_register,
    .mem_deregister = staged_deregister,
    .launch = staged_launch,
    .test = staged_test,
    .wait = staged_wait,
    .cancel = staged_cancel,
    .abort = staged_abort,
    .health = staged_health,
    .destroy = staged_destroy,
};

dcp_status_t dcp_staged_engine_create(dcp_engine_t *inner, const dcp_stager_t *stager,
                                      dcp_engine_t **engine_out)
{
    if (!inner || !stager || !stager->host_alloc || !stager->host_free || !stager->copy ||
        !stager->sync || !engine_out) {
        dcp_engine_destroy(inner);
        if (stager && stager->release) stager->release(stager->user);
        return dcp_set_error(DCP_ERR_INVALID_ARG, "staged: inner engine, stager and engine_out "
                                                  "must be given, with every stager entry");
    }
    staged_engine_t *e = NULL;
    const dcp_status_t st = dcp_calloc(&e, 1, sizeof *e, "staged engine");
    if (st != DCP_OK) {
        dcp_engine_destroy(inner);
        if (stager->release) stager->release(stager->user);
        return st;
    }
    e->base = (dcp_engine_t){&staged_ops, inner->rank,           inner->size,
                             0,           inner->needs_progress, inner->host_stamps};
    e->inner = inner;
    e->st = *stager;
    *engine_out = &e->base;
    return DCP_OK;
}
