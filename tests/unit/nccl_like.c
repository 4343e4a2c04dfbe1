/* The NCCL stand-in (tests/unit/nccl_like.h). */
#include "tests/unit/nccl_like.h"

#include "include/base/error.h"

#include <stdlib.h>

typedef struct {
    dcp_engine_t base;
    dcp_engine_t *inner;
    int failed;
    int64_t stamps;
} nccl_like_t;

static dcp_engine_t *inner(dcp_engine_t *e)
{
    return ((nccl_like_t *)e)->inner;
}

static dcp_status_t aborted(void)
{
    return dcp_set_error(DCP_ERR_PEER, "nccl-like: the communicator was aborted");
}

static dcp_status_t nl_register(dcp_engine_t *e, void *p, size_t b)
{
    return inner(e)->ops->mem_register(inner(e), p, b);
}

static void nl_deregister(dcp_engine_t *e, void *p)
{
    inner(e)->ops->mem_deregister(inner(e), p);
}

static dcp_status_t nl_launch(dcp_engine_t *e, const dcp_xfer_op_t *ops, int64_t n,
                              dcp_xfer_req_t **req_out)
{
    nccl_like_t *f = (nccl_like_t *)e;
    if (f->failed) return aborted();
    for (int64_t k = 0; k < n; k++)
        if (dcp_tag_is_host_stamp(ops[k].tag))
            return dcp_set_error(DCP_ERR_INTERNAL,
                                 "nccl-like: op %lld is a call stamp in host memory", (long long)k);
    for (int64_t k = 0; k < n; k++) f->stamps += dcp_tag_is_stamp(ops[k].tag);
    return f->inner->ops->launch(f->inner, ops, n, req_out);
}

static dcp_status_t nl_test(dcp_engine_t *e, dcp_xfer_req_t *r, int *done)
{
    if (((nccl_like_t *)e)->failed) return aborted();
    return inner(e)->ops->test(inner(e), r, done);
}

static dcp_status_t nl_wait(dcp_engine_t *e, dcp_xfer_req_t *r, double t, void *s)
{
    if (((nccl_like_t *)e)->failed) return aborted();
    return inner(e)->ops->wait(inner(e), r, t, s);
}

static void nl_cancel(dcp_engine_t *e, dcp_xfer_req_t *r)
{
    inner(e)->ops->cancel(inner(e), r);
}

/* NCCL has no messages of its own: nothing reaches the peers. */
static void nl_abort(dcp_engine_t *e, const char *reason)
{
    (void)reason;
    ((nccl_like_t *)e)->failed = 1;
}

static dcp_status_t nl_health(dcp_engine_t *e)
{
    return ((nccl_like_t *)e)->failed ? aborted() : DCP_OK;
}

static void nl_destroy(dcp_engine_t *e)
{
    dcp_engine_destroy(inner(e));
    free(e);
}

static const dcp_engine_ops_t nccl_like_ops = {"nccl-like", nl_register, nl_deregister, nl_launch,
                                               nl_test,     nl_wait,     nl_cancel,     nl_abort,
                                               nl_health,   nl_destroy};

dcp_status_t t_nccl_like_create(dcp_inproc_hub_t *hub, int32_t rank, int ordered,
                                dcp_engine_t **engine_out)
{
    nccl_like_t *f = NULL;
    DCP_CHECK(dcp_calloc(&f, 1, sizeof *f, "nccl-like engine"));
    const dcp_status_t st = dcp_inproc_engine_create(hub, rank, &f->inner);
    if (st != DCP_OK) {
        free(f);
        return st;
    }
    f->base = (dcp_engine_t){&nccl_like_ops, rank, f->inner->size, ordered != 0, 0, 0};
    *engine_out = &f->base;
    return DCP_OK;
}

int64_t t_nccl_like_stamps(const dcp_engine_t *e)
{
    return ((const nccl_like_t *)e)->stamps;
}
