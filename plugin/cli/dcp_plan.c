/*
 * dcp-plan: plans batches with every strategy asked for and reports what each plan costs -
 * bytes moved (and between nodes), the busiest rank's bytes, compute and memory imbalance,
 * communication phases, planning time (median) and the cost model's predicted attention
 * time - and beside it what the plan's backward program costs on the same placement (bytes
 * moved and between nodes, compute imbalance, predicted time). One table per mask (means
 * over the batches; imbalance is the worst batch), or JSON lines, one per (strategy, batch),
 * with the backward's figures as bwd_* fields. --svg draws the first batch's plan, --hgr writes its
 * hypergraph for external partitioners. Exit status: 0, 1 on a planning failure, 2 on bad
 * flags.
 */
#include "include/dcp.h"
#include "plugin/cli/common.h"
#include "plugin/cli/hgr.h"
#include "plugin/cli/report.h"
#include "plugin/cli/sim_report.h"
#include "plugin/cli/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tool = "dcp-plan";

typedef struct {
    int json, no_refine, per_batch, simulate;
    int64_t repeat, net_cap, coalesce;
    double eps_inter, eps_intra, sim_host_cores;
    const char *svg, *hgr, *expansion, *comm, *kernel_table, *dtype, *sim_kernels;
    dcpt_sim_t sim;
} plan_flags_t;

/* Per strategy, over the batches of one mask. */
typedef struct {
    double comm, inter, max_rank, predicted, phases;
    double bwd_comm, bwd_inter, bwd_predicted;
    double comp_imb, mem_imb, bwd_comp_imb; /* worst batch */
    int32_t fallbacks, n;
    double *plan_ms;
    int64_t n_ms;
    dcpt_sim_agg_t sim;
} agg_t;

static const dcp_col_t cols[] = {
    {"strategy", -8},    {"total(MB)", 10},   {"inter(MB)", 10},  {"x-zigzag", 8},
    {"maxrank(MB)", 11}, {"comp-imb(%)", 11}, {"mem-imb(%)", 10}, {"phases", 6},
    {"plan(ms)", 9},     {"pred(ms)", 9},     {"bwd(MB)", 9},     {"bwd-inter", 9},
    {"bwd-imb(%)", 10},  {"bwd-pred", 9},     {"fallback", 8},
};
#define NCOLS ((int)(sizeof cols / sizeof cols[0]))

static void read_kernel_table(const char *path, dcp_cluster_t *c)
{
    FILE *f = fopen(path, "r");
    if (!f) dcp_args_fail(tool, "kernel-table", "cannot open '%s'", path);
    double t[32], e[32];
    int n = 0;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n') continue;
        if (n == 32 || sscanf(line, "%lf %lf", &t[n], &e[n]) != 2)
            dcp_args_fail(tool, "kernel-table", "'%s': expected lines 'tile_tokens efficiency'",
                          path);
        n++;
    }
    fclose(f);
    if (dcp_cluster_set_kernel_table(c, n, t, e) != DCP_OK)
        dcp_args_fail(tool, "kernel-table", "%s", dcp_last_error());
}

static void apply_flags(const plan_flags_t *pf, dcp_common_t *c)
{
    if (!strcmp(pf->expansion, "clique"))
        c->opts.expansion = DCP_EXPAND_CLIQUE;
    else if (!strcmp(pf->expansion, "star"))
        c->opts.expansion = DCP_EXPAND_STAR;
    else
        dcp_args_fail(tool, "expansion", "'%s': clique or star", pf->expansion);
    if (!strcmp(pf->comm, "divisions"))
        c->opts.comm_schedule = DCP_COMM_DIVISIONS;
    else if (!strcmp(pf->comm, "rounds"))
        c->opts.comm_schedule = DCP_COMM_ROUNDS;
    else
        dcp_args_fail(tool, "comm-schedule", "'%s': divisions or rounds", pf->comm);
    c->shape.dtype = dcp_dtype_arg(tool, "dtype", pf->dtype);
    c->opts.net_cap = (int32_t)pf->net_cap;
    c->opts.refine = !pf->no_refine;
    c->opts.coalesce = (int32_t)pf->coalesce;
    c->opts.eps_inter = pf->eps_inter;
    c->opts.eps_intra = pf->eps_intra;
    if (pf->kernel_table) read_kernel_table(pf->kernel_table, c->cluster);
}

static void print_json(const char *mask, int32_t batch, const dcp_plan_stats_t *s, double plan_ms,
                       const dcp_common_t *c, const dcpt_sim_row_t *sim)
{
    dcp_json_t j;
    dcp_json_begin(&j, stdout);
    dcp_json_str(&j, "strategy", dcp_strategy_name(s->strategy));
    dcp_json_str(&j, "mask", mask);
    dcp_json_int(&j, "batch", batch);
    dcp_json_int(&j, "tokens", s->total_tokens);
    dcp_json_int(&j, "ranks", s->num_ranks);
    dcp_json_int(&j, "nodes", s->num_nodes);
    dcp_json_int(&j, "block", c->opts.block_size);
    dcp_json_int(&j, "comm_bytes", s->comm_bytes);
    dcp_json_int(&j, "inter_node_bytes", s->inter_node_bytes);
    dcp_json_int(&j, "max_rank_bytes", s->max_rank_bytes);
    dcp_json_num(&j, "compute_imbalance", s->compute_imbalance);
    dcp_json_num(&j, "memory_imbalance", s->memory_imbalance);
    dcp_json_int(&j, "phases", s->num_phases);
    dcp_json_int(&j, "divisions", s->num_divisions);
    dcp_json_int(&j, "comp_blocks", s->num_comp_blocks);
    dcp_json_int(&j, "flops", s->total_flops);
    dcp_json_bool(&j, "fallback", s->fallback);
    dcp_json_num(&j, "plan_ms", plan_ms);
    dcp_json_num(&j, "predicted_ms", s->predicted_ms);
    dcp_json_int(&j, "bwd_comm_bytes", s->bwd_comm_bytes);
    dcp_json_int(&j, "bwd_inter_node_bytes", s->bwd_inter_node_bytes);
    dcp_json_int(&j, "bwd_max_rank_bytes", s->bwd_max_rank_bytes);
    dcp_json_num(&j, "bwd_compute_imbalance", s->bwd_compute_imbalance);
    dcp_json_int(&j, "bwd_flops", s->bwd_flops);
    dcp_json_int(&j, "bwd_num_transfers", s->bwd_num_transfers);
    dcp_json_int(&j, "bwd_num_phases", s->bwd_num_phases);
    dcp_json_num(&j, "bwd_predicted_ms", s->bwd_predicted_ms);
    if (sim) dcpt_sim_json(&j, sim);
    dcp_json_end(&j);
}

static void progress(int64_t done, int64_t total, int32_t batch, dcp_strategy_t s)
{
    if (total < 8) return;
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r%s: %lld/%lld plans (batch %d, %s)   ", tool, (long long)done,
                (long long)total, batch, dcp_strategy_name(s));
        if (done == total) fputc('\n', stderr);
    } else if (done * 10 / total != (done - 1) * 10 / total) {
        fprintf(stderr, "%s: %lld/%lld plans\n", tool, (long long)done, (long long)total);
    }
}

/* Plans one batch with one strategy `repeat` times; keeps the last plan's statistics. */
static int plan_batch(const dcp_common_t *c, const dcp_mask_t *mask, int32_t b, dcp_strategy_t s,
                      const plan_flags_t *pf, const char *mask_name, agg_t *a)
{
    const int32_t first = c->batch_first[b], n = c->batch_first[b + 1] - first;
    dcp_mask_t *masks = calloc((size_t)n, sizeof *masks);
    for (int32_t i = 0; i < n; i++) masks[i] = *mask;
    const dcp_batch_t batch = {n, c->lengths + first, masks};
    dcp_plan_options_t o = c->opts;
    o.strategy = s;
    dcp_plan_stats_t st = {0};
    dcpt_sim_row_t sim;
    dcp_status_t rc = DCP_OK;
    for (int64_t k = 0; k < pf->repeat && rc == DCP_OK; k++) {
        dcp_plan_t *p = NULL;
        rc = dcp_plan_create(&batch, &c->shape, &o, c->cluster, &p);
        if (rc == DCP_OK) rc = dcp_plan_get_stats(p, &st);
        if (rc == DCP_OK) a->plan_ms[a->n_ms++] = st.plan_ms;
        if (rc == DCP_OK && k == 0 && pf->simulate) rc = dcpt_sim_plan(&pf->sim, p, &sim, &a->sim);
        if (rc == DCP_OK && k == 0 && b == 0 && pf->svg) {
            char path[1024], title[256];
            const char *dot = strrchr(pf->svg, '.');
            const int stem = dot ? (int)(dot - pf->svg) : (int)strlen(pf->svg);
            snprintf(path, sizeof path, "%.*s-%s-%s%s", stem, pf->svg, mask_name,
                     dcp_strategy_name(st.strategy), dot ? dot : ".svg");
            for (char *q = path + stem; *q; q++) *q = *q == ':' ? '_' : *q;
            snprintf(title, sizeof title,
                     "%s, %s: %d ranks, %lld tokens, %.1f MB moved (%.1f "
                     "between nodes), imbalance %.1f%% / %.1f%%",
                     dcp_strategy_name(st.strategy), mask_name, st.num_ranks,
                     (long long)st.total_tokens, st.comm_bytes / 1e6, st.inter_node_bytes / 1e6,
                     100 * st.compute_imbalance, 100 * st.memory_imbalance);
            rc = dcp_svg_write(p, path, title);
            if (rc == DCP_OK) fprintf(stderr, "%s: wrote %s\n", tool, path);
        }
        dcp_plan_destroy(p);
    }
    free(masks);
    if (rc != DCP_OK) {
        fprintf(stderr, "%s: batch %d, %s: %s: %s\n", tool, b, dcp_strategy_name(s),
                dcp_status_string(rc), dcp_last_error());
        return 1;
    }
    if (pf->json)
        print_json(mask_name, b, &st, a->plan_ms[a->n_ms - 1], c, pf->simulate ? &sim : NULL);
    a->comm += (double)st.comm_bytes;
    a->inter += (double)st.inter_node_bytes;
    a->max_rank += (double)st.max_rank_bytes;
    a->predicted += st.predicted_ms;
    a->phases += st.num_phases;
    a->bwd_comm += (double)st.bwd_comm_bytes;
    a->bwd_inter += (double)st.bwd_inter_node_bytes;
    a->bwd_predicted += st.bwd_predicted_ms;
    a->comp_imb = fmax(a->comp_imb, st.compute_imbalance);
    a->bwd_comp_imb = fmax(a->bwd_comp_imb, st.bwd_compute_imbalance);
    a->mem_imb = fmax(a->mem_imb, st.memory_imbalance);
    a->fallbacks += st.fallback;
    a->n++;
    return 0;
}

static void print_table(const dcp_common_t *c, agg_t *aggs, const plan_flags_t *pf)
{
    double zz = -1;
    for (int32_t i = 0; i < c->num_strategies; i++)
        if (c->strategies[i] == DCP_STRATEGY_ZIGZAG && aggs[i].n) zz = aggs[i].inter / aggs[i].n;
    dcp_table_header(stdout, cols, NCOLS);
    for (int32_t i = 0; i < c->num_strategies; i++) {
        agg_t *a = &aggs[i];
        if (!a->n) continue;
        char cell[NCOLS][32];
        snprintf(cell[0], 32, "%s", dcp_strategy_name(c->strategies[i]));
        snprintf(cell[1], 32, "%.1f", a->comm / a->n / 1e6);
        snprintf(cell[2], 32, "%.1f", a->inter / a->n / 1e6);
        if (zz > 0)
            snprintf(cell[3], 32, "%.3f", a->inter / a->n / zz);
        else
            snprintf(cell[3], 32, "-");
        snprintf(cell[4], 32, "%.1f", a->max_rank / a->n / 1e6);
        snprintf(cell[5], 32, "%.1f", 100 * a->comp_imb);
        snprintf(cell[6], 32, "%.1f", 100 * a->mem_imb);
        snprintf(cell[7], 32, "%.1f", a->phases / a->n);
        snprintf(cell[8], 32, "%.2f", dcp_median(a->plan_ms, a->n_ms));
        snprintf(cell[9], 32, "%.3f", a->predicted / a->n);
        snprintf(cell[10], 32, "%.1f", a->bwd_comm / a->n / 1e6);
        snprintf(cell[11], 32, "%.1f", a->bwd_inter / a->n / 1e6);
        snprintf(cell[12], 32, "%.1f", 100 * a->bwd_comp_imb);
        snprintf(cell[13], 32, "%.3f", a->bwd_predicted / a->n);
        snprintf(cell[14], 32, "%d/%d", a->fallbacks, a->n);
        dcp_table_row(stdout, cols, NCOLS, cell);
    }
    if (!pf->simulate) return;
    dcpt_sim_agg_t *sim = calloc((size_t)(uint32_t)c->num_strategies, sizeof *sim);
    for (int32_t i = 0; sim && i < c->num_strategies; i++) sim[i] = aggs[i].sim;
    printf("\nsimulated (means):\n");
    if (sim) dcpt_sim_table(stdout, c->strategies, sim, c->num_strategies);
    free(sim);
}

static void print_header(const dcp_common_t *c)
{
    int64_t tokens = 0, longest = 0;
    for (int32_t i = 0; i < c->batch_first[c->num_batches]; i++) {
        tokens += c->lengths[i];
        longest = c->lengths[i] > longest ? c->lengths[i] : longest;
    }
    const int32_t nr = dcp_cluster_num_ranks(c->cluster), nn = dcp_cluster_num_nodes(c->cluster);
    printf("# %s: %d ranks (%dx%d), %d batch(es), %lld tokens, %d sequences (longest %lld), "
           "heads %d/%d x %d %s, block %d, head blocks %d, divisions %d, %s, %s expansion\n",
           tool, nr, nn, nr / nn, c->num_batches, (long long)tokens, c->batch_first[c->num_batches],
           (long long)longest, c->shape.num_heads, c->shape.num_kv_heads, c->shape.head_dim,
           dcp_dtype_name(c->shape.dtype), c->opts.block_size, c->opts.head_blocks,
           c->opts.divisions, c->opts.comm_schedule == DCP_COMM_ROUNDS ? "rounds" : "divisions",
           c->opts.expansion == DCP_EXPAND_STAR ? "star" : "clique");
}

int main(int argc, char **argv)
{
    dcp_common_flags_t f;
    dcp_common_defaults(&f);
    f.tokens = 131072;
    f.block = 1024;
    f.heads = 8;
    f.kv_heads = 2;
    f.head_dim = 128;
    f.head_blocks = 2;
    f.strategy = "all";
    f.batches = 1;
    dcp_plan_options_t lib;
    dcp_plan_options_default(&lib);
    plan_flags_t pf = {.repeat = 1,
                       .net_cap = lib.net_cap,
                       .coalesce = lib.coalesce,
                       .eps_inter = lib.eps_inter,
                       .eps_intra = lib.eps_intra,
                       .expansion = "clique",
                       .comm = "divisions",
                       .dtype = "bf16"};
    enum { NOWN = 19 };
    dcp_arg_t args[DCP_COMMON_NARGS + NOWN];
    dcp_common_args(&f, args);
    const dcp_arg_t own[NOWN] = {
        {"batches", DCP_ARG_INT, &f.batches, 1, 100000,
         "batches packed from the lengths, DCP-style (1)", 0},
        {"scale", DCP_ARG_DOUBLE, &f.scale, 0, 0, "multiply every length (1)", 0},
        {"json", DCP_ARG_FLAG, &pf.json, 0, 0, "JSON lines, one per (strategy, batch)", 0},
        {"per-batch", DCP_ARG_FLAG, &pf.per_batch, 0, 0, "(with tables) one table per batch", 0},
        {"svg", DCP_ARG_STR, &pf.svg, 0, 0,
         "picture of the first batch's plans (FILE-mask-strategy.svg)", 0},
        {"hgr", DCP_ARG_STR, &pf.hgr, 0, 0, "the first batch's hypergraph in hMETIS format", 0},
        {"repeat", DCP_ARG_INT, &pf.repeat, 1, 1000,
         "plan each batch N times; plan ms is the median (1)", 0},
        {"expansion", DCP_ARG_STR, &pf.expansion, 0, 0, "METIS graph: clique or star (clique)", 0},
        {"net-cap", DCP_ARG_INT, &pf.net_cap, 0, 4096,
         "clique expansion band width, 0 = full cliques (12)", 0},
        {"no-refine", DCP_ARG_FLAG, &pf.no_refine, 0, 0, "skip METIS balance repair and refinement",
         0},
        {"eps-inter", DCP_ARG_DOUBLE, &pf.eps_inter, 0, 100, "METIS imbalance between nodes (0.05)",
         0},
        {"eps-intra", DCP_ARG_DOUBLE, &pf.eps_intra, 0, 100,
         "METIS imbalance between devices (0.05)", 0},
        {"comm-schedule", DCP_ARG_STR, &pf.comm, 0, 0, "divisions or rounds (divisions)", 0},
        {"coalesce", DCP_ARG_INT, &pf.coalesce, 1, 65536, "rounds issued together (1)", 0},
        {"kernel-table", DCP_ARG_STR, &pf.kernel_table, 0, 0,
         "lines 'tile_tokens efficiency' for the cost model", 0},
        {"dtype", DCP_ARG_STR, &pf.dtype, 0, 0, "bf16, fp16 or fp32 (bf16)", 0},
        {"simulate", DCP_ARG_FLAG, &pf.simulate, 0, 0,
         "step-time simulation of every plan (sim_* fields, a table per mask)", 0},
        {"sim-kernels", DCP_ARG_STR, &pf.sim_kernels, 0, 0,
         "simulator kernel table: dcp-kernel-bench --json file, h100 or a100 (by cluster peak)", 0},
        {"sim-host-cores", DCP_ARG_DOUBLE, &pf.sim_host_cores, 0, 4096,
         "simulate CPU ranks sharing N cores of one host (0: a GPU per rank)", 0},
    };
    memcpy(args + DCP_COMMON_NARGS, own, sizeof own);
    dcp_args_parse(argc, argv, args, DCP_COMMON_NARGS + NOWN, tool,
                   "Plans batches with each strategy and reports traffic, balance, planning time\n"
                   "and the cost model's predicted attention time, forward and backward.");
    dcp_common_t c;
    dcp_common_resolve(tool, &f, args, &c);
    apply_flags(&pf, &c);
    if (pf.simulate)
        dcpt_sim_setup(tool, pf.sim_kernels, c.cluster, c.shape.head_dim, pf.sim_host_cores,
                       &pf.sim);
    if (pf.hgr) {
        dcp_mask_t *masks = calloc((size_t)c.batch_first[1], sizeof *masks);
        for (int32_t i = 0; i < c.batch_first[1]; i++) masks[i] = c.masks[0];
        const dcp_batch_t batch = {c.batch_first[1], c.lengths, masks};
        const dcp_status_t st = dcp_hgr_write(&batch, &c.shape, &c.opts, pf.hgr);
        free(masks);
        if (st != DCP_OK) dcp_args_fail(tool, "hgr", "%s", dcp_last_error());
        fprintf(stderr, "%s: wrote %s\n", tool, pf.hgr);
    }
    if (!pf.json) print_header(&c);
    if (!pf.json && pf.simulate) dcpt_sim_header(stdout, &pf.sim);
    int failed = 0;
    const int64_t total = (int64_t)c.num_masks * c.num_strategies * c.num_batches;
    int64_t done = 0;
    agg_t *aggs = calloc((size_t)c.num_strategies, sizeof *aggs);
    for (int32_t m = 0; m < c.num_masks; m++) {
        for (int32_t s = 0; s < c.num_strategies; s++) {
            free(aggs[s].plan_ms);
            aggs[s] = (agg_t){0};
            aggs[s].plan_ms = calloc((size_t)(c.num_batches * pf.repeat), sizeof(double));
        }
        for (int32_t b = 0; b < c.num_batches; b++) {
            for (int32_t s = 0; s < c.num_strategies; s++) {
                failed |=
                    plan_batch(&c, &c.masks[m], b, c.strategies[s], &pf, c.mask_names[m], &aggs[s]);
                progress(++done, total, b, c.strategies[s]);
            }
            if (pf.per_batch && !pf.json) {
                printf("\nmask %s, batch %d\n", c.mask_names[m], b);
                print_table(&c, aggs, &pf);
                for (int32_t s = 0; s < c.num_strategies; s++) {
                    free(aggs[s].plan_ms);
                    aggs[s] = (agg_t){0};
                    aggs[s].plan_ms = calloc((size_t)(c.num_batches * pf.repeat), sizeof(double));
                }
            }
        }
        if (!pf.json && !pf.per_batch) {
            printf("\nmask %s (%d batches: means; imbalance: worst batch)\n", c.mask_names[m],
                   c.num_batches);
            print_table(&c, aggs, &pf);
        }
    }
    for (int32_t s = 0; s < c.num_strategies; s++) free(aggs[s].plan_ms);
    free(aggs);
    dcp_common_free(&c);
    return failed;
}
