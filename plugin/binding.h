/* What a context holds for the plan it runs: work buffers, the descriptors where the kernels
 * read them, the events that order its streams, and the transfer requests of a call. Made
 * at the first call of a plan object (binding) and kept for the next calls; buffers and
 * event pools only grow, so the calls of a training loop allocate nothing. */
#ifndef DCP_PLUGIN_BINDING_H
#define DCP_PLUGIN_BINDING_H

#include "include/base/descr.h"
#include "plugin/device_plan.h"
#include "transport/engine.h"

typedef struct {
    uint64_t serial; /* the plan bound (dcp_plan_t.serial); 0: none */
    void *work[DCP_BUF_COUNT];
    size_t work_cap[DCP_BUF_COUNT];
    dcp_dev_plan_t dev_plan; /* devices whose kernels do not read host memory */
    /* events: ready[s] marks the kernels before launch s; done[i] the arrival of the
     * rank's comm op comm_lo + i (plan-wide comm index) */
    void **ready;
    int64_t num_ready, ready_cap;
    void **done;
    int64_t num_done, done_cap;
    int64_t comm_lo;
    dcp_xfer_req_t **reqs; /* [num_phases]: the requests of a call in flight */
    int64_t reqs_cap;
    dcp_xfer_op_t *ops; /* scratch of one launch */
    int64_t ops_cap;
} dcp_binding_t;

/* Binds ctx to plan, every layer kind of it (a no-op when it is bound already). */
dcp_status_t dcp_binding_bind(dcp_context_t *ctx, const dcp_plan_t *plan);

/* Frees what the binding holds but the work buffers, which it deregisters from the engine;
 * then, once the engine is gone (after a failure it may still hold transfers into them),
 * the buffers. */
void dcp_binding_release(dcp_context_t *ctx);
void dcp_binding_free_buffers(dcp_context_t *ctx);

#endif
