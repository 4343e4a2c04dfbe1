/*
 * dcp-transport-bench: bandwidth and latency of a block-transfer engine between two ranks,
 * per message size, to set beside `ucx_perftest -t tag_bw` / `-t tag_lat` on one machine.
 *
 *   mpirun -np 2 dcp-transport-bench                 UCX between two processes, host memory
 *   mpirun -np 2 dcp-transport-bench --engine nccl   NCCL between two GPUs, device memory
 *   dcp-transport-bench --engine inproc              in-process, between two threads
 *
 * Bandwidth: rank 0 streams --window messages per launch to rank 1, --iters launches, and
 * the clock stops when rank 1's one-byte acknowledgement of the last arrives. Latency: a
 * ping-pong, half the round trip. Each figure is the median, min and max of --reps
 * measurements after --warmup unrecorded ones (latency: of every round trip), through the
 * tools' bench harness (plugin/cli/bench.h). GB/s is 1e9 bytes per second; ucx_perftest
 * prints MiB/s (2^20 bytes per second), shown beside it. Each row names the two hosts, the
 * link class between them and, for UCX, the transports it was allowed ($UCX_TLS).
 */
#include "include/base/error.h"
#include "kernels/cuda/device.h"
#include "plugin/cli/args.h"
#include "plugin/cli/bench.h"
#include "plugin/cli/mpi_launch.h"
#include "transport/inproc.h"
#include "transport/nccl.h"
#include "transport/ucx.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tool = "dcp-transport-bench";

#define MAX_SIZES  32
#define TIMEOUT_S  60.0
#define SYNC_BYTES 64 /* the buffer's head: handshake and acknowledgement bytes */

#define HOST_CHARS 64

typedef struct {
    int64_t sizes[MAX_SIZES];
    int32_t num_sizes;
    int64_t window, reps, warmup, budget_mb;
    int json;
} bench_t;

typedef struct {
    dcpt_stats_t gbps, lat_us;
} figures_t;

/* One row of the table: a message size between two ranks. */
typedef struct {
    const char *engine, *link, *tls;
    int64_t bytes, window;
    dcpt_stats_t gbps, lat_us;
    double mibps; /* the median in ucx_perftest's unit */
    const char *host0, *host1;
} row_t;

static const dcpt_field_t fields[] = {
    DCPT_FIELD("engine", -8, "engine", DCPT_F_STR, NULL, row_t, engine),
    DCPT_FIELD("bytes", 10, "bytes", DCPT_F_INT, NULL, row_t, bytes),
    DCPT_FIELD(NULL, 0, "window", DCPT_F_INT, NULL, row_t, window),
    DCPT_FIELD("GB/s", 9, "gbps", DCPT_F_STATS, "%.3f", row_t, gbps),
    DCPT_FIELD("MiB/s", 10, "mibps", DCPT_F_NUM, "%.0f", row_t, mibps),
    DCPT_FIELD("lat(us)", 9, "latency_us", DCPT_F_STATS, "%.2f", row_t, lat_us),
    DCPT_FIELD("link", -11, "link", DCPT_F_STR, NULL, row_t, link),
    DCPT_FIELD("UCX_TLS", -10, "ucx_tls", DCPT_F_STR, NULL, row_t, tls),
    DCPT_FIELD("host0", -12, "host0", DCPT_F_STR, NULL, row_t, host0),
    DCPT_FIELD("host1", -12, "host1", DCPT_F_STR, NULL, row_t, host1),
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

/* "8,4K,64K,1M" */
static void parse_sizes(const char *list, bench_t *b)
{
    char **items, *storage;
    const int n = dcpt_args_split(tool, "sizes", list, &items, &storage);
    if (n > MAX_SIZES) dcpt_args_fail(tool, "sizes", "at most %d sizes", MAX_SIZES);
    for (int i = 0; i < n; i++) {
        char *end;
        long long v = strtoll(items[i], &end, 10);
        const long long unit = *end == 'K'   ? 1024
                               : *end == 'M' ? 1 << 20
                               : *end == 'G' ? 1 << 30
                                             : 1;
        if (unit > 1) end++;
        if (*end != '\0' || v < 1 || v > (1ll << 30) / unit)
            dcpt_args_fail(tool, "sizes", "'%s' is not a size in 1..1G (suffixes K, M, G)",
                           items[i]);
        b->sizes[i] = v * unit;
    }
    b->num_sizes = n;
    free(items);
    free(storage);
}

static dcp_status_t xfer(dcp_engine_t *e, const dcp_xfer_op_t *ops, int64_t n)
{
    dcp_xfer_req_t *req = NULL;
    DCP_CHECK(e->ops->launch(e, ops, n, &req));
    const dcp_status_t st = e->ops->wait(e, req, TIMEOUT_S, NULL);
    if (st != DCP_OK) e->ops->cancel(e, req);
    return st;
}

/* One byte each way: both ranks leave it together (to within a one-way latency). */
static dcp_status_t handshake(dcp_engine_t *e, char *byte)
{
    const int32_t peer = 1 - e->rank;
    const dcp_xfer_op_t ops[2] = {{peer, 1, 1u << 30, byte, 1, NULL, NULL},
                                  {peer, 0, 1u << 30, byte + 1, 1, NULL, NULL}};
    return xfer(e, ops, 2);
}

/* Seconds for `iters` launches of `window` messages of `bytes`, measured on rank 0. */
static dcp_status_t stream(dcp_engine_t *e, char *sync, char *buf, int64_t bytes, int64_t window,
                           int64_t iters, double *secs)
{
    const int32_t peer = 1 - e->rank, send = e->rank == 0;
    dcp_xfer_op_t ops[64];
    for (int64_t k = 0; k < window; k++)
        ops[k] =
            (dcp_xfer_op_t){peer, send, (uint64_t)k, buf + k * bytes, (size_t)bytes, NULL, NULL};
    DCP_CHECK(handshake(e, sync));
    const double t0 = dcp_now();
    for (int64_t i = 0; i < iters; i++) DCP_CHECK(xfer(e, ops, window));
    const dcp_xfer_op_t done = {peer, !send, 1u << 29, sync + 2, 1, NULL, NULL};
    DCP_CHECK(xfer(e, &done, 1));
    *secs = dcp_now() - t0;
    return DCP_OK;
}

/* What one measurement of either kind needs. */
typedef struct {
    dcp_engine_t *e;
    char *sync, *buf;
    int64_t bytes, window, iters;
} sample_t;

/* One streaming measurement: GB/s over `iters` launches of `window` messages. */
static dcp_status_t stream_sample(void *arg, int64_t i, double *gbps)
{
    (void)i;
    const sample_t *m = arg;
    double secs;
    DCP_CHECK(stream(m->e, m->sync, m->buf, m->bytes, m->window, m->iters, &secs));
    *gbps = (double)m->bytes * m->window * m->iters / secs / 1e9;
    return DCP_OK;
}

/* One round trip of `bytes`: its one-way latency in us. */
static dcp_status_t pingpong_sample(void *arg, int64_t i, double *us)
{
    (void)i;
    const sample_t *m = arg;
    const int32_t peer = 1 - m->e->rank;
    const dcp_xfer_op_t ping = {peer, 1, 7, m->buf, (size_t)m->bytes, NULL, NULL};
    const dcp_xfer_op_t pong = {peer, 0, 7, m->buf, (size_t)m->bytes, NULL, NULL};
    const double t0 = dcp_now();
    DCP_CHECK(xfer(m->e, m->e->rank == 0 ? &ping : &pong, 1));
    DCP_CHECK(xfer(m->e, m->e->rank == 0 ? &pong : &ping, 1));
    *us = (dcp_now() - t0) * 1e6 / 2;
    return DCP_OK;
}

/* Bytes of the buffer a rank needs: the sync head and a window of the largest size. */
static size_t buffer_bytes(const bench_t *b)
{
    int64_t most = 0;
    for (int32_t s = 0; s < b->num_sizes; s++) most = b->sizes[s] > most ? b->sizes[s] : most;
    return SYNC_BYTES + (size_t)(most * b->window);
}

/* Both figures for every size, over `mem` (buffer_bytes(), host or device memory as the
 * engine needs); filled on rank 0. */
static dcp_status_t run_rank(dcp_engine_t *e, const bench_t *b, char *mem, figures_t *out)
{
    const dcpt_bench_t bw = {tool, b->json, b->warmup, b->reps, fields, NFIELDS};
    for (int32_t s = 0; s < b->num_sizes; s++) {
        const int64_t bytes = b->sizes[s];
        /* each measurement moves about budget_mb, at least one launch */
        int64_t iters = (b->budget_mb << 20) / (bytes * b->window);
        iters = iters < 1 ? 1 : iters > 100000 ? 100000 : iters;
        sample_t m = {e, mem, mem + SYNC_BYTES, bytes, b->window, iters};
        DCP_CHECK(dcpt_bench_time(&bw, stream_sample, &m, &out[s].gbps));
        /* latency: every round trip a sample, a tenth of them unrecorded first */
        int64_t lat_iters = (b->budget_mb << 20) / (8 * bytes);
        lat_iters = lat_iters < 11 ? 11 : lat_iters > 2001 ? 2001 : lat_iters;
        const dcpt_bench_t lat = {tool, b->json, lat_iters / 10 + 1, lat_iters, fields, NFIELDS};
        DCP_CHECK(dcpt_bench_time(&lat, pingpong_sample, &m, &out[s].lat_us));
    }
    return DCP_OK;
}

/* The two ranks' hosts (hosts[r], HOST_CHARS each) and the link class between them. */
static const char *link_class(const char hosts[2][HOST_CHARS], int threads)
{
    return threads ? "threads" : strcmp(hosts[0], hosts[1]) ? "other node" : "same node";
}

static void report(const bench_t *b, const char *engine, const figures_t *f,
                   const char hosts[2][HOST_CHARS], int threads)
{
    const dcpt_bench_t h = {tool, b->json, b->warmup, b->reps, fields, NFIELDS};
    const char *tls = !strcmp(engine, "ucx") ? getenv("UCX_TLS") : NULL;
    dcpt_bench_header(&h,
                      "%s between %s and %s (%s), window %lld, ~%lld MB per measurement; "
                      "GB/s = 1e9 B/s, MiB/s = 2^20 B/s (ucx_perftest's unit), lat: half a "
                      "round trip (each a sample)",
                      engine, hosts[0], hosts[1], link_class(hosts, threads), (long long)b->window,
                      (long long)b->budget_mb);
    dcpt_bench_table(&h);
    for (int32_t s = 0; s < b->num_sizes; s++) {
        const row_t r = {engine,
                         link_class(hosts, threads),
                         strcmp(engine, "ucx") ? NULL
                         : tls                 ? tls
                                               : "auto",
                         b->sizes[s],
                         b->window,
                         f[s].gbps,
                         f[s].lat_us,
                         f[s].gbps.median * 1e9 / 1048576.0,
                         hosts[0],
                         hosts[1]};
        dcpt_bench_row(&h, &r, NULL, NULL);
    }
}

static void this_host(char host[HOST_CHARS])
{
    memset(host, 0, HOST_CHARS);
    if (gethostname(host, HOST_CHARS - 1) != 0) snprintf(host, HOST_CHARS, "unknown");
}

typedef struct {
    dcp_inproc_hub_t *hub;
    int32_t rank;
    const bench_t *b;
    figures_t *f;
    dcp_status_t st;
    char why[256];
} thread_rank_t;

static void *thread_main(void *p)
{
    thread_rank_t *t = p;
    dcp_engine_t *e = NULL;
    char *mem = NULL;
    t->st = dcp_inproc_engine_create(t->hub, t->rank, &e);
    if (t->st == DCP_OK) t->st = dcp_calloc(&mem, (int64_t)buffer_bytes(t->b), 1, "bench buffer");
    if (t->st == DCP_OK) t->st = run_rank(e, t->b, mem, t->f);
    if (t->st != DCP_OK) dcp_error_save(t->why, sizeof t->why);
    free(mem);
    dcp_engine_destroy(e);
    return NULL;
}

static int run_threads(const bench_t *b)
{
    figures_t f[2][MAX_SIZES];
    thread_rank_t t[2];
    dcp_inproc_hub_t *hub = NULL;
    if (dcp_inproc_hub_create(2, &hub) != DCP_OK) {
        fprintf(stderr, "%s: %s\n", tool, dcp_last_error());
        return 1;
    }
    pthread_t th;
    for (int r = 0; r < 2; r++) t[r] = (thread_rank_t){hub, r, b, f[r], DCP_OK, ""};
    pthread_create(&th, NULL, thread_main, &t[1]);
    thread_main(&t[0]);
    pthread_join(th, NULL);
    dcp_inproc_hub_destroy(hub);
    for (int r = 0; r < 2; r++)
        if (t[r].st != DCP_OK) {
            fprintf(stderr, "%s: rank %d: %s: %s\n", tool, r, dcp_status_string(t[r].st), t[r].why);
            return 1;
        }
    char hosts[2][HOST_CHARS];
    this_host(hosts[0]);
    memcpy(hosts[1], hosts[0], HOST_CHARS);
    report(b, "inproc", f[0], (const char(*)[HOST_CHARS])hosts, 1);
    return 0;
}

/* UCX moves host memory; NCCL device memory, one GPU per rank (local rank modulo the
 * devices). */
static int run_processes(int *argc, char ***argv, const bench_t *b, const char *engine)
{
    const int gpu = !strcmp(engine, "nccl");
    const int device =
        gpu && dcp_cuda_device_count() > 0 ? dcpt_mpi_local_rank() % dcp_cuda_device_count() : 0;
    dcp_bootstrap_t bs;
    dcp_engine_t *e = NULL;
    char *mem = NULL;
    dcp_status_t st = dcpt_mpi_start(argc, argv, &bs);
    if (st == DCP_OK && bs.size != 2)
        st = dcp_set_error(DCP_ERR_INVALID_ARG, "run it with 2 processes (mpirun -np 2), not %d",
                           bs.size);
    if (st == DCP_OK)
        st = gpu ? dcp_nccl_engine_create(&bs, device, NULL, NULL, &e)
                 : dcp_ucx_engine_create(&bs, &e);
    if (st == DCP_OK && gpu && !(mem = dcp_cuda_alloc(device, buffer_bytes(b))))
        st = dcp_set_error(DCP_ERR_NO_MEMORY, "cannot allocate %zu bytes on GPU %d",
                           buffer_bytes(b), device);
    if (st == DCP_OK && !gpu) st = dcp_calloc(&mem, (int64_t)buffer_bytes(b), 1, "bench buffer");
    char host[HOST_CHARS], hosts[2][HOST_CHARS];
    this_host(host);
    if (st == DCP_OK) st = bs.allgather(bs.state, host, hosts, HOST_CHARS);
    figures_t f[MAX_SIZES];
    if (st == DCP_OK) st = run_rank(e, b, mem, f);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: %s: %s\n", tool, bs.rank, dcp_status_string(st),
                dcp_last_error());
        dcpt_mpi_stop(1, 1);
        return 1;
    }
    if (bs.rank == 0) report(b, engine, f, (const char(*)[HOST_CHARS])hosts, 0);
    dcp_engine_destroy(e);
    if (gpu)
        dcp_cuda_free(mem);
    else
        free(mem);
    dcpt_mpi_stop(0, 0);
    return 0;
}

int main(int argc, char **argv)
{
    bench_t b = {.window = 8, .reps = 5, .warmup = 1, .budget_mb = 256};
    const char *sizes = "8,4K,64K,256K,1M,4M", *engine = NULL;
    dcpt_arg_t args[] = {
        {"engine", DCPT_ARG_STR, &engine, 0, 0,
         "ucx (default) or nccl under mpirun -np 2; inproc (two threads)", 0},
        {"sizes", DCPT_ARG_STR, &sizes, 0, 0, "message sizes", 0},
        {"window", DCPT_ARG_INT, &b.window, 1, 64, "messages per launch", 0},
        {"reps", DCPT_ARG_INT, &b.reps, 1, 1000, "measurements per size; median", 0},
        {"warmup", DCPT_ARG_INT, &b.warmup, 0, 1000, "unrecorded measurements first", 0},
        {"mb", DCPT_ARG_INT, &b.budget_mb, 1, 1 << 20, "MB moved per measurement", 0},
        {"json", DCPT_ARG_FLAG, &b.json, 0, 0, "one JSON object per size", 0},
    };
    const int nargs = (int)(sizeof args / sizeof args[0]);
    dcpt_args_parse(argc, argv, args, nargs, tool,
                    "Bandwidth and latency of dcp's block-transfer engines between two ranks.");
    parse_sizes(sizes, &b);
    if (!engine) engine = "ucx";
    if (strcmp(engine, "ucx") && strcmp(engine, "nccl") && strcmp(engine, "inproc"))
        dcpt_args_fail(tool, "engine", "'%s': use ucx, nccl or inproc", engine);
    const int threads = !strcmp(engine, "inproc");
    if (!threads && !dcpt_mpi_launched())
        dcpt_args_fail(tool, "engine", "%s runs between processes: mpirun -np 2 %s", engine, tool);
    return threads ? run_threads(&b) : run_processes(&argc, &argv, &b, engine);
}
