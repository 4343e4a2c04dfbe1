/*
 * MagiAttention's dispatch (magi_attention/meta/_calc_dispatch_meta.py and
 * meta/solver/dispatch_solver.py, DispatchSolver._solve_with_minhp, its default
 * MinHeapDispatchAlg): the batch's documents, concatenated in batch order, form one token
 * stream cut into chunks of options.strategy_arg tokens (default 2048, the chunk size of
 * MagiAttention's distributed-attention benchmark, exps/dist_attn/benchmark_conf.py); a
 * chunk's workload is its attention area (the allowed pairs of its queries); chunks are taken
 * in decreasing workload (ties: the later chunk first, as argsort()[::-1] orders them) and
 * each goes to the rank with the least workload among those holding fewer than
 * ceil(chunks / R) chunks (ties: the lower rank, as the heap of (workload, rank) pops).
 * Computation runs where the queries live; keys and values travel to every rank that reads
 * them, once (its group-cast). MagiAttention pads the stream to a multiple of chunk x ranks;
 * dcp keeps the last chunk short.
 */
#include "partition/place/peer.h"

#include "include/base/error.h"

#include <stdlib.h>

/* MagiAttention's benchmark chunk size. */
#define MAGI_CHUNK 2048

static dcp_status_t magi_resolve(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                 const dcp_cluster_t *c, dcp_plan_options_t *o)
{
    (void)batch, (void)shape, (void)c;
    if (!o->strategy_arg) o->strategy_arg = MAGI_CHUNK;
    return DCP_OK;
}

typedef struct {
    double area;
    int32_t chunk;
} job_t;

static int job_cmp(const void *a, const void *b)
{
    const job_t *x = a, *y = b;
    if (x->area != y->area) return x->area > y->area ? -1 : 1;
    return (x->chunk < y->chunk) - (x->chunk > y->chunk);
}

/* The min-heap solver: bucket_of[chunk]. */
static dcp_status_t min_heap(const double *area, int32_t n, int32_t buckets, int32_t *bucket_of)
{
    job_t *jobs = NULL;
    double *load = NULL;
    int32_t *count = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&jobs, n, sizeof *jobs, "magi"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&load, buckets, sizeof *load, "magi"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&count, buckets, sizeof *count, "magi"), st, out);
    for (int32_t j = 0; j < n; j++) jobs[j] = (job_t){area[j], j};
    qsort(jobs, (size_t)n, sizeof *jobs, job_cmp);
    const int32_t limit = (n + buckets - 1) / buckets;
    for (int32_t i = 0; i < n; i++) {
        int32_t best = -1;
        for (int32_t k = 0; k < buckets; k++)
            if (count[k] < limit && (best < 0 || load[k] < load[best])) best = k;
        bucket_of[jobs[i].chunk] = best; /* ceil(n / buckets) x buckets >= n: one is free */
        load[best] += jobs[i].area;
        count[best]++;
    }
    st = DCP_OK;
out:
    free(jobs);
    free(load);
    free(count);
    return st;
}

static dcp_status_t magi_cut(dcp_blocks_t *b, const dcp_cluster_t *c, const dcp_plan_options_t *o)
{
    dcp_runs_t stream = {0}, runs = {0};
    double *area = NULL;
    int32_t *bucket_of = NULL, n = 0;
    dcp_status_t st;
    for (int32_t s = 0; s < b->num_seqs; s++)
        DCP_CHECK_GOTO(dcp_runs_push(&stream, s, 0, b->seqs[s].len, 0), st, out);
    DCP_CHECK_GOTO(dcp_peer_pieces(&stream, o->strategy_arg, &runs, &n), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&area, n, sizeof *area, "magi"), st, out);
    DCP_CHECK_GOTO(dcp_calloc(&bucket_of, n, sizeof *bucket_of, "magi"), st, out);
    for (int64_t i = 0; i < runs.n; i++)
        area[runs.tag[i]] += dcp_peer_pairs(b, runs.seq[i], runs.start[i], runs.end[i]);
    DCP_CHECK_GOTO(min_heap(area, n, c->num_ranks, bucket_of), st, out);
    for (int64_t i = 0; i < runs.n; i++) runs.tag[i] = bucket_of[runs.tag[i]];
    st = dcp_blocks_cut_runs(b, &runs);
out:
    dcp_runs_release(&stream);
    dcp_runs_release(&runs);
    free(area);
    free(bucket_of);
    return st;
}

const dcp_strategy_ops_t dcp_strategy_magi = {.id = DCP_STRATEGY_MAGI,
                                              .place = dcp_peer_place_at_query,
                                              .resolve = magi_resolve,
                                              .cut = magi_cut};
