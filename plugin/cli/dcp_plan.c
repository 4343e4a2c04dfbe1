/*
 * dcp-plan: plans batches with every strategy asked for and reports what each plan costs -
 * bytes moved (and between nodes), the busiest rank's bytes, compute and memory imbalance,
 * communication phases, planning time (median) and the cost model's predicted attention
 * time - and beside it what the plan's backward program costs on the same placement (bytes
 * moved and between nodes, compute imbalance, predicted time). One table per mask (means
 * over the batches; imbalance is the worst batch), or JSON lines, one per (strategy, batch),
 * with the backward's figures as bwd_* fields. --svg draws the first batch's plan; --hgr, --patoh
 * and --partition write its hypergraph and dcp's placement of it for external partitioners. Exit
 * status: 0, 1 on a planning failure, 2 on bad flags or a batch no strategy asked for can place
 * under --mem-cap.
 */
#include "include/dcp.h"
#include "plugin/cli/helpers/common.h"
#include "plugin/cli/support/bench.h"
#include "plugin/cli/helpers/peer_report.h"
#include "plugin/cli/helpers/plan_layers.h"
#include "plugin/cli/support/sim_kernels.h"
#include "plugin/cli/support/planner.h"
#include "plugin/cli/support/sim_report.h"
#include "plugin/cli/support/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tool = "dcp-plan";

typedef struct {
    int json, no_refine, per_batch, simulate, segments, compare, no_hierarchy;
    int64_t repeat, net_cap, coalesce, metis_tries, svg_rank;
    double eps_inter, eps_intra, sim_host_cores;
    const char *svg, *hgr, *patoh, *partition, *expansion, *comm, *kernel_table, *dtype,
        *sim_kernels, *kernels;
    dcpt_sim_t sim;
} plan_flags_t;

/* Per strategy, over the batches of one mask. */
typedef struct {
    double comm, inter, max_rank, predicted, phases;
    double bwd_comm, bwd_inter, bwd_predicted;
    double comp_imb, mem_imb, bwd_comp_imb; /* worst batch */
    int32_t fallbacks, n;
    double seg[2][DCP_ATTN_CLASSES]; /* --segments: allowed pairs per pass and class, all batches */
    double *plan_ms;
    int64_t n_ms;
    dcpt_sim_agg_t sim;
    dcpt_peer_batch_t *batch; /* [batches]: each batch's simulated step, for the peers table */
    int refused;              /* a peer policy that cannot run this batch (named on stderr) */
} agg_t;

/* One strategy's row of a table: means over the batches of one mask (imbalance: the worst
 * batch), planning time median [min-max] over every plan made. */
typedef struct {
    const char *strategy, *fallback;
    double comm, inter, x_zigzag, max_rank, comp_imb, mem_imb, phases, predicted;
    double bwd_comm, bwd_inter, bwd_comp_imb, bwd_predicted;
    dcpt_stats_t plan_ms;
    char fallback_buf[32];
} table_row_t;

#define T(head, width, fmt, member, by)                                                            \
    {                                                                                              \
        head, width, NULL, DCPT_F_NUM, fmt, offsetof(table_row_t, member), by                      \
    }
static const dcpt_field_t table_fields[] = {
    {"strategy", -8, NULL, DCPT_F_STR, NULL, offsetof(table_row_t, strategy), 0},
    T("total(MB)", 10, "%.1f", comm, 1e-6),
    T("inter(MB)", 10, "%.1f", inter, 1e-6),
    T("x-zigzag", 8, "%.3f", x_zigzag, 1),
    T("maxrank(MB)", 11, "%.1f", max_rank, 1e-6),
    T("comp-imb(%)", 11, "%.1f", comp_imb, 100),
    T("mem-imb(%)", 10, "%.1f", mem_imb, 100),
    T("phases", 6, "%.1f", phases, 1),
    {"plan(ms)", 9, NULL, DCPT_F_STATS, "%.2f", offsetof(table_row_t, plan_ms), 0},
    T("pred(ms)", 9, "%.3f", predicted, 1),
    T("bwd(MB)", 9, "%.1f", bwd_comm, 1e-6),
    T("bwd-inter", 9, "%.1f", bwd_inter, 1e-6),
    T("bwd-imb(%)", 10, "%.1f", bwd_comp_imb, 100),
    T("bwd-pred", 9, "%.3f", bwd_predicted, 1),
    {"fallback", 8, NULL, DCPT_F_STR, NULL, offsetof(table_row_t, fallback), 0},
};
#undef T
#define NTABLE ((int)(sizeof table_fields / sizeof table_fields[0]))

/* One (strategy, batch) plan as a JSON line: the strategy asked for, the placement returned
 * (metis may return zigzag's plan), the plan's statistics and its planning time. */
typedef struct {
    const char *strategy, *placement, *mask;
    int32_t batch, block;
    dcpt_stats_t plan_ms;
    dcp_plan_stats_t s;
    double seg[2][DCP_ATTN_CLASSES]; /* --segments: each pass's share of pairs per class, else NaN */
} json_row_t;

#define J(key, kind, member)                                                                       \
    {                                                                                              \
        NULL, 0, key, kind, NULL, offsetof(json_row_t, member), 0                                  \
    }
static const dcpt_field_t json_fields[] = {
    J("strategy", DCPT_F_STR, strategy),
    J("placement", DCPT_F_STR, placement),
    J("mask", DCPT_F_STR, mask),
    J("batch", DCPT_F_I32, batch),
    J("tokens", DCPT_F_INT, s.total_tokens),
    J("ranks", DCPT_F_I32, s.num_ranks),
    J("nodes", DCPT_F_I32, s.num_nodes),
    J("block", DCPT_F_I32, block),
    J("comm_bytes", DCPT_F_INT, s.comm_bytes),
    J("inter_node_bytes", DCPT_F_INT, s.inter_node_bytes),
    J("max_rank_bytes", DCPT_F_INT, s.max_rank_bytes),
    J("compute_imbalance", DCPT_F_NUM, s.compute_imbalance),
    J("memory_imbalance", DCPT_F_NUM, s.memory_imbalance),
    J("max_buffer_bytes", DCPT_F_INT, s.max_buffer_bytes),
    J("phases", DCPT_F_I32, s.num_phases),
    J("divisions", DCPT_F_I32, s.num_divisions),
    J("comp_blocks", DCPT_F_INT, s.num_comp_blocks),
    J("flops", DCPT_F_INT, s.total_flops),
    J("fallback", DCPT_F_BOOL, s.fallback),
    J("plan_ms", DCPT_F_STATS, plan_ms),
    J("predicted_ms", DCPT_F_NUM, s.predicted_ms),
    J("bwd_comm_bytes", DCPT_F_INT, s.bwd_comm_bytes),
    J("bwd_inter_node_bytes", DCPT_F_INT, s.bwd_inter_node_bytes),
    J("bwd_max_rank_bytes", DCPT_F_INT, s.bwd_max_rank_bytes),
    J("bwd_compute_imbalance", DCPT_F_NUM, s.bwd_compute_imbalance),
    J("bwd_flops", DCPT_F_INT, s.bwd_flops),
    J("bwd_num_transfers", DCPT_F_I32, s.bwd_num_transfers),
    J("bwd_num_phases", DCPT_F_I32, s.bwd_num_phases),
    J("bwd_predicted_ms", DCPT_F_NUM, s.bwd_predicted_ms),
    J("seg_full", DCPT_F_NUM, seg[0][DCP_ATTN_CLASS_FULL]),
    J("seg_causal", DCPT_F_NUM, seg[0][DCP_ATTN_CLASS_CAUSAL]),
    J("seg_band", DCPT_F_NUM, seg[0][DCP_ATTN_CLASS_BAND]),
    J("seg_left", DCPT_F_NUM, seg[0][DCP_ATTN_CLASS_LEFT]),
    J("seg_masked", DCPT_F_NUM, seg[0][DCP_ATTN_CLASS_MASKED]),
    J("bwd_seg_full", DCPT_F_NUM, seg[1][DCP_ATTN_CLASS_FULL]),
    J("bwd_seg_causal", DCPT_F_NUM, seg[1][DCP_ATTN_CLASS_CAUSAL]),
    J("bwd_seg_band", DCPT_F_NUM, seg[1][DCP_ATTN_CLASS_BAND]),
    J("bwd_seg_left", DCPT_F_NUM, seg[1][DCP_ATTN_CLASS_LEFT]),
    J("bwd_seg_masked", DCPT_F_NUM, seg[1][DCP_ATTN_CLASS_MASKED]),
};
#undef J
#define NJSON ((int)(sizeof json_fields / sizeof json_fields[0]))

static void apply_flags(const plan_flags_t *pf, dcpt_common_t *c)
{
    if (!strcmp(pf->expansion, "clique"))
        c->opts.expansion = DCP_EXPAND_CLIQUE;
    else if (!strcmp(pf->expansion, "star"))
        c->opts.expansion = DCP_EXPAND_STAR;
    else
        dcpt_args_fail(tool, "expansion", "'%s': clique or star", pf->expansion);
    if (!strcmp(pf->comm, "divisions"))
        c->opts.comm_schedule = DCP_COMM_DIVISIONS;
    else if (!strcmp(pf->comm, "rounds"))
        c->opts.comm_schedule = DCP_COMM_ROUNDS;
    else
        dcpt_args_fail(tool, "comm-schedule", "'%s': divisions or rounds", pf->comm);
    c->shape.dtype = dcpt_dtype_arg(tool, "dtype", pf->dtype);
    c->opts.net_cap = (int32_t)pf->net_cap;
    c->opts.refine = !pf->no_refine;
    c->opts.hierarchy = !pf->no_hierarchy;
    c->opts.coalesce = (int32_t)pf->coalesce;
    c->opts.metis_tries = (int32_t)pf->metis_tries;
    c->opts.eps_inter = pf->eps_inter;
    c->opts.eps_intra = pf->eps_intra;
    if (pf->kernel_table && dcp_cluster_load_kernel_table(c->cluster, pf->kernel_table) != DCP_OK)
        dcpt_args_fail(tool, "kernel-table", "%s", dcp_last_error());
}

static void progress(int64_t done, int64_t total, int32_t batch, const char *s)
{
    if (total < 8) return;
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\r%s: %lld/%lld plans (batch %d, %s)   ", tool, (long long)done,
                (long long)total, batch, s);
        if (done == total) fputc('\n', stderr);
    } else if (done * 10 / total != (done - 1) * 10 / total) {
        fprintf(stderr, "%s: %lld/%lld plans\n", tool, (long long)done, (long long)total);
    }
}

/* The simulation's members of a JSON row (sim_* fields). */
static void sim_json(dcpt_json_t *j, const void *sim)
{
    dcpt_sim_json(j, (const dcpt_sim_row_t *)sim);
}

/* FILE-mask-strategy<suffix>.svg from --svg FILE, named by the strategy asked for (a metis
 * request that returned zigzag's plan is the metis file; ':' in the mask spec becomes '_'). */
static void svg_name(const plan_flags_t *pf, const char *mask_name, const char *asked,
                     const char *suffix, char *path, size_t size)
{
    const char *dot = strrchr(pf->svg, '.');
    const int stem = dot ? (int)(dot - pf->svg) : (int)strlen(pf->svg);
    snprintf(path, size, "%.*s-%s-%s%s%s", stem, pf->svg, mask_name, asked, suffix,
             dot ? dot : ".svg");
    for (char *q = path + stem; *q; q++) *q = *q == ':' ? '_' : *q;
}

/* Plans one batch with one strategy `repeat` times; keeps the last plan's statistics. */
static int plan_batch(const dcpt_common_t *c, const dcp_mask_t *mask, int32_t b, int32_t si,
                      const plan_flags_t *pf, const char *mask_name, agg_t *a)
{
    const char *label = c->strategy_labels[si];
    const int32_t first = c->batch_first[b], n = c->batch_first[b + 1] - first;
    dcp_mask_t *masks = calloc((size_t)n, sizeof *masks);
    for (int32_t i = 0; i < n; i++) masks[i] = *mask;
    const dcp_batch_t batch = {.num_seqs = n, .lengths = c->lengths + first, .masks = masks};
    dcp_plan_options_t o = c->opts;
    dcpt_common_strategy(c, si, &o);
    dcp_plan_stats_t st = {0};
    dcpt_sim_row_t sim;
    dcp_status_t rc = DCP_OK;
    double seg[2][DCP_ATTN_CLASSES] = {{0}};
    for (int64_t k = 0; k < pf->repeat && rc == DCP_OK; k++) {
        dcp_plan_t *p = NULL;
        rc = dcp_plan_create(&batch, &c->shape, &o, c->cluster, &p);
        if (rc == DCP_OK) rc = dcp_plan_get_stats(p, &st);
        if (rc == DCP_OK) a->plan_ms[a->n_ms++] = st.plan_ms;
        const int draw = rc == DCP_OK && k == 0 && b == 0 && pf->svg;
        if (rc == DCP_OK && k == 0 && pf->simulate) {
            char path[1024] = "", title[256];
            if (draw) svg_name(pf, mask_name, label, "-timeline", path, sizeof path);
            snprintf(title, sizeof title, "%s, %s: %d ranks, %lld tokens, simulated",
                     dcp_strategy_name(st.strategy), mask_name, st.num_ranks,
                     (long long)st.total_tokens);
            rc = dcpt_sim_plan(&pf->sim, p, draw ? path : NULL, (int32_t)pf->svg_rank, title, &sim,
                               &a->sim);
            if (rc == DCP_OK && draw) fprintf(stderr, "%s: wrote %s\n", tool, path);
        }
        if (rc == DCP_OK && k == 0 && pf->segments) {
            int64_t pairs[2][DCP_ATTN_CLASSES];
            rc = dcp_plan_attn_pairs(p, 64, pairs);
            for (int pass = 0; rc == DCP_OK && pass < 2; pass++)
                for (int k2 = 0; k2 < DCP_ATTN_CLASSES; k2++)
                    seg[pass][k2] += (double)pairs[pass][k2];
        }
        if (draw && rc == DCP_OK) {
            char path[1024], title[256];
            svg_name(pf, mask_name, label, "", path, sizeof path);
            snprintf(title, sizeof title,
                     "%s, %s: %d ranks, %lld tokens, %.1f MB moved (%.1f "
                     "between nodes), imbalance %.1f%% / %.1f%%",
                     dcp_strategy_name(st.strategy), mask_name, st.num_ranks,
                     (long long)st.total_tokens, st.comm_bytes / 1e6, st.inter_node_bytes / 1e6,
                     100 * st.compute_imbalance, 100 * st.memory_imbalance);
            rc = dcpt_svg_write(p, path, title);
            if (rc == DCP_OK) fprintf(stderr, "%s: wrote %s\n", tool, path);
        }
        dcp_plan_destroy(p);
    }
    free(masks);
    if (rc == DCP_ERR_INVALID_ARG && o.strategy >= DCP_STRATEGY_PACKED && !a->refused) {
        /* a peer policy that cannot run this shape or cluster: the others still compare */
        fprintf(stderr, "%s: %s refused: %s\n", tool, label, dcp_last_error());
        a->refused = 1;
        return 0;
    }
    if (rc == DCP_ERR_INVALID_ARG && a->refused) return 0;
    if (rc == DCP_ERR_CAPACITY) { /* the configuration asks for the impossible: exit 2 */
        fprintf(stderr,
                "%s: batch %d, strategy %s cannot be planned as configured (--mem-cap, --block, "
                "--ranks): %s\n",
                tool, b, label, dcp_last_error());
        return 2;
    }
    if (rc != DCP_OK) {
        fprintf(stderr, "%s: batch %d, %s: %s: %s\n", tool, b, label, dcp_status_string(rc),
                dcp_last_error());
        return 1;
    }
    if (pf->json) {
        json_row_t row = {label,
                          dcp_strategy_name(st.strategy),
                          mask_name,
                          b,
                          c->opts.block_size,
                          dcpt_stats(a->plan_ms + a->n_ms - pf->repeat, pf->repeat),
                          st,
                          {{0}}};
        for (int pass = 0; pass < 2; pass++) {
            double all = 0;
            for (int k = 0; k < DCP_ATTN_CLASSES; k++) all += seg[pass][k];
            for (int k = 0; k < DCP_ATTN_CLASSES; k++)
                row.seg[pass][k] = pf->segments && all > 0 ? seg[pass][k] / all : NAN;
        }
        dcpt_report_row(stdout, 1, json_fields, NJSON, &row, pf->simulate ? sim_json : NULL, &sim);
    }
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
    if (pf->simulate)
        a->batch[b] =
            (dcpt_peer_batch_t){1, sim.fwd_ms + sim.bwd_ms, sim.exposed_comm_ms, st.plan_ms};
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < DCP_ATTN_CLASSES; k++) a->seg[pass][k] += seg[pass][k];
    a->n++;
    return 0;
}

/* A fresh aggregate for `batches` batches planned `repeat` times (0, 0: only freed). */
static void agg_reset(agg_t *a, int32_t batches, int64_t repeat)
{
    free(a->plan_ms);
    free(a->batch);
    *a = (agg_t){0};
    if (!batches) return;
    a->plan_ms = calloc((size_t)(batches * repeat), sizeof(double));
    a->batch = calloc((size_t)batches, sizeof *a->batch);
    if (!a->plan_ms || !a->batch) {
        fprintf(stderr, "%s: out of memory\n", tool);
        exit(1);
    }
}

static void print_table(const dcpt_common_t *c, agg_t *aggs, const plan_flags_t *pf,
                        int32_t batches)
{
    double zz = -1;
    for (int32_t i = 0; i < c->num_strategies; i++)
        if (c->strategies[i] == DCP_STRATEGY_ZIGZAG && aggs[i].n) zz = aggs[i].inter / aggs[i].n;
    dcpt_report_header(stdout, table_fields, NTABLE);
    for (int32_t i = 0; i < c->num_strategies; i++) {
        agg_t *a = &aggs[i];
        if (!a->n) continue;
        table_row_t r = {
            .strategy = c->strategy_labels[i],
            .comm = a->comm / a->n,
            .inter = a->inter / a->n,
            .x_zigzag = zz > 0 ? a->inter / a->n / zz : NAN,
            .max_rank = a->max_rank / a->n,
            .comp_imb = a->comp_imb,
            .mem_imb = a->mem_imb,
            .phases = a->phases / a->n,
            .predicted = a->predicted / a->n,
            .bwd_comm = a->bwd_comm / a->n,
            .bwd_inter = a->bwd_inter / a->n,
            .bwd_comp_imb = a->bwd_comp_imb,
            .bwd_predicted = a->bwd_predicted / a->n,
            .plan_ms = dcpt_stats(a->plan_ms, a->n_ms),
        };
        snprintf(r.fallback_buf, sizeof r.fallback_buf, "%d/%d", a->fallbacks, a->n);
        r.fallback = r.fallback_buf;
        dcpt_report_row(stdout, 0, table_fields, NTABLE, &r, NULL, NULL);
    }
    if (pf->segments) {
        printf("\nsegments (share of the allowed pairs per class; dense runs of 64 rows or "
               "more):\n");
        printf("%-8s %-4s %8s %9s %8s %8s %9s\n", "strategy", "pass", "full(%)", "causal(%)",
               "band(%)", "left(%)", "masked(%)");
        for (int32_t i = 0; i < c->num_strategies; i++)
            for (int pass = 0; pass < 2; pass++) {
                const agg_t *a = &aggs[i];
                double all = 0;
                for (int k = 0; k < DCP_ATTN_CLASSES; k++) all += a->seg[pass][k];
                if (!a->n || !(all > 0)) continue;
                printf("%-8s %-4s %8.1f %9.1f %8.1f %8.1f %9.1f\n",
                       c->strategy_labels[i], pass ? "bwd" : "fwd",
                       100 * a->seg[pass][0] / all, 100 * a->seg[pass][1] / all,
                       100 * a->seg[pass][2] / all, 100 * a->seg[pass][3] / all,
                       100 * a->seg[pass][4] / all);
            }
    }
    if (!pf->simulate) return;
    dcpt_sim_agg_t *sim = calloc((size_t)(uint32_t)c->num_strategies, sizeof *sim);
    for (int32_t i = 0; sim && i < c->num_strategies; i++) sim[i] = aggs[i].sim;
    printf("\nsimulated (means):\n");
    const char *const *labels = (const char *const *)c->strategy_labels;
    if (sim) dcpt_sim_table(stdout, c->strategies, labels, sim, c->num_strategies);
    printf("\nwhere the simulated time goes (means, ms; exposed: the slowest rank's, path: the "
           "critical path's):\n");
    if (sim) dcpt_sim_explain_table(stdout, labels, sim, c->num_strategies);
    free(sim);
    int32_t def = -1;
    for (int32_t i = 0; i < c->num_strategies && def < 0; i++)
        if (c->strategies[i] == DCP_STRATEGY_METIS) def = i;
    if (def < 0 || c->num_strategies < 2) return;
    const dcpt_peer_batch_t **rows = calloc((size_t)c->num_strategies, sizeof *rows);
    for (int32_t i = 0; rows && i < c->num_strategies; i++) rows[i] = aggs[i].batch;
    printf("\nagainst the default (metis), batch by batch (x-default: the policy's simulated step "
           "over the default's, geometric mean [worst batch]; exposed: communication the "
           "slowest rank waits for, share of its step):\n");
    if (rows) dcpt_peer_table(stdout, labels, rows, c->num_strategies, def, batches);
    free(rows);
}

static void print_header(const dcpt_common_t *c, int64_t repeat)
{
    int64_t tokens = 0, longest = 0;
    for (int32_t i = 0; i < c->batch_first[c->num_batches]; i++) {
        tokens += c->lengths[i];
        longest = c->lengths[i] > longest ? c->lengths[i] : longest;
    }
    const int32_t nr = dcp_cluster_num_ranks(c->cluster), nn = dcp_cluster_num_nodes(c->cluster);
    double inter_gbps;
    int32_t nics;
    dcpt_cluster_network(c->cluster, &inter_gbps, &nics);
    const dcpt_bench_t b = {tool, 0, 0, repeat, table_fields, NTABLE};
    char divs[16];
    dcpt_bench_header(
        &b,
        "%d ranks (%dx%d), network %.4g GB/s per device (%d NICs per node), %d batch(es), "
        "%lld tokens, %d sequences (longest %lld), heads %d/%d x %d %s, block %d, head blocks "
        "%d, divisions %s, %s, %s expansion; plan(ms): each batch planned --repeat times",
        nr, nn, nr / nn, inter_gbps, nics, c->num_batches, (long long)tokens,
        c->batch_first[c->num_batches], (long long)longest, c->shape.num_heads,
        c->shape.num_kv_heads, c->shape.head_dim, dcpt_dtype_name(c->shape.dtype),
        c->opts.block_size, c->opts.head_blocks, dcpt_divisions_name(c->opts.divisions, divs),
        c->opts.comm_schedule == DCP_COMM_ROUNDS ? "rounds" : "divisions",
        c->opts.expansion == DCP_EXPAND_STAR ? "star" : "clique");
}

/* The exports describe one plan, as the planner returns it: METIS's when it is among the
 * strategies asked for (the try kept, or zigzag's plan where the planner kept that), else
 * the first strategy's. */
static void export_first_batch(const dcpt_common_t *c, const plan_flags_t *pf)
{
    dcp_plan_options_t o = c->opts;
    o.strategy = c->strategies[0];
    for (int32_t s = 0; s < c->num_strategies; s++)
        if (c->strategies[s] == DCP_STRATEGY_METIS) o.strategy = DCP_STRATEGY_METIS;
    dcp_mask_t *masks = calloc((size_t)c->batch_first[1], sizeof *masks);
    for (int32_t i = 0; i < c->batch_first[1]; i++) masks[i] = c->masks[0];
    const dcp_batch_t batch = {
        .num_seqs = c->batch_first[1], .lengths = c->lengths, .masks = masks};
    dcp_plan_options_t placed;
    const dcp_status_t st = dcpt_export_write(&batch, &c->shape, &o, c->cluster, pf->hgr, pf->patoh,
                                              pf->partition, &placed);
    free(masks);
    const char *const path[3] = {pf->hgr, pf->patoh, pf->partition};
    if (st != DCP_OK) { /* the flag of the file the error names, else the first given */
        static const char *const flag[3] = {"hgr", "patoh", "partition"};
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (path[i] && (k < 0 || strstr(dcp_last_error(), path[i]))) k = i;
        dcpt_args_fail(tool, flag[k], "%s", dcp_last_error());
    }
    for (int k = 0; k < 3; k++)
        if (path[k])
            fprintf(stderr, "%s: wrote %s (%s: the plan returned, %s placement, seed %llu)\n", tool,
                    path[k], dcp_strategy_name(o.strategy), dcp_strategy_name(placed.strategy),
                    (unsigned long long)placed.seed);
}

int main(int argc, char **argv)
{
    dcpt_common_flags_t f;
    dcpt_common_defaults(&f);
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
                       .svg_rank = -1,
                       .net_cap = lib.net_cap,
                       .coalesce = lib.coalesce,
                       .metis_tries = lib.metis_tries,
                       .eps_inter = lib.eps_inter,
                       .eps_intra = lib.eps_intra,
                       .expansion = "clique",
                       .comm = "divisions",
                       .dtype = "bf16"};
    enum { NOWN = 27 };
    dcpt_arg_t args[DCPT_COMMON_NARGS + NOWN];
    dcpt_common_args(&f, args);
    const dcpt_arg_t own[NOWN] = {
        {"batches", DCPT_ARG_INT, &f.batches, 1, 100000,
         "batches packed from the lengths, DCP-style", 0},
        {"scale", DCPT_ARG_DOUBLE, &f.scale, 0, 0, "multiply every length", 0},
        {"json", DCPT_ARG_FLAG, &pf.json, 0, 0, "JSON lines, one per (strategy, batch)", 0},
        {"per-batch", DCPT_ARG_FLAG, &pf.per_batch, 0, 0, "(with tables) one table per batch", 0},
        {"svg", DCPT_ARG_STR, &pf.svg, 0, 0,
         "picture of the first batch's plans (FILE-mask-strategy.svg)", 0},
        {"hgr", DCPT_ARG_STR, &pf.hgr, 0, 0,
         "the first batch's hypergraph in hMETIS format (vertex weight: FLOPs)", 0},
        {"patoh", DCPT_ARG_STR, &pf.patoh, 0, 0,
         "the same hypergraph in PaToH format (two weights: FLOPs, bytes)", 0},
        {"partition", DCPT_ARG_STR, &pf.partition, 0, 0,
         "dcp's placement of that hypergraph, one rank per vertex line", 0},
        {"repeat", DCPT_ARG_INT, &pf.repeat, 1, 1000,
         "plan each batch N times; plan ms is the median", 0},
        {"expansion", DCPT_ARG_STR, &pf.expansion, 0, 0, "METIS graph: clique or star", 0},
        {"net-cap", DCPT_ARG_INT, &pf.net_cap, 0, 4096,
         "clique expansion band width, 0 = full cliques", 0},
        {"metis-tries", DCPT_ARG_INT, &pf.metis_tries, 1, 64,
         "METIS placements tried (seeds); the plan predicted fastest is kept", 0},
        {"no-refine", DCPT_ARG_FLAG, &pf.no_refine, 0, 0,
         "skip METIS balance repair and refinement", 0},
        {"no-hierarchy", DCPT_ARG_FLAG, &pf.no_hierarchy, 0, 0,
         "METIS's global plan only: no hierarchical candidates (options.hierarchy = 0)", 0},
        {"eps-inter", DCPT_ARG_DOUBLE, &pf.eps_inter, 0, 100, "METIS imbalance between nodes", 0},
        {"eps-intra", DCPT_ARG_DOUBLE, &pf.eps_intra, 0, 100, "METIS imbalance between devices", 0},
        {"comm-schedule", DCPT_ARG_STR, &pf.comm, 0, 0, "divisions or rounds", 0},
        {"coalesce", DCPT_ARG_INT, &pf.coalesce, 1, 65536, "rounds issued together", 0},
        {"kernel-table", DCPT_ARG_STR, &pf.kernel_table, 0, 0,
         "lines 'tile_tokens efficiency' for the cost model", 0},
        {"dtype", DCPT_ARG_STR, &pf.dtype, 0, 0, "bf16, fp16 or fp32", 0},
        {"segments", DCPT_ARG_FLAG, &pf.segments, 0, 0,
         "the share of the forward's pairs in full, causal and masked segments", 0},
        {"simulate", DCPT_ARG_FLAG, &pf.simulate, 0, 0,
         "step-time simulation of every plan (sim_* fields, a table per mask)", 0},
        {"sim-kernels", DCPT_ARG_STR, &pf.sim_kernels, 0, 0,
         "simulator kernel table: dcp-kernel-bench --json file, h100 or a100 (default: by "
         "cluster peak)",
         0},
        {"kernels", DCPT_ARG_STR, &pf.kernels, 0, 0,
         "kernel table of the planner's cost model and of --simulate: h100, a100, h100-dcp, "
         "h100-cudnn or a dcp-kernel-bench --json file",
         0},
        {"sim-host-cores", DCPT_ARG_DOUBLE, &pf.sim_host_cores, 0, 4096,
         "simulate CPU ranks sharing N cores of one host (0: a GPU per rank)", 0},
        {"compare", DCPT_ARG_FLAG, &pf.compare, 0, 0,
         "with --layers: beside the joint plan, each kind's own placement for every kind, and "
         "a placement per kind with all-to-all re-layouts between kinds",
         0},
        {"svg-rank", DCPT_ARG_INT, &pf.svg_rank, -1, 1 << 20,
         "with --svg and --simulate: the rank whose timeline is drawn (-1: the backward's "
         "slowest)",
         0},
    };
    memcpy(args + DCPT_COMMON_NARGS, own, sizeof own);
    dcpt_args_parse(argc, argv, args, DCPT_COMMON_NARGS + NOWN, tool,
                    "Plans batches with each strategy and reports traffic, balance, planning time\n"
                    "and the cost model's predicted attention time, forward and backward.");
    const int nargs = DCPT_COMMON_NARGS + NOWN;
    if (f.seqlens && dcpt_args_seen(args, nargs, "batches"))
        dcpt_args_fail(tool, "batches", "packs sampled lengths; --seqlens gives them");
    static const char *const sim_only[2] = {"sim-kernels", "sim-host-cores"};
    for (int k = 0; k < 2; k++)
        if (!pf.simulate && dcpt_args_seen(args, nargs, sim_only[k]))
            dcpt_args_fail(tool, sim_only[k], "sets the simulator up: add --simulate");
    if (pf.kernels) /* one table for both: the two that set one each are refused beside it */
        for (int k = 0; k < 2; k++) {
            static const char *const one[2] = {"kernel-table", "sim-kernels"};
            if (dcpt_args_seen(args, nargs, one[k]))
                dcpt_args_fail(tool, one[k], "not with --kernels (it sets both tables)");
        }
    dcpt_common_t c;
    dcpt_common_resolve(tool, &f, args, &c);
    apply_flags(&pf, &c);
    if (pf.kernels) {
        dcp_sim_kernels_t k;
        if (dcpt_kernels_load(pf.kernels, c.shape.head_dim, &k) != DCP_OK ||
            dcpt_kernels_to_cluster(&k, c.cluster) != DCP_OK)
            dcpt_args_fail(tool, "kernels", "%s", dcp_last_error());
        pf.sim_kernels = pf.kernels;
    }
    if (pf.svg) dcpt_args_writable(tool, "svg", pf.svg); /* before any planning */
    const char *sim_flag = NULL;
    if (pf.simulate && dcpt_sim_setup(pf.sim_kernels, c.cluster, c.shape.head_dim,
                                      pf.sim_host_cores, &pf.sim, &sim_flag) != DCP_OK)
        dcpt_args_fail(tool, sim_flag, "%s", dcp_last_error());
    if (c.num_kinds) { /* one joint plan per batch: its rows, not these outputs */
        const char *alone = pf.hgr         ? "hgr"
                            : pf.patoh     ? "patoh"
                            : pf.partition ? "partition"
                            : pf.per_batch ? "per-batch"
                                           : NULL;
        if (alone) dcpt_args_fail(tool, alone, "not with --layers");
    }
    if (pf.hgr || pf.patoh || pf.partition) export_first_batch(&c, &pf);
    if (!pf.json) print_header(&c, pf.repeat);
    if (!pf.json && pf.simulate) dcpt_sim_header(stdout, &pf.sim);
    if (pf.compare && !c.num_kinds) dcpt_args_fail(tool, "compare", "needs --layers");
    if (c.num_kinds) {
        const dcpt_layers_flags_t lf = {pf.json,   pf.compare, pf.simulate,
                                        pf.repeat, pf.svg,     &pf.sim};
        const int rc = dcpt_plan_layers(tool, &c, &lf);
        dcpt_common_free(&c);
        return rc;
    }
    int failed = 0;
    const int64_t total = (int64_t)c.num_masks * c.num_strategies * c.num_batches;
    int64_t done = 0;
    agg_t *aggs = calloc((size_t)c.num_strategies, sizeof *aggs);
    for (int32_t m = 0; m < c.num_masks; m++) {
        for (int32_t s = 0; s < c.num_strategies; s++)
            agg_reset(&aggs[s], c.num_batches, pf.repeat);
        for (int32_t b = 0; b < c.num_batches; b++) {
            for (int32_t s = 0; s < c.num_strategies; s++) {
                const int rc = plan_batch(&c, &c.masks[m], b, s, &pf, c.mask_names[m], &aggs[s]);
                failed = rc > failed ? rc : failed;
                progress(++done, total, b, c.strategy_labels[s]);
            }
            if (pf.per_batch && !pf.json) {
                printf("\nmask %s, batch %d\n", c.mask_names[m], b);
                print_table(&c, aggs, &pf, c.num_batches);
                for (int32_t s = 0; s < c.num_strategies; s++)
                    agg_reset(&aggs[s], c.num_batches, pf.repeat);
            }
        }
        if (!pf.json && !pf.per_batch) {
            printf("\nmask %s (%d batches: means; imbalance: worst batch)\n", c.mask_names[m],
                   c.num_batches);
            print_table(&c, aggs, &pf, c.num_batches);
        }
    }
    for (int32_t s = 0; s < c.num_strategies; s++) agg_reset(&aggs[s], 0, 0);
    free(aggs);
    dcpt_common_free(&c);
    return failed;
}
