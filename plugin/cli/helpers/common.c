#include "plugin/cli/helpers/common.h"

#include "plugin/cli/support/lengths.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dcpt_common_defaults(dcpt_common_flags_t *f)
{
    dcp_plan_options_t lib;
    dcp_plan_options_default(&lib);
    *f = (dcpt_common_flags_t){
        .ranks = 8,
        .tokens = 16384,
        .max_len = 0,
        .seed = 1,
        .heads = 4,
        .kv_heads = 2,
        .head_dim = 64,
        .block = 512,
        .head_blocks = 1,
        .divisions = lib.divisions,
        .mask = "causal",
        .strategy = "metis",
        .scale = 1.0,
    };
}

void dcpt_common_args(dcpt_common_flags_t *f, dcpt_arg_t *a)
{
    const dcpt_arg_t t[DCPT_COMMON_NARGS] = {
        {"ranks", DCPT_ARG_INT, &f->ranks, 1, 65536, "ranks", 0},
        {"cluster", DCPT_ARG_STR, &f->cluster, 0, 0,
         "NxG[:intra=GBps][:inter=GBps][:lat=us] (default (R/4)x4 or 1xR)", 0},
        {"mask", DCPT_ARG_STR, &f->mask, 0, 0,
         "mask spec or comma list: full, causal, window:W, lambda:S:W, blockwise:b:k, "
         "shared-question:p:a",
         0},
        {"seqlens", DCPT_ARG_STR, &f->seqlens, 0, 0, "comma-separated sequence lengths", 0},
        {"lengths-file", DCPT_ARG_STR, &f->lengths_file, 0, 0,
         "file of lengths (one per line) to sample", 0},
        {"tokens", DCPT_ARG_INT, &f->tokens, 1, 2147483647, "tokens to sample", 0},
        {"max-len", DCPT_ARG_INT, &f->max_len, 1, 2147483647,
         "drop sampled lengths above this (default --tokens)", 0},
        {"seed", DCPT_ARG_INT, &f->seed, 0, INT64_MAX, "seed for lengths and tensors", 0},
        {"heads", DCPT_ARG_INT, &f->heads, 1, 65536, "query heads", 0},
        {"kv-heads", DCPT_ARG_INT, &f->kv_heads, 1, 65536, "KV heads", 0},
        {"head-dim", DCPT_ARG_INT, &f->head_dim, 1, 4096, "head dimension (of Q and K)", 0},
        {"head-dim-v", DCPT_ARG_INT, &f->head_dim_v, 0, 4096,
         "value head dimension (of V and O; 0: --head-dim; MLA: 128 with --head-dim 192)", 0},
        {"softcap", DCPT_ARG_DOUBLE, &f->softcap, 0, 0, "logit softcap c tanh(s / c) (0: off)", 0},
        {"block", DCPT_ARG_INT, &f->block, 1, 2147483647, "tokens per block", 0},
        {"head-blocks", DCPT_ARG_INT, &f->head_blocks, 1, 65536, "head groups", 0},
        {"divisions", DCPT_ARG_INT, &f->divisions, 0, 1024,
         "compute divisions per rank (0: chosen per batch)", 0},
        {"strategy", DCPT_ARG_STR, &f->strategy, 0, 0,
         "ring, zigzag, lpt, metis, auto, a peer policy (packed[:C], dyncp[:M], ulysses[:C], "
         "usp[:U], magi[:CHUNK]), a comma list, all (dcp's own) or peers (metis and the "
         "policies)",
         0},
        {"mem-cap", DCPT_ARG_INT, &f->mem_cap, 0, INT64_MAX,
         "per-rank cap on owned block bytes (default none)", 0},
        {"layers", DCPT_ARG_STR, &f->layers, 0, 0,
         "layer kinds of one model, MASK:COUNT comma list (causal:1,window:1024:5): one plan "
         "for all, a row per kind and a model row (replaces --mask)",
         0},
    };
    memcpy(a, t, sizeof t);
}

static void resolve_cluster(const char *tool, const dcpt_common_flags_t *f, const dcpt_arg_t *args,
                            dcpt_common_t *out)
{
    char spec[64];
    const char *use = f->cluster;
    if (!use) {
        if (f->ranks % 4 == 0 && f->ranks >= 8)
            snprintf(spec, sizeof spec, "%lldx4", (long long)f->ranks / 4);
        else
            snprintf(spec, sizeof spec, "1x%lld", (long long)f->ranks);
        use = spec;
    }
    if (dcp_cluster_from_spec(use, &out->cluster) != DCP_OK)
        dcpt_args_fail(tool, "cluster", "%s", dcp_last_error());
    /* With --cluster alone the cluster decides the ranks; with both they must agree. */
    const int32_t n = dcp_cluster_num_ranks(out->cluster);
    if (n != f->ranks && dcpt_args_seen(args, DCPT_COMMON_NARGS, "ranks"))
        dcpt_args_fail(tool, "cluster", "'%s' has %d ranks, --ranks is %lld", use, n,
                       (long long)f->ranks);
}

static void resolve_masks(const char *tool, const dcpt_common_flags_t *f, dcpt_common_t *out)
{
    char **items, *storage;
    out->num_masks = dcpt_args_split(tool, "mask", f->mask, &items, &storage);
    out->masks = calloc((size_t)out->num_masks, sizeof *out->masks);
    out->mask_names = calloc((size_t)out->num_masks, sizeof *out->mask_names);
    for (int32_t i = 0; i < out->num_masks; i++) {
        if (dcp_mask_parse(items[i], &out->masks[i]) != DCP_OK)
            dcpt_args_fail(tool, "mask", "%s", dcp_last_error());
        out->mask_names[i] = malloc(64);
        dcp_mask_format(&out->masks[i], out->mask_names[i], 64);
    }
    free(items);
    free(storage);
}

/* --layers MASK:COUNT,...: the text after the last ':' of an item is its layer count. */
static void resolve_layers(const char *tool, const dcpt_common_flags_t *f, const dcpt_arg_t *args,
                           dcpt_common_t *out)
{
    if (dcpt_args_seen(args, DCPT_COMMON_NARGS, "mask"))
        dcpt_args_fail(tool, "layers", "replaces --mask: give one of them");
    char **items, *storage;
    const int32_t n = dcpt_args_split(tool, "layers", f->layers, &items, &storage);
    if (n > DCP_MAX_KINDS) dcpt_args_fail(tool, "layers", "%d kinds, at most %d", n, DCP_MAX_KINDS);
    out->num_kinds = out->num_masks = n;
    out->masks = calloc((size_t)n, sizeof *out->masks);
    out->mask_names = calloc((size_t)n, sizeof *out->mask_names);
    out->kind_labels = calloc((size_t)n, sizeof *out->kind_labels);
    out->kind_layers = calloc((size_t)n, sizeof *out->kind_layers);
    for (int32_t i = 0; i < n; i++) {
        char *colon = strrchr(items[i], ':'), *end = NULL;
        const long count = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || end == colon + 1 || *end != '\0' || count < 1 || count > 1024)
            dcpt_args_fail(tool, "layers", "'%s': expected MASK:COUNT with COUNT in [1, 1024]",
                           items[i]);
        *colon = '\0';
        if (dcp_mask_parse(items[i], &out->masks[i]) != DCP_OK)
            dcpt_args_fail(tool, "layers", "%s", dcp_last_error());
        out->mask_names[i] = malloc(64);
        out->kind_labels[i] = malloc(80);
        dcp_mask_format(&out->masks[i], out->mask_names[i], 64);
        snprintf(out->kind_labels[i], 80, "%s x%ld", out->mask_names[i], count);
        out->kind_layers[i] = (int32_t)count;
    }
    free(items);
    free(storage);
}

dcp_batch_t dcpt_common_batch(const dcpt_common_t *c, int32_t b, int32_t m, dcp_mask_t **masks_out,
                              dcp_layer_kind_t kinds[DCP_MAX_KINDS])
{
    const int32_t first = c->batch_first[b], n = c->batch_first[b + 1] - first;
    const int32_t nk = c->num_kinds > 0 ? c->num_kinds : 1;
    dcp_mask_t *masks = calloc((size_t)nk * (size_t)n, sizeof *masks);
    for (int32_t k = 0; masks && k < nk; k++)
        for (int32_t i = 0; i < n; i++) masks[(int64_t)k * n + i] = c->masks[c->num_kinds ? k : m];
    *masks_out = masks;
    if (c->num_kinds == 0)
        return (dcp_batch_t){.num_seqs = n, .lengths = c->lengths + first, .masks = masks};
    for (int32_t k = 0; k < nk; k++)
        kinds[k] = (dcp_layer_kind_t){masks ? masks + (int64_t)k * n : NULL, c->kind_layers[k]};
    return (dcp_batch_t){
        .num_seqs = n, .lengths = c->lengths + first, .num_kinds = nk, .kinds = kinds};
}

/* "all": dcp's own strategies; "peers": the default and the peer policies, each with its
 * default parameter. */
static const char *const strategy_sets[][2] = {
    {"all", "ring,zigzag,lpt,metis"},
    {"peers", "metis,packed,dyncp,ulysses,usp,magi"},
};

static void resolve_strategies(const char *tool, const dcpt_common_flags_t *f, dcpt_common_t *out)
{
    /* the sets expanded in place, then the items */
    size_t len = strlen(f->strategy) + 1;
    for (size_t k = 0; k < sizeof strategy_sets / sizeof strategy_sets[0]; k++)
        len +=
            strlen(strategy_sets[k][1]) * (strlen(f->strategy) / strlen(strategy_sets[k][0]) + 1);
    char *list = calloc(len, 1);
    char **items, *storage, **sets, *set_storage;
    if (!list) dcpt_args_fail(tool, "strategy", "out of memory");
    const int nsets = dcpt_args_split(tool, "strategy", f->strategy, &sets, &set_storage);
    for (int i = 0; i < nsets; i++) {
        const char *item = sets[i];
        for (size_t k = 0; k < sizeof strategy_sets / sizeof strategy_sets[0]; k++)
            if (!strcmp(item, strategy_sets[k][0])) item = strategy_sets[k][1];
        if (i) strcat(list, ",");
        strcat(list, item);
    }
    free(sets);
    free(set_storage);
    out->num_strategies = dcpt_args_split(tool, "strategy", list, &items, &storage);
    free(list);
    const size_t n = (size_t)out->num_strategies;
    out->strategies = calloc(n, sizeof *out->strategies);
    out->strategy_args = calloc(n, sizeof *out->strategy_args);
    out->strategy_labels = calloc(n, sizeof *out->strategy_labels);
    if (!out->strategies || !out->strategy_args || !out->strategy_labels)
        dcpt_args_fail(tool, "strategy", "out of memory");
    for (int32_t i = 0; i < out->num_strategies; i++) {
        if (dcp_strategy_parse_spec(items[i], &out->strategies[i], &out->strategy_args[i]) !=
            DCP_OK)
            dcpt_args_fail(tool, "strategy", "%s", dcp_last_error());
        out->strategy_labels[i] = strdup(items[i]);
    }
    free(items);
    free(storage);
}

void dcpt_common_strategy(const dcpt_common_t *c, int32_t s, dcp_plan_options_t *opts)
{
    opts->strategy = c->strategies[s];
    opts->strategy_arg = c->strategy_args[s];
}

/* A length times --scale: at least 1 token, and never past 2^31 - 1 (exits 2 naming
 * --scale). */
static int32_t scaled_length(const char *tool, int64_t len, double scale)
{
    const double d = (double)len * scale;
    if (d > 2147483647.0)
        dcpt_args_fail(tool, "scale", "a length of %lld x %g is more than 2^31 - 1 tokens",
                       (long long)len, scale);
    const long long r = llround(d);
    return (int32_t)(r < 1 ? 1 : r);
}

static void parse_seqlens(const char *tool, const dcpt_common_flags_t *f, dcpt_common_t *out)
{
    char **items, *storage;
    const int32_t n = dcpt_args_split(tool, "seqlens", f->seqlens, &items, &storage);
    long long total = 0;
    out->lengths = calloc((size_t)n, sizeof *out->lengths);
    for (int32_t i = 0; i < n; i++) {
        char *end;
        const long long v = strtoll(items[i], &end, 10);
        if (*end != '\0' || v < 1 || v > 2147483647)
            dcpt_args_fail(tool, "seqlens", "'%s' is not a length in [1, 2^31 - 1]", items[i]);
        out->lengths[i] = scaled_length(tool, v, f->scale);
        total += out->lengths[i];
    }
    if (total > 2147483647)
        dcpt_args_fail(tool, "seqlens", "%lld tokens in all, more than 2^31 - 1", total);
    out->num_batches = 1;
    out->batch_first = calloc(2, sizeof *out->batch_first);
    out->batch_first[1] = n;
    free(items);
    free(storage);
}

/* Lengths from the file or the built-in histogram: one batch filled to exactly --tokens
 * (the attention test), or --batches batches packed the way DCP packs them (the planner). */
static void sample_lengths(const char *tool, const dcpt_common_flags_t *f, dcpt_common_t *out)
{
    dcpt_length_source_t src = {NULL, 0};
    int32_t *pool = NULL;
    if (f->lengths_file) {
        int64_t n;
        if (dcpt_lengths_read(f->lengths_file, &pool, &n) != DCP_OK)
            dcpt_args_fail(tool, "lengths-file", "%s", dcp_last_error());
        src = (dcpt_length_source_t){pool, n};
    }
    if (f->batches > 0) {
        if (dcpt_lengths_pack(&src, f->tokens, (int32_t)(f->max_len > 0 ? f->max_len : INT32_MAX),
                              f->scale, (int32_t)f->batches, (uint64_t)f->seed, &out->lengths,
                              &out->batch_first, &out->num_batches) != DCP_OK)
            dcpt_args_fail(tool, "tokens", "%s", dcp_last_error());
        if (out->num_batches < f->batches)
            fprintf(stderr, "%s: the lengths fill only %d batches of %lld tokens\n", tool,
                    out->num_batches, (long long)f->tokens);
    } else {
        const int64_t max_len = f->max_len > 0 ? f->max_len : f->tokens;
        int32_t n = 0;
        if (dcpt_lengths_fill(&src, f->tokens,
                              (int32_t)(max_len < 2147483647 ? max_len : 2147483647),
                              (uint64_t)f->seed, &out->lengths, &n) != DCP_OK)
            dcpt_args_fail(tool, "max-len", "%s", dcp_last_error());
        for (int32_t i = 0; i < n; i++)
            out->lengths[i] = scaled_length(tool, out->lengths[i], f->scale);
        out->num_batches = 1;
        out->batch_first = calloc(2, sizeof *out->batch_first);
        out->batch_first[1] = n;
    }
    free(pool);
}

static void resolve_lengths(const char *tool, const dcpt_common_flags_t *f, const dcpt_arg_t *args,
                            dcpt_common_t *out)
{
    if (f->seqlens && f->lengths_file)
        dcpt_args_fail(tool, "seqlens", "give either --seqlens or --lengths-file");
    if (!(f->scale > 0)) dcpt_args_fail(tool, "scale", "must be > 0");
    static const char *const sampling[2] = {"tokens", "max-len"};
    for (int k = 0; f->seqlens && k < 2; k++) /* the lengths are given: nothing is sampled */
        if (dcpt_args_seen(args, DCPT_COMMON_NARGS, sampling[k]))
            dcpt_args_fail(tool, sampling[k], "samples lengths; --seqlens gives them");
    if (f->seqlens)
        parse_seqlens(tool, f, out);
    else
        sample_lengths(tool, f, out);
}

void dcpt_common_resolve(const char *tool, const dcpt_common_flags_t *f, const dcpt_arg_t *args,
                         dcpt_common_t *out)
{
    memset(out, 0, sizeof *out);
    resolve_cluster(tool, f, args, out);
    if (f->layers)
        resolve_layers(tool, f, args, out);
    else
        resolve_masks(tool, f, out);
    resolve_strategies(tool, f, out);
    resolve_lengths(tool, f, args, out);
    if (f->heads % f->kv_heads != 0)
        dcpt_args_fail(tool, "kv-heads", "%lld does not divide --heads %lld",
                       (long long)f->kv_heads, (long long)f->heads);
    if (f->kv_heads % f->head_blocks != 0)
        dcpt_args_fail(tool, "head-blocks", "%lld does not divide --kv-heads %lld",
                       (long long)f->head_blocks, (long long)f->kv_heads);
    if (!(f->softcap >= 0) || !isfinite(f->softcap))
        dcpt_args_fail(tool, "softcap", "%g: must be finite and >= 0 (0: off)", f->softcap);
    out->shape = (dcp_attn_shape_t){
        (int32_t)f->heads, (int32_t)f->kv_heads,  (int32_t)f->head_dim, DCP_DTYPE_FP32, 0.0f,
        (float)f->softcap, (int32_t)f->head_dim_v};
    dcp_plan_options_default(&out->opts);
    out->opts.block_size = (int32_t)f->block;
    out->opts.head_blocks = (int32_t)f->head_blocks;
    out->opts.divisions = (int32_t)f->divisions;
    out->opts.mem_cap_bytes = f->mem_cap;
    out->opts.seed = (uint64_t)f->seed;
}

void dcpt_common_free(dcpt_common_t *c)
{
    dcp_cluster_destroy(c->cluster);
    for (int32_t i = 0; i < c->num_masks; i++) free(c->mask_names[i]);
    for (int32_t i = 0; i < c->num_kinds; i++) free(c->kind_labels[i]);
    free(c->mask_names);
    free(c->kind_labels);
    free(c->kind_layers);
    free(c->masks);
    for (int32_t i = 0; c->strategy_labels && i < c->num_strategies; i++)
        free(c->strategy_labels[i]);
    free(c->strategy_labels);
    free(c->strategy_args);
    free(c->strategies);
    free(c->batch_first);
    free(c->lengths);
    memset(c, 0, sizeof *c);
}

dcp_dtype_t dcpt_dtype_arg(const char *tool, const char *flag, const char *text)
{
    static const dcp_dtype_t all[3] = {DCP_DTYPE_FP32, DCP_DTYPE_BF16, DCP_DTYPE_FP16};
    for (int i = 0; i < 3; i++)
        if (!strcmp(text, dcpt_dtype_name(all[i]))) return all[i];
    dcpt_args_fail(tool, flag, "'%s': bf16, fp16 or fp32", text);
}

const char *dcpt_dtype_name(dcp_dtype_t dtype)
{
    return dtype == DCP_DTYPE_BF16 ? "bf16" : dtype == DCP_DTYPE_FP16 ? "fp16" : "fp32";
}

const char *dcpt_divisions_name(int32_t divisions, char buf[16])
{
    if (divisions == 0) return "per batch";
    snprintf(buf, 16, "%d", divisions);
    return buf;
}
