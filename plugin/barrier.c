/* dcp_context_barrier: a dissemination barrier over the context's engine (ceil(log2 n)
 * rounds; in round k each rank signals rank + 2^k and hears from rank - 2^k), so that it
 * fails like a forward pass - DCP_ERR_PEER or DCP_ERR_TIMEOUT - instead of hanging when a
 * rank is gone. GPU contexts signal with device bytes, which every engine can move. */
#include "include/base/error.h"
#include "plugin/context.h"

dcp_status_t dcp_context_barrier(dcp_context_t *ctx)
{
    if (!ctx) return dcp_set_error(DCP_ERR_INVALID_ARG, "ctx is NULL");
    dcp_engine_t *e = ctx->engine;
    DCP_CHECK(dcp_context_health(ctx)); /* relayed, as on entering a call */
    const int32_t n = e->size, r = e->rank;
    const uint64_t seq = ctx->barriers++;
    char host[2] = {1, 0};
    char *out = ctx->sync_dev ? ctx->sync_dev : &host[0];
    char *in = ctx->sync_dev ? ctx->sync_dev + 1 : &host[1];
    dcp_status_t st = DCP_OK;
    for (int32_t k = 1, round = 0; k < n && st == DCP_OK; k <<= 1, round++) {
        const uint64_t tag = DCP_TAG_SYNC | (seq & 0xffffffffu) << 8 | (uint64_t)round;
        const dcp_xfer_op_t ops[2] = {{(r + k) % n, 1, tag, out, 1, NULL, NULL},
                                      {(r - k + n) % n, 0, tag, in, 1, NULL, NULL}};
        dcp_xfer_req_t *req = NULL;
        st = e->ops->launch(e, ops, 2, &req);
        if (st == DCP_OK) st = e->ops->wait(e, req, ctx->timeout_s, NULL);
        if (st != DCP_OK) {
            e->ops->abort(e, dcp_last_error());
            e->ops->cancel(e, req);
        }
    }
    return st;
}
