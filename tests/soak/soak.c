/*
 * dcp-soak: training steps on small long-tailed batches, run as processes under mpirun, that
 * watch dcp for slow leaks (tests/README.md "The soak").
 *
 *   mpirun -np 4 build/bin/dcp-soak [--steps N] [--every K] [--warmup W] [--lookahead A]
 *                                   [--seed S] [--timeout SEC]
 *
 * Every rank creates one context over the MPI bootstrap and one planner service (a worker, a
 * cache of 16 plans) on the cluster the context found. Step i runs the plan of batch
 * (i mod 100) / 2: a cycle of 50 batches of 2K-4K tokens drawn from the built-in document
 * length histogram, every sequence with its own mask (full, causal, sliding window, lambda,
 * blockwise, shared question), each batch asked for twice in a row (the second a cache hit),
 * the others evicting. Plans come from the planner A steps ahead (the look-ahead planner:
 * step i + A is submitted when step i starts). Each step is a forward and a backward pass.
 *
 * Every K steps (default 100, one cycle) the ranks collect the plans they asked for, so that
 * the planner is idle, meet at a barrier and sample dcp's own live allocated bytes and blocks
 * (the allocation hook's count of blocks made by dcp's allocator and not freed:
 * tests/unit/fault_hook.h), open file descriptors and the time per step; rank 0 prints one
 * line per sample. After the warm-up (default 200 steps), every sample must equal the first:
 * the program exits 1 (and says which figure moved) when a rank's live bytes, live blocks or
 * descriptors differ between samples, or when any call fails.
 */
#include "include/base/error.h"
#include "plugin/cli/support/lengths.h"
#include "plugin/cli/support/rng.h"
#include "tests/unit/fault_hook.h"

#include <dirent.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CYCLE     100 /* steps of one cycle of batches */
#define MAX_RANKS 64

typedef struct {
    int64_t steps, every, warmup;
    int32_t lookahead;
    uint64_t seed;
    double timeout_s;
} opts_t;

/* One batch of the cycle: lengths, masks, and the dcp_batch_t over them. */
typedef struct {
    int32_t *lengths;
    int32_t count;
    dcp_mask_t *masks;
    dcp_batch_t batch;
} soak_batch_t;

static const dcp_attn_shape_t shape = {2, 1, 16, DCP_DTYPE_FP32, 0.0f};

static dcp_status_t make_batch(uint64_t seed, int id, soak_batch_t *b)
{
    dcpt_rng_t rng = {seed * 1000003 + (uint64_t)id};
    const int64_t tokens = dcpt_rng_range(&rng, 2048, 4096);
    const dcpt_length_source_t src = {NULL, 0};
    DCP_CHECK(dcpt_lengths_fill(&src, tokens, (int32_t)tokens, dcpt_rng_next(&rng), &b->lengths,
                                &b->count));
    b->masks = calloc((size_t)b->count, sizeof *b->masks);
    if (!b->masks) return dcp_set_error(DCP_ERR_NO_MEMORY, "soak: masks");
    static const char *const kinds[6] = {
        "full", "causal", "window:128", "lambda:16:256", "blockwise:64:2", "shared-question:0.2:4"};
    for (int32_t s = 0; s < b->count; s++)
        DCP_CHECK(dcp_mask_parse(kinds[dcpt_rng_range(&rng, 0, 5)], &b->masks[s]));
    b->batch = (dcp_batch_t){.num_seqs = b->count, .lengths = b->lengths, .masks = b->masks};
    return DCP_OK;
}

static int batch_of(int64_t step)
{
    return (int)(step % CYCLE) / 2;
}

static int64_t open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int64_t n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* One training step of `plan` on this rank: forward and backward on fresh inputs. */
static dcp_status_t train_step(dcp_context_t *ctx, const dcp_plan_t *plan, int32_t rank,
                               uint64_t seed)
{
    int64_t tokens = 0;
    DCP_CHECK(dcp_plan_local_layout(plan, rank, NULL, 0, NULL, &tokens));
    const int64_t qn = tokens * shape.num_heads * shape.head_dim,
                  kn = tokens * shape.num_kv_heads * shape.head_dim;
    float *m = malloc(((size_t)(4 * qn + 6 * kn + tokens * shape.num_heads) + 1) * sizeof *m);
    if (!m) return dcp_set_error(DCP_ERR_NO_MEMORY, "soak: tensors");
    float *q = m, *o = q + qn, *dout = o + qn, *dq = dout + qn, *k = dq + qn, *v = k + kn,
          *dk = v + kn, *dv = dk + kn, *lse = dv + kn;
    dcpt_rng_t rng = {seed};
    for (int64_t i = 0; i < qn; i++) q[i] = (float)dcpt_rng_uniform(&rng) - 0.5f;
    for (int64_t i = 0; i < qn; i++) dout[i] = (float)dcpt_rng_uniform(&rng) - 0.5f;
    for (int64_t i = 0; i < 2 * kn; i++) k[i] = (float)dcpt_rng_uniform(&rng) - 0.5f;
    const dcp_tensors_t io = {q, k, v, o, lse, 0.0f};
    const dcp_grad_tensors_t gio = {io, dout, dq, dk, dv};
    dcp_status_t st = dcp_forward(ctx, plan, &io, NULL);
    if (st == DCP_OK) st = dcp_backward(ctx, plan, &gio, NULL);
    for (int64_t i = 0; st == DCP_OK && i < qn; i++)
        if (!(o[i] == o[i]) || !(dq[i] == dq[i]))
            st = dcp_set_error(DCP_ERR_INTERNAL, "soak: NaN in the outputs of rank %d", rank);
    free(m);
    return st;
}

typedef struct {
    int64_t live_bytes, live_blocks, fds;
    double ms_per_step, wait_ms;
} sample_t;

static int parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){10000, CYCLE, 2 * CYCLE, 2, 45, 60.0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!v) return 0;
        if (!strcmp(a, "--steps"))
            o->steps = strtoll(v, &end, 10);
        else if (!strcmp(a, "--every"))
            o->every = strtoll(v, &end, 10);
        else if (!strcmp(a, "--warmup"))
            o->warmup = strtoll(v, &end, 10);
        else if (!strcmp(a, "--lookahead"))
            o->lookahead = (int32_t)strtol(v, &end, 10);
        else if (!strcmp(a, "--seed"))
            o->seed = strtoull(v, &end, 10);
        else if (!strcmp(a, "--timeout"))
            o->timeout_s = strtod(v, &end);
        else
            return 0;
        if (!end || *end) return 0;
        i++;
    }
    /* samples at the same place of the cycle, so that the same plans are alive in each */
    return o->steps >= 1 && o->every >= 1 && o->every % CYCLE == 0 && o->warmup >= 0 &&
           o->lookahead >= 1 && o->lookahead < CYCLE && o->timeout_s > 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    opts_t o;
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (!parse(argc, argv, &o) || size > MAX_RANKS) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: mpirun -np R %s [--steps N] [--every K (a multiple of %d)] "
                    "[--warmup W] [--lookahead A] [--seed S] [--timeout SEC]\n",
                    argv[0], CYCLE);
        MPI_Finalize();
        return 2;
    }
    dcp_test_alloc_track(1);
    soak_batch_t batches[CYCLE / 2];
    memset(batches, 0, sizeof batches);
    dcp_bootstrap_t bs;
    dcp_context_t *ctx = NULL;
    dcp_planner_t *planner = NULL;
    const dcp_cluster_t *cluster = NULL;
    dcp_status_t st = DCP_OK;
    for (int b = 0; b < CYCLE / 2 && st == DCP_OK; b++) st = make_batch(o.seed, b, &batches[b]);
    if (st == DCP_OK) st = dcp_bootstrap_mpi(&bs);
    bs.timeout_s = o.timeout_s;
    const dcp_context_config_t cfg = {.bootstrap = &bs, .timeout_s = o.timeout_s};
    if (st == DCP_OK) st = dcp_context_create(&cfg, &ctx);
    if (st == DCP_OK) st = dcp_context_cluster(ctx, &cluster);
    const dcp_planner_config_t pcfg = {1, 16, 0};
    if (st == DCP_OK) st = dcp_planner_create(&pcfg, cluster, &planner);
    dcp_plan_options_t popts;
    dcp_plan_options_default(&popts);
    popts.block_size = 256;
    popts.divisions = 2;
    /* tickets of steps [i, i + lookahead): ring by step */
    uint64_t *ticket = calloc((size_t)o.lookahead, sizeof *ticket);
    dcp_plan_t **ready = calloc((size_t)o.lookahead, sizeof *ready); /* collected at samples */
    sample_t first = {0}, s = {0};
    int have_first = 0, moved = 0;
    double t_mark = dcp_now(), wait_mark = 0;
    if (rank == 0 && st == DCP_OK)
        printf("# dcp-soak: %d processes, %lld steps, cycle of %d steps over %d batches of "
               "2048-4096 tokens, heads %d/%d x %d, look-ahead %d, sample every %lld after "
               "%lld warm-up steps\n"
               "%8s %10s %10s %14s %12s %8s %9s\n",
               size, (long long)o.steps, CYCLE, CYCLE / 2, shape.num_heads, shape.num_kv_heads,
               shape.head_dim, o.lookahead, (long long)o.every, (long long)o.warmup, "step",
               "ms/step", "wait(ms)", "live bytes", "live blocks", "fds", "check");
    for (int64_t i = 0; i < o.lookahead && st == DCP_OK; i++)
        st = dcp_planner_submit(planner, &batches[batch_of(i)].batch, &shape, &popts,
                                &ticket[i % o.lookahead]);
    for (int64_t i = 0; i < o.steps && st == DCP_OK; i++) {
        const int32_t slot = (int32_t)(i % o.lookahead);
        dcp_plan_t *plan = ready[slot];
        ready[slot] = NULL;
        if (!plan) st = dcp_planner_wait(planner, ticket[slot], &plan);
        /* the pipeline stays full to the end: destroy drops the last tickets */
        if (st == DCP_OK)
            st = dcp_planner_submit(planner, &batches[batch_of(i + o.lookahead)].batch, &shape,
                                    &popts, &ticket[slot]);
        if (st == DCP_OK) st = train_step(ctx, plan, rank, o.seed ^ (uint64_t)i * 7919);
        dcp_plan_destroy(plan);
        if (st != DCP_OK || (i + 1) % o.every != 0) continue;
        /* a sample: the plans asked for collected (the planner idle), every rank here */
        for (int64_t j = i + 1; j < i + 1 + o.lookahead && st == DCP_OK; j++)
            st = dcp_planner_wait(planner, ticket[j % o.lookahead], &ready[j % o.lookahead]);
        if (st == DCP_OK) st = dcp_context_barrier(ctx);
        if (st != DCP_OK) break;
        dcp_planner_stats_t ps;
        dcp_planner_stats(planner, &ps);
        const double now = dcp_now();
        s = (sample_t){dcp_test_alloc_live_bytes(), dcp_test_alloc_live_blocks(), open_fds(),
                       (now - t_mark) * 1e3 / (double)o.every, ps.wait_ms - wait_mark};
        t_mark = now;
        wait_mark = ps.wait_ms;
        sample_t all[MAX_RANKS];
        MPI_Gather(&s, sizeof s, MPI_BYTE, all, sizeof s, MPI_BYTE, 0, MPI_COMM_WORLD);
        /* after the warm-up, each rank's figures must stay those of its first sample */
        const int counted = i + 1 > o.warmup;
        const int differs =
            have_first && (s.live_bytes != first.live_bytes || s.live_blocks != first.live_blocks ||
                           s.fds != first.fds);
        if (counted && !have_first) {
            first = s;
            have_first = 1;
        }
        int any = 0;
        MPI_Reduce(&differs, &any, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
        moved |= differs;
        if (rank == 0) {
            char bytes[256] = "", blocks[256] = "", fds[128] = "";
            double ms = 0, wait = 0;
            for (int r = 0; r < size; r++) {
                const size_t nb = strlen(bytes), nk = strlen(blocks), nf = strlen(fds);
                snprintf(bytes + nb, sizeof bytes - nb, "%s%lld", r ? "/" : "",
                         (long long)all[r].live_bytes);
                snprintf(blocks + nk, sizeof blocks - nk, "%s%lld", r ? "/" : "",
                         (long long)all[r].live_blocks);
                snprintf(fds + nf, sizeof fds - nf, "%s%lld", r ? "/" : "", (long long)all[r].fds);
                ms = all[r].ms_per_step > ms ? all[r].ms_per_step : ms;
                wait = all[r].wait_ms > wait ? all[r].wait_ms : wait;
            }
            printf("%8lld %10.2f %10.1f %14s %12s %8s %9s\n", (long long)(i + 1), ms, wait, bytes,
                   blocks, fds,
                   !counted ? "warm-up"
                   : any    ? "MOVED"
                            : "flat");
            fflush(stdout);
        }
    }
    if (st != DCP_OK)
        fprintf(stderr, "dcp-soak: rank %d: %s: %s\n", rank, dcp_status_string(st),
                dcp_last_error());
    for (int32_t j = 0; j < o.lookahead; j++) dcp_plan_destroy(ready[j]);
    dcp_planner_destroy(planner);
    dcp_context_destroy(ctx);
    for (int b = 0; b < CYCLE / 2; b++) {
        free(batches[b].lengths);
        free(batches[b].masks);
    }
    free(ticket);
    free(ready);
    /* everything destroyed: dcp holds nothing */
    const int64_t left = dcp_test_alloc_live_blocks();
    if (left) {
        fprintf(stderr, "dcp-soak: rank %d: %lld blocks left after everything was destroyed\n",
                rank, (long long)left);
        dcp_test_alloc_live_print(stderr, 8);
    }
    int bad = st != DCP_OK || moved || left != 0 || !have_first, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("dcp-soak: %s\n", !any ? "PASS: live bytes, live blocks and descriptors flat "
                                        "after the warm-up, nothing left at the end"
                                      : "FAIL");
    MPI_Finalize();
    return any ? 1 : 0;
}
