/*
 * cuDNN's SDPA as the attention engine's dense engine (kernels/cudnn.h): execution plans over
 * the graphs of kernels/cudnn_graph.c, cached by graph key, and the variant packs that run a
 * bound plan's dense calls on the context's engine buffers. Built where the CUDA toolkit (and
 * with it cudnn.h) is; kernels/cudnn_none.c otherwise.
 */
#include "kernels/cudnn.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "include/base/log.h"
#include "kernels/cudnn_api.h"
#include "kernels/cudnn_graph.h"
#include "kernels/device.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- plans --------------------------------------------------------------------------------- */

typedef struct {
    dcp_cudnn_graph_t gr;
    cudnnBackendDescriptor_t plan; /* owned by gr.g */
    int64_t workspace;             /* cuDNN's own, after the graph's accumulator and sum */
    int64_t configs;               /* engine configurations the heuristics offered */
    int64_t engine;                /* the chosen one's global engine index, -1 unknown */
} plan_t;

/* One prepared dense call: its plan and the variant pack over the context's buffers. */
typedef struct {
    int64_t plan;
    cudnnBackendDescriptor_t pack;
    float scale, neg_inf, one; /* passed by value: the pack points at them */
    int32_t window;
} call_t;

typedef struct {
    call_t *calls; /* [prog.n_calls] */
    int64_t ncalls, cap;
    void *workspace; /* device memory of the slot's largest plan */
    size_t ws_cap;
    int32_t failed;  /* classes whose graphs did not build */
} slot_t;

struct dcp_cudnn {
    struct dcp_cudnn *self[2]; /* the engine states of the two slots (fwd, bwd) */
    dcp_cudnn_api_t a;
    cudnnHandle_t h;
    int64_t version;
    int32_t device;
    int deterministic;
    dcp_cudnn_cache_t cache;
    plan_t *plans; /* at the cache's indices */
    int64_t plans_cap;
    slot_t slot[2];
    dcp_cudnn_stats_t stats;
};

enum { ALIGN = 256 };

static int64_t up(int64_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* Bytes of workspace a plan needs in all: the graph's buffers, then cuDNN's. */
static int64_t plan_bytes(const plan_t *p)
{
    return up(p->gr.accum_bytes) + up(p->gr.sum_bytes) + p->workspace;
}

/* Whether an engine configuration is marked non-deterministic. */
static int nondeterministic(dcp_cudnn_t *c, dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng = dcp_cudnn_gb_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    if (!eng) return 1;
    int64_t n = 0;
    if (c->a.get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) !=
        CUDNN_STATUS_SUCCESS)
        return 1;
    cudnnBackendNumericalNote_t notes[64];
    n = 0;
    if (c->a.get_attr(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 64, &n,
                      notes) != CUDNN_STATUS_SUCCESS)
        return 1;
    for (int64_t i = 0; i < n && i < 64; i++)
        if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) return 1;
    return 0;
}

/* The global index of the engine of engine configuration cfg, -1 when it does not say. */
static int64_t engine_index(dcp_cudnn_t *c, dcp_cudnn_gb_t *g, cudnnBackendDescriptor_t cfg)
{
    cudnnBackendDescriptor_t eng = dcp_cudnn_gb_new(g, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
    int64_t n = 0, index = -1;
    if (!eng || c->a.get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                              &n, &eng) != CUDNN_STATUS_SUCCESS)
        return -1;
    if (c->a.get_attr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index) !=
        CUDNN_STATUS_SUCCESS)
        return -1;
    return index;
}

/* The graph of `key` and the first execution plan the heuristics offer that finalizes (and,
 * in deterministic mode, is not marked non-deterministic), as cuDNN's frontend picks one. */
static dcp_status_t build_plan(dcp_cudnn_t *c, const dcp_cudnn_key_t *key, plan_t *p)
{
    memset(p, 0, sizeof *p);
    p->engine = -1;
    DCP_CHECK(dcp_cudnn_graph_build(&c->a, key, c->h, 0, &p->gr));
    dcp_cudnn_gb_t *g = &p->gr.g;
    static const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    int tried = 0;
    for (int m = 0; m < 2 && g->st == CUDNN_STATUS_SUCCESS && !p->plan; m++) {
        cudnnBackendDescriptor_t heur = dcp_cudnn_gb_new(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
        dcp_cudnn_gb_link(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, p->gr.graph, "heuristics");
        dcp_cudnn_gb_set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m],
                         "heuristics");
        dcp_cudnn_gb_fin(g, heur, "heuristics");
        int64_t n = 0;
        if (g->st == CUDNN_STATUS_SUCCESS) {
            g->st = c->a.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  0, &n, NULL);
            if (g->st != CUDNN_STATUS_SUCCESS) g->where = "heuristics results";
        }
        if (n > 32) n = 32;
        p->configs += n;
        cudnnBackendDescriptor_t cfgs[32];
        for (int64_t i = 0; i < n; i++)
            cfgs[i] = dcp_cudnn_gb_new(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configs");
        int64_t got = 0;
        if (g->st == CUDNN_STATUS_SUCCESS && n > 0) {
            g->st = c->a.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                  n, &got, cfgs);
            if (g->st != CUDNN_STATUS_SUCCESS) g->where = "heuristics results";
        }
        for (int64_t i = 0; i < got && g->st == CUDNN_STATUS_SUCCESS && !p->plan; i++) {
            if (c->deterministic && nondeterministic(c, g, cfgs[i])) continue;
            tried++;
            cudnnBackendDescriptor_t plan =
                dcp_cudnn_gb_new(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
            if (!plan) break;
            if (c->a.set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]) == CUDNN_STATUS_SUCCESS &&
                c->a.finalize(plan) == CUDNN_STATUS_SUCCESS) {
                p->plan = plan;
                p->engine = engine_index(c, g, cfgs[i]);
            }
        }
    }
    if (g->st == CUDNN_STATUS_SUCCESS && !p->plan) {
        g->st = CUDNN_STATUS_NOT_SUPPORTED;
        g->where = tried ? "no engine configuration finalizes"
                         : c->deterministic ? "no deterministic engine configuration"
                                            : "the heuristics offer no engine";
    }
    if (g->st == CUDNN_STATUS_SUCCESS) {
        int64_t n = 0;
        g->st = c->a.get_attr(p->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                              &n, &p->workspace);
        if (g->st != CUDNN_STATUS_SUCCESS) g->where = "workspace size";
    }
    if (g->st != CUDNN_STATUS_SUCCESS) {
        char what[256];
        snprintf(what, sizeof what,
                 "%s %s plan (%s, %s, batch %lld, heads %lld/%lld, s_q %lld, s_kv %lld, d %lld/%lld)",
                 key->bwd ? "backward" : "forward", dcp_seg_class_name(key->cls),
                 key->fused ? "fused" : "composite", key->dtype == DCP_DTYPE_BF16 ? "bf16" : "fp16",
                 (long long)key->b, (long long)key->hq, (long long)key->hkv, (long long)key->sq,
                 (long long)key->skv, (long long)key->dqk, (long long)key->dv);
        const dcp_status_t st = dcp_cudnn_gb_error(g, what);
        dcp_cudnn_graph_free(&p->gr);
        memset(p, 0, sizeof *p);
        return st;
    }
    return DCP_OK;
}

static void plan_free(plan_t *p)
{
    dcp_cudnn_graph_free(&p->gr);
    memset(p, 0, sizeof *p);
}

/* The plan that runs `key`: found in the cache or built (evicting per the cache's rule). */
static dcp_status_t find_plan(dcp_cudnn_t *c, const dcp_cudnn_key_t *key, int64_t *index_out)
{
    int build = 0;
    int64_t at = -1, evicted = -1;
    DCP_CHECK(dcp_cudnn_cache_find(&c->cache, key, &at, &build, &evicted));
    DCP_CHECK(dcp_reserve(&c->plans, &c->plans_cap, c->cache.n, sizeof *c->plans, "cudnn plans"));
    if (!build) {
        c->stats.hits++;
        *index_out = at;
        return DCP_OK;
    }
    if (evicted >= 0) {
        plan_free(&c->plans[evicted]);
        c->stats.evictions++;
    }
    const double t0 = dcp_now();
    const dcp_status_t st = build_plan(c, &c->cache.keys[at], &c->plans[at]);
    if (st != DCP_OK) {
        dcp_cudnn_cache_drop(&c->cache, at); /* the caller marks the class failed */
        return st;
    }
    c->stats.build_ms += (dcp_now() - t0) * 1e3;
    c->stats.plans++;
    const dcp_cudnn_key_t *k = &c->cache.keys[at];
    const plan_t *pl = &c->plans[at];
    dcp_log(DCP_LOG_INFO, DCP_LOG_CUDNN, -1,
            "GPU %d: built a %s %s plan (%s graph%s; heads %lld/%lld, dims %lld/%lld, batch %lld, "
            "rows %lld, keys %lld) in %.1f ms: engine %lld of %lld configurations, %lld bytes of "
            "workspace%s",
            c->device, k->bwd ? "backward" : "forward", dcp_seg_class_name(k->cls),
            k->fused ? "fused" : "composite", k->deterministic ? ", deterministic" : "",
            (long long)k->hq, (long long)k->hkv, (long long)k->dqk, (long long)k->dv,
            (long long)k->b, (long long)k->sq, (long long)k->skv, (dcp_now() - t0) * 1e3,
            (long long)pl->engine, (long long)pl->configs, (long long)plan_bytes(pl),
            evicted >= 0 ? " (the least recently used plan dropped)" : "");
    if ((size_t)plan_bytes(&c->plans[at]) > c->stats.workspace)
        c->stats.workspace = (size_t)plan_bytes(&c->plans[at]);
    *index_out = at;
    return DCP_OK;
}

/* ---- variant packs ------------------------------------------------------------------------- */

static void slot_clear(dcp_cudnn_t *c, slot_t *s)
{
    for (int64_t i = 0; i < s->ncalls; i++)
        if (s->calls[i].pack) c->a.destroy_desc(s->calls[i].pack);
    s->ncalls = 0;
}

/* The variant pack of one call: every device tensor of its graph at its place in the engine
 * buffers and the workspace, and the scalars by value. */
static dcp_status_t make_pack(dcp_cudnn_t *c, slot_t *s, call_t *cl, const dcp_dense_call_t *call,
                              const dcp_kernel_env_t *env, const int32_t *ints)
{
    const plan_t *p = &c->plans[cl->plan];
    const size_t es = env->dtype == DCP_DTYPE_FP32 ? 4 : 2;
    char *seg = env->bufs[DCP_BUF_SEG];
    float *seg32 = env->bufs[DCP_BUF_SEG32];
    const int32_t *in = ints + call->ints; /* device memory: addresses only */
    const int64_t cap = call->cap;
#define INTS(a) (in + dcp_seg_int_array(cap, (a)))
    cl->scale = env->scale;
    cl->neg_inf = -INFINITY;
    cl->one = 1.0f;
    cl->window = call->window;
    char *ws = s->workspace;
    int64_t uids[64];
    void *ptrs[64];
    int n = 0;
#define PUT(u, ptr) (uids[n] = (u), ptrs[n] = (void *)(ptr), n++)
    PUT(DCP_CUDNN_U_Q, seg + call->q * es);
    PUT(DCP_CUDNN_U_K, seg + call->k * es);
    PUT(DCP_CUDNN_U_V, seg + call->v * es);
    PUT(DCP_CUDNN_U_O, seg + call->o * es);
    PUT(DCP_CUDNN_U_STATS, seg32 + call->stats);
    PUT(DCP_CUDNN_U_SEQ_Q, INTS(DCP_SEG_SEQ_Q));
    PUT(DCP_CUDNN_U_SEQ_KV, INTS(DCP_SEG_SEQ_KV));
    PUT(DCP_CUDNN_U_OFF_Q, INTS(DCP_SEG_OFF_Q));
    PUT(DCP_CUDNN_U_OFF_K, INTS(DCP_SEG_OFF_K));
    PUT(DCP_CUDNN_U_OFF_V, INTS(DCP_SEG_OFF_V));
    PUT(DCP_CUDNN_U_OFF_O, INTS(DCP_SEG_OFF_O));
    PUT(DCP_CUDNN_U_OFF_STATS, INTS(DCP_SEG_OFF_ST));
#undef INTS
    if (p->gr.g.n > 0 && c->cache.keys[cl->plan].bwd) {
        PUT(DCP_CUDNN_U_DO, seg + call->dout * es);
        PUT(DCP_CUDNN_U_DQ, seg + call->dq * es);
        PUT(DCP_CUDNN_U_DK, seg + call->dk * es);
        PUT(DCP_CUDNN_U_DV, seg + call->dv * es);
    }
    if (p->gr.accum_bytes) PUT(DCP_CUDNN_U_ACCUM, ws);
    if (p->gr.sum_bytes) PUT(DCP_CUDNN_U_SUM, ws + up(p->gr.accum_bytes));
    for (int32_t i = 0; i < p->gr.nvalues; i++) {
        const void *v = p->gr.value_kind[i] == DCP_CUDNN_V_SCALE     ? (const void *)&cl->scale
                        : p->gr.value_kind[i] == DCP_CUDNN_V_NEG_INF ? (const void *)&cl->neg_inf
                        : p->gr.value_kind[i] == DCP_CUDNN_V_ONE     ? (const void *)&cl->one
                                                                      : (const void *)&cl->window;
        PUT(p->gr.value_uid[i], v);
    }
#undef PUT
    void *plan_ws = ws + up(p->gr.accum_bytes) + up(p->gr.sum_bytes);
    dcp_cudnn_gb_t g = {.a = &c->a};
    cudnnBackendDescriptor_t pack = dcp_cudnn_gb_new(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    dcp_cudnn_gb_set(&g, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids,
                     "variant pack");
    dcp_cudnn_gb_set(&g, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs,
                     "variant pack");
    dcp_cudnn_gb_set(&g, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &plan_ws,
                     "variant pack");
    dcp_cudnn_gb_fin(&g, pack, "variant pack");
    if (g.st != CUDNN_STATUS_SUCCESS) {
        const dcp_status_t st = dcp_cudnn_gb_error(&g, "variant pack");
        dcp_cudnn_gb_free(&g);
        return st;
    }
    cl->pack = pack;
    dcp_cudnn_gb_release(&g, pack); /* the pack is the call's now */
    dcp_cudnn_gb_free(&g);
    return DCP_OK;
}

dcp_status_t dcp_cudnn_prepare(dcp_cudnn_t *c, int slot, const dcp_seg_prog_t *prog,
                               const dcp_kernel_env_t *env, const int32_t *ints)
{
    if (!c || slot < 0 || slot > 1)
        return dcp_set_error(DCP_ERR_INTERNAL, "cudnn prepare: slot %d", slot);
    if (env->dtype != DCP_DTYPE_BF16 && env->dtype != DCP_DTYPE_FP16)
        return dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn: the SDPA engine takes bf16 and fp16, "
                                                  "not dtype %d", (int)env->dtype);
    slot_t *s = &c->slot[slot];
    slot_clear(c, s);
    dcp_cudnn_cache_unpin(&c->cache);
    for (int other = 0; other < 2; other++) /* the other pass's plans stay pinned */
        for (int64_t i = 0; other != slot && i < c->slot[other].ncalls; i++)
            if (c->slot[other].calls[i].plan >= 0) c->cache.pinned[c->slot[other].calls[i].plan] = 1;
    DCP_CHECK(dcp_reserve(&s->calls, &s->cap, prog->n_calls + 1, sizeof *s->calls, "cudnn calls"));
    s->ncalls = prog->n_calls;
    memset(s->calls, 0, (size_t)s->ncalls * sizeof *s->calls);
    /* the plans first (every call's key noted, so that a plan built for one takes the sizes
     * of the largest): the workspace must be in place before the variant packs name it */
    dcp_cudnn_key_t *keys = NULL;
    DCP_CHECK(dcp_calloc(&keys, prog->n_calls + 1, sizeof *keys, "cudnn calls"));
    dcp_status_t st = DCP_OK;
    for (int64_t i = 0; i < prog->n_calls && st == DCP_OK; i++) {
        const dcp_dense_call_t *call = &prog->calls[i];
        const int bwd = prog->launches[call->launch].backward;
        keys[i] = dcp_cudnn_call_key(call, bwd, dcp_cudnn_fused(c->version, bwd, call->cls),
                                     c->deterministic, env->dtype, env->q_heads, env->kv_heads,
                                     env->head_dim, dcp_env_dv(env));
        st = dcp_cudnn_cache_expect(&c->cache, &keys[i]);
    }
    size_t ws = 0;
    for (int64_t i = 0; i < prog->n_calls && st == DCP_OK; i++) {
        call_t *cl = &s->calls[i];
        st = find_plan(c, &keys[i], &cl->plan);
        if (st != DCP_OK) {
            s->failed |= DCP_SEG_BIT(prog->calls[i].cls);
            c->stats.failed++;
            cl->plan = -1;
            s->ncalls = i; /* the packs made so far are cleared by the next prepare */
            break;
        }
        if ((size_t)plan_bytes(&c->plans[cl->plan]) > ws) ws = (size_t)plan_bytes(&c->plans[cl->plan]);
    }
    free(keys);
    DCP_CHECK(st);
    dcp_log(DCP_LOG_INFO, DCP_LOG_CUDNN, -1,
            "GPU %d: %s: %lld dense calls prepared (so far %lld plans built, %lld calls on a "
            "cached plan; %lld cached)",
            c->device, slot ? "backward" : "forward", (long long)s->ncalls,
            (long long)c->stats.plans, (long long)c->stats.hits, (long long)c->cache.n);
    if (ws > s->ws_cap) {
        cudaStreamSynchronize((cudaStream_t)env->stream); /* queued calls may use the old one */
        /* the device table's memory: the allocation hook sees it (kernels/device.h) */
        dcp_device_cuda.free(s->workspace);
        s->ws_cap = 0;
        s->workspace = dcp_device_cuda.alloc(c->device, ws);
        if (!s->workspace)
            return dcp_set_error(DCP_ERR_NO_MEMORY, "cudnn: %zu bytes of workspace on GPU %d", ws,
                                 c->device);
        s->ws_cap = ws;
    }
    for (int64_t i = 0; i < prog->n_calls; i++)
        DCP_CHECK(make_pack(c, s, &s->calls[i], &prog->calls[i], env, ints));
    return DCP_OK;
}

int32_t dcp_cudnn_failed_classes(const dcp_cudnn_t *c, int slot)
{
    return c && slot >= 0 && slot < 2 ? c->slot[slot].failed : 0;
}

static dcp_status_t engine_run(void *state, const dcp_kernel_env_t *env, const dcp_seg_prog_t *prog,
                               int64_t call, const int32_t *ints)
{
    (void)prog, (void)ints;
    dcp_cudnn_t *c = *(dcp_cudnn_t **)state;
    const int slot = (int)(((dcp_cudnn_t **)state) - c->self);
    const slot_t *s = &c->slot[slot];
    if (call < 0 || call >= s->ncalls || s->calls[call].plan < 0)
        return dcp_set_error(DCP_ERR_INTERNAL, "cudnn: call %lld was not prepared", (long long)call);
    const call_t *cl = &s->calls[call];
    cudnnStatus_t st = c->a.set_stream(c->h, (cudaStream_t)env->stream);
    if (st == CUDNN_STATUS_SUCCESS) st = c->a.execute(c->h, c->plans[cl->plan].plan, cl->pack);
    return st == CUDNN_STATUS_SUCCESS ? DCP_OK : dcp_cudnn_api_fail(&c->a, st, "execute");
}

dcp_dense_engine_t dcp_cudnn_engine(dcp_cudnn_t *c, int slot)
{
    return (dcp_dense_engine_t){"cudnn", &c->self[slot], engine_run};
}

dcp_status_t dcp_cudnn_open(int32_t device, int deterministic, dcp_cudnn_t **out)
{
    *out = NULL;
    int64_t bound = 0; /* the plan cache's: $DCP_CUDNN_PLANS, else 64 */
    DCP_CHECK(dcp_env_int(DCP_ENV_CUDNN_PLANS, &bound));
    dcp_cudnn_t *c;
    DCP_CHECK(dcp_calloc(&c, 1, sizeof *c, "cudnn"));
    c->self[0] = c->self[1] = c;
    c->device = device;
    c->deterministic = deterministic;
    dcp_cudnn_cache_init(&c->cache, bound);
    dcp_status_t st = dcp_cudnn_api_load(&c->a);
    if (st == DCP_OK) {
        c->version = (int64_t)c->a.get_version();
        const char *why;
        char v[32];
        dcp_cudnn_version_string(c->version, v, sizeof v);
        if (!dcp_cudnn_policy(c->version, 0, &why) && !dcp_cudnn_policy(c->version, 1, &why))
            st = dcp_set_error(DCP_ERR_UNSUPPORTED, "cudnn %s refused: %s", v, why);
    }
    if (st == DCP_OK) {
        const cudnnStatus_t s = c->a.create(&c->h);
        if (s != CUDNN_STATUS_SUCCESS) st = dcp_cudnn_api_fail(&c->a, s, "create a handle");
    }
    if (st != DCP_OK) {
        dcp_cudnn_close(c);
        return st;
    }
    *out = c;
    return DCP_OK;
}

void dcp_cudnn_close(dcp_cudnn_t *c)
{
    if (!c) return;
    for (int i = 0; i < 2; i++) {
        slot_clear(c, &c->slot[i]);
        free(c->slot[i].calls);
        dcp_device_cuda.free(c->slot[i].workspace);
    }
    for (int64_t i = 0; i < c->cache.n && c->plans; i++) plan_free(&c->plans[i]);
    free(c->plans);
    dcp_cudnn_cache_free(&c->cache);
    if (c->h) c->a.destroy(c->h);
    /* the library stays loaded: cuDNN keeps process-wide state a dlclose would tear down
     * under other contexts */
    free(c);
}

int64_t dcp_cudnn_version(const dcp_cudnn_t *c)
{
    return c ? c->version : 0;
}

void dcp_cudnn_stats(const dcp_cudnn_t *c, dcp_cudnn_stats_t *out)
{
    memset(out, 0, sizeof *out);
    if (c) *out = c->stats;
}

dcp_status_t dcp_cudnn_probe(dcp_cudnn_t *c, const dcp_cudnn_key_t *key, dcp_cudnn_probe_t *out)
{
    memset(out, 0, sizeof *out);
    out->engine = -1;
    plan_t p;
    const double t0 = dcp_now();
    const dcp_status_t st = build_plan(c, key, &p);
    out->build_ms = (dcp_now() - t0) * 1e3;
    if (st != DCP_OK) {
        snprintf(out->error, sizeof out->error, "%s", dcp_last_error());
        return DCP_OK;
    }
    out->built = 1;
    out->engine = p.engine;
    out->configs = p.configs;
    out->workspace = plan_bytes(&p);
    out->ops = p.gr.nops;
    plan_free(&p);
    return DCP_OK;
}

dcp_status_t dcp_cudnn_check_graph(const dcp_cudnn_key_t *key, char **trace_out,
                                   int64_t *version_out)
{
    *version_out = 0;
    if (trace_out) *trace_out = NULL;
    dcp_cudnn_api_t a;
    DCP_CHECK(dcp_cudnn_api_load(&a));
    *version_out = (int64_t)a.get_version();
    dcp_cudnn_graph_t gr;
    DCP_CHECK(dcp_cudnn_graph_build(&a, key, NULL, trace_out != NULL, &gr));
    if (trace_out) {
        *trace_out = gr.g.trace;
        gr.g.trace = NULL;
    }
    dcp_cudnn_graph_free(&gr);
    return DCP_OK;
}
