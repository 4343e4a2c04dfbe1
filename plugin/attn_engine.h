/* The attention engine of a context (dcp_context_config_t.attn_engine): which engine runs the
 * dense segments of its launches, the segment programs of the plan it is bound to
 * (kernels/segment.h), their staging buffers, and cuDNN (kernels/cudnn.h). */
#ifndef DCP_PLUGIN_ATTN_ENGINE_H
#define DCP_PLUGIN_ATTN_ENGINE_H

#include "include/dcp.h"
#include "kernels/cudnn.h"
#include "kernels/segment.h"
#include "plugin/dev_blob.h"

typedef enum {
    DCP_ATTN_AUTO = 0,
    DCP_ATTN_OWN = 1,
    DCP_ATTN_CUDNN = 2,
    DCP_ATTN_TWIN = 3,
    DCP_ATTN_KINDS = 4
} dcp_attn_kind_t;

/* The segment program of one pass of the bound plan. */
typedef struct {
    dcp_seg_prog_t prog;
    int64_t *launch_of; /* [ninstr]: the launch of instruction first_instr + i, -1 when none */
    int64_t first_instr, ninstr, launch_cap;
    dcp_dev_blob_t blob;     /* device copy of the program's arrays (GPU contexts) */
    dcp_seg_arrays_t arrays; /* where the kernels read them */
} dcp_attn_pass_t;

typedef struct {
    dcp_attn_kind_t requested, active;
    char note[512];
    int deterministic;
    int32_t min_rows; /* dense runs shorter than this go to dcp's kernels ($DCP_ATTN_MIN_ROWS) */
    int32_t dense[DCP_PASS_COUNT]; /* classes the active engine takes per pass */
    dcp_cudnn_t *cudnn;
    uint64_t serial; /* the plan the programs are for; 0: none */
    int32_t kind;    /* and its layer kind (views share their plan's serial) */
    dcp_attn_pass_t pass[DCP_PASS_COUNT];
    void *seg, *seg32; /* staging: DCP_BUF_SEG, DCP_BUF_SEG32 */
    size_t seg_cap, seg32_cap;
    size_t elem_bytes; /* of the bound plan's dtype */
    int64_t pairs[DCP_SEG_CLASSES], pairs_bwd[DCP_SEG_CLASSES];
    int64_t bwd_launches, bwd_waves; /* dcp_attn_engine_info_t's */
} dcp_attn_state_t;

struct dcp_context;

/* At context creation, once the device is known: the engine from the config or
 * $DCP_ATTN_ENGINE, cuDNN loaded where it is asked for. */
dcp_status_t dcp_attn_init(struct dcp_context *ctx, const dcp_context_config_t *config);

/* At binding: the segment programs of `plan` for this rank, their staging, their device copy
 * and cuDNN's plans (a no-op with the own engine or when bound already). With "auto", a plan
 * cuDNN cannot build sends the context to its own kernels (the note says why). */
dcp_status_t dcp_attn_bind(struct dcp_context *ctx, const dcp_plan_t *plan);

/* The launch instruction `instr` of `pass` runs as, or -1 when it runs the plain tile list. */
int64_t dcp_attn_launch(const struct dcp_context *ctx, dcp_pass_t pass, int64_t instr);

/* Runs launch `launch` of `pass` on env (the executor's, the engine buffers added here). */
dcp_status_t dcp_attn_run(struct dcp_context *ctx, dcp_pass_t pass, int64_t launch,
                          const dcp_kernel_env_t *env);

void dcp_attn_release(struct dcp_context *ctx);

/* A segment program's arrays where the kernels of `device` read them: on the CPU the
 * program's own (dcp_seg_host_arrays), on a GPU one device allocation of `blob` (grown as
 * needed; free with dcp_dev_blob_free) filled from its page-locked staging, queued on `stream`.
 * How a context's binding places its programs, and dcp-kernel-bench its cases. */
dcp_status_t dcp_attn_upload(const dcp_seg_prog_t *prog, int32_t device, void *stream,
                             dcp_dev_blob_t *blob, dcp_seg_arrays_t *arrays_out);

/* "auto", "own", "cudnn", "twin". */
const char *dcp_attn_kind_name(dcp_attn_kind_t kind);

#endif
