/*
 * The METIS strategy: the block hypergraph expanded to a graph (partition/place/metis_graph.h)
 * and partitioned with METIS 5.1 under two constraints (compute, memory), hierarchically:
 * first into nodes with imbalance eps_inter, then each node's part into its devices with
 * eps_intra; then balance repair and FM refinement (partition/place/refine.h).
 *
 * The node level runs METIS's direct k-way on every vertex (recursive bisection only where
 * k-way has no valid result). The device level bisects rows (dcp_metis_row_vertices): a node's
 * share is small and cut into 8 or so parts, where k-way spends nearly all of its time in an
 * initial partitioning that is itself recursive bisection, and where the two-constraint bisection
 * cannot coarsen single blocks. On the 18 4x8 128K batches of tests/perf/plan_bench.sh rows took METIS from
 * 15-25 ms to 2-4 ms a plan, the predicted step time within 2% (geometric mean over three
 * METIS seeds); the FM pass moves single blocks afterwards. A result is valid when every rank is
 * within the balance bounds of place.h and the memory cap; when none is, lpt replaces it
 * (stats.fallback).
 *
 * METIS is not thread-safe and installs signal handlers while it runs: every call holds one
 * process-wide mutex. A fixed seed makes it deterministic.
 */
#include "partition/place/place_metis.h"
#include "partition/place/refine.h"

#include "include/base/error.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t metis_mu = PTHREAD_MUTEX_INITIALIZER;

dcp_status_t dcp_metis_partition(dcp_metis_graph_t *m, int32_t nparts, double eps,
                                 dcp_metis_method_t how, const dcp_plan_options_t *o, idx_t *part,
                                 int *refused)
{
    *refused = 0;
    if (nparts == 1 || m->nv < 2 * nparts) {
        /* nothing to split (METIS refuses graphs with fewer vertices than parts and says so
         * on stdout): keep it together; validation decides whether that is good enough */
        memset(part, 0, (size_t)m->nv * sizeof *part);
        return DCP_OK;
    }
    idx_t options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(options);
    options[METIS_OPTION_SEED] = (idx_t)(o->seed & 0x7fffffff);
    options[METIS_OPTION_NUMBERING] = 0;
    const int vol = o->expansion == DCP_EXPAND_STAR;
    if (how == DCP_METIS_KWAY)
        options[METIS_OPTION_OBJTYPE] = vol ? METIS_OBJTYPE_VOL : METIS_OBJTYPE_CUT;
    idx_t ncon = m->ncon, np = nparts, objval = 0;
    real_t ubvec[DCP_MAX_KINDS + 1];
    for (idx_t k = 0; k < ncon; k++) ubvec[k] = (real_t)(1.0 + eps);
    idx_t *adjwgt = vol ? NULL : m->adjwgt;
    pthread_mutex_lock(&metis_mu);
    const int rc =
        how == DCP_METIS_KWAY
            ? METIS_PartGraphKway(&m->nv, &ncon, m->xadj, m->adjncy, m->vwgt, m->vsize, adjwgt, &np,
                                  NULL, ubvec, options, &objval, part)
            : METIS_PartGraphRecursive(&m->nv, &ncon, m->xadj, m->adjncy, m->vwgt, m->vsize, adjwgt,
                                       &np, NULL, ubvec, options, &objval, part);
    pthread_mutex_unlock(&metis_mu);
    if (rc == METIS_OK) return DCP_OK;
    const char *fn = how == DCP_METIS_KWAY ? "METIS_PartGraphKway" : "METIS_PartGraphRecursive";
    if (rc == METIS_ERROR_MEMORY)
        return dcp_set_error(DCP_ERR_NO_MEMORY, "metis: %s ran out of memory on %d vertices", fn,
                             (int)m->nv);
    *refused = 1; /* METIS_ERROR_INPUT or METIS_ERROR: this method has no result */
    return DCP_OK;
}

/* One placement run: the partitioner, the node level's method, whether the device level
 * partitions rows (else single blocks), and whether METIS refused some level. */
typedef struct {
    const dcp_place_in_t *in;
    dcp_metis_fn_t fn;
    dcp_metis_method_t how;
    int rows;
    int refused;
} run_t;

/* METIS vertices on node `node` (every node when node < 0), one per block: local[v], -1 for
 * a vertex elsewhere. */
static int32_t each_vertex(const dcp_hypergraph_t *g, const int32_t *node_of, int32_t node,
                           int32_t *local)
{
    int32_t n = 0;
    for (int64_t v = 0; v < g->num_blocks + g->num_comps; v++)
        local[v] = node < 0 || node_of[v] == node ? n++ : -1;
    return n;
}

/* Tiles per device-level vertex (dcp_metis_row_vertices). Whole rows of a long sequence are heavy
 * and few: they left 1M-token plans on 32x8 25% slower (predicted step, mean of 5 seeds) than fine
 * vertices; runs of 16 tiles made them 2% faster than fine vertices at a quarter of the time, runs
 * of 8 and 32 3% and 27% slower. */
#define ROW_PIECE 16

/* The device level's METIS vertices on node `node`. A node's share cut into 8 or so parts is
 * where METIS's two-constraint bisection is slowest: it cannot coarsen past vertices of ~1.5%
 * of a constraint (a token block holds ~3% of a node's memory), so it ran its random initial
 * bisections on nearly the whole graph, 4-7 ms per node of a 4x8 128K batch. So the node's
 * computation blocks of one query block (a row), all head groups, form one vertex per run of
 * at most ROW_PIECE tiles, and a token block joins the last run of its row on the node (the
 * diagonal, for causal masks) or stands alone; FM (refine.h) then moves single computation
 * blocks. Tiles are sorted by query block, then KV block, so a row's tiles are consecutive. */
int32_t dcp_metis_row_vertices(const dcp_blocks_t *b, const dcp_hypergraph_t *g,
                               const int32_t *node_of, int32_t node, int32_t *local)
{
    const int32_t nb = g->num_blocks, hb = b->head_blocks;
    int32_t n = 0, q = -1, run = 0, vertex = -1;
    int32_t *last = local; /* local[t] of a token block holds its row's last run until the end */
    for (int32_t t = 0; t < nb; t++) last[t] = -1;
    for (int64_t tile = 0; tile < b->num_tiles; tile++) {
        int on = 0;
        for (int32_t h = 0; h < hb; h++) on |= node_of[nb + tile * hb + h] == node;
        if (!on) {
            for (int32_t h = 0; h < hb; h++) local[nb + tile * hb + h] = -1;
            continue;
        }
        if (b->tile_q[tile] != q || run == ROW_PIECE) {
            q = b->tile_q[tile];
            run = 0;
            vertex = n++;
        }
        run++;
        last[q] = vertex;
        for (int32_t h = 0; h < hb; h++)
            local[nb + tile * hb + h] = node_of[nb + tile * hb + h] == node ? vertex : -1;
    }
    for (int32_t t = 0; t < nb; t++)
        local[t] = node_of[t] != node ? -1 : last[t] >= 0 ? last[t] : n++;
    return n;
}

/* Partitions the vertices marked with `node` in node_of (all of them when node < 0) into
 * nparts with METIS method `how`, writing part + base into dest[v]. The node level gives
 * METIS every block, the device level rows (dcp_metis_row_vertices) in a run that asks for
 * them, else every block. */
static dcp_status_t partition_level(const dcp_blocks_t *b, const dcp_hypergraph_t *g, run_t *run,
                                    dcp_metis_method_t how, const int32_t *node_of, int32_t node,
                                    int32_t nparts, double eps, int32_t base, int32_t *dest)
{
    const dcp_place_in_t *in = run->in;
    const int64_t nv = g->num_blocks + g->num_comps;
    int32_t *local = NULL, n = 0;
    idx_t *part = NULL;
    dcp_metis_graph_t m = {0};
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&local, nv, sizeof *local, "metis"), st, out);
    n = node < 0 || !run->rows ? each_vertex(g, node_of, node, local)
                               : dcp_metis_row_vertices(b, g, node_of, node, local);
    st = DCP_OK;
    if (n == 0) goto out;
    DCP_CHECK_GOTO(
        dcp_metis_graph_build(b, g, local, n, in->opts->expansion, in->opts->net_cap, &m), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&part, n, sizeof *part, "metis"), st, out);
    int refused;
    DCP_CHECK_GOTO(run->fn(&m, nparts, eps, how, in->opts, part, &refused), st, out);
    if (refused) {
        run->refused = 1;
        goto out;
    }
    for (idx_t v = 0; v < m.nv; v++)
        if (part[v] < 0 || part[v] >= nparts) {
            st = dcp_set_error(DCP_ERR_INTERNAL, "metis: vertex %d in part %d", (int)v,
                               (int)part[v]);
            goto out;
        }
    for (int64_t v = 0; v < nv; v++)
        if (local[v] >= 0) dest[v] = base + (int32_t)part[local[v]];
out:
    dcp_metis_graph_release(&m);
    free(local);
    free(part);
    return st;
}

/* Each node's devices by recursive bisection, the vertices' nodes given (node_of). */
static dcp_status_t devices(const dcp_blocks_t *b, const dcp_hypergraph_t *g, run_t *run,
                            const int32_t *node_of, dcp_placement_t *p)
{
    const dcp_place_in_t *in = run->in;
    const dcp_cluster_t *c = in->cluster;
    int32_t *rank_of;
    DCP_CHECK(dcp_calloc(&rank_of, g->num_blocks + g->num_comps, sizeof *rank_of, "metis"));
    dcp_status_t st = DCP_OK;
    for (int32_t n = 0; n < c->num_nodes && !run->refused && st == DCP_OK; n++)
        st = partition_level(b, g, run, DCP_METIS_RB, node_of, n, c->devs_per_node,
                             in->opts->eps_intra, n * c->devs_per_node, rank_of);
    for (int32_t t = 0; t < b->num_blocks && st == DCP_OK; t++) p->blk_owner[t] = rank_of[t];
    for (int64_t cc = 0; cc < g->num_comps && st == DCP_OK; cc++)
        p->comp_exec[cc] = rank_of[g->num_blocks + cc];
    free(rank_of);
    return st;
}

/* Nodes first with the run's method, then each node's devices by recursive bisection. */
static dcp_status_t hierarchical(const dcp_blocks_t *b, const dcp_hypergraph_t *g, run_t *run,
                                 dcp_placement_t *p)
{
    const dcp_place_in_t *in = run->in;
    int32_t *node_of = NULL;
    dcp_status_t st;
    DCP_CHECK(dcp_calloc(&node_of, g->num_blocks + g->num_comps, sizeof *node_of, "metis"));
    st = partition_level(b, g, run, run->how, NULL, -1, in->cluster->num_nodes, in->opts->eps_inter,
                         0, node_of);
    if (st == DCP_OK && !run->refused) st = devices(b, g, run, node_of, p);
    free(node_of);
    return st;
}

/* *ok_out: every rank within the balance bounds (place.h) and under the memory cap. A failure
 * to count is an error, not an imbalance (that would change the plan). */
static dcp_status_t balanced(const dcp_blocks_t *b, const dcp_place_in_t *in,
                             const dcp_placement_t *p, double tol, int *ok_out)
{
    const int32_t nr = in->cluster->num_ranks;
    int64_t *f, *m;
    DCP_CHECK(dcp_place_loads(b, p, nr, &f, &m));
    double fb[DCP_MAX_KINDS], mb;
    dcp_place_bounds(b, nr, tol, 0, fb, &mb);
    int ok = 1;
    for (int32_t r = 0; r < nr; r++) {
        for (int32_t k = 0; k < dcp_blocks_kinds(b); k++)
            ok &= (double)f[(int64_t)k * nr + r] <= fb[k];
        ok &= (double)m[r] <= mb;
        ok &= in->opts->mem_cap_bytes <= 0 || m[r] <= in->opts->mem_cap_bytes;
    }
    free(f);
    free(m);
    *ok_out = ok;
    return DCP_OK;
}

/* One method: partition and refine; *valid when the result is within the bounds (0 when it
 * is not, or when METIS refused: that method just has no result). Errors propagate. */
static dcp_status_t try_method(const dcp_blocks_t *b, const dcp_hypergraph_t *g, run_t *run,
                               dcp_placement_t *p, int *valid)
{
    const dcp_place_in_t *in = run->in;
    *valid = 0;
    run->refused = 0;
    DCP_CHECK(hierarchical(b, g, run, p));
    if (run->refused) return DCP_OK;
    if (in->opts->refine) DCP_CHECK(dcp_refine(b, g, in, in->opts->eps_intra, p));
    return balanced(b, in, p, in->opts->eps_intra, valid);
}

static int32_t metis_chunks(int32_t num_ranks)
{
    (void)num_ranks;
    return 0;
}

/* METIS on the blocks as they are, into p: k-way nodes with row devices, else (no valid
 * result) k-way nodes with single-block devices, else recursive bisection at both levels;
 * *found = 0 when none gives a valid result (p is then unspecified). Rows can leave a small
 * batch too coarse to balance: 16 of 30 4x8 32K-token batches fell back to lpt before the
 * second run was there. Recursive bisection as a second opinion on every batch whose
 * transfers would not hide behind its kernels won 0 of 18 4x8 128K batches once the planner
 * keeps the better of two seeds (options.metis_tries) and doubled the time of 1M-token plans
 * on 32x8. */
static dcp_status_t place_blocks(const dcp_place_in_t *in, dcp_metis_fn_t fn, dcp_placement_t *p,
                                 int *found)
{
    static const struct {
        dcp_metis_method_t how;
        int rows;
    } runs[] = {{DCP_METIS_KWAY, 1}, {DCP_METIS_KWAY, 0}, {DCP_METIS_RB, 0}};
    const dcp_blocks_t *b = in->blocks;
    dcp_hypergraph_t g;
    DCP_CHECK(dcp_hypergraph_build(b, &g));
    dcp_status_t st = DCP_OK;
    *found = 0;
    for (size_t i = 0; i < sizeof runs / sizeof *runs && !*found && st == DCP_OK; i++) {
        run_t run = {in, fn, runs[i].how, runs[i].rows, 0};
        st = try_method(b, &g, &run, p, found);
    }
    dcp_hypergraph_release(&g);
    return st;
}

/* Units a long sequence is grouped into (see metis_place): UNITS_PER_RANK per rank, as
 * zigzag's chunks (4 gave METIS plans up to 7% faster on 256K tokens on 4x8, at twice its
 * time), and never fewer than MIN_UNITS, so that sequences of a few dozen blocks keep their
 * per-block choice (and METIS time is small there anyway). */
#define UNITS_PER_RANK 2
#define MIN_UNITS      64

/* The coarsening factor of every sequence: 1 for sequences of at most `units` blocks, else
 * the fewest blocks per unit that leave at most `units` units. Returns 1 when some
 * sequence is coarsened. */
static int coarsen_factors(const dcp_blocks_t *b, int32_t units, int32_t *factor)
{
    int any = 0;
    for (int32_t s = 0; s < b->num_seqs; s++) {
        const int32_t n = b->seq_blk[s + 1] - b->seq_blk[s];
        factor[s] = units > 0 && n > units ? (n + units - 1) / units : 1;
        any |= factor[s] > 1;
    }
    return any;
}

/* Each fine block and computation block where its coarse unit went. */
static dcp_status_t project(const dcp_blocks_t *fine, const dcp_blocks_t *coarse,
                            const int32_t *coarse_of, const dcp_placement_t *cp, dcp_placement_t *p)
{
    const int32_t hb = fine->head_blocks;
    for (int32_t t = 0; t < fine->num_blocks; t++) p->blk_owner[t] = cp->blk_owner[coarse_of[t]];
    for (int64_t t = 0; t < fine->num_tiles; t++) {
        const int64_t ct =
            dcp_blocks_find_tile(coarse, coarse_of[fine->tile_q[t]], coarse_of[fine->tile_kv[t]]);
        if (ct < 0)
            return dcp_set_error(DCP_ERR_INTERNAL, "metis: tile %lld has no coarse tile",
                                 (long long)t);
        for (int32_t h = 0; h < hb; h++) p->comp_exec[t * hb + h] = cp->comp_exec[ct * hb + h];
    }
    return DCP_OK;
}

/* FM on the fine blocks of a placement made on coarse units: per-block moves the units
 * could not make. */
static dcp_status_t refine_fine(const dcp_place_in_t *in, dcp_placement_t *p)
{
    dcp_hypergraph_t g;
    DCP_CHECK(dcp_hypergraph_build(in->blocks, &g));
    const dcp_status_t st = dcp_refine(in->blocks, &g, in, in->opts->eps_intra, p);
    dcp_hypergraph_release(&g);
    return st;
}

/* A long sequence needs no choice of rank per block: its blocks are grouped into at most
 * max(UNITS_PER_RANK x R, MIN_UNITS) units of consecutive blocks, METIS places the units,
 * and every block and computation block follows its unit. Shorter sequences keep their
 * blocks. This bounds METIS's graph by the rank count instead of the square of the sequence
 * length (one 1M-token sequence on 4x8 at block 2048: 64 units instead of 512 blocks, 12 s
 * of METIS down to 0.3 s). When no METIS result is valid, lpt places the fine blocks. */
dcp_status_t dcp_metis_place_with(const dcp_place_in_t *in, dcp_metis_fn_t fn, dcp_placement_t *p)
{
    const dcp_blocks_t *b = in->blocks;
    const int32_t units = UNITS_PER_RANK * in->cluster->num_ranks;
    int32_t *factor = NULL, *coarse_of = NULL;
    dcp_blocks_t coarse = {0};
    dcp_placement_t cp = {0};
    int found = 0;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&factor, b->num_seqs, sizeof *factor, "metis"), st, out);
    if (!coarsen_factors(b, units > MIN_UNITS ? units : MIN_UNITS, factor)) {
        DCP_CHECK_GOTO(place_blocks(in, fn, p, &found), st, out);
    } else {
        DCP_CHECK_GOTO(dcp_blocks_coarsen(b, factor, &coarse, &coarse_of), st, out);
        DCP_CHECK_GOTO(dcp_calloc(&cp.blk_owner, coarse.num_blocks, sizeof(int32_t), "metis"), st,
                       out);
        DCP_CHECK_GOTO(dcp_calloc(&cp.comp_exec, coarse.num_tiles * coarse.head_blocks,
                                  sizeof(int32_t), "metis"),
                       st, out);
        const dcp_place_in_t cin = {&coarse, in->cluster, in->opts};
        DCP_CHECK_GOTO(place_blocks(&cin, fn, &cp, &found), st, out);
        if (found) DCP_CHECK_GOTO(project(b, &coarse, coarse_of, &cp, p), st, out);
        if (found && in->opts->refine) DCP_CHECK_GOTO(refine_fine(in, p), st, out);
    }
    if (!found) { /* no valid result: lpt places the blocks within the cap or says why */
        p->fallback = 1;
        st = dcp_strategy_lpt.place(in, p);
    }
out:
    free(cp.blk_owner);
    free(cp.comp_exec);
    free(coarse_of);
    dcp_blocks_release(&coarse);
    free(factor);
    return st;
}

dcp_status_t dcp_metis_place_in_nodes(const dcp_place_in_t *in, const int32_t *block_node,
                                      int within, dcp_placement_t *p, int *found)
{
    const dcp_blocks_t *b = in->blocks;
    const int32_t hb = b->head_blocks;
    dcp_hypergraph_t g;
    DCP_CHECK(dcp_hypergraph_build(b, &g));
    int32_t *node_of = NULL;
    dcp_status_t st = dcp_calloc(&node_of, g.num_blocks + g.num_comps, sizeof *node_of, "metis");
    for (int32_t t = 0; t < b->num_blocks && st == DCP_OK; t++) node_of[t] = block_node[t];
    for (int64_t cc = 0; cc < g.num_comps && st == DCP_OK; cc++)
        node_of[g.num_blocks + cc] = block_node[b->tile_q[cc / hb]];
    *found = 0;
    for (int rows = 1; rows >= 0 && st == DCP_OK && !*found; rows--) {
        run_t run = {in, dcp_metis_partition, DCP_METIS_RB, rows, 0};
        st = devices(b, &g, &run, node_of, p);
        if (st != DCP_OK || run.refused) continue;
        if (within) { /* the nodes' loads are the packing's: no move between them, and the
                         balance METIS gives each node is the simulator's to judge */
            const dcp_status_t cap = dcp_place_check_cap(in, p);
            *found = cap == DCP_OK;
            if (cap != DCP_ERR_CAPACITY) st = cap;
            continue;
        }
        if (in->opts->refine) st = dcp_refine(b, &g, in, in->opts->eps_intra, p);
        if (st == DCP_OK) st = balanced(b, in, p, in->opts->eps_intra, found);
    }
    free(node_of);
    dcp_hypergraph_release(&g);
    return st;
}

static dcp_status_t metis_place(const dcp_place_in_t *in, dcp_placement_t *p)
{
    return dcp_metis_place_with(in, dcp_metis_partition, p);
}

const dcp_strategy_ops_t dcp_strategy_metis = {
    .id = DCP_STRATEGY_METIS, .chunks = metis_chunks, .place = metis_place};
