#define _GNU_SOURCE /* dladdr */
#include "tests/unit/walk.h"

#include "include/base/env.h"
#include "include/base/error.h"
#include "plugin/cli/support/rng.h"
#include "tests/unit/walk_procs.h"

#include <CUnit/CUnit.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* (the runner has checked the test settings: dcp_env_check) */
int t_walk_full(void)
{
    return strcmp(dcp_env_str_value(DCP_ENV_WALK), "full") == 0;
}

uint64_t t_walk_seed(void)
{
    return (uint64_t)dcp_env_int_value(DCP_ENV_WALK_SEED);
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t pick(int64_t total, int64_t count, uint64_t seed, int all, int64_t *n_out)
{
    if (total <= 0) return 0;
    if (all || total <= count) {
        for (int64_t i = 0; i < total; i++) n_out[i] = i + 1;
        return total;
    }
    dcpt_rng_t rng = {seed};
    int64_t k = 0;
    n_out[k++] = 1;
    if (count > 1) n_out[k++] = total;
    while (k < count) {
        const int64_t n = dcpt_rng_range(&rng, 2, total - 1 > 2 ? total - 1 : 2);
        int dup = 0;
        for (int64_t i = 0; i < k; i++) dup |= n_out[i] == n;
        if (!dup) n_out[k++] = n;
    }
    qsort(n_out, (size_t)k, sizeof *n_out, cmp_i64);
    return k;
}

int64_t t_walk_pick(int64_t total, int64_t count, uint64_t seed, int64_t *n_out)
{
    return pick(total, count, seed, t_walk_full(), n_out);
}

int64_t t_walk_pick_sample(int64_t total, int64_t count, uint64_t seed, int64_t *n_out)
{
    return pick(total, count, seed, 0, n_out);
}

uint64_t t_digest(uint64_t h, const void *bytes, size_t n)
{
    if (h == 0) h = 1469598103934665603ull;
    const unsigned char *b = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

void t_walk_print_sites(const char *name, const void *const *sites, int64_t n)
{
    const char *path = dcp_env_str_value(DCP_ENV_WALK_SITES);
    Dl_info self;
    if (!path || !*path || n == 0 || !dladdr((const void *)t_walk_print_sites, &self) ||
        !self.dli_fname)
        return;
    FILE *out = fopen(path, "a");
    if (!out) return;
    fprintf(out, "# walk %s: %lld sites\n", name, (long long)n);
    fclose(out);
    /* addr2line on the program's file, with addresses relative to where it is loaded; a
     * return address is one past its call */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "addr2line -e '%s' >> '%s'", self.dli_fname, path);
    FILE *p = popen(cmd, "w");
    if (!p) return;
    for (int64_t i = 0; i < n; i++) {
        Dl_info si;
        uintptr_t at = (uintptr_t)sites[i] - 1;
        if (dladdr(sites[i], &si) && si.dli_fbase) at -= (uintptr_t)si.dli_fbase;
        fprintf(p, "%#lx\n", (unsigned long)at);
    }
    pclose(p);
}

static const char *status_name(dcp_status_t st)
{
    return dcp_status_string(st);
}

/* "function at file:line" of a site (addr2line on the program), or its address. */
static const char *site_name(const void *site, char *buf, size_t cap)
{
    Dl_info si;
    snprintf(buf, cap, "%p", site);
    if (!site || !dladdr(site, &si) || !si.dli_fname) return buf;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "addr2line -f -s -e '%s' %#lx 2>/dev/null", si.dli_fname,
             (unsigned long)((uintptr_t)site - 1 - (uintptr_t)si.dli_fbase));
    FILE *p = popen(cmd, "r");
    if (!p) return buf;
    char fn[256] = "", line[256] = "";
    if (fgets(fn, sizeof fn, p) && fgets(line, sizeof line, p)) {
        fn[strcspn(fn, "\n")] = line[strcspn(line, "\n")] = '\0';
        snprintf(buf, cap, "%s at %s", fn, line);
    }
    pclose(p);
    return buf;
}

/* The sites at which a failure was injected, kept distinct. */
typedef struct {
    const void **at;
    int64_t n;
} site_set_t;

static void set_add(site_set_t *s, const void *site)
{
    for (int64_t i = 0; i < s->n; i++)
        if (s->at[i] == site) return;
    s->at[s->n++] = site;
}

static int set_has(const site_set_t *s, const void *site)
{
    for (int64_t i = 0; i < s->n; i++)
        if (s->at[i] == site) return 1;
    return 0;
}

void t_alloc_walk(const char *name, t_run_fn run, void *arg, int64_t sample, t_walk_result_t *out)
{
    t_walk_result_t r = {0};
    dcp_test_alloc_track(1);
    /* the clean run: its result, allocations and sites */
    dcp_test_sites_reset();
    dcp_test_sites_record(1);
    dcp_test_alloc_fail_at(0);
    uint64_t clean = 0;
    const dcp_status_t st0 = run(arg, &clean);
    dcp_test_sites_record(0);
    r.total = dcp_test_alloc_count();
    r.sites = dcp_test_sites_count();
    if (st0 != DCP_OK)
        fprintf(stderr, "walk %s: the clean run failed: %s\n", name, dcp_last_error());
    CU_ASSERT_EQUAL_FATAL(st0, DCP_OK);
    CU_ASSERT_EQUAL(dcp_test_alloc_live_blocks(), 0);
    const void **clean_sites = calloc((size_t)r.sites + 1, sizeof *clean_sites);
    for (int64_t i = 0; i < r.sites; i++) clean_sites[i] = dcp_test_site(i);
    site_set_t failed = {calloc((size_t)DCP_TEST_SITES_MAX, sizeof(void *)), 0};
    site_set_t absorbed = {calloc((size_t)DCP_TEST_SITES_MAX, sizeof(void *)), 0};
    double slowest = 0;
    int64_t *ns = calloc((size_t)r.total + 1, sizeof *ns);
    /* a negative sample is a sample in full walks too */
    const int64_t count =
        sample < 0
            ? t_walk_pick_sample(r.total, -sample, t_walk_seed() ^ t_digest(0, name, strlen(name)),
                                 ns)
            : t_walk_pick(r.total, sample, t_walk_seed() ^ t_digest(0, name, strlen(name)), ns);
    int bad = 0;
    /* the N drawn, then (full walks) the first allocation at each site still not failed */
    for (int64_t k = 0; k < count + (t_walk_full() ? r.sites : 0) && bad < 5; k++) {
        const int64_t n = k < count ? ns[k] : 0;
        const void *target = k < count ? NULL : clean_sites[k - count];
        if (target && set_has(&failed, target)) continue;
        const int64_t before = dcp_test_alloc_live_blocks(); /* 0 unless a run leaked */
        if (target)
            dcp_test_alloc_fail_site(target);
        else
            dcp_test_alloc_fail_at(n);
        uint64_t digest = 0;
        const double t0 = dcp_now();
        const dcp_status_t st = run(arg, &digest);
        if (dcp_now() - t0 > slowest) slowest = dcp_now() - t0;
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st == DCP_OK ? "" : dcp_last_error());
        const void *site = NULL;
        const int fired = dcp_test_alloc_fired(&site);
        dcp_test_alloc_fail_at(0);
        const int64_t leaked = dcp_test_alloc_live_blocks() - before;
        if (!fired) continue; /* a run of fewer allocations (threads): nothing was injected */
        r.runs++;
        r.directed += target != NULL;
        set_add(&failed, site);
        const int ok = st == DCP_OK ? digest == clean : st == DCP_ERR_NO_MEMORY && msg[0];
        r.named += st != DCP_OK && ok;
        r.absorbed += st == DCP_OK && ok;
        if (st == DCP_OK && ok) set_add(&absorbed, site);
        if (!ok || leaked) {
            bad++;
            char where[384];
            fprintf(stderr,
                    "walk %s: allocation %lld of %lld (%s) failed: %s%s%s; %lld blocks "
                    "(%lld bytes) left behind\n",
                    name, (long long)n, (long long)r.total, site_name(site, where, sizeof where),
                    status_name(st),
                    st == DCP_OK ? (digest == clean ? "" : ", a different result") : ": ", msg,
                    (long long)leaked, (long long)dcp_test_alloc_live_bytes());
            dcp_test_alloc_live_print(stderr, 8);
        }
        CU_ASSERT(ok);
        CU_ASSERT_EQUAL(leaked, 0);
    }
    for (int64_t i = 0; i < r.sites; i++) r.sites_missed += !set_has(&failed, clean_sites[i]);
    r.sites_failed = failed.n;
    for (int64_t i = 0; i < r.sites && t_walk_full(); i++) {
        char where[384];
        if (!set_has(&failed, clean_sites[i]))
            fprintf(stderr, "walk %s: site %s was reached by the clean run but never failed\n",
                    name, site_name(clean_sites[i], where, sizeof where));
    }
    if (t_walk_full()) CU_ASSERT_EQUAL(r.sites_missed, 0);
    printf("  walk %-22s %6lld allocations, %4lld sites; %5lld runs failed (%lld aimed at a "
           "site): %5lld named, %4lld absorbed; %4lld sites failed%s; slowest run %.2f s\n",
           name, (long long)r.total, (long long)r.sites, (long long)r.runs, (long long)r.directed,
           (long long)r.named, (long long)r.absorbed, (long long)r.sites_failed,
           t_walk_full() && sample >= 0 ? "" : " (sampled N)", slowest);
    for (int64_t i = 0; i < absorbed.n && t_walk_full(); i++) {
        char where[384];
        printf("    absorbed at %s\n", site_name(absorbed.at[i], where, sizeof where));
    }
    fflush(stdout);
    t_walk_print_sites(name, clean_sites, r.sites);
    free(ns);
    free(failed.at);
    free(absorbed.at);
    free(clean_sites);
    dcp_test_alloc_track(0);
    if (out) *out = r;
}

void t_walk_batch_init(t_walk_batch_t *b, dcp_strategy_t strategy)
{
    memset(b, 0, sizeof *b);
    static const int32_t len[4] = {700, 300, 130, 60};
    memcpy(b->lengths, len, sizeof len);
    b->masks[0].kind = DCP_MASK_CAUSAL;
    b->masks[1] = (dcp_mask_t){.kind = DCP_MASK_LAMBDA, .sink = 16, .window = 128};
    b->masks[2] = (dcp_mask_t){.kind = DCP_MASK_WINDOW, .window = 64};
    for (int32_t i = 0; i < 60; i++) { /* the first 10 keys and the query's own 8-key run */
        int32_t *r = b->ranges + 4 * i;
        const int32_t own = i / 8 * 8 > 10 ? i / 8 * 8 : 10;
        r[0] = 0, r[1] = i < 10 ? i + 1 : 10;
        r[2] = i < 10 ? i + 1 : own, r[3] = i + 1;
    }
    b->masks[3] = (dcp_mask_t){.kind = DCP_MASK_CUSTOM, .ranges = b->ranges, .num_rows = 60};
    b->batch = (dcp_batch_t){.num_seqs = 4, .lengths = b->lengths, .masks = b->masks};
    b->shape = (dcp_attn_shape_t){4, 2, 8, DCP_DTYPE_FP32, 0.0f};
    dcp_plan_options_default(&b->opts);
    b->opts.strategy = strategy;
    b->opts.block_size = 128;
    b->opts.metis_tries = 1;
}

/* The failure's message, kept while the next call is tried. */
static dcp_status_t next_call_says_so(dcp_context_t *ctx, const dcp_plan_t *plan,
                                      const dcp_tensors_t *io, dcp_status_t st)
{
    char msg[512];
    dcp_error_save(msg, sizeof msg);
    const double t0 = dcp_now();
    const dcp_status_t next = dcp_forward(ctx, plan, io, NULL);
    const double secs = dcp_now() - t0;
    if (next != DCP_ERR_PEER || secs > 1.0)
        return dcp_set_error(DCP_ERR_INTERNAL,
                             "after %s (%s) the context's next call returned %s in %.2f s",
                             dcp_status_string(st), msg, dcp_status_string(next), secs);
    return dcp_set_error(st, "%s", msg);
}

void t_rank_io_init(t_rank_io_t *io, const dcp_plan_t *plan, int32_t rank)
{
    memset(io, 0, sizeof *io);
    (void)dcp_plan_local_layout(plan, rank, NULL, 0, NULL, &io->tokens);
    /* the plan's shape is the walks' (4/2 x 8, fp32) */
    const int64_t qn = io->tokens * 4 * 8, kn = io->tokens * 2 * 8;
    io->mem = calloc((size_t)(4 * qn + 6 * kn + io->tokens * 4) + 1, sizeof *io->mem);
    float *q = io->mem, *o = q + qn, *dout = o + qn, *dq = dout + qn, *k = dq + qn, *v = k + kn,
          *dk = v + kn, *dv = dk + kn, *lse = dv + kn;
    dcpt_rng_t rng = {(uint64_t)rank * 7919 + 3};
    for (int64_t i = 0; i < qn; i++) q[i] = (float)dcpt_rng_uniform(&rng) - 0.5f;
    for (int64_t i = 0; i < qn; i++) dout[i] = (float)dcpt_rng_uniform(&rng) - 0.5f;
    for (int64_t i = 0; i < 2 * kn; i++) k[i] = (float)dcpt_rng_uniform(&rng) - 0.5f;
    io->fwd = (dcp_tensors_t){q, k, v, o, lse, 0.0f};
    io->bwd = (dcp_grad_tensors_t){io->fwd, dout, dq, dk, dv};
}

uint64_t t_rank_io_digest(const t_rank_io_t *io, uint64_t h)
{
    const int64_t qn = io->tokens * 4 * 8, kn = io->tokens * 2 * 8;
    h = t_digest(h, io->fwd.o, (size_t)qn * sizeof(float));
    h = t_digest(h, io->fwd.lse, (size_t)io->tokens * 4 * sizeof(float));
    h = t_digest(h, io->bwd.dq, (size_t)qn * sizeof(float));
    return t_digest(h, io->bwd.dk, (size_t)(2 * kn) * sizeof(float)); /* dk and dv */
}

void t_rank_io_free(t_rank_io_t *io)
{
    free(io->mem);
    io->mem = NULL;
}

dcp_status_t t_rank_pass(dcp_context_t *ctx, const dcp_plan_t *plan, int32_t rank,
                         uint64_t *digest_out)
{
    t_rank_io_t io;
    t_rank_io_init(&io, plan, rank);
    if (!io.mem) return dcp_set_error(DCP_ERR_NO_MEMORY, "test tensors");
    dcp_status_t st = dcp_forward(ctx, plan, &io.fwd, NULL);
    if (st == DCP_OK) st = dcp_backward(ctx, plan, &io.bwd, NULL);
    if (st != DCP_OK)
        st = next_call_says_so(ctx, plan, &io.fwd, st);
    else
        *digest_out = t_rank_io_digest(&io, 0);
    t_rank_io_free(&io);
    return st;
}

const char *t_judge_ranks(const t_rank_result_t *r, int32_t n, int32_t own_lo, int32_t own_hi,
                          int transport, double timeout_s, double fired_at, char *why, size_t cap)
{
    why[0] = '\0';
    int named = 0, failed = 0;
    for (int32_t k = 0; k < n; k++) {
        const t_rank_result_t *x = &r[k];
        const int own = k >= own_lo && k < own_hi;
        if (!x->ended) return snprintf(why, cap, "rank %d never ended", k), why;
        if (fired_at > 0 && x->ended_at - fired_at > timeout_s + T_END_MARGIN_S)
            return snprintf(why, cap,
                            "rank %d ended %.1f s after the failure (timeout %.0f s + %.0f s): "
                            "%s",
                            k, x->ended_at - fired_at, timeout_s, T_END_MARGIN_S, x->msg),
                   why;
        if (x->st == DCP_OK) continue;
        failed = 1;
        if (!x->msg[0])
            return snprintf(why, cap, "rank %d: %s with no message", k, dcp_status_string(x->st)),
                   why;
        /* a rank stopped by another's failure names that rank; a transport failure names the
         * rank and the call on every rank */
        if (!(own && !transport) && !strstr(x->msg, "rank ") && !strstr(x->msg, "process "))
            return snprintf(why, cap, "rank %d: %s names no rank: %s", k, dcp_status_string(x->st),
                            x->msg),
                   why;
        const int call = strstr(x->msg, "send to rank") || strstr(x->msg, "receive from rank") ||
                         strstr(x->msg, "block copy");
        if (transport && !call)
            return snprintf(why, cap, "rank %d: %s names no call: %s", k, dcp_status_string(x->st),
                            x->msg),
                   why;
        named |= transport || (own && x->st == DCP_ERR_NO_MEMORY);
        /* the failure's own status, on the victim, or carried to the others by a vote of
         * the set-up ("ucx worker set-up failed on rank 3 (DCP_ERR_NO_MEMORY)") */
        const int allowed = x->st == DCP_ERR_PEER || x->st == DCP_ERR_TIMEOUT ||
                            (transport ? x->st == DCP_ERR_SYSTEM : x->st == DCP_ERR_NO_MEMORY);
        if (!allowed)
            return snprintf(why, cap, "rank %d: %s: %s", k, dcp_status_string(x->st), x->msg), why;
    }
    if (failed && !named)
        return snprintf(why, cap, "no rank names the failed allocation (DCP_ERR_NO_MEMORY)"), why;
    return why;
}

/* A job's run judged: "" when every rule holds, else why not (into why). */
static const char *judge_job(const t_proc_job_t *job, const t_job_result_t *r, int transport,
                             char *why, size_t cap)
{
    why[0] = '\0';
    if (r->hung) return snprintf(why, cap, "processes hung and were killed"), why;
    for (int32_t p = 0; p < job->procs; p++) {
        const int s = r->proc[p].exit_status;
        if (!WIFEXITED(s) || WEXITSTATUS(s) != 0)
            return snprintf(why, cap, "process %d ended with wait status %#x", p, s), why;
        if (r->proc[p].leaked)
            return snprintf(why, cap, "process %d left %lld blocks", p,
                            (long long)r->proc[p].leaked),
                   why;
    }
    const int32_t lo = job->victim >= 0 ? job->victim * job->threads : 0;
    return t_judge_ranks(r->rank, job->procs * job->threads, lo,
                         job->victim >= 0 ? lo + job->threads : 0, transport, job->timeout_s,
                         job->victim >= 0 ? r->proc[job->victim].fired_at : 0, why, cap);
}

void t_job_walk(const char *name, int32_t procs, int32_t threads, int transport, int64_t sample)
{
    t_proc_job_t job = {procs, threads, -1, 0, 0, 3.0};
    t_job_result_t *r = calloc(1, sizeof *r);
    CU_ASSERT_EQUAL_FATAL(t_procs_run(&job, r), 0);
    char why[512];
    judge_job(&job, r, transport, why, sizeof why);
    uint64_t clean[T_MAX_RANKS] = {0};
    int64_t total[T_MAX_PROCS] = {0}, sum = 0;
    for (int32_t k = 0; k < procs * threads; k++) {
        clean[k] = r->rank[k].digest;
        if (r->rank[k].st != DCP_OK && !why[0])
            snprintf(why, sizeof why, "rank %d: %s", k, r->rank[k].msg);
    }
    for (int32_t p = 0; p < procs; p++) {
        total[p] = transport ? r->proc[p].faults : r->proc[p].allocs;
        sum += total[p];
    }
    if (why[0]) fprintf(stderr, "walk %s: the clean run: %s\n", name, why);
    CU_ASSERT_FATAL(why[0] == '\0');
    const double clean_secs = r->secs;
    dcpt_rng_t rng = {t_walk_seed() ^ t_digest(0, name, strlen(name))};
    int64_t runs = 0, named = 0, absorbed = 0, skipped = 0;
    double slowest = 0, latest = 0; /* a job's wall time; the latest end after the failure */
    for (int64_t i = 0; i < sample; i++) {
        job.victim = (int32_t)dcpt_rng_range(&rng, 0, procs - 1);
        const int64_t n = i == 0 ? 1 : dcpt_rng_range(&rng, 1, total[job.victim]);
        job.alloc_at = transport ? 0 : n;
        job.fault_at = transport ? n : 0;
        CU_ASSERT_EQUAL_FATAL(t_procs_run(&job, r), 0);
        slowest = r->secs > slowest ? r->secs : slowest;
        if (!r->proc[job.victim].fired && !r->hung) {
            skipped++;
            continue;
        }
        runs++;
        for (int32_t k = 0; k < procs * threads; k++) {
            const double after = r->rank[k].ended_at - r->proc[job.victim].fired_at;
            if (r->rank[k].st != DCP_OK && r->proc[job.victim].fired_at > 0 && after > latest)
                latest = after;
        }
        judge_job(&job, r, transport, why, sizeof why);
        int all_ok = 1, same = 1;
        for (int32_t k = 0; k < procs * threads; k++) {
            all_ok &= r->rank[k].st == DCP_OK;
            same &= r->rank[k].digest == clean[k];
        }
        if (!why[0] && all_ok && !same)
            snprintf(why, sizeof why,
                     "every rank completed, with a result other than the clean "
                     "run's");
        named += !why[0] && !all_ok;
        absorbed += !why[0] && all_ok;
        if (why[0] || dcp_env_int_value(DCP_ENV_WALK_VERBOSE)) {
            fprintf(stderr, "walk %s: process %d's %s %lld of %lld: %s\n", name, job.victim,
                    transport ? "transport call" : "allocation", (long long)n,
                    (long long)total[job.victim], why);
            for (int32_t k = 0; k < procs * threads; k++)
                fprintf(stderr, "  rank %d: %s after %.2f s: %s\n", k,
                        dcp_status_string(r->rank[k].st), r->rank[k].secs, r->rank[k].msg);
        }
        CU_ASSERT(why[0] == '\0');
    }
    printf("  walk %-22s %6lld %s in %d processes (clean run %.1f s); %5lld runs failed: %5lld "
           "named, %4lld absorbed, %lld drew no call; slowest run %.1f s, failed ranks ended "
           "within %.1f s of the failure (timeout %.0f s)\n",
           name, (long long)sum, transport ? "transport calls" : "allocations", procs, clean_secs,
           (long long)runs, (long long)named, (long long)absorbed, (long long)skipped, slowest,
           latest, job.timeout_s);
    fflush(stdout);
    free(r);
}

typedef struct {
    dcp_context_t *ctx;
    const dcp_plan_t *plan;
    int32_t rank;
    double start;
    t_rank_result_t *out;
} group_rank_t;

static void *group_rank_main(void *arg)
{
    group_rank_t *g = arg;
    t_rank_result_t *o = g->out;
    o->st = t_rank_pass(g->ctx, g->plan, g->rank, &o->digest);
    o->ended_at = dcp_now();
    o->secs = o->ended_at - g->start;
    if (o->st != DCP_OK) dcp_error_save(o->msg, sizeof o->msg);
    o->ended = 1;
    return NULL;
}

dcp_status_t t_group_pass(const t_walk_batch_t *b, const char *cluster, int32_t ranks,
                          double timeout_s, t_rank_result_t *out)
{
    dcp_cluster_t *c = NULL;
    dcp_plan_t *plan = NULL;
    dcp_group_t *g = NULL;
    dcp_context_t *ctx[T_MAX_RANKS] = {NULL};
    dcp_status_t st = dcp_cluster_from_spec(cluster, &c);
    if (st == DCP_OK) st = dcp_plan_create(&b->batch, &b->shape, &b->opts, c, &plan);
    if (st == DCP_OK) st = dcp_group_create(ranks, &g);
    for (int32_t r = 0; st == DCP_OK && r < ranks; r++) {
        const dcp_context_config_t cfg = {.rank = r, .group = g, .timeout_s = timeout_s};
        st = dcp_context_create(&cfg, &ctx[r]);
    }
    if (st == DCP_OK) {
        group_rank_t a[T_MAX_RANKS];
        pthread_t tid[T_MAX_RANKS];
        const double t0 = dcp_now();
        for (int32_t r = 0; r < ranks; r++) {
            memset(&out[r], 0, sizeof out[r]);
            a[r] = (group_rank_t){ctx[r], plan, r, t0, &out[r]};
            pthread_create(&tid[r], NULL, group_rank_main, &a[r]);
        }
        for (int32_t r = 0; r < ranks; r++) pthread_join(tid[r], NULL);
    }
    char msg[512];
    dcp_error_save(msg, sizeof msg);
    for (int32_t r = 0; r < ranks; r++) dcp_context_destroy(ctx[r]);
    dcp_group_destroy(g);
    dcp_plan_destroy(plan);
    dcp_cluster_destroy(c);
    return st == DCP_OK ? DCP_OK : dcp_set_error(st, "%s", msg);
}
