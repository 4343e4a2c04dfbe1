/*
 * dcp-transport-bench: a block-transfer engine between ranks, per message size, in the shape of
 * nccl-tests (its sendrecv_perf) and beside ucx_perftest -t tag_bw:
 *
 *   mpirun -np 2 dcp-transport-bench -b 8 -e 64M -f 4           UCX, host memory, one pair
 *   srun -N 2 --ntasks-per-node 8 --mpi=pmix dcp-transport-bench --engine nccl --pattern rails
 *   mpirun -np 2 dcp-transport-bench --engine staged             device memory over UCX
 *   dcp-transport-bench --engine inproc --ranks 4                threads of one process
 *
 * Patterns. pairs (default): every pair of ranks in turn, the lower rank streaming to the
 * higher while the others wait: a row per pair and size. rails: every rank at once sends to
 * its peer of the same local rank on the next node and receives from the previous one (each
 * rail a ring over the nodes, as nccl-tests' sendrecv is over ranks): a row per size, the
 * slowest rank's time, and the rails' aggregate.
 *
 * A measurement is --iters launches of --window messages (the clock stops when the receiver's
 * one-byte acknowledgement of the last arrives); time is per message, algbw = size / time,
 * busbw = algbw (point to point: nccl-tests' sendrecv factor 1); each figure the median, min
 * and max of --reps measurements after --warmup unrecorded ones (the tools' bench harness).
 * pairs also gives the latency: half a ping-pong's round trip. With --check (default on), after
 * each size's timing the senders send a pattern of their rank and the receivers count the bytes
 * that differ (#wrong, summed over ranks). Memory is host or device (--memory) as the engine
 * moves it: ucx host (device where UCX was built with CUDA), staged device (copies through
 * page-locked host memory over UCX), nccl device, inproc host. GB/s is 1e9 bytes per second;
 * JSON adds MiB/s (2^20 bytes per second, ucx_perftest's unit).
 */
#include "include/base/error.h"
#include "plugin/cli/helpers/args.h"
#include "plugin/cli/launch/mpi_launch.h"
#include "plugin/cli/support/bench.h"
#include "plugin/cli/support/job.h"
#include "plugin/cli/support/mem.h"
#include "plugin/cli/support/xfer.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tool = "dcp-transport-bench";

#define MAX_SIZES  64
#define MAX_WINDOW 64
#define TIMEOUT_S  60.0
#define SYNC_BYTES 64 /* the buffer's head: acknowledgement bytes */

typedef enum { PAIRS = 0, RAILS = 1 } pattern_t;
/* the engines, by their names (dcpt_xfer_kind_name) */
#define ENGINE_UCX    DCPT_XFER_UCX
#define ENGINE_STAGED DCPT_XFER_STAGED
#define ENGINE_NCCL   DCPT_XFER_NCCL
#define ENGINE_INPROC DCPT_XFER_INPROC

typedef struct {
    int64_t sizes[MAX_SIZES];
    int32_t num_sizes;
    int64_t window, reps, warmup, budget_mb;
    int json, check;
    pattern_t pattern;
    dcpt_xfer_kind_t engine;
    int device_mem; /* buffers in device memory */
} bench_t;

/* One row of the table: a size between a pair, or a size over every rail. */
typedef struct {
    const char *engine, *memory, *type, *link, *tls, *host0, *host1, *peers;
    char peers_text[24];
    int64_t bytes, count, window;
    dcpt_stats_t time_us, lat_us;
    double algbw, busbw, agg, mibps, wrong;
} row_t;

static const dcpt_field_t fields[] = {
    DCPT_FIELD("size(B)", 12, "size", DCPT_F_INT, NULL, row_t, bytes),
    DCPT_FIELD("count", 12, "count", DCPT_F_INT, NULL, row_t, count),
    DCPT_FIELD("type", -6, "type", DCPT_F_STR, NULL, row_t, type),
    DCPT_FIELD("peers", -8, "peers", DCPT_F_STR, NULL, row_t, peers),
    DCPT_FIELD("time(us)", 10, "time_us", DCPT_F_STATS, "%.2f", row_t, time_us),
    DCPT_FIELD("algbw(GB/s)", 12, "algbw", DCPT_F_NUM, "%.3f", row_t, algbw),
    DCPT_FIELD("busbw(GB/s)", 12, "busbw", DCPT_F_NUM, "%.3f", row_t, busbw),
    DCPT_FIELD("#wrong", 7, "wrong", DCPT_F_NUM, "%.0f", row_t, wrong),
    DCPT_FIELD("lat(us)", 9, "latency_us", DCPT_F_STATS, "%.2f", row_t, lat_us),
    DCPT_FIELD("agg(GB/s)", 10, "agg_gbps", DCPT_F_NUM, "%.3f", row_t, agg),
    DCPT_FIELD(NULL, 0, "mibps", DCPT_F_NUM, NULL, row_t, mibps),
    DCPT_FIELD(NULL, 0, "window", DCPT_F_INT, NULL, row_t, window),
    DCPT_FIELD(NULL, 0, "engine", DCPT_F_STR, NULL, row_t, engine),
    DCPT_FIELD(NULL, 0, "memory", DCPT_F_STR, NULL, row_t, memory),
    DCPT_FIELD("link", -11, "link", DCPT_F_STR, NULL, row_t, link),
    DCPT_FIELD(NULL, 0, "ucx_tls", DCPT_F_STR, NULL, row_t, tls),
    DCPT_FIELD(NULL, 0, "host0", DCPT_F_STR, NULL, row_t, host0),
    DCPT_FIELD(NULL, 0, "host1", DCPT_F_STR, NULL, row_t, host1),
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

/* ---- sizes ------------------------------------------------------------------------------ */

/* "8", "4K", "64M", "1G" (nccl-tests' suffixes); -1 when it is not one in 1..1G. */
static int64_t size_of(const char *s)
{
    char *end;
    const long long v = strtoll(s, &end, 10);
    const long long unit = *end == 'K' ? 1024 : *end == 'M' ? 1 << 20 : *end == 'G' ? 1 << 30 : 1;
    if (unit > 1) end++;
    if (end == s || *end != '\0' || v < 1 || v > (1ll << 30) / unit) return -1;
    return v * unit;
}

static void parse_sizes(const char *list, bench_t *b)
{
    char **items, *storage;
    const int n = dcpt_args_split(tool, "sizes", list, &items, &storage);
    if (n > MAX_SIZES) dcpt_args_fail(tool, "sizes", "at most %d sizes", MAX_SIZES);
    for (int i = 0; i < n; i++)
        if ((b->sizes[i] = size_of(items[i])) < 0)
            dcpt_args_fail(tool, "sizes", "'%s' is not a size in 1..1G (suffixes K, M, G)",
                           items[i]);
    b->num_sizes = n;
    free(items);
    free(storage);
}

/* -b MIN -e MAX -f FACTOR: MIN, MIN x FACTOR, ... up to MAX (nccl-tests' sweep). */
static void sweep_sizes(const char *min, const char *max, int64_t factor, bench_t *b)
{
    const int64_t lo = size_of(min), hi = size_of(max);
    if (lo < 0) dcpt_args_fail(tool, "minbytes", "'%s' is not a size in 1..1G", min);
    if (hi < 0) dcpt_args_fail(tool, "maxbytes", "'%s' is not a size in 1..1G", max);
    if (hi < lo) dcpt_args_fail(tool, "maxbytes", "%s is below --minbytes %s", max, min);
    b->num_sizes = 0;
    for (int64_t s = lo; s <= hi; s *= factor) {
        if (b->num_sizes == MAX_SIZES)
            dcpt_args_fail(tool, "stepfactor", "more than %d sizes from %s to %s", MAX_SIZES, min,
                           max);
        b->sizes[b->num_sizes++] = s;
        if (s > hi / factor) break;
    }
}

/* ---- one rank ------------------------------------------------------------------------------ */

typedef struct {
    const bench_t *b;
    dcp_bootstrap_t bs;
    dcpt_xfer_t *e;
    int32_t rank, size;
    int gpu;                  /* CUDA ordinal of device buffers, -1 host */
    char *sync, *send, *recv; /* SYNC_BYTES; window x the largest size each */
    uint8_t *host;            /* host staging of one message (fill, check) */
    int32_t *node, *local;    /* [size]: every rank's node and place in it (of `where`) */
    int32_t nodes;
    char (*hosts)[64]; /* [size] */
    dcpt_placement_t where;
} rank_t;

static dcp_status_t xfer(dcpt_xfer_t *e, const dcpt_xfer_op_t *ops, int64_t n)
{
    return dcpt_xfer_run(e, ops, n, TIMEOUT_S);
}

/* A double from every rank (doubles as the barrier between measurements). */
static dcp_status_t gather(const rank_t *r, double mine, double *all)
{
    return dcpt_job_allgather(&r->bs, &mine, all, sizeof mine, "bench");
}

/* Bytes between the rank's buffers and the host staging. */
static dcp_status_t put(const rank_t *r, char *dst, const void *src, size_t n)
{
    return dcpt_mem_copy(r->gpu, dst, src, n);
}

static dcp_status_t get(const rank_t *r, void *dst, const char *src, size_t n)
{
    return dcpt_mem_copy(r->gpu, dst, src, n);
}

/* The check's pattern: what rank `src` sends, byte i of message k. */
static uint8_t pattern(int32_t src, int64_t k, int64_t i)
{
    return (uint8_t)(src * 73 + k * 29 + i * 7 + (i >> 8) * 3 + 1);
}

/* The peers of a measurement: `to` receives this rank's messages, `from` sends it messages
 * (-1 none). pairs: pair (a, b), a streaming to b; rails: the next node's and the previous
 * node's rank of the same local rank. */
typedef struct {
    int32_t to, from;
    int32_t a, b; /* pairs: the pair; -1 for rails */
} peers_t;

static peers_t rail_peers(const rank_t *r)
{
    const int32_t n = r->node[r->rank], l = r->local[r->rank];
    const int32_t next = (n + 1) % r->nodes, prev = (n + r->nodes - 1) % r->nodes;
    peers_t p = {-1, -1, -1, -1};
    for (int32_t q = 0; q < r->size; q++) {
        if (r->local[q] != l) continue;
        if (r->node[q] == next) p.to = q;
        if (r->node[q] == prev) p.from = q;
    }
    return p;
}

static peers_t pair_peers(const rank_t *r, int32_t a, int32_t b)
{
    return (peers_t){r->rank == a ? b : -1, r->rank == b ? a : -1, a, b};
}

/* One measurement: `iters` launches of `window` messages of `bytes` to p.to and from p.from,
 * then the acknowledgements; every rank's seconds, the slowest's returned (0 for a rank that
 * takes no part). */
static dcp_status_t stream(const rank_t *r, peers_t p, int64_t bytes, int64_t iters, double *secs)
{
    const int64_t w = r->b->window;
    dcpt_xfer_op_t ops[2 * MAX_WINDOW];
    int64_t n = 0;
    for (int64_t k = 0; k < w; k++) {
        if (p.to >= 0)
            ops[n++] = (dcpt_xfer_op_t){p.to, 1, (uint64_t)k, r->send + k * bytes, (size_t)bytes};
        if (p.from >= 0)
            ops[n++] = (dcpt_xfer_op_t){p.from, 0, (uint64_t)k, r->recv + k * bytes, (size_t)bytes};
    }
    double *times = calloc((size_t)r->size, sizeof *times);
    if (!times) return dcp_set_error(DCP_ERR_NO_MEMORY, "bench: times");
    dcp_status_t st = gather(r, 0, times); /* the start line */
    const double t0 = dcp_now();
    for (int64_t i = 0; st == DCP_OK && n > 0 && i < iters; i++) st = xfer(r->e, ops, n);
    /* the receiver acknowledges the last message: the sender's clock stops on arrival */
    dcpt_xfer_op_t ack[2];
    int64_t na = 0;
    if (p.from >= 0) ack[na++] = (dcpt_xfer_op_t){p.from, 1, 1u << 29, r->sync, 1};
    if (p.to >= 0) ack[na++] = (dcpt_xfer_op_t){p.to, 0, 1u << 29, r->sync + 1, 1};
    if (st == DCP_OK && na > 0) st = xfer(r->e, ack, na);
    const double mine = n > 0 ? dcp_now() - t0 : 0;
    if (st == DCP_OK) st = gather(r, mine, times);
    double slowest = 0;
    for (int32_t q = 0; st == DCP_OK && q < r->size; q++) slowest = fmax(slowest, times[q]);
    free(times);
    if (st == DCP_OK) *secs = slowest;
    return st;
}

typedef struct {
    const rank_t *r;
    peers_t p;
    int64_t bytes, iters;
} sample_t;

/* One measurement's time per message, in us. */
static dcp_status_t stream_sample(void *arg, int64_t i, double *us)
{
    (void)i;
    const sample_t *m = arg;
    double secs = 0;
    DCP_CHECK(stream(m->r, m->p, m->bytes, m->iters, &secs));
    *us = secs * 1e6 / (double)(m->iters * m->r->b->window);
    return DCP_OK;
}

/* pairs: `iters` round trips between a and b; half a round trip in us (every rank gets it). */
static dcp_status_t pingpong_sample(void *arg, int64_t i, double *us)
{
    (void)i;
    const sample_t *m = arg;
    const rank_t *r = m->r;
    double *times = calloc((size_t)r->size, sizeof *times);
    if (!times) return dcp_set_error(DCP_ERR_NO_MEMORY, "bench: times");
    dcp_status_t st = gather(r, 0, times);
    const int32_t a = m->p.a, b = m->p.b, peer = r->rank == a ? b : a;
    const double t0 = dcp_now();
    if (r->rank == a || r->rank == b) {
        const dcpt_xfer_op_t ping = {peer, 1, 7, r->send, (size_t)m->bytes};
        const dcpt_xfer_op_t pong = {peer, 0, 7, r->recv, (size_t)m->bytes};
        for (int64_t k = 0; st == DCP_OK && k < m->iters; k++) {
            st = xfer(r->e, r->rank == a ? &ping : &pong, 1);
            if (st == DCP_OK) st = xfer(r->e, r->rank == a ? &pong : &ping, 1);
        }
    }
    const double mine = r->rank == a ? (dcp_now() - t0) * 1e6 / (2.0 * (double)m->iters) : 0;
    if (st == DCP_OK) st = gather(r, mine, times);
    if (st == DCP_OK) *us = times[a];
    free(times);
    return st;
}

/* Fault injection for tests/tools/run.sh: with DCP_FAULT=RANK:check:flip, rank RANK flips a
 * bit of the first message it receives before the check reads it (the check must see it). */
static int flip_fault(int32_t rank)
{
    return dcpt_mpi_fault_is(rank, "check", "flip");
}

/* The check: the senders send their pattern once, the receivers count the bytes that differ
 * (their buffers cleared first); the sum over ranks. */
static dcp_status_t check(const rank_t *r, peers_t p, int64_t bytes, double *wrong)
{
    const int64_t w = r->b->window;
    for (int64_t k = 0; k < w; k++) {
        if (p.to >= 0) {
            for (int64_t i = 0; i < bytes; i++) r->host[i] = pattern(r->rank, k, i);
            DCP_CHECK(put(r, r->send + k * bytes, r->host, (size_t)bytes));
        }
        if (p.from >= 0) {
            memset(r->host, 0, (size_t)bytes);
            DCP_CHECK(put(r, r->recv + k * bytes, r->host, (size_t)bytes));
        }
    }
    double secs;
    DCP_CHECK(stream(r, p, bytes, 1, &secs));
    double bad = 0;
    for (int64_t k = 0; p.from >= 0 && k < w; k++) {
        DCP_CHECK(get(r, r->host, r->recv + k * bytes, (size_t)bytes));
        if (k == 0 && flip_fault(r->rank)) r->host[bytes / 2] ^= 0x10;
        for (int64_t i = 0; i < bytes; i++) bad += r->host[i] != pattern(p.from, k, i);
    }
    double *all = calloc((size_t)r->size, sizeof *all);
    if (!all) return dcp_set_error(DCP_ERR_NO_MEMORY, "bench: check");
    const dcp_status_t st = gather(r, bad, all);
    double sum = 0;
    for (int32_t q = 0; q < r->size; q++) sum += all[q];
    free(all);
    *wrong = sum;
    return st;
}

/* ---- the table ----------------------------------------------------------------------------- */

static const char *link_of(const rank_t *r, int32_t a, int32_t b)
{
    if (r->b->engine == ENGINE_INPROC) return "threads";
    return r->node[a] == r->node[b] ? "same node" : "other node";
}

static void print_header(const rank_t *r)
{
    const bench_t *b = r->b;
    const dcpt_bench_t h = {tool, b->json, b->warmup, b->reps, fields, NFIELDS};
    const char *tls = getenv("UCX_TLS");
    dcpt_bench_header(
        &h,
        "engine %s%s%s%s, %s memory, %d ranks on %d node(s), pattern %s, window %lld, "
        "~%lld MB per measurement, check %s; time per message, algbw = size / time, "
        "busbw = algbw (point to point), GB/s = 1e9 B/s",
        dcpt_xfer_kind_name(b->engine),
        b->engine == ENGINE_UCX || b->engine == ENGINE_STAGED ? " (UCX_TLS " : "",
        b->engine == ENGINE_UCX || b->engine == ENGINE_STAGED ? (tls ? tls : "auto") : "",
        b->engine == ENGINE_UCX || b->engine == ENGINE_STAGED ? ")" : "",
        b->device_mem ? "device" : "host", r->size, r->nodes,
        b->pattern == RAILS ? "rails" : "pairs", (long long)b->window, (long long)b->budget_mb,
        b->check ? "on" : "off");
    if (b->json) return;
    for (int32_t q = 0; q < r->size; q++)
        printf("#  Rank %3d on %-16s node %d, local rank %d\n", q, r->hosts[q], r->node[q],
               r->local[q]);
    dcpt_bench_table(&h);
}

/* What the rows add up to: rank 0's average busbw, and the check's wrong bytes (every rank's
 * sum; the first size and peers where they were). */
typedef struct {
    double bus_sum, wrong;
    int rows;
    char first_wrong[64];
} totals_t;

static dcp_status_t run_pattern(const rank_t *r, int32_t a, int32_t b, totals_t *tot)
{
    const bench_t *bn = r->b;
    const dcpt_bench_t bw = {tool, bn->json, bn->warmup, bn->reps, fields, NFIELDS};
    const peers_t p = bn->pattern == RAILS ? rail_peers(r) : pair_peers(r, a, b);
    for (int32_t s = 0; s < bn->num_sizes; s++) {
        const int64_t bytes = bn->sizes[s];
        int64_t iters = (bn->budget_mb << 20) / (bytes * bn->window);
        iters = iters < 1 ? 1 : iters > 100000 ? 100000 : iters;
        sample_t m = {r, p, bytes, iters};
        row_t row = {.engine = dcpt_xfer_kind_name(bn->engine),
                     .memory = bn->device_mem ? "device" : "host",
                     .type = "uint8",
                     .bytes = bytes,
                     .count = bytes,
                     .window = bn->window,
                     .wrong = NAN,
                     .agg = NAN,
                     .lat_us = {NAN, NAN, NAN, 0}};
        DCP_CHECK(dcpt_bench_time(&bw, stream_sample, &m, &row.time_us));
        if (bn->pattern == PAIRS) {
            int64_t lat_iters = (bn->budget_mb << 20) / (64 * bytes);
            lat_iters = lat_iters < 10 ? 10 : lat_iters > 1000 ? 1000 : lat_iters;
            m.iters = lat_iters;
            DCP_CHECK(dcpt_bench_time(&bw, pingpong_sample, &m, &row.lat_us));
        }
        if (bn->check) DCP_CHECK(check(r, p, bytes, &row.wrong));
        if (bn->check && row.wrong > 0 && tot->wrong == 0)
            snprintf(tot->first_wrong, sizeof tot->first_wrong, "%lld bytes, %s", (long long)bytes,
                     bn->pattern == RAILS ? "rails"
                     : a == 0 && b == 1   ? "0->1"
                                          : "a pair");
        if (bn->check && row.wrong > 0) tot->wrong += row.wrong;
        if (r->rank != 0) continue;
        row.algbw = (double)bytes / (row.time_us.median * 1e-6) / 1e9;
        row.busbw = row.algbw;
        row.mibps = row.algbw * 1e9 / 1048576.0;
        const char *tls = getenv("UCX_TLS");
        row.tls =
            bn->engine == ENGINE_UCX || bn->engine == ENGINE_STAGED ? (tls ? tls : "auto") : NULL;
        if (bn->pattern == RAILS) {
            row.peers = "rails";
            row.link = "rails";
            row.agg = row.algbw * r->size;
            row.host0 = r->hosts[0];
            row.host1 = r->hosts[rail_peers(r).to];
        } else {
            snprintf(row.peers_text, sizeof row.peers_text, "%d->%d", a, b);
            row.peers = row.peers_text;
            row.link = link_of(r, a, b);
            row.host0 = r->hosts[a];
            row.host1 = r->hosts[b];
        }
        dcpt_bench_row(&bw, &row, NULL, NULL);
        tot->bus_sum += row.busbw;
        tot->rows++;
    }
    return DCP_OK;
}

/* Every rank's node and local rank as the library finds nodes (host name and boot id); rails
 * need the ranks node by node, as many on each node. */
static dcp_status_t place(rank_t *r)
{
    DCP_CHECK(dcpt_job_placement(&r->bs, &r->where));
    r->node = r->where.node;
    r->local = r->where.local;
    r->hosts = r->where.host;
    r->nodes = r->where.nodes;
    if (r->b->pattern != RAILS) return DCP_OK;
    if (r->nodes < 2)
        return dcp_set_error(DCP_ERR_INVALID_ARG,
                             "--pattern rails: the %d ranks are on one node; rails join nodes",
                             r->size);
    const int32_t per = r->size / r->nodes;
    for (int32_t q = 0; q < r->size; q++)
        if (r->size % r->nodes || r->node[q] != q / per)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "--pattern rails: ranks must be placed node by node, as many on "
                                 "each (rank %d is on %s)",
                                 q, r->hosts[q]);
    return DCP_OK;
}

static int64_t buffer_bytes(const bench_t *b)
{
    int64_t most = 0;
    for (int32_t s = 0; s < b->num_sizes; s++) most = b->sizes[s] > most ? b->sizes[s] : most;
    return most * b->window;
}

static dcp_status_t alloc_buffers(rank_t *r)
{
    const int64_t n = buffer_bytes(r->b), largest = n / r->b->window;
    DCP_CHECK(dcp_calloc(&r->host, largest, 1, "bench staging"));
    r->sync = dcpt_mem_alloc(r->gpu, SYNC_BYTES);
    r->send = dcpt_mem_alloc(r->gpu, (size_t)n);
    r->recv = dcpt_mem_alloc(r->gpu, (size_t)n);
    if (!r->sync || !r->send || !r->recv)
        return r->gpu < 0 ? dcp_set_error(DCP_ERR_NO_MEMORY, "bench: 2 x %lld bytes of buffers",
                                          (long long)n)
                          : dcp_set_error(DCP_ERR_NO_MEMORY, "bench: 2 x %lld bytes on GPU %d",
                                          (long long)n, r->gpu);
    return DCP_OK;
}

static void free_buffers(rank_t *r)
{
    dcpt_mem_free(r->gpu, r->sync);
    dcpt_mem_free(r->gpu, r->send);
    dcpt_mem_free(r->gpu, r->recv);
    free(r->host);
}

/* The engine over the rank's bootstrap (the threads' set for inproc). */
static dcp_status_t make_engine(rank_t *r)
{
    return dcpt_xfer_open(r->b->engine, &r->bs, r->gpu, &r->e);
}

/* The whole bench on one rank: 0 when it passed (rank 0 prints). */
static dcp_status_t run_rank(rank_t *r)
{
    DCP_CHECK(place(r));
    if (r->b->device_mem) {
        const int count = dcpt_gpu_count();
        if (count == 0)
            return dcp_set_error(DCP_ERR_UNSUPPORTED, "--memory device: no CUDA device here%s",
                                 dcpt_cuda_built() ? "" : " (a build without CUDA)");
        r->gpu = r->local[r->rank] % count;
        DCP_CHECK(dcpt_gpu_select(r->gpu));
    }
    DCP_CHECK(make_engine(r));
    DCP_CHECK(alloc_buffers(r));
    if (r->rank == 0) print_header(r);
    totals_t tot = {0};
    if (r->b->pattern == RAILS)
        DCP_CHECK(run_pattern(r, -1, -1, &tot));
    else
        for (int32_t a = 0; a < r->size; a++)
            for (int32_t b = a + 1; b < r->size; b++) DCP_CHECK(run_pattern(r, a, b, &tot));
    if (r->rank == 0 && !r->b->json) {
        if (r->b->check)
            printf("# Out of bounds values : %.0f %s\n", tot.wrong,
                   tot.wrong > 0 ? "FAILED" : "OK");
        else
            printf("# Out of bounds values : not checked (-c 0)\n");
        printf("# Avg bus bandwidth    : %.3f GB/s\n", tot.rows ? tot.bus_sum / tot.rows : 0.0);
        fflush(stdout);
    }
    if (tot.wrong > 0)
        return dcp_set_error(DCP_ERR_INTERNAL,
                             "the check found %.0f bytes that differ from what was sent (first at "
                             "%s): engine %s moved wrong data",
                             tot.wrong, tot.first_wrong, dcpt_xfer_kind_name(r->b->engine));
    return DCP_OK;
}

static void release_rank(rank_t *r)
{
    dcpt_xfer_close(r->e);
    if (r->send || r->host) free_buffers(r);
    dcpt_placement_free(&r->where);
}

/* ---- threads and processes ----------------------------------------------------------------- */

typedef struct {
    rank_t r;
    dcp_status_t st;
    char why[256];
} thread_rank_t;

static void *thread_main(void *p)
{
    thread_rank_t *t = p;
    t->st = run_rank(&t->r);
    if (t->st != DCP_OK) dcp_error_save(t->why, sizeof t->why);
    release_rank(&t->r);
    return NULL;
}

static dcp_status_t solo_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    (void)state;
    memcpy(recv, send, bytes);
    return DCP_OK;
}

static int run_threads(const bench_t *b, int32_t n)
{
    const dcp_bootstrap_t procs = {.rank = 0, .size = 1, .allgather = solo_allgather};
    dcpt_threads_t *hybrid = NULL;
    thread_rank_t *t = calloc((size_t)n, sizeof *t);
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    if (!t || !tid || dcpt_threads_create(&procs, n, &hybrid) != DCP_OK) {
        fprintf(stderr, "%s: %s\n", tool, t && tid ? dcp_last_error() : "out of memory");
        free(t);
        free(tid);
        return 1;
    }
    for (int32_t l = 0; l < n; l++) {
        t[l].r = (rank_t){.b = b, .bs = *dcpt_threads_bootstrap(hybrid, l), .gpu = -1};
        t[l].r.rank = t[l].r.bs.rank;
        t[l].r.size = t[l].r.bs.size;
    }
    int started = 0;
    for (int32_t l = 1; l < n; l++)
        started += pthread_create(&tid[l], NULL, thread_main, &t[l]) == 0;
    if (started == n - 1) thread_main(&t[0]);
    for (int32_t l = 1; l <= started; l++) pthread_join(tid[l], NULL);
    int failed = started != n - 1;
    for (int32_t l = 0; l < n && !failed; l++)
        if (t[l].st != DCP_OK) {
            fprintf(stderr, "%s: rank %d: %s: %s\n", tool, l, dcp_status_string(t[l].st), t[l].why);
            failed = 1;
        }
    dcpt_threads_destroy(hybrid);
    free(t);
    free(tid);
    return failed;
}

static int run_processes(int *argc, char ***argv, const bench_t *b)
{
    rank_t r = {.b = b, .gpu = -1};
    dcp_status_t st = dcpt_mpi_start(argc, argv, &r.bs);
    if (st == DCP_OK) {
        r.rank = r.bs.rank;
        r.size = r.bs.size;
        dcpt_args_set_quiet(r.rank != 0);
        if (r.size < 2)
            st = dcp_set_error(DCP_ERR_INVALID_ARG, "%d process: a pair needs 2 (mpirun -np 2)",
                               r.size);
    }
    if (st == DCP_OK) st = run_rank(&r);
    /* a rank that failed alone tells the others, which then fail at their next collective */
    if (st == DCP_OK) st = dcpt_job_agree(&r.bs, st, "the bench");
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: %s: %s\n", tool, r.rank, dcp_status_string(st),
                dcp_last_error());
        dcpt_xfer_abort(r.e, dcp_last_error());
        dcpt_mpi_stop(1, 1);
        return 1;
    }
    release_rank(&r);
    dcpt_mpi_stop(0, 0);
    return 0;
}

/* nccl-tests' short flags (-b 8 -e 128M -f 2 -c 0) as the long ones. */
static void long_flags(int argc, char **argv)
{
    static const char *const shorts[][2] = {{"-b", "--minbytes"},   {"-e", "--maxbytes"},
                                            {"-f", "--stepfactor"}, {"-c", "--check"},
                                            {"-w", "--warmup"},     {"-n", "--reps"}};
    for (int i = 1; i < argc; i++)
        for (size_t k = 0; k < sizeof shorts / sizeof shorts[0]; k++)
            if (!strcmp(argv[i], shorts[k][0])) argv[i] = (char *)shorts[k][1];
}

int main(int argc, char **argv)
{
    bench_t b = {.window = 8, .reps = 5, .warmup = 1, .budget_mb = 64, .check = 1};
    const char *sizes = NULL, *engine = "ucx", *memory = NULL, *pattern = "pairs", *minb = "8",
               *maxb = "4M";
    int64_t factor = 4, ranks = 2, check = 1;
    dcpt_arg_t args[] = {
        {"engine", DCPT_ARG_STR, &engine, 0, 0,
         "ucx, staged (device memory over UCX) or nccl between processes (mpirun, srun); inproc "
         "(threads)",
         0},
        {"memory", DCPT_ARG_STR, &memory, 0, 0,
         "host or device (default: device for nccl and staged, host for ucx and inproc)", 0},
        {"pattern", DCPT_ARG_STR, &pattern, 0, 0,
         "pairs (every pair in turn) or rails (every rank to its peer on the next node, at once)",
         0},
        {"minbytes", DCPT_ARG_STR, &minb, 0, 0, "-b: the smallest size (suffixes K, M, G)", 0},
        {"maxbytes", DCPT_ARG_STR, &maxb, 0, 0, "-e: the largest size", 0},
        {"stepfactor", DCPT_ARG_INT, &factor, 2, 1024, "-f: each size this times the last", 0},
        {"sizes", DCPT_ARG_STR, &sizes, 0, 0, "a list of sizes instead of -b/-e/-f: 8,4K,1M", 0},
        {"check", DCPT_ARG_INT, &check, 0, 1, "-c: 1 checks the bytes received, 0 does not", 0},
        {"ranks", DCPT_ARG_INT, &ranks, 2, 1024, "inproc: ranks as threads", 0},
        {"window", DCPT_ARG_INT, &b.window, 1, MAX_WINDOW, "messages per launch", 0},
        {"reps", DCPT_ARG_INT, &b.reps, 1, 1000, "-n: measurements per size; median", 0},
        {"warmup", DCPT_ARG_INT, &b.warmup, 0, 1000, "-w: unrecorded measurements first", 0},
        {"mb", DCPT_ARG_INT, &b.budget_mb, 1, 1 << 20, "MB moved per measurement", 0},
        {"json", DCPT_ARG_FLAG, &b.json, 0, 0, "one JSON object per row", 0},
    };
    const int nargs = (int)(sizeof args / sizeof args[0]);
    dcpt_mpi_require_pmi(tool);
    long_flags(argc, argv);
    if (dcpt_mpi_launched()) dcpt_args_set_fail_hook(dcpt_mpi_fail_early);
    dcpt_args_parse(argc, argv, args, nargs, tool,
                    "Bandwidth, latency and correctness of dcp's block-transfer engines between\n"
                    "ranks, per message size (nccl-tests' table; -b/-e/-f/-c/-w/-n as there).");
    b.check = (int)check;
    int known = 0;
    for (int k = 0; k < DCPT_XFER_KINDS; k++)
        if (!strcmp(engine, dcpt_xfer_kind_name((dcpt_xfer_kind_t)k))) {
            b.engine = (dcpt_xfer_kind_t)k;
            known = 1;
        }
    if (!known) dcpt_args_fail(tool, "engine", "'%s': use ucx, staged, nccl or inproc", engine);
    if (!strcmp(pattern, "rails"))
        b.pattern = RAILS;
    else if (strcmp(pattern, "pairs"))
        dcpt_args_fail(tool, "pattern", "'%s': use pairs or rails", pattern);
    if (sizes &&
        (dcpt_args_seen(args, nargs, "minbytes") || dcpt_args_seen(args, nargs, "maxbytes")))
        dcpt_args_fail(tool, "sizes", "give a list or -b/-e/-f, not both");
    if (sizes)
        parse_sizes(sizes, &b);
    else
        sweep_sizes(minb, maxb, factor, &b);
    b.device_mem = b.engine == ENGINE_NCCL || b.engine == ENGINE_STAGED;
    if (memory && !strcmp(memory, "host"))
        b.device_mem = 0;
    else if (memory && !strcmp(memory, "device"))
        b.device_mem = 1;
    else if (memory)
        dcpt_args_fail(tool, "memory", "'%s': use host or device", memory);
    if (b.device_mem && b.engine == ENGINE_INPROC)
        dcpt_args_fail(tool, "memory",
                       "inproc moves host memory (device memory between threads "
                       "is the executor's, not a transport's)");
    if (b.device_mem && b.engine == ENGINE_UCX && !dcpt_xfer_ucx_cuda())
        dcpt_args_fail(tool, "memory",
                       "this UCX was built without CUDA: --engine staged moves "
                       "device memory over it");
    if (!b.device_mem && (b.engine == ENGINE_NCCL || b.engine == ENGINE_STAGED))
        dcpt_args_fail(tool, "memory", "%s moves device memory", dcpt_xfer_kind_name(b.engine));
    if (buffer_bytes(&b) > (1ll << 31))
        dcpt_args_fail(tool, "window", "%lld x the largest size is over 2 GiB per buffer",
                       (long long)b.window);
    const int threads = b.engine == ENGINE_INPROC;
    if (threads && b.pattern == RAILS)
        dcpt_args_fail(tool, "pattern", "rails join nodes: threads are on one");
    if (!threads && dcpt_args_seen(args, nargs, "ranks"))
        dcpt_args_fail(tool, "ranks", "the launcher gives the ranks of %s (mpirun -np N)", engine);
    if (!threads && !dcpt_mpi_launched())
        dcpt_args_fail(tool, "engine", "%s runs between processes: mpirun -np 2 %s", engine, tool);
    return threads ? run_threads(&b, (int32_t)ranks) : run_processes(&argc, &argv, &b);
}
