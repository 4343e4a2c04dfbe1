/* The flags dcp's tools share: batch (lengths, masks), attention shape, plan options and
 * cluster, with their defaults and checks. */
#ifndef DCPT_CLI_COMMON_H
#define DCPT_CLI_COMMON_H

#include "include/dcp.h"
#include "plugin/cli/helpers/args.h"

typedef struct {
    int64_t ranks, tokens, max_len, seed, heads, kv_heads, head_dim, block, head_blocks, divisions;
    int64_t head_dim_v; /* 0: head_dim */
    double softcap;     /* 0: off */
    int64_t mem_cap;
    const char *cluster, *mask, *seqlens, *lengths_file, *strategy;
    const char *layers; /* MASK:COUNT,...: the layer kinds of one model (replaces --mask) */
    int64_t batches;    /* 0: one batch filled to --tokens; else DCP's packing into this many */
    double scale;       /* every length multiplied by this (default 1) */
} dcpt_common_flags_t;

/* Number of table entries dcpt_common_args() fills. */
#define DCPT_COMMON_NARGS 19

void dcpt_common_defaults(dcpt_common_flags_t *f);
void dcpt_common_args(dcpt_common_flags_t *f, dcpt_arg_t *args);

typedef struct {
    dcp_cluster_t *cluster;
    int32_t num_masks;
    dcp_mask_t *masks;
    char **mask_names; /* canonical text of each mask */
    /* --layers: num_kinds > 0 kinds, kind k's mask masks[k] (num_masks = num_kinds), its
     * layer count and label ("window:1024 x5"); one plan holds them all */
    int32_t num_kinds;
    int32_t *kind_layers;
    char **kind_labels;
    int32_t num_strategies;
    dcp_strategy_t *strategies;
    int32_t *strategy_args; /* options.strategy_arg of each ("packed:8": 8; 0 without one) */
    char **strategy_labels; /* each as given ("packed:8", "metis") */
    int32_t num_batches;
    int32_t *batch_first; /* batch b: lengths[batch_first[b] .. batch_first[b + 1]) */
    int32_t *lengths;
    dcp_attn_shape_t shape;
    dcp_plan_options_t opts; /* strategy left to the caller */
} dcpt_common_t;

/* Checks the flags and builds what they describe; exits 2 naming the flag on bad input.
 * `args` is the table dcpt_common_args() filled (its `seen` marks are read). */
void dcpt_common_resolve(const char *tool, const dcpt_common_flags_t *f, const dcpt_arg_t *args,
                         dcpt_common_t *out);
void dcpt_common_free(dcpt_common_t *c);

/* Batch b as the planner takes it: with --layers every kind (kind k's mask on every sequence),
 * else mask m on every sequence. *masks_out (to free) holds the masks; kinds[] is filled with
 * --layers. */
dcp_batch_t dcpt_common_batch(const dcpt_common_t *c, int32_t b, int32_t m, dcp_mask_t **masks_out,
                              dcp_layer_kind_t kinds[DCP_MAX_KINDS]);

/* Strategy s of the list into opts (strategy and strategy_arg). */
void dcpt_common_strategy(const dcpt_common_t *c, int32_t s, dcp_plan_options_t *opts);

/* "fp32", "bf16", "fp16": parsed (exits 2 naming --<flag> otherwise) and named. */
dcp_dtype_t dcpt_dtype_arg(const char *tool, const char *flag, const char *text);
const char *dcpt_dtype_name(dcp_dtype_t dtype);

/* options.divisions for a header: the count, or "per batch" for 0 (buf: room for it). */
const char *dcpt_divisions_name(int32_t divisions, char buf[16]);

#endif
