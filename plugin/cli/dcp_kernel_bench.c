/*
 * dcp-kernel-bench: times the kernels the executor runs, on the GPU (bf16/fp16) or the CPU
 * (fp32), on plan-free workloads (plugin/cli/support/tile_case.h):
 *   attn   fused masked attention over one sequence cut into tile x tile tiles, TFLOP/s
 *          counted from the exact allowed pairs (4 x D x query heads per pair);
 *   bwd    its backward: the delta pre-pass and the fused backward, timed together after one
 *          untimed forward, counted as 2.5x the forward's FLOPs; a device whose backward
 *          fails (not built yet) shows "-" and the bench goes on;
 *   merge  n-way LSE merge of --sources partial outputs per block of rows, GB/s;
 *   copy   gather of every query block into the staging buffer, GB/s;
 * GB/s counts bytes read plus bytes written. Each figure is the median of --iters timed
 * launches (CUDA events on a GPU) after --warmup untimed ones. --json prints one object per
 * line.
 *
 * --engine cudnn (a GPU) or twin (the CPU) times attn and bwd through the attention engine
 * instead (kernels/segment.h): the tile list cut into segments, full and causal ones packed
 * into one cuDNN call per class, masked ones on dcp's kernels, the partials merged; the
 * dense(%) column says what share of the allowed pairs the engine's dense calls ran.
 */
#include "include/base/error.h"
#include "include/base/half.h"
#include "include/base/out_file.h"
#include "kernels/cuda/device.h"
#include "kernels/cudnn.h"
#include "kernels/device.h"
#include "kernels/kernel.h"
#include "kernels/segment.h"
#include "plugin/attn_engine.h"
#include "plugin/cli/helpers/args.h"
#include "plugin/cli/helpers/common.h"
#include "plugin/cli/helpers/cudnn_probe.h"
#include "plugin/cli/support/bench.h"
#include "plugin/cli/support/rng.h"
#include "plugin/cli/support/tile_case.h"
#include "topo/kernel_table.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tool = "dcp-kernel-bench";

#define MAX_TILES 32

/* For --write-table: the forward attention's TFLOP/s summed per tile edge. */
typedef struct {
    int32_t tile[MAX_TILES], n[MAX_TILES], num;
    double tflops[MAX_TILES];
} kernel_table_t;

typedef struct {
    int gpu; /* CUDA device ordinal, -1: the CPU */
    const dcp_device_t *dev;
    dcp_dtype_t dtype;
    int64_t sources;
    void *stream;
    dcpt_bench_t h;        /* the tools' bench harness: warm-up, iterations, fields, --json */
    kernel_table_t *table; /* the forward's figures per tile */
    const char *engine;    /* "own", or the attention engine's dense engine: "cudnn", "twin" */
    dcp_cudnn_t *cudnn;
    int32_t dense[2]; /* classes the dense engine takes, forward and backward */
    int deterministic; /* --deterministic: the backward's fixed-order kernels (kernel.h) */
} bench_t;

static void table_add(kernel_table_t *t, int32_t tile, double tflops)
{
    int i = 0;
    while (i < t->num && t->tile[i] != tile) i++;
    if (i == MAX_TILES || !(tflops > 0)) return;
    if (i == t->num) t->tile[t->num++] = tile;
    t->tflops[i] += tflops;
    t->n[i]++;
}

/* The file --kernel-table reads (topo/kernel_table.h): tiles increasing, the efficiency the
 * mean forward TFLOP/s at that tile over `peak`, at most 1. */
static dcp_status_t table_write(const kernel_table_t *t, const char *path, double peak,
                                const char *what)
{
    dcp_kernel_table_t kt = {0};
    for (int32_t done = 0, last = 0; done < t->num; done++) {
        int best = -1;
        for (int i = 0; i < t->num; i++)
            if (t->tile[i] > last && (best < 0 || t->tile[i] < t->tile[best])) best = i;
        last = t->tile[best];
        const double e = t->tflops[best] / t->n[best] / peak;
        DCP_CHECK(dcp_kernel_table_add(&kt, last, e < 1 ? e : 1.0, "--write-table"));
    }
    dcp_out_file_t o;
    DCP_CHECK(dcp_out_file_open(&o, path, "--write-table"));
    fprintf(o.f, "# dcp-kernel-bench: %s, forward attention, efficiency = TFLOP/s / %g\n", what,
            peak);
    dcp_kernel_table_write(o.f, &kt, NULL);
    return dcp_out_file_close(&o, DCP_OK, "--write-table");
}

/* n elements of N(0, 1) (or `lse_like`: log-sums around 5) in element type `ty`. */
static dcp_status_t buf_fill(const bench_t *b, void *dst, int64_t n, dcp_dtype_t ty, int lse_like,
                             uint64_t seed)
{
    const size_t es = ty == DCP_DTYPE_FP32 ? 4 : 2;
    void *host = malloc((size_t)n * es + 1);
    if (!host) return dcp_set_error(DCP_ERR_NO_MEMORY, "bench: host staging of %lld", (long long)n);
    dcpt_rng_t rng = {seed};
    for (int64_t i = 0; i < n; i++) {
        const float v = (float)(lse_like ? 5.0 + dcpt_rng_uniform(&rng) : dcpt_rng_normal(&rng));
        if (ty == DCP_DTYPE_FP32)
            ((float *)host)[i] = v;
        else
            ((uint16_t *)host)[i] = dcp_half_from_f32(ty, v);
    }
    dcp_status_t st = b->dev->copy(dst, host, (size_t)n * es, b->stream);
    if (st == DCP_OK) st = b->dev->stream_sync(b->stream);
    free(host);
    return st;
}

/* n fp32 zeros. */
static dcp_status_t buf_zero(const bench_t *b, void *dst, int64_t n)
{
    return b->dev->fill_f32(dst, n, 0.0f, b->stream);
}

/* A descriptor array where the kernels read it: the host array itself where they read host
 * memory. */
static dcp_status_t to_kernels(const bench_t *b, const void *host, size_t bytes, void **out)
{
    if (b->dev->host_memory) {
        *out = (void *)host;
        return DCP_OK;
    }
    if (!(*out = b->dev->alloc(b->gpu, bytes ? bytes : 16)))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "bench: %zu bytes of descriptors", bytes);
    DCP_CHECK(b->dev->copy(*out, host, bytes, b->stream));
    return b->dev->stream_sync(b->stream);
}

static void drop_descr(const bench_t *b, void *p)
{
    if (!b->dev->host_memory) b->dev->free(p);
}

typedef enum { OP_ATTN, OP_BWD, OP_MERGE, OP_COPY, OP_SEG } op_t;

/* A launch of the attention engine: its program (one launch), the arrays where the kernels
 * read them, the dense engine; rows > 0: a backward, delta computed first. */
typedef struct {
    const dcp_seg_prog_t *prog;
    dcp_seg_arrays_t arrays;
    dcp_dense_engine_t dense;
    int64_t rows;
} seg_args_t;

/* What a backward launch needs beside its groups: the tiles and the rows of delta. */
typedef struct {
    const void *tiles;
    int64_t rows;
} bwd_args_t;

/* One launch of the kernel table of the bench's device: items `a` (n of them), and the
 * tiles or merge sources they refer to. */
static dcp_status_t launch(const bench_t *b, op_t op, const dcp_kernel_env_t *env, const void *a,
                           int64_t n, const void *extra)
{
    const dcp_kernels_t *k = b->dev->kernels;
    switch (op) {
    case OP_ATTN:
        return k->attn_fwd(env, a, n, extra);
    case OP_BWD: {
        const bwd_args_t *ba = extra;
        if (!k->bwd_delta || !k->attn_bwd)
            return dcp_set_error(DCP_ERR_UNSUPPORTED, "%s backward kernels: not in the table",
                                 k->name);
        DCP_CHECK(k->bwd_delta(env, ba->rows));
        return k->attn_bwd(env, a, n, ba->tiles);
    }
    case OP_MERGE:
        return k->merge(env, a, n, extra);
    case OP_SEG: {
        const seg_args_t *sa = extra;
        if (sa->rows > 0) DCP_CHECK(k->bwd_delta(env, sa->rows));
        return dcp_seg_run(k, &sa->dense, env, sa->prog, &sa->arrays, 0);
    }
    default:
        return k->copy(env, a, n);
    }
}

/* One launch, timed on the device (CUDA events on a GPU). */
typedef struct {
    const bench_t *b;
    op_t op;
    const dcp_kernel_env_t *env;
    const void *a, *extra;
    int64_t n;
} launch_t;

static dcp_status_t launch_sample(void *arg, int64_t i, double *ms)
{
    (void)i;
    const launch_t *l = arg;
    const bench_t *b = l->b;
    void *timer = NULL;
    *ms = 0;
    dcp_status_t st = b->dev->timer_start(b->stream, &timer);
    if (st == DCP_OK) st = launch(b, l->op, l->env, l->a, l->n, l->extra);
    if (timer) {
        const dcp_status_t s2 = b->dev->timer_stop(timer, b->stream, ms);
        if (st == DCP_OK) st = s2;
    }
    return st;
}

/* Median [min, max] milliseconds of one launch. */
static dcp_status_t time_launch(const bench_t *b, op_t op, const dcp_kernel_env_t *env,
                                const void *a, int64_t n, const void *extra, dcpt_stats_t *ms_out)
{
    launch_t l = {b, op, env, a, extra, n};
    return dcpt_bench_time(&b->h, launch_sample, &l, ms_out);
}

typedef struct {
    const char *kernel, *mask, *engine;
    int32_t total, tile, d, hq, hkv;
    double density, dense; /* dense: the share of pairs in the engine's dense calls */
    dcpt_stats_t ms;
    double tflops, gbps; /* from the median; NaN ("-", null) where they do not apply */
    const char *error;   /* the case could not run (NULL: null in JSON) */
    const char *heads;   /* "hq/hkv", in heads_buf */
    char heads_buf[24];
} row_t;

#define F(head, width, key, kind, fmt, member)                                                     \
    DCPT_FIELD(head, width, key, kind, fmt, row_t, member)
static const dcpt_field_t fields[] = {
    F("kernel", -6, "kernel", DCPT_F_STR, NULL, kernel),
    F("engine", -6, "engine", DCPT_F_STR, NULL, engine),
    F("mask", -22, "mask", DCPT_F_STR, NULL, mask),
    F("total", 7, "total", DCPT_F_I32, NULL, total),
    F("tile", 5, "tile", DCPT_F_I32, NULL, tile),
    F("D", 4, "head_dim", DCPT_F_I32, NULL, d),
    F(NULL, 0, "q_heads", DCPT_F_I32, NULL, hq),
    F(NULL, 0, "kv_heads", DCPT_F_I32, NULL, hkv),
    {"heads", 6, NULL, DCPT_F_STR, NULL, offsetof(row_t, heads), 0},
    {"density(%)", 10, "density", DCPT_F_NUM, "%.1f", offsetof(row_t, density), 100},
    {"dense(%)", 8, "dense_share", DCPT_F_NUM, "%.1f", offsetof(row_t, dense), 100},
    F("ms", 9, "ms", DCPT_F_STATS, "%.3f", ms),
    F("TFLOP/s", 8, "tflops", DCPT_F_NUM, "%.3f", tflops),
    F("GB/s", 8, "gbps", DCPT_F_NUM, "%.1f", gbps),
    F(NULL, 0, "error", DCPT_F_STR, NULL, error),
};
#undef F
#define NFIELDS ((int)(sizeof fields / sizeof fields[0]))

/* JSON members that are the bench's, not the row's. */
static void bench_members(dcpt_json_t *j, const void *ctx)
{
    const bench_t *b = ctx;
    dcpt_json_str(j, "dtype", dcpt_dtype_name(b->dtype));
    dcpt_json_str(j, "device", b->dev->name);
    dcpt_json_bool(j, "deterministic", b->deterministic);
    if (strcmp(b->dev->name, "cpu") != 0) /* the CUDA forward's shape (DCP_ATTN_WARP_ROWS) */
        dcpt_json_int(j, "warp_rows", dcp_cuda_attn_warp_rows());
    else
        dcpt_json_null(j, "warp_rows");
}

static void print_row(const bench_t *b, row_t *r)
{
    snprintf(r->heads_buf, sizeof r->heads_buf, "%d/%d", r->hq, r->hkv);
    r->heads = r->heads_buf;
    dcpt_bench_row(&b->h, r, bench_members, b);
}

static dcp_kernel_env_t base_env(const bench_t *b, int32_t hq, int32_t hkv, int32_t d, int32_t rows)
{
    return (dcp_kernel_env_t){.q_heads = hq,
                              .kv_heads = hkv,
                              .head_dim = d,
                              .scale = (float)(1.0 / sqrt((double)d)),
                              .dtype = b->dtype,
                              .max_rows = rows,
                              .stream = b->stream,
                              .deterministic = b->deterministic};
}

/* Times one launch and prints its row: TFLOP/s when `flops` > 0, GB/s when `bytes` > 0. */
static dcp_status_t measure(const bench_t *b, op_t op, const dcp_kernel_env_t *env, const void *a,
                            int64_t n, const void *extra, double flops, double bytes, row_t *r)
{
    DCP_CHECK(time_launch(b, op, env, a, n, extra, &r->ms));
    r->tflops = flops > 0 ? flops / (r->ms.median * 1e9) : NAN;
    r->gbps = bytes > 0 ? bytes / (r->ms.median * 1e6) : NAN;
    print_row(b, r);
    return DCP_OK;
}

/* One copy item per block of `tile` rows of `w` elements, from buffer src to dst at the
 * same offsets (malloc'ed). */
static dcp_status_t block_items(int32_t total, int32_t tile, int64_t w, int32_t src, int32_t dst,
                                dcp_copy_item_t **items_out, int64_t *n_out)
{
    const int64_t nb = (total + tile - 1) / tile;
    dcp_copy_item_t *items;
    DCP_CHECK(dcp_calloc(&items, nb, sizeof *items, "bench copy items"));
    for (int64_t i = 0; i < nb; i++) {
        const int64_t r0 = i * tile;
        items[i] = (dcp_copy_item_t){{r0 * w, (int32_t)w, src},
                                     {r0 * w, (int32_t)w, dst},
                                     (int32_t)(r0 + tile < total ? tile : total - r0),
                                     (int32_t)w};
    }
    *items_out = items;
    *n_out = nb;
    return DCP_OK;
}

/* The attention engine's program of a tile case (one launch), its staging and arrays where
 * the kernels read them (placed as a context places its programs), and cuDNN's plans for it. */
typedef struct {
    seg_args_t args;
    dcp_seg_prog_t prog;
    dcp_dev_blob_t blob;
    void *seg, *seg32;
} seg_case_t;

static void seg_case_free(const bench_t *b, seg_case_t *c)
{
    (void)b->dev->stream_sync(b->stream);
    dcp_dev_blob_free(&c->blob, b->dev);
    b->dev->free(c->seg);
    b->dev->free(c->seg32);
    dcp_seg_prog_free(&c->prog);
    memset(c, 0, sizeof *c);
}

static dcp_status_t seg_case(const bench_t *b, const dcpt_tile_case_t *tc, int backward,
                             dcp_kernel_env_t *env, seg_case_t *c)
{
    memset(c, 0, sizeof *c);
    DCP_CHECK(dcp_calloc(&c->prog.launches, 1, sizeof *c->prog.launches, "bench launches"));
    const dcp_seg_shape_t shape = {.q_heads = tc->hq,
                                   .kv_heads = tc->hkv,
                                   .head_dim = tc->d,
                                   .min_rows = 64,
                                   .dense = b->dense[backward],
                                   .backward = backward,
                                   .deterministic = b->deterministic};
    int64_t launch;
    DCP_CHECK(dcp_seg_prog_add(&c->prog, &shape, &tc->seq, tc->groups, tc->num_groups, tc->tiles,
                               &launch));
    const dcp_seg_prog_t *g = &c->prog;
    const size_t es = b->dtype == DCP_DTYPE_FP32 ? 4 : 2;
    if (!(c->seg = b->dev->alloc(b->gpu, (size_t)g->seg_elems * es + 64)) ||
        !(c->seg32 = b->dev->alloc(b->gpu, (size_t)g->seg32_elems * 4 + 64)))
        return dcp_set_error(DCP_ERR_NO_MEMORY, "bench: engine staging");
    DCP_CHECK(dcp_attn_upload(g, b->gpu, b->stream, &c->blob, &c->args.arrays));
    DCP_CHECK(b->dev->stream_sync(b->stream));
    c->args.prog = &c->prog;
    c->args.rows = backward ? (int64_t)tc->total * tc->hq : 0;
    env->bufs[DCP_BUF_SEG] = c->seg;
    env->bufs[DCP_BUF_SEG32] = c->seg32;
    if (b->cudnn) {
        DCP_CHECK(dcp_cudnn_prepare(b->cudnn, backward, &c->prog, env, c->args.arrays.ints));
        c->args.dense = dcp_cudnn_engine(b->cudnn, backward);
    } else {
        c->args.dense = dcp_dense_cpu;
    }
    return DCP_OK;
}

/* The share of a program's allowed pairs in dense calls. */
static double dense_share(const dcp_seg_prog_t *g)
{
    double all = 0, dense = 0;
    for (int c = 0; c < DCP_SEG_CLASSES; c++) {
        all += (double)g->pairs[c];
        if (c != DCP_SEG_MASKED) dense += (double)g->pairs[c];
    }
    return all > 0 ? dense / all : 0.0;
}

/* The backward of a case: one untimed forward with O published in the dtype (as the executor
 * does), then delta and the backward timed together. A backward that fails (a device table
 * without it yet) shows "-" and is not an error of the bench. */
static dcp_status_t bench_bwd(const bench_t *b, const dcp_kernel_env_t *env,
                              const dcpt_tile_case_t *tc, const void *groups, const void *tiles,
                              row_t r)
{
    static int warned;
    dcp_copy_item_t *items;
    int64_t n;
    DCP_CHECK(block_items(tc->total, tc->tile, (int64_t)tc->hq * tc->d, DCP_BUF_ACC_O, DCP_BUF_O,
                          &items, &n));
    void *di = NULL;
    dcp_status_t st = to_kernels(b, items, (size_t)n * sizeof *items, &di);
    if (st == DCP_OK) st = launch(b, OP_ATTN, env, groups, tc->num_groups, tiles);
    if (st == DCP_OK) st = launch(b, OP_COPY, env, di, n, NULL);
    if (st == DCP_OK) st = b->dev->stream_sync(b->stream);
    drop_descr(b, di);
    free(items);
    if (st != DCP_OK) return st;
    const bwd_args_t args = {tiles, (int64_t)tc->total * tc->hq};
    r.kernel = "bwd";
    r.ms = dcpt_stats(NULL, 0);
    r.tflops = r.gbps = NAN;
    if (strcmp(b->engine, "own") && b->dense[1]) {
        seg_case_t sc;
        dcp_kernel_env_t e = *env;
        st = seg_case(b, tc, 1, &e, &sc);
        if (st == DCP_OK) st = time_launch(b, OP_SEG, &e, NULL, 0, &sc.args, &r.ms);
        r.dense = dense_share(&sc.prog);
        seg_case_free(b, &sc);
    } else {
        r.engine = "own";
        r.dense = 0;
        st = time_launch(b, OP_BWD, env, groups, tc->num_groups, &args, &r.ms);
    }
    if (st == DCP_OK) {
        r.tflops = 2.5 * dcpt_tile_case_flops(tc) / (r.ms.median * 1e9);
    } else {
        r.error = dcp_last_error();
        if (!warned++)
            fprintf(stderr, "%s: backward on %s: %s: %s (shown as -)\n", tool, b->dev->name,
                    dcp_status_string(st), dcp_last_error());
    }
    print_row(b, &r);
    return DCP_OK;
}

/* One attention case, its forward and/or its backward; the buffers are the caller's, sized
 * for `total`. */
static dcp_status_t bench_attn(const bench_t *b, int fwd, int bwd, const dcp_mask_t *mask,
                               const char *mask_name, int32_t total, int32_t tile, int32_t d,
                               int32_t hq, int32_t hkv, void *const bufs[DCP_BUF_COUNT])
{
    dcpt_tile_case_t tc;
    DCP_CHECK(dcpt_tile_case_build(mask, total, tile, hq, hkv, d, &tc));
    void *groups = NULL, *tiles = NULL, *seqs = NULL;
    dcp_status_t st = to_kernels(b, tc.groups, (size_t)tc.num_groups * sizeof *tc.groups, &groups);
    if (st == DCP_OK) st = to_kernels(b, tc.tiles, (size_t)tc.num_tiles * sizeof *tc.tiles, &tiles);
    if (st == DCP_OK) st = to_kernels(b, &tc.seq, sizeof tc.seq, &seqs);
    dcp_kernel_env_t env = base_env(b, hq, hkv, d, tile);
    memcpy(env.bufs, bufs, DCP_BUF_COUNT * sizeof bufs[0]);
    env.seqs = seqs;
    row_t r = {.kernel = "attn",
               .engine = b->engine,
               .mask = mask_name,
               .total = total,
               .tile = tile,
               .d = d,
               .hq = hq,
               .hkv = hkv,
               .density = (double)tc.pairs / ((double)total * total)};
    if (st == DCP_OK && fwd && strcmp(b->engine, "own") && b->dense[0]) {
        seg_case_t sc;
        dcp_kernel_env_t e = env;
        st = seg_case(b, &tc, 0, &e, &sc);
        r.dense = dense_share(&sc.prog);
        if (st == DCP_OK)
            st = measure(b, OP_SEG, &e, NULL, 0, &sc.args, dcpt_tile_case_flops(&tc), 0, &r);
        seg_case_free(b, &sc);
    } else if (st == DCP_OK && fwd) {
        r.engine = "own";
        st = measure(b, OP_ATTN, &env, groups, tc.num_groups, tiles, dcpt_tile_case_flops(&tc), 0,
                     &r);
    }
    if (st == DCP_OK && fwd) table_add(b->table, tile, r.tflops);
    if (st == DCP_OK && bwd) st = bench_bwd(b, &env, &tc, groups, tiles, r);
    drop_descr(b, groups);
    drop_descr(b, tiles);
    drop_descr(b, seqs);
    dcpt_tile_case_free(&tc);
    return st;
}

/* The row of a kernel with no mask (merge, copy): every row of the case, hq heads. */
static row_t mask_free_row(const char *kernel, int32_t total, int32_t tile, int32_t d, int32_t hq)
{
    return (row_t){.kernel = kernel,
                   .engine = "-",
                   .mask = "-",
                   .total = total,
                   .tile = tile,
                   .d = d,
                   .hq = hq,
                   .hkv = hq,
                   .density = 1};
}

/* --sources partials merged into the accumulators, one item per block of `tile` rows. The
 * partials live in DCP_BUF_PART: every source's O, then every source's LSE. */
static dcp_status_t bench_merge(const bench_t *b, int32_t total, int32_t tile, int32_t d,
                                int32_t hq, void *const bufs[DCP_BUF_COUNT])
{
    const int64_t nb = (total + tile - 1) / tile, ns = b->sources, w = (int64_t)hq * d;
    dcp_merge_item_t *items;
    dcp_merge_src_t *srcs;
    DCP_CHECK(dcp_calloc(&items, nb, sizeof *items, "bench merge"));
    dcp_status_t st = dcp_calloc(&srcs, nb * ns, sizeof *srcs, "bench merge");
    for (int64_t i = 0; st == DCP_OK && i < nb; i++) {
        const int64_t r0 = i * tile;
        items[i] = (dcp_merge_item_t){{r0 * w, (int32_t)w, DCP_BUF_ACC_O},
                                      {r0 * hq, hq, DCP_BUF_ACC_LSE},
                                      (int32_t)(r0 + tile < total ? tile : total - r0),
                                      (int32_t)(i * ns),
                                      (int32_t)ns};
        for (int64_t s = 0; s < ns; s++)
            srcs[i * ns + s] =
                (dcp_merge_src_t){{s * total * w + r0 * w, (int32_t)w, DCP_BUF_PART},
                                  {ns * total * w + s * total * hq + r0 * hq, hq, DCP_BUF_PART}};
    }
    void *di = NULL, *ds = NULL;
    if (st == DCP_OK) st = to_kernels(b, items, (size_t)nb * sizeof *items, &di);
    if (st == DCP_OK) st = to_kernels(b, srcs, (size_t)(nb * ns) * sizeof *srcs, &ds);
    dcp_kernel_env_t env = base_env(b, hq, hq, d, tile);
    memcpy(env.bufs, bufs, DCP_BUF_COUNT * sizeof bufs[0]);
    row_t r = mask_free_row("merge", total, tile, d, hq);
    const double bytes = 4.0 * total * (w + hq) * (ns + 2); /* sources + dst read + write */
    if (st == DCP_OK) st = measure(b, OP_MERGE, &env, di, nb, ds, 0, bytes, &r);
    drop_descr(b, di);
    drop_descr(b, ds);
    free(items);
    free(srcs);
    return st;
}

/* Every block of Q rows packed into the staging buffer (what a step's sends do). */
static dcp_status_t bench_copy(const bench_t *b, int32_t total, int32_t tile, int32_t d, int32_t hq,
                               void *const bufs[DCP_BUF_COUNT])
{
    const int64_t w = (int64_t)hq * d;
    dcp_copy_item_t *items;
    int64_t nb;
    DCP_CHECK(block_items(total, tile, w, DCP_BUF_Q, DCP_BUF_STAGE, &items, &nb));
    void *di = NULL;
    dcp_status_t st = to_kernels(b, items, (size_t)nb * sizeof *items, &di);
    dcp_kernel_env_t env = base_env(b, hq, hq, d, tile);
    memcpy(env.bufs, bufs, DCP_BUF_COUNT * sizeof bufs[0]);
    row_t r = mask_free_row("copy", total, tile, d, hq);
    const double bytes = 2.0 * total * w * dcp_buf_elem_bytes(DCP_BUF_Q, b->dtype);
    if (st == DCP_OK) st = measure(b, OP_COPY, &env, di, nb, NULL, 0, bytes, &r);
    drop_descr(b, di);
    free(items);
    return st;
}

typedef struct {
    int32_t hq, hkv;
} gqa_t;

typedef struct {
    char **masks, **totals, **tiles, **dims, **gqas, **kernels;
    int nmasks, ntotals, ntiles, ndims, ngqas, nkernels;
} lists_t;

static int64_t list_int(const char *flag, const char *s, int64_t lo, int64_t hi)
{
    char *end;
    const long long v = strtoll(s, &end, 10);
    if (*end != '\0' || v < lo || v > hi)
        dcpt_args_fail(tool, flag, "'%s' is not an integer in [%lld, %lld]", s, (long long)lo,
                       (long long)hi);
    return v;
}

static gqa_t list_gqa(const char *s)
{
    int hq = 0, hkv = 0, used = 0;
    if (sscanf(s, "%d:%d%n", &hq, &hkv, &used) != 2 || s[used] != '\0' || hq < 1 || hkv < 1 ||
        hq % hkv != 0 || hq > 65535)
        dcpt_args_fail(tool, "gqa", "'%s': QHEADS:KVHEADS with KVHEADS dividing QHEADS", s);
    return (gqa_t){hq, hkv};
}

static int wants(const lists_t *l, const char *kernel)
{
    for (int i = 0; i < l->nkernels; i++)
        if (!strcmp(l->kernels[i], kernel)) return 1;
    return 0;
}

/* Every case of one (total, D, heads) shape over shared buffers. */
static dcp_status_t run_shape(const bench_t *b, const lists_t *l, const dcp_mask_t *masks,
                              int32_t total, int32_t d, gqa_t g, uint64_t seed)
{
    const int64_t nq = (int64_t)total * g.hq * d, nkv = (int64_t)total * g.hkv * d;
    /* partials: every source's O, then every source's LSE */
    const int64_t part_o = b->sources * nq, part = part_o + b->sources * (int64_t)total * g.hq;
    /* the backward's: dO (filled), O (published by the forward), delta, zeroed gradients */
    const int64_t bwd = wants(l, "bwd"), rows = (int64_t)total * g.hq;
    const int64_t elems[DCP_BUF_COUNT] = {
        [DCP_BUF_Q] = nq,
        [DCP_BUF_K] = nkv,
        [DCP_BUF_V] = nkv,
        [DCP_BUF_ACC_O] = nq,
        [DCP_BUF_ACC_LSE] = rows,
        [DCP_BUF_STAGE] = nq,
        [DCP_BUF_PART] = part,
        [DCP_BUF_DO] = bwd * nq,
        [DCP_BUF_O] = bwd * nq,
        [DCP_BUF_DELTA] = bwd * rows,
        [DCP_BUF_ACC_DQ] = bwd * nq,
        [DCP_BUF_ACC_DK] = bwd * nkv,
        [DCP_BUF_ACC_DV] = bwd * nkv,
    };
    void *bufs[DCP_BUF_COUNT] = {0};
    dcp_status_t st = DCP_OK;
    for (int i = 0; st == DCP_OK && i < DCP_BUF_COUNT; i++) {
        if (!elems[i]) continue;
        const dcp_dtype_t ty = dcp_buf_dtype(i, b->dtype);
        if (!(bufs[i] = b->dev->alloc(b->gpu, (size_t)elems[i] * dcp_buf_elem_bytes(i, b->dtype))))
            st = dcp_set_error(DCP_ERR_NO_MEMORY, "bench: buffer %d of %lld elements", i,
                               (long long)elems[i]);
        else if (i >= DCP_BUF_ACC_DQ && i <= DCP_BUF_ACC_DV)
            st = buf_zero(b, bufs[i], elems[i]);
        else if (i != DCP_BUF_STAGE && i != DCP_BUF_ACC_O && i != DCP_BUF_O && i != DCP_BUF_DELTA)
            st = buf_fill(b, bufs[i], i == DCP_BUF_PART ? part_o : elems[i], ty, 0,
                          seed + (uint64_t)i);
    }
    if (st == DCP_OK) /* the partials' LSE: finite log-sums */
        st = buf_fill(b, (float *)bufs[DCP_BUF_PART] + part_o, part - part_o, DCP_DTYPE_FP32, 1,
                      seed + 99);
    for (int t = 0; st == DCP_OK && t < l->ntiles; t++) {
        const int32_t tile = (int32_t)list_int("tile", l->tiles[t], 16, 1 << 20);
        if (wants(l, "attn") || bwd)
            for (int m = 0; st == DCP_OK && m < l->nmasks; m++)
                st = bench_attn(b, wants(l, "attn"), (int)bwd, &masks[m], l->masks[m], total, tile,
                                d, g.hq, g.hkv, bufs);
        if (st == DCP_OK && wants(l, "merge")) st = bench_merge(b, total, tile, d, g.hq, bufs);
        if (st == DCP_OK && wants(l, "copy")) st = bench_copy(b, total, tile, d, g.hq, bufs);
    }
    for (int i = 0; i < DCP_BUF_COUNT; i++) b->dev->free(bufs[i]);
    return st;
}

/* The flags' lists, checked (each exits 2 naming its flag); masks parsed and valid for every
 * --total. `cpu` picks the CPU's default sizes. */
static void lists_parse(const char *const text[6], int cpu, lists_t *l, dcp_mask_t **masks_out,
                        char *storage[6])
{
    static const char *const defaults[2][6] = {
        {NULL, "8192,16384,32768,131072", "512,1024,2048,4096", "64,128", "8:2,64:8", NULL},
        {NULL, "2048", "512", "64", "8:2", NULL}};
    char ***items[6] = {&l->masks, &l->totals, &l->tiles, &l->dims, &l->gqas, &l->kernels};
    int *counts[6] = {&l->nmasks, &l->ntotals, &l->ntiles, &l->ndims, &l->ngqas, &l->nkernels};
    static const char *const flags[6] = {"mask", "total", "tile", "head-dim", "gqa", "kernel"};
    for (int k = 0; k < 6; k++)
        *counts[k] = dcpt_args_split(tool, flags[k], text[k] ? text[k] : defaults[cpu][k], items[k],
                                     &storage[k]);
    for (int i = 0; i < l->nkernels; i++)
        if (strcmp(l->kernels[i], "attn") && strcmp(l->kernels[i], "bwd") &&
            strcmp(l->kernels[i], "merge") && strcmp(l->kernels[i], "copy"))
            dcpt_args_fail(tool, "kernel", "'%s': attn, bwd, merge or copy", l->kernels[i]);
    for (int i = 0; i < l->ndims; i++) {
        const int64_t d = list_int("head-dim", l->dims[i], 1, 1024);
        if (!cpu && d != 64 && d != 128)
            dcpt_args_fail(tool, "head-dim", "the GPU runs 64 and 128");
    }
    for (int i = 0; i < l->ngqas; i++) list_gqa(l->gqas[i]);
    if (l->ntiles > MAX_TILES) dcpt_args_fail(tool, "tile", "at most %d tile edges", MAX_TILES);
    for (int i = 0; i < l->ntiles; i++) list_int("tile", l->tiles[i], 16, 1 << 20);
    dcp_mask_t *masks = calloc((size_t)l->nmasks, sizeof *masks);
    if (!masks) dcpt_args_fail(tool, "mask", "out of memory");
    for (int i = 0; i < l->nmasks; i++)
        if (dcp_mask_parse(l->masks[i], &masks[i]) != DCP_OK)
            dcpt_args_fail(tool, "mask", "%s", dcp_last_error());
    for (int t = 0; t < l->ntotals; t++) {
        const int32_t total = (int32_t)list_int("total", l->totals[t], 1, 1 << 24);
        int64_t none;
        for (int m = 0; m < l->nmasks; m++) /* an empty tile: the mask checked for the length */
            if (dcp_mask_count_pairs(&masks[m], total, 0, 0, 0, 0, &none) != DCP_OK)
                dcpt_args_fail(tool, "mask", "%s", dcp_last_error());
    }
    *masks_out = masks;
}

static void lists_free(lists_t *l, dcp_mask_t *masks, char *storage[6])
{
    free(masks);
    free(l->masks), free(l->totals), free(l->tiles), free(l->dims), free(l->gqas), free(l->kernels);
    for (int k = 0; k < 6; k++) free(storage[k]);
}

/* Every shape of the lists, in order. */
static dcp_status_t run_all(const bench_t *b, const lists_t *l, const dcp_mask_t *masks,
                            uint64_t seed)
{
    dcp_status_t st = DCP_OK;
    for (int t = 0; st == DCP_OK && t < l->ntotals; t++)
        for (int d = 0; st == DCP_OK && d < l->ndims; d++)
            for (int g = 0; st == DCP_OK && g < l->ngqas; g++)
                st = run_shape(b, l, masks, (int32_t)list_int("total", l->totals[t], 1, 1 << 24),
                               (int32_t)list_int("head-dim", l->dims[d], 1, 1024),
                               list_gqa(l->gqas[g]), seed);
    return st;
}

int main(int argc, char **argv)
{
    const int have_gpu = dcp_cuda_device_count() > 0;
    const char *device = have_gpu ? "cuda" : "cpu", *dtype = NULL, *write_table = NULL;
    const char *text[6] = {"full,causal,lambda,blockwise,shared-question",
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           "attn,bwd,merge,copy"};
    int64_t warmup = -1, iters = -1, sources = 4, seed = 1;
    const char *engine = "own";
    double peak = 0;
    int json = 0, deterministic = 0, probe = 0;
    dcpt_arg_t args[] = {
        {"device", DCPT_ARG_STR, &device, 0, 0, "cpu, cuda or cuda:N (default: cuda if any)", 0},
        {"dtype", DCPT_ARG_STR, &dtype, 0, 0,
         "bf16 or fp16 (default on cuda), fp32 (default on cpu; cpu only)", 0},
        {"kernel", DCPT_ARG_STR, &text[5], 0, 0, "attn, bwd, merge, copy (a comma list)", 0},
        {"mask", DCPT_ARG_STR, &text[0], 0, 0, "masks (a comma list)", 0},
        {"total", DCPT_ARG_STR, &text[1], 0, 0,
         "sequence lengths (default 8192,16384,32768,131072; cpu 2048)", 0},
        {"tile", DCPT_ARG_STR, &text[2], 0, 0, "tile edges (default 512,1024,2048,4096; cpu 512)",
         0},
        {"head-dim", DCPT_ARG_STR, &text[3], 0, 0, "head dims (default 64,128; cpu 64)", 0},
        {"gqa", DCPT_ARG_STR, &text[4], 0, 0, "QHEADS:KVHEADS list (default 8:2,64:8; cpu 8:2)", 0},
        {"sources", DCPT_ARG_INT, &sources, 1, 64, "partials per merge", 0},
        {"warmup", DCPT_ARG_INT, &warmup, 0, 1000, "untimed launches (default 3; cpu 1)", 0},
        {"iters", DCPT_ARG_INT, &iters, 1, 10000, "timed launches, median (default 10; cpu 3)", 0},
        {"seed", DCPT_ARG_INT, &seed, 0, INT64_MAX, "input seed", 0},
        {"json", DCPT_ARG_FLAG, &json, 0, 0, "one JSON object per case", 0},
        {"write-table", DCPT_ARG_STR, &write_table, 0, 0,
         "write the forward's efficiency per tile for dcp-plan --kernel-table", 0},
        {"peak-tflops", DCPT_ARG_DOUBLE, &peak, 0, 0,
         "the device peak --write-table divides by (default: the cluster model's, 312)", 0},
        {"engine", DCPT_ARG_STR, &engine, 0, 0,
         "own, cudnn (a GPU) or twin (cpu): what runs attn and bwd (default own)", 0},
        {"deterministic", DCPT_ARG_FLAG, &deterministic, 0, 0,
         "bwd: the deterministic kernels (each gradient summed in a fixed order)", 0},
        {"probe", DCPT_ARG_FLAG, &probe, 0, 0,
         "with --engine cudnn: build every graph cuDNN is asked for, a line each (built, ms, "
         "engine, cuDNN's error), instead of timing; exit 1 when one does not build",
         0},
    };
    const int nargs = (int)(sizeof args / sizeof args[0]);
    dcpt_args_parse(argc, argv, args, nargs, tool,
                    "Times dcp's attention (forward and backward), merge and copy kernels; TFLOP/s "
                    "from exact allowed pairs.");
    kernel_table_t table = {0};
    bench_t b = {.sources = sources, .gpu = -1, .table = &table, .deterministic = deterministic};
    if (dcp_device_parse(device, 0, "--device", &b.gpu) != DCP_OK)
        dcpt_args_fail(tool, "device", "%s", dcp_last_error());
    const int cpu = b.gpu < 0;
    b.dtype =
        dtype ? dcpt_dtype_arg(tool, "dtype", dtype) : (cpu ? DCP_DTYPE_FP32 : DCP_DTYPE_BF16);
    if (!cpu && b.dtype == DCP_DTYPE_FP32) dcpt_args_fail(tool, "dtype", "a GPU runs bf16 or fp16");
    if (peak < 0) dcpt_args_fail(tool, "peak-tflops", "must be > 0");
    if (write_table) dcpt_args_writable(tool, "write-table", write_table);
    b.h = (dcpt_bench_t){
        tool,   json,   warmup >= 0 ? warmup : (cpu ? 1 : 3), iters >= 1 ? iters : (cpu ? 3 : 10),
        fields, NFIELDS};
    lists_t l;
    dcp_mask_t *masks;
    char *storage[6];
    lists_parse(text, cpu, &l, &masks, storage);
    int times_attn = 0;
    for (int i = 0; i < l.nkernels; i++) times_attn |= !strcmp(l.kernels[i], "attn");
    if (write_table && !times_attn)
        dcpt_args_fail(tool, "write-table",
                       "the table is forward attention's: add attn to --kernel");
    b.dev = dcp_device_of(b.gpu);
    if (b.dev->stream_create(b.gpu, &b.stream) != DCP_OK) {
        fprintf(stderr, "%s: %s\n", tool, dcp_last_error());
        return 1;
    }
    b.engine = engine;
    char engine_note[160] = "";
    if (!strcmp(engine, "twin")) {
        if (!cpu) dcpt_args_fail(tool, "engine", "twin runs on the CPU (--device cpu)");
        b.dense[0] = b.dense[1] = DCP_SEG_ALL_DENSE;
    } else if (!strcmp(engine, "cudnn")) {
        if (cpu) dcpt_args_fail(tool, "engine", "cudnn runs on a GPU (--device cuda)");
        if (dcp_cuda_set_device(b.gpu) != DCP_OK ||
            dcp_cudnn_open(b.gpu, b.deterministic, &b.cudnn) != DCP_OK)
            dcpt_args_fail(tool, "engine", "%s", dcp_last_error());
        const char *why[2];
        for (int p = 0; p < 2; p++)
            b.dense[p] = dcp_cudnn_classes(dcp_cudnn_version(b.cudnn), p, &why[p]);
        char v[24];
        dcp_cudnn_version_string(dcp_cudnn_version(b.cudnn), v, sizeof v);
        snprintf(engine_note, sizeof engine_note, ", engine cudnn %s%s%s", v,
                 *why[1] ? "; backward: " : "", why[1]);
    } else if (strcmp(engine, "own")) {
        dcpt_args_fail(tool, "engine", "'%s': own, cudnn or twin", engine);
    }
    if (probe && !b.cudnn) dcpt_args_fail(tool, "probe", "probes cuDNN: add --engine cudnn");
    if (probe) {
        if (!json) printf("# cuDNN graphs%s\n", engine_note);
        const int failed = dcpt_cudnn_probe(stdout, b.cudnn, json);
        dcp_cudnn_close(b.cudnn);
        b.dev->stream_destroy(b.stream);
        return failed ? 1 : 0;
    }
    dcpt_bench_header(&b.h,
                      "%s %s, merge of %lld partials; bwd: delta + backward%s, 2.5x the "
                      "forward's FLOPs%s",
                      cpu ? "cpu" : device, dcpt_dtype_name(b.dtype), (long long)b.sources,
                      b.deterministic ? " (deterministic)" : "", engine_note);
    dcpt_bench_table(&b.h);
    dcp_status_t st = run_all(&b, &l, masks, (uint64_t)seed);
    char what[96];
    snprintf(what, sizeof what, "%s %s", b.dev->name, dcpt_dtype_name(b.dtype));
    if (st == DCP_OK && write_table) { /* after the table: a failure here is reported too */
        if (!table.num)
            st = dcp_set_error(DCP_ERR_INVALID_ARG,
                               "--write-table: no forward attention was timed (--kernel attn)");
        else if ((st = table_write(&table, write_table, peak > 0 ? peak : 312.0, what)) == DCP_OK)
            fprintf(stderr, "%s: wrote %s\n", tool, write_table);
    }
    if (st != DCP_OK)
        fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
    dcp_cudnn_close(b.cudnn);
    b.dev->stream_destroy(b.stream);
    lists_free(&l, masks, storage);
    return st == DCP_OK ? 0 : 1;
}
