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
 * ping-pong, half the round trip. Each figure is the median of --reps measurements after
 * --warmup unrecorded ones.
 */
#include "include/base/error.h"
#include "kernels/cuda/device.h"
#include "plugin/cli/args.h"
#include "plugin/cli/report.h"
#include "plugin/cli/mpi_launch.h"
#include "transport/inproc.h"
#include "transport/nccl.h"
#include "transport/ucx.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tool = "dcp-transport-bench";

#define MAX_SIZES  32
#define TIMEOUT_S  60.0
#define SYNC_BYTES 64 /* the buffer's head: handshake and acknowledgement bytes */

typedef struct {
    int64_t sizes[MAX_SIZES];
    int32_t num_sizes;
    int64_t window, reps, warmup, budget_mb;
    int json;
} bench_t;

typedef struct {
    double gbps, lat_us;
} figures_t;

/* "8,4K,64K,1M" */
static void parse_sizes(const char *list, bench_t *b)
{
    char **items, *storage;
    const int n = dcp_args_split(tool, "sizes", list, &items, &storage);
    if (n > MAX_SIZES) dcp_args_fail(tool, "sizes", "at most %d sizes", MAX_SIZES);
    for (int i = 0; i < n; i++) {
        char *end;
        long long v = strtoll(items[i], &end, 10);
        const long long unit = *end == 'K'   ? 1024
                               : *end == 'M' ? 1 << 20
                               : *end == 'G' ? 1 << 30
                                             : 1;
        if (unit > 1) end++;
        if (*end != '\0' || v < 1 || v > (1ll << 30) / unit)
            dcp_args_fail(tool, "sizes", "'%s' is not a size in 1..1G (suffixes K, M, G)",
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

/* Median one-way latency over `iters` round trips of `bytes`. */
static dcp_status_t pingpong(dcp_engine_t *e, char *buf, int64_t bytes, int64_t iters, double *us)
{
    const int32_t peer = 1 - e->rank;
    double *t = NULL;
    DCP_CHECK(dcp_calloc(&t, iters, sizeof *t, "bench"));
    const dcp_xfer_op_t ping = {peer, 1, 7, buf, (size_t)bytes, NULL, NULL};
    const dcp_xfer_op_t pong = {peer, 0, 7, buf, (size_t)bytes, NULL, NULL};
    dcp_status_t st = DCP_OK;
    for (int64_t i = 0; i < iters && st == DCP_OK; i++) {
        const double t0 = dcp_now();
        if (e->rank == 0) {
            st = xfer(e, &ping, 1);
            if (st == DCP_OK) st = xfer(e, &pong, 1);
        } else {
            st = xfer(e, &pong, 1);
            if (st == DCP_OK) st = xfer(e, &ping, 1);
        }
        t[i] = (dcp_now() - t0) * 1e6 / 2;
    }
    if (st == DCP_OK) *us = dcp_median(t, iters);
    free(t);
    return st;
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
    char *const sync = mem, *const buf = mem + SYNC_BYTES;
    double *secs = NULL;
    dcp_status_t st;
    DCP_CHECK_GOTO(dcp_calloc(&secs, b->reps, sizeof *secs, "bench"), st, out);
    for (int32_t s = 0; s < b->num_sizes; s++) {
        const int64_t bytes = b->sizes[s];
        /* each measurement moves about budget_mb, at least one launch */
        int64_t iters = (b->budget_mb << 20) / (bytes * b->window);
        iters = iters < 1 ? 1 : iters > 100000 ? 100000 : iters;
        for (int64_t r = 0; r < b->warmup + b->reps; r++) {
            double t;
            DCP_CHECK_GOTO(stream(e, sync, buf, bytes, b->window, iters, &t), st, out);
            if (r >= b->warmup) secs[r - b->warmup] = t;
        }
        out[s].gbps = (double)bytes * b->window * iters / dcp_median(secs, b->reps) / 1e9;
        int64_t lat_iters = (b->budget_mb << 20) / (8 * bytes);
        lat_iters = lat_iters < 11 ? 11 : lat_iters > 2001 ? 2001 : lat_iters;
        DCP_CHECK_GOTO(pingpong(e, buf, bytes, lat_iters / 10 + 1, &out[s].lat_us), st, out);
        DCP_CHECK_GOTO(pingpong(e, buf, bytes, lat_iters, &out[s].lat_us), st, out);
    }
    st = DCP_OK;
out:
    free(secs);
    return st;
}

static void report(const bench_t *b, const char *engine, const figures_t *f)
{
    static const dcp_col_t cols[] = {{"engine", -8}, {"bytes", 10}, {"GB/s", 9}, {"lat(us)", 9}};
    if (!b->json) {
        printf("# %s: window %lld, median of %lld (after %lld warm-up), ~%lld MB per measurement\n",
               tool, (long long)b->window, (long long)b->reps, (long long)b->warmup,
               (long long)b->budget_mb);
        dcp_table_header(stdout, cols, 4);
    }
    for (int32_t s = 0; s < b->num_sizes; s++) {
        if (b->json) {
            dcp_json_t j;
            dcp_json_begin(&j, stdout);
            dcp_json_str(&j, "engine", engine);
            dcp_json_int(&j, "bytes", b->sizes[s]);
            dcp_json_int(&j, "window", b->window);
            dcp_json_num(&j, "gbps", f[s].gbps);
            dcp_json_num(&j, "latency_us", f[s].lat_us);
            dcp_json_end(&j);
            continue;
        }
        char cell[4][32];
        snprintf(cell[0], 32, "%s", engine);
        snprintf(cell[1], 32, "%lld", (long long)b->sizes[s]);
        snprintf(cell[2], 32, "%.3f", f[s].gbps);
        snprintf(cell[3], 32, "%.2f", f[s].lat_us);
        dcp_table_row(stdout, cols, 4, cell);
    }
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
    report(b, "inproc", f[0]);
    return 0;
}

/* UCX moves host memory; NCCL device memory, one GPU per rank (local rank modulo the
 * devices). */
static int run_processes(int *argc, char ***argv, const bench_t *b, const char *engine)
{
    const int gpu = !strcmp(engine, "nccl");
    const int device =
        gpu && dcp_cuda_device_count() > 0 ? dcp_mpi_local_rank() % dcp_cuda_device_count() : 0;
    dcp_bootstrap_t bs;
    dcp_engine_t *e = NULL;
    char *mem = NULL;
    dcp_status_t st = dcp_mpi_start(argc, argv, &bs);
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
    figures_t f[MAX_SIZES];
    if (st == DCP_OK) st = run_rank(e, b, mem, f);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: %s: %s\n", tool, bs.rank, dcp_status_string(st),
                dcp_last_error());
        dcp_mpi_stop(1, 1);
        return 1;
    }
    if (bs.rank == 0) report(b, engine, f);
    dcp_engine_destroy(e);
    if (gpu)
        dcp_cuda_free(mem);
    else
        free(mem);
    dcp_mpi_stop(0, 0);
    return 0;
}

int main(int argc, char **argv)
{
    bench_t b = {.window = 8, .reps = 5, .warmup = 1, .budget_mb = 256};
    const char *sizes = "8,4K,64K,256K,1M,4M", *engine = NULL;
    dcp_arg_t args[] = {
        {"engine", DCP_ARG_STR, &engine, 0, 0,
         "ucx (default) or nccl under mpirun -np 2; inproc (two threads)", 0},
        {"sizes", DCP_ARG_STR, &sizes, 0, 0, "message sizes (default 8,4K,64K,256K,1M,4M)", 0},
        {"window", DCP_ARG_INT, &b.window, 1, 64, "messages per launch (default 8)", 0},
        {"reps", DCP_ARG_INT, &b.reps, 1, 1000, "measurements per size; median (default 5)", 0},
        {"warmup", DCP_ARG_INT, &b.warmup, 0, 1000, "unrecorded measurements first (default 1)", 0},
        {"mb", DCP_ARG_INT, &b.budget_mb, 1, 1 << 20, "MB moved per measurement (default 256)", 0},
        {"json", DCP_ARG_FLAG, &b.json, 0, 0, "one JSON object per size", 0},
    };
    const int nargs = (int)(sizeof args / sizeof args[0]);
    dcp_args_parse(argc, argv, args, nargs, tool,
                   "Bandwidth and latency of dcp's block-transfer engines between two ranks.");
    parse_sizes(sizes, &b);
    if (!engine) engine = "ucx";
    if (strcmp(engine, "ucx") && strcmp(engine, "nccl") && strcmp(engine, "inproc"))
        dcp_args_fail(tool, "engine", "'%s': use ucx, nccl or inproc", engine);
    const int threads = !strcmp(engine, "inproc");
    if (!threads && !dcp_mpi_launched())
        dcp_args_fail(tool, "engine", "%s runs between processes: mpirun -np 2 %s", engine, tool);
    return threads ? run_threads(&b) : run_processes(&argc, &argv, &b, engine);
}
