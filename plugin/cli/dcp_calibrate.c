/*
 * dcp-calibrate: measures, once and on the cluster itself, the figures that the planner's
 * cost model and the step-time simulator assume, and writes them where those take them:
 *   PREFIX.node  a node file (topo/node_file.c): `--cluster Nx@PREFIX.node` in dcp-plan and
 *                dcp-attn-test, dcp_cluster_from_spec() in a program; N nodes of this kind;
 *   PREFIX.json  the simulator's kernel table (`dcp-plan --sim-kernels PREFIX.json`), its
 *                first line a record of every figure measured.
 * It runs as the training job runs: under mpirun, one rank per process or --ranks-per-process
 * threads per process, ranks placed node by node (nodes are found by host name, as contexts
 * find them); started plainly, --ranks threads of this process (one node).
 *
 * Links, through the job's own engines (UCX, NCCL, in-process), each a median of --reps
 * measurements sized to take about 0.3 s after one that sizes them:
 *   intra      rank 0 -> rank 1 (one node), GB/s;
 *   inter      rank 0 -> the first rank of node 1: one flow;
 *   inter-all  every device of node 0 -> its peer on node 1 at once: the node's network.
 *              inter = that over the devices (the cost model's per-device figure), and the
 *              node's NICs are the number of one-flow rates it holds (1 when the devices share
 *              one link, G when each has its own);
 *   lat        8-byte ping-pong between rank 0 and node 1 (or rank 1), half the round trip.
 * Kernels, through the executor: every rank plans and runs a one-rank batch of causal
 * sequences of 4 blocks at each --tiles block size, forward then backward, and an array copy;
 * once with every rank at work ("all": a device's speed while the others compute, what the
 * planner needs) and once with rank 0 alone ("one"). Where "all" is much slower than "one",
 * the ranks share processors (CPU ranks on few cores): the simulator then takes the "one"
 * rates and the count of processors the ranks share (--sim-host-cores), otherwise "all".
 *   tflops  the best forward TFLOP/s with every rank at work; kernel EDGE EFF its curve;
 *   bwd     the backward's TFLOP/s (2.5x the forward's FLOPs) over the forward's, median
 *           over the tiles;
 *   hbm     the copy's GB/s (bytes read + written); the simulator's merges are timed as
 *           copies too.
 */
#include "include/base/error.h"
#include "include/base/out_file.h"
#include "include/dcp.h"
#include "plugin/cli/helpers/args.h"
#include "plugin/cli/helpers/common.h"
#include "plugin/cli/launch/mpi_launch.h"
#include "plugin/cli/support/bench.h"
#include "plugin/cli/support/harness.h"
#include "plugin/cli/support/job.h"
#include "plugin/cli/support/mem.h"
#include "plugin/cli/support/xfer.h"
#include "topo/kernel_table.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tool = "dcp-calibrate";

#define MAX_TILES  16
#define MSG_BYTES  (1 << 20) /* one message of a bandwidth measurement */
#define WINDOW     8         /* messages in flight per launch */
#define TARGET_S   0.3       /* a bandwidth measurement's length */
#define LAT_TRIPS  50
#define COPY_BYTES (64 << 20)
#define CAL_TAG    (1ull << 40) /* below the barrier's and the engines' own tags */

typedef struct {
    const char *out, *device, *dtype, *tiles;
    int64_t ranks, ranks_per_process, tokens, heads, kv_heads, head_dim, reps, warmup;
    double timeout;
    int json;
} flags_t;

/* One rank of the calibration job. */
typedef struct {
    const flags_t *f;
    dcp_bootstrap_t bs;
    dcp_context_t *ctx;
    dcpt_xfer_t *xfer; /* the context's engine */
    int32_t device;    /* where the context computes (dcp_context_device) */
    int32_t rank, size, nodes, devs;
    dcp_attn_shape_t shape;
    uint64_t round; /* measurement steps so far (the same on every rank) */
    int failed;
} cal_t;

/* One line of the table: a figure measured with one rank (or flow) at work and with all. */
typedef struct {
    const char *item, *unit;
    int32_t tile;
    dcpt_stats_t one, all;
} row_t;

static const dcpt_field_t fields[] = {
    DCPT_FIELD("item", -10, "item", DCPT_F_STR, NULL, row_t, item),
    DCPT_FIELD("tile", 5, "tile", DCPT_F_I32, NULL, row_t, tile),
    DCPT_FIELD("one", 10, "one", DCPT_F_STATS, "%.4g", row_t, one),
    DCPT_FIELD("all", 10, "all", DCPT_F_STATS, "%.4g", row_t, all),
    DCPT_FIELD("unit", -8, "unit", DCPT_F_STR, NULL, row_t, unit),
};
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

/* Every rank's x, gathered (all[size]). */
static dcp_status_t gather(cal_t *c, double x, double *all)
{
    return dcpt_job_allgather(&c->bs, &x, all, sizeof x, "calibration figures");
}

/* The largest of every rank's x (the same on every rank). */
static dcp_status_t gather_max(cal_t *c, double x, double *max_out)
{
    double *all = NULL;
    DCP_CHECK(dcp_calloc(&all, c->size, sizeof *all, "calibration"));
    const dcp_status_t st = gather(c, x, all);
    double m = -INFINITY;
    for (int32_t r = 0; st == DCP_OK && r < c->size; r++) m = fmax(m, all[r]);
    free(all);
    *max_out = m;
    return st;
}

/* ---- links ------------------------------------------------------------------------------- */

/* The tag of message i from rank src in measurement step `round`: UCX matches receives by
 * tag alone, so every message in flight has its own. */
static uint64_t cal_tag(uint64_t round, int32_t src, int32_t i)
{
    return CAL_TAG | (round & 0xffffffull) << 24 | (uint64_t)src << 8 | (uint64_t)i;
}

/* One step: this rank sends n messages of `bytes` to `to` (if >= 0) from the first half of
 * buf and receives n from `from` (if >= 0) into the second half, all in one launch, and waits
 * for them. Every rank takes every step (the round counts them). */
static dcp_status_t step(cal_t *c, int32_t to, int32_t from, char *buf, int32_t n, size_t bytes)
{
    dcpt_xfer_op_t ops[2 * WINDOW];
    int32_t k = 0;
    for (int32_t i = 0; to >= 0 && i < n; i++)
        ops[k++] = (dcpt_xfer_op_t){to, 1, cal_tag(c->round, c->rank, i), buf + i * bytes, bytes};
    for (int32_t i = 0; from >= 0 && i < n; i++)
        ops[k++] = (dcpt_xfer_op_t){from, 0, cal_tag(c->round, from, i),
                                    buf + (size_t)WINDOW * MSG_BYTES + i * bytes, bytes};
    c->round++;
    /* the context's timeout; a failure tells the peers, as a failed call does */
    return dcpt_xfer_run(c->xfer, ops, k, 0);
}

/* Every rank r with dst[r] >= 0 streams `launches` windows to it, from a common start; the
 * seconds until the last rank is done. */
static dcp_status_t stream(cal_t *c, const int32_t *dst, int64_t launches, char *buf,
                           double *secs_out)
{
    int32_t src = -1;
    for (int32_t r = 0; r < c->size; r++)
        if (dst[r] == c->rank) src = r;
    DCP_CHECK(dcp_context_barrier(c->ctx));
    const double t0 = dcp_now();
    for (int64_t l = 0; l < launches; l++)
        DCP_CHECK(step(c, dst[c->rank], src, buf, WINDOW, MSG_BYTES));
    return gather_max(c, dcp_now() - t0, secs_out);
}

/* GB/s of the flows dst describes (their bytes summed): a sizing run, then --reps. */
static dcp_status_t bandwidth(cal_t *c, const int32_t *dst, char *buf, dcpt_stats_t *out)
{
    int32_t flows = 0;
    for (int32_t r = 0; r < c->size; r++) flows += dst[r] >= 0;
    const double window = (double)WINDOW * MSG_BYTES;
    double secs = 0, gbps[64];
    DCP_CHECK(stream(c, dst, 2, buf, &secs));
    int64_t launches = (int64_t)ceil(TARGET_S / (secs / 2));
    if (launches < 2) launches = 2;
    if (launches > 512) launches = 512;
    for (int64_t i = 0; i < c->f->reps; i++) {
        DCP_CHECK(stream(c, dst, launches, buf, &secs));
        gbps[i] = flows * window * (double)launches / secs / 1e9;
    }
    *out = dcpt_stats(gbps, c->f->reps);
    return DCP_OK;
}

/* Half the round trip of 8 bytes between ranks a and b, in microseconds (rank a's median of
 * LAT_TRIPS, on every rank). */
static dcp_status_t latency(cal_t *c, int32_t a, int32_t b, char *buf, dcpt_stats_t *out)
{
    double us[LAT_TRIPS];
    DCP_CHECK(dcp_context_barrier(c->ctx));
    for (int32_t i = 0; i < LAT_TRIPS; i++) {
        const double t0 = dcp_now();
        const int me = c->rank == a ? 1 : c->rank == b ? 2 : 0;
        DCP_CHECK(step(c, me == 1 ? b : -1, me == 2 ? a : -1, buf, 1, 8));
        DCP_CHECK(step(c, me == 2 ? a : -1, me == 1 ? b : -1, buf, 1, 8));
        us[i] = (dcp_now() - t0) / 2 * 1e6;
    }
    double v = 0;
    DCP_CHECK(gather_max(c, c->rank == a ? dcpt_median(us, LAT_TRIPS) : 0, &v));
    *out = dcpt_stats(&v, 1);
    return DCP_OK;
}

/* ---- kernels ----------------------------------------------------------------------------- */

/* Seconds of the forward and the backward of a one-rank plan of `tokens` causal tokens in
 * sequences of 4 blocks of `block` tokens, on this rank's device; flops of each. */
typedef struct {
    dcpt_harness_t *h;
    dcp_plan_t *plan;
    double fwd_flops, bwd_flops;
} kcase_t;

static dcp_status_t kcase_build(const cal_t *c, int32_t block, kcase_t *k)
{
    const int32_t len = 4 * block;
    const int32_t n = (int32_t)(c->f->tokens / len); /* >= 1: --tiles is checked */
    int32_t *lengths = calloc((size_t)n, sizeof *lengths);
    dcp_mask_t *masks = calloc((size_t)n, sizeof *masks);
    dcp_status_t st = lengths && masks ? DCP_OK : DCP_ERR_NO_MEMORY;
    for (int32_t i = 0; st == DCP_OK && i < n; i++) {
        lengths[i] = len;
        st = dcp_mask_parse("causal", &masks[i]);
    }
    if (st == DCP_OK) st = dcpt_harness_create(lengths, n, masks, &c->shape, 1, &k->h);
    if (st == DCP_OK) st = dcpt_harness_enable_backward(k->h, 2);
    dcp_cluster_t *one = NULL;
    if (st == DCP_OK) st = dcp_cluster_from_spec("1x1", &one);
    dcp_plan_options_t o;
    dcp_plan_options_default(&o);
    o.block_size = block;
    o.strategy = DCP_STRATEGY_LPT;
    const dcp_batch_t batch = k->h ? dcpt_harness_batch(k->h) : (dcp_batch_t){0};
    if (st == DCP_OK) st = dcp_plan_create(&batch, &c->shape, &o, one, &k->plan);
    dcp_plan_stats_t ps;
    if (st == DCP_OK) st = dcp_plan_get_stats(k->plan, &ps);
    if (st == DCP_OK) {
        k->fwd_flops = (double)ps.total_flops;
        k->bwd_flops = (double)ps.bwd_flops;
    }
    dcp_cluster_destroy(one);
    free(lengths);
    free(masks);
    return st;
}

static void kcase_free(kcase_t *k)
{
    dcp_plan_destroy(k->plan);
    dcpt_harness_destroy(k->h);
}

/* This rank's device as dcp_forward_inproc names it. */
static void device_name(const cal_t *c, char *buf, size_t n)
{
    const int32_t d = dcp_context_device(c->ctx);
    if (d < 0)
        snprintf(buf, n, "cpu");
    else
        snprintf(buf, n, "cuda:%d", d);
}

/* TFLOP/s of the forward and the backward: every run synchronised over the bootstrap (whose
 * waits sleep, leaving the processors to the ranks at work); `all`: every rank runs, each
 * sample the median over the ranks; otherwise rank 0 alone. */
static dcp_status_t kernel_rates(cal_t *c, const kcase_t *k, int all, dcpt_stats_t *fwd,
                                 dcpt_stats_t *bwd)
{
    const int64_t n = c->f->reps;
    double f[64], b[64], *per = NULL;
    char dev[32];
    device_name(c, dev, sizeof dev);
    DCP_CHECK(dcp_calloc(&per, c->size, sizeof *per, "calibration"));
    dcp_status_t st = DCP_OK;
    for (int64_t i = 0; st == DCP_OK && i < c->f->warmup + n; i++) {
        double x = 0;
        st = gather(c, 0, per); /* a common start */
        dcpt_harness_result_t r = {0};
        if (st == DCP_OK && (all || c->rank == 0))
            st = dcpt_harness_run(k->h, k->plan, 0, 1, c->f->timeout, 1, dev, &r);
        st = dcpt_job_agree(&c->bs, st, "kernel run");
        for (int pass = 0; pass < 2 && st == DCP_OK; pass++) {
            const double ms = pass == 0 ? r.exec_ms.median : r.bwd_exec_ms.median;
            x = (all || c->rank == 0) ? (pass == 0 ? k->fwd_flops : k->bwd_flops) / (ms * 1e9) : 0;
            st = gather(c, x, per);
            const double v = all ? dcpt_median(per, c->size) : per[0];
            if (st == DCP_OK && i >= c->f->warmup) (pass == 0 ? f : b)[i - c->f->warmup] = v;
        }
    }
    free(per);
    if (st == DCP_OK) {
        *fwd = dcpt_stats(f, n);
        *bwd = dcpt_stats(b, n);
    }
    return st;
}

/* GB/s of one copy of COPY_BYTES on this rank's device (bytes read + written). */
static dcp_status_t copy_rate(cal_t *c, int all, dcpt_stats_t *out)
{
    void *a = dcpt_mem_alloc(c->device, COPY_BYTES), *b = dcpt_mem_alloc(c->device, COPY_BYTES);
    double g[64], *per = NULL;
    dcp_status_t st = a && b ? DCP_OK : dcp_set_error(DCP_ERR_NO_MEMORY, "calibration: copy");
    if (st == DCP_OK) st = dcpt_mem_fill_f32(c->device, a, COPY_BYTES / 4, 1.0f);
    if (st == DCP_OK) st = dcp_calloc(&per, c->size, sizeof *per, "calibration");
    for (int64_t i = 0; st == DCP_OK && i < c->f->warmup + c->f->reps; i++) {
        st = gather(c, 0, per);
        double x = 0;
        if (st == DCP_OK && (all || c->rank == 0)) {
            const double t0 = dcp_now();
            st = dcpt_mem_copy(c->device, b, a, COPY_BYTES); /* done at return */
            x = 2.0 * COPY_BYTES / ((dcp_now() - t0) * 1e9);
        }
        st = dcpt_job_agree(&c->bs, st, "copy");
        if (st == DCP_OK) st = gather(c, x, per);
        if (st == DCP_OK && i >= c->f->warmup)
            g[i - c->f->warmup] = all ? dcpt_median(per, c->size) : per[0];
    }
    if (st == DCP_OK) *out = dcpt_stats(g, c->f->reps);
    free(per);
    dcpt_mem_free(c->device, a);
    dcpt_mem_free(c->device, b);
    return st;
}

/* ---- the job ----------------------------------------------------------------------------- */

typedef struct {
    row_t rows[8 + 3 * MAX_TILES];
    int32_t n;
    int32_t tiles[MAX_TILES], ntiles;
} results_t;

static row_t *add(results_t *res, const char *item, int32_t tile, const char *unit)
{
    row_t *r = &res->rows[res->n++];
    *r = (row_t){item, unit, tile, dcpt_stats(NULL, 0), dcpt_stats(NULL, 0)};
    return r;
}

static const row_t *find(const results_t *res, const char *item, int32_t tile)
{
    for (int32_t i = 0; i < res->n; i++)
        if (!strcmp(res->rows[i].item, item) && res->rows[i].tile == tile) return &res->rows[i];
    return NULL;
}

static dcp_status_t measure_links(cal_t *c, results_t *res)
{
    const size_t bytes = 2 * (size_t)WINDOW * MSG_BYTES;
    char *buf = dcpt_mem_alloc(c->device, bytes);
    int32_t *dst = calloc((size_t)c->size, sizeof *dst);
    dcp_status_t st = buf && dst ? DCP_OK : dcp_set_error(DCP_ERR_NO_MEMORY, "calibration");
    if (st == DCP_OK) st = dcpt_xfer_register(c->xfer, buf, bytes);
    const int registered = st == DCP_OK;
    const int32_t g = c->devs;
    for (int32_t r = 0; dst && r < c->size; r++) dst[r] = -1;
    if (st == DCP_OK && g > 1) { /* intra: rank 0 -> rank 1 */
        dst[0] = 1;
        st = bandwidth(c, dst, buf, &add(res, "intra", 0, "GB/s")->one);
        dst[0] = -1;
    }
    if (st == DCP_OK && c->nodes > 1) {
        row_t *one = add(res, "inter", 0, "GB/s");
        dst[0] = g;
        st = bandwidth(c, dst, buf, &one->one);
        for (int32_t r = 0; r < g; r++) dst[r] = g + r;
        if (st == DCP_OK) st = bandwidth(c, dst, buf, &one->all);
    }
    if (st == DCP_OK && c->size > 1)
        st = latency(c, 0, c->nodes > 1 ? g : 1, buf, &add(res, "lat", 0, "us")->one);
    if (registered) dcpt_xfer_deregister(c->xfer, buf);
    dcpt_mem_free(c->device, buf);
    free(dst);
    return st;
}

static dcp_status_t measure_kernels(cal_t *c, results_t *res)
{
    dcp_status_t st = DCP_OK;
    for (int32_t t = 0; st == DCP_OK && t < res->ntiles; t++) {
        kcase_t k = {0};
        st = dcpt_job_agree(&c->bs, kcase_build(c, res->tiles[t], &k), "kernel case");
        row_t *f = st == DCP_OK ? add(res, "attn", res->tiles[t], "TFLOP/s") : NULL;
        row_t *b = st == DCP_OK ? add(res, "bwd", res->tiles[t], "TFLOP/s") : NULL;
        if (st == DCP_OK) st = kernel_rates(c, &k, 0, &f->one, &b->one);
        if (st == DCP_OK) st = kernel_rates(c, &k, 1, &f->all, &b->all);
        kcase_free(&k);
    }
    if (st == DCP_OK) {
        row_t *r = add(res, "copy", 0, "GB/s");
        st = copy_rate(c, 0, &r->one);
        if (st == DCP_OK) st = copy_rate(c, 1, &r->all);
    }
    return st;
}

/* Processors the ranks share when they all compute (0: a device each), from the best
 * tile's forward: ranks x (all / one). */
static double shared_processors(const cal_t *c, const results_t *res, int32_t best)
{
    const row_t *f = find(res, "attn", best);
    const double share = f->all.median / f->one.median;
    return share < 0.8 ? round(c->size * share * 10) / 10 : 0;
}

/* What the files say, derived from the measurements. */
typedef struct {
    int32_t best, nics; /* the fastest tile; NICs per node (0: one node, unknown) */
    double peak, bwd, shared;
    dcp_kernel_table_t curve;                /* each tile's forward over the peak, at most 1 */
    const row_t *intra, *inter, *lat, *copy; /* NULL where not measured */
} figures_t;

static dcp_status_t derive(const cal_t *c, const results_t *res, figures_t *out)
{
    figures_t g = {.best = res->tiles[0]};
    for (int32_t t = 0; t < res->ntiles; t++)
        if (find(res, "attn", res->tiles[t])->all.median > find(res, "attn", g.best)->all.median)
            g.best = res->tiles[t];
    g.peak = find(res, "attn", g.best)->all.median;
    double ratio[MAX_TILES];
    for (int32_t t = 0; t < res->ntiles; t++)
        ratio[t] = find(res, "bwd", res->tiles[t])->all.median /
                   find(res, "attn", res->tiles[t])->all.median;
    g.bwd = dcpt_median(ratio, res->ntiles);
    g.shared = shared_processors(c, res, g.best);
    g.intra = find(res, "intra", 0);
    g.inter = find(res, "inter", 0);
    g.lat = find(res, "lat", 0);
    g.copy = find(res, "copy", 0);
    if (g.inter) {
        g.nics = (int32_t)lround(g.inter->all.median / g.inter->one.median);
        g.nics = g.nics < 1 ? 1 : g.nics > c->devs ? c->devs : g.nics;
    }
    for (int32_t t = 0; t < res->ntiles; t++) {
        const double e = find(res, "attn", res->tiles[t])->all.median / g.peak;
        DCP_CHECK(dcp_kernel_table_add(&g.curve, res->tiles[t], e < 1 ? e : 1.0, "kernel curve"));
    }
    *out = g;
    return DCP_OK;
}

/* PREFIX.node: the planner's figures (topo/node_file.c), its kernel curve as
 * topo/kernel_table.h writes one. */
static void write_node(const cal_t *c, const figures_t *g, FILE *f)
{
    fprintf(f, "# dcp-calibrate: %d nodes x %d ranks, %s %s, heads %d/%d x %d; measured\n",
            c->nodes, c->devs, c->f->device, dcpt_dtype_name(c->shape.dtype), c->shape.num_heads,
            c->shape.num_kv_heads, c->shape.head_dim);
    fprintf(f, "devices %d\n", c->devs);
    if (g->inter) fprintf(f, "nics %d\n", g->nics);
    if (g->intra) fprintf(f, "intra %.6g\n", g->intra->one.median);
    if (g->inter)
        fprintf(f, "inter %.6g  # the node's network over its devices\n",
                g->inter->all.median / c->devs);
    if (g->lat) fprintf(f, "lat %.6g\n", g->lat->one.median);
    fprintf(f, "tflops %.6g  # forward, every rank at work, tile %d\n", g->peak, g->best);
    fprintf(f, "hbm %.6g\n", g->copy->all.median);
    fprintf(f, "bwd %.6g\n", g->bwd);
    dcp_kernel_table_write(f, &g->curve, "kernel");
}

/* PREFIX.json: the simulator's kernel table (plugin/cli/support/sim_kernels.c reads the kernel rows),
 * one rank's rates where the ranks share processors, else every rank's; first a record of
 * every figure. */
static void write_sim(const cal_t *c, const results_t *res, const figures_t *g, FILE *f)
{
    fprintf(f,
            "{\"calibration\": \"%s\", \"nodes\": %d, \"devices\": %d, \"nics\": %d, "
            "\"intra_gbps\": %.6g, \"inter_gbps\": %.6g, \"lat_us\": %.6g, \"tflops\": %.6g, "
            "\"bwd\": %.6g, \"hbm_gbps\": %.6g, \"shared_processors\": %.6g}\n",
            tool, c->nodes, c->devs, g->nics, g->intra ? g->intra->one.median : 0,
            g->inter ? g->inter->all.median / c->devs : 0, g->lat ? g->lat->one.median : 0, g->peak,
            g->bwd, g->copy->all.median, g->shared);
    const int one = g->shared > 0;
    for (int32_t t = 0; t < res->ntiles; t++)
        for (int k = 0; k < 2; k++) {
            const row_t *r = find(res, k ? "bwd" : "attn", res->tiles[t]);
            fprintf(f,
                    "{\"kernel\": \"%s\", \"tile\": %d, \"head_dim\": %d, \"tflops\": %.6g, "
                    "\"error\": null}\n",
                    r->item, r->tile, c->shape.head_dim, one ? r->one.median : r->all.median);
        }
    for (int k = 0; k < 2; k++)
        fprintf(f,
                "{\"kernel\": \"%s\", \"tile\": %d, \"head_dim\": %d, \"gbps\": %.6g, "
                "\"error\": null}\n",
                k ? "copy" : "merge", g->best, c->shape.head_dim,
                one ? g->copy->one.median : g->copy->all.median);
}

/* Both files, each written whole (include/base/out_file.h); a failure to open or write
 * either leaves both targets as they were. */
static dcp_status_t write_files(const cal_t *c, const results_t *res)
{
    figures_t g;
    DCP_CHECK(derive(c, res, &g));
    char path[2][4096];
    snprintf(path[0], sizeof path[0], "%s.node", c->f->out);
    snprintf(path[1], sizeof path[1], "%s.json", c->f->out);
    dcp_out_file_t o[2] = {{0}};
    dcp_status_t st = dcp_out_file_open(&o[0], path[0], "--out");
    if (st == DCP_OK) st = dcp_out_file_open(&o[1], path[1], "--out");
    if (st == DCP_OK) {
        write_node(c, &g, o[0].f);
        write_sim(c, res, &g, o[1].f);
        if (fflush(o[0].f) || fflush(o[1].f) || ferror(o[0].f) || ferror(o[1].f))
            st = dcp_set_error(DCP_ERR_SYSTEM, "--out: cannot write %s.node and .json", c->f->out);
    }
    st = dcp_out_file_close(&o[0], st, "--out");
    return dcp_out_file_close(&o[1], st, "--out");
}

static void *run_rank(void *arg)
{
    cal_t *c = arg;
    const flags_t *f = c->f;
    const dcp_context_config_t cfg = {
        .bootstrap = &c->bs, .timeout_s = f->timeout, .device = f->device};
    dcp_status_t st = dcp_context_create(&cfg, &c->ctx);
    if (st == DCP_OK) st = dcpt_xfer_of_context(c->ctx, &c->xfer);
    c->device = dcp_context_device(c->ctx);
    const dcp_cluster_t *cl = NULL;
    if (st == DCP_OK) st = dcp_context_cluster(c->ctx, &cl);
    results_t *res = calloc(1, sizeof *res);
    if (st == DCP_OK && !res) st = dcp_set_error(DCP_ERR_NO_MEMORY, "calibration results");
    if (st == DCP_OK) {
        c->nodes = dcp_cluster_num_nodes(cl);
        c->devs = dcp_cluster_num_ranks(cl) / c->nodes;
        char **items = NULL, *storage = NULL;
        res->ntiles = dcpt_args_split(tool, "tiles", f->tiles, &items, &storage);
        for (int32_t t = 0; t < res->ntiles && t < MAX_TILES; t++) res->tiles[t] = atoi(items[t]);
        free(items);
        free(storage);
    }
    const dcpt_bench_t b = {tool, f->json, f->warmup, f->reps, fields, NFIELDS};
    if (st == DCP_OK && c->rank == 0) {
        char dev[32];
        device_name(c, dev, sizeof dev);
        dcpt_bench_header(&b,
                          "%d nodes x %d ranks, engines %s in a node, %s between nodes; kernels "
                          "on %s %s, heads %d/%d x %d, %lld tokens a rank in sequences of 4 "
                          "blocks; one: rank 0 (or one flow), all: every rank",
                          c->nodes, c->devs, dcp_context_transport(c->ctx, 0),
                          dcp_context_transport(c->ctx, 1), dev, dcpt_dtype_name(c->shape.dtype),
                          c->shape.num_heads, c->shape.num_kv_heads, c->shape.head_dim,
                          (long long)f->tokens);
        dcpt_bench_table(&b);
    }
    if (st == DCP_OK) st = measure_links(c, res);
    if (st == DCP_OK) st = measure_kernels(c, res);
    if (st == DCP_OK && c->rank == 0) {
        for (int32_t i = 0; i < res->n; i++) dcpt_bench_row(&b, &res->rows[i], NULL, NULL);
        fflush(stdout);
        if ((st = write_files(c, res)) == DCP_OK)
            fprintf(stderr,
                    "%s: wrote %s.node (--cluster %dx@%s.node) and %s.json "
                    "(--sim-kernels)\n",
                    tool, f->out, c->nodes, f->out, f->out);
    }
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: %s: %s\n", tool, c->rank, dcp_status_string(st),
                dcp_last_error());
        c->failed = 1;
    }
    free(res);
    dcpt_xfer_close(c->xfer);
    dcp_context_destroy(c->ctx);
    return NULL;
}

/* One process's bootstrap where this process is the whole job (threads only). */
static dcp_status_t solo_allgather(void *state, const void *send, void *recv, size_t bytes)
{
    (void)state;
    memcpy(recv, send, bytes);
    return DCP_OK;
}

int main(int argc, char **argv)
{
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    flags_t f = {NULL, "cpu", NULL, NULL, cores > 1 ? cores : 2, 1, 0, 4, 2, 64, 3, 1, 0, 0};
    dcpt_arg_t args[] = {
        {"out", DCPT_ARG_STR, &f.out, 0, 0, "write OUT.node and OUT.json (required)", 0},
        {"ranks", DCPT_ARG_INT, &f.ranks, 2, 1024, "started plainly: ranks as threads (cores)", 0},
        {"ranks-per-process", DCPT_ARG_INT, &f.ranks_per_process, 1, 1024,
         "under mpirun: ranks each process drives as threads", 0},
        {"device", DCPT_ARG_STR, &f.device, 0, 0, "cpu, cuda or cuda:N", 0},
        {"dtype", DCPT_ARG_STR, &f.dtype, 0, 0,
         "fp32 (cpu), bf16 or fp16 (default: fp32 on cpu, bf16 on cuda)", 0},
        {"tiles", DCPT_ARG_STR, &f.tiles, 0, 0,
         "block sizes of the kernel curve (default cpu 16,32,...,512; cuda 256,...,4096)", 0},
        {"tokens", DCPT_ARG_INT, &f.tokens, 1, 1 << 24,
         "tokens a rank computes per kernel run (default cpu 2048, cuda 65536)", 0},
        {"heads", DCPT_ARG_INT, &f.heads, 1, 65536, "query heads", 0},
        {"kv-heads", DCPT_ARG_INT, &f.kv_heads, 1, 65536, "KV heads", 0},
        {"head-dim", DCPT_ARG_INT, &f.head_dim, 1, 4096, "head dimension", 0},
        {"reps", DCPT_ARG_INT, &f.reps, 1, 64, "measurements per figure; median", 0},
        {"warmup", DCPT_ARG_INT, &f.warmup, 0, 100, "unrecorded kernel runs first", 0},
        {"timeout", DCPT_ARG_DOUBLE, &f.timeout, 0, 0,
         "transfer timeout in s (0: $DCP_TIMEOUT_S or 60)", 0},
        {"json", DCPT_ARG_FLAG, &f.json, 0, 0, "one JSON object per figure", 0},
    };
    const int nargs = (int)(sizeof args / sizeof args[0]);
    dcpt_mpi_require_pmi(tool);
    const int mpi = dcpt_mpi_launched();
    if (mpi) dcpt_args_set_fail_hook(dcpt_mpi_fail_early);
    dcpt_args_parse(argc, argv, args, nargs, tool,
                    "Measures links and kernels of the cluster it runs on and writes the node\n"
                    "file (--cluster Nx@OUT.node) and the simulator's kernel table.");
    if (!f.out) dcpt_args_fail(tool, "out", "required: the files' prefix");
    char node_path[4096], json_path[4096];
    snprintf(node_path, sizeof node_path, "%s.node", f.out);
    snprintf(json_path, sizeof json_path, "%s.json", f.out);
    dcpt_args_writable(tool, "out", node_path);
    dcpt_args_writable(tool, "out", json_path);
    int32_t ordinal;
    if (dcpt_device_parse(f.device, 0, "--device", &ordinal) != DCP_OK)
        dcpt_args_fail(tool, "device", "%s", dcp_last_error());
    const int gpu = ordinal >= 0;
    const dcp_dtype_t dtype =
        f.dtype ? dcpt_dtype_arg(tool, "dtype", f.dtype) : (gpu ? DCP_DTYPE_BF16 : DCP_DTYPE_FP32);
    if (gpu && dtype == DCP_DTYPE_FP32) dcpt_args_fail(tool, "dtype", "a GPU runs bf16 or fp16");
    /* the cost model pads a tile under the curve's first point (or 64 tokens) to that block
     * (dcp_cost_curve); CPU kernels pad nothing, so their curve is measured from 16 tokens */
    if (!f.tiles) f.tiles = gpu ? "256,512,1024,2048,4096" : "16,32,64,128,256,512";
    if (!dcpt_args_seen(args, nargs, "tokens")) f.tokens = gpu ? 65536 : 2048;
    char **items = NULL, *storage = NULL;
    const int ntiles = dcpt_args_split(tool, "tiles", f.tiles, &items, &storage);
    if (ntiles > MAX_TILES) dcpt_args_fail(tool, "tiles", "at most %d block sizes", MAX_TILES);
    for (int i = 0; i < ntiles; i++) {
        char *end;
        const long v = strtol(items[i], &end, 10);
        if (*end || v < 16 || v > (1 << 20) || (i > 0 && v <= atol(items[i - 1])))
            dcpt_args_fail(tool, "tiles", "'%s': increasing block sizes in 16..1048576", items[i]);
        if (4 * (int64_t)v > f.tokens) /* a case is sequences of 4 blocks: one at least */
            dcpt_args_fail(tool, "tiles",
                           "'%s': a kernel case runs sequences of 4 blocks, more than --tokens "
                           "%lld (give --tokens >= %ld)",
                           items[i], (long long)f.tokens, 4 * v);
    }
    free(items);
    free(storage);
    if (f.heads % f.kv_heads) dcpt_args_fail(tool, "kv-heads", "must divide --heads");
    if (f.timeout < 0) dcpt_args_fail(tool, "timeout", "must be >= 0");

    dcp_bootstrap_t procs = {.rank = 0, .size = 1, .allgather = solo_allgather};
    int32_t threads = (int32_t)f.ranks;
    if (mpi) {
        if (dcpt_mpi_start(&argc, &argv, &procs) != DCP_OK) {
            fprintf(stderr, "%s: %s\n", tool, dcp_last_error());
            dcpt_mpi_stop(1, 1);
        }
        procs.timeout_s = f.timeout;
        dcpt_args_set_quiet(procs.rank != 0);
        threads = (int32_t)f.ranks_per_process;
    }
    dcpt_threads_t *hybrid = NULL;
    cal_t *cal = calloc((size_t)threads, sizeof *cal);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    dcp_status_t st = cal && tid ? DCP_OK : dcp_set_error(DCP_ERR_NO_MEMORY, "ranks");
    if (st == DCP_OK && threads > 1) st = dcpt_threads_create(&procs, threads, &hybrid);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
        if (mpi) dcpt_mpi_stop(1, 1);
        return 1;
    }
    const dcp_attn_shape_t shape = {(int32_t)f.heads, (int32_t)f.kv_heads, (int32_t)f.head_dim,
                                    dtype, 0.0f};
    for (int32_t l = 0; l < threads; l++) {
        cal[l] = (cal_t){
            .f = &f, .bs = hybrid ? *dcpt_threads_bootstrap(hybrid, l) : procs, .shape = shape};
        cal[l].rank = cal[l].bs.rank;
        cal[l].size = cal[l].bs.size;
        if (l > 0 && pthread_create(&tid[l], NULL, run_rank, &cal[l]) != 0) {
            fprintf(stderr, "%s: cannot start rank thread %d\n", tool, l);
            if (mpi) dcpt_mpi_stop(1, 1);
            return 1;
        }
    }
    run_rank(&cal[0]);
    int failed = cal[0].failed;
    for (int32_t l = 1; l < threads; l++) {
        pthread_join(tid[l], NULL);
        failed |= cal[l].failed;
    }
    free(tid);
    free(cal);
    dcpt_threads_destroy(hybrid);
    if (mpi) dcpt_mpi_stop(failed, 1);
    return failed;
}
