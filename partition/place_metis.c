/*
 * The METIS strategy: the block hypergraph expanded to a graph (partition/metis_graph.h)
 * and partitioned with METIS 5.1 multi-constraint k-way (compute, memory), hierarchically:
 * first into nodes with imbalance eps_inter, then each node's part into its devices with
 * eps_intra; then balance repair and traffic refinement (partition/refine.h) bring every
 * rank within eps_intra of the mean. The result is validated - every vertex placed, compute
 * and memory within (1 + eps_intra) of the mean, the memory cap - and replaced by lpt if it
 * fails. METIS is not thread-safe and installs signal handlers while it runs: every call
 * holds one process-wide mutex. A fixed seed makes it deterministic.
 */
#include "partition/metis_graph.h"
#include "partition/place.h"
#include "partition/refine.h"

#include "include/base/error.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t metis_mu = PTHREAD_MUTEX_INITIALIZER;

/* Balance slack on top of eps_intra before a result counts as invalid: block granularity
 * can make the exact bound unreachable. */
#define BALANCE_SLACK 0.02

static dcp_status_t run_metis(dcp_metis_graph_t *m, int32_t nparts, double eps, dcp_expansion_t how,
                              uint64_t seed, idx_t *part)
{
    if (nparts == 1 || m->nv < 2 * nparts) {
        /* nothing to split (METIS refuses graphs with fewer vertices than parts and says so
         * on stdout): keep it together; validation decides whether that is good enough */
        memset(part, 0, (size_t)m->nv * sizeof *part);
        return DCP_OK;
    }
    idx_t options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(options);
    options[METIS_OPTION_SEED] = (idx_t)(seed & 0x7fffffff);
    options[METIS_OPTION_OBJTYPE] = how == DCP_EXPAND_STAR ? METIS_OBJTYPE_VOL : METIS_OBJTYPE_CUT;
    options[METIS_OPTION_NUMBERING] = 0;
    idx_t ncon = 2, np = nparts, objval = 0;
    real_t ubvec[2] = {(real_t)(1.0 + eps), (real_t)(1.0 + eps)};
    pthread_mutex_lock(&metis_mu);
    const int rc = METIS_PartGraphKway(&m->nv, &ncon, m->xadj, m->adjncy, m->vwgt, m->vsize,
                                       how == DCP_EXPAND_STAR ? NULL : m->adjwgt, &np, NULL, ubvec,
                                       options, &objval, part);
    pthread_mutex_unlock(&metis_mu);
    if (rc == METIS_OK) return DCP_OK;
    return dcp_set_error(rc == METIS_ERROR_MEMORY ? DCP_ERR_NO_MEMORY : DCP_ERR_INTERNAL,
                         "metis: METIS_PartGraphKway returned %d on %d vertices, %d parts", rc,
                         (int)m->nv, nparts);
}

/* Partitions the vertices marked with `node` in node_of (all of them when node < 0) into
 * nparts, writing part + base into dest[v]. */
static dcp_status_t partition_level(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                                    const dcp_place_in_t *in, const int32_t *node_of, int32_t node,
                                    int32_t nparts, double eps, int32_t base, int32_t *dest)
{
    const int64_t nv = g->num_blocks + g->num_comps;
    int32_t *local = NULL, n = 0;
    idx_t *part = NULL;
    dcp_metis_graph_t m = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&local, nv, sizeof *local, "metis"), st, out);
    for (int64_t v = 0; v < nv; v++) local[v] = node < 0 || node_of[v] == node ? n++ : -1;
    if (n == 0) goto out;
    DCP_CHECK_GOTO(
        dcp_metis_graph_build(b, g, local, n, in->opts->expansion, in->opts->net_cap, &m), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&part, n, sizeof *part, "metis"), st, out);
    DCP_CHECK_GOTO(run_metis(&m, nparts, eps, in->opts->expansion, in->opts->seed, part), st, out);
    for (idx_t v = 0; v < m.nv; v++) {
        if (part[v] < 0 || part[v] >= nparts) {
            st = dcp_set_error(DCP_ERR_INTERNAL, "metis: vertex %d in part %d", (int)v,
                               (int)part[v]);
            goto out;
        }
        dest[m.vert[v]] = base + (int32_t)part[v];
    }
    st = DCP_OK;
out:
    dcp_metis_graph_release(&m);
    free(local);
    free(part);
    return st;
}

/* Every rank within (1 + tol) of the mean FLOPs and bytes, and under the memory cap. */
static int balanced(const dcp_blocks_t *b, const dcp_place_in_t *in, const dcp_placement_t *p,
                    double tol)
{
    const int32_t nr = in->cluster->num_ranks;
    int64_t *f = calloc((size_t)nr, sizeof *f), *m = calloc((size_t)nr, sizeof *m);
    if (!f || !m) {
        free(f);
        free(m);
        return 0;
    }
    double tf = 0, tm = 0;
    for (int64_t c = 0; c < b->num_tiles * b->head_blocks; c++) {
        f[p->comp_exec[c]] += dcp_blocks_comp_flops(b, c / b->head_blocks);
        tf += (double)dcp_blocks_comp_flops(b, c / b->head_blocks);
    }
    for (int32_t t = 0; t < b->num_blocks; t++) {
        m[p->blk_owner[t]] += dcp_blocks_token_bytes(b, b->blk_len[t]);
        tm += (double)dcp_blocks_token_bytes(b, b->blk_len[t]);
    }
    int ok = 1;
    for (int32_t r = 0; r < nr; r++) {
        ok &= (double)f[r] <= (1.0 + tol) * tf / nr + 1.0 &&
              (double)m[r] <= (1.0 + tol) * tm / nr + 1.0;
        ok &= in->opts->mem_cap_bytes <= 0 || m[r] <= in->opts->mem_cap_bytes;
    }
    free(f);
    free(m);
    return ok;
}

static dcp_status_t hierarchical(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                                 const dcp_place_in_t *in, dcp_placement_t *p)
{
    const dcp_cluster_t *c = in->cluster;
    const int64_t nv = g->num_blocks + g->num_comps;
    int32_t *node_of = NULL, *rank_of = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&node_of, nv, sizeof *node_of, "metis"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&rank_of, nv, sizeof *rank_of, "metis"), st, out);
    DCP_CHECK_GOTO(
        partition_level(b, g, in, NULL, -1, c->num_nodes, in->opts->eps_inter, 0, node_of), st,
        out);
    for (int32_t n = 0; n < c->num_nodes; n++)
        DCP_CHECK_GOTO(partition_level(b, g, in, node_of, n, c->devs_per_node, in->opts->eps_intra,
                                       n * c->devs_per_node, rank_of),
                       st, out);
    for (int32_t t = 0; t < b->num_blocks; t++) p->blk_owner[t] = rank_of[t];
    for (int64_t cc = 0; cc < g->num_comps; cc++) p->comp_exec[cc] = rank_of[g->num_blocks + cc];
    st = DCP_OK;
out:
    free(node_of);
    free(rank_of);
    return st;
}

static int32_t metis_chunks(int32_t num_ranks)
{
    (void)num_ranks;
    return 0;
}

static dcp_status_t metis_place(const dcp_place_in_t *in, dcp_placement_t *p)
{
    const dcp_blocks_t *b = in->blocks;
    dcp_hypergraph_t g;
    DCP_CHECK(dcp_hypergraph_build(b, &g));
    dcp_status_t st = hierarchical(b, &g, in, p);
    if (st == DCP_OK && in->opts->refine) st = dcp_refine(b, &g, in, in->opts->eps_intra, p);
    dcp_hypergraph_release(&g);
    if (st != DCP_OK && st != DCP_ERR_INTERNAL) return st;
    if (st == DCP_OK && balanced(b, in, p, in->opts->eps_intra + BALANCE_SLACK)) return DCP_OK;
    /* METIS failed or its result is out of bounds: lpt places within the cap or says why */
    p->fallback = 1;
    return dcp_strategy_lpt.place(in, p);
}

const dcp_strategy_ops_t dcp_strategy_metis = {DCP_STRATEGY_METIS, "metis", metis_chunks,
                                               metis_place};
