/* Which cuDNN versions run which segment classes with which graph, the graph keys of dense
 * calls and the plan cache's choices (kernels/cudnn.h): pure functions, built with or without
 * CUDA, so the policy is tested everywhere. */
#include "kernels/cudnn.h"

#include "include/base/env.h"
#include "include/base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dcp_cudnn_version_string(int64_t v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%lld.%lld.%lld", (long long)(v / 10000), (long long)(v / 100 % 100),
             (long long)(v % 100));
}

int32_t dcp_cudnn_policy(int64_t v, int backward, const char **why)
{
    *why = "";
    if (v == 91000 || v == 91001) {
        *why = "9.10.0 and 9.10.1 have known fp16/bf16 SDPA defects (cuDNN's frontend refuses "
               "them)";
        return 0;
    }
    /* The composite graph over packed entries: ragged layouts with GQA and bottom-right
     * alignment on them from 9.6.0 (cuDNN frontend's support surface); the left bound with
     * the padding mask and no diagonal from 9.10.2. */
    if (v < 90600) {
        *why = "packed entries with GQA and bottom-right masks need cuDNN 9.6.0: the segments run "
               "on dcp's kernels";
        return 0;
    }
    if (v < 91002) {
        *why = "a left bound without the diagonal over packed entries needs cuDNN 9.10.2: window "
               "edges run on dcp's kernels";
        return DCP_SEG_BIT(DCP_SEG_FULL) | DCP_SEG_BIT(DCP_SEG_CAUSAL) | DCP_SEG_BIT(DCP_SEG_BAND);
    }
    (void)backward;
    return DCP_SEG_ALL_DENSE;
}

int32_t dcp_cudnn_classes(int64_t v, int backward, const char **why)
{
    const int32_t classes = dcp_cudnn_policy(v, backward, why);
    /* a value that does not read: gated (context creation refuses it by name) */
    if (!dcp_env_int_value(DCP_ENV_CUDNN_UNGATED) || v == 91000 || v == 91001) return classes;
    *why = "DCP_CUDNN_UNGATED: every class is tried on this cuDNN, whatever its version";
    return DCP_SEG_ALL_DENSE;
}

int dcp_cudnn_fused(int64_t v, int backward, int cls)
{
    /* the fused forward takes per-sequence lengths from 9.15.0, its masks from 9.21.0 (not
     * used: the composite graph is what cuDNN's frontend runs for masks before 9.21) */
    if (backward || cls != DCP_SEG_FULL || v < 91500) return 0;
    /* as cuDNN's frontend does from 9.13.1, unless $DCP_CUDNN_GRAPH asks for the composite */
    return strcmp(dcp_env_str_value(DCP_ENV_CUDNN_GRAPH), "composite") != 0;
}

/* ---- graph keys and the plan cache ------------------------------------------------------- */

static int64_t pow2_at_least(int64_t n, int64_t least)
{
    int64_t b = least;
    while (b < n) b *= 2;
    return b;
}

dcp_cudnn_key_t dcp_cudnn_call_key(const dcp_dense_call_t *call, int backward, int fused,
                                   int deterministic, dcp_dtype_t dtype, int32_t q_heads,
                                   int32_t kv_heads, int32_t head_dim, int32_t head_dim_v)
{
    dcp_cudnn_key_t k;
    memset(&k, 0, sizeof k);
    k.bwd = backward;
    k.cls = call->cls;
    k.fused = fused;
    k.deterministic = backward ? deterministic : 0;
    k.dtype = dtype;
    k.hq = q_heads;
    k.hkv = kv_heads;
    k.dqk = head_dim;
    k.dv = head_dim_v > 0 ? head_dim_v : head_dim;
    k.b = pow2_at_least(call->cap, deterministic && backward ? 8 : 16);
    k.sq = pow2_at_least(call->max_q, 64);
    k.skv = pow2_at_least(call->max_kv, 64);
    return k;
}

/* The same graph: everything but the three sizes (an emptied slot, bwd -1, matches none). */
static int same_graph(const dcp_cudnn_key_t *a, const dcp_cudnn_key_t *b)
{
    return a->bwd >= 0 && a->bwd == b->bwd && a->cls == b->cls && a->fused == b->fused &&
           a->deterministic == b->deterministic && a->dtype == b->dtype && a->hq == b->hq &&
           a->hkv == b->hkv && a->dqk == b->dqk && a->dv == b->dv;
}

/* The same pass and shape, whatever the class and graph: the keys a pass's entries reach are
 * the same span of the rank's rows. */
static int same_shape(const dcp_cudnn_key_t *a, const dcp_cudnn_key_t *b)
{
    return a->bwd >= 0 && a->bwd == b->bwd && a->deterministic == b->deterministic &&
           a->dtype == b->dtype && a->hq == b->hq && a->hkv == b->hkv && a->dqk == b->dqk &&
           a->dv == b->dv;
}

int dcp_cudnn_key_fits(const dcp_cudnn_key_t *have, const dcp_cudnn_key_t *want)
{
    return same_graph(have, want) && have->b >= want->b && have->b <= 4 * want->b &&
           have->sq >= want->sq && have->sq <= 4 * want->sq && have->skv >= want->skv;
}

void dcp_cudnn_cache_init(dcp_cudnn_cache_t *c, int64_t max)
{
    memset(c, 0, sizeof *c);
    c->max = max < 1 ? 1 : max;
}

void dcp_cudnn_cache_free(dcp_cudnn_cache_t *c)
{
    free(c->seen);
    free(c->keys);
    free(c->used);
    free(c->pinned);
    memset(c, 0, sizeof *c);
}

void dcp_cudnn_cache_unpin(dcp_cudnn_cache_t *c)
{
    if (c->n > 0) memset(c->pinned, 0, (size_t)c->n);
}

void dcp_cudnn_cache_drop(dcp_cudnn_cache_t *c, int64_t i)
{
    if (i < 0 || i >= c->n) return;
    memset(&c->keys[i], 0, sizeof c->keys[i]);
    c->keys[i].bwd = -1;
    c->used[i] = 0;
    c->pinned[i] = 0;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

dcp_status_t dcp_cudnn_cache_expect(dcp_cudnn_cache_t *c, const dcp_cudnn_key_t *want)
{
    for (int64_t i = 0; i < c->n_seen; i++) {
        dcp_cudnn_key_t *s = &c->seen[i];
        if (!same_graph(s, want)) continue;
        s->b = max64(s->b, want->b);
        s->sq = max64(s->sq, want->sq);
        s->skv = max64(s->skv, want->skv);
        return DCP_OK;
    }
    DCP_CHECK(dcp_reserve(&c->seen, &c->cap_seen, c->n_seen + 1, sizeof *c->seen, "cudnn plans"));
    c->seen[c->n_seen++] = *want;
    return DCP_OK;
}

dcp_status_t dcp_cudnn_cache_find(dcp_cudnn_cache_t *c, const dcp_cudnn_key_t *want,
                                  int64_t *index_out, int *build_out, int64_t *evicted_out)
{
    *build_out = 0;
    *evicted_out = -1;
    int64_t best = -1;
    for (int64_t i = 0; i < c->n; i++) {
        const dcp_cudnn_key_t *k = &c->keys[i];
        if (!dcp_cudnn_key_fits(k, want)) continue;
        if (best < 0 || k->b * k->sq < c->keys[best].b * c->keys[best].sq ||
            (k->b * k->sq == c->keys[best].b * c->keys[best].sq && k->skv < c->keys[best].skv))
            best = i;
    }
    c->clock++;
    if (best >= 0) {
        c->used[best] = c->clock;
        c->pinned[best] = 1;
        c->hits++;
        *index_out = best;
        return DCP_OK;
    }
    int64_t at = c->n;
    for (int64_t i = 0; i < c->n && at == c->n; i++) /* an emptied slot first */
        if (c->keys[i].bwd < 0) at = i;
    if (at == c->n && c->n >= c->max) {
        at = -1;
        for (int64_t i = 0; i < c->n; i++)
            if (!c->pinned[i] && (at < 0 || c->used[i] < c->used[at])) at = i;
        if (at < 0)
            return dcp_set_error(DCP_ERR_UNSUPPORTED,
                                 "cudnn: the %lld plans a bound plan needs exceed the cache's "
                                 "bound ($DCP_CUDNN_PLANS)",
                                 (long long)c->n + 1);
        *evicted_out = at;
        c->evictions++;
    } else if (at == c->n) {
        DCP_CHECK(dcp_reserve(&c->keys, &c->cap_keys, c->n + 1, sizeof *c->keys, "cudnn plans"));
        DCP_CHECK(dcp_reserve(&c->used, &c->cap_used, c->n + 1, sizeof *c->used, "cudnn plans"));
        DCP_CHECK(dcp_reserve(&c->pinned, &c->cap_pinned, c->n + 1, 1, "cudnn plans"));
        c->n++;
    }
    /* the largest batch and rows its graph was expected with, as far as they still run want,
     * and the longest keys of any graph of its pass and shape (expected or built): causal
     * entries reach the furthest, and a class that comes later takes their length */
    dcp_cudnn_key_t k = *want;
    for (int64_t i = 0; i < c->n_seen; i++) {
        if (same_graph(&c->seen[i], want)) {
            k.b = max64(k.b, min64(c->seen[i].b, 4 * want->b));
            k.sq = max64(k.sq, min64(c->seen[i].sq, 4 * want->sq));
        }
        if (same_shape(&c->seen[i], want)) k.skv = max64(k.skv, c->seen[i].skv);
    }
    for (int64_t i = 0; i < c->n; i++)
        if (i != at && same_shape(&c->keys[i], want)) k.skv = max64(k.skv, c->keys[i].skv);
    c->keys[at] = k;
    c->used[at] = c->clock;
    c->pinned[at] = 1;
    c->builds++;
    *index_out = at;
    *build_out = 1;
    return DCP_OK;
}
