/*
 * cuDNN's backend API as dcp uses it (kernels/cudnn_*.c, CUDA builds only): the library
 * loaded with dlopen, and a small builder that creates descriptors, sets their attributes and
 * finalizes them, keeping the first failure and, on request, a trace of every call.
 *
 * The trace is one line per call, in the order made, in the format of the captures of cuDNN's
 * frontend in tests/data/cudnn_sdpa_graphs (README.md there), so that a graph can be compared
 * with what the frontend emits, attribute by attribute: descriptors numbered by creation
 * (@1, @2, ...), names and enumerators as cuDNN's header spells them, booleans true/false:
 *   create @3 CUDNN_BACKEND_TENSOR_DESCRIPTOR
 *   set @3 CUDNN_ATTR_TENSOR_DATA_TYPE CUDNN_TYPE_DATA_TYPE 1 CUDNN_DATA_FLOAT
 *   set @5 CUDNN_ATTR_OPERATION_POINTWISE_XDESC CUDNN_TYPE_BACKEND_DESCRIPTOR 1 @3
 *   finalize @3
 */
#ifndef DCP_KERNELS_CUDNN_API_H
#define DCP_KERNELS_CUDNN_API_H

#include "include/dcp.h"

#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    void *lib;
    size_t (*get_version)(void);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    const char *(*error_string)(cudnnStatus_t);
    void (*last_error)(char *, size_t);
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, const void *);
    cudnnStatus_t (*get_attr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} dcp_cudnn_api_t;

/* Loads $DCP_CUDNN_LIB, else libcudnn.so.9 through the loader's search path, and its entry
 * points. DCP_ERR_UNSUPPORTED naming what is missing. */
dcp_status_t dcp_cudnn_api_load(dcp_cudnn_api_t *a);

/* A failure of cuDNN as a dcp error (DCP_ERR_UNSUPPORTED), with cuDNN's own last message. */
dcp_status_t dcp_cudnn_api_fail(const dcp_cudnn_api_t *a, cudnnStatus_t s, const char *what);

/* Descriptors owned by a list, the first failure kept (later calls do nothing). */
typedef struct {
    const dcp_cudnn_api_t *a;
    cudnnBackendDescriptor_t *d;
    int64_t n, cap;
    cudnnStatus_t st;
    const char *where; /* what failed first */
    char *trace;       /* the trace, when tracing (dcp_cudnn_gb_trace) */
    int64_t trace_len, trace_cap;
    int tracing;
} dcp_cudnn_gb_t;

cudnnBackendDescriptor_t dcp_cudnn_gb_new(dcp_cudnn_gb_t *g, cudnnBackendDescriptorType_t type,
                                          const char *what);
void dcp_cudnn_gb_set(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d,
                      cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                      int64_t count, const void *v, const char *what);
void dcp_cudnn_gb_link(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d,
                       cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v,
                       const char *what);
void dcp_cudnn_gb_fin(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d, const char *what);
/* Destroys every descriptor (newest first) and the trace. */
void dcp_cudnn_gb_free(dcp_cudnn_gb_t *g);
/* Hands descriptor d over to the caller: the list forgets it. */
void dcp_cudnn_gb_release(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d);
/* Starts recording the trace (before the first call). */
void dcp_cudnn_gb_trace(dcp_cudnn_gb_t *g);
/* The builder's failure as a dcp error, `what` in front of cuDNN's text. */
dcp_status_t dcp_cudnn_gb_error(const dcp_cudnn_gb_t *g, const char *what);

/* A tensor descriptor: unique id, type, `rank` dims and strides, 16-byte alignment, virtual
 * and by-value flags, a ragged offset tensor (or NULL); finalized. */
enum { DCP_CUDNN_VIRTUAL = 1, DCP_CUDNN_BY_VALUE = 2 };
cudnnBackendDescriptor_t dcp_cudnn_gb_tensor(dcp_cudnn_gb_t *g, int64_t uid, cudnnDataType_t type,
                                             int rank, const int64_t *dims, const int64_t *strides,
                                             int flags, cudnnBackendDescriptor_t ragged,
                                             const char *what);

#endif
