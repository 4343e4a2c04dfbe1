/*
 * dcp.h - dynamic context-parallel attention.
 *
 * The only public header of libdcp. Plain C11; no CUDA, UCX, METIS or hwloc types.
 *
 * Per training batch the caller describes the sequences (lengths and masks), the attention
 * shape and the cluster; dcp_plan_create() cuts the batch into token blocks and computation
 * blocks, places them on ranks and schedules their transfers; every rank then runs its part
 * of the plan with dcp_forward() on its local rows.
 *
 * Conventions
 *  - Every fallible function returns dcp_status_t. On failure dcp_last_error() names the
 *    argument or field at fault, and no output argument has been written.
 *  - Output arguments end in _out. Objects come in create/destroy pairs; destroy(NULL) is a
 *    no-op. Pointers passed in are borrowed for the duration of the call unless a comment
 *    says otherwise.
 *  - Thread safety: functions that take a const object may run concurrently on it; a
 *    context is used by one thread at a time. The last-error text is thread-local.
 *  - Token positions are 0-based within a sequence. Tensors use the packed THD layout of
 *    varlen attention APIs: [tokens, heads, head_dim], row-major.
 */
#ifndef DCP_H
#define DCP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DCP_API __attribute__((visibility("default")))
#else
#define DCP_API
#endif

/* The version of this header. dcp_version() gives the library's: compare the two to catch
 * a program built against one dcp and run with another. While the major version is 0, every
 * minor version may change the ABI, and the shared library's SONAME carries it
 * (libdcp.so.0.2). */
#define DCP_VERSION_MAJOR 0
#define DCP_VERSION_MINOR 2
#define DCP_VERSION_PATCH 0

/* ---------------------------------------------------------------------------------------
 * Status and errors
 * ------------------------------------------------------------------------------------- */

typedef enum {
    DCP_OK = 0,
    DCP_ERR_INVALID_ARG = 1,  /* an argument or field is out of range; the message names it */
    DCP_ERR_NO_MEMORY = 2,    /* a host or device allocation failed */
    DCP_ERR_PLAN_CORRUPT = 3, /* plan bytes are truncated, altered or inconsistent */
    DCP_ERR_CAPACITY = 4,     /* the blocks cannot be placed under the per-rank memory cap,
                                 or the plan would exceed the planning size limit */
    DCP_ERR_UNSUPPORTED = 5,  /* a valid request this build or device cannot serve */
    DCP_ERR_TIMEOUT = 6,      /* a transfer did not complete within the timeout */
    DCP_ERR_PEER = 7,         /* a peer rank failed or left */
    DCP_ERR_SYSTEM = 8,       /* the OS or a foreign library (CUDA, UCX, ...) failed */
    DCP_ERR_INTERNAL = 9      /* a broken invariant inside dcp; please report it */
} dcp_status_t;

/* Static, never-NULL name of a status ("DCP_ERR_INVALID_ARG"). Thread-safe. */
DCP_API const char *dcp_status_string(dcp_status_t status);

/* Detail of the last failure on the calling thread ("batch: lengths[3] = 0, must be >= 1").
 * Meaningful only right after a call failed: like errno, a successful call neither sets nor
 * clears it, so after a success it may still hold an older failure's text. Valid until the
 * next failing dcp call on this thread; "" when no call on this thread has failed. */
DCP_API const char *dcp_last_error(void);

/* The library's version, "MAJOR.MINOR.PATCH" (static, never NULL). Thread-safe. */
DCP_API const char *dcp_version(void);

/* ---------------------------------------------------------------------------------------
 * Masks
 *
 * Query i of a sequence of length L may attend key j only if j lies in the allowed set;
 * every mask is at most two half-open key ranges per query (partition/README.md "Masks" has them).
 * ------------------------------------------------------------------------------------- */

typedef enum {
    DCP_MASK_FULL = 0,            /* [0, L) */
    DCP_MASK_CAUSAL = 1,          /* [0, i+1) */
    DCP_MASK_WINDOW = 2,          /* [max(0, i-W+1), i+1); uses window */
    DCP_MASK_LAMBDA = 3,          /* [0, min(S, i+1)) u [max(0, i-W+1), i+1); sink, window */
    DCP_MASK_BLOCKWISE = 4,       /* block c = i / b of n = ceil(L / b): c == 0 and c == n-1
                                     [0, i+1), else [0, b) u [max(b, i - k b), i+1) */
    DCP_MASK_SHARED_QUESTION = 5, /* q = floor(L p), m = (L - q) / a: i < q [0, i+1), else
                                     [0, q) u [st, i+1), st = q + min((i-q)/m, a-1) m
                                     (st = q when m == 0) */
    DCP_MASK_CUSTOM = 6,          /* caller-given ranges per query */
    DCP_MASK_KIND_COUNT = 7
} dcp_mask_kind_t;

/* A mask; only the fields of its kind are read. dcp_mask_parse() fills one from text. */
typedef struct {
    dcp_mask_kind_t kind;
    int32_t window;       /* WINDOW, LAMBDA: W >= 1 keys */
    int32_t sink;         /* LAMBDA: S >= 0 leading keys always visible */
    int32_t block;        /* BLOCKWISE: b >= 1 tokens */
    int32_t k;            /* BLOCKWISE: k >= 0 preceding blocks visible */
    int32_t answers;      /* SHARED_QUESTION: a >= 1 answers */
    double question_frac; /* SHARED_QUESTION: p in [0, 1], question = floor(L * p) tokens */
    /* CUSTOM: 4 int32 per query, {s0, e0, s1, e1}, allowed keys [s0, e0) u [s1, e1) with
     * 0 <= s <= e <= L. Borrowed: must stay valid while the mask is used; a plan copies it. */
    const int32_t *ranges;
    /* CUSTOM: the rows `ranges` holds (4 int32 each). It must equal the length of the
     * sequence the mask is used for: dcp reads exactly 4 x num_rows int32 and refuses any
     * other count by name, so a short table is never read past its end. Other kinds: 0. */
    int32_t num_rows;
} dcp_mask_t;

/* Parses "full", "causal", "window:W", "lambda:S:W", "blockwise:b:k",
 * "shared-question:p:a". Bare "window", "lambda", "blockwise" and "shared-question" take
 * DCP's parameters (W = 4096; S = 64, W = 4096; b = 256, k = 2; p = 0.2, a = 4).
 * "custom" cannot be parsed: build it in code. */
DCP_API dcp_status_t dcp_mask_parse(const char *spec, dcp_mask_t *mask_out);

/* Writes the canonical text of a mask ("lambda:64:4096") into buf (always terminated when
 * capacity > 0). Returns DCP_ERR_INVALID_ARG when it does not fit. */
DCP_API dcp_status_t dcp_mask_format(const dcp_mask_t *mask, char *buf, size_t capacity);

/* The allowed keys of query `query` in a sequence of length `len`, as two disjoint
 * half-open ranges {s0, e0, s1, e1} with e0 <= s1 (an empty range has s == e). */
DCP_API dcp_status_t dcp_mask_allowed(const dcp_mask_t *mask, int32_t len, int32_t query,
                                      int32_t ranges_out[4]);

/* Exact number of allowed (query, key) pairs in the tile [q0, q1) x [k0, k1). Runs in time
 * independent of the tile size for every mask but CUSTOM. */
DCP_API dcp_status_t dcp_mask_count_pairs(const dcp_mask_t *mask, int32_t len, int32_t q0,
                                          int32_t q1, int32_t k0, int32_t k1, int64_t *pairs_out);

/* ---------------------------------------------------------------------------------------
 * Batch, attention shape, options, cluster
 * ------------------------------------------------------------------------------------- */

/* Most layer kinds one batch may name (dcp_batch_t.num_kinds). */
#define DCP_MAX_KINDS 4

/* One kind of attention layer of the model: the mask every sequence gets in the layers of this
 * kind, and how many layers use it. Models interleave kinds (Gemma 3: five sliding-window
 * layers per global one; GPT-OSS: 128-token windows alternating with causal layers), and Q, K,
 * V of every layer live where the batch's tokens were placed, so one plan places the tokens
 * once and holds a forward and a backward program per kind on that placement. */
typedef struct {
    const dcp_mask_t *masks; /* [num_seqs]: this kind's mask of every sequence */
    int32_t layers;          /* layers of the model of this kind, in [1, 1024]: the planner
                                minimises the sum over kinds of layers x the kind's step
                                (forward + backward; simulated when plans are compared) */
} dcp_layer_kind_t;

typedef struct {
    int32_t num_seqs;        /* >= 1 */
    const int32_t *lengths;  /* [num_seqs], each >= 1 token */
    const dcp_mask_t *masks; /* [num_seqs], one mask per sequence; NULL when num_kinds > 0 */
    /* Layer kinds: 0 for one kind of layer (masks); K in [1, DCP_MAX_KINDS] for the kinds in
     * kinds[K] (masks must then be NULL). A plan of one kind is the plan of its masks, byte
     * for byte (its layer count is not kept); a plan of K >= 2 kinds has one program pair per
     * kind (dcp_plan_kind). */
    int32_t num_kinds;
    const dcp_layer_kind_t *kinds;
} dcp_batch_t;

typedef enum { DCP_DTYPE_FP32 = 0, DCP_DTYPE_BF16 = 1, DCP_DTYPE_FP16 = 2 } dcp_dtype_t;

typedef struct {
    int32_t num_heads;    /* query heads Hq >= 1 */
    int32_t num_kv_heads; /* KV heads Hkv >= 1, Hq % Hkv == 0 (GQA): query head h attends
                             with KV head h / (Hq / Hkv), so consecutive query heads share one */
    int32_t head_dim;     /* D >= 1: query and key head dim (and value, see head_dim_v) */
    dcp_dtype_t dtype;    /* storage type of Q, K, V and O; LSE is always fp32 */
    float scale;          /* softmax scale; 0 means 1/sqrt(D) */
    /* Logit softcap c (Gemma 2), finite and >= 0; 0: off. Each scaled score s becomes
     * c tanh(s / c) before the mask and the softmax, in every kernel (the backward multiplies
     * by 1 - tanh^2). Part of the shape: plans are made for it. */
    float softcap;
    /* Value head dim D_v, in [0, 4096]; 0: D. V, O, dO and dV rows hold D_v elements per head,
     * Q, K, dQ and dK rows D (MLA, as DeepSeek-V3: D 192, D_v 128). */
    int32_t head_dim_v;
} dcp_attn_shape_t;

typedef enum {
    DCP_STRATEGY_RING = 0,   /* each sequence in R contiguous chunks, chunk r on rank r */
    DCP_STRATEGY_ZIGZAG = 1, /* 2R chunks, rank r holds chunks r and 2R-1-r */
    DCP_STRATEGY_LPT = 2,    /* FCP's longest-processing-time block distributor */
    DCP_STRATEGY_METIS = 3,  /* hierarchical multi-constraint METIS on the block hypergraph */
    DCP_STRATEGY_COUNT = 4,  /* number of dcp's own concrete strategies (AUTO's candidates) */
    DCP_STRATEGY_NODES = 5,  /* a candidate of the default's (METIS's) search, which returns it
                                where it simulates faster: whole documents packed into nodes
                                as DCP_STRATEGY_PACKED packs them, METIS on each node's devices
                                (balance repair and FM where the packing balances the nodes,
                                else each node as METIS partitions it; lpt where METIS has no
                                valid result) */
    /* Peer policies: the placements other systems make, as plans dcp executes, so that the
     * default can be held to them. options.strategy_arg is each one's parameter (0: its
     * default); partition/README.md, "The peer policies", gives each one's rule and source. */
    DCP_STRATEGY_PACKED = 8,    /* packed DP x CP: documents to groups of strategy_arg ranks
                                   (default: a node) by a longest-first balancer on attention
                                   FLOPs and tokens, zigzag over each group's ranks */
    DCP_STRATEGY_DYNCP = 9,     /* Megatron-LM's dynamic CP: a power-of-two CP group per
                                   document (strategy_arg: most tokens per rank, default the
                                   batch's mean), groups by its balancing scheduler, zigzag in each */
    DCP_STRATEGY_ULYSSES = 10,  /* DeepSpeed Ulysses: documents to groups of strategy_arg ranks
                                   (default: a node), each group's tokens in contiguous shards, head
                                   group h of every tile on the group's rank h; the KV heads must
                                   divide among the group's ranks (else DCP_ERR_INVALID_ARG) */
    DCP_STRATEGY_USP = 11,      /* USP: Ulysses of degree strategy_arg (default: the largest
                                   divisor of the KV heads that fits a node) inside zigzag
                                   ring attention across the ranks */
    DCP_STRATEGY_MAGI = 12,     /* MagiAttention's dispatch: the batch's token stream in chunks
                                   of strategy_arg tokens (default 2048) spread by a min-heap over
                                   their attention area, computation where the queries live */
    DCP_STRATEGY_PEER_END = 13, /* one past the last peer policy */
    DCP_STRATEGY_AUTO = 100     /* per batch, the strategy and block size (B/2, B, 2B) whose plan
                                   the step-time simulator runs fastest per training step
                                   (forward + backward) on the cluster's model; dcp's own
                                   strategies only */
} dcp_strategy_t;

/* How the METIS strategy turns the hypergraph into a graph. */
typedef enum {
    DCP_EXPAND_CLIQUE = 0, /* every net a clique, edge weight w/(|e|-1); large nets banded */
    DCP_EXPAND_STAR = 1    /* net owner joined to its members, METIS's volume objective */
} dcp_expansion_t;

/* How each communication step is issued. */
typedef enum {
    DCP_COMM_DIVISIONS = 0, /* all transfers of a step at once, overlapping the previous
                               division's compute */
    DCP_COMM_ROUNDS = 1     /* congestion-free rounds: each rank sends and receives at most
                               `coalesce` blocks per round (FCP) */
} dcp_comm_schedule_t;

/* "ring", "zigzag", "lpt", "metis", "auto", "nodes", and the peer policies "packed", "dyncp",
 * "ulysses", "usp", "magi" (static strings; "unknown" for any other value). */
DCP_API const char *dcp_strategy_name(dcp_strategy_t strategy);
DCP_API dcp_status_t dcp_strategy_parse(const char *name, dcp_strategy_t *strategy_out);
/* "name" or "name:N" (a peer policy's parameter, options.strategy_arg: N >= 1; 0 without
 * one), e.g. "packed:8", "usp:4", "metis". Fails with DCP_ERR_INVALID_ARG naming the spec for
 * an unknown name, a parameter on a strategy that takes none, or one that is not a whole
 * number >= 1. Outputs are written only on success. Thread-safe. */
DCP_API dcp_status_t dcp_strategy_parse_spec(const char *spec, dcp_strategy_t *strategy_out,
                                             int32_t *arg_out);

typedef struct {
    int32_t block_size;        /* B: tokens per token block, >= 1 (default 1024) */
    int32_t head_blocks;       /* head groups, a divisor of num_kv_heads (default 1) */
    int32_t divisions;         /* T >= 1: compute divisions per rank; 0 (default): chosen
                                  per batch - candidates are compared with 8, then the
                                  winner's placement gets the count of 6, 8 and 12 whose plan
                                  the step-time simulator runs fastest on the cluster's model
                                  (stats.num_divisions) */
    dcp_strategy_t strategy;   /* placement (default DCP_STRATEGY_METIS). METIS groups a long
                                  sequence's blocks into 2R units before partitioning, and is
                                  kept against zigzag with the same divisions: where the cost
                                  model cannot rule zigzag's plan out, it is built, and the
                                  one the step-time simulator runs faster per training step
                                  (forward + backward) is returned (stats.strategy); so are
                                  its hierarchical candidates (options.hierarchy) */
    double eps_inter;          /* METIS: imbalance allowed between nodes (default 0.05) */
    double eps_intra;          /* METIS: imbalance allowed between devices (default 0.05) */
    int64_t mem_cap_bytes;     /* per-rank cap on owned data-block bytes; 0 = no cap */
    uint64_t seed;             /* seed for randomised strategies; plans are deterministic */
    dcp_expansion_t expansion; /* METIS graph (default DCP_EXPAND_CLIQUE) */
    int32_t net_cap;           /* clique expansion: nets with more members are joined as a band
                                  of this width instead of a full clique (default 12; 0 = never) */
    int32_t refine;            /* METIS: 1 = balance repair and traffic refinement (default 1) */
    dcp_comm_schedule_t comm_schedule; /* default DCP_COMM_DIVISIONS */
    int32_t coalesce;    /* rounds issued together with DCP_COMM_ROUNDS, >= 1 (default 1) */
    int32_t metis_tries; /* METIS: placements tried with seeds seed, seed+1, ... in [1, 64]; the
                            plan the step-time simulator runs fastest per training step is
                            kept (default 2). One METIS run's step varies by 10-20% with its
                            seed.
                            With layer kinds every second try balances only the kind with the
                            most work (layers x allowed pairs), the others' blocks left where
                            their traffic is least */
    int32_t strategy_arg; /* a peer policy's parameter (DCP_STRATEGY_PACKED and the others
                             after it; see each), >= 0, 0 (default) for its default; ignored
                             by dcp's own strategies. The plan's options hold the value used.
                             Not part of the plan bytes: a loaded plan reads 0 */
    int32_t hierarchy;    /* METIS (the default): 1 (default) = beside its global plan, the
                             hierarchical candidates the peer policies suggest (whole documents
                             packed into nodes, then METIS inside each node, DCP_STRATEGY_NODES;
                             where that packing is uneven, head parallelism inside each node,
                             DCP_STRATEGY_ULYSSES), each screened by the cost model and kept
                             where the simulator runs it faster (stats.strategy names the
                             placement returned); and then the placement returned by METIS or
                             the packing, its kernel time evened out between the ranks of each
                             node (and, at 8 blocks of tokens a rank or more, between the nodes),
                             kept where the simulator runs it faster; 0 = METIS's global plan
                             only (and zigzag's, where it is faster). Not part of the plan
                             bytes */
} dcp_plan_options_t;

/* Fills the defaults documented above. */
DCP_API void dcp_plan_options_default(dcp_plan_options_t *opts_out);

/* The cluster model: nodes, devices per node, link bandwidths. Immutable once built; rank r
 * is device r % G of node r / G. */
typedef struct dcp_cluster dcp_cluster_t;

/* "NxG[:intra=GBps][:inter=GBps][:lat=us][:tflops=T][:hbm=GBps][:bwd=X][:nics=N]": N nodes
 * of G devices; link bandwidths in GB/s per direction per device, latency in microseconds,
 * device peak in TFLOP/s, memory bandwidth in GB/s, the backward's FLOP/s over the forward's,
 * network adapters the node's devices share (defaults 300, 25, 5, 312, 1500, 1, G). G may
 * also name a machine preset, which sets G and every figure:
 *   p4de       DCP's testbed: 8 x A100-80GB on NVSwitch, 4 x 100 Gb/s EFA per node (intra
 *              300, inter 6.25, lat 15, 312 TFLOP/s bf16, hbm 2039, nics 4)
 *   a100-efa   the same with A100-40GB (p4d: hbm 1555)
 *   h100-ib    8 x H100 on NVSwitch, 8 x 400 Gb/s InfiniBand per node (intra 450, inter 50,
 *              lat 3, 989 TFLOP/s bf16, hbm 3350)
 *   a100-1nic  8 x A100-40GB behind one 100 Gb/s NIC per node (inter 1.5625, lat 5, nics 1)
 * or G may be "@FILE": an hwloc XML capture of one node (lstopo --of xml, taken with I/O
 * devices): G is its NVIDIA GPU count, inter and lat follow from the NIC each GPU uses (its
 * rate shared by the GPUs on it), the rest keep the defaults; or a node file written by
 * dcp-calibrate (any FILE that is not XML: G, NICs, figures and kernel curve as measured).
 * FILE may not hold ':'. e.g. "4xh100-ib", "2xa100-efa:inter=12.5", "4x@node.xml:intra=450",
 * "16x@calib.node". */
DCP_API dcp_status_t dcp_cluster_from_spec(const char *spec, dcp_cluster_t **cluster_out);
DCP_API void dcp_cluster_destroy(dcp_cluster_t *cluster);
DCP_API int32_t dcp_cluster_num_ranks(const dcp_cluster_t *cluster);
DCP_API int32_t dcp_cluster_num_nodes(const dcp_cluster_t *cluster);

/* Replaces the cost model's kernel efficiency curve (fraction of peak reached on a tile
 * whose geometric-mean edge is tile_tokens[i]; interpolated in log(tile_tokens), flat past
 * the ends, but an edge e under min(tile_tokens[0], 64) is padded to that block q and gets
 * efficiency(q) x (e / q)^2), e.g. with figures measured by dcp-kernel-bench. n >= 1 points, tile_tokens
 * increasing and > 0, efficiency in (0, 1]. Not to be called while the cluster plans. */
DCP_API dcp_status_t dcp_cluster_set_kernel_table(dcp_cluster_t *cluster, int32_t n,
                                                  const double *tile_tokens,
                                                  const double *efficiency);

/* The same from a kernel table file: lines `tile_tokens efficiency` (two numbers; '#' starts a
 * comment), tile edges increasing, efficiencies in (0, 1], at most 32 lines, as
 * dcp-kernel-bench --write-table writes them. DCP_ERR_INVALID_ARG naming the file (and the line)
 * when it cannot be read or holds no such line; the cluster is left as it was on failure. Not
 * to be called while the cluster plans. */
DCP_API dcp_status_t dcp_cluster_load_kernel_table(dcp_cluster_t *cluster, const char *path);

/* ---------------------------------------------------------------------------------------
 * Plans
 * ------------------------------------------------------------------------------------- */

/* A plan: placement of every block, one program per rank, the local token layout of every
 * rank, and statistics. Immutable; safe to share between threads. */
typedef struct dcp_plan dcp_plan_t;

/* Plans `batch` for `cluster`. Deterministic: the same inputs give a byte-identical
 * serialized plan on every rank. `opts` may be NULL for the defaults. Fails with
 * DCP_ERR_CAPACITY, before building anything large, when the blocks do not fit
 * opts->mem_cap_bytes or when the strategy would build a plan from more than 2^22
 * computation blocks (tiles x head groups; a plan costs up to about 1 KB per block):
 * ring and zigzag cut every sequence into R or 2R chunks, so many sequences on many ranks
 * reach it (the built-in length histogram at 1M tokens on 32x8); the default strategy then
 * keeps METIS's plan without the zigzag comparison, and AUTO skips that candidate. With
 * layer kinds (batch.num_kinds >= 2) the plan holds a program pair per kind on one
 * placement, and plans are compared by the model's step (dcp_plan_stats_t.model_step_ms). */
DCP_API dcp_status_t dcp_plan_create(const dcp_batch_t *batch, const dcp_attn_shape_t *shape,
                                     const dcp_plan_options_t *opts, const dcp_cluster_t *cluster,
                                     dcp_plan_t **plan_out);
/* Frees a plan and its layer kinds' views (a view passed here is left alone). */
DCP_API void dcp_plan_destroy(dcp_plan_t *plan);

typedef struct {
    int32_t num_ranks, num_nodes;
    dcp_strategy_t strategy;
    int32_t num_divisions; /* T */
    int32_t num_token_blocks;
    int64_t num_comp_blocks; /* (q block, kv block, head group) triples with work */
    int64_t total_tokens;
    int64_t total_flops;      /* forward FLOPs: allowed pairs x 2 (D + D_v) x query heads */
    int64_t comm_bytes;       /* bytes moved between ranks (inputs and partial outputs) */
    int64_t inter_node_bytes; /* the part of comm_bytes that crosses nodes */
    int64_t max_rank_bytes;   /* max over ranks of bytes sent + received */
    double compute_imbalance; /* max/mean - 1 of per-rank FLOPs */
    double memory_imbalance;  /* max/mean - 1 of per-rank owned data-block bytes */
    int64_t max_buffer_bytes; /* max over ranks of the work buffers dcp allocates */
    int32_t num_transfers;    /* point-to-point block transfers */
    int32_t num_phases;       /* communication launches in sequence (steps or rounds) */
    double predicted_ms;      /* cost model: attention time of the slowest rank */
    int32_t fallback;         /* 1 when METIS's result was invalid and lpt replaced it */
    double plan_ms;           /* wall time of dcp_plan_create; 0 for a deserialized plan */
    /* the backward program (dcp_backward), on the forward's placement */
    int64_t bwd_flops;            /* 2.5 x total_flops (recomputed scores, dV, dP, dQ, dK) */
    int64_t bwd_comm_bytes;       /* Q, dO, LSE, delta, K, V in; fp32 dQ, dK, dV partials back */
    int64_t bwd_inter_node_bytes; /* the part of bwd_comm_bytes that crosses nodes */
    int64_t bwd_max_rank_bytes;   /* max over ranks of backward bytes sent + received */
    double bwd_compute_imbalance; /* max/mean - 1 of per-rank backward FLOPs */
    int32_t bwd_num_transfers;
    int32_t bwd_num_phases;
    double bwd_predicted_ms; /* cost model: backward time of the slowest rank */
    /* layer kinds: the figures above are this kind's (the plan's own stats are kind 0's) */
    int32_t num_kinds;    /* kinds the plan holds (1 for a plan of one mask per sequence) */
    int32_t kind;         /* the kind these stats describe */
    int32_t layers;       /* layers of that kind (1 when num_kinds == 1) */
    double model_step_ms; /* the whole model's attention per training step: the sum over kinds
                             of layers x (predicted_ms + bwd_predicted_ms); the same in every
                             kind's stats */
} dcp_plan_stats_t;

DCP_API dcp_status_t dcp_plan_get_stats(const dcp_plan_t *plan, dcp_plan_stats_t *stats_out);

/* The attention shape the plan was made for (or loaded with), as dcp_plan_create() took it
 * but with its defaults resolved: scale is never 0 (1/sqrt(head_dim) where it was). What the
 * caller's tensors must match; a layer kind's view gives its plan's. Thread-safe. */
DCP_API dcp_status_t dcp_plan_get_shape(const dcp_plan_t *plan, dcp_attn_shape_t *shape_out);

typedef struct {
    int64_t local_tokens; /* rows of this rank's Q/K/V/O/LSE tensors */
    int64_t flops;        /* forward FLOPs this rank computes */
    int64_t memory_bytes; /* owned data-block bytes (Q, K, V, O, LSE of local tokens) */
    int64_t sent_bytes, recv_bytes;
    int64_t buffer_bytes; /* work buffers: staged, received and partial blocks, accumulators */
    int32_t num_instructions;
    double predicted_ms; /* cost model: this rank's attention time */
    int64_t bwd_flops;   /* backward FLOPs this rank computes */
    int64_t bwd_sent_bytes, bwd_recv_bytes;
    int32_t bwd_num_instructions;
    double bwd_predicted_ms; /* cost model: this rank's backward time */
} dcp_rank_stats_t;

DCP_API dcp_status_t dcp_plan_get_rank_stats(const dcp_plan_t *plan, int32_t rank,
                                             dcp_rank_stats_t *stats_out);

/* A run of consecutive tokens [start, start + len) of sequence `seq`. */
typedef struct {
    int32_t seq;
    int32_t start;
    int32_t len;
} dcp_token_span_t;

/* The tokens a rank owns, in local row order: its local Q/K/V rows must be the
 * concatenation of these spans, and O/LSE come back in the same order. Writes at most
 * `capacity` spans to `spans` (which may be NULL when capacity is 0) and the total count to
 * *num_spans_out, the number of local tokens to *num_tokens_out (either may be NULL).
 * Size query: call it once with spans = NULL and capacity = 0, which succeeds and sets only
 * the two counts, then again with an array of *num_spans_out spans. Otherwise returns
 * DCP_ERR_INVALID_ARG, writing nothing, when capacity is smaller than the span count. */
DCP_API dcp_status_t dcp_plan_local_layout(const dcp_plan_t *plan, int32_t rank,
                                           dcp_token_span_t *spans, int32_t capacity,
                                           int32_t *num_spans_out, int64_t *num_tokens_out);

/* A plan holds both programs: dcp_forward() and dcp_backward() run on the same plan object,
 * so a training step plans once per batch. */

/* Kind `kind` of a plan of layer kinds (dcp_batch_t.kinds), as a plan of its own: a view that
 * runs that kind's programs with dcp_forward()/dcp_backward() (and the _inproc forms), on the
 * plan's placement, so its local layout is the plan's. Its stats are the kind's; serializing
 * it writes the whole plan. Kind 0 is the plan itself. The view is owned by the plan: valid
 * while the plan lives, never destroyed by the caller (dcp_plan_destroy() on a view does
 * nothing). Every rank must run the same kind in the same call; the kinds of one plan share a
 * context's buffers, so a training loop alternates them without allocating. Thread-safe. */
DCP_API dcp_status_t dcp_plan_kind(const dcp_plan_t *plan, int32_t kind,
                                   const dcp_plan_t **view_out);

/* Serializes a plan: versioned, little-endian, length-prefixed, CRC-32C checksummed.
 * With buf == NULL only *size_out is set. Otherwise capacity must hold the whole plan. */
DCP_API dcp_status_t dcp_plan_serialize(const dcp_plan_t *plan, void *buf, size_t capacity,
                                        size_t *size_out);

/* The plan's identity: the CRC-32C of its serialized payload, the value at bytes 24-27 of
 * dcp_plan_serialize()'s output. Equal plans have equal checksums on every rank (plans are
 * deterministic); contexts compare them at every call (dcp_forward) and stop at once, naming
 * both, when ranks run different plans. Computed once per plan object (about 1 ms per MB of
 * plan bytes), then remembered. A layer kind's view (dcp_plan_kind) has its plan's checksum
 * mixed with its kind, so ranks that run different kinds of one plan are caught too.
 * Thread-safe. */
DCP_API dcp_status_t dcp_plan_checksum(const dcp_plan_t *plan, uint32_t *checksum_out);

/* Rebuilds a plan from bytes. Untrusted input is safe: corrupted, truncated or
 * inconsistent bytes give DCP_ERR_PLAN_CORRUPT and never a crash or an out-of-bounds read.
 * Loading allocates in proportion to `size` (every count is checked against the bytes
 * present first); a plan whose work buffers would pass 2^36 bytes (64 GiB) on a rank is
 * refused. Bytes are canonical: fields a plan does not use must be zero, so that one plan
 * has one byte string (dcp_plan_serialize() writes them so). */
DCP_API dcp_status_t dcp_plan_deserialize(const void *buf, size_t size, dcp_plan_t **plan_out);

/* ---------------------------------------------------------------------------------------
 * Planning ahead
 * ------------------------------------------------------------------------------------- */

/* A planner service: worker threads that make the plans of coming batches while the
 * current one trains, and a cache that returns the plan of an identical batch (same
 * lengths, masks, shape, options and cluster) without planning again. Tickets are served
 * in submission order as workers come free (FIFO). Every function is thread-safe except
 * dcp_planner_destroy(), which must not overlap any other call on the planner. */
typedef struct dcp_planner dcp_planner_t;

typedef struct {
    int32_t num_threads;   /* worker threads, in [0, 256] (0: 1) */
    int32_t cache_entries; /* plans kept by batch, least recently used dropped, >= 0 (0: none) */
    int64_t cache_bytes;   /* most bytes the cache holds (serialized plans and their batches'
                              keys), >= 0; 0: 256 MiB. Least recently used plans are dropped to
                              make room; a plan larger than the bound alone is not cached (a
                              zigzag plan of 256K tokens on 8x8 is about 1.4 GB) */
} dcp_planner_config_t;

/* `cluster` is borrowed: it must outlive the planner and not change while the planner exists
 * (no dcp_cluster_set_kernel_table()). config may be NULL for the defaults (1 thread, 16
 * cached plans, 256 MiB). */
DCP_API dcp_status_t dcp_planner_create(const dcp_planner_config_t *config,
                                        const dcp_cluster_t *cluster, dcp_planner_t **planner_out);
/* Waits for the plans being made, drops the batches not yet started and frees every plan
 * not collected; plans handed out stay valid (the caller destroys them). */
DCP_API void dcp_planner_destroy(dcp_planner_t *planner);

/* Queues `batch` for planning and returns a ticket (never 0), which must be collected once
 * with dcp_planner_wait() or dcp_planner_try(). Everything is copied: lengths, masks (every
 * layer kind's) and CUSTOM ranges may be freed on return; opts may be NULL for the defaults.
 * Arguments are checked as dcp_plan_create() checks them, here, with the same messages. */
DCP_API dcp_status_t dcp_planner_submit(dcp_planner_t *planner, const dcp_batch_t *batch,
                                        const dcp_attn_shape_t *shape,
                                        const dcp_plan_options_t *opts, uint64_t *ticket_out);

/* The plan of a ticket, waiting for it: the caller owns *plan_out (dcp_plan_destroy). Its
 * bytes (dcp_plan_serialize) are those dcp_plan_create() gives for the same inputs. A plan
 * served from the cache is a copy rebuilt from the cached bytes, so its stats say
 * plan_ms = 0. A planning failure returns its status here, with its message in
 * dcp_last_error() on the calling thread. The ticket is spent either way. A ticket never
 * issued, already collected, or being collected by another thread gives
 * DCP_ERR_INVALID_ARG (and stays as it was). */
DCP_API dcp_status_t dcp_planner_wait(dcp_planner_t *planner, uint64_t ticket,
                                      dcp_plan_t **plan_out);

/* The same without waiting: *plan_out = NULL and DCP_OK while the plan is being made (the
 * ticket stays valid). */
DCP_API dcp_status_t dcp_planner_try(dcp_planner_t *planner, uint64_t ticket,
                                     dcp_plan_t **plan_out);

/* Counters since dcp_planner_create(). plan_ms - wait_ms bounds from below the planning
 * time hidden from callers that collect plans with dcp_planner_wait(). */
typedef struct {
    int64_t submitted;    /* tickets issued */
    int64_t planned;      /* dcp_plan_create() calls the workers made (failures included) */
    int64_t cache_hits;   /* tickets served from the cache, without planning */
    int64_t failed;       /* tickets whose planning failed */
    int64_t pending;      /* tickets issued and not yet collected */
    double plan_ms;       /* wall time the workers spent in dcp_plan_create(), summed */
    double wait_ms;       /* wall time callers spent blocked in dcp_planner_wait(), summed */
    int64_t cached_plans; /* plans in the cache now */
    int64_t cached_bytes; /* bytes they hold now (<= cache_bytes) */
    int64_t uncached;     /* plans not cached because they alone exceed cache_bytes */
    int64_t evictions;    /* cached plans dropped for newer ones (least recently used first);
                             with a cache, cached_plans = planned - failed - uncached -
                             evictions */
} dcp_planner_stats_t;

DCP_API dcp_status_t dcp_planner_stats(dcp_planner_t *planner, dcp_planner_stats_t *stats_out);

/* ---------------------------------------------------------------------------------------
 * Execution
 * ------------------------------------------------------------------------------------- */

/* One rank's tensors, borrowed for the call, rows in dcp_plan_local_layout() order.
 * q: [local_tokens, Hq, D]; k: [local_tokens, Hkv, D]; v: [local_tokens, Hkv, D_v]; o:
 * [local_tokens, Hq, D_v] (D_v: the shape's head_dim_v, D where it is 0), all in the plan's
 * dtype; lse: [local_tokens, Hq] fp32, natural log. A query with no allowed key gets O = 0
 * and LSE = -inf (with sinks, its sink's logit). Pointers may be NULL on a rank with no local
 * tokens.
 *
 * q, k, v and o are untyped (void *) because their element type is the plan's dtype: each
 * points at the first byte of a dense, row-major array with no padding, so element
 * (t, h, d) of q lives at byte ((t x Hq + h) x D + d) x sizeof(dtype), with sizeof 4 for
 * FP32 and 2 for BF16 and FP16 (k and v use Hkv, v and o D_v). Strided views must be made
 * contiguous first.
 *
 * Non-finite inputs propagate, so that a diverging run sees NaN in its loss: a NaN or Inf in
 * a query's Q row (of a head), or in the K or V row of a key it may attend (of that head's
 * KV head), gives that query's O row and LSE NaN (never Inf, never the fully masked (0, -inf)),
 * on every device and through every merge of partial outputs; dcp_backward() then gives NaN
 * in the dQ of those queries and in the dK and dV of every key they attend. A query with no
 * allowed key keeps O = 0 and LSE = -inf whatever the keys hold. Outputs that do not depend
 * on the bad value are unchanged on the CPU; the GPU kernels may also spread it to rows that
 * share a 64-key tile with a masked bad key (their MMAs multiply masked zeros by it). */
typedef struct {
    const void *q;
    const void *k;
    const void *v;
    void *o;
    float *lse;
    /* The softmax scale of this call, finite and >= 0; 0 (the value a zero-initialised struct
     * has): the plan's (dcp_attn_shape_t.scale). Every rank of a call passes the same (a
     * rank whose scale differs fails the call on every rank, naming both scales), and the
     * backward reads it from its `fwd` tensors, so both passes use one scale. */
    float softmax_scale;
    /* Learnable sinks (GPT-OSS): [Hq] fp32 logits s_h, one per query head, where the context
     * computes (device memory of its GPU, 4-byte aligned); NULL: none. Every row's softmax of
     * head h gets one more term, exp(s_h), that carries no value, applied after the merge of
     * partial outputs: O' = O sigmoid(LSE - s_h), LSE' = logaddexp(LSE, s_h) (a query with no
     * allowed key: O = 0, LSE = s_h). No bytes travel and no kernel changes; the backward reads
     * them from its `fwd` tensors (with the O and LSE they gave). Every rank passes the same. */
    const float *sinks;
    /* Forward output where not NULL: [Hq] fp32, where the context computes, per query head
     * the largest logit of an allowed (query, key) pair over the whole batch - after the scale
     * and the softcap, sinks excluded; -inf for a head with no allowed pair - the same on every
     * rank after the call (MuonClip's QK-clip). Every rank of a call passes one, or none (the
     * call stamps name a rank that differs). It costs a dissemination all-reduce of Hq x 4
     * bytes over the context's engine (ceil(log2 R) rounds, each a host wait on the GPU), and
     * the call runs dcp's kernels on every tile (cuDNN's graphs do not return it). The
     * backward ignores it. */
    float *max_logit;
} dcp_tensors_t;

/* How the ranks of a job (processes, possibly on many nodes) find each other: an allgather
 * of a few bytes, called while contexts are created and destroyed (and by the tools between
 * steps). Every rank passes `bytes` bytes in `send`; `recv` receives size x bytes, rank r's at
 * offset r x bytes. Collective: all ranks call it in the same order. A host framework
 * supplies its own (over its process group); dcp_bootstrap_mpi() supplies one over MPI.
 *
 * What a callback must guarantee, so that no rank of a job waits forever on one that died
 * or stopped: it returns within about the bootstrap's timeout (its own, for a plain
 * allgather, e.g. a process group's timeout; the one dcp passes, for a timed one): DCP_OK
 * once every rank's bytes are in recv, else DCP_ERR_TIMEOUT (some rank's bytes did not come
 * in time) or DCP_ERR_PEER (it knows a rank failed), never blocking past the timeout. After
 * a failure it may fail every later call at once: the job is over. A timed allgather also
 * names the rank that did not take part (*failed_rank_out; -1 when it cannot tell), which
 * dcp puts in its message. A plain allgather with no timeout of its own (a bare
 * MPI_Allgather) hangs every rank when one dies: give a timed one. */
typedef dcp_status_t (*dcp_allgather_fn)(void *state, const void *send, void *recv, size_t bytes);
typedef dcp_status_t (*dcp_allgather_timed_fn)(void *state, const void *send, void *recv,
                                               size_t bytes, double timeout_s,
                                               int32_t *failed_rank_out);

typedef struct {
    int32_t rank, size;
    dcp_allgather_fn allgather;             /* required; used when allgather_timed is NULL */
    void *state;                            /* passed to both; borrowed */
    dcp_allgather_timed_fn allgather_timed; /* optional, preferred: with a deadline */
    double timeout_s; /* longest one collective step waits for the slowest rank, in s, passed
                         to allgather_timed; 0: $DCP_TIMEOUT_S, else 60 s */
} dcp_bootstrap_t;

/* A bootstrap over MPI_COMM_WORLD. Defined in libdcp_mpi (link -ldcp_mpi and MPI) so that
 * libdcp itself does not depend on MPI. MPI must be initialised. Its allgather is timed
 * (point-to-point messages on MPI_COMM_WORLD, tags in the top 4096 below MPI_TAG_UB, polled
 * against the deadline, never a blocking MPI collective): a rank that died or stopped makes
 * the others fail with DCP_ERR_TIMEOUT (or DCP_ERR_PEER) naming it, within timeout_s; after
 * that every later collective of the process fails at once with the same cause. */
DCP_API dcp_status_t dcp_bootstrap_mpi(dcp_bootstrap_t *bootstrap_out);

/* A group of in-process ranks (threads of one process) that exchange blocks through
 * shared memory. Thread-safe; destroy only after every context on it is destroyed. */
typedef struct dcp_group dcp_group_t;

DCP_API dcp_status_t dcp_group_create(int32_t num_ranks, dcp_group_t **group_out);
DCP_API void dcp_group_destroy(dcp_group_t *group);

typedef struct {
    int32_t rank;                     /* with a group: this rank, in [0, group size) */
    dcp_group_t *group;               /* ranks are threads: the borrowed in-process group */
    const dcp_bootstrap_t *bootstrap; /* ranks are processes: borrowed, used by create and
                                         destroy (both collective); exactly one of the two */
    double timeout_s;                 /* per-wait transfer timeout; 0 = $DCP_TIMEOUT_S or 60 s */
    const char *transport_intra;      /* engine within a node: "ucx", "nccl", "inproc";
                                         NULL: $DCP_TRANSPORT_INTRA, else chosen by topology */
    const char *transport_inter;      /* engine between nodes, likewise ($DCP_TRANSPORT_INTER) */
    const char *device;               /* where the rank computes: NULL or "cpu" (any dtype,
                                         fp32 arithmetic); "cuda" (in-process rank r on GPU
                                         r % count, a process on GPU local-rank % count) or
                                         "cuda:N" (bf16 and fp16 plans) */
    /* Borrowed handles of an embedding framework (CUDA contexts only; NULL: dcp makes its
     * own). dcp never frees or destroys them; they must outlive the context. */
    void *compute_stream;  /* cudaStream_t of the context's GPU for dcp's kernels */
    void *transfer_stream; /* cudaStream_t for its transfers (NCCL) and in-process copies */
    void *nccl_comm;       /* ncclComm_t over exactly the bootstrap's ranks, rank for rank,
                              each on its rank's device (process ranks whose engine is NCCL);
                              checked at creation: a communicator whose size, rank or device
                              differs fails creation on every rank with DCP_ERR_INVALID_ARG
                              naming the rank and the field. Never aborted by dcp, not even
                              after a timeout (the context reports; the caller decides). Every
                              rank must call dcp into it in the same order as any other user
                              of it: lend one that dcp alone uses */
    /* What computes the dense parts of attention (kernels/README.md "Attention engines"): every
     * launch's tile list is cut into full, causal and masked segments, and the engine runs the
     * full and causal ones as packed calls while dcp's own kernels run the rest.
     *   "auto"  cuDNN's fused attention where the context is on a GPU and a usable cuDNN
     *           loads (libcudnn.so.9: $DCP_CUDNN_LIB, else the loader's search path), else
     *           "own" (dcp_context_attn_engine() says why);
     *   "own"   dcp's kernels run every tile;
     *   "cudnn" cuDNN as in auto, and context creation fails (DCP_ERR_UNSUPPORTED, naming
     *           why) where a GPU context cannot load a usable cuDNN; a CPU context runs
     *           "own" and says so;
     *   "twin"  the cuDNN data path (cut, packing, merges) with dcp's CPU reimplementation of
     *           cuDNN's attention in place of cuDNN: CPU contexts only, for checking.
     * NULL: $DCP_ATTN_ENGINE, else "auto". */
    const char *attn_engine;
    int32_t deterministic; /* 1: dQ, dK and dV are bitwise equal run to run for the same
                              plan and inputs. The GPU backward runs dcp's deterministic kernels
                              (each gradient element summed in a fixed order, no racing atomics;
                              slower) on every tile, cuDNN's calls skip configurations it marks
                              non-deterministic and the engine's adds run in waves of disjoint
                              writers. CPU contexts always are. 0: as
                              $DCP_DETERMINISTIC says ("1": on), else off. */
    /* Process ranks: a node file (dcp-calibrate's OUT.node, the node's figures as measured on
     * the cluster; format in topo/README.md "Node files") whose figures replace the ones
     * hwloc gives the cluster the ranks form (dcp_context_cluster): bandwidths, latency, NICs,
     * peak, kernel curve. Checked against the job: its `devices` must equal the ranks per node,
     * and every rank must load the same figures (DCP_ERR_INVALID_ARG on every rank, naming
     * the file or the ranks that differ). Borrowed; read during dcp_context_create only.
     * NULL: $DCP_NODE_FILE, else none. Not for in-process ranks (their cluster is the
     * caller's: name the file in its spec, "Nx@FILE"). */
    const char *node_file;
} dcp_context_config_t;

/* One rank's runtime: its transport endpoint and work buffers (sized from the plans it
 * runs and reused across batches). Used by one thread at a time. */
typedef struct dcp_context dcp_context_t;

DCP_API dcp_status_t dcp_context_create(const dcp_context_config_t *config,
                                        dcp_context_t **ctx_out);
DCP_API void dcp_context_destroy(dcp_context_t *ctx);

/* The cluster the context's ranks form, discovered over the bootstrap: nodes by host name and
 * boot id (two machines that share a host name are two nodes), devices per node, and link
 * figures where the NICs report them, or the node file's (config.node_file). Owned by the
 * context.
 * DCP_ERR_UNSUPPORTED when the ranks are not placed node by node with the same count on
 * every node (the cluster model numbers ranks node by node). */
DCP_API dcp_status_t dcp_context_cluster(const dcp_context_t *ctx,
                                         const dcp_cluster_t **cluster_out);

/* DCP_OK when the context's device runs plans of this shape, else DCP_ERR_UNSUPPORTED naming
 * the field (a CUDA context: head_dim 64, 96, 128, 192 or 256 with the same value head dim,
 * or 192 with value head dim 128, dtype bf16 or fp16; the CPU runs any). To refuse a shape
 * before planning; dcp_forward() checks it too, before any exchange. */
DCP_API dcp_status_t dcp_context_check_shape(const dcp_context_t *ctx,
                                             const dcp_attn_shape_t *shape);

/* The engine the context uses within a node and between nodes ("inproc", "ucx", ...). */
DCP_API const char *dcp_context_transport(const dcp_context_t *ctx, int inter_node);

/* One line on how the context moves and orders its transfers: its engines (the links each
 * serves, behind a routing engine), whether a GPU context's launches are stream-ordered or the
 * host waits for its compute stream before each launch (naming the engine that completes on
 * the host, e.g. UCX without CUDA), and whether the call stamps and abort notices travel in
 * host or device memory. Printed to stderr at creation when $DCP_DEBUG is set (not "0").
 * Owned by the context, valid while it lives; "" for NULL. Thread-safe (fixed text). */
DCP_API const char *dcp_context_transport_report(const dcp_context_t *ctx);

/* The segment classes of the attention engine (kernels/segment.h): the index of each in
 * dcp_attn_engine_info_t's pairs[] and its bit in dense_classes. */
#define DCP_ATTN_CLASS_FULL 0   /* every key of the entry */
#define DCP_ATTN_CLASS_CAUSAL 1 /* the diagonal, bottom-right aligned */
#define DCP_ATTN_CLASS_BAND 2   /* a sliding window: left bound and diagonal */
#define DCP_ATTN_CLASS_LEFT 3   /* a left bound alone: a window's far edge */
#define DCP_ATTN_CLASS_MASKED 4 /* anything else: dcp's own kernels */
#define DCP_ATTN_CLASSES 5

/* The attention engine a context uses (dcp_context_config_t.attn_engine) and what it did. */
typedef struct {
    const char *requested; /* "auto", "own", "cudnn" or "twin" */
    const char *engine;    /* what runs the dense segments: "own", "cudnn" or "twin" */
    const char *note;      /* why this engine, and what it leaves to dcp's kernels ("" when
                              nothing to say); valid while the context lives */
    int64_t cudnn_version; /* cudnnGetVersion() of the library in use, 0 when none */
    int32_t dense_classes[2]; /* forward, backward: segment classes the engine runs, bit
                                 DCP_ATTN_CLASS_FULL .. DCP_ATTN_CLASS_LEFT (masked segments always run on
                                 dcp's kernels) */
    int64_t plans_built;   /* cuDNN execution plans built by this context so far */
    int64_t plan_hits;     /* dense calls bound to a plan built before (the cache) */
    double plan_build_ms;  /* wall time spent building them */
    int64_t pairs[DCP_ATTN_CLASSES]; /* allowed (query, key) pairs per segment class of every
                              plan bound so far, forward (what the engine ran) */
    int64_t pairs_bwd[DCP_ATTN_CLASSES]; /* the same, backward */
    int64_t plan_evictions; /* cuDNN plans dropped to keep the cache's bound ($DCP_CUDNN_PLANS) */
    int64_t graphs_failed; /* cuDNN graphs that did not build: their classes run on dcp's
                              kernels from then on (the note names the first) */
    int64_t bwd_launches;  /* the engine's backward launches of every plan bound so far */
    int64_t bwd_waves;     /* deterministic mode: the kernel launches their own groups and adds
                              took (waves of disjoint writers); 0 otherwise */
} dcp_attn_engine_info_t;

/* Fills *info_out; the strings belong to the context. */
DCP_API dcp_status_t dcp_context_attn_engine(const dcp_context_t *ctx,
                                             dcp_attn_engine_info_t *info_out);

/* The allowed (query, key) pairs of a plan's attention per segment class (DCP_ATTN_CLASS_*),
 * summed over every rank's launches, pairs_out[0] forward and [1] backward, as an attention
 * engine that takes every dense class cuts them: dense runs of fewer than min_rows rows count
 * as masked (0: 64, the engines' default, $DCP_ATTN_MIN_ROWS aside). The share of the plan
 * cuDNN's packed calls could run, known before any context binds it; a context's own figures
 * are dcp_attn_engine_info_t's pairs. A layer kind's view gives its kind's. Written only on
 * success. Thread-safe. */
DCP_API dcp_status_t dcp_plan_attn_pairs(const dcp_plan_t *plan, int32_t min_rows,
                                         int64_t pairs_out[2][DCP_ATTN_CLASSES]);

/* The CUDA device ordinal the context computes on, or -1 for the CPU: where the io
 * pointers of dcp_forward()/dcp_backward() must live. Thread-safe (reads a fixed field). */
DCP_API int32_t dcp_context_device(const dcp_context_t *ctx);

/* What a context's calls have cost so far: counters since dcp_context_create(), summed over
 * every dcp_forward() and dcp_backward() call on it. */
typedef struct {
    int64_t calls;         /* forward and backward calls made, failed ones included */
    double wait_blocked_s; /* host seconds those calls spent in their transfer waits (the
                              plan's COMM_WAIT steps): the communication that computation did
                              not hide, as the calling thread saw it. Where the engine orders a
                              wait on the GPU stream instead (NCCL), the host barely blocks */
} dcp_context_stats_t;

/* Fills *stats_out (DCP_ERR_INVALID_ARG for a NULL argument). Reads the counters of a context
 * that one thread uses at a time: call it from that thread, between calls (it may run beside
 * other contexts' calls). */
DCP_API dcp_status_t dcp_context_get_stats(const dcp_context_t *ctx,
                                           dcp_context_stats_t *stats_out);

/* Runs this rank's forward program of `plan` over `io`: any plan on a CPU context (fp32
 * arithmetic, so bf16/fp16 storage gives the GPU's inputs a CPU twin); bf16 or fp16 plans
 * on a CUDA context, whose io pointers are device memory of its GPU (16-byte aligned).
 *
 * `stream` is the caller's cudaStream_t (NULL: the legacy default stream) on a CUDA context
 * and must be NULL on a CPU context. On a GPU the call is stream-ordered, like ncclSend or a
 * kernel launch: Q, K and V are read after the work queued on `stream` before the call, O
 * and LSE are ready for the work queued on it after the call, and the call returns once the
 * work is queued (the host waits only for what a transport truly needs: the peers' threads
 * reaching their matching launch in process, UCX on host memory). Keep io alive and
 * untouched until `stream` reaches the point of the call. On the CPU the call returns when
 * O and LSE are written.
 *
 * Every rank of the group must call it with the same plan. O and LSE are written only on
 * success; when a peer fails the call returns DCP_ERR_PEER or DCP_ERR_TIMEOUT instead of
 * hanging, and a failing rank marks its group failed so that later calls on it return
 * DCP_ERR_PEER at once. (On a GPU, a failure that happens after the call has returned, in
 * work still queued, is reported by the context's next call or dcp_context_synchronize():
 * NCCL's asynchronous error, work still unfinished after the context's timeout
 * (DCP_ERR_TIMEOUT naming the peers), or, where NCCL carries the blocks, a peer whose plan or
 * call differs or that failed before its transfers.) After a failure, destroy the
 * context before freeing or overwriting that call's Q, K and V: a send to a dead peer cannot
 * always be withdrawn and may read them until the engine is gone. */
DCP_API dcp_status_t dcp_forward(dcp_context_t *ctx, const dcp_plan_t *plan,
                                 const dcp_tensors_t *io, void *stream);

/* One rank's tensors for the backward pass, borrowed for the call, rows in
 * dcp_plan_local_layout() order. `fwd` holds the forward call's tensors as they were passed
 * to dcp_forward(), with the O and LSE it wrote (only read here), so one dcp_tensors_t
 * serves both calls. dout: [local_tokens, Hq, D_v]; dq: [local_tokens, Hq, D]; dk:
 * [local_tokens, Hkv, D], dv: [local_tokens, Hkv, D_v], dK and dV summed over the query heads
 * of each KV head (GQA); all in the plan's dtype. Partial gradients are kept and summed in
 * fp32 on every rank. */
typedef struct {
    dcp_tensors_t fwd;
    const void *dout; /* gradient of the loss with respect to O */
    void *dq;
    void *dk;
    void *dv;
    /* With fwd.sinks: [Hq] fp32 where the context computes, the gradient of the loss with
     * respect to the sinks over this rank's rows, -sum over rows of exp(s_h - LSE) delta
     * (delta = rowsum(dO * O)); the framework's gradient reduction sums it over the ranks, as
     * for any replicated parameter. NULL: not computed. Needs fwd.sinks. */
    float *dsinks;
} dcp_grad_tensors_t;

/* Runs this rank's backward program of `plan`: dQ, dK and dV from Q, K, V, the forward's O
 * and LSE, and dO. Each computation block runs where its forward ran; partial gradients
 * return to the owners of their rows and are summed there in fp32. Rows with no allowed key
 * (LSE = -inf) get no gradient; NaN or Inf in the inputs propagate into the gradients.
 * Device, stream, ordering, failure and output rules are those of dcp_forward(): dQ, dK and
 * dV are written only on success. */
DCP_API dcp_status_t dcp_backward(dcp_context_t *ctx, const dcp_plan_t *plan,
                                  const dcp_grad_tensors_t *io, void *stream);

/* Marks this rank failed and tells every peer at once why: their calls in flight and later
 * return DCP_ERR_PEER within a message's latency, naming this rank and `reason` (copied; up
 * to 255 bytes travel; NULL: none given), instead of waiting out the timeout for a rank that
 * will not come. For a rank that fails a check of its own before a collective call (its
 * inputs are wrong, a step raised): the dcp.torch layer calls it when its checks refuse a
 * rank's tensors. Never blocks longer than about a second (the notices' flush). Where NCCL
 * carries the blocks (it has no messages of its own) the notice travels as this rank's call
 * stamps, to the peers of its last call (its ring neighbours before any call), which find it
 * in their next call or dcp_context_synchronize().
 *
 * After any failure (this one, a failed call, a peer's) the context fails every later call
 * at once with DCP_ERR_PEER; nothing on it can be resumed. To go on, every rank destroys its
 * context (then not collective: no rank waits for a failed peer) and creates a new one
 * (collective, as the first); a thread group's ranks make a new group too. */
DCP_API dcp_status_t dcp_context_abort(dcp_context_t *ctx, const char *reason);

/* Waits, on the host, until the work of the context's calls so far has finished on its GPU,
 * for at most timeout_s seconds (0: the context's timeout), then reports what the calls left
 * to find: a peer that failed or sent a notice (DCP_ERR_PEER naming it and why), ranks that
 * ran different plans or calls (DCP_ERR_INVALID_ARG, as dcp_forward). DCP_ERR_TIMEOUT when the
 * work has not finished in time, naming the peers the unfinished call exchanges blocks with;
 * once that work has been unfinished for longer than the context's timeout the context has
 * failed like a failed call (its next call does so too, without this function): the peers are
 * told, and an NCCL communicator dcp created is aborted (a lent one never is). A shorter
 * wait that ends first leaves the context as it was. Returns at once on a CPU context, whose
 * calls finish before they return. Not collective; one thread at a time, like the context. */
DCP_API dcp_status_t dcp_context_synchronize(dcp_context_t *ctx, double timeout_s);

/* Waits until every rank of the context has called it. Through the context's engine, so it
 * fails like dcp_forward (DCP_ERR_PEER, DCP_ERR_TIMEOUT) instead of hanging on a dead rank;
 * for timing and for fencing batches. */
DCP_API dcp_status_t dcp_context_barrier(dcp_context_t *ctx);

/* Convenience: runs all ranks of `plan` as threads of this process, rank r on io[r]
 * (io has dcp_plan_stats_t.num_ranks entries), each on `device` as in
 * dcp_context_config_t (NULL: the CPU; "cuda": rank r on GPU r % count, so several ranks
 * may share one GPU). Returns once the outputs are written, or the first failure of any
 * rank. */
DCP_API dcp_status_t dcp_forward_inproc(const dcp_plan_t *plan, const dcp_tensors_t *io,
                                        double timeout_s, const char *device);

/* The same for the backward pass: rank r on io[r]. */
DCP_API dcp_status_t dcp_backward_inproc(const dcp_plan_t *plan, const dcp_grad_tensors_t *io,
                                         double timeout_s, const char *device);

#ifdef __cplusplus
}
#endif

#endif /* DCP_H */
