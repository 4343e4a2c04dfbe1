/*
 * The cuDNN graphs of dense calls (CUDA builds only): for a graph key (kernels/cudnn.h), the
 * tensors and operations of the composite SDPA graph cuDNN's frontend builds, or of the fused
 * SDPA operation, as backend descriptors, ending in a finalized operation graph.
 *
 * Tensors the variant pack names have fixed unique ids (dcp_cudnn_uid_t); virtual tensors and
 * by-value scalars are numbered from DCP_CUDNN_U_FIRST_FREE in the order made, the scalars
 * listed in the graph with what they hold.
 */
#ifndef DCP_KERNELS_CUDNN_GRAPH_H
#define DCP_KERNELS_CUDNN_GRAPH_H

#include "kernels/cudnn.h"
#include "kernels/cudnn_api.h"

typedef enum {
    DCP_CUDNN_U_Q = 1,
    DCP_CUDNN_U_K,
    DCP_CUDNN_U_V,
    DCP_CUDNN_U_O,
    DCP_CUDNN_U_STATS,
    DCP_CUDNN_U_DO,
    DCP_CUDNN_U_DQ,
    DCP_CUDNN_U_DK,
    DCP_CUDNN_U_DV,
    DCP_CUDNN_U_SEQ_Q,
    DCP_CUDNN_U_SEQ_KV,
    DCP_CUDNN_U_OFF_Q, /* ragged offsets: Q's serves dQ, K's dK, V's dV, O's dO (as cuDNN's */
    DCP_CUDNN_U_OFF_K, /* frontend shares them); each tensor over one of three arrays */
    DCP_CUDNN_U_OFF_V,
    DCP_CUDNN_U_OFF_O,
    DCP_CUDNN_U_OFF_STATS,
    DCP_CUDNN_U_SUM,   /* backward: softmax_sum, fp32 [b, hq, sq, 1], in the workspace */
    DCP_CUDNN_U_ACCUM, /* backward: the dQ accumulator, fp32 [b, hq, sq, dqk], in the workspace */
    DCP_CUDNN_U_FIRST_FREE = 100
} dcp_cudnn_uid_t;

/* What a by-value scalar of a graph holds. */
typedef enum {
    DCP_CUDNN_V_SCALE = 0, /* the softmax scale (float) */
    DCP_CUDNN_V_NEG_INF,   /* -infinity (float) */
    DCP_CUDNN_V_ONE,       /* 1 (float) */
    DCP_CUDNN_V_WINDOW,    /* the call's left bound W (int32) */
    DCP_CUDNN_V_KINDS
} dcp_cudnn_value_t;

enum { DCP_CUDNN_MAX_VALUES = 16, DCP_CUDNN_MAX_OPS = 96 };

typedef struct {
    dcp_cudnn_gb_t g;               /* every descriptor of the graph */
    cudnnBackendDescriptor_t graph; /* the operation graph, finalized */
    int32_t nvalues;
    int64_t value_uid[DCP_CUDNN_MAX_VALUES];
    int32_t value_kind[DCP_CUDNN_MAX_VALUES];
    int64_t accum_bytes, sum_bytes; /* backward composite: the workspace's first bytes hold the dQ
                                       accumulator, then softmax_sum (0: not in this graph) */
    int32_t nops;
} dcp_cudnn_graph_t;

/* Builds the graph of key k. handle: the cuDNN handle the operation graph is for (NULL:
 * finalized without one, which cuDNN allows from 9.19; before, the graph stops at its
 * operations and graph stays NULL). trace: record the builder's trace in out->g. On failure
 * the error names the descriptor and cuDNN's text; out is freed. */
dcp_status_t dcp_cudnn_graph_build(const dcp_cudnn_api_t *a, const dcp_cudnn_key_t *k, void *handle,
                                   int trace, dcp_cudnn_graph_t *out);

void dcp_cudnn_graph_free(dcp_cudnn_graph_t *gr);

#endif
