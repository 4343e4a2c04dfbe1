#include "partition/place/metis_graph.h"

#include "include/base/error.h"

#include <math.h>
#include <stdlib.h>

/* METIS adds weights in idx_t: keep every constraint's total and the edge total far below
 * 2^31. */
#define WEIGHT_BUDGET ((double)(1 << 26))

typedef struct {
    idx_t u, v;
    double w;
} pair_t;

typedef struct {
    pair_t *p;
    int64_t n, cap;
} pairs_t;

static dcp_status_t push_pair(pairs_t *ps, idx_t u, idx_t v, double w)
{
    DCP_CHECK(dcp_reserve(&ps->p, &ps->cap, ps->n + 1, sizeof *ps->p, "metis graph"));
    ps->p[ps->n++] = u < v ? (pair_t){u, v, w} : (pair_t){v, u, w};
    return DCP_OK;
}

static int pair_cmp(const void *a, const void *b)
{
    const pair_t *x = a, *y = b;
    if (x->u != y->u) return x->u < y->u ? -1 : 1;
    return (x->v > y->v) - (x->v < y->v);
}

/* The distinct local vertices of net e: its owner's first (when local), then its members'
 * in order. seen[nlocal] holds the last net each vertex was listed for, plus 1. */
static int32_t net_vertices(const dcp_hypergraph_t *g, const int32_t *local, int64_t e, idx_t *out,
                            int *owner_local, int64_t *seen)
{
    int32_t k = 0;
    const int32_t o = local[dcp_net_block(g, e)];
    *owner_local = o >= 0;
    if (o >= 0) {
        out[k++] = o;
        seen[o] = e + 1;
    }
    for (int64_t i = g->net_off[e]; i < g->net_off[e + 1]; i++) {
        const int32_t v = local[g->num_blocks + g->members[i]];
        if (v < 0 || seen[v] == e + 1) continue;
        seen[v] = e + 1;
        out[k++] = v;
    }
    return k;
}

static dcp_status_t clique_pairs(const dcp_hypergraph_t *g, const int32_t *local, int32_t cap,
                                 idx_t *vs, int64_t *seen, pairs_t *ps)
{
    for (int64_t e = 0; e < g->num_nets; e++) {
        int owner_local;
        const int32_t k = net_vertices(g, local, e, vs, &owner_local, seen);
        if (k < 2) continue;
        if (cap < 2 || k <= cap) {
            const double w = (double)g->weight[e] / (k - 1);
            for (int32_t i = 0; i < k; i++)
                for (int32_t j = i + 1; j < k; j++) DCP_CHECK(push_pair(ps, vs[i], vs[j], w));
            continue;
        }
        const double w = (double)g->weight[e] / (cap - 1);
        const int32_t first = owner_local; /* members start after the owner */
        if (owner_local)
            for (int32_t i = 1; i < k; i++) DCP_CHECK(push_pair(ps, vs[0], vs[i], w));
        for (int32_t i = first; i < k; i++)
            for (int32_t j = i + 1; j < k && j <= i + cap / 2; j++)
                DCP_CHECK(push_pair(ps, vs[i], vs[j], w));
    }
    return DCP_OK;
}

static dcp_status_t star_pairs(const dcp_hypergraph_t *g, const int32_t *local, idx_t *vs,
                               int64_t *seen, pairs_t *ps, double *vsize)
{
    for (int64_t e = 0; e < g->num_nets; e++) {
        int owner_local;
        const int32_t k = net_vertices(g, local, e, vs, &owner_local, seen);
        if (!owner_local || k < 2) continue;
        vsize[vs[0]] += (double)g->weight[e];
        for (int32_t i = 1; i < k; i++) DCP_CHECK(push_pair(ps, vs[0], vs[i], 1.0));
    }
    return DCP_OK;
}

/* Merges duplicate pairs, scales weights to integers >= 1, and fills the CSR arrays. */
static dcp_status_t to_csr(pairs_t *ps, dcp_metis_graph_t *m)
{
    if (ps->n > 1) qsort(ps->p, (size_t)ps->n, sizeof *ps->p, pair_cmp);
    int64_t n = 0;
    double total = 0;
    for (int64_t i = 0; i < ps->n; i++) {
        total += ps->p[i].w;
        if (n > 0 && ps->p[n - 1].u == ps->p[i].u && ps->p[n - 1].v == ps->p[i].v)
            ps->p[n - 1].w += ps->p[i].w;
        else
            ps->p[n++] = ps->p[i];
    }
    if (2 * n > (int64_t)INT32_MAX / 2)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "metis: %lld edges exceed METIS's index range",
                             (long long)n);
    m->edges = n;
    const double scale = total > 0 ? WEIGHT_BUDGET / total : 1.0;
    DCP_CHECK(dcp_calloc(&m->xadj, m->nv + 1, sizeof(idx_t), "metis graph"));
    DCP_CHECK(dcp_calloc(&m->adjncy, 2 * n, sizeof(idx_t), "metis graph"));
    DCP_CHECK(dcp_calloc(&m->adjwgt, 2 * n, sizeof(idx_t), "metis graph"));
    for (int64_t i = 0; i < n; i++) {
        m->xadj[ps->p[i].u + 1]++;
        m->xadj[ps->p[i].v + 1]++;
    }
    for (idx_t v = 0; v < m->nv; v++) m->xadj[v + 1] += m->xadj[v];
    idx_t *fill = NULL;
    DCP_CHECK(dcp_calloc(&fill, m->nv, sizeof(idx_t), "metis graph"));
    for (int64_t i = 0; i < n; i++) {
        const idx_t w = (idx_t)fmax(1.0, llround(ps->p[i].w * scale));
        const idx_t u = ps->p[i].u, v = ps->p[i].v;
        m->adjncy[m->xadj[u] + fill[u]] = v;
        m->adjwgt[m->xadj[u] + fill[u]++] = w;
        m->adjncy[m->xadj[v] + fill[v]] = u;
        m->adjwgt[m->xadj[v] + fill[v]++] = w;
    }
    free(fill);
    return DCP_OK;
}

/* The constraints of global vertex v: [FLOPs of each balanced kind, 0] or [0, ..., 0, bytes]. */
static void weights_of(const dcp_blocks_t *b, int64_t v, int32_t ncon, double *w)
{
    for (int32_t k = 0; k < ncon; k++) w[k] = 0;
    if (v < b->num_blocks) {
        w[ncon - 1] = (double)dcp_blocks_token_bytes(b, b->blk_len[v]);
        return;
    }
    for (int32_t k = 0, c = 0; k < dcp_blocks_kinds(b); k++)
        if (dcp_blocks_balances(b, k))
            w[c++] = (double)dcp_blocks_kind_flops(b, (v - b->num_blocks) / b->head_blocks, k);
}

/* Constraints: one per balanced kind, and memory. */
static idx_t constraints(const dcp_blocks_t *b)
{
    idx_t n = 1;
    for (int32_t k = 0; k < dcp_blocks_kinds(b); k++) n += dcp_blocks_balances(b, k);
    return n;
}

/* The constraints of the local vertices, scaled per constraint to integers. */
static dcp_status_t vertex_weights(const dcp_blocks_t *b, const int32_t *local,
                                   dcp_metis_graph_t *m)
{
    const int32_t nc = (int32_t)m->ncon;
    double *sum = NULL, tot[DCP_MAX_KINDS + 1] = {0};
    DCP_CHECK(dcp_calloc(&sum, nc * (int64_t)m->nv, sizeof *sum, "metis graph"));
    for (int64_t v = 0; v < b->num_blocks + b->num_tiles * b->head_blocks; v++) {
        if (local[v] < 0) continue;
        double w[DCP_MAX_KINDS + 1];
        weights_of(b, v, nc, w);
        for (int k = 0; k < nc; k++) {
            sum[nc * (int64_t)local[v] + k] += w[k];
            tot[k] += w[k];
        }
    }
    for (int64_t i = 0; i < nc * (int64_t)m->nv; i++) {
        const double w = sum[i];
        m->vwgt[i] = w > 0 ? (idx_t)fmax(1.0, llround(w * WEIGHT_BUDGET / tot[i % nc])) : 0;
    }
    free(sum);
    return DCP_OK;
}

dcp_status_t dcp_metis_graph_build(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                                   const int32_t *local, int32_t nlocal, dcp_expansion_t how,
                                   int32_t cap, dcp_metis_graph_t *out)
{
    dcp_metis_graph_t m = {.nv = nlocal, .ncon = constraints(b)};
    pairs_t ps = {0};
    idx_t *vs = NULL;
    int64_t *seen = NULL;
    double *vsize = NULL;
    int64_t longest = 0;
    for (int64_t e = 0; e < g->num_nets; e++)
        if (g->net_off[e + 1] - g->net_off[e] > longest)
            longest = g->net_off[e + 1] - g->net_off[e];
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&m.vwgt, m.ncon * (int64_t)nlocal, sizeof(idx_t), "metis graph"), st,
                   err);
    DCP_CHECK_GOTO(dcp_calloc(&vs, longest + 1, sizeof(idx_t), "metis graph"), st, err);
    DCP_CHECK_GOTO(dcp_calloc(&seen, nlocal, sizeof *seen, "metis graph"), st, err);
    DCP_CHECK_GOTO(vertex_weights(b, local, &m), st, err);
    if (how == DCP_EXPAND_STAR) {
        DCP_CHECK_GOTO(dcp_calloc(&vsize, nlocal, sizeof(double), "metis graph"), st, err);
        DCP_CHECK_GOTO(star_pairs(g, local, vs, seen, &ps, vsize), st, err);
        DCP_CHECK_GOTO(dcp_calloc(&m.vsize, nlocal, sizeof(idx_t), "metis graph"), st, err);
        double tot = 0;
        for (idx_t v = 0; v < m.nv; v++) tot += vsize[v];
        for (idx_t v = 0; v < m.nv; v++)
            m.vsize[v] =
                vsize[v] > 0 ? (idx_t)fmax(1.0, llround(vsize[v] * WEIGHT_BUDGET / tot)) : 0;
    } else {
        DCP_CHECK_GOTO(clique_pairs(g, local, cap, vs, seen, &ps), st, err);
    }
    DCP_CHECK_GOTO(to_csr(&ps, &m), st, err);
    free(ps.p);
    free(vs);
    free(seen);
    free(vsize);
    *out = m;
    return DCP_OK;
err:
    free(ps.p);
    free(vs);
    free(seen);
    free(vsize);
    dcp_metis_graph_release(&m);
    return st;
}

void dcp_metis_graph_release(dcp_metis_graph_t *m)
{
    free(m->xadj);
    free(m->adjncy);
    free(m->adjwgt);
    free(m->vwgt);
    free(m->vsize);
    *m = (dcp_metis_graph_t){0};
}
