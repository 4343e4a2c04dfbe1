/*
 * The attention engine of a context (attn_engine.h): the choice (auto | own | cudnn | twin),
 * the segment programs made when a plan is bound, and their runs.
 *
 * Everything a training step needs is made at binding: the programs of both passes (the
 * segmenter over each ATTN instruction of the rank's programs), the staging buffers, the
 * device copy of the programs' descriptors and, with cuDNN, its execution plans and variant
 * packs. A call then runs the programs with the kernels of the context's device and the dense
 * engine, and allocates nothing.
 */
#include "plugin/attn_engine.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/log.h"
#include "partition/plan/plan.h"
#include "plugin/context.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[DCP_ATTN_KINDS] = {"auto", "own", "cudnn", "twin"};

const char *dcp_attn_kind_name(dcp_attn_kind_t kind)
{
    return kind >= 0 && kind < DCP_ATTN_KINDS ? kind_names[kind] : "?";
}

static dcp_status_t parse_kind(const char *name, const char *field, dcp_attn_kind_t *out)
{
    for (int k = 0; k < DCP_ATTN_KINDS; k++)
        if (!strcmp(name, kind_names[k])) {
            *out = (dcp_attn_kind_t)k;
            return DCP_OK;
        }
    return dcp_set_error(DCP_ERR_INVALID_ARG,
                         "%s = \"%s\": the attention engine is auto, own, "
                         "cudnn or twin",
                         field, name);
}

/* The classes the active engine runs per pass, and its note. */
static void describe(dcp_attn_state_t *a, const char *fmt, const char *detail)
{
    snprintf(a->note, sizeof a->note, fmt, detail);
}

dcp_status_t dcp_attn_init(dcp_context_t *ctx, const dcp_context_config_t *config)
{
    dcp_attn_state_t *a = &ctx->attn;
    memset(a, 0, sizeof *a);
    const char *env = NULL;
    int64_t det = 0, rows = 0;
    DCP_CHECK(dcp_env_str(DCP_ENV_ATTN_ENGINE, &env));
    if (config->attn_engine)
        DCP_CHECK(parse_kind(config->attn_engine, "config.attn_engine", &a->requested));
    else
        DCP_CHECK(parse_kind(env, "$DCP_ATTN_ENGINE", &a->requested));
    DCP_CHECK(dcp_env_int(DCP_ENV_DETERMINISTIC, &det));
    a->deterministic = config->deterministic != 0 || det != 0;
    DCP_CHECK(dcp_env_int(DCP_ENV_ATTN_MIN_ROWS, &rows));
    a->min_rows = (int32_t)rows;
    a->active = DCP_ATTN_OWN;
    const int gpu = !ctx->dev->host_memory;
    switch (a->requested) {
    case DCP_ATTN_OWN:
        return DCP_OK;
    case DCP_ATTN_TWIN:
        if (gpu)
            return dcp_set_error(DCP_ERR_INVALID_ARG,
                                 "config.attn_engine = \"twin\": the twin of cuDNN runs on CPU "
                                 "contexts only (this one is on GPU %d)",
                                 ctx->device);
        a->active = DCP_ATTN_TWIN;
        a->dense[DCP_PASS_FWD] = a->dense[DCP_PASS_BWD] = DCP_SEG_ALL_DENSE;
        describe(a, "%s", "cuDNN's data path with dcp's CPU twin of its attention");
        return DCP_OK;
    default:
        break;
    }
    if (!gpu) {
        describe(a, "%s", "cudnn: the context computes on the CPU; dcp's kernels run every tile");
        return DCP_OK;
    }
    dcp_status_t st = dcp_cudnn_open(ctx->device, a->deterministic, &a->cudnn);
    if (st != DCP_OK) {
        if (a->requested == DCP_ATTN_CUDNN) return st;
        describe(a, "%s; dcp's kernels run every tile", dcp_last_error());
        dcp_log(DCP_LOG_WARN, DCP_LOG_ATTN, ctx->rank, "%s", a->note);
        return DCP_OK;
    }
    const int64_t v = dcp_cudnn_version(a->cudnn);
    char ver[32];
    dcp_cudnn_version_string(v, ver, sizeof ver);
    const char *why[2];
    /* deterministic: cuDNN's configurations marked non-deterministic are skipped, and the
     * backward's own groups and adds run in waves of disjoint writers (dcp_seg_waves) */
    for (int p = 0; p < DCP_PASS_COUNT; p++) a->dense[p] = dcp_cudnn_classes(v, p, &why[p]);
    a->active = DCP_ATTN_CUDNN;
    snprintf(a->note, sizeof a->note, "cudnn %s%s%s%s%s", ver, *why[0] ? "; forward: " : "", why[0],
             *why[1] ? "; backward: " : "", why[1]);
    return DCP_OK;
}

static void pass_free(dcp_attn_pass_t *ps, const dcp_device_t *dev)
{
    dcp_seg_prog_free(&ps->prog);
    free(ps->launch_of);
    dcp_dev_blob_free(&ps->blob, dev);
    memset(ps, 0, sizeof *ps);
}

/* Staging buffer *buf of at least `bytes` on the context's device. */
static dcp_status_t staging(dcp_context_t *ctx, void **buf, size_t *cap, size_t bytes)
{
    if (bytes <= *cap) return DCP_OK;
    DCP_CHECK(ctx->dev->stream_sync(ctx->stream)); /* queued work may still use the old one */
    ctx->dev->free(*buf);
    *cap = 0;
    const size_t size = (bytes + 63) / 64 * 64;
    if (!(*buf = ctx->dev->alloc(ctx->device, size)))
        return dcp_set_error(DCP_ERR_NO_MEMORY,
                             "attention engine: %zu bytes of staging on %s of rank %d", size,
                             ctx->dev->name, ctx->rank);
    *cap = size;
    return DCP_OK;
}

/* The program of one pass: one launch per ATTN instruction of the rank's program. */
static dcp_status_t build_pass(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass)
{
    dcp_attn_pass_t *ps = &ctx->attn.pass[pass];
    pass_free(ps, ctx->dev);
    if (!ctx->attn.dense[pass]) return DCP_OK;
    const int64_t i0 = dcp_plan_prog_begin(p, pass, ctx->rank),
                  i1 = dcp_plan_prog_end(p, pass, ctx->rank);
    ps->first_instr = i0;
    ps->ninstr = i1 - i0;
    int64_t nattn = 0;
    for (int64_t i = i0; i < i1; i++) nattn += p->instrs[i].op == DCP_OP_ATTN;
    DCP_CHECK(dcp_calloc(&ps->launch_of, ps->ninstr + 1, sizeof *ps->launch_of, "engine launches"));
    DCP_CHECK(
        dcp_calloc(&ps->prog.launches, nattn + 1, sizeof *ps->prog.launches, "engine launches"));
    const dcp_seg_shape_t shape = {.q_heads = p->qpg,
                                   .kv_heads = p->kvpg,
                                   .head_dim = p->shape.head_dim,
                                   .head_dim_v = dcp_shape_dv(&p->shape),
                                   .min_rows = ctx->attn.min_rows,
                                   .dense = ctx->attn.dense[pass],
                                   .backward = pass == DCP_PASS_BWD,
                                   .deterministic = ctx->attn.deterministic};
    for (int64_t i = i0; i < i1; i++) {
        const dcp_instr_t *in = &p->instrs[i];
        ps->launch_of[i - i0] = -1;
        if (in->op != DCP_OP_ATTN) continue;
        DCP_CHECK(dcp_seg_prog_add(&ps->prog, &shape, p->seqs, p->groups + in->first, in->count,
                                   p->tiles, &ps->launch_of[i - i0]));
    }
    ps->arrays = dcp_seg_host_arrays(&ps->prog);
    return DCP_OK;
}

enum { ALIGN = 256 };

static size_t up(size_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

dcp_status_t dcp_attn_upload(const dcp_seg_prog_t *g, int32_t device, void *stream,
                             dcp_dev_blob_t *blob, dcp_seg_arrays_t *arrays_out)
{
    const dcp_device_t *dev = dcp_device_of(device);
    if (dev->host_memory) {
        *arrays_out = dcp_seg_host_arrays(g);
        return DCP_OK;
    }
    const void *src[7] = {g->own_groups, g->own_tiles, g->copies, g->merges,
                          g->merge_srcs, g->deltas,    g->ints};
    const size_t bytes[7] = {(size_t)g->n_own_groups * sizeof *g->own_groups,
                             (size_t)g->n_own_tiles * sizeof *g->own_tiles,
                             (size_t)g->n_copies * sizeof *g->copies,
                             (size_t)g->n_merges * sizeof *g->merges,
                             (size_t)g->n_merge_srcs * sizeof *g->merge_srcs,
                             (size_t)g->n_deltas * sizeof *g->deltas,
                             (size_t)g->n_ints * sizeof *g->ints};
    size_t off[7], total = 0;
    for (int i = 0; i < 7; i++) {
        off[i] = total;
        total += up(bytes[i]);
    }
    if (total == 0) total = ALIGN;
    DCP_CHECK(dcp_dev_blob_staging(blob, dev, device, total));
    char *host = blob->staging;
    memset(host, 0, total);
    for (int i = 0; i < 7; i++)
        if (bytes[i]) memcpy(host + off[i], src[i], bytes[i]);
    DCP_CHECK(dcp_dev_blob_reserve(blob, dev, device, total, stream));
    DCP_CHECK(dcp_dev_blob_send(blob, dev, total, stream));
    char *mem = blob->mem;
    *arrays_out = (dcp_seg_arrays_t){
        (const dcp_tile_group_t *)(mem + off[0]), (const dcp_tile_t *)(mem + off[1]),
        (const dcp_copy_item_t *)(mem + off[2]),  (const dcp_merge_item_t *)(mem + off[3]),
        (const dcp_merge_src_t *)(mem + off[4]),  (const dcp_delta_out_item_t *)(mem + off[5]),
        (const int32_t *)(mem + off[6])};
    return DCP_OK;
}

/* The staging both passes' programs need, on the context's device. */
static dcp_status_t ensure_staging(dcp_context_t *ctx)
{
    dcp_attn_state_t *a = &ctx->attn;
    size_t seg = 0, seg32 = 0;
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        const dcp_seg_prog_t *g = &a->pass[pass].prog;
        if ((size_t)g->seg_elems * a->elem_bytes > seg) seg = (size_t)g->seg_elems * a->elem_bytes;
        if ((size_t)g->seg32_elems * 4 > seg32) seg32 = (size_t)g->seg32_elems * 4;
    }
    DCP_CHECK(staging(ctx, &a->seg, &a->seg_cap, seg ? seg : 64));
    return staging(ctx, &a->seg32, &a->seg32_cap, seg32 ? seg32 : 64);
}

/* The kernels' view of the engine for `pass` (the executor's env, staging added). */
static dcp_kernel_env_t engine_env(const dcp_context_t *ctx, const dcp_plan_t *p)
{
    dcp_kernel_env_t env;
    memset(&env, 0, sizeof env);
    env.bufs[DCP_BUF_SEG] = ctx->attn.seg;
    env.bufs[DCP_BUF_SEG32] = ctx->attn.seg32;
    env.q_heads = p->qpg;
    env.kv_heads = p->kvpg;
    env.head_dim = p->shape.head_dim;
    env.head_dim_v = dcp_shape_dv(&p->shape);
    env.scale = p->shape.scale;
    env.dtype = p->shape.dtype;
    env.stream = ctx->stream;
    return env;
}

/* The pass's device copy of its program and cuDNN's plans for it. */
static dcp_status_t prepare_pass(dcp_context_t *ctx, const dcp_plan_t *p, dcp_pass_t pass)
{
    dcp_attn_state_t *a = &ctx->attn;
    dcp_attn_pass_t *ps = &a->pass[pass];
    if (!ps->launch_of) return DCP_OK;
    DCP_CHECK(dcp_attn_upload(&ps->prog, ctx->device, ctx->stream, &ps->blob, &ps->arrays));
    if (a->active != DCP_ATTN_CUDNN) return DCP_OK;
    const dcp_kernel_env_t env = engine_env(ctx, p);
    return dcp_cudnn_prepare(a->cudnn, pass, &ps->prog, &env, ps->arrays.ints);
}

/* "full, causal" for a class set. */
static const char *classes_text(int32_t set, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < DCP_SEG_CLASSES && used < cap; c++)
        if (set & DCP_SEG_BIT(c))
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? ", " : "",
                                     dcp_seg_class_name(c));
    return used ? buf : "none";
}

/* Both passes' programs, staging, device copies and cuDNN plans. A class whose graph cuDNN
 * cannot build leaves the engine's set for this context (the note says why) and everything
 * is made again without it (the staging may move, and every variant pack points into it). */
static dcp_status_t bind(dcp_context_t *ctx, const dcp_plan_t *p)
{
    dcp_attn_state_t *a = &ctx->attn;
    for (;;) {
        for (int pass = 0; pass < DCP_PASS_COUNT; pass++)
            DCP_CHECK(build_pass(ctx, p, (dcp_pass_t)pass));
        DCP_CHECK(ensure_staging(ctx));
        int again = 0;
        for (int pass = 0; pass < DCP_PASS_COUNT && !again; pass++) {
            const dcp_status_t st = prepare_pass(ctx, p, (dcp_pass_t)pass);
            const int32_t failed =
                a->active == DCP_ATTN_CUDNN ? dcp_cudnn_failed_classes(a->cudnn, pass) & a->dense[pass] : 0;
            if (st == DCP_OK) continue;
            if (!failed) return st;
            char why[400];
            dcp_error_save(why, sizeof why);
            const size_t at = strlen(a->note);
            snprintf(a->note + at, sizeof a->note - at, "; %s: dcp's kernels run those segments",
                     why);
            char names[64];
            dcp_log(DCP_LOG_WARN, DCP_LOG_ATTN, ctx->rank,
                    "%s: cuDNN could not build %s: dcp's kernels run those segments (%s)",
                    pass == DCP_PASS_FWD ? "forward" : "backward",
                    classes_text(failed, names, sizeof names), why);
            a->dense[pass] &= ~failed;
            again = 1;
        }
        if (!again) break;
    }
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        const dcp_seg_prog_t *g = &a->pass[pass].prog;
        for (int c = 0; c < DCP_SEG_CLASSES; c++)
            (pass == DCP_PASS_FWD ? a->pairs : a->pairs_bwd)[c] += g->pairs[c];
        if (pass == DCP_PASS_BWD)
            for (int64_t l = 0; l < g->num_launches; l++) {
                a->bwd_launches++;
                a->bwd_waves += g->launches[l].own_waves + g->launches[l].acc_waves;
            }
    }
    return DCP_OK;
}

/* The log's word on a bound plan's attention (ATTN): per pass, the allowed pairs of each class
 * and the engine that runs them. */
static void log_segments(const dcp_context_t *ctx, const dcp_plan_t *p)
{
    const dcp_attn_state_t *a = &ctx->attn;
    if (!dcp_log_on(DCP_LOG_INFO, DCP_LOG_ATTN)) return;
    if (a->active == DCP_ATTN_OWN || !a->pass[DCP_PASS_FWD].launch_of) {
        dcp_log(DCP_LOG_INFO, DCP_LOG_ATTN, ctx->rank,
                "plan %llu: dcp's kernels run every tile (engine %s, asked %s)",
                (unsigned long long)p->serial, dcp_attn_kind_name(a->active),
                dcp_attn_kind_name(a->requested));
        return;
    }
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) {
        const dcp_seg_prog_t *g = &a->pass[pass].prog;
        char line[400];
        size_t used = 0;
        for (int c = 0; c < DCP_SEG_CLASSES && used < sizeof line; c++)
            if (g->pairs[c] > 0)
                used +=
                    (size_t)snprintf(line + used, sizeof line - used, "%s %s %lld pairs on %s",
                                     used ? "," : "", dcp_seg_class_name(c), (long long)g->pairs[c],
                                     a->dense[pass] & DCP_SEG_BIT(c) ? dcp_attn_kind_name(a->active)
                                                                     : "dcp's kernel");
        dcp_log(DCP_LOG_INFO, DCP_LOG_ATTN, ctx->rank,
                "plan %llu %s: %lld launches, %lld dense calls;%s", (unsigned long long)p->serial,
                pass == DCP_PASS_FWD ? "forward" : "backward", (long long)g->num_launches,
                (long long)g->n_calls, used ? line : " no tiles");
    }
}

/* A plan the dense engine does not take: dcp's kernels run every tile of it (the programs of
 * the plan bound before are dropped, so that none of its launches runs for this one), `why`
 * added to the note once. */
static dcp_status_t run_own(dcp_attn_state_t *a, dcp_context_t *ctx, const dcp_plan_t *p,
                            const char *why)
{
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) pass_free(&a->pass[pass], ctx->dev);
    if (why && !strstr(a->note, why) && strlen(a->note) + strlen(why) < sizeof a->note)
        strcat(a->note, why);
    log_segments(ctx, p);
    return DCP_OK;
}

dcp_status_t dcp_attn_bind(dcp_context_t *ctx, const dcp_plan_t *p)
{
    dcp_attn_state_t *a = &ctx->attn;
    /* the layer kinds of a plan share its serial, not their programs */
    if (a->serial == p->serial && a->kind == p->kind) return DCP_OK;
    if (a->active == DCP_ATTN_OWN) {
        log_segments(ctx, p);
        return DCP_OK;
    }
    a->serial = 0;
    const int32_t dv = dcp_shape_dv(&p->shape);
    if (p->shape.softcap != 0.0f)
        return run_own(a, ctx, p,
                       "; plans with a softcap run on dcp's kernels (cuDNN's frontend "
                       "takes a score modifier only without the padding mask packed "
                       "entries need)");
    if (a->active == DCP_ATTN_CUDNN &&
        (p->shape.dtype == DCP_DTYPE_FP32 || p->shape.head_dim % 8 != 0 ||
         p->shape.head_dim > 256 || dv % 8 != 0 || dv > 256)) {
        /* cuDNN's SDPA: fp16/bf16, head dims multiples of 8 up to 256 */
        if (a->requested == DCP_ATTN_CUDNN)
            return dcp_set_error(DCP_ERR_UNSUPPORTED,
                                 "cudnn: SDPA takes bf16/fp16 and head dims that are multiples of "
                                 "8 up to 256, not this plan's (head dims %d/%d)",
                                 p->shape.head_dim, dv);
        return run_own(a, ctx, p, NULL); /* this plan runs on dcp's kernels; the next may not */
    }
    a->elem_bytes = (size_t)dcp_plan_elem_bytes(p, DCP_BUF_Q);
    const dcp_status_t st = bind(ctx, p);
    if (st == DCP_OK) {
        a->serial = p->serial;
        a->kind = p->kind;
        log_segments(ctx, p);
        return DCP_OK;
    }
    if (a->requested == DCP_ATTN_CUDNN || a->active != DCP_ATTN_CUDNN) return st;
    /* auto: cuDNN could not take a plan; dcp's kernels run from here on */
    char why[400];
    dcp_error_save(why, sizeof why);
    snprintf(a->note, sizeof a->note, "%s; dcp's kernels run every tile", why);
    dcp_log(DCP_LOG_WARN, DCP_LOG_ATTN, ctx->rank, "%s", a->note);
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) pass_free(&a->pass[pass], ctx->dev);
    a->active = DCP_ATTN_OWN;
    a->dense[0] = a->dense[1] = 0;
    return DCP_OK;
}

int64_t dcp_attn_launch(const dcp_context_t *ctx, dcp_pass_t pass, int64_t instr)
{
    const dcp_attn_pass_t *ps = &ctx->attn.pass[pass];
    if (ctx->attn.active == DCP_ATTN_OWN || !ps->launch_of || instr < ps->first_instr ||
        instr >= ps->first_instr + ps->ninstr)
        return -1;
    return ps->launch_of[instr - ps->first_instr];
}

dcp_status_t dcp_attn_run(dcp_context_t *ctx, dcp_pass_t pass, int64_t launch,
                          const dcp_kernel_env_t *env_in)
{
    dcp_attn_state_t *a = &ctx->attn;
    dcp_attn_pass_t *ps = &a->pass[pass];
    dcp_kernel_env_t env = *env_in;
    env.bufs[DCP_BUF_SEG] = a->seg;
    env.bufs[DCP_BUF_SEG32] = a->seg32;
    const dcp_dense_engine_t dense =
        a->active == DCP_ATTN_CUDNN ? dcp_cudnn_engine(a->cudnn, pass) : dcp_dense_cpu;
    return dcp_seg_run(ctx->dev->kernels, &dense, &env, &ps->prog, &ps->arrays, launch);
}

void dcp_attn_release(dcp_context_t *ctx)
{
    dcp_attn_state_t *a = &ctx->attn;
    (void)ctx->dev->stream_sync(ctx->stream);
    for (int pass = 0; pass < DCP_PASS_COUNT; pass++) pass_free(&a->pass[pass], ctx->dev);
    ctx->dev->free(a->seg);
    ctx->dev->free(a->seg32);
    dcp_cudnn_close(a->cudnn);
    a->seg = a->seg32 = NULL;
    a->cudnn = NULL;
}

dcp_status_t dcp_context_attn_engine(const dcp_context_t *ctx, dcp_attn_engine_info_t *info_out)
{
    if (!ctx || !info_out)
        return dcp_set_error(DCP_ERR_INVALID_ARG, "%s is NULL", ctx ? "info_out" : "ctx");
    const dcp_attn_state_t *a = &ctx->attn;
    dcp_cudnn_stats_t cs;
    dcp_cudnn_stats(a->cudnn, &cs);
    dcp_attn_engine_info_t info = {
        .requested = dcp_attn_kind_name(a->requested),
        .engine = dcp_attn_kind_name(a->active),
        .note = a->note,
        .cudnn_version = dcp_cudnn_version(a->cudnn),
        .dense_classes = {a->dense[0], a->dense[1]},
        .plans_built = cs.plans,
        .plan_hits = cs.hits,
        .plan_build_ms = cs.build_ms,
        .plan_evictions = cs.evictions,
        .graphs_failed = cs.failed,
        .bwd_launches = a->bwd_launches,
        .bwd_waves = a->bwd_waves,
    };
    for (int c = 0; c < DCP_SEG_CLASSES; c++) {
        info.pairs[c] = a->pairs[c];
        info.pairs_bwd[c] = a->pairs_bwd[c];
    }
    *info_out = info;
    return DCP_OK;
}
