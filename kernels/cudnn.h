/*
 * cuDNN's fused attention (SDPA) as the dense engine of the attention engine
 * (kernels/segment.h), loaded at run time so that libdcp has no hard dependency on it.
 *
 * The library is dlopen'ed when a GPU context is created: $DCP_CUDNN_LIB, else
 * libcudnn.so.9 through the loader's search path (the PyTorch wheel's nvidia/cudnn/lib on a
 * GPU machine; tests/perf/gpu_check.sh sets both). cudnnGetVersion() decides what it runs
 * (dcp_cudnn_policy): the fused ("unified") SDPA operations of the backend graph API, built
 * from C (no frontend), over packed ragged entries with per-entry lengths:
 *   9.15.0  CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR takes per-sequence lengths
 *           (the padding mask that ragged entries need): FULL segments, forward;
 *   9.21.0  a score-modifier subgraph (CUDNN_ATTR_OPERATION_SDPA_FWD_SUBGRAPH) with the
 *           diagonal-band mask operation (9.20.0): CAUSAL segments, bottom-right aligned (the
 *           band's right edge at row + s_kv - s_q, CMP_GE), forward;
 *   9.28.0  CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR with packed layouts, lengths and the
 *           subgraph: the backward (the operation is in 9.17's headers, but cuDNN's heuristics
 *           propose its engines only from 9.27.0, and with packed layouts from 9.28.0).
 * The composite graph that cuDNN's frontend builds for older versions (matmul, pointwise,
 * reduction and softmax operations in the exact pattern the fused engines match) is not
 * built here: where the fused operations are missing, the segments run on dcp's kernels.
 * Versions with known SDPA defects are refused by name (9.10.0, 9.10.1: fp16/bf16 forward
 * and backward; cuDNN's frontend support surface blocks them). 9.14.0's defect (sliding
 * window, non-causal, s_kv > 1024) and 9.15.0's (backward without padding mask under CUDA
 * graph replay) do not touch the graphs dcp builds. The statistics output is the natural log
 * of the sum of the exponentiated scaled scores (max + ln sum exp; the frontend's
 * stats_use_log2 is off by default): the LSE of dcp's merges, unit for unit.
 *
 * Execution plans are built when a plan is bound (dcp_cudnn_prepare), one per (pass, class,
 * heads, KV heads, head dim, dtype, batch capacity, longest-entry buckets), cached per context
 * (a cuDNN handle is used by one thread); a call then only sets the stream and executes a
 * variant pack made at bind time. With `deterministic`, engine configurations that cuDNN
 * marks non-deterministic are skipped.
 */
#ifndef DCP_KERNELS_CUDNN_H
#define DCP_KERNELS_CUDNN_H

#include "kernels/segment.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_cudnn dcp_cudnn_t;

/* The segment classes (DCP_SEG_BIT set) cuDNN `version` runs for the forward (backward 0)
 * or the backward (1); 0 with *why set when it runs none (why is a static sentence). */
int32_t dcp_cudnn_policy(int64_t version, int backward, const char **why);

/* dcp_cudnn_policy, unless $DCP_CUDNN_UNGATED is set (not "0"): then every class is tried on
 * any version but the refused ones, for proving a cuDNN the policy does not know yet on a GPU
 * (dcp-attn-test --engine cudnn --check); *why says so. What the engine and the bench use. */
int32_t dcp_cudnn_classes(int64_t version, int backward, const char **why);

/* "9.15.1" from 91501 (cudnnGetVersion()'s encoding since 9.0). */
void dcp_cudnn_version_string(int64_t version, char *buf, size_t cap);

/* Loads cuDNN and makes a handle on `device` (the caller's current device). Fails with
 * DCP_ERR_UNSUPPORTED (the message says why: not built with CUDA, library not found, a
 * symbol missing, the version refused, no handle) and leaves *out NULL. */
dcp_status_t dcp_cudnn_open(int32_t device, int deterministic, dcp_cudnn_t **out);
void dcp_cudnn_close(dcp_cudnn_t *c);

/* The loaded library's version (0 for NULL). */
int64_t dcp_cudnn_version(const dcp_cudnn_t *c);

typedef struct {
    int64_t plans;       /* execution plans built */
    int64_t hits;        /* calls prepared with a plan already built */
    double build_ms;     /* time spent building plans */
    size_t workspace;    /* bytes of the largest plan's workspace */
} dcp_cudnn_stats_t;

void dcp_cudnn_stats(const dcp_cudnn_t *c, dcp_cudnn_stats_t *out);

/* Builds (or finds) the execution plans of every dense call of `prog` and the variant packs
 * that run them on the context's engine buffers: seg and seg32 (DCP_BUF_SEG, DCP_BUF_SEG32)
 * and ints (the program's int arrays, device memory), which must stay put until the next
 * prepare of the same `slot` (one per pass). dtype, heads, head_dim and scale from env. */
dcp_status_t dcp_cudnn_prepare(dcp_cudnn_t *c, int slot, const dcp_seg_prog_t *prog,
                               const dcp_kernel_env_t *env, const int32_t *ints);

/* The dense engine over c: runs the calls prepared for `slot` (the state is the slot). */
dcp_dense_engine_t dcp_cudnn_engine(dcp_cudnn_t *c, int slot);

/* Without a GPU: builds and finalizes the tensor and operation descriptors of one dense
 * call (as dcp_cudnn_prepare would, up to the operation graph, which needs a handle) with
 * the library found as dcp_cudnn_open finds it, so that attribute names, types and values
 * are checked by the real library here. The version in *version_out (0: none loaded).
 * DCP_ERR_UNSUPPORTED when no library loads. */
dcp_status_t dcp_cudnn_check_descriptors(int backward, int causal, dcp_dtype_t dtype,
                                         int32_t q_heads, int32_t kv_heads, int32_t head_dim,
                                         int64_t *version_out);

#ifdef __cplusplus
}
#endif

#endif
