/*
 * dcp-attn-test: plans a batch, runs the forward pass on in-process ranks, and (with
 * --check) compares O and LSE with the double-precision single-device reference. One table
 * per mask, one row per strategy; --json prints one JSON object per (mask, strategy).
 * Exit status: 0 all good, 1 a check failed or a run failed, 2 bad flags.
 */
#include "include/dcp.h"
#include "plugin/cli/common.h"
#include "plugin/cli/harness.h"
#include "plugin/cli/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *tool = "dcp-attn-test";

typedef struct {
    int check, json;
    int64_t warmup, iters, threads;
    double timeout, tol;
} run_flags_t;

static const dcp_col_t cols[] = {
    {"strategy", -8},    {"comm(MB)", 9},     {"inter(MB)", 9}, {"maxrank(MB)", 11},
    {"comp-imb(%)", 11}, {"mem-imb(%)", 10},  {"plan(ms)", 9},  {"exec(ms)", 9},
    {"GFLOP/s", 8},      {"max-rel-err", 11}, {"check", 5},
};
#define NCOLS ((int)(sizeof cols / sizeof cols[0]))

static void print_header(const dcp_common_t *c, const dcp_harness_t *h)
{
    int32_t longest = 0;
    for (int32_t s = 0; s < h->num_seqs; s++)
        longest = h->lengths[s] > longest ? h->lengths[s] : longest;
    printf("# %s: %d ranks (%dx%d), %lld tokens in %d sequences (longest %d), heads %d/%d x %d, "
           "fp32 cpu, block %d, head blocks %d, divisions %d\n",
           tool, dcp_cluster_num_ranks(c->cluster), dcp_cluster_num_nodes(c->cluster),
           dcp_cluster_num_ranks(c->cluster) / dcp_cluster_num_nodes(c->cluster),
           (long long)h->tokens, h->num_seqs, longest, c->shape.num_heads, c->shape.num_kv_heads,
           c->shape.head_dim, c->opts.block_size, c->opts.head_blocks, c->opts.divisions);
}

static void print_row(const char *strategy, const dcp_plan_stats_t *ps,
                      const dcp_harness_result_t *r, const run_flags_t *rf)
{
    char cell[NCOLS][32];
    snprintf(cell[0], 32, "%s", strategy);
    snprintf(cell[1], 32, "%.2f", ps->comm_bytes / 1e6);
    snprintf(cell[2], 32, "%.2f", ps->inter_node_bytes / 1e6);
    snprintf(cell[3], 32, "%.2f", ps->max_rank_bytes / 1e6);
    snprintf(cell[4], 32, "%.1f", 100 * ps->compute_imbalance);
    snprintf(cell[5], 32, "%.1f", 100 * ps->memory_imbalance);
    snprintf(cell[6], 32, "%.2f", ps->plan_ms);
    snprintf(cell[7], 32, "%.1f", r->exec_ms);
    snprintf(cell[8], 32, "%.2f", r->exec_ms > 0 ? ps->total_flops / (r->exec_ms * 1e6) : 0.0);
    snprintf(cell[9], 32, rf->check ? "%.2e" : "-", r->max_rel_err);
    snprintf(cell[10], 32, "%s", rf->check ? (r->passed ? "PASS" : "FAIL") : "-");
    dcp_table_row(stdout, cols, NCOLS, cell);
}

static void print_json(const char *mask, const char *strategy, const dcp_plan_stats_t *ps,
                       const dcp_harness_result_t *r, const run_flags_t *rf)
{
    dcp_json_t j;
    dcp_json_begin(&j, stdout);
    dcp_json_str(&j, "mask", mask);
    dcp_json_str(&j, "strategy", strategy);
    dcp_json_int(&j, "ranks", ps->num_ranks);
    dcp_json_int(&j, "nodes", ps->num_nodes);
    dcp_json_int(&j, "tokens", ps->total_tokens);
    dcp_json_bool(&j, "checked", rf->check);
    dcp_json_bool(&j, "passed", rf->check ? r->passed : 1);
    dcp_json_num(&j, "max_abs_err", rf->check ? r->max_abs_err : NAN);
    dcp_json_num(&j, "max_rel_err", rf->check ? r->max_rel_err : NAN);
    dcp_json_num(&j, "max_lse_err", rf->check ? r->max_lse_err : NAN);
    dcp_json_int(&j, "comm_bytes", ps->comm_bytes);
    dcp_json_int(&j, "inter_node_bytes", ps->inter_node_bytes);
    dcp_json_int(&j, "max_rank_bytes", ps->max_rank_bytes);
    dcp_json_num(&j, "compute_imbalance", ps->compute_imbalance);
    dcp_json_num(&j, "memory_imbalance", ps->memory_imbalance);
    dcp_json_int(&j, "flops", ps->total_flops);
    dcp_json_int(&j, "transfers", ps->num_transfers);
    dcp_json_int(&j, "max_buffer_bytes", ps->max_buffer_bytes);
    dcp_json_num(&j, "plan_ms", ps->plan_ms);
    dcp_json_num(&j, "exec_ms", r->exec_ms);
    dcp_json_num(&j, "gflops", r->exec_ms > 0 ? ps->total_flops / (r->exec_ms * 1e6) : 0.0);
    dcp_json_end(&j);
}

/* One (mask, strategy) run; returns 1 when it failed. */
static int run_one(const dcp_common_t *c, const dcp_harness_t *h, const char *mask,
                   dcp_strategy_t strategy, const run_flags_t *rf)
{
    dcp_plan_options_t opts = c->opts;
    opts.strategy = strategy;
    const dcp_batch_t batch = dcp_harness_batch(h);
    dcp_plan_t *plan = NULL;
    dcp_status_t st = dcp_plan_create(&batch, &h->shape, &opts, c->cluster, &plan);
    dcp_plan_stats_t ps;
    dcp_harness_result_t r = {0};
    if (st == DCP_OK) st = dcp_plan_get_stats(plan, &ps);
    if (st == DCP_OK)
        st = dcp_harness_run(h, plan, (int32_t)rf->warmup, (int32_t)rf->iters, rf->timeout, rf->tol,
                             &r);
    dcp_plan_destroy(plan);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: mask %s, strategy %s: %s: %s\n", tool, mask,
                dcp_strategy_name(strategy), dcp_status_string(st), dcp_last_error());
        return 1;
    }
    if (rf->json)
        print_json(mask, dcp_strategy_name(strategy), &ps, &r, rf);
    else
        print_row(dcp_strategy_name(strategy), &ps, &r, rf);
    return rf->check && !r.passed;
}

int main(int argc, char **argv)
{
    dcp_common_flags_t f;
    dcp_common_defaults(&f);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    run_flags_t rf = {0, 0, 0, 1, cores > 0 ? cores : 1, 0, 1e-5};
    dcp_arg_t args[DCP_COMMON_NARGS + 7];
    dcp_common_args(&f, args);
    const dcp_arg_t own[7] = {
        {"check", DCP_ARG_FLAG, &rf.check, 0, 0,
         "compare with the double-precision reference; exit 1 beyond --tol", 0},
        {"json", DCP_ARG_FLAG, &rf.json, 0, 0,
         "one JSON object per (mask, strategy) instead of tables", 0},
        {"warmup", DCP_ARG_INT, &rf.warmup, 0, 1000, "untimed runs before timing (default 0)", 0},
        {"iters", DCP_ARG_INT, &rf.iters, 1, 1000,
         "timed runs; exec time is their median (default 1)", 0},
        {"threads", DCP_ARG_INT, &rf.threads, 1, 64, "threads of the reference (default: cores)",
         0},
        {"timeout", DCP_ARG_DOUBLE, &rf.timeout, 0, 0,
         "transfer timeout in s (default $DCP_TIMEOUT_S or 60)", 0},
        {"tol", DCP_ARG_DOUBLE, &rf.tol, 0, 0, "relative tolerance of --check (default 1e-5)", 0},
    };
    for (int i = 0; i < 7; i++) args[DCP_COMMON_NARGS + i] = own[i];
    dcp_args_parse(argc, argv, args, DCP_COMMON_NARGS + 7, tool,
                   "Plans a batch, runs dynamic context-parallel attention on in-process ranks\n"
                   "and checks it against a single-device double-precision reference.");
    if (rf.timeout < 0) dcp_args_fail(tool, "timeout", "must be >= 0");
    if (!(rf.tol > 0)) dcp_args_fail(tool, "tol", "must be > 0");
    dcp_common_t c;
    dcp_common_resolve(tool, &f, args, &c);

    int failed = 0;
    for (int32_t m = 0; m < c.num_masks; m++) {
        const int32_t nseq = c.batch_first[1]; /* one batch */
        dcp_mask_t *masks = calloc((size_t)nseq, sizeof *masks);
        for (int32_t s = 0; s < nseq; s++) masks[s] = c.masks[m];
        dcp_harness_t *h = NULL;
        dcp_status_t st =
            dcp_harness_create(c.lengths, nseq, masks, &c.shape, (uint64_t)f.seed, &h);
        if (st == DCP_OK && rf.check) st = dcp_harness_reference(h, (int32_t)rf.threads);
        free(masks);
        if (st != DCP_OK) {
            fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
            dcp_harness_destroy(h);
            failed = 1;
            break;
        }
        if (!rf.json) {
            if (m == 0) print_header(&c, h);
            printf("\nmask %s\n", c.mask_names[m]);
            dcp_table_header(stdout, cols, NCOLS);
        }
        for (int32_t s = 0; s < c.num_strategies; s++)
            failed |= run_one(&c, h, c.mask_names[m], c.strategies[s], &rf);
        dcp_harness_destroy(h);
    }
    dcp_common_free(&c);
    return failed;
}
