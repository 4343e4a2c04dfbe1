/*
 * cuDNN's fused SDPA as the attention engine's dense engine (kernels/cudnn.h): the library
 * loaded with dlopen, its backend graph API driven from C. Built where the CUDA toolkit (and
 * with it cudnn.h) is; kernels/cudnn_none.c otherwise.
 *
 * Tensors follow cuDNN's ragged (THD) layout exactly as kernels/segment.c packs them: dims
 * (batch capacity, heads, longest-entry bucket, D) with strides (S H D, D, H D, 1), each with
 * its own ragged offset tensor ([cap + 1] int32 element offsets; Q, O, dO, dQ take the query
 * offsets, K, V, dK, dV the key offsets); the statistics (cap, Hq, S, 1) with strides
 * (Hq S, 1, Hq, 1) and offsets in rows x Hq (the layout TransformerEngine uses for packed
 * statistics since cuDNN 9.6); per-entry lengths as (cap, 1, 1, 1) int32, entries past the
 * batch of length 0 (TransformerEngine pads batches the same way).
 */
#include "kernels/cudnn.h"

#include "include/base/error.h"

#include <cudnn.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Attribute and descriptor values newer than this build's cudnn.h may be (cuDNN 9.20/9.21;
 * the values are the library's ABI), and deprecated ones set for older libraries. */
#define ATTR(v)                       ((cudnnBackendAttributeName_t)(v))
#define A_OPGRAPH_HANDLE              ATTR(800)  /* deprecated in 9.19's header; needed before */
#define A_SDPA_FWD_SUBGRAPH           ATTR(2811) /* 9.21 */
#define A_SDPA_FWD_SUBGRAPH_IN        ATTR(2812)
#define A_SDPA_FWD_SUBGRAPH_OUT       ATTR(2813)
#define A_SDPA_BWD_SUBGRAPH           ATTR(2867) /* 9.21 (frontend) */
#define A_SDPA_BWD_SUBGRAPH_IN        ATTR(2868)
#define A_SDPA_BWD_SUBGRAPH_OUT       ATTR(2869)
#define A_DBM_XDESC                   ATTR(3000) /* the diagonal-band mask operation, 9.20 */
#define A_DBM_SEQ_LEN_KVDESC          ATTR(3001)
#define A_DBM_SEQ_LEN_QDESC           ATTR(3002)
#define A_DBM_BDESC                   ATTR(3005)
#define A_DBM_YDESC                   ATTR(3006)
#define A_DBM_COMPARISON_MODE         ATTR(3007)
#define D_DIAGONAL_BAND_MASK          ((cudnnBackendDescriptorType_t)44)

/* ---- the library ---------------------------------------------------------------------------- */

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
} api_t;

static dcp_status_t api_load(api_t *a)
{
    memset(a, 0, sizeof *a);
    const char *path = getenv("DCP_CUDNN_LIB");
    const char *name = path && *path ? path : "libcudnn.so.9";
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

/* A failure of cuDNN as a dcp error, with cuDNN's own last message. */
static dcp_status_t cudnn_fail(const api_t *a, cudnnStatus_t s, const char *what)
{
    char msg[512] = "";
    if (a->last_error) a->last_error(msg, sizeof msg);
    return dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn: %s: %s%s%s", what, a->error_string(s),
                         msg[0] ? ": " : "", msg);
}

/* ---- graph building: descriptors owned by a list, the first failure kept -------------------- */

typedef struct {
    const api_t *a;
    cudnnBackendDescriptor_t *d;
    int64_t n, cap;
    cudnnStatus_t st;
    const char *where; /* what failed first */
} gb_t;

static cudnnBackendDescriptor_t gb_new(gb_t *g, cudnnBackendDescriptorType_t type, const char *what)
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
    return d;
}

static void gb_set(gb_t *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                   cudnnBackendAttributeType_t type, int64_t count, const void *v, const char *what)
{
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    g->st = g->a->set_attr(d, name, type, count, v);
    if (g->st != CUDNN_STATUS_SUCCESS) g->where = what;
}

static void gb_link(gb_t *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                    cudnnBackendDescriptor_t v, const char *what)
{
    gb_set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
}

static void gb_fin(gb_t *g, cudnnBackendDescriptor_t d, const char *what)
{
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    g->st = g->a->finalize(d);
    if (g->st != CUDNN_STATUS_SUCCESS) g->where = what;
}

static void gb_free(gb_t *g)
{
    for (int64_t i = g->n - 1; i >= 0; i--) g->a->destroy_desc(g->d[i]);
    free(g->d);
    g->d = NULL;
    g->n = g->cap = 0;
}

enum { VIRTUAL = 1, BY_VALUE = 2 };

static cudnnBackendDescriptor_t gb_tensor(gb_t *g, int64_t uid, cudnnDataType_t type,
                                          const int64_t dims[4], const int64_t strides[4],
                                          int flags, cudnnBackendDescriptor_t ragged,
                                          const char *what)
{
    cudnnBackendDescriptor_t t = gb_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    const int64_t align = 16;
    const bool is_virtual = flags & VIRTUAL, by_value = flags & BY_VALUE;
    gb_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, what);
    gb_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, what);
    gb_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, what);
    gb_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, what);
    gb_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, what);
    gb_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, what);
    if (by_value) gb_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, what);
    if (ragged) gb_link(g, t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged, what);
    gb_fin(g, t, what);
    return t;
}

/* Tensor ids of a graph; the variant pack lists the device ones. */
enum {
    U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, /* data */
    U_SEQ_Q, U_SEQ_KV,                                          /* lengths */
    U_OFF_Q, U_OFF_K, U_OFF_V, U_OFF_O, U_OFF_STATS, U_OFF_DO, U_OFF_DQ, U_OFF_DK, U_OFF_DV,
    U_SCALE, U_NEG_INF, U_SCORES_IN, U_SCORES_OUT, /* by value and virtual */
    U_COUNT
};

/* What one graph is built for (the plan cache key). */
typedef struct {
    int32_t bwd, causal, deterministic;
    cudnnDataType_t io;
    int64_t b, hq, hkv, sq, skv, d;
} graph_key_t;

/* The operation (and its subgraph) of one dense call: the tensors of `key`, finalized; the
 * operation in *op_out. Pure descriptor work: no handle, no device. */
static void build_op(gb_t *g, const graph_key_t *k, cudnnBackendDescriptor_t *op_out)
{
    const int64_t b = k->b, hq = k->hq, hkv = k->hkv, sq = k->sq, skv = k->skv, d = k->d;
    const int64_t qdims[4] = {b, hq, sq, d}, qstr[4] = {sq * hq * d, d, hq * d, 1};
    const int64_t kdims[4] = {b, hkv, skv, d}, kstr[4] = {skv * hkv * d, d, hkv * d, 1};
    const int64_t sdims[4] = {b, hq, sq, 1}, sstr[4] = {hq * sq, 1, hq, 1};
    const int64_t ldims[4] = {b, 1, 1, 1}, odims[4] = {b + 1, 1, 1, 1}, one[4] = {1, 1, 1, 1};
    const int64_t adims[4] = {b, hq, sq, skv}, astr[4] = {hq * sq * skv, sq * skv, skv, 1};
    cudnnBackendDescriptor_t off[U_COUNT] = {0};
    static const int offs[] = {U_OFF_Q, U_OFF_K, U_OFF_V, U_OFF_O, U_OFF_STATS,
                               U_OFF_DO, U_OFF_DQ, U_OFF_DK, U_OFF_DV};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        if (!k->bwd && offs[i] >= U_OFF_DO) continue;
        off[offs[i]] = gb_tensor(g, offs[i], CUDNN_DATA_INT32, odims, one, 0, NULL, "ragged offsets");
    }
    cudnnBackendDescriptor_t q = gb_tensor(g, U_Q, k->io, qdims, qstr, 0, off[U_OFF_Q], "Q"),
                             kt = gb_tensor(g, U_K, k->io, kdims, kstr, 0, off[U_OFF_K], "K"),
                             v = gb_tensor(g, U_V, k->io, kdims, kstr, 0, off[U_OFF_V], "V"),
                             o = gb_tensor(g, U_O, k->io, qdims, qstr, 0, off[U_OFF_O], "O"),
                             st = gb_tensor(g, U_STATS, CUDNN_DATA_FLOAT, sdims, sstr, 0,
                                            off[U_OFF_STATS], "statistics"),
                             seq_q = gb_tensor(g, U_SEQ_Q, CUDNN_DATA_INT32, ldims, one, 0, NULL,
                                               "query lengths"),
                             seq_kv = gb_tensor(g, U_SEQ_KV, CUDNN_DATA_INT32, ldims, one, 0, NULL,
                                                "key lengths"),
                             scale = gb_tensor(g, U_SCALE, CUDNN_DATA_FLOAT, one, one, BY_VALUE,
                                               NULL, "scale");
    /* CAUSAL: the scores pass a diagonal-band mask that keeps column c of row r when
     * r + s_kv - s_q >= c (bottom-right aligned by the per-entry lengths) */
    cudnnBackendDescriptor_t sub = NULL;
    if (k->causal) {
        cudnnBackendDescriptor_t in = gb_tensor(g, U_SCORES_IN, CUDNN_DATA_FLOAT, adims, astr,
                                                VIRTUAL, NULL, "scores"),
                                 out = gb_tensor(g, U_SCORES_OUT, CUDNN_DATA_FLOAT, adims, astr,
                                                 VIRTUAL, NULL, "masked scores"),
                                 ninf = gb_tensor(g, U_NEG_INF, CUDNN_DATA_FLOAT, one, one,
                                                  BY_VALUE, NULL, "-inf");
        cudnnBackendDescriptor_t m = gb_new(g, D_DIAGONAL_BAND_MASK, "diagonal band mask");
        const cudnnPointwiseMode_t ge = CUDNN_POINTWISE_CMP_GE;
        gb_link(g, m, A_DBM_XDESC, in, "diagonal band mask input");
        gb_link(g, m, A_DBM_BDESC, ninf, "diagonal band mask value");
        gb_link(g, m, A_DBM_SEQ_LEN_QDESC, seq_q, "diagonal band mask query lengths");
        gb_link(g, m, A_DBM_SEQ_LEN_KVDESC, seq_kv, "diagonal band mask key lengths");
        gb_link(g, m, A_DBM_YDESC, out, "diagonal band mask output");
        gb_set(g, m, A_DBM_COMPARISON_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &ge,
               "diagonal band mask comparison");
        gb_fin(g, m, "diagonal band mask");
        sub = gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "score subgraph");
        gb_set(g, sub, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m,
               "score subgraph");
        gb_fin(g, sub, "score subgraph");
    }
    const int64_t in_uid = U_SCORES_IN, out_uid = U_SCORES_OUT;
    cudnnBackendDescriptor_t op;
    if (!k->bwd) {
        op = gb_new(g, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "SDPA forward");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, q, "SDPA forward Q");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, kt, "SDPA forward K");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, v, "SDPA forward V");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, o, "SDPA forward O");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, st, "SDPA forward statistics");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, scale, "SDPA forward scale");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, seq_q, "SDPA forward lengths");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, seq_kv, "SDPA forward lengths");
        if (sub) {
            gb_link(g, op, A_SDPA_FWD_SUBGRAPH, sub, "SDPA forward subgraph");
            gb_set(g, op, A_SDPA_FWD_SUBGRAPH_IN, CUDNN_TYPE_INT64, 1, &in_uid,
                   "SDPA forward subgraph input");
            gb_set(g, op, A_SDPA_FWD_SUBGRAPH_OUT, CUDNN_TYPE_INT64, 1, &out_uid,
                   "SDPA forward subgraph output");
        }
        gb_fin(g, op, "SDPA forward");
    } else {
        cudnnBackendDescriptor_t dout = gb_tensor(g, U_DO, k->io, qdims, qstr, 0, off[U_OFF_DO], "dO"),
                                 dq = gb_tensor(g, U_DQ, k->io, qdims, qstr, 0, off[U_OFF_DQ], "dQ"),
                                 dk = gb_tensor(g, U_DK, k->io, kdims, kstr, 0, off[U_OFF_DK], "dK"),
                                 dv = gb_tensor(g, U_DV, k->io, kdims, kstr, 0, off[U_OFF_DV], "dV");
        op = gb_new(g, CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR, "SDPA backward");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_QDESC, q, "SDPA backward Q");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_KDESC, kt, "SDPA backward K");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_VDESC, v, "SDPA backward V");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_ODESC, o, "SDPA backward O");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DODDESC, dout, "SDPA backward dO");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_STATSDESC, st, "SDPA backward statistics");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_SCALEDESC, scale, "SDPA backward scale");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_QDESC, seq_q, "SDPA backward lengths");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_SEQ_LEN_KVDESC, seq_kv, "SDPA backward lengths");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DQDESC, dq, "SDPA backward dQ");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DKDESC, dk, "SDPA backward dK");
        gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_BWD_DVDESC, dv, "SDPA backward dV");
        if (sub) {
            gb_link(g, op, A_SDPA_BWD_SUBGRAPH, sub, "SDPA backward subgraph");
            gb_set(g, op, A_SDPA_BWD_SUBGRAPH_IN, CUDNN_TYPE_INT64, 1, &in_uid,
                   "SDPA backward subgraph input");
            gb_set(g, op, A_SDPA_BWD_SUBGRAPH_OUT, CUDNN_TYPE_INT64, 1, &out_uid,
                   "SDPA backward subgraph output");
        }
        gb_fin(g, op, "SDPA backward");
    }
    *op_out = op;
}

/* ---- plans, variant packs, the engine ---------------------------------------------------------- */

typedef struct {
    graph_key_t key;
    gb_t g; /* every descriptor of the graph and its plan */
    cudnnBackendDescriptor_t plan;
    int64_t workspace;
} plan_t;

/* One prepared dense call: its plan and the variant pack over the context's buffers. */
typedef struct {
    int64_t plan;
    cudnnBackendDescriptor_t pack;
    float scale, neg_inf; /* passed by value: the pack points at them */
} call_t;

typedef struct {
    call_t *calls; /* [2 x launches]: launch l, class c at 2 l + c */
    int64_t ncalls, cap;
    void *workspace; /* device memory of the slot's largest plan */
    size_t ws_cap;
} slot_t;

struct dcp_cudnn {
    struct dcp_cudnn *self[2]; /* the engine states of the two slots (fwd, bwd) */
    api_t a;
    cudnnHandle_t h;
    int64_t version;
    int32_t device;
    int deterministic;
    plan_t *plans;
    int64_t nplans, plans_cap;
    slot_t slot[2];
    dcp_cudnn_stats_t stats;
};

static int key_eq(const graph_key_t *x, const graph_key_t *y)
{
    return x->bwd == y->bwd && x->causal == y->causal && x->deterministic == y->deterministic &&
           x->io == y->io && x->b == y->b && x->hq == y->hq && x->hkv == y->hkv &&
           x->sq == y->sq && x->skv == y->skv && x->d == y->d;
}

/* Whether an engine configuration is marked non-deterministic. */
static int nondeterministic(dcp_cudnn_t *c, gb_t *g, cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng = gb_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    if (!eng) return 1;
    int64_t n = 0;
    if (c->a.get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) !=
        CUDNN_STATUS_SUCCESS)
        return 1;
    cudnnBackendNumericalNote_t notes[64];
    n = 0;
    if (c->a.get_attr(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 64, &n,
                      notes) != CUDNN_STATUS_SUCCESS)
        return 1;
    for (int64_t i = 0; i < n && i < 64; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return 1;
    return 0;
}

/* The graph of `key` and the first execution plan the heuristics offer that finalizes (and,
 * in deterministic mode, is not marked non-deterministic). */
static dcp_status_t build_plan(dcp_cudnn_t *c, const graph_key_t *key, plan_t *p)
{
    memset(p, 0, sizeof *p);
    p->key = *key;
    gb_t *g = &p->g;
    g->a = &c->a;
    cudnnBackendDescriptor_t op = NULL;
    build_op(g, key, &op);
    cudnnBackendDescriptor_t graph = gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    gb_set(g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op,
           "operation graph");
    gb_set(g, graph, A_OPGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h, "operation graph handle");
    gb_fin(g, graph, "operation graph");
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int tried = 0;
    for (int m = 0; m < 2 && g->st == CUDNN_STATUS_SUCCESS && !p->plan; m++) {
        cudnnBackendDescriptor_t heur = gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        gb_link(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, "heuristics");
        gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m], "heuristics");
        gb_fin(g, heur, "heuristics");
        int64_t n = 0;
        if (g->st == CUDNN_STATUS_SUCCESS) {
            g->st = c->a.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  0, &n, NULL);
            if (g->st != CUDNN_STATUS_SUCCESS) g->where = "heuristics results";
        }
        if (n > 32) n = 32;
        cudnnBackendDescriptor_t cfgs[32];
        for (int64_t i = 0; i < n; i++) cfgs[i] = gb_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configs");
        int64_t got = 0;
        if (g->st == CUDNN_STATUS_SUCCESS && n > 0) {
            g->st = c->a.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  n, &got, cfgs);
            if (g->st != CUDNN_STATUS_SUCCESS) g->where = "heuristics results";
        }
        for (int64_t i = 0; i < got && g->st == CUDNN_STATUS_SUCCESS && !p->plan; i++) {
            if (c->deterministic && nondeterministic(c, g, cfgs[i])) continue;
            tried++;
            cudnnBackendDescriptor_t plan = gb_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
            if (!plan) break;
            if (c->a.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]) == CUDNN_STATUS_SUCCESS &&
                c->a.finalize(plan) == CUDNN_STATUS_SUCCESS)
                p->plan = plan;
        }
    }
    if (g->st == CUDNN_STATUS_SUCCESS && !p->plan) {
        g->st = CUDNN_STATUS_NOT_SUPPORTED;
        g->where = tried ? "no engine configuration finalizes"
                         : c->deterministic ? "no deterministic engine configuration"
                                            : "the heuristics offer no engine";
    }
    if (g->st == CUDNN_STATUS_SUCCESS) {
        int64_t n = 0;
        g->st = c->a.get_attr(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                              &n, &p->workspace);
        if (g->st != CUDNN_STATUS_SUCCESS) g->where = "workspace size";
    }
    if (g->st != CUDNN_STATUS_SUCCESS) {
        char what[256];
        snprintf(what, sizeof what,
                 "%s plan (%s, %s, batch %lld, heads %lld/%lld, s_q %lld, s_kv %lld, d %lld): %s",
                 key->bwd ? "backward" : "forward", key->causal ? "causal" : "full",
                 key->io == CUDNN_DATA_BFLOAT16 ? "bf16" : "fp16", (long long)key->b,
                 (long long)key->hq, (long long)key->hkv, (long long)key->sq, (long long)key->skv,
                 (long long)key->d, g->where ? g->where : "?");
        const dcp_status_t st = cudnn_fail(&c->a, g->st, what);
        gb_free(g);
        return st;
    }
    return DCP_OK;
}

/* The smallest power of two >= n, at least 64: the longest-entry bucket of a plan. */
static int64_t bucket(int64_t n)
{
    int64_t b = 64;
    while (b < n) b *= 2;
    return b;
}

static dcp_status_t find_plan(dcp_cudnn_t *c, const graph_key_t *key, int64_t *index_out)
{
    for (int64_t i = 0; i < c->nplans; i++)
        if (key_eq(&c->plans[i].key, key)) {
            c->stats.hits++;
            *index_out = i;
            return DCP_OK;
        }
    DCP_CHECK(dcp_reserve(&c->plans, &c->plans_cap, c->nplans + 1, sizeof *c->plans, "cudnn plans"));
    const double t0 = dcp_now();
    DCP_CHECK(build_plan(c, key, &c->plans[c->nplans]));
    c->stats.build_ms += (dcp_now() - t0) * 1e3;
    c->stats.plans++;
    if ((size_t)c->plans[c->nplans].workspace > c->stats.workspace)
        c->stats.workspace = (size_t)c->plans[c->nplans].workspace;
    *index_out = c->nplans++;
    return DCP_OK;
}

static void slot_clear(dcp_cudnn_t *c, slot_t *s)
{
    for (int64_t i = 0; i < s->ncalls; i++)
        if (s->calls[i].pack) c->a.destroy_desc(s->calls[i].pack);
    s->ncalls = 0;
}

/* The variant pack of one call: every device tensor of its graph at its place in the
 * engine buffers, and the scalars by value. */
static dcp_status_t make_pack(dcp_cudnn_t *c, slot_t *s, call_t *cl, const dcp_dense_call_t *call,
                              const dcp_kernel_env_t *env, const int32_t *ints)
{
    const plan_t *p = &c->plans[cl->plan];
    const size_t es = env->dtype == DCP_DTYPE_FP32 ? 4 : 2;
    char *seg = env->bufs[DCP_BUF_SEG];
    float *seg32 = env->bufs[DCP_BUF_SEG32];
    const int32_t *in = ints + call->ints;
    const int64_t cap = call->cap;
    int32_t *seq_q = (int32_t *)in, *seq_kv = seq_q + cap, *off_q = seq_kv + cap,
            *off_kv = off_q + cap + 1, *off_st = off_kv + cap + 1;
    cl->scale = env->scale;
    cl->neg_inf = -INFINITY;
    int64_t uids[U_COUNT];
    void *ptrs[U_COUNT];
    int n = 0;
#define PUT(u, ptr) (uids[n] = (u), ptrs[n] = (void *)(ptr), n++)
    PUT(U_Q, seg + call->q * es);
    PUT(U_K, seg + call->k * es);
    PUT(U_V, seg + call->v * es);
    PUT(U_O, seg + call->o * es);
    PUT(U_STATS, seg32 + call->stats);
    PUT(U_SEQ_Q, seq_q);
    PUT(U_SEQ_KV, seq_kv);
    PUT(U_OFF_Q, off_q);
    PUT(U_OFF_K, off_kv);
    PUT(U_OFF_V, off_kv);
    PUT(U_OFF_O, off_q);
    PUT(U_OFF_STATS, off_st);
    PUT(U_SCALE, &cl->scale);
    if (p->key.causal) PUT(U_NEG_INF, &cl->neg_inf);
    if (p->key.bwd) {
        PUT(U_DO, seg + call->dout * es);
        PUT(U_DQ, seg + call->dq * es);
        PUT(U_DK, seg + call->dk * es);
        PUT(U_DV, seg + call->dv * es);
        PUT(U_OFF_DO, off_q);
        PUT(U_OFF_DQ, off_q);
        PUT(U_OFF_DK, off_kv);
        PUT(U_OFF_DV, off_kv);
    }
#undef PUT
    gb_t g = {.a = &c->a};
    cudnnBackendDescriptor_t pack = gb_new(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    gb_set(&g, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant pack");
    gb_set(&g, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs,
           "variant pack");
    gb_set(&g, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &s->workspace,
           "variant pack");
    gb_fin(&g, pack, "variant pack");
    if (g.st != CUDNN_STATUS_SUCCESS) {
        const dcp_status_t st = cudnn_fail(&c->a, g.st, g.where);
        gb_free(&g);
        return st;
    }
    cl->pack = pack;
    free(g.d); /* the pack is the call's now */
    return DCP_OK;
}

static cudnnDataType_t io_type(dcp_dtype_t t)
{
    return t == DCP_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

dcp_status_t dcp_cudnn_prepare(dcp_cudnn_t *c, int slot, const dcp_seg_prog_t *prog,
                               const dcp_kernel_env_t *env, const int32_t *ints)
{
    if (!c || slot < 0 || slot > 1)
        return dcp_set_error(DCP_ERR_INTERNAL, "cudnn prepare: slot %d", slot);
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn: the SDPA engine takes bf16 and fp16, "
                                                  "not dtype %d", (int)env->dtype);
    slot_t *s = &c->slot[slot];
    slot_clear(c, s);
    DCP_CHECK(dcp_reserve(&s->calls, &s->cap, 2 * prog->num_launches, sizeof *s->calls,
                          "cudnn calls"));
    s->ncalls = 2 * prog->num_launches;
    memset(s->calls, 0, (size_t)s->ncalls * sizeof *s->calls);
    /* the plans first: the workspace must be in place before the variant packs name it */
    size_t ws = 0;
    for (int64_t l = 0; l < prog->num_launches; l++)
        for (int cls = 0; cls < 2; cls++) {
            const dcp_dense_call_t *call = &prog->launches[l].call[cls];
            call_t *cl = &s->calls[2 * l + cls];
            cl->plan = -1;
            if (call->batch == 0) continue;
            const graph_key_t key = {prog->launches[l].backward, cls == DCP_SEG_CAUSAL, c->deterministic,
                               io_type(env->dtype), call->cap, env->q_heads, env->kv_heads,
                               bucket(call->max_q), bucket(call->max_kv), env->head_dim};
            DCP_CHECK(find_plan(c, &key, &cl->plan));
            if ((size_t)c->plans[cl->plan].workspace > ws) ws = (size_t)c->plans[cl->plan].workspace;
        }
    if (ws > s->ws_cap) {
        cudaStreamSynchronize((cudaStream_t)env->stream); /* queued calls may use the old one */
        cudaFree(s->workspace);
        s->workspace = NULL;
        s->ws_cap = 0;
        if (cudaMalloc(&s->workspace, ws) != cudaSuccess) {
            (void)cudaGetLastError();
            return dcp_set_error(DCP_ERR_NO_MEMORY, "cudnn: %zu bytes of workspace on GPU %d", ws,
                                 c->device);
        }
        s->ws_cap = ws;
    }
    for (int64_t l = 0; l < prog->num_launches; l++)
        for (int cls = 0; cls < 2; cls++) {
            call_t *cl = &s->calls[2 * l + cls];
            if (cl->plan >= 0)
                DCP_CHECK(make_pack(c, s, cl, &prog->launches[l].call[cls], env, ints));
        }
    return DCP_OK;
}

static dcp_status_t engine_run(void *state, const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                               int64_t launch, int cls, const int32_t *ints)
{
    (void)prog, (void)ints;
    dcp_cudnn_t *c = *(dcp_cudnn_t **)state;
    const int slot = (int)(((dcp_cudnn_t **)state) - c->self);
    const slot_t *s = &c->slot[slot];
    if (2 * launch + cls >= s->ncalls || s->calls[2 * launch + cls].plan < 0)
        return dcp_set_error(DCP_ERR_INTERNAL, "cudnn: launch %lld, class %d was not prepared",
                             (long long)launch, cls);
    const call_t *cl = &s->calls[2 * launch + cls];
    cudnnStatus_t st = c->a.set_stream(c->h, (cudaStream_t)env->stream);
    if (st == CUDNN_STATUS_SUCCESS) st = c->a.execute(c->h, c->plans[cl->plan].plan, cl->pack);
    return st == CUDNN_STATUS_SUCCESS ? DCP_OK : cudnn_fail(&c->a, st, "execute");
}

dcp_dense_engine_t dcp_cudnn_engine(dcp_cudnn_t *c, int slot)
{
    return (dcp_dense_engine_t){"cudnn", &c->self[slot], engine_run};
}

dcp_status_t dcp_cudnn_open(int32_t device, int deterministic, dcp_cudnn_t **out)
{
    *out = NULL;
    dcp_cudnn_t *c;
    DCP_CHECK(dcp_calloc(&c, 1, sizeof *c, "cudnn"));
    c->self[0] = c->self[1] = c;
    c->device = device;
    c->deterministic = deterministic;
    dcp_status_t st = api_load(&c->a);
    if (st == DCP_OK) {
        c->version = (int64_t)c->a.get_version();
        const char *why;
        char v[32];
        dcp_cudnn_version_string(c->version, v, sizeof v);
        if (!dcp_cudnn_policy(c->version, 0, &why))
            st = dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn %s refused: %s", v, why);
    }
    if (st == DCP_OK) {
        const cudnnStatus_t s = c->a.create(&c->h);
        if (s != CUDNN_STATUS_SUCCESS) st = cudnn_fail(&c->a, s, "create a handle");
    }
    if (st != DCP_OK) {
        dcp_cudnn_close(c);
        return st;
    }
    *out = c;
    return DCP_OK;
}

void dcp_cudnn_close(dcp_cudnn_t *c)
{
    if (!c) return;
    for (int i = 0; i < 2; i++) {
        slot_clear(c, &c->slot[i]);
        free(c->slot[i].calls);
        if (c->slot[i].workspace) cudaFree(c->slot[i].workspace);
    }
    for (int64_t i = 0; i < c->nplans; i++) gb_free(&c->plans[i].g);
    free(c->plans);
    if (c->h) c->a.destroy(c->h);
    /* the library stays loaded: cuDNN keeps process-wide state a dlclose would tear down
     * under other contexts */
    free(c);
}

int64_t dcp_cudnn_version(const dcp_cudnn_t *c)
{
    return c ? c->version : 0;
}

void dcp_cudnn_stats(const dcp_cudnn_t *c, dcp_cudnn_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (c) *out = c->stats;
}

dcp_status_t dcp_cudnn_check_descriptors(int backward, int causal, dcp_dtype_t dtype,
                                         int32_t q_heads, int32_t kv_heads, int32_t head_dim,
                                         int64_t *version_out)
{
    *version_out = 0;
    api_t a;
    DCP_CHECK(api_load(&a));
    *version_out = (int64_t)a.get_version();
    gb_t g = {.a = &a};
    const graph_key_t key = {backward, causal, 0, io_type(dtype), 8, q_heads, kv_heads, 128, 256,
                       head_dim};
    cudnnBackendDescriptor_t op = NULL;
    build_op(&g, &key, &op);
    /* the operation graph finalizes without a handle from cuDNN 9.19 on (its handle attribute
     * is deprecated there): one step further where the library allows it */
    if (*version_out >= 91900) {
        cudnnBackendDescriptor_t graph =
            gb_new(&g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
        gb_set(&g, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op,
               "operation graph");
        gb_fin(&g, graph, "operation graph");
    }
    dcp_status_t st = DCP_OK;
    if (g.st != CUDNN_STATUS_SUCCESS) st = cudnn_fail(&a, g.st, g.where ? g.where : "?");
    gb_free(&g);
    return st;
}
