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
 * 2 bad flags.
 *
 * --device cuda runs the ranks on GPUs (thread rank r on GPU r % count, so all ranks may
 * share one GPU; a process on GPU local-rank % count, blocks over NCCL) in bf16 or fp16
 * (--dtype), checked by FlashAttention's rule against the plain low-precision computation;
 * --device cpu --dtype bf16 runs the same storage on the CPU (fp32 arithmetic).
 */
#include "include/base/error.h"
#include "include/dcp.h"
#include "plugin/cli/common.h"
#include "plugin/cli/harness.h"
#include "plugin/cli/mpi_launch.h"
#include "plugin/cli/report.h"
#include "plugin/context.h"
#include "plugin/hybrid.h"
#include "transport/bootstrap.h"

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
    int64_t ranks_per_process; /* under MPI: in-process ranks (threads) per process */
} run_flags_t;

/* The job when ranks are processes; ctx NULL when they are threads. */
typedef struct {
    dcp_context_t *ctx;
    dcp_bootstrap_t bs;
} job_t;

/* The forward's columns, then (with --backward) the backward's, then the verdict of both. */
/* host(us): how long a rank's call takes to return (the slowest rank's median); on a GPU
 * the call returns once its work is queued, so this is the CPU cost a training step pays.
 * wait(us): of the forward, the time spent blocked in transfer waits (COMM_WAIT) on the
 * host: near zero when the transfers moved while the kernels ran. */
static const dcp_col_t cols[] = {
    {"strategy", -8},     {"comm(MB)", 9},       {"inter(MB)", 9},     {"maxrank(MB)", 11},
    {"comp-imb(%)", 11},  {"mem-imb(%)", 10},    {"plan(ms)", 9},      {"exec(ms)", 9},
    {"host(us)", 9},      {"wait(us)", 8},       {"GFLOP/s", 8},       {"max-rel-err", 11},
    {"bwd-comm(MB)", 12}, {"bwd-inter(MB)", 13}, {"bwd-exec(ms)", 12}, {"bwd-host(us)", 12},
    {"bwd-GFLOP/s", 11},  {"bwd-rel-err", 11},   {"check", 5},
};
#define NCOLS    ((int)(sizeof cols / sizeof cols[0]))
#define FWD_COLS 12 /* columns before the backward's */
#define BWD_COLS 6

/* The columns shown: the backward's only with --backward. */
static int shown_cols(const run_flags_t *rf, dcp_col_t *out)
{
    int n = 0;
    for (int i = 0; i < NCOLS; i++)
        if (rf->backward || i < FWD_COLS || i >= FWD_COLS + BWD_COLS) out[n++] = cols[i];
    return n;
}

static double max3(const double *x)
{
    return fmax(x[0], fmax(x[1], x[2]));
}

static void print_header(const dcp_common_t *c, const dcp_cluster_t *cluster,
                         const dcp_harness_t *h, const job_t *job, const run_flags_t *rf)
{
    int32_t longest = 0;
    for (int32_t s = 0; s < h->num_seqs; s++)
        longest = h->lengths[s] > longest ? h->lengths[s] : longest;
    char ranks[96];
    if (job->ctx)
        snprintf(ranks, sizeof ranks, "processes, engines %s in a node, %s between nodes",
                 dcp_context_transport(job->ctx, 0), dcp_context_transport(job->ctx, 1));
    else
        snprintf(ranks, sizeof ranks, "threads");
    printf("# %s: %d ranks (%dx%d) as %s, %lld tokens in %d sequences (longest %d), heads "
           "%d/%d x %d, %s %s, block %d, head blocks %d, divisions %d\n",
           tool, dcp_cluster_num_ranks(cluster), dcp_cluster_num_nodes(cluster),
           dcp_cluster_num_ranks(cluster) / dcp_cluster_num_nodes(cluster), ranks,
           (long long)h->tokens, h->num_seqs, longest, c->shape.num_heads, c->shape.num_kv_heads,
           c->shape.head_dim, dcp_dtype_name(c->shape.dtype), rf->device, c->opts.block_size,
           c->opts.head_blocks, c->opts.divisions);
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
    snprintf(cell[8], 32, "%.0f", r->host_us);
    snprintf(cell[9], 32, "%.0f", r->wait_us);
    snprintf(cell[10], 32, "%.2f", r->exec_ms > 0 ? ps->total_flops / (r->exec_ms * 1e6) : 0.0);
    snprintf(cell[11], 32, rf->check ? "%.2e" : "-", r->max_rel_err);
    int n = FWD_COLS;
    if (rf->backward) {
        snprintf(cell[n++], 32, "%.2f", ps->bwd_comm_bytes / 1e6);
        snprintf(cell[n++], 32, "%.2f", ps->bwd_inter_node_bytes / 1e6);
        snprintf(cell[n++], 32, "%.1f", r->bwd_exec_ms);
        snprintf(cell[n++], 32, "%.0f", r->bwd_host_us);
        snprintf(cell[n++], 32, "%.2f",
                 r->bwd_exec_ms > 0 ? ps->bwd_flops / (r->bwd_exec_ms * 1e6) : 0.0);
        snprintf(cell[n++], 32, rf->check ? "%.2e" : "-", max3(r->max_rel_err_grad));
    }
    snprintf(cell[n++], 32, "%s", rf->check ? (r->passed ? "PASS" : "FAIL") : "-");
    dcp_col_t shown[NCOLS];
    dcp_table_row(stdout, shown, shown_cols(rf, shown), cell);
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
    dcp_json_num(&j, "host_us", r->host_us);
    dcp_json_num(&j, "wait_us", r->wait_us);
    dcp_json_num(&j, "gflops", r->exec_ms > 0 ? ps->total_flops / (r->exec_ms * 1e6) : 0.0);
    char digest[24];
    snprintf(digest, sizeof digest, "%016llx", (unsigned long long)r->digest);
    dcp_json_str(&j, "digest", digest);
    if (rf->backward) {
        static const char *const grad[3] = {"max_rel_err_dq", "max_rel_err_dk", "max_rel_err_dv"};
        dcp_json_bool(&j, "bwd_passed", rf->check ? r->bwd_passed : 1);
        for (int g = 0; g < 3; g++)
            dcp_json_num(&j, grad[g], rf->check ? r->max_rel_err_grad[g] : NAN);
        dcp_json_int(&j, "bwd_flops", ps->bwd_flops);
        dcp_json_int(&j, "bwd_comm_bytes", ps->bwd_comm_bytes);
        dcp_json_int(&j, "bwd_inter_node_bytes", ps->bwd_inter_node_bytes);
        dcp_json_num(&j, "bwd_compute_imbalance", ps->bwd_compute_imbalance);
        dcp_json_num(&j, "bwd_exec_ms", r->bwd_exec_ms);
        dcp_json_num(&j, "bwd_host_us", r->bwd_host_us);
        dcp_json_num(&j, "bwd_gflops",
                     r->bwd_exec_ms > 0 ? ps->bwd_flops / (r->bwd_exec_ms * 1e6) : 0.0);
    }
    dcp_json_end(&j);
}

/* Every rank planned the same batch alike: their plans' serialized bytes hash the same.
 * Collective; a rank whose planning failed makes every rank fail. */
static dcp_status_t plans_agree(const job_t *job, dcp_status_t st, const dcp_plan_t *plan)
{
    DCP_CHECK(dcp_bootstrap_agree(&job->bs, st, "planning"));
    uint64_t mine = 0xcbf29ce484222325ull, *all = NULL;
    unsigned char *bytes = NULL;
    size_t n = 0;
    st = dcp_plan_serialize(plan, NULL, 0, &n);
    if (st == DCP_OK) st = dcp_calloc(&bytes, (int64_t)n, 1, "plan bytes");
    if (st == DCP_OK) st = dcp_plan_serialize(plan, bytes, n, &n);
    for (size_t i = 0; st == DCP_OK && i < n; i++) mine = (mine ^ bytes[i]) * 0x100000001b3ull;
    free(bytes);
    if (st == DCP_OK) st = dcp_calloc(&all, job->bs.size, sizeof *all, "plan checksums");
    DCP_CHECK(dcp_bootstrap_agree(&job->bs, st, "plan checksum"));
    st = dcp_bootstrap_allgather(&job->bs, &mine, all, sizeof mine, "plan checksums");
    for (int32_t r = 1; st == DCP_OK && r < job->bs.size; r++)
        if (all[r] != all[0])
            st = dcp_set_error(DCP_ERR_INVALID_ARG,
                               "rank %d's plan differs from rank 0's (checksum %016llx vs "
                               "%016llx): were the ranks given different flags?",
                               r, (unsigned long long)all[r], (unsigned long long)all[0]);
    free(all);
    return st;
}

/* One (mask, strategy) run; returns 1 when it failed. A failed run of a job's ranks ends
 * the job (the engines may be broken, a peer may be dead). */
static int run_one(const dcp_common_t *c, const dcp_cluster_t *cluster, dcp_harness_t *h,
                   const char *mask, dcp_strategy_t strategy, const run_flags_t *rf,
                   const job_t *job)
{
    dcp_plan_options_t opts = c->opts;
    opts.strategy = strategy;
    const dcp_batch_t batch = dcp_harness_batch(h);
    dcp_plan_t *plan = NULL;
    dcp_status_t st = dcp_plan_create(&batch, &h->shape, &opts, cluster, &plan);
    dcp_plan_stats_t ps;
    dcp_harness_result_t r = {0};
    int broken = 0;
    if (st == DCP_OK) st = dcp_plan_get_stats(plan, &ps);
    if (job->ctx) {
        /* every step ends in a vote, so that all ranks go on or none does */
        dcp_mpi_fault_point("plan");
        st = plans_agree(job, st, plan);
        /* each process checks its own rows: the reference of its sequences only */
        if (st == DCP_OK && rf->check)
            st = dcp_bootstrap_agree(
                &job->bs, dcp_harness_reference(h, (int32_t)rf->threads, plan, job->bs.rank),
                "reference");
        if (st == DCP_OK) {
            dcp_mpi_fault_point("forward");
            st = dcp_harness_run_rank(h, plan, job->ctx, &job->bs, (int32_t)rf->warmup,
                                      (int32_t)rf->iters, rf->tol, &r);
            broken = st != DCP_OK;
        }
    } else if (st == DCP_OK) {
        st = dcp_harness_run(h, plan, (int32_t)rf->warmup, (int32_t)rf->iters, rf->timeout, rf->tol,
                             rf->device, &r);
    }
    dcp_plan_destroy(plan);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: mask %s, strategy %s: %s: %s\n", tool,
                job->ctx ? job->bs.rank : 0, mask, dcp_strategy_name(strategy),
                dcp_status_string(st), dcp_last_error());
        if (broken) {
            fflush(NULL);
            dcp_mpi_stop(1, 1);
            exit(1);
        }
        return 1;
    }
    if (!job->ctx || job->bs.rank == 0) {
        if (rf->json)
            print_json(mask, dcp_strategy_name(strategy), &ps, &r, rf);
        else
            print_row(dcp_strategy_name(strategy), &ps, &r, rf);
    }
    return rf->check && !r.passed;
}

/* Every (mask, strategy) pair; returns 1 when any failed. */
static int run_all(const dcp_common_t *c, const dcp_cluster_t *cluster, const run_flags_t *rf,
                   const job_t *job, uint64_t seed)
{
    int failed = 0;
    const int talk = !job->ctx || job->bs.rank == 0;
    for (int32_t m = 0; m < c->num_masks; m++) {
        const int32_t nseq = c->batch_first[1]; /* one batch */
        dcp_mask_t *masks = calloc((size_t)nseq, sizeof *masks);
        for (int32_t s = 0; masks && s < nseq; s++) masks[s] = c->masks[m];
        dcp_harness_t *h = NULL;
        dcp_status_t st = masks ? dcp_harness_create(c->lengths, nseq, masks, &c->shape, seed, &h)
                                : DCP_ERR_NO_MEMORY;
        if (st == DCP_OK && rf->backward) st = dcp_harness_enable_backward(h, seed);
        if (st == DCP_OK && rf->check && !job->ctx)
            st = dcp_harness_reference(h, (int32_t)rf->threads, NULL, 0);
        free(masks);
        if (st != DCP_OK) { /* the same on every rank: same inputs */
            fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
            dcp_harness_destroy(h);
            return 1;
        }
        if (talk && !rf->json) {
            if (m == 0) print_header(c, cluster, h, job, rf);
            printf("\nmask %s\n", c->mask_names[m]);
            dcp_col_t shown[NCOLS];
            dcp_table_header(stdout, shown, shown_cols(rf, shown));
            fflush(stdout);
        }
        for (int32_t s = 0; s < c->num_strategies; s++) {
            failed |= run_one(c, cluster, h, c->mask_names[m], c->strategies[s], rf, job);
            if (job->ctx) dcp_mpi_fault_point("between");
        }
        if (talk) fflush(stdout);
        dcp_harness_destroy(h);
    }
    return failed;
}

/* One rank of a job: its context on the job's bootstrap, the cluster (discovered, or
 * --cluster / --ranks, which must match the job), every run; returns 1 when any failed. */
typedef struct {
    dcp_common_t *c;
    const dcp_arg_t *args;
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
    const dcp_context_config_t cfg = {
        .bootstrap = &job.bs, .timeout_s = a->rf->timeout, .device = a->rf->device};
    const dcp_status_t st = dcp_context_create(&cfg, &job.ctx);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: rank %d: %s: %s\n", tool, job.bs.rank, dcp_status_string(st),
                dcp_last_error());
        fflush(NULL);
        dcp_mpi_stop(1, 1);
        exit(1);
    }
    const dcp_cluster_t *cluster = a->c->cluster;
    if (!dcp_args_seen(a->args, a->nargs, "cluster") &&
        !dcp_args_seen(a->args, a->nargs, "ranks") &&
        dcp_context_cluster(job.ctx, &cluster) != DCP_OK)
        dcp_args_fail(tool, "cluster", "%s; give --cluster NxG", dcp_last_error());
    if (dcp_cluster_num_ranks(cluster) != job.bs.size)
        dcp_args_fail(tool, "cluster", "the cluster has %d ranks, the job %d",
                      dcp_cluster_num_ranks(cluster), job.bs.size);
    a->failed = run_all(a->c, cluster, a->rf, &job, a->seed);
    /* a run that failed may have left the engines broken: the launcher ends the job */
    dcp_mpi_fault_point("destroy");
    dcp_context_destroy(job.ctx);
    return NULL;
}

/* Ranks as processes (the bootstrap over MPI), each process driving --ranks-per-process
 * ranks as threads (a hybrid job: the in-process engine between them, UCX between
 * processes). */
static int run_job(int *argc, char ***argv, dcp_common_t *c, const dcp_arg_t *args, int nargs,
                   run_flags_t *rf, uint64_t seed)
{
    dcp_bootstrap_t procs;
    dcp_status_t st = dcp_mpi_start(argc, argv, &procs);
    procs.timeout_s = rf->timeout; /* every collective step: 0 is $DCP_TIMEOUT_S or 60 s */
    const int32_t n = (int32_t)rf->ranks_per_process;
    dcp_hybrid_t *hybrid = NULL;
    rank_job_t *ranks = NULL;
    if (st == DCP_OK && n > 1) st = dcp_hybrid_create(&procs, n, &hybrid);
    if (st == DCP_OK) st = dcp_calloc(&ranks, n, sizeof *ranks, "ranks");
    if (st != DCP_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, dcp_status_string(st), dcp_last_error());
        dcp_mpi_stop(1, 1);
        return 1;
    }
    if (!dcp_args_seen(args, nargs, "threads")) rf->threads = 1; /* the ranks share the cores */
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    for (int32_t l = 0; l < n; l++) {
        ranks[l] = (rank_job_t){
            c, args, nargs, rf, seed, hybrid ? *dcp_hybrid_bootstrap(hybrid, l) : procs, 0};
        if (l > 0 && (!tid || pthread_create(&tid[l], NULL, run_rank, &ranks[l]) != 0)) {
            fprintf(stderr, "%s: cannot start rank thread %d\n", tool, l);
            dcp_mpi_stop(1, 1);
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
    dcp_hybrid_destroy(hybrid);
    dcp_mpi_stop(0, 0);
    return failed;
}

int main(int argc, char **argv)
{
    dcp_common_flags_t f;
    dcp_common_defaults(&f);
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    run_flags_t rf = {0, 0, 0, 0, 1, cores > 0 ? cores : 1, 0, 1e-5, "cpu", NULL, 1};
    enum { OWN = 11 };
    dcp_arg_t args[DCP_COMMON_NARGS + OWN];
    dcp_common_args(&f, args);
    const dcp_arg_t own[OWN] = {
        {"check", DCP_ARG_FLAG, &rf.check, 0, 0,
         "compare with the double-precision reference; exit 1 beyond --tol", 0},
        {"backward", DCP_ARG_FLAG, &rf.backward, 0, 0,
         "run the backward pass after the forward (with --check: dQ, dK, dV checked too)", 0},
        {"json", DCP_ARG_FLAG, &rf.json, 0, 0,
         "one JSON object per (mask, strategy) instead of tables", 0},
        {"warmup", DCP_ARG_INT, &rf.warmup, 0, 1000, "untimed runs before timing (default 0)", 0},
        {"iters", DCP_ARG_INT, &rf.iters, 1, 1000,
         "timed runs; exec time is their median (default 1)", 0},
        {"threads", DCP_ARG_INT, &rf.threads, 1, 64, "threads of the reference (default: cores)",
         0},
        {"timeout", DCP_ARG_DOUBLE, &rf.timeout, 0, 0,
         "transfer timeout in s (default $DCP_TIMEOUT_S or 60)", 0},
        {"tol", DCP_ARG_DOUBLE, &rf.tol, 0, 0,
         "relative tolerance of --check on the CPU (default 1e-5)", 0},
        {"device", DCP_ARG_STR, &rf.device, 0, 0, "cpu, cuda or cuda:N (default cpu)", 0},
        {"ranks-per-process", DCP_ARG_INT, &rf.ranks_per_process, 1, 1024,
         "under mpirun: ranks each process drives as threads (default 1)", 0},
        {"dtype", DCP_ARG_STR, &rf.dtype, 0, 0,
         "fp32 (cpu only), bf16 or fp16 storage (default: fp32 on cpu, bf16 on cuda)", 0},
    };
    for (int i = 0; i < OWN; i++) args[DCP_COMMON_NARGS + i] = own[i];
    if (dcp_mpi_launched()) dcp_args_set_fail_hook(dcp_mpi_fail_early); /* others name it */
    dcp_args_parse(argc, argv, args, DCP_COMMON_NARGS + OWN, tool,
                   "Plans a batch, runs dynamic context-parallel attention on in-process ranks\n"
                   "and checks it against a single-device double-precision reference.");
    if (rf.timeout < 0) dcp_args_fail(tool, "timeout", "must be >= 0");
    if (!(rf.tol > 0 && rf.tol <= 1)) dcp_args_fail(tool, "tol", "%g is outside (0, 1]", rf.tol);
    int32_t ordinal; /* the contexts pick theirs; this checks the flag before any work */
    if (dcp_device_parse(rf.device, 0, "--device", &ordinal) != DCP_OK)
        dcp_args_fail(tool, "device", "%s", dcp_last_error());
    const int gpu = ordinal >= 0;
    dcp_common_t c;
    dcp_common_resolve(tool, &f, args, &c);
    c.shape.dtype =
        rf.dtype ? dcp_dtype_arg(tool, "dtype", rf.dtype) : (gpu ? DCP_DTYPE_BF16 : DCP_DTYPE_FP32);
    if (gpu && c.shape.dtype == DCP_DTYPE_FP32)
        dcp_args_fail(tool, "dtype", "a GPU runs bf16 or fp16");
    const int nargs = DCP_COMMON_NARGS + OWN;
    const job_t threads = {0};
    const int failed = dcp_mpi_launched()
                           ? run_job(&argc, &argv, &c, args, nargs, &rf, (uint64_t)f.seed)
                           : run_all(&c, c.cluster, &rf, &threads, (uint64_t)f.seed);
    dcp_common_free(&c);
    return failed;
}
