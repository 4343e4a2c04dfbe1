/* cuDNN's backend API loaded at run time, and the descriptor builder (kernels/cudnn_api.h). */
#include "kernels/cudnn_api.h"

#include "include/base/env.h"
#include "include/base/error.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dcp_status_t dcp_cudnn_api_load(dcp_cudnn_api_t *a)
{
    memset(a, 0, sizeof *a);
    const char *name = NULL;
    DCP_CHECK(dcp_env_str(DCP_ENV_CUDNN_LIB, &name)); /* libcudnn.so.9 when unset */
    a->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!a->lib)
        return dcp_set_error(DCP_ERR_UNSUPPORTED,
                             "cudnn: cannot load %s (%s); set DCP_CUDNN_LIB to libcudnn.so.9", name,
                             dlerror());
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&a->get_version, "cudnnGetVersion"},
        {(void **)&a->create, "cudnnCreate"},
        {(void **)&a->destroy, "cudnnDestroy"},
        {(void **)&a->set_stream, "cudnnSetStream"},
        {(void **)&a->error_string, "cudnnGetErrorString"},
        {(void **)&a->last_error, "cudnnGetLastErrorString"},
        {(void **)&a->create_desc, "cudnnBackendCreateDescriptor"},
        {(void **)&a->destroy_desc, "cudnnBackendDestroyDescriptor"},
        {(void **)&a->set_attr, "cudnnBackendSetAttribute"},
        {(void **)&a->get_attr, "cudnnBackendGetAttribute"},
        {(void **)&a->finalize, "cudnnBackendFinalize"},
        {(void **)&a->execute, "cudnnBackendExecute"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].fn = dlsym(a->lib, syms[i].name))) {
            dlclose(a->lib);
            a->lib = NULL;
            return dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn: %s lacks %s (cuDNN 9 expected)",
                                 name, syms[i].name);
        }
    return DCP_OK;
}

dcp_status_t dcp_cudnn_api_fail(const dcp_cudnn_api_t *a, cudnnStatus_t s, const char *what)
{
    char msg[512] = "";
    if (a->last_error) a->last_error(msg, sizeof msg);
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn: %s: %s%s%s", what, a->error_string(s),
                         msg[0] ? ": " : "", msg);
}

/* ---- the trace --------------------------------------------------------------------------- */

typedef struct {
    int value;
    const char *name;
} name_t;

#define N(x) {(int)(x), #x}
/* The descriptor types, attributes and value types dcp's graphs use, by cuDNN's own names
 * (others print as numbers). */
static const name_t desc_names[] = {
    N(CUDNN_BACKEND_TENSOR_DESCRIPTOR),
    N(CUDNN_BACKEND_POINTWISE_DESCRIPTOR),
    N(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR),
    N(CUDNN_BACKEND_MATMUL_DESCRIPTOR),
    N(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR),
    N(CUDNN_BACKEND_REDUCTION_DESCRIPTOR),
    N(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR),
    N(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR),
    N(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR),
    N(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR),
    N(CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR),
};
static const name_t attr_names[] = {
    N(CUDNN_ATTR_TENSOR_UNIQUE_ID),
    N(CUDNN_ATTR_TENSOR_DATA_TYPE),
    N(CUDNN_ATTR_TENSOR_DIMENSIONS),
    N(CUDNN_ATTR_TENSOR_STRIDES),
    N(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT),
    N(CUDNN_ATTR_TENSOR_IS_VIRTUAL),
    N(CUDNN_ATTR_TENSOR_IS_BY_VALUE),
    N(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC),
    N(CUDNN_ATTR_POINTWISE_MODE),
    N(CUDNN_ATTR_POINTWISE_MATH_PREC),
    N(CUDNN_ATTR_POINTWISE_AXIS),
    N(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
    N(CUDNN_ATTR_OPERATION_POINTWISE_XDESC),
    N(CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
    N(CUDNN_ATTR_OPERATION_POINTWISE_TDESC),
    N(CUDNN_ATTR_OPERATION_POINTWISE_YDESC),
    N(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1),
    N(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2),
    N(CUDNN_ATTR_MATMUL_COMP_TYPE),
    N(CUDNN_ATTR_OPERATION_MATMUL_ADESC),
    N(CUDNN_ATTR_OPERATION_MATMUL_BDESC),
    N(CUDNN_ATTR_OPERATION_MATMUL_CDESC),
    N(CUDNN_ATTR_OPERATION_MATMUL_DESC),
    N(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC),
    N(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC),
    N(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC),
    N(CUDNN_ATTR_REDUCTION_OPERATOR),
    N(CUDNN_ATTR_REDUCTION_COMP_TYPE),
    N(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC),
    N(CUDNN_ATTR_OPERATION_REDUCTION_XDESC),
    N(CUDNN_ATTR_OPERATION_REDUCTION_YDESC),
    N(CUDNN_ATTR_OPERATION_REDUCTION_DESC),
    N(CUDNN_ATTR_OPERATION_RESHAPE_XDESC),
    N(CUDNN_ATTR_OPERATION_RESHAPE_YDESC),
    N(CUDNN_ATTR_OPERATIONGRAPH_OPS),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC),
    N(CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC),
};
static const name_t data_type_names[] = {
    N(CUDNN_DATA_FLOAT),  N(CUDNN_DATA_DOUBLE), N(CUDNN_DATA_HALF),    N(CUDNN_DATA_INT8),
    N(CUDNN_DATA_INT32),  N(CUDNN_DATA_INT64),  N(CUDNN_DATA_BFLOAT16), N(CUDNN_DATA_BOOLEAN),
};
static const name_t pointwise_names[] = {
    N(CUDNN_POINTWISE_ADD),         N(CUDNN_POINTWISE_MUL),      N(CUDNN_POINTWISE_SUB),
    N(CUDNN_POINTWISE_DIV),         N(CUDNN_POINTWISE_EXP),      N(CUDNN_POINTWISE_LOG),
    N(CUDNN_POINTWISE_IDENTITY),    N(CUDNN_POINTWISE_CMP_LT),   N(CUDNN_POINTWISE_CMP_GE),
    N(CUDNN_POINTWISE_CMP_GT),      N(CUDNN_POINTWISE_LOGICAL_AND), N(CUDNN_POINTWISE_GEN_INDEX),
    N(CUDNN_POINTWISE_BINARY_SELECT), N(CUDNN_POINTWISE_TANH_FWD), N(CUDNN_POINTWISE_TANH_BWD),
};
static const name_t reduction_names[] = {
    N(CUDNN_REDUCE_TENSOR_ADD),
    N(CUDNN_REDUCE_TENSOR_MAX),
};
static const name_t type_names[] = {
    N(CUDNN_TYPE_HANDLE),
    N(CUDNN_TYPE_DATA_TYPE),
    N(CUDNN_TYPE_BOOLEAN),
    N(CUDNN_TYPE_INT64),
    N(CUDNN_TYPE_FLOAT),
    N(CUDNN_TYPE_DOUBLE),
    N(CUDNN_TYPE_VOID_PTR),
    N(CUDNN_TYPE_POINTWISE_MODE),
    N(CUDNN_TYPE_BACKEND_DESCRIPTOR),
    N(CUDNN_TYPE_REDUCTION_OPERATOR_TYPE),
};
#undef N

static void name_of(const name_t *t, size_t n, int v, char *buf, size_t cap)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].value == v) {
            snprintf(buf, cap, "%s", t[i].name);
            return;
        }
    snprintf(buf, cap, "%d", v);
}

#define COUNT(t) (sizeof(t) / sizeof((t)[0]))

static void trace_add(dcp_cudnn_gb_t *g, const char *fmt, ...) DCP_PRINTF(2, 3);
static void trace_add(dcp_cudnn_gb_t *g, const char *fmt, ...)
{
    if (!g->tracing) return;
    va_list ap;
    va_start(ap, fmt);
    char line[1024];
    const int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const int64_t len = n < (int)sizeof line ? n : (int64_t)sizeof line - 1;
    if (dcp_reserve(&g->trace, &g->trace_cap, g->trace_len + len + 2, 1, "cudnn trace") != DCP_OK) {
        g->tracing = 0; /* a trace cut short is noticed by the comparison */
        return;
    }
    memcpy(g->trace + g->trace_len, line, (size_t)len);
    g->trace_len += len;
    g->trace[g->trace_len++] = '\n';
    g->trace[g->trace_len] = '\0';
}

/* The creation number of descriptor d (from 1), or 0. */
static int64_t number_of(const dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d)
{
    for (int64_t i = g->n - 1; i >= 0; i--)
        if (g->d[i] == d) return i + 1;
    return 0;
}

/* The values of one attribute call as text (descriptors by number). */
static void values_text(const dcp_cudnn_gb_t *g, cudnnBackendAttributeType_t type, int64_t count,
                        const void *v, char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int64_t i = 0; i < count && at + 64 < cap; i++) {
        char one[96];
        switch (type) {
        case CUDNN_TYPE_INT64: snprintf(one, sizeof one, "%" PRId64, ((const int64_t *)v)[i]); break;
        case CUDNN_TYPE_FLOAT: snprintf(one, sizeof one, "%.9g", (double)((const float *)v)[i]); break;
        case CUDNN_TYPE_DOUBLE: snprintf(one, sizeof one, "%.17g", ((const double *)v)[i]); break;
        case CUDNN_TYPE_BOOLEAN:
            snprintf(one, sizeof one, "%s", ((const bool *)v)[i] ? "true" : "false");
            break;
        case CUDNN_TYPE_DATA_TYPE:
            name_of(data_type_names, COUNT(data_type_names), ((const int *)v)[i], one, sizeof one);
            break;
        case CUDNN_TYPE_POINTWISE_MODE:
            name_of(pointwise_names, COUNT(pointwise_names), ((const int *)v)[i], one, sizeof one);
            break;
        case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE:
            name_of(reduction_names, COUNT(reduction_names), ((const int *)v)[i], one, sizeof one);
            break;
        case CUDNN_TYPE_BACKEND_DESCRIPTOR:
            snprintf(one, sizeof one, "@%" PRId64,
                     number_of(g, ((const cudnnBackendDescriptor_t *)v)[i]));
            break;
        default: snprintf(one, sizeof one, "?"); break;
        }
        at += (size_t)snprintf(buf + at, cap - at, " %s", one);
    }
}

/* ---- the builder ------------------------------------------------------------------------- */

cudnnBackendDescriptor_t dcp_cudnn_gb_new(dcp_cudnn_gb_t *g, cudnnBackendDescriptorType_t type,
                                          const char *what)
{
    cudnnBackendDescriptor_t d = NULL;
    if (g->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (dcp_reserve(&g->d, &g->cap, g->n + 1, sizeof *g->d, "cudnn descriptors") != DCP_OK) {
        g->st = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED;
        g->where = what;
        return NULL;
    }
    g->st = g->a->create_desc(type, &d);
    if (g->st != CUDNN_STATUS_SUCCESS) {
        g->where = what;
        return NULL;
    }
    g->d[g->n++] = d;
    char name[96];
    name_of(desc_names, COUNT(desc_names), (int)type, name, sizeof name);
    trace_add(g, "create @%" PRId64 " %s", g->n, name);
    return d;
}

void dcp_cudnn_gb_set(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d,
                      cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                      int64_t count, const void *v, const char *what)
{
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    g->st = g->a->set_attr(d, name, type, count, v);
    if (g->st != CUDNN_STATUS_SUCCESS) g->where = what;
    if (!g->tracing) return;
    char an[96], tn[64], vals[900];
    name_of(attr_names, COUNT(attr_names), (int)name, an, sizeof an);
    name_of(type_names, COUNT(type_names), (int)type, tn, sizeof tn);
    values_text(g, type, count, v, vals, sizeof vals);
    trace_add(g, "set @%" PRId64 " %s %s %" PRId64 "%s", number_of(g, d), an, tn, count, vals);
}

void dcp_cudnn_gb_link(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d,
                       cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v,
                       const char *what)
{
    dcp_cudnn_gb_set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
}

void dcp_cudnn_gb_fin(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    g->st = g->a->finalize(d);
    if (g->st != CUDNN_STATUS_SUCCESS) g->where = what;
    trace_add(g, "finalize @%" PRId64, number_of(g, d));
}

void dcp_cudnn_gb_free(dcp_cudnn_gb_t *g)
{
    for (int64_t i = g->n - 1; i >= 0; i--)
        if (g->d[i]) g->a->destroy_desc(g->d[i]);
    free(g->d);
    free(g->trace);
    g->d = NULL;
    g->trace = NULL;
    g->n = g->cap = g->trace_len = g->trace_cap = 0;
}

void dcp_cudnn_gb_release(dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t d)
{
    const int64_t i = number_of(g, d);
    if (i > 0) g->d[i - 1] = NULL;
}

void dcp_cudnn_gb_trace(dcp_cudnn_gb_t *g)
{
    g->tracing = 1;
}

dcp_status_t dcp_cudnn_gb_error(const dcp_cudnn_gb_t *g, const char *what)
{
    char msg[384];
    snprintf(msg, sizeof msg, "%s: %s", what, g->where ? g->where : "?");
    return dcp_cudnn_api_fail(g->a, g->st, msg);
}

cudnnBackendDescriptor_t dcp_cudnn_gb_tensor(dcp_cudnn_gb_t *g, int64_t uid, cudnnDataType_t type,
                                             int rank, const int64_t *dims, const int64_t *strides,
                                             int flags, cudnnBackendDescriptor_t ragged,
                                             const char *what)
{
    cudnnBackendDescriptor_t t = dcp_cudnn_gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t align = 16;
    const bool is_virtual = flags & DCP_CUDNN_VIRTUAL, by_value = flags & DCP_CUDNN_BY_VALUE;
    dcp_cudnn_gb_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
    dcp_cudnn_gb_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, dims, what);
    dcp_cudnn_gb_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, strides, what);
    dcp_cudnn_gb_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    dcp_cudnn_gb_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    if (is_virtual)
        dcp_cudnn_gb_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual,
                         what);
    if (by_value)
        dcp_cudnn_gb_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value,
                         what);
    if (ragged) dcp_cudnn_gb_link(g, t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged, what);
    dcp_cudnn_gb_fin(g, t, what);
    return t;
}
