/*
 * dcp-attn-test: plans a batch, runs the forward pass (with --backward, the backward after
 * it), and (with --check) compares O and LSE (and dQ, dK, dV) with the double-precision
 * single-device reference. One table per mask, one row per strategy; --json prints one JSON
 * object per (mask, strategy).
 *
 * Started plainly, the ranks are threads of this process. Started by an MPI launcher
 * (mpirun, srun), each process is one rank: every rank plans the batch and the plans'
 * checksums are compared, blocks move over the engines the topology selects (UCX for host
 * memory), and rank 0 prints. Exit status: 0 all good, 1 a check failed or a run failed,
 * 2 bad flags or a plan that does not fit --mem-cap (configuration errors said once, by rank 0).
 *
 * --device cuda runs the ranks on GPUs (thread rank r on GPU r % count, so all ranks may
 * share one GPU; a process on GPU local-rank % count, blocks over NCCL) in bf16 or fp16
 * (--dtype), checked by FlashAttention's rule against the plain low-precision computation;
 * --device cpu --dtype bf16 runs the same storage on the CPU (fp32 arithmetic).
 */
#include "include/base/error.h"
#include "include/dcp.h"
#include "plugin/cli/helpers/common.h"
#include "plugin/cli/launch/mpi_launch.h"
#include "plugin/cli/support/bench.h"
#include "plugin/cli/support/harness.h"
#include "plugin/cli/support/job.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tool = "dcp-attn-test";

typedef struct {
    int check, json, backward;
    int64_t warmup, iters, threads;
    double timeout, tol;
    const char *device, *dtype;
    int64_t ranks_per_process; /* under mpirun: in-process ranks (threads) per process */
    int64_t repeat;            /* the race check: runs on fresh contexts, each compared */
    const char *engine;        /* --engine: the contexts' attention engine (NULL: default) */
    int deterministic;         /* --deterministic: the contexts' mode (dcp.h) */
    int layers;                /* --layers: a kind column, a row per kind and a model row */
    int sinks, max_logit;      /* --sinks, --max-logit: the variants every call asks for */
} run_flags_t;

/* The job when ranks are processes; ctx NULL when they are threads. */
typedef struct {
    dcp_context_t *ctx;
    dcp_bootstrap_t bs;
    char cluster_note[128]; /* where the cluster came from, for the header */
} job_t;

/* One (mask, strategy) run as the table and the JSON lines show it. Bytes are exact in
 * JSON and MB in the table; imbalances are fractions in JSON and % in the table. */
typedef struct {
    const char *mask, *strategy, *placement, *digest, *check; /* strategy asked for, returned */
    const char *kind; /* --layers: the kind's label, or "model" */
    int32_t ranks, nodes;
    int64_t tokens, comm_bytes, inter_node_bytes, max_rank_bytes, flops, transfers, max_buffer;
    int checked, passed;
    double max_abs_err, max_rel_err, max_lse_err; /* NaN (null, "-") when not checked */
    double max_logit_err, dsinks_err;             /* --max-logit, --sinks: harness.h's */
    double comm, inter, max_rank;                 /* the bytes above, as doubles */
    double comp_imb, mem_imb, plan_ms, gflops;
    dcpt_stats_t exec_ms, host_us, wait_us;
    /* backward */
    int bwd_passed;
    double rel_grad[3], rel_grad_max;
    int64_t bwd_flops, bwd_comm_bytes, bwd_inter_node_bytes;
    double bwd_comm, bwd_inter, bwd_comp_imb, bwd_gflops;
    dcpt_stats_t bwd_exec_ms, bwd_host_us;
    /* --repeat */
    int32_t repeat_runs, mismatches, failed_checks, unequal_fwd, unequal_bwd;
    double diff_ratio, diff[5];
    /* the attention engine (rank 0's context) */
    const char *engine, *engine_note;
    int deterministic; /* the contexts' mode (--deterministic) */
    int64_t cudnn_version, plans_built, plan_hits, pairs[2][DCP_ATTN_CLASSES], bwd_launches,
        bwd_waves, graphs_failed;
    double plan_build_ms;
} row_t;

#define F(head, width, key, kind, fmt, member)                                                     \
    DCPT_FIELD(head, width, key, kind, fmt, row_t, member)
#define SCALED(head, width, key, fmt, member, by)                                                  \
    {                                                                                              \
        head, width, key, DCPT_F_NUM, fmt, offsetof(row_t, member), by                             \
    }

/* host(us): how long a rank's call takes to return (the slowest rank's median); on a GPU
 * the call returns once its work is queued, so this is the CPU cost a training step pays.
 * wait(us): of the forward, the time spent blocked in transfer waits (COMM_WAIT) on the
 * host: near zero when the transfers moved while the kernels ran. */
static const dcpt_field_t fwd_fields[] = {
    F(NULL, 0, "mask", DCPT_F_STR, NULL, mask),
    F("strategy", -8, "strategy", DCPT_F_STR, NULL, strategy),
    F(NULL, 0, "placement", DCPT_F_STR, NULL, placement),
    F(NULL, 0, "ranks", DCPT_F_I32, NULL, ranks),
    F(NULL, 0, "nodes", DCPT_F_I32, NULL, nodes),
    F(NULL, 0, "tokens", DCPT_F_INT, NULL, tokens),
    F(NULL, 0, "checked", DCPT_F_BOOL, NULL, checked),
    F(NULL, 0, "passed", DCPT_F_BOOL, NULL, passed),
    F(NULL, 0, "max_abs_err", DCPT_F_NUM, NULL, max_abs_err),
    F(NULL, 0, "max_lse_err", DCPT_F_NUM, NULL, max_lse_err),
    F(NULL, 0, "max_logit_err", DCPT_F_NUM, NULL, max_logit_err),
    F(NULL, 0, "dsinks_err", DCPT_F_NUM, NULL, dsinks_err),
    SCALED("comm(MB)", 9, NULL, "%.2f", comm, 1e-6),
    F(NULL, 0, "comm_bytes", DCPT_F_INT, NULL, comm_bytes),
    SCALED("inter(MB)", 9, NULL, "%.2f", inter, 1e-6),
    F(NULL, 0, "inter_node_bytes", DCPT_F_INT, NULL, inter_node_bytes),
    SCALED("maxrank(MB)", 11, NULL, "%.2f", max_rank, 1e-6),
    F(NULL, 0, "max_rank_bytes", DCPT_F_INT, NULL, max_rank_bytes),
    SCALED("comp-imb(%)", 11, "compute_imbalance", "%.1f", comp_imb, 100),
    SCALED("mem-imb(%)", 10, "memory_imbalance", "%.1f", mem_imb, 100),
    F(NULL, 0, "flops", DCPT_F_INT, NULL, flops),
    F(NULL, 0, "transfers", DCPT_F_INT, NULL, transfers),
    F(NULL, 0, "max_buffer_bytes", DCPT_F_INT, NULL, max_buffer),
    F("plan(ms)", 9, "plan_ms", DCPT_F_NUM, "%.2f", plan_ms),
    F("exec(ms)", 9, "exec_ms", DCPT_F_STATS, "%.1f", exec_ms),
    SCALED("host(us)", 9, NULL, "%.0f", host_us.median, 1),
    F(NULL, 0, "host_us", DCPT_F_STATS, NULL, host_us),
    SCALED("wait(us)", 8, NULL, "%.0f", wait_us.median, 1),
    F(NULL, 0, "wait_us", DCPT_F_STATS, NULL, wait_us),
    F("GFLOP/s", 8, "gflops", DCPT_F_NUM, "%.2f", gflops),
    F("max-rel-err", 11, "max_rel_err", DCPT_F_NUM, "%.2e", max_rel_err),
    F(NULL, 0, "digest", DCPT_F_STR, NULL, digest),
    F("engine", -6, "engine", DCPT_F_STR, NULL, engine),
    F(NULL, 0, "engine_note", DCPT_F_STR, NULL, engine_note),
    F(NULL, 0, "deterministic", DCPT_F_BOOL, NULL, deterministic),
    F(NULL, 0, "cudnn_version", DCPT_F_INT, NULL, cudnn_version),
    F(NULL, 0, "plans_built", DCPT_F_INT, NULL, plans_built),
    F(NULL, 0, "plan_hits", DCPT_F_INT, NULL, plan_hits),
    F(NULL, 0, "plan_build_ms", DCPT_F_NUM, NULL, plan_build_ms),
    F(NULL, 0, "graphs_failed", DCPT_F_INT, NULL, graphs_failed),
    F(NULL, 0, "pairs_full", DCPT_F_INT, NULL, pairs[0][DCP_ATTN_CLASS_FULL]),
    F(NULL, 0, "pairs_causal", DCPT_F_INT, NULL, pairs[0][DCP_ATTN_CLASS_CAUSAL]),
    F(NULL, 0, "pairs_band", DCPT_F_INT, NULL, pairs[0][DCP_ATTN_CLASS_BAND]),
    F(NULL, 0, "pairs_left", DCPT_F_INT, NULL, pairs[0][DCP_ATTN_CLASS_LEFT]),
    F(NULL, 0, "pairs_masked", DCPT_F_INT, NULL, pairs[0][DCP_ATTN_CLASS_MASKED]),
    F(NULL, 0, "bwd_pairs_full", DCPT_F_INT, NULL, pairs[1][DCP_ATTN_CLASS_FULL]),
    F(NULL, 0, "bwd_pairs_causal", DCPT_F_INT, NULL, pairs[1][DCP_ATTN_CLASS_CAUSAL]),
    F(NULL, 0, "bwd_pairs_band", DCPT_F_INT, NULL, pairs[1][DCP_ATTN_CLASS_BAND]),
    F(NULL, 0, "bwd_pairs_left", DCPT_F_INT, NULL, pairs[1][DCP_ATTN_CLASS_LEFT]),
    F(NULL, 0, "bwd_pairs_masked", DCPT_F_INT, NULL, pairs[1][DCP_ATTN_CLASS_MASKED]),
    F(NULL, 0, "bwd_launches", DCPT_F_INT, NULL, bwd_launches),
    F(NULL, 0, "bwd_waves", DCPT_F_INT, NULL, bwd_waves),
};
static const dcpt_field_t bwd_fields[] = {
    F(NULL, 0, "bwd_passed", DCPT_F_BOOL, NULL, bwd_passed),
    F(NULL, 0, "max_rel_err_dq", DCPT_F_NUM, NULL, rel_grad[0]),
    F(NULL, 0, "max_rel_err_dk", DCPT_F_NUM, NULL, rel_grad[1]),
    F(NULL, 0, "max_rel_err_dv", DCPT_F_NUM, NULL, rel_grad[2]),
    F(NULL, 0, "bwd_flops", DCPT_F_INT, NULL, bwd_flops),
    SCALED("bwd-comm(MB)", 12, NULL, "%.2f", bwd_comm, 1e-6),
    F(NULL, 0, "bwd_comm_bytes", DCPT_F_INT, NULL, bwd_comm_bytes),
    SCALED("bwd-inter(MB)", 13, NULL, "%.2f", bwd_inter, 1e-6),
    F(NULL, 0, "bwd_inter_node_bytes", DCPT_F_INT, NULL, bwd_inter_node_bytes),
    F(NULL, 0, "bwd_compute_imbalance", DCPT_F_NUM, NULL, bwd_comp_imb),
    F("bwd-exec(ms)", 12, "bwd_exec_ms", DCPT_F_STATS, "%.1f", bwd_exec_ms),
    SCALED("bwd-host(us)", 12, NULL, "%.0f", bwd_host_us.median, 1),
    F(NULL, 0, "bwd_host_us", DCPT_F_STATS, NULL, bwd_host_us),
    F("bwd-GFLOP/s", 11, "bwd_gflops", DCPT_F_NUM, "%.2f", bwd_gflops),
    F("bwd-rel-err", 11, NULL, DCPT_F_NUM, "%.2e", rel_grad_max),
};
/* --repeat N: N more runs on fresh contexts, each compared with the CPU executor's result
 * (harness.h, dcpt_harness_repeat); diff-ratio is the worst output's distance from it over
 * the distance allowed; unequal counts the runs whose gradients (unequal_fwd: O, LSE) differ
 * from the first run's in any bit. */
static const dcpt_field_t repeat_fields[] = {
    F("runs", 5, "repeat_runs", DCPT_F_I32, NULL, repeat_runs),
    F("mismatch", 8, "mismatches", DCPT_F_I32, NULL, mismatches),
    F(NULL, 0, "failed_checks", DCPT_F_I32, NULL, failed_checks),
    F("diff-ratio", 10, "max_diff_ratio", DCPT_F_NUM, "%.3f", diff_ratio),
    F(NULL, 0, "max_diff_o", DCPT_F_NUM, NULL, diff[0]),
    F(NULL, 0, "max_diff_lse", DCPT_F_NUM, NULL, diff[1]),
    F(NULL, 0, "max_diff_dq", DCPT_F_NUM, NULL, diff[2]),
    F(NULL, 0, "max_diff_dk", DCPT_F_NUM, NULL, diff[3]),
    F(NULL, 0, "max_diff_dv", DCPT_F_NUM, NULL, diff[4]),
    F("unequal", 7, "unequal_bwd", DCPT_F_I32, NULL, unequal_bwd),
    F(NULL, 0, "unequal_fwd", DCPT_F_I32, NULL, unequal_fwd),
};
static const dcpt_field_t verdict_field = F("check", 5, NULL, DCPT_F_STR, NULL, check);
static const dcpt_field_t kind_field = F("kind", -18, NULL, DCPT_F_STR, NULL, kind);
#undef F
#undef SCALED

#define NFWD      ((int)(sizeof fwd_fields / sizeof fwd_fields[0]))
#define NBWD      ((int)(sizeof bwd_fields / sizeof bwd_fields[0]))
#define NREP      ((int)(sizeof repeat_fields / sizeof repeat_fields[0]))
#define MAXFIELDS (NFWD + NBWD + NREP + 2)

/* The bench's fields: the forward's (with --layers a kind column after the strategy), the
 * backward's with --backward, then the verdict. */
static dcpt_bench_t bench_of(const run_flags_t *rf, dcpt_field_t fields[MAXFIELDS])
{
    int n = 0;
    for (int i = 0; i < NFWD; i++) {
        fields[n++] = fwd_fields[i];
        if (rf->layers && fwd_fields[i].head && !strcmp(fwd_fields[i].head, "strategy"))
            fields[n++] = kind_field;
    }
    for (int i = 0; rf->backward && i < NBWD; i++) fields[n++] = bwd_fields[i];
    for (int i = 0; rf->repeat > 0 && i < NREP; i++) fields[n++] = repeat_fields[i];
    fields[n++] = verdict_field;
    return (dcpt_bench_t){tool, rf->json, rf->warmup, rf->iters, fields, n};
}

static double max3(const double *x)
{
    return fmax(x[0], fmax(x[1], x[2]));
}

/* --sinks and --max-logit on a harness (before its reference). */
static dcp_status_t enable_variants(dcpt_harness_t *h, const run_flags_t *rf, uint64_t seed)
{
    if (rf->sinks) DCP_CHECK(dcpt_harness_enable_sinks(h, seed));
    return rf->max_logit ? dcpt_harness_enable_max_logit(h) : DCP_OK;
}

static void print_header(const dcpt_common_t *c, const dcp_cluster_t *cluster,
                         const dcpt_harness_t *h, const job_t *job, const run_flags_t *rf)
{
    int32_t longest = 0;
    for (int32_t s = 0; s < h->num_seqs; s++)
        longest = h->lengths[s] > longest ? h->lengths[s] : longest;
    char ranks[256];
    if (job->ctx && job->cluster_note[0])
        snprintf(ranks, sizeof ranks,
                 "processes (cluster %s), engines %s in a node, %s between nodes",
                 job->cluster_note, dcp_context_transport(job->ctx, 0),
                 dcp_context_transport(job->ctx, 1));
    else if (job->ctx)
        snprintf(ranks, sizeof ranks, "processes, engines %s in a node, %s between nodes",
                 dcp_context_transport(job->ctx, 0), dcp_context_transport(job->ctx, 1));
    else
        snprintf(ranks, sizeof ranks, "threads");
    dcpt_field_t fields[MAXFIELDS];
    const dcpt_bench_t b = bench_of(rf, fields);
    char divs[16], dims[32], variants[96] = "";
    const int32_t dv = c->shape.head_dim_v > 0 ? c->shape.head_dim_v : c->shape.head_dim;
    if (dv == c->shape.head_dim)
        snprintf(dims, sizeof dims, "%d", c->shape.head_dim);
    else
        snprintf(dims, sizeof dims, "%d/%d", c->shape.head_dim, dv);
    snprintf(variants, sizeof variants, "%s%s%s", rf->sinks ? ", sinks" : "",
             rf->max_logit ? ", max logit" : "", c->shape.softcap > 0 ? ", softcap " : "");
    if (c->shape.softcap > 0)
        snprintf(variants + strlen(variants), sizeof variants - strlen(variants), "%g",
                 (double)c->shape.softcap);
    dcpt_bench_header(&b,
                      "%d ranks (%dx%d) as %s, %lld tokens in %d sequences (longest %d), heads "
                      "%d/%d x %s, %s %s, block %d, head blocks %d, divisions %s%s",
                      dcp_cluster_num_ranks(cluster), dcp_cluster_num_nodes(cluster),
                      dcp_cluster_num_ranks(cluster) / dcp_cluster_num_nodes(cluster), ranks,
                      (long long)h->tokens, h->num_seqs, longest, c->shape.num_heads,
                      c->shape.num_kv_heads, dims, dcpt_dtype_name(c->shape.dtype), rf->device,
                      c->opts.block_size, c->opts.head_blocks,
                      dcpt_divisions_name(c->opts.divisions, divs), variants);
}

/* The race check held: no mismatch and, in deterministic mode, the same bits every run. */
static int repeat_ok(const dcpt_harness_repeat_t *rep, const run_flags_t *rf)
{
    return rep->mismatches == 0 &&
           !(rf->deterministic && (rep->unequal_fwd > 0 || rep->unequal_bwd > 0));
}

/* The row of one run; digest: room for its text. */
static row_t make_row(const char *mask, const char *strategy, const dcp_plan_stats_t *ps,
                      const dcpt_harness_result_t *r, const dcpt_harness_repeat_t *rep,
                      const run_flags_t *rf, char digest[24])
{
    const int ck = rf->check;
    snprintf(digest, 24, "%016llx", (unsigned long long)r->digest);
    const double ms = r->exec_ms.median, bms = r->bwd_exec_ms.median;
    row_t row = {
        .mask = mask,
        .strategy = strategy,
        .placement = dcp_strategy_name(ps->strategy),
        .digest = digest,
        .check = ck ? (r->passed && repeat_ok(rep, rf) ? "PASS" : "FAIL") : "-",
        .ranks = ps->num_ranks,
        .nodes = ps->num_nodes,
        .tokens = ps->total_tokens,
        .comm_bytes = ps->comm_bytes,
        .inter_node_bytes = ps->inter_node_bytes,
        .max_rank_bytes = ps->max_rank_bytes,
        .flops = ps->total_flops,
        .transfers = ps->num_transfers,
        .max_buffer = ps->max_buffer_bytes,
        .checked = ck,
        .passed = ck ? r->passed : 1,
        .max_abs_err = ck ? r->max_abs_err : NAN,
        .max_rel_err = ck ? r->max_rel_err : NAN,
        .max_lse_err = ck ? r->max_lse_err : NAN,
        .max_logit_err = ck && rf->max_logit ? r->max_logit_err : NAN,
        .dsinks_err = ck && rf->sinks && rf->backward ? r->dsinks_err : NAN,
        .comm = (double)ps->comm_bytes,
        .inter = (double)ps->inter_node_bytes,
        .max_rank = (double)ps->max_rank_bytes,
        .comp_imb = ps->compute_imbalance,
        .mem_imb = ps->memory_imbalance,
        .plan_ms = ps->plan_ms,
        .gflops = ms > 0 ? ps->total_flops / (ms * 1e6) : 0.0,
        .exec_ms = r->exec_ms,
        .host_us = r->host_us,
        .wait_us = r->wait_us,
        .bwd_passed = ck ? r->bwd_passed : 1,
        .rel_grad_max = ck ? max3(r->max_rel_err_grad) : NAN,
        .bwd_flops = ps->bwd_flops,
        .bwd_comm_bytes = ps->bwd_comm_bytes,
        .bwd_inter_node_bytes = ps->bwd_inter_node_bytes,
        .bwd_comm = (double)ps->bwd_comm_bytes,
        .bwd_inter = (double)ps->bwd_inter_node_bytes,
        .bwd_comp_imb = ps->bwd_compute_imbalance,
        .bwd_gflops = bms > 0 ? ps->bwd_flops / (bms * 1e6) : 0.0,
        .bwd_exec_ms = r->bwd_exec_ms,
        .bwd_host_us = r->bwd_host_us,
    };
    for (int g = 0; g < 3; g++) row.rel_grad[g] = ck ? r->max_rel_err_grad[g] : NAN;
    row.engine = r->engine_name[0] ? r->engine_name : "-";
    row.engine_note = r->engine_note;
    row.deterministic = rf->deterministic;
    row.cudnn_version = r->engine.cudnn_version;
    row.plans_built = r->engine.plans_built;
    row.plan_hits = r->engine.plan_hits;
    row.plan_build_ms = r->engine.plan_build_ms;
    for (int c = 0; c < DCP_ATTN_CLASSES; c++) {
        row.pairs[0][c] = r->engine.pairs[c];
        row.pairs[1][c] = r->engine.pairs_bwd[c];
    }
    row.graphs_failed = r->engine.graphs_failed;
    row.bwd_launches = r->engine.bwd_launches;
    row.bwd_waves = r->engine.bwd_waves;
    row.repeat_runs = rep->runs;
    row.mismatches = rep->mismatches;
    row.failed_checks = rep->failed_checks;
    row.unequal_fwd = rep->unequal_fwd;
    row.unequal_bwd = rep->unequal_bwd;
    row.diff_ratio = 0;
    for (int k = 0; k < 5; k++) {
        const int used = k < 2 || rf->backward;
        row.diff[k] = used ? rep->max_diff[k] : NAN;
        if (used && rep->allowed[k] > 0)
            row.diff_ratio = fmax(row.diff_ratio, rep->max_diff[k] / rep->allowed[k]);
    }
    return row;
}

/* --layers JSON members: the kind's index (null for the model row) and its layer count. */
typedef struct {
    int32_t kind, layers;
} kind_json_t;

static void kind_json(dcpt_json_t *j, const void *ctx)
{
    const kind_json_t *k = ctx;
    if (k->kind < 0)
        dcpt_json_null(j, "kind");
    else
        dcpt_json_int(j, "kind", k->kind);
    dcpt_json_int(j, "layers", k->layers);
}

static void emit_row(const row_t *row, const run_flags_t *rf, const kind_json_t *kj)
{
    dcpt_field_t fields[MAXFIELDS];
    const dcpt_bench_t b = bench_of(rf, fields);
    dcpt_bench_row(&b, row, kj ? kind_json : NULL, kj);
}

static void print_row(const char *mask, const char *strategy, const dcp_plan_stats_t *ps,
                      const dcpt_harness_result_t *r, const dcpt_harness_repeat_t *rep,
                      const run_flags_t *rf)
{
    char digest[24];
    const row_t row = make_row(mask, strategy, ps, r, rep, rf, digest);
    emit_row(&row, rf, NULL);
}

static dcpt_stats_t stats_add(dcpt_stats_t a, dcpt_stats_t b, double w)
{
    return (dcpt_stats_t){a.median + w * b.median, a.min + w * b.min, a.max + w * b.max, b.n};
}

/* The model row: each kind's row times its layer count, summed (bytes, FLOPs, times); the
 * worst kind's imbalance and errors; passed when every kind passed. */
static void model_add(row_t *m, const row_t *r, int32_t layers)
{
    const double w = layers;
    m->ranks = r->ranks, m->nodes = r->nodes, m->tokens = r->tokens, m->checked = r->checked;
    m->plan_ms = r->plan_ms, m->mem_imb = r->mem_imb;
    m->comm_bytes += layers * r->comm_bytes;
    m->inter_node_bytes += layers * r->inter_node_bytes;
    m->max_rank_bytes += layers * r->max_rank_bytes;
    m->flops += layers * r->flops;
    m->transfers += layers * r->transfers;
    m->max_buffer = r->max_buffer > m->max_buffer ? r->max_buffer : m->max_buffer;
    m->comm += w * r->comm, m->inter += w * r->inter, m->max_rank += w * r->max_rank;
    m->comp_imb = fmax(m->comp_imb, r->comp_imb);
    m->exec_ms = stats_add(m->exec_ms, r->exec_ms, w);
    m->host_us = stats_add(m->host_us, r->host_us, w);
    m->wait_us = stats_add(m->wait_us, r->wait_us, w);
    m->gflops = m->exec_ms.median > 0 ? m->flops / (m->exec_ms.median * 1e6) : 0.0;
    m->passed = r->passed && m->passed;
    m->bwd_passed = r->bwd_passed && m->bwd_passed;
    m->max_abs_err = fmax(m->max_abs_err, r->max_abs_err);
    m->max_rel_err = fmax(m->max_rel_err, r->max_rel_err);
    m->max_lse_err = fmax(m->max_lse_err, r->max_lse_err);
    m->max_logit_err = fmax(m->max_logit_err, r->max_logit_err);
    m->dsinks_err = fmax(m->dsinks_err, r->dsinks_err);
    for (int g = 0; g < 3; g++) m->rel_grad[g] = fmax(m->rel_grad[g], r->rel_grad[g]);
    m->rel_grad_max = fmax(m->rel_grad_max, r->rel_grad_max);
    m->bwd_flops += layers * r->bwd_flops;
    m->bwd_comm_bytes += layers * r->bwd_comm_bytes;
    m->bwd_inter_node_bytes += layers * r->bwd_inter_node_bytes;
    m->bwd_comm += w * r->bwd_comm, m->bwd_inter += w * r->bwd_inter;
    m->bwd_comp_imb = fmax(m->bwd_comp_imb, r->bwd_comp_imb);
    m->bwd_exec_ms = stats_add(m->bwd_exec_ms, r->bwd_exec_ms, w);
    m->bwd_host_us = stats_add(m->bwd_host_us, r->bwd_host_us, w);
    m->bwd_gflops = m->bwd_exec_ms.median > 0 ? m->bwd_flops / (m->bwd_exec_ms.median * 1e6) : 0.0;
}

/* Every rank planned the same batch alike: their plans' serialized bytes hash the same.
 * Collective; a rank whose planning failed makes every rank fail. */
static dcp_status_t plans_agree(const job_t *job, dcp_status_t st, const dcp_plan_t *plan)
{
    DCP_CHECK(dcpt_job_agree(&job->bs, st, "planning"));
    uint64_t mine = 0xcbf29ce484222325ull, *all = NULL;
    unsigned char *bytes = NULL;
    size_t n = 0;
    st = dcp_plan_serialize(plan, NULL, 0, &n);
    if (st == DCP_OK) st = dcp_calloc(&bytes, (int64_t)n, 1, "plan bytes");
    if (st == DCP_OK) st = dcp_plan_serialize(plan, bytes, n, &n);
    for (size_t i = 0; st == DCP_OK && i < n; i++) mine = (mine ^ bytes[i]) * 0x100000001b3ull;
    free(bytes);
    if (st == DCP_OK) st = dcp_calloc(&all, job->bs.size, sizeof *all, "plan checksums");
    DCP_CHECK(dcpt_job_agree(&job->bs, st, "plan checksum"));
    st = dcpt_job_allgather(&job->bs, &mine, all, sizeof mine, "plan checksums");
    for (int32_t r = 1; st == DCP_OK && r < job->bs.size; r++)
        if (all[r] != all[0])
            st = dcp_set_error(DCP_ERR_INVALID_ARG,
                               "rank %d's plan differs from rank 0's (checksum %016llx vs "
                               "%016llx): were the ranks given different flags?",
                               r, (unsigned long long)all[r], (unsigned long long)all[0]);
    free(all);
    return st;
}

/* One (mask, strategy) run; returns 1 when it failed, 2 when the plan does not fit --mem-cap. A
 * failed run of a job's ranks ends the job (the engines may be broken, a peer may be dead). */
static int run_one(const dcpt_common_t *c, const dcp_cluster_t *cluster, dcpt_harness_t *h,
                   const char *mask, int32_t si, const run_flags_t *rf, const job_t *job)
{
    dcp_plan_options_t opts = c->opts;
    dcpt_common_strategy(c, si, &opts);
    const char *strategy = c->strategy_labels[si];
    const dcp_batch_t batch = dcpt_harness_batch(h);
    dcp_plan_t *plan = NULL;
    dcp_status_t st = dcp_plan_create(&batch, &h->shape, &opts, cluster, &plan);
    dcp_plan_stats_t ps;
    dcpt_harness_result_t r = {0};
    dcpt_harness_repeat_t rep = {.first_mismatch = -1};
    int broken = 0;
    if (st == DCP_OK) st = dcp_plan_get_stats(plan, &ps);
    if (job->ctx) {
        /* every step ends in a vote, so that all ranks go on or none does */
        dcpt_mpi_fault_point("plan");
        st = plans_agree(job, st, plan);
        /* each process checks its own rows: the reference of its sequences only */
        if (st == DCP_OK && rf->check)
            st = dcpt_job_agree(&job->bs,
                                dcpt_harness_reference(h, (int32_t)rf->threads, plan, job->bs.rank),
                                "reference");
        if (st == DCP_OK) {
            dcpt_mpi_fault_point("forward");
            st = dcpt_harness_run_rank(h, plan, job->ctx, &job->bs, (int32_t)rf->warmup,
                                       (int32_t)rf->iters, rf->tol, &r);
            broken = st != DCP_OK;
        }
    } else if (st == DCP_OK) {
        st = dcpt_harness_run(h, plan, (int32_t)rf->warmup, (int32_t)rf->iters, rf->timeout,
                              rf->tol, rf->device, &r);
        if (st == DCP_OK && rf->repeat > 0)
            st = dcpt_harness_repeat(h, plan, (int32_t)rf->repeat, rf->timeout, rf->tol, rf->device,
                                     &rep);
    }
    dcp_plan_destroy(plan);
    if (st == DCP_ERR_CAPACITY) { /* the same on every rank: a configuration error, said once */
        if (!job->ctx || job->bs.rank == 0)
            fprintf(stderr,
                    "%s: mask %s, strategy %s cannot be planned as configured (--mem-cap, --block, "
                    "--ranks): %s\n",
                    tool, mask, strategy, dcp_last_error());
        return 2;
    }
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: mask %s, strategy %s: %s: %s\n", tool,
                job->ctx ? job->bs.rank : 0, mask, strategy, dcp_status_string(st),
                dcp_last_error());
        if (broken) {
            fflush(NULL);
            dcpt_mpi_stop(1, 1);
            exit(1);
        }
        return 1;
    }
    if (!job->ctx || job->bs.rank == 0) print_row(mask, strategy, &ps, &r, &rep, rf);
    return (rf->check && !r.passed) || !repeat_ok(&rep, rf);
}

/* Kind k of plan `p` run on harness h (its masks) as a job's rank or on in-process ranks. */
static dcp_status_t run_kind(dcpt_harness_t *h, const dcp_plan_t *p, const run_flags_t *rf,
                             const job_t *job, dcpt_harness_result_t *r, int *broken)
{
    if (!job->ctx)
        return dcpt_harness_run(h, p, (int32_t)rf->warmup, (int32_t)rf->iters, rf->timeout, rf->tol,
                                rf->device, r);
    dcp_status_t st = DCP_OK;
    if (rf->check)
        st = dcpt_job_agree(&job->bs,
                            dcpt_harness_reference(h, (int32_t)rf->threads, p, job->bs.rank),
                            "reference");
    if (st != DCP_OK) return st;
    dcpt_mpi_fault_point("forward");
    st = dcpt_harness_run_rank(h, p, job->ctx, &job->bs, (int32_t)rf->warmup, (int32_t)rf->iters,
                               rf->tol, r);
    *broken = st != DCP_OK;
    return st;
}

/* --layers, one strategy: one plan of every kind; each kind runs through its view on its own
 * harness (the same inputs, the kind's masks) and is checked against its own reference; a
 * row per kind, then the model row. Returns as run_one(). */
static int run_layers_one(const dcpt_common_t *c, const dcp_cluster_t *cluster,
                          dcpt_harness_t *const *hs, int32_t si, const run_flags_t *rf,
                          const job_t *job)
{
    dcp_plan_options_t opts = c->opts;
    dcpt_common_strategy(c, si, &opts);
    const char *strategy = c->strategy_labels[si];
    dcp_layer_kind_t kinds[DCP_MAX_KINDS];
    for (int32_t k = 0; k < c->num_kinds; k++)
        kinds[k] = (dcp_layer_kind_t){hs[k]->masks, c->kind_layers[k]};
    const dcp_batch_t batch = {.num_seqs = hs[0]->num_seqs,
                               .lengths = hs[0]->lengths,
                               .num_kinds = c->num_kinds,
                               .kinds = kinds};
    dcp_plan_t *plan = NULL;
    dcp_status_t st = dcp_plan_create(&batch, &hs[0]->shape, &opts, cluster, &plan);
    if (job->ctx) {
        dcpt_mpi_fault_point("plan");
        st = plans_agree(job, st, plan);
    }
    row_t rows[DCP_MAX_KINDS],
        model = {
            .mask = "model", .strategy = strategy, .kind = "model", .passed = 1, .bwd_passed = 1};
    char digests[DCP_MAX_KINDS][24];
    /* the rows point into their results (digest, engine): kept until the rows are printed */
    dcpt_harness_result_t res[DCP_MAX_KINDS] = {{0}};
    int broken = 0, failed = 0, layers = 0;
    for (int32_t k = 0; k < c->num_kinds && st == DCP_OK; k++) {
        const dcp_plan_t *view = NULL;
        dcp_plan_stats_t ps;
        dcpt_harness_result_t *r = &res[k];
        st = dcp_plan_kind(plan, k, &view);
        if (st == DCP_OK) st = dcp_plan_get_stats(view, &ps);
        if (st == DCP_OK) st = run_kind(hs[k], view, rf, job, r, &broken);
        if (st != DCP_OK) break;
        const dcpt_harness_repeat_t none = {0};
        rows[k] = make_row(c->mask_names[k], strategy, &ps, r, &none, rf, digests[k]);
        rows[k].kind = c->kind_labels[k];
        model_add(&model, &rows[k], c->kind_layers[k]);
        layers += c->kind_layers[k];
        failed |= rf->check && !r->passed;
    }
    dcp_plan_destroy(plan);
    if (st != DCP_OK) {
        const int capacity = st == DCP_ERR_CAPACITY;
        if (!capacity || !job->ctx || job->bs.rank == 0)
            fprintf(stderr, "%s: rank %d: layers, strategy %s: %s: %s\n", tool,
                    job->ctx ? job->bs.rank : 0, strategy, dcp_status_string(st), dcp_last_error());
        if (broken) {
            fflush(NULL);
            dcpt_mpi_stop(1, 1);
            exit(1);
        }
        return capacity ? 2 : 1;
    }
    if (job->ctx && job->bs.rank != 0) return failed;
    model.check = rf->check ? (model.passed && model.bwd_passed ? "PASS" : "FAIL") : "-";
    if (!rf->check) model.max_abs_err = model.max_rel_err = model.max_lse_err = NAN;
    if (!rf->check || !rf->max_logit) model.max_logit_err = NAN;
    if (!rf->check || !rf->sinks || !rf->backward) model.dsinks_err = NAN;
    if (!rf->check) model.rel_grad_max = model.rel_grad[0] = model.rel_grad[1] = NAN;
    if (!rf->check) model.rel_grad[2] = NAN;
    for (int32_t k = 0; k < c->num_kinds; k++) {
        const kind_json_t kj = {k, c->kind_layers[k]};
        emit_row(&rows[k], rf, &kj);
    }
    const kind_json_t kj = {-1, layers};
    emit_row(&model, rf, &kj);
    return failed;
}

/* --layers: the harnesses of every kind (the same seed: the same Q, K, V, dO), then every
 * strategy. */
static int run_layers(const dcpt_common_t *c, const dcp_cluster_t *cluster, const run_flags_t *rf,
                      const job_t *job, uint64_t seed)
{
    const int talk = !job->ctx || job->bs.rank == 0;
    const int32_t nseq = c->batch_first[1];
    dcpt_harness_t *hs[DCP_MAX_KINDS] = {NULL};
    dcp_status_t st = DCP_OK;
    for (int32_t k = 0; k < c->num_kinds && st == DCP_OK; k++) {
        dcp_mask_t *masks = calloc((size_t)nseq, sizeof *masks);
        for (int32_t s = 0; masks && s < nseq; s++) masks[s] = c->masks[k];
        st = masks ? dcpt_harness_create(c->lengths, nseq, masks, &c->shape, seed, &hs[k])
                   : DCP_ERR_NO_MEMORY;
        if (st == DCP_OK && rf->backward) st = dcpt_harness_enable_backward(hs[k], seed);
        if (st == DCP_OK) st = enable_variants(hs[k], rf, seed);
        if (st == DCP_OK) hs[k]->attn_engine = rf->engine;
        if (st == DCP_OK) hs[k]->deterministic = rf->deterministic;
        if (st == DCP_OK && rf->check && !job->ctx)
            st = dcpt_harness_reference(hs[k], (int32_t)rf->threads, NULL, 0);
        free(masks);
    }
    int failed = 0;
    if (st != DCP_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
        failed = 1;
    } else {
        if (talk && !rf->json) {
            print_header(c, cluster, hs[0], job, rf);
            printf("\nlayers");
            for (int32_t k = 0; k < c->num_kinds; k++)
                printf("%s %s", k ? "," : "", c->kind_labels[k]);
            printf(
                " (model: each kind x its layers, summed; imbalance and errors: the worst kind)\n");
            dcpt_field_t fields[MAXFIELDS];
            const dcpt_bench_t b = bench_of(rf, fields);
            dcpt_bench_table(&b);
            fflush(stdout);
        }
        for (int32_t s = 0; s < c->num_strategies; s++) {
            const int rc = run_layers_one(c, cluster, hs, s, rf, job);
            failed = rc > failed ? rc : failed;
            if (job->ctx) dcpt_mpi_fault_point("between");
        }
    }
    if (talk) fflush(stdout);
    for (int32_t k = 0; k < c->num_kinds; k++) dcpt_harness_destroy(hs[k]);
    return failed;
}

/* Every (mask, strategy) pair; returns 1 when any failed, 2 when a strategy could not place
 * the batch under --mem-cap (exit status 2: the configuration asked for the impossible). */
static int run_all(const dcpt_common_t *c, const dcp_cluster_t *cluster, const run_flags_t *rf,
                   const job_t *job, uint64_t seed)
{
    if (c->num_kinds > 0) return run_layers(c, cluster, rf, job, seed);
    int failed = 0;
    const int talk = !job->ctx || job->bs.rank == 0;
    for (int32_t m = 0; m < c->num_masks; m++) {
        const int32_t nseq = c->batch_first[1]; /* one batch */
        dcp_mask_t *masks = calloc((size_t)nseq, sizeof *masks);
        for (int32_t s = 0; masks && s < nseq; s++) masks[s] = c->masks[m];
        dcpt_harness_t *h = NULL;
        dcp_status_t st = masks ? dcpt_harness_create(c->lengths, nseq, masks, &c->shape, seed, &h)
                                : DCP_ERR_NO_MEMORY;
        if (st == DCP_OK && rf->backward) st = dcpt_harness_enable_backward(h, seed);
        if (st == DCP_OK) st = enable_variants(h, rf, seed);
        if (st == DCP_OK) h->attn_engine = rf->engine;
        if (st == DCP_OK) h->deterministic = rf->deterministic;
        if (st == DCP_OK && rf->check && !job->ctx)
            st = dcpt_harness_reference(h, (int32_t)rf->threads, NULL, 0);
        free(masks);
        if (st != DCP_OK) { /* the same on every rank: same inputs */
            fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
            dcpt_harness_destroy(h);
            return 1;
        }
        if (talk && !rf->json) {
            if (m == 0) print_header(c, cluster, h, job, rf);
            printf("\nmask %s\n", c->mask_names[m]);
            dcpt_field_t fields[MAXFIELDS];
            const dcpt_bench_t b = bench_of(rf, fields);
            dcpt_bench_table(&b);
            fflush(stdout);
        }
        for (int32_t s = 0; s < c->num_strategies; s++) {
            const int rc = run_one(c, cluster, h, c->mask_names[m], s, rf, job);
            failed = rc > failed ? rc : failed;
            if (job->ctx) dcpt_mpi_fault_point("between");
        }
        if (talk) fflush(stdout);
        dcpt_harness_destroy(h);
    }
    return failed;
}

/* One rank of a job: its context on the job's bootstrap, the cluster (discovered, or
 * --cluster / --ranks, which must match the job), every run; failed: 1 when any failed. */
typedef struct {
    dcpt_common_t *c;
    const dcpt_arg_t *args;
    int nargs;
    const run_flags_t *rf;
    uint64_t seed;
    dcp_bootstrap_t bs;
    int failed;
} rank_job_t;

static void *run_rank(void *arg)
{
    rank_job_t *a = arg;
    job_t job = {.bs = a->bs};
    const dcp_context_config_t cfg = {.bootstrap = &job.bs,
                                      .timeout_s = a->rf->timeout,
                                      .device = a->rf->device,
                                      .attn_engine = a->rf->engine,
                                      .deterministic = a->rf->deterministic};
    const dcp_status_t st = dcp_context_create(&cfg, &job.ctx);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: %s: %s\n", tool, job.bs.rank, dcp_status_string(st),
                dcp_last_error());
        fflush(NULL);
        dcpt_mpi_stop(1, 1);
        exit(1);
    }
    const dcpt_arg_t *args = a->args;
    const int nargs = a->nargs;
    const dcp_cluster_t *cluster = a->c->cluster, *found = NULL;
    const int modelled =
        dcpt_args_seen(args, nargs, "cluster") || dcpt_args_seen(args, nargs, "ranks");
    const dcp_status_t disc = dcp_context_cluster(job.ctx, &found);
    if (!modelled && disc != DCP_OK)
        dcpt_args_fail(tool, "cluster", "%s; give --cluster NxG", dcp_last_error());
    if (!modelled)
        cluster = found;
    else if (disc == DCP_OK)
        snprintf(job.cluster_note, sizeof job.cluster_note,
                 "modelled by --%s, overriding the discovered %dx%d",
                 dcpt_args_seen(args, nargs, "cluster") ? "cluster" : "ranks",
                 dcp_cluster_num_nodes(found),
                 dcp_cluster_num_ranks(found) / dcp_cluster_num_nodes(found));
    if (dcp_cluster_num_ranks(cluster) != job.bs.size)
        dcpt_args_fail(tool, "cluster", "the cluster has %d ranks, the job %d",
                       dcp_cluster_num_ranks(cluster), job.bs.size);
    a->failed = run_all(a->c, cluster, a->rf, &job, a->seed);
    /* a run that failed may have left the engines broken: the launcher ends the job */
    dcpt_mpi_fault_point("destroy");
    dcp_context_destroy(job.ctx);
    return NULL;
}

/* Ranks as processes (the bootstrap over MPI), each process driving --ranks-per-process
 * ranks as threads (a hybrid job: the in-process engine between them, UCX between
 * processes). */
static int run_job(int *argc, char ***argv, dcpt_common_t *c, const dcpt_arg_t *args, int nargs,
                   run_flags_t *rf, uint64_t seed)
{
    dcp_bootstrap_t procs;
    dcp_status_t st = dcpt_mpi_start(argc, argv, &procs);
    procs.timeout_s = rf->timeout; /* every collective step: 0 is $DCP_TIMEOUT_S or 60 s */
    const int32_t n = (int32_t)rf->ranks_per_process;
    dcpt_threads_t *hybrid = NULL;
    rank_job_t *ranks = NULL;
    if (st == DCP_OK && n > 1) st = dcpt_threads_create(&procs, n, &hybrid);
    if (st == DCP_OK) st = dcp_calloc(&ranks, n, sizeof *ranks, "ranks");
    if (st != DCP_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
        dcpt_mpi_stop(1, 1);
        return 1;
    }
    /* every rank finds the same configuration error: rank 0 says it */
    dcpt_args_set_quiet(procs.rank != 0);
    if (!dcpt_args_seen(args, nargs, "threads")) rf->threads = 1; /* the ranks share the cores */
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    for (int32_t l = 0; l < n; l++) {
        ranks[l] = (rank_job_t){
            c, args, nargs, rf, seed, hybrid ? *dcpt_threads_bootstrap(hybrid, l) : procs, 0};
        if (l > 0 && (!tid || pthread_create(&tid[l], NULL, run_rank, &ranks[l]) != 0)) {
            fprintf(stderr, "%s: cannot start rank thread %d\n", tool, l);
            dcpt_mpi_stop(1, 1);
            return 1;
        }
    }
    run_rank(&ranks[0]); /* local rank 0 on the main thread */
    int failed = ranks[0].failed;
    for (int32_t l = 1; l < n; l++) {
        pthread_join(tid[l], NULL);
        failed |= ranks[l].failed;
    }
    free(tid);
    free(ranks);
    dcpt_threads_destroy(hybrid);
    dcpt_mpi_stop(0, 0);
    return failed;
}

int main(int argc, char **argv)
{
    dcpt_common_flags_t f;
    dcpt_common_defaults(&f);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    run_flags_t rf = {0, 0, 0, 1, 3, cores > 0 ? cores : 1, 0, 1e-5, "cpu", NULL, 1, 0, NULL, 0, 0};
    enum { OWN = 16 };
    dcpt_arg_t args[DCPT_COMMON_NARGS + OWN];
    dcpt_common_args(&f, args);
    const dcpt_arg_t own[OWN] = {
        {"check", DCPT_ARG_FLAG, &rf.check, 0, 0,
         "compare with the double-precision reference; exit 1 beyond --tol", 0},
        {"backward", DCPT_ARG_FLAG, &rf.backward, 0, 0,
         "run the backward pass after the forward (with --check: dQ, dK, dV checked too)", 0},
        {"json", DCPT_ARG_FLAG, &rf.json, 0, 0,
         "one JSON object per (mask, strategy) instead of tables (with --layers per (strategy, "
         "kind) and a model object)",
         0},
        {"warmup", DCPT_ARG_INT, &rf.warmup, 0, 1000, "untimed runs before timing", 0},
        {"iters", DCPT_ARG_INT, &rf.iters, 1, 1000, "timed runs; exec time is their median", 0},
        {"threads", DCPT_ARG_INT, &rf.threads, 1, 64, "threads of the reference (default: cores)",
         0},
        {"timeout", DCPT_ARG_DOUBLE, &rf.timeout, 0, 0,
         "transfer timeout in s (default $DCP_TIMEOUT_S or 60)", 0},
        {"tol", DCPT_ARG_DOUBLE, &rf.tol, 0, 0, "relative tolerance of --check on the CPU", 0},
        {"device", DCPT_ARG_STR, &rf.device, 0, 0, "cpu, cuda or cuda:N", 0},
        {"ranks-per-process", DCPT_ARG_INT, &rf.ranks_per_process, 1, 1024,
         "under mpirun: ranks each process drives as threads", 0},
        {"dtype", DCPT_ARG_STR, &rf.dtype, 0, 0,
         "fp32 (cpu only), bf16 or fp16 storage (default: fp32 on cpu, bf16 on cuda)", 0},
        {"engine", DCPT_ARG_STR, &rf.engine, 0, 0,
         "attention engine: auto, own, cudnn or twin (cpu) (default $DCP_ATTN_ENGINE or auto)", 0},
        {"repeat", DCPT_ARG_INT, &rf.repeat, 0, 100000,
         "race check (with --check): N more runs on fresh contexts, each against the CPU's result",
         0},
        {"deterministic", DCPT_ARG_FLAG, &rf.deterministic, 0, 0,
         "deterministic mode: with --repeat, every run must give the first run's bits", 0},
        {"sinks", DCPT_ARG_FLAG, &rf.sinks, 0, 0,
         "learnable sinks (GPT-OSS) of random logits in every call (with --check --backward: "
         "d sinks checked too)",
         0},
        {"max-logit", DCPT_ARG_FLAG, &rf.max_logit, 0, 0,
         "every forward returns the max logit per query head (checked on every rank)", 0},
    };
    for (int i = 0; i < OWN; i++) args[DCPT_COMMON_NARGS + i] = own[i];
    dcpt_mpi_require_pmi(tool);
    if (dcpt_mpi_launched()) dcpt_args_set_fail_hook(dcpt_mpi_fail_early); /* others name it */
    dcpt_args_parse(argc, argv, args, DCPT_COMMON_NARGS + OWN, tool,
                    "Plans a batch, runs dynamic context-parallel attention on in-process ranks\n"
                    "and checks it against a single-device double-precision reference.");
    if (rf.timeout < 0) dcpt_args_fail(tool, "timeout", "must be >= 0");
    if (!(rf.tol > 0 && rf.tol <= 1)) dcpt_args_fail(tool, "tol", "%g is outside (0, 1]", rf.tol);
    if (rf.repeat > 0 && !rf.check) dcpt_args_fail(tool, "repeat", "needs --check");
    if (rf.repeat > 0 && dcpt_mpi_launched())
        dcpt_args_fail(tool, "repeat", "runs in-process ranks only, not under an MPI launcher");
    int32_t ordinal; /* the contexts pick theirs; this checks the flag before any work */
    if (dcpt_device_parse(rf.device, 0, "--device", &ordinal) != DCP_OK)
        dcpt_args_fail(tool, "device", "%s", dcp_last_error());
    const int gpu = ordinal >= 0;
    if (rf.engine) { /* the names the contexts take, checked before any planning */
        static const char *const engines[4] = {"auto", "own", "cudnn", "twin"};
        int known = 0;
        for (int i = 0; i < 4; i++) known |= !strcmp(rf.engine, engines[i]);
        if (!known) dcpt_args_fail(tool, "engine", "'%s': auto, own, cudnn or twin", rf.engine);
        if (gpu && !strcmp(rf.engine, "twin"))
            dcpt_args_fail(tool, "engine", "twin runs on the CPU (--device cpu)");
    }
    dcpt_common_t c;
    dcpt_common_resolve(tool, &f, args, &c);
    rf.layers = c.num_kinds > 0;
    c.shape.dtype = rf.dtype ? dcpt_dtype_arg(tool, "dtype", rf.dtype)
                             : (gpu ? DCP_DTYPE_BF16 : DCP_DTYPE_FP32);
    if (gpu && c.shape.dtype == DCP_DTYPE_FP32)
        dcpt_args_fail(tool, "dtype", "a GPU runs bf16 or fp16");
    const int nargs = DCPT_COMMON_NARGS + OWN;
    const job_t threads = {0};
    const int failed = dcpt_mpi_launched()
                           ? run_job(&argc, &argv, &c, args, nargs, &rf, (uint64_t)f.seed)
                           : run_all(&c, c.cluster, &rf, &threads, (uint64_t)f.seed);
    dcpt_common_free(&c);
    return failed;
}
