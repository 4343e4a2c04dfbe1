/*
 * cuDNN graphs of dense calls (kernels/cudnn_graph.h), built from C with the backend API.
 *
 * Layout (cuDNN's ragged THD, as kernels/segment.c packs it): Q, O, dO, dQ dims
 * (b, hq, sq, d) strides (sq hq d, d, hq d, 1); K, V, dK, dV (b, hkv, skv, d) likewise; each with
 * a ragged offset tensor (b + 1, 1, 1, 1) int32 (a gradient shares its tensor's, as cuDNN's
 * frontend has them); the statistics (b, hq, sq, 1) fp32
 * strides (hq sq, 1, hq, 1) with offsets in rows x hq; per-entry lengths (b, 1, 1, 1) int32.
 *
 * The composite graph is the pattern of cuDNN's frontend (its CompositeSDPANode and
 * CompositeSDPABackwardNode, attn_score_modifiers.h), op for op: the operations, their modes,
 * compute and output types, axes, the virtual tensors' dims and strides and the by-value
 * scalars are what that frontend gives for a ragged graph with the padding mask, bottom-right
 * diagonal alignment, a right bound of 0 (CAUSAL, BAND) and a left bound (BAND, LEFT), an
 * attention scale by value and no dropout; only unique ids and the order descriptors are made
 * in differ. cuDNN's heuristics match that pattern to its fused flash-attention engines.
 *   forward:  S = Q K^T (M, N overridden by the lengths); S *= scale; the padding mask; the
 *             right bound (row + s_kv - s_q >= col); the left bound (col + W - s_kv + s_q >
 *             row); softmax as max, sub, exp, sum, log, add (the statistics), div; P in the
 *             io type; O = P V (M, K overridden).
 *   backward: softmax_sum = rowsum(dO * O) x 1 (fp32, in the workspace); S = Q K^T x scale,
 *             padding mask, S - statistics, the bounds, P = exp; dV = P^T dO (GQA: for every
 *             query head, then summed per KV head); dS = (dO V^T - softmax_sum) P scale;
 *             dK = dS^T Q (GQA likewise); dQ = dS K into the fp32 accumulator (in the
 *             workspace) and copied out by an identity, or straight into dQ when
 *             deterministic (cuDNN's dP-workspace variant).
 */
#include "kernels/cudnn_graph.h"

#include "include/base/error.h"
#include "kernels/segment.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* ---- the builder's state ------------------------------------------------------------------ */

typedef struct {
    cudnnBackendDescriptor_t d;
    int rank;
    int64_t dims[4], str[4];
    cudnnDataType_t type;
} ten_t;

typedef struct {
    dcp_cudnn_gb_t *g;
    dcp_cudnn_graph_t *out;
    int64_t next_uid;
    cudnnBackendDescriptor_t ops[DCP_CUDNN_MAX_OPS];
    int nops;
} bld_t;

static ten_t ten(bld_t *b, int64_t uid, cudnnDataType_t type, int rank, const int64_t *dims,
                 const int64_t *str, int flags, const ten_t *ragged, const char *what)
{
    ten_t t;
    memset(&t, 0, sizeof t);
    t.rank = rank;
    t.type = type;
    memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
    memcpy(t.str, str, (size_t)rank * sizeof *str);
    t.d = dcp_cudnn_gb_tensor(b->g, uid, type, rank, dims, str, flags, ragged ? ragged->d : NULL,
                              what);
    return t;
}

static ten_t ten4(bld_t *b, int64_t uid, cudnnDataType_t type, int64_t d0, int64_t d1, int64_t d2,
                  int64_t d3, int64_t s0, int64_t s1, int64_t s2, int64_t s3, int flags,
                  const ten_t *ragged, const char *what)
{
    const int64_t dims[4] = {d0, d1, d2, d3}, str[4] = {s0, s1, s2, s3};
    return ten(b, uid, type, 4, dims, str, flags, ragged, what);
}

/* A virtual tensor of the given shape. */
static ten_t virt(bld_t *b, cudnnDataType_t type, const int64_t dims[4], const int64_t str[4],
                  const char *what)
{
    return ten(b, b->next_uid++, type, 4, dims, str, DCP_CUDNN_VIRTUAL, NULL, what);
}

/* A by-value scalar, dims and strides 1 in as many dims as the tensors it meets (cuDNN wants
 * a pointwise operation's operands of one rank), listed in the graph. */
static ten_t scalar(bld_t *b, cudnnDataType_t type, dcp_cudnn_value_t kind, const char *what)
{
    const int64_t one[4] = {1, 1, 1, 1};
    dcp_cudnn_graph_t *o = b->out;
    if (o->nvalues >= DCP_CUDNN_MAX_VALUES) {
        b->g->st = CUDNN_STATUS_INTERNAL_ERROR;
        b->g->where = "too many by-value scalars";
        return (ten_t){0};
    }
    o->value_uid[o->nvalues] = b->next_uid;
    o->value_kind[o->nvalues] = kind;
    o->nvalues++;
    return ten(b, b->next_uid++, type, 4, one, one, DCP_CUDNN_BY_VALUE, NULL, what);
}

static void add_op(bld_t *b, cudnnBackendDescriptor_t op)
{
    if (!op) return;
    if (b->nops >= DCP_CUDNN_MAX_OPS) {
        b->g->st = CUDNN_STATUS_INTERNAL_ERROR;
        b->g->where = "too many operations";
        return;
    }
    b->ops[b->nops++] = op;
}

/* The output shape of a pointwise operation: the inputs broadcast (ranks aligned at the
 * right), strides those of the first input of the same dims (the frontend's rule). */
static void pw_shape(const ten_t *x, const ten_t *y, const ten_t *z, int64_t dims[4], int64_t str[4])
{
    const ten_t *in[3] = {x, y, z};
    for (int i = 0; i < 4; i++) dims[i] = 1;
    for (int k = 0; k < 3; k++) {
        if (!in[k]) continue;
        for (int i = 0; i < in[k]->rank; i++) {
            const int at = 4 - in[k]->rank + i;
            if (in[k]->dims[i] > dims[at]) dims[at] = in[k]->dims[i];
        }
    }
    for (int k = 0; k < 3; k++)
        if (in[k] && in[k]->rank == 4 && !memcmp(in[k]->dims, dims, sizeof(int64_t) * 4)) {
            memcpy(str, in[k]->str, sizeof(int64_t) * 4);
            return;
        }
    /* no input of the output's shape: packed in the order of x's strides (not reached by the
     * SDPA graphs, whose first operand always has the output's shape) */
    int64_t s = 1;
    for (int i = 3; i >= 0; i--) {
        str[i] = s;
        s *= dims[i];
    }
}

/* A pointwise operation y = mode(x, b, t) (t: BINARY_SELECT's condition). */
static void pw_to(bld_t *b, cudnnPointwiseMode_t mode, cudnnDataType_t compute, int64_t axis,
                  const ten_t *x, const ten_t *bb, const ten_t *t, const ten_t *y, const char *what)
{
    dcp_cudnn_gb_t *g = b->g;
    cudnnBackendDescriptor_t pd = dcp_cudnn_gb_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    dcp_cudnn_gb_set(g, pd, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, what);
    dcp_cudnn_gb_set(g, pd, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute, what);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
        dcp_cudnn_gb_set(g, pd, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, what);
    dcp_cudnn_gb_fin(g, pd, what);
    cudnnBackendDescriptor_t op =
        dcp_cudnn_gb_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pd, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x->d, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y->d, what);
    if (bb) dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, bb->d, what);
    if (t) dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->d, what);
    const float one = 1.0f;
    dcp_cudnn_gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, what);
    dcp_cudnn_gb_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, what);
    dcp_cudnn_gb_fin(g, op, what);
    add_op(b, op);
}

/* The same, its output a new virtual tensor of type `out` (shape: pw_shape). */
static ten_t pw(bld_t *b, cudnnPointwiseMode_t mode, cudnnDataType_t compute, int64_t axis,
                const ten_t *x, const ten_t *bb, const ten_t *t, cudnnDataType_t out, const char *what)
{
    int64_t dims[4], str[4];
    pw_shape(x, bb, t, dims, str);
    const ten_t y = virt(b, out, dims, str, what);
    pw_to(b, mode, compute, axis, x, bb, t, &y, what);
    return y;
}

/* c = a b over the last two dims, with the GEMM sizes overridden per entry (NULL: none). */
static void mm_to(bld_t *b, const ten_t *a, const ten_t *bb, const ten_t *c, const ten_t *m,
                  const ten_t *n, const ten_t *k, const char *what)
{
    dcp_cudnn_gb_t *g = b->g;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t md = dcp_cudnn_gb_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    dcp_cudnn_gb_set(g, md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    dcp_cudnn_gb_fin(g, md, what);
    cudnnBackendDescriptor_t op = dcp_cudnn_gb_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a->d, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, bb->d, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c->d, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, md, what);
    if (m) dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m->d, what);
    if (n) dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n->d, what);
    if (k) dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k->d, what);
    dcp_cudnn_gb_fin(g, op, what);
    add_op(b, op);
}

/* y = reduce(x) over the dims where y is 1. */
static void red_to(bld_t *b, cudnnReduceTensorOp_t mode, const ten_t *x, const ten_t *y,
                   const char *what)
{
    dcp_cudnn_gb_t *g = b->g;
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const bool deterministic = false;
    cudnnBackendDescriptor_t rd = dcp_cudnn_gb_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    dcp_cudnn_gb_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, what);
    dcp_cudnn_gb_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
                     &mode, what);
    dcp_cudnn_gb_set(g, rd, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1,
                     &deterministic, what);
    dcp_cudnn_gb_fin(g, rd, what);
    cudnnBackendDescriptor_t op =
        dcp_cudnn_gb_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x->d, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y->d, what);
    dcp_cudnn_gb_fin(g, op, what);
    add_op(b, op);
}

static void reshape_to(bld_t *b, const ten_t *x, const ten_t *y, const char *what)
{
    dcp_cudnn_gb_t *g = b->g;
    cudnnBackendDescriptor_t op =
        dcp_cudnn_gb_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x->d, what);
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y->d, what);
    dcp_cudnn_gb_fin(g, op, what);
    add_op(b, op);
}

/* ---- the graph's tensors -------------------------------------------------------------------- */

typedef struct {
    ten_t q, k, v, o, stats, dout, dq, dk, dv; /* k, v: transposed where the graph takes them so */
    ten_t seq_q, seq_kv, scale;
    ten_t off_k;
} io_t;

static cudnnDataType_t io_type(int32_t dtype)
{
    return dtype == DCP_DTYPE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

/* The io tensors of key k. In the composite graphs K (and, in the backward, V) transposed:
 * dims and strides of the last two swapped. */
static void io_tensors(bld_t *bd, const dcp_cudnn_key_t *k, io_t *t)
{
    const int64_t b = k->b, hq = k->hq, hkv = k->hkv, sq = k->sq, skv = k->skv, dqk = k->dqk,
                  dv = k->dv;
    const cudnnDataType_t io = io_type(k->dtype);
    ten_t off[DCP_CUDNN_U_OFF_STATS + 1];
    for (int u = DCP_CUDNN_U_OFF_Q; u <= DCP_CUDNN_U_OFF_STATS; u++)
        off[u] = ten4(bd, u, CUDNN_DATA_INT32, b + 1, 1, 1, 1, 1, 1, 1, 1, 0, NULL, "ragged offsets");
    t->q = ten4(bd, DCP_CUDNN_U_Q, io, b, hq, sq, dqk, sq * hq * dqk, dqk, hq * dqk, 1, 0,
                &off[DCP_CUDNN_U_OFF_Q], "Q");
    t->off_k = off[DCP_CUDNN_U_OFF_K];
    if (k->fused)
        t->k = ten4(bd, DCP_CUDNN_U_K, io, b, hkv, skv, dqk, skv * hkv * dqk, dqk, hkv * dqk, 1, 0,
                    &off[DCP_CUDNN_U_OFF_K], "K");
    else
        t->k = ten4(bd, DCP_CUDNN_U_K, io, b, hkv, dqk, skv, skv * hkv * dqk, dqk, 1, hkv * dqk, 0,
                    &off[DCP_CUDNN_U_OFF_K], "K");
    if (k->bwd)
        t->v = ten4(bd, DCP_CUDNN_U_V, io, b, hkv, dv, skv, skv * hkv * dv, dv, 1, hkv * dv, 0,
                    &off[DCP_CUDNN_U_OFF_V], "V");
    else
        t->v = ten4(bd, DCP_CUDNN_U_V, io, b, hkv, skv, dv, skv * hkv * dv, dv, hkv * dv, 1, 0,
                    &off[DCP_CUDNN_U_OFF_V], "V");
    t->o = ten4(bd, DCP_CUDNN_U_O, io, b, hq, sq, dv, sq * hq * dv, dv, hq * dv, 1, 0,
                &off[DCP_CUDNN_U_OFF_O], "O");
    t->stats = ten4(bd, DCP_CUDNN_U_STATS, CUDNN_DATA_FLOAT, b, hq, sq, 1, hq * sq, 1, hq, 1, 0,
                    &off[DCP_CUDNN_U_OFF_STATS], "statistics");
    t->seq_q = ten4(bd, DCP_CUDNN_U_SEQ_Q, CUDNN_DATA_INT32, b, 1, 1, 1, 1, 1, 1, 1, 0, NULL,
                    "query lengths");
    t->seq_kv = ten4(bd, DCP_CUDNN_U_SEQ_KV, CUDNN_DATA_INT32, b, 1, 1, 1, 1, 1, 1, 1, 0, NULL,
                     "key lengths");
    if (!k->bwd) return;
    t->dout = ten4(bd, DCP_CUDNN_U_DO, io, b, hq, sq, dv, sq * hq * dv, dv, hq * dv, 1, 0,
                   &off[DCP_CUDNN_U_OFF_O], "dO");
    t->dq = ten4(bd, DCP_CUDNN_U_DQ, io, b, hq, sq, dqk, sq * hq * dqk, dqk, hq * dqk, 1, 0,
                 &off[DCP_CUDNN_U_OFF_Q], "dQ");
    t->dk = ten4(bd, DCP_CUDNN_U_DK, io, b, hkv, skv, dqk, skv * hkv * dqk, dqk, hkv * dqk, 1, 0,
                 &off[DCP_CUDNN_U_OFF_K], "dK");
    t->dv = ten4(bd, DCP_CUDNN_U_DV, io, b, hkv, skv, dv, skv * hkv * dv, dv, hkv * dv, 1, 0,
                 &off[DCP_CUDNN_U_OFF_V], "dV");
}

/* ---- the composite graph's pieces ------------------------------------------------------------ */

/* The scores S = Q K^T, scaled: (b, hq, sq, skv) fp32. */
static ten_t scores(bld_t *bd, const dcp_cudnn_key_t *k, io_t *t)
{
    const int64_t dims[4] = {k->b, k->hq, k->sq, k->skv},
                  str[4] = {k->hq * k->sq * k->skv, k->sq * k->skv, k->skv, 1};
    const ten_t s = virt(bd, CUDNN_DATA_FLOAT, dims, str, "scores");
    mm_to(bd, &t->q, &t->k, &s, &t->seq_q, &t->seq_kv, NULL, "Q K^T");
    t->scale = scalar(bd, CUDNN_DATA_FLOAT, DCP_CUDNN_V_SCALE, "scale");
    return pw(bd, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, 0, &s, &t->scale, NULL, CUDNN_DATA_FLOAT,
              "scale the scores");
}

/* The padding mask: entries' rows past seq_q and columns past seq_kv to -inf. */
static ten_t padding_mask(bld_t *bd, const io_t *t, const ten_t *s)
{
    const ten_t row = pw(bd, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 2, s, NULL, NULL,
                         CUDNN_DATA_INT32, "padding row index"),
                col = pw(bd, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, 3, s, NULL, NULL,
                         CUDNN_DATA_INT32, "padding column index"),
                rm = pw(bd, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, 0, &row, &t->seq_q, NULL,
                        CUDNN_DATA_BOOLEAN, "row < s_q"),
                cm = pw(bd, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, 0, &col, &t->seq_kv, NULL,
                        CUDNN_DATA_BOOLEAN, "column < s_kv"),
                m = pw(bd, CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, 0, &rm, &cm, NULL,
                       CUDNN_DATA_BOOLEAN, "padding mask"),
                ninf = scalar(bd, CUDNN_DATA_FLOAT, DCP_CUDNN_V_NEG_INF, "-inf");
    return pw(bd, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, 0, s, &ninf, &m, CUDNN_DATA_FLOAT,
              "padding select");
}

/* The right bound 0, bottom-right aligned: keep (row + s_kv - s_q >= col). */
static ten_t right_bound(bld_t *bd, const io_t *t, const ten_t *s)
{
    ten_t row = pw(bd, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s, NULL, NULL,
                   CUDNN_DATA_INT32, "diagonal row index");
    const ten_t col = pw(bd, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s, NULL, NULL,
                         CUDNN_DATA_INT32, "diagonal column index");
    row = pw(bd, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 0, &row, &t->seq_kv, NULL, CUDNN_DATA_INT32,
             "row + s_kv");
    row = pw(bd, CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, 0, &row, &t->seq_q, NULL, CUDNN_DATA_INT32,
             "row + s_kv - s_q");
    const ten_t m = pw(bd, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, 0, &row, &col, NULL,
                       CUDNN_DATA_BOOLEAN, "diagonal mask"),
                ninf = scalar(bd, CUDNN_DATA_FLOAT, DCP_CUDNN_V_NEG_INF, "-inf");
    return pw(bd, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, 0, s, &ninf, &m, CUDNN_DATA_FLOAT,
              "diagonal select");
}

/* The left bound W by value, bottom-right aligned with per-entry lengths: keep
 * (col + W - s_kv + s_q > row). */
static ten_t left_bound(bld_t *bd, const io_t *t, const ten_t *s)
{
    const ten_t row = pw(bd, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 2, s, NULL, NULL,
                         CUDNN_DATA_INT32, "window row index");
    ten_t col = pw(bd, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, 3, s, NULL, NULL,
                   CUDNN_DATA_INT32, "window column index");
    const ten_t w = scalar(bd, CUDNN_DATA_INT32, DCP_CUDNN_V_WINDOW, "window");
    col = pw(bd, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 0, &col, &w, NULL, CUDNN_DATA_INT32,
             "column + W");
    col = pw(bd, CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, 0, &col, &t->seq_kv, NULL, CUDNN_DATA_INT32,
             "column + W - s_kv");
    col = pw(bd, CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, 0, &col, &t->seq_q, NULL, CUDNN_DATA_INT32,
             "column + W - s_kv + s_q");
    const ten_t m = pw(bd, CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, 0, &col, &row, NULL,
                       CUDNN_DATA_BOOLEAN, "window mask"),
                ninf = scalar(bd, CUDNN_DATA_FLOAT, DCP_CUDNN_V_NEG_INF, "-inf");
    return pw(bd, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, 0, s, &ninf, &m, CUDNN_DATA_FLOAT,
              "window select");
}

/* The class's bounds on the scores. */
static ten_t bounds(bld_t *bd, int cls, const io_t *t, ten_t s)
{
    if (cls == DCP_SEG_CAUSAL || cls == DCP_SEG_BAND) s = right_bound(bd, t, &s);
    if (cls == DCP_SEG_BAND || cls == DCP_SEG_LEFT) s = left_bound(bd, t, &s);
    return s;
}

/* A (b, hq, sq, 1) fp32 row statistic of the softmax. */
static ten_t row_stat(bld_t *bd, const dcp_cudnn_key_t *k, int flags, int64_t uid, const char *what)
{
    return ten4(bd, flags & DCP_CUDNN_VIRTUAL ? bd->next_uid++ : uid, CUDNN_DATA_FLOAT, k->b, k->hq,
                k->sq, 1, k->hq * k->sq, k->sq, 1, 1, flags, NULL, what);
}

static void composite_forward(bld_t *bd, const dcp_cudnn_key_t *k, io_t *t)
{
    ten_t s = scores(bd, k, t);
    s = padding_mask(bd, t, &s);
    s = bounds(bd, k->cls, t, s);
    /* softmax: max, sub, exp, sum, log, add -> the statistics; div -> P */
    const ten_t mx = row_stat(bd, k, DCP_CUDNN_VIRTUAL, 0, "row max");
    red_to(bd, CUDNN_REDUCE_TENSOR_MAX, &s, &mx, "row max");
    const ten_t sub = pw(bd, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, 0, &s, &mx, NULL,
                         CUDNN_DATA_FLOAT, "scores - max"),
                ex = pw(bd, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, 0, &sub, NULL, NULL,
                        CUDNN_DATA_FLOAT, "exp");
    const ten_t sum = row_stat(bd, k, DCP_CUDNN_VIRTUAL, 0, "row sum");
    red_to(bd, CUDNN_REDUCE_TENSOR_ADD, &ex, &sum, "row sum");
    const ten_t lg = row_stat(bd, k, DCP_CUDNN_VIRTUAL, 0, "log row sum");
    pw_to(bd, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, 0, &sum, NULL, NULL, &lg, "log row sum");
    pw_to(bd, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, 0, &mx, &lg, NULL, &t->stats, "statistics");
    int64_t dims[4], str[4];
    pw_shape(&ex, &sum, NULL, dims, str);
    const ten_t p = virt(bd, io_type(k->dtype), dims, str, "probabilities");
    pw_to(bd, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, 0, &ex, &sum, NULL, &p, "probabilities");
    mm_to(bd, &p, &t->v, &t->o, &t->seq_q, NULL, &t->seq_kv, "P V");
}

/* dX for every query head, then summed over each KV head's query heads (GQA), or straight
 * into dX (MHA): x = a b, (b, hkv, skv, d) from (b, hq, skv, sq) x (b, hq, sq, d). */
static void grad_kv(bld_t *bd, const dcp_cudnn_key_t *k, const io_t *t, const ten_t *a,
                    const ten_t *b, const ten_t *x, int64_t d, const char *what)
{
    if (k->hq == k->hkv) {
        mm_to(bd, a, b, x, &t->seq_kv, NULL, &t->seq_q, what);
        return;
    }
    const int64_t dims[4] = {k->b, k->hq, k->skv, d},
                  str[4] = {k->hq * k->skv * d, k->skv * d, d, 1};
    const ten_t full = virt(bd, io_type(k->dtype), dims, str, what);
    mm_to(bd, a, b, &full, &t->seq_kv, NULL, &t->seq_q, what);
    red_to(bd, CUDNN_REDUCE_TENSOR_ADD, &full, x, what);
}

static void composite_backward(bld_t *bd, const dcp_cudnn_key_t *k, io_t *t)
{
    const int64_t b = k->b, hq = k->hq, sq = k->sq, skv = k->skv, dqk = k->dqk, dv = k->dv;
    const cudnnDataType_t io = io_type(k->dtype);
    /* softmax_sum = rowsum(dO * O) x 1 */
    const int64_t pdims[4] = {b, hq, sq, dv}, pstr[4] = {hq * sq * dv, sq * dv, hq * dv, 1};
    const ten_t prod = virt(bd, CUDNN_DATA_FLOAT, pdims, pstr, "dO * O");
    pw_to(bd, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, 0, &t->dout, &t->o, NULL, &prod, "dO * O");
    const ten_t rs = row_stat(bd, k, DCP_CUDNN_VIRTUAL, 0, "rowsum(dO * O)");
    red_to(bd, CUDNN_REDUCE_TENSOR_ADD, &prod, &rs, "rowsum(dO * O)");
    const ten_t one = scalar(bd, CUDNN_DATA_FLOAT, DCP_CUDNN_V_ONE, "1");
    const ten_t ssum = row_stat(bd, k, 0, DCP_CUDNN_U_SUM, "softmax_sum");
    pw_to(bd, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, 0, &rs, &one, NULL, &ssum, "softmax_sum");
    bd->out->sum_bytes = b * hq * sq * (int64_t)sizeof(float);
    /* P = exp(S scale (masked) - statistics, bounds) */
    ten_t s = scores(bd, k, t);
    s = padding_mask(bd, t, &s);
    s = pw(bd, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, 0, &s, &t->stats, NULL, CUDNN_DATA_FLOAT,
           "scores - statistics");
    s = bounds(bd, k->cls, t, s);
    const ten_t p = pw(bd, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, 0, &s, NULL, NULL,
                       CUDNN_DATA_FLOAT, "probabilities");
    /* dV = P^T dO */
    const int64_t tdims[4] = {b, hq, skv, sq}, tstr[4] = {hq * sq * skv, sq * skv, 1, skv};
    const ten_t pt = virt(bd, io, tdims, tstr, "P^T");
    reshape_to(bd, &p, &pt, "P^T");
    grad_kv(bd, k, t, &pt, &t->dout, &t->dv, dv, "dV");
    /* dS = (dO V^T - softmax_sum) P scale */
    const int64_t sdims[4] = {b, hq, sq, skv}, sstr[4] = {hq * sq * skv, sq * skv, skv, 1};
    const ten_t dp = virt(bd, CUDNN_DATA_FLOAT, sdims, sstr, "dP");
    mm_to(bd, &t->dout, &t->v, &dp, &t->seq_q, &t->seq_kv, NULL, "dO V^T");
    ten_t ds = pw(bd, CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, 0, &dp, &ssum, NULL, CUDNN_DATA_FLOAT,
                  "dP - softmax_sum");
    ds = pw(bd, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, 0, &ds, &p, NULL, CUDNN_DATA_FLOAT, "x P");
    ds = pw(bd, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, 0, &ds, &t->scale, NULL, CUDNN_DATA_FLOAT,
            "dS");
    /* dK = dS^T Q */
    const ten_t dst = virt(bd, io, tdims, tstr, "dS^T");
    reshape_to(bd, &ds, &dst, "dS^T");
    grad_kv(bd, k, t, &dst, &t->q, &t->dk, dqk, "dK");
    /* dQ = dS K: K back from K^T (its offsets kept; fp32, the type the frontend leaves a
     * virtual tensor), into the accumulator and out, or straight */
    const ten_t kk = ten4(bd, bd->next_uid++, CUDNN_DATA_FLOAT, t->k.dims[0], t->k.dims[1],
                          t->k.dims[3], t->k.dims[2], t->k.str[0], t->k.str[1], t->k.str[3],
                          t->k.str[2], DCP_CUDNN_VIRTUAL, &t->off_k, "K");
    reshape_to(bd, &t->k, &kk, "K");
    if (k->deterministic) {
        mm_to(bd, &ds, &kk, &t->dq, &t->seq_q, NULL, &t->seq_kv, "dS K");
        return;
    }
    const ten_t acc = ten4(bd, DCP_CUDNN_U_ACCUM, CUDNN_DATA_FLOAT, b, hq, sq, dqk, hq * sq * dqk,
                           sq * dqk, dqk, 1, 0, NULL, "dQ accumulator");
    mm_to(bd, &ds, &kk, &acc, &t->seq_q, NULL, &t->seq_kv, "dS K");
    pw_to(bd, CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, 0, &acc, NULL, NULL, &t->dq, "dQ");
    bd->out->accum_bytes = b * hq * sq * dqk * (int64_t)sizeof(float);
}

/* ---- the fused operation (forward, FULL) ----------------------------------------------------- */

static void fused_forward(bld_t *bd, io_t *t)
{
    dcp_cudnn_gb_t *g = bd->g;
    t->scale = ten4(bd, bd->next_uid, CUDNN_DATA_FLOAT, 1, 1, 1, 1, 1, 1, 1, 1, DCP_CUDNN_BY_VALUE,
                    NULL, "scale");
    bd->out->value_uid[bd->out->nvalues] = bd->next_uid++;
    bd->out->value_kind[bd->out->nvalues++] = DCP_CUDNN_V_SCALE;
    cudnnBackendDescriptor_t op =
        dcp_cudnn_gb_new(g, CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "SDPA forward");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, t->q.d, "SDPA forward Q");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, t->k.d, "SDPA forward K");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, t->v.d, "SDPA forward V");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, t->o.d, "SDPA forward O");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_STATSDESC, t->stats.d,
                      "SDPA forward statistics");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, t->scale.d,
                      "SDPA forward scale");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_QDESC, t->seq_q.d,
                      "SDPA forward lengths");
    dcp_cudnn_gb_link(g, op, CUDNN_ATTR_OPERATION_SDPA_FWD_SEQ_LEN_KVDESC, t->seq_kv.d,
                      "SDPA forward lengths");
    dcp_cudnn_gb_fin(g, op, "SDPA forward");
    add_op(bd, op);
}

/* ---- the graph ---------------------------------------------------------------------------------- */

/* The deprecated handle attribute of an operation graph (needed before cuDNN 9.19). */
#define A_OPGRAPH_HANDLE ((cudnnBackendAttributeName_t)800)

dcp_status_t dcp_cudnn_graph_build(const dcp_cudnn_api_t *a, const dcp_cudnn_key_t *k, void *handle,
                                   int trace, dcp_cudnn_graph_t *out)
{
    memset(out, 0, sizeof *out);
    if (k->cls < 0 || k->cls >= DCP_SEG_DENSE || (k->fused && (k->bwd || k->cls != DCP_SEG_FULL)))
        return dcp_set_error(DCP_ERR_INTERNAL, "cudnn graph: class %d, fused %d, backward %d",
                             k->cls, k->fused, k->bwd);
    out->g.a = a;
    if (trace) dcp_cudnn_gb_trace(&out->g);
    bld_t bd = {&out->g, out, DCP_CUDNN_U_FIRST_FREE, {0}, 0};
    io_t t;
    memset(&t, 0, sizeof t);
    io_tensors(&bd, k, &t);
    if (k->fused)
        fused_forward(&bd, &t);
    else if (k->bwd)
        composite_backward(&bd, k, &t);
    else
        composite_forward(&bd, k, &t);
    out->nops = bd.nops;
    const int64_t version = (int64_t)a->get_version();
    if (handle || version >= 91900) {
        dcp_cudnn_gb_t *g = &out->g;
        out->graph = dcp_cudnn_gb_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
        dcp_cudnn_gb_set(g, out->graph, CUDNN_ATTR_OPERATIONGRAPH_OPS,
                         CUDNN_TYPE_BACKEND_DESCRIPTOR, bd.nops, bd.ops, "operation graph");
        if (handle)
            dcp_cudnn_gb_set(g, out->graph, A_OPGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
                             "operation graph handle");
        dcp_cudnn_gb_fin(g, out->graph, "operation graph");
    }
    if (out->g.st != CUDNN_STATUS_SUCCESS) {
        char what[160];
        snprintf(what, sizeof what, "%s %s graph (%s)", k->bwd ? "backward" : "forward",
                 dcp_seg_class_name(k->cls), k->fused ? "fused" : "composite");
        const dcp_status_t st = dcp_cudnn_gb_error(&out->g, what);
        dcp_cudnn_graph_free(out);
        return st;
    }
    return DCP_OK;
}

void dcp_cudnn_graph_free(dcp_cudnn_graph_t *gr)
{
    if (!gr) return;
    dcp_cudnn_gb_free(&gr->g);
    memset(gr, 0, sizeof *gr);
}
