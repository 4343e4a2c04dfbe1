/*
 * cuDNN's attention (SDPA) as the dense engine of the attention engine (kernels/segment.h),
 * loaded at run time so that libdcp has no hard dependency on it.
 *
 * The library is dlopen'ed when a GPU context is created: $DCP_CUDNN_LIB, else
 * libcudnn.so.9 through the loader's search path (the PyTorch wheel's nvidia/cudnn/lib on a
 * GPU machine; tests/perf/gpu_check.sh sets both). Its backend graph API is driven from C (no
 * frontend), over packed ragged entries with per-entry lengths, with one of two graphs per
 * dense call (kernels/cudnn_graph.c):
 *   composite  the pattern of plain matmul, pointwise and reduction operations that cuDNN's
 *              frontend builds and cuDNN's heuristics match to its fused flash-attention
 *              engines: forward and backward, every dense class (FULL, CAUSAL, BAND, LEFT:
 *              the padding mask, a bottom-right diagonal, a left bound by value), from 9.6.0
 *              (packed layouts with GQA, bottom-right alignment with packed layouts);
 *   fused      the SDPA_FWD operation (9.13.1; with per-sequence lengths 9.15.0): FULL
 *              segments forward, as cuDNN's frontend itself does on 9.19 for an unmasked
 *              forward; its masks need 9.21's score-modifier subgraph, its backward 9.28.
 * cudnnGetVersion() decides (dcp_cudnn_policy); $DCP_CUDNN_GRAPH=composite|fused overrides
 * the graph where both exist, for measuring one against the other on a GPU. Versions with
 * known SDPA defects are refused by name (9.10.0, 9.10.1: fp16/bf16 forward and backward).
 * The statistics are the natural log of the sum of the exponentiated scaled scores
 * (max + ln sum exp): the LSE of dcp's merges, unit for unit.
 *
 * Execution plans are built when a plan is bound (dcp_cudnn_prepare) and cached per context
 * (a cuDNN handle is used by one thread) by graph key (dcp_cudnn_key_t): pass, class, graph,
 * heads, head dims, dtype and three sizes in powers of two, the batch capacity, the longest
 * entry's rows and keys; a plan also runs calls up to 4x smaller in batch and rows and of any
 * shorter key length (cuDNN's ragged kernels stop at each entry's length), and a new plan takes
 * the largest batch and rows its graph has been asked for and the longest keys of any graph
 * of its pass, so that a training loop stops building once its longest entries have come
 * (dcp_cudnn_cache_*, a pure model the tests run). A call then
 * only sets the stream and executes a variant pack made at bind time. The backward's
 * softmax_sum and dQ accumulator (fp32) sit at the start of the bound workspace, cuDNN's plan
 * workspace after them. With `deterministic`, engine configurations that cuDNN marks
 * non-deterministic are skipped and the backward writes dQ without the accumulator.
 */
#ifndef DCP_KERNELS_CUDNN_H
#define DCP_KERNELS_CUDNN_H

#include "kernels/segment.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_cudnn dcp_cudnn_t;

/* The segment classes (DCP_SEG_BIT set) cuDNN `version` runs for the forward (backward 0)
 * or the backward (1); 0 with *why set when it runs none (why is a static sentence). */
int32_t dcp_cudnn_policy(int64_t version, int backward, const char **why);

/* dcp_cudnn_policy, unless $DCP_CUDNN_UNGATED is set (not "0"): then every class is tried on
 * any version but the refused ones, for proving a cuDNN the policy does not know yet on a GPU
 * (dcp-attn-test --engine cudnn --check); *why says so. What the engine and the bench use. */
int32_t dcp_cudnn_classes(int64_t version, int backward, const char **why);

/* Whether class cls of a pass runs cuDNN's fused SDPA operation (1) or the composite graph
 * (0) on `version`: the policy, or $DCP_CUDNN_GRAPH ("fused", "composite") where both exist. */
int dcp_cudnn_fused(int64_t version, int backward, int cls);

/* "9.15.1" from 91501 (cudnnGetVersion()'s encoding since 9.0). */
void dcp_cudnn_version_string(int64_t version, char *buf, size_t cap);

/* What one cuDNN graph (and its execution plan) is built for. */
typedef struct {
    int32_t bwd, cls;       /* pass; dense class */
    int32_t fused;          /* the fused SDPA operation, else the composite graph */
    int32_t deterministic;  /* backward: dQ without the accumulator, deterministic engines */
    int32_t dtype;          /* dcp_dtype_t: bf16 or fp16 */
    int64_t hq, hkv, dqk, dv;
    int64_t b, sq, skv;     /* batch capacity, longest entry's rows and keys (buckets) */
} dcp_cudnn_key_t;

/* The key of dense call `call` of a pass (sizes rounded up to their buckets: powers of two,
 * at least 8 entries and 64 rows or keys). */
dcp_cudnn_key_t dcp_cudnn_call_key(const dcp_dense_call_t *call, int backward, int fused,
                                   int deterministic, dcp_dtype_t dtype, int32_t q_heads,
                                   int32_t kv_heads, int32_t head_dim, int32_t head_dim_v);

/* Whether a plan built for `have` runs a call whose key is `want`: the same graph, a batch
 * and rows at least want's and at most 4x, keys at least want's. */
int dcp_cudnn_key_fits(const dcp_cudnn_key_t *have, const dcp_cudnn_key_t *want);

/* The plan cache of a context, as keys: which plan runs a call, which one a new key evicts.
 * The engine keeps its execution plans at the same indices. */
typedef struct {
    dcp_cudnn_key_t *seen;   /* per graph, the largest sizes asked for (dcp_cudnn_cache_expect) */
    int64_t n_seen, cap_seen;
    dcp_cudnn_key_t *keys;
    int64_t *used;   /* the clock of each key's last use */
    uint8_t *pinned; /* used by a prepared pass: never evicted */
    int64_t n, cap_keys, cap_used, cap_pinned;
    int64_t max;     /* plans kept at most (evicting the least recently used unpinned) */
    int64_t clock;
    int64_t builds, hits, evictions;
} dcp_cudnn_cache_t;

/* A cache of at most `max` plans (>= 1). */
void dcp_cudnn_cache_init(dcp_cudnn_cache_t *c, int64_t max);
void dcp_cudnn_cache_free(dcp_cudnn_cache_t *c);

/* Notes that a call of key `want` is coming (before the lookups of a bound plan: every call
 * of it is noted first), so that a plan built for the first takes the sizes of the largest. */
dcp_status_t dcp_cudnn_cache_expect(dcp_cudnn_cache_t *c, const dcp_cudnn_key_t *want);

/* The plan that runs `want`: the fitting key with the fewest entries x rows, else a new key
 * at *index_out with *build_out set: want with the largest batch and rows its graph was
 * expected with (up to 4x want's, so that it runs want) and the longest keys any graph of its
 * pass and shape was expected or built with, in a free slot or the
 * least recently used unpinned one (*evicted_out its old index, else -1; the engine frees
 * that plan first). The chosen key is pinned. DCP_ERR_NO_MEMORY, or DCP_ERR_UNSUPPORTED when
 * every plan is pinned. */
dcp_status_t dcp_cudnn_cache_find(dcp_cudnn_cache_t *c, const dcp_cudnn_key_t *want,
                                  int64_t *index_out, int *build_out, int64_t *evicted_out);

/* Unpins every key (before a pass is prepared anew: the engine pins again what it uses). */
void dcp_cudnn_cache_unpin(dcp_cudnn_cache_t *c);

/* Empties slot i (a key whose plan did not build): it matches nothing and is reused first. */
void dcp_cudnn_cache_drop(dcp_cudnn_cache_t *c, int64_t i);

/* Loads cuDNN and makes a handle on `device` (the caller's current device). Fails with
 * DCP_ERR_UNSUPPORTED (the message says why: not built with CUDA, library not found, a
 * symbol missing, the version refused, no handle) and leaves *out NULL. */
dcp_status_t dcp_cudnn_open(int32_t device, int deterministic, dcp_cudnn_t **out);
void dcp_cudnn_close(dcp_cudnn_t *c);

/* The loaded library's version (0 for NULL). */
int64_t dcp_cudnn_version(const dcp_cudnn_t *c);

typedef struct {
    int64_t plans;       /* execution plans built */
    int64_t hits;        /* calls prepared with a plan already built */
    int64_t evictions;   /* plans dropped to keep the cache's bound */
    int64_t failed;      /* graphs that did not build (their classes went to dcp's kernels) */
    double build_ms;     /* time spent building plans */
    size_t workspace;    /* bytes of the largest plan's workspace */
} dcp_cudnn_stats_t;

void dcp_cudnn_stats(const dcp_cudnn_t *c, dcp_cudnn_stats_t *out);

/* Builds (or finds) the execution plans of every dense call of `prog` and the variant packs
 * that run them on the context's engine buffers: seg and seg32 (DCP_BUF_SEG, DCP_BUF_SEG32)
 * and ints (the program's int arrays, device memory), which must stay put until the next
 * prepare of the same `slot` (one per pass). dtype, heads, head_dim and scale from env.
 * A graph cuDNN cannot build fails with DCP_ERR_UNSUPPORTED naming it, and its class is
 * added to dcp_cudnn_failed_classes(c, slot): the caller cuts the pass again without it. */
dcp_status_t dcp_cudnn_prepare(dcp_cudnn_t *c, int slot, const dcp_seg_prog_t *prog,
                               const dcp_kernel_env_t *env, const int32_t *ints);

/* The classes (DCP_SEG_BIT set) of pass `slot` whose graphs did not build on this context. */
int32_t dcp_cudnn_failed_classes(const dcp_cudnn_t *c, int slot);

/* The dense engine over c: runs the calls prepared for `slot` (the state is the slot). */
dcp_dense_engine_t dcp_cudnn_engine(dcp_cudnn_t *c, int slot);

/* What building one graph's plan gave (dcp_cudnn_probe). */
typedef struct {
    int built;         /* an execution plan finalized */
    double build_ms;   /* graph, heuristics and plan */
    int64_t ops;       /* operations of the graph */
    int64_t configs;   /* engine configurations the heuristics offered */
    int64_t engine;    /* the global index of the engine chosen, -1 when none or unknown */
    int64_t workspace; /* bytes the plan needs, the graph's own buffers included */
    char error[512];   /* cuDNN's own words where it did not build */
} dcp_cudnn_probe_t;

/* Builds the plan of `key` outside the cache (and frees it): for the GPU report's probe of
 * every graph a version takes (dcp-kernel-bench --cudnn-probe). DCP_OK whether or not it
 * built; out says. */
dcp_status_t dcp_cudnn_probe(dcp_cudnn_t *c, const dcp_cudnn_key_t *key, dcp_cudnn_probe_t *out);

/* Without a GPU: builds and finalizes every descriptor of the graph of `key` up to the
 * operation graph (which needs no handle from cuDNN 9.19 on; before, up to its operations)
 * with the library found as dcp_cudnn_open finds it, so that attribute names, types and values
 * are checked by the real library here. *trace_out (when not NULL) gets the builder's trace
 * (kernels/cudnn_api.h; malloc'ed, the caller frees it). The version in *version_out (0: none
 * loaded). DCP_ERR_UNSUPPORTED when no library loads or a descriptor does not finalize. */
dcp_status_t dcp_cudnn_check_graph(const dcp_cudnn_key_t *key, char **trace_out,
                                   int64_t *version_out);

#ifdef __cplusplus
}
#endif

#endif
