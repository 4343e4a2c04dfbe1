#include "plugin/cli/support/xfer.h"

#include "include/base/error.h"
#include "plugin/context.h"
#include "plugin/hybrid.h"
#include "plugin/job.h"
#include "transport/engine.h"
#include "transport/inproc.h"
#include "transport/nccl.h"
#include "transport/ucx.h"

#include <stdlib.h>

#define OPEN_TIMEOUT_S 60.0 /* an opened engine's transfers, when the caller gives none */

struct dcpt_xfer {
    dcp_engine_t *e;
    int owned;      /* opened here: destroyed by dcpt_xfer_close */
    int tell_peers; /* a context's engine: a failed transfer aborts, as its calls do */
    double timeout_s;
};

static const char *const kind_names[DCPT_XFER_KINDS] = {"ucx", "staged", "nccl", "inproc"};

const char *dcpt_xfer_kind_name(dcpt_xfer_kind_t kind)
{
    return (unsigned)kind < DCPT_XFER_KINDS ? kind_names[kind] : "?";
}

static dcp_status_t engine_of(dcpt_xfer_kind_t kind, const dcp_bootstrap_t *bs, int32_t gpu,
                              dcp_engine_t **out)
{
    switch (kind) {
    case DCPT_XFER_INPROC: {
        dcp_inproc_hub_t *hub = NULL;
        int32_t local = 0;
        if (!dcp_hybrid_of(bs, &hub, &local))
            return dcp_set_error(DCP_ERR_INVALID_ARG, "inproc: not a threads bootstrap");
        return dcp_inproc_engine_create(hub, local, out);
    }
    case DCPT_XFER_NCCL:
        return dcp_nccl_engine_create(bs, gpu, NULL, NULL, out);
    case DCPT_XFER_STAGED: {
        dcp_engine_t *ucx = NULL;
        DCP_CHECK(dcp_ucx_engine_create(bs, &ucx));
        return dcp_job_staged_engine(gpu, ucx, out);
    }
    case DCPT_XFER_UCX:
        return dcp_ucx_engine_create(bs, out);
    default:
        return dcp_set_error(DCP_ERR_INVALID_ARG, "transfer engine %d: unknown", (int)kind);
    }
}

dcp_status_t dcpt_xfer_open(dcpt_xfer_kind_t kind, const dcp_bootstrap_t *bs, int32_t gpu,
                            dcpt_xfer_t **xfer_out)
{
    dcpt_xfer_t *x = NULL;
    DCP_CHECK(dcp_calloc(&x, 1, sizeof *x, "transfer engine"));
    const dcp_status_t st = engine_of(kind, bs, gpu, &x->e);
    if (st != DCP_OK) {
        free(x);
        return st;
    }
    x->owned = 1;
    x->timeout_s = OPEN_TIMEOUT_S;
    *xfer_out = x;
    return DCP_OK;
}

dcp_status_t dcpt_xfer_of_context(dcp_context_t *ctx, dcpt_xfer_t **xfer_out)
{
    if (!ctx) return dcp_set_error(DCP_ERR_INVALID_ARG, "transfers: ctx is NULL");
    dcpt_xfer_t *x = NULL;
    DCP_CHECK(dcp_calloc(&x, 1, sizeof *x, "transfer engine"));
    *x = (dcpt_xfer_t){ctx->engine, 0, 1, ctx->timeout_s};
    *xfer_out = x;
    return DCP_OK;
}

dcp_status_t dcpt_xfer_register(dcpt_xfer_t *x, void *buf, size_t bytes)
{
    return x->e->ops->mem_register(x->e, buf, bytes);
}

void dcpt_xfer_deregister(dcpt_xfer_t *x, void *buf)
{
    x->e->ops->mem_deregister(x->e, buf);
}

dcp_status_t dcpt_xfer_run(dcpt_xfer_t *x, const dcpt_xfer_op_t *ops, int64_t n, double timeout_s)
{
    if (n <= 0) return DCP_OK;
    /* the benches' launches fit on the stack: no allocation inside a timed loop */
    dcp_xfer_op_t local[2 * 64], *eops = local;
    if (n > (int64_t)(sizeof local / sizeof local[0]))
        DCP_CHECK(dcp_calloc(&eops, n, sizeof *eops, "transfer ops"));
    for (int64_t i = 0; i < n; i++)
        eops[i] = (dcp_xfer_op_t){ops[i].peer,  ops[i].send, ops[i].tag, ops[i].buf,
                                  ops[i].bytes, NULL,        NULL};
    dcp_engine_t *e = x->e;
    dcp_xfer_req_t *req = NULL;
    dcp_status_t st = e->ops->launch(e, eops, n, &req);
    if (st == DCP_OK) st = e->ops->wait(e, req, timeout_s > 0 ? timeout_s : x->timeout_s, NULL);
    if (st != DCP_OK) {
        if (x->tell_peers) e->ops->abort(e, dcp_last_error());
        if (req) e->ops->cancel(e, req);
    }
    if (eops != local) free(eops);
    return st;
}

void dcpt_xfer_abort(dcpt_xfer_t *x, const char *reason)
{
    if (x) x->e->ops->abort(x->e, reason);
}

void dcpt_xfer_close(dcpt_xfer_t *x)
{
    if (!x) return;
    if (x->owned) dcp_engine_destroy(x->e);
    free(x);
}

int dcpt_xfer_ucx_cuda(void)
{
    return dcp_ucx_supports_cuda();
}
